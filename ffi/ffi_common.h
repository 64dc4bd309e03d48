// Buffer validation shared by the CPU and CUDA FFI shims: decodes the input into a
// [rows, cols] view (the reduction axis is the last one) and checks the index (and value)
// outputs. Kernels and the CPU loop trust what comes out of here.
#ifndef JAX_ARGREDUCE_FFI_FFI_COMMON_H_
#define JAX_ARGREDUCE_FFI_FFI_COMMON_H_

#include <cstdint>
#include <string>

#include "order.h"
#include "row_param.h"
#include "sample_filter.h"
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

// ---- A vocabulary split over devices without a top-k (cpu_sample.h, split_prefix_sample's
// stages): the CPU and CUDA handlers' one decoding.

// `buffer` must hold `want` elements of `type`.
inline xla::ffi::Error CheckCount(const xla::ffi::AnyBuffer& buffer, xla::ffi::DataType type,
                                  int64_t want, const std::string& name, const std::string& op) {
  if (buffer.element_type() != type || static_cast<int64_t>(buffer.element_count()) != want) {
    return xla::ffi::Error::InvalidArgument(op + ": " + name + " must have " +
                                            std::to_string(want) + " elements of its dtype, got " +
                                            std::to_string(buffer.element_count()));
  }
  return xla::ffi::Error::Success();
}

// `tops`: each shard's first token of every row (logits' dtype, [rows, shards]). Returns the
// shards count.
inline xla::ffi::ErrorOr<int64_t> DecodeSplitTops(const RowView& view,
                                                  const xla::ffi::AnyBuffer& logits,
                                                  const xla::ffi::AnyBuffer& tops,
                                                  const std::string& op) {
  const int64_t count = static_cast<int64_t>(tops.element_count());
  if (tops.element_type() != logits.element_type() || view.rows == 0 || count == 0 ||
      count % view.rows != 0) {
    return xla::ffi::Unexpected(xla::ffi::Error::InvalidArgument(
        op + ": tops must have the logits' dtype, [rows, shards] with shards >= 1"));
  }
  return count / view.rows;
}

// The levels of top-p's masses for the logits' format (sample_filter.h, MassLevels over z's
// key: 32 bits, 64 for float64 logits): how many, and the digits of one.
struct MassLevelsView {
  int count;      // MassLevels::kCount
  int width;      // MassLevels::kWidth: the digits of a level before the last
  int last_bits;  // the last level's digit bits
  int64_t Digits(int level) const { return level + 1 < count ? width : int64_t{1} << last_bits; }
};
template <int kKeyBits>
MassLevelsView MassLevelsViewOf() {
  using Levels = MassLevels<kKeyBits>;
  return {Levels::kCount, Levels::kWidth, Levels::Bits(Levels::kCount - 1)};
}
inline MassLevelsView MassLevelsOf(Format format) {
  return format == Format::kF64 ? MassLevelsViewOf<64>() : MassLevelsViewOf<32>();
}

