// Standalone check of the top_k launcher (ffi/top_k_kernels.h), meant to run under
// compute-sanitizer (memcheck, racecheck): buffers come from plain cudaMalloc so every
// out-of-bounds access is caught. Every plan shape is taken (level 0 alone, two levels, three
// and more; 8, 16 and 32 elements per thread) for float16, bfloat16 and float32, on rows of
// normal values, few distinct values (ties everywhere, also at the k-th place), NaNs of both
// signs and random payloads, ±0, ±inf, subnormals and all -inf rows, aligned and unaligned row
// starts, k from 1 to 1024, launched from the host and captured into a CUDA graph that is
// replayed. Outputs and the workspace are poisoned before every launch; values are compared
// bit for bit and indices with a reference written here (decoded floats sorted by (NaN first,
// value descending, -0 == +0, index ascending)), not the kernels' radix keys.
// The split vocabulary's candidates (sample_topk_kernels.h, LaunchScaledTopK: the same select
// ranked by the sampler's z = x * (1/T) of each row) are checked the same way against z
// computed here in float32 (T == 0, or 1/T overflowing: x itself), with one temperature per
// row or one for all, from mixes with T = 0, tiny and huge T and T that makes distinct x tie.
//
// Build (repository root):
//   nvcc -std=c++17 -arch=sm_90 -O2 -I ffi tests/cuda/select_check.cu ffi/top_k_kernels.cu
//        ffi/sample_topk_kernels.cu ffi/launch_plan.cc -o select_check
// Run: select_check [--pdl=0|1] [--quick]
//      select_check --time (no checks: the median of 30 launches, by CUDA events, of the
//      benchmark shapes; for comparing builds of the kernels on one GPU)
// Prints one line per case and "select_check: N cases, M mismatches"; exit 1 on a mismatch,
// 2 on a CUDA error, 3 when a plan shape was never taken.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "launch_plan.h"
#include "sample_topk_kernels.h"
#include "top_k_kernels.h"

using namespace jax_argreduce;

#include "cuda_check.h"  // CHECK(call)
#include "float_bits.h"   // Decode
#include "select_rows.h"  // Encode, SpecOf, FillRow, kKinds

namespace {

// The temperatures of the scaled cases (a row's: kTemps[(row + shift) % 7]): 0 and 1e-45
// (1/T overflows) rank by x; 0.7 and 3 make distinct x tie once scaled; 2^127 makes z subnormal.
const float kTemps[] = {1.0f, 0.7f, 3.0f, 0.0f, 0x1p127f, 1e-45f, 0.05f};

// What a row's elements are ranked by: x decoded exactly, or where `t` is not NaN the
// sampler's z = x * (1/T) in float32 (±inf stay; T == 0 or 1/T = inf: x).
double RankValue(Format f, uint32_t bits, float t) {
  const double x = Decode(f, bits);
  if (std::isnan(t)) return x;
  const float inv_t = t == 0.0f ? 0.0f : 1.0f / t;
  if (t == 0.0f || std::isinf(inv_t) || std::isinf(x)) return x;
  return static_cast<float>(x) * inv_t;
}

// The reference: columns of the k first elements by RankValue (NaN first, value descending,
// -0 == +0, index ascending).
std::vector<int32_t> Reference(Format f, const uint32_t* row, int64_t cols, int64_t k,
                               float t) {
  std::vector<int32_t> idx(cols);
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<double> value(cols);
  std::vector<char> nan(cols);
  for (int64_t c = 0; c < cols; ++c) {
    value[c] = RankValue(f, row[c], t);
    nan[c] = std::isnan(value[c]);
  }
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    if (nan[a] != nan[b]) return nan[a] > nan[b];
    if (!nan[a] && value[a] != value[b]) return value[a] > value[b];
    return a < b;
  });
  idx.resize(k);
  return idx;
}

struct Case {
  Format f;
  int64_t rows, cols, k;
  int offset;  // elements the input starts past a 16-byte boundary
};

// A case's device buffers (plain cudaMalloc: the sanitizer sees every overrun) and the launch
// over them; the input is `host` (the case's elements after `offset` padding elements).
struct Buffers {
  uint8_t *x = nullptr, *values = nullptr, *workspace = nullptr;
  int32_t* indices = nullptr;
  float* temperature = nullptr;
  TopKLaunch launch;

