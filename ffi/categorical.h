// The fused Gumbel-max sampler's hooks for the row-reduce core (SPEC §1c), host and device:
// a key policy whose key is the order key of y = logit * (1/T) + G(key, row, column), computed
// in float32 (float64 for float64 logits), and an epilogue that stores the index and the row's
// largest y (the "noisy maximum" a vocab shard contributes to the cross-shard combine).
//
// Bit-identical on CPU and GPU: the logit is widened exactly, 1/T is one correctly rounded
// division per row, and y = fl(fl(logit * inv_t) + G) uses the non-contracting helpers of
// gumbel.h, whose G is itself bit-identical. The key is order.h's argmax key of y, so a NaN
// logit (NaN y) wins as in argmax, -inf logits (y = -inf) never win unless the whole row is
// -inf (then the lowest index), and ties go to the lowest column.
//
// Rows with T == 0 (or T so small that 1/T overflows) are exactly argmax: y = logit, no noise.
// Infinite logits stay infinite whatever T is. The noise never depends on launch
// geometry: the counter is (global row among its key's rows, global column).
//
// Skipping: G(bits) <= GumbelUpperBound(bits) (no log), and fl(a + G) <= fl(a + bound) by the
// monotonicity of rounding, so an element whose bound key does not beat the running best
// (which has a lower column: it wins ties) cannot win; its logs are not computed. Float32 noise
// is bounded by its high half alone (gumbel.h), so such an element's low half (the second
// stream's generator call) is not computed either (Visit, and the GPU's block kernel; the
// split and team kernels prepare both halves up front: Prepare's kAll). On the GPU's
// vector scan (VisitPrepared) the bound is also held against the best of the warp's lanes
// that scan the same row (the whole warp, or a team of 2-16 of them): an element whose bound
// key is strictly below another lane's best (any column) cannot win or tie either. On the team
// paths a vector's own elements also give a threshold with no log: G >= its lower bound
// (gumbel.h), so an element strictly below another element's lower-bound sum cannot win.
#ifndef JAX_ARGREDUCE_FFI_CATEGORICAL_H_
#define JAX_ARGREDUCE_FFI_CATEGORICAL_H_

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "gumbel.h"
#include "order.h"

// The CPU handler's row loop (cpu_reduce.h) calls Visit once per 8 columns: inlined, or a call
// per run, which measured slower (g++ stopped inlining it when the run test below made it
// longer).
#if !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#define JAX_ARGREDUCE_HOST_INLINE __attribute__((always_inline))
#else
#define JAX_ARGREDUCE_HOST_INLINE
#endif

namespace jax_argreduce {
namespace categorical_detail {

// The logit widened exactly to the noise's type.
template <Format F>
JAX_ARGREDUCE_HD auto Widen(typename FormatTraits<F>::Bits bits) {
  using gumbel_detail::AsDouble;
  using gumbel_detail::AsFloat;
  if constexpr (F == Format::kF64) {
    return AsDouble(bits);
  } else if constexpr (F == Format::kF32) {
    return AsFloat(bits);
  } else if constexpr (F == Format::kBF16) {
    return AsFloat(static_cast<uint32_t>(bits) << 16);
  } else {  // float16: rebias the exponent; subnormals are exact multiples of 2^-24
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1Fu;
    const uint32_t mantissa = bits & 0x3FFu;
    if (exponent == 0x1Fu) return AsFloat(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN
    if (exponent != 0) return AsFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    const float magnitude =
        gumbel_detail::Mul(static_cast<float>(mantissa), 0x1p-24f);  // exact
    return AsFloat(sign | gumbel_detail::AsBits(magnitude));
  }
}

JAX_ARGREDUCE_HD float Reciprocal(float t) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(1.0f, t);
#else
  return 1.0f / t;
#endif
}
JAX_ARGREDUCE_HD double Reciprocal(double t) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(1.0, t);
#else
  return 1.0 / t;
#endif
}

// v[0] := op over v[0 .. kN), as a tree: independent steps, not one long chain.
template <int kN, class T, class Op>
JAX_ARGREDUCE_HD T TreeReduce(T (&v)[kN], Op op) {
#pragma unroll
  for (int w = 1; w < kN; w *= 2) {
#pragma unroll
    for (int j = 0; j + w < kN; j += 2 * w) v[j] = op(v[j], v[j + w]);
  }
  return v[0];
}

JAX_ARGREDUCE_HD bool IsInf(float x) {
  return (gumbel_detail::AsBits(x) & 0x7FFFFFFFu) == 0x7F800000u;
}
JAX_ARGREDUCE_HD bool IsInf(double x) {
  return (gumbel_detail::AsBits(x) & 0x7FFFFFFFFFFFFFFFull) == 0x7FF0000000000000ull;
}

}  // namespace categorical_detail

