"""Errors and edge cases, each checked against what ``jnp.argmax``/``numpy.argmax`` do.

For the four ops (``max_with_index``/``min_with_index`` raise what ``jnp.argmax``/``argmin``
raise for the same call): empty reductions (ValueError), empty non-reduced dimensions (empty
result), axis out of range (IndexError family; a 0-d input takes axis 0 and -1 as numpy does),
complex (TypeError), integer/bool inputs (numpy results), non-arrays (TypeError), rows longer
than the index dtype, and failures inside the FFI handlers, which must surface as Python
exceptions.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_argreduce
import reference
from _common import ALL_OPS, FLOATS, METHODS, jnp_like, np_dtype as _np_dtype, op_fn as _fn
from jax_argreduce import _api, _dispatch, _ffi

CPU_TARGET = _ffi.target("argreduce", "cpu")
CPU_WITH_INDEX_TARGET = _ffi.target("max_with_index", "cpu")
CPU_TARGETS = (CPU_TARGET, CPU_WITH_INDEX_TARGET)
RuntimeErrorType = getattr(jax.errors, "JaxRuntimeError", RuntimeError)  # XlaRuntimeError before


def _op_dtypes(dtypes, thin=("bfloat16", "int32", "bool")):
  """(op, dtype) pairs: argmax/argmin with every dtype; the with-index ops (the same code up to
  the handler, which the differential test covers) with the ``thin`` subset only, to keep the
  suite's compile time in check."""
  return [(op, d) for op in ALL_OPS for d in dtypes
          if not reference.with_value(op) or d in thin]


def _rotated(combos, grid, variants):
  """Thinned cross product, every behaviour kept: each combo of ``combos`` (tuples: op, dtype,
  method) runs every entry of ``grid`` (tuples: shape, axis), each with one of ``variants``
  (tuples: keepdims, jit, ...) chosen by rotation, so every combo meets every variant and
  every grid entry meets every variant, instead of the full combos x grid x variants."""
  return [(*c, *g, *variants[(ci + gi) % len(variants)])
          for ci, c in enumerate(combos) for gi, g in enumerate(grid)]


def _jnp_exception(call):
  """The exception ``jnp`` raises for a call (it must raise one)."""
  try:
    call()
  except Exception as e:  # noqa: BLE001 - whatever jnp raises is the reference
    return e
  pytest.fail("jnp did not raise: the reference for this test is gone")


def _assert_raises_like(ours, theirs):
  """``ours()`` raises an instance of the class ``theirs()`` raises."""
  expected = _jnp_exception(theirs)
  with pytest.raises(type(expected)) as info:
    ours()
  return info.value, expected


# ----------------------------------------------------------------------------- empty inputs

@pytest.mark.parametrize("op,dtype,method,shape,axis,keepdims", _rotated(
    [(op, d, m) for op, d in _op_dtypes(FLOATS + ("int32", "bool")) for m in METHODS],
    [((0,), None), ((0,), 0), ((0, 5), None), ((0, 5), 0), ((5, 0), 1), ((5, 0), -1),
     ((2, 0, 3), 1), ((2, 0, 3), -2), ((3, 2, 0), None)],
    [(False,), (True,)]))
def test_empty_reduction_raises_value_error(op, method, dtype, shape, axis, keepdims):
  x = np.zeros(shape, _np_dtype(dtype))
  f = functools.partial(_fn(op, method), axis=axis, keepdims=keepdims)
  ours, theirs = _assert_raises_like(
      lambda: f(x), lambda: jnp_like(op)(x, axis=axis, keepdims=keepdims))
  assert isinstance(theirs, ValueError) and isinstance(ours, ValueError)
  assert "empty" in str(ours)
  with pytest.raises(ValueError):  # also while tracing
    jax.jit(f)(x)
  with pytest.raises(ValueError):  # numpy agrees
    reference.argreduce(x, axis=axis, keepdims=keepdims, op=op)


@pytest.mark.parametrize("op,dtype,method,shape,axis,keepdims,jit", _rotated(
    [(op, d, m) for op, d in _op_dtypes(FLOATS + ("int32",)) for m in METHODS],
    [((0, 5), 1), ((0, 5), -1), ((3, 0, 4), 2), ((3, 0, 4), 0), ((0, 0, 7), -1), ((4, 0), 0)],
    [(False, False), (True, False), (False, True), (True, True)]))
