"""The XLA (jnp) path: argmax/argmin of the last axis through an order-preserving integer key.

Taken where ``_dispatch.route`` says so: on GPU where XLA's own reduction measured faster than
the kernels, for rows longer than INT32_MAX, on platforms without a handler, and where XLA (not
the type) splits the input (a form XLA partitions: ``xla_argreduce_partitionable``).
``jnp.argmax`` on floats flushes subnormals to zero (jax issue 24281), so instead the floats are
bitcast to the same integer keys as ``ffi/order.h`` (exact for subnormals, -0 == +0,
every NaN largest for argmax and argmin alike) and XLA takes the integer argmax, whose ties go
to the lowest index.

One long row of static length is split by hand into rows of ``_SPLIT_WIDTH`` columns: XLA
(0.10-0.11) splits a long single-row reduction itself, but its fusion cost model then leaves
the key computation in a kernel of its own (an extra launch and a round trip of the keys
through memory); over many short rows the key fuses into the reduction, and the two levels
compile to two reduction kernels, as many as ``jnp.argmax`` gets (benchmarks/NOTES.md tries
34, 35 and 37).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_argreduce._compat import is_constant_dim

# bits dtype, key dtype, bit pattern of +inf, per float dtype. 16-bit formats get int32 keys
# (as in the kernels): XLA's GPU reductions over int16 measured slower (NOTES.md try 6).
_FORMATS = {
    np.dtype(jnp.float16): (np.int16, np.int32, 0x7C00),
    np.dtype(jnp.bfloat16): (np.int16, np.int32, 0x7F80),
    np.dtype(jnp.float32): (np.int32, np.int32, 0x7F800000),
    np.dtype(jnp.float64): (np.int64, np.int64, 0x7FF0000000000000),
}


def ordered_key(x, is_min: bool):
  """Integer keys of float array ``x`` whose integer order is argmax's (argmin's) order."""
  bits_dtype, key_dtype, inf_bits = _FORMATS[np.dtype(x.dtype)]
  max_key = np.iinfo(key_dtype).max
  bits = lax.bitcast_convert_type(x, bits_dtype)
  negative = bits < 0
  magnitude = bits.astype(key_dtype) & key_dtype(np.iinfo(bits_dtype).max)
  signed = jnp.where(negative != is_min, -magnitude, magnitude)
  return jnp.where(magnitude > key_dtype(inf_bits), key_dtype(max_key), signed)


# One row at least this long is reduced as [ceil(n / _SPLIT_WIDTH), _SPLIT_WIDTH].
_SPLIT_MIN_COLUMNS = 16384
_SPLIT_WIDTH = 128


def xla_argreduce(x, *, is_min: bool, index_dtype):
  """Index of the max (``is_min``: min) of ``x`` along its last axis, numpy semantics."""
  keys = ordered_key(x, is_min)
  n = x.shape[-1]
  if is_constant_dim(n) and x.size == n and n >= _SPLIT_MIN_COLUMNS:
    return _split_row_argmax(keys.reshape(n), index_dtype).reshape(x.shape[:-1])
  return lax.argmax(keys, x.ndim - 1, index_dtype)


def pick_pair(a, b):
  """Variadic-reduce comparator over (key, index, *carried) tuples: the larger key, then the
  lower index (what XLA's own argmax reduces with); carried operands follow the winner."""
  take_a = (a[0] > b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))
  return tuple(lax.select(take_a, x, y) for x, y in zip(a, b))


def _split_row_argmax(keys, index_dtype):
  """argmax of the 1-D ``keys`` in two levels of ``_SPLIT_WIDTH``-column rows. The padding
  after the last column holds the key type's minimum, which no element's key reaches (the
  smallest is -inf's), so it never wins, and its columns are past every real one."""
  n = keys.shape[0]
  index_dtype = np.dtype(index_dtype).type
  parts = -(-n // _SPLIT_WIDTH)
  lowest = keys.dtype.type(np.iinfo(keys.dtype).min)
  padded = jnp.pad(keys, (0, parts * _SPLIT_WIDTH - n), constant_values=lowest)
  padded = padded.reshape(parts, _SPLIT_WIDTH)
  init = (lowest, index_dtype(0))
  column = lax.broadcasted_iota(index_dtype, padded.shape, 1)
  part_keys, part_columns = lax.reduce((padded, column), init, pick_pair, (1,))
  part_first = lax.broadcasted_iota(index_dtype, (parts,), 0) * index_dtype(_SPLIT_WIDTH)
  _, index = lax.reduce((part_keys, part_first + part_columns), init, pick_pair, (0,))
  return index


def xla_argreduce_partitionable(x, *, is_min: bool, with_value: bool, index_dtype):
  """The exact XLA path of argreduce in a form XLA partitions well (where XLA, not the type,
  splits ``x``: _dispatch's ``xla_split``): one variadic reduction over (order key, index[,
  value bits]); split rows stay local, a split reduction axis becomes local pairs and
  all-gathers of ``[rows, shards]`` pairs (values travel as bits: exact, signed zeros kept).
  Returns ``[indices]`` or ``[values, indices]``."""
  keys = ordered_key(x, is_min)
  if not with_value:
    return [lax.argmax(keys, x.ndim - 1, index_dtype)]
  iota = lax.broadcasted_iota(np.dtype(index_dtype), x.shape, x.ndim - 1)
  bits = _bits_of(x)
  init = (np.array(np.iinfo(keys.dtype).min, keys.dtype),
          np.array(np.iinfo(np.dtype(index_dtype)).max, index_dtype),
          np.array(0, bits.dtype))
  _, index, value_bits = lax.reduce((keys, iota, bits), init, pick_pair, (x.ndim - 1,))
  return [lax.bitcast_convert_type(value_bits, x.dtype), index]


def xla_max_with_index(x, *, is_min: bool, index_dtype):
  """(value, index) of the max (min) of ``x`` along its last axis: the element at the index,
  bit for bit (a gather, not a second reduction)."""
  indices = xla_argreduce(x, is_min=is_min, index_dtype=index_dtype)
  # Gathered as bits: XLA may canonicalize NaN payloads when it moves 16-bit floats.
  bits_dtype = _FORMATS[np.dtype(x.dtype)][0]
  # A plain gather of (row, index) pairs: jnp.take_along_axis would normalize negative indices
  # with the axis length as an index-dtype constant, which overflows for 2^31 columns.
  bits = lax.bitcast_convert_type(x, bits_dtype).reshape(-1, x.shape[-1])
  rows = lax.broadcasted_iota(indices.dtype, (bits.shape[0],), 0)
  values = lax.gather(
      bits, jnp.stack([rows, indices.reshape(-1)], axis=-1),
      lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0, 1),
                                 start_index_map=(0, 1)),
      slice_sizes=(1, 1), mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)
  return lax.bitcast_convert_type(values.reshape(indices.shape), x.dtype), indices


