// CPU FFI shims: validate and decode the buffers (ffi_common.h), then run the CPU row-reduce
// core (cpu_reduce.h) with the op's key policy and epilogue, on XLA's intra-op thread pool. Same semantics as the CUDA
// kernels, so CI without a GPU exercises the whole JAX stack.
#include <cstring>
#include <string>
#include <vector>

#include "categorical.h"
#include "cpu_reduce.h"
#include "cpu_sample.h"
#include "cpu_select.h"
#include "ffi_common.h"
#include "handlers.h"
#include "reduce_hooks.h"
#include "xla/ffi/api/ffi.h"

namespace jax_argreduce {
namespace {

namespace ffi = xla::ffi;

// Elements per thread-pool task: the order-key scan runs at memory speed, so only large inputs
// are split (cpu_row_reduce.h); the sampler's noise costs far more per element, so its tasks
// are far smaller (benchmarks/NOTES.md, "CPU handler constants").
constexpr int64_t kArgReduceElementsPerTask = int64_t{1} << 20;
constexpr int64_t kCategoricalElementsPerTask = int64_t{1} << 14;
// top_k: about a key and a compare per element (cpu_select.h), a few ns.
constexpr int64_t kTopKElementsPerTask = int64_t{1} << 16;
// The filtered sampler: a few passes of keys, and an exp per element for top-p and min-p.
constexpr int64_t kFilteredElementsPerTask = int64_t{1} << 14;

// argmax/argmin (values == nullptr) and max_with_index/min_with_index.
ffi::Error ArgReduceRows(ffi::ThreadPool& pool, const ffi::AnyBuffer& x,
                         ffi::AnyBuffer& indices,
                         ffi::AnyBuffer* values, bool is_min, const std::string& op) {
  auto view = DecodeRows(x, indices, values, op);
  if (!view.has_value()) return view.error();
  const IndexValueEpilogue epilogue{indices.untyped_data(),
                                    indices.element_type() == ffi::DataType::S64,
                                    values == nullptr ? nullptr : values->untyped_data()};
  DispatchFormat(view->format, is_min, [&](auto f, auto m) {
    using Policy = OrderKeyPolicy<decltype(f)::value, decltype(m)::value>;
    ReduceRowsCpu(pool, static_cast<const typename Policy::Bits*>(view->data), view->rows,
                  view->cols, Policy{}, epilogue, kArgReduceElementsPerTask);
  });
  return ffi::Error::Success();
}

ffi::Error ArgReduceCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer x,
                            ffi::Result<ffi::AnyBuffer> indices, bool is_min) {
  return ArgReduceRows(pool, x, *indices, nullptr, is_min, "jax_argreduce argreduce (cpu)");
}

ffi::Error MaxWithIndexCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer x,
                               ffi::Result<ffi::AnyBuffer> values,
                               ffi::Result<ffi::AnyBuffer> indices, bool is_min) {
  return ArgReduceRows(pool, x, *indices, &*values, is_min, "jax_argreduce max_with_index (cpu)");
}

// The sampler's key policy over a call's decoded operands (DecodeSampler).
template <Format F>
GumbelKeyPolicy<F> SamplerPolicy(const ffi::AnyBuffer& keys, const ffi::AnyBuffer& temperature,
                                 const ffi::AnyBuffer& offsets, const RowView& view,
                                 const SamplerView& sampler) {
  using Policy = GumbelKeyPolicy<F>;
  return Policy{static_cast<const uint32_t*>(keys.untyped_data()), view.rows / sampler.num_keys,
                static_cast<const typename Policy::Noise*>(temperature.untyped_data()),
                sampler.temperature_per_row,
                sampler.has_offsets ? static_cast<const int32_t*>(offsets.untyped_data())
                                    : nullptr};
}

