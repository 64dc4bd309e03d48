// The CUDA row-reduce core: the best (key, index) pair of each row of a row-major [rows, cols]
// array, for any key policy, finished by any epilogue (reduce_hooks.h). Header-only: per-op
// files (argreduce_kernels.cu, ...) instantiate it and export raw-pointer launchers.
//
// Device code is a small algebra over ArgPair (order.h): thread (ScanRow) -> team of lanes or
// warp (shuffles) -> block (shared memory) -> row (split path: partials in the workspace, merged
// by the last block); the warp and block steps are device.cuh's generic WarpReduce and
// BlockReduce with CombinePairs. Because the combine step is a total order on (key, index),
// every reduction order gives the same answer, so the result does not depend on the launch
// geometry (launch_plan.h). What the kernels decide per key policy is named in PolicyTraits.
//
// Programmatic dependent launch (sm_90+): every kernel may be launched before the kernel ahead
// of it in the stream has finished (the producer of our input, or our own split-scan kernel),
// so each one waits (griddepcontrol.wait) before its first global memory access, and reads its
// input with plain coherent loads (ld.global, never the non-coherent .nc path).
//
// Overflow: a row has at most INT32_MAX columns. Positions inside a row are 32-bit and the
// scan is written with differences (`remaining = n - v`, offsets formed only once checked to
// be smaller than `remaining`), so no 32-bit sum can pass INT32_MAX. Row offsets are 64-bit.
#ifndef JAX_ARGREDUCE_FFI_ROW_REDUCE_CUH_
#define JAX_ARGREDUCE_FFI_ROW_REDUCE_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>

#include "device.cuh"
#include "launch_plan.h"
#include "order.h"
#include "reduce_hooks.h"

namespace jax_argreduce {
namespace row_reduce {

using namespace device;  // loads, PDL, shuffles, atomics, launch helpers

// Optional members of a key policy (reduce_hooks.h): Policy::kName where the policy has it,
// else the default.
namespace policy_detail {
#define JAX_ARGREDUCE_OPTIONAL_MEMBER(Name, Type, kDefault)                                    \
  template <class P, class = void>                                                             \
  struct Name : std::integral_constant<Type, kDefault> {};                                     \
  template <class P>                                                                           \
  struct Name<P, std::void_t<decltype(P::k##Name)>> : std::integral_constant<Type, P::k##Name> {}
JAX_ARGREDUCE_OPTIONAL_MEMBER(MinBlocksPerSm, int, 1);
JAX_ARGREDUCE_OPTIONAL_MEMBER(ComputeBound, bool, false);
JAX_ARGREDUCE_OPTIONAL_MEMBER(VecBytes, int, 16);
JAX_ARGREDUCE_OPTIONAL_MEMBER(PrepareChunk, int, 1);
JAX_ARGREDUCE_OPTIONAL_MEMBER(SharesBlockBest, bool, false);
#undef JAX_ARGREDUCE_OPTIONAL_MEMBER
}  // namespace policy_detail

// What the kernels decide per key policy. A policy sets a decision by a static constexpr
// member of the same name; the defaults fit an order-key policy (cheap keys, load-bound):
//   kMinBlocksPerSm (1): resident 256-thread blocks per SM asked of the launch bounds, i.e. a
//     register cap; 1 caps nothing, and a load-bound scan gains nothing from a cap but spills.
//   kComputeBound (false): the key costs far more than its loads (the sampler's noise). The
//     planner then plans for the key's work (one vector per split-path thread, no two-warp
//     team, no wide block), so those wide kernels are not instantiated for such a policy.
//   kVecBytes (16): the vector a thread visits at once: one 16-byte load, or 32 (two loads)
//     where a vector should hold one block of the policy's generator (the sampler's float32).
//   kPrepareChunk (1): vectors whose column-dependent work a policy prepares together
//     (independent chains the GPU overlaps; each costs registers); not kBitsOnly policies.
//   kSharesBlockBest (false): the block and split kernels keep a shared Key word for
//     VisitState::block_best (the sampler's skip threshold, raised by every warp; NOTES.md
//     try 44): a barrier and a word only a policy whose visit reads it should pay for.
// and derived, not set by a policy:
//   kBlockLoadsInFlight: 16-byte loads in flight per thread in the block kernel: kBlockInFlight
//     for a load-bound policy (one block per long row, few threads per SM, so more loads each),
//     kInFlight for a compute-bound one (NOTES.md try 24). From launch_plan.h's
//     BlockLoadsInFlight, which the planner reads too, so a policy cannot set it apart.
template <class Policy>
struct PolicyTraits {
  using Bits = typename Policy::Bits;
  using Key = typename Policy::Key;
  static constexpr int kMinBlocksPerSm = policy_detail::MinBlocksPerSm<Policy>::value;
  static constexpr bool kComputeBound = policy_detail::ComputeBound<Policy>::value;
  static constexpr int kVecBytes = policy_detail::VecBytes<Policy>::value;
  static constexpr int kPrepareChunk = policy_detail::PrepareChunk<Policy>::value;
  static constexpr bool kSharesBlockBest = policy_detail::SharesBlockBest<Policy>::value;
  static constexpr int kBlockLoadsInFlight = BlockLoadsInFlight(kComputeBound);
  using Vector = std::conditional_t<kVecBytes == 32, Vec32, Vec>;  // what a scan visits

