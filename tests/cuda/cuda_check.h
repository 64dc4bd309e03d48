// CHECK(call) for the standalone CUDA test programs (kernel_check.cu, gumbel_check.cu, the
// sampler's launcher check in tests/test_gpu_categorical.py): print the CUDA error and the
// place, exit with status 2. ToDevice / ToHost: a vector's copy in plain cudaMalloc memory (at
// least one element, so a pointer is never null) and back. MedianMicros: a launch's median time.
#ifndef JAX_ARGREDUCE_TESTS_CUDA_CUDA_CHECK_H_
#define JAX_ARGREDUCE_TESTS_CUDA_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

template <class T>
T* ToDevice(const std::vector<T>& h) {
  T* d = nullptr;
  CHECK(cudaMalloc(&d, std::max<size_t>(1, h.size()) * sizeof(T)));
  if (!h.empty()) CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <class T>
std::vector<T> ToHost(const T* d, size_t n) {
  std::vector<T> h(n);
  if (n) CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// The median time in µs (CUDA events on the default stream) of `timed` calls of `launch`
// after `warmup` untimed ones; each call is timed alone (synchronized).
template <class Launch>
double MedianMicros(Launch&& launch, int warmup = 5, int timed = 30) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < warmup + timed; ++i) {
    CHECK(cudaEventRecord(start));
    CHECK(launch());
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, start, stop));
    if (i >= warmup) ms.push_back(t);
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[ms.size() / 2];
}

#endif  // JAX_ARGREDUCE_TESTS_CUDA_CUDA_CHECK_H_
