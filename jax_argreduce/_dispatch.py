"""The one place that decides, per call, between an FFI handler and the exact XLA path.

Every decision of the package lives here, from measured crossovers (benchmarks/NOTES.md):
which dtypes the handlers take, the rows longer than INT32_MAX (the handlers index rows with
32-bit positions), per platform which shapes the handler wins and which it cannot take at all,
where XLA (not the type) splits the input, how ``axis=None`` of a sharded input is reduced, and
when ``categorical`` needs no sampling. Per op, one table entry (``OPS``: handler target,
crossovers, limits, the path under an XLA split); every caller (api, the primitives' lowerings and
partition rules, tests, benchmarks) asks the functions below; ``method`` is checked once, by the
public op (:func:`check_method`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

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


class Rule(NamedTuple):
  """Shapes that take ``path``: every bound given holds (inclusive) for the [rows, cols] view
  of the input (rows: the product of every batch dimension)."""
  path: str                 # "kernel" (the FFI handler) or "xla"
  formats: str = "any"      # "any", "16-bit" (float16, bfloat16) or "wider" (float32, float64)
  min_rows: int = 1
  max_rows: int | None = None
  min_cols: int = 1
  max_cols: int | None = None
  min_elements: int = 0     # rows * cols
  min_bytes: int = 0        # of the whole input
  max_bytes: int | None = None
  max_row_bytes: int | None = None

  def matches(self, rows: int, cols: int, itemsize: int) -> bool:
    nbytes = rows * cols * itemsize
    return ((self.formats == "any" or (self.formats == "16-bit") == (itemsize <= 2)) and
            rows >= self.min_rows and (self.max_rows is None or rows <= self.max_rows) and
            cols >= self.min_cols and (self.max_cols is None or cols <= self.max_cols) and
            rows * cols >= self.min_elements and nbytes >= self.min_bytes and
            (self.max_bytes is None or nbytes <= self.max_bytes) and
            (self.max_row_bytes is None or cols * itemsize <= self.max_row_bytes))


# The order-key ops (argmax, argmin, max/min_with_index), per platform: the path of a shape no
# rule matches, and the rules; the first rule that matches decides. One column always takes the
# XLA path (_argreduce_wins). The measurements behind every rule: benchmarks/NOTES.md, "Routing
# rules of `_dispatch.py` (their measurements)".
ARGREDUCE_ROUTES = {
    # CUDA, by device time per step inside a decode-like chain (SPEC §3b), where the GPU runs
    # ahead of the host: what users feel. The kernels win where they fill the GPU and where the
    # input outgrows L2 (they read each row from its end, where the producer wrote last, with
    # evict-first loads: row_reduce.cuh, device.cuh). float64 follows float32 (not measured).
    "cuda": ("xla", (
        # One row from 2^20 columns. Shorter ones are latency-bound, and XLA's pick split by hand
        # into rows of 128 columns (_xla.py) was faster, measured up to 262144 (try 37).
        Rule("kernel", max_rows=1, min_cols=1 << 20),
        # Several wide rows: 16-bit formats from 2 rows; float32 from 128, since fewer rows take
        # the split path, whose partials and merge cost more than XLA's two kernels in a graph
        # (try 41).
        Rule("kernel", "16-bit", min_rows=2, min_cols=1 << 16),
        Rule("kernel", "wider", min_rows=128, min_cols=1 << 16),
        # Long rows in 16-bit formats from 80 rows, where a row gets a block of its own instead
        # of the split path (try 65).
        Rule("kernel", "16-bit", min_rows=80, min_cols=1 << 14),
        # Long float32 rows: 128-2047 rows of >= 6 MiB in all, where a row of >= 32 KB gets a
        # block of its own (tries 62, 63); from 2048 rows the many-row rules decide.
        Rule("kernel", "wider", min_rows=128, max_rows=2047, min_cols=1 << 14, min_bytes=6 << 20),
        # ... and from 96 rows of up to 256 KB, which get blocks of 512 threads (try 68).
        Rule("kernel", "wider", min_rows=96, max_rows=2047, min_cols=1 << 14, min_bytes=6 << 20,
             max_row_bytes=256 << 10),
        # 16-bit rows of 16 KB from 768 rows, on two-warp teams (try 64).
        Rule("kernel", "16-bit", min_rows=768, min_cols=1 << 13),
        # Many rows: from 1536 rows of >= 2048 columns or >= 16 MiB in all (try 62; 1536 rows:
        # try 64); wider formats up to 128 MiB, past which XLA's reduction won (65536x1024).
        Rule("kernel", "16-bit", min_rows=1536, min_cols=2048),
        Rule("kernel", "16-bit", min_rows=1536, min_bytes=16 << 20),
        Rule("kernel", "wider", min_rows=1536, min_cols=2048, max_bytes=128 << 20),
        Rule("kernel", "wider", min_rows=1536, min_bytes=16 << 20, max_bytes=128 << 20),
        # Narrow rows (<= 64 columns) of >= 2^20 elements: the team kernels, faster than XLA's
        # narrow-row reduction (try 18).
        Rule("kernel", max_cols=64, min_elements=1 << 20),
    )),
    # CPU: the handler (a SIMD scan on XLA's intra-op thread pool) beat XLA's integer-key
    # reduction on every shape of 24 or more columns measured (BENCHMARKS.md, 2026-11-30,
    # `42c29b5`).
    "cpu": ("kernel", (
        # From 8192 rows of at most 16 columns the XLA path: the handler sets up a scan per row,
        # where XLA vectorizes across rows (try 43).
        Rule("xla", min_rows=8192, max_cols=16),
    )),
}


def handles_dtype(dtype) -> bool:
  """Whether the handlers take ``dtype`` at all (the four float formats)."""
  return np.dtype(dtype) in HANDLER_DTYPES


def _rows(shape) -> int:
  return int(np.prod(shape[:-1], dtype=np.int64))


def _argreduce_wins(platform: str, shape, dtype, k) -> bool:
  """The order-key ops (argmax, argmin, max/min_with_index): ARGREDUCE_ROUTES."""
  del k
  rows, cols = _rows(shape), shape[-1]
  if cols == 1:
    return False  # XLA folds the reduction of one column to a constant 0 (no read)
  default, rules = ARGREDUCE_ROUTES.get(platform, ("xla", ()))
  itemsize = np.dtype(dtype).itemsize
  for rule in rules:
    if rule.matches(rows, cols, itemsize):
      return rule.path == "kernel"
  return default == "kernel"


def _categorical_wins(platform: str, shape, dtype, k) -> bool:
  del platform, shape, dtype, k
  return True  # the alternative materializes the noise: the handler always wins


# CUDA top_k: rows of at most this many columns take the exact XLA path (XLA's TopK beats the
# row-select kernels there by 40-110 µs per step at 4096 rows, k 1-50; from 1024 columns the
# kernels win from k = 8: benchmarks/NOTES.md, "Routing rules").
TOP_K_XLA_MAX_COLS = 256


def _top_k_wins(platform: str, shape, dtype, k) -> bool:
  """top_k: the handler on CPU (one pass with a bar against XLA's sort of each row); on CUDA the
  row-select kernels wherever they take the call (_top_k_takes) on rows of more than
  TOP_K_XLA_MAX_COLS columns (the rest: XLA's TopK, a sort for k > 16). (k = 1 never asks:
  the public op takes max_with_index's route, top_k_takes_max.)"""
  if platform == "cpu":
    return True
  return (platform == "cuda" and _top_k_takes(platform, shape, dtype, k)
          and shape[-1] > TOP_K_XLA_MAX_COLS)


def top_k_takes_max(k: int, method: str) -> bool:
  """True where ``top_k(a, k)`` is computed as ``max_with_index(a, keepdims=True)`` (SPEC §1e:
  the same results), so that it takes that op's measured routes: k = 1 under "auto" (on CUDA
  XLA's TopK beat the select kernels by 1-6 µs per step at k = 1 on rows of 1024-32000 columns,
  where the argmax routes pick the faster path; NOTES.md, "Routing rules")."""
  return k == 1 and method == "auto"


def _any_call(platform: str, shape, dtype, k) -> bool:
  del platform, shape, dtype, k
  return True


def _top_k_takes(platform: str, shape, dtype, k) -> bool:
  """The CUDA row-select kernels take float16, bfloat16 and float32, k <= TOP_K_MAX_K, and
  static shapes only (the workspace is sized from the shape at lowering)."""
  if platform != "cuda":
    return True
  return (is_constant_shape(shape) and np.dtype(dtype).itemsize <= 4
          and k <= _ffi.TOP_K_MAX_K)


class Op(NamedTuple):
  """One op's routing: ``target``, the FFI handler it lowers to (_ffi.target's op);
  ``wins(platform, static shape, dtype, k)``, where that handler beats the exact XLA path;
  ``takes(platform, shape, dtype, k)``, what the handler can take at all, even when forced
  (beyond the float dtypes and INT32_MAX columns every handler shares); ``xla_split``, the
  path of a call whose input XLA splits after lowering (Auto mesh axes): "xla" where the op's
  exact XLA path is one XLA partitions itself (local rows; a split axis: local candidates and
  one exchange), "kernel" where it has none with the same results (categorical: its XLA path
  draws other samples), and XLA then gathers the input for the handler call."""
  target: str
  wins: Callable
  takes: Callable = _any_call
  xla_split: str = "xla"


# Per op (the public op names).
OPS = {
    "argmax": Op("argreduce", _argreduce_wins),
    "argmin": Op("argreduce", _argreduce_wins),
    "max_with_index": Op("max_with_index", _argreduce_wins),
    "min_with_index": Op("max_with_index", _argreduce_wins),
    "categorical": Op("categorical", _categorical_wins, xla_split="kernel"),
    "filtered_categorical": Op("filtered_categorical", _categorical_wins, xla_split="kernel"),
    "top_k": Op("top_k", _top_k_wins, _top_k_takes),
}


def check_method(method: str, op: str = "") -> str:
  """``method``, checked once where a public op (named ``op`` in the error) takes it
  (ValueError otherwise); every path below takes it as checked."""
  if method not in METHODS:
    raise ValueError(f"{op + ': ' if op else ''}method must be one of {METHODS}, got "
                     f"{method!r}")
  return method


def handler_wins(op: str, platform: str, shape, dtype, k: int = 0) -> bool:
  """The measured crossover: True where the handler beats the exact XLA path for a static
  ``shape`` (reduction axis last) of ``dtype``. ``op`` is the public op name (argmax, argmin,
  max_with_index, min_with_index, categorical, top_k; ``k``: top_k's)."""
  return OPS[op].wins(platform, shape, dtype, k)


def route(op: str, platform: str, shape, dtype, method: str = "auto", *, k: int = 0) -> str:
  """"kernel" (the FFI handler) or "xla" (the exact integer-key path; for categorical, noise
  from ``jax.random``) for one call.

  ``shape`` has the reduction axis last (symbolic dimensions allowed: the handler then takes
  the call and checks the length at run time, except where ``takes`` needs a static shape:
  the XLA path); ``method`` (checked by the public op) forces a path where one exists; ``k``:
  top_k's.
  """
  entry = OPS[op]
  if method == "xla" or _ffi.target(entry.target, platform) is None or not handles_dtype(dtype):
    return "xla"
  cols = shape[-1]
  if is_constant_dim(cols) and cols > INT32_MAX:
    return "xla"  # the handlers index rows with 32-bit positions
  if not entry.takes(platform, shape, dtype, k):
    return "xla"  # what the handler cannot take, even when forced
  if method == "kernel" or not is_constant_shape(shape):
    return "kernel"
  return "kernel" if entry.wins(platform, shape, dtype, k) else "xla"


def xla_partitions(op: str, method: str) -> bool:
  """For a call whose input XLA, not the type, splits after lowering (Auto mesh axes:
  _sharding.sharding_unknown): True where it takes the op's exact XLA path in the form XLA
  partitions itself (the op's ``xla_split`` is "xla"), unless ``method`` forces the handler
  (XLA then gathers the input for the call); False: the call is routed as any other
  (:func:`route`)."""
  return method != "kernel" and OPS[op].xla_split == "xla"


def exchanges_candidates(platform: str, shape, dtype, shards: int, k_bound: int,
                         method: str) -> bool:
  """Whether a filtered sampler call on ``shape`` whose vocabulary is split into ``shards``
  exchanges each shard's ``k_bound`` first tokens (_sharding.split_filtered_sample) rather
  than gathering the logits: where those candidates (their logits and int32 global columns,
  ``[rows, shards, k_bound]`` each) move fewer bytes per row than the row's logits (a bound
  below half the shard width for float32, a third for 16-bit logits), where the handler takes
  the call, and on CUDA where both stages take the top-k kernels (16- and 32-bit formats,
  ``k_bound`` <= TOP_K_MAX_K)."""
  itemsize = np.dtype(dtype).itemsize
  if not (0 < k_bound and shards * k_bound * (itemsize + 4) < shape[-1] * itemsize
          and route("filtered_categorical", platform, shape, dtype, method) == "kernel"):
    return False
  return platform != "cuda" or (itemsize <= 4 and k_bound <= _ffi.TOP_K_MAX_K)


# top-p's masses cross devices as 22-bit limbs in uint32: exact in a sum over at most this
# many shards (ffi/sample_filter.h, kMassLimbs).
MAX_MASS_SHARDS = 1 << 10


def exchanges_masses(platform: str, shape, dtype, shards: int, k_bound: int, method: str,
                     has_top_p: bool) -> bool:
  """Whether a filtered sampler call on ``shape`` whose vocabulary is split into ``shards``
  without a top-k (``k_bound`` -1: top-p and/or min-p) exchanges the shards' first tokens,
  top-p's per-digit masses (where ``has_top_p``) and the shards' draws
  (_sharding.split_prefix_sample) rather than gathering the logits: where the handler takes
  the call (on CUDA: 16- and 32-bit logits, the stages' kernels), for at most MAX_MASS_SHARDS
  shards (the masses' limbs stay exact), and where those exchanges move fewer bytes per row
  than the row's logits (top-p's levels: 24 KiB per summed level and 4 KiB of counts per
  shard)."""
  itemsize = np.dtype(dtype).itemsize
  if not (k_bound == -1 and 1 < shards <= MAX_MASS_SHARDS
          and (platform == "cpu" or (platform == "cuda" and itemsize <= 4))
          and route("filtered_categorical", platform, shape, dtype, method) == "kernel"):
    return False
  exchanged = shards * (itemsize + 8)  # the tops; the pairs (noisy maximum, index)
  if has_top_p:
    levels, last_bits = _ffi.mass_levels(dtype)
    exchanged += (levels - 1) * _ffi.MASS_LEVEL_WIDTH * _ffi.MASS_LIMBS * 4
    exchanged += shards * (1 << last_bits) * 4
  return exchanged < shape[-1] * itemsize


def flattens_in_two_stages(dtype, ndim: int, explicitly_sharded: bool) -> bool:
  """``axis=None`` (the flattened input): True where the input is reduced along its last axis
  first (partitioned like any call) and the per-row pairs then combined (_sharding.flat_reduce),
  because ``x.reshape(-1)`` of an explicitly sharded type of rank >= 2 is refused (or would move
  the data); dtypes the handlers do not take go to jnp's own flattened reduction."""
  return handles_dtype(dtype) and explicitly_sharded and ndim > 1


def samples_constant(cols, method: str) -> bool:
  """categorical over one category (``cols``: the whole axis' length, None where only a block
  is seen): index 0 for every row, with no noise and no read of the logits (XLA folds a
  one-column argmax to a constant), unless ``method`` forces a path."""
  return method == "auto" and cols is not None and is_constant_dim(cols) and cols == 1
