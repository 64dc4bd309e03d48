// CPU row scan for argmax/argmin at SIMD/memory speed, all four float formats (SPEC §1).
//
//   template <Format F, bool kIsMin>
//   int64_t ArgReduceRowCpu(const Bits* row, int64_t cols);            // 1 <= cols <= INT32_MAX
//   template <Format F, bool kIsMin, class OutT>
//   void ArgReduceRowsCpu(const Bits* x, int64_t rows, int64_t cols, OutT* out);  // row-major
//
// The answer is the one OrderedKey (order.h) defines: the column of the largest key, the lowest
// column on ties, the first NaN if there is one. Header-only, C++17, no XLA types, so the
// standalone benchmark (benchmarks/cpu_row_reduce_bench.cc) checks it against the scalar reference.
//
// How (one pass over the row, plus one pass over a single block):
//   * The order key is never computed per element. Viewed as integers of the format's width, the
//     float bits of a block summarize into three lane-wise accumulators: signed max, signed min and
//     unsigned max (3 vector ops per vector: vpmaxs/vpmins/vpmaxu). Per lane:
//       - a NaN is there iff  smax > +inf bits  (positive NaN)  or  umax > -inf bits (negative NaN);
//       - argmax: the largest float is smax if smax >= 0 (a non-negative value exists: non-negative
//         floats are the non-negative integers, ordered alike), else smin (all negative: the one of
//         smallest magnitude is the smallest integer);
//       - argmin: the smallest float is umax if umax has its sign bit (a negative exists: negative
//         floats are the integers >= sign bit as unsigned, larger magnitude = larger integer), else
//         smin (all non-negative).
//     Pure integer compares: no float compare, so MXCSR FTZ/DAZ (which XLA:CPU sets while it runs
//     a program) cannot flush subnormals, and -0/+0 tie through OrderedKey's key of the winner.
//   * At the end of each block (kBlockVecs vectors) the lanes' winners become OrderedKeys on
//     vectors; only if a lane beats the best key so far (strictly: earlier blocks win ties) is the
//     block recorded. The first block holding a NaN ends the scan (the first NaN of the row is in
//     it: NaN beats everything).
//   * The winner's column: one vectorized search of the recorded block for the first element whose
//     key equals the best key (bits equal to the winner's, or any zero when the winner is ±0).
//   * Row tails and unaligned starts: unaligned loads; the tail of the last block is one vector
//     load ending at the row's end that overlaps already seen elements (max/min are idempotent, and
//     the overlapped elements cannot be a strict improvement nor an earlier match). Rows shorter
//     than a vector drop to a narrower vector or to the scalar loop.
//
// Instruction sets: GCC/Clang vector extensions, one generic kernel instantiated per vector width
// inside functions compiled with __attribute__((target(...))), chosen at run time:
//   x86-64: AVX-512 (F+BW+VL+DQ, on 32-byte vectors) > AVX2 (32-byte) > portable (16-byte, SSE2);
//   others (aarch64: NEON) : portable 16-byte vectors; any other compiler: scalar.
// No global compile flags are needed. JAX_ARGREDUCE_CPU_ISA=scalar|portable|avx2|avx512 caps the
// choice (read once; for tests and benchmarks). Everything stays integer: no -ffast-math needed or
// wanted, nothing depends on FTZ/DAZ.
//
// Threads: ParallelForRows() runs a row loop on an XLA FFI intra-op thread pool
// (xla::ffi::ThreadPool, bound with .Ctx<xla::ffi::ThreadPool>()) or anything with Schedule(F&&),
// the calling thread taking part; see its comment for why it cannot deadlock.
#ifndef JAX_ARGREDUCE_FFI_CPU_ROW_REDUCE_H_
#define JAX_ARGREDUCE_FFI_CPU_ROW_REDUCE_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

#include "order.h"

