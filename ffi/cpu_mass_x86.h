// Four tokens' masses at once on x86-64 with AVX2 and FMA (the CPU handler's top-p over float32
// rows, cpu_sample.h): MassOfExponentFast (exact_math.h) evaluated on four lanes by the same
// sequence of correctly rounded operations (fma, sub, mul, the conversions), so every lane's
// mass and refinement flag are the scalar function's, bit for bit (tests/cpp/exact_math_test.cc
// compares them over every float d in [-24, 0]). The polynomial is a chain of 15 dependent fmas
// per token: four tokens per chain instead of one.
#ifndef JAX_ARGREDUCE_FFI_CPU_MASS_X86_H_
#define JAX_ARGREDUCE_FFI_CPU_MASS_X86_H_

#include <cstdint>

#include "exact_math.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
#define JAX_ARGREDUCE_CPU_MASS_X86 1
#else
#define JAX_ARGREDUCE_CPU_MASS_X86 0
#endif

namespace jax_argreduce {

#if JAX_ARGREDUCE_CPU_MASS_X86

// Whether this CPU runs MassOfExponentFastX4 (AVX2 and FMA, with the OS saving AVX state).
inline bool CpuHasMassX4() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
}

// MassOfExponentFast(d[i]) for i < 4: mass[i] and refine[i] (0 or 1).
__attribute__((target("avx2,fma"))) inline void MassOfExponentFastX4(const float* d, uint64_t* mass,
                                                                     uint64_t* refine) {
  using namespace exact_detail;
  const __m128 d4 = _mm_loadu_ps(d);
  // live: d >= -23 (false for NaN); elsewhere the lane computes exp(0) and is zeroed.
  const __m128 live_ps = _mm_cmp_ps(d4, _mm_set1_ps(-23.0f), _CMP_GE_OQ);
  const __m256d xd = _mm256_cvtps_pd(_mm_and_ps(d4, live_ps));  // exact
  const __m256d shift = _mm256_set1_pd(kRoundShift);
  const __m256d t = _mm256_fmadd_pd(xd, _mm256_set1_pd(kExpInvLn2), shift);
  const __m256d kd = _mm256_sub_pd(t, shift);
  // k = t's bits minus the shift's (t in [2^52, 2^53): its significand counts units), and the
  // scale 2^(k + 32) as bits (k + 32 + 1023) << 52.
  const __m256i k = _mm256_sub_epi64(_mm256_castpd_si256(t), _mm256_castpd_si256(shift));
  const __m256d scale = _mm256_castsi256_pd(
      _mm256_slli_epi64(_mm256_add_epi64(k, _mm256_set1_epi64x(32 + 1023)), 52));
  __m256d r = _mm256_fmadd_pd(kd, _mm256_set1_pd(-kExpLn2Hi), xd);
  r = _mm256_fmadd_pd(kd, _mm256_set1_pd(-kExpLn2Mid), r);
  __m256d q = _mm256_set1_pd(kExpTaylorHost[0]);
  for (int i = 1; i < 12; ++i) q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(kExpTaylorHost[i]));
  q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(1.0));
  q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(1.0));
  const __m256d y = _mm256_mul_pd(q, scale);  // exact scaling
  // The window of a float32 midpoint: y's low 29 bits in [2^28 - 16, 2^28 + 16].
  const __m256i low = _mm256_and_si256(_mm256_castpd_si256(y), _mm256_set1_epi64x(0x1FFFFFFF));
  const __m256i near = _mm256_andnot_si256(_mm256_cmpgt_epi64(low, _mm256_set1_epi64x(0x10000010)),
                                           _mm256_cmpgt_epi64(low, _mm256_set1_epi64x(0x0FFFFFEF)));
  // floor(float32(y)): the rounding to float32 (cvtpd2ps: to nearest under the default mode, as
  // RoundToFloat's cast), then floor of a value below 2^33 as a double, made an integer by
  // adding 2^52 (exact) and taking the significand's bits.
  const __m256d e = _mm256_cvtps_pd(_mm256_cvtpd_ps(y));
  const __m256d magic = _mm256_set1_pd(0x1p52);
  const __m256i m = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(_mm256_floor_pd(e), magic)),
                                     _mm256_castpd_si256(magic));
  const __m256i live = _mm256_cvtepi32_epi64(_mm_castps_si128(live_ps));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(mass), _mm256_and_si256(m, live));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(refine),
                      _mm256_and_si256(_mm256_and_si256(near, live), _mm256_set1_epi64x(1)));
}

// MassOfExponentFastX4 over d[0, n), n a multiple of 4: one call per block of a row, so the
// lanes' code is inlined and consecutive groups overlap (a call per group cost more than it
// saved, NOTES try 93).
__attribute__((target("avx2,fma"))) inline void MassOfExponentFastBlock(const float* d, int64_t n,
                                                                        uint64_t* mass,
                                                                        uint64_t* refine) {
  for (int64_t i = 0; i < n; i += 4) MassOfExponentFastX4(d + i, mass + i, refine + i);
}

#endif  // JAX_ARGREDUCE_CPU_MASS_X86

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_CPU_MASS_X86_H_
