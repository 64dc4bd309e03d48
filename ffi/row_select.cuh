// The CUDA row-select core: the k first elements of each row of a row-major [rows, cols] array
// in the order of order.h (the largest radix key first, the lowest column among equal keys),
// sorted, as values (bit for bit) and columns. Header-only: top_k_kernels.cu instantiates it.
//
// Levels (launch_plan.h, SelectPlan): level 0 splits each row into chunks, one block per chunk,
// each element's radix key held in registers; the block finds the chunk's k first elements by
// a radix select and writes them as candidates; every later level does the same over a chunk
// of candidates, until one block holds a row's candidates: it sorts its k winners and writes
// the values and columns. A row is read once; only k candidates per chunk travel.
//
// The select is exact, whatever the data: an item is the pair (radix key, column) packed into
// one integer, larger for earlier elements (column inverted), so no two tie. A block
//  1. bounds the k-th largest item from below (BlockBound: in each warp, the ceil(k / warps)-th
//     largest of its threads' maxima; the smallest over the warps): at least k items are not
//     below it, so every winner is among them (a few percent of a chunk of normal logits);
//  2. counts the top kDigitBits of those items in a shared histogram (one pass over the
//     registers, atomics for the few above the bound only) and finds the digit holding the k-th
//     largest (FindBucket);
//  3. in one more pass takes the items of larger digits as winners and moves the items of that
//     digit into a shared list (Compact), then selects among the list only (SelectThreshold:
//     the next digits, until one holds exactly as many as are still needed).
// Where the bucket is larger than the list (many equal keys), the rounds run over the
// registers instead (the same select, every item visited per round).
//
// Every kernel waits (GridDependencyWait, device.cuh) before its first global access.
#ifndef JAX_ARGREDUCE_FFI_ROW_SELECT_CUH_
#define JAX_ARGREDUCE_FFI_ROW_SELECT_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "device.cuh"
#include "launch_plan.h"
#include "order.h"

namespace jax_argreduce {
namespace row_select {

using namespace device;  // loads, PDL, launch helpers

inline constexpr int kDigitBits = 11;
// Level 0 blocks resident per SM (launch bounds: at most 85 registers a thread): a chunk is
// loaded in one go and then selected, so other blocks' loads must cover a block's select.
inline constexpr int kSelectMinBlocksPerSm = 3;
inline constexpr int kBins = 1 << kDigitBits;

// Candidates between levels: (radix key << 32) | (UINT32_MAX - column). Larger is earlier in
// the order; columns are below 2^31, so a candidate is never 0, which marks "none" (padding).
__device__ __forceinline__ uint64_t Candidate(uint32_t key, int64_t col) {
  return (static_cast<uint64_t>(key) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(col));
}
__device__ __forceinline__ int32_t CandidateColumn(uint64_t candidate) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(candidate));
}

// Where the last level writes: k values (the input's format) and k columns per row.
struct SelectOutput {
  void* values;
  void* indices;         // int32 or int64
  bool index_is_int64;
};

// Items of the threshold's digit a block selects among in shared memory (Compact).
#ifndef JAX_ARGREDUCE_SELECT_LIST_CAPACITY
#define JAX_ARGREDUCE_SELECT_LIST_CAPACITY 2048
#endif
#ifndef JAX_ARGREDUCE_SELECT_BOUND
#define JAX_ARGREDUCE_SELECT_BOUND 1
#endif
inline constexpr int kListCapacity = JAX_ARGREDUCE_SELECT_LIST_CAPACITY;

template <int kThreads>
struct SelectShared {
  alignas(16) uint32_t hist[kBins];
  uint64_t winners[kSelectMaxK];  // the block's winners as candidates (sorted at the last level)
  uint64_t list[kListCapacity > 0 ? kListCapacity : 1];  // the threshold digit's items
  typename cub::BlockScan<uint32_t, kThreads>::TempStorage scan;
  uint32_t bucket;     // a round's result: the digit holding the needed-th largest item,
  uint32_t above;      // the items counted in larger digits,
  uint32_t in_bucket;  // the items counted in that digit,
  uint32_t total;      // and every item counted
  uint32_t count;      // winners stored so far
  uint32_t listed;     // items in the list
  uint64_t warp_bound[kThreads / kWarpSize];  // BlockBound's
};

