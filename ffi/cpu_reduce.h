// The row-reduce core on the CPU: the best (key, index) pair of each row for any key policy,
// finished by any epilogue (reduce_hooks.h), with the same semantics as the CUDA kernels.
// Policies whose key depends on the bits alone take a SIMD scan (cpu_row_reduce.h); others
// visit every element once in column order (strict '>' keeps the lowest index on ties).
// Key policies that are not kBitsOnly provide Row::Visit<kN>(elements, first_col, best_key,
// best_index) (categorical.h).
#ifndef JAX_ARGREDUCE_FFI_CPU_REDUCE_H_
#define JAX_ARGREDUCE_FFI_CPU_REDUCE_H_

#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#endif

#include "cpu_row_reduce.h"
#include "order.h"
#include "reduce_hooks.h"

namespace jax_argreduce {

template <class Policy>
ArgPair<typename Policy::Key> ScanRowCpu(const typename Policy::Bits* row, int64_t cols,
                                         const typename Policy::Row& key_of) {
  if constexpr (Policy::kBitsOnly) {
    const int64_t index = ArgReduceRowCpu<Policy::kFormat, Policy::kIsMinOrder>(row, cols);
    return {key_of(row[index], static_cast<int32_t>(index)), static_cast<int32_t>(index)};
  } else {
    // The policy visits runs of kRun columns (e.g. one generator call for several columns).
    constexpr int kRun = 8;
    ArgPair<typename Policy::Key> best = ArgPair<typename Policy::Key>::Identity();
    int64_t c = 0;
    for (; c + kRun <= cols; c += kRun) {
      key_of.template Visit<kRun>(row + c, static_cast<int32_t>(c), best.key, best.index);
    }
    for (; c < cols; ++c) {
      key_of.template Visit<1>(row + c, static_cast<int32_t>(c), best.key, best.index);
    }
    return best;
  }
}

// IEEE subnormal arithmetic for the scope of a CPU handler's work on this thread: XLA's CPU
// runtime sets flush-to-zero and denormals-are-zero, which would make the sampler's float steps
// (and so its samples) differ from the GPU's. Restores the caller's mode.
class ScopedIeeeSubnormals {
 public:
#if defined(__x86_64__) || defined(_M_X64)
  ScopedIeeeSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~kFtzDaz); }
  ~ScopedIeeeSubnormals() { _mm_setcsr(saved_); }

 private:
  static constexpr unsigned kFtzDaz = 0x8040;  // MXCSR FTZ (bit 15) | DAZ (bit 6)
  unsigned saved_;
#elif defined(__aarch64__)
  ScopedIeeeSubnormals() {
    __asm__ volatile("mrs %0, fpcr" : "=r"(saved_));
    const uint64_t cleared = saved_ & ~(uint64_t{1} << 24);  // FPCR.FZ
    __asm__ volatile("msr fpcr, %0" : : "r"(cleared));
  }
  ~ScopedIeeeSubnormals() { __asm__ volatile("msr fpcr, %0" : : "r"(saved_)); }

 private:
  uint64_t saved_;
#endif
};

// Reduces every row of x ([rows, cols] row-major), on XLA's intra-op thread pool when there
// are at least `min_elements_per_task` elements per task (ParallelForRows).
template <class Policy, class Epilogue, class Pool>
void ReduceRowsCpu(Pool& pool, const typename Policy::Bits* x, int64_t rows, int64_t cols,
                   const Policy& policy, const Epilogue& epilogue,
                   int64_t min_elements_per_task) {
  ParallelForRows(pool, rows, cols, [&](int64_t begin, int64_t end) {
    const ScopedIeeeSubnormals ieee;  // per thread: the pool's threads too
    for (int64_t r = begin; r < end; ++r) {
      const auto* row = x + r * cols;
      epilogue(r, ScanRowCpu<Policy>(row, cols, policy.ForRow(r)), row);
    }
  }, min_elements_per_task);
}

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_CPU_REDUCE_H_
