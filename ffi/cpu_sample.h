// The filtered sampler on the CPU (SPEC §1f): per row, the kept prefix of the z order
// (sample_filter.h), then the Gumbel-max over the kept tokens with the unfiltered sampler's
// noise. Header-only, no XLA types.
//
// With top-k, the k first tokens (cpu_select.h's selection, on z's keys) are all the later
// steps look at. Without it, top-p needs the row's total mass and the token where the running
// mass reaches p of it: one pass for z_max, one that sums the masses into 2^16 buckets of
// z's radix key (high bits first), then only the crossing bucket's tokens are sorted and walked.
// The last pass draws among the tokens at or before the kept prefix's last (key, column).
//
// A split vocabulary (jax_argreduce/_sharding.py, split_filtered_sample) samples from its
// shards' candidates: each shard's first k_bound tokens in the z order (RankKey; the logits'
// bits and their global columns), concatenated in shard order, with a `columns` operand giving
// each element's global column. Every filter keeps a prefix of the z order, so the row's top-k
// set (k <= k_bound) lies among them. Ties in z are then broken by position in the candidate
// row, which is global column order among equal z: shards come in column order, and within a
// shard equal z are in column order (the select's ties). Ties of the noisy key, which tokens of
// different z can have, are broken by the global column explicitly (Draw's index).
#ifndef JAX_ARGREDUCE_FFI_CPU_SAMPLE_H_
#define JAX_ARGREDUCE_FFI_CPU_SAMPLE_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "categorical.h"
#include "cpu_reduce.h"
#include "cpu_select.h"
#include "order.h"
#include "sample_filter.h"

namespace jax_argreduce {

// Per-task scratch, reused across rows.
struct SampleScratch {
  std::vector<SelectItem> items;
  std::vector<uint64_t> buckets;  // top-p's masses per radix bucket
  std::vector<uint64_t> masked;   // a row with its dropped tokens at -inf (as Bits)
};

template <Format F>
struct FilteredSamplerCpu {
  using Policy = GumbelKeyPolicy<F>;
  using Row = typename Policy::Row;
  using Bits = typename Policy::Bits;
  using Noise = typename Policy::Noise;
  static constexpr Format kNoiseFormat = Policy::kNoiseFormat;
  static constexpr int kKeyBits = sizeof(Noise) * 8;
  static constexpr int kBucketBits = 16;
  using Key = typename Policy::Key;
  using Pair = ArgPair<Key>;

  // z's radix key (order.h: NaN largest, then larger z).
  static uint64_t SortKey(Noise z) {
    return static_cast<uint64_t>(RadixKey<kNoiseFormat>(gumbel_detail::AsBits(z)));
  }
  static bool IsNaN(Noise z) { return z != z; }

  // The key a row's tokens are ranked by for the split vocabulary's candidates: z's, or for a
  // T == 0 row the logit's own (widened exactly), whose first token is then the row's argmax
  // (the CUDA select's order too: sample_topk.cuh, ScaledKeys).
  static uint64_t RankKey(const Row& r, Bits bits) {
    return SortKey(r.greedy ? categorical_detail::Widen<F>(bits) : r.Scaled(bits));
  }

  // The sampled column of one row and its noisy key (the key of its y; for T == 0 its logit's,
  // as the unfiltered sampler's noisy maximum). `columns` (nullptr: none): a split vocabulary's
  // candidate row (the top comment), the global column of each element: its noise's counter
  // (plus the row's column offset, as an element's own column) and the index returned.
  static Pair SampleRow(const Bits* x, int64_t cols, const Row& r, const RowFilters& f,
                        SampleScratch& scratch, const int32_t* columns = nullptr) {
    if (columns != nullptr) return SampleCandidates(x, cols, r, f, scratch, columns);
    if (r.greedy) return Argmax(x, cols);  // T == 0: argmax, whatever the filters
    if (!f.Any(cols)) return DrawAll(x, cols, r);
    if (f.HasTopK(cols)) return SampleTopK(x, cols, r, f, scratch);
    return SampleRowPrefix(x, cols, r, f, scratch);
  }