  Buffers(const Case& c, const std::vector<uint8_t>& host) {
    const size_t width = FormatBytes(c.f);
    const size_t ws = WorkspaceBytes("top_k", c.rows, c.cols, c.k, static_cast<int>(width));
    CHECK(cudaMalloc(&x, host.size()));
    CHECK(cudaMalloc(&values, c.rows * c.k * width));
    CHECK(cudaMalloc(&indices, c.rows * c.k * sizeof(int32_t)));
    CHECK(cudaMalloc(&workspace, ws));
    CHECK(cudaMalloc(&temperature, c.rows * sizeof(float)));
    CHECK(cudaMemcpy(x, host.data(), host.size(), cudaMemcpyHostToDevice));
    launch.format = c.f;
    launch.x = x + c.offset * width;
    launch.rows = c.rows;
    launch.cols = c.cols;
    launch.k = c.k;
    launch.values = values;
    launch.indices = indices;
    launch.workspace = workspace;
    launch.workspace_bytes = ws;
    CHECK(cudaGetDevice(&launch.device));
  }
  ~Buffers() {
    CHECK(cudaFree(x));
    CHECK(cudaFree(values));
    CHECK(cudaFree(indices));
    CHECK(cudaFree(workspace));
    CHECK(cudaFree(temperature));
  }
};

int cases_run = 0, mismatches = 0;
std::set<std::string> taken;