#if defined(__GNUC__) || defined(__clang__)
#define JAX_ARGREDUCE_CPU_VECTOR 1
#define JAX_ARGREDUCE_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define JAX_ARGREDUCE_CPU_VECTOR 0
#define JAX_ARGREDUCE_ALWAYS_INLINE inline
#endif

#if JAX_ARGREDUCE_CPU_VECTOR && (defined(__x86_64__) || defined(__i386__))
#define JAX_ARGREDUCE_CPU_X86 1
#define JAX_ARGREDUCE_TARGET_AVX2 __attribute__((target("avx2")))
#define JAX_ARGREDUCE_TARGET_AVX512 \
  __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq")))
#else
#define JAX_ARGREDUCE_CPU_X86 0
#endif

namespace jax_argreduce {

// Instruction-set paths, in increasing order.
enum class CpuIsa : int { kScalar = 0, kPortable = 1, kAvx2 = 2, kAvx512 = 3 };

inline const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kPortable: return "portable";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "?";
}

// The best path this CPU (and OS) runs.
inline CpuIsa DetectCpuIsa() {
#if JAX_ARGREDUCE_CPU_X86
  __builtin_cpu_init();
  // libgcc / compiler-rt also check that the OS saves the AVX / AVX-512 state (XGETBV).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return CpuIsa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2")) return CpuIsa::kAvx2;
  return CpuIsa::kPortable;
#elif JAX_ARGREDUCE_CPU_VECTOR
  return CpuIsa::kPortable;
#else
  return CpuIsa::kScalar;
#endif
}

// The path ArgReduceRowCpu takes: DetectCpuIsa(), capped by JAX_ARGREDUCE_CPU_ISA if set.
inline CpuIsa SelectedCpuIsa() {
  static const CpuIsa isa = [] {
    CpuIsa best = DetectCpuIsa();
    if (const char* env = std::getenv("JAX_ARGREDUCE_CPU_ISA")) {
      for (int i = 0; i <= static_cast<int>(CpuIsa::kAvx512); ++i) {
        if (std::strcmp(env, CpuIsaName(static_cast<CpuIsa>(i))) == 0 &&
            i < static_cast<int>(best)) {
          best = static_cast<CpuIsa>(i);
        }
      }
    }
    return best;
  }();
  return isa;
}

namespace cpu_row_reduce_internal {

// Lane view of a format: its bits as unsigned U / signed S integers.
template <Format F>
struct Lanes {
  using U = typename FormatTraits<F>::Bits;
  using S = std::make_signed_t<U>;
  using Key = typename FormatTraits<F>::Key;
  static constexpr U kSign = static_cast<U>(U{1} << (8 * sizeof(U) - 1));
  static constexpr U kMag = static_cast<U>(~kSign);
  static constexpr S kInf = static_cast<S>(FormatTraits<F>::kInfBits);   // +inf bits, signed
  static constexpr U kNegInf = static_cast<U>(kSign | FormatTraits<F>::kInfBits);
};

// Bits of the (non-NaN) element whose key is `key` (the sign of a zero is irrelevant: every
// zero has key 0 and is matched through the magnitude).
template <Format F, bool kIsMin>
JAX_ARGREDUCE_ALWAYS_INLINE typename Lanes<F>::U KeyToBits(typename Lanes<F>::Key key) {
  using L = Lanes<F>;
  using U = typename L::U;
  const bool negative_value = kIsMin ? key > 0 : key < 0;
  const U magnitude = static_cast<U>(key < 0 ? -key : key);
  return negative_value ? static_cast<U>(L::kSign | magnitude) : magnitude;
}

// Reference single pass (also the path for rows shorter than a vector and non-GNU compilers).
template <Format F, bool kIsMin>
inline int64_t RowScalar(const typename FormatTraits<F>::Bits* row, int64_t cols) {
  using Key = typename FormatTraits<F>::Key;
  Key best = OrderedKey<F, kIsMin>(row[0]);
  int64_t best_index = 0;
  for (int64_t c = 1; c < cols; ++c) {
    const Key key = OrderedKey<F, kIsMin>(row[c]);
    if (key > best) {
      best = key;
      best_index = c;
    }
  }
  return best_index;
}

#if JAX_ARGREDUCE_CPU_VECTOR
// Vectors wider than the baseline ISA are passed between the always_inline helpers below; they
// are only ever inlined into functions compiled for that ISA, so the psABI note does not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

template <class T, int kBytes>
struct VecOf {
  typedef T type __attribute__((vector_size(kBytes)));
};

template <class V, class T>
JAX_ARGREDUCE_ALWAYS_INLINE V Load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));  // unaligned load
  return v;
}

