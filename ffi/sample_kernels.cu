// The filtered sampler on CUDA (SPEC §1f): for every row, exactly the (index, noisy key) of
// FilteredSamplerCpu<F>::SampleRow (cpu_sample.h), the reference semantics; the rules are
// sample_filter.h's, on the same host+device arithmetic (exact_math.h, categorical.h).
//
// One block per row (blocks loop over rows), every pass inside the block, no workspace: a
// row's tokens are read again for each pass (from L2 for rows of a few hundred thousand
// tokens). A row that is filtered:
//   (a) the top z: a block reduce of (z's order key, column) pairs (order.h: NaN first, larger
//       first, the lowest column among ties) gives z_max; a NaN or -inf top is drawn alone;
//   (b) top-k: the k-th token of the z order as a (radix key, column) bar. A radix descent over
//       z's radix key, kDigitBits per level from the top, counts each level's digits in shared
//       memory and picks the digit holding the needed-th token (a block scan of the counts from
//       the top digit down); at the full key, the needed-th tied token in column order is found
//       by a block scan of per-thread counts over contiguous column chunks;
//   (c) top-p: the total mass S of the top-k set (integer masses, exact in any order), then the
//       same descent with per-digit mass sums (MassBins: exact integer sums) down to the full key of
//       the last kept token: the digit where MassBelow(before, p, S) turns false within it.
//       Ties of that key have equal masses, so how many of them are kept follows from their
//       count alone (the exact predicate, by bisection), and their last column from a scan as
//       in (b). That bar is within the top-k set, so it is the kept prefix's end;
//   (d) min-p: a per-token predicate, RelativeMass(z, z_max) >= min_p (E is non-increasing in
//       the z order, so this is cpu_sample.h's prefix);
//   (e) the draw: the best NoisyKey over the kept tokens (CombinePairs: ties to the lowest
//       column); none kept (traced p <= 0 or min_p > 1) draws the top token alone.
// A T == 0 row is the argmax of its logits, a row without an active filter categorical's plain
// draw, both as cpu_sample.h computes them.
//
// A vocabulary split over devices without a top-k runs two more kernels per shard, one block
// per row (the end of this file): top-p's levels and the draw, on exchanged integer masses.
//
// Every reduction is a total order or an integer sum, so the result does not depend on the
// block size or on the order the threads visit the tokens. No programmatic dependent launch:
// the kernel reads its inputs from its first instruction on.
#include "sample_kernels.h"

#include <algorithm>
#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "categorical.h"
#include "device.cuh"
#include "exact_math.h"
#include "launch_plan.h"
#include "row_param.h"
#include "sample_filter.h"

namespace jax_argreduce {
namespace {

constexpr int kThreads = 512;
constexpr int kDigitBits = 11;
constexpr int kBins = 1 << kDigitBits;
constexpr int kBinsPerThread = kBins / kThreads;
static_assert(kBins % kThreads == 0, "each thread scans whole bins");

// The last kept token of a prefix of the z order: tokens (key, col) after it are dropped.
// {0, cols}: no token is after it (every radix key is above 0, order.h).
struct Bar {
  uint64_t key;
  int64_t col;
};
__device__ __forceinline__ bool After(const Bar& bar, uint64_t key, int64_t col) {
  return bar.key > key || (bar.key == key && bar.col < col);
}

__device__ __forceinline__ int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }

// Whether `key` agrees with `prefix` on its bits from `low` up (all keys do when low >= 64).
__device__ __forceinline__ bool SameHigh(uint64_t key, uint64_t prefix, int low) {
  return low >= 64 || ((key ^ prefix) >> low) == 0;
}

// Exact 64-bit sums of masses per digit in shared memory with 32-bit atomics: sm_90 has no
// 64-bit shared atomic add (atomicAdd on unsigned long long compiles to a compare-and-swap
// loop, which the few digits holding most tokens of a level turn into long retries, NOTES try
// 82). A mass is at most 2^32: its low word is added to lo[d], and a carry out of it (the
// returned old value shows it) or a mass of 2^32 itself (the top's ties) adds 1 to hi[d]. Sums
// of at most 2^31 masses keep hi below 2^31.
struct MassBins {
  uint32_t* lo;
  uint32_t* hi;

  __device__ explicit MassBins(uint32_t (&words)[2][kBins]) : lo(words[0]), hi(words[1]) {}
  __device__ void Add(uint32_t digit, uint64_t mass) const {
    const uint32_t low = static_cast<uint32_t>(mass);
    uint32_t carry = static_cast<uint32_t>(mass >> 32);
    if (low != 0 && atomicAdd(&lo[digit], low) > ~low) ++carry;  // old + low wrapped
    if (carry != 0) atomicAdd(&hi[digit], carry);
  }
  __device__ unsigned long long Sum(int digit) const {
    return (static_cast<unsigned long long>(hi[digit]) << 32) | lo[digit];
  }
};

struct Params {
  const uint32_t* keys;
  int64_t num_keys;
  const void* logits;
  int64_t rows;
  int64_t cols;
  const void* temperature;
  bool temperature_per_row;
  RowParam<int32_t> top_k;
  RowParam<float> top_p;
  RowParam<float> min_p;
  const int32_t* offsets;
  NoisyMaxEpilogue epilogue;
};

template <Format F>
struct RowSampler {
  using Policy = GumbelKeyPolicy<F>;
  using Row = typename Policy::Row;
  using Bits = typename Policy::Bits;
  using Noise = typename Policy::Noise;
  using Key = typename Policy::Key;
  using Pair = ArgPair<Key>;
  static constexpr int kKeyBits = 8 * sizeof(Noise);

  struct Shared {
    union {
      uint32_t count[kBins];
      unsigned long long mass[kBins];
      uint32_t mass_words[2][kBins];  // MassBins: the low and high words of each digit's sum
    } hist;
    union {
      typename cub::BlockScan<uint32_t, kThreads>::TempStorage count;
      typename cub::BlockScan<unsigned long long, kThreads>::TempStorage mass;
    } scan;
    Pair pair;                // a reduce's result, for every thread
    unsigned long long sum;   // a block sum, for every thread
    uint32_t digit;           // a descent level's digit,
    unsigned long long above;  // what the digits above it hold,
    unsigned long long bin;   // and what it holds
    int64_t col;              // a tie's column
  };

  Shared& sh;
  const Bits* x;
  int64_t cols;
  const Row& r;

  // z's radix key (order.h: NaN largest, then larger z), as cpu_sample.h's SortKey.
  __device__ static uint64_t SortKey(Noise z) {
    return static_cast<uint64_t>(RadixKey<Policy::kNoiseFormat>(gumbel_detail::AsBits(z)));
  }

  // MassFixed(RelativeMass(z, z_max)); a difference below -24 has E < 2^-34 (exp is
  // correctly rounded and monotone), so its mass is 0 without the exp.
  __device__ static uint64_t MassOf(Noise z, Noise z_max) {
    if (z < z_max && static_cast<float>(gumbel_detail::Sub(z, z_max)) < -24.0f) return 0;
    return MassFixed(RelativeMass(z, z_max));
  }

  template <class Fn>
  __device__ void ForEach(Fn&& fn) const {
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) fn(c, r.Scaled(x[c]));
  }

  // The block's best pair (CombinePairs), in every thread.
  __device__ Pair AllBest(Pair v) {
    v = device::BlockReduce<kThreads>(v, CombinePairs{}, Pair::Identity());
    if (threadIdx.x == 0) sh.pair = v;
    __syncthreads();
    return sh.pair;
  }
  __device__ unsigned long long AllSum(unsigned long long v) {
    v = device::BlockReduce<kThreads>(v, [](unsigned long long a, unsigned long long b) {
      return a + b;
    }, 0ull);
    if (threadIdx.x == 0) sh.sum = v;
    __syncthreads();
    return sh.sum;
  }

