// Standalone check of the filtered sampler's top-k path (ffi/sample_topk_kernels.h) against the
// CPU's FilteredSamplerCpu<F>::SampleRow (ffi/cpu_sample.h, compiled into this program's host
// code): for every row, the sampled index and the noisy maximum's bits must be equal. Meant to
// run under compute-sanitizer too (--quick: the small shapes only): buffers come from plain
// cudaMalloc, outputs and the workspace are poisoned before every launch.
//
// Rows: normal values, few distinct values (ties), NaNs, ±0 over negatives, ±inf and
// subnormals, all -inf, all equal, random bits, peaked rows (a head far above the tail), values
// that collide once scaled by 1/T (adjacent floats in [1.5, 2) at T = 3; tiny logits at
// T = 2^127, whose z are subnormal), several +inf, mostly -inf. Float16, bfloat16, float32;
// the serving shapes (1, 8 and 256 x 202048, 64 x 128256) and small and odd ones (one column,
// k_bound above cols, unaligned row starts, one to four select levels); k_bound 1, 2, 50, 256,
// 1024, each row's top_k in [1, k_bound]; temperature, top_p and min_p one for all rows or one
// per row, from mixes with T = 0, T whose 1/T overflows, p = 1, tiny p, min_p = 1; one key or a
// key per row; with and without (row, column) offsets; int32 and int64 indices; with and
// without programmatic dependent launch.
//
// The split vocabulary (jax_argreduce/_sharding.py, split_filtered_sample), where k_bound is
// below a quarter of the row: 4 shards of the row each give their k_bound first tokens in z's
// order (LaunchScaledTopK, no key), concatenated in shard order with their global columns; the
// top-k path on that candidate row with its columns operand must give the unsharded row's
// sample (the reference above), and so must the CPU's SampleRow with the same columns.
//
// Build (repository root):
//   nvcc -std=c++17 -arch=sm_90 -O2 -I ffi -I tests/cuda tests/cuda/sample_topk_check.cu
//        ffi/sample_topk_kernels.cu ffi/top_k_kernels.cu ffi/launch_plan.cc -o sample_topk_check
// Run: sample_topk_check [--quick] [--pdl=0|1]
// Prints one line per case and "sample_topk_check: N cases, M mismatches"; exit 1 on a
// mismatch, 2 on a CUDA error.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "categorical.h"
#include "cpu_sample.h"
#include "launch_plan.h"
#include "sample_filter.h"
#include "sample_topk_kernels.h"

using namespace jax_argreduce;

#include "cuda_check.h"   // CHECK(call)
#include "select_rows.h"  // Encode, SpecOf, FillRow, kKinds

