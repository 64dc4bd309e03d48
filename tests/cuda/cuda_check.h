// CHECK(call) for the standalone CUDA test programs (kernel_check.cu, gumbel_check.cu, the
// sampler's launcher check in tests/test_gpu_categorical.py): print the CUDA error and the
// place, exit with status 2.
#ifndef JAX_ARGREDUCE_TESTS_CUDA_CUDA_CHECK_H_
#define JAX_ARGREDUCE_TESTS_CUDA_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

#endif  // JAX_ARGREDUCE_TESTS_CUDA_CUDA_CHECK_H_