  __device__ Pair Draw(int64_t col) const {
    return Pair{NoisyKey<F>(r, r.Scaled(x[col]), col), static_cast<int32_t>(col)};
  }

  // T == 0: the argmax of the logits, the key of the winning logit as the noisy maximum.
  __device__ Pair Argmax() {
    Pair best = Pair::Identity();
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
      best = Combine(best, Pair{Row::KeyOf(categorical_detail::Widen<F>(x[c])),
                                static_cast<int32_t>(c)});
    }
    return AllBest(best);
  }

  // The plain draw over every token, or over the tokens at or before `bar` that min-p keeps
  // (min_p > 0); the identity when none is.
  __device__ Pair DrawKept(const Bar& bar, float min_p, Noise z_max) {
    Pair best = Pair::Identity();
    ForEach([&](int64_t c, Noise z) {
      if (After(bar, SortKey(z), c)) return;
      if (min_p > 0.0f && !(RelativeMass(z, z_max) >= min_p)) return;
      Key key;
      if (NoisyKeyReaches<F>(r, z, c, best.key, key)) {
        best = Combine(best, Pair{key, static_cast<int32_t>(c)});
      }
    });
    return AllBest(best);
  }

  // sh.hist's MassBins sums as 64-bit sums in sh.hist.mass, in place (read, barrier, write,
  // barrier).
  __device__ void WidenMass() {
    const MassBins bins(sh.hist.mass_words);
    unsigned long long sums[kBinsPerThread];
#pragma unroll
    for (int i = 0; i < kBinsPerThread; ++i) sums[i] = bins.Sum(threadIdx.x + i * kThreads);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kBinsPerThread; ++i) sh.hist.mass[threadIdx.x + i * kThreads] = sums[i];
    __syncthreads();
  }

  // One descent level's digit: in[d] for the digits d of the level (kBins of them, unused ones
  // 0), taken from the top digit down; `crosses(above, through)` is true for exactly one digit,
  // given what the digits above it hold and what they hold with it. Sets sh.digit, sh.above,
  // sh.bin; ends with a barrier.
  template <class T, class Crosses>
  __device__ void PickDigit(const T* in, typename cub::BlockScan<T, kThreads>::TempStorage& scan,
                            const Crosses& crosses) {
    T v[kBinsPerThread], through[kBinsPerThread];
#pragma unroll
    for (int i = 0; i < kBinsPerThread; ++i) {
      v[i] = in[kBins - 1 - (threadIdx.x * kBinsPerThread + i)];
    }
    cub::BlockScan<T, kThreads>(scan).InclusiveSum(v, through);
#pragma unroll
    for (int i = 0; i < kBinsPerThread; ++i) {
      if (crosses(through[i] - v[i], through[i])) {
        sh.digit = kBins - 1 - (threadIdx.x * kBinsPerThread + i);
        sh.above = through[i] - v[i];
        sh.bin = v[i];
      }
    }
    __syncthreads();
  }

  // The column of the needed-th token (in column order, 1-based) among those with radix key
  // `key` that `member(c)` admits, where needed = needed_of(their count): each thread counts
  // the tokens of a contiguous chunk of columns, a block scan orders the chunks, and the chunk
  // holding it is walked again.
  template <class Member, class NeededOf>
  __device__ int64_t TieColumn(uint64_t key, const Member& member, const NeededOf& needed_of) {
    using Scan = cub::BlockScan<uint32_t, kThreads>;
    const int64_t chunk = (cols + kThreads - 1) / kThreads;
    const int64_t begin = Min(cols, threadIdx.x * chunk);
    const int64_t end = Min(cols, begin + chunk);
    auto tied = [&](int64_t c) { return SortKey(r.Scaled(x[c])) == key && member(c); };
    uint32_t mine = 0;
    for (int64_t c = begin; c < end; ++c) mine += tied(c) ? 1u : 0u;
    uint32_t before = 0, total = 0;
    Scan(sh.scan.count).ExclusiveSum(mine, before, total);
    const uint32_t needed = needed_of(total);
    if (before < needed && needed <= before + mine) {
      uint32_t seen = before;
      for (int64_t c = begin; c < end; ++c) {
        if (tied(c) && ++seen == needed) {
          sh.col = c;
          break;
        }
      }
    }
    __syncthreads();
    return sh.col;
  }

  // top-k's bar: the k-th token of the z order (1 <= k < cols).
  __device__ Bar TopKBar(uint32_t k) {
    uint32_t needed = k;  // the place of the bar among the tokens of the current bucket
    uint64_t prefix = 0;
    for (int low = kKeyBits; low > 0;) {
      const int width = low < kDigitBits ? low : kDigitBits;
      const int shift = low - width;
      const uint64_t mask = (uint64_t{1} << width) - 1;
      for (int i = threadIdx.x; i < kBins; i += kThreads) sh.hist.count[i] = 0;
      __syncthreads();
      ForEach([&](int64_t, Noise z) {
        const uint64_t key = SortKey(z);
        if (SameHigh(key, prefix, low)) atomicAdd(&sh.hist.count[(key >> shift) & mask], 1u);
      });
      __syncthreads();
      PickDigit(sh.hist.count, sh.scan.count, [&](uint32_t above, uint32_t through) {
        return above < needed && through >= needed;
      });
      prefix |= static_cast<uint64_t>(sh.digit) << shift;
      needed -= static_cast<uint32_t>(sh.above);
      low = shift;
    }
    const int64_t col = TieColumn(prefix, [](int64_t) { return true; },
                                  [needed](uint32_t) { return needed; });
    return Bar{prefix, col};
  }

  // top-p's bar within the set at or before `set` (top-k's bar, or {0, cols}): the last token
  // whose mass before it, over the set, is below p of the set's mass. 0 < p < 1 here.
  __device__ Bar TopPBar(const Bar& set, float p, Noise z_max, const Bar& top) {
    const uint64_t total = AllSum([&] {
      unsigned long long sum = 0;
      ForEach([&](int64_t c, Noise z) {
        if (!After(set, SortKey(z), c)) sum += MassOf(z, z_max);
      });
      return sum;
    }());
    // The first token has nothing before it: kept iff 0 < p * total, so p <= 0 (a traced
    // value) keeps only the top token, as cpu_sample.h.
    if (!MassBelow(0, p, total)) return top;
    uint64_t before = 0;  // the set's mass above the current bucket (kept: below p * total)
    uint64_t prefix = 0;
    for (int low = kKeyBits; low > 0;) {
      const int width = low < kDigitBits ? low : kDigitBits;
      const int shift = low - width;
      const uint64_t mask = (uint64_t{1} << width) - 1;
      for (int i = threadIdx.x; i < kBins; i += kThreads) sh.hist.mass[i] = 0;
      __syncthreads();
      const MassBins bins(sh.hist.mass_words);
      ForEach([&](int64_t c, Noise z) {
        const uint64_t key = SortKey(z);
        if (!SameHigh(key, prefix, low) || After(set, key, c)) return;
        const uint64_t w = MassOf(z, z_max);
        if (w != 0) bins.Add(static_cast<uint32_t>((key >> shift) & mask), w);
      });
      __syncthreads();
      WidenMass();
      // The bucket's first token is kept (the mass before it is `before`), and the mass
      // through its last one is not below p * total (the bucket was picked so; at the top,
      // total itself), so exactly one digit holds the crossing: the first token after it
      // has a mass before it that is not below p * total, and every earlier one is kept.
      PickDigit(sh.hist.mass, sh.scan.mass,
                [&](unsigned long long above, unsigned long long through) {
                  return MassBelow(before + above, p, total) &&
                         !MassBelow(before + through, p, total);
                });
      prefix |= static_cast<uint64_t>(sh.digit) << shift;
      before += sh.above;
      low = shift;
    }
    const uint64_t tie_mass = sh.bin;  // the set's tokens of key `prefix`, all of equal mass
    const int64_t col = TieColumn(
        prefix, [&](int64_t c) { return !After(set, prefix, c); },
        [&](uint32_t n) {
          // The j-th tie (from 0) has before + j * w before it: the count kept is the largest
          // j + 1 whose j passes (j = 0 does).
          const uint64_t w = tie_mass / n;
          uint32_t lo = 1, hi = n;
          while (lo < hi) {
            const uint32_t mid = lo + (hi - lo + 1) / 2;
            if (MassBelow(before + (mid - 1) * w, p, total)) lo = mid;
            else hi = mid - 1;
          }
          return lo;
        });
    return Bar{prefix, col};
  }

  __device__ Pair Sample(const RowFilters& f) {
    if (r.greedy) return Argmax();  // T == 0: argmax, whatever the filters
    if (!f.Any(cols)) return DrawKept(Bar{0, cols}, 0.0f, Noise(0));
    Pair top = Pair::Identity();
    ForEach([&](int64_t c, Noise z) {
      top = Combine(top, Pair{Row::KeyOf(z), static_cast<int32_t>(c)});
    });
    top = AllBest(top);
    const Noise z_max = r.Scaled(x[top.index]);
    // A NaN wins as in argmax; a top of -inf means every token is -inf: the first.
    if (z_max != z_max || z_max == -Noise(INFINITY)) return Draw(top.index);
    const Bar top_bar{SortKey(z_max), top.index};
    Bar bar{0, cols};
    if (f.HasTopK(cols)) bar = TopKBar(static_cast<uint32_t>(f.k));
    if (f.HasTopP()) bar = TopPBar(bar, f.p, z_max, top_bar);
    const Pair best = DrawKept(bar, f.HasMinP() ? f.min_p : 0.0f, z_max);
    // The top token is kept by any filter in range; traced values out of range (min_p > 1)
    // may keep nothing: the top token.
    return best.key == KeyLimits<Key>::kLowest ? Draw(top.index) : best;
  }
};

