// Host test of ffi/gumbel.h (counter-based Gumbel noise shared by the CPU handler and the CUDA
// kernels): Philox-4x32-10 known answers, the exact uniform, the accuracy of the own log/log1p
// against double / long double / __float128 references, the exact upper tail, the cheap upper
// bound, monotonicity and range of the float32 noise, group == per-element, pinned noise values
// (any change of the generator or the transform changes samples: it must be deliberate), and a
// KS / chi-square sanity check of the noise against the Gumbel CDF; the draw's skip
// (sample_filter.h, NoisyKeyReaches) against the noisy key it skips.
//
// Build and run (x86-64 Linux, g++ >= 9 or clang; no flag changes a noise bit: the pinned digests
// check it. -march=native only makes it faster):
//   g++ -std=c++17 -O2 -I ffi tests/cpp/gumbel_test.cc -o /tmp/gumbel_test -pthread -lquadmath
//   /tmp/gumbel_test               # sampled sweeps, ~20 s of CPU on 2 cores
//   /tmp/gumbel_test --exhaustive  # every float32 noise bit pattern, every positive normal float
//                                  # for log, every float in (-1, 2^30] for log1p (long)
//   /tmp/gumbel_test --print-pins  # prints the pinned-values table (only after a deliberate
//                                  # change of the generator or the transform)
// Prints one line per check and "gumbel_test: PASS" / "gumbel_test: FAIL (n failures)"; exit 1
// on failure.
#include "gumbel.h"
#include "sample_filter.h"  // NoisyKey, NoisyKeyReaches

#include <quadmath.h>

#include <algorithm>
#include <cfloat>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <vector>

using namespace jax_argreduce;

namespace {

int g_failures = 0;

void Check(bool ok, const char* what, const char* detail = "") {
  std::printf("%s  %s%s%s\n", ok ? "ok  " : "FAIL", what, detail[0] ? ": " : "", detail);
  if (!ok) ++g_failures;
}

// Bit casts: the ones gumbel.h uses (memcpy on the host, intrinsics on the device).
using gumbel_detail::AsBits;
using gumbel_detail::AsDouble;
using gumbel_detail::AsFloat;

// ulp of a float32 / float64 result whose exact value is `ref` (binade of ref).
double UlpF32(double ref) { return std::ldexp(1.0, std::ilogb(ref) - 23); }
long double UlpF64(long double ref) { return std::ldexp(1.0L, std::ilogb(ref) - 52); }
double UlpsF64(__float128 got, __float128 ref) {  // |got - ref| in float64 ulps of ref
  return static_cast<double>(fabsq(got - ref) /
                             static_cast<__float128>(UlpF64(static_cast<long double>(ref))));
}
// (k + 1/2) * 2^-64, exact.
__float128 HalfUlpGrid64(uint64_t k) {
  return (static_cast<__float128>(k) + static_cast<__float128>(0.5)) *
         static_cast<__float128>(0x1p-64);
}

// Runs fn(begin, end, thread) over [0, n) in contiguous chunks on all cores.
void ParallelFor(uint64_t n, const std::function<void(uint64_t, uint64_t, int)>& fn) {
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    const uint64_t b = n * t / threads, e = n * (t + 1) / threads;
    pool.emplace_back(fn, b, e, t);
  }
  for (auto& th : pool) th.join();
}

struct MaxTracker {
  double value = 0;
  uint64_t where = 0;
  void Add(double v, uint64_t w) {
    if (v > value) value = v, where = w;
  }
  void Merge(const MaxTracker& o) { Add(o.value, o.where); }
};

// ------------------------------------------------------------------------------------------
void TestPhiloxKat() {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  // Random123 kat_vectors, philox4x32 10 (the three published rows).
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const Philox4x32Block r =
        Philox4x32_10(Philox4x32Block{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0],
                      k.key[1]);
    char buf[160];
    std::snprintf(buf, sizeof buf, "ctr %08x.. key %08x %08x -> %08x %08x %08x %08x", k.ctr[0],
                  k.key[0], k.key[1], r.v[0], r.v[1], r.v[2], r.v[3]);
    Check(std::memcmp(r.v, k.out, 16) == 0, "Philox4x32-10 KAT", buf);
  }
}

// ------------------------------------------------------------------------------------------
void TestUniformEdges() {
  const uint32_t edges[] = {0u,          1u,          2u,          511u,        512u,
                            513u,        0x7FFFFFu,   0x800000u,   0xFFFFFFu,   0x1000000u,
                            0x7FFFFFFFu, 0x80000000u, 0x80000001u, 0xFFFFFE00u, 0xFFFFFEFFu,
                            0xFFFFFF7Fu, 0xFFFFFF80u, 0xFFFFFFFDu, 0xFFFFFFFEu, 0xFFFFFFFFu};
  bool ok = true;
  for (uint32_t b : edges) {
    const UniformSplitF32 u = GumbelUniformF32(b);
    const long double exact = (static_cast<long double>(b) + 0.5L) * 0x1p-32L;
    const long double got = static_cast<long double>(u.hi) + u.lo;
    const float g = GumbelFromBitsF32(b);
    if (got != exact || !(got > 0 && got < 1) || !std::isfinite(g)) {
      ok = false;
      std::printf("    bits %08x: hi %a lo %a G %a\n", b, u.hi, u.lo, g);
    }
  }
  Check(ok, "uniform f32: hi + lo == (bits + 1/2) 2^-32 exactly, in (0, 1), G finite (edges)");
  const uint64_t edges64[] = {0ull,
                              1ull,
                              0xFFFull,
                              0x1000ull,
                              (1ull << 53) - 1,
                              1ull << 63,
                              (1ull << 63) - 1,
                              0xFFFFFFFFFFFFF000ull,
                              0xFFFFFFFFFFFFF7FFull,
                              0xFFFFFFFFFFFFF800ull,
                              0xFFFFFFFFFFFFFFFEull,
                              0xFFFFFFFFFFFFFFFFull};
  ok = true;
  for (uint64_t b : edges64) {
    const UniformSplitF64 u = GumbelUniformF64(b);
    const __float128 exact = HalfUlpGrid64(b);
    const __float128 got = static_cast<__float128>(u.hi) + u.lo;
    const double g = GumbelFromBitsF64(b);
    if (got != exact || !(got > 0 && got < 1) || !std::isfinite(g)) {
      ok = false;
      std::printf("    bits %016" PRIx64 ": hi %a lo %a G %a\n", b, u.hi, u.lo, g);
    }
  }
  Check(ok, "uniform f64: hi + lo == (bits + 1/2) 2^-64 exactly, in (0, 1), G finite (edges)");
}

