// Raw-pointer launchers of the argreduce op family on CUDA: argmax/argmin (indices) and
// max_with_index/min_with_index (values + indices), one instantiation of the row-reduce core
// (row_reduce.cuh) with the order-key policy and the index/value epilogue. Sizes, pointers and
// a stream in, a cudaError_t out; no XLA types (the FFI shim is cuda_handlers.cc).
#ifndef JAX_ARGREDUCE_FFI_ARGREDUCE_KERNELS_H_
#define JAX_ARGREDUCE_FFI_ARGREDUCE_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "launch_plan.h"
#include "order.h"

namespace jax_argreduce {

// One call: indices[r] = argmax (argmin when is_min) of row r of x, x being `rows` x `cols`
// row-major elements of `format` (1 <= cols <= INT32_MAX), on `stream` of `device` (the current
// device). When `values` is not null, values[r] is the winning element (same format as x).
struct ArgReduceLaunch {
  cudaStream_t stream = nullptr;
  int device = 0;
  uint32_t counter_slot = 0;  // the call site's split-path counter (launch_plan.h
                              // kCallSiteSlots; launches that may run at once: distinct slots)
  PlanOptions options;
  Format format = Format::kF32;
  bool is_min = false;
  const void* x = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  void* indices = nullptr;    // [rows] int32, or int64 when index_is_int64
  bool index_is_int64 = false;
  void* values = nullptr;     // nullptr, or [rows] of x's format
  void* workspace = nullptr;  // kWorkspaceBytes of device memory, any contents
  size_t workspace_bytes = 0;
};

// Returns the first CUDA error (launch or configuration).
cudaError_t LaunchArgReduce(const ArgReduceLaunch& launch);

// The plan LaunchArgReduce takes for that shape on `device` (tests and benchmarks), launched
// from the host or (`graph_captured`) captured into a CUDA graph.
cudaError_t PlanArgReduce(int device, const PlanOptions& options, Format format, bool is_min,
                          int64_t rows, int64_t cols, bool graph_captured, LaunchPlan* plan);

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_ARGREDUCE_KERNELS_H_