template <Format F>
struct GumbelKeyPolicy {
  static constexpr Format kFormat = F;
  static constexpr bool kBitsOnly = false;  // the key depends on the column
  static constexpr bool kIsMinOrder = false;
  using Bits = typename FormatTraits<F>::Bits;
  // CUDA: vectors of 8 elements with float32 noise (float32: 32-byte vectors, so a vector holds
  // one block of each stream; float64: 2 elements), prepared and visited as one chunk (16
  // elements: 2 blocks of the high stream, 4 with the low one; float16: 8, its widening is
  // longer and 16 spilled; float64: 8), and a register cap of 128 per thread (2 resident
  // 256-thread blocks per SM; a cap of 80 spilled and measured no faster, NOTES.md try 24;
  // 384-thread blocks in 80 registers, no faster either, try 36); compute-bound for the
  // planner (row_reduce.cuh, PolicyTraits); the float32 keys' skip threshold shared by the
  // block (VisitState::block_best).
  static constexpr int kVecBytes = F == Format::kF32 ? 32 : 16;
  static constexpr int kPrepareChunk = F == Format::kF16 ? 1 : F == Format::kF64 ? 4 : 2;
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr bool kComputeBound = true;
  static constexpr Format kNoiseFormat = F == Format::kF64 ? Format::kF64 : Format::kF32;
  using Noise = std::conditional_t<F == Format::kF64, double, float>;
  using Key = typename FormatTraits<kNoiseFormat>::Key;
  static constexpr bool kSharesBlockBest = sizeof(Key) == 4;

  const uint32_t* keys;       // [num_keys, 2]: key k covers rows [k, k+1) * rows_per_key
  int64_t rows_per_key;       // rows / num_keys
  const Noise* temperature;   // [1] or [rows]
  bool temperature_per_row;
  // [2]: (row offset, column offset) of this call's block in the global logits (shards): a
  // row's counter is row offset + its position among its key's rows; a column's counter is
  // column offset + column. nullptr: both zero (an unsharded call).
  const int32_t* offsets;

  struct Row {
    uint32_t k0, k1;
    uint64_t counter_row;  // the row's position among its key's rows
    Noise inv_t;
    bool greedy;           // T == 0: plain argmax of the logits
    bool inv_t_positive;   // 1/T > 0 (not NaN): logit * (1/T) keeps ±inf by itself
    uint32_t col_offset;

    JAX_ARGREDUCE_HD static Key KeyOf(Noise y) {
      return OrderedKey<kNoiseFormat, false>(gumbel_detail::AsBits(y));
    }

    // Columns per Philox call (float32 noise: per call of each stream).
    static constexpr uint32_t kPerBlock = F == Format::kF64 ? 2 : 8;