def test_empty_non_reduced_dim(op, method, dtype, shape, axis, keepdims, jit):
  x = np.zeros(shape, _np_dtype(dtype))
  f = functools.partial(_fn(op, method), axis=axis, keepdims=keepdims)
  got = jax.device_get((jax.jit(f) if jit else f)(x))
  want = reference.argreduce(x, axis=axis, keepdims=keepdims, op=op)
  reference.assert_matches(got, want, op=op)
  indices = got[1] if reference.with_value(op) else got
  assert indices.size == 0
  assert indices.dtype == jnp_like(op)(x, axis=axis, keepdims=keepdims).dtype
  if reference.with_value(op):
    assert got[0].dtype == x.dtype


# ----------------------------------------------------------------------------- axis

@pytest.mark.parametrize("op,dtype", _op_dtypes(("float32", "bfloat16", "int32")))
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape,axis", [((3, 5), 2), ((3, 5), -3), ((3, 5), 7), ((3, 5), -100),
                                        ((4,), 1), ((4,), -2), ((), 1), ((), -2),
                                        ((2, 3, 4), 3)])
def test_axis_out_of_range(op, method, dtype, shape, axis):
  x = np.ones(shape, _np_dtype(dtype))
  f = functools.partial(_fn(op, method), axis=axis)
  ours, theirs = _assert_raises_like(lambda: f(x), lambda: jnp_like(op)(x, axis=axis))
  assert isinstance(theirs, IndexError) and isinstance(ours, IndexError)
  assert isinstance(ours, np.exceptions.AxisError)  # numpy's class (an IndexError)
  with pytest.raises(type(theirs)):
    jax.jit(f)(x)
  with pytest.raises(np.exceptions.AxisError):  # numpy agrees
    reference.argreduce(x, axis=axis, op=op)


@pytest.mark.parametrize("op,dtype,method,axis,keepdims", _rotated(
    [(op, d, m) for op, d in _op_dtypes(("float32", "bfloat16", "float16", "int32", "bool"))
     for m in METHODS],
    [(0,), (-1,), (None,)],
    [(False,), (True,)]))
def test_zero_dim_takes_axis_0_and_minus_1(op, method, dtype, axis, keepdims):
  """A 0-d input reduces its one element with axis 0, -1 or None, as numpy (jnp raises for
  0 and -1): index 0, and for the with-index ops the element itself."""
  x = np.array(-2.5 if dtype != "bool" else True).astype(_np_dtype(dtype))
  f = functools.partial(_fn(op, method), axis=axis, keepdims=keepdims)
  want = reference.argreduce(x, axis=axis, keepdims=keepdims, op=op)
  for got in (f(x), jax.jit(f)(x)):
    reference.assert_matches(jax.device_get(got), want, op=op)
    indices = got[1] if reference.with_value(op) else got
    assert indices.shape == () and int(indices) == 0
    assert indices.dtype == jnp_like(op)(x).dtype


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("axis", [(1,), np.array([1])])
def test_axis_not_an_integer(op, axis):
  x = np.ones((3, 5), np.float32)
  _assert_raises_like(lambda: getattr(jax_argreduce, op)(x, axis=axis),
                      lambda: jnp_like(op)(x, axis=axis))


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("axis", [1.5, 1.0, "1"])
def test_axis_float_or_str_raises_type_error(op, axis):
  x = np.ones((3, 5), np.float32)
  _assert_raises_like(lambda: getattr(jax_argreduce, op)(x, axis=axis),
                      lambda: jnp_like(op)(x, axis=axis))


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("axis", [np.int64(1), np.int32(-1), jnp.array(1), np.array(0)])
def test_axis_integer_like(op, axis):
  x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
  reference.assert_matches(jax.device_get(getattr(jax_argreduce, op)(x, axis=axis)),
                           reference.argreduce(x, axis=int(axis), op=op), op=op)


# ----------------------------------------------------------------------------- dtypes

@pytest.mark.parametrize("op,method,axis,dtype", _rotated(
    [(op, m) for op in ALL_OPS for m in METHODS], [(None,), (0,), (-1,)],
    [("complex64",), ("complex128",)]))
