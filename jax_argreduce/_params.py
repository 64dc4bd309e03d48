"""Per-row parameters (SPEC §2 params): the sampler's top_k, top_p and min_p, checked once at
the public op, broadcast to the rows, and handed to the primitives in one form — ``[1] * n``
(one value for every row, never materialized per row) or the batch shape (one value per row) —
which the batching rules and the handlers (ffi/row_param.h) read the same way.

A parameter given as None becomes the value that keeps every token (top_k 0, top_p 1,
min_p 0). Concrete values out of range raise ValueError naming the parameter; traced values
are not checked (what the handlers do with them is documented in ``categorical``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

INT32_MAX = np.iinfo(np.int32).max


class RowParam(NamedTuple):
  name: str
  integer: bool       # an integer parameter (top_k), else a real one
  dtype: np.dtype     # the operand's dtype
  keep_all: float     # the value of None: keeps every token
  lo: float           # the concrete range [lo, hi], lo excluded where lo_open
  hi: float
  lo_open: bool
  text: str           # the range as the error states it


TOP_K = RowParam("top_k", True, np.dtype(np.int32), 0, 0, np.inf, False, ">= 0")
TOP_P = RowParam("top_p", False, np.dtype(np.float32), 1.0, 0.0, 1.0, True, "in (0, 1]")
MIN_P = RowParam("min_p", False, np.dtype(np.float32), 0.0, 0.0, 1.0, False, "in [0, 1]")
FILTERS = (TOP_K, TOP_P, MIN_P)


def check(param: RowParam, value, op: str):
  """``value`` checked: None passes; TypeError if it is not of the parameter's kind (an integer
  for top_k; a real number for the others; bools are neither), ValueError if a concrete value
  is out of range or NaN. Returns the value to pass on (host values as numpy arrays)."""
  if value is None:
    return None
  dtype = getattr(value, "dtype", None)
  if dtype is None:
    try:
      value = np.asarray(value)
    except (TypeError, ValueError) as e:
      raise TypeError(f"{op}: {param.name} must be a number or an array of numbers, got "
                      f"{type(value).__name__}") from e
    dtype = value.dtype
  kinds = (jnp.integer,) if param.integer else (jnp.integer, jnp.floating)
  if dtype == np.bool_ or not any(jnp.issubdtype(dtype, k) for k in kinds):
    want = "an integer" if param.integer else "a real number"
    raise TypeError(f"{op}: {param.name} must be {want} or an array of them, got dtype {dtype}")
  try:  # concrete values (a Python or numpy number stays concrete under an outer jit)
    with jax.transfer_guard("allow"):  # this check's own read, not the caller's data flow
      host = np.asarray(value)
  except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
    return value
  v = host.astype(np.float64)
  low = (v <= param.lo) if param.lo_open else (v < param.lo)
  if np.any(np.isnan(v)) or np.any(low) or np.any(v > param.hi):
    raise ValueError(f"{op}: {param.name} must be {param.text}, got "
                     f"{host if host.size <= 8 else 'an array with values out of range'}")
  return value if isinstance(value, jax.Array) else host


def operand(param: RowParam, value, batch_shape, op: str):
  """``value`` (checked) as the primitive's operand: ``[1] * n`` of the parameter's dtype
  (None, or one value for every row) or ``batch_shape`` (one per row). ValueError if it does
  not broadcast to the rows."""
  shared = (1,) * len(batch_shape)
  if value is None:
    return jnp.full(shared, param.keep_all, param.dtype)
  if param.integer:  # k past int32 keeps every token, as k = cols does
    if isinstance(value, jax.Array):
      value = jnp.minimum(value, INT32_MAX) if value.dtype.itemsize > 4 else value
    else:
      value = np.minimum(np.asarray(value, np.int64), INT32_MAX)
  v = jnp.asarray(value).astype(param.dtype)
  if v.ndim == 0:
    return v.reshape(shared)
  try:
    return jnp.broadcast_to(v, batch_shape)
  except ValueError as e:
    raise ValueError(f"{op}: {param.name} of shape {v.shape} does not broadcast to the rows "
                     f"{tuple(batch_shape)}") from e


def per_row(shape, batch) -> bool:
  """Whether an operand of ``shape`` holds one value per row of ``batch`` (else one shared)."""
  return tuple(shape) == tuple(batch) and any(d != 1 for d in batch)


def k_bound(top_k) -> int:
  """A static bound for a checked ``top_k``: its largest value where every value is concrete
  and at least 1 (each row then takes at most that many candidates), else 0 (no promise)."""
  if top_k is None:
    return 0
  try:
    with jax.transfer_guard("allow"):
      host = np.asarray(top_k)
  except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
    return 0
  if host.size == 0 or host.min() < 1:
    return 0
  return int(min(host.max(), INT32_MAX))
