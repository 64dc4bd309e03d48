// Standalone check of the filtered sampler's launcher (ffi/sample_kernels.h) against the CPU
// reference, FilteredSamplerCpu<F>::SampleRow (ffi/cpu_sample.h, compiled here into the host
// code): for every row the same index and the same noisy-maximum bits. Meant to run under
// compute-sanitizer too (memcheck, racecheck on --quick): buffers come from plain cudaMalloc,
// outputs are poisoned before every launch.
//
// Rows: normal values, few distinct values (ties everywhere), values rounded to quarters (tie
// groups of equal mass at the top-p crossing), NaNs here and there, ±inf and subnormals, all
// -inf, -inf but a few, all one value, peaked (20 tokens 25 above a normal tail), random bits;
// every format (float16, bfloat16, float32, float64); shapes from 1x1 to 256x202048, odd widths,
// more rows than the grid's blocks. Parameters shared or per row, drawn from k in {0, 1, 2, 50,
// 1024, cols-1, cols, cols+5}, p in {1, 0.9, 0.5, 1e-6, 1e-45, 0}, min_p in {0, 0.05, 1, 1.5},
// T in {0, 0.8, 1, 1e-30}; one key or one per row; offsets or none; int32 or int64 indices.
// Every case runs again without top-k (k_bound -1: the spread path, its workspace poisoned),
// and then with min-p alone (has_top_p false: the spread path without top-p's levels). First,
// min-p's floor as the spread path searches it (one warp) against the CPU handler's, and
// device::WarpMax against the host's maximum; last, a vocabulary split into equal shards
// without a top-k (RunSplit: the stages' kernels against LevelRow and SplitDrawRow, shard by
// shard, and the combined sample against SampleRow).
//
// Build (repository root):
//   nvcc -std=c++17 -arch=sm_90 -O2 -I ffi -I tests/cuda tests/cuda/sample_check.cu \
//        ffi/sample_kernels.cu ffi/launch_plan.cc -o sample_check
//   (no --use_fast_math, no -ftz=true: the shared headers need IEEE mode)
// Run: sample_check [--quick] [--split]  (--split: the split vocabulary's cases alone, e.g.
//      for racecheck, which runs the rest far slower)
//      sample_check --time [--scale S] (no checks: the median of 30 launches, by CUDA events,
//      of the spread path on the benchmark shapes, rows normal x S (3); for comparing builds of
//      the kernels on one GPU)
//      sample_check --probe (the 256x202048 float32 launches of --time, twice, for ncu)
// Prints one line per case and "sample_check: N cases, M mismatches"; exit 1 on a mismatch, 2 on
// a CUDA error.
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu_sample.h"
#include "device.cuh"
#include "launch_plan.h"
#include "sample_kernels.h"

using namespace jax_argreduce;

#include "cuda_check.h"  // CHECK(call)

