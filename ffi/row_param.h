// A per-row parameter as the handlers read it (SPEC §2 params): one value for every row, or
// one per row. The Python side (jax_argreduce/_params.py) checks, broadcasts and batches it;
// ffi_common.h's DecodeRowParam checks the operand.
#ifndef JAX_ARGREDUCE_FFI_ROW_PARAM_H_
#define JAX_ARGREDUCE_FFI_ROW_PARAM_H_

#include <cstdint>

#include "order.h"  // JAX_ARGREDUCE_HD

namespace jax_argreduce {

template <class T>
struct RowParam {
  const T* data = nullptr;
  bool per_row = false;

  JAX_ARGREDUCE_HD T operator[](int64_t row) const { return data[per_row ? row : 0]; }
};

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_ROW_PARAM_H_
