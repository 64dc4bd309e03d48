// The fused Gumbel-max sampler on CUDA: the row-reduce core instantiated with the Gumbel key
// policy for every format and the noisy-max epilogue (categorical.h).
#include "categorical_kernels.h"

#include "categorical.h"
#include "row_reduce.cuh"

namespace jax_argreduce {

cudaError_t LaunchCategorical(cudaStream_t stream, int device, uint32_t counter_slot,
                              const PlanOptions& options, Format format,
                              const uint32_t* keys, int64_t num_keys,
                              const void* logits, int64_t rows, int64_t cols,
                              const void* temperature, bool temperature_per_row,
                              const int32_t* offsets, void* indices, bool index_is_int64,
                              void* noisy_max, void* workspace, size_t workspace_bytes) {
  if (rows == 0) return cudaSuccess;
  if (num_keys < 1 || rows % num_keys != 0) return cudaErrorInvalidValue;
  const NoisyMaxEpilogue epilogue{indices, index_is_int64, noisy_max};
  return DispatchFormat(format, false, [&](auto f, auto) {
    using Policy = GumbelKeyPolicy<decltype(f)::value>;
    const Policy policy{keys, rows / num_keys,
                        static_cast<const typename Policy::Noise*>(temperature),
                        temperature_per_row, offsets};
    return row_reduce::LaunchRowReduce(stream, device, counter_slot, options,
                                       static_cast<const typename Policy::Bits*>(logits), rows,
                                       cols, policy, epilogue, workspace, workspace_bytes);
  });
}

}  // namespace jax_argreduce