    // The logit times 1/T; ±inf logits stay ±inf whatever 1/T is (T = inf would make them NaN).
    JAX_ARGREDUCE_HD Noise Scaled(Bits element) const {
      const Noise logit = categorical_detail::Widen<F>(element);
      return categorical_detail::IsInf(logit) ? logit : gumbel_detail::Mul(logit, inv_t);
    }
    // Scaled where inv_t_positive: the same value without the infinity test (inf * (1/T) is
    // inf for 1/T > 0, subnormal 1/T included: no flush to zero on this path).
    JAX_ARGREDUCE_HD Noise ScaledPositive(Bits element) const {
      return gumbel_detail::Mul(categorical_detail::Widen<F>(element), inv_t);
    }
    // G of 32 (float64: 64) noise bits, and its log-free upper bound.
    template <class NoiseBits>
    JAX_ARGREDUCE_HD static Noise Gumbel(NoiseBits bits) {
      if constexpr (F == Format::kF64) {
        return GumbelFromBitsF64(bits);
      } else {
        return GumbelFromBitsF32(bits);
      }
    }
    // What a scan holds of a column's noise before deciding whether it can win: float32
    // noise, the 16-bit high half; float64 noise, all 64 bits.
    using Prefix = std::conditional_t<F == Format::kF64, uint64_t, uint32_t>;
    // A log-free upper bound of G over every noise value with that prefix.
    JAX_ARGREDUCE_HD static Noise PrefixBound(Prefix prefix) {
      if constexpr (F == Format::kF64) {
        return GumbelUpperBoundF64(prefix);
      } else {
        return GumbelUpperBoundHighF32(prefix);
      }
    }
    // The full noise bits of column `col` (this call's) from its prefix: float32 noise
    // generates the low stream's block here.
    JAX_ARGREDUCE_HD auto FullBits(Prefix prefix, int32_t col) const {
      if constexpr (F == Format::kF64) {
        return prefix;
      } else {
        const uint32_t c = col_offset + static_cast<uint32_t>(col);
        return GumbelJoinF32(prefix, GumbelHalf(GumbelBitsLowF32(k0, k1, counter_row, c >> 3),
                                                c & 7u));
      }
    }
    // The key of y = a + G, taken if strictly better (the caller visits columns in order).
    template <class NoiseBits>
    JAX_ARGREDUCE_HD static void Take(Noise a, NoiseBits bits, int32_t col, Key& best,
                                      int32_t& best_index) {
      const Key key = KeyOf(gumbel_detail::Add(a, Gumbel(bits)));
      if (key > best) {
        best = key;
        best_index = col;
      }
    }

    // One element: logit bits and its noise prefix, column `col`.
    JAX_ARGREDUCE_HD void VisitOne(Bits element, Prefix prefix, int32_t col, Key& best,
                                   int32_t& best_index) const {
      const Noise a = Scaled(element);
      if (KeyOf(gumbel_detail::Add(a, PrefixBound(prefix))) <= best) return;
      Take(a, FullBits(prefix, col), col, best, best_index);
    }

    // Visits kN consecutive elements from column `first` in increasing column order, keeping
    // the running best (strict '>': the lowest column keeps a tie).
    template <int kN>
    JAX_ARGREDUCE_HD JAX_ARGREDUCE_HOST_INLINE void Visit(const Bits* elements, int32_t first,
                                                          Key& best, int32_t& best_index) const {
      using namespace gumbel_detail;
      if (greedy) {
        for (int j = 0; j < kN; ++j) {
          const Key key = KeyOf(categorical_detail::Widen<F>(elements[j]));
          if (key > best) {
            best = key;
            best_index = first + j;
          }
        }
        return;
      }
      // The block of the column (float64: the pair's; float32: the high stream's), and for
      // float32 the low stream's, generated once per block where needed.
      uint32_t block_index = 0xFFFFFFFFu, low_index = 0xFFFFFFFFu;
      Philox4x32Block block{}, low{};
#if !defined(__CUDA_ARCH__)
      // The CPU's runs of 8 columns on one block of float32 noise: first the run as a whole,
      // its largest logit scaled (1/T > 0: monotone) plus the noise's maximum, then plus the
      // bound of its largest high half; if that cannot beat the best, neither can any of its
      // elements (most runs of a long row, once the best is good: NOTES.md try 53; with the
      // maximum, before the generator's call: try 55). A NaN logit never skips.
      if constexpr (kN == 8 && F != Format::kF64) {
        const uint32_t col0 = col_offset + static_cast<uint32_t>(first);
        if (inv_t_positive && col0 % kPerBlock == 0) {
          float logit_max = categorical_detail::Widen<F>(elements[0]);
          bool nan = logit_max != logit_max;
          for (int j = 1; j < kN; ++j) {
            const float logit = categorical_detail::Widen<F>(elements[j]);
            nan |= logit != logit;
            logit_max = logit > logit_max ? logit : logit_max;
          }
          const float scaled_max = Mul(logit_max, inv_t);
          // Not even the largest noise of all (kGumbelMaxF32) lifts the run to the best: done
          // without its generator call (peaked rows, far below their head).
          if (!nan && KeyOf(Add(scaled_max, kGumbelMaxF32)) <= best) return;
          block_index = col0 / kPerBlock;
          block = GumbelBitsHighF32(k0, k1, counter_row, block_index);
          uint32_t high_max = 0;
          for (uint32_t i = 0; i < kPerBlock; ++i) {
            high_max = std::max(high_max, GumbelHalf(block, i));
          }
          if (!nan && KeyOf(Add(scaled_max, GumbelUpperBoundHighF32(high_max))) <= best) return;
        }
      }
#endif
      // Unrolled, so a GPU thread's vector (kN = 8) stays in registers: with the tighter bound
      // of gumbel.h the compiler no longer unrolled it by itself and the vector went to local
      // memory. Float16's was rolled before, and unrolled it took more registers in every
      // sampler kernel (a resident block less per SM): it stays rolled.
#pragma unroll(F == Format::kF16 ? 1 : kN)
      for (int j = 0; j < kN; ++j) {
        const uint32_t col = col_offset + static_cast<uint32_t>(first + j);
        if (col / kPerBlock != block_index) {
          block_index = col / kPerBlock;
          block = F == Format::kF64 ? GumbelBitsPairF64(k0, k1, counter_row, block_index)
                                    : GumbelBitsHighF32(k0, k1, counter_row, block_index);
        }
        const uint32_t i = col % kPerBlock;
        const Noise a = Scaled(elements[j]);
        if constexpr (F == Format::kF64) {
          const uint64_t bits = GumbelBitsF64(block, i);
          if (KeyOf(Add(a, GumbelUpperBoundF64(bits))) <= best) continue;
          Take(a, bits, first + j, best, best_index);
        } else {
          const uint32_t high = GumbelHalf(block, i);
          if (KeyOf(Add(a, GumbelUpperBoundHighF32(high))) <= best) continue;
          if (low_index != block_index) {
            low_index = block_index;
            low = GumbelBitsLowF32(k0, k1, counter_row, block_index);
          }
          Take(a, GumbelJoinF32(high, GumbelHalf(low, i)), first + j, best, best_index);
        }
      }
    }

