// Our kernels alone, for `ncu` (benchmarks/gpu_check.sh ncu): the launcher of
// ffi/argreduce_kernels.cu on the shapes whose SPEC §4 targets were missed, without JAX, so the
// profiler attaches to a small process. Each shape: 4 distinct random inputs, each reduced
// once (as bench.py rotates 4 inputs), then the first again: 5 launches per case, which
// ncu_summary.py --group 5 matches to the case's label.
//   nvcc -O3 -std=c++17 -arch=sm_90 -Iffi -o /tmp/kernel_profile benchmarks/kernel_profile.cu \
//     ffi/argreduce_kernels.cu
//   kernel_profile [ROWSxCOLSxDTYPE ...]   (dtype f32 or bf16)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "argreduce_kernels.h"
#include "cuda_check.h"

using namespace jax_argreduce;

int main(int argc, char** argv) {
  std::vector<std::string> cases(argv + 1, argv + argc);
  if (cases.empty()) {
    cases = {"1x32000xf32", "1x202048xf32", "1x202048xbf16", "8x202048xbf16",
             "65536x64xf32", "4096x4096xbf16", "65536x1024xbf16", "65536x1024xf32",
             "4096x128xbf16", "256x202048xf32"};
  }
  std::mt19937 gen(0);
  std::normal_distribution<float> normal;
  for (const std::string& c : cases) {
    long long rows = 0, cols = 0;
    char dtype[8] = {0};
    if (std::sscanf(c.c_str(), "%lldx%lldx%7s", &rows, &cols, dtype) != 3) {
      std::fprintf(stderr, "bad case %s (want ROWSxCOLSxf32|bf16)\n", c.c_str());
      return 2;
    }
    const bool bf16 = std::strcmp(dtype, "bf16") == 0;
    const Format format = bf16 ? Format::kBF16 : Format::kF32;
    const size_t width = bf16 ? 2 : 4, n = static_cast<size_t>(rows) * cols;
    std::vector<char> host(n * width);
    void* x[4];
    for (auto& p : x) {
      for (size_t i = 0; i < n; ++i) {
        float v = normal(gen);
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        if (bf16) {
          const uint16_t b = static_cast<uint16_t>(bits >> 16);
          std::memcpy(&host[i * 2], &b, 2);
        } else {
          std::memcpy(&host[i * 4], &bits, 4);
        }
      }
      CHECK(cudaMalloc(&p, n * width));
      CHECK(cudaMemcpy(p, host.data(), n * width, cudaMemcpyHostToDevice));
    }
    void *out, *workspace;
    CHECK(cudaMalloc(&out, rows * sizeof(int32_t)));
    CHECK(cudaMalloc(&workspace, kArgReduceWorkspaceBytes));
    LaunchPlan plan;
    CHECK(PlanArgReduce(format, false, rows, cols, &plan));
    std::printf("case %s: team %d cluster %d blocks/row %d grid %lld x %d\n", c.c_str(),
                plan.team, plan.cluster, plan.blocks_per_row, (long long)plan.grid, plan.block);
    std::fflush(stdout);
    for (int i = 0; i < 5; ++i) {
      CHECK(LaunchArgReduce(0, format, false, x[i % 4], rows, cols, out, false, workspace,
                            kArgReduceWorkspaceBytes));
    }
    CHECK(cudaDeviceSynchronize());
    for (auto p : x) CHECK(cudaFree(p));
    CHECK(cudaFree(out));
    CHECK(cudaFree(workspace));
  }
  return 0;
}
