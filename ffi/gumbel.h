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
// Why this way. The platform log/logf/log1p differ in their last bit between glibc and CUDA, so
// the logs here are our own: exponent extraction by integer operations on the bits, a degree-7
// (float64: 19) minimax polynomial evaluated with fma, and nothing but correctly rounded IEEE
// operations (+, -, *, fma: no division, no table, no transcendental). The host (g++ or clang,
// any -O, -march, -ffp-contract) and the device (nvcc, IEEE mode) execute the same sequence of
// correctly rounded operations. log is within 1.2 ulp (float32) / 1.3 ulp (float64), and -log(u)
// within 1.8 ulp of the exact value over all 2^32 float32 patterns.
//
// Invariants, keep them when editing:
//   * every rounded floating operation goes through Add/Sub/Mul/Fma below (device: __f*_rn /
//     __d*_rn intrinsics, which nvcc never contracts; host: a product is opaque to the compiler,
//     so it is never contracted either); negations are exact and folded into fma operands (RN is
//     symmetric);
//   * u is never rounded: it is built from the bits as an exact sum hi + lo, and -log(u) is a
//     log1p-style evaluation of that sum (the reduced argument u * 2^-e - 1 is formed with one
//     rounding), so the upper tail (u -> 1: small E = -log(u), large G) keeps full relative
//     precision: no 1 - u cancellation;
//   * no subnormal, infinity or NaN occurs on the noise path; still, never compile this with
//     fast-math (-ffast-math is refused below; nvcc: no --use_fast_math, no -ftz=true).
// GumbelUpperBound*(bits) is a cheap bound (no log) with G(bits) <= bound, so a scan can skip the
// logs of elements that cannot win (logit / T + bound < running max) without changing a sample;
// GumbelUpperBoundHighF32(high) bounds G over every 32-bit pattern with that high half, so the
// scan skips the low stream's generator as well.
#ifndef JAX_ARGREDUCE_FFI_GUMBEL_H_
#define JAX_ARGREDUCE_FFI_GUMBEL_H_

#include <cmath>    // std::fma (host)
#include <cstdint>
#include <cstring>  // std::memcpy (host bit casts)

#include "order.h"  // JAX_ARGREDUCE_HD

#if defined(__FAST_MATH__)
#error "ffi/gumbel.h: fast-math would break the bit-identity of the noise between CPU and GPU"
#endif

