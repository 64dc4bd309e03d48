"""The four ops under JAX transformations and with unusual inputs, against numpy.

jit, vmap (in_axes 0/1/-1, nested), grad through a gather, jvp (float0 index tangent; for
max_with_index/min_with_index the values tangent is the input tangent at the index),
eval_shape, x64 on/off, non-contiguous inputs, a 4-device sharded input, numpy inputs, Python
scalars and 0-d arrays, jax.export with symbolic shapes. max_with_index/min_with_index run on a
subset of the argmax grid (same code up to the handler): their values are checked bit for bit.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jax_argreduce
import reference
from _common import (ALL_OPS, FLOATS, METHODS, OPS, jnp_like, np_dtype as _np_dtype,
                     op_fn as _fn)
from jax_argreduce import _ffi, argmax

WITH_INDEX = reference.WITH_INDEX_OPS


def _ref(op, x, axis=None, keepdims=False):
  return reference.argreduce(np.asarray(x), axis, keepdims, op=op)


def _ours(op):
  return getattr(jax_argreduce, op)


def _data(shape, dtype="float32", seed=0):
  """Random normal data with ties (repeated max and min), ±0, ±inf and NaNs sprinkled in."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(shape).astype(np.float32)
  flat = x.reshape(-1)
  n = flat.size
  for v in (float(flat.max()), float(flat.min()), 0.0, -0.0, np.inf, -np.inf, np.nan):
    flat[rng.integers(0, n, size=max(1, n // 60))] = v
  return x.astype(_np_dtype(dtype))


def _clean(shape, seed):
  """Distinct finite values (for gradients)."""
  return np.random.default_rng(seed).permutation(np.prod(shape)).reshape(shape).astype(
      np.float32) / 7 - 3


def _assert_same(got, want, want_dtype=None, op="argmax"):
  """``got`` equals the reference ``want`` (indices; for the with-index ops values bit for bit,
  of the input's dtype); ``want_dtype``: the index dtype."""
  got = jax.device_get(got)
  if reference.with_value(op):
    assert got[0].dtype == np.asarray(want[0]).dtype, (got[0].dtype, np.asarray(want[0]).dtype)
    indices = got[1]
  else:
    indices = got
  if want_dtype is not None:
    assert indices.dtype == want_dtype, (indices.dtype, want_dtype)
  reference.assert_matches(got, want, op=op)


def _index_dtype():
  return jnp.argmax(jnp.zeros(2)).dtype


# ----------------------------------------------------------------------------- jit

def _op_dtypes(dtypes, thin=("bfloat16",)):
  """(op, dtype): argmax/argmin with every dtype, the with-index ops with ``thin`` only."""
  return [(op, d) for op in ALL_OPS for d in dtypes if op not in WITH_INDEX or d in thin]


_JIT_SHAPES = [((37,), None), ((37,), 0), ((5, 70), 1), ((5, 70), -2), ((3, 4, 50), None),
               ((3, 4, 50), 1), ((2, 3, 4, 5), -1)]


# Every (op, dtype, method) on every (shape, axis); keepdims alternates (by rotation, so each
# combination and each shape meets both) instead of doubling the grid.
@pytest.mark.parametrize("op,dtype,method,shape,axis,keepdims", [
    (op, d, m, shape, axis, (ci + si) % 2 == 1)
    for ci, (op, d, m) in enumerate((op, d, m) for op, d in _op_dtypes(FLOATS) for m in METHODS)
    for si, (shape, axis) in enumerate(_JIT_SHAPES)])
def test_jit(op, method, dtype, shape, axis, keepdims):
  x = _data(shape, dtype, seed=len(shape))
  fn = jax.jit(functools.partial(_fn(op, method), axis=axis, keepdims=keepdims))
  _assert_same(fn(x), _ref(op, x, axis, keepdims), _index_dtype(), op)


def test_jit_static_argnames():
  x = _data((6, 40))
  fn = jax.jit(argmax, static_argnames=("axis", "keepdims"))
  for axis in (None, 0, 1, -1):
    _assert_same(fn(x, axis=axis, keepdims=True), np.argmax(x, axis=axis, keepdims=True))


# ----------------------------------------------------------------------------- vmap

def _stack(op, results):
  if reference.with_value(op):
    return tuple(np.stack([r[k] for r in results]) for k in (0, 1))
  return np.stack(results)


def _loop_ref(op, x, in_axis, axis, keepdims=False):
  """What vmap(f, in_axes=in_axis)(x) must equal: f applied slice by slice, stacked on axis 0."""
  return _stack(op, [_ref(op, np.take(x, i, axis=in_axis), axis, keepdims)
                     for i in range(x.shape[in_axis])])


# Half of the (in_axis, axis) grid per (op, method), alternating, so every (op, method) meets
# every in_axis and every axis, and every (in_axis, axis) pair runs under half the (op, method)s.
@pytest.mark.parametrize("op,method,in_axis,axis", [
    (op, m, i, a) for ci, (op, m) in enumerate((op, m) for op in ALL_OPS for m in METHODS)
    for ii, i in enumerate((0, 1, -1)) for ai, a in enumerate((None, 0, 1, -1))
    if (ci + ii + ai) % 2 == 0])
def test_vmap(op, method, in_axis, axis):
  x = _data((4, 6, 33), seed=in_axis % 3 + 7)
  f = functools.partial(_fn(op, method), axis=axis)
  _assert_same(jax.vmap(f, in_axes=in_axis)(x), _loop_ref(op, x, in_axis, axis), _index_dtype(),
               op)


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape", [(4, 1, 3), (1, 1, 3), (1, 3), (4, 1), (1, 4, 3)])
def test_vmap_size_one_dims(op, method, shape):
  """Size-1 row, column and batch dimensions under vmap (coverage: the Shardy regression was
  categorical's, tests/test_categorical.py::test_size_one_batch_dims)."""
  x = _data(shape, seed=5)
  f = jax.jit(jax.vmap(functools.partial(_fn(op, method), axis=-1)))
  _assert_same(f(x), _loop_ref(op, x, 0, -1), op=op)


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("method", METHODS)
def test_vmap_keepdims_under_jit(op, method):
  x = _data((5, 3, 21), seed=3)
  f = functools.partial(_fn(op, method), axis=-1, keepdims=True)
  got = jax.jit(jax.vmap(f, in_axes=1))(x)
  _assert_same(got, _loop_ref(op, x, 1, -1, keepdims=True), op=op)


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("outer,inner,axis", [(0, 0, -1), (0, 1, 0), (-1, 0, None), (1, -1, 0),
                                              (2, 0, 1)])
def test_nested_vmap(op, method, outer, inner, axis):
  x = _data((3, 4, 5, 6), seed=(outer % 4) * 10 + inner % 4)
  f = functools.partial(_fn(op, method), axis=axis)
  got = jax.vmap(jax.vmap(f, in_axes=inner), in_axes=outer)(x)
  want = _stack(op, [_loop_ref(op, np.take(x, i, axis=outer), inner, axis)
                     for i in range(x.shape[outer])])
  _assert_same(got, want, op=op)


@pytest.mark.parametrize("op", WITH_INDEX)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_vmap_with_index_special_values(op, method, dtype):
  """vmap of the with-index ops over rows full of special values: values bit for bit."""
  rng = np.random.default_rng(21)
  x = reference.fill_rows(dtype, rng, 7 * 5, 40, kinds=np.arange(35) % len(reference.FILLS))
  x = x.reshape(7, 5, 40)
  f = functools.partial(_fn(op, method), axis=-1)
  _assert_same(jax.jit(jax.vmap(f, in_axes=1))(x), _loop_ref(op, x, 1, -1), op=op)


# ----------------------------------------------------------------------------- autodiff

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("jit", [False, True])
def test_grad_through_gather(op, jit):
  x = _clean((50,), seed=11)
  x[[5, 40]] = np.max(x) + 1 if op == "argmax" else np.min(x) - 1  # a tie: index 5 wins
  fn = _fn(op, "public")
  g = jax.grad(lambda v: v[fn(v)] ** 2)
  got = np.asarray((jax.jit(g) if jit else g)(x))
  want = np.zeros_like(x)
  i = _ref(op, x)
  assert i == 5
  want[i] = 2 * x[i]
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("method", METHODS)
def test_grad_batched_take_along_axis(op, method):
  x = _clean((7, 30), seed=12)
  x[2, [4, 9]] = 100 if op == "argmax" else -100  # a tie: index 4 wins
  fn = _fn(op, method)

  def loss(m):
    idx = fn(m, axis=1, keepdims=True)
    return jnp.sum(jnp.take_along_axis(m, idx, axis=1) ** 2)

  got = np.asarray(jax.jit(jax.grad(loss))(x))
  want = np.zeros_like(x)
  rows, cols = np.arange(7), _ref(op, x, axis=1)
  want[rows, cols] = 2 * x[rows, cols]
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("method", METHODS)
def test_grad_of_vmapped(op, method):
  """grad of a vmapped gather (batching rule + JVP rule together)."""
  x = _clean((6, 25), seed=13)
  fn = _fn(op, method)
  g = jax.grad(lambda m: jnp.sum(jax.vmap(lambda r: r[fn(r)] * r[0])(m)))(x)
  want = np.zeros_like(x)
  rows, cols = np.arange(6), _ref(op, x, axis=1)
  np.add.at(want, (rows, cols), x[:, 0])
  np.add.at(want, (rows, np.zeros(6, int)), x[rows, cols])
  np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, False), (0, True)])
