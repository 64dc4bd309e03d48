"""The package's JAX primitives, one contiguous block each, over two handler helpers.

A block holds a primitive's abstract eval, lowering, batching and JVP rules and its partition
rule: where the input's type splits it over explicit mesh axes, a ``jax.shard_map`` over them
(with _sharding's pure pieces: spec reading, global offsets, exchange, exact merge) in which each
block runs the path _dispatch routes its shape to, called directly (:func:`call_handler`, or the
exact XLA path), never the primitive bound again; where XLA splits it (Auto axes), the path
_dispatch gives such calls. The handler is lowered by :func:`lower_handler` (the primitive's own
call, with its Shardy rule) or, inside a partition rule, traced by :func:`call_handler`.

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


# handler_call_p: one call of an FFI handler as a traced op, lowered by lower_handler alone (no
# partition rule, no routing): what a partition rule's blocks call (call_handler).
handler_call_p = Primitive("jax_argreduce_handler_call")
handler_call_p.multiple_results = True
handler_call_p.def_abstract_eval(lambda *operands, result_avals, **params: list(result_avals))


def _handler_call_lowering(ctx, *operands, op, platform, operand_factors, result_factors,
                           workspace_bytes, attrs, result_avals):
  del result_avals
  return lower_handler(ctx, op, platform, list(operands), operand_factors, result_factors,
                       workspace_bytes=workspace_bytes, **dict(attrs))


mlir.register_lowering(handler_call_p, _handler_call_lowering)


def call_handler(op: str, platform: str, operands, avals_out, operand_factors, result_factors,
                 workspace_bytes: int | None = None, **attrs):
  """The FFI handler ``op`` on ``platform`` as a traced call with results of the types
  ``avals_out`` (shapes, dtypes, sharding, varying manual axes: the primitive's abstract eval
  gives them); the other arguments as :func:`lower_handler`'s, which lowers it: the same
  custom call, attributes, Shardy rule and CUDA workspace as the primitive's own lowering.

  For the blocks of a partition rule. It binds ``handler_call_p``, whose lowering is that custom
  call and nothing else: not the op's primitive bound again (whose lowering would route and run
  its partition rule once more, a rule depending on itself), so nothing partitions the block
  further. (``jax.ffi.ffi_call`` would emit the same call without the Shardy rule, which lets
  the row shardings of mesh axes the rule left to XLA (Auto axes beside Explicit ones)
  propagate through the call.)"""
  return handler_call_p.bind(
      *operands, op=op, platform=platform,
      operand_factors=tuple(map(tuple, operand_factors)),
      result_factors=tuple(map(tuple, result_factors)), workspace_bytes=workspace_bytes,
      attrs=tuple(sorted(attrs.items())), result_avals=tuple(avals_out))


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


def _argreduce_block(x, *, is_min, with_value, index_dtype, method, platform):
  """argreduce_p's results on ``x``, a block inside its partition rule (``[indices]`` or
  ``[values, indices]``): the path _dispatch routes the block to on the lowering's
  ``platform``, called directly (:func:`call_handler` or the exact XLA path)."""
  aval = typeof(x)
  op = _op_name(is_min, with_value)
  # Mesh axes of type Auto that the rule left to XLA (a mesh of Explicit and Auto axes).
  if _sharding.sharding_unknown(aval) and _dispatch.xla_partitions(op, method):
    return _xla.xla_argreduce_partitionable(x, is_min=is_min, with_value=with_value,
                                            index_dtype=index_dtype)
  if _dispatch.route(op, platform, aval.shape, aval.dtype, method) == "xla":
    return _argreduce_xla(x, is_min=is_min, with_value=with_value, index_dtype=index_dtype)
  avals_out = _argreduce_abstract_eval(aval, is_min=is_min, with_value=with_value,
                                       index_dtype=index_dtype, method=method)
  rows = _row_factors(aval.ndim - 1)
  return call_handler("max_with_index" if with_value else "argreduce", platform, [x],
                      avals_out, [rows + ("cols",)], [rows] * len(avals_out),
                      is_min=bool(is_min))


def _argreduce_partitioned(ctx, x, *, is_min, with_value, index_dtype, method, platform):
  """The partition rule (called first by the lowering): the lowered results where the input
  must not reach the opaque handler call as it is, else None (lower as usual).

  Where its type splits it over explicit mesh axes, a shard_map over them: each block reduces
  its rows (split rows: that is the answer, no collective); a split last axis reduces each
  block to its (value, local index) pairs, exchanged once as ``[rows, shards]`` and combined
  (_sharding.split_reduce). A block's result comes from :func:`_argreduce_block`: the handler
  call itself (:func:`call_handler`: handler_call_p, whose lowering is the custom call alone)
  or the exact XLA path, never argreduce_p bound again, whose lowering would route the block
  and run this rule once more inside it (a rule depending on itself). Where XLA decides the
  split (Auto axes), the exact XLA path in the form XLA partitions (_dispatch.xla_partitions).
  Symbolic shapes (jax.export): None, as before (XLA gathers a split input)."""
  aval = ctx.avals_in[0]
  if not is_constant_shape(aval.shape):
    return None
  op = _op_name(is_min, with_value)
  dims = _sharding.explicit_spec(aval)
  if dims is None:
    if (_sharding.sharding_unknown(aval, ctx.module_context.axis_context)
        and _dispatch.xla_partitions(op, method)):
      return mlir.lower_fun(functools.partial(
          _xla.xla_argreduce_partitionable, is_min=is_min, with_value=with_value,
          index_dtype=index_dtype), multiple_results=True)(ctx, x)
    return None
  mesh = aval.sharding.mesh
  split = dims[-1]
  block = functools.partial(_argreduce_block, is_min=is_min, index_dtype=index_dtype,
                            method=method, platform=platform)

  def body(b):
    if split:
      return _sharding.split_reduce(b, split, lambda v: block(v, with_value=True),
                                    is_min=is_min, with_value=with_value)
    return block(b, with_value=with_value)

  out_spec = _sharding.pspec(dims[:-1])
  fn = jax.shard_map(body, mesh=mesh, in_specs=_sharding.pspec(dims),
                     out_specs=[out_spec] * len(ctx.avals_out),
                     axis_names=_sharding.manual_axes(mesh, dims))
  return mlir.lower_fun(fn, multiple_results=True)(ctx, x)


def _argreduce_lowering(ctx, x, *, is_min, with_value, index_dtype, method, platform):
  params = dict(is_min=is_min, with_value=with_value, index_dtype=index_dtype, method=method)
  partitioned = _argreduce_partitioned(ctx, x, platform=platform, **params)
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
  ``[values, indices]`` (``method``: checked by the public op)."""
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


