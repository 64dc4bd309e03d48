// Raw-pointer launcher of the fused Gumbel-max sampler on CUDA: the row-reduce core with the
// Gumbel key policy and the noisy-max epilogue (categorical.h). No XLA types.
#ifndef JAX_ARGREDUCE_FFI_CATEGORICAL_KERNELS_H_
#define JAX_ARGREDUCE_FFI_CATEGORICAL_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "launch_plan.h"
#include "order.h"

namespace jax_argreduce {

// One call: for each row r of `logits` (`rows` x `cols` row-major, `format`): indices[r] = the
// argmax over columns c of y = logit * (1/T) + G(key, row offset + r mod rows_per_key, column
// offset + c) and noisy_max[r] = that largest y (float32; float64 for float64 logits).
struct CategoricalLaunch {
  cudaStream_t stream = nullptr;
  int device = 0;
  uint32_t counter_slot = 0;      // as ArgReduceLaunch's
  PlanOptions options;
  Format format = Format::kF32;
  const uint32_t* keys = nullptr;  // num_keys x 2 uint32 (rows = num_keys * rows_per_key)
  int64_t num_keys = 1;
  const void* logits = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* temperature = nullptr;  // 1 or `rows` values of the noise's type
  bool temperature_per_row = false;
  // Two int32 in device memory, the (row, column) offsets of this block of the global logits
  // that enter the counter (categorical.h), or nullptr (both zero).
  const int32_t* offsets = nullptr;
  void* indices = nullptr;        // [rows] int32, or int64 when index_is_int64
  bool index_is_int64 = false;
  void* noisy_max = nullptr;      // [rows] of the noise's type
  void* workspace = nullptr;      // kWorkspaceBytes of device memory, any contents
  size_t workspace_bytes = 0;
};

cudaError_t LaunchCategorical(const CategoricalLaunch& launch);

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_CATEGORICAL_KERNELS_H_
