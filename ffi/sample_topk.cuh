// The filtered sampler's top-k path on CUDA (SPEC §1f), rows whose top_k is at most a bound k:
// the row-select core (row_select.cuh) ranks each row by z = logit * (1/T) (ScaledKeys below)
// and writes its k first tokens, in z's order, as logit bits and columns; the finish kernel
// (SampleTopKKernel) then applies the row's own top-k, top-p and min-p to that prefix and draws
// among what is kept. Header-only: sample_topk_kernels.cu instantiates it. Same results as the
// CPU's FilteredSamplerCpu<F>::SampleRow (cpu_sample.h, SampleTopK), bit for bit: the same Row
// (GumbelKeyPolicy<F>::ForRow), the same scaled logits, masses and noisy keys (sample_filter.h),
// and only order-independent reductions (integer sums and minima, the total order of order.h).
//
// Every kernel waits (GridDependencyWait, device.cuh) before its first global access.
#ifndef JAX_ARGREDUCE_FFI_SAMPLE_TOPK_CUH_
#define JAX_ARGREDUCE_FFI_SAMPLE_TOPK_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "categorical.h"
#include "device.cuh"
#include "exact_math.h"
#include "order.h"
#include "row_param.h"
#include "row_select.cuh"
#include "sample_filter.h"

namespace jax_argreduce {
namespace sample_topk {

using namespace device;  // PDL, BlockReduce

// The select's key policy (row_select.cuh): z's float32 radix key (order.h: NaN first, -0 ==
// +0), whatever the logits' format, so that logits that differ but round to one z tie and go
// to the lowest column, as on the CPU (cpu_sample.h, SortKey). T == 0 rows rank by the logit
// itself (z = logit, widened exactly): their first candidate is the row's argmax, which is
// their sample.
template <Format F>
struct ScaledKeys {
  static constexpr Format kFormat = F;
  static constexpr int kBits = 32;  // never 0 (order.h), so no key is "none"
  using Policy = GumbelKeyPolicy<F>;
  static_assert(std::is_same_v<typename Policy::Noise, float>, "float32 z (not float64)");

  Policy policy;  // only the temperature is read (ForRow's other loads are dead)

