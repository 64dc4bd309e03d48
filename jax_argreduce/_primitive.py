"""The ``argreduce`` primitive: argmax/argmin of the last axis of a float array.

One contiguous block with all of its rules: impl, abstract eval, lowerings (CPU handler,
CUDA handler, the exact XLA path where it measured faster on GPU and on other platforms; the
handler calls carry a Shardy sharding rule), batching and JVP. Shapes:
``x: [..., cols] float{16,32,64}|bfloat16 -> [...] index_dtype``.
"""

from __future__ import annotations

import numpy as np
import jax
from jax import lax
from jax._src import ad_util, config, core, dispatch
from jax._src.custom_partitioning_sharding_rule import (SdyShardingRule,
                                                        sdy_sharding_rule_to_mlir)
from jax._src.interpreters import ad, batching, mlir

from jax_argreduce import _ffi, _xla

# Paths a bind can ask for: "auto" (platform default), "kernel" (FFI handler), "xla".
METHODS = ("auto", "kernel", "xla")

# Where the CUDA kernels lose to XLA's own reduction, the CUDA lowering takes the exact XLA
# path instead. Measured on an H200 (benchmarks/NOTES.md): in float32/float64 the kernels win
# for few rows (<= 8) and narrow rows (<= 64 columns) and trail XLA by 2-11% elsewhere; in
# 16-bit formats they win everywhere measured but 4096x128 (1.89 vs 1.63 µs), where the XLA
# path was no faster (1.87).
_KERNEL_MAX_ROWS_WIDE_F32 = 8
_KERNEL_MAX_COLS_F32 = 64


# On the CPU the handler (one thread, ~1 ns per element) wins for one row and for small inputs
# (no XLA reduction overhead: 1x4096 8 vs 39 µs); XLA's integer-key reduction, vectorized and
# spread over the cores, wins for many rows (65536x64 f32: 1.8 vs 5.2 ms; jnp.argmax 7.7 ms).
# Measured on this project's 2-core CPU machine (jax 0.10.2).
_CPU_KERNEL_MAX_ELEMENTS = 1 << 16


def _cpu_kernel_wins(shape) -> bool:
  rows = int(np.prod(shape[:-1], dtype=np.int64))
  return rows == 1 or rows * shape[-1] < _CPU_KERNEL_MAX_ELEMENTS


def _cuda_kernel_wins(shape, dtype) -> bool:
  if np.dtype(dtype).itemsize <= 2:
    return True
  rows = int(np.prod(shape[:-1], dtype=np.int64))
  return rows <= _KERNEL_MAX_ROWS_WIDE_F32 or shape[-1] <= _KERNEL_MAX_COLS_F32


argreduce_p = core.Primitive("jax_argreduce")
argreduce_p.def_impl(lambda x, **params: dispatch.apply_primitive(argreduce_p, x, **params))


def _abstract_eval(x, *, is_min, index_dtype, method):
  del is_min, method
  # Same shape, dtype and sharding rule as lax.argmax over the last axis.
  aval, _ = lax.argmax_p.abstract_eval(x, axes=(x.ndim - 1,), index_dtype=index_dtype)
  return aval


argreduce_p.def_abstract_eval(_abstract_eval)


def _xla_lowering(ctx, x, *, is_min, index_dtype, method):
  del method
  return mlir.lower_fun(
      lambda v: _xla.argreduce_last_axis(v, is_min=is_min, index_dtype=index_dtype),
      multiple_results=False)(ctx, x)


def _handler_call(ctx, target, x, extra_results=(), **attrs):
  """The FFI custom call, with a Shardy sharding rule: the row dimensions map to the output's,
  the reduction axis and any workspace are replicated. The rule lets row shardings propagate
  to the indices; XLA still gathers the input for the (opaque) call, so each device computes
  every row (correct, not yet partitioned)."""
  avals_out = [ctx.avals_out[0], *extra_results]
  results = jax.ffi.ffi_lowering(target)(ctx.replace(avals_out=avals_out), x, **attrs)
  # Only for static shapes: with symbolic dimensions the call carries extra shape operands.
  if config.use_shardy_partitioner.value and core.is_constant_shape(ctx.avals_in[0].shape):
    rows = tuple(f"r{i}" for i in range(ctx.avals_in[0].ndim - 1))
    workspaces = tuple(f"w{i}" for i in range(len(extra_results)))
    rule = SdyShardingRule(
        (rows + ("k",),), (rows,) + tuple((w,) for w in workspaces),
        need_replication_factors=("k",) + workspaces)
    results[0].owner.attributes["sdy.sharding_rule"] = sdy_sharding_rule_to_mlir(
        rule, [v.type for v in [x]], [r.type for r in results])
  return results


def _cpu_lowering(ctx, x, *, is_min, index_dtype, method):
  shape = ctx.avals_in[0].shape
  if method == "xla" or (method == "auto" and core.is_constant_shape(shape)
                         and not _cpu_kernel_wins(shape)):
    return _xla_lowering(ctx, x, is_min=is_min, index_dtype=index_dtype, method=method)
  return _handler_call(ctx, _ffi.CPU_TARGET, x, is_min=bool(is_min))


def _use_cuda_kernel(aval, method) -> bool:
  if method == "xla" or not _ffi.HAS_CUDA:
    return False
  if method == "kernel" or not core.is_constant_shape(aval.shape):
    return True
  return _cuda_kernel_wins(aval.shape, aval.dtype)


def _cuda_lowering(ctx, x, *, is_min, index_dtype, method):
  if not _use_cuda_kernel(ctx.avals_in[0], method):
    return _xla_lowering(ctx, x, is_min=is_min, index_dtype=index_dtype, method=method)
  # The workspace is a second custom-call result: XLA-owned memory assigned at compile time,
  # so the handler allocates nothing at run time and is safe in command buffers.
  workspace = core.ShapedArray((_ffi.CUDA_WORKSPACE_BYTES,), np.uint8)
  indices, _ = _handler_call(ctx, _ffi.CUDA_TARGET, x, [workspace], is_min=bool(is_min))
  return [indices]


mlir.register_lowering(argreduce_p, _xla_lowering)
mlir.register_lowering(argreduce_p, _cpu_lowering, platform="cpu")
mlir.register_lowering(argreduce_p, _cuda_lowering, platform="cuda")


def _batching_rule(batched_args, batch_dims, **params):
  (x,), (bdim,) = batched_args, batch_dims
  # A batch dimension other than the reduction axis is just more rows: no data movement.
  if bdim == x.ndim - 1:
    x = _xla.moveaxis_exact(x, bdim, 0)
    bdim = 0
  return argreduce_p.bind(x, **params), bdim


batching.primitive_batchers[argreduce_p] = _batching_rule


def _jvp_rule(primals, tangents, **params):
  del tangents
  out = argreduce_p.bind(*primals, **params)
  # Indices are not differentiable: a symbolic zero (float0) tangent.
  return out, ad_util.Zero(core.typeof(out).to_tangent_aval())


ad.primitive_jvps[argreduce_p] = _jvp_rule


def argreduce_last_axis(x, *, is_min: bool, index_dtype, method: str = "auto"):
  """Binds the primitive: index of the max (min) of ``x`` along its last axis."""
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
  return argreduce_p.bind(x, is_min=bool(is_min), index_dtype=np.dtype(index_dtype),
                          method=method)
