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
// The select (SelectThreshold) is exact, whatever the data: an item is the pair (radix key,
// column) packed into one integer, larger for earlier elements (column inverted), so no two
// tie; the block counts the items' digits (kDigitBits at a time, from the top) in a shared
// histogram, finds the digit holding the k-th largest, and goes on within it until that digit
// holds exactly as many as are still needed (or its bits are exhausted). The winners are then
// exactly those not below the threshold so found. Level 0 counts the key's digits first, on
// 32-bit registers, so the common case (few equal keys near the threshold) ends after two or
// three rounds over the key; ties at the threshold take a round or two over the columns.
// (A bound from the threads' maxima that skips most elements, and a shared list of the
// threshold digit's items, measured slower at every shape: NOTES.md tries 75-76.)
//
// What an element ranks by is a key policy (LogitKeys below: the element's own radix key, top_k's
// order); another policy may rank each row by a 32-bit key of a per-row function of the element
// (the filtered sampler's z = logit / T, sample_topk.cuh), while the values written are still
// the elements' bits. top_k's kernels keep their names and code; the keyed kernels are separate
// instantiations of the same bodies.
//
// Every kernel waits (GridDependencyWait, device.cuh) before its first global access.
#ifndef JAX_ARGREDUCE_FFI_ROW_SELECT_CUH_
#define JAX_ARGREDUCE_FFI_ROW_SELECT_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>

#include <cub/block/block_scan.cuh>

#include "device.cuh"
#include "launch_plan.h"
#include "order.h"
#include "top_k_kernels.h"

namespace jax_argreduce {
namespace row_select {

using namespace device;  // loads, PDL, launch helpers

inline constexpr int kDigitBits = 11;
inline constexpr int kBins = 1 << kDigitBits;

// Candidates between levels: (radix key << 32) | (UINT32_MAX - column). Larger is earlier in
// the order; columns are below 2^31, so a candidate is never 0, which marks "none" (padding).
__device__ __forceinline__ uint64_t Candidate(uint32_t key, int64_t col) {
  return (static_cast<uint64_t>(key) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(col));
}
__device__ __forceinline__ int32_t CandidateColumn(uint64_t candidate) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(candidate));
}

// A key policy: kFormat (the elements'), kBits (the keys' significant bits: <= 32, none of its
// keys 0, which marks padding), and ForRow(row) (device; read after GridDependencyWait), whose
// result maps an element's bits to its key. Larger keys come first; equal keys by column.
// LogitKeys: top_k's, the element's own radix key (order.h, format-width).
template <Format F>
struct LogitKeys {
  static constexpr Format kFormat = F;
  static constexpr int kBits = RadixTraits<F>::kBits;
  struct Row {
    __device__ __forceinline__ uint32_t operator()(typename FormatTraits<F>::Bits bits) const {
      return RadixKey<F>(bits);
    }
  };
  __device__ __forceinline__ Row ForRow(int64_t) const { return Row{}; }
};

// Where the last level writes: k values (the input's format) and k columns per row.
struct SelectOutput {
  void* values;
  void* indices;         // int32 or int64
  bool index_is_int64;
};

template <int kThreads>
struct SelectShared {
  uint32_t hist[kBins];
  uint64_t winners[kSelectMaxK];  // the block's winners as candidates (sorted at the last level)
  typename cub::BlockScan<uint32_t, kThreads>::TempStorage scan;
  uint32_t bucket;     // a round's result: the digit holding the needed-th largest item,
  uint32_t above;      // the items counted in larger digits,
  uint32_t in_bucket;  // the items counted in that digit,
  uint32_t total;      // and every item counted
  uint32_t count;      // winners stored so far
};

