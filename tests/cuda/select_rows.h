// Rows of test data for the standalone select checks (select_check.cu, sample_topk_check.cu):
// the formats' bits of a float, and rows of the kinds that stress an order (ties, NaNs of both
// signs and random payloads, ±0, ±inf, subnormals, all -inf, all equal, random bits).
#ifndef JAX_ARGREDUCE_TESTS_CUDA_SELECT_ROWS_H_
#define JAX_ARGREDUCE_TESTS_CUDA_SELECT_ROWS_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "order.h"

namespace jax_argreduce {

inline uint32_t Encode(Format f, float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  if (f == Format::kF32) return b;
  if (f == Format::kBF16) return b >> 16;  // truncation: any bits are a valid value here
  __half h = __float2half(v);
  return reinterpret_cast<__half_raw&>(h).x;
}

struct Spec {
  Format f;
  uint32_t inf, sign, qnan, mant;
};
inline Spec SpecOf(Format f) {
  switch (f) {
    case Format::kF16: return {f, 0x7C00u, 0x8000u, 0x7E00u, 0x3FFu};
    case Format::kBF16: return {f, 0x7F80u, 0x8000u, 0x7FC0u, 0x7Fu};
    default: return {f, 0x7F800000u, 0x80000000u, 0x7FC00000u, 0x7FFFFFu};
  }
}

// One row of `cols` elements (bits) of kind `kind`.
inline void FillRow(const Spec& s, int kind, std::mt19937_64& rng, uint32_t* row, int64_t cols) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int64_t> col(0, cols - 1);
  auto nan = [&] {
    const uint32_t payload = static_cast<uint32_t>(rng()) & s.mant;
    return (rng() % 3 == 0 ? s.qnan : (s.inf | (payload ? payload : 1u))) |
           (rng() % 2 ? s.sign : 0u);
  };
  for (int64_t c = 0; c < cols; ++c) row[c] = Encode(s.f, normal(rng));
  switch (kind) {
    case 0: break;  // normal
    case 1:  // few distinct values: ties everywhere
      for (int64_t c = 0; c < cols; ++c) row[c] = Encode(s.f, static_cast<float>(rng() % 5));
      break;
    case 2:  // NaNs here and there
      for (int i = 0; i < 40; ++i) row[col(rng)] = nan();
      break;
    case 3:  // ±0 as the maxima, over negative values
      for (int64_t c = 0; c < cols; ++c) row[c] = Encode(s.f, -1.0f - std::fabs(normal(rng)));
      for (int i = 0; i < 300; ++i) row[col(rng)] = rng() % 2 ? s.sign : 0u;
      break;
    case 4:  // ±inf and subnormals
      for (int i = 0; i < 60; ++i) row[col(rng)] = s.inf | (rng() % 2 ? s.sign : 0u);
      for (int i = 0; i < 200; ++i) {
        row[col(rng)] = ((static_cast<uint32_t>(rng()) & s.mant) | 1u) | (rng() % 2 ? s.sign : 0u);
      }
      break;
    case 5:  // all -inf
      for (int64_t c = 0; c < cols; ++c) row[c] = s.inf | s.sign;
      break;
    case 6:  // all one value
      for (int64_t c = 0; c < cols; ++c) row[c] = row[0];
      break;
    default:  // random bits (NaNs, subnormals, everything)
      for (int64_t c = 0; c < cols; ++c) row[c] = static_cast<uint32_t>(rng()) &
                                                  (s.f == Format::kF32 ? 0xFFFFFFFFu : 0xFFFFu);
  }
}
constexpr int kKinds = 8;  // FillRow's kinds: 0 .. kKinds - 1

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_TESTS_CUDA_SELECT_ROWS_H_
