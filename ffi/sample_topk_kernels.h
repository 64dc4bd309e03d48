// Raw-pointer launcher of the filtered sampler's top-k path on CUDA (sample_topk.cuh): rows
// whose top_k is at most a bound k_bound <= kSelectMaxK. Sizes, pointers and a stream in, a
// cudaError_t out; no XLA types (the FFI handler, FilteredCategoricalCuda, calls it where its
// k_bound attribute allows).
#ifndef JAX_ARGREDUCE_FFI_SAMPLE_TOPK_KERNELS_H_
#define JAX_ARGREDUCE_FFI_SAMPLE_TOPK_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "launch_plan.h"
#include "order.h"
#include "row_param.h"
#include "top_k_kernels.h"

namespace jax_argreduce {

// One call: for each row r of `logits` (`rows` x `cols` row-major, `format`: float16, bfloat16
// or float32), the filtered sample of SPEC §1f with top_k = top_k[r] (in [1, k_bound]; values
// outside are clamped there), top_p[r], min_p[r] and temperature[r]: indices[r] and
// noisy_max[r] exactly as FilteredSamplerCpu<F>::SampleRow (cpu_sample.h) with RowFilters{
// top_k[r], top_p[r], min_p[r]} and categorical's keys, counters and offsets (CategoricalLaunch).
struct SampleTopKLaunch {
  cudaStream_t stream = nullptr;
  int device = 0;                  // the stream's device (current)
  PlanOptions options;             // pdl is read (programmatic dependent launch, sm_90+)
  Format format = Format::kF32;
  const void* logits = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t k_bound = 0;             // 1 <= k_bound <= kSelectMaxK; every row's top_k <= it
  const uint32_t* keys = nullptr;  // num_keys x 2 uint32 (rows = num_keys * rows_per_key)
  int64_t num_keys = 1;
  RowParam<float> temperature;     // device memory, 1 or `rows` values
  RowParam<int32_t> top_k;
  RowParam<float> top_p;           // >= 1: no top-p
  RowParam<float> min_p;           // <= 0: no min-p
  // Two int32 in device memory, the (row, column) offsets of this block of the global logits
  // that enter the counter (categorical.h), or nullptr (both zero).
  const int32_t* offsets = nullptr;
  void* noisy_max = nullptr;       // [rows] float32
  void* indices = nullptr;         // [rows] int32, or int64 when index_is_int64
  bool index_is_int64 = false;
  void* workspace = nullptr;       // SampleTopKWorkspaceBytes(...), any contents
  size_t workspace_bytes = 0;
  // [rows, cols] int32 in device memory, the global column of each logit, or nullptr (its own
  // column): a split vocabulary's candidate row (FilteredSamplerCpu's columns, cpu_sample.h),
  // whose noise is drawn at, and whose index is, the global column.
  const int32_t* columns = nullptr;
};

// Returns the first CUDA error (cudaErrorInvalidValue for arguments out of range, including a
// workspace smaller than SampleTopKWorkspaceBytes).
cudaError_t LaunchSampleTopK(const SampleTopKLaunch& launch);

// A split vocabulary's candidates: `select` (top_k_kernels.h; not float64) ranked by the
// sampler's z = x * (1/T) of each row (T == 0 rows: by x) instead of x, exactly as the top-k
// path ranks (sample_topk.cuh, ScaledKeys), and as FilteredSamplerCpu<F>::RankKey on the CPU.
struct ScaledTopKLaunch {
  TopKLaunch select;            // its workspace: WorkspaceBytes("top_k", ...), the same plan
  RowParam<float> temperature;  // device memory, 1 or `rows` values
};
cudaError_t LaunchScaledTopK(const ScaledTopKLaunch& launch);

// The workspace one launch needs (WorkspaceBytes("sample_top_k", ...): a pure function of the
// shape): the select's candidates, then k = min(k_bound, cols) values and columns per row.
size_t SampleTopKWorkspaceBytes(int64_t rows, int64_t cols, int64_t k_bound, int elem_bytes);

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_SAMPLE_TOPK_KERNELS_H_