def test_jvp_float0_tangent(op, method, axis, keepdims):
  x = _data((4, 9), seed=14)
  f = functools.partial(_fn(op, method), axis=axis, keepdims=keepdims)
  primal, tangent = jax.jvp(f, (x,), (np.ones_like(x),))
  _assert_same(primal, _ref(op, x, axis, keepdims), _index_dtype())
  assert tangent.dtype == jax.dtypes.float0
  assert tangent.shape == primal.shape


def _gathered(t, indices, axis, keepdims):
  """The tangent ``t`` at ``indices`` (numpy), shaped as the op's values."""
  if axis is None:
    return t.reshape(-1)[np.asarray(indices).reshape(-1)].reshape(np.shape(indices))
  idx = indices if keepdims else np.expand_dims(indices, axis)
  got = np.take_along_axis(t, idx, axis=axis)
  return got if keepdims else np.squeeze(got, axis)


@pytest.mark.parametrize("op,method,axis,keepdims,jit", [  # jit alternates (rotation)
    (op, m, axis, keepdims, (ci + ki) % 2 == 1)
    for ci, (op, m) in enumerate((op, m) for op in WITH_INDEX for m in METHODS)
    for ki, (axis, keepdims) in enumerate([(None, False), (None, True), (1, False), (0, True),
                                           (-1, False)])])