namespace {

// The bits of v in format f (16-bit formats: the float32 value, rounded by the conversion).
uint64_t Encode(Format f, double v) {
  if (f == Format::kF64) {
    uint64_t b;
    std::memcpy(&b, &v, 8);
    return b;
  }
  const float x = static_cast<float>(v);
  uint32_t b;
  std::memcpy(&b, &x, 4);
  if (f == Format::kF32) return b;
  if (f == Format::kBF16) return b >> 16;  // truncation: any bits are a valid value here
  __half h = __float2half(x);
  return reinterpret_cast<__half_raw&>(h).x;
}

struct Spec {
  uint64_t inf, sign, qnan, mant, all;
};
Spec SpecOf(Format f) {
  switch (f) {
    case Format::kF16: return {0x7C00u, 0x8000u, 0x7E00u, 0x3FFu, 0xFFFFu};
    case Format::kBF16: return {0x7F80u, 0x8000u, 0x7FC0u, 0x7Fu, 0xFFFFu};
    case Format::kF32: return {0x7F800000u, 0x80000000u, 0x7FC00000u, 0x7FFFFFu, 0xFFFFFFFFu};
    case Format::kF64: break;
  }
  return {0x7FF0000000000000ull, 0x8000000000000000ull, 0x7FF8000000000000ull,
          0xFFFFFFFFFFFFFull, ~0ull};
}

constexpr int kKinds = 11;

void FillRow(Format f, int kind, std::mt19937_64& rng, uint64_t* row, int64_t cols) {
  const Spec s = SpecOf(f);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int64_t> col(0, cols - 1);
  const int64_t few = std::max<int64_t>(1, cols / 500);
  for (int64_t c = 0; c < cols; ++c) row[c] = Encode(f, 3 * normal(rng));
  switch (kind) {
    case 0: break;  // normal
    case 1:  // few distinct values: ties everywhere
      for (int64_t c = 0; c < cols; ++c) row[c] = Encode(f, static_cast<double>(rng() % 5));
      break;
    case 2:  // rounded to quarters: tie groups of equal mass
      for (int64_t c = 0; c < cols; ++c) row[c] = Encode(f, std::round(4 * normal(rng)) / 4);
      break;
    case 3:  // NaNs here and there
      for (int64_t i = 0; i < few; ++i) {
        const uint64_t payload = rng() & s.mant;
        row[col(rng)] = (rng() % 3 == 0 ? s.qnan : (s.inf | (payload ? payload : 1u))) |
                        (rng() % 2 ? s.sign : 0u);
      }
      break;
    case 4:  // ±inf and subnormals
      for (int64_t i = 0; i < few; ++i) row[col(rng)] = s.inf | (rng() % 2 ? s.sign : 0u);
      for (int64_t i = 0; i < 3 * few; ++i) {
        row[col(rng)] = ((rng() & s.mant) | 1u) | (rng() % 2 ? s.sign : 0u);
      }
      break;
    case 5:  // all -inf
      for (int64_t c = 0; c < cols; ++c) row[c] = s.inf | s.sign;
      break;
    case 6:  // -inf but a few
      for (int64_t c = 0; c < cols; ++c) row[c] = s.inf | s.sign;
      for (int64_t i = 0; i < 3; ++i) row[col(rng)] = Encode(f, normal(rng));
      break;
    case 7:  // all one value
      for (int64_t c = 0; c < cols; ++c) row[c] = row[0];
      break;
    case 8:  // peaked: 20 tokens 25 above a normal tail
      for (int64_t c = 0; c < cols; ++c) row[c] = Encode(f, normal(rng));
      for (int i = 0; i < 20; ++i) row[col(rng)] = Encode(f, 25 + normal(rng));
      break;
    case 9:  // peaked, ties in the head
      for (int64_t c = 0; c < cols; ++c) row[c] = Encode(f, normal(rng));
      for (int i = 0; i < 20; ++i) row[col(rng)] = Encode(f, 25 + static_cast<double>(rng() % 3));
      break;
    default:  // random bits (NaNs, infinities, subnormals, everything)
      for (int64_t c = 0; c < cols; ++c) row[c] = rng() & s.all;
  }
}

const float kPs[] = {1.0f, 0.9f, 0.5f, 1e-6f, 1e-45f, 0.0f};
const float kMinPs[] = {0.0f, 0.05f, 1.0f, 1.5f};
const double kTs[] = {0.0, 0.8, 1.0, 1e-30};

int32_t PickK(std::mt19937_64& rng, int64_t cols) {
  const int64_t ks[] = {0, 1, 2, 50, 1024, cols - 1, cols, cols + 5};
  return static_cast<int32_t>(ks[rng() % 8]);
}

struct Case {
  Format f;
  int64_t rows, cols;
  bool per_row[4];  // T, k, p, min_p
  bool per_row_keys, offsets, int64_indices;
  // No top-k in any row, promised (k_bound -1): the spread path where it takes the call.
  bool spread = false;
  // With spread: no top-p in any row either, promised (has_top_p false: min-p alone).
  bool no_top_p = false;
};

// The host reference for rows [begin, end): SampleRow and categorical's noisy-max epilogue.
template <Format F>
void Reference(const Case& c, const std::vector<uint8_t>& x, const std::vector<uint32_t>& keys,
               const std::vector<uint8_t>& temperature, const std::vector<int32_t>& k,
               const std::vector<float>& p, const std::vector<float>& m,
               const int32_t* offsets, void* indices, void* noisy, int64_t begin, int64_t end) {
  using Sampler = FilteredSamplerCpu<F>;
  using Policy = typename Sampler::Policy;
  const Policy policy{keys.data(), c.rows / static_cast<int64_t>(keys.size() / 2),
                      reinterpret_cast<const typename Policy::Noise*>(temperature.data()),
                      c.per_row[0], offsets};
  const NoisyMaxEpilogue epilogue{indices, c.int64_indices, noisy};
  const auto* data = reinterpret_cast<const typename Sampler::Bits*>(x.data());
  SampleScratch scratch;
  for (int64_t r = begin; r < end; ++r) {
    const RowFilters filters{k[c.per_row[1] ? r : 0], p[c.per_row[2] ? r : 0],
                             m[c.per_row[3] ? r : 0]};
    const auto* row = data + r * c.cols;
    epilogue(r, Sampler::SampleRow(row, c.cols, policy.ForRow(r), filters, scratch), row);
  }
}

int cases_run = 0, mismatches = 0;

void Run(const Case& c, std::mt19937_64& rng) {
  const int width = FormatBytes(c.f);
  const int noise_bytes = c.f == Format::kF64 ? 8 : 4;
  const int index_bytes = c.int64_indices ? 8 : 4;
  const int64_t n = c.rows * c.cols;
  std::vector<uint64_t> row_bits(c.cols);
  std::vector<uint8_t> x(n * width);
  for (int64_t r = 0; r < c.rows; ++r) {
    FillRow(c.f, static_cast<int>(rng() % kKinds), rng, row_bits.data(), c.cols);
    for (int64_t i = 0; i < c.cols; ++i) {
      std::memcpy(&x[(r * c.cols + i) * width], &row_bits[i], width);
    }
  }
  const int64_t num_keys = c.per_row_keys ? c.rows : 1;
  std::vector<uint32_t> keys(2 * num_keys);
  for (uint32_t& key : keys) key = static_cast<uint32_t>(rng());
  const int64_t t_count = c.per_row[0] ? c.rows : 1;
  std::vector<uint8_t> temperature(t_count * noise_bytes);
  for (int64_t i = 0; i < t_count; ++i) {
    const double t = kTs[rng() % 4];
    if (noise_bytes == 8) {
      std::memcpy(&temperature[i * 8], &t, 8);
    } else {
      const float tf = static_cast<float>(t);
      std::memcpy(&temperature[i * 4], &tf, 4);
    }
  }
  std::vector<int32_t> k(c.per_row[1] ? c.rows : 1);
  for (int32_t& v : k) v = PickK(rng, c.cols);
  std::vector<float> p(c.per_row[2] ? c.rows : 1);
  for (float& v : p) v = kPs[rng() % 6];
  std::vector<float> m(c.per_row[3] ? c.rows : 1);
  for (float& v : m) v = kMinPs[rng() % 4];
  // Shared parameters: a filter on most cases (the draw of all tokens is categorical's).
  if (!c.per_row[1] && rng() % 2) k[0] = static_cast<int32_t>(std::min<int64_t>(50, c.cols));
  if (c.spread) {
    // No top-k: top_k values that keep every token (0, cols or more), which the spread path
    // ignores and the reference reads.
    for (int32_t& v : k) {
      const int64_t keep_all[] = {0, c.cols, c.cols + 5};
      v = static_cast<int32_t>(keep_all[rng() % 3]);
    }
    // Top-p on most rows (the spread path's levels); min-p alone or no filter on the others
    // (p = 1: row 0 and every 7th row, or a shared p drawn from all of kPs).
    if (c.per_row[2]) {
      for (size_t i = 0; i < p.size(); ++i) p[i] = i % 7 == 0 ? 1.0f : kPs[1 + rng() % 5];
    } else {
      p[0] = kPs[rng() % 6];
    }
    // min-p alone (or nothing, min_p = 0) on every row: the launches without top-p's levels.
    if (c.no_top_p) std::fill(p.begin(), p.end(), 1.0f);
  }
  const std::vector<int32_t> offsets = {static_cast<int32_t>(rng() % 1000),
                                        static_cast<int32_t>(rng() % 100000)};

  // The reference, on every core.
  std::vector<uint8_t> want_index(c.rows * index_bytes), want_noisy(c.rows * noise_bytes);
  const unsigned workers = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w) {
    const int64_t begin = c.rows * w / workers, end = c.rows * (w + 1) / workers;
    pool.emplace_back([&, begin, end] {
      DispatchFormat(c.f, false, [&](auto f, auto) {
        Reference<decltype(f)::value>(c, x, keys, temperature, k, p, m,
                                      c.offsets ? offsets.data() : nullptr, want_index.data(),
                                      want_noisy.data(), begin, end);
      });
    });
  }
  for (std::thread& t : pool) t.join();

