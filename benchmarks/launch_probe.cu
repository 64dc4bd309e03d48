// Where does a few-row launch spend its time? Standalone kernels that isolate the pieces of the
// cluster kernel (launch of 256-1024-thread blocks, cluster launch, cluster barrier, the loads,
// the DSMEM merge), run under `ncu --clock-control none` (benchmarks/gpu_check.sh probe), which
// reports each launch's gpu__time_duration. Every kernel runs 5 times on the same buffer (L2
// warm, as in bench.py, whose 4 inputs of a few-row case fit in L2); read the last ones.
//   nvcc -O3 -arch=sm_90 -o /tmp/launch_probe benchmarks/launch_probe.cu
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "cuda_check.h"

namespace cg = cooperative_groups;

__global__ void Noop() {}

__global__ void ClusterBarrier() { cg::this_cluster().sync(); }

// max over this thread's 16-byte vectors (tid, tid + nthreads, ...), 4 loads in flight.
__device__ float ScanMax(const float4* v, int n, int tid, int nthreads) {
  float best = -INFINITY;
  for (int i = tid; i < n; i += 4 * nthreads) {
    float4 b[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (i + u * nthreads < n) b[u] = __ldg(v + i + u * nthreads);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (i + u * nthreads < n) best = fmaxf(best, fmaxf(fmaxf(b[u].x, b[u].y), fmaxf(b[u].z, b[u].w)));
    }
  }
  return best;
}

__device__ float BlockMax(float v) {
  __shared__ float warp_best[32];
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? warp_best[threadIdx.x] : -INFINITY;
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Each block reduces its share and writes it out: the loads without any merge.
__global__ void LoadNoMerge(const float4* v, int n, float* out) {
  const float b = BlockMax(ScanMax(v, n, blockIdx.x * blockDim.x + threadIdx.x,
                                   gridDim.x * blockDim.x));
  if (threadIdx.x == 0) out[blockIdx.x] = b;
}

// The same, merged across the cluster in block 0's shared memory (as ClusterKernel). kSplit:
// arrive before the loads, wait after them (ClusterKernel's split barrier); else one full
// cluster.sync() after the loads.
template <bool kSplit>
__global__ void LoadClusterMerge(const float4* v, int n, float* out) {
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float cluster_best[16];
  const int part = cluster.block_rank();
  if (kSplit) cluster.barrier_arrive();
  const float b = BlockMax(ScanMax(v, n, part * blockDim.x + threadIdx.x,
                                   cluster.num_blocks() * blockDim.x));
  if (kSplit) {
    cluster.barrier_wait();
  } else {
    cluster.sync();
  }
  if (threadIdx.x == 0) cluster.map_shared_rank(cluster_best, 0)[part] = b;
  cluster.sync();
  if (part == 0 && threadIdx.x == 0) {
    float m = -INFINITY;
    for (int i = 0; i < (int)cluster.num_blocks(); ++i) m = fmaxf(m, cluster_best[i]);
    out[0] = m;
  }
}

// The merge without a trailing cluster barrier: block 0 marks its slots empty before the
// split barrier's arrive; after the wait each other block stores its (value, part) pair into its
// slot in block 0 with one 8-byte store and exits; block 0's first warp polls its own shared
// memory until every slot is full.
__device__ __forceinline__ void StoreRemote(unsigned long long* slot_in_block0,
                                            unsigned long long v) {
  const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(slot_in_block0));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, 0;" : "=r"(remote) : "r"(local));
  asm volatile("st.relaxed.cluster.shared::cluster.u64 [%0], %1;" ::"r"(remote), "l"(v)
               : "memory");
}
__device__ __forceinline__ unsigned long long LoadLocal(const unsigned long long* slot) {
  unsigned long long v;
  asm volatile("ld.relaxed.cluster.shared::cta.u64 %0, [%1];"
               : "=l"(v)
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(slot)))
               : "memory");
  return v;
}

__global__ void LoadClusterPoll(const float4* v, int n, float* out) {
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ unsigned long long slots[16];
  const int part = cluster.block_rank();
  const int parts = cluster.num_blocks();
  constexpr unsigned long long kEmpty = ~0ull;
  if (part == 0 && threadIdx.x < 16) slots[threadIdx.x] = kEmpty;
  cluster.barrier_arrive();
  const float b = BlockMax(ScanMax(v, n, part * blockDim.x + threadIdx.x, parts * blockDim.x));
  cluster.barrier_wait();
  const unsigned long long packed =
      (static_cast<unsigned long long>(__float_as_uint(b)) << 32) | static_cast<unsigned>(part);
  if (part != 0) {
    if (threadIdx.x == 0) StoreRemote(&slots[part], packed);
    return;
  }
  if (threadIdx.x < 32) {
    float m = -INFINITY;
    if (threadIdx.x == 0) {
      m = b;
    } else if (threadIdx.x < parts) {
      unsigned long long s;
      while ((s = LoadLocal(&slots[threadIdx.x])) == kEmpty) {
      }
      m = __uint_as_float(static_cast<unsigned>(s >> 32));
    }
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x == 0) out[0] = m;
  }
}

