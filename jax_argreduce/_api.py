"""Public ops: validate, normalize the axis (jnp's rules), move it last, bind the primitive.

``reduce`` is the one entry every public reduction goes through (tests and benchmarks call it
with ``method=`` to force a path); ``method`` is checked here, once (``_dispatch.check_method``);
``_dispatch`` decides the path, ``_primitives`` binds. With ``axis_name=`` (inside a user's
shard_map) the primitive is bound here on the local block and ``_sharding``'s pure pieces make
the answer global (one exchange, the exact merge).
"""

from __future__ import annotations

import functools
import operator

import jax
import jax.numpy as jnp
import numpy as np
from jax import dtypes, lax

from jax_argreduce import _dispatch, _params, _primitives, _sharding, _xla
from jax_argreduce._compat import is_constant_dim, typeof

# op -> (is_min, with_value)
OPS = {
    "argmax": (False, False),
    "argmin": (True, False),
    "max_with_index": (False, True),
    "min_with_index": (True, True),
}


def _check_arraylike(name: str, x) -> None:
  if not (isinstance(x, (jax.Array, np.ndarray, np.generic, bool, int, float, complex))
          or hasattr(x, "__jax_array__")):
    raise TypeError(f"{name} requires ndarray or scalar arguments, got {type(x)} at position 0.")
  # Strings, objects, datetimes, structured...: as jnp says it (ml_dtypes formats are numbers).
  if isinstance(x, (np.ndarray, np.generic)) and not (
      x.dtype == np.bool_ or jnp.issubdtype(x.dtype, jnp.number)):
    raise TypeError(f"{name}: dtype {x.dtype} is not a valid JAX array type")


def _normalize_axis(axis, ndim: int) -> int:
  axis = operator.index(axis)  # TypeError for floats and strings, as numpy and jnp
  # numpy lets a 0-d input take axis 0 and -1 (it reduces the one element).
  if not -max(ndim, 1) <= axis < max(ndim, 1):
    raise np.exceptions.AxisError(axis, ndim)  # an IndexError, as jnp raises
  return axis % max(ndim, 1)


def _fallback(x, axis: int, is_min, with_value):
  """Dtypes the handlers do not take (ints, bool; complex raises): jnp's own reduction."""
  indices = (jnp.argmin if is_min else jnp.argmax)(x, axis=axis, keepdims=True)
  if not with_value:
    return [indices]
  return [jnp.take_along_axis(x, indices, axis=axis), indices]


def reduce(x, axis=None, keepdims=False, *, op: str = "argmax", method: str = "auto",
           axis_name=None):
  """The reduction ``op`` (a key of ``OPS``) of ``x`` along ``axis`` (None: flattened), numpy
  semantics; ``method`` one of ``_dispatch.METHODS``; ``axis_name``: inside a shard_map, the
  mesh axis (or tuple of axes) the reduction axis of ``x`` is split over. Returns indices, or
  (values, indices)."""
  is_min, with_value = OPS[op]
  _dispatch.check_method(method, op)
  _check_arraylike(op, x)
  x = jnp.asarray(x)
  keepdims = bool(keepdims)
  index_dtype = dtypes.canonicalize_dtype(np.int64)  # int32 unless jax_enable_x64
  if axis_name is not None and axis is None and x.ndim > 1:
    raise ValueError(f"{op}: axis_name needs an axis (the one split over {axis_name!r})")
  if (axis is None and axis_name is None and _dispatch.flattens_in_two_stages(
      x.dtype, x.ndim, _sharding.explicit_spec(typeof(x)) is not None)):
    # x.reshape(-1) of a sharded type is refused (or would move the data): reduce the rows,
    # then the per-row pairs (_sharding.flat_reduce).
    pair_op = "min_with_index" if is_min else "max_with_index"
    outs = _sharding.flat_reduce(
        x, lambda v: reduce(v, -1, op=pair_op, method=method),
        is_min=is_min, with_value=with_value, index_dtype=index_dtype)
    outs = [o.reshape((1,) * x.ndim if keepdims else ()) for o in outs]
    return tuple(outs) if with_value else outs[0]
  if x.ndim == 0:
    if axis is not None:
      _normalize_axis(axis, 0)
    axis, out_shape, x = 0, (), x.reshape(1)
  elif axis is None:
    out_shape = (1,) * x.ndim if keepdims else ()
    axis, x = 0, x.reshape(-1)
  else:
    axis = _normalize_axis(axis, x.ndim)
    out_shape = x.shape[:axis] + ((1,) if keepdims else ()) + x.shape[axis + 1:]
  _check_axis_length(op, x.shape[axis], index_dtype)
  if not _dispatch.handles_dtype(x.dtype):
    outs = _fallback(x, axis, is_min, with_value)
  else:
    outs = _reduce_last_axis(x, axis, op, is_min, with_value, index_dtype, method,
                             axis_name)
  outs = [o.reshape(out_shape) for o in outs]
  return tuple(outs) if with_value else outs[0]


