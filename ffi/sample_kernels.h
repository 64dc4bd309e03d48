// Raw-pointer launcher of the filtered sampler on CUDA (SPEC §1f): categorical with top-k, top-p
// and min-p per row, the same (index, noisy maximum) as the CPU handler's
// FilteredSamplerCpu<F>::SampleRow (cpu_sample.h), bit for bit. Sizes, pointers and a stream in,
// a cudaError_t out; no XLA types (the FFI shim is cuda_handlers.cc).
#ifndef JAX_ARGREDUCE_FFI_SAMPLE_KERNELS_H_
#define JAX_ARGREDUCE_FFI_SAMPLE_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "order.h"
#include "row_param.h"

namespace jax_argreduce {

// One call: for each row r of `logits` (`rows` x `cols` row-major, `format`), the sample of
// categorical (categorical_kernels.h: the same keys, temperature and offsets) restricted to the
// tokens that the row's filters keep (sample_filter.h). Every per-row parameter is one value
// for all rows or one per row (`*_per_row`), in device memory.
struct FilteredSampleLaunch {
  cudaStream_t stream = nullptr;
  int device = 0;                     // the stream's device (current)
  Format format = Format::kF32;
  const uint32_t* keys = nullptr;     // num_keys x 2 uint32 (rows = num_keys * rows_per_key)
  int64_t num_keys = 1;
  const void* logits = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* temperature = nullptr;  // float32 (float64 for float64 logits)
  bool temperature_per_row = false;
  RowParam<int32_t> top_k;            // 0 (or >= cols): no top-k
  RowParam<float> top_p;              // >= 1: no top-p
  RowParam<float> min_p;              // <= 0: no min-p
  // < 0: a promise that no row has a top-k (top_k is 0 everywhere), which lets calls of 16- and
  // 32-bit formats of up to kFilterSpreadMaxRows rows take the spread path (launch_plan.h:
  // each row over many blocks) in `workspace` (at least PlanFilterSpread(rows, cols).bytes +
  // 16: aligned by hand; a smaller one takes the generic path); otherwise one block per row,
  // no workspace.
  int64_t k_bound = 0;
  // false: a promise that no row has a top-p (top_p is 1 everywhere); the spread path then
  // skips its launches of top-p's levels.
  bool has_top_p = true;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Two int32 in device memory, the (row, column) offsets of this block of the global logits
  // (categorical.h), or nullptr (both zero).
  const int32_t* offsets = nullptr;
  void* indices = nullptr;            // [rows] int32, or int64 when index_is_int64
  bool index_is_int64 = false;
  void* noisy_max = nullptr;          // [rows] of the noise's type
};

// Returns the first CUDA error (cudaErrorInvalidValue for arguments out of range).
cudaError_t LaunchFilteredSample(const FilteredSampleLaunch& launch);

// A vocabulary split over devices without a top-k (jax_argreduce/_sharding.py,
// split_prefix_sample): the two stages a shard runs, the same results as the CPU handler's
// FilteredSamplerCpu<F>::LevelRow and SplitDrawRow (cpu_sample.h), bit for bit. 16- and
// 32-bit formats (three levels over z's 32-bit key); one block per row. `tops` ([rows, shards],
// the logits' format): each shard's first token in the z order; masses cross as uint32 limbs
// (sample_filter.h, kMassLimbs).
struct TopPLevelLaunch {
  cudaStream_t stream = nullptr;
  Format format = Format::kF32;
  const void* logits = nullptr;        // this shard's, rows x cols
  int64_t rows = 0;
  int64_t cols = 0;
  RowParam<float> temperature;
  RowParam<float> top_p;
  const void* tops = nullptr;
  int64_t shards = 1;
  int level = 0;                       // in [0, 3)
  const uint32_t* above = nullptr;     // [rows, level, 2048, 3]: the summed masses before
  uint32_t* histogram = nullptr;       // [rows, 2048, 3] masses; the last level [rows, 1024]
};
cudaError_t LaunchTopPLevel(const TopPLevelLaunch& launch);

struct SplitDrawLaunch {
  cudaStream_t stream = nullptr;
  Format format = Format::kF32;
  const uint32_t* keys = nullptr;      // num_keys x 2 uint32
  int64_t num_keys = 1;
  const void* logits = nullptr;        // this shard's, rows x cols
  int64_t rows = 0;
  int64_t cols = 0;
  RowParam<float> temperature;
  RowParam<float> top_p;
  RowParam<float> min_p;
  // (row, column) offsets of the shard in the global logits, in device memory: the column
  // offset is shard * cols (a larger one reads as the last shard).
  const int32_t* offsets = nullptr;
  const void* tops = nullptr;
  int64_t shards = 1;
  // top-p's levels, or both nullptr (no row has a top-p): the summed masses of the levels
  // before the last ([rows, 2, 2048, 3]) and the last level's counts per shard ([rows, shards,
  // 1024]).
  const uint32_t* above = nullptr;
  const uint32_t* counts = nullptr;
  void* indices = nullptr;             // [rows] int32, or int64 when index_is_int64: local
  bool index_is_int64 = false;
  void* noisy_max = nullptr;           // [rows] float32
};
cudaError_t LaunchSplitFilteredDraw(const SplitDrawLaunch& launch);

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_SAMPLE_KERNELS_H_
