// Counter-based Gumbel noise for the fused Gumbel-max sampler (SPEC §1c): one header shared by
// the CPU handler and the CUDA kernels that gives the SAME BITS on both for the same (key, row,
// column), so CPU and GPU draw the same samples.
//
// What. G(key, row, col) = -log(-log(u)), u = (bits + 1/2) * 2^-W, strictly inside (0, 1), with
// W = 32 random bits per float32 noise value and 64 per float64 one, from Philox-4x32-10 (Salmon
// et al. 2011, Random123 constants) keyed by the two 32-bit key words. The counter holds only the
// row, the column block and a stream tag, so the noise never depends on launch geometry, batch
// split, vocab sharding or device:
//   float32 noise (float32, bfloat16 and float16 logits: the noise is always float32): the 32
//     bits of column col are two 16-bit halves from two streams over blocks of 8 columns,
//     bits = high << 16 | low, with g = col / 8 and j = col % 8
//       high = half j of Philox(counter (g, row_lo, row_hi, 2)),
//       low  = half j of Philox(counter (g, row_lo, row_hi, 3)),
//     half j of a block being bits 16 * (j % 2) .. +15 of output word j / 2. G is
//     non-decreasing in the bits, so the high half alone bounds it (GumbelUpperBoundHighF32): a
//     scan generates the high stream for every column (one call per 8 columns) and the low
//     stream only where an element could still win (the GPU's split and team paths, whose
//     threads hold few vectors, generate both up front: NOTES.md try 39);
//   float64 noise (float64 logits)
//     counter = (col / 2, row_lo, row_hi, 1); column 2 * (col / 2) + j takes words 2j (low half)
//     and 2j + 1 (high half).
// Range: float32 G in [kGumbelMinF32, kGumbelMaxF32] = [-3.129995, 22.873859] (bits 0 and
// 0xFFFFFFFF; the max is 33 ln 2 - 2^-34 rounded), G non-decreasing in the bits (both checked over
// all 2^32 patterns); float64 G in [-3.8078743, 45.0545667] (bits 0 and 2^64 - 1).
//
// Why this way. The logs are the package's own (exact_math.h), not the platform's, whose last bit
// differs between glibc and CUDA; every floating step here is one of exact_math.h's correctly
// rounded operations, so the host and the device compute the same noise bits.
//
// Invariants, keep them when editing:
//   * every rounded floating operation goes through exact_math.h's Add/Sub/Mul/Fma;
//   * u is never rounded: it is built from the bits as an exact sum hi + lo, and -log(u) is a
//     log1p-style evaluation of that sum (the reduced argument u * 2^-e - 1 is formed with one
//     rounding), so the upper tail (u -> 1: small E = -log(u), large G) keeps full relative
//     precision: no 1 - u cancellation;
//   * no subnormal, infinity or NaN occurs on the noise path; still, never compile this with
//     fast-math (exact_math.h refuses -ffast-math; nvcc: no --use_fast_math, no -ftz=true).
// GumbelUpperBound*(bits) is a cheap bound (no log) with G(bits) <= bound, so a scan can skip the
// logs of elements that cannot win (logit / T + bound < running max) without changing a sample;
// GumbelUpperBoundHighF32(high) bounds G over every 32-bit pattern with that high half, so the
// scan skips the low stream's generator as well.
#ifndef JAX_ARGREDUCE_FFI_GUMBEL_H_
#define JAX_ARGREDUCE_FFI_GUMBEL_H_

#include <cstdint>

#include "exact_math.h"  // Add/Sub/Mul/Fma, bit casts, the own logs
#include "order.h"       // JAX_ARGREDUCE_HD
#include "philox.h"      // Philox4x32_10