def _categorical_abstract_eval(keys, logits, temperature, offsets, *, index_dtype, method):
  del method
  batch = logits.shape[:-1]
  if key_prefix(keys.shape, batch) is None or keys.dtype != np.uint32:
    raise TypeError(f"categorical_p: keys must be uint32 [*kb, 2] with kb a prefix of the "
                    f"batch shape {batch} padded with ones, got {keys.str_short()}")
  if not (_params.per_row(temperature.shape, batch)
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


def _sampler_factors(k_aval, aval, t_aval):
  """The handler call's Shardy factors (lower_handler's operand and result factors) for keys,
  logits and temperature of these avals (before the flattening of keys and temperature).

  The rule matters only where XLA, not the type, splits the call (Auto axes): a call on a block
  of rows is the same call only with one key per row (its counter is 0 + offsets[0], whatever
  the block), keys and per-row temperatures split with the rows; with shared keys a row's
  counter is its position, so the rows are replicated (gathered). The vocab is always
  replicated (the column offsets are the call's). Keys and temperature are tiny."""
  batch = aval.shape[:-1]
  n = len(batch)
  rows = _row_factors(n)
  if n > 0 and key_prefix(k_aval.shape, batch) == n:
    # The flat key dimension is the rows' product: a compound of the rows longer than 1 (Shardy
    # refuses a size-1 factor in a compound; a size-1 row stays the logits' own factor).
    long_rows = [r for r, d in zip(rows, batch) if not (is_constant_dim(d) and d == 1)] or rows[:1]
    row_dim = long_rows[0] if len(long_rows) == 1 else CompoundFactor(*long_rows)
    key_f, logit_f = (row_dim, "kw"), rows + ("cols",)
    t_f = (row_dim,) if _params.per_row(t_aval.shape, batch) else ("nt",)
  else:
    key_f, logit_f, t_f = ("nk", "kw"), tuple(f"x{i}" for i in range(n)) + ("cols",), ("nt",)
  return [key_f, logit_f, t_f, ("noff",)], [rows, rows]


def _categorical_block(keys, logits, temperature, offsets, *, index_dtype, method, platform):
  """categorical_p's results ``[noisy_max, indices]`` on a block inside its partition rule
  (operands as the block comment above says; ``offsets``: the block's global counters): the
  path _dispatch routes the block to on the lowering's ``platform``, called directly
  (:func:`call_handler` on the handler's layout, or the exact XLA path)."""
  keys, logits, temperature, offsets = _vary_together([keys, logits, temperature, offsets])
  aval = typeof(logits)
  # Under Auto axes too (a mesh of Explicit and Auto axes): the op has no XLA path that XLA
  # partitions (_dispatch.xla_partitions), so it is routed as any call.
  if _dispatch.route("categorical", platform, aval.shape, aval.dtype, method) == "xla":
    return _categorical_xla(keys, logits, temperature, offsets, index_dtype=index_dtype)
  k_aval, t_aval = typeof(keys), typeof(temperature)
  avals_out = _categorical_abstract_eval(k_aval, aval, t_aval, typeof(offsets),
                                         index_dtype=index_dtype, method=method)
  # The handler's layout (row-major reshapes), as _flat_sampler_operands.
  flat_keys = keys.reshape(math.prod(keys.shape[:-1]), 2)
  flat_t = temperature.reshape(math.prod(temperature.shape))
  return call_handler("categorical", platform, [flat_keys, logits, flat_t, offsets], avals_out,
                      *_sampler_factors(k_aval, aval, t_aval))


def _categorical_partitioned(ctx, keys, logits, temperature, offsets, *, index_dtype, method,
                             platform):
  """The partition rule (called first by the lowering): where the logits' type splits them
  over explicit mesh axes, a shard_map over those axes in which each block samples with its
  global counters, so the sample is the unsharded one (_sharding.sample_plan says how the
  blocks find them), and a split vocabulary exchanges its ``[rows, shards]`` (noisy maximum,
  local index) pairs once (_sharding.sample_block). Keys and per-row temperatures are split
  with the rows (tiny; resharded to the rows' split if they come otherwise). A block's result
  comes from :func:`_categorical_block`: the handler call itself (:func:`call_handler`) or the
  exact XLA path, never categorical_p bound again (whose lowering would run this rule inside
  the block). Where XLA decides the split (Auto axes), _dispatch keeps the
  handler call (xla_partitions: the XLA path draws other samples), and XLA gathers the logits
  for it (exact). Else None: lower as usual."""
  k_aval, aval, t_aval, o_aval = ctx.avals_in
  if not all(is_constant_shape(a.shape) for a in ctx.avals_in):
    return None
  dims = _sharding.explicit_spec(aval)
  if dims is None:
    if (_sharding.sharding_unknown(aval, ctx.module_context.axis_context)
        and _dispatch.xla_partitions("categorical", method)):
      return mlir.lower_fun(lambda *a: _categorical_xla(*a, index_dtype=index_dtype),
                            multiple_results=True)(ctx, keys, logits, temperature, offsets)
    return None
  mesh = aval.sharding.mesh
  j = key_prefix(k_aval.shape, aval.shape[:-1])
  if j is None:  # pragma: no cover - the abstract eval rejects it
    return None
  plan = _sharding.sample_plan(mesh, dims, aval.shape, j,
                               (_params.per_row(t_aval.shape, aval.shape[:-1]),), index_dtype)

  def block(k, x, params, o):
    return _categorical_block(k, x, *params, o, index_dtype=index_dtype, method=method,
                              platform=platform)

  def body(kb, lb, tb, ob):
    return _sharding.sample_block(plan, kb, lb, (tb,), ob, block)

  (t_spec,) = plan.param_specs
  fn = jax.shard_map(body, mesh=mesh,
                     in_specs=(plan.key_spec, _sharding.pspec(dims), t_spec, P()),
                     out_specs=[plan.out_spec, plan.out_spec],
                     axis_names=_sharding.manual_axes(mesh, dims))

  def partitioned(k, x, t, o):
    return fn(_sharding.reshard(k, k_aval, mesh, plan.key_spec), x,
              _sharding.reshard(t, t_aval, mesh, t_spec),
              _sharding.reshard(o, o_aval, mesh, P()))

  return mlir.lower_fun(partitioned, multiple_results=True)(ctx, keys, logits, temperature,
                                                            offsets)


def _categorical_lowering(ctx, keys, logits, temperature, offsets, *, index_dtype, method,
                          platform):
  partitioned = _categorical_partitioned(ctx, keys, logits, temperature, offsets,
                                         index_dtype=index_dtype, method=method,
                                         platform=platform)
  if partitioned is not None:
    return partitioned
  k_aval, aval, t_aval, _ = ctx.avals_in
  if _dispatch.route("categorical", platform, aval.shape, aval.dtype, method) == "xla":
    return mlir.lower_fun(
        lambda *a: _categorical_xla(*a, index_dtype=index_dtype),
        multiple_results=True)(ctx, keys, logits, temperature, offsets)
  keys, temperature, flat_ctx = _flat_sampler_operands(ctx, keys, temperature)
  return lower_handler(flat_ctx, "categorical", platform, [keys, logits, temperature, offsets],
                       *_sampler_factors(k_aval, aval, t_aval))


register_lowerings(categorical_p, _categorical_lowering)


def sampler_batching(primitive):
  """The batching rule of a sampler primitive whose operands are (keys, logits, *row
  parameters, offsets) (categorical_p: the temperature; filtered_categorical_p: temperature
  and the filters). The batch becomes the leading batch dimension; every batch element gets its
  own keys so that row r of element b draws exactly what it draws unbatched (its counter stays
  r): keys [size, *kb, 2] is the prefix form again. Row parameters stay shared ([1] * (n + 1))
  unless batched or per row."""
  def rule(batched_args, batch_dims, **params):
    keys, logits, *row_params, offsets = batched_args
    kb, lb, *pb, ob = batch_dims
    if ob is not None:
      raise NotImplementedError("categorical: batched offsets are not supported")
    size = next(a.shape[d] for a, d in zip(batched_args, batch_dims) if d is not None)
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
    return primitive.bind(keys, logits, *out, offsets, **params), [0, 0]
  return rule


batching.primitive_batchers[categorical_p] = sampler_batching(categorical_p)


def _categorical_jvp(primals, tangents, **params):
  del tangents
  outs = categorical_p.bind(*primals, **params)
  # A sample is not differentiable: symbolic zero tangents (float0 for the indices).
  return outs, [Zero(typeof(o).to_tangent_aval()) for o in outs]


ad.primitive_jvps[categorical_p] = _categorical_jvp


def _varying(x) -> frozenset:
  mat = getattr(typeof(x), "manual_axis_type", None)
  return frozenset(getattr(mat, "varying", None) or ())


def _vary_together(operands) -> list:
  """Inside shard_map (check_vma): every operand made to vary along the union of their manual
  axes, so the results' type does too (a key that varies makes the sample vary)."""
  varying = frozenset().union(*map(_varying, operands))
  if varying:
    operands = [jax.lax.pcast(a, tuple(sorted(varying - _varying(a), key=str)), to="varying")
                if varying - _varying(a) else a for a in operands]
  return list(operands)


def categorical_last_axis(keys, logits, temperature, offsets, *, index_dtype,
                          method: str = "auto"):
  """Binds ``categorical_p``: ``[noisy_max, indices]`` over the last axis of ``logits``
  (operands as the block comment above says; ``method``: checked by the public op)."""
  operands = _vary_together([keys, logits, temperature, offsets])
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


def _top_k_block(x, k, *, index_dtype, method, platform):
  """top_k_p's results ``[values, indices]`` on ``x``, a block inside its partition rule: the
  path _dispatch routes the block to on the lowering's ``platform``, called directly
  (:func:`call_handler` or the exact XLA path)."""
  aval = typeof(x)
  # Mesh axes of type Auto that the rule left to XLA (a mesh of Explicit and Auto axes).
  if ((_sharding.sharding_unknown(aval) and _dispatch.xla_partitions("top_k", method))
      or _dispatch.route("top_k", platform, aval.shape, aval.dtype, method, k=k) == "xla"):
    return list(_xla.xla_top_k(x, k, index_dtype=index_dtype))
  avals_out = _top_k_abstract_eval(aval, k=k, index_dtype=index_dtype, method=method)
  rows = _row_factors(aval.ndim - 1)
  return call_handler("top_k", platform, [x], avals_out, [rows + ("cols",)],
                      [rows + ("k",), rows + ("k",)],
                      workspace_bytes=_top_k_workspace(platform, aval, k), k=np.int64(k))


def _top_k_workspace(platform, aval, k) -> int | None:
  """The CUDA handler's workspace for ``aval`` (static: _dispatch routes only static shapes to
  it on CUDA); None elsewhere."""
  if platform != "cuda":
    return None
  return _ffi.cuda_workspace_bytes("top_k", math.prod(aval.shape[:-1]), aval.shape[-1], k,
                                   aval.dtype.itemsize)


def _top_k_partitioned(ctx, x, *, k, index_dtype, method, platform):
  """The partition rule (called first by the lowering): where the input's type splits it over
  explicit mesh axes, a shard_map over them in which each block takes its own top k (rows
  split: that is the answer; a split last axis: k candidates per shard with global indices,
  one exchange of [rows, shards, k], the exact merge, _sharding.split_top_k). A block's result
  comes from :func:`_top_k_block`: the handler call itself (:func:`call_handler`) or the exact
  XLA path, never top_k_p bound again (whose lowering would run this rule inside the block).
  Where XLA decides the split (Auto axes), the exact XLA path, which XLA
  partitions (_dispatch.xla_partitions). Else None: lower as usual."""
  aval = ctx.avals_in[0]
  if not is_constant_shape(aval.shape):
    return None
  dims = _sharding.explicit_spec(aval)
  if dims is None:
    if (_sharding.sharding_unknown(aval, ctx.module_context.axis_context)
        and _dispatch.xla_partitions("top_k", method)):
      return mlir.lower_fun(
          lambda v: list(_xla.xla_top_k(v, k, index_dtype=index_dtype)),
          multiple_results=True)(ctx, x)
    return None
  mesh = aval.sharding.mesh
  split = dims[-1]
  block = functools.partial(_top_k_block, index_dtype=index_dtype, method=method,
                            platform=platform)

  def body(b):
    if split:
      return list(_sharding.split_top_k(b, split, k, block))
    return block(b, k)

  out_spec = _sharding.pspec(dims[:-1] + ((),))
  fn = jax.shard_map(body, mesh=mesh, in_specs=_sharding.pspec(dims),
                     out_specs=[out_spec, out_spec],
                     axis_names=_sharding.manual_axes(mesh, dims))
  return mlir.lower_fun(fn, multiple_results=True)(ctx, x)


def _top_k_lowering(ctx, x, *, k, index_dtype, method, platform):
  partitioned = _top_k_partitioned(ctx, x, k=k, index_dtype=index_dtype, method=method,
                                   platform=platform)
  if partitioned is not None:
    return partitioned
  aval = ctx.avals_in[0]
  if _dispatch.route("top_k", platform, aval.shape, aval.dtype, method, k=k) == "xla":
    return mlir.lower_fun(lambda v: list(_xla.xla_top_k(v, k, index_dtype=index_dtype)),
                          multiple_results=True)(ctx, x)
  rows = _row_factors(aval.ndim - 1)
  return lower_handler(ctx, "top_k", platform, [x], [rows + ("cols",)],
                       [rows + ("k",), rows + ("k",)],
                       workspace_bytes=_top_k_workspace(platform, aval, k), k=np.int64(k))


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
  """Binds ``top_k_p`` on ``x`` (the axis last), 1 <= k <= cols: ``[values, indices]``
  (``method``: checked by the public op)."""
  return top_k_p.bind(x, k=int(k), index_dtype=np.dtype(index_dtype), method=method)



# ---------------------------------------------------------------------------------------------
# filtered_categorical_p: categorical with top-k, top-p and min-p per row (SPEC §1f). Operands
# as categorical_p's, with the filters between temperature and offsets:
#   keys, logits, temperature, top_k (int32), top_p (float32), min_p (float32), offsets;
# each filter [*batch] (per row) or [1] * n (shared), as temperature (_params). Results as
# categorical_p's: noisy_max (the drawn token's y) and indices.
# The handler takes one more operand, columns: int32 [*batch, cols], the global column of each
# logit (a split vocabulary's candidates: its noise counter and the index returned), or int32
# [0] (NO_COLUMNS: each logit's own column); the primitive never has it (its partition rule
# passes it to the handler, _filtered_partitioned).

filtered_categorical_p = Primitive("jax_argreduce_filtered_categorical")
filtered_categorical_p.multiple_results = True
filtered_categorical_p.def_impl(
    lambda *args, **params: apply_primitive(filtered_categorical_p, *args, **params))

def _filtered_abstract_eval(keys, logits, temperature, top_k, top_p, min_p, offsets, **params):
  batch = logits.shape[:-1]
  for param, f in zip(_params.FILTERS, (top_k, top_p, min_p)):
    name, dtype = param.name, param.dtype
    if f.dtype != dtype or not (_params.per_row(f.shape, batch)
                                or tuple(f.shape) == (1,) * len(batch)):
      raise TypeError(f"filtered_categorical_p: {name} must be {dtype} of shape {batch} or "
                      f"{(1,) * len(batch)}, got {f.str_short()}")
  del params["k_bound"], params["has_top_p"]
  return _categorical_abstract_eval(keys, logits, temperature, offsets, **params)


filtered_categorical_p.def_abstract_eval(_filtered_abstract_eval)


def _kept_xla(logits, temperature, top_k, top_p, min_p):
  """The kept set (SPEC §1f) by a sort of each row, for platforms without the handler: the
  same prefix of the z order, with masses from XLA's exp summed in float32 (so where sums
  round differently, the top-p boundary may differ from the handlers' exact one)."""
  batch = logits.shape[:-1]
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
  return jnp.take_along_axis(kept_sorted, rank, axis=-1)


def _filtered_xla(keys, logits, temperature, top_k, top_p, min_p, offsets, *, index_dtype):
  kept = _kept_xla(logits, temperature, top_k, top_p, min_p)
  masked = jnp.where(kept, logits, jnp.array(-jnp.inf, logits.dtype))
  return _categorical_xla(keys, masked, temperature, offsets, index_dtype=index_dtype)


NO_COLUMNS = np.zeros((0,), np.int32)


def _filtered_factors(k_aval, aval, param_avals, c_aval):
  """The handler call's Shardy factors: categorical's (_sampler_factors) for keys and logits
  (the columns as the logits where given); each row parameter split with the rows where it is
  per row and the keys are (as the temperature is there), else replicated."""
  (key_f, logit_f, _, off_f), results = _sampler_factors(k_aval, aval, param_avals[0])
  batch = aval.shape[:-1]
  row_keyed = key_f[0] != "nk"
  param_f = [(key_f[0],) if row_keyed and _params.per_row(a.shape, batch) else (f"np{i}",)
             for i, a in enumerate(param_avals)]
  column_f = logit_f if c_aval.ndim == aval.ndim else ("ncol",)
  return [key_f, logit_f, *param_f, off_f, column_f], results


def _filtered_block(keys, logits, temperature, top_k, top_p, min_p, offsets, *, index_dtype,
                    method, k_bound, has_top_p, platform):
  """filtered_categorical_p's results on a block inside its partition rule (operands as the
  block comment above says; ``offsets``: the block's global counters): the handler call itself
  (:func:`call_handler`) or the XLA path, as _dispatch routes the block."""
  operands = _vary_together([keys, logits, temperature, top_k, top_p, min_p, offsets])
  keys, logits, *params, offsets = operands
  aval = typeof(logits)
  if _dispatch.route("filtered_categorical", platform, aval.shape, aval.dtype, method) == "xla":
    return _filtered_xla(keys, logits, *params, offsets, index_dtype=index_dtype)
  return _filtered_handler(keys, logits, *params, offsets, NO_COLUMNS, index_dtype=index_dtype,
                           method=method, k_bound=k_bound, has_top_p=has_top_p,
                           platform=platform)


def _filtered_handler(keys, logits, temperature, top_k, top_p, min_p, offsets, columns, *,
                      index_dtype, method, k_bound, has_top_p, platform):
  """The filtered sampler's handler call on a block (:func:`call_handler`), with ``columns``
  (the block comment above). ``has_top_p`` False (top_p is 1 everywhere) lets the CUDA
  handler's spread path skip top-p's levels."""
  keys, logits, *params, offsets, columns = _vary_together(
      [keys, logits, temperature, top_k, top_p, min_p, offsets, columns])
  aval = typeof(logits)
  k_aval, param_avals = typeof(keys), [typeof(p) for p in params]
  avals_out = _categorical_abstract_eval(k_aval, aval, param_avals[0], typeof(offsets),
                                         index_dtype=index_dtype, method=method)
  flat_keys = keys.reshape(math.prod(keys.shape[:-1]), 2)
  flat_params = [p.reshape(math.prod(p.shape)) for p in params]
  workspace = None
  if platform == "cuda" and is_constant_shape(aval.shape):  # the candidates or histograms
    workspace = _ffi.cuda_workspace_bytes("filtered_categorical", math.prod(aval.shape[:-1]),
                                          aval.shape[-1], k_bound, aval.dtype.itemsize)
  return call_handler("filtered_categorical", platform,
                      [flat_keys, logits, *flat_params, offsets, columns], avals_out,
                      *_filtered_factors(k_aval, aval, param_avals, typeof(columns)),
                      workspace_bytes=workspace, k_bound=np.int64(k_bound),
                      has_top_p=bool(has_top_p))


def _scaled_top_k_block(logits, temperature, k: int, *, platform):
  """A split vocabulary's candidates on a block (stage 1 of _sharding.split_filtered_sample):
  the block's ``k`` first tokens in the sampler's z order (z = logits * (1/T) as the handlers
  compute it, SPEC §1f; T == 0 rows by the logits), as ``[values, local indices]`` ``[...,
  k]`` (the logits' bits; int32). A handler ("scaled_top_k"), not XLA: z computed by XLA would
  flush subnormals on CPU and differ from the sampler's, and ranking by the logits instead would
  order differently where scaling by 1/T rounds distinct logits to one z (the z order breaks
  such ties by column)."""
  logits, temperature = _vary_together([logits, temperature])
  aval, t_aval = typeof(logits), typeof(temperature)
  avals_out = _top_k_abstract_eval(aval, k=k, index_dtype=np.int32, method="auto")
  rows = _row_factors(aval.ndim - 1)
  t_f = rows if _params.per_row(t_aval.shape, aval.shape[:-1]) else tuple(
      f"nt{i}" for i in range(t_aval.ndim))
  # The CUDA select's plan is top_k's (the key width changes no level and no buffer).
  return call_handler("scaled_top_k", platform, [logits, temperature], avals_out,
                      [rows + ("cols",), t_f], [rows + ("k",), rows + ("k",)],
                      workspace_bytes=_top_k_workspace(platform, aval, k), k=np.int64(k))


def _row_result(aval, tail: tuple, dtype):
  """A per-row result of a block's handler call: ``aval``'s batch dimensions (and their
  sharding, varying manual axes) with ``tail`` dimensions, whole on every device, of
  ``dtype``."""
  spec = tuple(aval.sharding.spec) + (None,) * (aval.ndim - len(aval.sharding.spec))
  return aval.update(shape=(*aval.shape[:-1], *tail), dtype=np.dtype(dtype), weak_type=False,
                     sharding=aval.sharding.update(spec=P(*spec[:-1], *(None,) * len(tail))))


# The split stages' CUDA handlers take no workspace: an empty one (every CUDA handler's last
# result).
_NO_WORKSPACE = 0


def _top_p_level_block(logits, temperature, top_p, tops, above, level: int, *, platform):
  """top-p's level ``level`` on a block of a split vocabulary (stage of
  _sharding.split_prefix_sample; the "top_p_level" handler, ffi/cpu_sample.h and
  ffi/sample_kernels.h): per row, the
  block's masses per digit (uint32 limbs ``[..., 2048, 3]``) or, at the last level, its counts
  (uint32 ``[..., 2^bits]``), from ``tops`` (every shard's first token, ``[..., shards]``) and
  ``above`` (the summed masses of the levels before, ``[..., level, 2048, 3]``)."""
  logits, temperature, top_p, tops, above = _vary_together([logits, temperature, top_p, tops,
                                                            above])
  aval = typeof(logits)
  levels, last_bits = _ffi.mass_levels(aval.dtype)
  tail = (1 << last_bits,) if level == levels - 1 else (_ffi.MASS_LEVEL_WIDTH,
                                                        _ffi.MASS_LIMBS)
  rows = _row_factors(aval.ndim - 1)
  flat = lambda v: v.reshape(math.prod(v.shape))
  return call_handler(
      "top_p_level", platform, [logits, flat(temperature), flat(top_p), tops, above],
      [_row_result(aval, tail, np.uint32)],
      [rows + ("cols",), ("nt",), ("np",), rows + ("shards",), rows + ("a0", "a1", "a2")],
      [rows + tuple(f"h{i}" for i in range(len(tail)))], workspace_bytes=_NO_WORKSPACE,
      level=np.int64(level))[0]


def _split_draw_block(keys, logits, temperature, top_k, top_p, min_p, offsets, tops, above,
                      counts, *, index_dtype, method, platform):
  """The filtered sampler's draw on a block of a split vocabulary without a top-k (last stage
  of _sharding.split_prefix_sample; the "split_filtered_draw" handler, ffi/cpu_sample.h and
  ffi/sample_kernels.h):
  ``[noisy_max, local indices]`` of the block's best kept token per row (a -inf noisy maximum
  where it keeps none), for the pair exchange. ``above``/``counts``: top-p's summed masses of
  the levels before the last and the last level's counts per shard, or empty (no top-p)."""
  keys, logits, *params, offsets, tops, above, counts = _vary_together(
      [keys, logits, temperature, top_k, top_p, min_p, offsets, tops, above, counts])
  aval = typeof(logits)
  avals_out = _categorical_abstract_eval(typeof(keys), aval, typeof(params[0]), typeof(offsets),
                                         index_dtype=index_dtype, method=method)
  flat_keys = keys.reshape(math.prod(keys.shape[:-1]), 2)
  flat_params = [p.reshape(math.prod(p.shape)) for p in params]
  # The filtered handler's factors (no columns operand), then the exchanged stages'.
  (*operand_f, _), result_f = _filtered_factors(typeof(keys), aval, [typeof(p) for p in params],
                                                typeof(NO_COLUMNS))
  rows = _row_factors(aval.ndim - 1)
  factors = lambda v, name: tuple(f"{name}{i}" for i in range(v.ndim))
  return call_handler(
      "split_filtered_draw", platform, [flat_keys, logits, *flat_params, offsets, tops, above,
                                        counts],
      avals_out, [*operand_f, rows + ("shards",), factors(above, "a"), factors(counts, "c")],
      result_f, workspace_bytes=_NO_WORKSPACE)


def _filtered_partitioned(ctx, keys, logits, *rest, index_dtype, method, k_bound, has_top_p,
                          platform):
  """The partition rule: where the logits' type splits them over explicit mesh axes, a
  shard_map in which each block samples with its global row counters (_sharding.sample_plan /
  sample_block, as categorical's rule), the filters split with the rows where they are per
  row. A split vocabulary, where the call has a top-k bound ``k_bound`` whose candidates move
  fewer bytes than the row (_dispatch.exchanges_candidates), exchanges each shard's
  ``k_bound`` first tokens in the z order instead of the logits
  (_sharding.split_filtered_sample: a stage of candidates
  (:func:`_scaled_top_k_block`), one exchange, the sampler on the candidates with their global
  columns, which every vocab shard runs alike: the result is needed on each of them, and the
  candidates are small, so a second collective to broadcast it would cost more). Without a
  top-k (top-p / min-p alone), where _dispatch.exchanges_masses says so, the shards exchange
  their tops, top-p's masses and their draws (_sharding.split_prefix_sample). Otherwise the
  vocabulary is gathered whole (exact). Where XLA decides
  the split (Auto axes), the handler call stays (XLA gathers the logits for it). Else None."""
  *params, offsets = rest
  k_aval, aval, *param_avals, o_aval = ctx.avals_in
  if not all(is_constant_shape(a.shape) for a in ctx.avals_in):
    return None
  dims = _sharding.explicit_spec(aval)
  if dims is None:
    return None
  mesh = aval.sharding.mesh
  batch = aval.shape[:-1]
  j = key_prefix(k_aval.shape, batch)
  if j is None:  # pragma: no cover - the abstract eval rejects it
    return None
  names = dims[-1]
  shards = math.prod(mesh.shape[n] for n in names)
  candidates = shards > 1 and _dispatch.exchanges_candidates(
      platform, aval.shape, aval.dtype, shards, k_bound, method)
  masses = shards > 1 and not candidates and _dispatch.exchanges_masses(
      platform, aval.shape, aval.dtype, shards, k_bound, method, has_top_p)
  # The blocks: split rows, and the vocab's split where candidates or masses are exchanged
  # (else whole).
  block_dims = tuple(dims[:-1]) + (names if candidates or masses else (),)
  per_row = tuple(_params.per_row(a.shape, batch) for a in param_avals)
  plan = _sharding.sample_plan(mesh, block_dims, aval.shape, j, per_row, index_dtype)
  static = dict(index_dtype=index_dtype, method=method, k_bound=k_bound, has_top_p=has_top_p,
                platform=platform)
  if candidates:
    # The candidates carry their global columns: no column offset, and no exchange of the
    # samples (every vocab shard samples the same candidates).
    plan = plan._replace(k_names=())

    def block(k, x, ps, o):
      return _sharding.split_filtered_sample(
          k, x, ps, o, names, k_bound, functools.partial(_scaled_top_k_block, platform=platform),
          lambda *a: _filtered_handler(*a, **static))
  elif masses:
    # Each shard draws over its kept tokens; sample_block exchanges the pairs (k_names). No
    # top_p: no levels (min-p needs z_max alone).
    levels = _ffi.mass_levels(aval.dtype)[0] if has_top_p else 0

    def block(k, x, ps, o):
      return _sharding.split_prefix_sample(
          k, x, ps, o, names, levels, (_ffi.MASS_LEVEL_WIDTH, _ffi.MASS_LIMBS),
          functools.partial(_scaled_top_k_block, platform=platform),
          functools.partial(_top_p_level_block, platform=platform),
          functools.partial(_split_draw_block, index_dtype=index_dtype, method=method,
                            platform=platform))
  else:
    def block(k, x, ps, o):
      return _filtered_block(k, x, *ps, o, **static)

  def body(kb, lb, ob, *pbs):
    return _sharding.sample_block(plan, kb, lb, tuple(pbs), ob, block)

  x_spec = _sharding.pspec(block_dims)
  fn = jax.shard_map(body, mesh=mesh,
                     in_specs=(plan.key_spec, x_spec, P(), *plan.param_specs),
                     out_specs=[plan.out_spec, plan.out_spec],
                     axis_names=_sharding.manual_axes(mesh, block_dims))

  def partitioned(k, x, *ps_o):
    *ps, o = ps_o
    if names and not (candidates or masses):
      x = jax.sharding.reshard(x, jax.sharding.NamedSharding(mesh, x_spec))
    return fn(_sharding.reshard(k, k_aval, mesh, plan.key_spec), x,
              _sharding.reshard(o, o_aval, mesh, P()),
              *(_sharding.reshard(p, a, mesh, spec)
                for p, a, spec in zip(ps, param_avals, plan.param_specs)))

  return mlir.lower_fun(partitioned, multiple_results=True)(ctx, keys, logits, *params, offsets)


def _filtered_lowering(ctx, keys, logits, temperature, top_k, top_p, min_p, offsets, *,
                       index_dtype, method, k_bound, has_top_p, platform):
  operands = [keys, logits, temperature, top_k, top_p, min_p, offsets]
  partitioned = _filtered_partitioned(ctx, *operands, index_dtype=index_dtype, method=method,
                                      k_bound=k_bound, has_top_p=has_top_p, platform=platform)
  if partitioned is not None:
    return partitioned
  return mlir.lower_fun(
      functools.partial(_filtered_block, index_dtype=index_dtype, method=method,
                        k_bound=k_bound, has_top_p=has_top_p, platform=platform),
      multiple_results=True)(ctx, *operands)


register_lowerings(filtered_categorical_p, _filtered_lowering)


batching.primitive_batchers[filtered_categorical_p] = sampler_batching(filtered_categorical_p)


def _filtered_jvp(primals, tangents, **params):
  del tangents
  outs = filtered_categorical_p.bind(*primals, **params)
  return outs, [Zero(typeof(o).to_tangent_aval()) for o in outs]


ad.primitive_jvps[filtered_categorical_p] = _filtered_jvp


def filtered_categorical_last_axis(keys, logits, temperature, top_k, top_p, min_p, *,
                                   index_dtype, method: str = "auto", k_bound: int = 0,
                                   has_top_p: bool = True):
  """Binds ``filtered_categorical_p``: ``[noisy_max, indices]`` over the last axis of
  ``logits`` (operands as the block comment above says; no offsets: an unsharded call).
  ``k_bound`` > 0 promises every row's top_k is in [1, k_bound] (static; lets the CUDA
  handler take its top-k path), -1 that no row has a top-k (its spread path), 0 nothing;
  ``has_top_p`` False promises top_p was not given (every p is 1: a split vocabulary's stages
  and the CUDA spread path skip top-p's levels)."""
  operands = _vary_together([keys, logits, temperature, top_k, top_p, min_p, NO_OFFSETS])
  return filtered_categorical_p.bind(*operands, index_dtype=np.dtype(index_dtype),
                                     method=method, k_bound=int(k_bound),
                                     has_top_p=bool(has_top_p))
