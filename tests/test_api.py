"""The public API: ``argmax``/``argmin`` take ``jnp.argmax``'s exact signature, 0-d inputs take
axis 0 and -1 as numpy does, and ``max_with_index``/``min_with_index`` (SPEC §1b) return the
winning element bit for bit next to argmax's index, on every path.
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_argreduce
import reference
from _common import METHODS, jnp_like, op_fn
from jax_argreduce import _api, _dispatch, _ffi

ARG_OPS = reference.ARG_OPS
WITH_INDEX = reference.WITH_INDEX_OPS


def _params(fn):
  return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


# ----------------------------------------------------------------------------- signatures

# Keyword-only extras ours may take after jnp's parameters (SPEC §1d: the mesh axis of a
# reduction axis split inside a user's shard_map); each defaults to None, so every call of
# jnp.argmax means the same with ours.
EXTRA_KEYWORD_ONLY = {"axis_name"}


@pytest.mark.parametrize("op", ARG_OPS)
def test_signature_is_jnp_argmax(op):
  """Names, order, kinds and defaults of the parameters equal jnp's on the installed jax;
  anything after them is keyword-only, defaults to None, and is one of EXTRA_KEYWORD_ONLY."""
  ours, theirs = _params(getattr(jax_argreduce, op)), _params(getattr(jnp, op))
  assert ours[:len(theirs)] == theirs
  assert [name for name, _, _ in ours][:4] == ["a", "axis", "out", "keepdims"]
  for name, kind, default in ours[len(theirs):]:
    assert name in EXTRA_KEYWORD_ONLY
    assert kind == inspect.Parameter.KEYWORD_ONLY and default is None


@pytest.mark.parametrize("op", WITH_INDEX)
def test_with_index_signature(op):
  P = inspect.Parameter
  params = _params(getattr(jax_argreduce, op))
  assert params[:3] == [
      ("a", P.POSITIONAL_OR_KEYWORD, P.empty), ("axis", P.POSITIONAL_OR_KEYWORD, -1),
      ("keepdims", P.POSITIONAL_OR_KEYWORD, False)]
  for name, kind, default in params[3:]:
    assert name in EXTRA_KEYWORD_ONLY and kind == P.KEYWORD_ONLY and default is None


def test_public_names():
  for name in ("argmax", "argmin", "max_with_index", "min_with_index"):
    assert name in jax_argreduce.__all__ and callable(getattr(jax_argreduce, name))


_X = np.array([[1.0, 7.0, 7.0, -2.0], [np.nan, 0.0, 3.0, np.nan], [-0.0, 0.0, -1.0, 5.0]],
              np.float32)

# Calls as (args, kwargs) with the array as "X"; each must do what jnp does with it.
_CALLS = [
    ((), {"a": "X"}),
    (("X",), {}),
    (("X", 1), {}),
    (("X", 1, None), {}),
    (("X", 1, None), {"keepdims": True}),
    (("X", 1, None, True), {}),
    (("X", None, None, True), {}),
    (("X",), {"axis": 0, "out": None}),
    (("X",), {"out": None}),
    ((), {"a": "X", "axis": -1, "keepdims": False}),
    (("X", 0), {"keepdims": None}),
    (("X",), {"keepdims": True}),
    (("X", 1), {"axis": 0}),                    # axis twice: TypeError
    (("X",), {"a": "X"}),                       # a twice: TypeError
    (("X",), {"bogus": 1}),                     # unknown keyword: TypeError
    ((), {}),                                   # no array: TypeError
]


def _resolve(items, x):
  return tuple(x if v == "X" else v for v in items)


@pytest.mark.parametrize("op", ARG_OPS)
@pytest.mark.parametrize("call", range(len(_CALLS)))
def test_calls_behave_like_jnp(op, call):
  """Every way of calling jnp.argmax works (or fails) the same way with ours."""
  args, kwargs = _CALLS[call]
  x = jnp.asarray(_X)
  args = _resolve(args, x)
  kwargs = dict(zip(kwargs, _resolve(kwargs.values(), x)))
  try:
    want = getattr(jnp, op)(*args, **kwargs)
  except Exception as e:  # noqa: BLE001 - whatever jnp raises is the reference
    with pytest.raises(type(e)):
      getattr(jax_argreduce, op)(*args, **kwargs)
    return
  got = getattr(jax_argreduce, op)(*args, **kwargs)
  assert got.shape == want.shape and got.dtype == want.dtype
  # jnp flushes no subnormals here and _X's NaNs come first: the same answer as numpy's.
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("op", ARG_OPS)
@pytest.mark.parametrize("out", [np.zeros(3, np.int32), "jax_array", 0])
@pytest.mark.parametrize("where", ["keyword", "positional", "jit"])
def test_out_not_none_raises_like_jnp(op, out, where):
  out = jnp.zeros(3, jnp.int32) if isinstance(out, str) else out
  x = jnp.asarray(_X)
  call = {
      "keyword": lambda f: f(x, axis=1, out=out),
      "positional": lambda f: f(x, 1, out),
      "jit": lambda f: jax.jit(lambda v: f(v, axis=1, out=out))(x),
  }[where]
  try:
    call(getattr(jnp, op))
  except Exception as e:  # noqa: BLE001
    expected = e
  else:
    pytest.fail("jnp accepted out=")
  with pytest.raises(type(expected)) as info:
    call(getattr(jax_argreduce, op))
  assert isinstance(info.value, NotImplementedError)
  assert "out" in str(info.value)


@pytest.mark.parametrize("op", ARG_OPS + WITH_INDEX)
@pytest.mark.parametrize("value", [jnp.float32(3.0), np.float32(-1.5), jnp.array(2.0, jnp.bfloat16),
                                   np.array(np.nan, np.float16), 4.0],
                         ids=["jnp_f32", "np_f32", "bf16", "f16_nan", "python_float"])
def test_zero_dim_axis_like_numpy(op, value):
  """argmax(jnp.float32(3.0), axis=0) and axis=-1 return 0 (numpy), axis=1 raises AxisError."""
  f = getattr(jax_argreduce, op)
  held = np.asarray(jnp.asarray(value))
  for axis in (0, -1):
    assert np.argmax(held, axis=axis) == 0  # numpy's behaviour, the reference
    for got in (f(value, axis=axis), jax.jit(functools.partial(f, axis=axis))(value)):
      indices = got[1] if op in WITH_INDEX else got
      assert indices.shape == () and int(indices) == 0
      assert indices.dtype == jnp_like(op)(jnp.zeros(2)).dtype
      if op in WITH_INDEX:
        assert got[0].dtype == held.dtype
        assert np.asarray(got[0]).view(reference.bits_dtype(held.dtype)) == held.view(
            reference.bits_dtype(held.dtype))
  for axis in (1, -2, 5):
    with pytest.raises(np.exceptions.AxisError):
      f(value, axis=axis)


def test_issue_examples():
  """The two calls the issue quotes as failing."""
  assert int(jax_argreduce.argmax(jnp.float32(3.0), axis=0)) == 0
  x = jnp.asarray(_X)
  got = jax_argreduce.argmax(x, 1, None, keepdims=True)
  np.testing.assert_array_equal(np.asarray(got), np.argmax(_X, 1, None, keepdims=True))
  assert got.shape == (3, 1)


# ----------------------------------------------------------------------------- with-index ops

def _bits(a):
  a = np.asarray(a)
  return a.view(reference.bits_dtype(a.dtype))


def _special_rows(f: reference.Fmt):
  """(rows as bits of format f, argmax index per row, argmin index per row)."""
  one = f.from_float(np.float32(1.0))[()]
  u = f.ubits.type
  rows = [
      ([f.sign, u(0)], 0, 0),                            # -0 ties +0: the first, its sign kept
      ([u(0), f.sign], 0, 0),
      ([one, f.qnan | u(5), f.sign | f.inf | u(1)], 1, 1),  # first NaN wins, payload kept
      ([one, f.inf | u(1), f.qnan], 1, 1),               # a signalling NaN wins as it is
      ([f.inf | f.sign] * 3, 0, 0),                      # all -inf
      ([f.max_finite | f.sign] * 2, 0, 0),               # all lowest
      ([u(1), u(3), f.sign | u(2)], 1, 2),               # subnormals compared exactly
      ([f.sign | f.qnan | u(3), f.inf, one], 0, 0),      # a negative NaN first
      ([f.inf, one, f.sign | f.inf], 0, 2),              # ±inf are ordinary values
      ([one, one | f.sign, one, one | f.sign], 0, 1),    # ties: the first
  ]
  width = max(len(r) for r, _, _ in rows)
  bits = np.array([r + [r[-1]] * (width - len(r)) for r, _, _ in rows], f.ubits)  # pad: same winner
  return bits, [r[1] for r in rows], [r[2] for r in rows]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", reference.DTYPES)
@pytest.mark.parametrize("jit", [False, True])
def test_with_index_values_bit_for_bit(method, dtype, jit, x64):
  """Hand-written rows: values are the element at the index, bit for bit (sign of zero, NaN
  payload and sign, signalling NaN, subnormals), in every float dtype and on every path."""
  with x64(dtype == "float64"):
    f = reference.Fmt(dtype)
    bits, want_max, want_min = _special_rows(f)
    x = f.view(bits)
    for op, want_index in (("max_with_index", want_max), ("min_with_index", want_min)):
      fn = functools.partial(op_fn(op, method), axis=-1)
      got = jax.device_get((jax.jit(fn) if jit else fn)(x))
      want = reference.argreduce(x, -1, False, op=op)
      np.testing.assert_array_equal(want[1], want_index)  # the reference agrees with the table
      np.testing.assert_array_equal(_bits(want[0]), bits[np.arange(len(bits)), want_index])
      reference.assert_matches(got, want, op=op, msg=f"{dtype} via {method}")


@pytest.mark.parametrize("op", WITH_INDEX)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape,axis,keepdims", [
    ((5, 33), None, False), ((5, 33), None, True), ((5, 33), 0, True), ((2, 3, 40), 1, False),
    ((2, 3, 40), -1, True), ((70,), 0, False), ((4, 1), -1, False)])
def test_with_index_axes_and_keepdims(op, method, shape, axis, keepdims):
  rng = np.random.default_rng(sum(shape))
  f = reference.Fmt("float16")
  x = reference.make_input(f, rng, shape, axis)
  got = jax.device_get(op_fn(op, method)(x, axis=axis, keepdims=keepdims))
  reference.assert_matches(got, reference.argreduce(x, axis, keepdims, op=op), op=op)


@pytest.mark.parametrize("op", WITH_INDEX)
def test_with_index_default_axis_is_last(op):
  x = reference.fill_rows("float32", np.random.default_rng(3), 6, 50).reshape(2, 3, 50)
  got = jax.device_get(getattr(jax_argreduce, op)(x))
  reference.assert_matches(got, reference.argreduce(x, -1, False, op=op), op=op)
  assert got[0].shape == got[1].shape == (2, 3)


@pytest.mark.parametrize("op", WITH_INDEX)
def test_with_index_indices_are_argmax(op):
  """indices exactly argmax's (argmin's), on the same inputs, through the public functions."""
  arg = {"max_with_index": jax_argreduce.argmax, "min_with_index": jax_argreduce.argmin}[op]
  rng = np.random.default_rng(4)
  for dtype in ("bfloat16", "float32"):
    x = reference.fill_rows(dtype, rng, 64, 129)
    for axis in (0, 1, None):
      _, idx = getattr(jax_argreduce, op)(x, axis=axis)
      np.testing.assert_array_equal(np.asarray(idx), np.asarray(arg(x, axis=axis)))


@pytest.mark.parametrize("op", WITH_INDEX)
@pytest.mark.parametrize("method", METHODS)
def test_with_index_one_pass_on_cpu(op, method):
  """The kernel path is one handler call returning values and indices (no second gather
  kernel, no argreduce handler); the xla path calls no handler."""
  from jax_argreduce import _ffi
  path = "auto" if method == "public" else method
  fn = jax.jit(lambda v: _api.reduce(v, -1, False, op=op, method=path))
  text = fn.lower(jax.ShapeDtypeStruct((4, 100), jnp.float32)).as_text()
  handler = _ffi.target("max_with_index", "cpu")
  calls = text.count(f"@{handler}") + text.count(f'"{handler}"')
  if method == "xla":
    assert calls == 0
  else:
    assert calls == 1, text
    assert _ffi.target("argreduce", "cpu") not in text
    assert "gather" not in text


@pytest.mark.parametrize("op", ARG_OPS + WITH_INDEX)
def test_dispatch_is_the_one_router(op):
  """_dispatch.route decides the path: xla when forced or for non-handler dtypes, kernel when
  forced, the measured crossover (handler_wins) for auto."""
  shape, dtype = (4, 100), np.float32
  assert _dispatch.route(op, "cpu", shape, dtype, "xla") == "xla"
  assert _dispatch.route(op, "cpu", shape, dtype, "kernel") == "kernel"
  assert _dispatch.route(op, "cpu", shape, np.int32, "kernel") == "xla"
  assert _dispatch.route(op, "cpu", (2 ** 31,), np.float16, "kernel") == "xla"
  for shape in [(1, 10 ** 6), (1000, 1000), (4, 100)]:
    want = "kernel" if _dispatch.handler_wins(op, "cpu", shape, dtype) else "xla"
    assert _dispatch.route(op, "cpu", shape, dtype) == want
  assert _dispatch.route(op, "no_such_platform", (4, 100), dtype, "kernel") == "xla"
  for d in ("float16", "bfloat16", "float32", "float64"):
    assert _dispatch.handles_dtype(reference.np_dtype(d))
  for d in (np.int32, np.bool_, np.complex64, ml_dtypes.float8_e4m3fn):
    assert not _dispatch.handles_dtype(d)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "bool"])
@pytest.mark.parametrize("op", ["argmax", "argmin", "max_with_index", "categorical"])
def test_axis_longer_than_the_index_dtype_raises(op, dtype, x64_mode):
  """An axis of 2^31 + 1 elements: ValueError with int32 indices, for the handlers' dtypes and
  the jnp fallback's (ints, bool) alike; int64 indices (x64) hold it. categorical raises in
  both modes (issue 43: under x64 its XLA path asked for 86 GB of noise): its counters are
  32-bit. Shapes only (jax.eval_shape): nothing is allocated."""
  n = 2**31 + 1
  if op == "categorical":
    fn = lambda v: jax_argreduce.categorical(jax.random.key(0), v, axis=0)
  else:
    fn = lambda v: getattr(jax_argreduce, op)(v, axis=0)
  spec = jax.ShapeDtypeStruct((n, 1), dtype)
  if op == "categorical":
    with pytest.raises(ValueError, match=r"rows of at most 2147483647 \(2\*\*31 - 1\)"):
      jax.eval_shape(fn, spec)
    if x64_mode:  # the longest row it takes
      jax.eval_shape(fn, jax.ShapeDtypeStruct((n - 2, 1), dtype))
  elif x64_mode:
    jax.eval_shape(fn, spec)
  else:
    with pytest.raises(ValueError, match="indices can hold"):
      jax.eval_shape(fn, spec)


def test_cpu_routing_of_narrow_rows():
  """NOTES.md try 43 as _dispatch encodes it: on CPU, from 8192 rows of at most 16 columns the
  exact XLA path (it vectorizes across rows), the handler otherwise; one column always the XLA
  path (XLA folds it to index 0), on CUDA too. Both paths equal numpy there."""
  f32, bf16 = np.dtype(np.float32), np.dtype(jnp.bfloat16)
  wins = lambda shape, dtype, platform="cpu": _dispatch.handler_wins("argmax", platform, shape,
                                                                      dtype)
  for dtype in (f32, bf16):
    assert not wins((131072, 8), dtype) and not wins((8192, 16), dtype)
    assert not wins((8, 1024, 2), dtype)  # rows are every batch dimension
    assert wins((8191, 16), dtype) and wins((65536, 17), dtype) and wins((65536, 24), dtype)
    assert not wins((4, 1), dtype) and not wins((2 ** 21, 1), dtype, "cuda")
  assert _dispatch.handler_wins("categorical", "cpu", (131072, 8), f32)
  rng = np.random.default_rng(7)
  for shape, handler in [((8192, 5), False), ((3, 1), False), ((8191, 5), True)]:
    x = rng.standard_normal(shape).astype(np.float32)
    x[::3, -1] = np.nan
    x[1::3, 0] = -0.0  # one column: the value, bit for bit (its sign kept)
    if shape[-1] > 1:
      x[1::3, -1] = 0.0  # ties the -0: the lower index
    for op in ("argmax", "argmin", "max_with_index"):
      fn = jax.jit(lambda v: _api.reduce(v, -1, op=op))
      target = _ffi.target("max_with_index" if op == "max_with_index" else "argreduce", "cpu")
      assert (f"@{target}(" in fn.lower(x).as_text()) == handler, (shape, op)
      reference.assert_matches(fn(x), reference.REFERENCE[op](x, -1), op=op, msg=str(shape))


def test_cuda_routing_of_the_measured_shapes():
  """The in-chain crossovers of benchmarks/NOTES.md (tries 23, 37, 40, 41, 62-65) as _dispatch
  encodes them: float32 takes the kernels from 128 rows of >= 65536 columns and 128-2047 rows
  of >= 16384 (rows read from their end with evict-first loads, the LM head's output still in
  L2) and from 1536 rows of >= 2048 columns up to 128 MiB, the exact XLA path for fewer rows,
  smaller and larger inputs; bfloat16 several wide rows, long rows from 80, rows of 16 KB from
  768 and many rows from 16 MiB (or 2048 columns) take the kernels, one row of up to 2^20
  columns and smaller inputs the XLA path."""
  f32, bf16 = np.dtype(np.float32), np.dtype(jnp.bfloat16)
  wins = lambda shape, dtype: _dispatch.handler_wins("argmax", "cuda", shape, dtype)
  assert wins((256, 202048), f32) and wins((512, 65536), f32) and wins((128, 202048), f32)
  assert wins((256, 32000), f32) and wins((128, 32000), f32) and wins((512, 32000), f32)
  assert not wins((64, 202048), f32) and not wins((64, 32000), f32)
  assert not wins((8, 202048), f32) and not wins((65536, 1024), f32)
  assert wins((4096, 4096), f32) and wins((4096, 1024), f32) and wins((65536, 256), f32)
  assert wins((2048, 2048), f32)  # 2048 columns, 16 MiB
  assert not wins((16384, 4096), f32)  # 256 MiB: past the wider formats' 128 MiB
  assert not wins((4096, 512), f32) and not wins((1024, 4096), f32)
  assert wins((1536, 2048), f32) and wins((1536, 8192), f32)  # two-warp teams from 1536 rows
  assert not wins((1024, 2048), f32) and not wins((1024, 8192), f32)
  assert not wins((1535, 4096), f32) and not wins((1536, 2047), f32)
  assert wins((100, 32000), f32) and wins((96, 16384), f32) and wins((100, 65536), f32)
  assert not wins((95, 32000), f32) and not wins((80, 50257), f32)  # 512-thread blocks from 96
  # Rows of <= 256 KB; 100x8192 is below the long rows' 16384 columns (from 96 rows of
  # >= 16384 float32 columns the 6 MiB floor always holds).
  assert not wins((100, 65537), f32) and not wins((100, 8192), f32)
  assert not wins((16384, 128), f32) and wins((1024, 16384), f32) and wins((1024, 32000), f32)
  assert wins((192, 50257), f32) and wins((192, 50257), bf16)
  assert wins((8, 202048), bf16) and wins((256, 202048), bf16) and wins((65536, 1024), bf16)
  assert wins((256, 32000), bf16) and wins((128, 32000), bf16) and not wins((64, 32000), bf16)
  assert wins((2048, 2048), bf16) and wins((16384, 512), bf16) and wins((16384, 4096), bf16)
  assert not wins((4096, 512), bf16) and not wins((8192, 512), bf16)
  assert not wins((1024, 4096), bf16) and not wins((4096, 1024), bf16)
  assert wins((1024, 16384), bf16) and wins((128, 16384), bf16)  # long rows from 80 rows
  assert wins((80, 50257), bf16) and wins((96, 16384), bf16) and wins((100, 32000), bf16)
  assert not wins((79, 32000), bf16) and not wins((96, 8192), bf16) and not wins((128, 8192), bf16)
  assert wins((768, 8192), bf16) and wins((1024, 8192), bf16)  # rows of 16 KB from 768
  assert not wins((767, 8192), bf16) and not wins((768, 4096), bf16)
  assert wins((1536, 4096), bf16) and not wins((1024, 2048), bf16)
  assert wins((65536, 64), bf16) and wins((65536, 64), f32)  # narrow rows: the team kernels
  assert not wins((1, 202048), bf16) and not wins((1, 202048), f32)