// acc = max/min(acc, v), lane-wise (vpmaxs*/vpmins*/vpmaxu*).
template <class V>
JAX_ARGREDUCE_ALWAYS_INLINE void MaxInto(V& acc, const V& v) { acc = acc > v ? acc : v; }
template <class V>
JAX_ARGREDUCE_ALWAYS_INLINE void MinInto(V& acc, const V& v) { acc = acc < v ? acc : v; }

// Folds one vector into the block summary (signed max, signed min, unsigned max).
template <class VS, class VU>
JAX_ARGREDUCE_ALWAYS_INLINE void Summarize(VS& smax, VS& smin, VU& umax, const VS& v) {
  MaxInto(smax, v);
  MinInto(smin, v);
  MaxInto(umax, reinterpret_cast<const VU&>(v));
}

// True if any lane of a comparison mask (lanes 0 / -1) is set: halves OR-ed down to 16 bytes
// (vextract + vpor), then two 64-bit words.
template <class M>
JAX_ARGREDUCE_ALWAYS_INLINE bool Any(const M& m) {
  if constexpr (sizeof(M) > 16) {
    using Half = typename VecOf<uint64_t, sizeof(M) / 2>::type;
    Half lo, hi;
    std::memcpy(&lo, &m, sizeof(Half));
    std::memcpy(&hi, reinterpret_cast<const char*>(&m) + sizeof(Half), sizeof(Half));
    const Half both = lo | hi;
    return Any(both);
  } else {
    uint64_t w[2];
    std::memcpy(w, &m, sizeof(w));
    return (w[0] | w[1]) != 0;
  }
}

// Branch-free horizontal reductions: halves combined down to two lanes (vextract + op).
template <class V>
struct HalfOf {
  using Lane = std::remove_reference_t<decltype(std::declval<V>()[0])>;
  using type = typename VecOf<Lane, sizeof(V) / 2>::type;
};

template <class T, class V>
JAX_ARGREDUCE_ALWAYS_INLINE T HorizontalMax(const V& v) {
  if constexpr (sizeof(V) > 2 * sizeof(T)) {
    using Half = typename HalfOf<V>::type;
    Half lo, hi;
    std::memcpy(&lo, &v, sizeof(Half));
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(Half), sizeof(Half));
    MaxInto(lo, hi);
    return HorizontalMax<T>(lo);
  } else {
    T lanes[2];
    std::memcpy(lanes, &v, sizeof(lanes));
    return lanes[0] > lanes[1] ? lanes[0] : lanes[1];
  }
}

template <class T, class V>
JAX_ARGREDUCE_ALWAYS_INLINE T HorizontalOr(const V& v) {
  if constexpr (sizeof(V) > 2 * sizeof(T)) {
    using Half = typename HalfOf<V>::type;
    Half lo, hi;
    std::memcpy(&lo, &v, sizeof(Half));
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(Half), sizeof(Half));
    const Half both = lo | hi;
    return HorizontalOr<T>(both);
  } else {
    T lanes[2];
    std::memcpy(lanes, &v, sizeof(lanes));
    return static_cast<T>(lanes[0] | lanes[1]);
  }
}

