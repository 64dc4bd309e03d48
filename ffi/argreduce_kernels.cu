// CUDA argmax/argmin over the last axis of a row-major [rows, cols] array.
//
// Device code is a small algebra over ArgPair (order.h): thread -> team of lanes
// (warp shuffles) -> block (shared memory) -> grid (workspace + done counter). Because the
// combine step is a total order on (key, index), every reduction order gives the same answer:
// the result is exactly numpy's, whatever the launch geometry.
//
// Three kernels:
//   TeamKernel<kTeam>: kTeam lanes (1..32) share a row; for narrow and medium rows, many rows.
//   ClusterKernel (sm_90+): few wide rows; a thread block cluster of 1-16 blocks of 512
//     threads per row, merged through distributed shared memory. One launch, no workspace.
//   BlockKernel: one block per row (blocks loop over rows) or, without clusters, several
//     blocks per row. With several, each block writes its partial to the workspace,
//     __threadfence()s, and bumps the row's done counter; the block that sees the count reach
//     blocks_per_row - 1 is the last, and it alone reduces the row's partials and writes the
//     index. The handler zeroes the counters on the stream before the launch (the workspace is
//     XLA's, its contents arbitrary).
//
// Overflow: a row has at most INT32_MAX columns. Positions inside a row are 32-bit and the
// scan is written with differences (`remaining = n - v`, offsets formed only once checked to
// be smaller than `remaining`), so no 32-bit sum can pass INT32_MAX. Row offsets are 64-bit.
#include "argreduce_kernels.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace jax_argreduce {
namespace {

// Tuning knobs, measured on the H200 (benchmarks/NOTES.md); `benchmarks/gpu_check.sh sweep`
// rebuilds with -D overrides to compare variants in one run.
#ifndef JAX_ARGREDUCE_UNROLL
#define JAX_ARGREDUCE_UNROLL 4
#endif
#ifndef JAX_ARGREDUCE_BLOCK_UNROLL
#define JAX_ARGREDUCE_BLOCK_UNROLL 8
#endif
#ifndef JAX_ARGREDUCE_CLUSTER_BLOCK_THREADS
#define JAX_ARGREDUCE_CLUSTER_BLOCK_THREADS 512
#endif
#ifndef JAX_ARGREDUCE_MIN_ELEMENTS_PER_THREAD
#define JAX_ARGREDUCE_MIN_ELEMENTS_PER_THREAD 4
#endif
#ifndef JAX_ARGREDUCE_TEAM_WAVES
#define JAX_ARGREDUCE_TEAM_WAVES 1
#endif
#ifndef JAX_ARGREDUCE_OVERSUBSCRIBE
#define JAX_ARGREDUCE_OVERSUBSCRIBE 1
#endif

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = kBlockThreads / kWarpSize;
// Cluster path (sm_90+): blocks of this many threads, clusters of up to 16 blocks per row.
constexpr int kClusterBlockThreads = JAX_ARGREDUCE_CLUSTER_BLOCK_THREADS;
constexpr int kMaxClusterBlocks = 16;
// 16-byte loads in flight per thread in the scan loop: team and cluster kernels (many threads
// per row, or many rows per SM) and the block kernel (one 256-thread block per long row, so few
// threads per SM: more loads in flight each).
constexpr int kUnroll = JAX_ARGREDUCE_UNROLL;
constexpr int kBlockUnroll = JAX_ARGREDUCE_BLOCK_UNROLL;
// At least this many elements per thread before more threads are given to a row.
constexpr int kMinElementsPerThread = JAX_ARGREDUCE_MIN_ELEMENTS_PER_THREAD;
// The team kernel's grid: at most max(kTeamWaves, kOversubscribe) waves of resident blocks
// (kTeamWaves 0: one block per kBlockThreads / team rows, no cap; the rows are then covered
// without a grid-stride loop).
constexpr int kTeamWaves = JAX_ARGREDUCE_TEAM_WAVES;
// Threads shared out among the rows: this many waves of the device (the hardware scheduler
// balances the blocks of later waves).
constexpr int kOversubscribe = JAX_ARGREDUCE_OVERSUBSCRIBE;
static_assert(kClusterBlockThreads % kWarpSize == 0 && kClusterBlockThreads >= kWarpSize &&
                  kClusterBlockThreads <= 1024,
              "cluster blocks are whole warps, at most 1024 threads");
static_assert(kUnroll >= 1 && kBlockUnroll >= 1 && kMinElementsPerThread >= 1 &&
                  kTeamWaves >= 0 && kOversubscribe >= 1,
              "tuning knobs out of range");
// Rows that could use at least this many threads go to the block path.
constexpr int kBlockPathMinThreads = 256;

using Vec = uint4;  // one 16-byte load

template <Format F>
using BitsOf = typename FormatTraits<F>::Bits;
template <Format F>
using KeyOf = typename FormatTraits<F>::Key;

// Element j of a 16-byte vector (j is a compile-time constant after unrolling).
template <class Bits>
__device__ __forceinline__ Bits Element(const Vec& v, int j) {
  return reinterpret_cast<const Bits*>(&v)[j];
}

template <class Key>
__device__ __forceinline__ Key ShuffleXor(Key v, int lane_mask, int width) {
  if constexpr (sizeof(Key) == 8) {
    return static_cast<Key>(
        __shfl_xor_sync(0xffffffffu, static_cast<long long>(v), lane_mask, width));
  } else {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask, width);
  }
}