    // The vector scan's fast path (row_reduce.cuh), same results as Visit: when the row's
    // vectors start on Philox block boundaries (uniform over a row: a vector holds whole
    // blocks), the noise of a chunk of kCount vectors (kVec elements each, `stride` columns
    // apart: one thread's loads of one round) is generated first (independent Philox chains the
    // GPU overlaps) and then the chunk is visited at once, with static word indices.
    JAX_ARGREDUCE_HD bool CanPrepare(int32_t first) const {
      return !greedy && inv_t_positive &&
             (col_offset + static_cast<uint32_t>(first)) % kPerBlock == 0;
    }
    // A chunk's prepared noise prefixes as 32-bit words: float64 noise, the Philox blocks
    // (two words per element); float32 noise, the high stream's blocks (two elements' high
    // halves per word: element j in bits 16 * (j % 2) of word j / 2).
    JAX_ARGREDUCE_HD static constexpr int WordsOf(int elements) {
      return F == Format::kF64 ? 2 * elements : elements / 2;
    }
    // kAll: everything a visit may need, i.e. for float32 noise the low stream's blocks too,
    // prepared with the high ones (two independent chains) instead of one call per candidate
    // later: for scans whose threads mostly hold one or two vectors of a row (the split and
    // team paths), where the warm start and the candidates' generator calls would sit on the
    // critical path.
    template <int kVec, int kCount, bool kAll = false>
    struct Prepared {
      static_assert(kVec % kPerBlock == 0, "a vector holds whole Philox blocks");
      static constexpr bool kHasLow = kAll && F != Format::kF64;
      uint32_t word[WordsOf(kVec * kCount)];
      uint32_t low[kHasLow ? WordsOf(kVec * kCount) : 1];
    };
    template <int kVec, int kCount, bool kAll = false>
    JAX_ARGREDUCE_HD Prepared<kVec, kCount, kAll> Prepare(int32_t first, int32_t stride) const {
      Prepared<kVec, kCount, kAll> p;  // CanPrepare(first); stride is a multiple of kVec
      for (int u = 0; u < kCount; ++u) {
        const uint32_t block0 = (col_offset + static_cast<uint32_t>(first) +
                                 static_cast<uint32_t>(u) * static_cast<uint32_t>(stride)) /
                                kPerBlock;
        for (int b = 0; b < kVec / static_cast<int>(kPerBlock); ++b) {
          const Philox4x32Block block =
              F == Format::kF64 ? GumbelBitsPairF64(k0, k1, counter_row, block0 + b)
                                : GumbelBitsHighF32(k0, k1, counter_row, block0 + b);
          const int at = WordsOf(u * kVec + b * static_cast<int>(kPerBlock));
          for (int w = 0; w < 4; ++w) p.word[at + w] = block.v[w];
          if constexpr (Prepared<kVec, kCount, kAll>::kHasLow) {
            const Philox4x32Block low = GumbelBitsLowF32(k0, k1, counter_row, block0 + b);
            for (int w = 0; w < 4; ++w) p.low[at + w] = low.v[w];
          }
        }
      }
      return p;
    }
    // Vector u of a chunk's prepared work.
    template <int kVec, int kCount, bool kAll>
    JAX_ARGREDUCE_HD static Prepared<kVec, 1, kAll> Vector(const Prepared<kVec, kCount, kAll>& p,
                                                           int u) {
      Prepared<kVec, 1, kAll> one;
      for (int w = 0; w < WordsOf(kVec); ++w) {
        one.word[w] = p.word[u * WordsOf(kVec) + w];
        if constexpr (Prepared<kVec, 1, kAll>::kHasLow) one.low[w] = p.low[u * WordsOf(kVec) + w];
      }
      return one;
    }
    // The prefix of element j of a chunk.
    template <class P>
    JAX_ARGREDUCE_HD static Prefix NoiseBitsAt(const P& p, int j) {
      if constexpr (F == Format::kF64) {
        return static_cast<uint64_t>(p.word[2 * j + 1]) << 32 | p.word[2 * j];
      } else {
        return GumbelHalfOfWord(p.word[j / 2], static_cast<uint32_t>(j));
      }
    }
    // The prepared low half of element j (0 where none was prepared).
    template <class P>
    JAX_ARGREDUCE_HD static uint32_t LowAt(const P& p, int j) {
      if constexpr (P::kHasLow) {
        return GumbelHalfOfWord(p.low[j / 2], static_cast<uint32_t>(j));
      } else {
        return 0;
      }
    }
    // The full noise bits of a chunk's element at column `col` from its prefix and prepared
    // low half, or generated now.
    template <class P>
    JAX_ARGREDUCE_HD auto FullBitsOf(const P&, Prefix prefix, uint32_t low, int32_t col) const {
      if constexpr (P::kHasLow) {
        return GumbelJoinF32(prefix, low);
      } else {
        (void)low;
        return FullBits(prefix, col);
      }
    }