// The call's Gumbel policy (the keys, temperatures and offsets of every row).
template <Format F>
__device__ typename RowSampler<F>::Policy PolicyOf(const Params& p) {
  return {p.keys, p.rows / p.num_keys,
          static_cast<const typename RowSampler<F>::Noise*>(p.temperature), p.temperature_per_row,
          p.offsets};
}

template <Format F>
__global__ void __launch_bounds__(kThreads) FilteredSampleKernel(Params p) {
  using Sampler = RowSampler<F>;
  using Policy = typename Sampler::Policy;
  __shared__ typename Sampler::Shared sh;
  const Policy policy{p.keys, p.rows / p.num_keys,
                      static_cast<const typename Policy::Noise*>(p.temperature),
                      p.temperature_per_row, p.offsets};
  const auto* logits = static_cast<const typename Policy::Bits*>(p.logits);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const typename Policy::Row r = policy.ForRow(row);
    const RowFilters filters{p.top_k[row], p.top_p[row], p.min_p[row]};
    const auto* x = logits + row * p.cols;
    Sampler sampler{sh, x, p.cols, r};
    const auto best = sampler.Sample(filters);
    if (threadIdx.x == 0) p.epilogue(row, best, x);
    __syncthreads();  // the next row reuses the shared memory
  }
}

// ---------------------------------------------------------------------------------------------
// The spread path (launch_plan.h, UsesFilterSpread): no row has a top-k (a static promise), so
// a row's kept set is top-p's prefix cut by min-p's floor, and every pass splits each row into
// chunks of columns, one block each, so that a few rows fill the GPU:
//   1. SpreadTopKernel: each chunk's top token (T == 0: its argmax pair, the row's answer);
//      zeroes the row's histograms and done count for the passes after it; the first chunk
//      stores min-p's floor on d (MinPFloorWarp: the draw's blocks read it).
//   2-4. SpreadLevelKernel<L> (rows with top-p and a finite top): the row's top from the
//      chunks' pairs; level L's digit masses (11, 11, 10 bits of z's radix key from the top)
//      over the chunk's tokens whose higher bits are the prefix picked so far, added to the
//      row's histogram with integer atomics (exact in any order); level 0's sum is the row's
//      mass S. Levels 1 and 2 first pick the previous level's digit (TopPBar's predicate; every
//      block the same, from the same histogram; block 0 stores it in the row state for the
//      next pass); level 2 also stores the chunk's count of each digit (the ties of the last
//      key, which are kept in column order, chunk by chunk).
//   5. SpreadDrawKernel: the bar (the last level's pick gives the full key; MassBelow gives how
//      many of its ties are kept, and this chunk's share of them follows from the counts of
//      the chunks before it), min-p as a floor on d (from the row state), the draw over the chunk's
//      kept tokens (the noise's bound first: a token whose bound cannot reach the warp's best
//      key so far skips the log, NoisyKeyReaches); the row's last block (the done count)
//      combines the chunks' pairs.
// Every rule is RowSampler's (TopPBar, DrawKept, Sample), so the result is the generic path's
// and the CPU handler's, bit for bit.

// Compaction of a rare per-token path (the spread passes): each warp pushes the items of its
// lanes that take the path (a ballot, one shared slot each, in lane order) and runs the path on
// 32 items at a time, from the top of its queue, so that no lane idles through it. Items of
// kCompactRounds pushes are queued before a drain: the capacity holds fewer than 32 left over
// plus one item per lane and round. The path's results must not depend on the order it takes
// the items in (the passes' integer sums, counts and total-order maxima).
constexpr int kCompactRounds = 4;
template <class Item>
struct WarpQueue {
  static constexpr int kCapacity = 32 * (kCompactRounds + 1);
  Item* items;        // this warp's kCapacity slots
  uint32_t fill = 0;  // warp-uniform
  uint32_t lane;

  template <int N>
  __device__ explicit WarpQueue(Item (&slots)[N][kCapacity])
      : items(slots[threadIdx.x / 32]), lane(threadIdx.x % 32) {}
  __device__ void Push(bool take, const Item& item) {
    const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, take);
    if (take) items[fill + __popc(ballot & ((1u << lane) - 1))] = item;
    fill += __popc(ballot);
  }
  template <class Path>
  __device__ void Drain(const Path& path) {
    __syncwarp();
    while (fill >= 32) {
      fill -= 32;
      path(items[fill + lane]);
    }
    __syncwarp();  // the slots read above are the next pushes'
  }
  template <class Path>
  __device__ void Finish(const Path& path) {
    __syncwarp();
    if (lane < fill) path(items[lane]);
  }
};

// A chunk's columns [begin, end) of row x, kCompactRounds per thread a step (round j of a step
// at base + j * kThreads + threadIdx.x): visit(c, z) for every round, with z = r.Scaled(x[c])
// (0 where c >= end: the visit excludes those columns), then step() once a step (a WarpQueue's
// drain). Every round's load is issued before the first is used: loads written between ballots
// or shared atomics are not hoisted above them, so each waited out its own latency (NOTES try
// 86). Block-uniform trip counts: every lane reaches the visits' ballots.
template <class Bits, class Row, class Visit, class Step>
__device__ __forceinline__ void VisitRounds(const Bits* x, int64_t begin, int64_t end,
                                            const Row& r, const Visit& visit, const Step& step) {
  for (int64_t base = begin; base < end; base += kCompactRounds * kThreads) {
    Bits v[kCompactRounds];
#pragma unroll
    for (int j = 0; j < kCompactRounds; ++j) {
      const int64_t c = base + j * kThreads + threadIdx.x;
      v[j] = c < end ? x[c] : Bits(0);
    }
#pragma unroll
    for (int j = 0; j < kCompactRounds; ++j) {
      visit(base + j * kThreads + threadIdx.x, r.Scaled(v[j]));
    }
    step();
  }
}

