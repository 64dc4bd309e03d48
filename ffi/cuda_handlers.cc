// CUDA FFI shims: validate and decode the buffers (ffi_common.h), take the stream, the device
// and the workspace from XLA, and call the op's raw-pointer launcher. The workspace is an extra
// output of the custom call (kWorkspaceBytes, fixed at lowering time), not a run-time
// allocation, so the handlers are safe to capture in XLA command buffers: every replay gets
// the workspace XLA assigned. Nothing is kept in it between calls.
//
// Each call site (custom-call instance) gets, at XLA's instantiate stage, a slot: the index of
// its split-path counter in the kernels' static per-device counter array (row_reduce.cuh). The
// counter is zero at module load and the kernel leaves it zero, so nothing is allocated,
// cleared or kept per call; distinct live call sites hold distinct slots (freed with the
// executable), so call sites XLA runs concurrently never share a counter. (One executable is
// not run twice at once on one device: PjRt runs a device's executions on one compute stream.)
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "argreduce_kernels.h"
#include "categorical_kernels.h"
#include "ffi_common.h"
#include "sample_kernels.h"
#include "sample_topk_kernels.h"
#include "top_k_kernels.h"
#include "handlers.h"
#include "xla/ffi/api/ffi.h"

namespace jax_argreduce {
namespace {

namespace ffi = xla::ffi;

// Slots of live call sites, reference-counted: a call site takes a free slot (round robin, so
// a slot just released is not reused at once), released when XLA destroys the state (the
// executable). Past kCallSiteSlots live call sites, the least shared slot is shared (safe
// unless two of its holders run concurrently); a slot is free again only when every holder is
// gone.
class SlotAllocator {
 public:
  uint32_t Take() {
    std::lock_guard<std::mutex> lock(mu_);
    uint32_t best = next_;
    for (uint32_t i = 0; i < kCallSiteSlots; ++i) {
      const uint32_t slot = (next_ + i) % kCallSiteSlots;
      if (holders_[slot] < holders_[best]) best = slot;
      if (holders_[best] == 0) break;
    }
    ++holders_[best];
    next_ = (best + 1) % kCallSiteSlots;
    return best;
  }
  void Release(uint32_t slot) {
    std::lock_guard<std::mutex> lock(mu_);
    if (holders_[slot] > 0) --holders_[slot];
  }