// Lane of the first set lane of a mask (lanes of type S, 0 / -1) with at least one set lane:
// lane i contributes bit i (at most 16 lanes: 32-byte vectors of 16-bit lanes), then ctz.
template <class S, class M>
JAX_ARGREDUCE_ALWAYS_INLINE int64_t FirstSetLane(const M& m) {
  constexpr int kLanes = sizeof(M) / sizeof(S);
  static_assert(kLanes <= 8 * static_cast<int>(sizeof(S)), "lane bits must fit a lane");
  using U = std::make_unsigned_t<S>;
  M bit = {};
  for (int i = 0; i < kLanes; ++i) bit[i] = static_cast<S>(static_cast<U>(U{1} << i));
  const U bits = static_cast<U>(HorizontalOr<S>(m & bit));
  return __builtin_ctzll(static_cast<unsigned long long>(bits));
}

// Searches for FindFirst. A search maps each vector to a "score" vector, folds scores (so one
// test covers 4 vectors) and tests a folded score for a hit lane. (No OR of compare masks: GCC 12
// scalarizes an OR of two AVX-512 compare results, so every mask here comes from one compare.)
template <Format F, int kBytes>
struct NaNSearch {  // hit: a NaN, i.e. magnitude bits > inf bits
  using L = Lanes<F>;
  using VU = typename VecOf<typename L::U, kBytes>::type;
  using VS = typename VecOf<typename L::S, kBytes>::type;
  using Score = VS;
  JAX_ARGREDUCE_ALWAYS_INLINE void Map(const VU& v, Score& out) const {
    out = reinterpret_cast<VS>(v & L::kMag);
  }
  JAX_ARGREDUCE_ALWAYS_INLINE void Fold(Score& acc, const Score& s) const { MaxInto(acc, s); }
  JAX_ARGREDUCE_ALWAYS_INLINE void Hit(const Score& s, VS& mask) const { mask = s > L::kInf; }
};
template <Format F, int kBytes>
struct KeySearch {  // hit: (bits & mask) == target, i.e. the element's key is the best key
  using L = Lanes<F>;
  using U = typename L::U;
  using VU = typename VecOf<U, kBytes>::type;
  using VS = typename VecOf<typename L::S, kBytes>::type;
  using Score = VU;
  U target, mask;
  JAX_ARGREDUCE_ALWAYS_INLINE void Map(const VU& v, Score& out) const {
    out = (v & mask) ^ target;  // 0 exactly on a hit
  }
  JAX_ARGREDUCE_ALWAYS_INLINE void Fold(Score& acc, const Score& s) const { MinInto(acc, s); }
  JAX_ARGREDUCE_ALWAYS_INLINE void Hit(const Score& s, VS& m) const { m = s == U{0}; }
};

// First column in [begin, end) where the search hits; the caller guarantees a hit there and none
// in [end - lanes, begin) (the overlapping tail load), and end >= lanes.
template <class U, class S, int kBytes, class Search>
JAX_ARGREDUCE_ALWAYS_INLINE int64_t FindFirst(const U* row, int64_t begin, int64_t end,
                                              const Search& search) {
  using VU = typename VecOf<U, kBytes>::type;
  using VS = typename VecOf<S, kBytes>::type;
  using Score = typename Search::Score;
  constexpr int64_t kLanes = kBytes / sizeof(U);
  int64_t i = begin;
  Score a, b, t;
  VS m;
  for (; i + 4 * kLanes <= end; i += 4 * kLanes) {
    search.Map(Load<VU>(row + i), a);
    search.Map(Load<VU>(row + i + kLanes), t);
    search.Fold(a, t);
    search.Map(Load<VU>(row + i + 2 * kLanes), b);
    search.Map(Load<VU>(row + i + 3 * kLanes), t);
    search.Fold(b, t);
    search.Fold(a, b);
    search.Hit(a, m);
    if (Any(m)) break;
  }
  for (; i + kLanes <= end; i += kLanes) {
    search.Map(Load<VU>(row + i), a);
    search.Hit(a, m);
    if (Any(m)) return i + FirstSetLane<S>(m);
  }
  const int64_t tail = end - kLanes;  // i < end here
  search.Map(Load<VU>(row + tail), a);
  search.Hit(a, m);
  return tail + FirstSetLane<S>(m);
}