// A token the draw keeps: its scaled logit and column.
template <class Noise>
struct KeptToken {
  Noise z;
  int32_t col;
};

struct SpreadState {
  unsigned long long total;      // S: the row's mass (level 0's sum)
  unsigned long long before[2];  // the mass above the bucket picked from level 0, 1's histogram
  uint32_t prefix[2];            // the key bits picked from level 0, 1's histogram
  uint32_t top_only;             // 1: p keeps the top token alone (!MassBelow(0, p, S))
  uint32_t done;                 // the draw's finished blocks
  float min_p_floor;             // MinPFloor(min_p) where the row has min-p
  uint32_t unused[5];
};
static_assert(sizeof(SpreadState) == 64, "the layout's 64-byte row states");
static_assert(kBins == kFilterSpreadBins && kThreads * kBinsPerThread == kBins);

struct SpreadParams {
  Params p;
  FilterSpreadLayout layout;
  unsigned char* workspace;  // 16-byte aligned
  bool has_top_p;            // false: the levels were not launched (top_p is ignored)
};

// A block's chunk of a row on the spread path: the workspace's parts of the row, and the row's
// sampler over the chunk (RowSampler: the same block steps, on columns relative to `begin`).
template <Format F>
struct Spread {
  using Sampler = RowSampler<F>;
  using Pair = typename Sampler::Pair;
  static_assert(sizeof(Pair) == 8 && Sampler::kKeyBits == 32, "32-bit keys: three levels");

  const SpreadParams& sp;
  int64_t row, chunk_index, begin, end;
  const typename Sampler::Bits* x;  // the row

  __device__ Spread(const SpreadParams& params)
      : sp(params), row(blockIdx.y), chunk_index(blockIdx.x) {
    begin = chunk_index * sp.layout.chunk;
    end = Min(sp.p.cols, begin + sp.layout.chunk);
    x = static_cast<const typename Sampler::Bits*>(sp.p.logits) + row * sp.p.cols;
  }

  __device__ Sampler ChunkSampler(typename Sampler::Shared& sh,
                                  const typename Sampler::Row& r) const {
    return Sampler{sh, x + begin, end - begin, r};
  }
  __device__ Pair* Pairs(size_t offset) const {
    return reinterpret_cast<Pair*>(sp.workspace + offset) + row * sp.layout.chunks;
  }
  __device__ SpreadState& State() const {
    return reinterpret_cast<SpreadState*>(sp.workspace + sp.layout.state_offset)[row];
  }
  __device__ unsigned long long* Hist(int level) const {
    return reinterpret_cast<unsigned long long*>(sp.workspace + sp.layout.hist_offset) +
           (row * 3 + level) * kBins;
  }
  __device__ uint32_t* Counts(int64_t chunk) const {
    return reinterpret_cast<uint32_t*>(sp.workspace + sp.layout.counts_offset) +
           (row * sp.layout.chunks + chunk) * kFilterSpreadLastBins;
  }

  // The best of the row's chunk pairs at `offset` (its top, or its draw), in every thread. The
  // draw's pairs are written by this kernel's other blocks: read `fresh` (volatile: from L2,
  // never a line this SM's L1 cached for another row before they were written).
  __device__ Pair RowBest(Sampler& sampler, size_t offset, bool fresh = false) const {
    const Pair* pairs = Pairs(offset);
    Pair best = Pair::Identity();
    for (int64_t i = threadIdx.x; i < sp.layout.chunks; i += kThreads) {
      Pair pair;
      if (fresh) {
        const volatile Pair& v = pairs[i];
        pair.key = v.key;
        pair.index = v.index;
      } else {
        pair = pairs[i];
      }
      best = Combine(best, pair);
    }
    return sampler.AllBest(best);
  }
};

// 4 blocks of kThreads per SM (32 registers), as without min-p's floor search: all of the
// plan's blocks in one wave.
template <Format F>
__global__ void __launch_bounds__(kThreads, 4) SpreadTopKernel(SpreadParams sp) {
  using Sampler = RowSampler<F>;
  using Pair = typename Sampler::Pair;
  __shared__ typename Sampler::Shared sh;
  const Spread<F> s(sp);
  const typename Sampler::Row r = PolicyOf<F>(sp.p).ForRow(s.row);
  Sampler sampler = s.ChunkSampler(sh, r);
  // The row's three histograms, zeroed by its chunks in turn, and its done count.
  const int64_t words = 3 * kBins;
  const int64_t share = (words + sp.layout.chunks - 1) / sp.layout.chunks;
  unsigned long long* hist = s.Hist(0);
  for (int64_t i = s.chunk_index * share + threadIdx.x;
       i < Min(words, (s.chunk_index + 1) * share); i += kThreads) {
    hist[i] = 0;
  }
  if (s.chunk_index == 0 && threadIdx.x == 0) s.State().done = 0;
  Pair best = Pair::Identity();
#pragma unroll 4  // loads of 4 columns in flight per thread (NOTES try 84)
  for (int64_t c = s.begin + threadIdx.x; c < s.end; c += kThreads) {
    const auto key = r.greedy ? Sampler::Row::KeyOf(categorical_detail::Widen<F>(s.x[c]))
                              : Sampler::Row::KeyOf(r.Scaled(s.x[c]));
    best = Combine(best, Pair{key, static_cast<int32_t>(c)});
  }
  best = sampler.AllBest(best);
  if (threadIdx.x == 0) s.Pairs(sp.layout.top_offset)[s.chunk_index] = best;
  // min-p's floor on d, once per row (the draw's blocks read it): the first chunk's first warp.
  const float min_p = sp.p.min_p[s.row];
  if (s.chunk_index == 0 && threadIdx.x < 32 && min_p > 0.0f) {
    const float floor = MinPFloorWarp(min_p);
    if (threadIdx.x == 0) s.State().min_p_floor = floor;
  }
}