// One round of the select: counts the digits that `visit` reports (it calls count(digit) for
// each of this thread's items whose bits above the digit equal the prefix found so far), then
// finds the digit of the needed-th largest counted item (`needed` clamped to the count). Ends
// with a barrier; the results are in sh.bucket, sh.above, sh.in_bucket, sh.total.
template <int kThreads, class Visit>
__device__ __forceinline__ void SelectRound(SelectShared<kThreads>& sh, uint32_t needed,
                                            const Visit& visit) {
  static_assert(kBins % kThreads == 0);
  constexpr int kPerThread = kBins / kThreads;
  for (int i = threadIdx.x; i < kBins; i += kThreads) sh.hist[i] = 0;
  __syncthreads();
  visit([&](uint32_t digit) { atomicAdd(&sh.hist[digit], 1u); });
  __syncthreads();
  uint32_t local[kPerThread];
  uint32_t sum = 0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    local[j] = sh.hist[threadIdx.x * kPerThread + j];
    sum += local[j];
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

// The result of a select: items >= t are the needed largest (exact), or, where the digits ran
// out on a value several items share (not exact: level 0's keys, before their columns), the
// items > t and `needed` of the items equal to t.
struct Threshold {
  uint64_t t;       // 0: there was no item
  uint32_t needed;  // not exact: how many of the items equal to t are still needed
  bool exact;
};

// Radix select over items of `bits` significant bits, the `needed` largest (clamped to the
// number of items). `digits(hi, lo, prefix, count)` must call count((item >> lo) & mask) for
// each of the thread's items that are not 0 (none) and whose bits from hi up equal prefix.
template <int kThreads, class Digits>
__device__ __forceinline__ Threshold SelectThreshold(SelectShared<kThreads>& sh, int bits,
                                                     uint32_t needed, const Digits& digits) {
  int hi = bits;
  uint64_t prefix = 0;
  for (bool first = true;; first = false) {
    const int lo = hi > kDigitBits ? hi - kDigitBits : 0;
    SelectRound(sh, needed, [&](auto count) { digits(hi, lo, prefix, count); });
    if (first) {
      if (sh.total == 0) return {0, 0, true};
      needed = min(needed, sh.total);
    }
    const uint32_t in_bucket = sh.in_bucket;
    needed -= sh.above;
    prefix = (prefix << (hi - lo)) | sh.bucket;
    hi = lo;
    if (in_bucket == needed) return {prefix << lo, 0, true};
    if (hi == 0) return {prefix, needed, false};
  }
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

// Level 0: block b takes chunk b % chunks of row b / chunks (blocks loop when the grid is
// smaller): kSelectThreads x kE elements, thread t holding elements (u * kSelectThreads + t) *
// kVec + j of the chunk (16-byte vectors, u < kE / kVec, j < kVec). Writes the chunk's
// min(k, its length) first elements as candidates (slots of k per chunk), or, when the row is
// one chunk (kFinal), the row's sorted answer.
// The body of the level-0 kernels (below), after their GridDependencyWait; keys: the policy.
template <int kE, bool kFinal, class Keys>
__device__ __forceinline__ void ChunkSelectRows(
    SelectShared<kSelectThreads>& sh, const Keys& keys,
    const typename FormatTraits<Keys::kFormat>::Bits* x, int64_t rows, int32_t cols,
    int32_t chunks, int32_t k, uint64_t* candidates, const SelectOutput& out) {
  using Bits = typename FormatTraits<Keys::kFormat>::Bits;
  constexpr int kVec = static_cast<int>(sizeof(Vec) / sizeof(Bits));
  constexpr int kVecs = kE / kVec;
  static_assert(kE % kVec == 0, "whole vectors per thread");
  constexpr int kKeyBits = Keys::kBits;
  static_assert(kKeyBits <= 32, "keys in 32-bit registers");
  constexpr int32_t kChunk = kSelectThreads * kE;
  static_assert(kChunk <= 0xFFFF, "a column within the chunk fits 16 bits");
  const int tid = threadIdx.x;
  for (int64_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const int64_t row = b / chunks;
    const int32_t first = static_cast<int32_t>(b % chunks) * kChunk;
    const int32_t len = min(kChunk, cols - first);
    const Bits* src = x + row * cols + first;
    const auto key_of = keys.ForRow(row);
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
          key[u * kVec + j] = key_of(reinterpret_cast<const Bits*>(&buf[u])[j]);
        }
      }
    } else {  // the row's last chunk, or a row not on a vector boundary: element by element
#pragma unroll
      for (int u = 0; u < kVecs; ++u) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const int32_t c = (u * kSelectThreads + tid) * kVec + j;
          key[u * kVec + j] = c < len ? key_of(LoadBits(src + c)) : 0u;
        }
      }
    }
    auto column = [&](int i) { return ((i / kVec) * kSelectThreads + tid) * kVec + i % kVec; };
    // The threshold over the keys; where it ends on a key that more elements share than are
    // still needed, the lowest columns among those (their 0x10000 - column, 17 bits, never 0).
    const Threshold by_key = SelectThreshold(sh, kKeyBits, static_cast<uint32_t>(k),
                                             [&](int hi, int lo, uint64_t prefix, auto count) {
      const uint32_t mask = (1u << (hi - lo)) - 1u;
#pragma unroll
      for (int i = 0; i < kE; ++i) {
        if (key[i] != 0 && (static_cast<uint64_t>(key[i]) >> hi) == prefix) {
          count((key[i] >> lo) & mask);
        }
      }
    });
    const uint32_t t_key = static_cast<uint32_t>(by_key.t);
    uint32_t t_col = 0;  // of the elements whose key is t_key, those with inv >= t_col
    if (!by_key.exact) {
      t_col = static_cast<uint32_t>(SelectThreshold(sh, 17, by_key.needed,
                                                    [&](int hi, int lo, uint64_t prefix,
                                                        auto count) {
        const uint32_t mask = (1u << (hi - lo)) - 1u;
#pragma unroll
        for (int i = 0; i < kE; ++i) {
          const uint32_t inv = 0x10000u - static_cast<uint32_t>(column(i));
          if (key[i] == t_key && (inv >> hi) == prefix) count((inv >> lo) & mask);
        }
      }).t);
    }
    if (tid == 0) sh.count = 0;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kE; ++i) {
      const uint32_t inv = 0x10000u - static_cast<uint32_t>(column(i));
      if (key[i] > t_key || (key[i] == t_key && inv >= t_col)) {
        sh.winners[atomicAdd(&sh.count, 1u)] = Candidate(key[i], first + column(i));
      }
    }
    __syncthreads();
    const uint32_t count = sh.count;
    if constexpr (kFinal) {
      SortAndStore(sh, count, x + row * cols, row, k, out);
    } else {
      StoreCandidates(sh, count, k, candidates + b * k);
    }
    __syncthreads();  // sh is reused by the next chunk
  }
}