// scaled: 0 (top_k), 1 (the scaled select, one temperature per row), 2 (one for all rows).
void Run(const Case& c, bool pdl, bool graph, std::mt19937_64& rng, int scaled = 0) {
  const size_t width = FormatBytes(c.f);
  const int64_t n = c.rows * c.cols;
  std::vector<uint32_t> bits(n);
  for (int64_t r = 0; r < c.rows; ++r) {
    FillRow(SpecOf(c.f), static_cast<int>((r + rng() % 2) % kKinds), rng, &bits[r * c.cols],
            c.cols);
  }
  std::vector<uint8_t> host((n + c.offset) * width);
  for (int64_t i = 0; i < n; ++i) std::memcpy(&host[(i + c.offset) * width], &bits[i], width);
  const SelectPlan plan = PlanTopK(c.rows, c.cols, c.k, static_cast<int>(width));
  taken.insert(std::to_string(static_cast<int>(c.f)) + "/E" +
               std::to_string(plan.elements_per_thread));
  taken.insert("levels" + std::to_string(std::min(plan.levels, 3)));
  Buffers buf(c, host);
  uint8_t* d_values = buf.values;
  int32_t* d_indices = buf.indices;
  const size_t ws_bytes = buf.launch.workspace_bytes;
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  TopKLaunch launch = buf.launch;
  launch.stream = stream;
  launch.options.pdl = pdl;
  std::vector<float> temps(c.rows, NAN);  // NaN: ranked by x (top_k)
  const int shift = static_cast<int>(rng() % 7);
  for (int64_t r = 0; scaled != 0 && r < c.rows; ++r) {
    temps[r] = kTemps[((scaled == 1 ? r : 0) + shift) % 7];
  }
  if (scaled != 0) {
    CHECK(cudaMemcpy(buf.temperature, temps.data(), c.rows * sizeof(float),
                     cudaMemcpyHostToDevice));
  }
  const ScaledTopKLaunch scaled_launch{launch, RowParam<float>{buf.temperature, scaled == 1}};
  auto run = [&] { return scaled != 0 ? LaunchScaledTopK(scaled_launch) : LaunchTopK(launch); };
  CHECK(cudaMemsetAsync(d_values, 0xFF, c.rows * c.k * width, stream));
  CHECK(cudaMemsetAsync(d_indices, 0xFF, c.rows * c.k * sizeof(int32_t), stream));
  CHECK(cudaMemsetAsync(buf.workspace, 0xAB, ws_bytes, stream));
  if (graph) {  // captured, replayed twice (the second replay over the first's workspace)
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    CHECK(run());
    CHECK(cudaStreamEndCapture(stream, &g));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaMemsetAsync(d_values, 0xFF, c.rows * c.k * width, stream));
    CHECK(cudaMemsetAsync(d_indices, 0xFF, c.rows * c.k * sizeof(int32_t), stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
  } else {
    CHECK(run());
  }
  CHECK(cudaStreamSynchronize(stream));
  std::vector<uint8_t> values(c.rows * c.k * width);
  std::vector<int32_t> indices(c.rows * c.k);
  CHECK(cudaMemcpy(values.data(), d_values, values.size(), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(indices.data(), d_indices, indices.size() * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int64_t r = 0; r < c.rows && bad < 3; ++r) {
    const std::vector<int32_t> want = Reference(c.f, &bits[r * c.cols], c.cols, c.k, temps[r]);
    for (int64_t i = 0; i < c.k; ++i) {
      uint32_t got_bits = 0;
      std::memcpy(&got_bits, &values[(r * c.k + i) * width], width);
      const int32_t got = indices[r * c.k + i];
      if (got != want[i] || got_bits != bits[r * c.cols + want[i]]) {
        if (bad++ < 3) {
          std::printf("  row %lld place %lld: got column %d (bits %#x), want %d (bits %#x)\n",
                      static_cast<long long>(r), static_cast<long long>(i), got, got_bits,
                      want[i], bits[r * c.cols + want[i]]);
        }
        break;
      }
    }
  }
  ++cases_run;
  mismatches += bad > 0;
  std::printf("%s format %d %lldx%lld k=%lld offset %d E%d levels %d pdl %d graph %d scaled %d\n",
              bad ? "MISMATCH" : "ok", static_cast<int>(c.f), static_cast<long long>(c.rows),
              static_cast<long long>(c.cols), static_cast<long long>(c.k), c.offset,
              plan.elements_per_thread, plan.levels, pdl, graph, scaled);
  CHECK(cudaStreamDestroy(stream));
}

}  // namespace

// --time: the median launch time (CUDA events) of each benchmark shape on normal rows.
int Time() {
  std::mt19937_64 rng(7);
  const Case shapes[] = {{Format::kF32, 1, 202048, 50, 0},   {Format::kF32, 8, 202048, 50, 0},
                         {Format::kF32, 256, 202048, 50, 0}, {Format::kBF16, 1, 202048, 50, 0},
                         {Format::kBF16, 8, 202048, 50, 0},  {Format::kBF16, 256, 202048, 50, 0},
                         {Format::kF32, 256, 202048, 1024, 0}};
  for (const Case& c : shapes) {
    const size_t width = FormatBytes(c.f);
    const int64_t n = c.rows * c.cols;
    std::vector<uint32_t> bits(n);
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < n; ++i) bits[i] = Encode(c.f, normal(rng));
    std::vector<uint8_t> host(n * width);
    for (int64_t i = 0; i < n; ++i) std::memcpy(&host[i * width], &bits[i], width);
    Buffers buf(c, host);
    const TopKLaunch& launch = buf.launch;
    const double us = MedianMicros([&] { return LaunchTopK(launch); });
    std::printf("time format %d %lldx%lld k=%lld: %.2f us\n", static_cast<int>(c.f),
                static_cast<long long>(c.rows), static_cast<long long>(c.cols),
                static_cast<long long>(c.k), us);
  }
  return 0;
}

int main(int argc, char** argv) {
  bool quick = false;
  int pdl_flag = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--time") == 0) return Time();
    else if (std::strncmp(argv[i], "--pdl=", 6) == 0) pdl_flag = std::atoi(argv[i] + 6);
  }
  std::mt19937_64 rng(12345);
  // (rows, cols, k): level 0 alone at E 32 and 8, E 16, two levels at E 8 and 32, three and
  // four levels (k = 1024), k = cols, a row shorter than k candidates' chunk, k = 1.
  std::vector<Case> shapes = {
      {Format::kF32, 300, 1000, 10, 0},   {Format::kF32, 3, 1000, 1000, 0},
      {Format::kF32, 64, 20000, 16, 0},   {Format::kF32, 1, 50000, 50, 0},
      {Format::kF32, 256, 9000, 50, 0},   {Format::kF32, 1, 50000, 1024, 0},
      {Format::kF32, 2, 8193, 1, 3},      {Format::kF32, 5, 4099, 257, 1},
  };
  if (!quick) {
    shapes.push_back({Format::kF32, 1, 202048, 1024, 0});
    shapes.push_back({Format::kF32, 8, 202048, 50, 0});
    shapes.push_back({Format::kF32, 256, 32001, 256, 1});
    shapes.push_back({Format::kF32, 2, 300001, 777, 2});
  }
  std::vector<Case> cases;
  for (Format f : {Format::kF32, Format::kBF16, Format::kF16}) {
    for (Case c : shapes) {
      c.f = f;
      cases.push_back(c);
    }
  }
  for (const Case& c : cases) {
    for (int pdl = 0; pdl <= 1; ++pdl) {
      if (pdl_flag >= 0 && pdl != pdl_flag) continue;
      Run(c, pdl != 0, false, rng);
      if (!quick || c.rows * c.cols < 100000) Run(c, pdl != 0, true, rng);
      Run(c, pdl != 0, false, rng, 1 + pdl);  // the scaled select, per-row and shared T
    }
  }
  std::printf("select_check: %d cases, %d mismatches\n", cases_run, mismatches);
  if (mismatches) return 1;
  for (const char* want : {"levels1", "levels2", "levels3", "0/E8", "0/E16", "0/E32", "1/E8",
                           "1/E16", "1/E32", "2/E8", "2/E16", "2/E32"}) {
    if (!taken.count(want)) {
      std::printf("select_check: plan shape %s never taken\n", want);
      return 3;
    }
  }
  return 0;
}
