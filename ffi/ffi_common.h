// Buffer validation shared by the CPU and CUDA FFI shims: decodes the input into a
// [rows, cols] view (the reduction axis is the last one) and checks the index (and value)
// outputs. Kernels and the CPU loop trust what comes out of here.
#ifndef JAX_ARGREDUCE_FFI_FFI_COMMON_H_
#define JAX_ARGREDUCE_FFI_FFI_COMMON_H_

#include <cstdint>
#include <string>

#include "order.h"
#include "row_param.h"
#include "xla/ffi/api/ffi.h"

namespace jax_argreduce {

struct RowView {
  const void* data;
  Format format;
  int64_t rows;  // product of all but the last dimension (64-bit: arrays may exceed 2^31)
  int64_t cols;  // length of the reduction axis, 1 <= cols <= INT32_MAX
};

// The input as [rows, cols] (the reduction axis last), of one of the four float formats.
inline xla::ffi::ErrorOr<RowView> DecodeInput(const xla::ffi::AnyBuffer& x,
                                              const std::string& op) {
  namespace ffi = xla::ffi;
  auto invalid = [&](const std::string& what) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(op + ": " + what));
  };
  RowView view{x.untyped_data(), Format::kF32, 1, 0};
  switch (x.element_type()) {
    case ffi::DataType::F16: view.format = Format::kF16; break;
    case ffi::DataType::BF16: view.format = Format::kBF16; break;
    case ffi::DataType::F32: view.format = Format::kF32; break;
    case ffi::DataType::F64: view.format = Format::kF64; break;
    default: return invalid("input must be float16, bfloat16, float32 or float64");
  }
  const auto dims = x.dimensions();
  if (dims.size() == 0) return invalid("input must have rank >= 1");
  view.cols = dims.back();
  for (size_t i = 0; i + 1 < dims.size(); ++i) view.rows *= dims[i];
  if (view.cols < 1 || view.cols > INT32_MAX) {
    return invalid("reduction axis length must be in [1, 2^31 - 1], got " +
                   std::to_string(view.cols));
  }
  return view;
}

// Index (int32 or int64) and, when given, value (x's dtype) outputs of `per_row` elements a row.
inline xla::ffi::Error CheckOutputs(const RowView& view, const xla::ffi::AnyBuffer& x,
                                    const xla::ffi::AnyBuffer& indices,
                                    const xla::ffi::AnyBuffer* values, int64_t per_row,
                                    const std::string& op) {
  namespace ffi = xla::ffi;
  auto invalid = [&](const std::string& what) {
    return ffi::Error::InvalidArgument(op + ": " + what);
  };
  const auto index_type = indices.element_type();
  if (index_type != ffi::DataType::S32 && index_type != ffi::DataType::S64) {
    return invalid("indices must be int32 or int64");
  }
  const int64_t expected = view.rows * per_row;
  const std::string each = per_row == 1 ? "one element per row" :
                           std::to_string(per_row) + " elements per row";
  if (static_cast<int64_t>(indices.element_count()) != expected) {
    return invalid("indices must have " + each + " (" + std::to_string(expected) + "), got " +
                   std::to_string(indices.element_count()));
  }
  if (values != nullptr) {
    if (values->element_type() != x.element_type()) {
      return invalid("values must have the input's dtype");
    }
    if (static_cast<int64_t>(values->element_count()) != expected) {
      return invalid("values must have " + each + " (" + std::to_string(expected) + "), got " +
                     std::to_string(values->element_count()));
    }
  }
  return ffi::Error::Success();
}

// `values`, when given, must be one element of x's dtype per row.
inline xla::ffi::ErrorOr<RowView> DecodeRows(const xla::ffi::AnyBuffer& x,
                                             const xla::ffi::AnyBuffer& indices,
                                             const xla::ffi::AnyBuffer* values,
                                             const std::string& op) {
  auto view = DecodeInput(x, op);
  if (!view.has_value()) return view;
  auto checked = CheckOutputs(*view, x, indices, values, 1, op);
  if (checked.failure()) return xla::ffi::Unexpected(std::move(checked));
  return view;
}

