// Raw-pointer launcher of top_k on CUDA: the row-select core (row_select.cuh) over the levels
// of its plan (launch_plan.h, PlanTopK). Sizes, pointers and a stream in, a cudaError_t out; no
// XLA types (the FFI shim is cuda_handlers.cc).
#ifndef JAX_ARGREDUCE_FFI_TOP_K_KERNELS_H_
#define JAX_ARGREDUCE_FFI_TOP_K_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "launch_plan.h"
#include "order.h"

namespace jax_argreduce {

// One top_k call: for each row r of x (`rows` x `cols` row-major elements of `format`: float16,
// bfloat16 or float32), values[r, :] and indices[r, :] (`k` each, row-major) = the k first
// elements of the row in the order of order.h (largest first, a NaN before every number, the
// lowest column among equal keys), values bit for bit. 1 <= k <= min(cols, kSelectMaxK).
struct TopKLaunch {
  cudaStream_t stream = nullptr;
  int device = 0;                // the stream's device (current)
  PlanOptions options;           // pdl is read (programmatic dependent launch, sm_90+)
  Format format = Format::kF32;
  const void* x = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t k = 0;
  void* values = nullptr;        // [rows, k], x's format
  void* indices = nullptr;       // [rows, k] int32, or int64 when index_is_int64
  bool index_is_int64 = false;
  void* workspace = nullptr;     // WorkspaceBytes("top_k", rows, cols, k, ...), any contents
  size_t workspace_bytes = 0;
};

// Returns the first CUDA error (cudaErrorInvalidValue for arguments out of range, including a
// workspace smaller than the plan's).
cudaError_t LaunchTopK(const TopKLaunch& launch);

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_TOP_K_KERNELS_H_