template <int kThreads>
__device__ __forceinline__ void ZeroHistogram(SelectShared<kThreads>& sh) {
  for (int i = threadIdx.x; i < kBins; i += kThreads) sh.hist[i] = 0;
}

// After the counts: finds the digit of the needed-th largest counted item (`needed` clamped to
// the count). Ends with a barrier; the results are in sh.bucket, sh.above, sh.in_bucket,
// sh.total.
template <int kThreads>
__device__ __forceinline__ void FindBucket(SelectShared<kThreads>& sh, uint32_t needed) {
  static_assert(kBins % kThreads == 0);
  constexpr int kPerThread = kBins / kThreads;
  static_assert(kPerThread % 4 == 0, "16-byte reads of a thread's bins");
  uint32_t local[kPerThread];
  uint32_t sum = 0;
#pragma unroll
  for (int j = 0; j < kPerThread; j += 4) {  // 16 bytes at once: no bank conflicts
    const uint4 v = reinterpret_cast<const uint4*>(sh.hist)[(threadIdx.x * kPerThread + j) / 4];
    local[j] = v.x;
    local[j + 1] = v.y;
    local[j + 2] = v.z;
    local[j + 3] = v.w;
    sum += v.x + v.y + v.z + v.w;
  }
  uint32_t inclusive, total;
  cub::BlockScan<uint32_t, kThreads>(sh.scan).InclusiveSum(sum, inclusive, total);
  needed = min(needed, total);
  // Digits grow with the thread: the items above this thread's digits are the later threads'.
  uint32_t running = total - inclusive;
#pragma unroll
  for (int j = kPerThread - 1; j >= 0; --j) {
    if (running < needed && running + local[j] >= needed) {  // exactly one thread, one j
      sh.bucket = threadIdx.x * kPerThread + j;
      sh.above = running;
      sh.in_bucket = local[j];
    }
    running += local[j];
  }
  if (threadIdx.x == 0) {
    sh.total = total;
    if (total == 0) sh.bucket = sh.above = sh.in_bucket = 0;
  }
  __syncthreads();
}

// One round of the select: counts the digits that `visit` reports (it calls count(digit) for
// each of this thread's items whose bits above the digit equal the prefix found so far), then
// FindBucket. Ends with a barrier.
template <int kThreads, class Visit>
__device__ __forceinline__ void SelectRound(SelectShared<kThreads>& sh, uint32_t needed,
                                            const Visit& visit) {
  ZeroHistogram(sh);
  __syncthreads();
  visit([&](uint32_t digit) { atomicAdd(&sh.hist[digit], 1u); });
  __syncthreads();
  FindBucket(sh, needed);
}

// A lower bound of the k-th largest of the block's items, from each thread's largest item
// `thread_max` (0: none): in each warp the ceil(k / warps)-th largest of its lanes' maxima
// (stored in sh.warp_bound); the block's bound is the smallest of the warps' (WarpBoundsMin,
// after a barrier). Each of those lanes holds an item not below its warp's bound, so at least
// k items are not below the block's. k > warps x 32 (or a warp with fewer items than its
// share): 0, no bound. All threads of the block call it.
template <int kThreads, class T>
__device__ __forceinline__ void BlockBound(SelectShared<kThreads>& sh, T thread_max, int k) {
  constexpr int kWarps = kThreads / kWarpSize;
  const int per_warp = (k + kWarps - 1) / kWarps;
  const int lane = threadIdx.x % kWarpSize;
  T bound = 0;
  if (per_warp <= kWarpSize) {  // uniform over the block
    int rank = 0;  // lanes whose (max, lane) comes before this lane's
#pragma unroll
    for (int j = 0; j < kWarpSize; ++j) {
      const T other = ShuffleIdx(thread_max, j);
      rank += other > thread_max || (other == thread_max && j < lane);
    }
    bound = rank == per_warp - 1 ? thread_max : T{0};
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      bound = max(bound, ShuffleXor(bound, offset, kWarpSize));
    }
  }
  if (lane == 0) sh.warp_bound[threadIdx.x / kWarpSize] = bound;
}

