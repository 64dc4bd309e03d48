"""Loads the compiled module once and registers its FFI targets with XLA.

Every target the module exports (``registrations()``: (op, platform, name, capsule)) is
registered in one loop at import; ``target(op, platform)`` gives the name to lower to. The CUDA
targets exist only when the package was built with a CUDA compiler; ``HAS_CUDA`` says which.
"""

from __future__ import annotations

import jax

from jax_argreduce import _argreduce

# True when the extension was built with the CUDA handlers (nvcc found at build time). It says
# nothing about a GPU being present: the handlers are used only on a CUDA backend.
HAS_CUDA: bool = bool(_argreduce.has_cuda)

# The largest k the CUDA top_k kernels take (larger k: the exact XLA path).
TOP_K_MAX_K: int = int(_argreduce.top_k_max_k)


def cuda_workspace_bytes(op: str, rows: int, cols: int, k: int, itemsize: int) -> int:
  """Bytes of XLA workspace one CUDA handler call of ``op`` (a handler name: "argreduce",
  "max_with_index", "categorical", "top_k") takes over ``[rows, cols]`` elements of
  ``itemsize`` bytes (``k``: top_k's): a pure function of the shape (no GPU needed), so the
  lowering sizes it and an exported program runs on any GPU."""
  return int(_argreduce.cuda_workspace_bytes(op, int(rows), int(cols), int(k), int(itemsize)))


# The order-key ops' and the sampler's workspace: the split path's bound, the same for every
# shape (their plan depends on the GPU's SM count).
CUDA_WORKSPACE_BYTES: int = cuda_workspace_bytes("argreduce", 1, 1, 0, 4)

_TARGETS: dict[tuple[str, str], str] = {}


# XLA's platform names for the lowering platforms the module reports.
_XLA_PLATFORMS = {"cpu": "cpu", "cuda": "CUDA"}


def _register_all() -> None:
  # FFI state types first (the CUDA handlers' per-call-site state), then every handler: a dict
  # of stage capsules ({"execute": ...} and, on CUDA, "instantiate").
  for platform, name, registration in _argreduce.types():
    try:
      jax.ffi.register_ffi_type(name, dict(registration), platform=_XLA_PLATFORMS[platform])
    except Exception as e:  # pragma: no cover - depends on the installed jax
      raise RuntimeError(
          f"jax_argreduce: jax refused FFI type {name!r} for {platform} ({e}); the CUDA "
          "handlers need jax.ffi.register_ffi_type (jax >= 0.10)") from e
  for op, platform, name, stages in _argreduce.registrations():
    try:
      jax.ffi.register_ffi_target(name, dict(stages), platform=_XLA_PLATFORMS[platform],
                                  api_version=1)
    except Exception as e:  # pragma: no cover - depends on the installed jaxlib
      raise RuntimeError(
          f"jax_argreduce: XLA refused FFI target {name!r} for {platform} ({e}). The extension "
          "must be built against the jaxlib that runs it: reinstall with "
          "`pip install --no-build-isolation .`") from e
    _TARGETS[(op, platform)] = name


_register_all()


def target(op: str, platform: str) -> str | None:
  """The FFI target name of handler ``op`` on ``platform`` ("cpu", "cuda"), or None."""
  return _TARGETS.get((op, platform))


def export_disabled_checks() -> list:
  """``jax.export.export(fn, disabled_checks=...)`` for programs that call this package's
  handlers: one ``DisabledSafetyCheck.custom_call`` per FFI target (they carry no XLA
  compatibility guarantee, like every FFI target outside jaxlib). A deserialized program
  needs ``import jax_argreduce`` first (it registers the handlers)."""
  return [jax.export.DisabledSafetyCheck.custom_call(t) for t in all_targets()]


def all_targets() -> tuple[str, ...]:
  """Every registered target name (e.g. for ``jax.export`` disabled checks)."""
  return tuple(_TARGETS.values())


# -------------------------------------------------------------------------------------------
# Debug entries (tests, benchmarks): launch planning and process-wide plan options.

