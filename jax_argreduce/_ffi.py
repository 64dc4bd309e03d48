"""Loads the compiled module once and registers its FFI targets with XLA.

Every target the module exports (``registrations()``: (op, platform, name, capsule)) is
registered in one loop at import, after checking that the running jaxlib accepts handlers built
against the module's XLA FFI headers (an ImportError naming the fix otherwise);
``target(op, platform)`` gives the name to lower to. The CUDA targets exist only when the
package was built with a CUDA compiler; ``HAS_CUDA`` says which, and a lowering for a CUDA GPU
without them warns once.
"""

from __future__ import annotations

import os
import re
import warnings

import jax
import numpy as np

from jax_argreduce import _argreduce

# True when the extension was built with the CUDA handlers (nvcc found at build time). It says
# nothing about a GPU being present: the handlers are used only on a CUDA backend.
HAS_CUDA: bool = bool(_argreduce.has_cuda)

# The largest k the CUDA top_k kernels take (larger k: the exact XLA path).
TOP_K_MAX_K: int = int(_argreduce.top_k_max_k)

# A split vocabulary's top-p levels (ffi/sample_filter.h, MassLevels): the digits a level's
# masses hold and the uint32 limbs of a mass.
MASS_LEVEL_WIDTH: int = int(_argreduce.mass_level_width)
MASS_LIMBS: int = int(_argreduce.mass_limbs)


def mass_levels(dtype) -> tuple[int, int]:
  """(levels, bits of the last level's digits) of top-p's levels for logits of ``dtype``: z's
  radix key has 64 bits for float64 logits, else 32."""
  return tuple(_argreduce.mass_levels(64 if np.dtype(dtype) == np.float64 else 32))


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


# XLA registers a handler only if the FFI API version it was built against (the
# XLA_FFI_API_MAJOR.MINOR of its headers, reported by the handler's metadata) lies between this
# minimum and the running XLA's own version, compared as (major, minor) pairs
# (xla/ffi/ffi_registry.cc, IsSupportedApiVersion). Registration is lazy (when a backend starts),
# so a refused handler stops that backend: every JAX computation on it fails.
MIN_FFI_API_VERSION = (0, 1)

# The XLA FFI API version of the headers this module was built against, and their jaxlib.
BUILT_FFI_API_VERSION: tuple[int, int] | None = (
    tuple(_argreduce.xla_ffi_api_version) if hasattr(_argreduce, "xla_ffi_api_version")
    else None)
BUILT_JAXLIB_VERSION: str | None = getattr(_argreduce, "built_jaxlib_version", None)


def runtime_ffi_api_version() -> tuple[int, int] | None:
  """The XLA FFI API version of the running jaxlib: XLA_FFI_API_MAJOR.MINOR of the headers it
  ships (``jax.ffi.include_dir()``, the same XLA as its runtime); None if unreadable."""
  try:
    with open(os.path.join(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h")) as f:
      text = f.read()
  except (OSError, AttributeError):
    return None
  found = [re.search(rf"^#define XLA_FFI_API_{part} (\d+)", text, re.MULTILINE)
           for part in ("MAJOR", "MINOR")]
  if not all(found):
    return None
  return int(found[0][1]), int(found[1][1])


def _reinstall_command() -> str:
  """How to rebuild against the running jaxlib: from this checkout when the package is one
  (an editable install), else from the package's source."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  checkout = os.path.isfile(os.path.join(root, "pyproject.toml"))
  source = root if checkout else "<jax_argreduce source>"
  return ("pip install nanobind scikit-build-core && pip install --no-build-isolation "
          f"--force-reinstall --no-deps {source}")


def check_ffi_api_version(built: tuple[int, int] | None, runtime: tuple[int, int] | None,
                          built_jaxlib: str | None = None) -> None:
  """Raises ImportError where XLA would refuse handlers built against FFI API version ``built``
  (XLA's own rule, see MIN_FFI_API_VERSION) with the running jaxlib's ``runtime`` version.
  Unknown versions (None) pass: XLA's registration then decides."""
  if built is None or runtime is None:
    return
  built, runtime = tuple(built), tuple(runtime)
  if MIN_FFI_API_VERSION <= built <= runtime:
    return
  import jaxlib.version
  version = lambda v: f"{v[0]}.{v[1]}"
  raise ImportError(
      f"jax_argreduce was built against the XLA FFI headers of jaxlib {built_jaxlib or '?'} "
      f"(FFI API {version(built)}), but the running jaxlib {jaxlib.version.__version__} takes "
      f"handlers of FFI API {version(MIN_FFI_API_VERSION)} to {version(runtime)}: XLA would "
      "refuse them and stop its backend, taking every JAX computation down. Nothing was "
      "registered. Rebuild jax_argreduce against the jaxlib you run (no build isolation, so the "
      f"build takes this jaxlib's headers): `{_reinstall_command()}`"
      + (f"; or run jaxlib {built_jaxlib} or newer." if built > runtime and built_jaxlib else "."))


def _register_all() -> None:
  check_ffi_api_version(BUILT_FFI_API_VERSION, runtime_ffi_api_version(), BUILT_JAXLIB_VERSION)
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
  """The FFI target name of handler ``op`` on ``platform`` ("cpu", "cuda"), or None.

  Asked for a CUDA target in a build without the CUDA handlers (a lowering for a CUDA GPU),
  it warns once (:func:`warn_no_cuda_handler`)."""
  name = _TARGETS.get((op, platform))
  if name is None and platform == "cuda" and not HAS_CUDA:
    warn_no_cuda_handler()
  return name


class NoCudaHandlerWarning(UserWarning):
  """A computation for a CUDA GPU is lowered by a build of jax_argreduce without the CUDA
  handlers."""


_warned_no_cuda = False


def warn_no_cuda_handler() -> None:
  """Warns, once per process, that a computation for a CUDA GPU is lowered without the CUDA
  handlers (``HAS_CUDA`` is False: built without a CUDA compiler, or with
  JAX_ARGREDUCE_CUDA=OFF): every op then takes the exact XLA path there (slower;
  ``categorical`` draws other samples than the CPU handler). Call it where a CUDA lowering
  finds no CUDA target; ``target(op, "cuda")`` does."""
  global _warned_no_cuda
  if HAS_CUDA or _warned_no_cuda:
    return
  _warned_no_cuda = True
  warnings.warn(
      "jax_argreduce: a computation for a CUDA GPU is lowered, but this build has no CUDA "
      "handlers (jax_argreduce.HAS_CUDA is False: it was built without a CUDA compiler, or "
      "with JAX_ARGREDUCE_CUDA=OFF), so its ops take the exact XLA path on the GPU: slower, "
      "and categorical draws other samples than the CPU handler. Fix: get nvcc (`pip install "
      "nvidia-cuda-nvcc nvidia-cuda-cccl`, the CUDA 13 wheels `jax[cuda13]` uses, or a CUDA "
      "toolkit on PATH), then rebuild: "
      f"`{_reinstall_command()} -C cmake.define.JAX_ARGREDUCE_CUDA=ON`.",
      NoCudaHandlerWarning, stacklevel=2)


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