  uint8_t* d_x = ToDevice(x);
  uint32_t* d_keys = ToDevice(keys);
  uint8_t* d_t = ToDevice(temperature);
  int32_t* d_k = ToDevice(k);
  float* d_p = ToDevice(p);
  float* d_m = ToDevice(m);
  int32_t* d_offsets = ToDevice(offsets);
  uint8_t *d_index = nullptr, *d_noisy = nullptr;
  CHECK(cudaMalloc(&d_index, c.rows * index_bytes));
  CHECK(cudaMalloc(&d_noisy, c.rows * noise_bytes));
  CHECK(cudaMemset(d_index, 0xFF, c.rows * index_bytes));
  CHECK(cudaMemset(d_noisy, 0xAB, c.rows * noise_bytes));
  FilteredSampleLaunch launch;
  CHECK(cudaGetDevice(&launch.device));
  launch.format = c.f;
  launch.keys = d_keys;
  launch.num_keys = num_keys;
  launch.logits = d_x;
  launch.rows = c.rows;
  launch.cols = c.cols;
  launch.temperature = d_t;
  launch.temperature_per_row = c.per_row[0];
  launch.top_k = RowParam<int32_t>{d_k, c.per_row[1]};
  launch.top_p = RowParam<float>{d_p, c.per_row[2]};
  launch.min_p = RowParam<float>{d_m, c.per_row[3]};
  launch.offsets = c.offsets ? d_offsets : nullptr;
  launch.indices = d_index;
  launch.index_is_int64 = c.int64_indices;
  launch.noisy_max = d_noisy;
  void* d_workspace = nullptr;
  if (c.spread) {
    launch.k_bound = -1;
    launch.has_top_p = !c.no_top_p;
    launch.workspace_bytes = WorkspaceBytes("filtered_categorical", c.rows, c.cols, -1, width);
    CHECK(cudaMalloc(&d_workspace, launch.workspace_bytes));
    // Poisoned: nothing may be read before the call writes it.
    CHECK(cudaMemset(d_workspace, 0xC5, launch.workspace_bytes));
    launch.workspace = static_cast<unsigned char*>(d_workspace) + 8;  // hand-aligned by the launcher
    launch.workspace_bytes -= 8;
    // Where the spread path takes the call, the workspace holds its layout after the hand
    // alignment (a short one would fall back to the generic kernel and pass silently).
    if (UsesFilterSpread(c.rows, -1, width) &&
        launch.workspace_bytes < PlanFilterSpread(c.rows, c.cols).bytes + 8) {
      std::printf("spread workspace too small: %zu\n", launch.workspace_bytes);
      std::exit(2);
    }
  }
  CHECK(LaunchFilteredSample(launch));
  CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> got_index(want_index.size()), got_noisy(want_noisy.size());
  CHECK(cudaMemcpy(got_index.data(), d_index, got_index.size(), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_noisy.data(), d_noisy, got_noisy.size(), cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    int64_t gi = 0, wi = 0;
    uint64_t gn = 0, wn = 0;
    std::memcpy(&gi, &got_index[r * index_bytes], index_bytes);
    std::memcpy(&wi, &want_index[r * index_bytes], index_bytes);
    std::memcpy(&gn, &got_noisy[r * noise_bytes], noise_bytes);
    std::memcpy(&wn, &want_noisy[r * noise_bytes], noise_bytes);
    if (gi != wi || gn != wn) {
      if (bad++ < 3) {
        std::printf("  row %lld (T %s, k %d, p %g, min_p %g): got %lld (noisy %#llx), want %lld "
                    "(noisy %#llx)\n", static_cast<long long>(r),
                    c.per_row[0] ? "per row" : "shared", k[c.per_row[1] ? r : 0],
                    p[c.per_row[2] ? r : 0], m[c.per_row[3] ? r : 0],
                    static_cast<long long>(gi), static_cast<unsigned long long>(gn),
                    static_cast<long long>(wi), static_cast<unsigned long long>(wn));
      }
    }
  }
  ++cases_run;
  mismatches += bad > 0;
  std::printf("%s%s%s format %d %lldx%lld per-row T%d k%d p%d m%d keys %s offsets %d int64 %d"
              " (k %d, p %g, min_p %g)%s\n", bad ? "MISMATCH" : "ok",
              c.spread ? " spread" : "", c.no_top_p ? " no-top-p" : "", static_cast<int>(c.f),
              static_cast<long long>(c.rows), static_cast<long long>(c.cols), c.per_row[0],
              c.per_row[1], c.per_row[2], c.per_row[3], c.per_row_keys ? "per row" : "one",
              c.offsets, c.int64_indices, k[0], p[0], m[0],
              bad ? (" rows bad: " + std::to_string(bad)).c_str() : "");
  for (void* ptr : {static_cast<void*>(d_x), static_cast<void*>(d_keys),
                    static_cast<void*>(d_t), static_cast<void*>(d_k), static_cast<void*>(d_p),
                    static_cast<void*>(d_m), static_cast<void*>(d_offsets),
                    static_cast<void*>(d_index), static_cast<void*>(d_noisy), d_workspace}) {
    CHECK(cudaFree(ptr));
  }
}

// ---- A vocabulary split into `shards` equal shards without a top-k: the stages' kernels
// (LaunchTopPLevel, LaunchSplitFilteredDraw) against the CPU handler's LevelRow and
// SplitDrawRow on every shard, bit for bit (each level's histogram, each shard's draw), with
// the exchanges done here (the levels' limbs summed, the counts gathered); then the shards'
// draws combined (the larger noisy key, the lower global column) against the unsharded
// SampleRow: the sample does not depend on the split.
template <Format F>
void RunSplit(int64_t rows, int64_t cols, int64_t shards, bool per_row, bool has_top_p,
              std::mt19937_64& rng) {
  using Sampler = FilteredSamplerCpu<F>;
  using Policy = typename Sampler::Policy;
  using Bits = typename Sampler::Bits;
  using Noise = typename Sampler::Noise;
  using Levels = typename Sampler::Levels;
  using Key = typename Sampler::Key;
  static_assert(sizeof(Noise) == 4, "16- and 32-bit formats");
  const int64_t width = cols / shards;  // cols is a multiple of shards
  std::vector<uint64_t> row_bits(cols);
  std::vector<Bits> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    FillRow(F, static_cast<int>(rng() % kKinds), rng, row_bits.data(), cols);
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = static_cast<Bits>(row_bits[c]);
  }
  const int64_t n_param = per_row ? rows : 1;
  std::vector<uint32_t> keys(2 * n_param);
  for (uint32_t& key : keys) key = static_cast<uint32_t>(rng());
  std::vector<float> t(n_param), p(n_param), m(n_param);
  for (int64_t i = 0; i < n_param; ++i) {
    t[i] = static_cast<float>(kTs[rng() % 4]);
    p[i] = has_top_p ? kPs[rng() % 6] : 1.0f;
    m[i] = kMinPs[rng() % 4];
  }
  const int32_t row_offset = static_cast<int32_t>(rng() % 1000);
  const RowParam<float> t_h{t.data(), per_row}, p_h{p.data(), per_row}, m_h{m.data(), per_row};
  auto policy = [&](const int32_t* offsets) {
    return Policy{keys.data(), rows / n_param, t.data(), per_row, offsets};
  };