def test_with_index_jvp(op, method, axis, keepdims, jit):
  """Values tangent = the input tangent gathered at the index; indices tangent float0."""
  x = _data((4, 9), seed=14)
  t = np.random.default_rng(15).standard_normal(x.shape).astype(np.float32)
  f = functools.partial(_fn(op, method), axis=axis, keepdims=keepdims)
  jvp = lambda v, tv: jax.jvp(f, (v,), (tv,))  # noqa: E731
  (values, indices), (t_values, t_indices) = (jax.jit(jvp) if jit else jvp)(x, t)
  want = _ref(op, x, axis, keepdims)
  _assert_same((values, indices), want, _index_dtype(), op)
  assert t_indices.dtype == jax.dtypes.float0 and t_indices.shape == indices.shape
  assert t_values.dtype == x.dtype and t_values.shape == values.shape
  np.testing.assert_array_equal(np.asarray(t_values), _gathered(t, want[1], axis, keepdims))


@pytest.mark.parametrize("op", WITH_INDEX)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_with_index_grad(op, method, dtype):
  """grad of a loss of the values: the cotangent lands on the winning element only (the
  first of tied extremes), under jit and vmap too."""
  x = _clean((6, 25), seed=16).astype(_np_dtype(dtype))
  x[2, [4, 9]] = 100 if op == "max_with_index" else -100  # a tie: index 4 wins
  f = _fn(op, method)
  loss = lambda m: jnp.sum(f(m, axis=1)[0].astype(jnp.float32) * jnp.arange(1.0, 7.0))  # noqa
  want = np.zeros(x.shape, np.float32)
  _, idx = _ref(op, x, axis=1)
  assert idx[2] == 4
  want[np.arange(6), idx] = np.arange(1.0, 7.0)
  for g in (jax.grad(loss), jax.jit(jax.grad(loss))):
    got = g(x)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(got).astype(np.float32), want)
  per_row = jax.vmap(jax.grad(lambda r: f(r, axis=0)[0].astype(jnp.float32)))(x)
  want_rows = np.zeros(x.shape, np.float32)
  want_rows[np.arange(6), idx] = 1
  np.testing.assert_array_equal(np.asarray(per_row).astype(np.float32), want_rows)