    // What one thread's scan of a row carries from one VisitPrepared to the next: the skip
    // threshold (float32 keys), recomputed only after a visit in which some lane of the warp
    // had candidates (only then can a lane's best, or the warp's, have changed). Whatever its
    // age, t is the float of max(an earlier best of this lane + 1, an earlier warp best): each
    // is a key some element of the row reached (this lane's at a lower column, which wins a
    // tie), so skipping the sums strictly below t never skips the winner.
    // block_best (the block and split kernels, whose blocks scan one row or one part of it):
    // a shared word every warp of the block raises to its best key with an atomic max when it
    // recomputes t, reading the word back in the same atomic; it too is a key some element of
    // the row reached, so as valid as the warp's best, and higher (the best of 8 warps'
    // samples; row_reduce.cuh, kSharesBlockBest).
    struct VisitState {
      float t = 0.0f;     // an element is a candidate unless fl(a + bound) < t
      bool open = true;   // false: this lane's best is NaN (nothing beats it)
      bool stale = true;  // t must be recomputed before use
      Key* block_best = nullptr;  // shared memory, or none
    };

    // Visits the first `count` (1..kCount) vectors of a chunk: elements[u * kVec + i] is at
    // column first + u * stride + i (increasing with the element's position, as Visit needs).
    // Elements of the vectors past `count` must be readable (the caller zeroes them); they are
    // never taken. row_lanes: the lanes of the calling warp that scan this row (all 32 where
    // the caller's threads per row are a multiple of 32, else the caller's aligned team of
    // 2-16; 0 for one lane per row, which shares nothing), so the best key over those of them
    // in this call is a valid skip threshold for each; the lanes of other teams in the warp
    // run the same collectives with their own team's mask, as cooperative groups' tiles do.
    // kLongScan: the caller visits chunks of long rows (the block kernel), where most chunks
    // fail the chunk-wide test below; float16 takes that test only there
    // (the split kernel's vector-by-vector visits go without it, also at 64 rows, where a
    // thread holds ~25 vectors and the test measured faster: not chosen by vectors per thread
    // yet).
    template <int kVec, int kCount, bool kLongScan = true, class P>
    JAX_ARGREDUCE_HD void VisitPrepared(const Bits* elements, int32_t first, int32_t stride,
                                        int count, const P& p, Key& best,
                                        int32_t& best_index, unsigned row_lanes,
                                        VisitState& state) const {
      constexpr int kN = kVec * kCount;
      static_assert(kN <= 32, "one candidate bit per element");
      auto column = [&](int j) {  // wraps harmlessly (unsigned) for vectors past the row's end
        return static_cast<int32_t>(static_cast<uint32_t>(first) +
                                    static_cast<uint32_t>(j / kVec) *
                                        static_cast<uint32_t>(stride) +
                                    static_cast<uint32_t>(j % kVec));
      };
#if defined(__CUDA_ARCH__)
      // Two passes, so a warp pays for the logs of its lanes' candidates, not of every column
      // where some lane has one (a divergent branch per element ran the logs for nearly every
      // element, since some lane of 32 nearly always has a candidate; NOTES.md try 28).
      // Pass 1: every element's scaled logit and its log-free bound; a candidate unless the
      // bound key is <= this lane's best (lower columns: it wins ties) or < the warp's best
      // (any column: a strictly larger key). Pass 2: rounds of one candidate per lane (its
      // lowest column first, so the strict '>' keeps ties at the lowest column) until no lane
      // has one left. Warm start: where no lane of the row's lanes has a best yet (its first
      // vector of the row: every element would be a candidate), each lane first takes its
      // chunk's first element exactly, so their best bounds the rest. "The warp's best" below
      // is the best over `lanes`, this call's lanes of the row (a team of 2-16 lanes: its own;
      // NOTES.md try 51).
      using namespace gumbel_detail;
      const unsigned mask = __activemask();
      const unsigned lanes = mask & row_lanes;
      uint32_t done = 0;
      uint32_t candidates = 0;
      if constexpr (sizeof(Key) == 4) {
        // A vote, so every lane of `mask` takes the branch together and the warp collectives
        // inside see all of them even if lanes of a call arrive in more than one group;
        // warp-wide also where the warp's teams scan several rows (recomputing t is valid at
        // any time, so a lane or team whose t is fresh may join). row_lanes == 0 (one lane
        // per row): no warm start, this lane's own best only (the warm start measured slower
        // there).
        if (row_lanes != 0 ? __any_sync(mask, state.stale) : state.stale) {
          Key warp_best = best;
#if __CUDA_ARCH__ >= 800
          if (row_lanes != 0) {
            // Uniform within `lanes`: their reduce gives each the same value.
            warp_best = __reduce_max_sync(lanes, best);
            if (warp_best == KeyLimits<Key>::kLowest) {
              Take(Scaled(elements[0]), FullBitsOf(p, NoiseBitsAt(p, 0), LowAt(p, 0), first),
                   first, best, best_index);
              done = 1;
              warp_best = __reduce_max_sync(lanes, best);
            }
            if (state.block_best != nullptr) {  // warp_best := max(it, the block's best)
              const int leader = __ffs(lanes) - 1;
              Key block = KeyLimits<Key>::kLowest;
              if (static_cast<int>(threadIdx.x % 32) == leader) {
                block = atomicMax(state.block_best, warp_best);
              }
              block = __shfl_sync(lanes, block, leader);
              warp_best = block > warp_best ? block : warp_best;
            }
          }
#endif
          // The same test in float: with need = max(best + 1, warp_best) (warp_best >= best),
          // "bound key >= need" is "!(fl(a + bound) < t)" for t the float whose key is need:
          // order.h's key is monotone in the float order and gives +0 and -0 one key, and a
          // NaN sum (NaN key) passes "!(y < t)" as it must. Nothing beats a best of NaN (ties
          // keep the lower column): no candidates.
          state.open = best != KeyLimits<Key>::kNaN;
          Key need = !state.open ? best : best < warp_best ? warp_best : best + 1;
          // Beyond +-inf's key the float would be a NaN pattern (every element passing): +inf
          // keeps NaN and +inf sums (only NaN can reach such a need), -inf keeps every sum.
          constexpr Key kInfKey = 0x7F800000;
          need = need > kInfKey ? kInfKey : need < -kInfKey ? -kInfKey : need;
          state.t = AsFloat(need >= 0 ? static_cast<uint32_t>(need)
                                      : 0x80000000u | static_cast<uint32_t>(-need));
          state.stale = false;
        }
        float t = state.t;
        // First for the whole chunk: its largest logit (NaN-propagating) scaled, plus the
        // bound of its largest noise bits. Scaling by 1/T > 0, the bound (non-decreasing in
        // the bits) and rounded addition are monotone, so no element's sum exceeds this one;
        // below t, no element is a candidate (the common case once a row has a good best).
        bool some = state.open;
        // 16-bit logits: the max of the pairs as they are (max.NaN.bf16x2 / .f16x2, no .ftz:
        // two per instruction; widening is exact and monotone), then two widenings (NOTES.md
        // try 46). Float16 takes the test only in long scans (short ones measured slower with
        // it) and only with those instructions (its widening of a chunk's elements spilled).
#if __CUDA_ARCH__ >= 800
        constexpr bool kPairMax = F == Format::kBF16 || (F == Format::kF16 && kLongScan);
#else
        constexpr bool kPairMax = false;
#endif
        if constexpr (F != Format::kF16 || kPairMax) {
          using categorical_detail::TreeReduce;
          using categorical_detail::Widen;
          float logit_max;
          if constexpr (kPairMax) {
#if __CUDA_ARCH__ >= 800
            uint32_t pairs[kN / 2];
#pragma unroll
            for (int w = 0; w < kN / 2; ++w) {
              pairs[w] = reinterpret_cast<const uint32_t*>(elements)[w];
            }
            const uint32_t m =
                TreeReduce(pairs, [](uint32_t a, uint32_t b) { return NaNMinMax16x2<F>(a, b); });
            logit_max = MaxNaNF32(Widen<F>(static_cast<Bits>(m & 0xFFFFu)),
                                  Widen<F>(static_cast<Bits>(m >> 16)));
#endif
          } else {
            float logits[kN];
#pragma unroll
            for (int j = 0; j < kN; ++j) logits[j] = Widen<F>(elements[j]);
            logit_max = TreeReduce(logits, [](float a, float b) { return MaxNaNF32(a, b); });
          }
          uint32_t highs[kN / 2];  // two high halves per word: max.u16x2 on both at once
#pragma unroll
          for (int w = 0; w < kN / 2; ++w) highs[w] = p.word[w];
          const uint32_t high_max =
              TreeReduce(highs, [](uint32_t a, uint32_t b) { return __vmaxu2(a, b); });
          const uint32_t high = max(high_max & 0xFFFFu, high_max >> 16);
          some = state.open && !(Add(Mul(logit_max, inv_t), GumbelUpperBoundHighF32(high)) < t);
        }
        if (some) {
          // The team path's vector visits: a threshold from the vector's own elements with no
          // log. fl(a + GumbelLowerBoundHighF32(high)) <= that element's y, so an element whose
          // bound sum is strictly below the largest of them loses to that element, whatever
          // the columns. Measured faster on every vector with one lane per row (row_lanes ==
          // 0: no warm start) and on the first one of a team of 2-16 (just warm-started: done;
          // on its later ones it measured slower); not where all 32 lanes scan a row (the
          // split path, slower there; teams of 32; the block kernel visits chunks, kCount > 1;
          // NOTES.md try 54). Float16: not tried.
          if (kCount == 1 && F != Format::kF16 &&
              (row_lanes == 0 || (row_lanes != 0xFFFFFFFFu && done != 0))) {
            float lower = t;
#pragma unroll
            for (int j = 0; j < kN; ++j) {
              lower = fmaxf(lower, Add(ScaledPositive(elements[j]),
                                       GumbelLowerBoundHighF32(NoiseBitsAt(p, j))));
            }
            t = lower;  // fmaxf drops a NaN sum; such an element still passes "!(y < t)"
          }
#pragma unroll
          for (int j = 0; j < kN; ++j) {
            const float y = Add(ScaledPositive(elements[j]), PrefixBound(NoiseBitsAt(p, j)));
            if (!(y < t)) candidates |= 1u << j;
          }
        }
      } else {  // 64-bit keys: against this lane's best (no warp collective on 64 bits)
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          const Key bound =
              KeyOf(Add(ScaledPositive(elements[j]), PrefixBound(NoiseBitsAt(p, j))));
          if (bound > best) candidates |= 1u << j;
        }
      }
      if (count < kCount) candidates &= (1u << (count * kVec)) - 1u;
      candidates &= ~done;
      if (!__any_sync(mask, candidates != 0)) return;  // the common case: t stays valid
      state.stale = true;
      do {
        // This lane's candidate of the round, if any (this form is the measured and tested
        // build's: NOTES.md try 52).
        int j = -1;
        if (candidates != 0) {
          j = __ffs(candidates) - 1;
          candidates &= candidates - 1;
        }
        if (j >= 0) {
          Bits element = elements[0];
          auto bits = NoiseBitsAt(p, 0);
          uint32_t low = LowAt(p, 0);
          int32_t col = first;
#pragma unroll
          for (int k = 1; k < kN; ++k) {  // register selects, no dynamic indexing
            if (k == j) {
              element = elements[k];
              bits = NoiseBitsAt(p, k);
              low = LowAt(p, k);
              col = column(k);
            }
          }
          Take(ScaledPositive(element), FullBitsOf(p, bits, low, col), col, best, best_index);
        }
      } while (__any_sync(mask, candidates != 0));
#else
      (void)row_lanes;
      (void)state;
      for (int j = 0; j < count * kVec; ++j) {
        VisitOne(elements[j], NoiseBitsAt(p, j), column(j), best, best_index);
      }
#endif
    }

