// top_k on CUDA: the row-select core's kernels launched level after level (launch_plan.h,
// PlanTopK), each with programmatic dependent launch where the plan options and the device
// allow it (the next level's blocks are resident while the last ones of this level finish).
#include "top_k_kernels.h"

#include <map>
#include <mutex>

#include "row_select.cuh"

namespace jax_argreduce {
namespace {

using row_select::CandidateSelectKernel;
using row_select::ChunkSelectKernel;
using row_select::SelectOutput;

// Compute capability major of `device`, read once per device.
cudaError_t CcMajor(int device, int* major) {
  static std::mutex mu;
  static std::map<int, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(device);
  if (it == cache.end()) {
    int value = 0;
    const cudaError_t err =
        cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor, device);
    if (err != cudaSuccess) return err;
    it = cache.emplace(device, value).first;
  }
  *major = it->second;
  return cudaSuccess;
}

// Blocks of one level: one per (row, chunk), at most what a grid holds (the kernels loop).
int64_t Grid(int64_t rows, int64_t chunks) {
  return std::min<int64_t>(rows * chunks, int64_t{0x7FFFFFFF});
}

template <Format F>
cudaError_t LaunchLevels(const TopKLaunch& launch, const SelectPlan& plan, char* workspace,
                         bool pdl) {
  using Bits = typename FormatTraits<F>::Bits;
  const Bits* x = static_cast<const Bits*>(launch.x);
  const int32_t cols = static_cast<int32_t>(launch.cols);
  const int32_t k = static_cast<int32_t>(launch.k);
  const SelectOutput out{launch.values, launch.indices, launch.index_is_int64};
  const SelectLevel& first = plan.level[0];
  uint64_t* first_out = reinterpret_cast<uint64_t*>(workspace + first.out_offset);
  const bool one_level = plan.levels == 1;
  cudaError_t err = cudaErrorInvalidValue;
  auto level0 = [&](auto kernel) {
    return device::LaunchEx(kernel, Grid(launch.rows, first.chunks), kSelectThreads,
                            launch.stream, pdl, x, launch.rows, cols,
                            static_cast<int32_t>(first.chunks), k, first_out, out);
  };
  switch (plan.elements_per_thread) {
#define JAX_ARGREDUCE_LEVEL0_CASE(E)                                                     \
  case E:                                                                                \
    err = one_level ? level0(ChunkSelectKernel<F, E, true>)                              \
                    : level0(ChunkSelectKernel<F, E, false>);                            \
    break;
    JAX_ARGREDUCE_LEVEL0_CASE(8)
    JAX_ARGREDUCE_LEVEL0_CASE(16)
    JAX_ARGREDUCE_LEVEL0_CASE(32)
#undef JAX_ARGREDUCE_LEVEL0_CASE
    default:
      return cudaErrorInvalidConfiguration;
  }
  if (err != cudaSuccess) return err;
  for (int i = 1; i < plan.levels; ++i) {
    const SelectLevel& level = plan.level[i];
    const bool last = i == plan.levels - 1;
    auto kernel = last ? CandidateSelectKernel<F, true> : CandidateSelectKernel<F, false>;
    err = device::LaunchEx(kernel, Grid(launch.rows, level.chunks), kCandidateThreads,
                           launch.stream, pdl,
                           reinterpret_cast<const uint64_t*>(workspace + level.in_offset),
                           launch.rows, static_cast<int32_t>(level.items),
                           static_cast<int32_t>(level.chunks), k,
                           reinterpret_cast<uint64_t*>(workspace + level.out_offset), x, cols,
                           out);
    if (err != cudaSuccess) return err;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchTopK(const TopKLaunch& launch) {
  if (launch.rows == 0) return cudaSuccess;
  if (launch.rows < 0 || launch.cols < 1 || launch.cols > INT32_MAX || launch.k < 1 ||
      launch.k > launch.cols || launch.k > kSelectMaxK || launch.format == Format::kF64) {
    return cudaErrorInvalidValue;
  }
  const SelectPlan plan =
      PlanTopK(launch.rows, launch.cols, launch.k, FormatBytes(launch.format));
  // XLA buffers are aligned; align by hand anyway rather than trust it (WorkspaceBytes: +16).
  const uintptr_t raw = reinterpret_cast<uintptr_t>(launch.workspace);
  const uintptr_t aligned = (raw + 15) & ~uintptr_t{15};
  if (plan.workspace_bytes > 0 &&
      plan.workspace_bytes + (aligned - raw) > launch.workspace_bytes) {
    return cudaErrorInvalidValue;
  }
  int major = 0;
  const cudaError_t err = CcMajor(launch.device, &major);
  if (err != cudaSuccess) return err;
  const bool pdl = launch.options.pdl && major >= 9;
  char* workspace = reinterpret_cast<char*>(aligned);
  switch (launch.format) {
    case Format::kF16: return LaunchLevels<Format::kF16>(launch, plan, workspace, pdl);
    case Format::kBF16: return LaunchLevels<Format::kBF16>(launch, plan, workspace, pdl);
    case Format::kF32: return LaunchLevels<Format::kF32>(launch, plan, workspace, pdl);
    case Format::kF64: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace jax_argreduce