 private:
  static Pair Argmax(const Bits* x, int64_t cols) {
    const auto key_of = [&](int64_t c) { return Row::KeyOf(categorical_detail::Widen<F>(x[c])); };
    Pair best{key_of(0), 0};
    for (int64_t c = 1; c < cols; ++c) {
      const Key key = key_of(c);
      if (key > best.key) best = Pair{key, static_cast<int32_t>(c)};
    }
    return best;
  }

  // A candidate row: the top-k path, whose draw takes the columns; a row without top-k (only
  // where the candidates are the whole row) as its top-k of every token, which keeps what
  // SampleRowPrefix keeps (the same prefix, by the same exact masses) and draws what DrawAll
  // draws (the largest noisy key, the lowest column on ties).
  static Pair SampleCandidates(const Bits* x, int64_t cols, const Row& r, const RowFilters& f,
                               SampleScratch& scratch, const int32_t* columns) {
    if (r.greedy) {  // the first of the largest logits is the lowest global column among them
      Pair best = Argmax(x, cols);
      best.index = columns[best.index];
      return best;
    }
    RowFilters all = f;
    if (!f.HasTopK(cols)) all.k = cols;
    return SampleTopK(x, cols, r, all, scratch, columns);
  }

  // The unfiltered draw: categorical's own scan (cpu_reduce.h), whose bounds skip the noise
  // of tokens that cannot win.
  static Pair DrawAll(const Bits* x, int64_t cols, const Row& r) {
    return ScanRowCpu<Policy>(x, cols, r);
  }

  static Pair SampleTopK(const Bits* x, int64_t cols, const Row& r, const RowFilters& f,
                         SampleScratch& scratch, const int32_t* columns = nullptr) {
    auto& items = scratch.items;
    SelectTopK(cols, f.k, [&](int64_t c) { return SortKey(r.Scaled(x[c])); }, items);
    const Noise z_max = r.Scaled(x[items[0].col]);
    // A NaN wins as in argmax; a top of -inf means every kept token is -inf: the first.
    if (IsNaN(z_max) || z_max == -Noise(INFINITY)) return Draw(x, r, items[0].col, columns);
    int64_t kept = f.k;
    if (f.HasTopP()) {
      uint64_t total = 0;
      for (int64_t i = 0; i < f.k; ++i) {
        total += FixedMass(r.Scaled(x[items[i].col]), z_max);
      }
      uint64_t before = 0;
      int64_t i = 0;
      for (; i < kept && MassBelow(before, f.p, total); ++i) {
        before += FixedMass(r.Scaled(x[items[i].col]), z_max);
      }
      kept = i;
    }
    if (f.HasMinP()) {
      int64_t i = 0;
      while (i < kept && RelativeMass(r.Scaled(x[items[i].col]), z_max) >= f.min_p) ++i;
      kept = i;
    }
    // The candidates are in z order, not column order: ties of the noisy key go to the
    // lowest column explicitly.
    Pair best = Draw(x, r, items[0].col, columns);
    for (int64_t i = 1; i < kept; ++i) {
      const Pair draw = Draw(x, r, items[i].col, columns);
      if (draw.key > best.key || (draw.key == best.key && draw.index < best.index)) best = draw;
    }
    return best;
  }

  // Element i's draw: its noisy key and column (columns[i] where given).
  static Pair Draw(const Bits* x, const Row& r, int64_t i, const int32_t* columns = nullptr) {
    const int64_t col = columns != nullptr ? columns[i] : i;
    return Pair{NoisyKey<F>(r, r.Scaled(x[i]), col), static_cast<int32_t>(col)};
  }