// ------------------------------------------------------------------------------------------
// GumbelLogF32 over positive normal floats, GumbelLog1pF32 over x in (-1, 2^30].
void TestLogF32(bool exhaustive) {
  const uint32_t stride = exhaustive ? 1 : 61;
  const uint32_t lo_bits = AsBits(FLT_MIN), hi_bits = AsBits(FLT_MAX);
  const uint64_t n = (hi_bits - lo_bits) / stride + 1;
  std::vector<MaxTracker> worst(64);
  ParallelFor(n, [&](uint64_t b, uint64_t e, int t) {
    MaxTracker w;
    for (uint64_t i = b; i < e; ++i) {
      const uint32_t bits = lo_bits + static_cast<uint32_t>(i * stride);
      const float x = AsFloat(bits);
      const double ref = std::log(static_cast<double>(x));
      if (ref == 0) {
        if (GumbelLogF32(x) != 0.0f) w.Add(1e9, bits);
        continue;
      }
      w.Add(std::fabs(GumbelLogF32(x) - ref) / UlpF32(ref), bits);
    }
    worst[t] = w;
  });
  MaxTracker w;
  for (auto& x : worst) w.Merge(x);
  char buf[160];
  std::snprintf(buf, sizeof buf, "max %.3f ulp at x = %a (%s, every %u-th positive normal float)",
                w.value, AsFloat(static_cast<uint32_t>(w.where)),
                exhaustive ? "exhaustive" : "sampled", stride);
  Check(w.value <= 2.0, "GumbelLogF32 vs double log <= 2 ulp", buf);

  // log1p: x = -(1 - 2^-24) .. -2^-60 and 2^-60 .. 2^30, and 0.
  const uint32_t step = exhaustive ? 1 : 31;
  const uint32_t p0 = AsBits(0x1p-60f), p1 = AsBits(0x1p30f), n1 = AsBits(1.0f - 0x1p-24f);
  const uint64_t n_pos = (p1 - p0) / step + 1, n_neg = (n1 - p0) / step + 1;
  auto input = [&](uint64_t i) -> uint32_t {
    if (i < n_pos) return p0 + static_cast<uint32_t>(i * step);
    if (i < n_pos + n_neg) return (p0 + static_cast<uint32_t>((i - n_pos) * step)) | 0x80000000u;
    return 0u;
  };
  ParallelFor(n_pos + n_neg + 1, [&](uint64_t b, uint64_t e, int t) {
    MaxTracker w1;
    for (uint64_t i = b; i < e; ++i) {
      const uint32_t xb = input(i);
      const float x = AsFloat(xb);
      const double ref = std::log1p(static_cast<double>(x));
      const float got = GumbelLog1pF32(x);
      if (ref == 0) {
        if (got != 0.0f) w1.Add(1e9, xb);
        continue;
      }
      w1.Add(std::fabs(got - ref) / UlpF32(ref), xb);
    }
    worst[t] = w1;
  });
  w = MaxTracker();
  for (auto& x : worst) w.Merge(x);
  std::snprintf(buf, sizeof buf, "max %.3f ulp at x = %a (%" PRIu64 " inputs in (-1, 2^30])",
                w.value, AsFloat(static_cast<uint32_t>(w.where)), n_pos + n_neg + 1);
  Check(w.value <= 2.0, "GumbelLog1pF32 vs double log1p <= 2 ulp", buf);
}

// ------------------------------------------------------------------------------------------
// GumbelLogF64 / GumbelLog1pF64 vs long double, pseudo-random inputs over the whole range.
void TestLogF64(bool exhaustive) {
  const uint64_t n = exhaustive ? 200000000ull : 20000000ull;
  std::vector<MaxTracker> worst_log(64), worst_log1p(64);
  ParallelFor(n, [&](uint64_t b, uint64_t e, int t) {
    MaxTracker wl, wp;
    for (uint64_t i = b; i < e; ++i) {
      const Philox4x32Block r = Philox4x32_10(Philox4x32Block{{static_cast<uint32_t>(i), 7, 0, 0}},
                                              0x1234u, 0x5678u);
      const uint64_t mant = (static_cast<uint64_t>(r.v[1]) << 32 | r.v[0]) & 0xFFFFFFFFFFFFFull;
      // log: exponent uniform over all normal binades, with a third of them in [1/2, 2).
      uint64_t ex = 1 + r.v[2] % 2046;
      if (r.v[3] % 3 == 0) ex = 1022 + (r.v[3] >> 2) % 2;
      const double x = [&] {
        double v;
        const uint64_t bb = ex << 52 | mant;
        std::memcpy(&v, &bb, 8);
        return v;
      }();
      const long double ref = logl(static_cast<long double>(x));
      if (ref != 0) wl.Add(static_cast<double>(fabsl(GumbelLogF64(x) - ref) / UlpF64(ref)), i);
      // log1p: |x| in [2^-80, 1) with either sign (x > -1), or x in [1, 2^40].
      const uint64_t ex1 = (r.v[3] & 1) ? 1023 - 1 - (r.v[2] >> 8) % 80 : 1023 + (r.v[2] >> 8) % 40;
      double y;
      const uint64_t yb = ex1 << 52 | mant;
      std::memcpy(&y, &yb, 8);
      if ((r.v[3] & 2) && y < 1) y = -y;
      const long double ref1 = log1pl(static_cast<long double>(y));
      if (ref1 != 0)
        wp.Add(static_cast<double>(fabsl(GumbelLog1pF64(y) - ref1) / UlpF64(ref1)), i);
    }
    worst_log[t] = wl;
    worst_log1p[t] = wp;
  });
  MaxTracker wl, wp;
  for (auto& x : worst_log) wl.Merge(x);
  for (auto& x : worst_log1p) wp.Merge(x);
  char buf[160];
  std::snprintf(buf, sizeof buf, "max %.3f ulp (%" PRIu64 " pseudo-random normal inputs)", wl.value,
                n);
  Check(wl.value <= 2.0, "GumbelLogF64 vs long double log <= 2 ulp", buf);
  std::snprintf(buf, sizeof buf, "max %.3f ulp (%" PRIu64 " inputs, |x| in [2^-80, 2^40])",
                wp.value, n);
  Check(wp.value <= 2.0, "GumbelLog1pF64 vs long double log1p <= 2 ulp", buf);
}