// Merge within aligned groups of kWidth lanes (all 32 lanes of the warp must call this).
// Every lane of a group ends with the group's best pair.
template <int kWidth, class Key>
__device__ __forceinline__ ArgPair<Key> WarpReduce(ArgPair<Key> p) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    ArgPair<Key> other{ShuffleXor(p.key, offset, kWidth),
                       __shfl_xor_sync(0xffffffffu, p.index, offset, kWidth)};
    p = Combine(p, other);
  }
  return p;
}

// Merge over the block; the result is valid in thread 0. Ends with a barrier, so the shared
// scratch can be reused by the next call.
template <int kThreads, class Key>
__device__ __forceinline__ ArgPair<Key> BlockReduce(ArgPair<Key> p) {
  constexpr int kWarps = kThreads / kWarpSize;
  static_assert(kWarps <= kWarpSize, "one warp merges the warps' results");
  __shared__ ArgPair<Key> warp_best[kWarps];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  p = WarpReduce<kWarpSize>(p);
  if (lane == 0) warp_best[warp] = p;
  __syncthreads();
  if (warp == 0) {
    p = lane < kWarps ? warp_best[lane] : ArgPair<Key>::Identity();
    p = WarpReduce<kWarpSize>(p);
  }
  __syncthreads();
  return p;
}

