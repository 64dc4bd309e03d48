// Standalone correctness test + benchmark of ffi/cpu_row_reduce.h (no XLA, no Python):
//   g++ -O3 -std=c++17 -I ffi benchmarks/cpu_row_reduce_bench.cc -o /tmp/cpu_row_reduce_bench -lpthread
//   (bounds: add -O1 -g -fsanitize=address,undefined and run --test)
//   /tmp/cpu_row_reduce_bench            # tests (every ISA path this CPU has) + timings
//   /tmp/cpu_row_reduce_bench --test     # tests only (exit 1 on any mismatch)
//   /tmp/cpu_row_reduce_bench --bench    # timings only
// Correctness: every path (scalar, portable, avx2, avx512, the rows entry point, ParallelForRows)
// against the reference two-pass loop over OrderedKey (order.h), for f16/bf16/f32/f64 x
// argmax/argmin, on random and special-value rows (NaN anywhere, ties, ±0, ±inf, subnormals,
// lowest values, all-equal rows), lengths 1..300, around block and vector boundaries and up to
// 10^5, at unaligned starts. Timing: ns/element, median of repeated calls on one array (the way
// `timeit np.argmax(a)` measures numpy), old scalar loop vs the new dispatch.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu_row_reduce.h"
#include "order.h"

using namespace jax_argreduce;

