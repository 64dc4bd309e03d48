// Standalone check of the CUDA launcher (ffi/argreduce_kernels.h), meant to run under
// compute-sanitizer (memcheck, racecheck): buffers come from plain cudaMalloc so every
// out-of-bounds access is caught. For each set of plan options it runs every launch path (team
// with the row loop, one block per row, split through the workspace with and without
// programmatic dependent launch) on rows with NaNs (any sign and payload), ties,
// infinities, signed zeros, subnormals and all -inf / all-lowest rows planted across block
// boundaries, for argmax/argmin with and without the values output, int32 and int64 indices,
// rows on and off 16-byte alignment; the split path's merge both in its last block (one
// kernel, the call site's self-resetting counter) and in a second kernel, launched from the
// host and captured into CUDA graphs that are replayed. Outputs and the workspace are poisoned before every
// launch; indices are compared with a reference written here (decoded float compares, not the
// integer keys of the kernels) and values bit for bit with the element at the reference index.
// Two launches back to back on one stream share the workspace and the counter slot (the second
// overwrites the first's partials while, with PDL, kernels overlap their predecessor's tail);
// every case reuses the slot of the one before, whose grid was another size, so a counter that
// was not zero again after a launch shows up as a wrong merge.
//
// Build (repository root):
//   nvcc -std=c++17 -arch=sm_90 -O2 -I ffi tests/cuda/kernel_check.cu
//        ffi/argreduce_kernels.cu ffi/launch_plan.cc -o kernel_check
// Run: kernel_check [--pdl=0|1] [--merge=0|1|2] [--quick]
//   (default: every option set, PDL on and off x the split path's merge in a second kernel (0),
//   in the last block (1), or "auto" (2: the last block for few rows from the host, the merge
//   kernel inside CUDA graphs); --quick: one case per path, for the sanitizers)
// Prints one line per case and "kernel_check: N cases, M mismatches"; exit 1 on a mismatch,
// 2 on a CUDA error, 3 when a path (or one of the block path's two widths) expected under the
// options was never taken.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "argreduce_kernels.h"
#include "launch_plan.h"

using namespace jax_argreduce;

#include "cuda_check.h"  // CHECK(call)
#include "float_bits.h"  // Decode

namespace {

size_t Width(Format f) { return static_cast<size_t>(FormatBytes(f)); }


// Bit layout of a format, to build special values from bit patterns.
struct Layout {
  int bits, mant;
  uint64_t Sign() const { return uint64_t{1} << (bits - 1); }
  uint64_t Inf() const { return (Sign() - 1) ^ ((uint64_t{1} << mant) - 1); }
  uint64_t QNaN() const { return Inf() | (uint64_t{1} << (mant - 1)); }
  uint64_t MaxFinite() const { return Inf() - 1; }
  uint64_t MantMask() const { return (uint64_t{1} << mant) - 1; }
};
Layout LayoutOf(Format f) {
  switch (f) {
    case Format::kF16: return {16, 10};
    case Format::kBF16: return {16, 7};
    case Format::kF32: return {32, 23};
    case Format::kF64: return {64, 52};
  }
  return {32, 23};
}

// Round to nearest in the format (finite values only: special values are built from bits).
uint64_t FromDouble(Format f, double v) {
  switch (f) {
    case Format::kF16: return static_cast<__half_raw>(__double2half(v)).x;
    case Format::kBF16: return static_cast<__nv_bfloat16_raw>(__double2bfloat16(v)).x;
    case Format::kF32: {
      const float x = static_cast<float>(v);
      uint32_t b;
      std::memcpy(&b, &x, 4);
      return b;
    }
    case Format::kF64: {
      uint64_t b;
      std::memcpy(&b, &v, 8);
      return b;
    }
  }
  return 0;
}

// numpy's rule: the first NaN if any, else the first maximum (minimum); -0 == +0.
int64_t Reference(const std::vector<double>& row, bool is_min) {
  int64_t best = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    if (std::isnan(row[i])) return static_cast<int64_t>(i);
    if (is_min ? row[i] < row[best] : row[i] > row[best]) best = static_cast<int64_t>(i);
  }
  return best;
}