  static_assert(std::is_same_v<Bits, typename FormatTraits<Policy::kFormat>::Bits>,
                "a row holds elements of the policy's format");
  static_assert(std::is_same_v<Key, int32_t> || std::is_same_v<Key, int64_t>,
                "keys of order.h's KeyLimits (and ShuffleXor's and the planner's widths)");
  static_assert(kMinBlocksPerSm >= 1 && kMinBlocksPerSm * kBlockThreads <= 2048,
                "resident threads an SM can hold");
  static_assert(kVecBytes == 16 || kVecBytes == 32, "one or two 16-byte loads per vector");
  static_assert(!Policy::kBitsOnly || kVecBytes == 16,
                "the bits-only shortcut (VectorKey) reads 16-byte vectors");
  static_assert(kPrepareChunk >= 1 && (kPrepareChunk & (kPrepareChunk - 1)) == 0,
                "a power of two: a round of loads holds whole chunks");
  static_assert(!kSharesBlockBest || !Policy::kBitsOnly,
                "only a policy's VisitState reads the shared best");
};

template <class Bits, class V>
__device__ __forceinline__ Bits Element(const V& v, int j) {
  return reinterpret_cast<const Bits*>(&v)[j];
}

// The largest key among the elements of one 16-byte vector, for a policy whose key depends on
// the bits alone (the order key). On sm_80+ the elements are first merged in their own format
// with NaN-propagating max (min for argmin): a NaN anywhere gives a NaN, whose key is the
// largest; otherwise the survivor is a largest (smallest) value, whose key is the vector's best
// (-0/+0 share key 0; these instructions have no .ftz, so subnormals compare exactly). One key
// computation per vector instead of one per element. The caller finds the element's position
// again by key, so which of equal elements survives does not matter.
template <class Policy>
__device__ __forceinline__ typename Policy::Key VectorKey(const Vec& v,
                                                          const typename Policy::Row& key_of) {
  using Bits = typename Policy::Bits;
  constexpr Format F = Policy::kFormat;
  constexpr bool kIsMin = Policy::kIsMinOrder;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (F == Format::kF32) {
    auto op = [](float a, float b) { return kIsMin ? MinNaNF32(a, b) : MaxNaNF32(a, b); };
    const float m = op(op(__uint_as_float(v.x), __uint_as_float(v.y)),
                       op(__uint_as_float(v.z), __uint_as_float(v.w)));
    return key_of(__float_as_uint(m), 0);
  } else if constexpr (F == Format::kBF16 || F == Format::kF16) {
    auto op = [](uint32_t a, uint32_t b) { return NaNMinMax16x2<F, kIsMin>(a, b); };
    const uint32_t m = op(op(v.x, v.y), op(v.z, v.w));
    const uint32_t m1 = op(m, __byte_perm(m, 0, 0x1032));  // both halves hold the survivor
    return key_of(static_cast<Bits>(m1 & 0xFFFFu), 0);
  }
#endif
  constexpr int kVec = sizeof(Vec) / sizeof(Bits);
  auto best = key_of(Element<Bits>(v, 0), 0);
#pragma unroll
  for (int j = 1; j < kVec; ++j) best = max(best, key_of(Element<Bits>(v, j), j));
  return best;
}

// This thread's best pair over its share of one row. The row is split into a scalar head (up
// to the first vector boundary), a body of vectors (16 bytes, or the policy's kVecBytes: kLoads
// counts 16-byte loads in flight either way), and a scalar tail. Thread `tid`
// of `nthreads` takes vectors tid, tid + nthreads, ... Column-dependent policies visit their
// elements in increasing column order, so the strict '>' keeps the lowest index among equal
// keys; bits-only policies visit the body's rounds from the row's end down and take ties ('>='),
// which keeps the lowest index too.
//
// kKeepLastRound: recover the winner's column from the vectors still in registers when it was
// loaded in the thread's last round (the split path's threads read one round), instead of
// loading its vector again (a second dependent trip to memory; NOTES.md try 17); other kernels
// reload, since keeping the buffer live costs registers where occupancy is register-bound
// (try 13).
template <class Policy, int kLoads, bool kKeepLastRound = false, bool kVisitChunks = false>
__device__ __forceinline__ ArgPair<typename Policy::Key> ScanRow(
    const typename Policy::Bits* row, int32_t cols, int32_t tid, int32_t nthreads,
    const typename Policy::Row& key_of, typename Policy::Key* block_best = nullptr) {
  using Bits = typename Policy::Bits;
  using Key = typename Policy::Key;
  using V = typename PolicyTraits<Policy>::Vector;
  constexpr int kVec = sizeof(V) / sizeof(Bits);
  // Vectors per round: kLoads 16-byte loads.
  constexpr int kRound = kLoads * sizeof(Vec) >= sizeof(V) ? kLoads * sizeof(Vec) / sizeof(V) : 1;
  Key best = KeyLimits<Key>::kLowest;
  int32_t best_index = 0x7FFFFFFF;
  auto visit = [&](Bits bits, int32_t index) {
    if constexpr (Policy::kBitsOnly) {
      const Key key = key_of(bits, index);
      if (key > best) {
        best = key;
        best_index = index;
      }
    } else {
      key_of.template Visit<1>(&bits, index, best, best_index);
    }
  };

  const int32_t misalign =
      static_cast<int32_t>((reinterpret_cast<uintptr_t>(row) % sizeof(V)) / sizeof(Bits));
  const int32_t head = min(cols, misalign == 0 ? 0 : kVec - misalign);
  const int32_t num_vecs = (cols - head) / kVec;
  const int32_t tail_start = head + num_vecs * kVec;  // <= cols

  for (int32_t c = tid; c < head; c += nthreads) visit(LoadBits(row + c), c);

  const V* vecs = reinterpret_cast<const V*>(row + head);
  if constexpr (Policy::kBitsOnly) {
    // Track only the best key per vector and the first vector that reached it; the element's
    // column is recovered once at the end from that vector (reloaded unless kKeepLastRound:
    // keeping it in registers costs registers, and occupancy is register-bound).
    //
    // Rounds run from the row's end to its start: a producer (the LM head's matmul) writes
    // the last columns last, so they are the likeliest still in L2 when a row is larger than
    // it (NOTES.md try 40). Visited from the highest column down, a vector takes a tie ('>='),
    // so the lowest column keeps it.
    Key body_best = KeyLimits<Key>::kLowest;
    int32_t body_vec = -1;
    int body_u = 0;          // which buffer slot held it, in the round starting at body_round
    int32_t body_round = -1;
    int32_t last_round = -1;
    Vec buf[kLoads];
    const int32_t round_vecs = kLoads * nthreads;  // vectors of one round of all threads
    if (tid < num_vecs) {
      // This thread's rounds start at tid + r * round_vecs, r = 0 .. (num_vecs - 1 - tid) /
      // round_vecs; every start is < num_vecs, so none overflows.
      for (int32_t v = tid + (num_vecs - 1 - tid) / round_vecs * round_vecs;; v -= round_vecs) {
        const int32_t remaining = num_vecs - v;  // >= 1
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          if (u * nthreads < remaining) buf[u] = LoadVec(vecs + v + u * nthreads);
        }
#pragma unroll
        for (int u = kLoads - 1; u >= 0; --u) {
          if (u * nthreads < remaining) {
            const Key key = VectorKey<Policy>(buf[u], key_of);
            if (key >= body_best) {  // visited downwards: the lowest columns keep a tie
              body_best = key;
              body_vec = v + u * nthreads;  // < num_vecs
              body_u = u;
              body_round = v;
            }
          }
        }
        last_round = v;
        if (v == tid) break;  // the row's first round: v - round_vecs would be negative
      }
    }
    // Head columns are lower than body columns: the body wins only with a strictly larger key.
    if (body_vec >= 0 && body_best > best) {
      Vec w;
      if (kKeepLastRound && body_round == last_round) {
        w = buf[0];
#pragma unroll
        for (int u = 1; u < kLoads; ++u) {
          if (body_u == u) w = buf[u];
        }
      } else {
        w = LoadVec(vecs + body_vec);
      }
      const int32_t first = head + body_vec * kVec;
      int32_t j_first = kVec - 1;
#pragma unroll
      for (int j = kVec - 2; j >= 0; --j) {
        if (key_of(Element<Bits>(w, j), first + j) == body_best) j_first = j;
      }
      best = body_best;
      best_index = first + j_first;  // < tail_start
    }
  } else {
    // The key depends on the column: the policy visits a vector's elements together (e.g. one
    // generator call for several columns), updating this thread's running best. Where the
    // policy can prepare the column-dependent work ahead (CanPrepare: uniform over a row), it
    // does so for a chunk of kChunk vectors at once (independent work the GPU overlaps, e.g.
    // the sampler's Philox chains; kChunk bounds the registers held; the split and team paths
    // skip a two-vector chunk's second vector where the thread does not hold it), then visits
    // the chunk.
    constexpr int kPrepareChunk = PolicyTraits<Policy>::kPrepareChunk;
    constexpr int kChunk = kRound < kPrepareChunk ? kRound : kPrepareChunk;
    const int32_t stride = nthreads * kVec;  // columns between one thread's vectors of a round
    // A full round loads without bounds; the last one zeroes its vectors past the row's end
    // (a chunk visit reads but never takes them).
    auto load_round = [&](V* buf, int32_t v, int32_t remaining) {
      if (remaining >= kRound * nthreads) {
#pragma unroll
        for (int u = 0; u < kRound; ++u) buf[u] = LoadVec(vecs + v + u * nthreads);
      } else {
#pragma unroll
        for (int u = 0; u < kRound; ++u) {
          buf[u] = u * nthreads < remaining ? LoadVec(vecs + v + u * nthreads) : V{};
        }
      }
    };
    if (key_of.CanPrepare(head)) {  // one loop per case: the test stays out of the loop
      // The lanes of this warp on this row: all of them where 32 | nthreads (tid % 32 is the
      // lane), else TeamKernel's aligned team of nthreads (a power of two below 32, tid the
      // lane's place in it); 0 for one lane per row (nothing shared).
      const int lane = static_cast<int>(threadIdx.x % kWarpSize);
      const unsigned row_lanes =
          nthreads % kWarpSize == 0 ? 0xFFFFFFFFu
          : nthreads == 1           ? 0u
                                    : ((1u << nthreads) - 1u) << (lane / nthreads * nthreads);
      // What this thread's visits of the row carry from one to the next (e.g. a threshold).
      // The lanes of a warp that visit a chunk together visited every earlier one together:
      // a lane that has no vector in a round has none later either.
      typename Policy::Row::VisitState state{};
      state.block_best = block_best;
      // One round's vectors (buf: from vector v, `remaining` = num_vecs - v of the row left).
      auto visit_round = [&](const V (&buf)[kRound], int32_t v, int32_t remaining) {
#pragma unroll
        for (int u0 = 0; u0 < kRound; u0 += kChunk) {
          if (u0 * nthreads < remaining) {
            const int32_t first = head + (v + u0 * nthreads) * kVec;
            if constexpr (kVisitChunks) {
              // Unconditional for the whole chunk (pure arithmetic, past the row's end too)
              // so the compiler interleaves the chains.
              const auto prepared = key_of.template Prepare<kVec, kChunk>(first, stride);
              // The chunk at once (kVisitChunks: kernels whose threads scan long rows, where a
              // row's best is good early and most chunks fail the policy's chunk-wide test).
              const int32_t left = (remaining - u0 * nthreads + nthreads - 1) / nthreads;
              const int count = left < kChunk ? static_cast<int>(left) : kChunk;
              key_of.template VisitPrepared<kVec, kChunk>(
                  reinterpret_cast<const Bits*>(&buf[u0]), first, stride, count, prepared,
                  best, best_index, row_lanes, state);
            } else {
              // Vector by vector: a thread with few vectors of a row (the split path) bounds
              // each vector by the best of the ones before. Few vectors per thread,
              // latency-bound: everything a visit may need prepared up front (kAll), for a
              // whole chunk at once (independent chains the compiler interleaves). Chunks of
              // two vectors (float32, bfloat16) where the thread holds only the first: that
              // one's alone (at one vector per thread, e.g. one row, the second one's
              // generator calls were wasted issue slots; NOTES.md try 48). Longer chunks
              // (float64's 4) keep the whole chunk's, so the held vectors' chains still
              // interleave.
              auto visit_vector = [&](int u, const auto& prepared) {  // buf[u0 + u]
                key_of.template VisitPrepared<kVec, 1, /*kLongScan=*/false>(
                    reinterpret_cast<const Bits*>(&buf[u0 + u]), first + u * stride, stride, 1,
                    prepared, best, best_index, row_lanes, state);
              };
              if constexpr (kChunk <= 2) {
                if (kChunk == 1 || (u0 + kChunk - 1) * nthreads < remaining) {
                  const auto prepared =
                      key_of.template Prepare<kVec, kChunk, true>(first, stride);
#pragma unroll
                  for (int u = 0; u < kChunk; ++u) {
                    visit_vector(u, Policy::Row::Vector(prepared, u));
                  }
                } else {
                  visit_vector(0, key_of.template Prepare<kVec, 1, true>(first, stride));
                }
              } else {
                const auto prepared = key_of.template Prepare<kVec, kChunk, true>(first, stride);
#pragma unroll
                for (int u = 0; u < kChunk; ++u) {
                  if ((u0 + u) * nthreads < remaining) {
                    visit_vector(u, Policy::Row::Vector(prepared, u));
                  }
                }
              }
            }
          }
        }
      };
      for (int32_t v = tid; v < num_vecs;) {
        const int32_t remaining = num_vecs - v;  // >= 1
        V buf[kRound];
        load_round(buf, v, remaining);
        if constexpr (kVisitChunks) {
          // The round after next into L2 (no registers): the visit of a round (the generator
          // and the chunk tests) is about as long as a load's trip to DRAM, so this round's
          // loads waited for it (NOTES.md try 42; two register buffers measured slower).
#pragma unroll
          for (int u = 0; u < kRound; ++u) {
            // num_vecs <= 2^31 / kVec and nthreads = 256 here: w does not overflow
            const int32_t w = v + (2 * kRound + u) * nthreads;
            if (w < num_vecs) PrefetchL2(vecs + w);
          }
        }
        visit_round(buf, v, remaining);
        if (remaining <= kRound * nthreads) break;
        v += kRound * nthreads;
      }
    } else {
      for (int32_t v = tid; v < num_vecs;) {
        const int32_t remaining = num_vecs - v;  // >= 1
        V buf[kRound];
        load_round(buf, v, remaining);
#pragma unroll
        for (int u = 0; u < kRound; ++u) {
          if (u * nthreads < remaining) {
            key_of.template Visit<kVec>(reinterpret_cast<const Bits*>(&buf[u]),
                                        head + (v + u * nthreads) * kVec, best, best_index);
          }
        }
        if (remaining <= kRound * nthreads) break;
        v += kRound * nthreads;
      }
    }
  }

