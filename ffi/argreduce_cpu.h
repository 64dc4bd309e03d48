// Declares the CPU FFI handler symbol exported by the nanobind module.
#ifndef JAX_ARGREDUCE_FFI_ARGREDUCE_CPU_H_
#define JAX_ARGREDUCE_FFI_ARGREDUCE_CPU_H_

#include "xla/ffi/api/ffi.h"

namespace jax_argreduce {
XLA_FFI_DECLARE_HANDLER_SYMBOL(ArgReduceCpu);
}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_ARGREDUCE_CPU_H_