// Fills one row (bits) with one of the special-value patterns.
void FillRow(Format f, std::mt19937_64& rng, uint64_t* row, int64_t cols) {
  const Layout L = LayoutOf(f);
  std::normal_distribution<double> normal;
  auto pos = [&]() { return static_cast<int64_t>(rng() % cols); };
  auto sign = [&]() { return (rng() & 1) ? L.Sign() : 0; };
  auto nan = [&]() {  // quiet or signalling, any payload, either sign
    const uint64_t payload = 1 + rng() % L.MantMask();
    return ((rng() % 3 == 0) ? L.QNaN() : (L.Inf() | payload)) | sign();
  };
  for (int64_t i = 0; i < cols; ++i) row[i] = FromDouble(f, normal(rng));
  switch (static_cast<int>(rng() % 10)) {
    case 1: for (int k = 0; k < 3; ++k) row[pos()] = nan(); break;             // NaNs anywhere
    case 2: {                                                                  // ties far apart
      const uint64_t hi = FromDouble(f, 1e4), lo = FromDouble(f, -1e4);
      for (int k = 0; k < 3; ++k) { row[pos()] = hi; row[pos()] = lo; }
      break;
    }
    case 3: for (int64_t i = 0; i < cols; ++i) row[i] = L.Inf() | L.Sign(); break;  // all -inf
    case 4: for (int64_t i = 0; i < cols; ++i) row[i] = sign(); break;               // ±0 only
    case 5: row[pos()] = L.Inf(); row[pos()] = L.Inf() | L.Sign(); break;
    case 6:  // subnormals (k * the smallest, k <= 5: close values and ties), ±0 among none
      for (int64_t i = 0; i < cols; ++i) row[i] = (1 + rng() % 5) | sign();
      break;
    case 7: for (int64_t i = 0; i < cols; ++i) row[i] = L.MaxFinite() | L.Sign(); break;  // lowest
    case 8: for (int64_t i = 0; i < cols; ++i) row[i] = nan(); break;                // all NaN
    case 9: row[cols - 1] = nan(); break;                                            // last column
    default: break;
  }
}

struct Options {
  std::vector<PlanOptions> sets;
  bool quick = false;
};

Options ParseArgs(int argc, char** argv) {
  int pdl = -1, merge = -1;
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--pdl=", 0) == 0) pdl = std::atoi(a.c_str() + 6);
    else if (a.rfind("--merge=", 0) == 0) merge = std::atoi(a.c_str() + 8);
    else if (a == "--quick") o.quick = true;
    else { std::printf("unknown argument %s\n", a.c_str()); std::exit(4); }
  }
  for (int p = 0; p < 2; ++p) {
    for (int m = 0; m < 3; ++m) {
      if ((pdl < 0 || pdl == p) && (merge < 0 || merge == m)) {
        PlanOptions opt;
        opt.pdl = p != 0;
        opt.merge = m == 0 ? MergeMode::kKernel : m == 1 ? MergeMode::kLastBlock : MergeMode::kAuto;
        o.sets.push_back(opt);
      }
    }
  }
  return o;
}

struct Case { int64_t rows, cols; };

}  // namespace

