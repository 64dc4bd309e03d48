// Host test of ffi/exact_math.h's own exp and fixed-point masses (SPEC §1f): ExpF32 equals the
// correctly rounded exp over every float32 x in [-104, 0] (the sampler's z - z_max; with
// --exhaustive every float in [-104, 89], by default every 16th positive one) and outside that
// range gives +0, +inf or NaN, and it is non-decreasing over consecutive floats; the refinement
// alone is correct wherever the reference needed quad precision (a superset of the inputs that
// reach it); MassFixed equals floor(e * 2^32) for every float e in [2^-40, 1] (and sampled
// below), and MassOfExponent(d) equals MassFixed(ExpF32(d)) for every float d in [-24, 0];
// MassBelow equals the exact comparison prefix < p * total on random and adversarial inputs.
//
// The reference: glibc's exp in double (error below 1 ulp of double) decides wherever its
// rounding to float32 is the same at y (1 - 2^-40) and y (1 + 2^-40); elsewhere (about one input
// in 2^15) libquadmath's expq decides, and its distance to the nearest float32 midpoint is
// required above 2^-100 relative (expq errs by about 2^-112).
//
// Build and run (x86-64 Linux, g++ >= 9 or clang; -march=native only makes std::fma an
// instruction rather than a call, the results are the same):
//   g++ -std=c++17 -O2 -march=native -I ffi tests/cpp/exact_math_test.cc -pthread -lquadmath
//   ./a.out                # a few seconds on 2 cores
//   ./a.out --exhaustive   # also every positive float up to 89 and every pattern outside
// Prints one line per check and "exact_math_test: PASS" / "exact_math_test: FAIL (n failures)";
// exit 1 on failure.
#include "exact_math.h"
#include "cpu_mass_x86.h"

#include <quadmath.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

using namespace jax_argreduce;
using exact_detail::AsBits;
using exact_detail::AsFloat;

namespace {

int g_failures = 0;

void Check(bool ok, const char* what, const char* detail = "") {
  std::printf("%s  %s%s%s\n", ok ? "ok  " : "FAIL", what, detail[0] ? ": " : "", detail);
  if (!ok) ++g_failures;
}

// Runs fn(begin, end) over [begin, end) in contiguous chunks on all cores.
void ParallelFor(uint64_t begin, uint64_t end, const std::function<void(uint64_t, uint64_t)>& fn) {
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  const uint64_t n = end - begin;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back(fn, begin + n * t / threads, begin + n * (t + 1) / threads);
  }
  for (auto& th : pool) th.join();
}