namespace {

constexpr int64_t kShards = 4;  // the split vocabulary's

// Kinds beyond select_rows.h's (kKinds of them): kKinds + 0 .. kExtraKinds - 1.
constexpr int kExtraKinds = 4;
constexpr int kCollideKind = kKinds + 1;  // its rows take T = 3 or 2^127 (RunTyped)

// One row of `cols` elements (bits) of kind `kind`: select_rows.h's, or peaked, colliding
// once scaled, several +inf, mostly -inf.
void FillSampleRow(const Spec& s, int kind, std::mt19937_64& rng, uint32_t* row, int64_t cols) {
  if (kind < kKinds) return FillRow(s, kind, rng, row, cols);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int64_t> col(0, cols - 1);
  for (int64_t c = 0; c < cols; ++c) row[c] = Encode(s.f, normal(rng));
  switch (kind - kKinds) {
    case 0:  // peaked: a few heads 18 above the tail
      for (int64_t i = 0; i < 3; ++i) row[col(rng)] = Encode(s.f, 18.0f + normal(rng) * 0.5f);
      break;
    case 1:  // adjacent floats in [1.5, 2) (float32: distinct, some equal once scaled)
      for (int64_t c = 0; c < cols; ++c) {
        if (s.f == Format::kF32) {
          row[c] = 0x3FC00000u + static_cast<uint32_t>(rng() % 64);
        } else {
          row[c] = Encode(s.f, 1.5f + static_cast<float>(rng() % 64) / 128.0f);
        }
      }
      break;
    case 2:  // several +inf (ties at the top)
      for (int64_t i = 0; i < 5; ++i) row[col(rng)] = s.inf;
      break;
    default:  // mostly -inf, a few finite
      for (int64_t c = 0; c < cols; ++c) row[c] = s.inf | s.sign;
      for (int64_t i = 0; i < 4; ++i) row[col(rng)] = Encode(s.f, normal(rng));
  }
}

// The temperature mixes (index: Case::t_mix) and the filter mixes (Case::filter_mix).
const float kTemps[] = {1.0f, 0.7f, 1.5f, 3.0f, 0.0f, 0x1p127f, 1e-45f, 0.05f};
const float kTopP[] = {1.0f, 0.9f, 0.5f, 1e-6f, 0.999f};
const float kMinP[] = {0.0f, 0.05f, 0.5f, 1.0f, 1e-6f};

struct Case {
  Format f;
  int64_t rows, cols, k_bound;
  int offset;  // elements the input starts past a 16-byte boundary
};

struct Mode {
  bool per_row_params;  // temperature, top_k, top_p, min_p: one per row (else one for all)
  bool per_row_keys;
  bool offsets;
  bool index_is_int64;
  bool pdl;
  int mix;  // which temperatures and filters
};

int cases_run = 0, mismatches = 0;

template <Format F>
void RunTyped(const Case& c, const Mode& m, std::mt19937_64& rng) {
  using Bits = typename FormatTraits<F>::Bits;
  const int width = FormatBytes(F);
  const int64_t n = c.rows * c.cols;
  std::vector<uint32_t> bits(n);
  std::vector<int> kind(c.rows);
  for (int64_t r = 0; r < c.rows; ++r) {
    kind[r] = static_cast<int>((r + rng() % 3) % (kKinds + kExtraKinds));
    FillSampleRow(SpecOf(F), kind[r], rng, &bits[r * c.cols], c.cols);
  }
  std::vector<Bits> x(n + c.offset);
  for (int64_t i = 0; i < n; ++i) x[i + c.offset] = static_cast<Bits>(bits[i]);

  // Parameters: one value (index 0) or one per row.
  const int64_t np = m.per_row_params ? c.rows : 1;
  std::vector<float> temp(np), top_p(np), min_p(np);
  std::vector<int32_t> top_k(np);
  for (int64_t r = 0; r < np; ++r) {
    const int mix = m.mix;
    temp[r] = mix % 3 == 0 ? 1.0f : kTemps[(rng() % 8 + (mix == 1 ? 0 : r)) % 8];
    if (m.per_row_params && kind[r] == kCollideKind) temp[r] = rng() % 2 ? 3.0f : 0x1p127f;
    if (m.per_row_params && kind[r] == 0 && rng() % 4 == 0) {  // tiny logits at T = 2^127
      temp[r] = 0x1p127f;
    }
    top_p[r] = kTopP[(rng() + mix) % 5];
    min_p[r] = kMinP[(rng() + 2 * mix) % 5];
    if (mix == 2) min_p[r] = 0.0f;  // top-p alone
    if (mix == 4) top_p[r] = 1.0f;  // min-p alone
    const int64_t kb = c.k_bound;
    const uint64_t pick = rng() % 4;
    top_k[r] = static_cast<int32_t>(pick == 0 ? 1 : pick == 1 ? kb : 1 + rng() % kb);
  }
  if (!m.per_row_params && c.rows > 0 && kind[0] == 0 && m.mix == 5) {
    for (int64_t i = 0; i < c.cols; ++i) {
      x[i + c.offset] = static_cast<Bits>(Encode(F, 1e-3f * static_cast<float>(i % 97)));
    }
    temp[0] = 0x1p127f;  // one T for all: the first row's z collide (subnormal)
  }
  const int64_t num_keys = m.per_row_keys ? c.rows : 1;
  std::vector<uint32_t> keys(2 * num_keys);
  for (auto& k : keys) k = static_cast<uint32_t>(rng());
  const int32_t offsets[2] = {static_cast<int32_t>(rng() % 1000),
                              static_cast<int32_t>(rng() % 100000)};

  // The reference.
  GumbelKeyPolicy<F> policy;
  policy.keys = keys.data();
  policy.rows_per_key = c.rows / num_keys;
  policy.temperature = temp.data();
  policy.temperature_per_row = m.per_row_params;
  policy.offsets = m.offsets ? offsets : nullptr;
  std::vector<int64_t> want_index(c.rows);
  std::vector<uint32_t> want_max(c.rows);
  std::vector<int64_t> want_index_store(c.rows);
  SampleScratch scratch;
  const NoisyMaxEpilogue host_out{want_index_store.data(), true, want_max.data()};
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t pr = m.per_row_params ? r : 0;
    RowFilters filters;
    filters.k = top_k[pr];
    filters.p = top_p[pr];
    filters.min_p = min_p[pr];
    const Bits* row = x.data() + c.offset + r * c.cols;
    const auto pair =
        FilteredSamplerCpu<F>::SampleRow(row, c.cols, policy.ForRow(r), filters, scratch);
    host_out(r, pair, row);
    want_index[r] = want_index_store[r];
  }

