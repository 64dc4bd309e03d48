// Buffer validation shared by the CPU and CUDA FFI handlers: decodes the input into a
// [rows, cols] view (the reduction axis is the last one) and checks the index output.
// Kernels and the CPU loop trust what comes out of here.
#ifndef JAX_ARGREDUCE_FFI_ARGREDUCE_FFI_COMMON_H_
#define JAX_ARGREDUCE_FFI_ARGREDUCE_FFI_COMMON_H_

#include <cstdint>
#include <string>

#include "order.h"
#include "xla/ffi/api/ffi.h"

namespace jax_argreduce {

struct RowView {
  const void* data;
  Format format;
  int64_t rows;  // product of all but the last dimension (64-bit: arrays may exceed 2^31)
  int64_t cols;  // length of the reduction axis, 1 <= cols <= INT32_MAX
};

inline xla::ffi::ErrorOr<RowView> DecodeRows(const xla::ffi::AnyBuffer& x,
                                             const xla::ffi::AnyBuffer& indices,
                                             const char* op) {
  namespace ffi = xla::ffi;
  const std::string name(op);
  RowView view{x.untyped_data(), Format::kF32, 1, 0};
  switch (x.element_type()) {
    case ffi::DataType::F16: view.format = Format::kF16; break;
    case ffi::DataType::BF16: view.format = Format::kBF16; break;
    case ffi::DataType::F32: view.format = Format::kF32; break;
    case ffi::DataType::F64: view.format = Format::kF64; break;
    default:
      return ffi::Unexpected(ffi::Error::InvalidArgument(
          name + ": input must be float16, bfloat16, float32 or float64"));
  }
  const auto dims = x.dimensions();
  if (dims.size() == 0) {
    return ffi::Unexpected(
        ffi::Error::InvalidArgument(name + ": input must have rank >= 1"));
  }
  view.cols = dims.back();
  for (size_t i = 0; i + 1 < dims.size(); ++i) view.rows *= dims[i];
  if (view.cols < 1 || view.cols > INT32_MAX) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        name + ": reduction axis length must be in [1, 2^31 - 1], got " +
        std::to_string(view.cols)));
  }
  const auto index_type = indices.element_type();
  if (index_type != ffi::DataType::S32 && index_type != ffi::DataType::S64) {
    return ffi::Unexpected(
        ffi::Error::InvalidArgument(name + ": indices must be int32 or int64"));
  }
  if (static_cast<int64_t>(indices.element_count()) != view.rows) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        name + ": indices must have one element per row (" + std::to_string(view.rows) +
        "), got " + std::to_string(indices.element_count())));
  }
  return view;
}

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_ARGREDUCE_FFI_COMMON_H_
