"""The package's JAX primitives, one contiguous block each, over one lowering helper.

``argreduce_p``: argmax/argmin (and, with ``with_value``, max/min_with_index) of the last axis
of a float array. Shapes: ``x: [..., cols] float{16,32,64}|bfloat16 -> (indices [...])`` or
``(values [...] x.dtype, indices [...])``, indices of ``index_dtype``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jax_argreduce import _dispatch, _ffi, _params, _sharding, _xla
from jax_argreduce._compat import (CompoundFactor, Primitive, SdyShardingRule, ShapedArray,
                                   Zero, ad, apply_primitive, batching, is_constant_dim,
                                   is_constant_shape, mlir, sdy_sharding_rule_to_mlir, typeof,
                                   use_shardy)


def lower_handler(ctx, op: str, platform: str, operands, operand_factors, result_factors,
                  workspace_bytes: int | None = None, **attrs):
  """Lowers to the FFI handler ``op`` on ``platform``: one custom call whose results are
  ``ctx.avals_out`` plus, on CUDA, a workspace of ``workspace_bytes`` (default: the order-key
  ops' and the sampler's bound, _ffi.CUDA_WORKSPACE_BYTES; XLA-owned bytes assigned at compile
  time, so the handler allocates nothing at run time and is safe in command buffers; dropped
  here).

  ``operand_factors`` / ``result_factors``: per operand / result, a tuple of Shardy factor
  names per dimension, where names shared between operands and results are the row dimensions
  (kept sharded) and every other name is replicated. Attributes are passed as typed by the
  caller (bool -> pred, np.int64 -> i64, ...).
  """
  avals_out = list(ctx.avals_out)
  workspace = platform == "cuda"
  if workspace:
    if workspace_bytes is None:
      workspace_bytes = _ffi.CUDA_WORKSPACE_BYTES
    avals_out.append(ShapedArray((workspace_bytes,), np.uint8))
    result_factors = (*result_factors, ("workspace",))
  results = jax.ffi.ffi_lowering(_ffi.target(op, platform))(
      ctx.replace(avals_out=avals_out), *operands, **attrs)
  # The rule lets row shardings propagate; partitioning the call is _sharding's job. Only for
  # static shapes: with symbolic dimensions the call carries extra shape operands.
  if use_shardy() and all(is_constant_shape(a.shape) for a in ctx.avals_in):
    shared = (set().union(*map(_factor_names, result_factors))
              & set().union(*map(_factor_names, operand_factors)))
    replicated = tuple(dict.fromkeys(
        f for factors in (*operand_factors, *result_factors) for f in _factor_names(factors)
        if f not in shared))
    rule = SdyShardingRule(tuple(operand_factors), tuple(result_factors),
                           need_replication_factors=replicated)
    results[0].owner.attributes["sdy.sharding_rule"] = sdy_sharding_rule_to_mlir(
        rule, [v.type for v in operands], [r.type for r in results])
  results = results[:len(ctx.avals_out)]
  if workspace:
    # Behind an optimization barrier (no kernel, no copy): XLA's GPU dynamic-slice fusion
    # pass takes any FFI call whose result reaches an aligned dynamic-update-slice through
    # no-op ops (e.g. a lax.scan stacking the tokens of 32, 64, ... rows per step) and clones
    # the call into a fusion writing the slice, keeping the original for the result's other
    # users: the call then runs twice (NOTES.md try 70). The barrier is not a no-op to it, so
    # the call stays single.
    results = mlir.lower_fun(lambda *r: jax.lax.optimization_barrier(r),
                             multiple_results=True)(
        ctx.replace(avals_in=ctx.avals_out), *results)
  return results


def register_lowerings(primitive, lowering) -> None:
  """Registers ``lowering(ctx, *args, platform=..., **params)`` for the CPU and CUDA platforms
  (their handlers) and for every other platform (platform "": no target, the XLA path)."""
  mlir.register_lowering(primitive, functools.partial(lowering, platform=""))
  for platform in ("cpu", "cuda"):
    mlir.register_lowering(primitive, functools.partial(lowering, platform=platform),
                           platform=platform)


def _factor_names(factors) -> list[str]:
  """The factor names of one operand's mapping (a CompoundFactor, for a dimension that is
  several factors, contributes each of its names)."""
  return [n for f in factors for n in ((f,) if isinstance(f, str) else f)]


def _row_factors(ndim: int) -> tuple[str, ...]:
  return tuple(f"r{i}" for i in range(ndim))


# ---------------------------------------------------------------------------------------------
# argreduce_p: argmax / argmin / max_with_index / min_with_index over the last axis.

argreduce_p = Primitive("jax_argreduce_argreduce")
argreduce_p.multiple_results = True
argreduce_p.def_impl(lambda x, **params: apply_primitive(argreduce_p, x, **params))


def _op_name(is_min: bool, with_value: bool) -> str:
  return ("min" if is_min else "max") + "_with_index" if with_value else (
      "argmin" if is_min else "argmax")


def _argreduce_abstract_eval(x, *, is_min, with_value, index_dtype, method):
  del is_min, method
  # lax.argmax's rule: the row dimensions keep x's sharding (explicit mesh axes, manual
  # varying axes); the reduced axis is dropped.
  indices = jax.lax.argmax_p.abstract_eval(x, axes=(x.ndim - 1,),
                                           index_dtype=np.dtype(index_dtype))[0]
  return [indices.update(dtype=x.dtype), indices] if with_value else [indices]


argreduce_p.def_abstract_eval(_argreduce_abstract_eval)


def _argreduce_xla(x, *, is_min, with_value, index_dtype):
  if with_value:
    return list(_xla.xla_max_with_index(x, is_min=is_min, index_dtype=index_dtype))
  return [_xla.xla_argreduce(x, is_min=is_min, index_dtype=index_dtype)]


def _argreduce_lowering(ctx, x, *, is_min, with_value, index_dtype, method, platform):
  # A sharded input never reaches the opaque call whole: shard_map over its explicit axes, or
  # the XLA path where XLA decides the split (_sharding).
  partitioned = _sharding.lower_partitioned(ctx, x, is_min=is_min, with_value=with_value,
                                            index_dtype=index_dtype, method=method)
  if partitioned is not None:
    return partitioned
  aval = ctx.avals_in[0]
  op = _op_name(is_min, with_value)
  if _dispatch.route(op, platform, aval.shape, aval.dtype, method) == "xla":
    return mlir.lower_fun(
        lambda v: _argreduce_xla(v, is_min=is_min, with_value=with_value,
                                 index_dtype=index_dtype), multiple_results=True)(ctx, x)
  rows = _row_factors(aval.ndim - 1)
  return lower_handler(ctx, "max_with_index" if with_value else "argreduce", platform, [x],
                       [rows + ("cols",)], [rows] * len(ctx.avals_out), is_min=bool(is_min))


register_lowerings(argreduce_p, _argreduce_lowering)


def batch_as_rows(primitive):
  """The batching rule of a primitive over the last axis of its one operand: a batch dimension
  other than that axis is just more rows (no data movement; it keeps its place in every
  result, whose last axis replaces the operand's); a batched last axis moves to the front."""
  def rule(batched_args, batch_dims, **params):
    (x,), (bdim,) = batched_args, batch_dims
    if bdim == x.ndim - 1:
      x = _xla.moveaxis_exact(x, bdim, 0)
      bdim = 0
    outs = primitive.bind(x, **params)
    return outs, [bdim] * len(outs)
  return rule


batching.primitive_batchers[argreduce_p] = batch_as_rows(argreduce_p)


def _argreduce_jvp(primals, tangents, *, with_value, **params):
  (x,), (t,) = primals, tangents
  outs = argreduce_p.bind(x, with_value=with_value, **params)
  indices = outs[-1]
  # Indices are not differentiable: a symbolic zero (float0) tangent.
  index_tangent = Zero(typeof(indices).to_tangent_aval())
  if not with_value:
    return outs, [index_tangent]
  if type(t) is Zero:
    value_tangent = Zero(typeof(outs[0]).to_tangent_aval())
  else:  # the input's tangent at the winning index
    value_tangent = _sharding.take_last_axis(t, indices)
  return outs, [value_tangent, index_tangent]


ad.primitive_jvps[argreduce_p] = _argreduce_jvp


def argreduce_last_axis(x, *, is_min: bool, with_value: bool, index_dtype,
                        method: str = "auto"):
  """Binds ``argreduce_p`` on ``x`` (reduction axis last): ``[indices]`` or
  ``[values, indices]``."""
  if method not in _dispatch.METHODS:
    raise ValueError(f"method must be one of {_dispatch.METHODS}, got {method!r}")
  return argreduce_p.bind(x, is_min=bool(is_min), with_value=bool(with_value),
                          index_dtype=np.dtype(index_dtype), method=method)



# ---------------------------------------------------------------------------------------------
# categorical_p: the fused Gumbel-max sampler (SPEC §1c) over the last axis of the logits.
# Operands, for logits with n batch dimensions (row-major rows; the layout the handler sees):
#   keys uint32 [*kb, 2] with kb = batch[:j] + (1,) * (n - j): key k covers a contiguous block
#     of rows_per_key = prod(batch[j:]) rows and a row's counter is its position among them
#     (j = 0: one key for the call, the row index is the counter; j = n: one key per row;
#     0 < j < n: what vmap makes of a one-key call);
#   logits [*batch, cols];
#   temperature [*batch] (per row) or [1] * n (float32; float64 for float64 logits);
#   offsets int32 [2]: the (row, column) counters of this block's first row and column in the
#     global logits (shards, _sharding), added to the handler's counters; or int32 [0]
#     (NO_OFFSETS): both zero. Unsharded calls pass the empty array: XLA turns a constant
#     [0, 0] into a broadcast kernel (one more launch before the handler's).
# The handler takes keys [num_keys, 2] and temperature [1] or [rows]: the lowering flattens them
# (free), so up to there they keep the batch layout, and its sharding. Results: noisy_max
# [*batch] (the temperature's dtype; the row's largest logit / T + G) and indices [*batch].

NO_OFFSETS = np.zeros((0,), np.int32)

categorical_p = Primitive("jax_argreduce_categorical")
categorical_p.multiple_results = True
categorical_p.def_impl(
    lambda *args, **params: apply_primitive(categorical_p, *args, **params))


def key_prefix(keys_shape, batch) -> int | None:
  """j of a keys operand of shape ``keys_shape`` (``kb + (2,)``, kb = batch[:j] + ones), the
  largest such j; None when the shape has another form."""
  kb, batch = tuple(keys_shape[:-1]), tuple(batch)
  if len(keys_shape) != len(batch) + 1 or keys_shape[-1] != 2:
    return None
  j = 0
  while j < len(batch) and kb[j] == batch[j]:
    j += 1
  return j if all(d == 1 for d in kb[j:]) else None


def temperature_per_row(temperature_shape, batch) -> bool:
  return len(batch) > 0 and tuple(temperature_shape) == tuple(batch)


def _categorical_abstract_eval(keys, logits, temperature, offsets, *, index_dtype, method):
  del method
  batch = logits.shape[:-1]
  if key_prefix(keys.shape, batch) is None or keys.dtype != np.uint32:
    raise TypeError(f"categorical_p: keys must be uint32 [*kb, 2] with kb a prefix of the "
                    f"batch shape {batch} padded with ones, got {keys.str_short()}")
  if not (temperature_per_row(temperature.shape, batch)
          or tuple(temperature.shape) == (1,) * len(batch)):
    raise TypeError(f"categorical_p: temperature must have shape {batch} or "
                    f"{(1,) * len(batch)}, got {temperature.str_short()}")
  if offsets.shape not in ((2,), (0,)) or offsets.dtype != np.int32:
    raise TypeError(f"categorical_p: offsets must be int32[2] (or int32[0]: none), got "
                    f"{offsets.str_short()}")
  # lax.argmax's rule: the row dimensions keep the logits' sharding (explicit mesh axes, manual
  # varying axes); categorical_last_axis makes every operand vary along the same manual axes.
  indices = jax.lax.argmax_p.abstract_eval(logits, axes=(logits.ndim - 1,),
                                           index_dtype=np.dtype(index_dtype))[0]
  return [indices.update(dtype=temperature.dtype, weak_type=False), indices]


categorical_p.def_abstract_eval(_categorical_abstract_eval)


def _threefry_uniform(k0, k1, row, col, noise_dtype):
  """u strictly inside (0, 1) from threefry2x32 keyed by (k0, k1) at counter (row, col)."""
  from jax.extend.random import threefry2x32_p
  y0, y1 = threefry2x32_p.bind(k0, k1, row, col)
  if noise_dtype == np.float64:  # 52 random bits (float64 logits: x64 is on)
    bits = (y0.astype(np.uint64) << np.uint64(32) | y1.astype(np.uint64)) >> np.uint64(12)
    return (bits.astype(np.float64) + 0.5) * 2.0**-52
  return ((y0 >> np.uint32(9)).astype(np.float32) + np.float32(0.5)) * np.float32(2.0**-23)


def _categorical_xla(keys, logits, temperature, offsets, *, index_dtype):
  """Platforms without the handler, and method="xla": Gumbel noise from threefry2x32 keyed by
  our key bits at counter (row counter, global column) — the handler's counters, offsets
  included, so sharded and unsharded calls agree here too; the same distribution, not the same
  samples as the handlers (another generator). Materialized."""
  batch, cols = logits.shape[:-1], logits.shape[-1]
  n, noise_dtype = len(batch), temperature.dtype
  shape = logits.shape
  # The row counter, as the handler's (flat row % rows per key): the row's position within
  # the rows that share its key. Keys vary over leading batch dimensions only ([1, ...] for
  # one key, the batch shape for a key per row, [vmapped..., 1, ...] under vmap), so that is
  # the flat position over the dimensions after the last where keys vary; symbolic too.
  lead = max((d + 1 for d, k in enumerate(keys.shape[:-1])
              if not (is_constant_dim(k) and k == 1)), default=0)
  row = jax.lax.broadcasted_iota(
      np.uint32, (math.prod(batch[:lead]), math.prod(batch[lead:]), cols), 1).reshape(shape)
  row_off, col_off = (offsets[0], offsets[1]) if offsets.shape == (2,) else (0, 0)
  row = jnp.asarray(row_off).astype(np.uint32) + row
  col = jnp.asarray(col_off).astype(np.uint32) + jax.lax.broadcasted_iota(np.uint32, shape, n)
  key = jnp.broadcast_to(keys, (*batch, 2))
  k0 = jnp.broadcast_to(key[..., 0:1], shape)
  k1 = jnp.broadcast_to(key[..., 1:2], shape)
  g = -jnp.log(-jnp.log(_threefry_uniform(k0, k1, row, col, noise_dtype)))
  t = jnp.broadcast_to(temperature, batch)[..., None]
  x = logits.astype(noise_dtype)
  # Infinite logits stay infinite whatever T (1 / T may be 0: T = inf, or flushed to 0 by
  # XLA's arithmetic), so -inf is never drawn; a NaN logit stays NaN and wins, as in argmax.
  y = jnp.where(t == 0, x, jnp.where(jnp.isinf(x), x, x * (1 / t)) + g)
  values, indices = _xla.xla_max_with_index(y, is_min=False, index_dtype=index_dtype)
  return [values, indices]


def _flat_sampler_operands(ctx, keys, temperature):
  """keys [num_keys, 2] and temperature [1 | rows], the handler's layout (row-major reshapes),
  and the matching ctx. Traced without the operands' sharding types: a reshape that merges a
  split batch dimension is refused on explicit types, while as HLO it is what the partitioner
  sees anyway (and, partitioned by _sharding, the blocks here are local)."""
  k_aval, logits_aval, t_aval, o_aval = ctx.avals_in
  plain = lambda a: ShapedArray(a.shape, a.dtype)
  flat_k = ShapedArray((math.prod(k_aval.shape[:-1]), 2), k_aval.dtype)  # symbolic dims too
  flat_t = ShapedArray((math.prod(t_aval.shape),), t_aval.dtype)
  sub = ctx.replace(avals_in=[plain(k_aval), plain(t_aval)], avals_out=[flat_k, flat_t])
  keys, temperature = mlir.lower_fun(
      lambda k, t: (k.reshape(flat_k.shape), t.reshape(flat_t.shape)),
      multiple_results=True)(sub, keys, temperature)
  return keys, temperature, ctx.replace(avals_in=[flat_k, logits_aval, flat_t, o_aval])


def _categorical_lowering(ctx, keys, logits, temperature, offsets, *, index_dtype, method,
                          platform):
  # A sharded input never reaches the opaque call whole: shard_map over its explicit axes,
  # global row and column offsets per block (_sharding).
  partitioned = _sharding.lower_categorical_partitioned(
      ctx, keys, logits, temperature, offsets, index_dtype=index_dtype, method=method)
  if partitioned is not None:
    return partitioned
  k_aval, aval, t_aval, _ = ctx.avals_in
  if _dispatch.route("categorical", platform, aval.shape, aval.dtype, method) == "xla":
    return mlir.lower_fun(
        lambda *a: _categorical_xla(*a, index_dtype=index_dtype),
        multiple_results=True)(ctx, keys, logits, temperature, offsets)
  batch = aval.shape[:-1]
  n = len(batch)
  rows = _row_factors(n)
  # Shardy rule (only where XLA, not the type, splits the call: Auto axes): a call on a block of
  # rows is the same call only with one key per row (its counter is 0 + offsets[0], whatever the
  # block), keys and per-row temperatures split with the rows; with shared keys a row's counter
  # is its position, so the rows are replicated (gathered). The vocab is always replicated (the
  # column offsets are the call's). Keys and temperature are tiny.
  if n > 0 and key_prefix(k_aval.shape, batch) == n:
    # The flat key dimension is the rows' product: a compound of the rows longer than 1 (Shardy
    # refuses a size-1 factor in a compound; a size-1 row stays the logits' own factor).
    long_rows = [r for r, d in zip(rows, batch) if not (is_constant_dim(d) and d == 1)] or rows[:1]
    row_dim = long_rows[0] if len(long_rows) == 1 else CompoundFactor(*long_rows)
    key_f, logit_f = (row_dim, "kw"), rows + ("cols",)
    t_f = (row_dim,) if temperature_per_row(t_aval.shape, batch) else ("nt",)
  else:
    key_f, logit_f, t_f = ("nk", "kw"), tuple(f"x{i}" for i in range(n)) + ("cols",), ("nt",)
  keys, temperature, flat_ctx = _flat_sampler_operands(ctx, keys, temperature)
  return lower_handler(flat_ctx, "categorical", platform, [keys, logits, temperature, offsets],
                       [key_f, logit_f, t_f, ("noff",)], [rows, rows])


register_lowerings(categorical_p, _categorical_lowering)


def _categorical_batching(batched_args, batch_dims, **params):
  keys, logits, temperature, offsets = batched_args
  kb, lb, tb, ob = batch_dims
  if ob is not None:
    raise NotImplementedError("categorical: batched offsets are not supported")
  size = next(a.shape[d] for a, d in zip(batched_args, batch_dims)
              if d is not None)
  # The batch becomes the leading batch dimension; every batch element gets its own keys so
  # that row r of element b draws exactly what it draws unbatched (its counter stays r): keys
  # [size, *kb, 2] is the prefix form again.
  if lb is None:
    logits = jnp.broadcast_to(logits, (size, *logits.shape))
  elif lb != 0:
    logits = _xla.moveaxis_exact(logits, lb, 0)
  keys = (jnp.moveaxis(keys, kb, 0) if kb is not None
          else jnp.broadcast_to(keys, (size, *keys.shape)))
  batch = logits.shape[:-1]
  if tb is not None:
    temperature = jnp.broadcast_to(jnp.moveaxis(temperature, tb, 0), batch)
  elif temperature_per_row(temperature.shape, batch[1:]):
    temperature = jnp.broadcast_to(temperature, batch)
  else:  # shared: [1] * (n + 1)
    temperature = temperature.reshape((1,) * len(batch))
  outs = categorical_p.bind(keys, logits, temperature, offsets, **params)
  return outs, [0, 0]


batching.primitive_batchers[categorical_p] = _categorical_batching


def _categorical_jvp(primals, tangents, **params):
  del tangents
  outs = categorical_p.bind(*primals, **params)
  # A sample is not differentiable: symbolic zero tangents (float0 for the indices).
  return outs, [Zero(typeof(o).to_tangent_aval()) for o in outs]


ad.primitive_jvps[categorical_p] = _categorical_jvp


def _varying(x) -> frozenset:
  mat = getattr(typeof(x), "manual_axis_type", None)
  return frozenset(getattr(mat, "varying", None) or ())


def categorical_last_axis(keys, logits, temperature, offsets, *, index_dtype,
                          method: str = "auto"):
  """Binds ``categorical_p``: ``[noisy_max, indices]`` over the last axis of ``logits``
  (operands as the block comment above says)."""
  if method not in _dispatch.METHODS:
    raise ValueError(f"method must be one of {_dispatch.METHODS}, got {method!r}")
  operands = [keys, logits, temperature, offsets]
  # Inside shard_map (check_vma): every operand varies along the union of their manual axes,
  # so the results' type does too (a key that varies makes the sample vary).
  varying = frozenset().union(*map(_varying, operands))
  if varying:
    operands = [jax.lax.pcast(a, tuple(sorted(varying - _varying(a), key=str)), to="varying")
                if varying - _varying(a) else a for a in operands]
  return categorical_p.bind(*operands, index_dtype=np.dtype(index_dtype), method=method)


# ---------------------------------------------------------------------------------------------
# top_k_p: the k first elements of the last axis (SPEC §1e), sorted: values (x's dtype, bit for
# bit) and indices (index_dtype), both [..., k]. x: [..., cols] float{16,32,64}|bfloat16,
# 1 <= k <= cols (k == 0 never reaches the primitive).

top_k_p = Primitive("jax_argreduce_top_k")
top_k_p.multiple_results = True
top_k_p.def_impl(lambda x, **params: apply_primitive(top_k_p, x, **params))


def _top_k_abstract_eval(x, *, k, index_dtype, method):
  del method
  # The rows keep x's sharding (explicit mesh axes, manual varying axes); the k axis is whole
  # on every device, also where x's last axis is split (the partition rule merges the shards).
  sharding = x.sharding
  spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
  values = x.update(shape=(*x.shape[:-1], k), sharding=sharding.update(spec=P(*spec[:-1], None)))
  return [values, values.update(dtype=np.dtype(index_dtype), weak_type=False)]


top_k_p.def_abstract_eval(_top_k_abstract_eval)


def _top_k_partitioned(ctx, x, *, k, index_dtype, method):
  """A sharded input never reaches the opaque call whole: where its type splits it over
  explicit mesh axes, a shard_map over them in which each block takes its own top k (rows
  split: that is the answer; a split last axis: k candidates per shard with global indices,
  one exchange of [rows, shards, k], the exact merge, _sharding.split_top_k); where XLA
  decides the split (Auto axes), the exact XLA path, which XLA partitions. Else None."""
  aval = ctx.avals_in[0]
  if not is_constant_shape(aval.shape):
    return None
  dims = _sharding.explicit_spec(aval)
  if dims is None:
    if method != "kernel" and _sharding.sharding_unknown(ctx, aval):
      return mlir.lower_fun(
          lambda v: list(_xla.xla_top_k(v, k, index_dtype=index_dtype)),
          multiple_results=True)(ctx, x)
    return None
  mesh = aval.sharding.mesh
  row_dims, split = dims[:-1], dims[-1]

  def local(block, kk):  # the block's top kk (manual avals: no partitioning again)
    return top_k_last_axis(block, kk, index_dtype=index_dtype, method=method)

  def body(block):
    if split:
      return list(_sharding.split_top_k(block, split, k, local))
    return local(block, k)

  out_spec = _sharding.pspec(row_dims + ((),))
  fn = jax.shard_map(body, mesh=mesh, in_specs=_sharding.pspec(dims),
                     out_specs=[out_spec, out_spec],
                     axis_names=_sharding.manual_axes(mesh, dims))
  return mlir.lower_fun(fn, multiple_results=True)(ctx, x)


def _top_k_lowering(ctx, x, *, k, index_dtype, method, platform):
  partitioned = _top_k_partitioned(ctx, x, k=k, index_dtype=index_dtype, method=method)
  if partitioned is not None:
    return partitioned
  aval = ctx.avals_in[0]
  if _dispatch.route("top_k", platform, aval.shape, aval.dtype, method, k=k) == "xla":
    return mlir.lower_fun(lambda v: list(_xla.xla_top_k(v, k, index_dtype=index_dtype)),
                          multiple_results=True)(ctx, x)
  rows = _row_factors(aval.ndim - 1)
  workspace = None
  if platform == "cuda":  # route: static shapes only on CUDA
    workspace = _ffi.cuda_workspace_bytes("top_k", math.prod(aval.shape[:-1]), aval.shape[-1],
                                          k, aval.dtype.itemsize)
  return lower_handler(ctx, "top_k", platform, [x], [rows + ("cols",)],
                       [rows + ("k",), rows + ("k",)], workspace_bytes=workspace,
                       k=np.int64(k))


register_lowerings(top_k_p, _top_k_lowering)


batching.primitive_batchers[top_k_p] = batch_as_rows(top_k_p)


def _top_k_jvp(primals, tangents, **params):
  (x,), (t,) = primals, tangents
  values, indices = top_k_p.bind(x, **params)
  index_tangent = Zero(typeof(indices).to_tangent_aval())
  if type(t) is Zero:
    return [values, indices], [Zero(typeof(values).to_tangent_aval()), index_tangent]
  # The input's tangent at the k winning indices.
  return [values, indices], [_sharding.take_last_axis(t, indices), index_tangent]


ad.primitive_jvps[top_k_p] = _top_k_jvp


def top_k_last_axis(x, k: int, *, index_dtype, method: str = "auto"):
  """Binds ``top_k_p`` on ``x`` (the axis last), 1 <= k <= cols: ``[values, indices]``."""
  return top_k_p.bind(x, k=int(k), index_dtype=np.dtype(index_dtype),
                      method=_dispatch.check_method(method))


# ---------------------------------------------------------------------------------------------
# filtered_categorical_p: categorical with top-k, top-p and min-p per row (SPEC §1f). Operands
# as categorical_p's, with the filters between temperature and offsets:
#   keys, logits, temperature, top_k (int32), top_p (float32), min_p (float32), offsets;
# each filter [*batch] (per row) or [1] * n (shared), as temperature (_params). Results as
# categorical_p's: noisy_max (the drawn token's y) and indices.
# Sharded logits go to the handler whole (XLA gathers the vocab, and the rows unless the keys
# are per row): exact, not yet partitioned per shard.

filtered_categorical_p = Primitive("jax_argreduce_filtered_categorical")
filtered_categorical_p.multiple_results = True
filtered_categorical_p.def_impl(
    lambda *args, **params: apply_primitive(filtered_categorical_p, *args, **params))

_FILTER_DTYPES = (np.dtype(np.int32), np.dtype(np.float32), np.dtype(np.float32))


def _filtered_abstract_eval(keys, logits, temperature, top_k, top_p, min_p, offsets, **params):
  batch = logits.shape[:-1]
  for name, f, dtype in zip(("top_k", "top_p", "min_p"), (top_k, top_p, min_p), _FILTER_DTYPES):
    if f.dtype != dtype or not (_params.per_row(f.shape, batch)
                                or tuple(f.shape) == (1,) * len(batch)):
      raise TypeError(f"filtered_categorical_p: {name} must be {dtype} of shape {batch} or "
                      f"{(1,) * len(batch)}, got {f.str_short()}")
  return _categorical_abstract_eval(keys, logits, temperature, offsets, **params)


filtered_categorical_p.def_abstract_eval(_filtered_abstract_eval)


def _kept_xla(logits, temperature, top_k, top_p, min_p):
  """The kept set (SPEC §1f) by a sort of each row, for platforms without the handler: the
  same prefix of the z order, with masses from XLA's exp summed in float32 (so where sums
  round differently, the top-p boundary may differ from the handlers' exact one)."""
  batch, cols = logits.shape[:-1], logits.shape[-1]
  noise = temperature.dtype
  x = logits.astype(noise)
  t = jnp.broadcast_to(temperature, batch)[..., None]
  z = jnp.where(jnp.isinf(x), x, x * (1 / t))
  col = jax.lax.broadcasted_iota(np.int32, x.shape, x.ndim - 1)
  key = _xla.ordered_key(z, False)
  _, order = jax.lax.sort((-key, col), dimension=x.ndim - 1, num_keys=2)  # NaN, larger first
  zs = jnp.take_along_axis(z, order, axis=-1)
  z_max = zs[..., :1]
  e = jnp.where(zs == z_max, 1.0, jnp.exp((zs - z_max).astype(np.float32)))
  place = jax.lax.broadcasted_iota(np.int32, x.shape, x.ndim - 1)
  k = jnp.broadcast_to(top_k, batch)[..., None]
  in_k = (k <= 0) | (place < k)
  w = jnp.where(in_k, e, 0.0)
  before = jnp.cumsum(w, axis=-1) - w
  p = jnp.broadcast_to(top_p, batch)[..., None]
  in_p = ~(p < 1) | (before < p * jnp.sum(w, axis=-1, keepdims=True))
  m = jnp.broadcast_to(min_p, batch)[..., None]
  in_m = ~(m > 0) | (e >= m)
  # A NaN or -inf top keeps only itself; T == 0 draws the argmax (nothing to filter).
  top_only = jnp.isnan(z_max) | (z_max == -jnp.inf)
  kept_sorted = (place == 0) | (in_k & in_p & in_m & ~top_only) | (t == 0)
  rank = jnp.argsort(order, axis=-1)
  del cols
  return jnp.take_along_axis(kept_sorted, rank, axis=-1)


def _filtered_xla(keys, logits, temperature, top_k, top_p, min_p, offsets, *, index_dtype):
  kept = _kept_xla(logits, temperature, top_k, top_p, min_p)
  masked = jnp.where(kept, logits, jnp.array(-jnp.inf, logits.dtype))
  return _categorical_xla(keys, masked, temperature, offsets, index_dtype=index_dtype)


def _flat_row_params(ctx, params, first: int):
  """Row-parameter operands ctx.avals_in[first:first + len(params)] flattened to [1 | rows]
  (the handler's layout), and the ctx with those avals replaced."""
  avals = list(ctx.avals_in)
  plain = [ShapedArray(a.shape, a.dtype) for a in avals[first:first + len(params)]]
  flat = [ShapedArray((math.prod(a.shape),), a.dtype) for a in plain]
  sub = ctx.replace(avals_in=plain, avals_out=flat)
  params = mlir.lower_fun(lambda *ps: [p.reshape(f.shape) for p, f in zip(ps, flat)],
                          multiple_results=True)(sub, *params)
  avals[first:first + len(params)] = flat
  return list(params), ctx.replace(avals_in=avals)


def _filtered_lowering(ctx, keys, logits, temperature, top_k, top_p, min_p, offsets, *,
                       index_dtype, method, platform):
  k_aval, aval, t_aval = ctx.avals_in[:3]
  if _dispatch.route("filtered_categorical", platform, aval.shape, aval.dtype, method) == "xla":
    return mlir.lower_fun(
        lambda *a: _filtered_xla(*a, index_dtype=index_dtype),
        multiple_results=True)(ctx, keys, logits, temperature, top_k, top_p, min_p, offsets)
  batch = aval.shape[:-1]
  n = len(batch)
  rows = _row_factors(n)
  # As categorical's rule: rows stay split only with one key per row; the vocab is replicated.
  if n > 0 and key_prefix(k_aval.shape, batch) == n:
    long_rows = [r for r, d in zip(rows, batch) if not (is_constant_dim(d) and d == 1)] or rows[:1]
    row_dim = long_rows[0] if len(long_rows) == 1 else CompoundFactor(*long_rows)
    key_f, logit_f = (row_dim, "kw"), rows + ("cols",)
    param_f = [(row_dim,) if _params.per_row(a.shape, batch) else (f"n{i}",)
               for i, a in enumerate(ctx.avals_in[2:6])]
  else:
    key_f, logit_f = ("nk", "kw"), tuple(f"x{i}" for i in range(n)) + ("cols",)
    param_f = [(f"n{i}",) for i in range(4)]
  # Keys [num_keys, 2]; temperature and the filters [1 | rows].
  k_plain = ShapedArray(k_aval.shape, k_aval.dtype)
  flat_k = ShapedArray((math.prod(k_aval.shape[:-1]), 2), k_aval.dtype)
  (keys,) = mlir.lower_fun(lambda k: [k.reshape(flat_k.shape)], multiple_results=True)(
      ctx.replace(avals_in=[k_plain], avals_out=[flat_k]), keys)
  ctx = ctx.replace(avals_in=[flat_k, *ctx.avals_in[1:]])
  params, flat_ctx = _flat_row_params(ctx, [temperature, top_k, top_p, min_p], 2)
  del t_aval
  return lower_handler(flat_ctx, "filtered_categorical", platform,
                       [keys, logits, *params, offsets],
                       [key_f, logit_f, *param_f, ("noff",)], [rows, rows],
                       k_bound=np.int64(0))


register_lowerings(filtered_categorical_p, _filtered_lowering)


def _filtered_batching(batched_args, batch_dims, **params):
  keys, logits, *row_params, offsets = batched_args
  kb, lb, *pb, ob = batch_dims
  if ob is not None:
    raise NotImplementedError("categorical: batched offsets are not supported")
  size = next(a.shape[d] for a, d in zip(batched_args, batch_dims) if d is not None)
  # As categorical's: the batch leads, every element its own keys (its rows' counters kept).
  if lb is None:
    logits = jnp.broadcast_to(logits, (size, *logits.shape))
  elif lb != 0:
    logits = _xla.moveaxis_exact(logits, lb, 0)
  keys = (jnp.moveaxis(keys, kb, 0) if kb is not None
          else jnp.broadcast_to(keys, (size, *keys.shape)))
  batch = logits.shape[:-1]
  out = []
  for a, d in zip(row_params, pb):
    if d is not None:
      out.append(jnp.broadcast_to(jnp.moveaxis(a, d, 0), batch))
    elif _params.per_row(a.shape, batch[1:]):
      out.append(jnp.broadcast_to(a, batch))
    else:
      out.append(a.reshape((1,) * len(batch)))
  return filtered_categorical_p.bind(keys, logits, *out, offsets, **params), [0, 0]


batching.primitive_batchers[filtered_categorical_p] = _filtered_batching


def _filtered_jvp(primals, tangents, **params):
  del tangents
  outs = filtered_categorical_p.bind(*primals, **params)
  return outs, [Zero(typeof(o).to_tangent_aval()) for o in outs]


ad.primitive_jvps[filtered_categorical_p] = _filtered_jvp


def filtered_categorical_last_axis(keys, logits, temperature, top_k, top_p, min_p, *,
                                   index_dtype, method: str = "auto"):
  """Binds ``filtered_categorical_p``: ``[noisy_max, indices]`` over the last axis of
  ``logits`` (operands as the block comment above says; no offsets: an unsharded call)."""
  operands = [keys, logits, temperature, top_k, top_p, min_p, NO_OFFSETS]
  varying = frozenset().union(*map(_varying, operands))
  if varying:
    operands = [jax.lax.pcast(a, tuple(sorted(varying - _varying(a), key=str)), to="varying")
                if varying - _varying(a) else a for a in operands]
  return filtered_categorical_p.bind(*operands, index_dtype=np.dtype(index_dtype),
                                     method=_dispatch.check_method(method))