  // Each shard's logits (rows x width), and every shard's first token per row (the split's
  // tops: scaled_top_k's k = 1, by RankKey).
  std::vector<std::vector<Bits>> part(shards, std::vector<Bits>(rows * width));
  std::vector<Bits> tops(rows * shards);
  for (int64_t s = 0; s < shards; ++s) {
    for (int64_t r = 0; r < rows; ++r) {
      const Bits* src = &x[r * cols + s * width];
      std::copy(src, src + width, &part[s][r * width]);
      const auto row = Policy::Scaling(t_h[r]);
      int64_t best = 0;
      for (int64_t c = 1; c < width; ++c) {
        if (Sampler::RankKey(row, src[c]) > Sampler::RankKey(row, src[best])) best = c;
      }
      tops[r * shards + s] = src[best];
    }
  }
  std::vector<Bits*> d_part(shards);
  for (int64_t s = 0; s < shards; ++s) d_part[s] = ToDevice(part[s]);
  float* d_t = ToDevice(t);
  float* d_p = ToDevice(p);
  float* d_m = ToDevice(m);
  uint32_t* d_keys = ToDevice(keys);
  Bits* d_tops = ToDevice(tops);
  int64_t bad = 0;
  auto report = [&](const char* what, int64_t s, int64_t r, int64_t i) {
    if (bad++ < 3) {
      std::printf("  %s: shard %lld row %lld at %lld (T %g, p %g, min_p %g)\n", what,
                  static_cast<long long>(s), static_cast<long long>(r), static_cast<long long>(i),
                  t_h[r], p_h[r], m_h[r]);
    }
  };