// top_p level's operands: logits [rows, cols] (this shard's), temperature, top_p (1 or rows),
// tops [rows, shards], above (uint32 [rows, level, width, 3]: the summed masses of the levels
// before, as limbs) and the histogram (uint32 [rows, width, 3] before the last level, [rows,
// digits] of counts at the last), `level` in [0, levels).
struct TopPLevelView {
  RowView view;
  bool temperature_per_row;
  RowParam<float> top_p;
  int64_t shards;
  bool last;       // the last level: counts, not masses
  int64_t digits;  // the level's digits
};
inline xla::ffi::ErrorOr<TopPLevelView> DecodeTopPLevel(
    const xla::ffi::AnyBuffer& logits, const xla::ffi::AnyBuffer& temperature,
    const xla::ffi::AnyBuffer& top_p, const xla::ffi::AnyBuffer& tops,
    const xla::ffi::AnyBuffer& above, const xla::ffi::AnyBuffer& histogram, int64_t level,
    const std::string& op) {
  namespace ffi = xla::ffi;
  auto view = DecodeInput(logits, op);
  if (!view.has_value()) return ffi::Unexpected(view.error());
  TopPLevelView v{*view, false, {}, 0, false, 0};
  if (view->rows == 0) return v;
  auto t_per_row = DecodeTemperature(*view, temperature, op);
  if (!t_per_row.has_value()) return ffi::Unexpected(t_per_row.error());
  v.temperature_per_row = *t_per_row;
  auto p = DecodeRowParam<float>(top_p, ffi::DataType::F32, view->rows, "top_p", op);
  if (!p.has_value()) return ffi::Unexpected(p.error());
  v.top_p = *p;
  auto shards = DecodeSplitTops(*view, logits, tops, op);
  if (!shards.has_value()) return ffi::Unexpected(shards.error());
  v.shards = *shards;
  const MassLevelsView levels = MassLevelsOf(view->format);
  if (level < 0 || level >= levels.count) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        op + ": level must be in [0, " + std::to_string(levels.count) + ")"));
  }
  v.last = level == levels.count - 1;
  v.digits = levels.Digits(static_cast<int>(level));
  ffi::Error error = CheckCount(above, ffi::DataType::U32,
                                view->rows * level * levels.width * kMassLimbs, "above", op);
  if (error.failure()) return ffi::Unexpected(std::move(error));
  error = CheckCount(histogram, ffi::DataType::U32,
                     view->rows * v.digits * (v.last ? 1 : kMassLimbs), "the histogram", op);
  if (error.failure()) return ffi::Unexpected(std::move(error));
  return v;
}

// split_filtered_draw's operands: the filtered sampler's (no columns; the offsets required:
// the shard's column offset gives the shard), tops [rows, shards], and top-p's levels: above
// (uint32 [rows, levels - 1, width, 3], summed) and counts (uint32 [rows, shards, digits of the
// last level], per shard), or both empty (no row has a top-p).
struct SplitDrawView {
  FilteredSamplerView sampler;
  int64_t shards;
  bool levels;  // above and counts given
};
inline xla::ffi::ErrorOr<SplitDrawView> DecodeSplitDraw(
    const xla::ffi::AnyBuffer& keys, const xla::ffi::AnyBuffer& logits,
    const xla::ffi::AnyBuffer& temperature, const xla::ffi::AnyBuffer& top_k,
    const xla::ffi::AnyBuffer& top_p, const xla::ffi::AnyBuffer& min_p,
    const xla::ffi::AnyBuffer& offsets, const xla::ffi::AnyBuffer& tops,
    const xla::ffi::AnyBuffer& above, const xla::ffi::AnyBuffer& counts,
    const xla::ffi::AnyBuffer& noisy_max, const xla::ffi::AnyBuffer& indices,
    const std::string& op) {
  namespace ffi = xla::ffi;
  auto decoded = DecodeFilteredSampler(keys, logits, temperature, top_k, top_p, min_p, offsets,
                                       nullptr, noisy_max, indices, op);
  if (!decoded.has_value()) return ffi::Unexpected(decoded.error());
  SplitDrawView v{*decoded, 0, false};
  const RowView& view = decoded->view;
  if (view.rows == 0) return v;
  if (!decoded->sampler.has_offsets) {
    return ffi::Unexpected(
        ffi::Error::InvalidArgument(op + ": the offsets (row, column) must be given"));
  }
  auto shards = DecodeSplitTops(view, logits, tops, op);
  if (!shards.has_value()) return ffi::Unexpected(shards.error());
  v.shards = *shards;
  v.levels = above.element_count() != 0 || counts.element_count() != 0;
  if (v.levels) {
    const MassLevelsView levels = MassLevelsOf(view.format);
    ffi::Error error =
        CheckCount(above, ffi::DataType::U32,
                   view.rows * (levels.count - 1) * levels.width * kMassLimbs, "above", op);
    if (error.failure()) return ffi::Unexpected(std::move(error));
    error = CheckCount(counts, ffi::DataType::U32,
                       view.rows * v.shards * levels.Digits(levels.count - 1), "counts", op);
    if (error.failure()) return ffi::Unexpected(std::move(error));
  }
  return v;
}

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_FFI_COMMON_H_