@pytest.mark.parametrize("op", WITH_INDEX)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_with_index_grad_other_axis(op, method, dtype):
  """The same cotangent when the reduction axis is not the last one, and under vmap over the
  last axis: both move the axis first (16-bit floats as raw bits, whose tangents must still
  move with them)."""
  x = _clean((6, 25), seed=17).astype(_np_dtype(dtype))
  f = _fn(op, method)
  _, idx = _ref(op, x, axis=0)
  want = np.zeros(x.shape, np.float32)
  want[idx, np.arange(25)] = np.arange(1.0, 26.0)
  loss = lambda m: jnp.sum(f(m, axis=0)[0].astype(jnp.float32) * jnp.arange(1.0, 26.0))  # noqa
  for g in (jax.grad(loss), jax.jit(jax.grad(loss))):
    np.testing.assert_array_equal(np.asarray(g(x)).astype(np.float32), want)
  per_col = lambda m: jnp.sum(jax.vmap(lambda c: f(c)[0], in_axes=1)(m).astype(jnp.float32)  # noqa
                              * jnp.arange(1.0, 26.0))
  np.testing.assert_array_equal(np.asarray(jax.grad(per_col)(x)).astype(np.float32), want)
  tangent = jax.jvp(lambda m: f(m, axis=0)[0], (x,), (jnp.ones_like(x),))[1]
  np.testing.assert_array_equal(np.asarray(tangent).astype(np.float32), np.ones(25, np.float32))


@pytest.mark.parametrize("op", WITH_INDEX)
def test_with_index_second_order_and_linearize(op):
  """The values' JVP is linear in the tangent: linearize/transpose (vjp) and jacfwd/jacrev
  agree, and the Hessian of a quadratic of the values is the gathered one."""
  x = _clean((3, 8), seed=17)
  f = lambda m: jax_argreduce.__dict__[op](m, axis=1)[0]  # noqa: E731
  jf, jr = jax.jacfwd(f)(x), jax.jacrev(f)(x)
  np.testing.assert_array_equal(np.asarray(jf), np.asarray(jr))
  _, idx = _ref(op, x, axis=1)
  want = np.zeros((3, 3, 8), np.float32)
  want[np.arange(3), np.arange(3), idx] = 1
  np.testing.assert_array_equal(np.asarray(jf), want)
  h = jax.hessian(lambda m: jnp.sum(f(m) ** 2))(x)
  want_h = np.zeros((3, 8, 3, 8), np.float32)
  want_h[np.arange(3), idx, np.arange(3), idx] = 2
  np.testing.assert_array_equal(np.asarray(h), want_h)


# ----------------------------------------------------------------------------- abstract eval