  // The levels: each shard's histogram on both sides, summed (limbs) or gathered (counts).
  constexpr int kWidth = Levels::kWidth;
  const int64_t last_digits = int64_t{1} << Levels::Bits(Levels::kCount - 1);
  std::vector<uint32_t> above;  // [rows, levels so far, kWidth, kMassLimbs], as the exchange's
  std::vector<uint32_t> counts(rows * shards * last_digits);
  const int levels = has_top_p ? Levels::kCount : 0;
  for (int level = 0; level < levels; ++level) {
    const bool last = level == Levels::kCount - 1;
    const int64_t digits = int64_t{1} << Levels::Bits(level);
    const int64_t per_row_out = digits * (last ? 1 : kMassLimbs);
    uint32_t* d_above = ToDevice(above);
    uint32_t* d_hist = nullptr;
    CHECK(cudaMalloc(&d_hist, rows * per_row_out * 4));
    std::vector<uint32_t> sum(rows * per_row_out, 0);
    for (int64_t s = 0; s < shards; ++s) {
      CHECK(cudaMemset(d_hist, 0xA5, rows * per_row_out * 4));
      TopPLevelLaunch launch;
      launch.format = F;
      launch.logits = d_part[s];
      launch.rows = rows;
      launch.cols = width;
      launch.temperature = RowParam<float>{d_t, per_row};
      launch.top_p = RowParam<float>{d_p, per_row};
      launch.tops = d_tops;
      launch.shards = shards;
      launch.level = level;
      launch.above = d_above;
      launch.histogram = d_hist;
      CHECK(LaunchTopPLevel(launch));
      const std::vector<uint32_t> got = ToHost(d_hist, rows * per_row_out);
      std::vector<uint64_t> above_row(level * kWidth), masses(digits);
      std::vector<uint32_t> want(per_row_out);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < level * kWidth; ++i) {
          above_row[i] = MassFromLimbs(&above[(r * level * kWidth + i) * kMassLimbs]);
        }
        Sampler::LevelRow(&part[s][r * width], width, Policy::Scaling(t_h[r]), p_h[r],
                          &tops[r * shards], shards, above_row.data(), level,
                          last ? nullptr : masses.data(), last ? want.data() : nullptr);
        if (!last) {
          for (int64_t d = 0; d < digits; ++d) MassToLimbs(masses[d], &want[d * kMassLimbs]);
        }
        for (int64_t i = 0; i < per_row_out; ++i) {
          if (got[r * per_row_out + i] != want[i]) {
            report(last ? "level counts" : "level masses", s, r, i);
            break;
          }
        }
        for (int64_t i = 0; i < per_row_out; ++i) {
          if (last) {
            counts[(r * shards + s) * last_digits + i] = want[i];
          } else {
            sum[r * per_row_out + i] += want[i];
          }
        }
      }
    }
    if (!last) {  // above gains the level's sums
      std::vector<uint32_t> next(rows * (level + 1) * kWidth * kMassLimbs);
      const int64_t before = level * kWidth * kMassLimbs, add = kWidth * kMassLimbs;
      for (int64_t r = 0; r < rows; ++r) {
        std::copy(&above[r * before], &above[r * before] + before, &next[r * (before + add)]);
        std::copy(&sum[r * add], &sum[r * add] + add, &next[r * (before + add) + before]);
      }
      above.swap(next);
    }
    CHECK(cudaFree(d_above));
    CHECK(cudaFree(d_hist));
  }

  // The draws, and their combination.
  uint32_t* d_above = levels ? ToDevice(above) : nullptr;
  uint32_t* d_counts = levels ? ToDevice(counts) : nullptr;
  std::vector<Key> best_key(rows, KeyLimits<Key>::kLowest);
  std::vector<int64_t> best_col(rows, -1);
  void *d_index = nullptr, *d_noisy = nullptr;
  CHECK(cudaMalloc(&d_index, rows * 8));
  CHECK(cudaMalloc(&d_noisy, rows * 4));
  const int64_t above_count = (Levels::kCount - 1) * kWidth;
  for (int64_t s = 0; s < shards; ++s) {
    const std::vector<int32_t> offsets = {row_offset, static_cast<int32_t>(s * width)};
    int32_t* d_offsets = ToDevice(offsets);
    const bool int64_indices = rng() % 2;
    CHECK(cudaMemset(d_index, 0xFF, rows * 8));
    CHECK(cudaMemset(d_noisy, 0xAB, rows * 4));
    SplitDrawLaunch launch;
    launch.format = F;
    launch.keys = d_keys;
    launch.num_keys = n_param;
    launch.logits = d_part[s];
    launch.rows = rows;
    launch.cols = width;
    launch.temperature = RowParam<float>{d_t, per_row};
    launch.top_p = RowParam<float>{d_p, per_row};
    launch.min_p = RowParam<float>{d_m, per_row};
    launch.offsets = d_offsets;
    launch.tops = d_tops;
    launch.shards = shards;
    launch.above = d_above;
    launch.counts = d_counts;
    launch.indices = d_index;
    launch.index_is_int64 = int64_indices;
    launch.noisy_max = d_noisy;
    CHECK(LaunchSplitFilteredDraw(launch));
    const std::vector<uint8_t> got_index = ToHost(static_cast<uint8_t*>(d_index), rows * 8);
    const std::vector<uint32_t> got_noisy = ToHost(static_cast<uint32_t*>(d_noisy), rows);
    const auto shard_policy = policy(offsets.data());
    SampleScratch scratch;
    std::vector<uint64_t> above_row(levels ? above_count : 0);
    for (int64_t r = 0; r < rows; ++r) {
      if (levels) {
        for (int64_t i = 0; i < above_count; ++i) {
          above_row[i] = MassFromLimbs(&above[(r * above_count + i) * kMassLimbs]);
        }
      }
      const RowFilters f{0, p_h[r], m_h[r]};
      const auto want = Sampler::SplitDrawRow(
          &part[s][r * width], width, shard_policy.ForRow(r), f, &tops[r * shards], shards, s,
          levels ? above_row.data() : nullptr,
          levels ? &counts[r * shards * last_digits] : nullptr, scratch);
      int32_t want_index = 0;
      uint32_t want_noisy = 0;
      NoisyMaxEpilogue{&want_index, false, &want_noisy}(0, want, &part[s][r * width]);
      int64_t gi = 0;
      std::memcpy(&gi, &got_index[r * (int64_indices ? 8 : 4)], int64_indices ? 8 : 4);
      if (!int64_indices) gi = static_cast<int32_t>(gi);
      if (gi != want_index || got_noisy[r] != want_noisy) {
        report("draw", s, r, gi);
        best_col[r] = -2;  // reported once: not again as the combined sample
        continue;
      }
      if (best_col[r] == -2) continue;
      // The pair exchange: the larger key, then the lower global column.
      const int64_t col = s * width + want.index;
      if (want.key > best_key[r] || (want.key == best_key[r] && col < best_col[r])) {
        best_key[r] = want.key;
        best_col[r] = col;
      }
    }
    CHECK(cudaFree(d_offsets));
  }
  // The unsharded sample against the shards' draws (equal to the kernels' where nothing was
  // reported above) combined.
  const std::vector<int32_t> offsets = {row_offset, 0};
  const auto full_policy = policy(offsets.data());
  SampleScratch scratch;
  for (int64_t r = 0; r < rows; ++r) {
    const RowFilters f{0, p_h[r], m_h[r]};
    const auto want = Sampler::SampleRow(&x[r * cols], cols, full_policy.ForRow(r), f, scratch);
    if (best_col[r] != -2 && (want.key != best_key[r] || want.index != best_col[r])) {
      report("combined", -1, r, best_col[r]);
    }
  }
  ++cases_run;
  mismatches += bad > 0;
  std::printf("%s split format %d %lldx%lld shards %lld per-row %d top-p %d%s\n",
              bad ? "MISMATCH" : "ok", static_cast<int>(F), static_cast<long long>(rows),
              static_cast<long long>(cols), static_cast<long long>(shards), per_row, has_top_p,
              bad ? (" bad: " + std::to_string(bad)).c_str() : "");
  for (Bits* d : d_part) CHECK(cudaFree(d));
  for (void* ptr : {static_cast<void*>(d_t), static_cast<void*>(d_p), static_cast<void*>(d_m),
                    static_cast<void*>(d_keys), static_cast<void*>(d_tops),
                    static_cast<void*>(d_above), static_cast<void*>(d_counts), d_index,
                    d_noisy}) {
    CHECK(cudaFree(ptr));
  }
}

