"""Errors and edge cases, each checked against what ``jnp.argmax``/``numpy.argmax`` do.

Empty reductions (ValueError), empty non-reduced dimensions (empty result), axis out of range
(IndexError family), complex (TypeError), integer/bool inputs (numpy results), non-arrays
(TypeError), rows longer than the index dtype, and failures inside the FFI handler, which must
surface as Python exceptions.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _common import FLOATS, METHODS, OPS, np_dtype as _np_dtype, op_fn as _fn
from jax_argreduce import argmax
from jax_argreduce._api import _argreduce

CPU_TARGET = "jax_argreduce_cpu"
RuntimeErrorType = getattr(jax.errors, "JaxRuntimeError", RuntimeError)  # XlaRuntimeError before


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

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", FLOATS + ("int32", "bool"))
@pytest.mark.parametrize("shape,axis", [((0,), None), ((0,), 0), ((0, 5), None), ((0, 5), 0),
                                        ((5, 0), 1), ((5, 0), -1), ((2, 0, 3), 1),
                                        ((2, 0, 3), -2), ((3, 2, 0), None)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_empty_reduction_raises_value_error(op, method, dtype, shape, axis, keepdims):
  x = np.zeros(shape, _np_dtype(dtype))
  f = functools.partial(_fn(op, method), axis=axis, keepdims=keepdims)
  ours, theirs = _assert_raises_like(
      lambda: f(x), lambda: OPS[op][2](x, axis=axis, keepdims=keepdims))
  assert isinstance(theirs, ValueError) and isinstance(ours, ValueError)
  assert "empty" in str(ours)
  with pytest.raises(ValueError):  # also while tracing
    jax.jit(f)(x)
  with pytest.raises(ValueError):  # numpy agrees
    OPS[op][1](x, axis=axis, keepdims=keepdims)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", FLOATS + ("int32",))
@pytest.mark.parametrize("shape,axis", [((0, 5), 1), ((0, 5), -1), ((3, 0, 4), 2), ((3, 0, 4), 0),
                                        ((0, 0, 7), -1), ((4, 0), 0)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("jit", [False, True])
def test_empty_non_reduced_dim(op, method, dtype, shape, axis, keepdims, jit):
  x = np.zeros(shape, _np_dtype(dtype))
  f = functools.partial(_fn(op, method), axis=axis, keepdims=keepdims)
  got = (jax.jit(f) if jit else f)(x)
  want = OPS[op][1](x, axis=axis, keepdims=keepdims)
  assert want.size == 0
  assert got.shape == want.shape
  assert got.dtype == OPS[op][2](x, axis=axis, keepdims=keepdims).dtype


# ----------------------------------------------------------------------------- axis

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ("float32", "bfloat16", "int32"))
@pytest.mark.parametrize("shape,axis", [((3, 5), 2), ((3, 5), -3), ((3, 5), 7), ((3, 5), -100),
                                        ((4,), 1), ((4,), -2), ((), 0), ((), -1),
                                        ((2, 3, 4), 3)])
def test_axis_out_of_range(op, method, dtype, shape, axis):
  x = np.ones(shape, _np_dtype(dtype))
  f = functools.partial(_fn(op, method), axis=axis)
  ours, theirs = _assert_raises_like(lambda: f(x), lambda: OPS[op][2](x, axis=axis))
  assert isinstance(theirs, IndexError) and isinstance(ours, IndexError)
  with pytest.raises(type(theirs)):
    jax.jit(f)(x)
  if x.ndim:  # numpy treats a 0-d array as 1-d here (axis 0 and -1 give 0); jnp raises
    with pytest.raises(np.exceptions.AxisError):  # numpy's own class (an IndexError)
      OPS[op][1](x, axis=axis)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [(1,), np.array([1])])
def test_axis_not_an_integer(op, axis):
  x = np.ones((3, 5), np.float32)
  _assert_raises_like(lambda: OPS[op][0](x, axis=axis), lambda: OPS[op][2](x, axis=axis))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [1.5, 1.0, "1"])
def test_axis_float_or_str_raises_type_error(op, axis):
  x = np.ones((3, 5), np.float32)
  _assert_raises_like(lambda: OPS[op][0](x, axis=axis), lambda: OPS[op][2](x, axis=axis))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [np.int64(1), np.int32(-1), jnp.array(1), np.array(0)])
def test_axis_integer_like(op, axis):
  x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
  np.testing.assert_array_equal(np.asarray(OPS[op][0](x, axis=axis)), OPS[op][1](x, axis=axis))


# ----------------------------------------------------------------------------- dtypes

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_complex_raises_like_jnp(op, method, dtype, axis, x64):
  with x64(dtype == "complex128"):
    x = (np.arange(12) + 1j * np.arange(12)[::-1]).reshape(3, 4).astype(dtype)
    f = functools.partial(_fn(op, method), axis=axis)
    ours, theirs = _assert_raises_like(lambda: f(x), lambda: OPS[op][2](x, axis=axis))
    assert isinstance(ours, TypeError)
    with pytest.raises(type(theirs)):
      jax.jit(f)(x)


_INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", _INTS)
@pytest.mark.parametrize("shape,axis", [((50,), None), ((6, 40), 1), ((6, 40), 0),
                                        ((3, 4, 30), -2)])
def test_integer_and_bool_match_numpy(op, method, dtype, shape, axis, x64):
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
    f = functools.partial(_fn(op, method), axis=axis, keepdims=False)
    for got in (f(x), jax.jit(f)(x)):
      np.testing.assert_array_equal(np.asarray(got), OPS[op][1](x, axis=axis))
      assert got.dtype == OPS[op][2](x, axis=axis).dtype


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("value", [[1.0, 3.0, 2.0], (1.0, 3.0), [[1, 2], [3, 4]], None, "abc",
                                   {"a": 1.0}, object()],
                         ids=["list", "tuple", "nested_list", "None", "str", "dict", "object"])
def test_non_array_raises_type_error(op, value):
  ours, _ = _assert_raises_like(lambda: OPS[op][0](value), lambda: OPS[op][2](value))
  assert isinstance(ours, TypeError)


def test_invalid_method():
  with pytest.raises(ValueError, match="method"):
    _argreduce(np.ones(3, np.float32), None, False, is_min=False, method="cuda")


# ----------------------------------------------------------------------------- index width

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape,axis", [((2 ** 31 + 1,), None), ((3, 2 ** 31 + 1), -1),
                                        ((2 ** 31 + 7, 2), 0), ((2 ** 16, 2 ** 15 + 1), None)])
def test_row_longer_than_int32_indices(op, shape, axis, x64):
  """int32 indices (x64 off) cannot hold the row: a clear ValueError. With x64 on, int64 indices
  and, the handlers taking at most INT32_MAX columns, the XLA path. Abstract only: no memory."""
  spec = jax.ShapeDtypeStruct(shape, jnp.float16)
  f = functools.partial(OPS[op][0], axis=axis)
  with x64(False):
    with pytest.raises(ValueError, match="int32"):
      jax.eval_shape(f, spec)
  with x64(True):
    out = jax.eval_shape(f, spec)
    assert (out.shape, out.dtype) == (jax.eval_shape(functools.partial(OPS[op][2], axis=axis),
                                                     spec).shape, np.dtype(np.int64))
    assert CPU_TARGET not in jax.jit(f).lower(spec).as_text()


@pytest.mark.parametrize("cols,uses_handler", [(2 ** 31 - 1, True), (2 ** 31, False)])
def test_longest_int32_row(cols, uses_handler, x64):
  """A row of 2^31 columns still fits int32 indices (last index INT32_MAX) but not the
  handler (at most INT32_MAX columns)."""
  spec = jax.ShapeDtypeStruct((cols,), jnp.float16)
  with x64(False):
    out = jax.eval_shape(argmax, spec)
    assert (out.shape, out.dtype) == ((), np.dtype(np.int32))
    assert (CPU_TARGET in jax.jit(argmax).lower(spec).as_text()) == uses_handler


# ----------------------------------------------------------------------------- FFI handler

def _ffi(out_shape, out_dtype):
  return jax.ffi.ffi_call(CPU_TARGET, jax.ShapeDtypeStruct(out_shape, out_dtype))


def test_ffi_direct_call_works():
  """The direct call below reaches the real handler (so the failures are the handler's)."""
  x = jnp.array([[1.0, 3.0, 2.0], [5.0, np.nan, 6.0]], jnp.float32)
  np.testing.assert_array_equal(np.asarray(_ffi((2,), jnp.int32)(x, is_min=False)), [1, 1])
  np.testing.assert_array_equal(np.asarray(_ffi((2,), jnp.int32)(x, is_min=True)), [0, 1])


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
  call = functools.partial(_ffi(out_shape, out_dtype), is_min=False)
  with pytest.raises(RuntimeErrorType, match=CPU_TARGET) as info:
    jax.block_until_ready((jax.jit(call) if jit else call)(jnp.asarray(x)))
  assert message in str(info.value)
  # the process and the handler are fine afterwards
  y = jnp.array([[0.0, 2.0, 1.0]], jnp.float32)
  np.testing.assert_array_equal(np.asarray(_ffi((1,), jnp.int32)(y, is_min=False)), [1])