def _check_axis_length(op: str, cols, index_dtype, *, empty: str | None = None,
                       axis_word: str = "reduction") -> None:
  """ValueError for an empty axis (``empty``: the message, jnp's by default) or one longer
  than ``index_dtype`` indices hold; symbolic (jax.export) lengths are checked by the handler."""
  if is_constant_dim(cols):
    if cols == 0:
      raise ValueError(empty or f"attempt to get {op} of an empty sequence")
    if cols - 1 > np.iinfo(index_dtype).max:
      raise ValueError(
          f"{op}: the {axis_word} axis has {cols} elements, more than {index_dtype.name} "
          "indices can hold; enable jax_enable_x64 for int64 indices")


def _reduce_last_axis(x, axis, op, is_min, with_value, index_dtype, method, axis_name=None):
  if axis != x.ndim - 1:
    x = _xla.moveaxis_exact(x, axis, -1)
  if axis_name is not None:  # x is this device's block of a split reduction axis
    names = _sharding.axis_names(x, axis_name, op)
    local_pairs = functools.partial(_primitives.argreduce_last_axis, is_min=is_min,
                                    with_value=True, index_dtype=index_dtype, method=method)
    return _sharding.split_reduce(x, names, local_pairs, is_min=is_min, with_value=with_value)
  return _primitives.argreduce_last_axis(x, is_min=is_min, with_value=with_value,
                                         index_dtype=index_dtype, method=method)


def _reject_out(name: str, out) -> None:
  if out is not None:  # as jnp.argmax
    raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported.")


def argmax(a, axis: int | None = None, out: None = None, keepdims: bool | None = None, *,
           axis_name=None) -> jax.Array:
  """Indices of the maximum values along an axis; drop-in for ``jnp.argmax`` (same signature).

  Args:
    a: array of any shape. float16, bfloat16, float32 and float64 run on the jax_argreduce
      FFI handlers (CUDA kernels on GPU, a CPU handler on CPU; where XLA's reduction measured
      faster, an exact XLA path: ``jax_argreduce._dispatch``); other dtypes are passed to
      ``jnp.argmax``.
    axis: the reduction axis (negative counts from the end), or None for the flattened array.
      A 0-d input takes 0 and -1, as numpy.
    out: must be None (as ``jnp.argmax``).
    keepdims: keep the reduced axis as a dimension of size 1.
    axis_name: inside a ``jax.shard_map``, the mesh axis (or tuple of axes, major first) that
      ``axis`` is split over: ``a`` is this device's block and the result the global answer
      (global indices), from one exchange of per-shard pairs (README, "Use"). Not needed under
      ``jit`` with sharded inputs: those are partitioned automatically (explicit mesh axes).

  Returns:
    Integer array of ``a.shape`` without ``axis`` (all dimensions when ``axis`` is None; size 1
    in their place with ``keepdims``): int32, or int64 when ``jax_enable_x64`` is on, the dtype
    ``jnp.argmax`` returns.

  Raises:
    ValueError: the reduction is over an empty axis, or the axis is longer than the index
      dtype can hold; ``axis_name`` names no bound mesh axis or comes without an axis.
    IndexError: ``axis`` is out of range (``numpy.exceptions.AxisError``).
    TypeError: ``a`` is not an array or scalar, or is complex (as ``jnp.argmax``).
    NotImplementedError: ``out`` is not None (as ``jnp.argmax``).

  Semantics are ``numpy.argmax``'s exactly (README, "Semantics"): ties go to the
  lowest index, a NaN beats every number (the first NaN wins), -0.0 ties +0.0, subnormals
  compare exactly (unlike ``jnp.argmax``, which flushes them to zero). Not differentiable:
  under ``jax.grad`` the output has a symbolic zero (float0) tangent.
  """
  _reject_out("argmax", out)
  return reduce(a, axis, keepdims, op="argmax", axis_name=axis_name)


