"""Loads the compiled module once and registers its FFI targets with XLA.

Every target the module exports (``registrations()``: name -> (platform, capsule)) is
registered in one loop at import. The CUDA target exists only when the package was built with
a CUDA compiler; ``HAS_CUDA`` says which.
"""

from __future__ import annotations

import jax

from jax_argreduce import _argreduce

# True when the extension was built with the CUDA handler (nvcc found at build time). It says
# nothing about a GPU being present: the handler is used only on a CUDA backend.
HAS_CUDA: bool = bool(_argreduce.has_cuda)

CPU_TARGET = "jax_argreduce_cpu"
CUDA_TARGET = "jax_argreduce_cuda"


def _register_all() -> None:
  for name, (platform, capsule) in _argreduce.registrations().items():
    try:
      jax.ffi.register_ffi_target(name, capsule, platform=platform, api_version=1)
    except Exception as e:  # pragma: no cover - depends on the installed jaxlib
      raise RuntimeError(
          f"jax_argreduce: XLA refused FFI target {name!r} for {platform} ({e}). The extension "
          "must be built against the jaxlib that runs it: reinstall with "
          "`pip install --no-build-isolation .`") from e


_register_all()


# Bytes of XLA workspace the CUDA handler takes (a constant: any shape, any GPU).
CUDA_WORKSPACE_BYTES: int = int(getattr(_argreduce, "cuda_workspace_bytes", 0))


def cuda_launch_plan(rows: int, cols: int, dtype: str, is_min: bool = False) -> dict:
  """Launch geometry the CUDA handler uses for a [rows, cols] input on the current GPU (for
  tests and benchmarks). Raises RuntimeError without a usable GPU."""
  return dict(_argreduce.cuda_launch_plan(int(rows), int(cols), str(dtype), bool(is_min)))