// ------------------------------------------------------------------------------------------
// The float32 noise transform, over every bit pattern (--exhaustive) or edge windows + a stride:
// E = -log(u) vs double reference (u and d = 1 - u are exact in double), G = -log(E) vs double,
// G non-decreasing in bits, G <= GumbelUpperBoundF32, range.
struct NoiseStats {
  MaxTracker e_ulp, e_ulp_tail, g_abs, g_ulp_big, ub_slack_max;
  uint64_t identity_violations = 0, zero_g = 0, monotone_violations = 0, bound_violations = 0;
  uint64_t nonpositive_e = 0, count = 0;
  float g_min = INFINITY, g_max = -INFINITY;
  void Merge(const NoiseStats& o) {
    e_ulp.Merge(o.e_ulp), e_ulp_tail.Merge(o.e_ulp_tail), g_abs.Merge(o.g_abs);
    g_ulp_big.Merge(o.g_ulp_big), ub_slack_max.Merge(o.ub_slack_max);
    identity_violations += o.identity_violations, monotone_violations += o.monotone_violations;
    zero_g += o.zero_g, bound_violations += o.bound_violations;
    nonpositive_e += o.nonpositive_e, count += o.count;
    g_min = std::min(g_min, o.g_min), g_max = std::max(g_max, o.g_max);
  }
};

void NoiseRange(uint64_t first, uint64_t last_inclusive, uint32_t stride, NoiseStats* st) {
  float prev_g = -INFINITY;
  for (uint64_t i = first; i <= last_inclusive; i += stride) {
    const uint32_t b = static_cast<uint32_t>(i);
    const UniformSplitF32 u = GumbelUniformF32(b);
    const float e = -GumbelLogSumF32(u.hi, u.lo);
    const float g = -GumbelLogF32(e);
    // Equal as values: where E rounds to exactly 1, G is +0 here and -0 in the composition (a
    // negated log(1)); the order key of a sum treats them alike. Everything else bit for bit.
    const float fused = GumbelFromBitsF32(b);
    if (AsBits(g) != AsBits(fused) && !(g == 0 && fused == 0)) ++st->identity_violations;
    st->zero_g += g == 0;
    const double ud = (static_cast<double>(b) + 0.5) * 0x1p-32;
    const double dd = (static_cast<double>(~b) + 0.5) * 0x1p-32;
    const double e_ref = b < 0x80000000u ? -std::log(ud) : -std::log1p(-dd);
    const double g_ref = -std::log(e_ref);
    ++st->count;
    if (!(e > 0)) ++st->nonpositive_e;
    const double eu = std::fabs(e - e_ref) / UlpF32(e_ref);
    st->e_ulp.Add(eu, b);
    if (b >= 0xFFF00000u) st->e_ulp_tail.Add(eu, b);
    if (std::fabs(g_ref) < 1.0) st->g_abs.Add(std::fabs(g - g_ref), b);
    if (std::fabs(g_ref) >= 1.0) st->g_ulp_big.Add(std::fabs(g - g_ref) / UlpF32(g_ref), b);
    if (stride == 1 && g < prev_g) ++st->monotone_violations;
    prev_g = g;
    const float ub = GumbelUpperBoundF32(b);
    if (!(g <= ub)) ++st->bound_violations;
    if (b >= 0x80000000u) st->ub_slack_max.Add(ub - g, b);
    st->g_min = std::min(st->g_min, g);
    st->g_max = std::max(st->g_max, g);
  }
}

// The scan's skip bound of a high half over every high half: G of the half's largest pattern
// (so, G being non-decreasing, of every pattern with that half) never exceeds it; the bound is
// non-decreasing in the half (the chunk and run tests bound a group by its largest half); and in
// the upper half of u (where a scan's skipping happens) it stays within 0.2 of that G (the
// former bound, (clz(~bits) + 1) ln 2, was 0.42-0.53 above it on average there).
void TestHighBoundF32() {
  uint32_t violations = 0, decreases = 0, worst = 0;
  double slack_max = 0, slack_sum = 0;
  float previous = -INFINITY;
  for (uint32_t high = 0; high <= 0xFFFFu; ++high) {
    const float g = GumbelFromBitsF32(high << 16 | 0xFFFFu);
    const float bound = GumbelUpperBoundHighF32(high);
    violations += !(g <= bound);
    decreases += bound < previous;
    previous = bound;
    if (high >= 0x8000u && high < 0xFFFFu) {
      const double slack = static_cast<double>(bound) - g;
      slack_sum += slack;
      if (slack > slack_max) slack_max = slack, worst = high;
    }
  }
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "%u violations, %u decreases; upper half: max bound - G %.4f (at %04x), mean %.4f",
                violations, decreases, slack_max, worst, slack_sum / 0x7FFF);
  Check(violations == 0 && decreases == 0 && slack_max <= 0.2,
        "noise f32: G <= GumbelUpperBoundHighF32(high), non-decreasing, tight", buf);
}

