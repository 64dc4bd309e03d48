// The filtered sampler's top-k path on CUDA: the row-select core ranked by z
// (sample_topk.cuh, ScaledKeys) writes each row's k_bound first tokens into the workspace
// (launch_plan.h, PlanSampleTopK), then the finish kernel filters and draws, one block per
// row. All kernels with programmatic dependent launch where the options and the device allow.
#include "sample_topk_kernels.h"

#include "sample_topk.cuh"

namespace jax_argreduce {
namespace {

using sample_topk::FinishArgs;
using sample_topk::SampleTopKKernel;
using sample_topk::ScaledKeys;
using sample_topk::TemperatureKeys;

// Candidates per row up to kSmallK take 64-thread blocks, one candidate each (the common
// serving k of tens); more take 256 threads of 4 (up to kSelectMaxK).
constexpr int kSmallK = 64;
constexpr int kSmallThreads = 64;
constexpr int kLargeThreads = 256;
constexpr int kLargeItems = 4;
static_assert(kLargeThreads * kLargeItems >= kSelectMaxK, "a block holds a row's candidates");

template <Format F>
cudaError_t Launch(const SampleTopKLaunch& launch, const SampleTopKLayout& layout,
                   char* workspace, bool pdl) {
  using Bits = typename FormatTraits<F>::Bits;
  GumbelKeyPolicy<F> policy;
  policy.keys = launch.keys;
  policy.rows_per_key = launch.rows / launch.num_keys;
  policy.temperature = launch.temperature.data;
  policy.temperature_per_row = launch.temperature.per_row;
  policy.offsets = launch.offsets;
  void* values = workspace + layout.values_offset;
  int32_t* columns = reinterpret_cast<int32_t*>(workspace + layout.columns_offset);
  const int32_t k = static_cast<int32_t>(layout.k);
  cudaError_t err = row_select::LaunchSelectLevels(
      ScaledKeys<F>{policy}, layout.select, launch.stream, pdl, launch.logits, launch.rows,
      static_cast<int32_t>(launch.cols), k, workspace,
      row_select::SelectOutput{values, columns, false});
  if (err != cudaSuccess) return err;
  const FinishArgs args{static_cast<const Bits*>(values),
                        columns,
                        launch.rows,
                        k,
                        launch.top_k,
                        launch.top_p,
                        launch.min_p,
                        NoisyMaxEpilogue{launch.indices, launch.index_is_int64, launch.noisy_max},
                        launch.columns,
                        static_cast<int32_t>(launch.cols)};
  const int64_t grid = std::min<int64_t>(launch.rows, int64_t{0x7FFFFFFF});
  auto finish = [&](auto columns) {
    constexpr bool kColumns = decltype(columns)::value;
    return k <= kSmallK
               ? device::LaunchEx(SampleTopKKernel<F, kSmallThreads, 1, kColumns>, grid,
                                  kSmallThreads, launch.stream, pdl, policy, args)
               : device::LaunchEx(SampleTopKKernel<F, kLargeThreads, kLargeItems, kColumns>,
                                  grid, kLargeThreads, launch.stream, pdl, policy, args);
  };
  err = launch.columns != nullptr ? finish(std::true_type{}) : finish(std::false_type{});
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchScaledTopK(const ScaledTopKLaunch& launch) {
  if (launch.select.rows != 0 && launch.temperature.data == nullptr) return cudaErrorInvalidValue;
  return row_select::LaunchTopKWith(launch.select, [&](auto format) {
    return TemperatureKeys<decltype(format)::value>{launch.temperature};
  });
}

size_t SampleTopKWorkspaceBytes(int64_t rows, int64_t cols, int64_t k_bound, int elem_bytes) {
  return WorkspaceBytes("sample_top_k", rows, cols, k_bound, elem_bytes);
}

cudaError_t LaunchSampleTopK(const SampleTopKLaunch& launch) {
  if (launch.rows == 0) return cudaSuccess;
  if (launch.rows < 0 || launch.cols < 1 || launch.cols > INT32_MAX || launch.k_bound < 1 ||
      launch.k_bound > kSelectMaxK || launch.format == Format::kF64 || launch.num_keys < 1 ||
      launch.rows % launch.num_keys != 0 || launch.keys == nullptr ||
      launch.temperature.data == nullptr || launch.top_k.data == nullptr ||
      launch.top_p.data == nullptr || launch.min_p.data == nullptr) {
    return cudaErrorInvalidValue;
  }
  const SampleTopKLayout layout =
      PlanSampleTopK(launch.rows, launch.cols, launch.k_bound, FormatBytes(launch.format));
  // XLA buffers are aligned; align by hand anyway rather than trust it (WorkspaceBytes: +16).
  const uintptr_t raw = reinterpret_cast<uintptr_t>(launch.workspace);
  const uintptr_t aligned = (raw + 15) & ~uintptr_t{15};
  if (launch.workspace == nullptr || layout.bytes + (aligned - raw) > launch.workspace_bytes) {
    return cudaErrorInvalidValue;
  }
  int major = 0;
  const cudaError_t err = row_select::CcMajor(launch.device, &major);
  if (err != cudaSuccess) return err;
  const bool pdl = launch.options.pdl && major >= 9;
  char* workspace = reinterpret_cast<char*>(aligned);
  switch (launch.format) {
    case Format::kF16: return Launch<Format::kF16>(launch, layout, workspace, pdl);
    case Format::kBF16: return Launch<Format::kBF16>(launch, layout, workspace, pdl);
    case Format::kF32: return Launch<Format::kF32>(launch, layout, workspace, pdl);
    case Format::kF64: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace jax_argreduce
