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
# runs ahead of the host: what users feel. Measured on an H200, our kernels against the exact
# XLA path (benchmarks/NOTES.md tries 15, 22, 37, 40, 41, 62-65; µs per step against
# jnp.argmax, kernels / XLA path):
# - Several wide rows (>= 65536 columns): the kernels in 16-bit formats from 2 rows (8-256 x
#   202048, 64 x 128256, 100 x 65536 -2.8 / +0.1); float32 from 128 rows (the kernels scan each
#   row from its end, where the LM head's matmul wrote last and L2 still holds it, with
#   evict-first loads: 256x202048 -3.6 / +0.3, 64x202048 +1.6 / +0.5: fewer rows take the split
#   path, which costs ~1 us more than XLA's two reduction kernels inside a CUDA graph), and
#   from 96 rows of up to 256 KB (below: try 68's 512-thread blocks, 100x65536 -0.7 / +0.1).
# - Long rows (>= 16384 columns): float32 from 128 rows and 6 MiB (128x32000 -2.4 / +0.6,
#   512x32000 -4.1 / +2.7, 192x50257 +0.2 / +0.6; fewer rows the XLA path: 64x32000 +1.1 / +0.3,
#   66x32000 +1.2 / +0.1, 80x50257 +1.8 / +0.3), below 2048 rows, where a row of >= 32 KB gets a
#   block of its own (try 63: 1024x16384 -2.0 / +0.4, 1024x32000 -5.6 / +5.4); from 2048 rows
#   the many-row rule below. Also from 96 rows of up to 256 KB, which get a block of 512 threads
#   each (try 68: 100x32000 -0.5 / +0.4, 100x65536 -0.7 / +0.1, 96x16384 +1.3 / +2.8; 80x50257
#   +0.4 / +0.4, a tie, and 66x32000 +0.5 / +0.1 stay on the XLA path). 16-bit formats from 80
#   rows, where a row gets a block of its own instead of the split path (try 65: bfloat16
#   80x50257 -0.4 / +0.4, 96x16384 +0.2 / +1.9, 100x32000 -0.9 / +0.4, 128x16384 -0.0 / +0.1,
#   256x32000 -4.1 / +1.1, 1024x16384 -1.7 / +1.8; 64x32000, on the split path, +0.7 / +0.0;
#   66x32000 a tie).
# - One row: the XLA path (split by hand into rows of 128 columns, _xla.py: up to 1.6 us per
#   step less than the kernels, 1x262144 bfloat16 a tie) up to 2^20 - 1 columns (262145 on:
#   not measured in-chain, follows the longest measured); from 2^20 the kernels.
# - Many rows (>= 1536) of >= 2048 columns or >= 16 MiB in all: the kernels (bfloat16
#   2048x2048 -0.2 / +0.2, 16384x512 -0.6 / +1.1, 65536x1024 -22 / +6; float32 4096x1024
#   -0.4 / +0.3, 4096x4096 -4.8 / +0.4, 65536x256 -2.0 / +0.6), from 1536 rows (try 64: float32
#   1536x2048 -0.3 / +0.0, 1536x4096 +0.4 / +0.9, 1536x8192 -0.6 / +0.5 on two-warp teams;
#   bfloat16 1536x8192 -3.3 / +1.6 on two-warp teams, 1536x4096 -0.3 / +0.6 on 32-lane teams
#   (the 16-bit team kernels hold 4 blocks per SM, float32's 5); 1536x2048 a tie), up to 128
#   MiB in wider formats (float32 65536x1024, 256 MiB: +2.9 / -0.3; 16384x4096, -1.4 / +0.2
#   and -1.1 / -0.6 in two runs, is given up for a simple rule). Smaller ones the
#   XLA path (bfloat16 4096x512 +1.5 / +0.2, 8192x512 +1.0 / +0.4, 4096x1024 +0.2 / +0.2;
#   float32 4096x512 +1.1 / +0.3, 16384x128 +0.5 / +0.1), as fewer rows of medium width
#   (float32 1024x2048 +0.6 / +0.2, 1024x4096 +0.0 / +0.2, 1024x8192 +0.7 / +0.5; bfloat16
#   1024x4096 +0.3 / +0.3, 768x4096 +0.6 / +0.3) but rows of 16 KB in 16-bit formats from 768
#   rows (bfloat16 768x8192 -0.1 / +0.7, 1024x8192 -1.1 / +1.0: two-warp teams).
# - Narrow rows (<= 64 columns) of >= 2^20 elements: the team kernels, 1.6-2.5x faster than
#   XLA's narrow-row reduction (65536x64 float32 -3.4 / +0.1).
# float64 follows float32, by rows and bytes (not measured).
CUDA_WIDE_COLS = 1 << 16
CUDA_F32_WIDE_ROWS = 128
CUDA_LONG_ROWS = (128, 1 << 14)  # rows, columns
CUDA_LONG_ROWS_BYTES = 6 << 20  # float32 and wider
CUDA_16BIT_LONG_ROWS = 80
CUDA_16BIT_MEDIUM_ROWS = (768, 1 << 13)  # rows, columns
CUDA_F32_LONG_ROWS_MAX_ROWS = 2048
CUDA_F32_BLOCK_ROWS = (96, 256 << 10)  # rows, largest row in bytes
CUDA_ONE_ROW_COLS = 1 << 20
CUDA_MANY_ROWS = 1536
CUDA_MANY_ROWS_COLS = 2048
CUDA_MANY_ROWS_BYTES = 16 << 20
CUDA_F32_MANY_ROWS_MAX_BYTES = 128 << 20
CUDA_NARROW_COLS = 64
CUDA_NARROW_ELEMENTS = 1 << 20

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


