// The two hooks of the row-reduce core (SPEC §2), shared by the CUDA kernels and the CPU loop.
//
// Key policy: how an element becomes a comparable integer key. The reduction keeps the
// (key, index) pair that wins under the total order of order.h (largest key, lowest index), so
// every policy inherits its tie and NaN rules. A policy exposes
//   Format kFormat; using Bits, Key;
//   static constexpr bool kBitsOnly;  // key depends on the element's bits alone
//   Row ForRow(int64_t row) const;     // per-row state (e.g. a sampler's key and temperature)
//   Row::operator()(Bits bits, int32_t col) -> Key   // col: position in the row
// optionally the CUDA kernels' decisions, each a static constexpr member whose default (and
// the reason for it) is in row_reduce.cuh's PolicyTraits, which also checks what a policy
// must satisfy:
//   int kMinBlocksPerSm;   // launch bounds: resident 256-thread blocks per SM (a register cap)
//   bool kComputeBound;    // the key costs more than its loads: the planner plans for it
//   int kVecBytes;         // bytes of the vector a thread visits at once (16, or 32)
//   int kPrepareChunk;     // vectors prepared together (not kBitsOnly; see below)
//   bool kSharesBlockBest; // a block's threads share VisitState::block_best (not kBitsOnly)
// and, when not kBitsOnly,
//   Row::Visit<kN>(const Bits* elements, int32_t first_col, Key& best, int32_t& best_index)
// which folds kN consecutive elements into a running best in column order (so a policy can
// share work between columns, or skip elements that cannot win), and, for the CUDA vector
// scan, the same split in two steps over a chunk of kPrepareChunk vectors of kVec elements
// (one thread's loads of a round, `stride` columns apart): CanPrepare(first_col) (uniform over
// a row), Prepare<kVec, kCount, kAll>(first_col, stride) (the column-dependent work, computed
// ahead; kAll: the caller visits vector by vector (the split and team kernels, whose threads
// mostly hold few vectors of a row), so whatever the visit may need is computed here, in
// parallel, rather than later on the critical path) and
// VisitPrepared<kVec, kCount>(elements, first_col, stride, count, prepared, best, best_index,
// row_lanes, state) (the first `count` vectors are real;
// called by the lanes that hold a chunk; they need not be converged: warp
// operations over __activemask() only ever see lanes of this call, each of which finishes its
// own work; row_lanes: the mask of the warp's lanes that scan this row (all 32, or an aligned
// team of 2-16 lanes; 0 for one lane per row), so a best over those of them in the call is a
// valid threshold for each; state: a Row::VisitState, value-initialized once per thread and
// row and carried from one call to the next, e.g. a skip threshold; a policy that branches on
// per-lane state around a warp collective takes a vote on it first (__any_sync over the call's
// mask), so it never assumes the lanes of a call arrive as one group).
// Only kBitsOnly policies may take the vector shortcut (the best key of a 16-byte vector from a
// NaN-propagating max over the elements' values, then its position found again by key): a
// policy whose key depends on the column (the Gumbel-perturbed key of a sampler) cannot.
//
// Epilogue: what is stored once a row's winner is known, from the winning pair and the row's
// data. Called once per row by one thread (CUDA) or the CPU loop.
#ifndef JAX_ARGREDUCE_FFI_REDUCE_HOOKS_H_
#define JAX_ARGREDUCE_FFI_REDUCE_HOOKS_H_

#include <cstdint>

#include "order.h"

namespace jax_argreduce {

// argmax (kIsMin false) / argmin (true) order key of order.h.
template <Format F, bool kIsMin>
struct OrderKeyPolicy {
  static constexpr Format kFormat = F;
  static constexpr bool kBitsOnly = true;
  static constexpr bool kIsMinOrder = kIsMin;  // which NaN-propagating vector max to take
  using Bits = typename FormatTraits<F>::Bits;
  using Key = typename FormatTraits<F>::Key;

  struct Row {
    JAX_ARGREDUCE_HD Key operator()(Bits bits, int32_t /*col*/) const {
      return OrderedKey<F, kIsMin>(bits);
    }
  };
  JAX_ARGREDUCE_HD Row ForRow(int64_t /*row*/) const { return {}; }
};

// Stores the winner's index (int32 or int64) and, when `values` is set, the winning element
// itself, bit for bit (max_with_index: NaN payloads and the sign of zero survive).
struct IndexValueEpilogue {
  void* indices;         // [rows] int32 or int64
  bool index_is_int64;
  void* values;          // nullptr, or [rows] elements of the input's format

  template <class Bits, class Key>
  JAX_ARGREDUCE_HD void operator()(int64_t row, ArgPair<Key> best, const Bits* row_data) const {
    StoreIndex(indices, index_is_int64, row, best.index);
    if (values != nullptr) static_cast<Bits*>(values)[row] = row_data[best.index];
  }
};

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_REDUCE_HOOKS_H_