template <int kThreads>
__device__ __forceinline__ uint64_t WarpBoundsMin(const SelectShared<kThreads>& sh) {
  uint64_t bound = sh.warp_bound[0];
#pragma unroll
  for (int w = 1; w < kThreads / kWarpSize; ++w) bound = min(bound, sh.warp_bound[w]);
  return bound;
}

// Radix select over items of `bits` significant bits below `prefix` (the digits above bit
// `bits` already chosen): the `needed` largest of the items carrying the prefix (all distinct).
// Returns t: exactly min(needed, those items) of them are >= t (0 when there is none).
// `digits(hi, lo, prefix, count)` must call count((item >> lo) & mask) for each of the thread's
// items whose bits from hi up equal prefix.
template <int kThreads, class Digits>
__device__ __forceinline__ uint64_t SelectThreshold(SelectShared<kThreads>& sh, int bits,
                                                    uint32_t needed, const Digits& digits,
                                                    uint64_t prefix) {
  int hi = bits;
  for (bool first = true;; first = false) {
    const int lo = hi > kDigitBits ? hi - kDigitBits : 0;
    SelectRound(sh, needed, [&](auto count) { digits(hi, lo, prefix, count); });
    if (first) {
      if (sh.total == 0) return 0;
      needed = min(needed, sh.total);
    }
    const uint32_t in_bucket = sh.in_bucket;
    needed -= sh.above;
    prefix = (prefix << (hi - lo)) | sh.bucket;
    hi = lo;
    if (in_bucket == needed || hi == 0) return prefix << lo;  // distinct: 1 at hi == 0
  }
}

// The items a thread holds, as SelectWinners reads them: kCount items, at(i) the item (an
// integer of kBits significant bits, 0 for none), at_least(i, t) == at(i) >= t, top(i, shift)
// == at(i) >> shift for shift >= kTopShiftMin, max() the largest. Level 0 keeps 32-bit keys and
// forms the 64-bit items only where they are stored (ChunkItems); later levels hold the items.
template <int kItems, int kItemBits>
struct HeldItems {
  static constexpr int kCount = kItems;
  static constexpr int kBits = kItemBits;
  const uint64_t (&item)[kItems];
  __device__ __forceinline__ uint64_t at(int i) const { return item[i]; }
  __device__ __forceinline__ bool at_least(int i, uint64_t t) const { return item[i] >= t; }
  __device__ __forceinline__ uint32_t top(int i, int shift) const {
    return static_cast<uint32_t>(item[i] >> shift);
  }
  __device__ __forceinline__ uint64_t max() const {
    uint64_t m = 0;
#pragma unroll
    for (int i = 0; i < kItems; ++i) m = item[i] > m ? item[i] : m;
    return m;
  }
};