// The scan's log-free lower bound of a high half over every high half: G of the half's smallest
// pattern (so of every pattern with that half) is never below it, and for u >= 1/2 it is within
// 0.2 of that G.
void TestLowBoundF32() {
  uint32_t violations = 0, worst = 0;
  double slack_max = 0, slack_sum = 0;
  for (uint32_t high = 0; high <= 0xFFFFu; ++high) {
    const float g = GumbelFromBitsF32(high << 16);
    const float bound = GumbelLowerBoundHighF32(high);
    violations += !(bound <= g);
    if (high >= 0x8000u) {
      const double slack = static_cast<double>(g) - bound;
      slack_sum += slack;
      if (slack > slack_max) slack_max = slack, worst = high;
    }
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "%u violations; upper half: max G - bound %.4f (at %04x), mean %.4f",
                violations, slack_max, worst, slack_sum / 0x8000);
  Check(violations == 0 && slack_max <= 0.2, "noise f32: G >= GumbelLowerBoundHighF32(high), tight",
        buf);
}

void TestNoiseF32(bool exhaustive) {
  std::vector<NoiseStats> per(64);
  if (exhaustive) {
    ParallelFor(1ull << 32, [&](uint64_t b, uint64_t e, int t) {
      NoiseRange(b, e - 1, 1, &per[t]);
      // chunk boundary: one comparison across it
      if (b > 0 && GumbelFromBitsF32(static_cast<uint32_t>(b)) <
                       GumbelFromBitsF32(static_cast<uint32_t>(b - 1)))
        ++per[t].monotone_violations;
    });
  } else {
    struct Window {
      uint64_t a, b;
      uint32_t stride;
    };
    const Window windows[] = {{0, (1u << 21) - 1, 1},
                              {0x80000000ull - (1u << 21), 0x80000000ull + (1u << 21) - 1, 1},
                              {(1ull << 32) - (1u << 22), (1ull << 32) - 1, 1},
                              {0, (1ull << 32) - 1, 997}};
    ParallelFor(4, [&](uint64_t b, uint64_t e, int t) {
      for (uint64_t w = b; w < e; ++w) NoiseRange(windows[w].a, windows[w].b, windows[w].stride,
                                                  &per[t]);
    });
  }
  NoiseStats s;
  for (auto& p : per) s.Merge(p);
  char buf[240];
  std::snprintf(buf, sizeof buf, "%" PRIu64 " bit patterns (%s)", s.count,
                exhaustive ? "all 2^32" : "edge windows + every 997th");
  Check(s.nonpositive_e == 0, "noise f32: E = -log(u) > 0 always", buf);
  std::snprintf(buf, sizeof buf, "%" PRIu64 " differ (%" PRIu64 " patterns give G = 0, sign aside)",
                s.identity_violations, s.zero_g);
  Check(s.identity_violations == 0,
        "noise f32: GumbelFromBitsF32 == -GumbelLogF32(-GumbelLogSumF32(uniform))", buf);
  std::snprintf(buf, sizeof buf, "max %.3f ulp at bits %08" PRIx64, s.e_ulp.value, s.e_ulp.where);
  Check(s.e_ulp.value <= 2.0, "noise f32: E = -log(u) vs exact <= 2 ulp", buf);
  std::snprintf(buf, sizeof buf,
                "max %.3f ulp at bits %08" PRIx64 " (bits >= 0xFFF00000, u > 1-2^-12)",
                s.e_ulp_tail.value, s.e_ulp_tail.where);
  Check(s.e_ulp_tail.value <= 1.5, "noise f32: upper tail E exact (no cancellation)", buf);
  std::snprintf(buf, sizeof buf,
                "max |G - G_exact| = %.3g (2^%.1f) where |G| < 1 (at bits %08" PRIx64
                "); max %.3f ulp where |G| >= 1 (at %08" PRIx64 ")",
                s.g_abs.value, std::log2(s.g_abs.value), s.g_abs.where, s.g_ulp_big.value,
                s.g_ulp_big.where);
  Check(s.g_abs.value <= 0x1p-22 && s.g_ulp_big.value <= 2.0, "noise f32: G accuracy", buf);
  std::snprintf(buf, sizeof buf, "%" PRIu64 " violations%s", s.monotone_violations,
                exhaustive ? "" : " (checked inside the stride-1 windows)");
  Check(s.monotone_violations == 0, "noise f32: G non-decreasing in bits", buf);
  std::snprintf(buf, sizeof buf,
                "%" PRIu64 " violations; max bound - G %.3f (upper half) at bits %08" PRIx64,
                s.bound_violations, s.ub_slack_max.value, s.ub_slack_max.where);
  Check(s.bound_violations == 0, "noise f32: G <= GumbelUpperBoundF32(bits)", buf);
  const float g0 = GumbelFromBitsF32(0), g1 = GumbelFromBitsF32(0xFFFFFFFFu);
  std::snprintf(buf, sizeof buf,
                "min %a = %.7g (bits 0), max %a = %.7g (bits ffffffff); header %a, %a", g0, g0,
                g1, g1, kGumbelMinF32, kGumbelMaxF32);
  Check(s.g_min == g0 && s.g_max == g1 && g0 == kGumbelMinF32 && g1 == kGumbelMaxF32,
        "noise f32: range = [G(0), G(0xFFFFFFFF)] = [kGumbelMinF32, kGumbelMaxF32]", buf);
}