namespace jax_argreduce {

// The sampler's helpers: the exact arithmetic and Philox's constants under one name (code
// written against gumbel_detail:: keeps compiling).
namespace gumbel_detail {
using namespace exact_detail;
using namespace philox_detail;
}  // namespace gumbel_detail

// The sampler's counter layout (see the top of this file). `row` is the int64 row index taken as
// uint64 (two's complement); `group` = col / 8 (float32 noise: the high and the low stream) or
// `pair` = col / 2 (float64 noise); `stream` the tag in the counter's last word.
JAX_ARGREDUCE_HD Philox4x32Block GumbelCounterBlock(uint32_t k0, uint32_t k1, uint64_t row,
                                                    uint32_t block, uint32_t stream) {
  return Philox4x32_10(Philox4x32Block{{block, static_cast<uint32_t>(row),
                                        static_cast<uint32_t>(row >> 32), stream}},
                       k0, k1);
}
JAX_ARGREDUCE_HD Philox4x32Block GumbelBitsHighF32(uint32_t k0, uint32_t k1, uint64_t row,
                                                   uint32_t group) {
  return GumbelCounterBlock(k0, k1, row, group, 2u);
}
JAX_ARGREDUCE_HD Philox4x32Block GumbelBitsLowF32(uint32_t k0, uint32_t k1, uint64_t row,
                                                  uint32_t group) {
  return GumbelCounterBlock(k0, k1, row, group, 3u);
}
// Half j (0..7: column 8 * group + j) of a float32-noise block, in the low 16 bits.
JAX_ARGREDUCE_HD uint32_t GumbelHalf(const Philox4x32Block& b, uint32_t j) {
  // Selects rather than b.v[j / 2]: a dynamic index would put the block in local memory.
  const uint32_t w = j < 4 ? (j < 2 ? b.v[0] : b.v[1]) : (j < 6 ? b.v[2] : b.v[3]);
  return (j & 1u) != 0 ? w >> 16 : w & 0xFFFFu;
}
// Half j % 2 of one 32-bit output word (half 1: the upper 16 bits), in the low 16 bits.
JAX_ARGREDUCE_HD uint32_t GumbelHalfOfWord(uint32_t word, uint32_t j) {
  return (j & 1u) != 0 ? word >> 16 : word & 0xFFFFu;
}
// The 32 noise bits of a float32 noise value from its two halves.
JAX_ARGREDUCE_HD uint32_t GumbelJoinF32(uint32_t high, uint32_t low) { return high << 16 | low; }
JAX_ARGREDUCE_HD Philox4x32Block GumbelBitsPairF64(uint32_t k0, uint32_t k1, uint64_t row,
                                                   uint32_t pair) {
  return GumbelCounterBlock(k0, k1, row, pair, 1u);
}

namespace gumbel_detail {
// c - ln 2 * bits(x) * 2^-23 for a float x in [0, 2^30): ln 2 * (c / ln 2 - 127 - log2 x) up to
// log2(1 + m) - m (x = 2^e (1 + m)), no log; the log-free noise bounds' common step. Correctly
// rounded steps (the bits' conversion to nearest on both sides): the same value on host and
// device.
JAX_ARGREDUCE_HD float Ln2BitsLine(float x, float c) {
  const int32_t x_bits = static_cast<int32_t>(AsBits(x));
#if defined(__CUDA_ARCH__)
  const float x_bits_f = __int2float_rn(x_bits);
#else
  const float x_bits_f = static_cast<float>(x_bits);  // round to nearest, as the device's
#endif
  return Fma(x_bits_f, -0x1.62e43p-24f /* ln 2 * 2^-23, rounded */, c);
}
}  // namespace gumbel_detail

// ---------------------------------------------------------------------------------------------
// Uniform and Gumbel transform.
// ---------------------------------------------------------------------------------------------

// u = (bits + 1/2) * 2^-32 as the exact sum hi + lo: hi = (bits >> 9) * 2^-23 and
// lo = (2 * (bits & 511) + 1) * 2^-33, each built exactly from bits by the "1.mantissa - 1"
// trick (Sterbenz: the subtractions are exact). u itself is never rounded (fl(u) is 1.0f for
// bits >= 0xFFFFFF80; u never is).
struct UniformSplitF32 {
  float hi, lo;
};
JAX_ARGREDUCE_HD UniformSplitF32 GumbelUniformF32(uint32_t bits) {
  using namespace gumbel_detail;
  // 1 + (bits >> 9) * 2^-23  (one LEA.HI on the GPU)
  const float hi = Sub(AsFloat((bits >> 9) | 0x3F800000u), 1.0f);
  // 2^-23 * (1 + (bits & 511) * 2^-9), then minus (2^-23 - 2^-33) = (bits & 511) * 2^-32 + 2^-33
#if defined(__CUDA_ARCH__)
  const uint32_t lo_bits = __funnelshift_l(bits << 23, 0x68u, 23);  // two SHF, same value
#else
  const uint32_t lo_bits = ((bits << 23) >> 9) | 0x34000000u;
#endif
  const float lo = Sub(AsFloat(lo_bits), 0x1.ff8p-24f /* 2^-23 - 2^-33 */);
  return UniformSplitF32{hi, lo};
}

// G = -log(-log(u)) in float32 for 32 random bits. Non-decreasing in `bits`.
JAX_ARGREDUCE_HD float GumbelFromBitsF32(uint32_t bits) {
  const UniformSplitF32 u = GumbelUniformF32(bits);
  const float e = gumbel_detail::LogSumF32<true>(u.hi, u.lo);  // E = -log(u) in [2^-33, 22.88]
  return gumbel_detail::LogF32<true>(e);                         // == -GumbelLogF32(e)
}

// u = (bits + 1/2) * 2^-64 = hi + lo, hi = (bits >> 12) * 2^-52, lo = (2 * (bits & 4095) + 1)
// * 2^-65.
struct UniformSplitF64 {
  double hi, lo;
};
JAX_ARGREDUCE_HD UniformSplitF64 GumbelUniformF64(uint64_t bits) {
  using namespace gumbel_detail;
  const double hi = Sub(AsDouble((bits >> 12) | 0x3FF0000000000000ull), 1.0);
  const double lo =
      Sub(AsDouble(((bits & 0xFFFull) << 40) | 0x3CB0008000000000ull), 0x1p-52);
  return UniformSplitF64{hi, lo};
}

JAX_ARGREDUCE_HD double GumbelFromBitsF64(uint64_t bits) {
  const UniformSplitF64 u = GumbelUniformF64(bits);
  const double e = gumbel_detail::LogSumF64<true>(u.hi, u.lo);  // E = -log(u) in [2^-65, 45.06]
  return gumbel_detail::LogF64<true>(e);
}

// Extremes of the noise (bits 0 and all ones), checked by the tests.
constexpr float kGumbelMinF32 = -0x1.90a3aap+1f;         // -3.129995  = G(bits 0)
constexpr float kGumbelMaxF32 = 0x1.6dfb52p+4f;          // 22.873859  = G(bits 0xFFFFFFFF)
constexpr double kGumbelMinF64 = -0x1.e7686d3aca577p+1;  // -3.8078743493139728
constexpr double kGumbelMaxF64 = 0x1.686fc0af622d7p+5;   // 45.054566736396445

// Cheap bound, no log: G(bits) <= GumbelUpperBound*(bits), valid for every bit pattern.
// G(high << 16 | low) <= GumbelUpperBoundHighF32(high) for every low (G is non-decreasing in the
// bits, so the bound of a high half is one of its largest pattern): with d = (0xFFFF - high) *
// 2^-16 (exact; below 1 - u for every u of that half), -log(u) >= x = d + d^2 / 2 (the series of
// -log(1 - d) has positive terms), and -log2(x) <= -(e + m) for x = 2^e (1 + m) (log2(1 + m) >= m
// on [0, 1]), where e + m = bits(x) * 2^-23 - 127: G = -log(-log(u)) <= ln 2 * (127 - bits(x) *
// 2^-23), plus a margin for the roundings (of x, the conversion, G's own). Above G of the half's
// largest pattern by 0.07 on average for u >= 1/2 (at most 0.154, at u = 1/2) and by 0.04 where
// u >= 7/8 (the tail, where skipping happens); high = 0xFFFF (x = 0) gives 127 ln 2 + 2^-12
// (88.03). Non-decreasing in high. Checked over every high half (tests/cpp/gumbel_test.cc). The
// former bound, (clz(~bits) + 1) ln 2, was 0.53 and 0.42 above there (NOTES.md try 52). Every
// step is a correctly rounded operation: the same value on host and device.
JAX_ARGREDUCE_HD float GumbelUpperBoundHighF32(uint32_t high) {
  using namespace gumbel_detail;
  const float d = Sub(AsFloat(0x3F800000u | ((~high & 0xFFFFu) << 7)), 1.0f);
  const float x = Mul(d, Fma(d, 0.5f, 1.0f));  // in [0, 1.5]
  return Ln2BitsLine(x, 0x1.601ea8p+6f /* 127 ln 2 + 2^-12 */);
}
// G(high << 16 | low) >= GumbelLowerBoundHighF32(high) for every low (the bound of the half's
// smallest pattern): for high >= 0x8000 (u >= 1/2), d = (0x10000 - high) 2^-16 >= 1 - u
// (exact), -log(u) <= x = d + d^2 (-log(1 - d) <= d + d^2 / (2 (1 - d)) <= d + d^2 for d <= 1/2)
// and log2(x) <= e + m + 0.0861 (log2(1 + m) - m <= 0.08607 on [0, 1]): G >= ln 2 (127 -
// 0.0861 - bits(x) 2^-23) minus a margin for the roundings; below, kGumbelMinF32. Checked over
// every high half (tests/cpp/gumbel_test.cc): 0.088 below G on average for u >= 1/2, at most
// 0.153. Where the scans use it: categorical.h (VisitPrepared).
JAX_ARGREDUCE_HD float GumbelLowerBoundHighF32(uint32_t high) {
  using namespace gumbel_detail;
  const float d = Sub(AsFloat(0x3F800000u | (((0x10000u - high) & 0xFFFFu) << 7)), 1.0f);
  const float x = Fma(d, d, d);  // in [0, 2] (used for high >= 0x8000: [0, 0.75])
  const float bound = Ln2BitsLine(x, 0x1.5fe10ap+6f /* ln 2 (127 - 0.0861) - 2^-12 */);
  return high >= 0x8000u ? bound : kGumbelMinF32;
}
// The bound of a full pattern: its high half's (G non-decreasing in the bits).
JAX_ARGREDUCE_HD float GumbelUpperBoundF32(uint32_t bits) {
  return GumbelUpperBoundHighF32(bits >> 16);
}
JAX_ARGREDUCE_HD double GumbelUpperBoundF64(uint64_t bits) {
  using namespace gumbel_detail;
  const uint64_t n = static_cast<uint64_t>(Clz64(~bits)) + 1u;      // 1 .. 65
  const double nf = Sub(AsDouble(0x4338000000000000ull + n), 6755399441055744.0);
  return Fma(nf, 0x1.62e42fefa39fp-1 /* ln 2 rounded up */, 0x1p-30);
}

// ---------------------------------------------------------------------------------------------
// The sampler's API: noise of (key, row, global column).
// ---------------------------------------------------------------------------------------------
struct GumbelF32x8 {
  float v[8];  // columns 8*group + 0..7
};
struct GumbelF64x2 {
  double v[2];  // columns 2*pair + 0..1
};

// Noise of columns 8*group .. 8*group+7 from one call of each stream.
JAX_ARGREDUCE_HD GumbelF32x8 GumbelNoiseGroupF32(uint32_t k0, uint32_t k1, uint64_t row,
                                                 uint32_t group) {
  const Philox4x32Block high = GumbelBitsHighF32(k0, k1, row, group);
  const Philox4x32Block low = GumbelBitsLowF32(k0, k1, row, group);
  GumbelF32x8 g;
  for (uint32_t j = 0; j < 8; ++j) {
    g.v[j] = GumbelFromBitsF32(GumbelJoinF32(GumbelHalf(high, j), GumbelHalf(low, j)));
  }
  return g;
}

// The 32 noise bits of one column (col < 2^31).
JAX_ARGREDUCE_HD uint32_t GumbelBitsF32(uint32_t k0, uint32_t k1, uint64_t row, uint32_t col) {
  return GumbelJoinF32(GumbelHalf(GumbelBitsHighF32(k0, k1, row, col >> 3), col & 7u),
                       GumbelHalf(GumbelBitsLowF32(k0, k1, row, col >> 3), col & 7u));
}

// Noise of one column. Equals GumbelNoiseGroupF32(k0, k1, row, col / 8).v[col % 8].
JAX_ARGREDUCE_HD float GumbelNoiseF32(uint32_t k0, uint32_t k1, uint64_t row, uint32_t col) {
  return GumbelFromBitsF32(GumbelBitsF32(k0, k1, row, col));
}

JAX_ARGREDUCE_HD uint64_t GumbelBitsF64(const Philox4x32Block& b, uint32_t j) {
  return j == 0 ? (static_cast<uint64_t>(b.v[1]) << 32 | b.v[0])
                : (static_cast<uint64_t>(b.v[3]) << 32 | b.v[2]);
}

// Noise of columns 2*pair, 2*pair+1 (float64 logits) from one Philox call.
JAX_ARGREDUCE_HD GumbelF64x2 GumbelNoiseGroupF64(uint32_t k0, uint32_t k1, uint64_t row,
                                                 uint32_t pair) {
  const Philox4x32Block b = GumbelBitsPairF64(k0, k1, row, pair);
  return GumbelF64x2{{GumbelFromBitsF64(GumbelBitsF64(b, 0)),
                      GumbelFromBitsF64(GumbelBitsF64(b, 1))}};
}

JAX_ARGREDUCE_HD double GumbelNoiseF64(uint32_t k0, uint32_t k1, uint64_t row, uint32_t col) {
  const Philox4x32Block b = GumbelBitsPairF64(k0, k1, row, col >> 1);
  return GumbelFromBitsF64(GumbelBitsF64(b, col & 1u));
}

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_GUMBEL_H_