def argmin(a, axis: int | None = None, out: None = None, keepdims: bool | None = None, *,
           axis_name=None) -> jax.Array:
  """Indices of the minimum values along an axis; drop-in for ``jnp.argmin``.

  Same arguments, result dtype, errors and semantics as :func:`argmax`, with the minimum in
  place of the maximum. NaN still wins (``numpy.argmin`` returns the first NaN too).
  """
  _reject_out("argmin", out)
  return reduce(a, axis, keepdims, op="argmin", axis_name=axis_name)


def max_with_index(a, axis: int | None = -1, keepdims: bool = False, *, axis_name=None
                   ) -> tuple[jax.Array, jax.Array]:
  """The maximum along an axis and its index, in one pass (README, "Semantics").

  Args:
    a: array of any shape and of a real dtype: float (the four float formats run on the
      handlers), integer or bool (``jnp.max`` + ``jnp.argmax``); complex raises TypeError, as
      :func:`argmax` (``jnp.max`` would order complex numbers, ``numpy.argmax`` too, but not
      by one total order this module defines).
    axis: the reduction axis (default: the last), or None for the flattened array.
    keepdims: keep the reduced axis as a dimension of size 1 in both results.
    axis_name: as for :func:`argmax` (inside ``shard_map``: the mesh axis ``axis`` is split
      over; values and global indices of the whole axis).

  Returns:
    ``(values, indices)``: ``indices`` exactly ``argmax(a, axis, keepdims=keepdims)``;
    ``values`` (``a.dtype``, same shape) the element at that index, bit for bit: NaN when the
    winner is a NaN (the first NaN), the sign of zero of the winning element.

  Raises:
    The errors of :func:`argmax`.

  Differentiable in ``values`` (its tangent is the input tangent gathered at ``indices``);
  ``indices`` get a symbolic zero (float0) tangent.
  """
  return reduce(a, axis, keepdims, op="max_with_index", axis_name=axis_name)


def min_with_index(a, axis: int | None = -1, keepdims: bool = False, *, axis_name=None
                   ) -> tuple[jax.Array, jax.Array]:
  """The minimum along an axis and its index, in one pass; see :func:`max_with_index`. A NaN
  still wins (the first NaN, as ``numpy.argmin``)."""
  return reduce(a, axis, keepdims, op="min_with_index", axis_name=axis_name)