// ------------------------------------------------------------------------------------------
// float64 noise vs __float128 reference on edge windows + pseudo-random bits.
void TestNoiseF64(bool exhaustive) {
  const uint64_t n_random = exhaustive ? 20000000ull : 2000000ull;
  std::vector<uint64_t> bits;
  for (uint64_t i = 0; i < 4096; ++i) {
    bits.push_back(i);
    bits.push_back(~i);
    bits.push_back((1ull << 63) + i);
    bits.push_back((1ull << 63) - 1 - i);
  }
  for (int k = 0; k < 64; ++k) {
    bits.push_back(1ull << k);
    bits.push_back(~(1ull << k));
    bits.push_back((1ull << k) - 1);
    bits.push_back(~((1ull << k) - 1));
  }
  for (uint64_t i = 0; i < n_random; ++i) {
    const Philox4x32Block r =
        Philox4x32_10(Philox4x32Block{{static_cast<uint32_t>(i), 9, 0, 0}}, 0xabcu, 0xdefu);
    uint64_t v = static_cast<uint64_t>(r.v[1]) << 32 | r.v[0];
    // a quarter of them pushed into the far tails
    if (r.v[2] % 4 == 0) v = (r.v[3] & 1) ? v >> (r.v[2] >> 2) % 64 : ~(v >> (r.v[2] >> 2) % 64);
    bits.push_back(v);
  }
  std::vector<NoiseStats> per(64);
  std::vector<MaxTracker> e_ulp(64), g_ulp(64), g_abs(64);
  ParallelFor(bits.size(), [&](uint64_t b, uint64_t e, int t) {
    for (uint64_t i = b; i < e; ++i) {
      const uint64_t x = bits[i];
      const UniformSplitF64 u = GumbelUniformF64(x);
      const double ev = -GumbelLogSumF64(u.hi, u.lo);
      const double g = -GumbelLogF64(ev);
      const __float128 uq = HalfUlpGrid64(x), dq = HalfUlpGrid64(~x);
      const __float128 e_ref = (x >> 63) == 0 ? -logq(uq) : -log1pq(-dq);
      const __float128 g_ref = -logq(e_ref);
      if (!(ev > 0)) ++per[t].nonpositive_e;
      e_ulp[t].Add(UlpsF64(ev, e_ref), x);
      if (fabsq(g_ref) < 1) g_abs[t].Add(static_cast<double>(fabsq(g - g_ref)), x);
      if (fabsq(g_ref) >= 1) g_ulp[t].Add(UlpsF64(g, g_ref), x);
      const double ub = GumbelUpperBoundF64(x);
      if (!(g <= ub)) ++per[t].bound_violations;
    }
  });
  MaxTracker eu, gu, ga;
  uint64_t nonpos = 0, bound = 0;
  for (int t = 0; t < 64; ++t) {
    eu.Merge(e_ulp[t]), gu.Merge(g_ulp[t]), ga.Merge(g_abs[t]);
    nonpos += per[t].nonpositive_e, bound += per[t].bound_violations;
  }
  char buf[240];
  std::snprintf(buf, sizeof buf,
                "%zu bit patterns: E max %.3f ulp (bits %016" PRIx64
                "), G max %.3f ulp where |G|>=1, max |G - G_exact| %.3g where |G| < 1",
                bits.size(), eu.value, eu.where, gu.value, ga.value);
  Check(nonpos == 0 && eu.value <= 2.0 && gu.value <= 2.0 && ga.value <= 0x1p-51,
        "noise f64: E = -log(u) and G vs __float128", buf);
  Check(bound == 0, "noise f64: G <= GumbelUpperBoundF64(bits)");
  const double g0 = GumbelFromBitsF64(0), g1 = GumbelFromBitsF64(~0ull);
  std::snprintf(buf, sizeof buf, "G(0) = %a = %.17g, G(2^64-1) = %a = %.17g; header %a, %a", g0, g0,
                g1, g1, kGumbelMinF64, kGumbelMaxF64);
  Check(g0 == kGumbelMinF64 && g1 == kGumbelMaxF64, "noise f64: extremes match the header", buf);
}

// ------------------------------------------------------------------------------------------
void TestGroupEqualsElement() {
  const uint32_t keys[][2] = {{0, 0}, {0x12345678u, 0x9abcdef0u}, {0xFFFFFFFFu, 1}};
  const uint64_t rows[] = {0, 1, 2, 255, 65537, 0xFFFFFFFFull, 0x100000000ull, 0x123456789abull,
                           static_cast<uint64_t>(int64_t{-1})};
  std::vector<uint32_t> cols;
  for (uint32_t c = 0; c < 64; ++c) cols.push_back(c);
  for (uint32_t c : {202047u, 202048u, 262143u, 0x7FFFFFF0u}) {
    for (uint32_t d = 0; d < 16; ++d) cols.push_back((c & ~3u) + d - 8 * (c > 8));
  }
  cols.push_back(0x7FFFFFFFu);
  uint64_t mismatches = 0, checked = 0;
  for (auto& k : keys)
    for (uint64_t row : rows)
      for (uint32_t c : cols) {
        const GumbelF32x8 g = GumbelNoiseGroupF32(k[0], k[1], row, c / 8);
        const float one = GumbelNoiseF32(k[0], k[1], row, c);
        const GumbelF64x2 g64 = GumbelNoiseGroupF64(k[0], k[1], row, c / 2);
        const double one64 = GumbelNoiseF64(k[0], k[1], row, c);
        mismatches += AsBits(g.v[c % 8]) != AsBits(one);
        mismatches += AsBits(g64.v[c % 2]) != AsBits(one64);
        // and both equal the documented counter layout
        // float32: the high half from stream 2, the low half from stream 3, half c % 8 of
        // each block (bits 16 * (c % 2) of word (c % 8) / 2)
        const Philox4x32Block hb = Philox4x32_10(
            Philox4x32Block{
                {c / 8, static_cast<uint32_t>(row), static_cast<uint32_t>(row >> 32), 2}},
            k[0], k[1]);
        const Philox4x32Block lb = Philox4x32_10(
            Philox4x32Block{
                {c / 8, static_cast<uint32_t>(row), static_cast<uint32_t>(row >> 32), 3}},
            k[0], k[1]);
        const uint32_t shift = 16 * (c % 2);
        const uint32_t bits32 = ((hb.v[(c % 8) / 2] >> shift) & 0xFFFFu) << 16 |
                                ((lb.v[(c % 8) / 2] >> shift) & 0xFFFFu);
        mismatches += AsBits(GumbelFromBitsF32(bits32)) != AsBits(one);
        // the high half bounds the noise over every low half
        mismatches += !(AsFloat(AsBits(one)) <= GumbelUpperBoundHighF32(bits32 >> 16));
        const Philox4x32Block b2 = Philox4x32_10(
            Philox4x32Block{
                {c / 2, static_cast<uint32_t>(row), static_cast<uint32_t>(row >> 32), 1}},
            k[0], k[1]);
        const uint64_t w = static_cast<uint64_t>(b2.v[2 * (c % 2) + 1]) << 32 | b2.v[2 * (c % 2)];
        mismatches += AsBits(GumbelFromBitsF64(w)) != AsBits(one64);
        checked += 5;
      }
  char buf[120];
  std::snprintf(buf, sizeof buf, "%" PRIu64 " comparisons, %" PRIu64 " mismatches", checked,
                mismatches);
  Check(mismatches == 0, "group functions == per-element functions == documented counter layout",
        buf);
}

