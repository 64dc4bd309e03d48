// The FFI handler symbols of the package (registered by module.cc). CPU handlers always; CUDA
// handlers when built with a CUDA compiler (JAX_ARGREDUCE_WITH_CUDA).
#ifndef JAX_ARGREDUCE_FFI_HANDLERS_H_
#define JAX_ARGREDUCE_FFI_HANDLERS_H_

#include "xla/ffi/api/ffi.h"

namespace jax_argreduce {

// argreduce: x -> indices. max_with_index: x -> (values, indices). Attribute is_min.
// categorical: (keys, logits, temperature, offsets) -> (noisy_max, indices).
XLA_FFI_DECLARE_HANDLER_SYMBOL(ArgReduceCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxWithIndexCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(CategoricalCpu);
#ifdef JAX_ARGREDUCE_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(ArgReduceCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MaxWithIndexCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(CategoricalCuda);
#endif

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_HANDLERS_H_