  // The launch.
  const size_t ws = SampleTopKWorkspaceBytes(c.rows, c.cols, c.k_bound, width);
  uint8_t *d_x, *d_ws, *d_indices;
  uint32_t *d_keys, *d_max;
  float *d_temp, *d_p, *d_min_p;
  int32_t *d_k, *d_offsets;
  const size_t index_bytes = c.rows * (m.index_is_int64 ? 8 : 4);
  CHECK(cudaMalloc(&d_x, x.size() * sizeof(Bits)));
  CHECK(cudaMalloc(&d_ws, ws));
  CHECK(cudaMalloc(&d_indices, index_bytes));
  CHECK(cudaMalloc(&d_max, c.rows * 4));
  CHECK(cudaMalloc(&d_keys, keys.size() * 4));
  CHECK(cudaMalloc(&d_temp, np * 4));
  CHECK(cudaMalloc(&d_p, np * 4));
  CHECK(cudaMalloc(&d_min_p, np * 4));
  CHECK(cudaMalloc(&d_k, np * 4));
  CHECK(cudaMalloc(&d_offsets, 8));
  CHECK(cudaMemcpy(d_x, x.data(), x.size() * sizeof(Bits), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_keys, keys.data(), keys.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_temp, temp.data(), np * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_p, top_p.data(), np * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_min_p, min_p.data(), np * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_k, top_k.data(), np * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_offsets, offsets, 8, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMemsetAsync(d_indices, 0xFF, index_bytes, stream));
  CHECK(cudaMemsetAsync(d_max, 0xFF, c.rows * 4, stream));
  CHECK(cudaMemsetAsync(d_ws, 0xAB, ws, stream));
  SampleTopKLaunch launch;
  launch.stream = stream;
  CHECK(cudaGetDevice(&launch.device));
  launch.options.pdl = m.pdl;
  launch.format = F;
  launch.logits = d_x + c.offset * sizeof(Bits);
  launch.rows = c.rows;
  launch.cols = c.cols;
  launch.k_bound = c.k_bound;
  launch.keys = d_keys;
  launch.num_keys = num_keys;
  launch.temperature = RowParam<float>{d_temp, m.per_row_params};
  launch.top_k = RowParam<int32_t>{d_k, m.per_row_params};
  launch.top_p = RowParam<float>{d_p, m.per_row_params};
  launch.min_p = RowParam<float>{d_min_p, m.per_row_params};
  launch.offsets = m.offsets ? d_offsets : nullptr;
  launch.noisy_max = d_max;
  launch.indices = d_indices;
  launch.index_is_int64 = m.index_is_int64;
  launch.workspace = d_ws;
  launch.workspace_bytes = ws;
  CHECK(LaunchSampleTopK(launch));
  CHECK(cudaStreamSynchronize(stream));
  std::vector<uint8_t> got_index(index_bytes);
  std::vector<uint32_t> got_max(c.rows);
  CHECK(cudaMemcpy(got_index.data(), d_indices, index_bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_max.data(), d_max, c.rows * 4, cudaMemcpyDeviceToHost));
  const auto index_at = [&](int64_t r) {
    if (m.index_is_int64) {
      int64_t g64;
      std::memcpy(&g64, &got_index[r * 8], 8);
      return g64;
    }
    int32_t g32;
    std::memcpy(&g32, &got_index[r * 4], 4);
    return static_cast<int64_t>(g32);
  };
  int bad = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t got = index_at(r);
    if (got != want_index[r] || got_max[r] != want_max[r]) {
      if (bad < 3) {
        const int64_t pr = m.per_row_params ? r : 0;
        std::printf("  row %lld (kind %d, T %g, k %d, p %g, min_p %g): got %lld (%#x), want "
                    "%lld (%#x)\n",
                    static_cast<long long>(r), kind[r], temp[pr], top_k[pr], top_p[pr],
                    min_p[pr], static_cast<long long>(got), got_max[r],
                    static_cast<long long>(want_index[r]), want_max[r]);
      }
      ++bad;
    }
  }
  // The split vocabulary: stage 1 per shard, the candidates as one row each, stage 2.
  int split_bad = -1;  // not run
  const int64_t w = c.cols / kShards;
  if (c.cols % kShards == 0 && c.k_bound < w) {
    split_bad = 0;
    const int64_t kb = c.k_bound, n = kShards * kb;
    std::vector<Bits> cand(c.rows * n);
    std::vector<int32_t> cand_col(c.rows * n);
    uint8_t *d_block, *d_vals, *d_ws1;
    int32_t* d_idx;
    const size_t ws1 = WorkspaceBytes("top_k", c.rows, w, kb, width);
    CHECK(cudaMalloc(&d_block, c.rows * w * sizeof(Bits)));
    CHECK(cudaMalloc(&d_vals, c.rows * kb * sizeof(Bits)));
    CHECK(cudaMalloc(&d_idx, c.rows * kb * 4));
    CHECK(cudaMalloc(&d_ws1, ws1));
    std::vector<Bits> block(c.rows * w), vals(c.rows * kb);
    std::vector<int32_t> idx(c.rows * kb);
    for (int64_t sh = 0; sh < kShards; ++sh) {
      for (int64_t r = 0; r < c.rows; ++r) {
        std::memcpy(&block[r * w], &x[c.offset + r * c.cols + sh * w], w * sizeof(Bits));
      }
      CHECK(cudaMemcpy(d_block, block.data(), block.size() * sizeof(Bits),
                       cudaMemcpyHostToDevice));
      CHECK(cudaMemsetAsync(d_vals, 0xFF, c.rows * kb * sizeof(Bits), stream));
      CHECK(cudaMemsetAsync(d_ws1, 0xAB, ws1, stream));
      ScaledTopKLaunch stage1;
      stage1.select.stream = stream;
      stage1.select.device = launch.device;
      stage1.select.options.pdl = m.pdl;
      stage1.select.format = F;
      stage1.select.x = d_block;
      stage1.select.rows = c.rows;
      stage1.select.cols = w;
      stage1.select.k = kb;
      stage1.select.values = d_vals;
      stage1.select.indices = d_idx;
      stage1.select.workspace = d_ws1;
      stage1.select.workspace_bytes = ws1;
      stage1.temperature = launch.temperature;
      CHECK(LaunchScaledTopK(stage1));
      CHECK(cudaStreamSynchronize(stream));
      CHECK(cudaMemcpy(vals.data(), d_vals, vals.size() * sizeof(Bits), cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(idx.data(), d_idx, idx.size() * 4, cudaMemcpyDeviceToHost));
      for (int64_t r = 0; r < c.rows; ++r) {
        for (int64_t i = 0; i < kb; ++i) {
          cand[r * n + sh * kb + i] = vals[r * kb + i];
          cand_col[r * n + sh * kb + i] = idx[r * kb + i] + static_cast<int32_t>(sh * w);
        }
      }
    }
    uint8_t *d_cand, *d_ws2;
    int32_t* d_cand_col;
    const size_t ws2 = SampleTopKWorkspaceBytes(c.rows, n, kb, width);
    CHECK(cudaMalloc(&d_cand, cand.size() * sizeof(Bits)));
    CHECK(cudaMalloc(&d_cand_col, cand_col.size() * 4));
    CHECK(cudaMalloc(&d_ws2, ws2));
    CHECK(cudaMemcpy(d_cand, cand.data(), cand.size() * sizeof(Bits), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_cand_col, cand_col.data(), cand_col.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemsetAsync(d_indices, 0xFF, index_bytes, stream));
    CHECK(cudaMemsetAsync(d_max, 0xFF, c.rows * 4, stream));
    CHECK(cudaMemsetAsync(d_ws2, 0xAB, ws2, stream));
    SampleTopKLaunch stage2 = launch;
    stage2.logits = d_cand;
    stage2.cols = n;
    stage2.workspace = d_ws2;
    stage2.workspace_bytes = ws2;
    stage2.columns = d_cand_col;
    CHECK(LaunchSampleTopK(stage2));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy(got_index.data(), d_indices, index_bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(got_max.data(), d_max, c.rows * 4, cudaMemcpyDeviceToHost));
    for (int64_t r = 0; r < c.rows; ++r) {
      const int64_t got = index_at(r);
      // The CPU on the same candidates and columns.
      const int64_t pr = m.per_row_params ? r : 0;
      RowFilters filters;
      filters.k = top_k[pr];
      filters.p = top_p[pr];
      filters.min_p = min_p[pr];
      const auto cpu = FilteredSamplerCpu<F>::SampleRow(&cand[r * n], n, policy.ForRow(r),
                                                        filters, scratch, &cand_col[r * n]);
      int64_t cpu_index = 0;
      uint32_t cpu_max = 0;
      const NoisyMaxEpilogue cpu_out{&cpu_index, true, &cpu_max};
      cpu_out(0, cpu, &cand[r * n]);
      if (got != want_index[r] || got_max[r] != want_max[r] || cpu_index != want_index[r] ||
          cpu_max != want_max[r]) {
        if (split_bad < 3) {
          std::printf("  split row %lld (kind %d, T %g, k %d): got %lld (%#x), cpu %lld (%#x), "
                      "want %lld (%#x)\n",
                      static_cast<long long>(r), kind[r], temp[pr], top_k[pr],
                      static_cast<long long>(got), got_max[r],
                      static_cast<long long>(cpu_index), cpu_max,
                      static_cast<long long>(want_index[r]), want_max[r]);
        }
        ++split_bad;
      }
    }
    for (void* p : std::initializer_list<void*>{d_block, d_vals, d_idx, d_ws1, d_cand,
                                                d_cand_col, d_ws2}) {
      CHECK(cudaFree(p));
    }
  }
  bad += split_bad > 0 ? split_bad : 0;
  ++cases_run;
  mismatches += bad > 0;
  const SampleTopKLayout layout = PlanSampleTopK(c.rows, c.cols, c.k_bound, width);
  std::printf("%s format %d %lldx%lld k_bound=%lld offset %d levels %d | per-row params %d "
              "keys %lld offsets %d int64 %d pdl %d mix %d split %d%s\n",
              bad ? "MISMATCH" : "ok", static_cast<int>(F), static_cast<long long>(c.rows),
              static_cast<long long>(c.cols), static_cast<long long>(c.k_bound), c.offset,
              layout.select.levels, m.per_row_params, static_cast<long long>(num_keys),
              m.offsets, m.index_is_int64, m.pdl, m.mix, split_bad >= 0,
              bad ? (" (" + std::to_string(bad) + " rows)").c_str() : "");
  CHECK(cudaStreamDestroy(stream));
  for (void* p : std::initializer_list<void*>{d_x, d_ws, d_indices, d_max, d_keys, d_temp, d_p,
                                              d_min_p, d_k, d_offsets}) {
    CHECK(cudaFree(p));
  }
}

void Run(const Case& c, const Mode& m, std::mt19937_64& rng) {
  switch (c.f) {
    case Format::kF16: return RunTyped<Format::kF16>(c, m, rng);
    case Format::kBF16: return RunTyped<Format::kBF16>(c, m, rng);
    case Format::kF32: return RunTyped<Format::kF32>(c, m, rng);
    case Format::kF64: break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int pdl_flag = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strncmp(argv[i], "--pdl=", 6) == 0) pdl_flag = std::atoi(argv[i] + 6);
  }
  std::mt19937_64 rng(20240601);
  // (rows, cols, k_bound, offset): small and odd shapes first (one column, k_bound above
  // cols, one select level, two, three), then the serving shapes.
  std::vector<Case> shapes = {
      {Format::kF32, 5, 1, 1, 0},       {Format::kF32, 7, 3, 50, 1},
      {Format::kF32, 33, 100, 50, 0},   {Format::kF32, 17, 1000, 256, 3},
      {Format::kF32, 300, 1000, 2, 0},  {Format::kF32, 4, 4099, 1024, 1},
      {Format::kF32, 2, 8193, 1, 3},    {Format::kF32, 9, 20000, 50, 2},
      {Format::kF32, 3, 50000, 1024, 0},
  };
  if (!quick) {
    shapes.push_back({Format::kF32, 1, 202048, 50, 0});
    shapes.push_back({Format::kF32, 8, 202048, 50, 0});
    shapes.push_back({Format::kF32, 64, 128256, 50, 0});
    shapes.push_back({Format::kF32, 256, 202048, 50, 0});
    shapes.push_back({Format::kF32, 8, 202048, 1024, 0});
    shapes.push_back({Format::kF32, 64, 128256, 256, 1});
    shapes.push_back({Format::kF32, 1, 202048, 1, 0});
    shapes.push_back({Format::kF32, 3, 202048, 2, 0});
    shapes.push_back({Format::kF32, 2, 300001, 777, 2});
  }
  int variant = 0;
  for (Format f : {Format::kF32, Format::kBF16, Format::kF16}) {
    for (Case c : shapes) {
      c.f = f;
      // Two modes per shape, cycling through every combination over the shapes.
      for (int twice = 0; twice < 2; ++twice, ++variant) {
        Mode m;
        m.per_row_params = variant % 2 == 0;
        m.per_row_keys = (variant / 2) % 2 == 0;
        m.offsets = (variant / 4) % 2 == 0;
        m.index_is_int64 = (variant / 3) % 2 == 0;
        m.pdl = pdl_flag >= 0 ? pdl_flag != 0 : (variant / 5) % 2 == 0;
        m.mix = variant % 6;
        Run(c, m, rng);
      }
    }
  }
  std::printf("sample_topk_check: %d cases, %d mismatches\n", cases_run, mismatches);
  return mismatches ? 1 : 0;
}
