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
//
// A split vocabulary without a top-k (_sharding.py, split_prefix_sample) exchanges no logits:
// z_max from the shards' first tokens; top-p's last kept token from levels of per-digit masses
// over z's radix key (sample_filter.h, MassLevels), summed over the shards, the last level's
// counts kept per shard (that key's ties are kept in global column order: a shard keeps those
// left after the shards before it); each shard then draws over its kept tokens as
// SampleRowPrefix does, and the caller combines the shards' pairs.
#ifndef JAX_ARGREDUCE_FFI_CPU_SAMPLE_H_
#define JAX_ARGREDUCE_FFI_CPU_SAMPLE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "categorical.h"
#include "cpu_mass_x86.h"
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
  std::vector<uint32_t> counts;   // 16-bit rows: tokens per logit value (TopPBar)
  std::vector<int64_t> above;     // kept columns: top-p's above its crossing bucket (TopPBar:
  bool above_listed = false;      // all of them where true), or min-p's (ListMinP)
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
  // TopPBar counts the tokens per value of 16-bit rows from this width on (a pass over the
  // 2^16 values costs about what the exps of a few thousand tokens do).
  static constexpr int64_t kValueCountMinCols = 8192;
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

  // ---- A split vocabulary without a top-k (sample_filter.h, MassLevels): each row's z_max
  // from the shards' first tokens, top-p's levels of masses, then the draw of each shard over
  // its kept tokens, whose (noisy maximum, column) pairs the caller combines (the unfiltered
  // sampler's exchange). `tops`: each shard's first token in the z order (the scaled_top_k
  // handler's k = 1, as logits' bits), in shard order; `above`: the row's summed masses of the
  // levels before, [levels][Levels::kWidth].
  using Levels = MassLevels<kKeyBits>;

  // z_max and the shard holding the row's first token (the first shard among equal tops).
  struct SplitTop {
    Noise z_max;
    int64_t shard;
  };
  static SplitTop TopOfShards(const Bits* tops, int64_t shards, const Row& r) {
    const int64_t best = FirstToken(tops, shards, r);  // the tops as a row: shard order
    return SplitTop{r.Scaled(tops[best]), best};
  }

  // Whether a row needs top-p's levels: a draw row (not T == 0) with p < 1 and a finite top.
  static bool NeedsLevels(const Row& r, float p, const SplitTop& top) {
    return !r.greedy && p < 1.0f && !IsNaN(top.z_max) && top.z_max != -Noise(INFINITY);
  }

  // The digits picked at levels < `levels` (`above` holds their summed masses): the key's high
  // bits, the mass above them, and the row's total (level 0's sum).
  struct MassPrefix {
    uint64_t prefix = 0;
    uint64_t before = 0;
    uint64_t total = 0;
  };
  static MassPrefix PickLevels(const uint64_t* above, int levels, float p) {
    MassPrefix m;
    for (int64_t d = 0; d < Levels::kWidth; ++d) m.total += above[d];
    for (int l = 0; l < levels; ++l) {
      const int64_t d = CrossingDigit(above + l * Levels::kWidth, int64_t{1} << Levels::Bits(l),
                                      p, m.total, m.before);
      m.prefix |= static_cast<uint64_t>(d) << Levels::Shift(l);
    }
    return m;
  }

  // One shard's histogram of level `level` for one row: per digit, the masses (levels before
  // the last: `masses`) or the counts of tokens of positive mass (the last: `counts`, gathered
  // per shard, since the last key's ties are kept in column order across the shards) of its
  // tokens under the digits picked before. Zeros where the row needs no levels.
  static void LevelRow(const Bits* x, int64_t cols, const Row& r, float p, const Bits* tops,
                       int64_t shards, const uint64_t* above, int level, uint64_t* masses,
                       uint32_t* counts) {
    const int64_t size = int64_t{1} << Levels::Bits(level);
    if (masses != nullptr) std::fill(masses, masses + size, uint64_t{0});
    if (counts != nullptr) std::fill(counts, counts + size, uint32_t{0});
    if (r.greedy || !(p < 1.0f)) return;
    const SplitTop top = TopOfShards(tops, shards, r);
    if (!NeedsLevels(r, p, top)) return;
    const uint64_t prefix = level == 0 ? 0 : PickLevels(above, level, p).prefix;
    for (int64_t c = 0; c < cols; ++c) {
      const Noise z = r.Scaled(x[c]);
      const uint64_t key = SortKey(z);
      if (!Levels::Under(key, prefix, level)) continue;
      const uint64_t w = FixedMass(z, top.z_max);
      if (masses != nullptr) {
        masses[Levels::Digit(key, level)] += w;
      } else if (w > 0) {
        ++counts[Levels::Digit(key, level)];
      }
    }
  }

  // One shard's draw for one row (the shard `shard` of `shards`, its columns at r.col_offset):
  // the (noisy key, local column) of its best kept token; a pair that loses to every kept
  // token's (a -inf key) where it keeps none. `above` ([Levels::kCount - 1][kWidth], summed)
  // and `counts` ([shards][last level's digits], per shard) are nullptr where no row has a
  // top-p. The kept set is SampleRowPrefix's: the same bar, min-p floor and fallbacks.
  static Pair SplitDrawRow(const Bits* x, int64_t cols, const Row& r, const RowFilters& f,
                           const Bits* tops, int64_t shards, int64_t shard,
                           const uint64_t* above, const uint32_t* counts,
                           SampleScratch& scratch) {
    if (r.greedy) return Argmax(x, cols);  // the shards' argmax pairs combine to the row's
    const bool top_p = f.HasTopP() && counts != nullptr;
    if (!top_p && !f.HasMinP()) return DrawAll(x, cols, r);
    const SplitTop top = TopOfShards(tops, shards, r);
    const Pair lose{Row::KeyOf(-Noise(INFINITY)), 0};
    // The row's first token alone (a NaN or -inf top; or nothing kept: min_p > 1, traced):
    // the shard holding it draws it (the first of its tokens in the z order).
    const auto first_alone = [&] { return shard == top.shard ? Draw(x, r, FirstToken(x, cols, r))
                                                            : lose; };
    if (IsNaN(top.z_max) || top.z_max == -Noise(INFINITY)) return first_alone();
    const float d_floor = f.HasMinP() ? MinPFloor(f.min_p) : -INFINITY;
    if (!(0.0f >= d_floor)) return first_alone();  // the top token's d is 0

    // top-p's bar: kept iff the key is above `bar`, or equal to it among this shard's first
    // `ties_kept` tokens of that key (in column order). No top-p: every key is above 0.
    uint64_t bar = 0;
    int64_t ties_kept = 0;
    if (top_p) {
      constexpr int kLast = Levels::kCount - 1;
      const int64_t size = int64_t{1} << Levels::Bits(kLast);
      MassPrefix m = PickLevels(above, kLast, f.p);
      // The last level's masses: its digits complete the key, so a digit's tokens share one z
      // (one mass): count * mass.
      auto& masses = scratch.buckets;
      masses.assign(static_cast<size_t>(size), 0);
      for (int64_t d = 0; d < size; ++d) {
        uint64_t n = 0;
        for (int64_t s = 0; s < shards; ++s) n += counts[s * size + d];
        if (n > 0) masses[d] = n * KeyMass(m.prefix | static_cast<uint64_t>(d), top.z_max);
      }
      const int64_t d = CrossingDigit(masses.data(), size, f.p, m.total, m.before);
      bar = m.prefix | static_cast<uint64_t>(d);
      int64_t ties = 0, ties_before = 0;
      for (int64_t s = 0; s < shards; ++s) {
        ties += counts[s * size + d];
        if (s < shard) ties_before += counts[s * size + d];
      }
      const int64_t kept = TiesKept(m.before, KeyMass(bar, top.z_max), ties, f.p, m.total);
      ties_kept = std::clamp<int64_t>(kept - ties_before, 0, counts[shard * size + d]);
    }

    int64_t ties_seen = 0;  // the kept predicate runs once per column, in column order
    const std::optional<Pair> best = DrawKept(x, cols, r, scratch, [&](int64_t, Noise z) {
      const uint64_t key = SortKey(z);
      bool kept = key > bar;
      if (key == bar && FixedMass(z, top.z_max) > 0) kept = ties_seen++ < ties_kept;
      return kept && MassExponent(z, top.z_max) >= d_floor;
    });
    return best.value_or(lose);
  }

 private:
  // The first token of a row in the z order (NaN first, larger z, the lowest column).
  static int64_t FirstToken(const Bits* x, int64_t cols, const Row& r) {
    uint64_t top_key = SortKey(r.Scaled(x[0]));
    int64_t top_col = 0;
    for (int64_t c = 1; c < cols; ++c) {
      const uint64_t key = SortKey(r.Scaled(x[c]));
      if (key > top_key) {
        top_key = key;
        top_col = c;
      }
    }
    return top_col;
  }

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
    const int64_t top_col = FirstToken(x, cols, r);
    const Noise z_max = r.Scaled(x[top_col]);
    if (IsNaN(z_max) || z_max == -Noise(INFINITY)) return Draw(x, r, top_col);

    // The last kept token of top-p's prefix as a (key, column) bar: kept iff at or before it.
    SelectItem bar{0, cols};  // no top-p: the order's last place, every token kept
    if (f.HasTopP()) bar = TopPBar(x, cols, r, f.p, z_max, scratch);

    const float d_floor = f.HasMinP() ? MinPFloor(f.min_p) : -INFINITY;
    const auto in_min_p = [&](Noise z) { return MassExponent(z, z_max) >= d_floor; };
    // Few kept tokens (a peaked row): the draw over their list instead of a pass over the row.
    if (f.HasTopP() && scratch.above_listed) {
      // TopPBar's columns above the crossing bucket, then the bucket's tokens down to the bar.
      const std::optional<Pair> best = DrawListed(x, r, [&](const auto& visit) {
        for (const int64_t c : scratch.above) {
          if (in_min_p(r.Scaled(x[c]))) visit(c);
        }
        for (const SelectItem& item : scratch.items) {
          if (bar > item) break;  // the items are in the order, the bar among them
          if (in_min_p(r.Scaled(x[item.col]))) visit(item.col);
        }
      });
      return best.has_value() ? *best : Draw(x, r, top_col);
    }
    if (!f.HasTopP() && ListMinP(x, cols, r, in_min_p, scratch)) {
      const std::optional<Pair> best = DrawListed(x, r, [&](const auto& visit) {
        for (const int64_t c : scratch.above) visit(c);
      });
      return best.has_value() ? *best : Draw(x, r, top_col);
    }
    // Otherwise the draw is the unfiltered scan over the row with its dropped tokens set to
    // -inf, whose y = -inf never wins while a kept token (finite z: z_max > -inf) remains, and
    // whose bounds skip the noise of tokens that cannot win.
    std::optional<Pair> best;
    if (f.HasMinP()) {
      // Both tests bitwise, not short-circuit: on a flat row each is a coin flip per token
      // (NOTES try 98; top-p alone measured no faster so).
      best = DrawKept(x, cols, r, scratch, [&](int64_t c, Noise z) {
        const uint64_t key = SortKey(z);
        return ((key > bar.key) | ((key == bar.key) & (c <= bar.col))) & in_min_p(z);
      });
    } else {
      best = DrawKept(x, cols, r, scratch,
                      [&](int64_t c, Noise z) { return !(bar > SelectItem{SortKey(z), c}); });
    }
    // The top token is kept by any filter in range (its E is 1, the mass before it 0); with
    // min_p > 1 or p <= 0 (traced values are not checked) nothing would be: the top token.
    return best.has_value() ? *best : Draw(x, r, top_col);
  }

  // The draw over listed columns, `each(visit)` calling visit(column) once per kept token in
  // any order: the largest noisy key, the lowest column on ties, as the top-k path draws its
  // candidates (and as the scan of DrawKept draws: the same keys). The noise's bound first: a
  // token whose bound is below the best key cannot win or tie. Empty where none is visited.
  template <class Each>
  static std::optional<Pair> DrawListed(const Bits* x, const Row& r, Each&& each) {
    std::optional<Pair> best;
    each([&](int64_t c) {
      Key key;
      if (!best.has_value()) {
        best = Draw(x, r, c);
      } else if (NoisyKeyReaches<F>(r, r.Scaled(x[c]), c, best->key, key) &&
                 (key > best->key || (key == best->key && c < best->index))) {
        best = Pair{key, static_cast<int32_t>(c)};
      }
    });
    return best;
  }

  // Columns listed branch-free (a store per token, the count advanced by the test: where the
  // test is a coin flip, a branch on it costs more than the list saves; NOTES try 96), up to
  // `max`; Finish: whether every column added as `in` is listed.
  struct KeptList {
    std::vector<int64_t>& list;
    int64_t max, listed = 0, count = 0;
    KeptList(std::vector<int64_t>& l, int64_t m) : list(l), max(m) {
      list.resize(static_cast<size_t>(m) + 1);  // the last slot: stores past the list
    }
    void Add(int64_t c, bool in) {
      list[static_cast<size_t>(listed)] = c;
      count += in;
      listed = std::min<int64_t>(listed + in, max);
    }
    bool Finish() {
      list.resize(static_cast<size_t>(listed));
      return count <= max;
    }
  };

  // Whether `in(z)` likely holds for at most an eighth of the row, the cap of a KeptList: the
  // row's first sixteenth estimates at most half of that.
  template <class In>
  static bool FewLikely(const Bits* x, int64_t cols, const Row& r, const In& in) {
    const int64_t probe = std::max<int64_t>(cols / 16, 1);
    int64_t n = 0;
    for (int64_t c = 0; c < probe; ++c) n += in(r.Scaled(x[c]));
    return n * cols <= cols / 8 / 2 * probe;
  }

  // min-p alone: the columns it keeps into scratch.above, where few (true; false: the list is
  // not made or not complete).
  template <class Kept>
  static bool ListMinP(const Bits* x, int64_t cols, const Row& r, const Kept& kept,
                       SampleScratch& scratch) {
    if (!FewLikely(x, cols, r, kept)) return false;
    KeptList list(scratch.above, cols / 8);
    for (int64_t c = 0; c < cols; ++c) list.Add(c, kept(r.Scaled(x[c])));
    return list.Finish();
  }

  // The draw over the tokens `kept(column, z)` keeps (called once per column, in column
  // order): the unfiltered scan over the row with its dropped tokens set to -inf, whose
  // y = -inf never wins while a kept token (finite z) remains, and whose bounds skip the noise
  // of tokens that cannot win. Empty where none is kept.
  template <class Kept>
  static std::optional<Pair> DrawKept(const Bits* x, int64_t cols, const Row& r,
                                      SampleScratch& scratch, Kept&& kept) {
    auto& masked = scratch.masked;
    masked.resize((static_cast<size_t>(cols) * sizeof(Bits) + 7) / 8);
    Bits* row = reinterpret_cast<Bits*>(masked.data());
    bool any = false;
    for (int64_t c = 0; c < cols; ++c) {
      const bool keep = kept(c, r.Scaled(x[c]));
      row[c] = keep ? x[c] : kNegInf;
      any |= keep;
    }
    if (!any) return std::nullopt;
    return ScanRowCpu<Policy>(row, cols, r);
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
    const auto add_mass = [&](Noise z, uint64_t w) {
      total += w;
      buckets[SortKey(z) >> kShift] += w;
    };
    const auto add = [&](Noise z, uint64_t n) { add_mass(z, n * FixedMass(z, z_max)); };
    if (sizeof(Bits) == 2 && cols >= kValueCountMinCols) {
      // A token's mass is a function of its logit's bits, and 16-bit logits take at most
      // 2^16 values: count the tokens of each value, then one exp per value present (the
      // same terms, summed in integers: the same sums; NOTES.md try 85).
      auto& counts = scratch.counts;
      counts.assign(size_t{1} << 16, 0u);
      for (int64_t c = 0; c < cols; ++c) ++counts[static_cast<uint16_t>(x[c])];
      for (size_t v = 0; v < counts.size(); ++v) {
        if (counts[v] != 0) add(r.Scaled(static_cast<Bits>(v)), counts[v]);
      }
    } else {
      int64_t c = 0;
#if JAX_ARGREDUCE_CPU_MASS_X86
      if constexpr (std::is_same_v<Noise, float>) {
        // Four masses at once (cpu_mass_x86.h: the same bits; NOTES try 93), a block at a time.
        if (SelectedCpuIsa() >= CpuIsa::kAvx2 && CpuHasMassX4()) {
          constexpr int64_t kBlock = 512;
          Noise z[kBlock];
          float d[kBlock];
          uint64_t mass[kBlock], refine[kBlock];
          for (; c + 4 <= cols; c += kBlock) {
            const int64_t n = std::min<int64_t>(kBlock, (cols - c) & ~int64_t{3});
            for (int64_t j = 0; j < n; ++j) {
              z[j] = r.Scaled(x[c + j]);
              d[j] = MassExponent(z[j], z_max);
            }
            MassOfExponentFastBlock(d, n, mass, refine);
            for (int64_t j = 0; j < n; ++j) {
              add_mass(z[j], refine[j] != 0 ? MassOfExponentRefined(d[j]) : mass[j]);
            }
            if (n < kBlock) {
              c += n;
              break;
            }
          }
        }
      }
#endif
      for (; c < cols; ++c) add(r.Scaled(x[c]), 1);
    }
    // The bucket of the crossing: the first (from the top) whose end reaches p of the total.
    // Tokens of mass 0 are never kept (p < 1: the mass before them is the total), so the
    // crossing lies in a bucket of positive mass, after a prefix whose mass is below p.
    // (p <= 0, traced: the top token's bucket, not an empty one.)
    uint64_t before = 0;
    const int64_t b = CrossingDigit(buckets.data(), static_cast<int64_t>(buckets.size()), p,
                                    total, before);
    // The same pass lists the columns above the bucket (every one of them kept) while they are
    // few: past an eighth of the row, the draw's pass over the row costs less than their noise.
    // The listing (KeptList) runs only where FewLikely: on a flat row its stores cost more than
    // the list saves (NOTES try 96).
    auto& items = scratch.items;
    items.clear();
    const auto is_above = [&](Noise z) { return static_cast<int64_t>(SortKey(z) >> kShift) > b; };
    const bool list = FewLikely(x, cols, r, is_above);
    KeptList above(scratch.above, list ? cols / 8 : 0);
    for (int64_t c = 0; c < cols; ++c) {
      const Noise z = r.Scaled(x[c]);
      const uint64_t key = SortKey(z);
      if (static_cast<int64_t>(key >> kShift) == b && FixedMass(z, z_max) > 0) {
        items.push_back(SelectItem{key, c});
      }
      if (list) above.Add(c, is_above(z));  // the same way for every token of the row: predicted
    }
    scratch.above_listed = above.Finish() && list;
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