// top_k: 1 <= k <= cols, k values and k indices per row.
inline xla::ffi::ErrorOr<RowView> DecodeTopK(const xla::ffi::AnyBuffer& x,
                                             const xla::ffi::AnyBuffer& values,
                                             const xla::ffi::AnyBuffer& indices, int64_t k,
                                             const std::string& op) {
  auto view = DecodeInput(x, op);
  if (!view.has_value()) return view;
  if (k < 1 || k > view->cols) {
    return xla::ffi::Unexpected(xla::ffi::Error::InvalidArgument(
        op + ": k must be in [1, " + std::to_string(view->cols) + "], got " + std::to_string(k)));
  }
  auto checked = CheckOutputs(*view, x, indices, &values, k, op);
  if (checked.failure()) return xla::ffi::Unexpected(std::move(checked));
  return view;
}

// The sampler's extra operands: keys [num_keys, 2] uint32 with rows a multiple of num_keys,
// temperature (float32; float64 for float64 logits) of 1 or rows elements, two int32
// offsets (row, column) or none (zero offsets: an unsharded call; an empty operand, since XLA
// would turn a constant [0, 0] into a broadcast kernel), and the noisy maxima (the
// temperature's dtype, one per row; the filtered sampler has none: nullptr).
struct SamplerView {
  int64_t num_keys;
  bool temperature_per_row;
  bool has_offsets;
};

// The temperature (float32; float64 for float64 logits) of 1 or rows elements: whether it has
// one per row.
inline xla::ffi::ErrorOr<bool> DecodeTemperature(const RowView& view,
                                                 const xla::ffi::AnyBuffer& temperature,
                                                 const std::string& op) {
  namespace ffi = xla::ffi;
  const auto noise_type = view.format == Format::kF64 ? ffi::DataType::F64 : ffi::DataType::F32;
  const int64_t t_count = static_cast<int64_t>(temperature.element_count());
  if (temperature.element_type() != noise_type || (t_count != 1 && t_count != view.rows)) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        op + ": temperature must be float32 (float64 for float64 logits) of 1 or rows "
        "elements"));
  }
  return t_count != 1;
}

inline xla::ffi::ErrorOr<SamplerView> DecodeSampler(const RowView& view,
                                                    const xla::ffi::AnyBuffer& keys,
                                                    const xla::ffi::AnyBuffer& temperature,
                                                    const xla::ffi::AnyBuffer& offsets,
                                                    const xla::ffi::AnyBuffer* noisy_max,
                                                    const std::string& op) {
  namespace ffi = xla::ffi;
  auto invalid = [&](const std::string& what) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(op + ": " + what));
  };
  const auto key_dims = keys.dimensions();
  if (keys.element_type() != ffi::DataType::U32 || key_dims.size() != 2 || key_dims[1] != 2 ||
      key_dims[0] < 1) {
    return invalid("keys must be uint32 [num_keys, 2]");
  }
  SamplerView sampler{key_dims[0], false, false};
  if (view.rows % sampler.num_keys != 0) {
    return invalid("rows (" + std::to_string(view.rows) + ") must be a multiple of num_keys (" +
                   std::to_string(sampler.num_keys) + ")");
  }
  auto per_row = DecodeTemperature(view, temperature, op);
  if (!per_row.has_value()) return ffi::Unexpected(per_row.error());
  sampler.temperature_per_row = *per_row;
  if (offsets.element_type() != ffi::DataType::S32 ||
      (offsets.element_count() != 2 && offsets.element_count() != 0)) {
    return invalid("offsets must be two int32 (row offset, column offset), or none");
  }
  sampler.has_offsets = offsets.element_count() == 2;
  const auto noise_type = view.format == Format::kF64 ? ffi::DataType::F64 : ffi::DataType::F32;
  if (noisy_max != nullptr && (noisy_max->element_type() != noise_type ||
                                static_cast<int64_t>(noisy_max->element_count()) != view.rows)) {
    return invalid("noisy_max must have the temperature's dtype, one element per row");
  }
  return sampler;
}