// top_k's level 0 (LogitKeys).
template <Format F, int kE, bool kFinal>
__global__ void __launch_bounds__(kSelectThreads)
    ChunkSelectKernel(const typename FormatTraits<F>::Bits* x, int64_t rows, int32_t cols,
                      int32_t chunks, int32_t k, uint64_t* candidates, SelectOutput out) {
  __shared__ SelectShared<kSelectThreads> sh;
  TriggerDependents();
  GridDependencyWait();
  ChunkSelectRows<kE, kFinal>(sh, LogitKeys<F>{}, x, rows, cols, chunks, k, candidates, out);
}

// Level 0 ranked by another key policy.
template <class Keys, int kE, bool kFinal>
__global__ void __launch_bounds__(kSelectThreads)
    KeyedChunkSelectKernel(Keys keys, const typename FormatTraits<Keys::kFormat>::Bits* x,
                           int64_t rows, int32_t cols, int32_t chunks, int32_t k,
                           uint64_t* candidates, SelectOutput out) {
  __shared__ SelectShared<kSelectThreads> sh;
  TriggerDependents();
  GridDependencyWait();
  ChunkSelectRows<kE, kFinal>(sh, keys, x, rows, cols, chunks, k, candidates, out);
}

// Levels after the first: block b takes chunk b % chunks of row b / chunks of the candidates
// (`items` per row, kCandidateChunk per chunk, kCandidateItems per thread: item u *
// kCandidateThreads + t), and writes its min(k, candidates) largest as candidates, or, at the
// last level (kFinal, one chunk per row), the row's sorted answer.
// (The body of the kernels below, after their GridDependencyWait: candidates of kKeyBits-bit
// keys.)
template <int kKeyBits, bool kFinal, class Bits>
__device__ __forceinline__ void CandidateSelectRows(SelectShared<kCandidateThreads>& sh,
                                                    const uint64_t* in, int64_t rows,
                                                    int32_t items, int32_t chunks, int32_t k,
                                                    uint64_t* candidates, const Bits* x,
                                                    int32_t cols, const SelectOutput& out) {
  constexpr int kBitsTotal = kKeyBits + 32;
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
    const uint64_t t = SelectThreshold(sh, kBitsTotal, static_cast<uint32_t>(k),
                                       [&](int hi, int lo, uint64_t prefix, auto count) {
      const uint64_t mask = (uint64_t{1} << (hi - lo)) - 1u;
#pragma unroll
      for (int u = 0; u < kCandidateItems; ++u) {
        if (item[u] != 0 && (hi >= 64 ? 0 : item[u] >> hi) == prefix) {
          count(static_cast<uint32_t>((item[u] >> lo) & mask));
        }
      }
    }).t;  // exact: candidates are distinct
    if (tid == 0) sh.count = 0;
    __syncthreads();
    if (t != 0) {
#pragma unroll
      for (int u = 0; u < kCandidateItems; ++u) {
        if (item[u] >= t) sh.winners[atomicAdd(&sh.count, 1u)] = item[u];
      }
    }
    __syncthreads();
    const uint32_t count = sh.count;
    if constexpr (kFinal) {
      SortAndStore(sh, count, x + row * cols, row, k, out);
    } else {
      StoreCandidates(sh, count, k, candidates + b * k);
    }
    __syncthreads();
  }
}