def top_k(a, k: int, axis: int = -1, *, method: str = "auto", axis_name=None
          ) -> tuple[jax.Array, jax.Array]:
  """The ``k`` first elements along an axis and their indices, sorted (SPEC §1e).

  Args:
    a: array of at least one dimension. float16, bfloat16, float32 and float64 run on the
      jax_argreduce handlers (CUDA kernels on GPU for the 16-bit formats and float32 with
      ``k <= 1024`` on rows of more than 256 elements, the CPU handler on CPU; elsewhere and
      beyond: an exact path over ``jax.lax.top_k``, which wins on shorter rows); integers and
      bool go to ``jax.lax.top_k``. ``k = 1`` (with ``method="auto"``) is computed as
      ``max_with_index`` and takes its routes.
    k: a static int, ``0 <= k <= a.shape[axis]``.
    axis: the axis to select along (negative counts from the end; an int, never None).
    method: "auto" (the measured choice), "kernel" (the handler where one takes the call) or
      "xla" (the exact XLA path).
    axis_name: inside a ``jax.shard_map``, the mesh axis (or tuple of axes, major first) that
      ``axis`` is split over: ``a`` is this device's block and the result the global answer
      (global indices) from one exchange of ``[..., shards, k]`` candidates. Not needed under
      ``jit`` with sharded inputs: those are partitioned automatically (explicit mesh axes).

  Returns:
    ``(values, indices)``, both of ``a.shape`` with ``k`` in place of ``axis``: ``values`` of
    ``a.dtype``, ``indices`` int32 (int64 only where the axis is longer than int32 indices
    reach, under ``jax_enable_x64``), sorted: larger first, a NaN before every number (the first
    NaN first), ties (-0.0 and +0.0 included) to the lowest index; values are the elements at
    the indices bit for bit (NaN payload, sign of zero). ``top_k(a, 1)`` is
    ``max_with_index(a, axis, keepdims=True)`` (whose indices are int64 under
    ``jax_enable_x64``). Subnormals are compared exactly (no flush).

  Raises:
    ValueError: ``k`` out of range, a complex ``a`` (as ``jax.lax.top_k``), an axis longer
      than the index dtype can hold; ``axis_name`` naming no bound mesh axis.
    TypeError: ``k`` or ``axis`` not an int; ``a`` not an array or a 0-d array.
    IndexError: ``axis`` out of range.

  Differentiable in ``values`` (the input's tangent gathered at ``indices``); ``indices`` get a
  symbolic zero (float0) tangent.
  """
  name = "top_k"
  _check_arraylike(name, a)
  x = jnp.asarray(a)
  try:
    k = operator.index(k)
  except TypeError:
    raise TypeError(f"{name}: k must be an int, got {type(k).__name__} (k sets the result's "
                    "shape: a traced value cannot; mark it static under jit)") from None
  if x.ndim == 0:
    raise TypeError(f"{name}: operand must have at least one dimension, got shape ()")
  try:
    axis = operator.index(axis)
  except TypeError:
    raise TypeError(f"{name}: axis must be an int, got {type(axis).__name__}") from None
  axis = _normalize_axis(axis, x.ndim)
  cols = x.shape[axis]
  if jnp.issubdtype(x.dtype, jnp.complexfloating):
    raise ValueError(f"{name}: complex inputs have no order (as jax.lax.top_k), got {x.dtype}")
  if is_constant_dim(cols) and not 0 <= k <= cols:
    raise ValueError(f"{name}: k must be in [0, {cols}] (the length of axis {axis}), got {k}")
  if k < 0:
    raise ValueError(f"{name}: k must be >= 0, got {k}")
  index_dtype = np.dtype(np.int32)
  if is_constant_dim(cols) and cols - 1 > np.iinfo(np.int32).max:
    index_dtype = dtypes.canonicalize_dtype(np.int64)
    _check_axis_length(name, cols, index_dtype, axis_word="selection")
  _dispatch.check_method(method, name)
  if isinstance(axis_name, list):
    axis_name = tuple(axis_name)
  if axis != x.ndim - 1:
    x = _xla.moveaxis_exact(x, axis, -1)
  if k == 0:
    values = lax.slice_in_dim(x, 0, 0, axis=-1)
    outs = [values, jnp.zeros_like(values, dtype=index_dtype)]
  elif not _dispatch.handles_dtype(x.dtype):
    # Integers and bool: lax.top_k is exact there (integers; the lowest index first on ties).
    keys = x.astype(np.int32) if x.dtype == np.bool_ else x
    _, indices = lax.top_k(keys, k)
    indices = indices.astype(index_dtype)
    outs = [jnp.take_along_axis(x, indices, axis=-1), indices]
  elif _dispatch.top_k_takes_max(k, method):
    values, indices = max_with_index(x, -1, keepdims=True, axis_name=axis_name)
    outs = [values, indices.astype(index_dtype)]  # max_with_index's are int64 under x64
  elif axis_name is not None:  # x: this device's block of a split axis
    names = _sharding.axis_names(x, axis_name, name)
    local = functools.partial(_primitives.top_k_last_axis, index_dtype=index_dtype,
                              method=method)
    outs = list(_sharding.split_top_k(x, names, k, local))
  else:
    outs = _primitives.top_k_last_axis(x, k, index_dtype=index_dtype, method=method)
  if axis != x.ndim - 1:
    outs = [_xla.moveaxis_exact(outs[0], -1, axis), jnp.moveaxis(outs[1], -1, axis)]
  return tuple(outs)


def _fmix32(h):
  """murmur3's 32-bit finalizer (a bijection of uint32 with good avalanche)."""
  h = h ^ (h >> 16)
  h = h * np.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * np.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


