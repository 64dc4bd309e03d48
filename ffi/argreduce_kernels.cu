// The argreduce op family on CUDA: the row-reduce core instantiated with the order key
// (reduce_hooks.h) for every format and both orders, and the index/value epilogue.
#include "argreduce_kernels.h"

#include "reduce_hooks.h"
#include "row_reduce.cuh"

namespace jax_argreduce {

cudaError_t LaunchArgReduce(cudaStream_t stream, int device, uint32_t counter_slot,
                            const PlanOptions& options, Format format, bool is_min,
                            const void* x, int64_t rows, int64_t cols, void* indices, bool index_is_int64, void* values,
                            void* workspace, size_t workspace_bytes) {
  const IndexValueEpilogue epilogue{indices, index_is_int64, values};
  return DispatchFormat(format, is_min, [&](auto f, auto m) {
    using Policy = OrderKeyPolicy<decltype(f)::value, decltype(m)::value>;
    return row_reduce::LaunchRowReduce(stream, device, counter_slot, options,
                                       static_cast<const typename Policy::Bits*>(x), rows, cols,
                                       Policy{}, epilogue, workspace, workspace_bytes);
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
