"""The one place that decides, per call, between an FFI handler and the exact XLA path.

Every decision of the package lives here, from measured crossovers (benchmarks/NOTES.md):
which dtypes the handlers take, the rows longer than INT32_MAX (the handlers index rows with
32-bit positions), and per platform which shapes the handler wins. Tests and benchmarks read
these names; nothing else decides a path.
"""

from __future__ import annotations

import numpy as np
import jax.numpy as jnp

from jax_argreduce import _ffi
from jax_argreduce._compat import is_constant_dim, is_constant_shape

# Paths a call can ask for: "auto" (the measured choice), "kernel" (the FFI handler), "xla".
METHODS = ("auto", "kernel", "xla")

# Float dtypes the FFI handlers take; every other dtype goes to jnp.argmax/argmin, which is
# already exact for integers and bool and raises for complex exactly as jnp does.
HANDLER_DTYPES = frozenset(
    np.dtype(t) for t in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64))
INT32_MAX = int(np.iinfo(np.int32).max)

# CUDA: routed by device time per step inside a decode-like chain (SPEC §3b), where the GPU
# runs ahead of the host: what users feel. Measured on an H200 (benchmarks/NOTES.md, tries 15,
# 22 and 37): the kernels win in 16-bit formats for several wide rows (>= 65536 columns: 8-256
# x 202048, 64 x 128256) and large inputs; the exact XLA path wins for small inputs (8 x 32000:
# the kernels' scan + merge cost ~1 us more than XLA's two reduction kernels there), for
# float32 rows (but 128 or more wide ones, below), and for one row of 32000-262144 columns in
# both formats (split by hand into rows of 128 columns, _xla.py: up to 1.6 us per step less
# than the kernels, 1x262144 bfloat16 a tie); narrow rows (<= 64 columns) of large inputs
# take the team kernels, which beat XLA's narrow-row reduction by 1.6-2.5x. One row of 262145
# to 2^20 - 1 columns (not measured in-chain) follows the longest measured; from 2^20 it
# stays on the kernels, as large inputs do.
CUDA_WIDE_COLS = 1 << 16
# float32 from 128 rows of >= 65536 columns: the kernels scan each row from its end, where the
# LM head's matmul wrote last and L2 still holds it, with evict-first loads (NOTES.md tries 40,
# 41): in-chain 256x202048 -3.6 us per step, 128x202048 -0.5 where the XLA path is +0.6
# (64x202048, 52 MB, about L2's size: +1.6 against +0.5). float64 follows the same rule (not
# measured: twice the bytes, so further past L2's size).
CUDA_F32_MANY_ROWS = 128
CUDA_ONE_ROW_COLS = 1 << 20
CUDA_LARGE_ELEMENTS = 1 << 20
CUDA_NARROW_COLS = 64

# CPU: the handler (a SIMD scan on XLA's intra-op thread pool) beat XLA's integer-key
# reduction on every shape of 24 or more columns measured on this project's 2-core machine
# (jax 0.10.2; ms, handler / xla path: 1x202048 f32 0.026 / 0.37, 8x202048 0.57 / 6.5,
# 4096x4096 15 / 61, 65536x64 8.2 / 13.9, 8x202048 bf16 0.25 / 8.1; benchmarks/BENCHMARKS.md,
# CPU section). Narrow rows cost the handler ~10-20 ns each (its per-row scan set-up), where
# XLA vectorizes across rows: from 8192 rows of at most 16 columns the XLA path wins (jax
# 0.11.2, ms, handler / xla path: 131072x8 f32 2.06 / 0.28, 65536x16 1.29 / 0.47, 2^20x8 8.0 /
# 1.45; 20 columns a tie, 24 the handler: 1.13 / 1.72; fewer rows the handler: 4096x16 0.047 /
# 0.074; NOTES.md try 43).
CPU_NARROW_COLS = 16
CPU_NARROW_MIN_ROWS = 8192


def handles_dtype(dtype) -> bool:
  """Whether the handlers take ``dtype`` at all (the four float formats)."""
  return np.dtype(dtype) in HANDLER_DTYPES


def _rows(shape) -> int:
  return int(np.prod(shape[:-1], dtype=np.int64))


def handler_wins(op: str, platform: str, shape, dtype) -> bool:
  """The measured crossover: True where the handler beats the exact XLA path for a static
  ``shape`` (reduction axis last) of ``dtype``. ``op`` is the public op name (argmax, argmin,
  max_with_index, min_with_index, categorical)."""
  if op == "categorical":
    return True  # the alternative materializes the noise: the handler always wins
  rows, cols = _rows(shape), shape[-1]
  if cols == 1:
    return False  # XLA folds the reduction of one column to a constant 0 (no read)
  if platform == "cpu":
    return not (cols <= CPU_NARROW_COLS and rows >= CPU_NARROW_MIN_ROWS)
  if platform == "cuda":
    large = rows * cols >= CUDA_LARGE_ELEMENTS
    one_wide_row = rows == 1 and cols >= CUDA_ONE_ROW_COLS
    if np.dtype(dtype).itemsize <= 2:
      return (rows >= 2 and cols >= CUDA_WIDE_COLS) or one_wide_row or large
    many_wide_rows = rows >= CUDA_F32_MANY_ROWS and cols >= CUDA_WIDE_COLS
    return one_wide_row or many_wide_rows or (cols <= CUDA_NARROW_COLS and large)
  return False


def route(op: str, platform: str, shape, dtype, method: str = "auto") -> str:
  """"kernel" (the FFI handler) or "xla" (the exact integer-key path; for categorical, noise
  from ``jax.random``) for one call.

  ``shape`` has the reduction axis last (symbolic dimensions allowed: the handler then takes
  the call and checks the length at run time); ``method`` forces a path where one exists.
  """
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
  target = "categorical" if op == "categorical" else "argreduce"
  if method == "xla" or _ffi.target(target, platform) is None or not handles_dtype(dtype):
    return "xla"
  cols = shape[-1]
  if is_constant_dim(cols) and cols > INT32_MAX:
    return "xla"  # the handlers index rows with 32-bit positions
  if method == "kernel" or not is_constant_shape(shape):
    return "kernel"
  return "kernel" if handler_wins(op, platform, shape, dtype) else "xla"