@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("dtype", FLOATS + ("float64",))
@pytest.mark.parametrize("shape,axis", [((7,), None), ((7,), -1), ((2, 3, 5), None),
                                        ((2, 3, 5), 0), ((2, 3, 5), 1), ((2, 3, 5), -1),
                                        ((4, 1, 6, 2), -3)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_eval_shape(op, dtype, shape, axis, keepdims, x64_mode):
  # The dtype jax holds (float64 is float32 with x64 off, before any op sees it; jax >= 0.12
  # warns when a ShapeDtypeStruct asks for a dtype it truncates).
  spec = jax.ShapeDtypeStruct(shape, jax.dtypes.canonicalize_dtype(_np_dtype(dtype)))
  kw = dict(axis=axis, keepdims=keepdims)
  got = jax.eval_shape(functools.partial(_ours(op), **kw), spec)
  want = jax.eval_shape(functools.partial(jnp_like(op), **kw), spec)
  if op in WITH_INDEX:
    values, got = got
    assert values.shape == want.shape and values.dtype == jnp.asarray(np.zeros((), spec.dtype)).dtype
  assert (got.shape, got.dtype) == (want.shape, want.dtype)
  assert got.shape == np.argmax(np.zeros(shape), **kw).shape
  assert got.dtype == (np.int64 if x64_mode else np.int32)


@pytest.mark.parametrize("op,method,dtype", [
    (op, m, d) for op in ALL_OPS for m in METHODS for d in FLOATS + ("float64",)
    if op not in WITH_INDEX or d in ("bfloat16", "float64")])  # with-index ops: thinned dtypes
def test_x64_index_dtype(op, method, dtype, x64_mode):
  x = _data((3, 20), dtype, seed=15)
  want_dtype = np.dtype(np.int64 if x64_mode else np.int32)
  assert jnp_like(op)(jnp.asarray(x), axis=1).dtype == want_dtype  # what jnp returns
  fn = _fn(op, method)
  for out in (fn(x, axis=1), jax.jit(functools.partial(fn, axis=1))(x)):
    # float64 input is truncated to float32 with x64 off, as for jnp; the result must be
    # numpy's on what jax actually holds.
    _assert_same(out, _ref(op, np.asarray(jnp.asarray(x)), axis=1), want_dtype, op)


# ----------------------------------------------------------------------------- layouts

_VIEWS = {
    "transpose": lambda a: a.T,
    "cols_step2": lambda a: a[:, ::2],
    "offset": lambda a: a[1:, 3:],
    "reversed": lambda a: a[::-1],
    "reversed_cols": lambda a: a[:, ::-3],
    "swapaxes3": lambda a: a.reshape(a.shape[0], 2, -1).swapaxes(0, 2),
}


def _non_contiguous_cases():
  """argmax/argmin: every view x axis x where. The with-index ops (the same code up to the
  handler) skip jnp_eager (the eager path of numpy_view) and take one axis per (view, where),
  rotating, so each meets every view, axis and where."""
  cases = []
  for op in ALL_OPS:
    for vi, view in enumerate(_VIEWS):
      for wi, where in enumerate(["numpy_view", "jnp_eager", "inside_jit"]):
        for ai, axis in enumerate([None, 0, -1]):
          if op in WITH_INDEX and (where == "jnp_eager" or (vi + wi + ALL_OPS.index(op)) % 3 != ai):
            continue
          cases.append((op, view, axis, where))
  return cases


@pytest.mark.parametrize("op,view,axis,where", _non_contiguous_cases())
def test_non_contiguous(op, view, axis, where):
  base = _data((9, 64), seed=16)
  ref_input = _VIEWS[view](base)
  assert not ref_input.flags.c_contiguous  # numpy really makes strided views
  want = _ref(op, ref_input, axis)
  f = functools.partial(_ours(op), axis=axis)
  if where == "numpy_view":
    got = f(ref_input)
  elif where == "jnp_eager":
    got = f(_VIEWS[view](jnp.asarray(base)))
  else:
    got = jax.jit(lambda b: f(_VIEWS[view](b)))(base)
  _assert_same(got, want, op=op)


# ----------------------------------------------------------------------------- sharding

_LAYOUTS = {  # name -> (mesh shape, mesh axis names, array shape, partition spec)
    "rows": ((4,), ("x",), (16, 1000), P("x", None)),
    "rows_and_cols": ((2, 2), ("x", "y"), (8, 1000), P("x", "y")),
    "cols": ((4,), ("x",), (6, 1000), P(None, "x")),
    "middle_of_3d": ((4,), ("x",), (3, 8, 500), P(None, "x", None)),
}


def _sharded_cases():
  """Every (op, method) (with-index ops: public only) on every layout and every axis, one method
  per (op, layout, axis) by rotation instead of all three."""
  cases = []
  for op in ALL_OPS:
    methods = ("public",) if op in WITH_INDEX else METHODS
    for li, layout in enumerate(_LAYOUTS):
      for ai, axis in enumerate((-1, 0, None)):
        cases.append((op, methods[(li + ai + ALL_OPS.index(op)) % len(methods)], axis, layout))
  return cases


@pytest.mark.parametrize("op,method,axis,layout", _sharded_cases())
def test_sharded(op, method, axis, layout):
  """Input sharded over 4 CPU devices (rows, and the reduction axis too): jit(op) == numpy."""
  if jax.device_count() < 4:
    pytest.skip(f"needs 4 devices (XLA_FLAGS from conftest), have {jax.device_count()}")
  mesh_shape, names, shape, spec = _LAYOUTS[layout]
  mesh = Mesh(np.array(jax.devices()[:4]).reshape(mesh_shape), names)
  x = _data(shape, seed=17)
  x.reshape(-1, shape[-1])[1, shape[-1] // 2 + 3:] = np.nan  # NaNs in some shards only
  xs = jax.device_put(x, NamedSharding(mesh, spec))
  assert len({s.device for s in xs.addressable_shards}) == 4
  got = jax.jit(functools.partial(_fn(op, method), axis=axis))(xs)
  _assert_same(got, _ref(op, x, axis), _index_dtype(), op)


# ----------------------------------------------------------------------------- input kinds

@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("dtype", FLOATS + ("float64",))
def test_numpy_input(op, dtype, x64):
  with x64(dtype == "float64"):
    x = _data((8, 13), dtype, seed=18)
    for axis in (None, 0, 1):
      _assert_same(_ours(op)(x, axis=axis), _ref(op, x, axis), _index_dtype(), op)


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("value", [3.5, -2.0, float("nan"), float("-inf"), 7, True,
                                   np.float32(2.5), np.float16(-1), np.array(1.0),
                                   np.array(np.nan, np.float32), "jnp_scalar", "bf16_scalar"],
                         ids=lambda v: repr(v) if not isinstance(v, str) else v)
@pytest.mark.parametrize("keepdims", [False, True])
def test_scalars(op, value, keepdims):
  if isinstance(value, str):
    value = jnp.array(4.0) if value == "jnp_scalar" else jnp.array(-4.0, jnp.bfloat16)
  index_dtype = jnp_like(op)(value, keepdims=keepdims).dtype
  for axis in (None, 0, -1):  # a 0-d input takes axis 0 and -1, as numpy (jnp raises)
    got = _ours(op)(value, axis=axis, keepdims=keepdims)
    want = _ref(op, np.asarray(jnp.asarray(value)), axis, keepdims)  # what jax holds
    assert (want[1] if op in WITH_INDEX else want) == 0
    _assert_same(got, want, index_dtype, op)
  for axis in (1, -2):  # out of range, as in numpy and jnp
    with pytest.raises(IndexError):
      _ours(op)(value, axis=axis)


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("spec,shape", [("b, 5", (4, 5)), ("3, n", (3, 7)), ("b, n", (6, 9))])
def test_export_with_symbolic_shapes(op, spec, shape):
  """jax.export with shape polymorphism (symbolic rows and/or reduction length), serialized
  and deserialized; the handlers' targets named by the module."""
  checks = jax_argreduce.export_disabled_checks()
  assert len(checks) == len(_ffi.all_targets())
  fn = jax.jit(lambda v: _ours(op)(v, axis=-1))
  exported = jax.export.export(fn, disabled_checks=checks)(
      jax.ShapeDtypeStruct(jax.export.symbolic_shape(spec), jnp.float32))
  exported = jax.export.deserialize(exported.serialize())
  assert str(exported.out_avals[-1].shape[0]) == spec.split(",")[0].strip()
  rng = np.random.default_rng(0)
  x = reference.fill_rows("float32", rng, shape[0], shape[1])
  _assert_same(exported.call(x), _ref(op, x, -1), _index_dtype(), op)


@pytest.mark.parametrize("spec,shape,axis", [("n", (20000,), -1), ("1, n", (1, 16385), -1),
                                             ("b, 128", (160, 128), None)])
def test_export_xla_path_with_symbolic_shapes(spec, shape, axis):
  """The exact XLA path (as on platforms without a handler) exports with a symbolic reduction
  length: a symbolic row is never split by hand (_xla.py splits one row of static length), and
  the exported call matches numpy on a row long enough to be split when static."""
  fn = jax.jit(lambda v: jax_argreduce._api.reduce(v, axis, op="argmax", method="xla"))
  exported = jax.export.export(fn)(
      jax.ShapeDtypeStruct(jax.export.symbolic_shape(spec), jnp.float32))
  exported = jax.export.deserialize(exported.serialize())
  x = reference.fill_rows("float32", np.random.default_rng(2), 1, int(np.prod(shape)))
  x = x.reshape(shape)
  _assert_same(exported.call(x), _ref("argmax", x, axis), _index_dtype(), "argmax")


@pytest.mark.parametrize("op", ALL_OPS)
def test_export_static_shape_lowers_to_the_handler(op):
  """A static-shape export of a small input calls the op's CPU handler (the name from
  _ffi.target) and runs after a serialize/deserialize round trip."""
  handler = _ffi.target("max_with_index" if op in WITH_INDEX else "argreduce", "cpu")
  fn = jax.jit(lambda v: _ours(op)(v, axis=0))
  exported = jax.export.export(
      fn, disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(handler)])(
          jax.ShapeDtypeStruct((40, 3), jnp.bfloat16))
  assert handler in exported.mlir_module()
  x = reference.fill_rows("bfloat16", np.random.default_rng(1), 3, 40).T
  _assert_same(jax.export.deserialize(exported.serialize()).call(x), _ref(op, x, 0),
               _index_dtype(), op)