def test_complex_raises_like_jnp(op, method, dtype, axis, x64):
  with x64(dtype == "complex128"):
    x = (np.arange(12) + 1j * np.arange(12)[::-1]).reshape(3, 4).astype(dtype)
    f = functools.partial(_fn(op, method), axis=axis)
    ours, theirs = _assert_raises_like(lambda: f(x), lambda: jnp_like(op)(x, axis=axis))
    assert isinstance(ours, TypeError)
    with pytest.raises(type(theirs)):
      jax.jit(f)(x)


_INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool")


# Integer and bool inputs never reach a handler: every method takes jnp's reduction (the forced
# methods once per op and dtype family, the public functions on every dtype). Each (op, dtype,
# method) runs one of the shapes, rotating per method so that every method meets every shape
# (the reduction is jnp's, the same for every shape; what differs per dtype is the extremes).
_INT_SHAPES = [((6, 40), 1, True), ((6, 40), 0, False), ((3, 4, 30), -2, True),
               ((3, 4, 5), None, True), ((50,), None, False)]


def _int_cases():
  combos = [(op, d, m) for op, d in _op_dtypes(_INTS, thin=("int8", "uint32", "int64", "bool"))
            for m in METHODS if m == "public" or d in ("int32", "bool")]
  seen = {m: 0 for m in METHODS}
  cases = []
  for op, d, m in combos:
    cases.append((op, d, m, *_INT_SHAPES[seen[m] % len(_INT_SHAPES)]))
    seen[m] += 1
  assert all(n >= len(_INT_SHAPES) for n in seen.values()), seen
  return cases


@pytest.mark.parametrize("op,dtype,method,shape,axis,keepdims", _int_cases())
def test_integer_and_bool_match_numpy(op, method, dtype, shape, axis, keepdims, x64):
  rng = np.random.default_rng(sum(shape))
  if dtype == "bool":
    x = rng.random(shape) < 0.3
    x.reshape(-1)[::7] = False
  else:
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, size=5)] = info.max  # ties at the extremes
    flat[rng.integers(0, flat.size, size=5)] = info.min
  with x64(dtype in ("int64", "uint64")):
    f = functools.partial(_fn(op, method), axis=axis, keepdims=keepdims)
    want = reference.argreduce(x, axis=axis, keepdims=keepdims, op=op)
    for got in (f(x), jax.jit(f)(x)):
      reference.assert_matches(jax.device_get(got), want, op=op)
      indices = got[1] if reference.with_value(op) else got
      assert indices.dtype == jnp_like(op)(x, axis=axis).dtype


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("value", [[1.0, 3.0, 2.0], (1.0, 3.0), [[1, 2], [3, 4]], None, "abc",
                                   {"a": 1.0}, object()],
                         ids=["list", "tuple", "nested_list", "None", "str", "dict", "object"])
def test_non_array_raises_type_error(op, value):
  ours, _ = _assert_raises_like(lambda: getattr(jax_argreduce, op)(value),
                                lambda: jnp_like(op)(value))
  assert isinstance(ours, TypeError)


@pytest.mark.parametrize("op", ALL_OPS)
def test_invalid_method(op):
  """``method`` is checked once, by the public op that takes it (_dispatch.check_method), for
  every dtype (ints too, which never reach a primitive)."""
  for x in (np.ones(3, np.float32), np.ones(3, np.int32)):
    with pytest.raises(ValueError, match=f"^{op}: method"):
      _api.reduce(x, None, False, op=op, method="cuda")


def test_invalid_method_top_k_and_categorical():
  x = np.ones((2, 3), np.float32)
  with pytest.raises(ValueError, match="^top_k: method"):
    jax_argreduce.top_k(x, 2, method="cuda")
  with pytest.raises(ValueError, match="^categorical: method"):
    jax_argreduce.categorical(jax.random.key(0), x, method="cuda")
  with pytest.raises(ValueError, match="^categorical: method"):
    jax_argreduce.categorical(jax.random.key(0), x, top_p=0.5, method="cuda")
  with pytest.raises(ValueError, match="method"):
    _dispatch.check_method("cuda")


# ----------------------------------------------------------------------------- index width

@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("shape,axis", [((2 ** 31 + 1,), None), ((3, 2 ** 31 + 1), -1),
                                        ((2 ** 31 + 7, 2), 0), ((2 ** 16, 2 ** 15 + 1), None)])
