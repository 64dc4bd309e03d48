// CUDA FFI shims: validate and decode the buffers (ffi_common.h), take the stream, the device
// and the workspace from XLA, and call the op's raw-pointer launcher. The workspace is an extra
// output of the custom call (kWorkspaceBytes, fixed at lowering time), not a run-time
// allocation, so the handlers are safe to capture in XLA command buffers: every replay gets
// the workspace XLA assigned. Nothing is kept in it between calls.
#include <string>

#include <cuda_runtime_api.h>

#include "argreduce_kernels.h"
#include "categorical_kernels.h"
#include "ffi_common.h"
#include "handlers.h"
#include "xla/ffi/api/ffi.h"

namespace jax_argreduce {
namespace {

namespace ffi = xla::ffi;

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

ffi::Error ArgReduceRows(cudaStream_t stream, int device, const ffi::AnyBuffer& x,
                         ffi::AnyBuffer& indices, ffi::AnyBuffer* values,
                         ffi::AnyBuffer& workspace, bool is_min, const std::string& op) {
  auto view = DecodeRows(x, indices, values, op);
  if (!view.has_value()) return view.error();
  const cudaError_t err = OnDevice(device, [&] {
    return LaunchArgReduce(stream, device, CurrentPlanOptions(), view->format, is_min,
                           view->data, view->rows, view->cols, indices.untyped_data(),
                           indices.element_type() == ffi::DataType::S64,
                           values == nullptr ? nullptr : values->untyped_data(),
                           workspace.untyped_data(), workspace.size_bytes());
  });
  return err == cudaSuccess ? ffi::Error::Success() : CudaError(op, err);
}

ffi::Error ArgReduceCudaImpl(cudaStream_t stream, int32_t device, ffi::AnyBuffer x,
                             ffi::Result<ffi::AnyBuffer> indices,
                             ffi::Result<ffi::AnyBuffer> workspace, bool is_min) {
  return ArgReduceRows(stream, device, x, *indices, nullptr, *workspace, is_min,
                       "jax_argreduce argreduce (cuda)");
}

ffi::Error MaxWithIndexCudaImpl(cudaStream_t stream, int32_t device, ffi::AnyBuffer x,
                                ffi::Result<ffi::AnyBuffer> values,
                                ffi::Result<ffi::AnyBuffer> indices,
                                ffi::Result<ffi::AnyBuffer> workspace, bool is_min) {
  return ArgReduceRows(stream, device, x, *indices, &*values, *workspace, is_min,
                       "jax_argreduce max_with_index (cuda)");
}

ffi::Error CategoricalCudaImpl(cudaStream_t stream, int32_t device, ffi::AnyBuffer keys,
                               ffi::AnyBuffer logits, ffi::AnyBuffer temperature,
                               ffi::AnyBuffer offsets, ffi::Result<ffi::AnyBuffer> noisy_max,
                               ffi::Result<ffi::AnyBuffer> indices,
                               ffi::Result<ffi::AnyBuffer> workspace) {
  const std::string op = "jax_argreduce categorical (cuda)";
  auto view = DecodeRows(logits, *indices, nullptr, op);
  if (!view.has_value()) return view.error();
  auto sampler = DecodeSampler(*view, keys, temperature, offsets, *noisy_max, op);
  if (!sampler.has_value()) return sampler.error();
  const cudaError_t err = OnDevice(device, [&] {
    return LaunchCategorical(
        stream, device, CurrentPlanOptions(), view->format,
        static_cast<const uint32_t*>(keys.untyped_data()), sampler->num_keys, view->data,
        view->rows, view->cols, temperature.untyped_data(), sampler->temperature_per_row,
        static_cast<const int32_t*>(offsets.untyped_data()), indices->untyped_data(),
        indices->element_type() == ffi::DataType::S64, noisy_max->untyped_data(),
        workspace->untyped_data(), workspace->size_bytes());
  });
  return err == cudaSuccess ? ffi::Error::Success() : CudaError(op, err);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ArgReduceCuda, ArgReduceCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // XLA's stream
                                  .Ctx<ffi::DeviceOrdinal>()  // the stream's device
                                  .Arg<ffi::AnyBuffer>()      // x: [..., cols] float array
                                  .Ret<ffi::AnyBuffer>()      // indices: [...] int32 or int64
                                  .Ret<ffi::AnyBuffer>()      // workspace: uint8 bytes
                                  .Attr<bool>("is_min"),      // argmin instead of argmax
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(MaxWithIndexCuda, MaxWithIndexCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // XLA's stream
                                  .Ctx<ffi::DeviceOrdinal>()  // the stream's device
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
                                  .Arg<ffi::AnyBuffer>()      // keys: [num_keys, 2] uint32
                                  .Arg<ffi::AnyBuffer>()      // logits: [..., cols] floats
                                  .Arg<ffi::AnyBuffer>()      // temperature: [1] or [rows]
                                  .Arg<ffi::AnyBuffer>()      // offsets: [2] int32 (row, col)
                                  .Ret<ffi::AnyBuffer>()      // noisy_max: [...] float32/64
                                  .Ret<ffi::AnyBuffer>()      // indices: [...] int32 or int64
                                  .Ret<ffi::AnyBuffer>(),     // workspace: uint8 bytes
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_argreduce