// The largest key among the elements of one 16-byte vector. On sm_80+ the elements are first
// merged in their own format with NaN-propagating max (min for argmin): a NaN anywhere gives a
// NaN, whose key is the largest; otherwise the survivor is a largest (smallest) value, whose key
// is the vector's best (-0/+0 share key 0; these instructions have no .ftz, so subnormals
// compare exactly). One key computation per vector instead of one per element. The caller finds
// the element's position again by key, so which of equal elements survives does not matter.
template <Format F, bool kIsMin>
__device__ __forceinline__ KeyOf<F> VectorKeyByElement(const Vec& v) {
  constexpr int kVec = sizeof(Vec) / sizeof(BitsOf<F>);
  KeyOf<F> best = OrderedKey<F, kIsMin>(Element<BitsOf<F>>(v, 0));
#pragma unroll
  for (int j = 1; j < kVec; ++j) best = max(best, OrderedKey<F, kIsMin>(Element<BitsOf<F>>(v, j)));
  return best;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define JAX_ARGREDUCE_NAN_MINMAX(name, op, type, cons)                          \
  __device__ __forceinline__ type name(type a, type b) {                        \
    type d;                                                                     \
    asm(op " %0, %1, %2;" : "=" cons(d) : cons(a), cons(b));                    \
    return d;                                                                   \
  }
JAX_ARGREDUCE_NAN_MINMAX(MaxNaNF32, "max.NaN.f32", float, "f")
JAX_ARGREDUCE_NAN_MINMAX(MinNaNF32, "min.NaN.f32", float, "f")
JAX_ARGREDUCE_NAN_MINMAX(MaxNaNBF16x2, "max.NaN.bf16x2", uint32_t, "r")
JAX_ARGREDUCE_NAN_MINMAX(MinNaNBF16x2, "min.NaN.bf16x2", uint32_t, "r")
JAX_ARGREDUCE_NAN_MINMAX(MaxNaNF16x2, "max.NaN.f16x2", uint32_t, "r")
JAX_ARGREDUCE_NAN_MINMAX(MinNaNF16x2, "min.NaN.f16x2", uint32_t, "r")
#undef JAX_ARGREDUCE_NAN_MINMAX
#endif

template <Format F, bool kIsMin>
__device__ __forceinline__ KeyOf<F> VectorKey(const Vec& v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (F == Format::kF32) {
    auto op = [](float a, float b) { return kIsMin ? MinNaNF32(a, b) : MaxNaNF32(a, b); };
    const float m = op(op(__uint_as_float(v.x), __uint_as_float(v.y)),
                       op(__uint_as_float(v.z), __uint_as_float(v.w)));
    return OrderedKey<F, kIsMin>(__float_as_uint(m));
  } else if constexpr (F == Format::kBF16 || F == Format::kF16) {
    auto op = [](uint32_t a, uint32_t b) {
      if constexpr (F == Format::kBF16) return kIsMin ? MinNaNBF16x2(a, b) : MaxNaNBF16x2(a, b);
      else return kIsMin ? MinNaNF16x2(a, b) : MaxNaNF16x2(a, b);
    };
    const uint32_t m = op(op(v.x, v.y), op(v.z, v.w));
    const uint32_t m1 = op(m, __byte_perm(m, 0, 0x1032));  // both halves hold the survivor
    return OrderedKey<F, kIsMin>(static_cast<uint16_t>(m1 & 0xFFFFu));
  } else {
    return VectorKeyByElement<F, kIsMin>(v);
  }
#else
  return VectorKeyByElement<F, kIsMin>(v);
#endif
}

// This thread's best pair over its share of one row. The row is split into a scalar head (up
// to the first 16-byte boundary), a body of 16-byte vectors, and a scalar tail. Thread `tid`
// of `nthreads` takes vectors tid, tid + nthreads, ... Each thread visits its elements in
// increasing column order, so the strict '>' keeps the lowest index among equal keys.
template <Format F, bool kIsMin, int kInFlight>
__device__ __forceinline__ ArgPair<KeyOf<F>> ScanRow(const BitsOf<F>* __restrict__ row,
                                                     int32_t cols, int32_t tid,
                                                     int32_t nthreads) {
  using Bits = BitsOf<F>;
  using Key = KeyOf<F>;
  constexpr int kVec = sizeof(Vec) / sizeof(Bits);
  Key best = KeyLimits<Key>::kLowest;
  int32_t best_index = 0x7FFFFFFF;
  auto visit = [&](Bits bits, int32_t index) {
    const Key key = OrderedKey<F, kIsMin>(bits);
    if (key > best) {
      best = key;
      best_index = index;
    }
  };

  const int32_t misalign =
      static_cast<int32_t>((reinterpret_cast<uintptr_t>(row) % sizeof(Vec)) / sizeof(Bits));
  const int32_t head = min(cols, misalign == 0 ? 0 : kVec - misalign);
  const int32_t num_vecs = (cols - head) / kVec;
  const int32_t tail_start = head + num_vecs * kVec;  // <= cols

  for (int32_t c = tid; c < head; c += nthreads) visit(row[c], c);

  // Body: track only the best key per vector and the first vector that reached it; the
  // element's column is recovered once at the end from that vector (reloaded: keeping it in
  // registers instead costs 10-20 registers per thread, and occupancy is register-bound).
  const Vec* __restrict__ vecs = reinterpret_cast<const Vec*>(row + head);
  Key body_best = KeyLimits<Key>::kLowest;
  int32_t body_vec = -1;
  for (int32_t v = tid; v < num_vecs;) {
    const int32_t remaining = num_vecs - v;  // >= 1
    Vec buf[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      if (u * nthreads < remaining) buf[u] = __ldg(vecs + v + u * nthreads);
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      if (u * nthreads < remaining) {
        const Key key = VectorKey<F, kIsMin>(buf[u]);
        if (key > body_best) {  // strict: the first vector (lowest columns) keeps a tie
          body_best = key;
          body_vec = v + u * nthreads;  // < num_vecs
        }
      }
    }
    if (remaining <= kInFlight * nthreads) break;
    v += kInFlight * nthreads;  // < num_vecs
  }
  // Head columns are lower than body columns: the body wins only with a strictly larger key.
  if (body_vec >= 0 && body_best > best) {
    const Vec w = __ldg(vecs + body_vec);
    int32_t j_first = kVec - 1;
#pragma unroll
    for (int j = kVec - 2; j >= 0; --j) {
      if (OrderedKey<F, kIsMin>(Element<Bits>(w, j)) == body_best) j_first = j;
    }
    best = body_best;
    best_index = head + body_vec * kVec + j_first;  // < tail_start
  }

  for (int32_t c = tid; c < cols - tail_start; c += nthreads) {
    visit(row[tail_start + c], tail_start + c);
  }
  return {best, best_index};
}

__device__ __forceinline__ void StoreIndex(void* indices, bool is_int64, int64_t row,
                                           int32_t index) {
  if (is_int64) {
    static_cast<int64_t*>(indices)[row] = index;
  } else {
    static_cast<int32_t*>(indices)[row] = index;
  }
}

template <Format F, bool kIsMin, int kTeam>
__global__ void __launch_bounds__(kBlockThreads)
    TeamKernel(const BitsOf<F>* __restrict__ x, int64_t rows, int32_t cols, void* indices,
               bool index_is_int64) {
  constexpr int kTeamsPerWarp = kWarpSize / kTeam;
  const int lane = threadIdx.x % kWarpSize;
  const int team_lane = lane % kTeam;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * kBlockThreads + threadIdx.x) / kWarpSize;
  const int64_t rows_per_pass = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock * kTeamsPerWarp;
  // The loop bound is uniform across the warp, so every lane reaches the shuffles.
  for (int64_t first = warp * kTeamsPerWarp; first < rows; first += rows_per_pass) {
    const int64_t row = first + lane / kTeam;
    ArgPair<KeyOf<F>> p = ArgPair<KeyOf<F>>::Identity();
    if (row < rows) p = ScanRow<F, kIsMin, kUnroll>(x + row * cols, cols, team_lane, kTeam);
    p = WarpReduce<kTeam>(p);
    if (team_lane == 0 && row < rows) StoreIndex(indices, index_is_int64, row, p.index);
  }
}