// ------------------------------------------------------------------------------------------
// Pinned values: the noise of a few (key, row, col) in hex. A change here changes every sample
// the sampler draws: update only on purpose (and say so in the change).
void TestPinned() {
  struct Pin {
    uint32_t k0, k1;
    uint64_t row;
    uint32_t col;
    uint32_t g32;
    uint64_t g64;
  };
  const Pin pins[] = {
      {0x00000000u, 0x00000000u, 0x0ull, 0u, 0x3faba71au, 0xbfee66e49f80cd9eull},
      {0x00000000u, 0x00000000u, 0x0ull, 1u, 0x3ff6225au, 0x3fe93f31c750a5ecull},
      {0x00000000u, 0x00000000u, 0x0ull, 3u, 0x3f737574u, 0x3fe5d12f886bca36ull},
      {0x00000000u, 0x00000000u, 0x7ull, 5u, 0x3ed28bf9u, 0x3fd19fcea922663dull},
      {0x00000000u, 0x00000000u, 0x7ull, 202047u, 0xbe2b01f6u, 0x3fd21e24b174fe5full},
      {0x00000000u, 0x00000000u, 0x100000003ull, 2u, 0x3eaa7259u, 0xbff32fe42b46d375ull},
      {0x00000000u, 0x00000000u, 0x100000003ull, 2147483647u, 0x3eff04aeu, 0x3ffdd6e8a90058b1ull},
      {0x12345678u, 0x9abcdef0u, 0x0ull, 0u, 0xbee24d29u, 0x3fd1309b37455d4eull},
      {0x12345678u, 0x9abcdef0u, 0x0ull, 1u, 0xbe089716u, 0x3ff81a0738f87919ull},
      {0x12345678u, 0x9abcdef0u, 0x0ull, 3u, 0xbe1af8c6u, 0x3fe87b09b8ec6448ull},
      {0x12345678u, 0x9abcdef0u, 0x7ull, 5u, 0xbf8e9670u, 0x3fe32bf15b8de78full},
      {0x12345678u, 0x9abcdef0u, 0x7ull, 202047u, 0xbfc59fbcu, 0x3fe64b8dbd763fe2ull},
      {0x12345678u, 0x9abcdef0u, 0x100000003ull, 2u, 0xbfa3de15u, 0x3f9e556720041b9full},
      {0x12345678u, 0x9abcdef0u, 0x100000003ull, 2147483647u, 0x3f4c4408u, 0x3feba6196c897f22ull},
      {0xffffffffu, 0xffffffffu, 0x0ull, 0u, 0xbee0a58bu, 0xbfddc9185918d280ull},
      {0xffffffffu, 0xffffffffu, 0x0ull, 1u, 0x40034cfeu, 0x3ff7b51739235789ull},
      {0xffffffffu, 0xffffffffu, 0x0ull, 3u, 0xbece9f08u, 0xbfde0f6362af94acull},
      {0xffffffffu, 0xffffffffu, 0x7ull, 5u, 0x3f64f173u, 0xbfdeddac39b031baull},
      {0xffffffffu, 0xffffffffu, 0x7ull, 202047u, 0x3ce7b2b6u, 0xbfda42c2cb4d7eccull},
      {0xffffffffu, 0xffffffffu, 0x100000003ull, 2u, 0xbfa56228u, 0xbfb967418a240686ull},
      {0xffffffffu, 0xffffffffu, 0x100000003ull, 2147483647u, 0x3e223810u, 0x3fd874931af2b0fcull},
  };
  int bad = 0;
  for (const Pin& p : pins) {
    const uint32_t g32 = AsBits(GumbelNoiseF32(p.k0, p.k1, p.row, p.col));
    const uint64_t g64 = AsBits(GumbelNoiseF64(p.k0, p.k1, p.row, p.col));
    if (g32 != p.g32 || g64 != p.g64) {
      ++bad;
      std::printf("    key %08x %08x row %" PRIu64 " col %u: f32 %08x (pinned %08x) f64 %016" PRIx64
                  " (pinned %016" PRIx64 ")\n",
                  p.k0, p.k1, p.row, p.col, g32, p.g32, g64, p.g64);
    }
  }
  char buf[80];
  std::snprintf(buf, sizeof buf, "%zu pins, %d differ", sizeof pins / sizeof pins[0], bad);
  Check(bad == 0, "pinned noise values (generator + transform unchanged, flag-independent)", buf);
}

// FNV-1a digests of the noise over many bit patterns and of the logs over many inputs, pinned:
// the same numbers must come out of every compiler and flag set (-O0..-O3, -march=native,
// -ffp-contract=fast, clang) and out of the GPU (tests/cuda/gumbel_check.cu compares directly).
struct Digests {
  uint64_t noise32, noise64, log32, log64;
};
Digests ComputeDigests() {
  auto mix = [](uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xFF)) * 0x100000001B3ull;
    return h;
  };
  Digests d{0xCBF29CE484222325ull, 0xCBF29CE484222325ull, 0xCBF29CE484222325ull,
            0xCBF29CE484222325ull};
  for (uint64_t b = 0; b < (1ull << 32); b += 1021)
    d.noise32 = mix(d.noise32, AsBits(GumbelFromBitsF32(static_cast<uint32_t>(b))));
  d.noise32 = mix(d.noise32, AsBits(GumbelFromBitsF32(0xFFFFFFFFu)));
  for (uint64_t i = 0; i < (1u << 20); ++i) {
    const uint64_t b = i * 0x9E3779B97F4A7C15ull;  // spread over 64 bits
    d.noise64 = mix(d.noise64, AsBits(GumbelFromBitsF64(b)));
    d.noise64 = mix(d.noise64, AsBits(GumbelFromBitsF64(b >> (i % 64))));
  }
  for (uint32_t bb = AsBits(FLT_MIN); bb < AsBits(FLT_MAX); bb += 4093) {
    d.log32 = mix(d.log32, AsBits(GumbelLogF32(AsFloat(bb))));
    if (AsFloat(bb) >= 0x1p-20f && AsFloat(bb) <= 0x1p100f)  // log1p's domain: 1 + x normal
      d.log32 = mix(d.log32, AsBits(GumbelLog1pF32(AsFloat(bb) - 1.0f)));
  }
  for (uint64_t i = 0; i < (1u << 20); ++i) {
    uint64_t xb = (1 + (i * 2654435761u) % 2046) << 52 | ((i * 0x9E3779B97F4A7C15ull) >> 12);
    double x;
    std::memcpy(&x, &xb, 8);
    d.log64 = mix(d.log64, AsBits(GumbelLogF64(x)));
  }
  return d;
}
void TestDigests() {
  const Digests d = ComputeDigests();
  const Digests pinned = {0x684354c453b8f544ull, 0x1cbb1bbaf913e66cull, 0xf0ae51cd8280e5c2ull,
                          0xc53f1c3d8eef4912ull};
  char buf[200];
  std::snprintf(buf, sizeof buf, "noise32 %016" PRIx64 " noise64 %016" PRIx64 " log32 %016" PRIx64
                " log64 %016" PRIx64, d.noise32, d.noise64, d.log32, d.log64);
  Check(d.noise32 == pinned.noise32 && d.noise64 == pinned.noise64 && d.log32 == pinned.log32 &&
            d.log64 == pinned.log64,
        "digests of noise and logs == pinned (compiler/flag independent)", buf);
}

