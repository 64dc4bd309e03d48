// nanobind module jax_argreduce._argreduce: the FFI handler registrations, and a `debug`
// submodule (launch planning for tests and benchmarks; nothing on the op path uses it).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "handlers.h"
#include "launch_plan.h"
#include "sample_filter.h"
#ifdef JAX_ARGREDUCE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "argreduce_kernels.h"
#endif

namespace nb = nanobind;

namespace jax_argreduce {
namespace {

nb::capsule EncapsulateFfiHandler(XLA_FFI_Handler* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

nb::dict PlanToDict(const LaunchPlan& plan) {
  nb::dict d;
  d["path"] = PathName(plan.path);
  d["team"] = plan.team;
  d["parts"] = plan.parts;
  d["grid"] = plan.grid;
  d["block"] = plan.block;
  d["merge_grid"] = plan.merge_grid;
  d["last_block_merges"] = plan.last_block_merges;
  d["pdl"] = plan.pdl;
  d["vector_elements"] = plan.vector_elements;
  d["row_step"] = plan.row_step;
  d["workspace_bytes"] = plan.workspace_bytes;
  return d;
}

MergeMode MergeModeFromName(const std::string& name) {
  for (MergeMode mode : {MergeMode::kAuto, MergeMode::kKernel, MergeMode::kLastBlock}) {
    if (name == MergeModeName(mode)) return mode;
  }
  throw std::invalid_argument("merge must be 'auto', 'kernel' or 'last_block', got '" + name +
                              "'");
}

ForcedPath ForcedPathFromName(const std::string& name) {
  for (ForcedPath path :
       {ForcedPath::kAuto, ForcedPath::kTeam, ForcedPath::kBlock, ForcedPath::kSplit}) {
    if (name == ForcedPathName(path)) return path;
  }
  throw std::invalid_argument("path must be 'auto', 'team', 'block' or 'split', got '" + name +
                              "'");
}

// Options in force, with those given (not None) replaced.
PlanOptions OptionsFrom(nb::object pdl, nb::object merge, nb::object team, nb::object path,
                        nb::object block) {
  PlanOptions options = CurrentPlanOptions();
  if (!pdl.is_none()) options.pdl = nb::cast<bool>(pdl);
  if (!merge.is_none()) options.merge = MergeModeFromName(nb::cast<std::string>(merge));
  if (!team.is_none()) {
    const int64_t lanes = nb::cast<int64_t>(team);
    if (lanes != 0 && (lanes < 0 || lanes > kMaxTeam || (lanes & (lanes - 1)) != 0)) {
      throw std::invalid_argument("team must be 0 (the planner's choice) or a power of two up to " +
                                  std::to_string(kMaxTeam) + ", got " + std::to_string(lanes));
    }
    options.team = static_cast<int>(lanes);
  }
  if (!path.is_none()) options.path = ForcedPathFromName(nb::cast<std::string>(path));
  if (!block.is_none()) {
    const int64_t threads = nb::cast<int64_t>(block);
    if (threads != 0 && threads != kBlockThreads && threads != kWideBlockThreads) {
      throw std::invalid_argument("block must be 0 (the planner's choice), " +
                                  std::to_string(kBlockThreads) + " or " +
                                  std::to_string(kWideBlockThreads) + ", got " +
                                  std::to_string(threads));
    }
    options.block = static_cast<int>(threads);
  }
  return options;
}

nb::dict OptionsToDict(const PlanOptions& options) {
  nb::dict d;
  d["pdl"] = options.pdl;
  d["merge"] = MergeModeName(options.merge);
  d["team"] = options.team;
  d["path"] = ForcedPathName(options.path);
  d["block"] = options.block;
  return d;
}

#ifdef JAX_ARGREDUCE_WITH_CUDA
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
    // (op, platform, target name, {stage: handler capsule})
    nb::list targets;
    auto add = [&](const char* op, const char* platform, XLA_FFI_Handler* execute,
                   XLA_FFI_Handler* instantiate) {
      nb::dict stages;
      stages["execute"] = EncapsulateFfiHandler(execute);
      if (instantiate != nullptr) stages["instantiate"] = EncapsulateFfiHandler(instantiate);
      targets.append(nb::make_tuple(
          op, platform, std::string("jax_argreduce_") + op + "_" + platform, stages));
    };
    add("argreduce", "cpu", ArgReduceCpu, nullptr);
    add("max_with_index", "cpu", MaxWithIndexCpu, nullptr);
    add("categorical", "cpu", CategoricalCpu, nullptr);
    add("top_k", "cpu", TopKCpu, nullptr);
    add("scaled_top_k", "cpu", ScaledTopKCpu, nullptr);
    add("filtered_categorical", "cpu", FilteredCategoricalCpu, nullptr);
    add("top_p_level", "cpu", TopPLevelCpu, nullptr);
    add("split_filtered_draw", "cpu", SplitFilteredDrawCpu, nullptr);
#ifdef JAX_ARGREDUCE_WITH_CUDA
    add("argreduce", "cuda", ArgReduceCuda, InstantiateCuda);
    add("max_with_index", "cuda", MaxWithIndexCuda, InstantiateCuda);
    add("categorical", "cuda", CategoricalCuda, InstantiateCuda);
    add("top_k", "cuda", TopKCuda, nullptr);
    add("scaled_top_k", "cuda", ScaledTopKCuda, nullptr);
    add("filtered_categorical", "cuda", FilteredCategoricalCuda, nullptr);
    add("top_p_level", "cuda", TopPLevelCuda, nullptr);
    add("split_filtered_draw", "cuda", SplitFilteredDrawCuda, nullptr);
#endif
    return targets;
  }, "FFI targets: [(op, platform, target name, {stage: handler capsule})].");
  m.def("types", []() {
    // (platform, type name, {"type_id": capsule, "type_info": capsule}): FFI state types,
    // registered before the handlers that use them.
    nb::list types;
#ifdef JAX_ARGREDUCE_WITH_CUDA
    nb::dict registration;
    registration["type_id"] = nb::capsule(reinterpret_cast<void*>(&CallSiteState::id));
    registration["type_info"] = nb::capsule(
        const_cast<void*>(reinterpret_cast<const void*>(&kCallSiteStateTypeInfo)));
    types.append(nb::make_tuple("cuda", "jax_argreduce_call_site", registration));
#endif
    return types;
  }, "FFI state types: [(platform, type name, registration dict)].");
#ifdef JAX_ARGREDUCE_WITH_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
  // Workspace bytes of one CUDA handler call (launch_plan.h): a pure function of the call's
  // op and shape, so the lowering sizes XLA's workspace result without a GPU.
  m.def("cuda_workspace_bytes", [](const std::string& op, int64_t rows, int64_t cols, int64_t k,
                                   int elem_bytes) {
    return WorkspaceBytes(op.c_str(), rows, cols, k, elem_bytes);
  }, nb::arg("op"), nb::arg("rows"), nb::arg("cols"), nb::arg("k"), nb::arg("elem_bytes"));
  m.attr("top_k_max_k") = kSelectMaxK;
  // A split vocabulary's top-p levels (sample_filter.h): digits a level holds, limbs a mass.
  m.attr("mass_level_width") = MassLevels<32>::kWidth;
  m.attr("mass_limbs") = kMassLimbs;
  m.def("mass_levels", [](int key_bits) {
    if (key_bits == 32) return nb::make_tuple(MassLevels<32>::kCount, MassLevels<32>::Bits(MassLevels<32>::kCount - 1));
    if (key_bits == 64) return nb::make_tuple(MassLevels<64>::kCount, MassLevels<64>::Bits(MassLevels<64>::kCount - 1));
    throw std::invalid_argument("mass_levels: key_bits must be 32 or 64");
  });
  // The XLA FFI API version of the headers the handlers were built against, which XLA checks
  // at registration, and the jaxlib that shipped them: _ffi.py compares them with the running
  // jaxlib before registering anything.
  m.attr("xla_ffi_api_version") = nb::make_tuple(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
  m.attr("built_jaxlib_version") = JAX_ARGREDUCE_BUILT_JAXLIB;

  nb::module_ debug = m.def_submodule("debug", "Launch planning, for tests and benchmarks.");
  debug.def("plan", [](int64_t rows, int64_t cols, int elem_bytes, int key_bytes, int sms,
                       int cc_major, int team_blocks_per_sm, int block_blocks_per_sm,
                       int split_blocks_per_sm, nb::object pdl, nb::object merge,
                       bool compute_bound, bool graph_captured, int vector_bytes,
                       nb::object team, nb::object path, nb::object block) {
    if (vector_bytes != 16 && vector_bytes != 32) throw std::invalid_argument("vector_bytes");
    if (rows < 1 || cols < 1 || cols > INT32_MAX) throw std::invalid_argument("bad shape");
    DeviceCaps caps;
    caps.sms = sms;
    caps.cc_major = cc_major;
    caps.team_blocks_per_sm = team_blocks_per_sm;
    caps.block_blocks_per_sm = block_blocks_per_sm;
    caps.split_blocks_per_sm = split_blocks_per_sm;
    return PlanToDict(PlanRowReduce(caps, rows, cols, elem_bytes, key_bytes,
                                    OptionsFrom(pdl, merge, team, path, block), compute_bound,
                                    graph_captured, vector_bytes));
  }, nb::arg("rows"), nb::arg("cols"), nb::arg("elem_bytes"), nb::arg("key_bytes"),
     nb::arg("sms"), nb::arg("cc_major"), nb::arg("team_blocks_per_sm"),
     nb::arg("block_blocks_per_sm"), nb::arg("split_blocks_per_sm"),
     nb::arg("pdl") = nb::none(), nb::arg("merge") = nb::none(),
     nb::arg("compute_bound") = false, nb::arg("graph_captured") = false,
     nb::arg("vector_bytes") = 16, nb::arg("team") = nb::none(), nb::arg("path") = nb::none(),
     nb::arg("block") = nb::none(), "The pure planner on made-up device capabilities.");
  debug.def("set_plan_options", [](nb::object pdl, nb::object merge, nb::object team,
                                   nb::object path, nb::object block) {
    SetPlanOptions(OptionsFrom(pdl, merge, team, path, block));
  }, nb::arg("pdl") = nb::none(), nb::arg("merge") = nb::none(),
     nb::arg("team") = nb::none(), nb::arg("path") = nb::none(), nb::arg("block") = nb::none(),
     "Process-wide plan options, taking effect at the next CUDA handler call.");
  debug.def("plan_options", []() { return OptionsToDict(CurrentPlanOptions()); });
  debug.def("top_k_plan", [](int64_t rows, int64_t cols, int64_t k, int elem_bytes) {
    if (rows < 1 || cols < 1 || cols > INT32_MAX || k < 1 || k > cols || k > kSelectMaxK ||
        (elem_bytes != 2 && elem_bytes != 4)) {
      throw std::invalid_argument("top_k_plan: rows, cols >= 1, 1 <= k <= min(cols, " +
                                  std::to_string(kSelectMaxK) + "), elem_bytes 2 or 4");
    }
    const SelectPlan plan = PlanTopK(rows, cols, k, elem_bytes);
    nb::list levels;
    for (int i = 0; i < plan.levels; ++i) {
      const SelectLevel& level = plan.level[i];
      nb::dict d;
      d["items"] = level.items;
      d["chunk"] = level.chunk;
      d["chunks"] = level.chunks;
      d["in_offset"] = level.in_offset;
      d["out_offset"] = level.out_offset;
      levels.append(d);
    }
    nb::dict d;
    d["elements_per_thread"] = plan.elements_per_thread;
    d["levels"] = levels;
    d["workspace_bytes"] = plan.workspace_bytes;
    return d;
  }, nb::arg("rows"), nb::arg("cols"), nb::arg("k"), nb::arg("elem_bytes"),
     "The CUDA top_k plan (a pure function of the shape; no GPU needed).");
#ifdef JAX_ARGREDUCE_WITH_CUDA
  debug.def("device_plan", [](int64_t rows, int64_t cols, const std::string& dtype, bool is_min,
                              int device, bool graph_captured) {
    LaunchPlan plan;
    cudaError_t err = cudaSetDevice(device);
    if (err == cudaSuccess) {
      err = PlanArgReduce(device, CurrentPlanOptions(), FormatFromName(dtype), is_min, rows,
                          cols, graph_captured, &plan);
    }
    if (err != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + cudaGetErrorString(err));
    return PlanToDict(plan);
  }, nb::arg("rows"), nb::arg("cols"), nb::arg("dtype"), nb::arg("is_min") = false,
     nb::arg("device") = 0, nb::arg("graph_captured") = false,
     "The plan the CUDA handler takes on that device, launched from the host or captured "
     "into a CUDA graph.");
#endif
}