// Float32 patterns in increasing order of value: key k <-> bits (negative floats reversed).
uint32_t BitsOfKey(uint32_t key) { return key >= 0x80000000u ? key & 0x7FFFFFFFu : ~key; }
uint32_t KeyOfBits(uint32_t bits) {
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

// Distance of q to the nearest float32 rounding midpoint, relative to q (q > 0, finite float
// range or below).
double MidpointDistance(__float128 q) {
  const float f = static_cast<float>(q);
  const __float128 fq = static_cast<__float128>(f);
  const __float128 up = static_cast<__float128>(std::nextafter(f, INFINITY));
  const __float128 down = static_cast<__float128>(std::nextafter(f, 0.0f));
  const __float128 d = std::min(fabsq(q - (fq + up) / 2), fabsq(q - (fq + down) / 2));
  return static_cast<double>(d / q);
}

struct RefStats {
  uint64_t quad = 0;          // inputs that needed quad precision
  double min_distance = 1.0;  // the closest exp(x) comes to a midpoint, relative
};

// exp(x) correctly rounded to float32 (x in [-104, 89]).
float RefExpF32(float x, RefStats* stats, bool* used_quad) {
  const double y = std::exp(static_cast<double>(x));
  const float lo = static_cast<float>(y * (1 - 0x1p-40));
  const float hi = static_cast<float>(y * (1 + 0x1p-40));
  *used_quad = false;
  if (AsBits(lo) == AsBits(hi)) return lo;
  *used_quad = true;
  const __float128 q = expq(static_cast<__float128>(x));
  ++stats->quad;
  if (static_cast<float>(q) != INFINITY) {
    stats->min_distance = std::min(stats->min_distance, MidpointDistance(q));
  }
  return static_cast<float>(q);  // libgcc's conversion: round to nearest even, subnormals kept
}

// Every stride-th float32 x in [lo, hi] against the reference, and monotonicity over them.
void CheckExpRange(float lo, float hi, uint32_t stride) {
  const uint32_t key_lo = KeyOfBits(AsBits(lo));
  const uint64_t count = (KeyOfBits(AsBits(hi)) - key_lo) / stride + 1;
  std::mutex mu;
  uint64_t mismatches = 0, refined_mismatches = 0, non_monotone = 0;
  uint32_t first_bad = 0;
  RefStats stats;
  auto x_of = [&](uint64_t i) {
    return AsFloat(BitsOfKey(static_cast<uint32_t>(key_lo + i * stride)));
  };
  ParallelFor(0, count, [&](uint64_t b, uint64_t e) {
    uint64_t bad = 0, bad_refined = 0, non_mono = 0;
    uint32_t first = 0;
    RefStats s;
    float prev = ExpF32(x_of(b == 0 ? 0 : b - 1));
    for (uint64_t i = b; i < e; ++i) {
      const float x = x_of(i);
      bool used_quad;
      const float ref = RefExpF32(x, &s, &used_quad);
      const float got = ExpF32(x);
      if (AsBits(got) != AsBits(ref) && bad++ == 0) first = AsBits(x);
      // Every input the refinement sees (fast path undecided: within 2^-49 of a midpoint) is one
      // of these (within 2^-40): check the refinement itself on all of them.
      if (used_quad && AsBits(exact_detail::ExpF32Refined(x)) != AsBits(ref)) ++bad_refined;
      if (got < prev) ++non_mono;
      prev = got;
    }
    std::lock_guard<std::mutex> lock(mu);
    if (bad != 0 && mismatches == 0) first_bad = first;
    mismatches += bad;
    refined_mismatches += bad_refined;
    non_monotone += non_mono;
    stats.quad += s.quad;
    stats.min_distance = std::min(stats.min_distance, s.min_distance);
  });
  char buf[256];
  char what[96];
  std::snprintf(what, sizeof what, "x in [%g, %g], stride %u", lo, hi, stride);
  std::snprintf(buf, sizeof buf, "%s: %" PRIu64 " floats, %" PRIu64 " mismatches (first x 0x%08x)",
                what, count, mismatches, first_bad);
  Check(mismatches == 0, "ExpF32 == correctly rounded exp", buf);
  std::snprintf(buf, sizeof buf, "%" PRIu64 " inputs near a midpoint, %" PRIu64 " mismatches",
                stats.quad, refined_mismatches);
  Check(refined_mismatches == 0 && stats.quad > 0, "ExpF32Refined == reference near midpoints",
        buf);
  std::snprintf(buf, sizeof buf, "closest exp(x) to a float32 midpoint: 2^%.1f relative (the "
                "refinement errs by ~2^-88; quad by ~2^-112)", std::log2(stats.min_distance));
  Check(stats.min_distance > 0x1p-80, "every exp(x) is far enough from a midpoint", buf);
  std::snprintf(buf, sizeof buf, "%s: %" PRIu64 " decreases", what, non_monotone);
  Check(non_monotone == 0, "ExpF32 non-decreasing over consecutive floats", buf);
}

// Outside [-104, 89]: +0 below (down to -inf), +inf above (up to +inf), NaN for every NaN; every
// stride-th pattern (stride odd: every low bit pattern occurs).
void CheckExpOutside(uint32_t stride) {
  std::atomic<uint64_t> bad{0};
  ParallelFor(0, ((1ull << 32) - 1) / stride + 1, [&](uint64_t b, uint64_t e) {
    uint64_t local = 0;
    for (uint64_t i = b; i < e; ++i) {
      const float x = AsFloat(static_cast<uint32_t>(i * stride));
      if (x >= -104.0f && x <= 89.0f) continue;
      const float y = ExpF32(x);
      const bool ok = x != x ? y != y : (x < 0 ? AsBits(y) == 0u : AsBits(y) == 0x7F800000u);
      local += ok ? 0 : 1;
    }
    bad += local;
  });
  char buf[96];
  std::snprintf(buf, sizeof buf, "%" PRIu64 " wrong", bad.load());
  Check(bad == 0, "ExpF32 outside [-104, 89]: +0 below, +inf above, NaN -> NaN", buf);
  const bool specials = AsBits(ExpF32(-INFINITY)) == 0u &&
                        AsBits(ExpF32(INFINITY)) == 0x7F800000u &&
                        AsBits(ExpF32(-0.0f)) == 0x3F800000u &&
                        AsBits(ExpF32(0.0f)) == 0x3F800000u &&
                        AsBits(ExpF32(-0x1p-149f)) == 0x3F800000u &&
                        AsBits(ExpF32(AsFloat(0xC2CFF1B4u))) == 1u &&  // 0.5000003 * 2^-149
                        AsBits(ExpF32(AsFloat(0xC2CFF1B5u))) == 0u &&  // 0.4999965 * 2^-149
                        AsBits(ExpF32(AsFloat(0x42B17217u))) == 0x7F7FFF84u &&  // below FLT_MAX
                        AsBits(ExpF32(AsFloat(0x42B17218u))) == 0x7F800000u;   // overflows
  Check(specials, "ExpF32 special values (-inf, +inf, +-0, tiny, underflow/overflow edges)");
}

// MassFixed(e) == floor(e * 2^32) (through double: e * 2^32 is exact) for every float in
// [2^-40, 1] and every 97th below.
void CheckMassFixed() {
  std::atomic<uint64_t> bad{0};
  const uint64_t below = AsBits(0x1p-40f) / 97;
  ParallelFor(0, below + AsBits(1.0f) - AsBits(0x1p-40f) + 1, [&](uint64_t b, uint64_t e) {
    uint64_t local = 0;
    for (uint64_t i = b; i < e; ++i) {
      const uint64_t bits = i < below ? i * 97 : AsBits(0x1p-40f) + (i - below);
      const float f = AsFloat(static_cast<uint32_t>(bits));
      const double ref = std::floor(std::ldexp(static_cast<double>(f), 32));
      local += MassFixed(f) == static_cast<uint64_t>(ref) ? 0 : 1;
    }
    bad += local;
  });
  char buf[96];
  std::snprintf(buf, sizeof buf, "%" PRIu64 " wrong", bad.load());
  Check(bad == 0, "MassFixed == floor(e * 2^32), every float in [2^-40, 1], every 97th below", buf);
  Check(MassFixed(1.0f) == (1ull << 32) && MassFixed(-0.0f) == 0 && MassFixed(0x1p-32f) == 1 &&
            MassFixed(0x1.fffffep-33f) == 0 && MassFixed(0x1.fffffep-1f) == 0xFFFFFF00ull &&
            MassFixed(-1.0f) == 0 && MassFixed(INFINITY) == (1ull << 32),
        "MassFixed edges (1, -0, 2^-32, below 2^-32, below 1, negative, +inf)");
}

// MassOfExponent(d) == MassFixed(ExpF32(d)) for every float d in [-24, 0] (both zeros included;
// ExpF32 is checked separately: this checks the cutoff at -23, the two-conversion shortcut and
// its refinement flag), and -inf and NaN give 0.
void CheckMassOfExponent() {
  std::atomic<uint64_t> bad{0}, refined{0};
  const uint32_t lo = AsBits(-0.0f), hi = AsBits(-24.0f);
  ParallelFor(lo, uint64_t{hi} + 1, [&](uint64_t b, uint64_t e) {
    uint64_t local = 0, local_refined = 0;
    for (uint64_t i = b; i < e; ++i) {
      const float d = AsFloat(static_cast<uint32_t>(i));
      const uint64_t want = MassFixed(ExpF32(d));  // 0 below -22.18: checks the cutoff too
      local += MassOfExponent(d) == want ? 0 : 1;
      const FastMass m = MassOfExponentFast(d);
      local_refined += m.refine ? 1 : 0;
      local += m.refine || m.mass == want ? 0 : 1;
    }
    bad += local;
    refined += local_refined;
  });
  char buf[96];
  std::snprintf(buf, sizeof buf, "%" PRIu64 " wrong, %" PRIu64 " refined", bad.load(),
                refined.load());
  Check(bad == 0 && MassOfExponent(0.0f) == (1ull << 32) && MassOfExponent(-INFINITY) == 0 &&
            MassOfExponent(NAN) == 0,
        "MassOfExponent == MassFixed(ExpF32(d)), every float d in [-24, 0]", buf);
}

// MassOfExponentFastX4 (cpu_mass_x86.h, AVX2 + FMA) lane for lane equal to MassOfExponentFast
// over every float d in [-24, 0], on -inf, NaN and a few positive d, in every lane position.
void CheckMassX4() {
#if JAX_ARGREDUCE_CPU_MASS_X86
  if (!CpuHasMassX4()) {
    std::printf("skip  MassOfExponentFastX4: no AVX2 + FMA here\n");
    return;
  }
  std::atomic<uint64_t> bad{0};
  const auto check4 = [](const float* d) {
    uint64_t mass[4], refine[4], wrong = 0;
    MassOfExponentFastX4(d, mass, refine);
    for (int j = 0; j < 4; ++j) {
      const FastMass m = MassOfExponentFast(d[j]);
      wrong += m.mass == mass[j] && (m.refine ? 1u : 0u) == refine[j] ? 0 : 1;
    }
    return wrong;
  };
  const uint32_t lo = AsBits(-0.0f), hi = AsBits(-24.0f);
  const uint64_t n = uint64_t{hi} - lo + 1;
  ParallelFor(0, (n + 3) / 4, [&](uint64_t b, uint64_t e) {
    uint64_t local = 0;
    for (uint64_t i = b; i < e; ++i) {
      float d[4];
      for (int j = 0; j < 4; ++j) {
        d[j] = AsFloat(static_cast<uint32_t>(std::min<uint64_t>(lo + 4 * i + j, hi)));
      }
      local += check4(d);
    }
    bad += local;
  });
  const float specials[] = {-INFINITY, NAN, -NAN, 0.0f, -0.0f, 1.0f, 0x1p-30f, -23.0f,
                            -0x1.7000002p+4f, -22.999998f, -0x1p-25f, -0x1.d2259ap+3f};
  const int count = static_cast<int>(sizeof specials / sizeof specials[0]);
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < 4; ++j) {
      float d[4] = {-1.0f, -2.0f, -3.0f, -4.0f};
      d[j] = specials[i];
      bad += check4(d);
    }
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "%" PRIu64 " lanes wrong", bad.load());
  Check(bad == 0, "MassOfExponentFastX4 == MassOfExponentFast, every float d in [-24, 0]", buf);
