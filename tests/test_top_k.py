"""top_k (SPEC §1e) against the numpy reference (reference.top_k, decoded floats), on every path
this platform has: the public op, the handler forced (``method="kernel"``) and the exact XLA path
(``method="xla"``); every special value, ties across chunks, k = 0, 1 and cols, any axis; jit,
vmap, JVP, export and the errors. On a GPU backend the same tests run the CUDA kernels (the
GPU-only cases, planner paths and sanitizers, are in test_gpu_top_k.py).
"""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_argreduce as ar
import reference
from jax_argreduce import _dispatch, _ffi, _primitives
from reference import Fmt

METHODS = ("auto", "kernel", "xla")
PLATFORM = {"gpu": "cuda"}.get(jax.default_backend(), jax.default_backend())


def check(x, k, axis=-1, method="auto", got=None):
  """Ours against the reference: values bit for bit, indices by value, int32 indices."""
  if got is None:
    got = ar.top_k(x, k, axis=axis, method=method)
  want_v, want_i = reference.top_k(np.asarray(x), k, axis=axis)
  values, indices = got
  assert indices.dtype == np.int32, indices.dtype
  assert values.dtype == np.asarray(x).dtype, values.dtype
  reference.assert_matches((np.asarray(values), np.asarray(indices)),
                           (want_v, want_i.astype(np.int32)), op="max_with_index",
                           msg=f"k={k} axis={axis} method={method} shape={np.shape(x)}")


# Shapes that cross the kernels' chunks (2048 to 8192 elements) and levels on a GPU, and the
# CPU handler's buffer (2k) several times over.
SHAPES = [(1, 1), (1, 7), (3, 100), (2, 2049), (5, 8193), (2, 20000), (1, 70001)]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", reference.DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_special_values(shape, dtype, method, x64):
  """Every fill of reference.FILLS (NaNs of any sign and payload, ties, ±inf, ±0, subnormals,
  all-equal and all-NaN rows) at several k, values bit for bit."""
  rng = np.random.default_rng(hash((shape, dtype)) % 2**32)
  rows, cols = shape
  with x64(dtype == "float64"):
    for kinds in (np.arange(rows) % len(reference.FILLS),
                  rng.integers(0, len(reference.FILLS), size=rows)):
      x = reference.fill_rows(dtype, rng, rows, cols, kinds)
      for k in sorted({1, min(5, cols), min(50, cols), cols}):
        check(x, k, method=method)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_fill_every_k_small_rows(dtype):
  """Rows of 33 columns, every fill, every k from 0 to cols."""
  rng = np.random.default_rng(0)
  x = reference.fill_rows(dtype, rng, len(reference.FILLS), 33,
                          np.arange(len(reference.FILLS)))
  for k in range(0, 34):
    check(x, k)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_ties_across_chunks(dtype):
  """The k-th place shared by many equal keys spread over the whole row (every chunk of a GPU
  level holds some): the lowest indices win; -0.0 ties +0.0; NaNs first, in index order."""
  f = Fmt(dtype)
  cols = 40000
  rng = np.random.default_rng(1)
  rows = []
  base = f.from_float(np.full(cols, -1.0, np.float32))
  r = base.copy()
  r[rng.choice(cols, 300, replace=False)] = f.from_float(np.float32(2.0))   # 300 equal maxima
  rows.append(r)
  r = base.copy()
  pos = rng.choice(cols, 200, replace=False)
  r[pos] = np.where(rng.random(200) < 0.5, f.sign, f.ubits.type(0))        # ±0 as the maxima
  rows.append(r)
  r = base.copy()
  r[rng.choice(cols, 70, replace=False)] = f.nans(rng, 70)                  # NaNs first
  r[rng.choice(cols, 100, replace=False)] = f.inf
  rows.append(r)
  rows.append(np.full(cols, f.inf | f.sign, f.ubits))                       # all -inf
  x = f.view(np.stack(rows))
  for k in (1, 16, 50, 256, 1024):
    check(x, k)
    check(x, k, method="kernel")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_normal_rows_many_k(dtype):
  rng = np.random.default_rng(2)
  x = reference.random_rows(rng, 4, 30001, dtype)
  for k in (1, 2, 16, 17, 50, 255, 256, 1000, 1024, 1025, 4096):
    check(x, k)