def test_row_longer_than_int32_indices(op, shape, axis, x64):
  """int32 indices (x64 off) cannot hold the row: a clear ValueError. With x64 on, int64 indices
  and, the handlers taking at most INT32_MAX columns, the XLA path. Abstract only: no memory."""
  spec = jax.ShapeDtypeStruct(shape, jnp.float16)
  f = functools.partial(getattr(jax_argreduce, op), axis=axis)
  with x64(False):
    with pytest.raises(ValueError, match="int32"):
      jax.eval_shape(f, spec)
  with x64(True):
    out = jax.eval_shape(f, spec)
    want_shape = jax.eval_shape(functools.partial(jnp_like(op), axis=axis), spec).shape
    if reference.with_value(op):
      assert (out[0].shape, out[0].dtype) == (want_shape, np.dtype(np.float16))
      out = out[1]
    assert (out.shape, out.dtype) == (want_shape, np.dtype(np.int64))
    text = jax.jit(f).lower(spec).as_text()
    assert not any(t in text for t in CPU_TARGETS)


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("cols,uses_handler", [(2 ** 31 - 1, True), (2 ** 31, False)])
def test_longest_int32_row(op, cols, uses_handler, x64):
  """A row of 2^31 columns still fits int32 indices (last index INT32_MAX) but not the
  handler (at most INT32_MAX columns: _dispatch.INT32_MAX)."""
  spec = jax.ShapeDtypeStruct((cols,), jnp.float16)
  f = getattr(jax_argreduce, op)
  target = _ffi.target("max_with_index" if reference.with_value(op) else "argreduce", "cpu")
  assert _dispatch.INT32_MAX == 2 ** 31 - 1
  assert _dispatch.route(op, "cpu", (cols,), np.float16) == ("kernel" if uses_handler else "xla")
  with x64(False):
    out = jax.eval_shape(f, spec)
    out = out[1] if reference.with_value(op) else out
    assert (out.shape, out.dtype) == ((), np.dtype(np.int32))
    assert (target in jax.jit(f).lower(spec).as_text()) == uses_handler


# ----------------------------------------------------------------------------- FFI handler

def _call(out_shape, out_dtype):
  return jax.ffi.ffi_call(CPU_TARGET, jax.ShapeDtypeStruct(out_shape, out_dtype))


def _ffi_with_index(values_shape, values_dtype, out_shape, out_dtype):
  return jax.ffi.ffi_call(CPU_WITH_INDEX_TARGET,
                          (jax.ShapeDtypeStruct(values_shape, values_dtype),
                           jax.ShapeDtypeStruct(out_shape, out_dtype)))


def test_target_names_come_from_the_module():
  """Every handler the package lowers to is one the module registered, one per (op, platform)."""
  names = _ffi.all_targets()
  assert len(names) == len(set(names))
  assert CPU_TARGET in names and CPU_WITH_INDEX_TARGET in names
  assert CPU_TARGET != CPU_WITH_INDEX_TARGET
  with warnings.catch_warnings():  # without CUDA handlers, asking for one warns (test_ffi.py)
    warnings.simplefilter("ignore", _ffi.NoCudaHandlerWarning)
    assert (_ffi.target("argreduce", "cuda") is not None) == _ffi.HAS_CUDA
    assert (_ffi.target("max_with_index", "cuda") is not None) == _ffi.HAS_CUDA
  assert _ffi.target("argreduce", "rocm") is None and _ffi.target("nope", "cpu") is None