    JAX_ARGREDUCE_HD Key operator()(Bits bits, int32_t col) const {
      Key best = KeyLimits<Key>::kLowest;
      int32_t index = 0;
      Visit<1>(&bits, col, best, index);
      return best;
    }
  };

  // What a row's temperature `t` sets of its Row (inv_t, greedy, inv_t_positive): all that
  // Scaled reads, so ranking tokens by z needs no key (the split vocabulary's candidates,
  // cpu_sample.h and sample_topk.cuh: Scaling(t)); ForRow fills in the rest.
  JAX_ARGREDUCE_HD static void SetTemperature(Noise t, Row& r) {
    r.inv_t = t == Noise(0) ? Noise(0) : categorical_detail::Reciprocal(t);
    // T == 0, or so small that 1/T overflows: the T -> 0 limit, plain argmax.
    r.greedy = t == Noise(0) || categorical_detail::IsInf(r.inv_t);
    r.inv_t_positive = r.inv_t > Noise(0);
  }
  JAX_ARGREDUCE_HD static Row Scaling(Noise t) {
    Row r;
    SetTemperature(t, r);
    return r;
  }

  JAX_ARGREDUCE_HD Row ForRow(int64_t row) const {
    const int64_t k = row / rows_per_key;
    const Noise t = temperature[temperature_per_row ? row : 0];
    Row r;
    r.k0 = keys[2 * k];
    r.k1 = keys[2 * k + 1];
    r.counter_row = static_cast<uint64_t>(offsets != nullptr ? offsets[0] : 0) +
                    static_cast<uint64_t>(row - k * rows_per_key);
    SetTemperature(t, r);
    r.col_offset = static_cast<uint32_t>(offsets != nullptr ? offsets[1] : 0);
    return r;
  }
};