template <Format F, bool kIsMin>
__global__ void __launch_bounds__(kBlockThreads)
    BlockKernel(const BitsOf<F>* __restrict__ x, int64_t rows, int32_t cols,
                int32_t blocks_per_row, void* indices, bool index_is_int64,
                ArgPair<KeyOf<F>>* __restrict__ partials, uint32_t* __restrict__ done) {
  using Pair = ArgPair<KeyOf<F>>;
  __shared__ bool is_last;
  const int32_t part = blockIdx.x % blocks_per_row;
  const int64_t slot = blockIdx.x / blocks_per_row;
  const int64_t slots = gridDim.x / blocks_per_row;
  // With several blocks per row the planner launches one slot per row (slots == rows), so a
  // row's partials and counter are never reused within the launch.
  for (int64_t row = slot; row < rows; row += slots) {
    Pair p = ScanRow<F, kIsMin, kBlockUnroll>(x + row * cols, cols,
                                              part * kBlockThreads + threadIdx.x,
                                              blocks_per_row * kBlockThreads);
    p = BlockReduce<kBlockThreads>(p);
    if (blocks_per_row == 1) {
      if (threadIdx.x == 0) StoreIndex(indices, index_is_int64, row, p.index);
      continue;
    }
    if (threadIdx.x == 0) {
      partials[row * blocks_per_row + part] = p;
      // Release: the partial is visible device-wide before the counter can count it.
      __threadfence();
      is_last = atomicAdd(&done[row], 1u) == static_cast<uint32_t>(blocks_per_row - 1);
      // Acquire: what the other blocks wrote before their increments is visible to this
      // block's threads after the barrier below.
      if (is_last) __threadfence();
    }
    __syncthreads();
    if (is_last) {
      Pair q = Pair::Identity();
      for (int32_t i = threadIdx.x; i < blocks_per_row; i += kBlockThreads) {
        const Pair* src = partials + row * blocks_per_row + i;
        // L2 loads: the partials were written by other SMs.
        q = Combine(q, Pair{__ldcg(&src->key), __ldcg(&src->index)});
      }
      q = BlockReduce<kBlockThreads>(q);
      if (threadIdx.x == 0) StoreIndex(indices, index_is_int64, row, q.index);
    }
  }
}