// top_k's later levels (LogitKeys).
template <Format F, bool kFinal>
__global__ void __launch_bounds__(kCandidateThreads)
    CandidateSelectKernel(const uint64_t* in, int64_t rows, int32_t items, int32_t chunks,
                          int32_t k, uint64_t* candidates,
                          const typename FormatTraits<F>::Bits* x, int32_t cols,
                          SelectOutput out) {
  __shared__ SelectShared<kCandidateThreads> sh;
  TriggerDependents();
  GridDependencyWait();
  CandidateSelectRows<RadixTraits<F>::kBits, kFinal>(sh, in, rows, items, chunks, k, candidates,
                                                     x, cols, out);
}

// Later levels of another key policy (its key width; the candidates carry the keys).
template <class Keys, bool kFinal>
__global__ void __launch_bounds__(kCandidateThreads)
    KeyedCandidateSelectKernel(const uint64_t* in, int64_t rows, int32_t items, int32_t chunks,
                               int32_t k, uint64_t* candidates,
                               const typename FormatTraits<Keys::kFormat>::Bits* x,
                               int32_t cols, SelectOutput out) {
  __shared__ SelectShared<kCandidateThreads> sh;
  TriggerDependents();
  GridDependencyWait();
  CandidateSelectRows<Keys::kBits, kFinal>(sh, in, rows, items, chunks, k, candidates, x, cols,
                                           out);
}

// ---------------------------------------------------------------------------------------------
// Host: every level of a plan (launch_plan.h, PlanTopK), each with programmatic dependent launch
// where `pdl` (the next level's blocks are resident while the last ones of this level finish).

// Compute capability major of `device`, read once per device (PDL needs 9).
inline cudaError_t CcMajor(int device, int* major) {
  static std::mutex mu;
  static std::map<int, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(device);
  if (it == cache.end()) {
    int value = 0;
    const cudaError_t err =
        cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor, device);
    if (err != cudaSuccess) return err;
    it = cache.emplace(device, value).first;
  }
  *major = it->second;
  return cudaSuccess;
}

// Blocks of one level: one per (row, chunk), at most what a grid holds (the kernels loop).
inline int64_t SelectGrid(int64_t rows, int64_t chunks) {
  return std::min<int64_t>(rows * chunks, int64_t{0x7FFFFFFF});
}