 private:
  std::mutex mu_;
  std::vector<uint32_t> holders_ = std::vector<uint32_t>(kCallSiteSlots, 0);
  uint32_t next_ = 0;
};

SlotAllocator& Slots() {
  static SlotAllocator* slots = new SlotAllocator();  // never destroyed: states may outlive exit
  return *slots;
}

}  // namespace

CallSiteState::CallSiteState() : slot(Slots().Take()) {}
CallSiteState::~CallSiteState() { Slots().Release(slot); }
ffi::TypeId CallSiteState::id = {};

namespace {

void DeleteCallSiteState(void* state) { delete static_cast<CallSiteState*>(state); }

ffi::ErrorOr<std::unique_ptr<CallSiteState>> InstantiateCallSite() {
  return std::make_unique<CallSiteState>();
}

ffi::Error CudaError(const std::string& op, cudaError_t err) {
  return ffi::Error::Internal(op + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

// Runs `launch` with XLA's device current (it normally is already: then nothing is switched).
template <class Launch>
cudaError_t OnDevice(int device, Launch&& launch) {
  int current = 0;
  cudaError_t err = cudaGetDevice(&current);
  if (err != cudaSuccess) return err;
  if (current == device) return launch();
  err = cudaSetDevice(device);
  if (err != cudaSuccess) return err;
  const cudaError_t result = launch();
  err = cudaSetDevice(current);
  return result != cudaSuccess ? result : err;
}

ffi::Error ArgReduceRows(cudaStream_t stream, int device, uint32_t slot, const ffi::AnyBuffer& x,
                         ffi::AnyBuffer& indices, ffi::AnyBuffer* values,
                         ffi::AnyBuffer& workspace, bool is_min, const std::string& op) {
  auto view = DecodeRows(x, indices, values, op);
  if (!view.has_value()) return view.error();
  ArgReduceLaunch launch;
  launch.stream = stream;
  launch.device = device;
  launch.counter_slot = slot;
  launch.options = CurrentPlanOptions();
  launch.format = view->format;
  launch.is_min = is_min;
  launch.x = view->data;
  launch.rows = view->rows;
  launch.cols = view->cols;
  launch.indices = indices.untyped_data();
  launch.index_is_int64 = indices.element_type() == ffi::DataType::S64;
  launch.values = values == nullptr ? nullptr : values->untyped_data();
  launch.workspace = workspace.untyped_data();
  launch.workspace_bytes = workspace.size_bytes();
  const cudaError_t err = OnDevice(device, [&] { return LaunchArgReduce(launch); });
  return err == cudaSuccess ? ffi::Error::Success() : CudaError(op, err);
}

ffi::Error ArgReduceCudaImpl(cudaStream_t stream, int32_t device, CallSiteState* site,
                             ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> indices,
                             ffi::Result<ffi::AnyBuffer> workspace, bool is_min) {
  return ArgReduceRows(stream, device, site->slot, x, *indices, nullptr, *workspace, is_min,
                       "jax_argreduce argreduce (cuda)");
}

ffi::Error MaxWithIndexCudaImpl(cudaStream_t stream, int32_t device, CallSiteState* site,
                                ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> values,
                                ffi::Result<ffi::AnyBuffer> indices,
                                ffi::Result<ffi::AnyBuffer> workspace, bool is_min) {
  return ArgReduceRows(stream, device, site->slot, x, *indices, &*values, *workspace, is_min,
                       "jax_argreduce max_with_index (cuda)");
}

ffi::Error CategoricalCudaImpl(cudaStream_t stream, int32_t device, CallSiteState* site,
                               ffi::AnyBuffer keys,
                               ffi::AnyBuffer logits, ffi::AnyBuffer temperature,
                               ffi::AnyBuffer offsets, ffi::Result<ffi::AnyBuffer> noisy_max,
                               ffi::Result<ffi::AnyBuffer> indices,
                               ffi::Result<ffi::AnyBuffer> workspace) {
  const std::string op = "jax_argreduce categorical (cuda)";
  auto view = DecodeRows(logits, *indices, nullptr, op);
  if (!view.has_value()) return view.error();
  auto sampler = DecodeSampler(*view, keys, temperature, offsets, &*noisy_max, op);
  if (!sampler.has_value()) return sampler.error();
  CategoricalLaunch launch;
  launch.stream = stream;
  launch.device = device;
  launch.counter_slot = site->slot;
  launch.options = CurrentPlanOptions();
  launch.format = view->format;
  launch.keys = static_cast<const uint32_t*>(keys.untyped_data());
  launch.num_keys = sampler->num_keys;
  launch.logits = view->data;
  launch.rows = view->rows;
  launch.cols = view->cols;
  launch.temperature = temperature.untyped_data();
  launch.temperature_per_row = sampler->temperature_per_row;
  launch.offsets =
      sampler->has_offsets ? static_cast<const int32_t*>(offsets.untyped_data()) : nullptr;
  launch.indices = indices->untyped_data();
  launch.index_is_int64 = indices->element_type() == ffi::DataType::S64;
  launch.noisy_max = noisy_max->untyped_data();
  launch.workspace = workspace->untyped_data();
  launch.workspace_bytes = workspace->size_bytes();
  const cudaError_t err = OnDevice(device, [&] { return LaunchCategorical(launch); });
  return err == cudaSuccess ? ffi::Error::Success() : CudaError(op, err);
}

// A top_k call decoded (DecodeTopK) and checked for the kernels, as their launch.
ffi::ErrorOr<TopKLaunch> TopKLaunchOf(cudaStream_t stream, int device, const ffi::AnyBuffer& x,
                                      ffi::AnyBuffer& values, ffi::AnyBuffer& indices,
                                      ffi::AnyBuffer& workspace, int64_t k,
                                      const std::string& op) {
  auto view = DecodeTopK(x, values, indices, k, op);
  if (!view.has_value()) return ffi::Unexpected(view.error());
  if (view->format == Format::kF64 || k > kSelectMaxK) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        op + ": the kernels take float16, bfloat16 and float32 and k <= " +
        std::to_string(kSelectMaxK) + " (jax_argreduce routes the rest to XLA)"));
  }
  TopKLaunch launch;
  launch.stream = stream;
  launch.device = device;
  launch.options = CurrentPlanOptions();
  launch.format = view->format;
  launch.x = view->data;
  launch.rows = view->rows;
  launch.cols = view->cols;
  launch.k = k;
  launch.values = values.untyped_data();
  launch.indices = indices.untyped_data();
  launch.index_is_int64 = indices.element_type() == ffi::DataType::S64;
  launch.workspace = workspace.untyped_data();
  launch.workspace_bytes = workspace.size_bytes();
  return launch;
}

ffi::Error TopKCudaImpl(cudaStream_t stream, int32_t device, ffi::AnyBuffer x,
                        ffi::Result<ffi::AnyBuffer> values, ffi::Result<ffi::AnyBuffer> indices,
                        ffi::Result<ffi::AnyBuffer> workspace, int64_t k) {
  const std::string op = "jax_argreduce top_k (cuda)";
  auto launch = TopKLaunchOf(stream, device, x, *values, *indices, *workspace, k, op);
  if (!launch.has_value()) return launch.error();
  const cudaError_t err = OnDevice(device, [&] { return LaunchTopK(*launch); });
  return err == cudaSuccess ? ffi::Error::Success() : CudaError(op, err);
}

// The split vocabulary's candidates (sample_topk_kernels.h, LaunchScaledTopK): top_k ranked by
// the sampler's z. No key: the noise is drawn after the exchange, from the global columns.
ffi::Error ScaledTopKCudaImpl(cudaStream_t stream, int32_t device, ffi::AnyBuffer x,
                              ffi::AnyBuffer temperature, ffi::Result<ffi::AnyBuffer> values,
                              ffi::Result<ffi::AnyBuffer> indices,
                              ffi::Result<ffi::AnyBuffer> workspace, int64_t k) {
  const std::string op = "jax_argreduce scaled top_k (cuda)";
  auto select = TopKLaunchOf(stream, device, x, *values, *indices, *workspace, k, op);
  if (!select.has_value()) return select.error();
  const RowView view{select->x, select->format, select->rows, select->cols};
  auto per_row = DecodeTemperature(view, temperature, op);
  if (!per_row.has_value()) return per_row.error();
  ScaledTopKLaunch launch;
  launch.select = *select;
  launch.temperature =
      RowParam<float>{static_cast<const float*>(temperature.untyped_data()), *per_row};
  const cudaError_t err = OnDevice(device, [&] { return LaunchScaledTopK(launch); });
  return err == cudaSuccess ? ffi::Error::Success() : CudaError(op, err);
}

// The filtered sampler: the top-k path where every row's top_k is within k_bound > 0 (its
// candidates in the workspace the lowering sized, WorkspaceBytes("filtered_categorical")); with
// k_bound < 0 (no row has a top-k) the spread path where it takes the call (its histograms in
// that workspace); else the generic kernel (no workspace). With columns (a split vocabulary's
// candidate row), only the top-k path, the one that takes them.
ffi::Error FilteredCategoricalCudaImpl(cudaStream_t stream, int32_t device, ffi::AnyBuffer keys,
                                       ffi::AnyBuffer logits, ffi::AnyBuffer temperature,
                                       ffi::AnyBuffer top_k, ffi::AnyBuffer top_p,
                                       ffi::AnyBuffer min_p, ffi::AnyBuffer offsets,
                                       ffi::AnyBuffer columns,
                                       ffi::Result<ffi::AnyBuffer> noisy_max,
                                       ffi::Result<ffi::AnyBuffer> indices,
                                       ffi::Result<ffi::AnyBuffer> workspace, int64_t k_bound,
                                       bool has_top_p) {
  const std::string op = "jax_argreduce filtered categorical (cuda)";
  auto decoded = DecodeFilteredSampler(keys, logits, temperature, top_k, top_p, min_p, offsets,
                                       &columns, *noisy_max, *indices, op);
  if (!decoded.has_value()) return decoded.error();
  const RowView& view = decoded->view;
  const SamplerView& sampler = decoded->sampler;
  if (k_bound < -1) {
    return ffi::Error::InvalidArgument(op + ": k_bound must be >= -1, got " +
                                       std::to_string(k_bound));
  }
  // What both paths' launches take alike.
  auto fill = [&](auto& launch) {
    launch.stream = stream;
    launch.device = device;
    launch.format = view.format;
    launch.logits = view.data;
    launch.rows = view.rows;
    launch.cols = view.cols;
    launch.keys = static_cast<const uint32_t*>(keys.untyped_data());
    launch.num_keys = sampler.num_keys;
    launch.top_k = decoded->filters.top_k;
    launch.top_p = decoded->filters.top_p;
    launch.min_p = decoded->filters.min_p;
    launch.offsets =
        sampler.has_offsets ? static_cast<const int32_t*>(offsets.untyped_data()) : nullptr;
    launch.noisy_max = noisy_max->untyped_data();
    launch.indices = indices->untyped_data();
    launch.index_is_int64 = indices->element_type() == ffi::DataType::S64;
  };
  const bool top_k_path = UsesSampleTopK(view.cols, k_bound, FormatBytes(view.format));
  if (decoded->columns != nullptr && !top_k_path) {
    return ffi::Error::InvalidArgument(op + ": columns need the top-k path (k_bound in [1, " +
                                       std::to_string(kSelectMaxK) + "], below cols, and 16- " +
                                       "or 32-bit logits)");
  }
  cudaError_t err;
  if (top_k_path) {
    // Every row's top_k is in [1, k_bound]: k_bound candidates per row from the select, then
    // the filters and the draw on them (sample_topk_kernels.h).
    SampleTopKLaunch launch;
    fill(launch);
    launch.options = CurrentPlanOptions();
    launch.k_bound = k_bound;
    launch.temperature = RowParam<float>{static_cast<const float*>(temperature.untyped_data()),
                                         sampler.temperature_per_row};
    launch.workspace = workspace->untyped_data();
    launch.workspace_bytes = workspace->size_bytes();
    launch.columns = decoded->columns;
    err = OnDevice(device, [&] { return LaunchSampleTopK(launch); });
  } else {
    FilteredSampleLaunch launch;
    fill(launch);
    launch.temperature = temperature.untyped_data();
    launch.temperature_per_row = sampler.temperature_per_row;
    launch.k_bound = k_bound;
    launch.has_top_p = has_top_p;
    launch.workspace = workspace->untyped_data();
    launch.workspace_bytes = workspace->size_bytes();
    err = OnDevice(device, [&] { return LaunchFilteredSample(launch); });
  }
  return err == cudaSuccess ? ffi::Error::Success() : CudaError(op, err);
}

// top-p's level on one shard of a split vocabulary without a top-k (sample_kernels.h,
// LaunchTopPLevel; the operands as the CPU handler's, DecodeTopPLevel).
ffi::Error TopPLevelCudaImpl(cudaStream_t stream, int32_t device, ffi::AnyBuffer logits,
                             ffi::AnyBuffer temperature, ffi::AnyBuffer top_p,
                             ffi::AnyBuffer tops, ffi::AnyBuffer above,
                             ffi::Result<ffi::AnyBuffer> histogram,
                             ffi::Result<ffi::AnyBuffer> /*workspace*/, int64_t level) {
  const std::string op = "jax_argreduce top_p level (cuda)";
  auto decoded = DecodeTopPLevel(logits, temperature, top_p, tops, above, *histogram, level, op);
  if (!decoded.has_value()) return decoded.error();
  const RowView& view = decoded->view;
  if (view.rows == 0) return ffi::Error::Success();
  if (view.format == Format::kF64) {
    return ffi::Error::InvalidArgument(op + ": the kernels take float16, bfloat16 and float32 "
                                       "(jax_argreduce gathers float64 logits)");
  }
  TopPLevelLaunch launch;
  launch.stream = stream;
  launch.format = view.format;
  launch.logits = view.data;
  launch.rows = view.rows;
  launch.cols = view.cols;
  launch.temperature = RowParam<float>{static_cast<const float*>(temperature.untyped_data()),
                                       decoded->temperature_per_row};
  launch.top_p = decoded->top_p;
  launch.tops = tops.untyped_data();
  launch.shards = decoded->shards;
  launch.level = static_cast<int>(level);
  launch.above = static_cast<const uint32_t*>(above.untyped_data());
  launch.histogram = static_cast<uint32_t*>(histogram->untyped_data());
  const cudaError_t err = OnDevice(device, [&] { return LaunchTopPLevel(launch); });
  return err == cudaSuccess ? ffi::Error::Success() : CudaError(op, err);
}

// The filtered sampler's draw on one shard of a split vocabulary without a top-k
// (sample_kernels.h, LaunchSplitFilteredDraw; the operands as the CPU handler's,
// DecodeSplitDraw). The shard is its column offset over the logits' width, read on the device.
ffi::Error SplitFilteredDrawCudaImpl(cudaStream_t stream, int32_t device, ffi::AnyBuffer keys,
                                     ffi::AnyBuffer logits, ffi::AnyBuffer temperature,
                                     ffi::AnyBuffer top_k, ffi::AnyBuffer top_p,
                                     ffi::AnyBuffer min_p, ffi::AnyBuffer offsets,
                                     ffi::AnyBuffer tops, ffi::AnyBuffer above,
                                     ffi::AnyBuffer counts,
                                     ffi::Result<ffi::AnyBuffer> noisy_max,
                                     ffi::Result<ffi::AnyBuffer> indices,
                                     ffi::Result<ffi::AnyBuffer> /*workspace*/) {
  const std::string op = "jax_argreduce split filtered draw (cuda)";
  auto decoded = DecodeSplitDraw(keys, logits, temperature, top_k, top_p, min_p, offsets, tops,
                                 above, counts, *noisy_max, *indices, op);
  if (!decoded.has_value()) return decoded.error();
  const RowView& view = decoded->sampler.view;
  const SamplerView& sampler = decoded->sampler.sampler;
  if (view.rows == 0) return ffi::Error::Success();
  if (view.format == Format::kF64) {
    return ffi::Error::InvalidArgument(op + ": the kernels take float16, bfloat16 and float32 "
                                       "(jax_argreduce gathers float64 logits)");
  }
  SplitDrawLaunch launch;
  launch.stream = stream;
  launch.format = view.format;
  launch.keys = static_cast<const uint32_t*>(keys.untyped_data());
  launch.num_keys = sampler.num_keys;
  launch.logits = view.data;
  launch.rows = view.rows;
  launch.cols = view.cols;
  launch.temperature = RowParam<float>{static_cast<const float*>(temperature.untyped_data()),
                                       sampler.temperature_per_row};
  launch.top_p = decoded->sampler.filters.top_p;
  launch.min_p = decoded->sampler.filters.min_p;
  launch.offsets = static_cast<const int32_t*>(offsets.untyped_data());
  launch.tops = tops.untyped_data();
  launch.shards = decoded->shards;
  if (decoded->levels) {
    launch.above = static_cast<const uint32_t*>(above.untyped_data());
    launch.counts = static_cast<const uint32_t*>(counts.untyped_data());
  }
  launch.indices = indices->untyped_data();
  launch.index_is_int64 = indices->element_type() == ffi::DataType::S64;
  launch.noisy_max = noisy_max->untyped_data();
  const cudaError_t err = OnDevice(device, [&] { return LaunchSplitFilteredDraw(launch); });
  return err == cudaSuccess ? ffi::Error::Success() : CudaError(op, err);
}

}  // namespace