// 3 blocks of kThreads per SM (40 registers): the plan's 264 blocks in one wave with room for
// the next kernel's first blocks.
template <Format F, int L>
__global__ void __launch_bounds__(kThreads, 3) SpreadLevelKernel(SpreadParams sp) {
  using Sampler = RowSampler<F>;
  using Noise = typename Sampler::Noise;
  __shared__ typename Sampler::Shared sh;
  __shared__ uint32_t last_counts[L == 2 ? kFilterSpreadLastBins : 1];
  __shared__ Noise compact[L == 0 ? 1 : kThreads / 32][WarpQueue<Noise>::kCapacity];
  const Spread<F> s(sp);
  const typename Sampler::Row r = PolicyOf<F>(sp.p).ForRow(s.row);
  const float p = sp.p.top_p[s.row];
  if (r.greedy || !(p < 1.0f)) return;  // uniform across the block: no barrier skipped
  Sampler sampler = s.ChunkSampler(sh, r);
  const Noise z_max = r.Scaled(s.x[s.RowBest(sampler, sp.layout.top_offset).index]);
  if (z_max != z_max || z_max == -Noise(INFINITY)) return;
  SpreadState& state = s.State();
  uint64_t prefix = 0, before = 0;
  if constexpr (L == 1) {
    unsigned long long mine = 0;
    for (int i = threadIdx.x; i < kBins; i += kThreads) mine += s.Hist(0)[i];
    const uint64_t total = sampler.AllSum(mine);
    const bool top_only = !MassBelow(0, p, total);
    if (s.chunk_index == 0 && threadIdx.x == 0) {
      state.total = total;
      state.top_only = top_only ? 1u : 0u;
    }
    if (top_only) return;
    sampler.PickDigit(s.Hist(0), sh.scan.mass,
                      [&](unsigned long long above, unsigned long long through) {
                        return MassBelow(above, p, total) && !MassBelow(through, p, total);
                      });
    prefix = static_cast<uint64_t>(sh.digit) << 21;
    before = sh.above;
  } else if constexpr (L == 2) {
    if (state.top_only) return;
    const uint64_t total = state.total;
    const uint64_t before0 = state.before[0];
    sampler.PickDigit(s.Hist(1), sh.scan.mass,
                      [&](unsigned long long above, unsigned long long through) {
                        return MassBelow(before0 + above, p, total) &&
                               !MassBelow(before0 + through, p, total);
                      });
    prefix = state.prefix[0] | (static_cast<uint64_t>(sh.digit) << 10);
    before = before0 + sh.above;
  }
  if constexpr (L >= 1) {
    if (s.chunk_index == 0 && threadIdx.x == 0) {
      state.prefix[L - 1] = static_cast<uint32_t>(prefix);
      state.before[L - 1] = before;
    }
  }
  constexpr int kShift = L == 0 ? 21 : L == 1 ? 10 : 0;
  constexpr int kLow = L == 0 ? 32 : L == 1 ? 21 : 10;
  constexpr uint64_t kMask = L == 2 ? kFilterSpreadLastBins - 1 : kBins - 1;
  for (int i = threadIdx.x; i < kBins; i += kThreads) sh.hist.mass[i] = 0;
  if constexpr (L == 2) {
    for (int i = threadIdx.x; i < kFilterSpreadLastBins; i += kThreads) last_counts[i] = 0;
  }
  __syncthreads();
  const MassBins bins(sh.hist.mass_words);
  const auto add = [&](Noise z) {
    const uint32_t digit = static_cast<uint32_t>((Sampler::SortKey(z) >> kShift) & kMask);
    if constexpr (L == 2) atomicAdd(&last_counts[digit], 1u);
    const uint64_t w = FixedMass(z, z_max);
    if (w != 0) bins.Add(digit, w);
  };
  if constexpr (L == 0) {
    // A step's tokens side by side: their masses first (branch-free, so the four chains of
    // DFMAs overlap), then the bins. VisitRounds visits kCompactRounds tokens, then steps.
    Noise zs[kCompactRounds];
    int j = 0;
    VisitRounds(
        s.x, s.begin, s.end, r,
        [&](int64_t c, Noise z) { zs[j++] = c < s.end ? z : -Noise(INFINITY); },
        [&] {
          FastMass m[kCompactRounds];
          // The four flags joined before any branch: else the compiler sinks each token's
          // chain past the previous token's branches, and the chains run one after another.
          bool refine = false;
#pragma unroll
          for (int i = 0; i < kCompactRounds; ++i) {
            m[i] = MassOfExponentFast(MassExponent(zs[i], z_max));
            refine |= m[i].refine;
          }
          if (refine) {
#pragma unroll
            for (int i = 0; i < kCompactRounds; ++i) {
              if (m[i].refine) m[i].mass = MassOfExponentRefined(MassExponent(zs[i], z_max));
            }
          }
#pragma unroll
          for (int i = 0; i < kCompactRounds; ++i) {
            const uint32_t digit =
                static_cast<uint32_t>((Sampler::SortKey(zs[i]) >> kShift) & kMask);
            if (m[i].mass != 0) bins.Add(digit, m[i].mass);
          }
          j = 0;
        });
  } else {
    // Only the tokens of the bucket picked so far take the exp: a small part of the row,
    // scattered, so a warp would run it for a few lanes at a time (10 active threads of 32,
    // NOTES try 84). Each warp queues its matches' z in shared memory and runs the exp 32 at a
    // time (every lane busy).
    WarpQueue<Noise> queue(compact);
    VisitRounds(
        s.x, s.begin, s.end, r,
        [&](int64_t c, Noise z) {
          queue.Push(c < s.end && SameHigh(Sampler::SortKey(z), prefix, kLow), z);
        },
        [&] { queue.Drain(add); });
    queue.Finish(add);
  }
  __syncthreads();
  unsigned long long* hist = s.Hist(L);
  for (int i = threadIdx.x; i < kBins; i += kThreads) {
    const unsigned long long sum = bins.Sum(i);
    if (sum != 0) atomicAdd(&hist[i], sum);
  }
  if constexpr (L == 2) {
    uint32_t* counts = s.Counts(s.chunk_index);
    for (int i = threadIdx.x; i < kFilterSpreadLastBins; i += kThreads) counts[i] = last_counts[i];
  }
}