// Few wide rows on Hopper: a thread block cluster per row. Each block reduces its share and
// writes its best pair straight into block 0's shared memory (distributed shared memory); one
// cluster barrier (release/acquire at cluster scope) later block 0 merges them. One launch, no
// workspace, no counter to zero.
template <Format F, bool kIsMin>
__global__ void __launch_bounds__(kClusterBlockThreads)
    ClusterKernel(const BitsOf<F>* __restrict__ x, int64_t rows, int32_t cols, void* indices,
                  bool index_is_int64) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Pair = ArgPair<KeyOf<F>>;
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ Pair cluster_best[kMaxClusterBlocks];  // used in block 0 only
  const int part = static_cast<int>(cluster.block_rank());
  const int parts = static_cast<int>(cluster.num_blocks());
  const int64_t row = blockIdx.x / parts;  // the launch has exactly rows * parts blocks
  // Split barrier: block 0's shared memory may only be written once every block of the
  // cluster has started; waiting for that after the scan costs nothing.
  cluster.barrier_arrive();
  Pair p = ScanRow<F, kIsMin, kUnroll>(x + row * cols, cols,
                                       part * kClusterBlockThreads + threadIdx.x,
                                       parts * kClusterBlockThreads);
  p = BlockReduce<kClusterBlockThreads>(p);
  cluster.barrier_wait();
  if (threadIdx.x == 0) cluster.map_shared_rank(cluster_best, 0)[part] = p;
  cluster.sync();  // the partials are in block 0 (release/acquire at cluster scope)
  if (part == 0 && threadIdx.x < kWarpSize) {
    Pair q = threadIdx.x < parts ? cluster_best[threadIdx.x] : Pair::Identity();
    q = WarpReduce<kWarpSize>(q);
    if (threadIdx.x == 0) StoreIndex(indices, index_is_int64, row, q.index);
  }
#else
  __trap();  // the planner never picks clusters below sm_90
#endif
}

struct DeviceInfo {
  int sms = 0;
  int max_threads_per_sm = 0;
  int major = 0;
};

// Read once per device: the launch path runs on every call.
cudaError_t GetDeviceInfo(int device, DeviceInfo* info) {
  static std::mutex mu;
  static std::vector<DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (device >= static_cast<int>(cache.size())) cache.resize(device + 1);
  if (cache[device].sms == 0) {
    DeviceInfo d;
    cudaError_t err = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device);
    if (err == cudaSuccess) {
      err = cudaDeviceGetAttribute(&d.max_threads_per_sm,
                                   cudaDevAttrMaxThreadsPerMultiProcessor, device);
    }
    if (err == cudaSuccess) {
      err = cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device);
    }
    if (err != cudaSuccess) return err;
    cache[device] = d;
  }
  *info = cache[device];
  return cudaSuccess;
}

// Resident blocks per SM of `kernel` (register-limited), read once per device and kernel.
cudaError_t GetBlocksPerSm(int device, const void* kernel, int* blocks) {
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({device, kernel});
  if (it == cache.end()) {
    int n = 0;
    cudaError_t err =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kBlockThreads, 0);
    if (err != cudaSuccess) return err;
    it = cache.emplace(std::make_pair(device, kernel), std::max(1, n)).first;
  }
  *blocks = it->second;
  return cudaSuccess;
}

// How many clusters of 1, 2, 4, 8 and 16 blocks of `kernel` the device holds at once (16
// needs the non-portable opt-in, which this sets on the kernel); all 0 before sm_90 or when
// JAX_ARGREDUCE_DISABLE_CLUSTERS=1 (benchmark A/B switch). Read once per device and kernel.
struct ClusterFit {
  int active[5] = {0, 0, 0, 0, 0};  // index i: clusters of 1 << i blocks
};

