// The FFI handler symbols of the package (registered by module.cc). CPU handlers always; CUDA
// handlers when built with a CUDA compiler (JAX_ARGREDUCE_WITH_CUDA).
#ifndef JAX_ARGREDUCE_FFI_HANDLERS_H_
#define JAX_ARGREDUCE_FFI_HANDLERS_H_

#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace jax_argreduce {

// argreduce: x -> indices. max_with_index: x -> (values, indices). Attribute is_min.
// categorical: (keys, logits, temperature, offsets) -> (noisy_max, indices).
// top_k: x -> (values, indices), k per row. Attribute k.
// scaled top_k: (x, temperature) -> (values, indices): top_k ranked by the sampler's z = x *
// (1/T) (T == 0 rows: by x), a split vocabulary's candidates. Attribute k.
// filtered categorical: (keys, logits, temperature, top_k, top_p, min_p, offsets, columns) ->
// (noisy_max, indices); columns: each logit's global column, or none. Attribute k_bound (> 0:
// every row's top_k is in [1, k_bound]; the CPU handler ignores it).
// A split vocabulary without a top-k: top_p level: (logits, temperature, top_p,
// tops, above) -> histogram, attribute level; split filtered draw: (keys, logits, temperature,
// top_k, top_p, min_p, offsets, tops, above, counts) -> (noisy_max, indices) (cpu_sample.h).
XLA_FFI_DECLARE_HANDLER_SYMBOL(ArgReduceCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxWithIndexCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(CategoricalCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(TopKCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ScaledTopKCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(FilteredCategoricalCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(TopPLevelCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(SplitFilteredDrawCpu);
#ifdef JAX_ARGREDUCE_WITH_CUDA
// Per call site, from XLA's instantiate stage (InstantiateCuda) to the executable's end: the
// split path's counter slot (cuda_handlers.cc). Registered with XLA as an FFI type (id, and
// kCallSiteStateTypeInfo's deleter) before the handlers.
struct CallSiteState {
  static xla::ffi::TypeId id;
  CallSiteState();
  ~CallSiteState();
  CallSiteState(const CallSiteState&) = delete;
  CallSiteState& operator=(const CallSiteState&) = delete;
  const uint32_t slot;
};
extern const XLA_FFI_TypeInfo kCallSiteStateTypeInfo;
XLA_FFI_DECLARE_HANDLER_SYMBOL(InstantiateCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ArgReduceCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxWithIndexCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(CategoricalCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(TopKCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ScaledTopKCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(FilteredCategoricalCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(TopPLevelCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(SplitFilteredDrawCuda);
#endif

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_HANDLERS_H_