def _argreduce_wins(platform: str, shape, dtype, k) -> bool:
  """The order-key ops (argmax, argmin, max/min_with_index): the crossovers above."""
  del k
  rows, cols = _rows(shape), shape[-1]
  if cols == 1:
    return False  # XLA folds the reduction of one column to a constant 0 (no read)
  if platform == "cpu":
    return not (cols <= CPU_NARROW_COLS and rows >= CPU_NARROW_MIN_ROWS)
  if platform == "cuda":
    itemsize = np.dtype(dtype).itemsize
    nbytes = rows * cols * itemsize
    one_wide_row = rows == 1 and cols >= CUDA_ONE_ROW_COLS
    wide_rows = rows >= (2 if itemsize <= 2 else CUDA_F32_WIDE_ROWS) and cols >= CUDA_WIDE_COLS
    if itemsize <= 2:
      long_rows = rows >= CUDA_16BIT_LONG_ROWS and cols >= CUDA_LONG_ROWS[1]
    else:
      block_rows = (rows >= CUDA_F32_BLOCK_ROWS[0] and
                    cols * itemsize <= CUDA_F32_BLOCK_ROWS[1])
      long_rows = ((rows >= CUDA_LONG_ROWS[0] or block_rows) and cols >= CUDA_LONG_ROWS[1] and
                   nbytes >= CUDA_LONG_ROWS_BYTES and rows < CUDA_F32_LONG_ROWS_MAX_ROWS)
    medium_rows = (itemsize <= 2 and rows >= CUDA_16BIT_MEDIUM_ROWS[0] and
                   cols >= CUDA_16BIT_MEDIUM_ROWS[1])
    many_rows = (rows >= CUDA_MANY_ROWS and
                 (cols >= CUDA_MANY_ROWS_COLS or nbytes >= CUDA_MANY_ROWS_BYTES) and
                 (itemsize <= 2 or nbytes <= CUDA_F32_MANY_ROWS_MAX_BYTES))
    narrow = cols <= CUDA_NARROW_COLS and rows * cols >= CUDA_NARROW_ELEMENTS
    return one_wide_row or wide_rows or long_rows or medium_rows or many_rows or narrow
  return False


def _categorical_wins(platform: str, shape, dtype, k) -> bool:
  del platform, shape, dtype, k
  return True  # the alternative materializes the noise: the handler always wins


def _top_k_wins(platform: str, shape, dtype, k) -> bool:
  """top_k: the handler on CPU (one pass with a bar against XLA's sort of each row); on CUDA the
  row-select kernels, which take float16, bfloat16 and float32 and k <= TOP_K_MAX_K (the rest:
  XLA's TopK, a sort for k > 16)."""
  if platform == "cpu":
    return True
  if platform == "cuda":
    return np.dtype(dtype).itemsize <= 4 and k <= _ffi.TOP_K_MAX_K
  return False


# Per op (the public op names): the FFI handler it lowers to (_ffi.target's op) and where that
# handler beats the exact XLA path, ``wins(platform, static shape, dtype, k)``.
OPS = {
    "argmax": ("argreduce", _argreduce_wins),
    "argmin": ("argreduce", _argreduce_wins),
    "max_with_index": ("max_with_index", _argreduce_wins),
    "min_with_index": ("max_with_index", _argreduce_wins),
    "categorical": ("categorical", _categorical_wins),
    "top_k": ("top_k", _top_k_wins),
}


def check_method(method: str) -> str:
  """``method``, checked once where a public op takes it (ValueError otherwise)."""
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
  return method


def handler_wins(op: str, platform: str, shape, dtype, k: int = 0) -> bool:
  """The measured crossover: True where the handler beats the exact XLA path for a static
  ``shape`` (reduction axis last) of ``dtype``. ``op`` is the public op name (argmax, argmin,
  max_with_index, min_with_index, categorical, top_k; ``k``: top_k's)."""
  return OPS[op][1](platform, shape, dtype, k)


def route(op: str, platform: str, shape, dtype, method: str = "auto", *, k: int = 0) -> str:
  """"kernel" (the FFI handler) or "xla" (the exact integer-key path; for categorical, noise
  from ``jax.random``) for one call.

  ``shape`` has the reduction axis last (symbolic dimensions allowed: the handler then takes
  the call and checks the length at run time, except top_k on CUDA, whose workspace is sized
  from the shape: the XLA path); ``method`` forces a path where one exists; ``k``: top_k's.
  """
  check_method(method)
  target, wins = OPS[op]
  if method == "xla" or _ffi.target(target, platform) is None or not handles_dtype(dtype):
    return "xla"
  cols = shape[-1]
  if is_constant_dim(cols) and cols > INT32_MAX:
    return "xla"  # the handlers index rows with 32-bit positions
  if op == "top_k" and platform == "cuda" and not (
      is_constant_shape(shape) and np.dtype(dtype).itemsize <= 4 and k <= _ffi.TOP_K_MAX_K):
    return "xla"  # what the kernels cannot take, even when forced
  if method == "kernel" or not is_constant_shape(shape):
    return "kernel"
  return "kernel" if wins(platform, shape, dtype, k) else "xla"
