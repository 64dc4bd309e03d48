// IEEE-exact arithmetic shared by the host and the device: operations whose results are the same
// bits on the CPU (g++ or clang, any -O, -march, -ffp-contract) and on the GPU (nvcc, IEEE mode),
// so that the sampler draws the same samples on both (SPEC §1c, §1f).
//
// What. Correctly rounded Add/Sub/Mul/Fma that no compiler contracts or reorders differently per
// platform, bit casts, and the package's own log (GumbelLog*: the Gumbel noise's) built from them.
//
// Why this way. The platform log/logf/log1p differ in their last bit between glibc and CUDA, so
// the logs here are our own: exponent extraction by integer operations on the bits, a degree-7
// (float64: 19) minimax polynomial evaluated with fma, and nothing but correctly rounded IEEE
// operations (+, -, *, fma: no division, no table, no transcendental). The host and the device
// execute the same sequence of correctly rounded operations. log is within 1.2 ulp (float32) /
// 1.3 ulp (float64), and -log(u) within 1.8 ulp of the exact value over all 2^32 float32 patterns.
//
// Invariants, keep them when editing:
//   * every rounded floating operation goes through Add/Sub/Mul/Fma below (device: __f*_rn /
//     __d*_rn intrinsics, which nvcc never contracts; host: a product is opaque to the compiler,
//     so it is never contracted either), or RoundToFloat / FloorToU64 for conversions of normal
//     values; negations are exact and folded into fma operands (RN is symmetric);
//   * never compile this with fast-math (-ffast-math is refused below; nvcc: no --use_fast_math,
//     no -ftz=true).
#ifndef JAX_ARGREDUCE_FFI_EXACT_MATH_H_
#define JAX_ARGREDUCE_FFI_EXACT_MATH_H_

#include <cmath>    // std::fma (host)
#include <cstdint>
#include <cstring>  // std::memcpy (host bit casts)

#include "order.h"  // JAX_ARGREDUCE_HD

#if defined(__FAST_MATH__)
#error "ffi/exact_math.h: fast-math would break the bit-identity of results between CPU and GPU"
#endif

