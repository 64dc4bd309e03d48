// Raw-pointer launcher for the CUDA argmax/argmin kernels: sizes, pointers and a stream in, a
// cudaError_t out. No XLA types: the FFI handler (argreduce_cuda.cc) validates and decodes
// buffers, this layer plans the launch geometry and runs the kernels.
#ifndef JAX_ARGREDUCE_FFI_ARGREDUCE_KERNELS_H_
#define JAX_ARGREDUCE_FFI_ARGREDUCE_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "order.h"

namespace jax_argreduce {

// Threads per block of every kernel.
inline constexpr int kBlockThreads = 256;

// How one launch covers a [rows, cols] input.
struct LaunchPlan {
  // Team path (team > 0): `team` consecutive lanes of a warp (1..32) own one row and merge
  // their partials with shuffles; warps loop over rows. Block path (team == 0): each row is
  // reduced by `blocks_per_row` blocks; with one block per row the blocks loop over rows, with
  // several they merge through the workspace (the last block of a row to arrive reduces it).
  // Cluster path (cluster > 0, sm_90+): one thread block cluster of `cluster` blocks of
  // 512 threads per row, merged through distributed shared memory; no workspace.
  int team = 0;
  int blocks_per_row = 1;
  int cluster = 0;
  int64_t grid = 0;            // blocks launched
  int block = kBlockThreads;   // threads per block
  int vector_elements = 0;     // elements per 16-byte load (reported, for tests/benchmarks)
  int64_t row_step = 0;        // elements one pass of the scan loop covers (reported)
  size_t workspace_bytes = 0;  // workspace the launch uses (multi-block rows only)
};

// Blocks a multi-block (done-counter) launch may use at most; bounds the workspace.
inline constexpr int64_t kMaxMultiBlockGrid = 4096;

// Workspace bytes that suffice for any shape on any device: one partial (int64 key + index)
// and one counter per block of kMaxMultiBlockGrid, +16 to align by hand. A constant, so the
// lowering needs no GPU and an exported program runs on any GPU.
inline constexpr size_t kArgReduceWorkspaceBytes = kMaxMultiBlockGrid * (16 + 4) + 16;

// Launch geometry for `rows` x `cols` elements of `format` (argmin when is_min) on the current
// device: one wave of threads over the device (by default; see the tuning knobs in
// argreduce_kernels.cu), each thread with at least max(4, vector_elements) elements.
cudaError_t PlanArgReduce(Format format, bool is_min, int64_t rows, int64_t cols,
                          LaunchPlan* plan);

// indices[r] = argmax (or argmin) of row r of x, x being `rows` x `cols` row-major elements
// of `format` (1 <= cols <= INT32_MAX). Indices are int64 when index_is_int64, else int32.
// `workspace` must be kArgReduceWorkspaceBytes bytes of device memory; its contents on entry
// do not matter. Returns the first CUDA error (launch or configuration).
cudaError_t LaunchArgReduce(cudaStream_t stream, Format format, bool is_min, const void* x,
                            int64_t rows, int64_t cols, void* indices, bool index_is_int64,
                            void* workspace, size_t workspace_bytes);

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_ARGREDUCE_KERNELS_H_
