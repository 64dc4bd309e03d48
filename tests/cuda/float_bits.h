// Exact decoding of the float formats' bits for the standalone CUDA checks (kernel_check.cu,
// select_check.cu): their references compare decoded values, never the kernels' integer keys.
#ifndef JAX_ARGREDUCE_TESTS_CUDA_FLOAT_BITS_H_
#define JAX_ARGREDUCE_TESTS_CUDA_FLOAT_BITS_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "order.h"

namespace jax_argreduce {

// Decode the format's bits exactly (NaN stays NaN; subnormals are exact in double).
double Decode(Format f, uint64_t bits) {
  switch (f) {
    case Format::kF16: {
      __half_raw raw;
      raw.x = static_cast<uint16_t>(bits);
      return __half2float(__half(raw));
    }
    case Format::kBF16: {  // bfloat16 is the top half of a float32
      const uint32_t b = static_cast<uint32_t>(bits) << 16;
      float x;
      std::memcpy(&x, &b, 4);
      return x;
    }
    case Format::kF32: {
      const uint32_t b = static_cast<uint32_t>(bits);
      float x;
      std::memcpy(&x, &b, 4);
      return x;
    }
    case Format::kF64: {
      double x;
      std::memcpy(&x, &bits, 8);
      return x;
    }
  }
  return 0;
}

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_TESTS_CUDA_FLOAT_BITS_H_
