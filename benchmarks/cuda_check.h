// CHECK(call): print the CUDA error with file and line and exit(1), for the standalone
// benchmark programs (kernel_profile.cu, launch_probe.cu).
#ifndef JAX_ARGREDUCE_BENCHMARKS_CUDA_CHECK_H_
#define JAX_ARGREDUCE_BENCHMARKS_CUDA_CHECK_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

#endif  // JAX_ARGREDUCE_BENCHMARKS_CUDA_CHECK_H_