  for (int32_t c = tid; c < cols - tail_start; c += nthreads) {
    visit(LoadBits(row + tail_start + c), tail_start + c);
  }
  return {best, best_index};
}

// ---------------------------------------------------------------------------------------------
// Kernels. Each takes the policy and the epilogue by value (kernel parameters).

template <class Policy, class Epilogue, int kTeam>
__global__ void __launch_bounds__(kBlockThreads, PolicyTraits<Policy>::kMinBlocksPerSm)
    TeamKernel(const typename Policy::Bits* x, int64_t rows, int32_t cols, Policy policy,
               Epilogue epilogue) {
  using Pair = ArgPair<typename Policy::Key>;
  GridDependencyWait();
  const int lane = threadIdx.x % kWarpSize;
  if constexpr (kTeam <= kWarpSize) {
    constexpr int kTeamsPerWarp = kWarpSize / kTeam;
    const int team_lane = lane % kTeam;
    const int64_t warp =
        (static_cast<int64_t>(blockIdx.x) * kBlockThreads + threadIdx.x) / kWarpSize;
    const int64_t rows_per_pass =
        static_cast<int64_t>(gridDim.x) * (kBlockThreads / kWarpSize) * kTeamsPerWarp;
    // The loop bound is uniform across the warp, so every lane reaches the shuffles.
    for (int64_t first = warp * kTeamsPerWarp; first < rows; first += rows_per_pass) {
      const int64_t row = first + lane / kTeam;
      Pair p = Pair::Identity();
      if (row < rows) {
        p = ScanRow<Policy, kInFlight>(x + row * cols, cols, team_lane, kTeam,
                                       policy.ForRow(row));
      }
      p = WarpReduce<kTeam>(p, CombinePairs{});
      if (team_lane == 0 && row < rows) epilogue(row, p, x + row * cols);
    }
  } else {
    // A team of kTeam / 32 consecutive warps per row (kMaxTeam: two): each warp merges with
    // shuffles, the team's first warp merges the warps' pairs from shared memory.
    static_assert(kTeam % kWarpSize == 0 && kBlockThreads % kTeam == 0);
    constexpr int kTeamsPerBlock = kBlockThreads / kTeam;
    constexpr int kWarpsPerTeam = kTeam / kWarpSize;
    __shared__ Pair warp_best[kBlockThreads / kWarpSize];
    const int warp = threadIdx.x / kWarpSize;
    const int team_lane = threadIdx.x % kTeam;
    const int64_t rows_per_pass = static_cast<int64_t>(gridDim.x) * kTeamsPerBlock;
    // The loop bound is uniform across the block, so every thread reaches the barriers.
    for (int64_t first = static_cast<int64_t>(blockIdx.x) * kTeamsPerBlock; first < rows;
         first += rows_per_pass) {
      const int64_t row = first + threadIdx.x / kTeam;
      Pair p = Pair::Identity();
      if (row < rows) {
        p = ScanRow<Policy, kInFlight>(x + row * cols, cols, team_lane, kTeam,
                                       policy.ForRow(row));
      }
      p = WarpReduce<kWarpSize>(p, CombinePairs{});
      if (lane == 0) warp_best[warp] = p;
      __syncthreads();
      if (team_lane < kWarpSize) {  // the team's first warp
        p = lane < kWarpsPerTeam ? warp_best[warp + lane] : Pair::Identity();
        p = WarpReduce<kWarpsPerTeam>(p, CombinePairs{});
        if (lane == 0 && row < rows) epilogue(row, p, x + row * cols);
      }
      __syncthreads();  // warp_best is read before the next pass writes it
    }
  }
}

// One block of kThreads per row; blocks loop over rows. Blocks wider than kBlockThreads are
// for policies that are not compute-bound (launch_plan.h, kWideBlockThreads).
template <class Policy, class Epilogue, int kThreads = kBlockThreads>
__global__ void __launch_bounds__(kThreads,
                                  kThreads == kBlockThreads ? PolicyTraits<Policy>::kMinBlocksPerSm
                                                            : 1)
    BlockKernel(const typename Policy::Bits* x, int64_t rows, int32_t cols, Policy policy,
                Epilogue epilogue) {
  using Key = typename Policy::Key;
  using Pair = ArgPair<Key>;
  constexpr int kLoads = PolicyTraits<Policy>::kBlockLoadsInFlight;
  constexpr bool kSharedBest = PolicyTraits<Policy>::kSharesBlockBest;
  __shared__ Key block_best;  // the row's best key so far over the block
  GridDependencyWait();
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    if constexpr (kSharedBest) {
      // The previous row's last use was before BlockReduce's closing barrier.
      if (threadIdx.x == 0) block_best = KeyLimits<Key>::kLowest;
      __syncthreads();
    }
    auto p = ScanRow<Policy, kLoads, false, true>(x + row * cols, cols, threadIdx.x,
                                                  kThreads, policy.ForRow(row),
                                                  kSharedBest ? &block_best : nullptr);
    p = BlockReduce<kThreads>(p, CombinePairs{}, Pair::Identity());
    if (threadIdx.x == 0) epilogue(row, p, x + row * cols);
  }
}

// Split path. Block b scans part b % parts of row b / parts (the launch has exactly rows * parts
// blocks) and stores its best pair in partials[b] (XLA's workspace). Then the row's winner is
// merged from the partials by one warp per row, either
//  - kLastBlockMerges: in the same kernel, by the block that finishes last. Each block's thread 0
//    stores its partial and increments the call site's counter with one acq_rel atomic (release:
//    the partial is visible before the count; acquire, for the last block: every partial is);
//    atom.inc wraps to 0 at the last block, so the counter is zero again when the kernel ends,
//    ready for the next launch from that call site without a memset (launch_plan.h,
//    kCallSiteSlots); or
//  - a second kernel (SplitMergeKernel) launched behind this one.
// Lets our consumer launch at once (it waits for our end in its own griddepcontrol.wait).
// One counter per call site (an FFI instantiate-stage slot, cuda_handlers.cc) on each device:
// launches from one call site are ordered (one stream; a PDL launch touches the counter only
// after griddepcontrol.wait, i.e. after the previous launch has completed).
static __device__ unsigned int g_split_counters[kCallSiteSlots];

// One whole warp merges the partials of `row` and runs the epilogue. The partials were written
// by other blocks: read through L2 (ld.global.cg), never from a possibly stale L1 line.
template <class Policy, class Epilogue>
__device__ __forceinline__ void MergeRow(const typename Policy::Bits* x, int64_t row,
                                         int32_t cols, int32_t parts,
                                         const ArgPair<typename Policy::Key>* partials,
                                         const Epilogue& epilogue) {
  using Pair = ArgPair<typename Policy::Key>;
  const int lane = threadIdx.x % kWarpSize;
  Pair q = Pair::Identity();
  for (int32_t i = lane; i < parts; i += kWarpSize) {
    const Pair* src = partials + row * parts + i;
    q = Combine(q, Pair{__ldcg(&src->key), __ldcg(&src->index)});
  }
  q = WarpReduce<kWarpSize>(q, CombinePairs{});
  if (lane == 0) epilogue(row, q, x + row * cols);
}

template <class Policy, class Epilogue, bool kLastBlockMerges>
__global__ void __launch_bounds__(kBlockThreads, PolicyTraits<Policy>::kMinBlocksPerSm)
    SplitScanKernel(const typename Policy::Bits* x, int64_t rows, int32_t cols, int32_t parts,
                    Policy policy, ArgPair<typename Policy::Key>* partials, Epilogue epilogue,
                    uint32_t counter_slot) {
  using Key = typename Policy::Key;
  using Pair = ArgPair<Key>;
  constexpr bool kSharedBest = PolicyTraits<Policy>::kSharesBlockBest;
  __shared__ Key block_best;  // the best key so far over the block (its part of the row)
  TriggerDependents();
  GridDependencyWait();
  if constexpr (kSharedBest) {
    if (threadIdx.x == 0) block_best = KeyLimits<Key>::kLowest;
    __syncthreads();
  }
  const int64_t row = blockIdx.x / parts;
  const int32_t part = static_cast<int32_t>(blockIdx.x % parts);
  auto p = ScanRow<Policy, kInFlight, true>(x + row * cols, cols,
                                            part * kBlockThreads + threadIdx.x,
                                            parts * kBlockThreads, policy.ForRow(row),
                                            kSharedBest ? &block_best : nullptr);
  p = BlockReduce<kBlockThreads>(p, CombinePairs{}, Pair::Identity());
  if constexpr (!kLastBlockMerges) {
    if (threadIdx.x == 0) partials[blockIdx.x] = p;
  } else {
    __shared__ bool is_last;
    if (threadIdx.x == 0) {
      partials[blockIdx.x] = p;
      is_last = AtomicIncAcqRel(&g_split_counters[counter_slot], gridDim.x - 1) ==
                gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last) return;
    for (int64_t r = threadIdx.x / kWarpSize; r < rows; r += kBlockThreads / kWarpSize) {
      MergeRow<Policy>(x, r, cols, parts, partials, epilogue);
    }
  }
}

// The split path's second kernel (kLastBlockMerges false): one warp per row.
// griddepcontrol.wait returns once the scan kernel has completed and its writes are visible.
template <class Policy, class Epilogue>
__global__ void __launch_bounds__(kBlockThreads)
    SplitMergeKernel(const typename Policy::Bits* x, int64_t rows, int32_t cols, int32_t parts,
                     const ArgPair<typename Policy::Key>* partials, Epilogue epilogue) {
  GridDependencyWait();
  const int64_t row =
      (static_cast<int64_t>(blockIdx.x) * kBlockThreads + threadIdx.x) / kWarpSize;
  if (row >= rows) return;  // whole warps leave together
  MergeRow<Policy>(x, row, cols, parts, partials, epilogue);
}

// ---------------------------------------------------------------------------------------------
// Host side: device capabilities (read once per device and kernel set) and the launcher.

// The capabilities of `device` for the kernels of one (Policy, Epilogue) pair, read once per
// device (the call must run with `device` current).
template <class Policy, class Epilogue>
cudaError_t GetDeviceCaps(int device, DeviceCaps* caps) {
  static std::mutex mu;
  static std::map<int, DeviceCaps> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(device);
  if (it == cache.end()) {
    DeviceCaps c;
    cudaError_t err = cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, device);
    if (err == cudaSuccess) {
      err = cudaDeviceGetAttribute(&c.cc_major, cudaDevAttrComputeCapabilityMajor, device);
    }
    // The team kernels share ScanRow<kInFlight> and have about the same register count (the
    // two-warp team no more than one warp's, sm_90 build): the one-warp team's occupancy
    // stands for all of them.
    if (err == cudaSuccess) {
      err = BlocksPerSm(reinterpret_cast<const void*>(&TeamKernel<Policy, Epilogue, kWarpSize>),
                        kBlockThreads, &c.team_blocks_per_sm);
    }
    if (err == cudaSuccess) {
      err = BlocksPerSm(reinterpret_cast<const void*>(&BlockKernel<Policy, Epilogue>),
                        kBlockThreads, &c.block_blocks_per_sm);
    }
    if (err == cudaSuccess) {
      err = BlocksPerSm(
          reinterpret_cast<const void*>(&SplitScanKernel<Policy, Epilogue, true>),
          kBlockThreads, &c.split_blocks_per_sm);
    }
    if (err != cudaSuccess) return err;
    it = cache.emplace(device, c).first;
  }
  *caps = it->second;
  return cudaSuccess;
}

