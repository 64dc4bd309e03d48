"""Partitioning of the handler calls over sharded inputs (SPEC §1d).

An FFI call is opaque to XLA: left alone, XLA gathers a sharded input onto every device before
the call. This module decides, for one call, how it is split instead, from what the types say:

* The input's type names mesh axes (explicit sharding: ``jax.make_mesh``'s default axis type
  since jax 0.9). The primitive's lowering calls :func:`lower_partitioned`, which lowers a
  ``jax.shard_map`` over those axes: each device runs the handler on its own block. Row axes
  need nothing more (no collective). A split reduction axis gives each device its pair (value,
  local index); the ``[rows, shards]`` pairs are exchanged once (all-gathers of the value bits
  and of the indices, which XLA's GPU combiner merges into ONE collective: no pack or unpack
  kernel around it) and combined in one kernel (:func:`combine_pairs`, one variadic reduction
  in the SPEC §1 order; global index = shard position * shard width + local index). This is
  the path JAX documents for FFI calls (jax >= 0.11 docs, "FFI / Sharding": a ``shard_map``
  keyed on the sharding in the type); it serializes with ``jax.export`` and keeps the
  persistent compilation cache.
* Inside a user's ``shard_map``, ``axis_name=`` says the reduction axis is split over that
  mesh axis: :func:`reduce_over_axis_name` (local handler + the same exchange and combine).
* Mesh axes of type Auto (the sharding is only decided by the XLA partitioner, after lowering)
  on more than one device: the call lowers to the exact XLA path (a native variadic reduction
  that XLA partitions itself: local rows, or local pairs + an all-gather of ``[rows, shards]``
  pairs), never the opaque call that XLA would gather for. ``custom_partitioning`` would keep
  the handler here, but a program that contains it cannot be exported (``jax.export`` refuses
  its keep-alive callbacks on jax 0.10 - 0.12), misses the persistent compilation cache, and
  needs the primitive in ``prim_requires_devices_during_lowering`` (which breaks lowering
  under an AbstractMesh).

``categorical`` (the fused sampler) is partitioned the same way, by
:func:`lower_categorical_partitioned` and :func:`categorical_over_axis_name`: its noise is keyed
by (key, row counter, global column), so each block passes its global offsets to the handler
(``offsets`` operand: first global row among its key's rows, first global column), and its
"value" is the row's noisy maximum: a split vocabulary exchanges ``[rows, shards]`` (noisy
maximum, local index) pairs once and combines them with the argmax order (global index =
shard position * shard width + local index, formed after the exchange). Keys and per-row
temperatures are split with the rows (they are tiny; resharded to the rows' split if they come
otherwise). Samples are the unsharded ones, index for index. Under Auto axes there is no exact
XLA path with the same noise, so the handler call stays and XLA gathers the logits for it (the
partitioner cannot split a custom call; its Shardy rule only propagates) — use explicit
sharding or ``axis_name=``.

``top_k`` (the primitive's own partition rule in _primitives) uses the pure pieces here: split
rows take their top k where they are; a split axis gives each block its ``min(k, width)``
first (values, local indices), exchanged once as ``[rows, shards, k]`` candidates (values as
bits) and merged exactly by :func:`merge_top_k` (:func:`split_top_k`); Auto axes take the exact
XLA path, which XLA partitions.

Shard positions: a reduction axis split over mesh axes ``(a, b)`` puts block
``axis_index((a, b))`` (``a`` major) on each device, and ``all_gather`` over ``(a, b)`` stacks
the blocks in that same order, so shard ``s`` of the gathered pairs holds global columns
``[s * width, (s + 1) * width)``. Explicit shardings and ``shard_map`` blocks are always even
(jax rejects uneven ones); uneven splits only arise under Auto axes, where XLA pads and the
XLA path is exact by construction.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType, PartitionSpec as P

from jax_argreduce import _xla
from jax_argreduce._compat import is_constant_shape, mlir, typeof, use_shardy


# ---------------------------------------------------------------------------------------------
# The local reductions (swap points: the only places this module binds the primitive).


def _local_pairs(x, is_min: bool, *, index_dtype, method: str = "auto"):
  """(values, indices) of the max (``is_min``: min) of ``x`` along its last axis, one pass on
  the data this device holds; ``values`` bit-exact elements at ``indices`` (local indices)."""
  from jax_argreduce import _primitives  # late: _primitives imports this module
  values, indices = _primitives.argreduce_last_axis(
      x, is_min=is_min, with_value=True, index_dtype=index_dtype, method=method)
  return values, indices


def _local_indices(x, is_min: bool, *, index_dtype, method: str = "auto"):
  """Indices only (the argmax/argmin epilogue) for blocks whose rows are whole."""
  from jax_argreduce import _primitives
  (indices,) = _primitives.argreduce_last_axis(
      x, is_min=is_min, with_value=False, index_dtype=index_dtype, method=method)
  return indices


def _local_categorical(keys, logits, temperature, offsets, *, index_dtype, method: str = "auto"):
  """(noisy_max, local index) of the fused sampler on this device's block (categorical_p's
  operands; ``offsets``: the block's global (row, column) counters)."""
  from jax_argreduce import _primitives
  return _primitives.categorical_last_axis(keys, logits, temperature, offsets,
                                           index_dtype=index_dtype, method=method)