// The kernel: requires cols >= kBytes / sizeof(Bits). Inlined into each target function.
template <Format F, bool kIsMin, int kBytes, int kBlockVecs>
JAX_ARGREDUCE_ALWAYS_INLINE int64_t RowVector(const typename FormatTraits<F>::Bits* row,
                                              int64_t cols) {
  using L = Lanes<F>;
  using U = typename L::U;
  using S = typename L::S;
  using VU = typename VecOf<U, kBytes>::type;
  using VS = typename VecOf<S, kBytes>::type;
  constexpr int64_t kLanes = kBytes / sizeof(U);
  constexpr int64_t kBlock = kLanes * kBlockVecs;

  // Best lane key so far, in the lane type (non-NaN keys of every format fit it: |key| <= inf
  // bits), and the block [best_begin, best_end) that first reached it.
  S best_key = std::numeric_limits<S>::min();  // below every key
  constexpr S kNaNLane = std::numeric_limits<S>::max();  // above every non-NaN key
  int64_t best_begin = 0, best_end = 0;

  for (int64_t s = 0; s < cols; s += kBlock) {
    const int64_t e = std::min<int64_t>(s + kBlock, cols);
    int64_t i = (e - s >= kLanes) ? s : e - kLanes;  // a short last block starts overlapped
    VS smax = Load<VS>(row + i);
    VS smin = smax;
    VU umax = reinterpret_cast<VU>(smax);
    i += kLanes;
    for (; i + 4 * kLanes <= e; i += 4 * kLanes) {
      // Two independent summaries (ILP), merged every 4 vectors.
      VS a_max = Load<VS>(row + i), a_min = a_max;
      VU a_umax = reinterpret_cast<VU>(a_max);
      VS b_max = Load<VS>(row + i + 2 * kLanes), b_min = b_max;
      VU b_umax = reinterpret_cast<VU>(b_max);
      Summarize(a_max, a_min, a_umax, Load<VS>(row + i + kLanes));
      Summarize(b_max, b_min, b_umax, Load<VS>(row + i + 3 * kLanes));
      MaxInto(a_max, b_max);
      MinInto(a_min, b_min);
      MaxInto(a_umax, b_umax);
      MaxInto(smax, a_max);
      MinInto(smin, a_min);
      MaxInto(umax, a_umax);
    }
    for (; i + kLanes <= e; i += kLanes) Summarize(smax, smin, umax, Load<VS>(row + i));
    if (i < e) {  // tail: one load ending at e, overlapping seen elements
      Summarize(smax, smin, umax, Load<VS>(row + e - kLanes));
    }

    // Each lane's winner and its OrderedKey, NaN lanes at the top (kNaNLane). For argmax a
    // positive NaN is smax itself and a negative one shows in umax; for argmin the other way.
    const VS umax_s = reinterpret_cast<VS>(umax);
    const VS winner = kIsMin ? (umax_s < 0 ? umax_s : smin) : (smax >= 0 ? smax : smin);
    const VS magnitude = winner & static_cast<S>(L::kMag);
    VS key = kIsMin ? (winner < 0 ? magnitude : -magnitude) : (winner < 0 ? -magnitude : magnitude);
    // NaN lanes: mask (-1) ^ min = max. (Not `mask ? kNaNLane : key`: GCC 12 scalarizes that
    // select on AVX-512.)
    const VS nan_positive = smax > L::kInf, nan_negative = umax > L::kNegInf;
    MaxInto(key, nan_positive ^ std::numeric_limits<S>::min());
    MaxInto(key, nan_negative ^ std::numeric_limits<S>::min());
    const VS better = key > best_key;  // strictly: ties stay with the earlier block
    if (Any(better)) {
      best_key = HorizontalMax<S>(key);
      // The first block with a NaN holds the row's first NaN: nothing after it matters.
      if (best_key == kNaNLane) return FindFirst<U, S, kBytes>(row, s, e, NaNSearch<F, kBytes>{});
      best_begin = s;
      best_end = e;
    }
  }

  // Second pass over the winning block only: first element whose key is best_key.
  const U target = KeyToBits<F, kIsMin>(best_key);
  const U mask = best_key == 0 ? L::kMag : static_cast<U>(~U{0});  // ±0 tie
  return FindFirst<U, S, kBytes>(row, best_begin, best_end, KeySearch<F, kBytes>{target, mask});
}

