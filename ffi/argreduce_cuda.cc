// CUDA FFI handler: decodes the buffers, takes the stream and the workspace from XLA, and
// calls the raw-pointer launcher. The workspace is an extra output of the custom call
// (kArgReduceWorkspaceBytes, fixed at lowering time), not a run-time allocation, so the
// handler is safe to capture in XLA command buffers: every replay gets the workspace XLA
// assigned.
#include "argreduce_cuda.h"

#include <string>

#include <cuda_runtime_api.h>

#include "argreduce_ffi_common.h"
#include "argreduce_kernels.h"

namespace jax_argreduce {
namespace {

namespace ffi = xla::ffi;

ffi::Error ArgReduceCudaImpl(cudaStream_t stream, ffi::AnyBuffer x,
                             ffi::Result<ffi::AnyBuffer> indices,
                             ffi::Result<ffi::AnyBuffer> workspace, bool is_min) {
  auto view = DecodeRows(x, *indices, "jax_argreduce_cuda");
  if (!view.has_value()) return view.error();
  const cudaError_t err = LaunchArgReduce(
      stream, view->format, is_min, view->data, view->rows, view->cols,
      indices->untyped_data(), indices->element_type() == ffi::DataType::S64,
      workspace->untyped_data(), workspace->size_bytes());
  if (err != cudaSuccess) {
    return ffi::Error::Internal(std::string("jax_argreduce_cuda: ") + cudaGetErrorName(err) +
                                ": " + cudaGetErrorString(err));
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ArgReduceCuda, ArgReduceCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // XLA's stream
                                  .Arg<ffi::AnyBuffer>()   // x: [..., cols] float array
                                  .Ret<ffi::AnyBuffer>()   // indices: [...] int32 or int64
                                  .Ret<ffi::AnyBuffer>()   // workspace: uint8 bytes
                                  .Attr<bool>("is_min"),   // argmin instead of argmax
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jax_argreduce
