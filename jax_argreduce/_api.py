"""Public argmax/argmin: validate, normalize the axis, move it last, bind the primitive."""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np
from jax import dtypes
from jax._src import core

from jax_argreduce import _primitive, _xla

# Float dtypes the FFI handlers take; every other dtype goes to jnp.argmax/argmin, which is
# already exact for integers and bool and raises for complex exactly as jnp does.
_HANDLER_DTYPES = frozenset(
    np.dtype(t) for t in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64))
_INT32_MAX = np.iinfo(np.int32).max


def _check_arraylike(name: str, x) -> None:
  if not (isinstance(x, (jax.Array, np.ndarray, np.generic, bool, int, float, complex))
          or hasattr(x, "__jax_array__")):
    raise TypeError(f"{name} requires ndarray or scalar arguments, got {type(x)} at position 0.")


def _argreduce(x, axis, keepdims, *, is_min: bool, method: str = "auto"):
  name = "argmin" if is_min else "argmax"
  _check_arraylike(name, x)
  x = jnp.asarray(x)
  if x.dtype not in _HANDLER_DTYPES:
    fallback = jnp.argmin if is_min else jnp.argmax
    return fallback(x, axis=axis, keepdims=keepdims)
  index_dtype = dtypes.canonicalize_dtype(np.int64)  # int32 unless jax_enable_x64

  if axis is None:
    out_shape = (1,) * x.ndim if keepdims else ()
    x = x.reshape(-1)
  else:
    axis = operator.index(axis)  # TypeError for floats and strings, as numpy and jnp
    if not -x.ndim <= axis < x.ndim:
      raise np.exceptions.AxisError(axis, x.ndim)  # an IndexError, as jnp raises
    axis %= x.ndim
    out_shape = x.shape[:axis] + ((1,) if keepdims else ()) + x.shape[axis + 1:]
    if axis != x.ndim - 1:
      x = _xla.moveaxis_exact(x, axis, -1)

  cols = x.shape[-1]
  if core.is_constant_dim(cols):  # symbolic (jax.export) lengths are checked by the handler
    if cols == 0:
      raise ValueError(f"attempt to get {name} of an empty sequence")
    if cols - 1 > np.iinfo(index_dtype).max:
      raise ValueError(
          f"{name}: the reduction axis has {cols} elements, more than {index_dtype.name} "
          "indices can hold; enable jax_enable_x64 for int64 indices")
    if cols > _INT32_MAX:
      method = "xla"  # the handlers index rows with 32-bit positions
  out = _primitive.argreduce_last_axis(x, is_min=is_min, index_dtype=index_dtype, method=method)
  return out.reshape(out_shape)


def argmax(x, axis: int | None = None, keepdims: bool = False) -> jax.Array:
  """Indices of the maximum values along an axis; drop-in for ``jnp.argmax``.

  Args:
    x: array of any shape. float16, bfloat16, float32 and float64 run on the jax_argreduce
      FFI handlers (CUDA kernels on GPU, a CPU handler on CPU; on GPU, float32/float64 shapes
      where XLA's reduction measured faster take an exact XLA path); other dtypes are passed
      to ``jnp.argmax``.
    axis: the reduction axis (negative counts from the end), or None for the flattened array.
    keepdims: keep the reduced axis as a dimension of size 1.

  Returns:
    Integer array of ``x.shape`` without ``axis`` (all dimensions when ``axis`` is None; size 1
    in their place with ``keepdims``): int32, or int64 when ``jax_enable_x64`` is on, the dtype
    ``jnp.argmax`` returns.

  Raises:
    ValueError: the reduction is over an empty axis, or the axis is longer than the index
      dtype can hold.
    IndexError: ``axis`` is out of range (``numpy.exceptions.AxisError``).
    TypeError: ``x`` is not an array or scalar, or is complex (as ``jnp.argmax``).

  Semantics are ``numpy.argmax``'s exactly (README, "Semantics"): ties go to the lowest index,
  a NaN beats every number (the first NaN wins), -0.0 ties +0.0, subnormals compare exactly
  (unlike ``jnp.argmax``, which flushes them to zero). Not differentiable: under ``jax.grad``
  the output has a symbolic zero tangent.
  """
  return _argreduce(x, axis, keepdims, is_min=False)


def argmin(x, axis: int | None = None, keepdims: bool = False) -> jax.Array:
  """Indices of the minimum values along an axis; drop-in for ``jnp.argmin``.

  Same arguments, result dtype, errors and semantics as :func:`argmax`, with the minimum in
  place of the maximum. NaN still wins (``numpy.argmin`` returns the first NaN too).
  """
  return _argreduce(x, axis, keepdims, is_min=True)