# ---------------------------------------------------------------------------------------------
# The exchange and the combine (SPEC §1 order over shards).

# Integer type of the bits of each float format (bit-exact transport of the values).
_BITS = {2: np.int16, 4: np.int32, 8: np.int64}


def combine_pairs(values, indices, is_min: bool, *, with_value: bool = True):
  """Combines ``[..., S]`` pairs per row into the global ``(value, index)`` (``with_value``
  False: ``(None, index)``) under the SPEC §1 order: the largest (smallest) order key, NaN
  above everything for argmax and argmin alike, -0 == +0; among equal keys (ties, several
  NaNs) the lowest index. ONE variadic reduction over (key, index[, value bits]), so XLA emits
  one kernel for the whole combine (with its producers fused in); the value travels as bits
  (bit-exact: NaN payload, sign of zero)."""
  keys = _xla.ordered_key(values, is_min)
  operands = [keys, indices]
  init = [np.array(np.iinfo(keys.dtype).min, keys.dtype),
          np.array(np.iinfo(indices.dtype).max, indices.dtype)]
  if with_value:
    bits = lax.bitcast_convert_type(values, _BITS[values.dtype.itemsize])
    operands.append(bits)
    init.append(np.array(0, bits.dtype))
  out = lax.reduce(tuple(operands), tuple(init), _xla.pick_pair, (values.ndim - 1,))
  value = lax.bitcast_convert_type(out[2], values.dtype) if with_value else None
  return value, out[1]


def _all_gather_invariant(x, names, axis):
  # The gathered pairs are the same on every device of the group: typed invariant, so a
  # caller's shard_map may return them with the reduction axes absent from out_specs.
  try:
    return lax.all_gather(x, names, axis=axis, to="invarying")
  except TypeError:  # pragma: no cover - jax without all_gather(to=)
    return lax.all_gather(x, names, axis=axis)


def _gather_pairs(values, indices, names):
  """``[..., S]`` values and indices of every shard of ``names`` (shard order), the values
  moved as bits (exact). Two all-gathers in the HLO, which XLA's GPU combiner merges into one
  collective of two operands (as it does for jnp.argmax's pairs): no packing kernel before
  it, no unpacking after."""
  bits = lax.bitcast_convert_type(values, _BITS[values.dtype.itemsize])
  bits, indices = _all_gather_invariant((bits, indices), names, axis=values.ndim)
  return lax.bitcast_convert_type(bits, values.dtype), indices


def _shard_offsets(indices, width):
  """``[..., S]`` local indices + the first global index of each shard ``s * width``."""
  dtype = indices.dtype
  pos = lax.broadcasted_iota(dtype, indices.shape, indices.ndim - 1)
  return indices + pos * np.asarray(width, dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4, 5))
def _exchange(values, local, width, names, is_min, with_value):
  """Global (value, index) from this device's pair (``local``: index within this device's
  ``width`` columns): one exchange of the ``[rows, shards]`` pairs over ``names`` (shard
  ``s`` holds global columns ``[s * width, (s + 1) * width)``), then the §1 combine, one
  kernel. Differentiable in ``values`` (the winning shard's tangent)."""
  all_values, all_local = _gather_pairs(values, local, names)
  return combine_pairs(all_values, _shard_offsets(all_local, width),
                       is_min, with_value=with_value)