// 2 blocks of kThreads per SM (64 registers): the plan's 264 blocks in one wave.
template <Format F>
__global__ void __launch_bounds__(kThreads, 2) SpreadDrawKernel(SpreadParams sp) {
  using Sampler = RowSampler<F>;
  using Noise = typename Sampler::Noise;
  using Pair = typename Sampler::Pair;
  using Key = typename Sampler::Key;
  __shared__ typename Sampler::Shared sh;
  __shared__ bool last;
  __shared__ KeptToken<Noise> compact[kThreads / 32][WarpQueue<KeptToken<Noise>>::kCapacity];
  const Spread<F> s(sp);
  const typename Sampler::Row r = PolicyOf<F>(sp.p).ForRow(s.row);
  Sampler sampler = s.ChunkSampler(sh, r);
  // Without the levels' launches a row's p < 1 (a broken promise) is ignored, never a read of
  // histograms that no pass wrote.
  const RowFilters f{0, sp.has_top_p ? sp.p.top_p[s.row] : 1.0f, sp.p.min_p[s.row]};
  const Pair top = s.RowBest(sampler, sp.layout.top_offset);
  SpreadState& state = s.State();
  Pair best = Pair::Identity();
  const Noise z_max = r.greedy ? Noise(0) : r.Scaled(s.x[top.index]);
  if (!r.greedy && !f.Any(sp.p.cols)) {  // categorical's plain draw
#pragma unroll 4  // loads of 4 columns in flight per thread (NOTES try 84)
    for (int64_t c = s.begin + threadIdx.x; c < s.end; c += kThreads) {
      Key key;
      if (NoisyKeyReaches<F>(r, r.Scaled(s.x[c]), c, best.key, key)) {
        best = Combine(best, Pair{key, static_cast<int32_t>(c)});
      }
    }
    best = sampler.AllBest(best);
  } else if (!r.greedy && z_max == z_max && z_max != -Noise(INFINITY) &&
             !(f.HasTopP() && state.top_only)) {
    Bar bar{0, s.end};  // this chunk's part of the kept prefix: its tokens at or before it
    if (f.HasTopP()) {
      const uint64_t total = state.total, before1 = state.before[1];
      sampler.PickDigit(s.Hist(2), sh.scan.mass,
                        [&](unsigned long long above, unsigned long long through) {
                          return MassBelow(before1 + above, f.p, total) &&
                                 !MassBelow(before1 + through, f.p, total);
                        });
      const uint32_t digit = sh.digit;
      const uint64_t key = state.prefix[1] | digit;
      const uint64_t before = before1 + sh.above, tie_mass = sh.bin;
      // The ties of `key`: n in the row, those of the chunks before this one, and this one's.
      unsigned long long n = 0, earlier = 0;
      for (int64_t i = threadIdx.x; i < sp.layout.chunks; i += kThreads) {
        const uint32_t count = s.Counts(i)[digit];
        n += count;
        if (i < s.chunk_index) earlier += count;
      }
      n = sampler.AllSum(n);
      earlier = sampler.AllSum(earlier);
      const uint32_t mine = s.Counts(s.chunk_index)[digit];
      // The ties each weigh tie_mass / n; counts that match no token of the row (n == 0) keep
      // none, never a division by zero.
      const uint64_t kept = static_cast<uint64_t>(
          TiesKept(before, n == 0 ? 0 : tie_mass / n, static_cast<int64_t>(n), f.p, total));
      const uint64_t quota =
          kept <= earlier ? 0 : kept - earlier < mine ? kept - earlier : mine;
      int64_t col = s.end;  // the chunk's last kept tie: all of them
      if (quota == 0) {
        col = s.begin - 1;
      } else if (quota < mine) {
        col = s.begin + sampler.TieColumn(key, [](int64_t) { return true; },
                                          [quota](uint32_t) { return static_cast<uint32_t>(quota); });
      }
      bar = Bar{key, col};
    }
    const float d_floor = f.HasMinP() ? state.min_p_floor : -INFINITY;
    const auto kept = [&](Noise z, int64_t c) {
      return !After(bar, Sampler::SortKey(z), c) &&
             (!f.HasMinP() || MassExponent(z, z_max) >= d_floor);
    };
    // The noise's bound first (NoisyKeyReaches) against the best key of the warp's lanes as of
    // their last step (`reach`, any column: a key below it cannot win or tie) or the lane's own.
    Key reach = KeyLimits<Key>::kLowest;
    const auto draw = [&](const KeptToken<Noise>& t) {
      Key key;
      if (NoisyKeyReaches<F>(r, t.z, t.col, reach > best.key ? reach : best.key, key)) {
        best = Combine(best, Pair{key, t.col});
      }
    };
    const auto share = [&] {
      reach = device::WarpMax(best.key);
    };
    if (f.HasTopP()) {
      // The kept tokens' noise only: top-p keeps a part of the row, often under half, so each
      // warp queues its kept columns first (WarpQueue).
      WarpQueue<KeptToken<Noise>> queue(compact);
      VisitRounds(
          s.x, s.begin, s.end, r,
          [&](int64_t c, Noise z) {
            queue.Push(c < s.end && kept(z, c), KeptToken<Noise>{z, static_cast<int32_t>(c)});
          },
          [&] {
            queue.Drain(draw);
            share();
          });
      queue.Finish(draw);
    } else {
      // min-p alone keeps a few tokens in a hundred: the queue's ballots and stores on every
      // token cost more than the lanes idle through the rare noise (NOTES try 86).
      VisitRounds(
          s.x, s.begin, s.end, r,
          [&](int64_t c, Noise z) {
            if (c < s.end && kept(z, c)) draw(KeptToken<Noise>{z, static_cast<int32_t>(c)});
          },
          share);
    }
    best = sampler.AllBest(best);
  }
  // The row's last block combines the chunks' draws (the done count: zeroed by the first pass).
  if (threadIdx.x == 0) {
    s.Pairs(sp.layout.draw_offset)[s.chunk_index] = best;
    __threadfence();
    last = atomicAdd(&state.done, 1u) == sp.layout.chunks - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  Pair result = s.RowBest(sampler, sp.layout.draw_offset, /*fresh=*/true);
  if (threadIdx.x != 0) return;
  if (r.greedy) {
    result = top;  // T == 0: the argmax pair
  } else if (result.key == KeyLimits<typename Sampler::Key>::kLowest) {
    // Nothing kept (a NaN or -inf top, p keeping the top alone, traced min_p > 1): the top.
    result = Pair{NoisyKey<F>(r, z_max, top.index), top.index};
  }
  sp.p.epilogue(s.row, result, s.x);
}

// Without top-p (a static promise), two launches: the levels would find nothing to do.
template <Format F>
void LaunchSpread(const SpreadParams& sp, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(sp.layout.chunks), static_cast<unsigned>(sp.p.rows));
  SpreadTopKernel<F><<<grid, kThreads, 0, stream>>>(sp);
  if (sp.has_top_p) {
    SpreadLevelKernel<F, 0><<<grid, kThreads, 0, stream>>>(sp);
    SpreadLevelKernel<F, 1><<<grid, kThreads, 0, stream>>>(sp);
    SpreadLevelKernel<F, 2><<<grid, kThreads, 0, stream>>>(sp);
  }
  SpreadDrawKernel<F><<<grid, kThreads, 0, stream>>>(sp);
}

// ---------------------------------------------------------------------------------------------
// A vocabulary split over devices without a top-k (sample_kernels.h, TopPLevelLaunch and
// SplitDrawLaunch; cpu_sample.h, LevelRow and SplitDrawRow): one block per row (blocks loop
// over rows), RowSampler's block steps over the shard's columns. The levels' digit picks are
// CrossingDigit's walk done by a block scan; the masses come in and go out as limbs.

using SplitLevels = MassLevels<32>;
static_assert(SplitLevels::kCount == 3 && SplitLevels::kWidth == kBins &&
              (1 << SplitLevels::Bits(SplitLevels::kCount - 1)) == kFilterSpreadLastBins);

struct SplitParams {
  Params p;                 // the level reads the logits, temperature and top_p
  const void* tops;         // [rows, shards]
  int64_t shards;
  const uint32_t* above;    // [rows, levels before, kBins, kMassLimbs]
  const uint32_t* counts;   // the draw: [rows, shards, last digits]; nullptr: no levels
  int level;                // the level kernel's
  uint32_t* histogram;      // the level kernel's output
};

template <Format F>
struct SplitRow {
  using Sampler = RowSampler<F>;
  using Noise = typename Sampler::Noise;
  using Bits = typename Sampler::Bits;
  using Pair = typename Sampler::Pair;
  using Row = typename Sampler::Row;

  Sampler& sampler;
  const SplitParams& sp;
  int64_t row;

  // z_max and the shard holding the row's first token (cpu_sample.h, TopOfShards: the first
  // shard among equal tops), in every thread.
  struct Top {
    Noise z_max;
    int64_t shard;
  };
  __device__ Top TopOfShards() {
    const Bits* tops = static_cast<const Bits*>(sp.tops) + row * sp.shards;
    Pair best = Pair::Identity();
    for (int64_t s = threadIdx.x; s < sp.shards; s += kThreads) {
      best = Combine(best, Pair{Row::KeyOf(sampler.r.Scaled(tops[s])), static_cast<int32_t>(s)});
    }
    best = sampler.AllBest(best);
    return Top{sampler.r.Scaled(tops[best.index]), best.index};
  }

  // CrossingDigit (sample_filter.h) over the kBins masses in sh.hist.mass (digits past the
  // level's own hold 0), in every thread: the walk from the top digit stops at the first
  // non-empty digit whose mass through it is not below p of the total, or at digit 0; `before`
  // gains the mass above that digit. A digit's mass through it grows as the walk goes on, so
  // the walk's stop is the highest such digit.
  __device__ uint32_t CrossingDigit(float p, uint64_t total, uint64_t& before) {
    auto& sh = sampler.sh;
    unsigned long long v[kBinsPerThread], through[kBinsPerThread];
#pragma unroll
    for (int i = 0; i < kBinsPerThread; ++i) {
      v[i] = sh.hist.mass[kBins - 1 - (threadIdx.x * kBinsPerThread + i)];
    }
    cub::BlockScan<unsigned long long, kThreads>(sh.scan.mass).InclusiveSum(v, through);
    int stop = 0;
#pragma unroll
    for (int i = 0; i < kBinsPerThread; ++i) {
      const int d = kBins - 1 - (threadIdx.x * kBinsPerThread + i);
      if (d > 0 && v[i] != 0 && !MassBelow(before + through[i], p, total)) stop = max(stop, d);
    }
    stop = device::BlockReduce<kThreads>(stop, [](int a, int b) { return max(a, b); }, 0);
    if (threadIdx.x == 0) sh.digit = static_cast<uint32_t>(stop);
    __syncthreads();
    const uint32_t digit = sh.digit;
#pragma unroll
    for (int i = 0; i < kBinsPerThread; ++i) {
      if (kBins - 1 - (threadIdx.x * kBinsPerThread + i) == static_cast<int>(digit)) {
        sh.above = through[i] - v[i];
      }
    }
    __syncthreads();
    before += sh.above;
    __syncthreads();  // sh.digit and sh.above are written again by the next call
    return digit;
  }