cudaError_t GetClusterFit(int device, int major, const void* kernel, ClusterFit* fit) {
  static const bool disabled = [] {
    const char* v = std::getenv("JAX_ARGREDUCE_DISABLE_CLUSTERS");
    return v != nullptr && v[0] == '1';
  }();
  *fit = ClusterFit();
  if (disabled || major < 9) return cudaSuccess;
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, ClusterFit> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({device, kernel});
  if (it == cache.end()) {
    ClusterFit f;
    const bool non_portable =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
        cudaSuccess;
    if (!non_portable) cudaGetLastError();  // clear our own refusal: it only rules out 16
    for (int i = 0; i <= 4; ++i) {
      const int size = 1 << i;
      if (size > 8 && !non_portable) continue;
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(size);
      config.blockDim = dim3(kClusterBlockThreads);
      cudaLaunchAttribute attribute;
      attribute.id = cudaLaunchAttributeClusterDimension;
      attribute.val.clusterDim.x = size;
      attribute.val.clusterDim.y = 1;
      attribute.val.clusterDim.z = 1;
      config.attrs = &attribute;
      config.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
        cudaGetLastError();  // clear our own failure: this size is simply not used
        clusters = 0;
      }
      f.active[i] = clusters;
    }
    it = cache.emplace(std::make_pair(device, kernel), f).first;
  }
  *fit = it->second;
  return cudaSuccess;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <class Key>
size_t WorkspaceLayout(int64_t blocks, size_t* counters_offset) {
  // [partials: one ArgPair per block][done counters: one per row, rows <= blocks]
  *counters_offset = static_cast<size_t>(blocks) * sizeof(ArgPair<Key>);
  return *counters_offset + static_cast<size_t>(blocks) * sizeof(uint32_t);
}

static_assert(kArgReduceWorkspaceBytes >=
                  kMaxMultiBlockGrid * (sizeof(ArgPair<int64_t>) + sizeof(uint32_t)) + 16,
              "the workspace holds a partial and a counter per block, +16 to align by hand");

struct DeviceCaps {
  int sms;
  int team_blocks_per_sm;   // resident blocks of the team kernel
  int block_blocks_per_sm;  // resident blocks of the block kernel
  ClusterFit clusters;      // co-resident clusters of the cluster kernel, per cluster size
};

LaunchPlan MakePlan(const DeviceCaps& caps, Format format, int64_t rows, int64_t cols) {
  const int elem_bytes = format == Format::kF64 ? 8 : format == Format::kF32 ? 4 : 2;
  LaunchPlan plan;
  plan.vector_elements = static_cast<int>(sizeof(Vec)) / elem_bytes;
  // One wave of the team kernel: the blocks the device holds at once.
  const int64_t team_capacity_blocks =
      static_cast<int64_t>(caps.sms) * caps.team_blocks_per_sm;
  const int64_t capacity_threads = team_capacity_blocks * kBlockThreads;
  const int64_t per_thread = std::max(kMinElementsPerThread, plan.vector_elements);
  const int64_t useful = CeilDiv(cols, per_thread);  // threads a row can feed
  const int64_t fair =
      std::max<int64_t>(1, kOversubscribe * capacity_threads / std::max<int64_t>(rows, 1));
  const int64_t threads_per_row = std::min(useful, fair);
  if (threads_per_row < kBlockPathMinThreads) {
    int team = 1;
    while (team * 2 <= std::min<int64_t>(threads_per_row, kWarpSize)) team *= 2;
    plan.team = team;
    const int64_t grid = CeilDiv(rows * team, kBlockThreads);
    plan.grid = std::max<int64_t>(
        1, std::min(grid, kTeamWaves > 0
                              ? std::max(kTeamWaves, kOversubscribe) * team_capacity_blocks
                              : int64_t{INT32_MAX}));
    plan.row_step = team * kUnroll * plan.vector_elements;
  } else {
    const int64_t block_capacity_blocks =
        static_cast<int64_t>(caps.sms) * caps.block_blocks_per_sm;  // block kernel's wave
    plan.blocks_per_row = static_cast<int>(std::max<int64_t>(
        1, std::min(CeilDiv(threads_per_row, kBlockThreads), block_capacity_blocks / rows)));
    // Largest cluster whose clusters all fit at once, one per row, no bigger than the row can
    // feed; size 1 (one kClusterBlockThreads block per row) while the rows' clusters all fit.
    // Up to one row per SM: with more rows, one block of the block kernel per row already
    // fills the device, and its deeper unroll measured faster (256x202048, NOTES.md).
    int cluster = 0;
    const int64_t blocks_fed = CeilDiv(useful, kClusterBlockThreads);
    for (int i = 4; i >= 0 && cluster == 0 && rows <= caps.sms; --i) {
      const int size = 1 << i;
      if (rows <= caps.clusters.active[i] && (size == 1 || blocks_fed > size / 2)) {
        cluster = size;
      }
    }
    const bool has_clusters = caps.clusters.active[0] > 0;
    if (plan.blocks_per_row == 1) {
      plan.grid = std::min(rows, kOversubscribe * block_capacity_blocks);
    } else if (cluster > 0) {
      // Few wide rows: one cluster per row, merged in distributed shared memory.
      plan.cluster = cluster;
      plan.blocks_per_row = cluster;
      plan.block = kClusterBlockThreads;
      plan.grid = rows * cluster;
    } else if (has_clusters || rows * 2 > kMaxMultiBlockGrid) {
      // More rows than SMs or than one wave of clusters holds: one 256-thread block each (no
      // workspace, no memset); also the fallback when the workspace cannot hold two partials
      // per row.
      plan.blocks_per_row = 1;
      plan.grid = std::min(rows, kOversubscribe * block_capacity_blocks);
    } else {
      // Pre-sm_90: several blocks per row through the workspace and the done counter.
      plan.blocks_per_row = static_cast<int>(
          std::min<int64_t>(plan.blocks_per_row, kMaxMultiBlockGrid / rows));
      plan.grid = rows * plan.blocks_per_row;  // <= kMaxMultiBlockGrid
      size_t counters_offset = 0;
      plan.workspace_bytes = format == Format::kF64
                                 ? WorkspaceLayout<int64_t>(plan.grid, &counters_offset)
                                 : WorkspaceLayout<int32_t>(plan.grid, &counters_offset);
    }
    plan.row_step = static_cast<int64_t>(plan.blocks_per_row) * plan.block *
                    (plan.cluster > 0 ? kUnroll : kBlockUnroll) * plan.vector_elements;
  }
  return plan;
}