// The winners of a block (steps 1-3 of the file comment) into sh.winners, as candidates: the
// min(k, items) largest of the threads' `items` (all distinct), each stored as
// to_candidate(item). Returns how many (all threads); ends with a barrier.
template <int kThreads, class Items, class ToCandidate>
__device__ __forceinline__ uint32_t SelectWinners(SelectShared<kThreads>& sh, const Items& items,
                                                  uint32_t k, const ToCandidate& to_candidate) {
  constexpr int kItems = Items::kCount;
  if (threadIdx.x == 0) {
    sh.count = 0;
    sh.listed = 0;
  }
  ZeroHistogram(sh);
  if (JAX_ARGREDUCE_SELECT_BOUND) {
    BlockBound(sh, items.max(), static_cast<int>(k));
  } else if (threadIdx.x % kWarpSize == 0) {
    sh.warp_bound[threadIdx.x / kWarpSize] = 0;
  }
  __syncthreads();
  const uint64_t lower = max(WarpBoundsMin(sh), uint64_t{1});  // every winner is >= lower
  const int shift = Items::kBits - kDigitBits;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (items.at_least(i, lower)) atomicAdd(&sh.hist[items.top(i, shift)], 1u);
  }
  __syncthreads();
  FindBucket(sh, k);
  if (sh.total == 0) return 0;
  const uint32_t bucket = sh.bucket;
  const uint32_t in_bucket = sh.in_bucket;
  const uint32_t needed = min(k, sh.total) - sh.above;
  auto store = [&](uint64_t c) { sh.winners[atomicAdd(&sh.count, 1u)] = to_candidate(c); };
  uint64_t t;  // the winners: the items >= max(t, lower)
  if (in_bucket == needed) {
    t = static_cast<uint64_t>(bucket) << shift;
  } else if (in_bucket <= kListCapacity) {
    // The bucket's items to the list, the larger digits' to the winners; then the next digits
    // of the list alone.
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (items.at_least(i, lower)) {
        const uint32_t digit = items.top(i, shift);
        if (digit > bucket) {
          store(items.at(i));
        } else if (digit == bucket) {
          sh.list[atomicAdd(&sh.listed, 1u)] = items.at(i);
        }
      }
    }
    __syncthreads();
    const uint64_t in_list = SelectThreshold(sh, shift, needed,
                                             [&](int hi, int lo, uint64_t prefix, auto count) {
      const uint64_t mask = (uint64_t{1} << (hi - lo)) - 1u;
      for (uint32_t i = threadIdx.x; i < in_bucket; i += kThreads) {
        const uint64_t c = sh.list[i];
        if ((c >> hi) == prefix) count(static_cast<uint32_t>((c >> lo) & mask));
      }
    }, bucket);
    for (uint32_t i = threadIdx.x; i < in_bucket; i += kThreads) {
      if (sh.list[i] >= in_list) store(sh.list[i]);
    }
    __syncthreads();
    return sh.count;
  } else {  // more items of the bucket than the list holds (many equal keys): the registers
    t = SelectThreshold(sh, shift, needed, [&](int hi, int lo, uint64_t prefix, auto count) {
      const uint64_t mask = (uint64_t{1} << (hi - lo)) - 1u;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const uint64_t c = items.at(i);
        if (c >= lower && (c >> hi) == prefix) count(static_cast<uint32_t>((c >> lo) & mask));
      }
    }, bucket);
  }
  t = max(t, lower);
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (items.at_least(i, t)) store(items.at(i));
  }
  __syncthreads();
  return sh.count;
}

// The last level's epilogue: sorts the block's `count` winners (largest first) and writes the
// row's k values (gathered from the row: bit for bit) and columns; count == k here.
template <int kThreads, class Bits>
__device__ __forceinline__ void SortAndStore(SelectShared<kThreads>& sh, uint32_t count,
                                             const Bits* row_data, int64_t row, int32_t k,
                                             const SelectOutput& out) {
  uint32_t n = 1;
  while (n < count) n *= 2;
  for (uint32_t i = count + threadIdx.x; i < n; i += kThreads) sh.winners[i] = 0;
  __syncthreads();
  // Bitonic sort of n (a power of two <= kSelectMaxK) candidates, all distinct but the padding.
  for (uint32_t size = 2; size <= n; size *= 2) {
    for (uint32_t stride = size / 2; stride > 0; stride /= 2) {
      for (uint32_t i = threadIdx.x; i < n / 2; i += kThreads) {
        const uint32_t lo = 2 * i - (i & (stride - 1));
        const uint32_t hi = lo + stride;
        const bool descending = (lo & size) == 0;
        const uint64_t a = sh.winners[lo], b = sh.winners[hi];
        if ((a < b) == descending) {
          sh.winners[lo] = b;
          sh.winners[hi] = a;
        }
      }
      __syncthreads();
    }
  }
  for (int32_t i = threadIdx.x; i < k; i += kThreads) {
    const int32_t col = CandidateColumn(sh.winners[i]);
    const int64_t at = row * k + i;
    StoreIndex(out.indices, out.index_is_int64, at, col);
    static_cast<Bits*>(out.values)[at] = row_data[col];
  }
}