// One select: rows x cols elements at x (Keys::kFormat), the k first of each row ranked by
// `keys`, written to `out`; `workspace`: the plan's bytes, 16-byte aligned. LogitKeys launches
// top_k's own kernels; any other policy the keyed ones, which take it as their first argument.
template <class Keys>
cudaError_t LaunchSelectLevels(const Keys& keys, const SelectPlan& plan, cudaStream_t stream,
                               bool pdl, const void* x_data, int64_t rows, int32_t cols,
                               int32_t k, char* workspace, const SelectOutput& out) {
  constexpr Format F = Keys::kFormat;
  constexpr bool kLogit = std::is_same_v<Keys, LogitKeys<F>>;
  using Bits = typename FormatTraits<F>::Bits;
  const Bits* x = static_cast<const Bits*>(x_data);
  const SelectLevel& first = plan.level[0];
  uint64_t* first_out = reinterpret_cast<uint64_t*>(workspace + first.out_offset);
  const bool one_level = plan.levels == 1;
  auto level0 = [&](auto final_tag, auto e_tag) {
    constexpr bool kFinal = decltype(final_tag)::value;
    constexpr int kE = decltype(e_tag)::value;
    const int64_t grid = SelectGrid(rows, first.chunks);
    const int32_t chunks = static_cast<int32_t>(first.chunks);
    if constexpr (kLogit) {
      return LaunchEx(ChunkSelectKernel<F, kE, kFinal>, grid, kSelectThreads, stream, pdl, x,
                      rows, cols, chunks, k, first_out, out);
    } else {
      return LaunchEx(KeyedChunkSelectKernel<Keys, kE, kFinal>, grid, kSelectThreads, stream,
                      pdl, keys, x, rows, cols, chunks, k, first_out, out);
    }
  };
  auto level0_e = [&](auto e_tag) {
    return one_level ? level0(std::true_type{}, e_tag) : level0(std::false_type{}, e_tag);
  };
  cudaError_t err = cudaErrorInvalidValue;
  switch (plan.elements_per_thread) {
    case 8: err = level0_e(std::integral_constant<int, 8>{}); break;
    case 16: err = level0_e(std::integral_constant<int, 16>{}); break;
    case 32: err = level0_e(std::integral_constant<int, 32>{}); break;
    default: return cudaErrorInvalidConfiguration;
  }
  if (err != cudaSuccess) return err;
  for (int i = 1; i < plan.levels; ++i) {
    const SelectLevel& level = plan.level[i];
    const bool last = i == plan.levels - 1;
    // (if constexpr: top_k's calls instantiate no keyed kernel, nor the sampler's a plain one)
    auto kernel = [&] {
      if constexpr (kLogit) {
        return last ? CandidateSelectKernel<F, true> : CandidateSelectKernel<F, false>;
      } else {
        return last ? KeyedCandidateSelectKernel<Keys, true>
                    : KeyedCandidateSelectKernel<Keys, false>;
      }
    }();
    err = LaunchEx(kernel, SelectGrid(rows, level.chunks), kCandidateThreads, stream, pdl,
                   reinterpret_cast<const uint64_t*>(workspace + level.in_offset), rows,
                   static_cast<int32_t>(level.items), static_cast<int32_t>(level.chunks), k,
                   reinterpret_cast<uint64_t*>(workspace + level.out_offset), x, cols, out);
    if (err != cudaSuccess) return err;
  }
  return cudaGetLastError();
}

// A top_k launch (top_k_kernels.h) checked, planned (PlanTopK) and run with the key policy
// `keys_for(format)` (format: a std::integral_constant<Format, ...>) of its format: top_k's
// LogitKeys, or another order (the split vocabulary's candidates, sample_topk_kernels.cu).
template <class KeysFor>
cudaError_t LaunchTopKWith(const TopKLaunch& launch, const KeysFor& keys_for) {
  if (launch.rows == 0) return cudaSuccess;
  if (launch.rows < 0 || launch.cols < 1 || launch.cols > INT32_MAX || launch.k < 1 ||
      launch.k > launch.cols || launch.k > kSelectMaxK || launch.format == Format::kF64) {
    return cudaErrorInvalidValue;
  }
  const SelectPlan plan =
      PlanTopK(launch.rows, launch.cols, launch.k, FormatBytes(launch.format));
  // XLA buffers are aligned; align by hand anyway rather than trust it (WorkspaceBytes: +16).
  const uintptr_t raw = reinterpret_cast<uintptr_t>(launch.workspace);
  const uintptr_t aligned = (raw + 15) & ~uintptr_t{15};
  if (plan.workspace_bytes > 0 &&
      plan.workspace_bytes + (aligned - raw) > launch.workspace_bytes) {
    return cudaErrorInvalidValue;
  }
  int major = 0;
  const cudaError_t err = CcMajor(launch.device, &major);
  if (err != cudaSuccess) return err;
  const bool pdl = launch.options.pdl && major >= 9;
  char* workspace = reinterpret_cast<char*>(aligned);
  const SelectOutput out{launch.values, launch.indices, launch.index_is_int64};
  auto levels = [&](auto format) {
    return LaunchSelectLevels(keys_for(format), plan, launch.stream, pdl, launch.x, launch.rows,
                              static_cast<int32_t>(launch.cols), static_cast<int32_t>(launch.k),
                              workspace, out);
  };
  switch (launch.format) {
    case Format::kF16: return levels(std::integral_constant<Format, Format::kF16>{});
    case Format::kBF16: return levels(std::integral_constant<Format, Format::kBF16>{});
    case Format::kF32: return levels(std::integral_constant<Format, Format::kF32>{});
    case Format::kF64: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace row_select
}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_ROW_SELECT_CUH_