ffi::Error CategoricalCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer keys, ffi::AnyBuffer logits,
                              ffi::AnyBuffer temperature, ffi::AnyBuffer offsets,
                              ffi::Result<ffi::AnyBuffer> noisy_max,
                              ffi::Result<ffi::AnyBuffer> indices) {
  const std::string op = "jax_argreduce categorical (cpu)";
  auto view = DecodeRows(logits, *indices, nullptr, op);
  if (!view.has_value()) return view.error();
  auto sampler = DecodeSampler(*view, keys, temperature, offsets, &*noisy_max, op);
  if (!sampler.has_value()) return sampler.error();
  const NoisyMaxEpilogue epilogue{indices->untyped_data(),
                                  indices->element_type() == ffi::DataType::S64,
                                  noisy_max->untyped_data()};
  DispatchFormat(view->format, false, [&](auto f, auto) {
    using Policy = GumbelKeyPolicy<decltype(f)::value>;
    const Policy policy =
        SamplerPolicy<decltype(f)::value>(keys, temperature, offsets, *view, *sampler);
    ReduceRowsCpu(pool, static_cast<const typename Policy::Bits*>(view->data), view->rows,
                  view->cols, policy, epilogue, kCategoricalElementsPerTask);
  });
  return ffi::Error::Success();
}

// The k first elements of each row of `view` ranked by `key_of_row(r, row)(c)` (row r's
// radix key of column c), as values and indices (int32 or int64): top_k's rows, and the split
// vocabulary's candidates.
template <Format F, class KeyOfRow>
void SelectRows(ffi::ThreadPool& pool, const RowView& view, int64_t k, ffi::AnyBuffer& values,
                ffi::AnyBuffer& indices, const KeyOfRow& key_of_row) {
  using Bits = typename FormatTraits<F>::Bits;
  const Bits* data = static_cast<const Bits*>(view.data);
  Bits* out = static_cast<Bits*>(values.untyped_data());
  const bool int64_indices = indices.element_type() == ffi::DataType::S64;
  ParallelForRows(pool, view.rows, view.cols, [&](int64_t begin, int64_t end) {
    const ScopedIeeeSubnormals ieee;  // scaled keys: z with IEEE subnormals, per thread
    std::vector<SelectItem> buffer;   // per task, reused across its rows
    for (int64_t r = begin; r < end; ++r) {
      const Bits* row = data + r * view.cols;
      const auto key_of = key_of_row(r, row);
      if (int64_indices) {
        SelectRowCpu(row, view.cols, k, key_of, out + r * k,
                     static_cast<int64_t*>(indices.untyped_data()) + r * k, buffer);
      } else {
        SelectRowCpu(row, view.cols, k, key_of, out + r * k,
                     static_cast<int32_t*>(indices.untyped_data()) + r * k, buffer);
      }
    }
  }, kTopKElementsPerTask);
}

ffi::Error TopKCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer x,
                       ffi::Result<ffi::AnyBuffer> values, ffi::Result<ffi::AnyBuffer> indices,
                       int64_t k) {
  auto view = DecodeTopK(x, *values, *indices, k, "jax_argreduce top_k (cpu)");
  if (!view.has_value()) return view.error();
  DispatchFormat(view->format, false, [&](auto f, auto) {
    constexpr Format F = decltype(f)::value;
    SelectRows<F>(pool, *view, k, *values, *indices, [](int64_t, const auto* row) {
      return [row](int64_t c) { return RadixKey<F>(row[c]); };
    });
  });
  return ffi::Error::Success();
}