// An intermediate level's epilogue: the block's winners and then "none" in its k slots.
template <int kThreads>
__device__ __forceinline__ void StoreCandidates(const SelectShared<kThreads>& sh,
                                                uint32_t count, int32_t k, uint64_t* slots) {
  for (int32_t i = threadIdx.x; i < k; i += kThreads) {
    slots[i] = static_cast<uint32_t>(i) < count ? sh.winners[i] : 0;
  }
}

// Level 0's items: element i of the thread (column ((i / kVec) * kSelectThreads + tid) * kVec +
// i % kVec of the chunk, increasing with i) is (key << 17) | (0x10000 - column): larger for
// earlier elements, 0 for none (key 0: past the chunk's end). Compares split into the key and
// the column, so the passes stay on 32-bit registers.
template <int kE, int kVec, int kKeyBits>
struct ChunkItems {
  static constexpr int kCount = kE;
  static constexpr int kBits = kKeyBits + 17;
  const uint32_t (&key)[kE];
  int32_t tid_base;  // tid * kVec
  __device__ __forceinline__ uint32_t inv(int i) const {
    return 0x10000u - static_cast<uint32_t>((i / kVec) * kSelectThreads * kVec + tid_base +
                                            i % kVec);
  }
  __device__ __forceinline__ uint64_t at(int i) const {
    return key[i] == 0 ? 0 : (static_cast<uint64_t>(key[i]) << 17) | inv(i);
  }
  __device__ __forceinline__ bool at_least(int i, uint64_t t) const {
    const uint32_t t_key = static_cast<uint32_t>(t >> 17);
    return key[i] > t_key || (key[i] == t_key && inv(i) >= (static_cast<uint32_t>(t) & 0x1FFFFu));
  }
  __device__ __forceinline__ uint32_t top(int i, int shift) const { return key[i] >> (shift - 17); }
  __device__ __forceinline__ uint64_t max() const {
    uint32_t best = 0;
    int32_t best_i = 0;
#pragma unroll
    for (int i = kE - 1; i >= 0; --i) {  // the lowest column among equal keys
      if (key[i] >= best) {
        best = key[i];
        best_i = i;
      }
    }
    const uint32_t inv_best = 0x10000u - static_cast<uint32_t>(
        (best_i / kVec) * kSelectThreads * kVec + tid_base + best_i % kVec);
    return best == 0 ? 0 : (static_cast<uint64_t>(best) << 17) | inv_best;
  }
};