namespace jax_argreduce {

// ---------------------------------------------------------------------------------------------
// Philox-4x32-10 (Random123 philox4x32_R(10, ...)): 10 rounds, round r uses key + r * (W0, W1).
// ---------------------------------------------------------------------------------------------
struct Philox4x32Block {
  uint32_t v[4];
};

namespace gumbel_detail {
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
}  // namespace gumbel_detail

JAX_ARGREDUCE_HD Philox4x32Block Philox4x32_10(Philox4x32Block counter, uint32_t k0,
                                               uint32_t k1) {
  using namespace gumbel_detail;
  uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0;  // one IMAD.WIDE.U32 each
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return Philox4x32Block{{c0, c1, c2, c3}};
}

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

// ---------------------------------------------------------------------------------------------
// Correctly rounded operations that no compiler may fuse or reorder differently per platform.
// One definition each (same declarations in nvcc's host and device passes), the body picks:
// device: the __f*_rn / __d*_rn intrinsics, never contracted into an fma by nvcc; host: plain
// IEEE binary32/binary64 operations (x86-64 SSE, AArch64: FLT_EVAL_METHOD == 0) and std::fma,
// which is exact whether it is an instruction (-mfma) or glibc's emulation. A host Mul's result
// goes through an empty asm, so g++/clang cannot contract it into an fma with a later Add even
// under -mfma -ffp-contract=fast (e.g. Add(Mul(logit, inv_t), g) stays two roundings, as on the
// device). Use these helpers for every float operation that must match across CPU and GPU.
// ---------------------------------------------------------------------------------------------
#if !defined(__CUDA_ARCH__) && (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define JAX_ARGREDUCE_GUMBEL_OPAQUE(v) __asm__("" : "+x"(v))
#elif !defined(__CUDA_ARCH__) && (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
#define JAX_ARGREDUCE_GUMBEL_OPAQUE(v) __asm__("" : "+w"(v))
#else
#define JAX_ARGREDUCE_GUMBEL_OPAQUE(v) static_cast<void>(v)  // build with -ffp-contract=off
#endif

namespace gumbel_detail {

JAX_ARGREDUCE_HD float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
JAX_ARGREDUCE_HD float Sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
JAX_ARGREDUCE_HD float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  float p = a * b;
  JAX_ARGREDUCE_GUMBEL_OPAQUE(p);
  return p;
#endif
}
JAX_ARGREDUCE_HD float Fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
JAX_ARGREDUCE_HD double Add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
JAX_ARGREDUCE_HD double Sub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
JAX_ARGREDUCE_HD double Mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  double p = a * b;
  JAX_ARGREDUCE_GUMBEL_OPAQUE(p);
  return p;
#endif
}
JAX_ARGREDUCE_HD double Fma(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

JAX_ARGREDUCE_HD uint32_t AsBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}
JAX_ARGREDUCE_HD float AsFloat(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}
JAX_ARGREDUCE_HD uint64_t AsBits(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}
JAX_ARGREDUCE_HD double AsDouble(uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

// Count of leading zeros, 64 for 0.
JAX_ARGREDUCE_HD int Clz64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __clzll(static_cast<long long>(x));
#elif defined(__GNUC__) || defined(__clang__)
  return x == 0 ? 64 : __builtin_clzll(x);
#else
  int n = 0;
  for (uint64_t m = 1ull << 63; m != 0 && (x & m) == 0; m >>= 1) ++n;
  return n;
#endif
}

// log1p(x) = x + x^2 * Q(x) on x in [sqrt(1/2) - 1, sqrt(2) - 1]: Q is the weighted minimax
// polynomial (Remez, error measured relative to log1p) with its coefficients rounded to nearest.
// float32: degree 7, approximation error 2^-25.0 relative; float64: degree 19, 2^-56.8.
// (Literals, not constexpr arrays: namespace-scope arrays are not usable in device code.)
// float32: ln 2 rounded (its error, 1.9e-9, times |e| stays below 0.13 ulp of the result);
// float64: ln 2 = kLn2Hi + kLn2Lo, two fma.
constexpr float kLn2F32 = 0x1.62e430p-1f;
constexpr double kLn2HiF64 = 0x1.62e42fefa39efp-1;
constexpr double kLn2LoF64 = 0x1.abc9e3b39803fp-56;