@_exchange.defjvp
def _exchange_jvp(width, names, is_min, with_value, primals, tangents):
  values, local = primals
  value, index = _exchange(values, local, width, names, is_min, with_value)
  index_tangent = np.zeros(local.shape, jax.dtypes.float0)
  if not with_value:
    return (value, index), (None, index_tangent)
  # Only a differentiated program pays for this second (tangent) exchange.
  t_all = _all_gather_invariant(tangents[0], names, axis=values.ndim)
  shards = lax.broadcasted_iota(index.dtype, t_all.shape, t_all.ndim - 1)
  won = (index // np.asarray(width, index.dtype))[..., None] == shards
  t_value = jnp.sum(jnp.where(won, t_all, jnp.zeros_like(t_all)), axis=-1)
  return (value, index), (t_value, index_tangent)


def _names(entry) -> tuple:
  if entry is None:
    return ()
  return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def _split_reduce(x, names, *, is_min, with_value, index_dtype, method):
  """The block of ``x`` on this device, its reduction axis split over mesh axes ``names``:
  local pair, one exchange, global indices, §1 combine (:func:`_exchange`). Returns ``[indices]`` or
  ``[values, indices]``."""
  values, local = _local_pairs(x, is_min, index_dtype=index_dtype, method=method)
  value, index = _exchange(values, local, x.shape[-1], names, is_min, with_value)
  return [value, index] if with_value else [index]


# ---------------------------------------------------------------------------------------------
# axis_name= (inside a user's shard_map): trace time.


def _varying_axes(x):
  mat = getattr(typeof(x), "manual_axis_type", None)
  return getattr(mat, "varying", None)


def _check_vma_on() -> bool:
  from jax._src import config  # internal: shard_map's check_vma flag while it traces
  state = getattr(config, "_check_vma", None)
  return bool(state.value) if state is not None else False


def _axis_names(x, axis_name, op: str) -> tuple:
  """The mesh axes of ``axis_name``, checked: bound here, and ``x`` varies along them."""
  names = _names(axis_name)
  if not names:
    raise ValueError(f"{op}: axis_name must name a mesh axis, got {axis_name!r}")
  manual = getattr(jax.sharding.get_abstract_mesh(), "manual_axes", None)
  for name in names:
    try:
      lax.axis_size(name)
    except NameError:
      raise ValueError(
          f"{op}: axis_name={name!r} is not a mesh axis bound here; axis_name is for use "
          "inside jax.shard_map (or jax.pmap) over a mesh with that axis, where the "
          "reduction axis of the input is split over it") from None
    if manual is not None and name not in manual:  # e.g. a jax.vmap axis name
      raise ValueError(
          f"{op}: axis_name={name!r} is bound here but is not a manual mesh axis (a "
          "jax.vmap axis name?); axis_name is for use inside jax.shard_map (or jax.pmap) "
          "over a mesh with that axis, where the reduction axis of the input is split over "
          "it; under vmap, reduce the gathered axis instead") from None
  varying = _varying_axes(x)
  if varying is not None and _check_vma_on():
    missing = [n for n in names if n not in varying]
    if missing:
      raise ValueError(
          f"{op}: the input does not vary along mesh axis {missing[0]!r}, so its reduction "
          f"axis is not split over it (in_specs must shard the reduction axis over "
          f"{axis_name!r}); drop axis_name for a replicated reduction axis")
  return names


def reduce_over_axis_name(x, axis_name, *, is_min: bool, with_value: bool, index_dtype,
                          method: str = "auto", op: str = "argmax"):
  """``x`` (reduction axis last) is this device's block of a reduction axis split over mesh
  axis ``axis_name`` (a name or a tuple of names, major first); returns the global
  ``[indices]`` / ``[values, indices]``, the same on every device of the group (typed
  invariant along ``axis_name``)."""
  names = _axis_names(x, axis_name, op)
  return _split_reduce(x, names, is_min=is_min, with_value=with_value,
                       index_dtype=index_dtype, method=method)


def _check_counters(global_cols: int, index_dtype, op: str = "categorical") -> None:
  # Column counters and offsets are int32; global indices must fit the index dtype.
  limit = min(np.iinfo(np.int32).max, np.iinfo(np.dtype(index_dtype)).max)
  if global_cols - 1 > limit:
    raise ValueError(f"{op}: the split category axis has {global_cols} elements in all, more "
                     f"than the {'int32' if limit == np.iinfo(np.int32).max else 'index'} "
                     "counters hold")


def categorical_over_axis_name(keys, logits, temperature, axis_name, *, index_dtype,
                               method: str = "auto"):
  """``categorical`` on this device's block of a vocabulary split over ``axis_name`` (inside a
  user's shard_map): noise keyed by the global column (column offset = block position * block
  width), the local (noisy maximum, index), one exchange, the §1 combine. Returns the
  global indices (typed invariant along ``axis_name``). ``keys``/``temperature``: categorical_p
  operands for the local rows (the row counters are the local rows')."""
  names = _axis_names(logits, axis_name, "categorical")
  cols = logits.shape[-1]
  _check_counters(math.prod(lax.axis_size(n) for n in names) * cols, index_dtype)
  shard = lax.axis_index(names)
  offsets = jnp.stack([jnp.zeros((), np.int32), shard.astype(np.int32) * np.int32(cols)])
  values, local = _local_categorical(keys, logits, temperature, offsets,
                                     index_dtype=index_dtype, method=method)
  _, index = _exchange(values, local, cols, names, False, False)
  return index


# ---------------------------------------------------------------------------------------------
# The primitive's lowering: partition by the sharding in the type.


def _spec(aval) -> tuple:
  sharding = getattr(aval, "sharding", None)
  spec = tuple(getattr(sharding, "spec", ()) or ())
  return spec + (None,) * (aval.ndim - len(spec))


def _axis_types(mesh) -> dict:
  return dict(zip(mesh.axis_names, mesh.axis_types)) if not mesh.empty else {}


def explicit_spec(aval):
  """The explicitly sharded mesh axes of ``aval`` per dimension (a tuple of name tuples), or
  None when no dimension is split over an explicit axis of size > 1."""
  sharding = getattr(aval, "sharding", None)
  mesh = getattr(sharding, "mesh", None)
  if mesh is None or mesh.empty:
    return None
  types = _axis_types(mesh)
  dims = tuple(tuple(n for n in _names(e) if types.get(n) == AxisType.Explicit)
               for e in _spec(aval))
  if not any(mesh.shape[n] > 1 for d in dims for n in d):
    return None
  return dims


def _pspec(dims) -> P:
  return P(*(d if d else None for d in dims))


pspec = _pspec


def manual_axes(mesh, dims) -> frozenset:
  """The mesh axes a shard_map over ``dims`` makes manual: the ones used; with Shardy off every
  explicit axis (XLA's GSPMD partitioner aborts on these partially manual computations:
  'Check failed: sharding.IsManualSubgroup()'); the block is then replicated over the unused
  axes, as it was."""
  if use_shardy():
    return frozenset(n for d in dims for n in d)
  return frozenset(n for n, t in _axis_types(mesh).items() if t == AxisType.Explicit)


def sharding_unknown(ctx, aval) -> bool:
  """True when XLA, not the type, will decide how the input is split: Auto mesh axes of size
  > 1, or a multi-device program whose values carry no mesh at all."""
  mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
  if mesh is not None and not mesh.empty:
    types = _axis_types(mesh)
    return any(t == AxisType.Auto and mesh.shape[n] > 1 for n, t in types.items())
  axis_context = ctx.module_context.axis_context
  num_devices = getattr(axis_context, "num_devices", None)
  if num_devices is not None:  # ShardingContext: a jit over num_devices devices
    return num_devices > 1
  manual = getattr(axis_context, "manual_axes", None)
  ctx_mesh = getattr(axis_context, "mesh", None)
  if manual is None or ctx_mesh is None:
    return False
  return any(size > 1 for name, size in ctx_mesh.shape.items() if name not in manual)


def xla_partitionable(x, *, is_min: bool, with_value: bool, index_dtype):
  """The exact XLA path in a form XLA partitions well: one variadic reduction over (order key,
  index[, value bits]); split rows stay local, a split reduction axis becomes local pairs and
  all-gathers of ``[rows, shards]`` pairs (values travel as bits: exact, signed zeros kept)."""
  keys = _xla.ordered_key(x, is_min)
  if not with_value:
    return [lax.argmax(keys, x.ndim - 1, index_dtype)]
  iota = lax.broadcasted_iota(np.dtype(index_dtype), x.shape, x.ndim - 1)
  bits = lax.bitcast_convert_type(x, _BITS[x.dtype.itemsize])
  init = (np.array(np.iinfo(keys.dtype).min, keys.dtype),
          np.array(np.iinfo(np.dtype(index_dtype)).max, index_dtype),
          np.array(0, bits.dtype))
  _, index, value_bits = lax.reduce((keys, iota, bits), init, _xla.pick_pair, (x.ndim - 1,))
  return [lax.bitcast_convert_type(value_bits, x.dtype), index]


def lower_partitioned(ctx, x, *, is_min: bool, with_value: bool, index_dtype,
                      method: str = "auto"):
  """Call first in the primitive's lowering rule. Returns the lowered results when the input
  must not reach the opaque handler call as it is (its type splits it over explicit mesh axes:
  a shard_map over them; or XLA will split it: the XLA path), else None: lower as usual."""
  aval = ctx.avals_in[0]
  if not is_constant_shape(aval.shape):
    return None  # symbolic shapes (jax.export): as before (XLA gathers a split input)
  dims = explicit_spec(aval)
  if dims is None:
    if method != "kernel" and sharding_unknown(ctx, aval):
      fn = functools.partial(xla_partitionable, is_min=is_min, with_value=with_value,
                             index_dtype=index_dtype)
      return mlir.lower_fun(fn, multiple_results=True)(ctx, x)
    return None
  mesh = aval.sharding.mesh
  row_specs, k_names = dims[:-1], dims[-1]
  in_spec, out_spec = _pspec(dims), _pspec(row_specs)

  def body(block):
    if k_names:
      return _split_reduce(block, k_names, is_min=is_min, with_value=with_value,
                           index_dtype=index_dtype, method=method)
    if with_value:
      return list(_local_pairs(block, is_min, index_dtype=index_dtype, method=method))
    return [_local_indices(block, is_min, index_dtype=index_dtype, method=method)]

  n_out = 2 if with_value else 1
  fn = jax.shard_map(body, mesh=mesh, in_specs=in_spec, out_specs=[out_spec] * n_out,
                     axis_names=manual_axes(mesh, dims))
  return mlir.lower_fun(fn, multiple_results=True)(ctx, x)


def _reshard(x, aval, mesh, spec):
  """``x`` with the sharding ``spec`` (keys, temperatures, offsets: tiny; a replicated one is
  only sliced), unless its type has it already."""
  if explicit_spec(aval) is None and not any(spec):
    return x
  return jax.sharding.reshard(x, jax.sharding.NamedSharding(mesh, spec))


def _add_offsets(offsets, row, col):
  """The call's ``offsets`` (int32 [2], or [0]: zero) plus this block's (row, col)."""
  pair = jnp.stack([jnp.asarray(row), jnp.asarray(col)]).astype(np.int32)
  return pair if offsets.shape == (0,) else offsets + pair


def lower_categorical_partitioned(ctx, keys, logits, temperature, offsets, *, index_dtype,
                                  method: str = "auto"):
  """``lower_partitioned`` for categorical_p: where the logits' type splits them over explicit
  mesh axes, a shard_map over those axes in which each block samples with its global counters
  (so the sample is the unsharded one), and a split vocabulary exchanges its
  ``[rows, shards]`` (noisy maximum, local index) pairs once. Else None: lower as usual
  (under Auto axes XLA then gathers the logits for the handler call: exact).

  Row counters: a row's counter is its position among the rows of its key (one key: the global
  flat row). Keys come in categorical_p's prefix form ``kb = batch[:j] + ones``: the key
  dimensions split with the rows; within a key, a block's rows are consecutive counters from
  ``sum_d start_d * stride_d`` when every split dimension only has whole dimensions after it
  in the block (e.g. any split of ``[rows, vocab]``, or ``[batch, seq, vocab]`` split over
  batch); otherwise the block is walked in runs of consecutive counters (``lax.map``, one
  handler call per run: e.g. ``[batch, seq, vocab]`` with seq split, one call per local batch
  element)."""
  from jax_argreduce import _primitives
  k_aval, aval, t_aval, o_aval = ctx.avals_in
  if not all(is_constant_shape(a.shape) for a in ctx.avals_in):
    return None
  dims = explicit_spec(aval)
  if dims is None:
    return None
  mesh = aval.sharding.mesh
  batch, n = aval.shape[:-1], aval.ndim - 1
  row_dims, k_names = dims[:-1], dims[-1]
  j = _primitives.key_prefix(k_aval.shape, batch)
  if j is None:  # pragma: no cover - the abstract eval rejects it
    return None
  per_row_t = _primitives.temperature_per_row(t_aval.shape, batch)
  parts = [math.prod(mesh.shape[a] for a in d) for d in row_dims]
  local = [b // p for b, p in zip(batch, parts)]
  cols = aval.shape[-1] // math.prod(mesh.shape[a] for a in k_names)
  strides = [math.prod(batch[d + 1:]) for d in range(n)]
  _check_counters(aval.shape[-1], index_dtype)
  if math.prod(batch[j:]) - 1 > np.iinfo(np.int32).max:
    raise ValueError(f"categorical: {math.prod(batch[j:])} rows share a key: more than the "
                     "int32 row offsets of a split call hold; pass one key per row")
  # m: the rows of a block are runs of consecutive counters over dimensions m.. (see above).
  m, split_after = n, False
  for d in reversed(range(j, n)):
    if local[d] > 1 and split_after:
      break
    m, split_after = d, split_after or bool(row_dims[d])

  key_spec = _pspec(row_dims[:j] + ((),) * (n - j + 1))
  t_spec = _pspec(row_dims if per_row_t else ((),) * n)
  out_spec = _pspec(row_dims)

  def start(d):  # first global index of this block along batch dimension d
    if not row_dims[d]:
      return np.int32(0)
    return lax.axis_index(row_dims[d]).astype(np.int32) * np.int32(local[d])

  def body(kb, lb, tb, ob):
    col_off = (lax.axis_index(k_names).astype(np.int32) * np.int32(cols) if k_names
               else np.int32(0))
    tail = sum((start(d) * np.int32(strides[d]) for d in range(m, n)), np.int32(0))
    sample = functools.partial(_local_categorical, index_dtype=index_dtype, method=method)
    if m == j:  # one call: the block's rows of each key are consecutive counters
      values, index = sample(kb, lb, tb, _add_offsets(ob, tail, col_off))
    else:  # runs over dimensions m..: one call per index of dimensions ..m (sequential)
      runs = math.prod(local[:m])
      head = jnp.zeros(local[:m], np.int32)
      for d in range(j, m):
        pos = lax.broadcasted_iota(np.int32, tuple(local[:m]), d) + start(d)
        head = head + pos * np.int32(strides[d])
      run_keys = jnp.broadcast_to(kb, (*local[:m], *kb.shape[m:])).reshape(
          runs, *kb.shape[m:])
      run_t = tb.reshape(runs, *local[m:]) if per_row_t else None

      def one_run(args):
        k, x, t, h = args
        off = _add_offsets(ob, h + tail, col_off)
        return sample(k, x, tb.reshape((1,) * (n - m)) if t is None else t, off)

      values, index = lax.map(one_run, (run_keys, lb.reshape(runs, *local[m:], lb.shape[-1]),
                                        run_t, head.reshape(runs)))
      values, index = values.reshape(local), index.reshape(local)
    if k_names:
      values, index = _exchange(values, index, cols, k_names, False, True)
    return [values, index]

  fn = jax.shard_map(body, mesh=mesh, in_specs=(key_spec, _pspec(dims), t_spec, P()),
                     out_specs=[out_spec, out_spec], axis_names=manual_axes(mesh, dims))

  def partitioned(k, x, t, o):
    return fn(_reshard(k, k_aval, mesh, key_spec), x, _reshard(t, t_aval, mesh, t_spec),
              _reshard(o, o_aval, mesh, P()))

  return mlir.lower_fun(partitioned, multiple_results=True)(ctx, keys, logits, temperature,
                                                            offsets)


# ---------------------------------------------------------------------------------------------
# Trace-time helpers for the api and the JVP rule.


def take_last_axis(t, indices):
  """``t[..., indices]`` along the last axis: ``indices`` of ``t``'s rank less one (one index
  per row: max_with_index's value tangent) or of its rank (``[..., k]``: top_k's). Where the
  type splits the last axis over explicit mesh axes, each device contributes the elements it
  holds and one all-reduce of the result sums them (exactly one device contributes each);
  ``jnp.take_along_axis`` would need the whole axis (jax raises a ShardingTypeError)."""
  one = indices.ndim < t.ndim
  dims = explicit_spec(typeof(t))
  if dims is None or not dims[-1]:
    got = jnp.take_along_axis(t, indices[..., None] if one else indices, axis=-1)
    return got[..., 0] if one else got
  names = dims[-1]
  mesh = typeof(t).sharding.mesh
  spec_t, spec_i = _pspec(dims), _pspec(dims[:-1] + (() if one else ((),)))

  def body(tb, ib):
    width = tb.shape[-1]
    local = ib - lax.axis_index(names).astype(ib.dtype) * np.asarray(width, ib.dtype)
    mine = (local >= 0) & (local < width)
    at = jnp.clip(local, 0, width - 1)
    got = jnp.take_along_axis(tb, at[..., None] if one else at, axis=-1)
    got = got[..., 0] if one else got
    return lax.psum(jnp.where(mine, got, jnp.zeros_like(got)), names)

  return jax.shard_map(body, mesh=mesh, in_specs=(spec_t, spec_i), out_specs=spec_i,
                       axis_names=manual_axes(mesh, dims))(t, indices)


# ---------------------------------------------------------------------------------------------
# top_k over a split axis: k candidates per shard, one exchange, the exact merge.


def merge_top_k(values, indices, k: int):
  """The ``k`` first of ``[..., n]`` candidates (``values`` with their global ``indices``) in
  the SPEC §1 order: the largest order key first, a NaN before every number, -0 == +0, the
  lowest global index among equal keys. One sort of (-key, index, value bits): exact (the
  index breaks every tie), values bit for bit."""
  keys = _xla.ordered_key(values, False)
  bits = lax.bitcast_convert_type(values, _BITS[values.dtype.itemsize])
  axis = values.ndim - 1
  _, index, bits = lax.sort((-keys, indices, bits), dimension=axis, num_keys=2)
  value = lax.bitcast_convert_type(lax.slice_in_dim(bits, 0, k, axis=axis), values.dtype)
  return value, lax.slice_in_dim(index, 0, k, axis=axis)


def split_top_k(x, names, k: int, local_top_k):
  """top_k of the whole axis from ``x``, this device's block of a last axis split over mesh
  axes ``names`` (shard ``s`` holds global columns ``[s * width, (s + 1) * width)``):
  ``local_top_k(x, kk)`` gives the block's ``kk = min(k, width)`` first (values, local
  indices); the ``[..., shards, kk]`` candidates are exchanged once (values as bits), made
  global and merged (:func:`merge_top_k`). Returns ``(values, indices)`` ``[..., k]``, the same
  on every device of the group (typed invariant along ``names``)."""
  width = x.shape[-1]
  values, local = local_top_k(x, min(k, width))
  bits = lax.bitcast_convert_type(values, _BITS[values.dtype.itemsize])
  bits, local = _all_gather_invariant((bits, local), names, axis=values.ndim - 1)
  shard = lax.broadcasted_iota(local.dtype, local.shape, local.ndim - 2)
  global_index = local + shard * np.asarray(width, local.dtype)
  flat = (*local.shape[:-2], local.shape[-2] * local.shape[-1])
  values = lax.bitcast_convert_type(bits, values.dtype).reshape(flat)
  return merge_top_k(values, global_index.reshape(flat), k)


def needs_two_stage_flatten(x) -> bool:
  """True when ``x.reshape(-1)`` (``axis=None``) is not possible on its sharded type."""
  dims = explicit_spec(typeof(x))
  return dims is not None and x.ndim > 1


def flat_reduce(x, reduce_last, *, is_min: bool, with_value: bool, index_dtype):
  """``axis=None`` for an explicitly sharded ``x`` of rank >= 2 without flattening it: reduce
  the last axis (partitioned), gather the small per-row pairs, and pick the first winning row
  (flat index ``row * cols + index``: the (row, index) order is the flat order).
  ``reduce_last(x)`` must return ``(values, indices)`` along the last axis."""
  values, indices = reduce_last(x)
  cols = x.shape[-1]
  # The per-row pairs are tiny ([rows]): replicate them (values as bits: exact), then one
  # more combine.
  mesh = typeof(x).sharding.mesh
  bits = lax.bitcast_convert_type(values, _BITS[values.dtype.itemsize])
  bits, indices = jax.sharding.reshard((bits, indices.astype(index_dtype)),
                                       jax.sharding.NamedSharding(mesh, P()))
  values = lax.bitcast_convert_type(bits, values.dtype).reshape(-1)
  indices = indices.reshape(-1)
  rows = jnp.arange(values.shape[0], dtype=index_dtype)
  flat = rows * np.asarray(cols, index_dtype) + indices.astype(index_dtype)
  value, index = combine_pairs(values, flat, is_min)
  return [value, index] if with_value else [index]