namespace {

// ---- reference: the old handler's two passes (max key, then its first index) ----------------
template <Format F, bool kIsMin>
int64_t Reference(const typename FormatTraits<F>::Bits* row, int64_t cols) {
  using Key = typename FormatTraits<F>::Key;
  Key best = KeyLimits<Key>::kLowest;
  for (int64_t c = 0; c < cols; ++c) {
    const Key key = OrderedKey<F, kIsMin>(row[c]);
    best = key > best ? key : best;
  }
  int64_t c = 0;
  while (OrderedKey<F, kIsMin>(row[c]) != best) ++c;
  return c;
}

// The old handler's row loop, as it was compiled (for the timing baseline).
template <Format F, bool kIsMin, class OutT>
__attribute__((noinline)) void OldRows(const typename FormatTraits<F>::Bits* x, int64_t rows,
                                       int64_t cols, OutT* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = static_cast<OutT>(Reference<F, kIsMin>(x + r * cols, cols));
}

// ---- value generation ---------------------------------------------------------------------
uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
uint16_t F32ToF16(float f) {  // round to nearest even, with subnormals
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t mag = u & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);
  if (mag >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow -> inf
  if (mag < 0x38800000u) {  // subnormal half (or zero)
    const float a = std::fabs(f) * 16777216.0f;  // / 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a)));
  }
  uint32_t m = mag - 0x38000000u;  // rebias 127 -> 15
  m += 0xFFFu + ((m >> 13) & 1u);
  return static_cast<uint16_t>(sign | (m >> 13));
}

template <Format F>
struct Gen;

template <>
struct Gen<Format::kF32> {
  static uint32_t FromDouble(double d) {
    float f = static_cast<float>(d);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  }
  static std::vector<uint32_t> Specials() {
    return {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u,
            0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x00000001u, 0x80000001u,
            0x00000002u, 0x80000002u, 0x007FFFFFu, 0x807FFFFFu, 0x00800000u, 0x80800000u,
            0x7F7FFFFFu, 0xFF7FFFFFu, 0x3F800000u, 0xBF800000u, 0x7F7FFFFEu, 0xFF7FFFFEu};
  }
};
template <>
struct Gen<Format::kF64> {
  static uint64_t FromDouble(double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    return u;
  }
  static std::vector<uint64_t> Specials() {
    return {0x0ull,
            0x8000000000000000ull,
            0x7FF0000000000000ull,
            0xFFF0000000000000ull,
            0x7FF8000000000000ull,
            0xFFF8000000000000ull,
            0x7FF0000000000001ull,
            0xFFF0000000000001ull,
            0x7FFFFFFFFFFFFFFFull,
            0xFFFFFFFFFFFFFFFFull,
            0x1ull,
            0x8000000000000001ull,
            0x2ull,
            0x000FFFFFFFFFFFFFull,
            0x800FFFFFFFFFFFFFull,
            0x0010000000000000ull,
            0x8010000000000000ull,
            0x7FEFFFFFFFFFFFFFull,
            0xFFEFFFFFFFFFFFFFull,
            0x3FF0000000000000ull,
            0xBFF0000000000000ull,
            0x7FEFFFFFFFFFFFFEull,
            0xFFEFFFFFFFFFFFFEull};
  }
};
template <>
struct Gen<Format::kBF16> {
  static uint16_t FromDouble(double d) { return F32ToBf16(static_cast<float>(d)); }
  static std::vector<uint16_t> Specials() {
    return {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7FFF, 0xFFFF,
            0x0001, 0x8001, 0x0002, 0x007F, 0x807F, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x3F80,
            0xBF80, 0x7F7E, 0xFF7E};
  }
};
template <>
struct Gen<Format::kF16> {
  static uint16_t FromDouble(double d) { return F32ToF16(static_cast<float>(d)); }
  static std::vector<uint16_t> Specials() {
    return {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0xFC01, 0x7FFF, 0xFFFF,
            0x0001, 0x8001, 0x0002, 0x03FF, 0x83FF, 0x0400, 0x8400, 0x7BFF, 0xFBFF, 0x3C00,
            0xBC00, 0x7BFE, 0xFBFE};
  }
};

template <Format F>
using BitsOf = typename FormatTraits<F>::Bits;

template <Format F>
bool IsNaN(BitsOf<F> b) {
  constexpr int kSignShift = 8 * sizeof(BitsOf<F>) - 1;
  const BitsOf<F> mag = static_cast<BitsOf<F>>(b & ~(BitsOf<F>{1} << kSignShift));
  return mag > FormatTraits<F>::kInfBits;
}

// Fills `row` with one of several kinds of content.
template <Format F>
void FillRow(std::mt19937_64& rng, int kind, BitsOf<F>* row, int64_t n) {
  using B = BitsOf<F>;
  const std::vector<B> sp = Gen<F>::Specials();
  std::normal_distribution<double> normal(0.0, 1.0);
  auto pick = [&](const std::vector<B>& v) { return v[rng() % v.size()]; };
  auto nonnan = [&]() {
    for (;;) {
      const B b = static_cast<B>(rng());
      if (!IsNaN<F>(b)) return b;
    }
  };
  switch (kind) {
    case 0:  // random normal
      for (int64_t i = 0; i < n; ++i) row[i] = Gen<F>::FromDouble(normal(rng));
      break;
    case 1:  // random bit patterns (NaNs, subnormals, everything)
      for (int64_t i = 0; i < n; ++i) row[i] = static_cast<B>(rng());
      break;
    case 2:  // random non-NaN bit patterns
      for (int64_t i = 0; i < n; ++i) row[i] = nonnan();
      break;
    case 3:  // specials only (many ties, NaNs, zeros of both signs)
      for (int64_t i = 0; i < n; ++i) row[i] = pick(sp);
      break;
    case 4: {  // specials without NaN
      std::vector<B> v;
      for (B b : sp)
        if (!IsNaN<F>(b)) v.push_back(b);
      for (int64_t i = 0; i < n; ++i) row[i] = pick(v);
      break;
    }
    case 5: {  // tiny alphabet: ties everywhere, including ±0 and subnormals
      const B a[] = {sp[0], sp[1], sp[10], sp[11], Gen<F>::FromDouble(1.0),
                     Gen<F>::FromDouble(-1.0)};
      const int k = 1 + static_cast<int>(rng() % 6);
      for (int64_t i = 0; i < n; ++i) row[i] = a[rng() % k];
      break;
    }
    case 6: {  // all one value (lowest, -inf, NaN, -0, ...) plus maybe one planted other
      const B v = pick(sp);
      for (int64_t i = 0; i < n; ++i) row[i] = v;
      if (rng() % 2) row[rng() % n] = pick(sp);
      break;
    }
    case 7: {  // normal values with a planted NaN (or two) somewhere
      for (int64_t i = 0; i < n; ++i) row[i] = Gen<F>::FromDouble(normal(rng));
      const std::vector<B> nans = {sp[4], sp[5], sp[6], sp[7], sp[8], sp[9]};
      const int k = 1 + static_cast<int>(rng() % 3);
      for (int j = 0; j < k; ++j) row[rng() % n] = pick(nans);
      break;
    }
    case 8: {  // non-negative / non-positive only: one side of the sign split
      const bool neg = rng() % 2;
      for (int64_t i = 0; i < n; ++i) {
        B b = nonnan();
        constexpr int kSignShift = 8 * sizeof(B) - 1;
        b = static_cast<B>(b & ~(B{1} << kSignShift));
        if (neg) b = static_cast<B>(b | (B{1} << kSignShift));
        row[i] = b;
      }
      break;
    }
    default: {  // subnormals and zeros only, both signs
      for (int64_t i = 0; i < n; ++i) {
        B b = static_cast<B>(rng() % 4);
        constexpr int kSignShift = 8 * sizeof(B) - 1;
        if (rng() % 2) b = static_cast<B>(b | (B{1} << kSignShift));
        row[i] = b;
      }
      break;
    }
  }
}
constexpr int kKinds = 10;

int g_failures = 0;
int64_t g_checks = 0;

template <Format F, bool kIsMin>
void CheckOne(const BitsOf<F>* row, int64_t n, const char* fmt, int kind) {
  const int64_t want = Reference<F, kIsMin>(row, n);
  const CpuIsa have = DetectCpuIsa();
  // Also on an exactly sized heap copy: under -fsanitize=address any read past either end traps.
  std::vector<BitsOf<F>> exact(row, row + n);
  for (int i = 0; i <= static_cast<int>(have); ++i) {
    const CpuIsa isa = static_cast<CpuIsa>(i);
    int64_t got = ArgReduceRowCpuOn<F, kIsMin>(isa, row, n);
    const int64_t got_exact = ArgReduceRowCpuOn<F, kIsMin>(isa, exact.data(), n);
    if (got == want) got = got_exact;
    ++g_checks;
    if (got != want) {
      if (++g_failures <= 20) {
        std::printf("FAIL %s %s isa=%s kind=%d cols=%lld: got %lld want %lld\n", fmt,
                    kIsMin ? "argmin" : "argmax", CpuIsaName(isa), kind,
                    static_cast<long long>(n), static_cast<long long>(got),
                    static_cast<long long>(want));
      }
    }
  }
}

template <Format F>
void TestFormat(const char* fmt, std::mt19937_64& rng) {
  using B = BitsOf<F>;
  const int64_t lanes512 = 64 / sizeof(B);
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 300; ++n) lengths.push_back(n);
  constexpr int64_t kBlockVecs = cpu_row_reduce_internal::kBlockVecs;
  for (int64_t w : {16 / static_cast<int64_t>(sizeof(B)), 32 / static_cast<int64_t>(sizeof(B)),
                    lanes512}) {
    for (int64_t blocks : {1, 2, 3, 7}) {  // block = kBlockVecs vectors of w lanes
      const int64_t b = blocks * kBlockVecs * w;
      for (int64_t d = -2; d <= 2; ++d) lengths.push_back(b + d);
      lengths.push_back(b + w / 2);
      lengths.push_back(b - w / 2);
    }
  }
  for (int i = 0; i < 40; ++i) lengths.push_back(1 + static_cast<int64_t>(rng() % 100000));
  std::vector<B> buf(100000 + 64 + 8);
  for (int64_t n : lengths) {
    const int reps = n <= 300 ? 6 : 3;
    for (int rep = 0; rep < reps; ++rep) {
      for (int kind = 0; kind < kKinds; ++kind) {
        const int64_t offset = static_cast<int64_t>(rng() % (lanes512 + 1));  // unaligned starts
        B* row = buf.data() + offset;
        FillRow<F>(rng, kind, row, n);
        CheckOne<F, false>(row, n, fmt, kind);
        CheckOne<F, true>(row, n, fmt, kind);
      }
    }
  }
  // Planted winner at every position of a short row and near block edges of longer ones.
  const int64_t block16 = kBlockVecs * 16 / static_cast<int64_t>(sizeof(B));
  const int64_t block32 = kBlockVecs * 32 / static_cast<int64_t>(sizeof(B));
  for (int64_t n : {int64_t{70}, 3 * block16 + 5, 3 * block32 + 5}) {
    std::vector<int64_t> positions;
    for (int64_t p = 0; p < std::min<int64_t>(n, 70); ++p) positions.push_back(p);
    for (int64_t p = n - 70; p < n; ++p) positions.push_back(p);
    for (int64_t block : {block16, block32}) {
      for (int64_t b = block; b < n; b += block) {
        for (int64_t d = -3; d <= 3; ++d) positions.push_back(b + d);
      }
    }
    for (int64_t p : positions) {
      if (p < 0 || p >= n) continue;
      for (int which = 0; which < 5; ++which) {
        B* row = buf.data() + 1;  // odd start
        FillRow<F>(rng, 0, row, n);
        const std::vector<B> sp = Gen<F>::Specials();
        // which: +inf, -inf, NaN, -NaN, a later copy of the max (tie)
        const B planted[] = {sp[2], sp[3], sp[4], sp[5], sp[6]};
        row[p] = planted[which];
        if (which == 4) {
          row[n - 1 - p % n] = sp[2];
          row[p] = sp[2];
        }
        CheckOne<F, false>(row, n, fmt, 100 + which);
        CheckOne<F, true>(row, n, fmt, 100 + which);
      }
    }
  }
}