// The split vocabulary's candidates (cpu_sample.h): top_k ranked by the sampler's z = logit *
// (1/T) of each row (T == 0 rows: by the logit), what FilteredSamplerCpu ranks by. No key: the
// noise is drawn after the exchange, from the global columns.
ffi::Error ScaledTopKCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer temperature,
                             ffi::Result<ffi::AnyBuffer> values,
                             ffi::Result<ffi::AnyBuffer> indices, int64_t k) {
  const std::string op = "jax_argreduce scaled top_k (cpu)";
  auto view = DecodeTopK(x, *values, *indices, k, op);
  if (!view.has_value()) return view.error();
  auto per_row = DecodeTemperature(*view, temperature, op);
  if (!per_row.has_value()) return per_row.error();
  DispatchFormat(view->format, false, [&](auto f, auto) {
    constexpr Format F = decltype(f)::value;
    using Sampler = FilteredSamplerCpu<F>;
    using Policy = typename Sampler::Policy;
    const RowParam<typename Sampler::Noise> t{
        static_cast<const typename Sampler::Noise*>(temperature.untyped_data()), *per_row};
    SelectRows<F>(pool, *view, k, *values, *indices, [&](int64_t r, const auto* row) {
      return [row, rr = Policy::Scaling(t[r])](int64_t c) { return Sampler::RankKey(rr, row[c]); };
    });
  });
  return ffi::Error::Success();
}

ffi::Error FilteredCategoricalCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer keys,
                                      ffi::AnyBuffer logits, ffi::AnyBuffer temperature,
                                      ffi::AnyBuffer top_k, ffi::AnyBuffer top_p,
                                      ffi::AnyBuffer min_p, ffi::AnyBuffer offsets,
                                      ffi::AnyBuffer columns,
                                      ffi::Result<ffi::AnyBuffer> noisy_max,
                                      ffi::Result<ffi::AnyBuffer> indices, int64_t k_bound,
                                      bool has_top_p) {
  (void)k_bound, (void)has_top_p;  // the CUDA handler's paths; one CPU path serves every row
  const std::string op = "jax_argreduce filtered categorical (cpu)";
  auto decoded = DecodeFilteredSampler(keys, logits, temperature, top_k, top_p, min_p, offsets,
                                       &columns, *noisy_max, *indices, op);
  if (!decoded.has_value()) return decoded.error();
  const RowView& view = decoded->view;
  const SampleFilters& filters = decoded->filters;
  const NoisyMaxEpilogue epilogue{indices->untyped_data(),
                                  indices->element_type() == ffi::DataType::S64,
                                  noisy_max->untyped_data()};
  DispatchFormat(view.format, false, [&](auto f, auto) {
    constexpr Format F = decltype(f)::value;
    using Sampler = FilteredSamplerCpu<F>;
    const auto policy = SamplerPolicy<F>(keys, temperature, offsets, view, decoded->sampler);
    const auto* data = static_cast<const typename Sampler::Bits*>(view.data);
    ParallelForRows(pool, view.rows, view.cols, [&](int64_t begin, int64_t end) {
      const ScopedIeeeSubnormals ieee;  // per thread: the pool's threads too
      SampleScratch scratch;
      for (int64_t r = begin; r < end; ++r) {
        const RowFilters f{filters.top_k[r], filters.top_p[r], filters.min_p[r]};
        const auto* row = data + r * view.cols;
        const int32_t* columns = decoded->columns;
        epilogue(r, Sampler::SampleRow(row, view.cols, policy.ForRow(r), f, scratch,
                                       columns != nullptr ? columns + r * view.cols : nullptr),
                 row);
      }
    }, kFilteredElementsPerTask);
  });
  return ffi::Error::Success();
}

// A split vocabulary without a top-k (cpu_sample.h, SplitDrawRow): masses as limbs
// (sample_filter.h, kMassLimbs).
void MassesToLimbs(const uint64_t* masses, int64_t n, uint32_t* limbs) {
  for (int64_t i = 0; i < n; ++i) MassToLimbs(masses[i], limbs + i * kMassLimbs);
}

void LimbsToMasses(const uint32_t* limbs, int64_t n, uint64_t* masses) {
  for (int64_t i = 0; i < n; ++i) masses[i] = MassFromLimbs(limbs + i * kMassLimbs);
}