def moveaxis_exact(x, source: int, destination: int):
  """``jnp.moveaxis``, bit-exact. XLA's CPU transpose of bfloat16 can flush subnormals to zero,
  so 16-bit floats move as uint16, behind a barrier that keeps XLA from folding the bitcasts
  back into a bfloat16 transpose (their tangents move as a plain transpose: the bits path has
  no derivative of its own). (Their transposed copy feeds a handler, which needs it
  materialized anyway; wider floats keep a plain transpose that XLA may fuse.)"""
  if x.dtype.itemsize != 2 or not jnp.issubdtype(x.dtype, jnp.floating):
    return jnp.moveaxis(x, source, destination)
  return _moveaxis_bits(x, source, destination)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _moveaxis_bits(x, source, destination):
  bits = lax.bitcast_convert_type(x, np.uint16)
  moved = lax.optimization_barrier(jnp.moveaxis(bits, source, destination))
  return lax.bitcast_convert_type(moved, x.dtype)


@_moveaxis_bits.defjvp
def _moveaxis_bits_jvp(source, destination, primals, tangents):
  (x,), (t,) = primals, tangents
  return _moveaxis_bits(x, source, destination), jnp.moveaxis(t, source, destination)


def _bits_of(x):
  """``x``'s bits as integers of its width (exact transport of floats: NaN payloads, -0)."""
  return lax.bitcast_convert_type(x, _FORMATS[np.dtype(x.dtype)][0])


def take_bits_along_last_axis(x, indices):
  """``x[..., indices]`` along the last axis (``indices``: ``[..., k]``), bit for bit: floats
  move as integers (XLA may canonicalize NaN payloads when it moves 16-bit floats)."""
  bits = jnp.take_along_axis(_bits_of(x), indices, axis=-1, mode="promise_in_bounds")
  return lax.bitcast_convert_type(bits, x.dtype)


def sort_top_k(keys, k: int, index_dtype):
  """Positions of the ``k`` largest integer ``keys`` along the last axis, the lowest position
  first among equal keys: one sort of (-key, position), exact on every backend whatever its
  sort's stability. Returns ``(keys, positions)`` of shape ``[..., k]``. Keys never hold their
  type's minimum (``ordered_key``: no element has it), so the negation cannot overflow."""
  positions = lax.broadcasted_iota(np.dtype(index_dtype), keys.shape, keys.ndim - 1)
  neg, positions = lax.sort((-keys, positions), dimension=keys.ndim - 1, num_keys=2)
  return -lax.slice_in_dim(neg, 0, k, axis=-1), lax.slice_in_dim(positions, 0, k, axis=-1)


def xla_top_k(x, k: int, *, index_dtype):
  """The exact XLA path of top_k (SPEC §1e) along the last axis of float ``x``: the ``k`` first
  elements in the order of ``ordered_key`` (a NaN before every number, -0 == +0, ties to the
  lowest index), values bit for bit. ``lax.top_k`` over the integer keys where its int32
  indices reach (XLA keeps the lowest index first among equal keys: tested on CPU and GPU), a
  sort of (key, position) pairs for longer rows."""
  keys = ordered_key(x, False)
  cols = x.shape[-1]
  if is_constant_dim(cols) and cols - 1 > np.iinfo(np.int32).max:
    _, indices = sort_top_k(keys, k, index_dtype)
  else:
    _, indices = lax.top_k(keys, k)
    indices = indices.astype(index_dtype)
  return take_bits_along_last_axis(x, indices), indices