// Rows entry point on a 2-D array with odd column count (unaligned row starts), int32 + int64.
template <Format F, bool kIsMin>
void TestRows(const char* fmt, std::mt19937_64& rng) {
  using B = BitsOf<F>;
  for (int64_t cols : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{33}, int64_t{257}, int64_t{1031},
                       int64_t{4099}}) {
    const int64_t rows = 37;
    std::vector<B> x(rows * cols);
    for (int64_t r = 0; r < rows; ++r) FillRow<F>(rng, r % kKinds, x.data() + r * cols, cols);
    std::vector<int32_t> o32(rows);
    std::vector<int64_t> o64(rows);
    ArgReduceRowsCpu<F, kIsMin>(x.data(), rows, cols, o32.data());
    ArgReduceRowsCpu<F, kIsMin>(x.data(), rows, cols, o64.data());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t want = Reference<F, kIsMin>(x.data() + r * cols, cols);
      ++g_checks;
      if (o32[r] != want || o64[r] != want) {
        if (++g_failures <= 20) {
          std::printf("FAIL rows %s %s cols=%lld row=%lld\n", fmt, kIsMin ? "argmin" : "argmax",
                      static_cast<long long>(cols), static_cast<long long>(r));
        }
      }
    }
  }
}

// ---- pools for ParallelForRows ---------------------------------------------------------------
struct ThreadPoolMock {  // real threads, like XLA's intra-op pool
  explicit ThreadPoolMock(int n) {
    for (int i = 0; i < n; ++i) threads.emplace_back([this] { Loop(); });
  }
  ~ThreadPoolMock() {
    {
      std::lock_guard<std::mutex> l(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : threads) t.join();
  }
  template <class Fn>
  void Schedule(Fn&& fn) {
    {
      std::lock_guard<std::mutex> l(mu);
      q.emplace_back(std::forward<Fn>(fn));
    }
    cv.notify_one();
  }
  int64_t num_threads() const { return static_cast<int64_t>(threads.size()); }
  void Loop() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return stop || !q.empty(); });
        if (q.empty()) return;
        f = std::move(q.front());
        q.pop_front();
      }
      f();
    }
  }
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> q;
  std::vector<std::thread> threads;
  bool stop = false;
};
struct InlinePool {  // Schedule runs the task at once (XLA's fallback without a pool)
  template <class Fn>
  void Schedule(Fn&& fn) { fn(); }
};
struct LatePool {  // tasks run only after the caller returned (a busy pool)
  template <class Fn>
  void Schedule(Fn&& fn) { q.emplace_back(std::forward<Fn>(fn)); }
  int64_t num_threads() const { return 4; }
  void Drain() {
    for (auto& f : q) f();
    q.clear();
  }
  std::vector<std::function<void()>> q;
};