// top-p's level `level` on one shard of a split vocabulary: per row, the masses (levels before
// the last: limbs, uint32 [rows, MassLevels::kWidth, 3]) or the counts (the last: uint32 [rows,
// 2^bits]) of its tokens' digits under the digits the levels before picked; `above`: the row's
// summed masses of those levels (limbs, uint32 [rows, level, kWidth, 3]).
ffi::Error TopPLevelCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer logits,
                            ffi::AnyBuffer temperature, ffi::AnyBuffer top_p, ffi::AnyBuffer tops,
                            ffi::AnyBuffer above, ffi::Result<ffi::AnyBuffer> histogram,
                            int64_t level) {
  const std::string op = "jax_argreduce top_p level (cpu)";
  auto decoded = DecodeTopPLevel(logits, temperature, top_p, tops, above, *histogram, level, op);
  if (!decoded.has_value()) return decoded.error();
  const TopPLevelView& v = *decoded;
  const RowView& view = v.view;
  if (view.rows == 0) return ffi::Error::Success();
  DispatchFormat(view.format, false, [&](auto f, auto) {
    constexpr Format F = decltype(f)::value;
    using Sampler = FilteredSamplerCpu<F>;
    using Levels = typename Sampler::Levels;
    using Noise = typename Sampler::Noise;
    using Bits = typename Sampler::Bits;
    const RowParam<Noise> t{static_cast<const Noise*>(temperature.untyped_data()),
                            v.temperature_per_row};
    const auto* data = static_cast<const Bits*>(view.data);
    const auto* top_bits = static_cast<const Bits*>(tops.untyped_data());
    const auto* above_limbs = static_cast<const uint32_t*>(above.untyped_data());
    auto* out = static_cast<uint32_t*>(histogram->untyped_data());
    const int64_t above_count = level * Levels::kWidth;
    ParallelForRows(pool, view.rows, view.cols, [&](int64_t begin, int64_t end) {
      const ScopedIeeeSubnormals ieee;
      std::vector<uint64_t> above_row(static_cast<size_t>(above_count));
      std::vector<uint64_t> masses(v.last ? 0 : static_cast<size_t>(v.digits));
      for (int64_t r = begin; r < end; ++r) {
        LimbsToMasses(above_limbs + r * above_count * kMassLimbs, above_count, above_row.data());
        Sampler::LevelRow(data + r * view.cols, view.cols, Sampler::Policy::Scaling(t[r]),
                          v.top_p[r], top_bits + r * v.shards, v.shards, above_row.data(),
                          static_cast<int>(level), v.last ? nullptr : masses.data(),
                          v.last ? out + r * v.digits : nullptr);
        if (!v.last) MassesToLimbs(masses.data(), v.digits, out + r * v.digits * kMassLimbs);
      }
    }, kFilteredElementsPerTask);
  });
  return ffi::Error::Success();
}