  struct Row {
    typename Policy::Row r;
    __device__ __forceinline__ uint32_t operator()(typename FormatTraits<F>::Bits bits) const {
      const float z = r.greedy ? categorical_detail::Widen<F>(bits) : r.Scaled(bits);
      return RadixKey<Format::kF32>(gumbel_detail::AsBits(z));
    }
  };
  __device__ __forceinline__ Row ForRow(int64_t row) const { return Row{policy.ForRow(row)}; }
};

// A split vocabulary's candidates (stage 1, jax_argreduce/_sharding.py split_filtered_sample;
// the CPU's FilteredSamplerCpu<F>::RankKey): ScaledKeys' order from the temperature alone, no
// key and no counters (the candidates carry logits; their noise is drawn after the exchange).
template <Format F>
struct TemperatureKeys {
  static constexpr Format kFormat = F;
  static constexpr int kBits = ScaledKeys<F>::kBits;
  RowParam<float> temperature;
  __device__ __forceinline__ typename ScaledKeys<F>::Row ForRow(int64_t row) const {
    return {GumbelKeyPolicy<F>::Scaling(temperature[row])};
  }
};

// The finish kernel's arguments besides the policy (keys, temperature, offsets).
struct FinishArgs {
  const void* values;        // [rows, k] logit bits, in z's order (the select's output)
  const int32_t* columns;    // [rows, k]
  int64_t rows;
  int32_t k;                 // candidates per row (the select's k)
  RowParam<int32_t> top_k;   // clamped to [1, k]
  RowParam<float> top_p;     // >= 1 (or NaN): no top-p
  RowParam<float> min_p;     // <= 0 (or NaN): no min-p
  NoisyMaxEpilogue out;      // index and noisy maximum per row
  // kColumns: [rows, cols] int32, the global column of each element of the select's input (a
  // split vocabulary's candidate row, cpu_sample.h): a candidate's noise counter and index.
  const int32_t* global_columns;
  int32_t cols;
};

// One block of kThreads per row (blocks loop over rows), thread t holding candidates t *
// kItems + j (j < kItems; kThreads * kItems >= k), the block's order the candidates' order.
// Per row, after the select: z_max is the first candidate's z (NaN: the first NaN's column
// wins, as argmax; -inf: every candidate is -inf, the first is drawn). Then, all thresholds
// being prefixes of the candidates (sample_filter.h), the kept count is the first position
// that some filter drops (top-p: the masses before it, an exclusive block scan of uint64
// fixed-point masses, are not below p of the k_r candidates' total; min-p: its mass relative
// to the top is below min_p), at least 1; a block minimum, so exactly CPU's sequential walk.
// The draw is the block's maximum of (noisy key, lowest column) over the kept ones (order.h's
// total order: any reduction tree gives the CPU's left-to-right answer). kColumns: every column
// the select wrote (a position in the candidate row) stands for its global column, in the
// noise and the index (the positions' order among equal z is the global columns').
template <Format F, int kThreads, int kItems, bool kColumns>
__global__ void __launch_bounds__(kThreads)
    SampleTopKKernel(GumbelKeyPolicy<F> policy, FinishArgs a) {
  using Policy = GumbelKeyPolicy<F>;
  using Bits = typename FormatTraits<F>::Bits;
  using Key = typename Policy::Key;
  using Pair = ArgPair<Key>;
  using Scan = cub::BlockScan<uint64_t, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int32_t kept_shared;
  TriggerDependents();
  GridDependencyWait();
  const int tid = threadIdx.x;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const typename Policy::Row r = policy.ForRow(row);
    const Bits* values = static_cast<const Bits*>(a.values) + row * a.k;
    const int32_t* columns = a.columns + row * a.k;
    const auto column = [&](int32_t i) {
      if constexpr (kColumns) {
        return a.global_columns[row * a.cols + columns[i]];
      } else {
        return columns[i];
      }
    };
    // Every thread reads the first candidate (one line for the block): the branches below are
    // uniform over the block, so its barriers are reached by all or none.
    const Bits top_bits = values[0];
    const int32_t top_col = column(0);
    if (r.greedy) {  // T == 0: the argmax, its key the logit's (as the unfiltered sampler)
      if (tid == 0) {
        a.out(row, Pair{Policy::Row::KeyOf(categorical_detail::Widen<F>(top_bits)), top_col},
              values);
      }
      continue;
    }
    const float z_max = r.Scaled(top_bits);
    if (z_max != z_max || z_max == -INFINITY) {
      if (tid == 0) a.out(row, Pair{NoisyKey<F>(r, z_max, top_col), top_col}, values);
      continue;
    }
    const int32_t k = max(1, min(a.top_k[row], a.k));
    const float p = a.top_p[row];
    const float min_p = a.min_p[row];
    float z[kItems];
    int32_t col[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int32_t i = tid * kItems + j;
      z[j] = i < k ? r.Scaled(values[i]) : 0.0f;
      col[j] = i < k ? column(i) : 0;
    }
    // The first position a filter drops (k: none).
    int32_t drop = k;
    if (p < 1.0f) {  // RowFilters::HasTopP; the condition is uniform over the block
      uint64_t mass[kItems], before[kItems], total;
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        mass[j] = tid * kItems + j < k ? MassFixed(RelativeMass(z[j], z_max)) : 0u;
      }
      Scan(scan).ExclusiveSum(mass, before, total);
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        const int32_t i = tid * kItems + j;
        if (i < k && !MassBelow(before[j], p, total)) drop = min(drop, i);
      }
    }
    if (min_p > 0.0f) {  // RowFilters::HasMinP
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        const int32_t i = tid * kItems + j;
        if (i < k && RelativeMass(z[j], z_max) < min_p) drop = min(drop, i);
      }
    }
    // A minimum over the block (its barriers also end the scan's use of `scan`), broadcast.
    drop = BlockReduce<kThreads>(drop, [](int32_t u, int32_t v) { return min(u, v); }, k);
    if (tid == 0) kept_shared = max(drop, 1);
    __syncthreads();
    const int32_t kept = kept_shared;
    Pair best = Pair::Identity();
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (tid * kItems + j < kept) {
        best = Combine(best, Pair{NoisyKey<F>(r, z[j], col[j]), col[j]});
      }
    }
    // Ends with a barrier: kept_shared and `scan` are free for the next row.
    best = BlockReduce<kThreads>(best, CombinePairs{}, Pair::Identity());
    if (tid == 0) a.out(row, best, values);
  }
}

}  // namespace sample_topk
}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_SAMPLE_TOPK_CUH_
