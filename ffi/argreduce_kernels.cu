// The argreduce op family on CUDA: the row-reduce core instantiated with the order key
// (reduce_hooks.h) for every format and both orders, and the index/value epilogue.
#include "argreduce_kernels.h"

#include "reduce_hooks.h"
#include "row_reduce.cuh"

namespace jax_argreduce {

cudaError_t LaunchArgReduce(const ArgReduceLaunch& l) {
  const IndexValueEpilogue epilogue{l.indices, l.index_is_int64, l.values};
  return DispatchFormat(l.format, l.is_min, [&](auto f, auto m) {
    using Policy = OrderKeyPolicy<decltype(f)::value, decltype(m)::value>;
    return row_reduce::LaunchRowReduce(l.stream, l.device, l.counter_slot, l.options,
                                       static_cast<const typename Policy::Bits*>(l.x), l.rows,
                                       l.cols, Policy{}, epilogue, l.workspace,
                                       l.workspace_bytes);
  });
}

cudaError_t PlanArgReduce(int device, const PlanOptions& options, Format format, bool is_min,
                          int64_t rows, int64_t cols, bool graph_captured, LaunchPlan* plan) {
  return DispatchFormat(format, is_min, [&](auto f, auto m) {
    using Policy = OrderKeyPolicy<decltype(f)::value, decltype(m)::value>;
    return row_reduce::PlanRowReduceOn<Policy, IndexValueEpilogue>(device, rows, cols, options,
                                                                   graph_captured, plan);
  });
}

}  // namespace jax_argreduce