def debug_launch_plan(rows: int, cols: int, dtype, op: str = "argmax", device: int = 0,
                      graph_captured: bool = False) -> dict:
  """The launch plan the CUDA handler takes for a [rows, cols] input of ``dtype`` on GPU
  ``device`` (path team/block/split, team, parts, grid, block, pdl, last_block_merges, ...),
  launched from the host or (``graph_captured``) captured into a CUDA graph (an XLA command
  buffer). Raises RuntimeError without a GPU or a CUDA build."""
  if not HAS_CUDA:
    raise RuntimeError("jax_argreduce was built without the CUDA handlers")
  import numpy as np
  return dict(_argreduce.debug.device_plan(int(rows), int(cols), np.dtype(dtype).name,
                                           op in ("argmin", "min_with_index"), int(device),
                                           bool(graph_captured)))


def debug_plan(rows: int, cols: int, elem_bytes: int, *, sms: int, cc_major: int,
               team_blocks_per_sm: int, block_blocks_per_sm: int, split_blocks_per_sm: int,
               key_bytes: int | None = None, pdl: bool | None = None,
               merge: str | None = None, compute_bound: bool = False,
               graph_captured: bool = False, vector_bytes: int = 16,
               team: int | None = None, path: str | None = None,
               block: int | None = None) -> dict:
  """The pure launch planner on made-up device capabilities (runs without a GPU).
  ``vector_bytes``: 16, or 32 (the sampler's float32 scan visits 32-byte vectors).
  ``team``, ``path``, ``block``: as in debug_set_plan_options (None: the options in force)."""
  if key_bytes is None:
    key_bytes = 8 if elem_bytes == 8 else 4
  return dict(_argreduce.debug.plan(int(rows), int(cols), int(elem_bytes), int(key_bytes),
                                    int(sms), int(cc_major), int(team_blocks_per_sm),
                                    int(block_blocks_per_sm), int(split_blocks_per_sm), pdl,
                                    merge, bool(compute_bound), bool(graph_captured),
                                    int(vector_bytes), team, path, block))


def debug_set_plan_options(*, pdl: bool | None = None, merge: str | None = None,
                           team: int | None = None, path: str | None = None,
                           block: int | None = None) -> dict:
  """Sets process-wide plan options (None keeps one); effective at the next CUDA handler call
  (an executable XLA already captured in a CUDA graph replays the launches it captured).
  ``pdl``: programmatic dependent launch (sm_90+). ``merge``: how the split path (few wide
  rows) merges its blocks' partials: "kernel" (a second kernel), "last_block" (the scan's
  last block; one kernel), "auto" (the default: "kernel" inside a CUDA graph, "last_block"
  for up to 16 rows launched from the host). ``team``: the team path's lanes per row where a
  shape takes that path (a power of two up to 64, where 64 lanes are for the order-key ops
  and the sampler takes at most 32; 0: the planner's choice, the default;
  ValueError otherwise). ``path``: "team", "block" or "split" for every shape ("split" gives
  "block" where a row would get one part), "auto" (the default) the planner's. ``block``:
  threads per block where the block path may widen its block (at most one row per SM, the
  order-key ops): 256 or 512; 0 (the default) the planner's (512 for rows of more than 32 KB);
  ValueError otherwise. Returns the options now in force."""
  _argreduce.debug.set_plan_options(pdl, merge, team, path, block)
  return dict(_argreduce.debug.plan_options())


def debug_plan_options() -> dict:
  return dict(_argreduce.debug.plan_options())


def debug_top_k_plan(rows: int, cols: int, k: int, itemsize: int) -> dict:
  """The CUDA top_k plan (levels, chunks, workspace): a pure function of the shape, computed
  without a GPU (also in a build without the CUDA handlers)."""
  plan = dict(_argreduce.debug.top_k_plan(int(rows), int(cols), int(k), int(itemsize)))
  plan["levels"] = [dict(level) for level in plan["levels"]]
  return plan