// `buffer` as a RowParam of `type` with 1 or `rows` elements.
template <class T>
xla::ffi::ErrorOr<RowParam<T>> DecodeRowParam(const xla::ffi::AnyBuffer& buffer,
                                              xla::ffi::DataType type, int64_t rows,
                                              const std::string& name, const std::string& op) {
  const int64_t count = static_cast<int64_t>(buffer.element_count());
  if (buffer.element_type() != type || (count != 1 && count != rows)) {
    return xla::ffi::Unexpected(xla::ffi::Error::InvalidArgument(
        op + ": " + name + " must have 1 or rows (" + std::to_string(rows) + ") elements of its "
        "dtype, got " + std::to_string(count)));
  }
  return RowParam<T>{static_cast<const T*>(buffer.untyped_data()), count != 1};
}

// The filtered sampler's three filters (top_k int32, top_p and min_p float32), each with 1 or
// `rows` elements: the CPU and CUDA handlers' one decoding.
struct SampleFilters {
  RowParam<int32_t> top_k;
  RowParam<float> top_p;
  RowParam<float> min_p;
};
inline xla::ffi::ErrorOr<SampleFilters> DecodeSampleFilters(const xla::ffi::AnyBuffer& top_k,
                                                            const xla::ffi::AnyBuffer& top_p,
                                                            const xla::ffi::AnyBuffer& min_p,
                                                            int64_t rows, const std::string& op) {
  namespace ffi = xla::ffi;
  auto k = DecodeRowParam<int32_t>(top_k, ffi::DataType::S32, rows, "top_k", op);
  if (!k.has_value()) return ffi::Unexpected(k.error());
  auto p = DecodeRowParam<float>(top_p, ffi::DataType::F32, rows, "top_p", op);
  if (!p.has_value()) return ffi::Unexpected(p.error());
  auto m = DecodeRowParam<float>(min_p, ffi::DataType::F32, rows, "min_p", op);
  if (!m.has_value()) return ffi::Unexpected(m.error());
  return SampleFilters{*k, *p, *m};
}

// The filtered sampler's operands, decoded once for the CPU and CUDA handlers: the logits as
// rows, the sampler's (keys, temperature, offsets, noisy maxima), the three filters and the
// columns: int32, one per logit (a split vocabulary's candidates: each element's global
// column, cpu_sample.h), or none (an empty operand, or nullptr for a handler without that
// operand: each element's own column).
struct FilteredSamplerView {
  RowView view;
  SamplerView sampler;
  SampleFilters filters;
  const int32_t* columns;  // nullptr: none
};
inline xla::ffi::ErrorOr<FilteredSamplerView> DecodeFilteredSampler(
    const xla::ffi::AnyBuffer& keys, const xla::ffi::AnyBuffer& logits,
    const xla::ffi::AnyBuffer& temperature, const xla::ffi::AnyBuffer& top_k,
    const xla::ffi::AnyBuffer& top_p, const xla::ffi::AnyBuffer& min_p,
    const xla::ffi::AnyBuffer& offsets, const xla::ffi::AnyBuffer* columns,
    const xla::ffi::AnyBuffer& noisy_max, const xla::ffi::AnyBuffer& indices,
    const std::string& op) {
  namespace ffi = xla::ffi;
  auto view = DecodeRows(logits, indices, nullptr, op);
  if (!view.has_value()) return ffi::Unexpected(view.error());
  auto sampler = DecodeSampler(*view, keys, temperature, offsets, &noisy_max, op);
  if (!sampler.has_value()) return ffi::Unexpected(sampler.error());
  auto filters = DecodeSampleFilters(top_k, top_p, min_p, view->rows, op);
  if (!filters.has_value()) return ffi::Unexpected(filters.error());
  const int64_t column_count =
      columns == nullptr ? 0 : static_cast<int64_t>(columns->element_count());
  if ((columns != nullptr && columns->element_type() != ffi::DataType::S32) ||
      (column_count != 0 && column_count != view->rows * view->cols)) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        op + ": columns must be int32, one per logit (" + std::to_string(view->rows * view->cols) +
        ") or none, got " + std::to_string(column_count)));
  }
  const auto* column_data =
      column_count != 0 ? static_cast<const int32_t*>(columns->untyped_data()) : nullptr;
  return FilteredSamplerView{*view, *sampler, *filters, column_data};
}

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_FFI_COMMON_H_