// Stores the index and the row's largest y (the noisy maximum), decoded from its key: a NaN
// key gives a quiet NaN, -0 comes back as +0 (they tie anyway).
struct NoisyMaxEpilogue {
  void* indices;  // [rows] int32 or int64
  bool index_is_int64;
  void* values;   // [rows] float32 (float64 for float64 logits)

  template <class Bits, class Key>
  JAX_ARGREDUCE_HD void operator()(int64_t row, ArgPair<Key> best, const Bits* /*row_data*/) const {
    StoreIndex(indices, index_is_int64, row, best.index);
    if constexpr (sizeof(Key) == 8) {
      const uint64_t bits = best.key == KeyLimits<int64_t>::kNaN ? 0x7FF8000000000000ull
                            : best.key >= 0 ? static_cast<uint64_t>(best.key)
                                            : (0x8000000000000000ull |
                                               static_cast<uint64_t>(-best.key));
      static_cast<uint64_t*>(values)[row] = bits;
    } else {
      const uint32_t bits = best.key == KeyLimits<int32_t>::kNaN ? 0x7FC00000u
                            : best.key >= 0 ? static_cast<uint32_t>(best.key)
                                            : (0x80000000u | static_cast<uint32_t>(-best.key));
      static_cast<uint32_t*>(values)[row] = bits;
    }
  }
};

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_CATEGORICAL_H_