// Level 0: block b takes chunk b % chunks of row b / chunks (blocks loop when the grid is
// smaller): kSelectThreads x kE elements, thread t holding elements (u * kSelectThreads + t) *
// kVec + j of the chunk (16-byte vectors, u < kE / kVec, j < kVec). Writes the chunk's
// min(k, its length) first elements as candidates (slots of k per chunk), or, when the row is
// one chunk (kFinal), the row's sorted answer.
template <Format F, int kE, bool kFinal>
__global__ void __launch_bounds__(kSelectThreads, kSelectMinBlocksPerSm)
    ChunkSelectKernel(const typename FormatTraits<F>::Bits* x, int64_t rows, int32_t cols,
                      int32_t chunks, int32_t k, uint64_t* candidates, SelectOutput out) {
  using Bits = typename FormatTraits<F>::Bits;
  constexpr int kVec = static_cast<int>(sizeof(Vec) / sizeof(Bits));
  constexpr int kVecs = kE / kVec;
  static_assert(kE % kVec == 0, "whole vectors per thread");
  constexpr int kKeyBits = RadixTraits<F>::kBits;
  constexpr int32_t kChunk = kSelectThreads * kE;
  static_assert(kChunk <= 0xFFFF, "a column within the chunk fits 16 bits");
  __shared__ SelectShared<kSelectThreads> sh;
  TriggerDependents();
  GridDependencyWait();
  const int tid = threadIdx.x;
  for (int64_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const int64_t row = b / chunks;
    const int32_t first = static_cast<int32_t>(b % chunks) * kChunk;
    const int32_t len = min(kChunk, cols - first);
    const Bits* src = x + row * cols + first;
    // Radix keys; 0 (no element has it) past the chunk's end.
    uint32_t key[kE];
    if (len == kChunk && reinterpret_cast<uintptr_t>(src) % sizeof(Vec) == 0) {
      Vec buf[kVecs];
#pragma unroll
      for (int u = 0; u < kVecs; ++u) {
        buf[u] = LoadVec(reinterpret_cast<const Vec*>(src) + u * kSelectThreads + tid);
      }
#pragma unroll
      for (int u = 0; u < kVecs; ++u) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          key[u * kVec + j] = RadixKey<F>(reinterpret_cast<const Bits*>(&buf[u])[j]);
        }
      }
    } else {  // the row's last chunk, or a row not on a vector boundary: element by element
#pragma unroll
      for (int u = 0; u < kVecs; ++u) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const int32_t c = (u * kSelectThreads + tid) * kVec + j;
          key[u * kVec + j] = c < len ? RadixKey<F>(LoadBits(src + c)) : 0u;
        }
      }
    }
    const ChunkItems<kE, kVec, kKeyBits> items{key, tid * kVec};
    auto to_candidate = [&](uint64_t c) {
      return Candidate(static_cast<uint32_t>(c >> 17),
                       first + 0x10000 - static_cast<int32_t>(c & 0x1FFFFu));
    };
    const uint32_t count = SelectWinners(sh, items, static_cast<uint32_t>(k), to_candidate);
    if constexpr (kFinal) {
      SortAndStore(sh, count, x + row * cols, row, k, out);
    } else {
      StoreCandidates(sh, count, k, candidates + b * k);
    }
    __syncthreads();  // sh is reused by the next chunk
  }
}

// Levels after the first: block b takes chunk b % chunks of row b / chunks of the candidates
// (`items` per row, kCandidateChunk per chunk, kCandidateItems per thread: item u *
// kCandidateThreads + t), and writes its min(k, candidates) largest as candidates, or, at the
// last level (kFinal, one chunk per row), the row's sorted answer.
template <Format F, bool kFinal>
__global__ void __launch_bounds__(kCandidateThreads)
    CandidateSelectKernel(const uint64_t* in, int64_t rows, int32_t items, int32_t chunks,
                          int32_t k, uint64_t* candidates,
                          const typename FormatTraits<F>::Bits* x, int32_t cols,
                          SelectOutput out) {
  constexpr int kBitsTotal = RadixTraits<F>::kBits + 32;
  __shared__ SelectShared<kCandidateThreads> sh;
  TriggerDependents();
  GridDependencyWait();
  const int tid = threadIdx.x;
  for (int64_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const int64_t row = b / chunks;
    const int32_t first = static_cast<int32_t>(b % chunks) * static_cast<int32_t>(kCandidateChunk);
    const int32_t len = min(static_cast<int32_t>(kCandidateChunk), items - first);
    const uint64_t* src = in + row * items + first;
    uint64_t item[kCandidateItems];
#pragma unroll
    for (int u = 0; u < kCandidateItems; ++u) {
      const int32_t i = u * kCandidateThreads + tid;
      item[u] = i < len ? src[i] : 0;  // written by the previous level (plain loads)
    }
    const HeldItems<kCandidateItems, kBitsTotal> items{item};
    const uint32_t count = SelectWinners(sh, items, static_cast<uint32_t>(k),
                                         [](uint64_t c) { return c; });
    if constexpr (kFinal) {
      SortAndStore(sh, count, x + row * cols, row, k, out);
    } else {
      StoreCandidates(sh, count, k, candidates + b * k);
    }
    __syncthreads();
  }
}

}  // namespace row_select
}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_ROW_SELECT_CUH_
