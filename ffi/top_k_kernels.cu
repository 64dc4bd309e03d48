// top_k on CUDA: the row-select core's kernels ranked by the elements' own radix keys
// (row_select.cuh, LogitKeys), launched level after level (LaunchSelectLevels over the plan of
// launch_plan.h, PlanTopK), each with programmatic dependent launch where the plan options and
// the device allow it.
#include "top_k_kernels.h"

#include "row_select.cuh"

namespace jax_argreduce {

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
  const cudaError_t err = row_select::CcMajor(launch.device, &major);
  if (err != cudaSuccess) return err;
  const bool pdl = launch.options.pdl && major >= 9;
  char* workspace = reinterpret_cast<char*>(aligned);
  const row_select::SelectOutput out{launch.values, launch.indices, launch.index_is_int64};
  auto levels = [&](auto keys) {
    return row_select::LaunchSelectLevels(keys, plan, launch.stream, pdl, launch.x, launch.rows,
                                          static_cast<int32_t>(launch.cols),
                                          static_cast<int32_t>(launch.k), workspace, out);
  };
  switch (launch.format) {
    case Format::kF16: return levels(row_select::LogitKeys<Format::kF16>{});
    case Format::kBF16: return levels(row_select::LogitKeys<Format::kBF16>{});
    case Format::kF32: return levels(row_select::LogitKeys<Format::kF32>{});
    case Format::kF64: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace jax_argreduce