// The filtered sampler's draw on one shard of a split vocabulary without a top-k: the
// (noisy maximum, local index) of its best kept token per row (cpu_sample.h, SplitDrawRow), for
// the caller's pair exchange (DecodeSplitDraw gives the operands). The offsets give the shard:
// its column offset over the logits' width.
ffi::Error SplitFilteredDrawCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer keys,
                                    ffi::AnyBuffer logits, ffi::AnyBuffer temperature,
                                    ffi::AnyBuffer top_k, ffi::AnyBuffer top_p,
                                    ffi::AnyBuffer min_p, ffi::AnyBuffer offsets,
                                    ffi::AnyBuffer tops, ffi::AnyBuffer above,
                                    ffi::AnyBuffer counts,
                                    ffi::Result<ffi::AnyBuffer> noisy_max,
                                    ffi::Result<ffi::AnyBuffer> indices) {
  const std::string op = "jax_argreduce split filtered draw (cpu)";
  auto decoded = DecodeSplitDraw(keys, logits, temperature, top_k, top_p, min_p, offsets, tops,
                                 above, counts, *noisy_max, *indices, op);
  if (!decoded.has_value()) return decoded.error();
  const RowView& view = decoded->sampler.view;
  const SamplerView& sampler = decoded->sampler.sampler;
  const SampleFilters& filters = decoded->sampler.filters;
  const int64_t shards = decoded->shards;
  const bool levels = decoded->levels;
  if (view.rows == 0) return ffi::Error::Success();
  int32_t col_offset = 0;
  std::memcpy(&col_offset, static_cast<const int32_t*>(offsets.untyped_data()) + 1,
              sizeof(col_offset));
  const int64_t shard = col_offset / view.cols;
  if (col_offset < 0 || col_offset % view.cols != 0 || shard >= shards) {
    return ffi::Error::InvalidArgument(op + ": the column offset must be the shard's");
  }
  const NoisyMaxEpilogue epilogue{indices->untyped_data(),
                                  indices->element_type() == ffi::DataType::S64,
                                  noisy_max->untyped_data()};
  DispatchFormat(view.format, false, [&](auto f, auto) {
    constexpr Format F = decltype(f)::value;
    using Sampler = FilteredSamplerCpu<F>;
    using Levels = typename Sampler::Levels;
    using Bits = typename Sampler::Bits;
    const int64_t last = int64_t{1} << Levels::Bits(Levels::kCount - 1);
    const auto policy = SamplerPolicy<F>(keys, temperature, offsets, view, sampler);
    const auto* data = static_cast<const Bits*>(view.data);
    const auto* top_bits = static_cast<const Bits*>(tops.untyped_data());
    const auto* above_limbs = static_cast<const uint32_t*>(above.untyped_data());
    const auto* count_data = static_cast<const uint32_t*>(counts.untyped_data());
    const int64_t above_count = (Levels::kCount - 1) * Levels::kWidth;
    ParallelForRows(pool, view.rows, view.cols, [&](int64_t begin, int64_t end) {
      const ScopedIeeeSubnormals ieee;
      SampleScratch scratch;
      std::vector<uint64_t> above_row(levels ? static_cast<size_t>(above_count) : 0);
      for (int64_t r = begin; r < end; ++r) {
        const RowFilters f{0, filters.top_p[r], filters.min_p[r]};
        const auto* row = data + r * view.cols;
        if (levels) {
          LimbsToMasses(above_limbs + r * above_count * kMassLimbs, above_count, above_row.data());
        }
        epilogue(r, Sampler::SplitDrawRow(row, view.cols, policy.ForRow(r), f,
                                          top_bits + r * shards, shards, shard,
                                          levels ? above_row.data() : nullptr,
                                          levels ? count_data + r * shards * last : nullptr,
                                          scratch),
                 row);
      }
    }, kFilteredElementsPerTask);
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ArgReduceCpu, ArgReduceCpuImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()  // XLA's intra-op thread pool
                                  .Arg<ffi::AnyBuffer>()   // x: [..., cols] float array
                                  .Ret<ffi::AnyBuffer>()   // indices: [...] int32 or int64
                                  .Attr<bool>("is_min"));  // argmin instead of argmax

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxWithIndexCpu, MaxWithIndexCpuImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()  // XLA's intra-op thread pool
                                  .Arg<ffi::AnyBuffer>()   // x: [..., cols] float array
                                  .Ret<ffi::AnyBuffer>()   // values: [...] x's dtype
                                  .Ret<ffi::AnyBuffer>()   // indices: [...] int32 or int64
                                  .Attr<bool>("is_min"));  // min_with_index instead

XLA_FFI_DEFINE_HANDLER_SYMBOL(CategoricalCpu, CategoricalCpuImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()  // XLA's intra-op thread pool
                                  .Arg<ffi::AnyBuffer>()   // keys: [num_keys, 2] uint32
                                  .Arg<ffi::AnyBuffer>()   // logits: [..., cols] float array
                                  .Arg<ffi::AnyBuffer>()   // temperature: [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()   // offsets: [2] int32 (row, col), or [0]
                                  .Ret<ffi::AnyBuffer>()   // noisy_max: [...] float32/64
                                  .Ret<ffi::AnyBuffer>());  // indices: [...] int32 or int64

XLA_FFI_DEFINE_HANDLER_SYMBOL(TopKCpu, TopKCpuImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()  // XLA's intra-op thread pool
                                  .Arg<ffi::AnyBuffer>()   // x: [..., cols] float array
                                  .Ret<ffi::AnyBuffer>()   // values: [..., k] x's dtype
                                  .Ret<ffi::AnyBuffer>()   // indices: [..., k] int32 or int64
                                  .Attr<int64_t>("k"));    // 1 <= k <= cols

XLA_FFI_DEFINE_HANDLER_SYMBOL(ScaledTopKCpu, ScaledTopKCpuImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()  // XLA's intra-op thread pool
                                  .Arg<ffi::AnyBuffer>()   // x: [..., cols] float array
                                  .Arg<ffi::AnyBuffer>()   // temperature: [1] or [rows]
                                  .Ret<ffi::AnyBuffer>()   // values: [..., k] x's dtype
                                  .Ret<ffi::AnyBuffer>()   // indices: [..., k] int32 or int64
                                  .Attr<int64_t>("k"));    // 1 <= k <= cols

XLA_FFI_DEFINE_HANDLER_SYMBOL(FilteredCategoricalCpu, FilteredCategoricalCpuImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()  // XLA's intra-op thread pool
                                  .Arg<ffi::AnyBuffer>()   // keys: [num_keys, 2] uint32
                                  .Arg<ffi::AnyBuffer>()   // logits: [..., cols] float array
                                  .Arg<ffi::AnyBuffer>()   // temperature: [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()   // top_k: int32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()   // top_p: float32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()   // min_p: float32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()   // offsets: [2] int32 (row, col), or [0]
                                  .Arg<ffi::AnyBuffer>()   // columns: [..., cols] int32, or [0]
                                  .Ret<ffi::AnyBuffer>()   // noisy_max: [...] float32/64
                                  .Ret<ffi::AnyBuffer>()   // indices: [...] int32 or int64
                                  .Attr<int64_t>("k_bound")   // > 0: top_k in [1, it]; -1: none
                                  .Attr<bool>("has_top_p"));  // false: top_p is 1 everywhere

XLA_FFI_DEFINE_HANDLER_SYMBOL(TopPLevelCpu, TopPLevelCpuImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()  // XLA's intra-op thread pool
                                  .Arg<ffi::AnyBuffer>()   // logits: [..., cols] float array
                                  .Arg<ffi::AnyBuffer>()   // temperature: [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()   // top_p: float32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()   // tops: [rows, shards] logits' dtype
                                  .Arg<ffi::AnyBuffer>()   // above: uint32 [rows, level, 2048, 3]
                                  .Ret<ffi::AnyBuffer>()   // histogram: uint32 [rows, d(, 3)]
                                  .Attr<int64_t>("level"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SplitFilteredDrawCpu, SplitFilteredDrawCpuImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()  // XLA's intra-op thread pool
                                  .Arg<ffi::AnyBuffer>()   // keys: [num_keys, 2] uint32
                                  .Arg<ffi::AnyBuffer>()   // logits: [..., cols] float array
                                  .Arg<ffi::AnyBuffer>()   // temperature: [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()   // top_k: int32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()   // top_p: float32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()   // min_p: float32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()   // offsets: [2] int32 (row, col)
                                  .Arg<ffi::AnyBuffer>()   // tops: [rows, shards] logits' dtype
                                  .Arg<ffi::AnyBuffer>()   // above: uint32 [rows, L - 1, 2048, 3]
                                  .Arg<ffi::AnyBuffer>()   // counts: uint32 [rows, shards, d]
                                  .Ret<ffi::AnyBuffer>()   // noisy_max: [...] float32/64
                                  .Ret<ffi::AnyBuffer>());  // indices: [...] int32 or int64

}  // namespace jax_argreduce