int main(int argc, char** argv) {
  const Options args = ParseArgs(argc, argv);
  int device = 0;
  CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, device));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const size_t ws_bytes = kWorkspaceBytes;
  void* d_ws = nullptr;
  CHECK(cudaMalloc(&d_ws, ws_bytes));
  // Team with the row loop (400000 x 5: more rows than threads in one wave), the planner's
  // team widths (1024 x 3001 and 1023 x 3001: two-warp teams on the H200 for 12 KB float32
  // rows, the second with a block's last teams past the last row), one block per row (300 x
  // 4097, 150 x 30001, and from half the SMs' count of rows up to one per SM: 100 x 20001, 132
  // x 20001), few wide rows (split) incl. a row longer than one scan step (1 x 2^21), up to
  // one row per SM (100 x 202049), odd widths.
  std::vector<Case> cases = {{400000, 5}, {70001, 3}, {4096, 8},    {3, 1},      {5, 2},
                             {1000, 1023}, {300, 4097}, {150, 30001}, {1, 202049}, {2, 202047},
                             {8, 131073}, {1, 1 << 21}, {40, 65535},  {100, 20001}, {132, 20001},
                             {64, 32000}, {1024, 3001}, {1023, 3001}, {100, 202049}};
  if (args.quick) {  // one case per path (under compute-sanitizer)
    cases = {{400000, 5}, {4096, 8}, {1024, 3001}, {1023, 3001}, {300, 4097}, {1, 202049},
             {8, 131073}, {100, 20001}};
  }
  const Format formats[] = {Format::kF32, Format::kBF16, Format::kF16, Format::kF64};
  constexpr uint32_t kSlot = 7;  // every launch: one call site
  std::mt19937_64 rng(20261130);
  int total = 0, bad = 0, missing = 0, setups = 0;

  for (const PlanOptions& options : args.sets) {
    std::set<Path> taken;
    std::set<int> block_widths;  // threads per block the block path launched with
    std::printf("== options pdl=%d merge=%s (device %d, %s, %d SMs, cc %d.%d)\n",
                options.pdl, MergeModeName(options.merge), device, prop.name,
                prop.multiProcessorCount, prop.major, prop.minor);
    for (const Case& c : cases) {
      for (Format f : formats) {
        const size_t w = Width(f);
        // Every second (case, format) starts the rows one element off 16-byte alignment.
        const int64_t offset = (setups++ % 2) ? 1 : 0;
        const int64_t n = c.rows * c.cols;
        // Two inputs: launched back to back on one stream, sharing the workspace.
        std::vector<std::vector<uint8_t>> host(2, std::vector<uint8_t>((n + offset) * w));
        std::vector<std::vector<uint64_t>> bits(2, std::vector<uint64_t>(n));
        for (int k = 0; k < 2; ++k) {
          for (int64_t r = 0; r < c.rows; ++r) FillRow(f, rng, bits[k].data() + r * c.cols, c.cols);
          for (int64_t i = 0; i < n; ++i) {
            std::memcpy(host[k].data() + (i + offset) * w, &bits[k][i], w);
          }
        }
        void* d_x[2] = {nullptr, nullptr};
        void* d_idx[2] = {nullptr, nullptr};
        void* d_val[2] = {nullptr, nullptr};
        for (int k = 0; k < 2; ++k) {
          CHECK(cudaMalloc(&d_x[k], host[k].size()));
          CHECK(cudaMalloc(&d_idx[k], c.rows * 8));
          CHECK(cudaMalloc(&d_val[k], c.rows * w));
          CHECK(cudaMemcpy(d_x[k], host[k].data(), host[k].size(), cudaMemcpyHostToDevice));
        }
        // The copies ran on the legacy default stream, which the non-blocking `stream` does not
        // wait for (a pageable cudaMemcpy may return before its DMA lands).
        CHECK(cudaDeviceSynchronize());
        LaunchPlan plan;
        for (int is_min = 0; is_min < 2; ++is_min) {
          CHECK(PlanArgReduce(device, options, f, is_min, c.rows, c.cols, false, &plan));
          taken.insert(plan.path);
          if (plan.path == Path::kBlock) block_widths.insert(plan.block);
          if (plan.pdl != (options.pdl && prop.major >= 9)) {  // PDL exactly where asked and able
            std::printf("  plan pdl=%d with option pdl=%d on cc %d\n", plan.pdl, options.pdl,
                        prop.major);
            ++bad;
          }
          const bool last_block = options.merge == MergeMode::kLastBlock ||
                                  (options.merge == MergeMode::kAuto &&
                                   c.rows <= kLastBlockMergeMaxRows);  // launched from the host
          if (plan.path == Path::kSplit && plan.last_block_merges != last_block) {
            std::printf("  plan last_block_merges=%d with merge=%s\n", plan.last_block_merges,
                        MergeModeName(options.merge));
            ++bad;
          }
          // Reference indices per input and row.
          std::vector<std::vector<int64_t>> want(2, std::vector<int64_t>(c.rows));
          for (int k = 0; k < 2; ++k) {
            std::vector<double> row(c.cols);
            for (int64_t r = 0; r < c.rows; ++r) {
              for (int64_t i = 0; i < c.cols; ++i) row[i] = Decode(f, bits[k][r * c.cols + i]);
              want[k][r] = Reference(row, is_min);
            }
          }
          // Variants 0-3: bit 0 int64 indices, bit 1 values. Variant 4 (split path): both
          // launches captured into a CUDA graph (as XLA's command buffers do; merge "auto" then
          // takes the merge kernel), replayed twice with the outputs poisoned in between.
          for (int variant = 0; variant < 5; ++variant) {
            const bool graph = variant == 4;
            if (graph && plan.path != Path::kSplit) continue;
            const bool idx64 = !graph && (variant & 1);
            const bool with_values = graph || (variant & 2);
            auto poison_outputs = [&] {
              for (int k = 0; k < 2; ++k) {
                CHECK(cudaMemsetAsync(d_idx[k], 0x7F, c.rows * 8, stream));
                CHECK(cudaMemsetAsync(d_val[k], 0x5A, c.rows * w, stream));
              }
            };
            auto launch_both = [&] {
              for (int k = 0; k < 2; ++k) {
                const void* x = static_cast<const uint8_t*>(d_x[k]) + offset * w;
                ArgReduceLaunch launch;
                launch.stream = stream;
                launch.device = device;
                launch.counter_slot = kSlot;
                launch.options = options;
                launch.format = f;
                launch.is_min = is_min;
                launch.x = x;
                launch.rows = c.rows;
                launch.cols = c.cols;
                launch.indices = d_idx[k];
                launch.index_is_int64 = idx64;
                launch.values = with_values ? d_val[k] : nullptr;
                launch.workspace = d_ws;
                launch.workspace_bytes = ws_bytes;
                CHECK(LaunchArgReduce(launch));
              }
            };
            poison_outputs();
            CHECK(cudaMemsetAsync(d_ws, 0xAB, ws_bytes, stream));  // garbage partials
            if (graph) {
              cudaGraph_t g = nullptr;
              cudaGraphExec_t exec = nullptr;
              CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
              launch_both();
              CHECK(cudaStreamEndCapture(stream, &g));
              CHECK(cudaGraphInstantiate(&exec, g, 0));
              for (int replay = 0; replay < 2; ++replay) {
                poison_outputs();
                CHECK(cudaGraphLaunch(exec, stream));
              }
              CHECK(cudaStreamSynchronize(stream));
              CHECK(cudaGraphExecDestroy(exec));
              CHECK(cudaGraphDestroy(g));
            } else {
              launch_both();
            }
            CHECK(cudaStreamSynchronize(stream));
            int case_bad = 0;
            for (int k = 0; k < 2; ++k) {
              std::vector<uint8_t> idx_host(c.rows * 8), val_host(c.rows * w);
              CHECK(cudaMemcpy(idx_host.data(), d_idx[k], c.rows * 8, cudaMemcpyDeviceToHost));
              CHECK(cudaMemcpy(val_host.data(), d_val[k], c.rows * w, cudaMemcpyDeviceToHost));
              for (int64_t r = 0; r < c.rows; ++r) {
                int64_t got = 0;
                if (idx64) {
                  std::memcpy(&got, idx_host.data() + r * 8, 8);
                } else {
                  int32_t g32;
                  std::memcpy(&g32, idx_host.data() + r * 4, 4);
                  got = g32;
                }
                const int64_t want_index = want[k][r];
                uint64_t got_bits = 0, want_bits = bits[k][r * c.cols + want_index];
                std::memcpy(&got_bits, val_host.data() + r * w, w);
                uint64_t poison = 0;
                std::memset(&poison, 0x5A, w);
                const bool index_ok = got == want_index;
                const bool value_ok = with_values ? got_bits == want_bits : got_bits == poison;
                if ((!index_ok || !value_ok) && case_bad++ < 3) {
                  std::printf("  MISMATCH rows=%lld cols=%lld fmt=%d min=%d input=%d row=%lld "
                              "index got=%lld want=%lld value bits got=%#llx want=%#llx%s\n",
                              (long long)c.rows, (long long)c.cols, (int)f, is_min, k,
                              (long long)r, (long long)got, (long long)want_index,
                              (unsigned long long)got_bits, (unsigned long long)want_bits,
                              with_values ? "" : " (values not requested: must stay poisoned)");
                }
              }
            }
            // Everything past the plan's workspace must be untouched.
            if (plan.workspace_bytes + 16 < ws_bytes) {
              std::vector<uint8_t> tail(ws_bytes - plan.workspace_bytes - 16);
              CHECK(cudaMemcpy(tail.data(),
                               static_cast<uint8_t*>(d_ws) + plan.workspace_bytes + 16,
                               tail.size(), cudaMemcpyDeviceToHost));
              for (uint8_t b : tail) {
                if (b != 0xAB) {
                  if (case_bad++ < 3) std::printf("  workspace written past the plan's bytes\n");
                  break;
                }
              }
            }
            std::printf("%-7lld x %-8lld fmt=%d min=%d i64=%d values=%d off=%lld path=%s%s "
                        "team=%d parts=%d grid=%lld block=%d pdl=%d ws=%zu: %s\n",
                        (long long)c.rows, (long long)c.cols, (int)f, is_min, idx64,
                        with_values, (long long)offset, PathName(plan.path),
                        graph ? " (graph)" : "", plan.team,
                        plan.parts, (long long)plan.grid, plan.block, plan.pdl,
                        plan.workspace_bytes, case_bad ? "FAIL" : "ok");
            ++total;
            bad += case_bad != 0;
          }
        }
        for (int k = 0; k < 2; ++k) {
          CHECK(cudaFree(d_x[k]));
          CHECK(cudaFree(d_idx[k]));
          CHECK(cudaFree(d_val[k]));
        }
      }
    }
    // Every path must be reached under every option set (PDL is only a launch attribute).
    for (Path p : {Path::kTeam, Path::kBlock, Path::kSplit}) {
      if (!taken.count(p)) {
        std::printf("  path %s never taken with pdl=%d merge=%s\n", PathName(p), options.pdl,
                    MergeModeName(options.merge));
        ++missing;
      }
    }
    // And both block widths (launch_plan.h: kWideBlockThreads where at most one row per SM has
    // rows longer than one load round), so a planner change cannot drop either kernel width
    // from the sanitizers' cases unnoticed.
    for (int width : {kBlockThreads, kWideBlockThreads}) {
      if (!block_widths.count(width)) {
        std::printf("  block path never launched %d threads with pdl=%d merge=%s\n", width,
                    options.pdl, MergeModeName(options.merge));
        ++missing;
      }
    }
  }
  CHECK(cudaFree(d_ws));
  CHECK(cudaStreamDestroy(stream));
  std::printf("kernel_check: %d cases, %d mismatches, %d paths missing\n", total, bad, missing);
  return bad ? 1 : missing ? 3 : 0;
}
