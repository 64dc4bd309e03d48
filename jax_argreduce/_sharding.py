"""Pure pieces for partitioning the handler calls over sharded inputs (SPEC §1d).

An FFI call is opaque to XLA: left alone, XLA gathers a sharded input onto every device before
the call. Each primitive's partition rule (its block in _primitives) splits the call instead,
from what the types say, with the pieces here; this module binds no primitive and imports none
(where a piece needs the op on one block, the caller passes it as a callable):

* Spec reading: :func:`explicit_spec` (the mesh axes the type splits each dimension over),
  :func:`sharding_unknown` (XLA, not the type, will split it: Auto axes), :func:`pspec`,
  :func:`manual_axes`, :func:`axis_names` (``axis_name=`` inside a user's ``shard_map``).
* Per-shard candidates with global indices, one exchange, the exact merge: a block of a split
  reduction axis reduces to its pair (value, local index) or its ``min(k, width)`` first
  candidates; the ``[rows, shards, k]`` candidates (k = 1: ``[rows, shards]`` pairs) are
  exchanged once (all-gathers of the value bits and of the indices, which XLA's GPU combiner
  merges into ONE collective: no pack or unpack kernel around it), made global (shard position
  * shard width + local index) and merged in the SPEC §1 order: :func:`exchange` /
  :func:`combine_pairs` (k = 1, one variadic reduction), :func:`split_reduce`,
  :func:`split_top_k` / :func:`merge_top_k`.
* ``categorical``: its noise is keyed by (key, row counter, global column), so each block
  passes its global offsets to the handler (first row counter among its key's rows, first
  global column: :func:`sample_plan`, :func:`sample_block`, :func:`split_sample`), and its
  "value" is the row's noisy maximum, exchanged and combined as argmax's pairs.

The rules lower a ``jax.shard_map`` over the explicit axes in which each block runs the op
without partitioning it again. This is the path JAX documents for FFI calls (jax >= 0.11 docs,
"FFI / Sharding": a ``shard_map`` keyed on the sharding in the type); it serializes with
``jax.export`` and keeps the persistent compilation cache. Under Auto mesh axes (the sharding
is only decided by the XLA partitioner, after lowering) on more than one device, _dispatch
routes argreduce and top_k to their exact XLA path (a native reduction or TopK that XLA
partitions itself: local rows, or local candidates + an all-gather of them), never the opaque
call that XLA would gather for; ``categorical`` has no exact XLA path with the same noise, so
the handler call stays and XLA gathers the logits for it (the partitioner cannot split a custom
call; its Shardy rule only propagates) — use explicit sharding or ``axis_name=``.
``custom_partitioning`` would keep the handler under Auto axes, but a program that contains it
cannot be exported (``jax.export`` refuses its keep-alive callbacks on jax 0.10 - 0.12), misses
the persistent compilation cache, and needs the primitive in
``prim_requires_devices_during_lowering`` (which breaks lowering under an AbstractMesh).

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
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType, PartitionSpec as P

from jax_argreduce import _xla
from jax_argreduce._compat import typeof, use_shardy


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
def exchange(values, local, width, names, is_min, with_value):
  """Global (value, index) from this device's pair (``local``: index within this device's
  ``width`` columns): one exchange of the ``[rows, shards]`` pairs over ``names`` (shard
  ``s`` holds global columns ``[s * width, (s + 1) * width)``), then the §1 combine, one
  kernel. Differentiable in ``values`` (the winning shard's tangent)."""
  all_values, all_local = _gather_pairs(values, local, names)
  return combine_pairs(all_values, _shard_offsets(all_local, width),
                       is_min, with_value=with_value)


@exchange.defjvp
def _exchange_jvp(width, names, is_min, with_value, primals, tangents):
  values, local = primals
  value, index = exchange(values, local, width, names, is_min, with_value)
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


def split_reduce(x, names, local_pairs, *, is_min: bool, with_value: bool):
  """The block of ``x`` on this device, its reduction axis split over mesh axes ``names``:
  ``local_pairs(x)`` gives the block's (values, local indices) of the max (``is_min``: min)
  along its last axis; one exchange, global indices, §1 combine (:func:`exchange`). Returns
  ``[indices]`` or ``[values, indices]``, the same on every device of the group (typed
  invariant along ``names``)."""
  values, local = local_pairs(x)
  value, index = exchange(values, local, x.shape[-1], names, is_min, with_value)
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


def axis_names(x, axis_name, op: str) -> tuple:
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


def check_counters(global_cols: int, index_dtype, op: str = "categorical") -> None:
  # Column counters and offsets are int32; global indices must fit the index dtype.
  limit = min(np.iinfo(np.int32).max, np.iinfo(np.dtype(index_dtype)).max)
  if global_cols - 1 > limit:
    raise ValueError(f"{op}: the split category axis has {global_cols} elements in all, more "
                     f"than the {'int32' if limit == np.iinfo(np.int32).max else 'index'} "
                     "counters hold")


def split_sample(keys, logits, temperature, names, local_sample, *, index_dtype):
  """``categorical`` on this device's block of a vocabulary split over mesh axes ``names``
  (``axis_name=`` inside a user's shard_map): noise keyed by the global column (column offset =
  block position * block width), ``local_sample(keys, logits, temperature, offsets)`` gives the
  block's (noisy maximum, local index) (categorical_p's operands; the row counters are the
  local rows'), one exchange, the §1 combine. Returns the global indices (typed invariant along
  ``names``)."""
  cols = logits.shape[-1]
  check_counters(math.prod(lax.axis_size(n) for n in names) * cols, index_dtype)
  shard = lax.axis_index(names)
  offsets = jnp.stack([jnp.zeros((), np.int32), shard.astype(np.int32) * np.int32(cols)])
  values, local = local_sample(keys, logits, temperature, offsets)
  _, index = exchange(values, local, cols, names, False, False)
  return index


# ---------------------------------------------------------------------------------------------
# Spec reading: how the type splits a call.


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


def pspec(dims) -> P:
  """The PartitionSpec of ``dims`` (a tuple of name tuples per dimension)."""
  return P(*(d if d else None for d in dims))


def manual_axes(mesh, dims) -> frozenset:
  """The mesh axes a shard_map over ``dims`` makes manual: the ones used; with Shardy off every
  explicit axis (XLA's GSPMD partitioner aborts on these partially manual computations:
  'Check failed: sharding.IsManualSubgroup()'); the block is then replicated over the unused
  axes, as it was."""
  if use_shardy():
    return frozenset(n for d in dims for n in d)
  return frozenset(n for n, t in _axis_types(mesh).items() if t == AxisType.Explicit)


def sharding_unknown(aval, axis_context=None) -> bool:
  """True when XLA, not the type, will decide how the input is split: Auto mesh axes of size
  > 1, or a multi-device program whose values carry no mesh at all (``axis_context``: the
  lowering's, ``ctx.module_context.axis_context``; None inside a traced block, whose values
  always carry their mesh)."""
  mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
  if mesh is not None and not mesh.empty:
    types = _axis_types(mesh)
    return any(t == AxisType.Auto and mesh.shape[n] > 1 for n, t in types.items())
  num_devices = getattr(axis_context, "num_devices", None)
  if num_devices is not None:  # ShardingContext: a jit over num_devices devices
    return num_devices > 1
  manual = getattr(axis_context, "manual_axes", None)
  ctx_mesh = getattr(axis_context, "mesh", None)
  if manual is None or ctx_mesh is None:
    return False
  return any(size > 1 for name, size in ctx_mesh.shape.items() if name not in manual)


# ---------------------------------------------------------------------------------------------
# categorical: each block samples with its global counters (so the sample is the unsharded one).


def reshard(x, aval, mesh, spec):
  """``x`` with the sharding ``spec`` (keys, temperatures, offsets: tiny; a replicated one is
  only sliced), unless its type has it already."""
  if explicit_spec(aval) is None and not any(spec):
    return x
  return jax.sharding.reshard(x, jax.sharding.NamedSharding(mesh, spec))


def add_offsets(offsets, row, col):
  """The call's ``offsets`` (int32 [2], or [0]: zero) plus this block's (row, col)."""
  pair = jnp.stack([jnp.asarray(row), jnp.asarray(col)]).astype(np.int32)
  return pair if offsets.shape == (0,) else offsets + pair


class SamplePlan(NamedTuple):
  """How the blocks of a sampler call split over explicit mesh axes find their global counters
  (:func:`sample_plan`): ``row_dims`` / ``k_names`` the mesh axes of the batch dimensions / of
  the vocabulary, ``local`` the block's batch shape, ``cols`` its vocabulary width,
  ``strides`` the flat-row strides of the global batch, ``j`` the keys' prefix (categorical_p),
  ``m`` the first dimension of the runs of consecutive row counters, ``per_row`` whether each
  row parameter (temperature; the filters) has one value per row; ``key_spec``,
  ``param_specs``, ``out_spec`` the shard_map specs of the keys, of each row parameter and of
  the per-row results."""
  row_dims: tuple
  k_names: tuple
  local: tuple
  cols: int
  strides: tuple
  j: int
  m: int
  per_row: tuple
  key_spec: P
  param_specs: tuple
  out_spec: P


def sample_plan(mesh, dims, shape, j: int, per_row: tuple, index_dtype) -> SamplePlan:
  """The plan of a sampler call on logits of static ``shape`` (``[*batch, vocab]``) split over
  the explicit mesh axes ``dims`` (:func:`explicit_spec`), keys in categorical_p's prefix form
  ``kb = batch[:j] + ones``. ValueError where the counters of a block cannot hold its global
  position.

  Row counters: a row's counter is its position among the rows of its key (one key: the global
  flat row). The key dimensions split with the rows; within a key, a block's rows are
  consecutive counters from ``sum_d start_d * stride_d`` when every split dimension only has
  whole dimensions after it in the block (e.g. any split of ``[rows, vocab]``, or
  ``[batch, seq, vocab]`` split over batch); otherwise the block is walked in runs of
  consecutive counters over dimensions ``m..`` (:func:`sample_block`: e.g.
  ``[batch, seq, vocab]`` with seq split, one run per local batch element)."""
  batch, n = tuple(shape[:-1]), len(shape) - 1
  row_dims, k_names = tuple(dims[:-1]), dims[-1]
  parts = [math.prod(mesh.shape[a] for a in d) for d in row_dims]
  local = tuple(b // p for b, p in zip(batch, parts))
  cols = shape[-1] // math.prod(mesh.shape[a] for a in k_names)
  strides = tuple(math.prod(batch[d + 1:]) for d in range(n))
  check_counters(shape[-1], index_dtype)
  if math.prod(batch[j:]) - 1 > np.iinfo(np.int32).max:
    raise ValueError(f"categorical: {math.prod(batch[j:])} rows share a key: more than the "
                     "int32 row offsets of a split call hold; pass one key per row")
  m, split_after = n, False
  for d in reversed(range(j, n)):
    if local[d] > 1 and split_after:
      break
    m, split_after = d, split_after or bool(row_dims[d])
  return SamplePlan(row_dims, k_names, local, cols, strides, j, m, tuple(per_row),
                    key_spec=pspec(row_dims[:j] + ((),) * (n - j + 1)),
                    param_specs=tuple(pspec(row_dims if r else ((),) * n) for r in per_row),
                    out_spec=pspec(row_dims))


def sample_block(plan: SamplePlan, keys, logits, params, offsets, local_sample):
  """Inside the shard_map of a plan (blocks as its specs split them): this block's global
  (noisy maximum, index) ``[values, indices]``. ``params``: the row parameters (a tuple, as
  ``plan.per_row``). ``local_sample(keys, logits, params, offsets)`` gives the (noisy maximum,
  local index) of the sampler on a block (``offsets`` its global (row, column) counters): one
  call where the block's rows of each key are consecutive counters, else one per run
  (``lax.map``, sequential); a split vocabulary then exchanges its ``[rows, shards]`` pairs once
  (:func:`exchange`)."""
  row_dims, k_names, local, n = plan.row_dims, plan.k_names, plan.local, len(plan.local)
  j, m, cols = plan.j, plan.m, plan.cols

  def start(d):  # first global index of this block along batch dimension d
    if not row_dims[d]:
      return np.int32(0)
    return lax.axis_index(row_dims[d]).astype(np.int32) * np.int32(local[d])

  col_off = (lax.axis_index(k_names).astype(np.int32) * np.int32(cols) if k_names
             else np.int32(0))
  tail = sum((start(d) * np.int32(plan.strides[d]) for d in range(m, n)), np.int32(0))
  if m == j:  # one call: the block's rows of each key are consecutive counters
    values, index = local_sample(keys, logits, params, add_offsets(offsets, tail, col_off))
  else:  # runs over dimensions m..: one call per index of dimensions ..m (sequential)
    runs = math.prod(local[:m])
    head = jnp.zeros(local[:m], np.int32)
    for d in range(j, m):
      pos = lax.broadcasted_iota(np.int32, tuple(local[:m]), d) + start(d)
      head = head + pos * np.int32(plan.strides[d])
    run_keys = jnp.broadcast_to(keys, (*local[:m], *keys.shape[m:])).reshape(
        runs, *keys.shape[m:])
    # Per-row parameters run with their rows; shared ones ([1] * n) go to every run whole.
    run_params = tuple(p.reshape(runs, *local[m:]) if r else None
                       for p, r in zip(params, plan.per_row))

    def one_run(args):
      k, x, ps, h = args
      off = add_offsets(offsets, h + tail, col_off)
      ps = tuple(p.reshape((1,) * (n - m)) if q is None else q for p, q in zip(params, ps))
      return local_sample(k, x, ps, off)

    values, index = lax.map(one_run, (run_keys, logits.reshape(runs, *local[m:], logits.shape[-1]),
                                      run_params, head.reshape(runs)))
    values, index = values.reshape(local), index.reshape(local)
  if k_names:
    values, index = exchange(values, index, cols, k_names, False, True)
  return [values, index]


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
  spec_t, spec_i = pspec(dims), pspec(dims[:-1] + (() if one else ((),)))

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


def gather_candidates(values, local, width: int, names):
  """Every shard's ``[..., kk]`` candidates (``values`` with ``local`` indices into this
  device's ``width`` columns of an axis split over mesh axes ``names``), exchanged once (two
  all-gathers, values as bits: exact) and concatenated in shard order: ``[..., shards * kk]``
  values and global indices (shard ``s`` holds global columns ``[s * width, (s + 1) *
  width)``), the same on every device of the group (typed invariant along ``names``)."""
  bits = lax.bitcast_convert_type(values, _BITS[values.dtype.itemsize])
  bits, local = _all_gather_invariant((bits, local), names, axis=values.ndim - 1)
  shard = lax.broadcasted_iota(local.dtype, local.shape, local.ndim - 2)
  global_index = local + shard * np.asarray(width, local.dtype)
  flat = (*local.shape[:-2], local.shape[-2] * local.shape[-1])
  values = lax.bitcast_convert_type(bits, values.dtype).reshape(flat)
  return values, global_index.reshape(flat)


def split_top_k(x, names, k: int, local_top_k):
  """top_k of the whole axis from ``x``, this device's block of a last axis split over mesh
  axes ``names``: ``local_top_k(x, kk)`` gives the block's ``kk = min(k, width)`` first
  (values, local indices); the ``[..., shards, kk]`` candidates are exchanged once and made
  global (:func:`gather_candidates`), then merged (:func:`merge_top_k`). Returns ``(values,
  indices)`` ``[..., k]``, the same on every device of the group (typed invariant along
  ``names``)."""
  width = x.shape[-1]
  values, local = local_top_k(x, min(k, width))
  return merge_top_k(*gather_candidates(values, local, width, names), k)


def split_filtered_sample(keys, logits, params, offsets, names, k_bound: int, candidates,
                          sample):
  """The filtered sampler (SPEC §1f) on this device's block of a vocabulary split over mesh
  axes ``names``, for rows whose top_k is in [1, ``k_bound``] (``k_bound`` < the block's
  width), without gathering the logits: ``[noisy_max, indices]`` of the block's rows, the
  global sample, the same on every device of the group.

  Every filter keeps a prefix of the row's z order (z = logits * (1/T); NaN first, larger
  first, ties to the lower column), and top-k keeps at most ``k_bound`` tokens, so the kept
  set lies among the ``k_bound`` first tokens of each shard in that order.
  ``candidates(logits, temperature, k_bound)`` gives them (the logits' values and local
  columns, in z order); the ``[rows, shards, k_bound]`` candidates are exchanged once
  (:func:`gather_candidates`: shard order, global columns) and
  ``sample(keys, values, *params, offsets, columns)`` (the filtered sampler's handler with
  its columns operand) samples the candidate row. On it, the z order breaks ties by position,
  which is the global column order among equal z: the shards are concatenated in column order,
  and within a shard equal z are in column order; ties of the noisy key are broken by the
  global column (the handler's index). The noise is drawn after the exchange, from each
  candidate's global column (and the block's row counters, ``offsets``): the candidates carry
  logits, not noise, so the exchange is no larger, the candidate stage needs no key, and a
  candidate's noise is exactly the unsharded call's; the sample is the unsharded one, bit for
  bit."""
  width = logits.shape[-1]
  values, local = candidates(logits, params[0], k_bound)
  values, columns = gather_candidates(values, local, width, names)
  return sample(keys, values, *params, offsets, columns)


def split_prefix_sample(keys, logits, params, offsets, names, levels: int, width: tuple,
                        first_tokens, level, draw):
  """The filtered sampler (SPEC §1f) on this device's block of a vocabulary split over mesh
  axes ``names``, for rows without a top-k (top-p and/or min-p), without gathering the logits:
  the block's ``[noisy_max, local indices]`` (its best kept token per row; a -inf noisy maximum
  where it keeps none), for the caller's pair exchange (:func:`sample_block`). ``offsets``: the
  block's global (row, column) counters; ``params``: (temperature, top_k, top_p, min_p).

  Each shard's first token in the z order (``first_tokens(logits, temperature, 1)``: the
  logits' bits) is exchanged (``[rows, shards]``): z_max is the row's, min-p a floor on
  ``d = z - z_max``. top-p's last kept token is found in levels over z's radix key
  (``level(logits, temperature, top_p, tops, above, l)`` for ``l < levels``, ffi/sample_filter.h
  MassLevels; ``above``: ``[..., l, *width]``, the summed masses of the levels before): each
  level's per-digit masses (integers, as uint32 limbs) are summed over the shards
  (``psum``: exact in any order), the next level refines the digit where the running mass
  reaches p; the last level's counts per digit are gathered per shard, since that key's ties
  are kept in global column order. Then each shard draws over its kept tokens
  (``draw(keys, logits, *params, offsets, tops, above, counts)``). Exchanged per row: the
  shards' tops, 2 x 2048 x 3 uint32 of masses (32-bit keys; 5 x for float64's), 1024 counts
  per shard, and the pairs; never the logits. ``levels`` 0 (no top_p given) skips the levels;
  rows with p >= 1 send zeros. The sample is the unsharded one, bit for bit: the same z_max,
  integer sums, bar and noise (global columns)."""
  temperature, _, top_p, _ = params
  tops, _ = first_tokens(logits, temperature, 1)
  bits = lax.bitcast_convert_type(tops, _BITS[tops.dtype.itemsize])
  bits = _all_gather_invariant(bits, names, axis=bits.ndim - 1)
  tops = lax.bitcast_convert_type(bits.reshape(*bits.shape[:-2], bits.shape[-2]), tops.dtype)
  if not levels:  # no top_p given: min-p needs z_max alone
    none = np.zeros((0,), np.uint32)
    return draw(keys, logits, *params, offsets, tops, none, none)
  above = jnp.zeros((*logits.shape[:-1], 0, *width), np.uint32)
  for i in range(levels - 1):
    masses = lax.psum(level(logits, temperature, top_p, tops, above, i), names)
    above = jnp.concatenate([above, masses[..., None, :, :]], axis=-3)
  counts = level(logits, temperature, top_p, tops, above, levels - 1)
  counts = _all_gather_invariant(counts, names, axis=counts.ndim - 1)
  return draw(keys, logits, *params, offsets, tops, above, counts)


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