  // top-p and/or min-p over the whole row.
  static Pair SampleRowPrefix(const Bits* x, int64_t cols, const Row& r,
                                 const RowFilters& f, SampleScratch& scratch) {
    uint64_t top_key = SortKey(r.Scaled(x[0]));
    int64_t top_col = 0;
    for (int64_t c = 1; c < cols; ++c) {
      const uint64_t key = SortKey(r.Scaled(x[c]));
      if (key > top_key) {
        top_key = key;
        top_col = c;
      }
    }
    const Noise z_max = r.Scaled(x[top_col]);
    if (IsNaN(z_max) || z_max == -Noise(INFINITY)) return Draw(x, r, top_col);

    // The last kept token of top-p's prefix as a (key, column) bar: kept iff at or before it.
    SelectItem bar{0, cols};  // no top-p: the order's last place, every token kept
    if (f.HasTopP()) bar = TopPBar(x, cols, r, f.p, z_max, scratch);

    // The draw: the unfiltered scan over the row with its dropped tokens set to -inf, whose
    // y = -inf never wins while a kept token (finite z: z_max > -inf) remains, and whose
    // bounds skip the noise of tokens that cannot win.
    const float d_floor = f.HasMinP() ? MinPFloor(f.min_p) : -INFINITY;
    auto& masked = scratch.masked;
    masked.resize((static_cast<size_t>(cols) * sizeof(Bits) + 7) / 8);
    Bits* row = reinterpret_cast<Bits*>(masked.data());
    bool any = false;
    for (int64_t c = 0; c < cols; ++c) {
      const Noise z = r.Scaled(x[c]);
      const bool kept = !(bar > SelectItem{SortKey(z), c}) && MassExponent(z, z_max) >= d_floor;
      row[c] = kept ? x[c] : kNegInf;
      any |= kept;
    }
    // The top token is kept by any filter in range (its E is 1, the mass before it 0); with
    // min_p > 1 or p <= 0 (traced values are not checked) nothing would be: the top token.
    return any ? ScanRowCpu<Policy>(row, cols, r) : Draw(x, r, top_col);
  }

  // -inf in the logits' format.
  static constexpr Bits kNegInf = static_cast<Bits>(
      F == Format::kF64 ? 0xFFF0000000000000ull : F == Format::kF32 ? 0xFF800000u
                        : F == Format::kBF16 ? 0xFF80u : 0xFC00u);

  // top-p over the whole row: the last token whose mass before it is below p of the total.
  static SelectItem TopPBar(const Bits* x, int64_t cols, const Row& r, float p, Noise z_max,
                            SampleScratch& scratch) {
    auto& buckets = scratch.buckets;
    buckets.assign(size_t{1} << kBucketBits, 0);
    constexpr int kShift = kKeyBits - kBucketBits;
    uint64_t total = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const Noise z = r.Scaled(x[c]);
      const uint64_t w = FixedMass(z, z_max);
      total += w;
      buckets[SortKey(z) >> kShift] += w;
    }
    // The bucket of the crossing: the first (from the top) whose end reaches p of the total.
    // Tokens of mass 0 are never kept (p < 1: the mass before them is the total), so the
    // crossing lies in a bucket of positive mass, after a prefix whose mass is below p.
    uint64_t before = 0;
    int64_t b = static_cast<int64_t>(buckets.size()) - 1;
    for (; b > 0; --b) {
      if (buckets[b] == 0) continue;  // (p <= 0, traced: the top token's bucket, not an empty one)
      if (!MassBelow(before + buckets[b], p, total)) break;
      before += buckets[b];
    }
    auto& items = scratch.items;
    items.clear();
    for (int64_t c = 0; c < cols; ++c) {
      const Noise z = r.Scaled(x[c]);
      const uint64_t key = SortKey(z);
      if (static_cast<int64_t>(key >> kShift) == b && FixedMass(z, z_max) > 0) {
        items.push_back(SelectItem{key, c});
      }
    }
    std::sort(items.begin(), items.end(),
              [](const SelectItem& a, const SelectItem& o) { return a > o; });
    // The bucket's first token is kept (its mass before is `before`, below p of the total).
    SelectItem last = items[0];
    for (const SelectItem& item : items) {
      if (!MassBelow(before, p, total)) break;
      last = item;
      before += FixedMass(r.Scaled(x[item.col]), z_max);
    }
    return last;
  }
};

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_CPU_SAMPLE_H_