# Words of key data of jax.random's impls: threefry2x32 2, rbg and unsafe_rbg 4.
RAW_KEY_WIDTHS = (2, 4)


def _key_bits(key, batch_shape, name: str):
  """The key's bits as uint32 ``[1] * n + [2]`` (one key) or ``[*batch_shape, 2]`` (one per
  row: the batch layout, and its sharding, kept), from a typed PRNG key array (any impl:
  threefry2x32, rbg, unsafe_rbg; wider key data is mixed in) or a raw uint32 key array as
  ``jax.random`` accepts them (trailing dimension of key data)."""
  raw = ""  # how a raw key's shape was read, for the error below
  if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    data, key_shape = jax.random.key_data(key), key.shape
  else:
    data = jnp.asarray(key)
    if data.dtype != np.uint32 or data.ndim < 1:
      raise TypeError(f"{name}: key must be a PRNG key array (jax.random.key) or a raw uint32 "
                      f"key array, got {data.dtype}{list(data.shape)}")
    if data.shape[-1] not in RAW_KEY_WIDTHS:
      raise ValueError(f"{name}: a raw uint32 key is the key data of a jax.random impl, a "
                       f"trailing dimension of 2 (threefry2x32) or 4 (rbg, unsafe_rbg) words; "
                       f"got shape {tuple(data.shape)}")
    key_shape = data.shape[:-1]
    raw = (f" (raw key data of shape {tuple(data.shape)}: its trailing {data.shape[-1]} words "
           "are one key)")
  data = data.astype(np.uint32)
  width = data.shape[-1]
  if width % 2:
    data = jnp.concatenate([data, jnp.zeros(data.shape[:-1] + (1,), np.uint32)], axis=-1)
    width += 1
  # Wider key data (rbg, unsafe_rbg: 4 words, often [a, b, a, b]) is folded in through a
  # mixing function (murmur3's finalizer), never a plain xor, which would cancel such words.
  folded = data[..., 0:2]
  for i in range(2, width, 2):
    salt = np.uint32((0x9E3779B9 * (i // 2)) & 0xFFFFFFFF)
    folded = folded ^ _fmix32(data[..., i:i + 2] + salt)
  if key_shape == ():
    return folded.reshape((1,) * len(batch_shape) + (2,))
  if tuple(key_shape) != tuple(batch_shape):
    raise ValueError(f"{name}: key must have shape () or the logits' batch shape "
                     f"{tuple(batch_shape)} (one key per row), got {tuple(key_shape)}{raw}")
  return folded


def categorical(key, logits, axis: int = -1, *, temperature=None, top_k=None, top_p=None,
                min_p=None, top_k_bound=None, method: str = "auto", axis_name=None):
  """Samples one index per row from ``softmax(logits / temperature)``, in one pass; with
  ``top_k``, ``top_p`` or ``min_p``, from that distribution renormalized over the tokens the
  filters keep (SPEC §1f).

  The fused Gumbel-max trick (README, "Semantics"): the result is the argmax over the row of
  ``y = logits * (1 / T) + G`` computed in float32 (float64 for float64 logits) with
  ``G = -log(-log(u))`` from a counter-based generator (Philox-4x32-10 keyed by ``key``,
  counter = (row, global column)); the noise is never materialized. The sample depends only on
  (key, row, column, logits, T): not on launch geometry, device, or how the vocab is sharded,
  and the CPU and CUDA handlers give identical samples. Not the same samples as
  ``jax.random.categorical`` (another generator), the same distribution.

  Args:
    key: a PRNG key array (``jax.random.key``; every impl: its key data seeds our generator)
      or raw uint32 key data (``jax.random.PRNGKey``: a trailing dimension of 2 words, or 4
      for the rbg impls), of shape ``()`` — one key for the call,
      the row index is part of the counter — or the logits' batch shape (``logits.shape``
      without ``axis``): one key per row, and a row's sample then does not depend on the batch
      it sits in (so ``vmap`` over keys and logits equals a loop).
    logits: unnormalized log-probabilities, any float dtype (ints and bools are converted to
      the default float dtype: float32, or float64 when ``jax_enable_x64`` is on).
    axis: the category axis (default: the last; an int, never None).
    temperature: None (1.0), a real scalar, or a real array broadcasting to the batch shape. A row
      with ``T == 0`` (or so small that ``1 / T`` overflows) returns exactly ``argmax`` of that
      row; infinite logits stay infinite whatever ``T`` (even ``T = inf``). Where ``logits / T``
      overflows for finite logits (e.g. ``T = 2e-38``, logits of order 10) those become +-inf and
      tie, the first winning, as in ``jax.random.categorical(key, logits / T)``; a subnormal ``T``
      is used exactly by the handlers, while XLA's arithmetic (``method="xla"``) may flush it to 0
      (argmax). Negative or NaN temperatures raise for concrete values; under ``jit`` (traced)
      they are not checked: ``T < 0`` samples from ``softmax(logits / T)`` all the same, and a NaN
      temperature makes every ``y`` NaN, so the row returns 0.
    top_k, top_p, min_p: None (no filter), a scalar, or an array broadcasting to the batch shape
      (one value per row). Per row, with ``z = logits * (1 / T)`` and the tokens in ``argmax``'s
      order of z (NaN first, larger first, the lowest index among equal z): top-k keeps the
      first ``top_k`` (0, or ``top_k >= `` the row's length: all); top-p walks those in order
      and keeps a token iff the mass of the kept-candidates before it is below ``top_p`` times
      their total (the first always; ``top_p`` in (0, 1], 1: no filter); min-p keeps a token iff
      its mass relative to the top token is at least ``min_p`` (in [0, 1]). ``top_p`` and
      ``min_p`` are used as float32 (range-checked before the rounding). A token's mass is
      ``E = exp(d)`` correctly rounded to float32, ``d = z - z_max`` rounded to float32 first
      (0 where ``z == z_max``); for top-p the masses are rounded down to multiples of 2^-32 and
      summed exactly in integers: the kept set is the same on every device and batch
      composition (a mass below 2^-32 of the top token's counts as 0). The sample is the argmax
      of ``z + G`` over the kept tokens (the unfiltered sample where a row's filters keep
      everything). ``T == 0`` returns the row's argmax whatever the filters. Traced values are
      not range-checked: ``top_k < 0`` keeps all, ``top_p <= 0`` or ``min_p > 1`` keep only the
      top token, a NaN ``top_p``/``min_p`` filters nothing. The CPU and CUDA handlers give the
      same samples. On a GPU, rows whose top_k is known to be in [1, 1024] take the fast path
      (a select of that many candidates); ``top_p``/``min_p`` without it take an exact but slow
      kernel (README). ``method="xla"`` sorts each row and uses XLA's ``exp`` and float32 sums:
      the same distribution, other samples, and boundaries (top-p and min-p) may differ.
    top_k_bound: None, or a static int >= 1 promising every row's ``top_k`` is in
      [1, top_k_bound] (values are clipped to that range, traced ones included): lets a
      traced per-row ``top_k`` (e.g. an argument of a jitted decode step) take the GPU's fast
      path. A row keeps at most ``top_k_bound`` tokens: a traced ``top_k`` of 0 or below
      ("keep all" without a bound) is clipped to 1, greedy, and a concrete 0 raises; for rows
      without a top-k, leave the bound out. Without it a concrete ``top_k`` whose values are
      all >= 1 gives the bound itself (its largest value rounded up to a power of two: a few
      compiled variants).
    method: "auto" (the fused handler wherever one is built: CPU, and CUDA when compiled in)
      or "kernel" (the same); "xla": Gumbel noise from threefry2x32 materialized by XLA (the
      path of platforms without the handler): the same distribution, other samples.
    axis_name: inside a ``jax.shard_map``, the mesh axis (or tuple of axes, major first) that
      the category axis is split over: ``logits`` is this device's block of the vocabulary,
      the noise is keyed by the global column, the blocks' noisy maxima are exchanged once and
      every device gets the global sample (the same as unsharded). The rows are this call's:
      with one key, a row's counter is its position in the local ``logits``; pass per-row keys
      (split like the rows) for samples that do not depend on how the rows are split.

  Returns:
    Integer array of the batch shape: int32, or int64 when ``jax_enable_x64`` is on (as
    ``jax.random.categorical``).

  Raises:
    ValueError: an empty category axis, or one longer than the index dtype can hold; a key
      of another shape (raw key data of another width); a negative or NaN concrete
      temperature; a temperature or filter of another shape; a concrete filter out of range
      (the message names it); ``top_k_bound`` not an int >= 1, given without ``top_k``, or a
      concrete ``top_k`` outside [1, top_k_bound]. Traced values are not checked (see the
      filters above: a traced ``top_k`` of 0 with ``top_k_bound`` keeps one token).
    TypeError: ``key`` is not a key array, complex logits, a temperature that is not real
      (bool, complex, str); a ``top_k`` that is not an integer (bool and float included), a
      ``top_p`` or ``min_p`` that is not real.
    IndexError: ``axis`` out of range.
    NotImplementedError: filters with ``axis_name`` (a vocabulary split inside shard_map).

  Sharded logits (README, "Use"): the call is split where the logits are (explicit mesh axes),
  with no gather: split rows sample locally (one key: the global row is the counter; per-row keys
  are split with the rows), a split vocabulary samples each block with its global columns and
  exchanges one ``[rows, shards]`` set of (noisy maximum, index) pairs; samples are identical to
  unsharded ones. Under Auto mesh axes (XLA decides the split after tracing) XLA gathers the
  logits for the call (exact; jax_argreduce/_sharding.py): shard with explicit axes or use
  ``axis_name=`` inside ``shard_map``. With filters, split rows sample where they are; a split
  vocabulary with a top-k bound (a concrete ``top_k``, or ``top_k_bound=``) exchanges each
  shard's bound-many first tokens in the z order (logits' bits and global columns, ``[rows,
  shards, bound]``) instead of the logits where they move fewer bytes than the row's logits,
  and samples those (the same sample); without a top-k (``top_p``/``min_p`` alone) the
  devices exchange the shards' first tokens, top-p's integer masses per digit of z's key
  (summed over the shards) and the shards' draws where that moves fewer bytes than the row's
  logits (the same sample); otherwise (a bound of half the shard width or more for float32,
  narrow rows; on a GPU also float64 or a bound above 1024) the vocabulary is gathered for the
  call (exact).

  Semantics: ``-inf`` logits are never drawn unless the whole row is ``-inf`` (then index 0);
  a NaN logit wins as in ``argmax`` (its y is NaN). The noise lies in [-3.1300, 22.8739]
  (float32; [-3.8079, 45.0546] for float64), from 32 (64) random bits per column, ``u``
  strictly inside (0, 1), the upper tail exact. Not differentiable (float0 tangent).
  """
  name = "categorical"
  _check_arraylike(name, logits)
  if isinstance(logits, jax.Array) and jnp.issubdtype(logits.dtype, jax.dtypes.prng_key):
    raise TypeError(f"{name}: logits is a PRNG key array; the arguments are (key, logits)")
  if not isinstance(logits, (jax.Array, np.ndarray, np.generic)):  # e.g. __jax_array__
    logits = jnp.asarray(logits)
  if np.ndim(logits) == 0:
    raise ValueError(f"{name}: logits must have at least one dimension")
  try:
    axis = _normalize_axis(axis, np.ndim(logits))
  except TypeError as e:  # e.g. None: categorical has no flattened form
    raise TypeError(f"{name}: axis must be an int, got {axis!r}") from e
  cols = np.shape(logits)[axis]
  if is_constant_dim(cols) and cols > _dispatch.INT32_MAX:
    # The noise counter's column and the handlers' positions are 32-bit: refuse before the
    # XLA path would materialize noise for the whole row (tens of GB).
    raise ValueError(f"{name}: the category axis has {cols} elements; categorical samples "
                     f"rows of at most {_dispatch.INT32_MAX} (2**31 - 1) categories")
  temperature = _params.check(_params.TEMPERATURE, temperature, name)
  _dispatch.check_method(method, name)
  if isinstance(axis_name, list):
    axis_name = tuple(axis_name)
  filters = [_params.check(p, v, name) for p, v in zip(_params.FILTERS, (top_k, top_p, min_p))]
  if any(f is not None for f in filters):
    if axis_name is not None:
      raise NotImplementedError(f"{name}: top_k, top_p and min_p with axis_name (a vocabulary "
                                "split inside shard_map) are not supported yet")
    return _filtered_categorical(key, logits, temperature, *filters, axis=axis,
                                 method=method,
                                 k_bound=_params.k_bound(filters[0], top_k_bound, name,
                                                         cols if is_constant_dim(cols) else None),
                                 has_top_p=filters[1] is not None)
  return _categorical(key, logits, temperature, axis=axis, method=method, axis_name=axis_name)


def _sampler_operands(key, logits, temperature, axis: int, name: str):
  """Inside the samplers' jit: ``(keys, logits, temperature, index_dtype)`` as the primitives
  take them — real logits with the category axis last (ints and bools as the default float,
  other non-handler floats widened exactly to float32), checked lengths, the key bits and the
  temperature in the noise's dtype (float64 for float64 logits, else float32)."""
  logits = jnp.asarray(logits)
  if jnp.issubdtype(logits.dtype, jnp.complexfloating):
    raise TypeError(f"{name}: logits must be real, got {logits.dtype}")
  if not jnp.issubdtype(logits.dtype, jnp.floating):
    logits = logits.astype(dtypes.canonicalize_dtype(np.float64))
  if axis != logits.ndim - 1:
    logits = _xla.moveaxis_exact(logits, axis, -1)
  batch_shape, cols = logits.shape[:-1], logits.shape[-1]
  index_dtype = dtypes.canonicalize_dtype(np.int64)
  _check_axis_length(name, cols, index_dtype, axis_word="category",
                     empty=f"{name}: attempt to sample from an empty set of categories")
  noise_dtype = np.dtype(np.float64) if logits.dtype == np.float64 else np.dtype(np.float32)
  keys = _key_bits(key, batch_shape, name)
  t = _params.operand(_params.TEMPERATURE, temperature, batch_shape, name, noise_dtype)
  if not _dispatch.handles_dtype(logits.dtype):  # e.g. float8: widen exactly
    logits = logits.astype(np.float32)
  return keys, logits, t, index_dtype


@functools.partial(jax.jit, static_argnames=("axis", "method", "k_bound", "has_top_p"))
def _filtered_categorical(key, logits, temperature, top_k, top_p, min_p, *, axis: int,
                          method: str, k_bound: int, has_top_p: bool):
  name = "categorical"
  keys, logits, t, index_dtype = _sampler_operands(key, logits, temperature, axis, name)
  operands = [_params.operand(p, v, logits.shape[:-1], name)
              for p, v in zip(_params.FILTERS, (top_k, top_p, min_p))]
  if k_bound > 0:  # the promise the handlers may rely on, kept for traced values too
    operands[0] = jnp.clip(operands[0], 1, min(k_bound, _params.INT32_MAX))
  _, indices = _primitives.filtered_categorical_last_axis(
      keys, logits, t, *operands, index_dtype=index_dtype, method=method, k_bound=k_bound,
      has_top_p=has_top_p)
  return indices


# One program per call, also when called eagerly: no host-to-device transfer of our own
# constants (the default temperature, the offsets operand) outside it (jax.transfer_guard).
@functools.partial(jax.jit, static_argnames=("axis", "method", "axis_name"))
def _categorical(key, logits, temperature, *, axis: int, method: str, axis_name):
  name = "categorical"
  keys, logits, t, index_dtype = _sampler_operands(key, logits, temperature, axis, name)
  cols = logits.shape[-1]
  if _dispatch.samples_constant(None if axis_name is not None else cols, method):
    # One category: index 0 for every row (whatever the logit, T or key), with no noise and
    # no read of the logits: XLA folds a one-column argmax to a constant, which keeps the
    # rows' sharding (jnp.zeros_like of explicitly sharded rows needs a mesh context).
    return lax.argmax(logits, logits.ndim - 1, index_dtype)
  if axis_name is not None:  # logits: this device's block of a split vocabulary
    names = _sharding.axis_names(logits, axis_name, name)
    local_sample = functools.partial(_primitives.categorical_last_axis, index_dtype=index_dtype,
                                     method=method)
    return _sharding.split_sample(keys, logits, t, names, local_sample, index_dtype=index_dtype)
  _, indices = _primitives.categorical_last_axis(
      keys, logits, t, _primitives.NO_OFFSETS, index_dtype=index_dtype, method=method)
  return indices
