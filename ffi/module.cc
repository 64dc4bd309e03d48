// nanobind module: exports the FFI handler capsules (registered by jax_argreduce/_ffi.py in
// one loop) and, when built with CUDA, the launch planner for lowering and benchmarks.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "argreduce_cpu.h"
#ifdef JAX_ARGREDUCE_WITH_CUDA
#include "argreduce_cuda.h"
#include "argreduce_kernels.h"
#endif

namespace nb = nanobind;

namespace jax_argreduce {
namespace {

template <typename T>
nb::capsule EncapsulateFfiHandler(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

#ifdef JAX_ARGREDUCE_WITH_CUDA
void ThrowIfError(cudaError_t err) {
  if (err != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + cudaGetErrorString(err));
}

Format FormatFromName(const std::string& name) {
  if (name == "float16") return Format::kF16;
  if (name == "bfloat16") return Format::kBF16;
  if (name == "float32") return Format::kF32;
  if (name == "float64") return Format::kF64;
  throw std::invalid_argument("unsupported dtype for the CUDA kernels: " + name);
}
#endif

}  // namespace
}  // namespace jax_argreduce

NB_MODULE(_argreduce, m) {
  using namespace jax_argreduce;
  m.def("registrations", []() {
    nb::dict targets;
    targets["jax_argreduce_cpu"] = nb::make_tuple("cpu", EncapsulateFfiHandler(ArgReduceCpu));
#ifdef JAX_ARGREDUCE_WITH_CUDA
    targets["jax_argreduce_cuda"] =
        nb::make_tuple("CUDA", EncapsulateFfiHandler(ArgReduceCuda));
#endif
    return targets;
  }, "FFI targets: {name: (platform, handler capsule)}.");
#ifdef JAX_ARGREDUCE_WITH_CUDA
  m.attr("has_cuda") = true;
  // Workspace bytes the CUDA handler needs: a constant, for any shape on any GPU.
  m.attr("cuda_workspace_bytes") = kArgReduceWorkspaceBytes;
  m.def("cuda_launch_plan", [](int64_t rows, int64_t cols, const std::string& dtype,
                               bool is_min) {
    LaunchPlan plan;
    ThrowIfError(PlanArgReduce(FormatFromName(dtype), is_min, rows, cols, &plan));
    nb::dict d;
    d["path"] = plan.team > 0            ? "team"
                : plan.cluster > 0         ? "cluster"
                : plan.blocks_per_row > 1  ? "multi_block"
                                           : "block";
    d["cluster"] = plan.cluster;
    d["team"] = plan.team;
    d["blocks_per_row"] = plan.blocks_per_row;
    d["grid"] = plan.grid;
    d["block"] = plan.block;
    d["vector_elements"] = plan.vector_elements;
    d["row_step"] = plan.row_step;
    d["workspace_bytes"] = plan.workspace_bytes;
    return d;
  }, nb::arg("rows"), nb::arg("cols"), nb::arg("dtype"), nb::arg("is_min") = false,
     "Launch geometry the CUDA handler uses for rows x cols of dtype on the current device.");
#else
  m.attr("has_cuda") = false;
#endif
}