#else
  std::printf("skip  MassOfExponentFastX4: not x86-64\n");
#endif
}

// prefix < p * total, exactly in quad: p * total has at most 24 + 53 = 77 significant bits.
bool RefBelow(uint64_t prefix, float p, uint64_t total) {
  return static_cast<__float128>(prefix) <
         static_cast<__float128>(p) * static_cast<__float128>(total);
}

void CheckMassBelow() {
  std::mt19937_64 rng(42);
  uint64_t n = 0, bad = 0;
  auto check = [&](uint64_t prefix, float p, uint64_t total) {
    ++n;
    if (MassBelow(prefix, p, total) != RefBelow(prefix, p, total)) {
      if (bad++ < 5) {
        std::printf("    MassBelow(%" PRIu64 ", %a, %" PRIu64 ") wrong\n", prefix, p, total);
      }
    }
  };
  // prefix around floor / ceil of p * total (the boundary), and at 0, total, random.
  auto around = [&](float p, uint64_t total) {
    const __float128 exact = static_cast<__float128>(p) * static_cast<__float128>(total);
    const uint64_t fl = static_cast<uint64_t>(floorq(exact));
    for (int64_t d = -2; d <= 3; ++d) {
      const int64_t v = static_cast<int64_t>(fl) + d;
      if (v >= 0 && static_cast<uint64_t>(v) < (1ull << 53)) {
        check(static_cast<uint64_t>(v), p, total);
      }
    }
    check(0, p, total);
    check(total, p, total);
    if (total != 0) check(rng() % total, p, total);
  };
  const uint64_t kTotalMax = (1ull << 53) - 1;
  for (int i = 0; i < 1000000; ++i) {
    // p: uniform bits in (0, 1] (mostly tiny exponents), or uniform value, or a power of two.
    float p;
    switch (i % 4) {
      case 0: p = AsFloat(1u + static_cast<uint32_t>(rng() % AsBits(1.0f))); break;
      case 1: p = std::max(0x1p-24f, static_cast<float>((rng() >> 40) * 0x1p-24)); break;
      case 2: p = std::ldexp(1.0f, -static_cast<int>(rng() % 150)); break;
      default:  // 1, or just below 1
        p = i % 8 == 3 ? 1.0f : AsFloat(0x3F7FFFFFu - static_cast<uint32_t>(rng() % 64));
    }
    const int bits = 1 + static_cast<int>(rng() % 53);
    uint64_t total = rng() >> (64 - bits);
    if (i % 16 == 5) total = kTotalMax - rng() % 4;
    if (i % 16 == 7) total = 1ull << (rng() % 53);
    if (i % 16 == 9) total = 1ull << 32;  // the mass of one token
    around(p, total);
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "%" PRIu64 " comparisons, %" PRIu64 " wrong", n, bad);
  Check(bad == 0, "MassBelow == exact prefix < p * total (random, boundaries, powers of two)",
        buf);
  Check(!MassBelow(0, 0x1p-149f, 0) && MassBelow(0, 0x1p-149f, 1) && !MassBelow(1, 0x1p-149f, 1) &&
            MassBelow(kTotalMax - 1, 1.0f, kTotalMax) && !MassBelow(kTotalMax, 1.0f, kTotalMax) &&
            !MassBelow(3, 0.5f, 6) && MassBelow(2, 0.5f, 5) && !MassBelow(3, 0.5f, 5),
        "MassBelow edges (tiny p, p = 1 at 2^53 - 1, ties)");
}

}  // namespace

int main(int argc, char** argv) {
  const bool exhaustive = argc > 1 && std::strcmp(argv[1], "--exhaustive") == 0;
  CheckMassFixed();
  CheckMassOfExponent();
  CheckMassX4();
  CheckMassBelow();
  CheckExpOutside(exhaustive ? 1 : 4099);
  CheckExpRange(-104.0f, 0.0f, 1);  // every float: the sampler's range
  CheckExpRange(0.0f, 89.0f, exhaustive ? 1 : 16);
  if (g_failures == 0) {
    std::printf("exact_math_test: PASS\n");
    return 0;
  }
  std::printf("exact_math_test: FAIL (%d failures)\n", g_failures);
  return 1;
}