// Block length, in vectors: long enough to amortize the per-block check (~20 instructions),
// short enough that the second pass (on average half a block) stays small next to a row.
constexpr int kBlockVecs = 64;

template <Format F, bool kIsMin>
inline int64_t RowPortable(const typename FormatTraits<F>::Bits* row, int64_t cols) {
  using U = typename FormatTraits<F>::Bits;
#if JAX_ARGREDUCE_CPU_X86
  // Baseline x86-64 (SSE2) has no 64-bit compare: vectors would be split into scalar code.
  if constexpr (sizeof(U) == 8) return RowScalar<F, kIsMin>(row, cols);
#endif
  if (cols >= static_cast<int64_t>(16 / sizeof(U))) {
    return RowVector<F, kIsMin, 16, kBlockVecs>(row, cols);
  }
  return RowScalar<F, kIsMin>(row, cols);
}

template <Format F, bool kIsMin, class OutT>
inline void RowsPortable(const typename FormatTraits<F>::Bits* x, int64_t rows, int64_t cols,
                         OutT* out) {
  for (int64_t r = 0; r < rows; ++r) {
    out[r] = static_cast<OutT>(RowPortable<F, kIsMin>(x + r * cols, cols));
  }
}

#if JAX_ARGREDUCE_CPU_X86
template <Format F, bool kIsMin>
JAX_ARGREDUCE_TARGET_AVX2 inline int64_t RowAvx2(const typename FormatTraits<F>::Bits* row,
                                                 int64_t cols) {
  using U = typename FormatTraits<F>::Bits;
  if (cols >= static_cast<int64_t>(32 / sizeof(U))) {
    return RowVector<F, kIsMin, 32, kBlockVecs>(row, cols);
  }
  if (cols >= static_cast<int64_t>(16 / sizeof(U))) {
    return RowVector<F, kIsMin, 16, kBlockVecs>(row, cols);
  }
  return RowScalar<F, kIsMin>(row, cols);
}

template <Format F, bool kIsMin, class OutT>
JAX_ARGREDUCE_TARGET_AVX2 inline void RowsAvx2(const typename FormatTraits<F>::Bits* x,
                                               int64_t rows, int64_t cols, OutT* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = static_cast<OutT>(RowAvx2<F, kIsMin>(x + r * cols, cols));
}

// AVX-512 (VL/BW) on 32-byte vectors: 64-byte vectors measured slower (benchmarks/NOTES.md,
// "CPU handler constants"); what AVX-512 adds over AVX2 here is vpmaxsq/vpminsq/vpmaxuq (f64)
// and compares into mask registers.
template <Format F, bool kIsMin>
JAX_ARGREDUCE_TARGET_AVX512 inline int64_t RowAvx512(const typename FormatTraits<F>::Bits* row,
                                                     int64_t cols) {
  using U = typename FormatTraits<F>::Bits;
  if (cols >= static_cast<int64_t>(32 / sizeof(U))) {
    return RowVector<F, kIsMin, 32, kBlockVecs>(row, cols);
  }
  if (cols >= static_cast<int64_t>(16 / sizeof(U))) {
    return RowVector<F, kIsMin, 16, kBlockVecs>(row, cols);
  }
  return RowScalar<F, kIsMin>(row, cols);
}