// x + x^2 * Q(x) ~ log1p(x) for x in [sqrt(1/2)-1, sqrt(2)-1] (7 fma + 1 mul + 1 fma).
template <bool kNeg>
JAX_ARGREDUCE_HD float Log1pPolyF32(float x) {
  float q = 0x1.65b10cp-4f;
  q = Fma(q, x, -0x1.24f3f0p-3f);
  q = Fma(q, x, 0x1.3181b0p-3f);
  q = Fma(q, x, -0x1.535f14p-3f);
  q = Fma(q, x, 0x1.98d338p-3f);
  q = Fma(q, x, -0x1.000492p-2f);
  q = Fma(q, x, 0x1.5556f2p-2f);
  q = Fma(q, x, -0x1.fffffap-2f);
  const float x2 = Mul(x, x);  // only ever an fma multiplicand
  // kNeg: -(x + x^2 q), bit for bit (round-to-nearest is symmetric), at no extra instruction.
  return kNeg ? Fma(-x2, q, -x) : Fma(x2, q, x);
}
template <bool kNeg>
JAX_ARGREDUCE_HD double Log1pPolyF64(double x) {
  double q = 0x1.ac91bfa6eeaa5p-6;
  q = Fma(q, x, -0x1.ebb7ae0c1c043p-5);
  q = Fma(q, x, 0x1.0b5c73519ec87p-4);
  q = Fma(q, x, -0x1.d1319b053b428p-5);
  q = Fma(q, x, 0x1.cfa66677df9abp-5);
  q = Fma(q, x, -0x1.fb730a5d6046bp-5);
  q = Fma(q, x, 0x1.11d9eab98047bp-4);
  q = Fma(q, x, -0x1.24dc43598db69p-4);
  q = Fma(q, x, 0x1.3b0a9ab3980d8p-4);
  q = Fma(q, x, -0x1.55507048eb777p-4);
  q = Fma(q, x, 0x1.745d47c3159d0p-4);
  q = Fma(q, x, -0x1.9999c96e068b1p-4);
  q = Fma(q, x, 0x1.c71c71c26cd74p-4);
  q = Fma(q, x, -0x1.fffffef27087cp-4);
  q = Fma(q, x, 0x1.2492492277332p-3);
  q = Fma(q, x, -0x1.55555556edd0cp-3);
  q = Fma(q, x, 0x1.99999999a1159p-3);
  q = Fma(q, x, -0x1.fffffffffdd18p-3);
  q = Fma(q, x, 0x1.555555555551ep-2);
  q = Fma(q, x, -0x1.0000000000003p-1);
  const double x2 = Mul(x, x);
  return kNeg ? Fma(-x2, q, -x) : Fma(x2, q, x);
}

// Argument reduction by integer operations on the bits of a positive normal s:
// s = 2^e * m with m in [sqrt(1/2), sqrt(2)), e = (bits(s) - bits(sqrt(1/2))) >> 23 (arithmetic).
constexpr uint32_t kSqrtHalfBitsF32 = 0x3F3504F3u;  // fl(sqrt(1/2))
constexpr uint64_t kSqrtHalfBitsF64 = 0x3FE6A09E667F3BCDull;
struct ReductionF32 {
  uint32_t e_field;  // e << 23 (two's complement): bits(m) = bits(s) - e_field
  float ef;          // e, exactly
};
JAX_ARGREDUCE_HD ReductionF32 ReduceF32(float s) {
  const uint32_t ix = AsBits(s) - kSqrtHalfBitsF32;
  // e as a float without a conversion instruction: the float 1.5 * 2^23 + e is exact.
  const float ef = Sub(AsFloat(0x4B400000u + static_cast<uint32_t>(static_cast<int32_t>(ix) >> 23)),
                       12582912.0f);
  return ReductionF32{ix & 0xFF800000u, ef};
}
struct ReductionF64 {
  uint64_t e_field;
  double ef;
};
JAX_ARGREDUCE_HD ReductionF64 ReduceF64(double s) {
  const uint64_t ix = AsBits(s) - kSqrtHalfBitsF64;
  const double ef = Sub(AsDouble(0x4338000000000000ull +
                                 static_cast<uint64_t>(static_cast<int64_t>(ix) >> 52)),
                        6755399441055744.0);  // 1.5 * 2^52
  return ReductionF64{ix & 0xFFF0000000000000ull, ef};
}