def test_ffi_direct_call_works():
  """The direct calls below reach the real handlers (so the failures are the handlers')."""
  x = jnp.array([[1.0, 3.0, 2.0], [5.0, np.nan, 6.0]], jnp.float32)
  np.testing.assert_array_equal(np.asarray(_call((2,), jnp.int32)(x, is_min=False)), [1, 1])
  np.testing.assert_array_equal(np.asarray(_call((2,), jnp.int32)(x, is_min=True)), [0, 1])
  values, indices = _ffi_with_index((2,), jnp.float32, (2,), jnp.int64)(x, is_min=True)
  np.testing.assert_array_equal(np.asarray(indices), [0, 1])
  assert np.asarray(values)[0] == 1.0 and np.isnan(np.asarray(values)[1])


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("x,out_shape,out_dtype,message", [
    (np.ones((2, 3), np.int32), (2,), np.int32, "input must be float16"),
    (np.ones((2, 3), np.float32), (3,), np.int32, "one element per row"),
    (np.ones((2, 3), np.float32), (), np.int32, "one element per row"),
    (np.ones((2, 3), np.float32), (2,), np.float32, "indices must be int32 or int64"),
    (np.ones((2, 0), np.float32), (2,), np.int32, "reduction axis length"),
    (np.ones((), np.float32), (), np.int32, "rank >= 1"),
], ids=["int_input", "wrong_out_size", "scalar_out", "float_out", "zero_cols", "rank0"])
def test_ffi_handler_errors_are_python_exceptions(jit, x, out_shape, out_dtype, message):
  call = functools.partial(_call(out_shape, out_dtype), is_min=False)
  with pytest.raises(RuntimeErrorType, match="jax_argreduce argreduce") as info:
    jax.block_until_ready((jax.jit(call) if jit else call)(jnp.asarray(x)))
  assert message in str(info.value)
  # the process and the handler are fine afterwards
  y = jnp.array([[0.0, 2.0, 1.0]], jnp.float32)
  np.testing.assert_array_equal(np.asarray(_call((1,), jnp.int32)(y, is_min=False)), [1])


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("x,values_shape,values_dtype,out_shape,out_dtype,message", [
    (np.ones((2, 3), np.int32), (2,), np.int32, (2,), np.int32, "input must be float16"),
    (np.ones((2, 3), np.float32), (2,), np.float16, (2,), np.int32, "values must have the input"),
    (np.ones((2, 3), np.float32), (3,), np.float32, (2,), np.int32, "values must have one element"),
    (np.ones((2, 3), np.float32), (2,), np.float32, (3,), np.int32, "one element per row"),
    (np.ones((2, 3), np.float32), (2,), np.float32, (2,), np.float32, "indices must be int32"),
    (np.ones((2, 0), np.float32), (2,), np.float32, (2,), np.int32, "reduction axis length"),
], ids=["int_input", "values_dtype", "values_size", "indices_size", "float_indices",
        "zero_cols"])
def test_ffi_with_index_handler_errors(jit, x, values_shape, values_dtype, out_shape,
                                       out_dtype, message):
  call = functools.partial(_ffi_with_index(values_shape, values_dtype, out_shape, out_dtype),
                           is_min=False)
  with pytest.raises(RuntimeErrorType, match="jax_argreduce max_with_index") as info:
    jax.block_until_ready((jax.jit(call) if jit else call)(jnp.asarray(x)))
  assert message in str(info.value)
  y = jnp.array([[0.0, 2.0, 1.0]], jnp.float32)
  values, indices = _ffi_with_index((1,), jnp.float32, (1,), jnp.int32)(y, is_min=False)
  assert (float(values[0]), int(indices[0])) == (2.0, 1)


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("bad", [np.array(["a", "b"]), np.array([1, "x"], object),
                                 np.array(["2020-01-01"], "datetime64[D]"),
                                 np.zeros(3, [("a", np.float32)]), np.zeros(3, "V4")])
def test_non_numeric_arrays_raise_type_error(op, bad):
  """Strings, objects and datetimes: a TypeError naming the dtype, as jnp.argmax raises."""
  with pytest.raises(TypeError, match="not a valid JAX array type"):
    getattr(jax_argreduce, op)(bad)
  with pytest.raises(TypeError, match="not a valid JAX array type"):
    jnp_like(op)(bad)
  if op == "argmax":
    with pytest.raises(TypeError, match="not a valid JAX array type"):
      jax_argreduce.categorical(jax.random.key(0), bad)


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "int4"])
def test_ml_dtypes_numpy_inputs_accepted(dtype):
  """numpy arrays of ml_dtypes formats (numpy dtype kind "V") are numbers, not rejected."""
  import ml_dtypes
  x = np.array([1, 3, 2], getattr(ml_dtypes, dtype))
  assert int(jax_argreduce.argmax(x)) == 1
  assert int(jax_argreduce.max_with_index(x)[1]) == 1


@pytest.mark.parametrize("axis", [None, 1.5, "0"])
def test_categorical_axis_must_be_an_int(axis):
  """Issue 43: axis=None raised a bare "'NoneType' object cannot be interpreted as an integer"
  (categorical has no flattened form)."""
  with pytest.raises(TypeError, match="categorical: axis must be an int"):
    jax_argreduce.categorical(jax.random.key(0), jnp.ones((2, 3)), axis=axis)
