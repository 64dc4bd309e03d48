// The fused Gumbel-max sampler on CUDA: the row-reduce core instantiated with the Gumbel key
// policy for every format and the noisy-max epilogue (categorical.h).
#include "categorical_kernels.h"

#include "categorical.h"
#include "row_reduce.cuh"

namespace jax_argreduce {

cudaError_t LaunchCategorical(const CategoricalLaunch& l) {
  if (l.rows == 0) return cudaSuccess;
  if (l.num_keys < 1 || l.rows % l.num_keys != 0) return cudaErrorInvalidValue;
  const NoisyMaxEpilogue epilogue{l.indices, l.index_is_int64, l.noisy_max};
  return DispatchFormat(l.format, false, [&](auto f, auto) {
    using Policy = GumbelKeyPolicy<decltype(f)::value>;
    const Policy policy{l.keys, l.rows / l.num_keys,
                        static_cast<const typename Policy::Noise*>(l.temperature),
                        l.temperature_per_row, l.offsets};
    return row_reduce::LaunchRowReduce(l.stream, l.device, l.counter_slot, l.options,
                                       static_cast<const typename Policy::Bits*>(l.logits),
                                       l.rows, l.cols, policy, epilogue, l.workspace,
                                       l.workspace_bytes);
  });
}

}  // namespace jax_argreduce