// The logs, as log (kNeg = false) or -log (kNeg = true: every operand of the last two fma
// negated, so -log costs nothing and equals the negated log bit for bit).
template <bool kNeg>
JAX_ARGREDUCE_HD float LogF32(float x) {
  const ReductionF32 r = ReduceF32(x);
  const float f = Sub(AsFloat(AsBits(x) - r.e_field), 1.0f);  // m - 1, exact (Sterbenz)
  return Fma(kNeg ? -r.ef : r.ef, kLn2F32, Log1pPolyF32<kNeg>(f));
}
template <bool kNeg>
JAX_ARGREDUCE_HD float LogSumF32(float hi, float lo) {
  const ReductionF32 r = ReduceF32(Add(hi, lo));
  const float scale = AsFloat(0x3F800000u - r.e_field);  // 2^-e
  // x = fl((hi + lo) * 2^-e - 1): one rounding of the exact value (the inner fma is exact, and
  // lo * 2^-e is), so x carries u - 1 with full relative precision when u is near 1.
  const float x = Fma(lo, scale, Fma(hi, scale, -1.0f));
  return Fma(kNeg ? -r.ef : r.ef, kLn2F32, Log1pPolyF32<kNeg>(x));
}
template <bool kNeg>
JAX_ARGREDUCE_HD double LogF64(double x) {
  const ReductionF64 r = ReduceF64(x);
  const double f = Sub(AsDouble(AsBits(x) - r.e_field), 1.0);
  const double ef = kNeg ? -r.ef : r.ef;
  return Fma(ef, kLn2HiF64, Fma(ef, kLn2LoF64, Log1pPolyF64<kNeg>(f)));
}
template <bool kNeg>
JAX_ARGREDUCE_HD double LogSumF64(double hi, double lo) {
  const ReductionF64 r = ReduceF64(Add(hi, lo));
  const double scale = AsDouble(0x3FF0000000000000ull - r.e_field);
  const double x = Fma(lo, scale, Fma(hi, scale, -1.0));
  const double ef = kNeg ? -r.ef : r.ef;
  return Fma(ef, kLn2HiF64, Fma(ef, kLn2LoF64, Log1pPolyF64<kNeg>(x)));
}
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

// log(x) for a positive normal float32 x (0, inf, NaN and subnormals are not handled: the noise
// never produces them). Max error 1.2 ulp over every positive normal float (gumbel_test).
JAX_ARGREDUCE_HD float GumbelLogF32(float x) { return gumbel_detail::LogF32<false>(x); }

// log(hi + lo) of the exact sum of two floats, as accurate as GumbelLogF32 even when hi + lo is
// within an ulp of 1 (a log1p-style evaluation: no cancellation), provided that, with e the
// exponent of fl(hi + lo) in the reduction above, hi * 2^-e - 1 and lo * 2^-e are exact. That
// holds for (hi, lo) a Fast2Sum/TwoSum pair (hi = fl(hi + lo)), and for the uniform's split
// below (hi a multiple of 2^-23 in [0, 1), 0 < lo < 2^-23). hi + lo in [2^-125, 2^125].
JAX_ARGREDUCE_HD float GumbelLogSumF32(float hi, float lo) {
  return gumbel_detail::LogSumF32<false>(hi, lo);
}

// log1p(x) for x > -1 (1 + x in [2^-125, 2^125]), through the exact pair 1 + x = s + err.
JAX_ARGREDUCE_HD float GumbelLog1pF32(float x) {
  using namespace gumbel_detail;
  const float s = Add(1.0f, x);  // TwoSum: no magnitude precondition
  const float bv = Sub(s, 1.0f);
  const float av = Sub(s, bv);
  const float err = Add(Sub(1.0f, av), Sub(x, bv));
  return GumbelLogSumF32(s, err);
}

JAX_ARGREDUCE_HD double GumbelLogF64(double x) { return gumbel_detail::LogF64<false>(x); }

// float64 twin of GumbelLogSumF32 (the uniform's split: hi a multiple of 2^-52 in [0, 1),
// 0 < lo < 2^-52).
JAX_ARGREDUCE_HD double GumbelLogSumF64(double hi, double lo) {
  return gumbel_detail::LogSumF64<false>(hi, lo);
}

JAX_ARGREDUCE_HD double GumbelLog1pF64(double x) {
  using namespace gumbel_detail;
  const double s = Add(1.0, x);
  const double bv = Sub(s, 1.0);
  const double av = Sub(s, bv);
  const double err = Add(Sub(1.0, av), Sub(x, bv));
  return GumbelLogSumF64(s, err);
}

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
