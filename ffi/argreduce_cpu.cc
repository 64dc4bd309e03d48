// CPU FFI handler: argmax/argmin over the last axis of an array viewed as [rows, cols].
// Same semantics as the CUDA kernels (both use order.h), so CI without a GPU
// exercises the whole JAX stack. The answer is the first column whose key equals the row's
// largest key: the lowest index wins ties.
#include "argreduce_cpu.h"

#include <cstdint>
#include <string>

#include "order.h"
#include "argreduce_ffi_common.h"

namespace jax_argreduce {
namespace {

namespace ffi = xla::ffi;

template <Format F, bool kIsMin, class OutT>
void ReduceRows(const void* data, int64_t rows, int64_t cols, OutT* out) {
  using Traits = FormatTraits<F>;
  using Bits = typename Traits::Bits;
  using Key = typename Traits::Key;
  const Bits* x = static_cast<const Bits*>(data);
  for (int64_t r = 0; r < rows; ++r) {
    const Bits* row = x + r * cols;
    // Two branch-free passes the compiler vectorizes: the largest key, then its first index.
    Key best = KeyLimits<Key>::kLowest;
    for (int64_t c = 0; c < cols; ++c) {
      const Key key = OrderedKey<F, kIsMin>(row[c]);
      best = key > best ? key : best;
    }
    int64_t c = 0;
    while (OrderedKey<F, kIsMin>(row[c]) != best) ++c;
    out[r] = static_cast<OutT>(c);
  }
}

template <Format F, bool kIsMin>
void DispatchIndex(const RowView& view, void* out, bool out_is_int64) {
  if (out_is_int64) {
    ReduceRows<F, kIsMin>(view.data, view.rows, view.cols, static_cast<int64_t*>(out));
  } else {
    ReduceRows<F, kIsMin>(view.data, view.rows, view.cols, static_cast<int32_t*>(out));
  }
}

template <Format F>
void DispatchKind(const RowView& view, void* out, bool out_is_int64, bool is_min) {
  if (is_min) {
    DispatchIndex<F, true>(view, out, out_is_int64);
  } else {
    DispatchIndex<F, false>(view, out, out_is_int64);
  }
}

ffi::Error ArgReduceCpuImpl(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> indices, bool is_min) {
  auto view = DecodeRows(x, *indices, "jax_argreduce_cpu");
  if (!view.has_value()) return view.error();
  if (view->rows == 0) return ffi::Error::Success();
  const bool out_is_int64 = indices->element_type() == ffi::DataType::S64;
  void* out = indices->untyped_data();
  switch (view->format) {
    case Format::kF16: DispatchKind<Format::kF16>(*view, out, out_is_int64, is_min); break;
    case Format::kBF16: DispatchKind<Format::kBF16>(*view, out, out_is_int64, is_min); break;
    case Format::kF32: DispatchKind<Format::kF32>(*view, out, out_is_int64, is_min); break;
    case Format::kF64: DispatchKind<Format::kF64>(*view, out, out_is_int64, is_min); break;
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ArgReduceCpu, ArgReduceCpuImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()      // x: [..., cols] float array
                                  .Ret<ffi::AnyBuffer>()      // indices: [...] int32 or int64
                                  .Attr<bool>("is_min"));     // argmin instead of argmax

}  // namespace jax_argreduce