template <class Policy, class Epilogue>
cudaError_t PlanRowReduceOn(int device, int64_t rows, int64_t cols, const PlanOptions& options,
                            bool graph_captured, LaunchPlan* plan) {
  DeviceCaps caps;
  const cudaError_t err = GetDeviceCaps<Policy, Epilogue>(device, &caps);
  if (err != cudaSuccess) return err;
  using Traits = PolicyTraits<Policy>;
  *plan = PlanRowReduce(caps, rows, cols, sizeof(typename Traits::Bits),
                        sizeof(typename Traits::Key), options, Traits::kComputeBound,
                        graph_captured, Traits::kVecBytes);
  return cudaSuccess;
}

// Reduces every row of x ([rows, cols] row-major, 1 <= cols <= INT32_MAX) on `stream` of
// `device` (current), per `plan`. `workspace` must hold plan.workspace_bytes, 16-byte aligned.
template <class Policy, class Epilogue>
cudaError_t LaunchPlanned(const LaunchPlan& plan, cudaStream_t stream,
                          const typename Policy::Bits* x, int64_t rows, int32_t cols,
                          const Policy& policy, const Epilogue& epilogue, void* workspace,
                          uint32_t counter_slot) {
  using Pair = ArgPair<typename Policy::Key>;
  cudaError_t err = cudaSuccess;
  switch (plan.path) {
    case Path::kTeam:
      switch (plan.team) {
#define JAX_ARGREDUCE_TEAM_CASE(T)                                                          \
  case T:                                                                                   \
    err = LaunchEx(TeamKernel<Policy, Epilogue, T>, plan.grid, plan.block, stream, plan.pdl, \
                   x, rows, cols, policy, epilogue);                                        \
    break;
        JAX_ARGREDUCE_TEAM_CASE(1)
        JAX_ARGREDUCE_TEAM_CASE(2)
        JAX_ARGREDUCE_TEAM_CASE(4)
        JAX_ARGREDUCE_TEAM_CASE(8)
        JAX_ARGREDUCE_TEAM_CASE(16)
        JAX_ARGREDUCE_TEAM_CASE(32)
#undef JAX_ARGREDUCE_TEAM_CASE
        // Two-warp teams: not for compute-bound policies (the planner gives them at most a
        // warp).
        case 64:
          if constexpr (!PolicyTraits<Policy>::kComputeBound) {
            err = LaunchEx(TeamKernel<Policy, Epilogue, 64>, plan.grid, plan.block, stream,
                           plan.pdl, x, rows, cols, policy, epilogue);
            break;
          } else {
            return cudaErrorInvalidConfiguration;
          }
        default:
          return cudaErrorInvalidConfiguration;
      }
      break;
    case Path::kBlock:
      if (plan.block == kBlockThreads) {
        err = LaunchEx(BlockKernel<Policy, Epilogue>, plan.grid, plan.block, stream, plan.pdl, x,
                       rows, cols, policy, epilogue);
        break;
      }
      // Wide blocks: not for compute-bound policies (the planner widens no such plan).
      if constexpr (!PolicyTraits<Policy>::kComputeBound) {
        if (plan.block == kWideBlockThreads) {
          err = LaunchEx(BlockKernel<Policy, Epilogue, kWideBlockThreads>, plan.grid,
                         plan.block, stream, plan.pdl, x, rows, cols, policy, epilogue);
          break;
        }
      }
      return cudaErrorInvalidConfiguration;
    case Path::kSplit: {
      Pair* partials = static_cast<Pair*>(workspace);
      if (plan.last_block_merges) {
        err = LaunchEx(SplitScanKernel<Policy, Epilogue, true>, plan.grid, plan.block, stream,
                       plan.pdl, x, rows, cols, plan.parts, policy, partials, epilogue,
                       counter_slot % kCallSiteSlots);
        break;
      }
      err = LaunchEx(SplitScanKernel<Policy, Epilogue, false>, plan.grid, plan.block, stream,
                     plan.pdl, x, rows, cols, plan.parts, policy, partials, epilogue,
                     counter_slot % kCallSiteSlots);
      if (err != cudaSuccess) return err;
      err = LaunchEx(SplitMergeKernel<Policy, Epilogue>, plan.merge_grid, kBlockThreads, stream,
                     plan.pdl, x, rows, cols, plan.parts, static_cast<const Pair*>(partials),
                     epilogue);
      break;
    }
  }
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

// Plans and launches: the whole CUDA side of one op call. `workspace` is XLA's workspace
// buffer (kWorkspaceBytes, contents arbitrary on entry); `counter_slot` the call site's slot
// (kCallSiteSlots: no two call sites that may run at once share one).
template <class Policy, class Epilogue>
cudaError_t LaunchRowReduce(cudaStream_t stream, int device, uint32_t counter_slot,
                            const PlanOptions& options,
                            const typename Policy::Bits* x, int64_t rows, int64_t cols,
                            const Policy& policy, const Epilogue& epilogue, void* workspace,
                            size_t workspace_bytes) {
  if (rows == 0) return cudaSuccess;
  if (cols < 1 || cols > INT32_MAX) return cudaErrorInvalidValue;
  // Being captured into a CUDA graph (an XLA command buffer) or launched from the host now.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream, &capture);
  if (err != cudaSuccess) return err;
  LaunchPlan plan;
  err = PlanRowReduceOn<Policy, Epilogue>(device, rows, cols, options,
                                          capture == cudaStreamCaptureStatusActive, &plan);
  if (err != cudaSuccess) return err;
  // XLA buffers are aligned; align by hand anyway rather than trust it.
  const uintptr_t raw = reinterpret_cast<uintptr_t>(workspace);
  const uintptr_t aligned = (raw + 15) & ~uintptr_t{15};
  if (plan.workspace_bytes > 0 && plan.workspace_bytes + (aligned - raw) > workspace_bytes) {
    return cudaErrorInvalidValue;
  }
  return LaunchPlanned(plan, stream, x, rows, static_cast<int32_t>(cols), policy, epilogue,
                       reinterpret_cast<void*>(aligned), counter_slot);
}

}  // namespace row_reduce
}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_ROW_REDUCE_CUH_