  // PickLevels (cpu_sample.h) over the row's summed masses of levels [0, levels) in `above`
  // (limbs, the levels before the caller's: `levels` of them per row): the key's high bits, the
  // mass above them and the row's total, in every thread.
  struct MassPrefix {
    uint64_t prefix = 0;
    uint64_t before = 0;
    uint64_t total = 0;
  };
  __device__ MassPrefix PickLevels(int levels, float p) {
    auto& sh = sampler.sh;
    const uint32_t* above = sp.above + row * levels * kBins * kMassLimbs;
    MassPrefix m;
    for (int l = 0; l < levels; ++l) {
      unsigned long long sum = 0;
      for (int d = threadIdx.x; d < kBins; d += kThreads) {
        const uint64_t mass = MassFromLimbs(above + (l * kBins + d) * kMassLimbs);
        sh.hist.mass[d] = mass;
        sum += mass;
      }
      __syncthreads();
      if (l == 0) m.total = sampler.AllSum(sum);
      const uint32_t d = CrossingDigit(p, m.total, m.before);
      m.prefix |= static_cast<uint64_t>(d) << SplitLevels::Shift(l);
    }
    return m;
  }
};

// LevelRow (cpu_sample.h) for each row: the masses (limbs) or, at the last level, the counts of
// tokens of positive mass per digit of the shard's tokens under the digits picked before;
// zeros where the row needs no levels (T == 0, p >= 1, a NaN or -inf top).
template <Format F>
__global__ void __launch_bounds__(kThreads) TopPLevelKernel(SplitParams sp) {
  using Sampler = RowSampler<F>;
  using Noise = typename Sampler::Noise;
  using Policy = typename Sampler::Policy;
  __shared__ typename Sampler::Shared sh;
  const int level = sp.level;
  const bool last = level == SplitLevels::kCount - 1;
  const int digits = 1 << SplitLevels::Bits(level);
  const auto* t = static_cast<const Noise*>(sp.p.temperature);
  const auto* logits = static_cast<const typename Sampler::Bits*>(sp.p.logits);
  for (int64_t row = blockIdx.x; row < sp.p.rows; row += gridDim.x) {
    const typename Sampler::Row r = Policy::Scaling(t[sp.p.temperature_per_row ? row : 0]);
    const float p = sp.p.top_p[row];
    Sampler sampler{sh, logits + row * sp.p.cols, sp.p.cols, r};
    SplitRow<F> split{sampler, sp, row};
    bool needs = !r.greedy && p < 1.0f;  // uniform across the block
    Noise z_max = Noise(0);
    if (needs) {
      z_max = split.TopOfShards().z_max;
      needs = z_max == z_max && z_max != -Noise(INFINITY);
    }
    const uint64_t prefix = needs && level > 0 ? split.PickLevels(level, p).prefix : 0;
    for (int i = threadIdx.x; i < kBins; i += kThreads) sh.hist.mass[i] = 0;
    __syncthreads();
    const MassBins bins(sh.hist.mass_words);
    if (needs) {
      sampler.ForEach([&](int64_t, Noise z) {
        const uint64_t key = Sampler::SortKey(z);
        if (!SplitLevels::Under(key, prefix, level)) return;
        const uint32_t digit = static_cast<uint32_t>(SplitLevels::Digit(key, level));
        const uint64_t w = FixedMass(z, z_max);
        if (w == 0) return;
        if (last) {
          atomicAdd(&sh.hist.count[digit], 1u);
        } else {
          bins.Add(digit, w);
        }
      });
    }
    __syncthreads();
    uint32_t* out = sp.histogram + row * digits * (last ? 1 : kMassLimbs);
    for (int d = threadIdx.x; d < digits; d += kThreads) {
      if (last) {
        out[d] = sh.hist.count[d];
      } else {
        MassToLimbs(bins.Sum(d), out + d * kMassLimbs);
      }
    }
    __syncthreads();  // the next row reuses the shared memory
  }
}

// SplitDrawRow (cpu_sample.h) for each row: the (noisy key, local column) of the shard's best
// kept token; a -inf key (column 0) where it keeps none.
template <Format F>
__global__ void __launch_bounds__(kThreads) SplitFilteredDrawKernel(SplitParams sp) {
  using Sampler = RowSampler<F>;
  using Noise = typename Sampler::Noise;
  using Pair = typename Sampler::Pair;
  using Row = typename Sampler::Row;
  using Key = typename Sampler::Key;
  __shared__ typename Sampler::Shared sh;
  __shared__ float min_p_floor;
  const auto policy = PolicyOf<F>(sp.p);
  const auto* logits = static_cast<const typename Sampler::Bits*>(sp.p.logits);
  constexpr int kLast = SplitLevels::kCount - 1;
  constexpr int kLastDigits = 1 << SplitLevels::Bits(kLast);
  // The shard: its column offset over the shard width (a larger one reads as the last shard).
  const int64_t shard = Min(sp.shards - 1, static_cast<int64_t>(static_cast<uint32_t>(sp.p.offsets[1])) /
                                               sp.p.cols);
  for (int64_t row = blockIdx.x; row < sp.p.rows; row += gridDim.x) {
    const Row r = policy.ForRow(row);
    const auto* x = logits + row * sp.p.cols;
    Sampler sampler{sh, x, sp.p.cols, r};
    SplitRow<F> split{sampler, sp, row};
    const RowFilters f{0, sp.p.top_p[row], sp.p.min_p[row]};
    const bool top_p = f.HasTopP() && sp.counts != nullptr;
    const Pair lose{Row::KeyOf(-Noise(INFINITY)), 0};
    Pair best;
    if (r.greedy) {
      best = sampler.Argmax();  // the shards' argmax pairs combine to the row's
    } else if (!top_p && !f.HasMinP()) {
      best = sampler.DrawKept(Bar{0, sp.p.cols}, 0.0f, Noise(0));  // categorical's draw
    } else {
      const typename SplitRow<F>::Top top = split.TopOfShards();
      if (f.HasMinP() && threadIdx.x < 32) {
        const float floor = MinPFloorWarp(f.min_p);
        if (threadIdx.x == 0) min_p_floor = floor;
      }
      __syncthreads();
      const float d_floor = f.HasMinP() ? min_p_floor : -INFINITY;
      if (top.z_max != top.z_max || top.z_max == -Noise(INFINITY) || !(0.0f >= d_floor)) {
        // The row's first token alone (a NaN or -inf top; or nothing kept: min_p > 1, traced):
        // the shard holding it draws it (the first of its tokens in the z order).
        best = lose;
        if (shard == top.shard) {  // uniform across the block
          Pair first = Pair::Identity();
          sampler.ForEach([&](int64_t c, Noise z) {
            first = Combine(first, Pair{Row::KeyOf(z), static_cast<int32_t>(c)});
          });
          best = sampler.Draw(sampler.AllBest(first).index);
        }
      } else {
        // top-p's bar: kept iff the key is above `bar`, or equal to it with a positive mass at
        // a column up to `tie_col` (this shard's share of the kept ties, in column order). No
        // top-p: every key is above 0.
        uint64_t bar = 0;
        int64_t tie_col = -1;
        if (top_p) {
          typename SplitRow<F>::MassPrefix m = split.PickLevels(kLast, f.p);
          // The last level's masses: its digits complete the key, so a digit's tokens share
          // one mass: count * mass.
          const uint32_t* counts = sp.counts + row * sp.shards * kLastDigits;
          for (int d = threadIdx.x; d < kBins; d += kThreads) {
            uint64_t n = 0;
            if (d < kLastDigits) {
              for (int64_t s = 0; s < sp.shards; ++s) n += counts[s * kLastDigits + d];
            }
            sh.hist.mass[d] = n == 0 ? 0 : n * KeyMass(m.prefix | static_cast<uint64_t>(d),
                                                       top.z_max);
          }
          __syncthreads();
          const uint32_t d = split.CrossingDigit(f.p, m.total, m.before);
          bar = m.prefix | d;
          unsigned long long ties = 0, ties_before = 0;
          for (int64_t s = threadIdx.x; s < sp.shards; s += kThreads) {
            const uint32_t n = counts[s * kLastDigits + d];
            ties += n;
            if (s < shard) ties_before += n;
          }
          ties = sampler.AllSum(ties);
          ties_before = sampler.AllSum(ties_before);
          const int64_t kept = TiesKept(m.before, KeyMass(bar, top.z_max),
                                        static_cast<int64_t>(ties), f.p, m.total);
          const int64_t mine = counts[shard * kLastDigits + d];
          const int64_t quota =
              kept - static_cast<int64_t>(ties_before) <= 0 ? 0
                  : Min(kept - static_cast<int64_t>(ties_before), mine);
          if (quota > 0) {
            // Counts that do not match the shard's tokens (operands not from the levels) find
            // no column: none of the ties kept, never a stale one.
            if (threadIdx.x == 0) sh.col = -1;
            const Noise z_max = top.z_max;
            tie_col = sampler.TieColumn(
                bar, [&](int64_t c) { return FixedMass(r.Scaled(x[c]), z_max) > 0; },
                [quota](uint32_t n) { return static_cast<uint32_t>(Min(quota, n)); });
          }
        }
        Pair kept = Pair::Identity();
        bool any = false;
        sampler.ForEach([&](int64_t c, Noise z) {
          const uint64_t key = Sampler::SortKey(z);
          const bool in_bar = key > bar || (key == bar && c <= tie_col &&
                                             FixedMass(z, top.z_max) > 0);
          if (!in_bar || !(MassExponent(z, top.z_max) >= d_floor)) return;
          any = true;
          Key noisy;
          if (NoisyKeyReaches<F>(r, z, c, kept.key, noisy)) {
            kept = Combine(kept, Pair{noisy, static_cast<int32_t>(c)});
          }
        });
        any = __syncthreads_or(any);
        kept = sampler.AllBest(kept);
        best = any ? kept : lose;
      }
    }
    if (threadIdx.x == 0) sp.p.epilogue(row, best, x);
    __syncthreads();  // the next row reuses the shared memory
  }
}

}  // namespace

