"""Per-row parameters (SPEC §2 params): the sampler's temperature, top_k, top_p and min_p,
checked once at the public op, broadcast to the rows, and handed to the primitives in one
form — ``[1] * n`` (one value for every row, never materialized per row) or the batch shape
(one value per row) — which the batching rules, the partition rules (_sharding.sample_plan)
and the handlers (ffi/row_param.h) read the same way.

A parameter given as None becomes the value that keeps every token (temperature 1, top_k 0,
top_p 1, min_p 0). Concrete values out of range raise ValueError naming the parameter; traced values
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
  dtype: np.dtype | None  # the operand's dtype (None: the sampler's noise dtype, temperature)
  keep_all: float     # the value of None: keeps every token (temperature: 1)
  lo: float           # the concrete range [lo, hi], lo excluded where lo_open
  hi: float
  lo_open: bool
  text: str           # the range as the error states it


TEMPERATURE = RowParam("temperature", False, None, 1.0, 0.0, np.inf, False, ">= 0 and not NaN")
TOP_K = RowParam("top_k", True, np.dtype(np.int32), 0, 0, np.inf, False, ">= 0")
TOP_P = RowParam("top_p", False, np.dtype(np.float32), 1.0, 0.0, 1.0, True, "in (0, 1]")
MIN_P = RowParam("min_p", False, np.dtype(np.float32), 0.0, 0.0, 1.0, False, "in [0, 1]")
FILTERS = (TOP_K, TOP_P, MIN_P)

_INT_SCALARS = (int, np.integer)
_REAL_SCALARS = _INT_SCALARS + (float, np.floating)


def check(param: RowParam, value, op: str):
  """``value`` checked: None passes; TypeError if it is not of the parameter's kind (an integer
  for top_k; a real number for the others; bools are neither), ValueError if a concrete value
  is out of range or NaN. Returns the value to pass on: host integers of a real parameter as
  float64 (a jit argument would wrap them past int32), as are object arrays (or lists) of ints
  and floats; other host values as numpy arrays."""
  if value is None:
    return None
  dtype = getattr(value, "dtype", None)
  if dtype is None:
    try:
      dtype = np.asarray(value).dtype
    except (TypeError, ValueError, OverflowError):
      dtype = np.dtype(object)
  if dtype == np.dtype(object) and param.integer:
    # Python ints past int64 (2**64): past int32 keeps every token anyway (see the end).
    flat = np.asarray(value, dtype=object)
    if all(isinstance(v, _INT_SCALARS) and not isinstance(v, bool) for v in flat.ravel()):
      clip = lambda v: max(min(int(v), INT32_MAX), -2 ** 63)  # noqa: E731
      value = np.vectorize(clip, otypes=[np.int64])(flat)
      dtype = value.dtype
  if dtype == np.dtype(object) and not param.integer:
    # e.g. a Python int past int64 (2**70), alone, in a list or an object array: float64, as
    # logits / T would take it. Only of ints and floats (not bools, Fraction, Decimal, None or
    # str, which jnp refuses too: the TypeError below).
    flat = np.asarray(value, dtype=object).ravel()
    if all(isinstance(v, _REAL_SCALARS) and not isinstance(v, bool) for v in flat):
      try:
        value = np.asarray(value, np.float64)
      except OverflowError as e:
        bits = max((abs(int(v)).bit_length() for v in flat if isinstance(v, _INT_SCALARS)),
                   default=None)  # only ints overflow float64 (floats past it are inf)
        raise ValueError(f"{op}: {param.name} is too large for float64"
                         + (f" (an integer of {bits} bits)" if bits else "")) from e
      dtype = value.dtype
  kinds = (jnp.integer,) if param.integer else (jnp.integer, jnp.floating)
  if dtype == np.bool_ or not any(jnp.issubdtype(dtype, k) for k in kinds):
    want = "an integer or an array of integers" if param.integer else (
        "a real number or an array of real numbers")
    raise TypeError(f"{op}: {param.name} must be {want}, got {type(value).__name__}"
                    + (f" of dtype {value.dtype}" if hasattr(value, "dtype") else ""))
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
  if isinstance(value, jax.Array):
    return value
  if param.integer:
    # As int32 (a jit argument of int64 would wrap without x64), clipped: past int32 keeps every
    # token, as k = cols does. 8/16-bit values need no clip (np.minimum refuses INT32_MAX in
    # their dtype).
    if host.dtype.itemsize < 4:
      return host.astype(np.int32)
    return np.minimum(host, INT32_MAX).astype(np.int32)
  if jnp.issubdtype(host.dtype, jnp.integer):
    return v
  return host


def operand(param: RowParam, value, batch_shape, op: str, dtype=None):
  """``value`` (checked) as the primitive's operand: ``[1] * n`` of the parameter's dtype
  (``dtype`` where the parameter's is the noise's) for None or one value for every row, or
  ``batch_shape`` for one per row. ValueError if it does not broadcast to the rows."""
  dtype = param.dtype if param.dtype is not None else np.dtype(dtype)
  shared = (1,) * len(batch_shape)
  if value is None:
    return jnp.full(shared, param.keep_all, dtype)
  if param.integer:  # k past int32 keeps every token, as k = cols does
    if isinstance(value, jax.Array):
      value = jnp.minimum(value, INT32_MAX) if value.dtype.itemsize > 4 else value
    else:
      value = np.minimum(np.asarray(value, np.int64), INT32_MAX)
  v = jnp.asarray(value, dtype)
  if v.ndim == 0:
    return v.reshape(shared)
  try:
    return jnp.broadcast_to(v, batch_shape)
  except ValueError as e:
    raise ValueError(f"{op}: {param.name} of shape {v.shape} does not broadcast to the rows "
                     f"{tuple(batch_shape)}") from e


def per_row(shape, batch) -> bool:
  """Whether an operand of ``shape`` holds one value per row of ``batch`` (else one shared,
  ``[1] * n``)."""
  return len(batch) > 0 and tuple(shape) == tuple(batch)


def k_bound(top_k, bound, op: str, cols: int | None = None) -> int:
  """The static bound of a checked ``top_k`` for the primitive (0: none; > 0: every row's
  top_k is in [1, bound], which lets the CUDA handler select that many candidates per row;
  -1: no row has a top-k, ``top_k`` None or concrete values that keep every token (0, or at
  least ``cols``, the static vocabulary width where given), which lets it spread each row over
  many blocks).

  ``bound`` (the caller's ``top_k_bound``: None or an int >= 1) is taken as given: the rows'
  values are then clipped to [1, bound] (traced ones are not checked), so every handler sees
  the same values. Without it, a concrete ``top_k`` whose values are all >= 1 gives its largest
  value rounded up to a power of two (a few compiled variants, not one per value; the extra
  candidates change nothing: each row keeps its own first top_k); else 0."""
  if bound is not None:
    if isinstance(bound, bool) or not isinstance(bound, (int, np.integer)) or bound < 1:
      raise ValueError(f"{op}: top_k_bound must be an int >= 1 or None, got {bound!r}")
    if top_k is None:
      raise ValueError(f"{op}: top_k_bound needs top_k")
    host = _concrete(top_k)
    if host is not None and host.size:
      if host.max() > bound:
        raise ValueError(f"{op}: top_k has values above top_k_bound "
                         f"({int(host.max())} > {bound})")
      if host.min() < 1:
        # Clipped to 1 it would be greedy, where 0 means "keep all" (negatives raised earlier).
        raise ValueError(f"{op}: top_k_bound promises top_k in [1, {bound}], got "
                         f"{int(host.min())} (0 keeps all, which a bound cannot: leave "
                         "top_k_bound out)")
    return int(min(bound, INT32_MAX))
  if top_k is None:
    return -1
  host = _concrete(top_k)
  if host is not None and host.size and np.all((host == 0) | (cols is not None and host >= cols)):
    return -1
  if host is None or host.size == 0 or host.min() < 1:
    return 0
  return int(min(1 << (int(host.max()) - 1).bit_length(), INT32_MAX))


def _concrete(value):
  """``value`` as a numpy array where it is concrete, else None (None too)."""
  if value is None:
    return None
  try:
    with jax.transfer_guard("allow"):
      return np.asarray(value)
  except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
    return None