template <Format F, bool kIsMin>
cudaError_t LaunchTyped(const LaunchPlan& plan, cudaStream_t stream, const void* x_raw,
                        int64_t rows, int32_t cols, void* indices, bool index_is_int64,
                        void* workspace) {
  const auto* x = static_cast<const BitsOf<F>*>(x_raw);
  const dim3 grid(static_cast<unsigned>(plan.grid));
  const dim3 block(plan.block);
  if (plan.cluster > 0) {
    // The planner set the non-portable cluster opt-in on this very kernel (GetClusterFit).
    cudaError_t err;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.stream = stream;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = plan.cluster;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    err = cudaLaunchKernelEx(&config, ClusterKernel<F, kIsMin>, x, rows, cols, indices,
                             index_is_int64);
    if (err != cudaSuccess) return err;
    return cudaGetLastError();
  }
  switch (plan.team) {
    case 0: {
      using Pair = ArgPair<KeyOf<F>>;
      Pair* partials = nullptr;
      uint32_t* done = nullptr;
      if (plan.blocks_per_row > 1) {
        size_t counters_offset = 0;
        WorkspaceLayout<KeyOf<F>>(plan.grid, &counters_offset);
        partials = static_cast<Pair*>(workspace);
        done = reinterpret_cast<uint32_t*>(static_cast<char*>(workspace) + counters_offset);
        cudaError_t err = cudaMemsetAsync(done, 0, rows * sizeof(uint32_t), stream);
        if (err != cudaSuccess) return err;
      }
      BlockKernel<F, kIsMin><<<grid, block, 0, stream>>>(x, rows, cols, plan.blocks_per_row,
                                                         indices, index_is_int64, partials,
                                                         done);
      break;
    }
#define JAX_ARGREDUCE_TEAM_CASE(T)                                                         \
  case T:                                                                                  \
    TeamKernel<F, kIsMin, T><<<grid, block, 0, stream>>>(x, rows, cols, indices,           \
                                                         index_is_int64);                  \
    break;
      JAX_ARGREDUCE_TEAM_CASE(1)
      JAX_ARGREDUCE_TEAM_CASE(2)
      JAX_ARGREDUCE_TEAM_CASE(4)
      JAX_ARGREDUCE_TEAM_CASE(8)
      JAX_ARGREDUCE_TEAM_CASE(16)
      JAX_ARGREDUCE_TEAM_CASE(32)
#undef JAX_ARGREDUCE_TEAM_CASE
    default:
      return cudaErrorInvalidConfiguration;
  }
  return cudaGetLastError();
}