template <Format F, bool kIsMin, class OutT>
JAX_ARGREDUCE_TARGET_AVX512 inline void RowsAvx512(const typename FormatTraits<F>::Bits* x,
                                                   int64_t rows, int64_t cols, OutT* out) {
  for (int64_t r = 0; r < rows; ++r) {
    out[r] = static_cast<OutT>(RowAvx512<F, kIsMin>(x + r * cols, cols));
  }
}

#endif  // JAX_ARGREDUCE_CPU_X86
#pragma GCC diagnostic pop
#endif  // JAX_ARGREDUCE_CPU_VECTOR

}  // namespace cpu_row_reduce_internal

// One row on a given path (a path this CPU lacks falls back to the best one it has below it).
template <Format F, bool kIsMin>
inline int64_t ArgReduceRowCpuOn(CpuIsa isa, const typename FormatTraits<F>::Bits* row,
                                 int64_t cols) {
  namespace in = cpu_row_reduce_internal;
  const CpuIsa have = DetectCpuIsa();
  if (static_cast<int>(isa) > static_cast<int>(have)) isa = have;
  switch (isa) {
#if JAX_ARGREDUCE_CPU_X86
    case CpuIsa::kAvx512: return in::RowAvx512<F, kIsMin>(row, cols);
    case CpuIsa::kAvx2: return in::RowAvx2<F, kIsMin>(row, cols);
#endif
#if JAX_ARGREDUCE_CPU_VECTOR
    case CpuIsa::kPortable: return in::RowPortable<F, kIsMin>(row, cols);
#endif
    default: return in::RowScalar<F, kIsMin>(row, cols);
  }
}

// Column of the winner of one row under the plain order key (SPEC §1: largest key, lowest index).
template <Format F, bool kIsMin>
inline int64_t ArgReduceRowCpu(const typename FormatTraits<F>::Bits* row, int64_t cols) {
  namespace in = cpu_row_reduce_internal;
  switch (SelectedCpuIsa()) {
#if JAX_ARGREDUCE_CPU_X86
    case CpuIsa::kAvx512: return in::RowAvx512<F, kIsMin>(row, cols);
    case CpuIsa::kAvx2: return in::RowAvx2<F, kIsMin>(row, cols);
#endif
#if JAX_ARGREDUCE_CPU_VECTOR
    case CpuIsa::kPortable: return in::RowPortable<F, kIsMin>(row, cols);
#endif
    default: return in::RowScalar<F, kIsMin>(row, cols);
  }
}

// rows x cols, row-major (row r at x + r * cols): out[r] = ArgReduceRowCpu(row r). Dispatches once;
// the kernel is inlined into the row loop (what a handler wants for many short rows).
template <Format F, bool kIsMin, class OutT>
inline void ArgReduceRowsCpu(const typename FormatTraits<F>::Bits* x, int64_t rows, int64_t cols,
                             OutT* out) {
  namespace in = cpu_row_reduce_internal;
  switch (SelectedCpuIsa()) {
#if JAX_ARGREDUCE_CPU_X86
    case CpuIsa::kAvx512: in::RowsAvx512<F, kIsMin>(x, rows, cols, out); return;
    case CpuIsa::kAvx2: in::RowsAvx2<F, kIsMin>(x, rows, cols, out); return;
#endif
#if JAX_ARGREDUCE_CPU_VECTOR
    case CpuIsa::kPortable: in::RowsPortable<F, kIsMin>(x, rows, cols, out); return;
#endif
    default:
      for (int64_t r = 0; r < rows; ++r) {
        out[r] = static_cast<OutT>(in::RowScalar<F, kIsMin>(x + r * cols, cols));
      }
  }
}

