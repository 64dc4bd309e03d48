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

// For each row r of `logits` (`rows` x `cols` row-major, `format`): indices[r] = the argmax
// over columns c of y = logit * (1/T) + G(key, row offset + r mod rows_per_key, column offset
// + c) and
// noisy_max[r] = that largest y (float32; float64 for float64 logits). `keys`: num_keys x 2
// uint32 (rows = num_keys * rows_per_key); `temperature`: 1 or `rows` values of the noise's
// type; `offsets`: two int32 in device memory, the (row, column) offsets of this block of the
// global logits that enter the counter (categorical.h), or nullptr (both zero). `workspace`: kWorkspaceBytes.
cudaError_t LaunchCategorical(cudaStream_t stream, int device, uint32_t counter_slot,
                              const PlanOptions& options, Format format,
                              const uint32_t* keys, int64_t num_keys,
                              const void* logits, int64_t rows, int64_t cols,
                              const void* temperature, bool temperature_per_row,
                              const int32_t* offsets, void* indices, bool index_is_int64,
                              void* noisy_max, void* workspace, size_t workspace_bytes);

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_CATEGORICAL_KERNELS_H_