// ------------------------------------------------------------------------------------------
// KS and chi-square of 10^6 float32 and float64 noise values against F(g) = exp(-exp(-g)),
// thresholds fixed in advance (alpha = 1e-3), deterministic keys.
void TestDistribution() {
  const int n = 1000000;
  const double ks_limit = 1.9495;                  // sqrt(n) * D, alpha = 0.001
  const int bins = 1000;
  const double chi2_limit = 1142.0;                // chi-square(999), upper 0.001 quantile
  for (int f64 = 0; f64 < 2; ++f64) {
    std::vector<double> cdf(n);
    double sum = 0, sum2 = 0;
    int far_tail = 0;
    for (int i = 0; i < n; ++i) {
      const uint64_t row = static_cast<uint64_t>(i / 1000);
      const uint32_t col = static_cast<uint32_t>(i % 1000) * 7919u;  // spread over the vocab
      const double g = f64 ? GumbelNoiseF64(0xC0FFEEu, 0xBADF00Du, row, col)
                           : GumbelNoiseF32(0xC0FFEEu, 0xBADF00Du, row, col);
      cdf[i] = std::exp(-std::exp(-g));
      sum += g, sum2 += g * g;
      far_tail += g > 10.0;
    }
    std::vector<int> hist(bins, 0);
    for (double c : cdf) hist[std::min(bins - 1, static_cast<int>(c * bins))]++;
    double chi2 = 0;
    const double expect = static_cast<double>(n) / bins;
    for (int h : hist) chi2 += (h - expect) * (h - expect) / expect;
    std::sort(cdf.begin(), cdf.end());
    double d = 0;
    for (int i = 0; i < n; ++i)
      d = std::max(d, std::max(cdf[i] - static_cast<double>(i) / n,
                               static_cast<double>(i + 1) / n - cdf[i]));
    const double mean = sum / n, var = sum2 / n - mean * mean;
    const double p_tail = -std::expm1(-std::exp(-10.0));  // P(G > 10) = 4.54e-5
    const double tail_z = (far_tail - n * p_tail) / std::sqrt(n * p_tail);
    char buf[240];
    std::snprintf(buf, sizeof buf,
                  "n=1e6: sqrt(n)*KS D = %.3f (< %.3f), chi2(999) = %.1f (< %.0f), mean %.5f "
                  "(0.57722), var %.5f (1.64493), #(G>10) = %d (z %.2f)",
                  std::sqrt(static_cast<double>(n)) * d, ks_limit, chi2, chi2_limit, mean, var,
                  far_tail, tail_z);
    const bool ok = std::sqrt(static_cast<double>(n)) * d < ks_limit && chi2 < chi2_limit &&
                    std::fabs(mean - 0.5772156649) < 0.006 &&
                    std::fabs(var - 1.6449340668) < 0.02 && std::fabs(tail_z) < 4.0;
    Check(ok, f64 ? "distribution f64 vs Gumbel CDF" : "distribution f32 vs Gumbel CDF", buf);
  }
  // Neighbouring columns, rows and keys uncorrelated (|r| < 5 / sqrt(n)).
  const int m = 200000;
  double sxy[3] = {0, 0, 0}, sx = 0, sxx = 0;
  for (int i = 0; i < m; ++i) {
    const uint32_t col = static_cast<uint32_t>(i);
    const double g = GumbelNoiseF32(1u, 2u, 5, col);
    sx += g, sxx += g * g;
    sxy[0] += g * GumbelNoiseF32(1u, 2u, 5, col + 1);
    sxy[1] += g * GumbelNoiseF32(1u, 2u, 6, col);
    sxy[2] += g * GumbelNoiseF32(1u, 3u, 5, col);
  }
  const double mu = sx / m, var = sxx / m - mu * mu;
  double worst = 0;
  for (double s : sxy) worst = std::max(worst, std::fabs((s / m - mu * mu) / var));
  char buf[120];
  std::snprintf(buf, sizeof buf, "max |corr| %.4f over col+1, row+1, key+1 (limit %.4f)", worst,
                5 / std::sqrt(static_cast<double>(m)));
  Check(worst < 5 / std::sqrt(static_cast<double>(m)), "noise uncorrelated across col/row/key",
        buf);
}