// ---------------------------------------------------------------------------------------------
// Intra-op thread pool.
//
// XLA's FFI hands a CPU handler the intra-op pool as a context argument:
//     ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::AnyBuffer>()...
//     ffi::Error Impl(ffi::ThreadPool pool, ffi::AnyBuffer x, ...)
// (xla/ffi/api/ffi.h: ThreadPool::Schedule(F&&), ThreadPool::num_threads()). The API's contract
// (xla/ffi/api/c_api.h, XLA_FFI_Task): tasks may run on the caller's thread or on a pool of size
// 1, and may start in any order or late; a handler must not assume they run in parallel. So:
//   * the calling thread works too, taking chunks from the same atomic counter;
//   * it waits only for chunks a pool thread has *claimed* (which are running), never for a task
//     that has not started: no deadlock even when every pool thread is busy or the handler itself
//     runs on a pool thread;
//   * a task that starts after the caller returned finds the counter exhausted and touches only
//     the shared state its own shared_ptr keeps alive (never `fn`, never the handler's stack).
// `Pool` is xla::ffi::ThreadPool or anything with Schedule(F&&) taking a callable by value.

namespace cpu_row_reduce_internal {
template <class P, class = void>
struct HasNumThreads : std::false_type {};
template <class P>
struct HasNumThreads<P, std::void_t<decltype(std::declval<const P&>().num_threads())>>
    : std::true_type {};
}  // namespace cpu_row_reduce_internal

// Threads the pool reports (0 when unknown: older XLA FFI headers have no num_threads()).
template <class Pool>
inline int64_t PoolNumThreads(const Pool& pool) {
  if constexpr (cpu_row_reduce_internal::HasNumThreads<Pool>::value) {
    return static_cast<int64_t>(pool.num_threads());
  } else {
    return 0;
  }
}

// Calls fn(row_begin, row_end) over disjoint ranges covering [0, rows), possibly concurrently
// (fn must be safe for that: each call writes its own rows); returns when all have run. Splits
// only into chunks of >= min_elements (fewer elements in all: one call, inline), at most 4 per
// worker (load balance under contention), of whole rows. The default 2^20 elements (4 MB of
// float32) keeps 8x202048 on one thread, where the pool measured no faster, and splits
// 64x202048 and 4096x4096, where it helped (benchmarks/NOTES.md, "CPU handler constants").
template <class Pool, class Fn>
void ParallelForRows(Pool& pool, int64_t rows, int64_t cols, Fn&& fn,
                     int64_t min_elements = int64_t{1} << 20) {
  if (rows <= 0) return;
  int64_t threads = PoolNumThreads(pool);
  if (threads <= 0) threads = 2;  // unknown: the caller + one task is always safe
  const int64_t elements = rows * std::max<int64_t>(cols, 1);
  const int64_t by_work = std::max<int64_t>(elements / std::max<int64_t>(min_elements, 1), 1);
  const int64_t chunks = std::min({rows, by_work, 4 * (threads + 1)});
  if (chunks <= 1) {
    fn(int64_t{0}, rows);
    return;
  }
  using FnT = std::remove_reference_t<Fn>;
  struct Shared {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    int64_t chunks = 0, rows = 0;
    FnT* fn = nullptr;  // valid until done == chunks
    std::mutex mu;
    std::condition_variable cv;
  };
  auto shared = std::make_shared<Shared>();
  shared->chunks = chunks;
  shared->rows = rows;
  shared->fn = &fn;
  auto work = [](Shared& st) {
    for (;;) {
      const int64_t c = st.next.fetch_add(1, std::memory_order_relaxed);
      if (c >= st.chunks) return;
      const int64_t begin = st.rows * c / st.chunks;
      const int64_t end = st.rows * (c + 1) / st.chunks;
      (*st.fn)(begin, end);
      if (st.done.fetch_add(1, std::memory_order_acq_rel) + 1 == st.chunks) {
        std::lock_guard<std::mutex> lock(st.mu);  // the caller is in wait() or re-checks
        st.cv.notify_all();
      }
    }
  };
  const int64_t helpers = std::min(threads, chunks - 1);
  for (int64_t t = 0; t < helpers; ++t) {
    pool.Schedule([shared, work]() { work(*shared); });
  }
  work(*shared);
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->cv.wait(lock, [&] {
    return shared->done.load(std::memory_order_acquire) == shared->chunks;
  });
}

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_CPU_ROW_REDUCE_H_