cudaError_t LaunchFilteredSample(const FilteredSampleLaunch& l) {
  if (l.rows == 0) return cudaSuccess;
  if (l.rows < 0 || l.cols < 1 || l.cols > INT32_MAX || l.num_keys < 1 ||
      l.rows % l.num_keys != 0 || l.keys == nullptr || l.logits == nullptr ||
      l.temperature == nullptr || l.top_k.data == nullptr || l.top_p.data == nullptr ||
      l.min_p.data == nullptr || l.indices == nullptr || l.noisy_max == nullptr) {
    return cudaErrorInvalidValue;
  }
  const Params params{l.keys,
                      l.num_keys,
                      l.logits,
                      l.rows,
                      l.cols,
                      l.temperature,
                      l.temperature_per_row,
                      l.top_k,
                      l.top_p,
                      l.min_p,
                      l.offsets,
                      NoisyMaxEpilogue{l.indices, l.index_is_int64, l.noisy_max}};
  const int elem_bytes = FormatBytes(l.format);
  const FilterSpreadLayout layout =
      UsesFilterSpread(l.rows, l.k_bound, elem_bytes) ? PlanFilterSpread(l.rows, l.cols)
                                                      : FilterSpreadLayout{};
  // Aligned by hand: WorkspaceBytes gives 16 bytes more than the layout. A workspace sized for
  // another path (a symbolic shape's lowering: the split path's bound) takes the generic kernel.
  const uintptr_t start = reinterpret_cast<uintptr_t>(l.workspace);
  const uintptr_t aligned = (start + 15) / 16 * 16;
  if (layout.bytes != 0 && l.workspace != nullptr &&
      l.workspace_bytes >= layout.bytes + (aligned - start)) {
    const SpreadParams sp{params, layout, reinterpret_cast<unsigned char*>(aligned),
                          l.has_top_p};
    DispatchFormat(l.format, false, [&](auto f, auto) {
      constexpr Format kF = decltype(f)::value;
      if constexpr (kF != Format::kF64) LaunchSpread<kF>(sp, l.stream);
    });
    return cudaGetLastError();
  }
  // One block per row; a grid of at most 2^16 blocks loops over more rows.
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(l.rows, int64_t{1} << 16));
  DispatchFormat(l.format, false, [&](auto f, auto) {
    FilteredSampleKernel<decltype(f)::value><<<grid, kThreads, 0, l.stream>>>(params);
  });
  return cudaGetLastError();
}

cudaError_t LaunchTopPLevel(const TopPLevelLaunch& l) {
  if (l.rows == 0) return cudaSuccess;
  if (l.rows < 0 || l.cols < 1 || l.cols > INT32_MAX || l.shards < 1 || l.level < 0 ||
      l.level >= SplitLevels::kCount || l.format == Format::kF64 || l.logits == nullptr ||
      l.temperature.data == nullptr || l.top_p.data == nullptr || l.tops == nullptr ||
      (l.level > 0 && l.above == nullptr) || l.histogram == nullptr) {
    return cudaErrorInvalidValue;
  }
  Params params{};
  params.logits = l.logits;
  params.rows = l.rows;
  params.cols = l.cols;
  params.temperature = l.temperature.data;
  params.temperature_per_row = l.temperature.per_row;
  params.top_p = l.top_p;
  const SplitParams sp{params, l.tops, l.shards, l.above, nullptr, l.level, l.histogram};
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(l.rows, int64_t{1} << 16));
  DispatchFormat(l.format, false, [&](auto f, auto) {
    constexpr Format kF = decltype(f)::value;
    if constexpr (kF != Format::kF64) TopPLevelKernel<kF><<<grid, kThreads, 0, l.stream>>>(sp);
  });
  return cudaGetLastError();
}

cudaError_t LaunchSplitFilteredDraw(const SplitDrawLaunch& l) {
  if (l.rows == 0) return cudaSuccess;
  if (l.rows < 0 || l.cols < 1 || l.cols > INT32_MAX || l.num_keys < 1 ||
      l.rows % l.num_keys != 0 || l.shards < 1 || l.format == Format::kF64 ||
      l.keys == nullptr || l.logits == nullptr || l.temperature.data == nullptr ||
      l.top_p.data == nullptr || l.min_p.data == nullptr || l.offsets == nullptr ||
      l.tops == nullptr || (l.above == nullptr) != (l.counts == nullptr) ||
      l.indices == nullptr || l.noisy_max == nullptr) {
    return cudaErrorInvalidValue;
  }
  const Params params{l.keys,
                      l.num_keys,
                      l.logits,
                      l.rows,
                      l.cols,
                      l.temperature.data,
                      l.temperature.per_row,
                      RowParam<int32_t>{},
                      l.top_p,
                      l.min_p,
                      l.offsets,
                      NoisyMaxEpilogue{l.indices, l.index_is_int64, l.noisy_max}};
  const SplitParams sp{params, l.tops, l.shards, l.above, l.counts, 0, nullptr};
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(l.rows, int64_t{1} << 16));
  DispatchFormat(l.format, false, [&](auto f, auto) {
    constexpr Format kF = decltype(f)::value;
    if constexpr (kF != Format::kF64) {
      SplitFilteredDrawKernel<kF><<<grid, kThreads, 0, l.stream>>>(sp);
    }
  });
  return cudaGetLastError();
}

}  // namespace jax_argreduce