def test_k_one_is_max_with_index():
  """The select handler at k = 1 gives max_with_index's results; "auto" at k = 1 is
  max_with_index's call (its routes), the top_k handler absent from the program."""
  rng = np.random.default_rng(3)
  x = reference.fill_rows("float32", rng, 18, 1000, np.arange(18))
  want_v, want_i = ar.max_with_index(x, keepdims=True)
  for method in ("kernel", "auto"):
    values, indices = ar.top_k(x, 1, method=method)
    np.testing.assert_array_equal(np.asarray(indices), np.asarray(want_i))
    np.testing.assert_array_equal(reference.as_bits(values), reference.as_bits(want_v))
  platform = jax.default_backend()
  top_k_target = _ffi.target("top_k", platform)
  for k, method, select in ((1, "auto", False), (1, "kernel", True), (2, "auto", True)):
    text = jax.jit(lambda v: ar.top_k(v, k, method=method)).lower(x).as_text()
    assert (f"@{top_k_target}(" in text) == select, (k, method)
  calls = lambda fn: re.findall(r"custom_call @(\w+)\(", jax.jit(fn).lower(x).as_text())
  assert calls(lambda v: ar.top_k(v, 1)) == calls(lambda v: ar.max_with_index(v, keepdims=True))


def test_cuda_routes():
  """CUDA: rows of <= TOP_K_XLA_MAX_COLS columns take the exact XLA path (XLA's TopK won
  there in-chain, NOTES.md "Routing rules"), wider rows the select kernels where they take
  the call."""
  f32 = np.dtype(np.float32)
  wins = lambda shape, k=8: _dispatch.handler_wins("top_k", "cuda", shape, f32, k)
  assert not wins((4096, 64)) and not wins((4096, 256)) and not wins((1, 256))
  assert wins((4096, 257)) and wins((1, 1024)) and wins((64, 32000)) and wins((8, 128256), 50)
  assert not wins((8, 128256), 2048)  # past TOP_K_MAX_K: the kernels do not take it
  assert _dispatch.handler_wins("top_k", "cpu", (4096, 64), f32, 8)


def test_k_zero():
  x = np.ones((3, 5), np.float32)
  values, indices = ar.top_k(x, 0)
  assert values.shape == (3, 0) and values.dtype == np.float32
  assert indices.shape == (3, 0) and indices.dtype == np.int32
  values, indices = ar.top_k(x, 0, axis=0)
  assert values.shape == (0, 5) and indices.shape == (0, 5)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_axes(axis):
  rng = np.random.default_rng(4)
  x = reference.make_input(Fmt("bfloat16"), rng, (6, 50, 7), axis)
  check(x, 5, axis=axis)


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint16", "bool"])
def test_integers_and_bool(dtype):
  """Other dtypes through lax.top_k: exact, the lowest index first among equal values."""
  rng = np.random.default_rng(5)
  x = rng.integers(0, 4, size=(3, 300)).astype(dtype)
  for k in (1, 7, 300):
    check(x, k)


def test_unaligned_rows():
  """Rows that do not start on a 16-byte boundary (odd widths), sliced views."""
  rng = np.random.default_rng(6)
  for cols in (8191, 8193, 12345):
    x = reference.random_rows(rng, 3, cols, "bfloat16")
    check(x, 50)
    check(x[:, 1:], 50)


def test_jit_and_repeated_calls():
  rng = np.random.default_rng(7)
  f = jax.jit(lambda v: ar.top_k(v, 10))
  for _ in range(3):
    x = reference.random_rows(rng, 5, 3000, "float32")
    check(x, 10, got=f(x))


def test_vmap():
  rng = np.random.default_rng(8)
  x = reference.random_rows(rng, 4 * 6, 500, "float32").reshape(4, 6, 500)
  values, indices = jax.vmap(lambda v: ar.top_k(v, 7))(x)
  check(x, 7, got=(values, indices))
  # vmapped over the last axis, selecting along the first: the batch is the primitive's last
  # axis (moved), the answer is top_k along axis 0.
  values, indices = jax.vmap(lambda v: ar.top_k(v, 3, axis=0), in_axes=-1, out_axes=-1)(x)
  check(x, 3, axis=0, got=(values, indices))


def test_jvp_and_grad():
  rng = np.random.default_rng(9)
  x = jnp.asarray(reference.random_rows(rng, 3, 200, "float32"))
  t = jnp.asarray(reference.random_rows(rng, 3, 200, "float32"))
  (values, indices), (dv, di) = jax.jvp(lambda v: ar.top_k(v, 4), (x,), (t,))
  np.testing.assert_array_equal(dv, jnp.take_along_axis(t, indices, axis=-1))
  assert di.dtype == jax.dtypes.float0
  grad = jax.grad(lambda v: ar.top_k(v, 4)[0].sum())(x)
  want = np.zeros(x.shape, np.float32)
  np.put_along_axis(want, np.asarray(indices), 1.0, axis=-1)
  np.testing.assert_array_equal(grad, want)


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_export_round_trip(symbolic):
  from jax import export
  rng = np.random.default_rng(10)
  x = reference.random_rows(rng, 4, 3000, "float32")
  # Symbolic widths need "c >= k" (as lax.top_k's own shape rule does).
  shape = export.symbolic_shape("r, c", constraints=["c >= 9"]) if symbolic else x.shape
  exported = export.export(jax.jit(lambda v: ar.top_k(v, 9)),
                           disabled_checks=ar.export_disabled_checks())(
      jax.ShapeDtypeStruct(shape, x.dtype))
  restored = export.deserialize(exported.serialize())
  check(x, 9, got=restored.call(x))