// NoisyKeyReaches(r, z, col, floor) against the noisy key: where it reaches, the same key;
// where it skips, a key below the floor (so the skipped token neither wins nor ties). Floors at
// the key itself and one step either side of it (the strict comparison), another token's key,
// the lowest, at the key of z plus the bound and one above it; z over a wide range and the
// infinities and NaN; counter rows of one and two words.
template <Format F>
void NoisyKeyReachesCases(std::mt19937_64& rng, int64_t* bad, int64_t* skipped,
                          int64_t* reached) {
  using Policy = GumbelKeyPolicy<F>;
  using Noise = typename Policy::Noise;
  using Key = typename Policy::Key;
  typename Policy::Row r{};
  r.k0 = static_cast<uint32_t>(rng());
  r.k1 = static_cast<uint32_t>(rng());
  r.counter_row = rng() % 2 == 0 ? rng() % 4096 : rng();  // the counter's high word too
  r.col_offset = rng() % 2 == 0 ? 0 : static_cast<uint32_t>(rng() % 100000);
  std::uniform_real_distribution<double> zs(-40.0, 40.0), near(-4.0, 4.0);
  // The noisy key from the noise's own functions (sample_filter.h's NoisyKey is
  // NoisyKeyReaches with no floor, so it is no reference).
  const auto key_of = [&](Noise z, int64_t col) {
    const uint32_t c = r.col_offset + static_cast<uint32_t>(col);
    if constexpr (F == Format::kF64) {
      return Policy::Row::KeyOf(
          gumbel_detail::Add(z, GumbelNoiseF64(r.k0, r.k1, r.counter_row, c)));
    } else {
      return Policy::Row::KeyOf(
          gumbel_detail::Add(z, GumbelNoiseF32(r.k0, r.k1, r.counter_row, c)));
    }
  };
  const Noise specials[] = {static_cast<Noise>(INFINITY), -static_cast<Noise>(INFINITY),
                            static_cast<Noise>(NAN), static_cast<Noise>(0)};
  for (int i = 0; i < 20000; ++i) {
    const Noise z = i < 4 ? specials[i] : static_cast<Noise>(zs(rng));
    const int64_t col = static_cast<int64_t>(rng() % 202048);
    const Key truth = key_of(z, col);
    const Key other = key_of(static_cast<Noise>(z + near(rng)),
                             static_cast<int64_t>(rng() % 202048));
    // The key of z plus the noise's bound, as the skip computes it: the floors at it and one
    // above (where the skip starts) test the strict comparison for finite z as well.
    const uint32_t c = r.col_offset + static_cast<uint32_t>(col);
    Noise bound;
    if constexpr (F == Format::kF64) {
      bound = GumbelUpperBoundF64(GumbelBitsF64(GumbelBitsPairF64(r.k0, r.k1, r.counter_row,
                                                                  c >> 1), c & 1u));
    } else {
      bound = GumbelUpperBoundHighF32(
          GumbelHalf(GumbelBitsHighF32(r.k0, r.k1, r.counter_row, c >> 3), c & 7u));
    }
    const Key bound_key = Policy::Row::KeyOf(gumbel_detail::Add(z, bound));
    Key floors[7] = {truth, truth, truth, other, KeyLimits<Key>::kLowest, bound_key, bound_key};
    if (truth < std::numeric_limits<Key>::max()) floors[1] = truth + 1;
    if (truth > std::numeric_limits<Key>::lowest()) floors[2] = truth - 1;
    if (bound_key < std::numeric_limits<Key>::max()) floors[6] = bound_key + 1;
    for (const Key floor : floors) {
      Key key = 0;
      if (NoisyKeyReaches<F>(r, z, col, floor, key)) {
        ++*reached;
        *bad += key != truth;
      } else {
        ++*skipped;
        *bad += !(truth < floor);
      }
    }
  }
}

void TestNoisyKeyReaches() {
  std::mt19937_64 rng(42);
  int64_t bad = 0, skipped = 0, reached = 0;
  for (int rep = 0; rep < 8; ++rep) {
    NoisyKeyReachesCases<Format::kF32>(rng, &bad, &skipped, &reached);
    NoisyKeyReachesCases<Format::kF16>(rng, &bad, &skipped, &reached);  // float32 noise
    NoisyKeyReachesCases<Format::kF64>(rng, &bad, &skipped, &reached);
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%" PRId64 " skipped, %" PRId64 " reached, %" PRId64 " wrong",
                skipped, reached, bad);
  Check(bad == 0 && skipped > 0 && reached > 0,
        "draw skip: NoisyKeyReaches == the noisy key where it reaches, below the floor where not",
        buf);
}

}  // namespace

int main(int argc, char** argv) {
  bool exhaustive = false, print_pins = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--exhaustive") == 0) exhaustive = true;
    if (std::strcmp(argv[i], "--print-pins") == 0) print_pins = true;
  }
  if (print_pins) {  // regenerates the table in TestPinned (deliberate generator changes only)
    const uint32_t keys[][2] = {{0, 0}, {0x12345678u, 0x9abcdef0u}, {0xFFFFFFFFu, 0xFFFFFFFFu}};
    const struct {
      uint64_t row;
      uint32_t col;
    } where[] = {{0, 0}, {0, 1}, {0, 3}, {7, 5}, {7, 202047}, {0x100000003ull, 2},
                 {0x100000003ull, 0x7FFFFFFFu}};
    for (auto& k : keys)
      for (auto& w : where) {
          const uint64_t r = w.row;
          const uint32_t c = w.col;
          std::printf("    {0x%08xu, 0x%08xu, 0x%" PRIx64 "ull, %uu, 0x%08xu, 0x%016" PRIx64
                      "ull},\n",
                      k[0], k[1], r, c, AsBits(GumbelNoiseF32(k[0], k[1], r, c)),
                      AsBits(GumbelNoiseF64(k[0], k[1], r, c)));
      }
    return 0;
  }
  TestPhiloxKat();
  TestUniformEdges();
  TestGroupEqualsElement();
  TestPinned();
  TestDigests();
  TestLogF32(exhaustive);
  TestLogF64(exhaustive);
  TestHighBoundF32();
  TestLowBoundF32();
  TestNoiseF32(exhaustive);
  TestNoiseF64(exhaustive);
  TestDistribution();
  TestNoisyKeyReaches();
  if (g_failures == 0) {
    std::printf("gumbel_test: PASS\n");
    return 0;
  }
  std::printf("gumbel_test: FAIL (%d failures)\n", g_failures);
  return 1;
}
