// Standalone check of the CUDA launcher, meant to run under compute-sanitizer (memcheck,
// racecheck): buffers come from plain cudaMalloc so every out-of-bounds access is caught. Runs
// every launch path (team with row loop, one block per row, several blocks per row) on random
// rows with NaNs, ties and infinities planted across block boundaries, with the output and the
// workspace poisoned before each launch, and compares with a plain reference written here
// (float compares on decoded values, not the integer keys the kernels use).
//
// Build: nvcc -std=c++17 -arch=sm_90 -I../../ffi kernel_check.cu ../../ffi/argreduce_kernels.cu
// Prints one line per case and "kernel_check: N cases, M mismatches"; exit 1 on a mismatch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "argreduce_kernels.h"

using namespace jax_argreduce;

#define CHECK(x)                                                                 \
  do {                                                                           \
    cudaError_t e = (x);                                                         \
    if (e != cudaSuccess) {                                                      \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(2);                                                              \
    }                                                                            \
  } while (0)

// Encode a double as the format's bits (round to nearest) and decode it back exactly.
uint64_t Encode(Format f, double v) {
  switch (f) {
    case Format::kF16: { __half h = __double2half(v); uint16_t b; std::memcpy(&b, &h, 2); return b; }
    case Format::kBF16: { __nv_bfloat16 h = __double2bfloat16(v); uint16_t b; std::memcpy(&b, &h, 2); return b; }
    case Format::kF32: { float x = static_cast<float>(v); uint32_t b; std::memcpy(&b, &x, 4); return b; }
    case Format::kF64: { uint64_t b; std::memcpy(&b, &v, 8); return b; }
  }
  return 0;
}
double Decode(Format f, uint64_t bits) {
  switch (f) {
    case Format::kF16: { uint16_t b = bits; __half h; std::memcpy(&h, &b, 2); return __half2float(h); }
    case Format::kBF16: { uint32_t b = static_cast<uint32_t>(bits) << 16; float x; std::memcpy(&x, &b, 4); return x; }
    case Format::kF32: { uint32_t b = bits; float x; std::memcpy(&x, &b, 4); return x; }
    case Format::kF64: { double x; std::memcpy(&x, &bits, 8); return x; }
  }
  return 0;
}
size_t Width(Format f) { return f == Format::kF64 ? 8 : f == Format::kF32 ? 4 : 2; }

// numpy's rule: the first NaN if any, else the first maximum (minimum); -0 == +0.
int64_t Reference(const std::vector<double>& row, bool is_min) {
  int64_t best = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    if (std::isnan(row[i])) return i;
    if (is_min ? row[i] < row[best] : row[i] > row[best]) best = i;
  }
  return best;
}