const XLA_FFI_TypeInfo kCallSiteStateTypeInfo = {XLA_FFI_TypeInfo_STRUCT_SIZE, nullptr,
                                                  DeleteCallSiteState};

// Every CUDA handler's instantiate stage (no attributes bound: XLA then passes any).
XLA_FFI_DEFINE_HANDLER_SYMBOL(InstantiateCuda, InstantiateCallSite, ffi::Ffi::BindInstantiate());

XLA_FFI_DEFINE_HANDLER_SYMBOL(ArgReduceCuda, ArgReduceCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // XLA's stream
                                  .Ctx<ffi::DeviceOrdinal>()  // the stream's device
                                  .Ctx<ffi::State<CallSiteState>>()  // the counter slot
                                  .Arg<ffi::AnyBuffer>()      // x: [..., cols] float array
                                  .Ret<ffi::AnyBuffer>()      // indices: [...] int32 or int64
                                  .Ret<ffi::AnyBuffer>()      // workspace: uint8 bytes
                                  .Attr<bool>("is_min"),      // argmin instead of argmax
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxWithIndexCuda, MaxWithIndexCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // XLA's stream
                                  .Ctx<ffi::DeviceOrdinal>()  // the stream's device
                                  .Ctx<ffi::State<CallSiteState>>()  // the counter slot
                                  .Arg<ffi::AnyBuffer>()      // x: [..., cols] float array
                                  .Ret<ffi::AnyBuffer>()      // values: [...] x's dtype
                                  .Ret<ffi::AnyBuffer>()      // indices: [...] int32 or int64
                                  .Ret<ffi::AnyBuffer>()      // workspace: uint8 bytes
                                  .Attr<bool>("is_min"),      // min_with_index instead
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(CategoricalCuda, CategoricalCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // XLA's stream
                                  .Ctx<ffi::DeviceOrdinal>()  // the stream's device
                                  .Ctx<ffi::State<CallSiteState>>()  // the counter slot
                                  .Arg<ffi::AnyBuffer>()      // keys: [num_keys, 2] uint32
                                  .Arg<ffi::AnyBuffer>()      // logits: [..., cols] floats
                                  .Arg<ffi::AnyBuffer>()      // temperature: [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()      // offsets: [2] int32 (row, col), or [0]
                                  .Ret<ffi::AnyBuffer>()      // noisy_max: [...] float32/64
                                  .Ret<ffi::AnyBuffer>()      // indices: [...] int32 or int64
                                  .Ret<ffi::AnyBuffer>(),     // workspace: uint8 bytes
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(TopKCuda, TopKCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // XLA's stream
                                  .Ctx<ffi::DeviceOrdinal>()  // the stream's device
                                  .Arg<ffi::AnyBuffer>()      // x: [..., cols] float array
                                  .Ret<ffi::AnyBuffer>()      // values: [..., k] x's dtype
                                  .Ret<ffi::AnyBuffer>()      // indices: [..., k] int32/int64
                                  .Ret<ffi::AnyBuffer>()      // workspace: uint8 bytes
                                  .Attr<int64_t>("k"),        // 1 <= k <= min(cols, 1024)
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(ScaledTopKCuda, ScaledTopKCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // XLA's stream
                                  .Ctx<ffi::DeviceOrdinal>()  // the stream's device
                                  .Arg<ffi::AnyBuffer>()      // x: [..., cols] float array
                                  .Arg<ffi::AnyBuffer>()      // temperature: [1] or [rows]
                                  .Ret<ffi::AnyBuffer>()      // values: [..., k] x's dtype
                                  .Ret<ffi::AnyBuffer>()      // indices: [..., k] int32/int64
                                  .Ret<ffi::AnyBuffer>()      // workspace: top_k's plan
                                  .Attr<int64_t>("k"),        // 1 <= k <= min(cols, 1024)
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(FilteredCategoricalCuda, FilteredCategoricalCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // XLA's stream
                                  .Ctx<ffi::DeviceOrdinal>()  // the stream's device
                                  .Arg<ffi::AnyBuffer>()      // keys: [num_keys, 2] uint32
                                  .Arg<ffi::AnyBuffer>()      // logits: [..., cols] floats
                                  .Arg<ffi::AnyBuffer>()      // temperature: [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()      // top_k: int32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()      // top_p: float32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()      // min_p: float32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()      // offsets: [2] int32, or [0]
                                  .Arg<ffi::AnyBuffer>()      // columns: [..., cols] int32, or [0]
                                  .Ret<ffi::AnyBuffer>()      // noisy_max: [...] float32/64
                                  .Ret<ffi::AnyBuffer>()      // indices: [...] int32 or int64
                                  .Ret<ffi::AnyBuffer>()      // workspace: the top-k, spread paths
                                  .Attr<int64_t>("k_bound")   // > 0: top_k in [1, it]; -1: none
                                  .Attr<bool>("has_top_p"),   // false: top_p is 1 everywhere
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(TopPLevelCuda, TopPLevelCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // XLA's stream
                                  .Ctx<ffi::DeviceOrdinal>()  // the stream's device
                                  .Arg<ffi::AnyBuffer>()      // logits: [..., cols] floats
                                  .Arg<ffi::AnyBuffer>()      // temperature: [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()      // top_p: float32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()      // tops: [rows, shards] logits' dtype
                                  .Arg<ffi::AnyBuffer>()      // above: uint32 [rows, level, 2048, 3]
                                  .Ret<ffi::AnyBuffer>()      // histogram: uint32 [rows, d(, 3)]
                                  .Ret<ffi::AnyBuffer>()      // workspace: empty (unused)
                                  .Attr<int64_t>("level"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(SplitFilteredDrawCuda, SplitFilteredDrawCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // XLA's stream
                                  .Ctx<ffi::DeviceOrdinal>()  // the stream's device
                                  .Arg<ffi::AnyBuffer>()      // keys: [num_keys, 2] uint32
                                  .Arg<ffi::AnyBuffer>()      // logits: [..., cols] floats
                                  .Arg<ffi::AnyBuffer>()      // temperature: [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()      // top_k: int32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()      // top_p: float32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()      // min_p: float32 [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()      // offsets: [2] int32 (row, col)
                                  .Arg<ffi::AnyBuffer>()      // tops: [rows, shards] logits' dtype
                                  .Arg<ffi::AnyBuffer>()      // above: uint32 [rows, 2, 2048, 3]
                                  .Arg<ffi::AnyBuffer>()      // counts: uint32 [rows, shards, d]
                                  .Ret<ffi::AnyBuffer>()      // noisy_max: [...] float32
                                  .Ret<ffi::AnyBuffer>()      // indices: [...] int32 or int64
                                  .Ret<ffi::AnyBuffer>(),     // workspace: empty (unused)
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_argreduce