template <Format F>
cudaError_t LaunchFormat(const LaunchPlan& plan, cudaStream_t stream, bool is_min,
                         const void* x, int64_t rows, int32_t cols, void* indices,
                         bool index_is_int64, void* workspace) {
  return is_min ? LaunchTyped<F, true>(plan, stream, x, rows, cols, indices, index_is_int64,
                                       workspace)
                : LaunchTyped<F, false>(plan, stream, x, rows, cols, indices, index_is_int64,
                                        workspace);
}

template <Format F, bool kIsMin>
cudaError_t GetCaps(int device, const DeviceInfo& info, DeviceCaps* caps) {
  caps->sms = info.sms;
  // The team kernels share ScanRow<kUnroll> and have about the same register count: the
  // widest team's occupancy stands for all of them (ptxas: 40-58 registers, 4-5 resident
  // blocks for every width and format). Block and cluster kernels: their own.
  cudaError_t err = GetBlocksPerSm(
      device, reinterpret_cast<const void*>(&TeamKernel<F, kIsMin, kWarpSize>),
      &caps->team_blocks_per_sm);
  if (err != cudaSuccess) return err;
  err = GetBlocksPerSm(device, reinterpret_cast<const void*>(&BlockKernel<F, kIsMin>),
                       &caps->block_blocks_per_sm);
  if (err != cudaSuccess) return err;
  return GetClusterFit(device, info.major,
                       reinterpret_cast<const void*>(&ClusterKernel<F, kIsMin>),
                       &caps->clusters);
}

template <Format F>
cudaError_t GetCaps(int device, const DeviceInfo& info, bool is_min, DeviceCaps* caps) {
  return is_min ? GetCaps<F, true>(device, info, caps) : GetCaps<F, false>(device, info, caps);
}

}  // namespace

cudaError_t PlanArgReduce(Format format, bool is_min, int64_t rows, int64_t cols,
                          LaunchPlan* plan) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  DeviceInfo info;
  err = GetDeviceInfo(device, &info);
  if (err != cudaSuccess) return err;
  DeviceCaps caps;
  switch (format) {
    case Format::kF16: err = GetCaps<Format::kF16>(device, info, is_min, &caps); break;
    case Format::kBF16: err = GetCaps<Format::kBF16>(device, info, is_min, &caps); break;
    case Format::kF32: err = GetCaps<Format::kF32>(device, info, is_min, &caps); break;
    case Format::kF64: err = GetCaps<Format::kF64>(device, info, is_min, &caps); break;
  }
  if (err != cudaSuccess) return err;
  *plan = MakePlan(caps, format, rows, cols);
  return cudaSuccess;
}

cudaError_t LaunchArgReduce(cudaStream_t stream, Format format, bool is_min, const void* x,
                            int64_t rows, int64_t cols, void* indices, bool index_is_int64,
                            void* workspace, size_t workspace_bytes) {
  if (rows == 0) return cudaSuccess;
  if (cols < 1 || cols > INT32_MAX) return cudaErrorInvalidValue;
  LaunchPlan plan;
  cudaError_t err = PlanArgReduce(format, is_min, rows, cols, &plan);
  if (err != cudaSuccess) return err;
  // XLA buffers are aligned; align by hand anyway rather than trust it.
  const uintptr_t raw = reinterpret_cast<uintptr_t>(workspace);
  const uintptr_t aligned = (raw + 15) & ~uintptr_t{15};
  if (plan.workspace_bytes + (aligned - raw) > workspace_bytes) return cudaErrorInvalidValue;
  void* ws = reinterpret_cast<void*>(aligned);
  const int32_t cols32 = static_cast<int32_t>(cols);
  switch (format) {
    case Format::kF16:
      return LaunchFormat<Format::kF16>(plan, stream, is_min, x, rows, cols32, indices,
                                        index_is_int64, ws);
    case Format::kBF16:
      return LaunchFormat<Format::kBF16>(plan, stream, is_min, x, rows, cols32, indices,
                                         index_is_int64, ws);
    case Format::kF32:
      return LaunchFormat<Format::kF32>(plan, stream, is_min, x, rows, cols32, indices,
                                        index_is_int64, ws);
    case Format::kF64:
      return LaunchFormat<Format::kF64>(plan, stream, is_min, x, rows, cols32, indices,
                                        index_is_int64, ws);
  }
  return cudaErrorInvalidValue;
}

}  // namespace jax_argreduce