namespace jax_argreduce {

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
#define JAX_ARGREDUCE_EXACT_OPAQUE(v) __asm__("" : "+x"(v))
#elif !defined(__CUDA_ARCH__) && (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
#define JAX_ARGREDUCE_EXACT_OPAQUE(v) __asm__("" : "+w"(v))
#else
#define JAX_ARGREDUCE_EXACT_OPAQUE(v) static_cast<void>(v)  // build with -ffp-contract=off
#endif

namespace exact_detail {

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
  JAX_ARGREDUCE_EXACT_OPAQUE(p);
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
  JAX_ARGREDUCE_EXACT_OPAQUE(p);
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
}  // namespace exact_detail

// log(x) for a positive normal float32 x (0, inf, NaN and subnormals are not handled: the noise
// never produces them). Max error 1.2 ulp over every positive normal float (gumbel_test).
JAX_ARGREDUCE_HD float GumbelLogF32(float x) { return exact_detail::LogF32<false>(x); }

// log(hi + lo) of the exact sum of two floats, as accurate as GumbelLogF32 even when hi + lo is
// within an ulp of 1 (a log1p-style evaluation: no cancellation), provided that, with e the
// exponent of fl(hi + lo) in the reduction above, hi * 2^-e - 1 and lo * 2^-e are exact. That
// holds for (hi, lo) a Fast2Sum/TwoSum pair (hi = fl(hi + lo)), and for the uniform's split
// below (hi a multiple of 2^-23 in [0, 1), 0 < lo < 2^-23). hi + lo in [2^-125, 2^125].
JAX_ARGREDUCE_HD float GumbelLogSumF32(float hi, float lo) {
  return exact_detail::LogSumF32<false>(hi, lo);
}

// log1p(x) for x > -1 (1 + x in [2^-125, 2^125]), through the exact pair 1 + x = s + err.
JAX_ARGREDUCE_HD float GumbelLog1pF32(float x) {
  using namespace exact_detail;
  const float s = Add(1.0f, x);  // TwoSum: no magnitude precondition
  const float bv = Sub(s, 1.0f);
  const float av = Sub(s, bv);
  const float err = Add(Sub(1.0f, av), Sub(x, bv));
  return GumbelLogSumF32(s, err);
}

JAX_ARGREDUCE_HD double GumbelLogF64(double x) { return exact_detail::LogF64<false>(x); }

// float64 twin of GumbelLogSumF32 (the uniform's split: hi a multiple of 2^-52 in [0, 1),
// 0 < lo < 2^-52).
JAX_ARGREDUCE_HD double GumbelLogSumF64(double hi, double lo) {
  return exact_detail::LogSumF64<false>(hi, lo);
}

JAX_ARGREDUCE_HD double GumbelLog1pF64(double x) {
  using namespace exact_detail;
  const double s = Add(1.0, x);
  const double bv = Sub(s, 1.0);
  const double av = Sub(s, bv);
  const double err = Add(Sub(1.0, av), Sub(x, bv));
  return GumbelLogSumF64(s, err);
}

// ---------------------------------------------------------------------------------------------
// Own exp: exp(x) correctly rounded to float32 (round to nearest, ties to even) for every float32
// x, subnormal results included (no flush to zero): the masses of the filtered sampler (SPEC
// §1f) are exp(z - z_max), and a correctly rounded result is the one value that the host and the
// device, and any later reimplementation, can all agree on.
//
// How the rounding is decided. A double y ~ exp(x) is computed with a relative error below 2^-51
// (error budget below). The doubles y- and y+, 16 representable doubles below and above y (bits
// -16 and +16: at least 2^-50 y away, beyond the error), enclose exp(x); round-to-nearest is
// monotone, so if y- and y+ round to the same float, so does exp(x). Otherwise (a float32
// midpoint within 16 doubles of y: about one input in 2^24) a double-double evaluation (relative
// error ~2^-88) decides: its high part rounds as exp(x) unless it is itself a midpoint, and then
// the sign of the low part says on which side exp(x) lies (exp of a float32 comes no closer than
// 2^-52.6 relative to a midpoint, far beyond the refinement's error; tests/cpp/exact_math_test.cc
// measures it). A double is rounded to float32 on its bits with integer operations (RoundToF32),
// so a subnormal result never depends on a flush-to-zero mode of the host or the device; a
// normal result takes a shortcut (ExpF32Normal).
//
// Error budget of y (fast path), relative: the reduction r = x - k ln 2 (exact product and
// difference for k L1, one rounding for k L2: 2^-55 absolute, |r| <= 0.35), Taylor degree 13
// (truncation 2^-56.7), Horner's roundings (0.7 * 2^-53 after the last fma's), the last fma
// (2^-53): below 2.1 * 2^-53 < 2^-51; multiplying by 2^k is exact.
// ---------------------------------------------------------------------------------------------
namespace exact_detail {

// ln 2 = kExpLn2Hi + kExpLn2Mid + kExpLn2Lo (to 2^-150): kExpLn2Hi has 44 bits, so k * kExpLn2Hi
// is exact for |k| <= 2^8, and x - k * kExpLn2Hi is exact (a multiple of 2^-45 below 1/2).
constexpr double kExpLn2Hi = 0x1.62e42fefa3a00p-1;
constexpr double kExpLn2Mid = -0x1.0ca86c3898d00p-49;
constexpr double kExpLn2Lo = 0x1.f97b57a079a19p-103;
constexpr double kExpInvLn2 = 0x1.71547652b82fep+0;
constexpr double kRoundShift = 0x1.8p52;  // t + 1.5 * 2^52 rounds t to an integer (|t| < 2^51)

// Round to nearest even of a positive finite normal double, given by its bits, to float32 bits:
// subnormal results and overflow to +inf included. `tie`: the double was exactly a midpoint.
struct RoundedF32 {
  uint32_t bits;
  bool tie;
};
JAX_ARGREDUCE_HD RoundedF32 RoundToF32(uint64_t b) {
  const int e = static_cast<int>(b >> 52) - 896;  // the float32 biased exponent (normal result)
  const uint64_t m = (b & 0xFFFFFFFFFFFFFull) | (1ull << 52);
  int shift = e < 1 ? 30 - e : 29;  // bits dropped from the 53-bit significand
  if (shift > 54) shift = 54;  // m < 2^53: from 54 on, the result is 0 (below half of 2^-149)
  const uint64_t q = m >> shift;
  const uint64_t rem = m & ((1ull << shift) - 1u);
  const uint64_t half = 1ull << (shift - 1);
  const uint64_t up = (rem > half || (rem == half && (q & 1u) != 0)) ? 1u : 0u;
  // A normal result's significand q (2^23 <= q <= 2^24) carries into the exponent field itself.
  uint64_t bits = (static_cast<uint64_t>(e < 1 ? 0 : e - 1) << 23) + q + up;
  if (bits > 0x7F800000u) bits = 0x7F800000u;
  return RoundedF32{static_cast<uint32_t>(bits), rem == half};
}

struct DoubleDouble {
  double hi, lo;
};
JAX_ARGREDUCE_HD DoubleDouble TwoSum(double a, double b) {  // hi + lo == a + b exactly
  const double s = Add(a, b);
  const double bv = Sub(s, a);
  const double av = Sub(s, bv);
  return DoubleDouble{s, Add(Sub(a, av), Sub(b, bv))};
}
JAX_ARGREDUCE_HD DoubleDouble FastTwoSum(double a, double b) {  // |a| >= |b| (or a == 0)
  const double s = Add(a, b);
  return DoubleDouble{s, Sub(b, Sub(s, a))};
}
// s * r + (ch + cl) in double-double (relative error a few 2^-104 while |s r| <= |c| / 2).
JAX_ARGREDUCE_HD DoubleDouble MulAddDD(DoubleDouble s, DoubleDouble r, double ch, double cl) {
  const double ph = Mul(s.hi, r.hi);
  const double pl = Fma(s.hi, r.lo, Fma(s.lo, r.hi, Fma(s.hi, r.hi, -ph)));
  const DoubleDouble t = TwoSum(ch, ph);
  return FastTwoSum(t.hi, Add(t.lo, Add(pl, cl)));
}

// exp(r) by Taylor degree 13 for |r| <= 0.35 (the fast path): coefficients 1/13! down to 1/2!.
// The device keeps them in the constant bank, loaded into uniform registers once per kernel; as
// literals each took two register moves per evaluation in the sampler's register-bound passes
// (NOTES try 90).
#define JAX_ARGREDUCE_EXP_TAYLOR                                                                 \
  {0x1.6124613a86d09p-33, 0x1.1eed8eff8d898p-29, 0x1.ae64567f544e4p-26, 0x1.27e4fb7789f5cp-22, \
   0x1.71de3a556c734p-19, 0x1.a01a01a01a01ap-16, 0x1.a01a01a01a01ap-13, 0x1.6c16c16c16c17p-10, \
   0x1.1111111111111p-7,  0x1.5555555555555p-5,  0x1.5555555555555p-3,  0.5}
#if defined(__CUDACC__)
static __constant__ double kExpTaylorDevice[12] = JAX_ARGREDUCE_EXP_TAYLOR;
#endif
inline constexpr double kExpTaylorHost[12] = JAX_ARGREDUCE_EXP_TAYLOR;
#undef JAX_ARGREDUCE_EXP_TAYLOR
JAX_ARGREDUCE_HD double ExpPolyF64(double r) {
#if defined(__CUDA_ARCH__)
  const double* c = kExpTaylorDevice;
#else
  const double* c = kExpTaylorHost;
#endif
  double q = c[0];
  for (int i = 1; i < 12; ++i) q = Fma(q, r, c[i]);
  q = Fma(q, r, 1.0);
  return Fma(q, r, 1.0);
}

// The refinement: exp(x) = 2^k exp(r) in double-double, r = x - k ln 2 to ~2^-100 (ln 2 in three
// parts), exp(r) by Taylor degree 20 (truncation 2^-97): the terms of degree >= 10 in double
// (their sum is below 2^-36, so its rounding is below 2^-89), the rest in double-double. Then
// the float32 rounding of hi + lo (|lo| <= ulp(hi) / 2): hi's, unless hi is a midpoint, where the
// sign of lo decides.
// Never inlined: the rare path, one copy per kernel instead of one per unrolled token (the spread
// passes' code a third smaller, NOTES try 90).
JAX_ARGREDUCE_HD_NOINLINE float ExpF32Refined(float x) {  // x in [-104, 89]
  const double xd = static_cast<double>(x);
  const double t = Fma(xd, kExpInvLn2, kRoundShift);
  const double kd = Sub(t, kRoundShift);
  const int32_t k = static_cast<int32_t>(static_cast<uint32_t>(AsBits(t)));
  const double scale = AsDouble(static_cast<uint64_t>(k + 1023) << 52);
  const double r0 = Fma(kd, -kExpLn2Hi, xd);  // exact
  const double ph = Mul(kd, kExpLn2Mid);
  const double pl = Fma(kd, kExpLn2Mid, -ph);  // k * kExpLn2Mid == ph + pl exactly
  DoubleDouble r = TwoSum(r0, -ph);
  r = FastTwoSum(r.hi, Sub(r.lo, Fma(kd, kExpLn2Lo, pl)));
  double q = 0x1.e542ba4020225p-62;  // 1/20!
  q = Fma(q, r.hi, 0x1.2f49b46814157p-57);
  q = Fma(q, r.hi, 0x1.6827863b97d97p-53);
  q = Fma(q, r.hi, 0x1.952c77030ad4ap-49);
  q = Fma(q, r.hi, 0x1.ae7f3e733b81fp-45);
  q = Fma(q, r.hi, 0x1.ae7f3e733b81fp-41);
  q = Fma(q, r.hi, 0x1.93974a8c07c9dp-37);
  q = Fma(q, r.hi, 0x1.6124613a86d09p-33);
  q = Fma(q, r.hi, 0x1.1eed8eff8d898p-29);
  q = Fma(q, r.hi, 0x1.ae64567f544e4p-26);
  q = Fma(q, r.hi, 0x1.27e4fb7789f5cp-22);  // 1/10!
  DoubleDouble s{q, 0.0};
  s = MulAddDD(s, r, 0x1.71de3a556c734p-19, -0x1.c154f8ddc6c00p-73);  // 1/9!
  s = MulAddDD(s, r, 0x1.a01a01a01a01ap-16, 0x1.a01a01a01a01ap-76);
  s = MulAddDD(s, r, 0x1.a01a01a01a01ap-13, 0x1.a01a01a01a01ap-73);
  s = MulAddDD(s, r, 0x1.6c16c16c16c17p-10, -0x1.f49f49f49f49fp-65);
  s = MulAddDD(s, r, 0x1.1111111111111p-7, 0x1.1111111111111p-63);
  s = MulAddDD(s, r, 0x1.5555555555555p-5, 0x1.5555555555555p-59);
  s = MulAddDD(s, r, 0x1.5555555555555p-3, 0x1.5555555555555p-57);
  s = MulAddDD(s, r, 0.5, 0.0);
  s = MulAddDD(s, r, 1.0, 0.0);
  s = MulAddDD(s, r, 1.0, 0.0);
  const double hi = Mul(s.hi, scale);  // exact: powers of two, no underflow
  const double lo = Mul(s.lo, scale);
  const uint64_t b = AsBits(hi);
  const RoundedF32 f = RoundToF32(b);
  if (!f.tie || lo == 0.0) return AsFloat(f.bits);
  return AsFloat(RoundToF32(lo > 0.0 ? b + 1u : b - 1u).bits);  // off the midpoint, lo's side
}

// The fast path's y ~ exp(x) 2^scale_log2 (relative error below 2^-51), as its bits, for x in
// [-104, 89] and a result that is a normal double.
JAX_ARGREDUCE_HD uint64_t ExpF64Bits(float x, int scale_log2 = 0) {
  const double xd = static_cast<double>(x);                  // exact
  const double t = Fma(xd, kExpInvLn2, kRoundShift);
  const double kd = Sub(t, kRoundShift);                     // k = round(x / ln 2), |k| <= 150
  const int32_t k = static_cast<int32_t>(static_cast<uint32_t>(AsBits(t)));
  const double r = Fma(kd, -kExpLn2Mid, Fma(kd, -kExpLn2Hi, xd));  // inner fma exact
  const double scale = AsDouble(static_cast<uint64_t>(k + scale_log2 + 1023) << 52);
  return AsBits(Mul(ExpPolyF64(r), scale));  // exact scaling
}

// A double rounded to the nearest float32 (ties to even; the default rounding mode that the
// helpers above assume on the host), and a float32 in [0, 2^64) rounded down to an integer: one
// conversion instruction each. Only for normal float32 results: a subnormal one would depend on
// flush-to-zero modes (the host's MXCSR, nvcc's -ftz).
JAX_ARGREDUCE_HD float RoundToFloat(double x) {
#if defined(__CUDA_ARCH__)
  return __double2float_rn(x);
#else
  return static_cast<float>(x);
#endif
}
JAX_ARGREDUCE_HD uint64_t FloorToU64(float x) {
#if defined(__CUDA_ARCH__)
  return __float2ull_rd(x);
#else
  return static_cast<uint64_t>(x);  // truncation: the floor of a non-negative value
#endif
}

}  // namespace exact_detail

// ExpF32(x) for x in (-87, 89], where exp(x) is a normal float32 (exp(-87) > 2^-126) or +inf
// (the masses' relative E and min-p's floor search: x <= 0). y's low 29 bits are the ones
// rounding to float32 drops, and a float32 midpoint lies within 16 doubles of y iff they are
// within 16 of 2^28: RoundToF32(b - 16) == RoundToF32(b + 16) in a few 32-bit operations (half
// the fast path's time on the host, NOTES try 87). Checked with ExpF32 over every float32 x.
JAX_ARGREDUCE_HD float ExpF32Normal(float x) {
  using namespace exact_detail;
  const uint64_t b = ExpF64Bits(x);
  const uint32_t low = static_cast<uint32_t>(b) & 0x1FFFFFFFu;
  if (low - (0x10000000u - 16u) <= 32u) return ExpF32Refined(x);  // rare (see above)
  // b >> 29 is y's float32 exponent (rebiased by 1023 - 127) and significand, truncated;
  // rounding up carries into the exponent; past FLT_MAX it is +inf's bits or above.
  const uint32_t bits = static_cast<uint32_t>(b >> 29) - (896u << 23) +
                        (low > 0x10000000u ? 1u : 0u);
  return AsFloat(bits < 0x7F800000u ? bits : 0x7F800000u);
}

// exp(x) correctly rounded to float32 for every float32 x: exp(-inf) = +0.0f, exp(+inf) = +inf,
// NaN -> NaN, results below 2^-126 rounded to the subnormal grid (exp(x) = +0.0f from x <
// -103.972), +inf above 88.7228; exp(-0.0f) = exp(tiny) = 1.0f. The same bits on host and device.
// Checked against a correctly rounded reference over every float32 (tests/cpp/exact_math_test.cc).
JAX_ARGREDUCE_HD float ExpF32(float x) {
  using namespace exact_detail;
  if (!(x >= -104.0f)) return x < 0.0f ? 0.0f : Add(x, x);  // exp(-104) < 2^-150; NaN quieted
  if (x > 89.0f) return AsFloat(0x7F800000u);                // exp(89) > FLT_MAX
  if (x > -87.0f) return ExpF32Normal(x);
  const uint64_t b = ExpF64Bits(x);
  const uint32_t down = RoundToF32(b - 16u).bits;
  const uint32_t up = RoundToF32(b + 16u).bits;
  if (down == up) return AsFloat(down);
  return ExpF32Refined(x);  // the same k, recomputed (rare: keeps the fast path's registers)
}

// ---------------------------------------------------------------------------------------------
// Fixed-point masses (SPEC §1f): top-p compares a prefix of masses exp(z - z_max) with p times
// their total. Floating sums depend on their order (and so on the launch geometry), integer sums
// do not: each mass is rounded down to a multiple of 2^-32 and summed in uint64 (exact, any order,
// up to 2^21 masses of 1 and far more in practice before 2^53), and p is compared exactly.
// Resolution: a mass below 2^-32 (z - z_max < -22.18) counts as 0, and the sum of n masses is
// low by less than n * 2^-32 (relative to the top token's mass, 1).
// ---------------------------------------------------------------------------------------------

// floor(e * 2^32) for e in [0, 1] (1.0f -> 2^32), exactly (integer operations on the bits: e has
// 24 significant bits). -0.0f and negatives give 0; above 1 (+inf, a positive NaN) 2^32.
JAX_ARGREDUCE_HD uint64_t MassFixed(float e) {
  const uint32_t b = exact_detail::AsBits(e);
  if (b >= 0x80000000u) return 0;
  if (b >= 0x3F800000u) return 1ull << 32;
  const int shift = static_cast<int>(b >> 23) - 118;  // e * 2^32 = significand * 2^shift
  const uint64_t m = (b & 0x7FFFFFu) | 0x800000u;
  // A subnormal e (exponent field 0) is below 2^-126: shift -118 already flushes it to 0.
  return shift >= 0 ? m << shift : (shift > -64 ? m >> -shift : 0u);
}

// A token's mass MassFixed(ExpF32(d)) for d = z - z_max <= 0 (SPEC §1f; MassExponent never
// gives d > 0, whose mass would pass MassFixed's clamp at 2^32), in two steps for callers that
// evaluate several tokens side by side (branch-free, so their DFMA chains overlap): 0 for
// d < -23 (ExpF32(d) < 2^-32, ExpF32 non-decreasing; a NaN d too); else y = the fast path's
// exp(d) 2^32. Scaling by 2^32 changes no significand bit and 2^32 exp(d) is a normal float32
// here ([0.44, 2^32]), so rounding y to float32 gives 2^32 ExpF32(d) wherever the fast path
// decides (as ExpF32Normal), and its floor is the mass: two conversions where the bits took a
// dozen integer operations (NOTES try 91). `refine`: a float32 midpoint within 16 doubles of y
// (about one d in 2^24, as ExpF32Normal), and MassOfExponent's refinement decides.
struct FastMass {
  uint64_t mass;
  bool refine;
};
JAX_ARGREDUCE_HD FastMass MassOfExponentFast(float d) {
  using namespace exact_detail;
  const bool live = d >= -23.0f;
  const uint64_t b = ExpF64Bits(live ? d : 0.0f, 32);
  const uint32_t low = static_cast<uint32_t>(b) & 0x1FFFFFFFu;
  const uint64_t mass = FloorToU64(RoundToFloat(AsDouble(b)));
  // ExpF32Normal's window, written alike (a helper for both changed the kernels' branch layout).
  return FastMass{live ? mass : 0u, live && low - (0x10000000u - 16u) <= 32u};
}
JAX_ARGREDUCE_HD uint64_t MassOfExponentRefined(float d) {  // where `refine`
  return MassFixed(exact_detail::ExpF32Refined(d));
}
JAX_ARGREDUCE_HD uint64_t MassOfExponent(float d) {
  const FastMass m = MassOfExponentFast(d);
  return m.refine ? MassOfExponentRefined(d) : m.mass;
}

// prefix < p * total in real arithmetic, for prefix, total < 2^53 and p in (0, 1] (any positive
// float works). Exact because p * total = t + err exactly (t = fl(p * total), err = fma(p, total,
// -t): the rounding error of a product is a double, no underflow here) and prefix is a double:
// if prefix < t, then prefix <= pred(t) < t - |err| (|err| is at most half the gap to the
// neighbour on err's side); symmetrically if prefix > t; if prefix == t, the sign of err decides.
JAX_ARGREDUCE_HD bool MassBelow(uint64_t prefix, float p, uint64_t total) {
  using namespace exact_detail;
#if defined(__CUDA_ARCH__)
  const double s = __ull2double_rn(prefix);  // exact below 2^53
  const double n = __ull2double_rn(total);
#else
  const double s = static_cast<double>(prefix);
  const double n = static_cast<double>(total);
#endif
  const double pd = static_cast<double>(p);
  const double t = Mul(pd, n);
  const double err = Fma(pd, n, -t);
  return s < t || (s == t && err > 0.0);
}

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_EXACT_MATH_H_