__global__ void MinPFloorKernel(const float* min_p, float* floor, int n) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) / 32;  // one warp per value
  if (i >= n) return;  // the whole warp (its lanes share i)
  const float f = MinPFloorWarp(min_p[i]);
  if (threadIdx.x % 32 == 0) floor[i] = f;
}

// MinPFloorWarp (the spread path's, one warp's search) against MinPFloor (the CPU handler's
// bisection), bit for bit: the values that min-p takes (0 < min_p, up to past 1) near the
// edges (the smallest floats, 1 and its neighbours), log-uniform ones, random bit patterns and
// masses themselves (ExpF32(-m): the predicate's boundary).
void CheckMinPFloor(std::mt19937_64& rng, int count) {
  std::vector<float> values = {1e-45f, 1e-38f, 1e-30f, 1e-10f, 0.05f, 0.1f, 0.5f,
                               std::nextafter(1.0f, 0.0f), 1.0f, std::nextafter(1.0f, 2.0f),
                               1.5f, INFINITY};
  std::uniform_real_distribution<float> exponent(-104.0f, 0.0f);
  while (static_cast<int>(values.size()) < count) {
    values.push_back(std::exp(exponent(rng)));
    const uint32_t bits = static_cast<uint32_t>(rng() % 0x3F800001u);  // (0, 1] as bits
    float v;
    std::memcpy(&v, &bits, 4);
    if (v > 0.0f) values.push_back(v);
    const uint32_t m = static_cast<uint32_t>(rng() % 0x42D00000u);  // magnitudes up to 104
    std::memcpy(&v, &m, 4);
    if (ExpF32(-v) > 0.0f) values.push_back(ExpF32(-v));
  }
  const int n = static_cast<int>(values.size());
  float* d_values = ToDevice(values);
  float* d_floor = nullptr;
  CHECK(cudaMalloc(&d_floor, n * sizeof(float)));
  MinPFloorKernel<<<(n * 32 + 255) / 256, 256>>>(d_values, d_floor, n);
  CHECK(cudaGetLastError());
  std::vector<float> got(n);
  CHECK(cudaMemcpy(got.data(), d_floor, n * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    const float want = MinPFloor(values[i]);
    if (std::memcmp(&got[i], &want, 4) != 0 && bad++ < 3) {
      std::printf("  min_p %a: floor %a, want %a\n", values[i], got[i], want);
    }
  }
  ++cases_run;
  mismatches += bad > 0;
  std::printf("%s MinPFloorWarp: %d values%s\n", bad ? "MISMATCH" : "ok", n,
              bad ? (", bad: " + std::to_string(bad)).c_str() : "");
  CHECK(cudaFree(d_values));
  CHECK(cudaFree(d_floor));
}

template <class T>
__global__ void WarpMaxKernel(const T* v, T* out) {  // whole warps: every lane calls WarpMax
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = device::WarpMax(v[i]);
}

// device::WarpMax (the spread draw's best key of a warp: one redux instruction for 32-bit
// integers on sm_80 and later, shuffles otherwise) against the host's maximum of each warp's
// 32 values, in every lane: random bits mixed with each type's extremes and the values either
// side of 0 and 2^31 (and 2^32 for 64 bits): a signed/unsigned mix-up or a 64-bit key cut to
// 32 bits fails. Its own generator: the other cases' inputs do not depend on it.
template <class T>
void CheckWarpMax(int warps, const char* name) {
  std::mt19937_64 rng(20261207);
  constexpr T kLowest = std::numeric_limits<T>::lowest(), kMax = std::numeric_limits<T>::max();
  std::vector<T> edges = {kLowest, static_cast<T>(kLowest + 1), static_cast<T>(-1), 0, 1,
                          static_cast<T>(kMax - 1), kMax};
  if constexpr (sizeof(T) == 4) {
    for (const uint32_t e : {0x7FFFFFFFu, 0x80000000u}) edges.push_back(static_cast<T>(e));
  } else {
    for (const int64_t e : {int64_t{1} << 31, (int64_t{1} << 32) - 1, int64_t{1} << 32,
                            -(int64_t{1} << 31) - 1, -(int64_t{1} << 32)}) {
      edges.push_back(static_cast<T>(e));
    }
  }
  const int n = warps * 32;
  std::vector<T> v(n);
  for (int i = 0; i < n; ++i) {
    v[i] = rng() % 4 == 0 ? edges[rng() % edges.size()] : static_cast<T>(rng());
  }
  T* d_v = ToDevice(v);
  T* d_out = nullptr;
  CHECK(cudaMalloc(&d_out, n * sizeof(T)));
  WarpMaxKernel<T><<<warps, 32>>>(d_v, d_out);
  CHECK(cudaGetLastError());
  std::vector<T> got(n);
  CHECK(cudaMemcpy(got.data(), d_out, n * sizeof(T), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int w = 0; w < warps; ++w) {
    const T want = *std::max_element(v.begin() + w * 32, v.begin() + (w + 1) * 32);
    for (int lane = 0; lane < 32; ++lane) {
      if (got[w * 32 + lane] != want && bad++ < 3) {
        std::printf("  warp %d lane %d: %lld, want %lld\n", w, lane,
                    static_cast<long long>(got[w * 32 + lane]), static_cast<long long>(want));
      }
    }
  }
  ++cases_run;
  mismatches += bad > 0;
  std::printf("%s WarpMax %s: %d warps%s\n", bad ? "MISMATCH" : "ok", name, warps,
              bad ? (", bad lanes: " + std::to_string(bad)).c_str() : "");
  CHECK(cudaFree(d_v));
  CHECK(cudaFree(d_out));
}

// --time: the median time (CUDA events) of 30 launches of the spread path on the benchmark
// shapes: normal rows times 3 (the example's logits; `--scale S`: times S, e.g. 1 for
// bench.py's isolated inputs), T = 0.8, top-p 0.9 or min-p 0.05 alone.
// --probe: the same launches at 256x202048 float32, each twice and untimed (for a profiler:
// ncu -k regex:Spread).
int Time(bool probe, float scale) {
  std::mt19937_64 rng(7);
  std::vector<std::array<int64_t, 2>> shapes = {{1, 202048}, {8, 202048}, {64, 128256},
                                                {256, 202048}};
  std::vector<Format> formats = {Format::kF32, Format::kBF16};
  if (probe) {
    shapes = {{256, 202048}};
    formats = {Format::kF32};
  }
  for (Format f : formats) {
    for (const auto& shape : shapes) {
      const int64_t rows = shape[0], cols = shape[1], n = rows * cols;
      const int width = FormatBytes(f);
      std::vector<uint8_t> x(n * width);
      std::normal_distribution<float> normal(0.0f, scale);
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t bits = Encode(f, normal(rng));
        std::memcpy(&x[i * width], &bits, width);
      }
      uint8_t* d_x = ToDevice(x);
      uint32_t* d_keys = ToDevice(std::vector<uint32_t>{1, 2});
      float* d_t = ToDevice(std::vector<float>{0.8f});
      int32_t* d_k = ToDevice(std::vector<int32_t>{0});
      float* d_one = ToDevice(std::vector<float>{1.0f});
      float* d_zero = ToDevice(std::vector<float>{0.0f});
      float* d_p = ToDevice(std::vector<float>{0.9f});
      float* d_m = ToDevice(std::vector<float>{0.05f});
      void *d_index = nullptr, *d_noisy = nullptr, *d_workspace = nullptr;
      CHECK(cudaMalloc(&d_index, rows * 4));
      CHECK(cudaMalloc(&d_noisy, rows * 4));
      FilteredSampleLaunch launch;
      CHECK(cudaGetDevice(&launch.device));
      launch.format = f;
      launch.keys = d_keys;
      launch.logits = d_x;
      launch.rows = rows;
      launch.cols = cols;
      launch.temperature = d_t;
      launch.top_k = RowParam<int32_t>{d_k, false};
      launch.k_bound = -1;
      launch.indices = d_index;
      launch.noisy_max = d_noisy;
      launch.workspace_bytes = WorkspaceBytes("filtered_categorical", rows, cols, -1, width);
      CHECK(cudaMalloc(&d_workspace, launch.workspace_bytes));
      launch.workspace = d_workspace;
      // top-p alone; min-p alone, promised (has_top_p false) and not.
      for (const int filter : {0, 1, 2}) {
        launch.top_p = RowParam<float>{filter == 0 ? d_p : d_one, false};
        launch.min_p = RowParam<float>{filter == 0 ? d_zero : d_m, false};
        launch.has_top_p = filter != 1;
        if (probe) {
          for (int i = 0; i < 2; ++i) CHECK(LaunchFilteredSample(launch));
          CHECK(cudaDeviceSynchronize());
          continue;
        }
        const double us = MedianMicros([&] { return LaunchFilteredSample(launch); });
        const char* names[] = {"p0.9", "minp0.05", "minp0.05 has_top_p"};
        std::printf("time format %d %lldx%lld %s scale %g: %.2f us\n", static_cast<int>(f),
                    static_cast<long long>(rows), static_cast<long long>(cols), names[filter],
                    scale, us);
      }
      for (void* ptr : {static_cast<void*>(d_x), static_cast<void*>(d_keys),
                        static_cast<void*>(d_t), static_cast<void*>(d_k),
                        static_cast<void*>(d_one), static_cast<void*>(d_zero),
                        static_cast<void*>(d_p), static_cast<void*>(d_m), d_index, d_noisy,
                        d_workspace}) {
        CHECK(cudaFree(ptr));
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A line per case as it ends, also into a pipe or file: a run a time limit stops (the
  // sanitizers run kernels far slower) still shows the cases it passed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bool quick = false, split_only = false;
  int mode = 0;  // 1: --time, 2: --probe
  float scale = 3.0f;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--split") == 0) split_only = true;
    if (std::strcmp(argv[i], "--time") == 0) mode = 1;
    if (std::strcmp(argv[i], "--probe") == 0) mode = 2;
    if (std::strcmp(argv[i], "--scale") == 0) {
      char* end = nullptr;
      scale = i + 1 < argc ? std::strtof(argv[++i], &end) : 0.0f;
      if (end == nullptr || *end != '\0' || !(scale > 0.0f) || !std::isfinite(scale)) {
        std::fprintf(stderr, "--scale takes a finite number > 0\n");
        return 2;
      }
    }
  }
  if (mode != 0) return Time(mode == 2, scale);
  std::mt19937_64 rng(20240917);
  if (!split_only) {
    CheckMinPFloor(rng, quick ? 256 : 20000);
    const int warps = quick ? 64 : 4096;
    CheckWarpMax<int32_t>(warps, "int32");
    CheckWarpMax<uint32_t>(warps, "uint32");
    CheckWarpMax<int64_t>(warps, "int64");
  }
  // (rows, cols, parameter sets per format).
  struct Shape {
    int64_t rows, cols;
    int sets;
  };
  // --quick (for the sanitizers, which run kernels far slower): two sets per shape, small rows.
  std::vector<Shape> shapes = {{1, 1, 2}, {3, 7, 2}, {40, 33, 2}, {16, 1000, 2}, {4, 4097, 2}};
  if (split_only) {
    shapes.clear();
  } else if (!quick) {
    shapes = {{1, 1, 3},      {1, 2, 3},      {3, 7, 4},       {40, 33, 6},
              {16, 1000, 6},  {4, 4097, 4},   {64, 5000, 8},   {200, 2049, 6},
              {2, 300001, 3}, {8, 202048, 4}, {70000, 3, 2},   {256, 202048, 1},
              {1, 600000, 2}};  // the spread path's most chunks a row (264)
  }
  const Format formats[] = {Format::kF32, Format::kBF16, Format::kF16, Format::kF64};
  for (const Shape& s : shapes) {
    for (Format f : formats) {
      // The widest shapes: float32 and bfloat16 only (the host reference's time).
      if (s.rows * s.cols > 10000000 && (f == Format::kF16 || f == Format::kF64)) continue;
      for (int set = 0; set < s.sets; ++set) {
        Case c;
        c.f = f;
        c.rows = s.rows;
        c.cols = s.cols;
        // Set 0: every parameter per row; then alternate shared and per-row mixes.
        for (int i = 0; i < 4; ++i) c.per_row[i] = set == 0 || rng() % 2;
        c.per_row_keys = rng() % 2;
        c.offsets = rng() % 2;
        c.int64_indices = rng() % 2;
        Run(c, rng);
        // The same parameters' kind without top-k: the spread path (16- and 32-bit formats
        // of up to kFilterSpreadMaxRows rows; the generic kernel for the others).
        c.spread = true;
        Run(c, rng);
        c.no_top_p = true;
        Run(c, rng);
      }
    }
  }
  // A split vocabulary (rows, cols, shards): odd widths, more shards than a block's threads.
  struct Split {
    int64_t rows, cols, shards;
  };
  std::vector<Split> splits = {{3, 14, 2}, {5, 99, 3}, {2, 1800, 600}};
  if (!quick) {
    splits = {{3, 14, 2},      {40, 99, 3},     {16, 1000, 4},  {4, 8194, 2},
              {64, 5000, 5},   {2, 1800, 600},  {8, 202048, 2}, {3, 202048, 8},
              {200, 2049 * 3, 3}};
  }
  for (const Split& s : splits) {
    for (Format f : {Format::kF32, Format::kBF16, Format::kF16}) {
      for (const bool per_row : {true, false}) {
        for (const bool has_top_p : {true, false}) {
          DispatchFormat(f, false, [&](auto fmt, auto) {
            constexpr Format kF = decltype(fmt)::value;
            if constexpr (kF != Format::kF64) {
              RunSplit<kF>(s.rows, s.cols, s.shards, per_row, has_top_p, rng);
            }
          });
        }
      }
    }
  }
  std::printf("sample_check: %d cases, %d mismatches\n", cases_run, mismatches);
  return mismatches ? 1 : 0;
}