template <class... Args>
void Launch(const char* what, void (*kernel)(Args...), int grid, int block, int cluster,
            Args... args) {
  std::printf("probe: %s, grid %d x %d, cluster %d\n", what, grid, block, cluster);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(block);
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = cluster > 0 ? 1 : 0;
  if (cluster > 8) {
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }
  for (int i = 0; i < 5; ++i) CHECK(cudaLaunchKernelEx(&config, kernel, args...));
  CHECK(cudaDeviceSynchronize());
}

int main() {
  const int n_big = 202048 / 4, n_small = 32000 / 4;  // float4 vectors: 808 KB, 128 KB
  float4* x;
  float* out;
  CHECK(cudaMalloc(&x, n_big * sizeof(float4)));
  CHECK(cudaMalloc(&out, 4096 * sizeof(float)));
  CHECK(cudaMemset(x, 0, n_big * sizeof(float4)));
  const float4* cx = x;

  Launch("noop", Noop, 1, 32, 0);
  Launch("noop", Noop, 16, 1024, 0);
  Launch("noop cluster", Noop, 16, 1024, 16);
  Launch("cluster barrier", ClusterBarrier, 16, 1024, 16);
  Launch("cluster barrier", ClusterBarrier, 16, 512, 16);
  Launch("cluster barrier", ClusterBarrier, 8, 1024, 8);
  // 808 KB (1x202048 f32): where the loads run, and what the merge adds.
  Launch("808KB no merge", LoadNoMerge, 16, 1024, 0, cx, n_big, out);
  Launch("808KB no merge, cluster launch", LoadNoMerge, 16, 1024, 16, cx, n_big, out);
  Launch("808KB merge split", LoadClusterMerge<true>, 16, 1024, 16, cx, n_big, out);
  Launch("808KB merge sync", LoadClusterMerge<false>, 16, 1024, 16, cx, n_big, out);
  Launch("808KB no merge", LoadNoMerge, 16, 512, 0, cx, n_big, out);
  Launch("808KB no merge, cluster launch", LoadNoMerge, 16, 512, 16, cx, n_big, out);
  Launch("808KB merge split", LoadClusterMerge<true>, 16, 512, 16, cx, n_big, out);
  Launch("808KB merge split", LoadClusterMerge<true>, 16, 256, 16, cx, n_big, out);
  Launch("808KB poll merge", LoadClusterPoll, 16, 512, 16, cx, n_big, out);
  Launch("808KB poll merge", LoadClusterPoll, 16, 1024, 16, cx, n_big, out);
  Launch("808KB no merge", LoadNoMerge, 132, 1024, 0, cx, n_big, out);
  Launch("808KB no merge", LoadNoMerge, 132, 256, 0, cx, n_big, out);
  Launch("808KB no merge", LoadNoMerge, 528, 256, 0, cx, n_big, out);
  // 128 KB (1x32000 f32).
  Launch("128KB no merge", LoadNoMerge, 8, 1024, 0, cx, n_small, out);
  Launch("128KB no merge, cluster launch", LoadNoMerge, 8, 1024, 8, cx, n_small, out);
  Launch("128KB merge split", LoadClusterMerge<true>, 8, 1024, 8, cx, n_small, out);
  Launch("128KB merge sync", LoadClusterMerge<false>, 8, 1024, 8, cx, n_small, out);
  Launch("128KB merge split", LoadClusterMerge<true>, 16, 512, 16, cx, n_small, out);
  Launch("128KB no merge, cluster launch", LoadNoMerge, 16, 512, 16, cx, n_small, out);
  Launch("128KB poll merge", LoadClusterPoll, 16, 512, 16, cx, n_small, out);
  Launch("128KB no merge", LoadNoMerge, 1, 1024, 0, cx, n_small, out);
  Launch("128KB no merge", LoadNoMerge, 32, 256, 0, cx, n_small, out);
  {  // the poll merge must see every block's partial: plant a maximum in the last block's share
    const float big = 42.0f;
    CHECK(cudaMemcpy(reinterpret_cast<float*>(x) + (n_big - 1) * 4, &big, 4,
                     cudaMemcpyHostToDevice));
    Launch("check poll merge", LoadClusterPoll, 16, 512, 16, cx, n_big, out);
    float got = 0;
    CHECK(cudaMemcpy(&got, out, 4, cudaMemcpyDeviceToHost));
    std::printf("check: poll merge %s (got %g)\n", got == big ? "ok" : "FAILED", got);
  }
  CHECK(cudaFree(x));
  CHECK(cudaFree(out));
  std::printf("probe: done\n");
  return 0;
}
