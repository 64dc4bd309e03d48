// Device utilities shared by every CUDA kernel of the package (row reduce, row select): the
// vector loads, programmatic dependent launch, warp shuffles and reductions generic over the
// value and its combine (the (key, index) pair of order.h is one instance), atomics, and the
// host's launch and occupancy helpers. No op logic here.
//
// Programmatic dependent launch (sm_90+): a kernel may be launched before the kernel ahead of it
// in the stream has finished (the producer of our input, or our own previous kernel), so every
// kernel waits (GridDependencyWait) before its first global memory access, and reads its input
// with plain coherent loads (ld.global, never the non-coherent .nc path): XLA may have given our
// buffers to the producer.
#ifndef JAX_ARGREDUCE_FFI_DEVICE_CUH_
#define JAX_ARGREDUCE_FFI_DEVICE_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "launch_plan.h"
#include "order.h"

namespace jax_argreduce {
namespace device {

using Vec = uint4;  // one 16-byte load
struct alignas(32) Vec32 {  // two 16-byte loads, one vector (a key policy's kVecBytes = 32)
  uint4 lo, hi;
};

// Plain coherent loads (see the file comment): ld.global through L1, never the non-coherent
// .nc path. (ld.global.cg, which skips L1, measured slower: NOTES.md try 19.) The
// vectors are read once, so their L2 lines are marked evict-first (an L2 cache-policy hint,
// not a change of semantics): in-chain, where the producer's freshest output still sits in L2
// (dirty) when a row is larger than it, the lines our misses bring in are evicted before the
// producer's lines we have yet to read (NOTES.md try 41; isolated spans unchanged).
__device__ __forceinline__ Vec LoadVec(const Vec* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // cache policies: sm_80 and later
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));  // pure: CSE'd
  Vec v;
  // volatile: never moved above griddepcontrol.wait (asm volatile statements keep their order)
  asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
#else
  return *p;
#endif
}
__device__ __forceinline__ Vec32 LoadVec(const Vec32* p) {
  return Vec32{LoadVec(&p->lo), LoadVec(&p->hi)};
}
// Brings the line of p into L2 (a hint: no register, no result; after griddepcontrol.wait).
template <class V>
__device__ __forceinline__ void PrefetchL2(const V* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
template <class Bits>
__device__ __forceinline__ Bits LoadBits(const Bits* p) {
  return *p;
}

__device__ __forceinline__ void GridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void TriggerDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A value from the lane `lane_mask` away within aligned groups of `width` lanes (all 32 lanes
// of the warp call it): an integer of 4 or 8 bytes.
template <class T>
__device__ __forceinline__ T ShuffleXor(T v, int lane_mask, int width) {
  static_assert(std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
  if constexpr (sizeof(T) == 8) {
    return static_cast<T>(
        __shfl_xor_sync(0xffffffffu, static_cast<long long>(v), lane_mask, width));
  } else {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask, width);
  }
}

template <class T>
struct IsArgPair : std::false_type {};
template <class Key>
struct IsArgPair<ArgPair<Key>> : std::true_type {};

// Reductions of a T under `op`, which must be associative and commutative (the lanes merge in
// butterfly order, the warps' results in lane order). order.h's CombinePairs, a total order on
// (key, index), is: its result does not depend on the launch geometry.
//
// Merges within aligned groups of kWidth lanes (all 32 lanes of the warp call it, kWidth a
// power of two up to 32); every lane of a group ends with the group's result. T: an integer
// (ShuffleXor) or an ArgPair, which crosses lanes as its two fields. The pair's shuffles are
// written out here, not in a ShuffleXor overload returning the pair: with that extra call, the
// callers of kWidth 1 (which shuffle nothing) compiled to different code.
template <int kWidth, class T, class Op>
__device__ __forceinline__ T WarpReduce(T v, Op op) {
  static_assert(kWidth >= 1 && kWidth <= kWarpSize && (kWidth & (kWidth - 1)) == 0);
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    if constexpr (IsArgPair<T>::value) {
      v = op(v, T{ShuffleXor(v.key, offset, kWidth), ShuffleXor(v.index, offset, kWidth)});
    } else {
      v = op(v, ShuffleXor(v, offset, kWidth));
    }
  }
  return v;
}

// The largest v of the warp's 32 lanes, in every lane (all 32 call it). 32-bit integers take
// one redux instruction on sm_80 and later (`__reduce_max_sync`) instead of WarpReduce's five
// shuffles and five compares; other types and older targets take WarpReduce.
template <class T>
__device__ __forceinline__ T WarpMax(T v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t>) {
    return __reduce_max_sync(0xFFFFFFFFu, v);
  } else
#endif
  {
    return WarpReduce<kWarpSize>(v, [](T a, T b) { return a > b ? a : b; });
  }
}

// Merges over a block of kThreads (every thread calls it); the result is valid in thread 0.
// `identity` (op(identity, x) == x) stands for the missing warps in the last step, which
// merges over a whole warp. Ends with a barrier, so the shared scratch can be reused by the
// next call.
template <int kThreads, class T, class Op>
__device__ __forceinline__ T BlockReduce(T v, Op op, T identity) {
  constexpr int kWarps = kThreads / kWarpSize;
  static_assert(kThreads % kWarpSize == 0 && kWarps <= kWarpSize,
                "whole warps; one warp merges the warps' results");
  __shared__ T warp_result[kWarps];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  v = WarpReduce<kWarpSize>(v, op);
  if (lane == 0) warp_result[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? warp_result[lane] : identity;
    v = WarpReduce<kWarpSize>(v, op);
  }
  __syncthreads();
  return v;
}

__device__ __forceinline__ unsigned int AtomicIncAcqRel(unsigned int* counter, unsigned int limit) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  unsigned int old;
  asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(counter), "r"(limit)
               : "memory");
  return old;
#else  // no acq_rel atomics before sm_70: fences around a relaxed atomicInc
  __threadfence();
  const unsigned int old = atomicInc(counter, limit);
  __threadfence();
  return old;
#endif
}

inline cudaError_t BlocksPerSm(const void* kernel, int threads, int* blocks) {
  int n = 0;
  const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0);
  *blocks = n > 0 ? n : 1;
  return err;
}

// cudaLaunchKernelEx with the optional PDL attribute.
template <class... Params, class... Args>
cudaError_t LaunchEx(void (*kernel)(Params...), int64_t grid, int block, cudaStream_t stream,
                     bool pdl, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(block);
  config.stream = stream;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace device
}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_DEVICE_CUH_