template <class Pool>
void TestParallel(Pool& pool, const char* name, std::mt19937_64& rng) {
  const int64_t rows = 1000, cols = 777;
  std::vector<uint32_t> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r) FillRow<Format::kF32>(rng, r % kKinds, x.data() + r * cols, cols);
  std::vector<int64_t> out(rows, -1);
  ParallelForRows(pool, rows, cols, [&](int64_t b, int64_t e) {
    ArgReduceRowsCpu<Format::kF32, false>(x.data() + b * cols, e - b, cols, out.data() + b);
  }, /*min_elements=*/1000);
  for (int64_t r = 0; r < rows; ++r) {
    ++g_checks;
    if (out[r] != Reference<Format::kF32, false>(x.data() + r * cols, cols)) {
      if (++g_failures <= 20) std::printf("FAIL ParallelForRows(%s) row %lld\n", name, static_cast<long long>(r));
    }
  }
}

// ---- timing --------------------------------------------------------------------------------
struct Timing {
  double median_ns, min_ns;
};
template <class Fn>
Timing TimeNs(Fn&& fn, int reps) {
  std::vector<double> t;
  for (int i = 0; i < 3; ++i) fn();  // warm up
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t[0]};
}

template <Format F>
void BenchFormat(const char* fmt) {
  using B = BitsOf<F>;
  std::mt19937_64 rng(1234);
  const int64_t shapes[][2] = {{1, 202048}, {8, 202048}, {4096, 4096}};
  const CpuIsa have = DetectCpuIsa();
  for (const auto& sh : shapes) {
    const int64_t rows = sh[0], cols = sh[1];
    std::vector<B> x(rows * cols);
    for (int64_t r = 0; r < rows; ++r) FillRow<F>(rng, 0, x.data() + r * cols, cols);
    std::vector<int64_t> out(rows), ref(rows), ref_min(rows);
    for (int64_t r = 0; r < rows; ++r) ref_min[r] = Reference<F, true>(x.data() + r * cols, cols);
    const double elems = static_cast<double>(rows * cols);
    const int reps = rows * cols > 10000000 ? 15 : 101;
    const Timing old_t = TimeNs([&] { OldRows<F, false>(x.data(), rows, cols, ref.data()); }, std::min(reps, 15));
    const Timing new_max = TimeNs([&] { ArgReduceRowsCpu<F, false>(x.data(), rows, cols, out.data()); }, reps);
    if (out != ref) {
      std::printf("  MISMATCH argmax %s\n", fmt);
      ++g_failures;
    }
    const Timing new_min = TimeNs([&] { ArgReduceRowsCpu<F, true>(x.data(), rows, cols, out.data()); }, reps);
    if (out != ref_min) {
      std::printf("  MISMATCH argmin %s\n", fmt);
      ++g_failures;
    }
    std::printf("%-5s %5lldx%-6lld | old %6.3f %6.3f | new(%s) argmax %6.3f %6.3f  argmin %6.3f %6.3f |",
                fmt, static_cast<long long>(rows), static_cast<long long>(cols),
                old_t.median_ns / elems, old_t.min_ns / elems, CpuIsaName(SelectedCpuIsa()),
                new_max.median_ns / elems, new_max.min_ns / elems, new_min.median_ns / elems,
                new_min.min_ns / elems);
    for (int i = static_cast<int>(have); i >= static_cast<int>(CpuIsa::kScalar); --i) {
      const CpuIsa isa = static_cast<CpuIsa>(i);
      if (isa == SelectedCpuIsa()) continue;
      const Timing t = TimeNs([&] {
        for (int64_t r = 0; r < rows; ++r) out[r] = ArgReduceRowCpuOn<F, false>(isa, x.data() + r * cols, cols);
      }, std::min(reps, 15));
      std::printf(" %s %6.3f", CpuIsaName(isa), t.median_ns / elems);
      if (out != ref) {
        std::printf(" [MISMATCH]");
        ++g_failures;
      }
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool test = true, bench = true;
  if (argc > 1 && std::string(argv[1]) == "--test") bench = false;
  if (argc > 1 && std::string(argv[1]) == "--bench") test = false;
  std::printf("cpu: detected %s, selected %s\n", CpuIsaName(DetectCpuIsa()),
              CpuIsaName(SelectedCpuIsa()));
  if (test) {
    std::mt19937_64 rng(42);
    TestFormat<Format::kF32>("f32", rng);
    TestFormat<Format::kF64>("f64", rng);
    TestFormat<Format::kBF16>("bf16", rng);
    TestFormat<Format::kF16>("f16", rng);
    TestRows<Format::kF32, false>("f32", rng);
    TestRows<Format::kF32, true>("f32", rng);
    TestRows<Format::kF64, false>("f64", rng);
    TestRows<Format::kF64, true>("f64", rng);
    TestRows<Format::kBF16, false>("bf16", rng);
    TestRows<Format::kBF16, true>("bf16", rng);
    TestRows<Format::kF16, false>("f16", rng);
    TestRows<Format::kF16, true>("f16", rng);
    {
      ThreadPoolMock pool(2);
      TestParallel(pool, "threads", rng);
      InlinePool inline_pool;
      TestParallel(inline_pool, "inline", rng);
      LatePool late;
      TestParallel(late, "late", rng);
      late.Drain();  // tasks that start after the caller returned must find no work
    }
    std::printf("%s: %lld checks, %d failures\n", g_failures ? "FAIL" : "PASS",
                static_cast<long long>(g_checks), g_failures);
  }
  if (bench) {
    std::printf("ns/element, median and min of repeated calls on one array (random normal);\n"
                "old = the previous handler's two-pass scalar loop; new = ArgReduceRowsCpu;\n"
                "last columns: argmax median on the other paths\n");
    BenchFormat<Format::kF32>("f32");
    BenchFormat<Format::kBF16>("bf16");
    BenchFormat<Format::kF16>("f16");
    BenchFormat<Format::kF64>("f64");
    if (g_failures) std::printf("FAIL: mismatches in the benchmark runs\n");
  }
  return g_failures ? 1 : 0;
}
