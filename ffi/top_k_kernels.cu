// top_k on CUDA: the row-select core's kernels ranked by the elements' own radix keys
// (row_select.cuh, LogitKeys), launched level after level (LaunchSelectLevels over the plan of
// launch_plan.h, PlanTopK), each with programmatic dependent launch where the plan options and
// the device allow it.
#include "top_k_kernels.h"

#include "row_select.cuh"

namespace jax_argreduce {

cudaError_t LaunchTopK(const TopKLaunch& launch) {
  return row_select::LaunchTopKWith(
      launch, [](auto format) { return row_select::LogitKeys<decltype(format)::value>{}; });
}

}  // namespace jax_argreduce