def test_route():
  """The handler on CPU for every float dtype; on CUDA the kernels take 16-bit formats and
  float32 up to TOP_K_MAX_K, static shapes only, float64 and larger k the XLA path."""
  f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
  assert _dispatch.route("top_k", "cpu", (4, 100), f64, k=100) == "kernel"
  assert _dispatch.route("top_k", "cpu", (4, 100), f32, "xla", k=5) == "xla"
  if _ffi.HAS_CUDA:
    assert _dispatch.route("top_k", "cuda", (4, 100), f32, "kernel", k=5) == "kernel"
    assert _dispatch.route("top_k", "cuda", (4, 100), f64, "kernel", k=5) == "xla"
    big = _ffi.TOP_K_MAX_K + 1
    assert _dispatch.route("top_k", "cuda", (4, 5000), f32, "kernel", k=big) == "xla"
    from jax import export
    r = export.symbolic_shape("r")[0]
    assert _dispatch.route("top_k", "cuda", (r, 100), f32, "kernel", k=5) == "xla"


def test_workspace_sizes():
  """The CUDA workspace is a pure function of the shape (no GPU): two candidate buffers of
  8 bytes per candidate, none for rows of one chunk, + 16 for alignment."""
  plan = _ffi.debug_top_k_plan(256, 202048, 50, 4)
  assert plan["levels"][0]["chunks"] == math.ceil(202048 / plan["levels"][0]["chunk"])
  assert plan["levels"][-1]["chunks"] == 1
  assert plan["workspace_bytes"] == 256 * plan["levels"][0]["chunks"] * 50 * 8
  assert _ffi.cuda_workspace_bytes("top_k", 256, 202048, 50, 4) == plan["workspace_bytes"] + 16
  one_chunk = _ffi.debug_top_k_plan(4096, 4096, 50, 4)
  assert len(one_chunk["levels"]) == 1 and one_chunk["workspace_bytes"] == 0
  # Few rows get small chunks (the row spread over many blocks), many rows long ones.
  few = _ffi.debug_top_k_plan(1, 202048, 50, 4)["levels"][0]["chunk"]
  many = _ffi.debug_top_k_plan(256, 202048, 50, 4)["levels"][0]["chunk"]
  assert few < many
  # Large k: more levels, each reading at most one chunk of candidates per block.
  deep = _ffi.debug_top_k_plan(1, 202048, 1024, 4)
  assert len(deep["levels"]) > 2
  for prev, level in zip(deep["levels"], deep["levels"][1:]):
    assert level["items"] == prev["chunks"] * 1024
  assert _ffi.cuda_workspace_bytes("argreduce", 7, 9, 0, 4) == _ffi.CUDA_WORKSPACE_BYTES


@pytest.mark.parametrize("bad_k", [-1, 11])
def test_k_out_of_range(bad_k):
  with pytest.raises(ValueError, match="k must be"):
    ar.top_k(np.ones((2, 10), np.float32), bad_k)


def test_errors():
  x = np.ones((2, 10), np.float32)
  with pytest.raises(TypeError, match="k must be an int"):
    ar.top_k(x, 2.0)
  with pytest.raises(TypeError, match="axis must be an int"):
    ar.top_k(x, 2, axis=None)
  with pytest.raises(TypeError, match="at least one dimension"):
    ar.top_k(np.float32(1), 1)
  with pytest.raises(IndexError):
    ar.top_k(x, 2, axis=2)
  with pytest.raises(ValueError, match="complex"):
    ar.top_k(x.astype(np.complex64), 2)
  with pytest.raises(ValueError, match="method"):
    ar.top_k(x, 2, method="fast")
  with pytest.raises(TypeError):
    ar.top_k("abc", 1)


def test_primitive_abstract_eval_keeps_rows():
  aval = jax.core.ShapedArray((3, 4, 100), np.float32)
  values, indices = _primitives.top_k_p.abstract_eval(aval, k=5, index_dtype=np.dtype(np.int32),
                                                      method="auto")[0]
  assert values.shape == (3, 4, 5) and values.dtype == np.float32
  assert indices.shape == (3, 4, 5) and indices.dtype == np.int32