int main() {
  std::mt19937_64 rng(20261130);
  std::normal_distribution<double> normal;
  const size_t ws_bytes = kArgReduceWorkspaceBytes;
  void* d_ws = nullptr;
  CHECK(cudaMalloc(&d_ws, ws_bytes));
  struct Case { int64_t rows, cols; };
  // Team path with rows looped (400000 x 5: more rows than threads in the wave), team 32,
  // one block per row, clusters (or, with JAX_ARGREDUCE_DISABLE_CLUSTERS=1, several blocks per
  // row through the workspace + done counter) incl. a row longer than one scan step, small
  // clusters for up to one row per SM (100 x 20001), odd widths.
  const Case cases[] = {{400000, 5}, {70001, 3}, {4096, 8}, {3, 1}, {5, 2}, {1000, 1023},
                        {300, 4097}, {1, 202049}, {2, 202047}, {8, 131073}, {1, 1 << 21},
                        {40, 65535}, {100, 20001}};
  const Format formats[] = {Format::kF32, Format::kBF16, Format::kF16, Format::kF64};
  int total = 0, bad = 0;
  for (const Case& c : cases) {
    for (Format f : formats) {
      // Every second case starts the rows one element off 16-byte alignment.
      const int64_t offset = (total % 2) ? 1 : 0;
      const int64_t n = c.rows * c.cols;
      std::vector<double> values(n);
      for (auto& v : values) v = normal(rng);
      for (int64_t r = 0; r < c.rows; ++r) {
        double* row = values.data() + r * c.cols;
        const int kind = static_cast<int>(rng() % 6);
        auto pos = [&]() { return static_cast<int64_t>(rng() % c.cols); };
        if (kind == 1) { row[pos()] = NAN; row[pos()] = -NAN; }               // NaNs anywhere
        if (kind == 2) { const double m = 1e4; row[pos()] = m; row[pos()] = m; row[pos()] = -m; row[pos()] = -m; }  // ties
        if (kind == 3) { for (int64_t i = 0; i < c.cols; ++i) row[i] = -INFINITY; }
        if (kind == 4) { for (int64_t i = 0; i < c.cols; ++i) row[i] = (i % 2) ? 0.0 : -0.0; }
        if (kind == 5) { row[pos()] = INFINITY; row[pos()] = -INFINITY; }
      }
      std::vector<uint8_t> host((n + offset) * Width(f));
      std::vector<std::vector<double>> rows_decoded(c.rows);
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t bits = Encode(f, values[i]);
        std::memcpy(host.data() + (i + offset) * Width(f), &bits, Width(f));
        rows_decoded[i / c.cols].push_back(Decode(f, bits));
      }
      void* d_x = nullptr;
      void* d_out = nullptr;
      CHECK(cudaMalloc(&d_x, host.size()));
      CHECK(cudaMalloc(&d_out, c.rows * 8));
      CHECK(cudaMemcpy(d_x, host.data(), host.size(), cudaMemcpyHostToDevice));
      for (int is_min = 0; is_min < 2; ++is_min) {
        for (int idx64 = 0; idx64 < 2; ++idx64) {
          CHECK(cudaMemset(d_out, 0x7F, c.rows * 8));  // poison
          CHECK(cudaMemset(d_ws, 0xAB, ws_bytes));    // garbage counters and partials
          const void* x = static_cast<const uint8_t*>(d_x) + offset * Width(f);
          CHECK(LaunchArgReduce(0, f, is_min, x, c.rows, c.cols, d_out, idx64, d_ws, ws_bytes));
          CHECK(cudaDeviceSynchronize());
          std::vector<int64_t> out64(c.rows);
          std::vector<int32_t> out32(c.rows);
          if (idx64) CHECK(cudaMemcpy(out64.data(), d_out, c.rows * 8, cudaMemcpyDeviceToHost));
          else CHECK(cudaMemcpy(out32.data(), d_out, c.rows * 4, cudaMemcpyDeviceToHost));
          int case_bad = 0;
          for (int64_t r = 0; r < c.rows; ++r) {
            const int64_t got = idx64 ? out64[r] : out32[r];
            const int64_t want = Reference(rows_decoded[r], is_min);
            if (got != want && case_bad++ < 3) {
              std::printf("  MISMATCH rows=%lld cols=%lld fmt=%d min=%d row=%lld got=%lld want=%lld\n",
                          (long long)c.rows, (long long)c.cols, (int)f, is_min, (long long)r,
                          (long long)got, (long long)want);
            }
          }
          LaunchPlan plan;
          CHECK(PlanArgReduce(f, is_min, c.rows, c.cols, &plan));
          std::printf("%-8lld x %-8lld fmt=%d min=%d i64=%d off=%lld team=%d bpr=%d grid=%lld: %s\n",
                      (long long)c.rows, (long long)c.cols, (int)f, is_min, idx64,
                      (long long)offset, plan.team, plan.blocks_per_row, (long long)plan.grid,
                      case_bad ? "FAIL" : "ok");
          ++total;
          bad += case_bad != 0;
        }
      }
      CHECK(cudaFree(d_x));
      CHECK(cudaFree(d_out));
    }
  }
  CHECK(cudaFree(d_ws));
  std::printf("kernel_check: %d cases, %d mismatches\n", total, bad);
  return bad ? 1 : 0;
}
