"""Sharded inputs (SPEC §1d, issue 11) on 4 virtual CPU devices (tests/conftest.py), or on the
GPUs of a 2-GPU host (the 1-D mesh has N = 2 shards there; 2x2-mesh cases need 4 devices).

Every case checks the results against numpy and the compiled HLO's collectives: rows split ->
no collective at all; reduction axis split -> only ``[rows, shards]``-sized exchanges (under
explicit sharding all-gathers of the value bits and the indices, merged into one collective on
GPU), never a gather of the input. Under explicit sharding each block takes the path
``_dispatch.route`` gives its shape on this platform (one column: the XLA path everywhere; on CPU
otherwise the handler but for >= 8192 rows of <= 16 columns, so the handler for these tests'
blocks; on GPU the measured CUDA rule; the handler with ``method="kernel"``), and the tests
check that this path, not a gather, is what gets partitioned; under Auto mesh axes (XLA decides
the split after lowering) the calls take the exact XLA path, which XLA partitions itself
(jax_argreduce/_sharding.py says why).
"""

from __future__ import annotations

import contextlib
import math
import re

import jax
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jax_argreduce as ar
from jax_argreduce import _api, _dispatch, _ffi

# Shards of the 1-D mesh: the 4 virtual CPU devices of conftest, or 2 GPUs.
N = 4 if jax.device_count() >= 4 else 2
pytestmark = pytest.mark.skipif(jax.device_count() < 2, reason="needs 2 or 4 devices")
needs4 = pytest.mark.skipif(jax.device_count() < 4, reason="a 2x2 mesh needs 4 devices")

OPS = {  # name -> (numpy index reference, with_value)
    "argmax": (np.argmax, False),
    "argmin": (np.argmin, False),
    "max_with_index": (np.argmax, True),
    "min_with_index": (np.argmin, True),
}
ROWS, COLS = 8, 4000  # 32000 elements
# The lowering platform of the default backend, as _dispatch.route names it.
PLATFORM = {"gpu": "cuda"}.get(jax.default_backend(), jax.default_backend())


def _op(name, method="public"):
  # Late lookup: the public functions are module attributes (so a rewired package is seen).
  if method == "public":
    return getattr(ar, name)
  return lambda v, axis=-1, axis_name=None: _api.reduce(v, axis, False, op=name, method=method,
                                                        axis_name=axis_name)


def _kernel_method(method):
  """Skips method="kernel" where "auto" takes the handler for the blocks of ROWS x COLS (CPU:
  the XLA path only for one column or >= 8192 rows of <= 16 columns): the same program."""
  if method == "kernel" and PLATFORM == "cpu":
    pytest.skip("on CPU the public op takes the handler for these blocks "
                "(_dispatch.handler_wins)")


@contextlib.contextmanager
def shardy(enabled: bool):
  old = getattr(jax.config, "jax_use_shardy_partitioner", None)
  if old is None:  # pragma: no cover - jax without the flag: Shardy only
    if not enabled:
      pytest.skip("this jax has no jax_use_shardy_partitioner flag (Shardy only)")
    yield
    return
  jax.config.update("jax_use_shardy_partitioner", enabled)
  try:
    yield
  finally:
    jax.config.update("jax_use_shardy_partitioner", old)


@pytest.fixture(params=[True, False], ids=["shardy", "gspmd"])
def partitioner(request):
  with shardy(request.param):
    yield request.param


def mesh_1d(axis_type=AxisType.Explicit):
  return jax.make_mesh((N,), ("d",), axis_types=(axis_type,))


def mesh_2d(axis_type=AxisType.Explicit):
  return jax.make_mesh((2, 2), ("a", "b"), axis_types=(axis_type,) * 2)


def randn(shape, dtype="float32", seed=0):
  x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
  return x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


_COLLECTIVE = re.compile(
    r"=\s*(?P<type>\(?[^=]*?\)?)\s+(?P<op>all-gather|all-reduce|all-to-all|collective-permute|"
    r"reduce-scatter|collective-broadcast)(?:-start)?\(")
_ARRAY = re.compile(r"[a-z]+[0-9]*\[([0-9,]*)\]")


def collectives(compiled_text: str):
  """[(op, [element count of each array in its result])] for every collective in the HLO."""
  found = []
  for line in compiled_text.splitlines():
    m = _COLLECTIVE.search(line)
    if m:
      sizes = [int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64))
               for dims in _ARRAY.findall(m.group("type"))]
      found.append((m.group("op"), sizes))
  return found


def check_results(name, got, x, axis=-1):
  """Our (values, indices) or indices against numpy on the same (global) input."""
  ref, with_value = OPS[name]
  want = ref(np.asarray(x), axis=axis)
  if with_value:
    values, indices = got
    np.testing.assert_array_equal(np.asarray(indices), want)
    want_values = np.take_along_axis(np.asarray(x), np.expand_dims(want, axis), axis)
    want_values = np.squeeze(want_values, axis)
    # Bit for bit: the NaN, the sign of zero of the winning element.
    np.testing.assert_array_equal(np.atleast_1d(np.asarray(values)).view(np.uint8),
                                  np.atleast_1d(want_values).view(np.uint8))
  else:
    np.testing.assert_array_equal(np.asarray(got), want)


def assert_pairs_only(compiled, rows, shards, *, max_operands=2):
  """The ``[rows, shards]`` pairs exchanged once: at most ``max_operands`` gathered buffers
  (explicit sharding: values and indices; the XLA path: one per operand of its variadic
  reduction), each no larger than ``[rows, shards]``; in particular no all-gather /
  all-to-all of an input-sized buffer. On GPU XLA's combiner merges them: exactly ONE
  collective."""
  found = collectives(compiled.as_text())
  operands = [size for op, sizes in found for size in sizes]
  assert found and 1 <= len(operands) <= max_operands, found
  if PLATFORM == "cuda":
    assert len(found) == 1, found
  for op, sizes in found:
    assert op in ("all-gather", "all-reduce"), found
    assert max(sizes) <= rows * shards, found


def assert_handler_called(compiled):
  """The partitioned program runs the FFI handler (not the XLA path) on each block."""
  text = compiled.as_text()
  assert any(f'custom_call_target="{t}"' in text for t in _ffi.all_targets()), text


def assert_routed(compiled, name, method, block_shape, dtype):
  """Each block runs the path _dispatch routes its shape to on this platform: the handler
  (``method="kernel"``, or where the measured rule picks it), else the XLA path (no handler
  call at all)."""
  if _dispatch.route(name, PLATFORM, block_shape, np.dtype(dtype), method.replace(
      "public", "auto")) == "kernel":
    assert_handler_called(compiled)
  else:
    text = compiled.as_text()
    assert not any(f'custom_call_target="{t}"' in text for t in _ffi.all_targets()), text


def assert_no_collective(compiled):
  assert collectives(compiled.as_text()) == []


# ---------------------------------------------------------------------------------------------
# Explicit sharding (the sharding is in the type): shard_map over the handler calls.

CASES_1D = [("rows", P("d", None)), ("vocab", P(None, "d"))]


@pytest.mark.parametrize("method", ["public", "kernel"])
@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("where,spec", CASES_1D, ids=[c[0] for c in CASES_1D])
def test_mesh_1d(partitioner, name, where, spec, method):
  _kernel_method(method)
  mesh = mesh_1d()
  x = randn((ROWS, COLS), seed=1)
  xs = jax.device_put(x, NamedSharding(mesh, spec))
  f = jax.jit(lambda v: _op(name, method)(v, axis=-1))
  check_results(name, f(xs), x)
  compiled = f.lower(xs).compile()
  block = (ROWS // N, COLS) if where == "rows" else (ROWS, COLS // N)
  assert_routed(compiled, name, method, block, x.dtype)
  if where == "rows":
    assert_no_collective(compiled)
  else:
    assert_pairs_only(compiled, ROWS, N)


CASES_2D = [
    ("rows_a_vocab_b", P("a", "b"), 4, 2),
    ("rows_ab", P(("a", "b"), None), 2, 1),
    ("vocab_ab", P(None, ("a", "b")), 8, 4),
    ("vocab_b", P(None, "b"), 8, 2),
]


@needs4
@pytest.mark.parametrize("name", ["argmax", "min_with_index"])
@pytest.mark.parametrize("case,spec,rows,shards", CASES_2D, ids=[c[0] for c in CASES_2D])
def test_mesh_2d(partitioner, name, case, spec, rows, shards):
  mesh = mesh_2d()
  x = randn((ROWS, COLS), seed=2)
  xs = jax.device_put(x, NamedSharding(mesh, spec))
  f = jax.jit(lambda v: _op(name)(v, axis=-1))
  check_results(name, f(xs), x)
  compiled = f.lower(xs).compile()
  if shards == 1:
    assert_no_collective(compiled)
  else:
    assert_pairs_only(compiled, rows, shards)


def boundary_rows(dtype="float32"):
  """[8, 4000] rows whose winners sit at shard boundaries (4 shards of 1000 columns)."""
  x = -np.abs(randn((ROWS, COLS), seed=3)) - 1.0  # all < -1: a 0 or -0 below wins outright
  x[0, [2500, 3000]] = np.nan              # first NaN in shard 2 (another in shard 3)
  x[1, [999, 1000]] = 5.0                  # tie: shard 0's last vs shard 1's first column
  x[2, 999], x[2, 1000] = -0.0, 0.0        # -0 == +0: a tie, the lower index (-0) wins
  x[3, :] = -np.inf                        # all -inf: index 0
  x[4, [1500, 200]] = np.nan               # NaN in shards 1 and 0: the first (200)
  x[5, [1999, 2000, 3999]] = -9.0          # argmin tie across shards 1/2
  x[6, 3999] = np.nan                      # NaN in the last column only
  x[7, [0, 3999]] = 3.0                    # tie between the first and the last shard
  return x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name", list(OPS))
def test_nan_ties_at_shard_boundaries(name, dtype):
  mesh = mesh_1d()
  x = boundary_rows(dtype)
  xs = jax.device_put(x, NamedSharding(mesh, P(None, "d")))
  got = jax.jit(lambda v: _op(name)(v, axis=-1))(xs)
  check_results(name, got, x)


def test_float64_vocab_sharded(x64):
  with x64(True):
    mesh = mesh_1d()
    x = boundary_rows("float64")
    xs = jax.device_put(x, NamedSharding(mesh, P(None, "d")))
    f = jax.jit(lambda v: ar.max_with_index(v, axis=-1))
    got = f(xs)
    assert got[1].dtype == np.int64
    check_results("max_with_index", got, x)
    assert_pairs_only(f.lower(xs).compile(), ROWS, N)


@needs4
def test_other_axis_and_batch_dims():
  """A 3-D input reduced over its middle axis (moved last), batch and reduction axes split."""
  mesh = mesh_2d()
  x = randn((2, 4 * 250, 8), seed=4)  # reduce axis 1 (1000 columns over 'b')
  xs = jax.device_put(x, NamedSharding(mesh, P("a", "b", None)))
  f = jax.jit(lambda v: ar.argmax(v, axis=1))
  np.testing.assert_array_equal(np.asarray(f(xs)), np.argmax(x, axis=1))


@needs4
def test_axis_none_sharded():
  mesh = mesh_2d()
  x = boundary_rows()
  for spec in (P("a", "b"), P(None, ("a", "b")), P(("a", "b"), None)):
    xs = jax.device_put(x, NamedSharding(mesh, spec))
    got = jax.jit(lambda v: ar.argmax(v))(xs)
    assert int(got) == np.argmax(x)
    got = jax.jit(lambda v: ar.min_with_index(v, axis=None, keepdims=True))(xs)
    check_results("min_with_index", [g.reshape(()) for g in got], x.reshape(-1), axis=0)


def test_vmap_over_sharded_batch():
  """vmap adds rows to the primitive; the batched call is still partitioned."""
  mesh = mesh_1d()
  x = randn((2, 4, 1000), seed=5)
  xs = jax.device_put(x, NamedSharding(mesh, P(None, None, "d")))
  f = jax.jit(jax.vmap(lambda r: ar.argmax(r, axis=-1)))
  np.testing.assert_array_equal(np.asarray(f(xs)), np.argmax(x, axis=-1))
  assert_pairs_only(f.lower(xs).compile(), 8, N)


@pytest.mark.parametrize("spec", [P("d", None), P(None, "d")], ids=["rows", "vocab"])
def test_grad_of_values(partitioner, spec):
  """max_with_index values are differentiable; the tangent gather stays sharded too."""
  mesh = mesh_1d()
  x = randn((ROWS, COLS), seed=6)
  xs = jax.device_put(x, NamedSharding(mesh, spec))
  with jax.set_mesh(mesh):
    g = jax.jit(jax.grad(lambda v: ar.max_with_index(v, axis=-1)[0].sum()))(xs)
  want = np.zeros_like(x)
  want[np.arange(ROWS), np.argmax(x, axis=-1)] = 1.0
  np.testing.assert_array_equal(np.asarray(g), want)


# ---------------------------------------------------------------------------------------------
# Auto axes (XLA decides the split after lowering): the exact XLA path, partitioned by XLA.

def test_auto_axes_rows_local_and_vocab_pairs(partitioner):
  mesh = mesh_1d(AxisType.Auto)
  x = boundary_rows()
  for spec, pairs in ((P("d", None), False), (P(None, "d"), True)):
    xs = jax.device_put(x, NamedSharding(mesh, spec))
    for name in ("argmin", "max_with_index"):
      f = jax.jit(lambda v: _op(name)(v, axis=-1))
      check_results(name, f(xs), x)
      compiled = f.lower(xs).compile()
      if pairs:
        assert_pairs_only(compiled, ROWS, N, max_operands=3)  # XLA: one per reduced operand
      else:
        assert_no_collective(compiled)


@pytest.mark.parametrize("rows,cols", [(1, 202047), (8, 4001)], ids=["1x202047", "8x4001"])
def test_uneven_vocab_auto(rows, cols):
  """A reduction axis XLA splits unevenly (padded shards): exact, no gather of the input."""
  mesh = mesh_1d(AxisType.Auto)
  x = -np.abs(randn((rows, cols), seed=7)) - 1.0
  shard = -(-cols // N)
  x[0, [(N // 2) * shard + 1, (N - 1) * shard + 2]] = np.nan  # first NaN in shard 2 (4 shards)
  x[-1, [shard - 1, shard]] = 0.0               # a tie across shards 0/1 (last row)
  sharding = NamedSharding(mesh, P(None, "d"))
  for name in ("argmax", "min_with_index"):
    f = jax.jit(lambda v: _op(name)(jax.lax.with_sharding_constraint(v, sharding), axis=-1))
    check_results(name, f(x), x)
    assert_pairs_only(f.lower(x).compile(), rows, N, max_operands=3)


# ---------------------------------------------------------------------------------------------
# axis_name= inside a user's shard_map.

@pytest.mark.parametrize("method", ["public", "kernel"])
@pytest.mark.parametrize("name", list(OPS))
def test_axis_name_in_shard_map(name, method):
  _kernel_method(method)
  mesh = mesh_1d()
  x = boundary_rows()
  xs = jax.device_put(x, NamedSharding(mesh, P(None, "d")))
  out_specs = (P(), P()) if OPS[name][1] else P()
  f = jax.jit(jax.shard_map(lambda v: _op(name, method)(v, axis=-1, axis_name="d"), mesh=mesh,
                            in_specs=P(None, "d"), out_specs=out_specs))
  check_results(name, f(xs), x)
  compiled = f.lower(xs).compile()
  assert_routed(compiled, name, method, (ROWS, COLS // N), x.dtype)
  assert_pairs_only(compiled, ROWS, N)


@needs4
def test_axis_name_2d_and_tuple():
  mesh = mesh_2d()
  x = boundary_rows()
  # rows over 'a' (local to each device), vocab over 'b'
  xs = jax.device_put(x, NamedSharding(mesh, P("a", "b")))
  f = jax.jit(jax.shard_map(lambda v: ar.max_with_index(v, axis=-1, axis_name="b"), mesh=mesh,
                            in_specs=P("a", "b"), out_specs=(P("a"), P("a"))))
  check_results("max_with_index", f(xs), x)
  assert_pairs_only(f.lower(xs).compile(), ROWS // 2, 2)
  # vocab over both axes, 'a' major
  xs = jax.device_put(x, NamedSharding(mesh, P(None, ("a", "b"))))
  f = jax.jit(jax.shard_map(lambda v: ar.argmin(v, axis=1, axis_name=("a", "b")), mesh=mesh,
                            in_specs=P(None, ("a", "b")), out_specs=P()))
  check_results("argmin", f(xs), x)


def test_axis_name_grad():
  mesh = mesh_1d()
  x = randn((ROWS, COLS), seed=8)
  xs = jax.device_put(x, NamedSharding(mesh, P(None, "d")))
  loss = jax.shard_map(lambda v: ar.max_with_index(v, axis=-1, axis_name="d")[0].sum(),
                       mesh=mesh, in_specs=P(None, "d"), out_specs=P())
  g = jax.jit(jax.grad(loss))(xs)
  want = np.zeros_like(x)
  want[np.arange(ROWS), np.argmax(x, axis=-1)] = 1.0
  np.testing.assert_array_equal(np.asarray(g), want)


def test_axis_name_errors():
  mesh = mesh_1d()
  x = jax.device_put(randn((ROWS, COLS)), NamedSharding(mesh, P(None, "d")))
  with pytest.raises(ValueError, match="not a mesh axis"):
    ar.argmax(randn((ROWS, COLS)), axis=-1, axis_name="d")  # no shard_map at all
  bad = jax.shard_map(lambda v: ar.argmax(v, axis=-1, axis_name="nope"), mesh=mesh,
                      in_specs=P(None, "d"), out_specs=P())
  with pytest.raises(ValueError, match="'nope' is not a mesh axis"):
    jax.jit(bad)(x)
  # The reduction axis is not split over 'd' (the input is the same on every device).
  replicated = jax.device_put(randn((ROWS, COLS)), NamedSharding(mesh, P()))
  bad = jax.shard_map(lambda v: ar.argmax(v, axis=-1, axis_name="d"), mesh=mesh,
                      in_specs=P(), out_specs=P())
  with pytest.raises(ValueError, match="does not vary along mesh axis 'd'"):
    jax.jit(bad)(replicated)
  with pytest.raises(ValueError, match="needs an axis"):
    ar.argmax(randn((ROWS, COLS)), axis_name="d")
  # A vmap axis name is bound but is not a mesh axis: a clear error, not jax's pvary one.
  for op in (ar.argmax, ar.max_with_index):
    with pytest.raises(ValueError, match="'i' is bound here but is not a manual mesh axis"):
      jax.vmap(lambda v: op(v, axis=0, axis_name="i"), axis_name="i")(randn((N, COLS)))


# ---------------------------------------------------------------------------------------------
# jax.export of sharded calls (serialization included).

def _export_checks():
  return ar.export_disabled_checks()


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
@pytest.mark.parametrize("spec", [P("d", None), P(None, "d")], ids=["rows", "vocab"])
def test_export_round_trip(axis_type, spec):
  mesh = mesh_1d(axis_type)
  x = boundary_rows()
  xs = jax.device_put(x, NamedSharding(mesh, spec))
  exported = jax.export.export(jax.jit(lambda v: ar.min_with_index(v, axis=-1)),
                               disabled_checks=_export_checks())(xs)
  assert "CustomSPMDPartitioning" not in exported.mlir_module()
  restored = jax.export.deserialize(exported.serialize())
  check_results("min_with_index", restored.call(xs), x)
  compiled = jax.jit(restored.call).lower(xs).compile()
  if spec == P("d", None):
    assert_no_collective(compiled)
  else:
    assert_pairs_only(compiled, ROWS, N, max_operands=2 if axis_type == AxisType.Explicit else 3)


def test_export_gspmd():
  """Shardy off: export and serialization work. (Calling a sharded Exported back with Shardy
  off fails in jax 0.10.2 for jnp.argmax too: 'stablehlo.custom_call op should have a sharding
  attribute of type TensorShardingPerValueAttr'; not ours, so not called here.)"""
  with shardy(False):
    mesh = mesh_1d()
    xs = jax.device_put(randn((ROWS, COLS)), NamedSharding(mesh, P(None, "d")))
    exported = jax.export.export(jax.jit(lambda v: ar.argmax(v, axis=-1)),
                                 disabled_checks=_export_checks())(xs)
    assert jax.export.deserialize(exported.serialize()).out_avals[0].shape == (ROWS,)


# ---------------------------------------------------------------------------------------------
# categorical (SPEC §1c/§1d): sharded samples are the unsharded samples, index for index.

CAT_COLS = 4 * 1001  # vocab blocks of 1001 columns: shard starts inside a Philox block (8 / 2)
CAT_T = np.array([1.0, 1.0, 1.0, 0.0, 0.5, 2.0, 1.0, 0.05], np.float32)  # row 3: T == 0


def categorical_rows(dtype="float32", cols=CAT_COLS):
  """[8, cols] logits with the cases that cross shard boundaries (4 vocab shards)."""
  w = cols // 4
  x = 3.0 * randn((ROWS, cols), seed=11)
  x[0, [2 * w + 1, 3 * w + 2]] = np.nan    # first NaN in shard 2 (another in shard 3): wins
  x[1, :] = -np.inf                        # masked: only three columns, in shards 0, 1, 3
  x[1, [5, w + 3, 3 * w]] = 0.0
  x[2, :] = -np.inf                        # all -inf: index 0
  x[3, [w - 1, w]] = 50.0                  # T == 0 row: argmax, tie across shards 0/1
  x[4, 2 * w:3 * w] += 6.0                 # mass in shard 2
  return x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


def check_categorical_semantics(got, x, temperature=CAT_T):
  w = x.shape[-1] // 4
  assert got[0] == 2 * w + 1, got
  assert got[1] in (5, w + 3, 3 * w), got
  assert got[2] == 0, got
  if temperature is CAT_T:
    assert got[3] == w - 1, got


def _temperature_arg(kind):
  return {"none": None, "scalar": np.float32(0.7), "rows": CAT_T}[kind]


CAT_CASES = [  # id, mesh, spec, [rows, shards] of the one exchange (None: no collective)
    pytest.param("rows", "1d", P("d", None), None, id="rows"),
    pytest.param("vocab", "1d", P(None, "d"), (8, N), id="vocab"),
    pytest.param("rows_a_vocab_b", "2d", P("a", "b"), (4, 2), id="rows_a_vocab_b", marks=needs4),
    pytest.param("vocab_ab", "2d", P(None, ("a", "b")), (8, 4), id="vocab_ab", marks=needs4),
    pytest.param("rows_ab", "2d", P(("a", "b"), None), None, id="rows_ab", marks=needs4),
]


def _mesh(kind):
  return mesh_1d() if kind == "1d" else mesh_2d()


def assert_collectives(compiled, pairs):
  if pairs is None:
    assert_no_collective(compiled)
  else:
    assert_pairs_only(compiled, *pairs)


@pytest.mark.parametrize("keys", ["shared", "per_row"])
@pytest.mark.parametrize("case,mesh,spec,pairs", CAT_CASES)
def test_categorical_sharded_equals_unsharded(case, mesh, spec, pairs, keys):
  x = categorical_rows()
  key = jax.random.key(42)
  key = jax.random.split(key, ROWS) if keys == "per_row" else key
  f = jax.jit(lambda k, v, t: ar.categorical(k, v, temperature=t))
  want = np.asarray(f(key, x, CAT_T))
  check_categorical_semantics(want, x)
  xs = jax.device_put(x, NamedSharding(_mesh(mesh), spec))
  got = f(key, xs, CAT_T)
  np.testing.assert_array_equal(np.asarray(got), want)
  compiled = f.lower(key, xs, CAT_T).compile()
  assert_handler_called(compiled)
  assert_collectives(compiled, pairs)


@pytest.mark.parametrize("temperature", ["none", "scalar", "rows"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_categorical_vocab_sharded_temperatures(dtype, temperature):
  x = categorical_rows(dtype)
  t = _temperature_arg(temperature)
  key = jax.random.key(7)
  want = np.asarray(ar.categorical(key, x, temperature=t))
  check_categorical_semantics(want, x, t)
  xs = jax.device_put(x, NamedSharding(mesh_1d(), P(None, "d")))
  got = jax.jit(lambda k, v: ar.categorical(k, v, temperature=t))(key, xs)
  np.testing.assert_array_equal(np.asarray(got), want)


def test_categorical_float64_vocab_sharded(x64):
  with x64(True):
    x = categorical_rows("float64")
    key = jax.random.key(3)
    t = CAT_T.astype(np.float64)
    want = np.asarray(ar.categorical(key, x, temperature=t))
    assert want.dtype == np.int64
    check_categorical_semantics(want, x)
    xs = jax.device_put(x, NamedSharding(mesh_1d(), P(None, "d")))
    f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=t))
    np.testing.assert_array_equal(np.asarray(f(key, xs)), want)
    assert_pairs_only(f.lower(key, xs).compile(), ROWS, N)


@pytest.mark.parametrize("where,spec", CASES_1D, ids=[c[0] for c in CASES_1D])
def test_categorical_gspmd(where, spec):
  """Shardy off: the same shard_map partitioning, the same samples."""
  with shardy(False):
    x = categorical_rows()
    key = jax.random.key(5)
    want = np.asarray(ar.categorical(key, x, temperature=CAT_T))
    xs = jax.device_put(x, NamedSharding(mesh_1d(), spec))
    f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=CAT_T))
    np.testing.assert_array_equal(np.asarray(f(key, xs)), want)
    assert_collectives(f.lower(key, xs).compile(), None if where == "rows" else (ROWS, N))


# [4, 8, 1000] logits reduced over the last axis, on the 2x2 mesh: the row counter is the flat
# row; with one key and the second batch dimension split, a block's rows are runs of counters.
CAT_3D = [
    ("batch_a_vocab_b", P("a", None, "b"), (16, 2)),
    ("seq_a_vocab_b", P(None, "a", "b"), (16, 2)),   # runs: one call per local batch element
    ("batch_a_seq_b", P("a", "b", None), None),
    ("seq_ab", P(None, ("a", "b"), None), None),     # runs
    ("seq_b_batch_a", P("b", "a", None), None),      # runs
]


@needs4
@pytest.mark.parametrize("keys", ["shared", "per_row"])
@pytest.mark.parametrize("case,spec,pairs", CAT_3D, ids=[c[0] for c in CAT_3D])
def test_categorical_batch_dims(case, spec, pairs, keys):
  x = 2.0 * randn((4, 8, 1000), seed=12)
  key = jax.random.key(9)
  key = jax.random.split(key, (4, 8)) if keys == "per_row" else key
  t = np.linspace(0.0, 2.0, 32, dtype=np.float32).reshape(4, 8)
  want = np.asarray(ar.categorical(key, x, temperature=t))
  np.testing.assert_array_equal(want[0, 0], np.argmax(x[0, 0]))  # T == 0
  xs = jax.device_put(x, NamedSharding(mesh_2d(), spec))
  f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=t))
  np.testing.assert_array_equal(np.asarray(f(key, xs)), want)
  assert_collectives(f.lower(key, xs).compile(), pairs)


@needs4
def test_categorical_other_axis():
  """axis=1 of a [8, 1000, 4] input (moved last), vocab split: the global column is the
  counter wherever the axis was."""
  x = randn((8, 1000, 4), seed=13)
  key = jax.random.key(1)
  want = np.asarray(ar.categorical(key, x, axis=1))
  xs = jax.device_put(x, NamedSharding(mesh_2d(), P("a", "b", None)))
  got = jax.jit(lambda k, v: ar.categorical(k, v, axis=1))(key, xs)
  np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("spec", [P("d", None, None), P(None, "d", None), P(None, None, "d")],
                         ids=["vmapped", "rows", "vocab"])
def test_categorical_vmap_over_keys(spec):
  """vmap of a one-key call over (keys, logits): one key per leading index covering its rows
  (categorical_p's prefix keys); sharded == unsharded == a loop."""
  x = randn((4, 8, 400), seed=14)
  keys = jax.random.split(jax.random.key(2), 4)
  f = jax.jit(jax.vmap(lambda k, v: ar.categorical(k, v, temperature=0.5)))
  want = np.asarray(f(keys, x))
  loop = np.stack([np.asarray(ar.categorical(keys[i], x[i], temperature=0.5)) for i in range(4)])
  np.testing.assert_array_equal(want, loop)
  mesh = mesh_1d()
  ks = jax.device_put(keys, NamedSharding(mesh, P(spec[0])))
  xs = jax.device_put(x, NamedSharding(mesh, spec))
  np.testing.assert_array_equal(np.asarray(f(ks, xs)), want)


@needs4
def test_categorical_xla_path_sharded():
  """method="xla" (the path of platforms without a handler) keys its noise by the same
  counters: sharded == unsharded there too."""
  x = categorical_rows()
  key = jax.random.key(4)
  f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=CAT_T, method="xla"))
  want = np.asarray(f(key, x))
  check_categorical_semantics(want, x)
  for spec in (P("a", "b"), P(None, ("a", "b"))):
    xs = jax.device_put(x, NamedSharding(mesh_2d(), spec))
    np.testing.assert_array_equal(np.asarray(f(key, xs)), want)


def test_categorical_auto_axes():
  """Auto axes (XLA decides the split after lowering): exact; the logits are gathered for the
  handler call (documented in _sharding)."""
  mesh = mesh_1d(AxisType.Auto)
  x = categorical_rows()
  keys = jax.random.split(jax.random.key(6), ROWS)
  f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=CAT_T))
  want = np.asarray(f(keys, x))
  for spec in (P("d", None), P(None, "d")):
    xs = jax.device_put(x, NamedSharding(mesh, spec))
    np.testing.assert_array_equal(np.asarray(f(keys, xs)), want)


def test_categorical_axis_name():
  mesh = mesh_1d()
  x = categorical_rows()
  key = jax.random.key(8)
  want = np.asarray(ar.categorical(key, x, temperature=CAT_T))
  xs = jax.device_put(x, NamedSharding(mesh, P(None, "d")))
  f = jax.jit(jax.shard_map(
      lambda k, v, t: ar.categorical(k, v, temperature=t, axis_name="d"), mesh=mesh,
      in_specs=(P(), P(None, "d"), P()), out_specs=P()))
  np.testing.assert_array_equal(np.asarray(f(key, xs, CAT_T)), want)
  compiled = f.lower(key, xs, CAT_T).compile()
  assert_handler_called(compiled)
  assert_pairs_only(compiled, ROWS, N)


@needs4
def test_categorical_axis_name_2d_and_tuple():
  mesh = mesh_2d()
  x = categorical_rows()
  # rows over 'a' with per-row keys and temperatures split with them, vocab over 'b'
  keys = jax.random.split(jax.random.key(10), ROWS)
  want = np.asarray(ar.categorical(keys, x, temperature=CAT_T))
  rows = NamedSharding(mesh, P("a"))
  ks, ts = jax.device_put(keys, rows), jax.device_put(CAT_T, rows)
  xs = jax.device_put(x, NamedSharding(mesh, P("a", "b")))
  f = jax.jit(jax.shard_map(
      lambda k, v, t: ar.categorical(k, v, temperature=t, axis_name="b"), mesh=mesh,
      in_specs=(P("a"), P("a", "b"), P("a")), out_specs=P("a")))
  np.testing.assert_array_equal(np.asarray(f(ks, xs, ts)), want)
  assert_pairs_only(f.lower(ks, xs, ts).compile(), ROWS // 2, 2)
  # vocab over both axes, 'a' major; one key
  key = jax.random.key(11)
  want = np.asarray(ar.categorical(key, x))
  xs = jax.device_put(x, NamedSharding(mesh, P(None, ("a", "b"))))
  f = jax.jit(jax.shard_map(lambda k, v: ar.categorical(k, v, axis_name=("a", "b")),
                            mesh=mesh, in_specs=(P(), P(None, ("a", "b"))), out_specs=P()))
  np.testing.assert_array_equal(np.asarray(f(key, xs)), want)


def test_categorical_axis_name_errors():
  mesh = mesh_1d()
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="not a mesh axis"):
    ar.categorical(key, randn((ROWS, COLS)), axis_name="d")
  replicated = jax.device_put(randn((ROWS, COLS)), NamedSharding(mesh, P()))
  bad = jax.shard_map(lambda v: ar.categorical(key, v, axis_name="d"), mesh=mesh,
                      in_specs=P(), out_specs=P())
  with pytest.raises(ValueError, match="does not vary along mesh axis 'd'"):
    jax.jit(bad)(replicated)
  with pytest.raises(ValueError, match="'i' is bound here but is not a manual mesh axis"):
    jax.vmap(lambda v: ar.categorical(key, v, axis_name="i"), axis_name="i")(randn((N, COLS)))


@pytest.mark.parametrize("shape,spec", [((ROWS, 1), P("d")), ((ROWS, 2, 1), P("d")),
                                        ((2, ROWS, 1), P(None, "d"))])
def test_categorical_one_column_explicitly_sharded_rows(shape, spec):
  """One category: index 0 for every row, the rows' sharding kept, also outside a mesh
  context (jnp.zeros_like of explicitly sharded rows needs one) and under jit."""
  mesh = mesh_1d()
  x = jax.device_put(randn(shape), NamedSharding(mesh, spec))
  keys = jax.random.split(jax.random.key(3), math.prod(shape[:-1])).reshape(shape[:-1])
  for got in (ar.categorical(jax.random.key(3), x),
              ar.categorical(keys, x, temperature=0.5),
              jax.jit(lambda k, v: ar.categorical(k, v, temperature=2.0))(jax.random.key(1), x)):
    assert got.shape == shape[:-1]
    np.testing.assert_array_equal(np.asarray(got), np.zeros(shape[:-1], got.dtype))
    assert got.sharding.is_equivalent_to(NamedSharding(mesh, P(*spec[:len(shape) - 1])),
                                         len(shape) - 1)


def test_categorical_varying_key_types_the_sample():
  """Inside shard_map, keys that vary along a mesh axis make the sample vary too, with
  logits that do not (the result's type is checked against out_specs)."""
  mesh = mesh_1d()
  per = ROWS // N  # rows (and keys) per device
  x = categorical_rows()[:per]
  keys = jax.random.split(jax.random.key(12), ROWS)
  want = np.concatenate([np.asarray(ar.categorical(keys[i:i + per], x))
                         for i in range(0, ROWS, per)])
  ks = jax.device_put(keys, NamedSharding(mesh, P("d")))
  xs = jax.device_put(x, NamedSharding(mesh, P()))
  f = jax.jit(jax.shard_map(lambda k, v: ar.categorical(k, v), mesh=mesh,
                            in_specs=(P("d"), P()), out_specs=P("d")))
  np.testing.assert_array_equal(np.asarray(f(ks, xs)), want)
  bad = jax.shard_map(lambda k, v: ar.categorical(k, v), mesh=mesh,
                      in_specs=(P("d"), P()), out_specs=P())
  with pytest.raises(ValueError):
    jax.jit(bad)(ks, xs)


@pytest.mark.parametrize("spec", [P("d", None), P(None, "d")], ids=["rows", "vocab"])
def test_categorical_export_round_trip(spec):
  mesh = mesh_1d()
  x = categorical_rows()
  key = jax.random.key(13)
  want = np.asarray(ar.categorical(key, x, temperature=CAT_T))
  xs = jax.device_put(x, NamedSharding(mesh, spec))
  exported = jax.export.export(jax.jit(lambda k, v: ar.categorical(k, v, temperature=CAT_T)),
                               disabled_checks=_export_checks())(key, xs)
  assert "CustomSPMDPartitioning" not in exported.mlir_module()
  restored = jax.export.deserialize(exported.serialize())
  np.testing.assert_array_equal(np.asarray(restored.call(key, xs)), want)
  compiled = jax.jit(restored.call).lower(key, xs).compile()
  assert_collectives(compiled, None if spec == P("d", None) else (ROWS, N))


@pytest.mark.parametrize("shape", [(4 * 2001,), (1, 4 * 2001)], ids=["1d", "1_row"])
def test_categorical_one_row_vocab_sharded(shape):
  """Decoding one sequence with the vocab split (odd shard width): many keys, each sample the
  unsharded one; one exchange of [1, N] pairs."""
  x = 2.0 * randn(shape, seed=15)
  xs = jax.device_put(x, NamedSharding(mesh_1d(), P(*(None,) * (len(shape) - 1), "d")))
  f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=0.9))
  for seed in range(16):
    key = jax.random.key(seed)
    np.testing.assert_array_equal(np.asarray(f(key, xs)), np.asarray(f(key, x)))
  assert_pairs_only(f.lower(jax.random.key(0), xs).compile(), 1, N)


# ---------------------------------------------------------------------------------------------
# top_k (SPEC §1e): rows split -> local, no collective; a split axis -> each shard's k
# candidates with global indices, one exchange of [rows, shards, k] (values and indices), the
# exact merge; never a gather of the input.

TOPK_K = 25


def check_top_k(got, x, k, axis=-1):
  import reference  # tests/: the numpy reference of SPEC §1e
  want_v, want_i = reference.top_k(np.asarray(x), k, axis=axis)
  reference.assert_matches((np.asarray(got[0]), np.asarray(got[1])),
                           (want_v, want_i.astype(np.int32)), op="max_with_index")


def assert_candidates_only(compiled, rows, shards, k):
  """At most two gathered buffers (value bits and indices), each no larger than
  [rows, shards, k]; on GPU one collective (XLA's combiner merges them)."""
  found = collectives(compiled.as_text())
  operands = [size for op, sizes in found for size in sizes]
  assert found and 1 <= len(operands) <= 2, found
  if PLATFORM == "cuda":
    assert len(found) == 1, found
  for op, sizes in found:
    assert op == "all-gather", found
    assert max(sizes) <= rows * shards * k, found


@pytest.mark.parametrize("method", ["public", "kernel", "xla"])
@pytest.mark.parametrize("where,spec", CASES_1D, ids=[c[0] for c in CASES_1D])
def test_top_k_mesh_1d(partitioner, where, spec, method):
  mesh = mesh_1d()
  x = boundary_rows()
  xs = jax.device_put(x, NamedSharding(mesh, spec))
  f = jax.jit(lambda v: ar.top_k(v, TOPK_K, method=method.replace("public", "auto")))
  got = f(xs)
  check_top_k(got, x, TOPK_K)
  assert got[0].sharding.spec[-1] is None and got[1].sharding.spec[-1] is None
  compiled = f.lower(xs).compile()
  block = (ROWS // N, COLS) if where == "rows" else (ROWS, COLS // N)
  if method != "xla":
    assert_routed(compiled, "top_k", method, block, x.dtype)
  if where == "rows":
    assert_no_collective(compiled)
  else:
    assert_candidates_only(compiled, ROWS, N, TOPK_K)


@needs4
@pytest.mark.parametrize("case,spec,rows,shards", CASES_2D, ids=[c[0] for c in CASES_2D])
def test_top_k_mesh_2d(partitioner, case, spec, rows, shards):
  mesh = mesh_2d()
  x = randn((ROWS, COLS), seed=12)
  xs = jax.device_put(x, NamedSharding(mesh, spec))
  f = jax.jit(lambda v: ar.top_k(v, 7))
  check_top_k(f(xs), x, 7)
  compiled = f.lower(xs).compile()
  if shards == 1:
    assert_no_collective(compiled)
  else:
    assert_candidates_only(compiled, rows, shards, 7)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_top_k_ties_nans_at_shard_boundaries(dtype):
  """NaNs, equal maxima and ±0 across shard boundaries; k larger than a shard's width (each
  shard gives all its columns); k = 1 (max_with_index's answer)."""
  import reference
  mesh = mesh_1d()
  x = boundary_rows(dtype)
  rng = np.random.default_rng(13)
  small = reference.fill_rows(dtype, rng, ROWS, 4 * N, np.arange(ROWS) % len(reference.FILLS))
  for data, ks in ((x, (1, 3, TOPK_K, 1001)), (small, (1, 5, 4 * N))):
    xs = jax.device_put(data, NamedSharding(mesh, P(None, "d")))
    for k in ks:
      check_top_k(jax.jit(lambda v: ar.top_k(v, k))(xs), data, k)


def test_top_k_float64_vocab_sharded(x64):
  with x64(True):
    mesh = mesh_1d()
    x = boundary_rows("float64")
    xs = jax.device_put(x, NamedSharding(mesh, P(None, "d")))
    got = jax.jit(lambda v: ar.top_k(v, 9))(xs)
    assert got[1].dtype == np.int32
    check_top_k(got, x, 9)


@needs4
def test_top_k_other_axis():
  mesh = mesh_2d()
  x = randn((2, 4 * 250, 8), seed=14)
  xs = jax.device_put(x, NamedSharding(mesh, P("a", "b", None)))
  check_top_k(jax.jit(lambda v: ar.top_k(v, 6, axis=1))(xs), x, 6, axis=1)


def test_top_k_vmap_over_sharded_batch():
  mesh = mesh_1d()
  x = randn((2, 4, 1000), seed=15)
  xs = jax.device_put(x, NamedSharding(mesh, P(None, None, "d")))
  f = jax.jit(jax.vmap(lambda r: ar.top_k(r, 5)))
  check_top_k(f(xs), x, 5)
  assert_candidates_only(f.lower(xs).compile(), 8, N, 5)


@pytest.mark.parametrize("spec", [P("d", None), P(None, "d")], ids=["rows", "vocab"])
def test_top_k_grad_of_values(partitioner, spec):
  mesh = mesh_1d()
  x = randn((ROWS, COLS), seed=16)
  xs = jax.device_put(x, NamedSharding(mesh, spec))
  with jax.set_mesh(mesh):
    g = jax.jit(jax.grad(lambda v: ar.top_k(v, 4)[0].sum()))(xs)
  want = np.zeros_like(x)
  np.put_along_axis(want, np.argsort(-x, axis=-1, kind="stable")[:, :4], 1.0, axis=-1)
  np.testing.assert_array_equal(np.asarray(g), want)


def test_top_k_auto_axes(partitioner):
  """Auto axes: the exact XLA path, which XLA partitions (rows: local)."""
  mesh = mesh_1d(AxisType.Auto)
  x = boundary_rows()
  for spec in (P("d", None), P(None, "d")):
    xs = jax.device_put(x, NamedSharding(mesh, spec))
    f = jax.jit(lambda v: ar.top_k(v, TOPK_K))
    check_top_k(f(xs), x, TOPK_K)
    text = f.lower(xs).compile().as_text()
    assert not any(f'custom_call_target="{t}"' in text for t in _ffi.all_targets())


@pytest.mark.parametrize("method", ["public", "kernel"])
def test_top_k_axis_name_in_shard_map(method):
  mesh = mesh_1d()
  x = boundary_rows()
  xs = jax.device_put(x, NamedSharding(mesh, P(None, "d")))
  f = jax.jit(jax.shard_map(
      lambda v: ar.top_k(v, TOPK_K, axis_name="d", method=method.replace("public", "auto")),
      mesh=mesh, in_specs=P(None, "d"), out_specs=(P(), P())))
  check_top_k(f(xs), x, TOPK_K)
  assert_candidates_only(f.lower(xs).compile(), ROWS, N, TOPK_K)
  bad = jax.shard_map(lambda v: ar.top_k(v, 3, axis_name="nope"), mesh=mesh,
                      in_specs=P(None, "d"), out_specs=(P(), P()))
  with pytest.raises(ValueError, match="'nope' is not a mesh axis"):
    jax.jit(bad)(xs)


@pytest.mark.parametrize("spec", [P("d", None), P(None, "d")], ids=["rows", "vocab"])
def test_top_k_export_round_trip(spec):
  mesh = mesh_1d()
  x = boundary_rows()
  xs = jax.device_put(x, NamedSharding(mesh, spec))
  exported = jax.export.export(jax.jit(lambda v: ar.top_k(v, 6)),
                               disabled_checks=_export_checks())(xs)
  restored = jax.export.deserialize(exported.serialize())
  check_top_k(restored.call(xs), x, 6)


# ---------------------------------------------------------------------------------------------
# Structure (issue 41): _sharding is a library of pure pieces; each primitive's partition rule
# lives in its block in _primitives and calls the handler itself in its blocks.

def test_sharding_binds_no_primitive():
  """_sharding imports nothing from _primitives (no import back into the module that calls it)
  and binds no primitive; where it needs the op on a block, the caller passes a callable."""
  import ast
  import inspect
  from jax_argreduce import _sharding
  tree = ast.parse(inspect.getsource(_sharding))
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom):
      assert "_primitives" not in [a.name for a in node.names] and not (
          node.module or "").endswith("_primitives"), ast.dump(node)
    if isinstance(node, ast.Import):
      assert not any(a.name.endswith("_primitives") for a in node.names), ast.dump(node)
    if isinstance(node, ast.Attribute):
      assert node.attr not in ("bind", "_primitives"), ast.dump(node)


@pytest.mark.parametrize("op", ["max_with_index", "top_k", "categorical"])
def test_partition_rule_does_not_rebind(op, monkeypatch):
  """A partition rule's blocks call the handler (or the XLA path) directly: lowering a sharded
  call binds the op's primitive once, never again inside its shard_map."""
  from jax_argreduce import _primitives
  prim = {"max_with_index": _primitives.argreduce_p, "top_k": _primitives.top_k_p,
          "categorical": _primitives.categorical_p}[op]
  x = jax.device_put(categorical_rows(), NamedSharding(mesh_1d(), P(None, "d")))
  fn = {"max_with_index": lambda v: ar.max_with_index(v),
        "top_k": lambda v: ar.top_k(v, 3),
        "categorical": lambda v: ar.categorical(jax.random.key(0), v)}[op]
  binds = []
  original = prim.bind
  monkeypatch.setattr(prim, "bind", lambda *a, **p: binds.append(1) or original(*a, **p))
  jax.clear_caches()  # categorical's inner jit may hold an earlier trace (no bind then)
  text = jax.jit(fn).lower(x).compile().as_text()
  assert len(binds) == 1, binds
  assert any(f'custom_call_target="{t}"' in text for t in _ffi.all_targets())


# ---------------------------------------------------------------------------------------------
# Filtered sampling (SPEC §1f): rows split sample where they are, with their global counters
# (no collective); a split vocabulary exchanges each shard's candidates where the call has a
# top-k bound whose candidates move fewer bytes than the row (the tests after these), else it
# is gathered for the call.

FILTERED = [dict(top_k=7), dict(top_p=0.6), dict(min_p=0.2, top_p=0.9),
            dict(top_k=np.arange(1, ROWS + 1), top_p=np.linspace(0.3, 1.0, ROWS, dtype=np.float32))]


@pytest.mark.parametrize("kw", FILTERED, ids=["k", "p", "min_p", "per_row"])
@pytest.mark.parametrize("keys", ["shared", "per_row"])
@pytest.mark.parametrize("case,mesh,spec,pairs", CAT_CASES)
def test_filtered_sharded_equals_unsharded(case, mesh, spec, pairs, keys, kw):
  x = categorical_rows()
  key = jax.random.key(5)
  key = jax.random.split(key, ROWS) if keys == "per_row" else key
  f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=CAT_T, **kw))
  want = np.asarray(f(key, x))
  xs = jax.device_put(x, NamedSharding(_mesh(mesh), spec))
  np.testing.assert_array_equal(np.asarray(f(key, xs)), want)
  compiled = f.lower(key, xs).compile()
  assert_handler_called(compiled)
  if pairs is None:  # rows only: no collective at all
    assert_no_collective(compiled)


@needs4
@pytest.mark.parametrize("keys", ["shared", "per_row"])
@pytest.mark.parametrize("case,spec,pairs", CAT_3D, ids=[c[0] for c in CAT_3D])
def test_filtered_batch_dims(case, spec, pairs, keys):
  x = 2.0 * randn((4, 8, 1000), seed=13)
  key = jax.random.key(11)
  key = jax.random.split(key, (4, 8)) if keys == "per_row" else key
  p = np.linspace(0.2, 1.0, 32, dtype=np.float32).reshape(4, 8)
  f = jax.jit(lambda k, v: ar.categorical(k, v, top_k=40, top_p=p, min_p=0.01))
  want = np.asarray(f(key, x))
  xs = jax.device_put(x, NamedSharding(mesh_2d(), spec))
  np.testing.assert_array_equal(np.asarray(f(key, xs)), want)


# A split vocabulary with a top-k bound kb (a concrete top_k: its largest value rounded up to a
# power of two; or top_k_bound=): each shard's kb first tokens in the z order (z = logits *
# (1/T), ties to the lower column) are exchanged with their global columns, never the logits,
# and the sampler runs on them (_sharding.split_filtered_sample): the unsharded sample, bit for
# bit.

SPLIT_COLS = 4 * 1000
SPLIT_T = np.array([1.0, 1.0, 1.0, 0.7, 0.7, 0.0, 2.0, 0.05], np.float32)  # row 5: T == 0


def split_rows(dtype="float32", cols=SPLIT_COLS):
  """[8, cols] logits with what a candidate exchange must keep exact (4 vocab shards of w)."""
  w = cols // 4
  x = 2.0 * randn((ROWS, cols), seed=21)
  x[0, [2 * w + 1, 3 * w + 2]] = np.nan         # the first NaN, in shard 2, wins
  x[1, :] = -np.inf                             # three finite tokens, in shards 0, 1 and 3
  x[1, [5, w + 3, 3 * w]] = 0.0
  x[2, :] = -np.inf                             # all -inf: index 0
  x[3, [w - 2, w - 1, w, w + 1, 3 * w]] = 9.0   # equal tops straddling shards 0/1 (and 3)
  # Adjacent floats in [1.5, 2): z = x * (1/0.7) rounds some of them together (ties in z that
  # the logits do not have, broken by column); bfloat16 keeps fewer, all tied.
  x[4] = (np.uint32(0x3FC00000) + np.arange(cols, dtype=np.uint32) % 64).view(np.float32)
  x[5, [w - 1, 2 * w]] = 40.0                   # T == 0: the argmax, tied across shards 1/2
  x[7, 3 * w:] += 4.0                           # T = 0.05: the mass in shard 3
  return x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


SPLIT_FILTERS = [  # (kw, kb: the static bound _params.k_bound gives)
    (dict(top_k=7), 8),
    (dict(top_k=3, top_p=0.8), 4),
    (dict(top_k=np.array([1, 2, 3, 5, 8, 13, 21, 34], np.int32),
          top_p=np.linspace(0.3, 1.0, ROWS, dtype=np.float32),
          min_p=np.array([0.0, 0.1, 0.0, 0.01, 0.0, 0.2, 0.05, 0.0], np.float32)), 64),
    (dict(top_k=np.array([4, 1, 9, 3, 2, 7, 30, 5], np.int32), top_k_bound=32), 32),
    (dict(top_k=50, min_p=0.05), 64),
]

SPLIT_CASES = [  # id, mesh, spec, rows per block, vocab shards
    pytest.param("1d", P(None, "d"), ROWS, N, id="vocab"),
    pytest.param("2", P(None, "d"), ROWS, 2, id="vocab_2"),
    pytest.param("2d", P("a", "b"), ROWS // 2, 2, id="rows_a_vocab_b", marks=needs4),
    pytest.param("2d", P(None, ("a", "b")), ROWS, 4, id="vocab_ab", marks=needs4),
    pytest.param("2d", P(None, "a"), ROWS, 2, id="vocab_a", marks=needs4),
]


def _split_mesh(kind):
  if kind == "2":
    return jax.make_mesh((2,), ("d",), axis_types=(AxisType.Explicit,),
                         devices=jax.devices()[:2])
  return _mesh(kind)


def assert_sample_candidates(compiled, rows, shards, kb):
  """The one exchange of the sampler's candidates (as top_k's, assert_candidates_only): the
  values' bits and the global columns, each exactly [rows, shards, kb]; no gather of the
  logits ([rows, width] or more)."""
  assert_candidates_only(compiled, rows, shards, kb)
  operands = [size for _, sizes in collectives(compiled.as_text()) for size in sizes]
  assert operands == [rows * shards * kb] * 2, operands


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kw,kb", SPLIT_FILTERS, ids=["k", "k_p", "per_row", "bound", "k_min_p"])
@pytest.mark.parametrize("mesh,spec,rows,shards", SPLIT_CASES)
def test_filtered_vocab_split_exchanges_candidates(mesh, spec, rows, shards, kw, kb, dtype):
  x = split_rows(dtype)
  key = jax.random.key(13)
  f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=SPLIT_T, **kw))
  want = np.asarray(f(key, x))
  w = SPLIT_COLS // 4
  assert want[0] == 2 * w + 1 and want[2] == 0 and want[5] == w - 1, want
  assert want[1] in (5, w + 3, 3 * w), want
  xs = jax.device_put(x, NamedSharding(_split_mesh(mesh), spec))
  np.testing.assert_array_equal(np.asarray(f(key, xs)), want)
  compiled = f.lower(key, xs).compile()
  assert_handler_called(compiled)
  assert_sample_candidates(compiled, rows, shards, kb)


@pytest.mark.parametrize("exchange", ["candidates", "masses"])
@pytest.mark.parametrize("keys", ["shared", "per_row"])
def test_filtered_vocab_split_batch_dims_and_runs(keys, exchange):
  """Batch dimensions, and blocks whose rows are not consecutive counters (seq split: one
  sampler call per run, sample_block), with candidates (a top-k bound) or top-p's masses (no
  top-k; wide rows) exchanged inside each run."""
  if jax.device_count() < 4:
    pytest.skip("a 2x2 mesh needs 4 devices")
  cols = 1000 if exchange == "candidates" else 20000
  x = 2.0 * randn((4, 8, cols), seed=13)
  key = jax.random.key(11)
  key = jax.random.split(key, (4, 8)) if keys == "per_row" else key
  t = np.linspace(0.0, 1.5, 32, dtype=np.float32).reshape(4, 8)
  kw = (dict(top_k=20, top_p=0.9) if exchange == "candidates" else
        dict(top_p=np.linspace(0.1, 1.0, 32, dtype=np.float32).reshape(4, 8), min_p=0.02))
  f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=t, **kw))
  want = np.asarray(f(key, x))
  for spec in (P("a", None, "b"), P(None, "a", "b")):
    xs = jax.device_put(x, NamedSharding(mesh_2d(), spec))
    np.testing.assert_array_equal(np.asarray(f(key, xs)), want, err_msg=str(spec))
    text = f.lower(key, xs).compile().as_text()
    if exchange == "candidates":
      assert all(op == "all-gather" and max(sizes) <= 32 * 2 * 32
                 for op, sizes in collectives(text)), collectives(text)
    else:
      assert f"jax_argreduce_top_p_level_{PLATFORM}" in text, text
      assert max(s for _, sizes in collectives(text) for s in sizes) < 32 * cols // 2, text


@pytest.mark.parametrize("top_k,kb,gathered", [(3, 4, False), (5, 8, True), (20, 32, True),
                                                (64, 64, True)])
def test_filtered_vocab_split_k_above_width(top_k, kb, gathered):
  """The candidates (kb float32 logits and their int32 columns per shard) against the row's
  logits, here 4 shards of w = 16: from kb = w / 2 on they move at least the row's bytes (at
  kb >= w, every logit of the shard and its column), so the vocab is gathered (the same
  sample); below it, candidates."""
  x = split_rows(cols=64)
  key = jax.random.key(2)
  f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=SPLIT_T, top_k=top_k, top_p=0.95))
  want = np.asarray(f(key, x))
  xs = jax.device_put(x, NamedSharding(mesh_1d(), P(None, "d")))
  np.testing.assert_array_equal(np.asarray(f(key, xs)), want)
  compiled = f.lower(key, xs).compile()
  if gathered:
    assert any(max(sizes) >= ROWS * 64 // N for _, sizes in collectives(compiled.as_text()))
  else:
    assert_sample_candidates(compiled, ROWS, N, kb)


def test_filtered_vocab_split_ties_by_global_column():
  """Ties on the candidate row must go to the lower global column: (1) equal z straddling shard
  boundaries at the k-th place (ordered by local column instead, shard 1's and 3's first
  tokens would come first: kept {w, w + 1, 3w} instead of {w - 2, w - 1, w}); (2) equal noisy
  keys of tokens of different z (2^24 and the next float32, 2 apart, whose y = z + G round
  together for about a fifth of the keys), where the candidate row's order (z first) and the
  column order disagree: such a tie goes to the lower column, 5. Many keys, one per row: each
  sample equals the unsharded one."""
  w = SPLIT_COLS // 4
  x = np.full((64, SPLIT_COLS), -np.inf, np.float32)
  x[:32, [w - 2, w - 1, w, w + 1, 3 * w]] = 9.0
  x[:32, 7] = 1.0
  x[32:, 5] = 2.0**24                              # shard 0: the lower column
  x[32:, 2 * w + 3] = 2.0**24 + 2                  # shard 2: the larger z
  keys = jax.random.split(jax.random.key(4), 64)
  top_k = np.array([3] * 32 + [2] * 32, np.int32)
  f = jax.jit(lambda k, v: ar.categorical(k, v, top_k=top_k))
  want = np.asarray(f(keys, x))
  assert set(want[:32]) == {w - 2, w - 1, w}, want[:32]
  assert set(want[32:]) == {5, 2 * w + 3}, want[32:]
  xs = jax.device_put(x, NamedSharding(mesh_1d(), P(None, "d")))
  np.testing.assert_array_equal(np.asarray(f(keys, xs)), want)


def test_filtered_handler_columns_operand():
  """The handler's columns operand: a row given in another order with each element's column
  samples what the row samples (noise from the column, the column returned, noisy-key ties to
  the lower column), where its z has no ties (position breaks those)."""
  from jax_argreduce import _primitives
  rng = np.random.default_rng(3)
  rows, cols = 6, 300
  x = rng.permutation(rows * cols).reshape(rows, cols).astype(np.float32) / 100.0
  perm = np.stack([rng.permutation(cols) for _ in range(rows)]).astype(np.int32)
  shuffled = np.take_along_axis(x, perm, axis=-1)
  t = np.array([1.0, 0.5, 2.0, 0.0, 1.0, 3.0], np.float32)
  top_k = np.array([1, 5, 40, 7, 299, 100], np.int32)
  top_p = np.array([1.0, 0.9, 0.5, 1.0, 0.99, 0.7], np.float32)
  min_p = np.array([0.0, 0.0, 0.01, 0.0, 0.0, 0.1], np.float32)
  key = jax.random.key_data(jax.random.key(8)).reshape(1, 2)

  def sample(v, columns):
    return _primitives._filtered_handler(
        key, v, t, top_k, top_p, min_p, _primitives.NO_OFFSETS, columns, index_dtype=np.int32,
        method="auto", k_bound=512, has_top_p=True, platform="cpu")

  want = jax.jit(lambda v: sample(v, _primitives.NO_COLUMNS))(x)
  got = jax.jit(sample)(shuffled, perm)
  np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
  np.testing.assert_array_equal(np.asarray(got[0]).view(np.uint32),
                                np.asarray(want[0]).view(np.uint32))


# A split vocabulary without a top-k (top_p and/or min_p): the shards' first tokens, top-p's
# per-digit masses summed over the shards (integers, as uint32 limbs) and the last level's
# counts per shard are exchanged, then each shard draws over its kept tokens and the pairs
# combine (_sharding.split_prefix_sample): the unsharded sample, bit for bit, never the logits.
# On CPU and CUDA alike (the stages' handlers, ffi/cpu_sample.h and ffi/sample_kernels.h).

# Wide enough that the exchanges move fewer bytes than the logits (_dispatch.exchanges_masses:
# about 64 KiB per row with top_p, against 80 KB of a 16-bit row here).
MASS_COLS = 4 * 10000

PREFIX_FILTERS = [
    dict(top_p=0.6),
    dict(min_p=0.2),
    dict(top_p=np.linspace(0.05, 1.0, ROWS, dtype=np.float32),
         min_p=np.array([0.0, 0.1, 0.0, 0.01, 0.0, 0.2, 0.05, 1.0], np.float32)),
    dict(top_k=np.array([0, MASS_COLS, 0, 0, 2 * MASS_COLS, 0, 0, 0], np.int32),  # keeps all
         top_p=0.3),
]


def assert_masses_only(compiled, rows, shards, levels=3, last=1024):
  """The exchanges of split_prefix_sample, each no larger than its design: the shards' tops
  [rows, shards], the summed masses [rows, 2048, 3] of levels - 1 levels and the last level's
  counts [rows, shards, last] (levels 0: no top_p, none), the pairs [rows, shards]; nothing of
  the logits' size."""
  text = compiled.as_text()
  assert f'custom_call_target="jax_argreduce_split_filtered_draw_{PLATFORM}"' in text
  assert (f'custom_call_target="jax_argreduce_top_p_level_{PLATFORM}"' in text) == (levels > 0)
  found = collectives(text)
  reduces = [s for op, sizes in found if op == "all-reduce" for s in sizes]
  gathers = sorted(s for op, sizes in found if op == "all-gather" for s in sizes)
  assert reduces == [rows * 2048 * 3] * max(levels - 1, 0), found
  assert gathers == sorted([rows * shards] * 3 + [rows * shards * last] * (levels > 0)), found


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("kw", PREFIX_FILTERS, ids=["p", "min_p", "per_row", "k_all"])
@pytest.mark.parametrize("mesh,spec,rows,shards", SPLIT_CASES)
def test_filtered_vocab_split_exchanges_masses(mesh, spec, rows, shards, kw, dtype):
  x = split_rows(dtype, cols=MASS_COLS)
  key = jax.random.key(17)
  f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=SPLIT_T, **kw))
  want = np.asarray(f(key, x))
  w = MASS_COLS // 4
  assert want[0] == 2 * w + 1 and want[2] == 0 and want[5] == w - 1, want
  xs = jax.device_put(x, NamedSharding(_split_mesh(mesh), spec))
  for seed in range(4):
    k = jax.random.key(seed)
    np.testing.assert_array_equal(np.asarray(f(k, xs)), np.asarray(f(k, x)), err_msg=str(seed))
  assert_masses_only(f.lower(key, xs).compile(), rows, shards, levels=3 if "top_p" in kw else 0)


def test_filtered_vocab_split_masses_only_where_smaller():
  """The exchanges replace the gather only where they move fewer bytes than the row: top_p on
  narrow rows (here 4000 columns: 16 KB of float32 against about 64 KiB) gathers the logits,
  min_p alone (the tops and the pairs) does not."""
  x = split_rows()
  xs = jax.device_put(x, NamedSharding(mesh_1d(), P(None, "d")))
  key = jax.random.key(3)
  for kw, masses in ((dict(top_p=0.5), False), (dict(min_p=0.1), True)):
    f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=SPLIT_T, **kw))
    np.testing.assert_array_equal(np.asarray(f(key, xs)), np.asarray(f(key, x)))
    text = f.lower(key, xs).compile().as_text()
    assert (f"jax_argreduce_split_filtered_draw_{PLATFORM}" in text) == masses


@pytest.mark.parametrize("p", [0.05, 0.3, 0.55, 0.999])
def test_filtered_vocab_split_masses_ties_across_shards(p):
  """top-p's last key tied across the shards: rows of one value (every token tied) and rows of
  a few values repeated, so that the crossing key's ties straddle shard boundaries; top-p keeps
  the first of them in global column order. Per-row keys: each row's sample equals the
  unsharded one (a shard keeping a wrong count of the ties would sample outside the kept
  columns in about a tenth of the rows)."""
  rows, cols = 64, MASS_COLS
  x = np.ones((rows, cols), np.float32)
  x[16:32] = np.tile(np.repeat(np.float32([3.0, 2.0, 1.0, 0.0]), 5), cols // 20)
  x[32:48] = np.round(randn((16, cols), seed=3))
  x[48:] = np.where(np.arange(cols) < 25000, 1.0, -np.inf)
  keys = jax.random.split(jax.random.key(6), rows)
  f = jax.jit(lambda k, v: ar.categorical(k, v, top_p=p))
  want = np.asarray(f(keys, x))
  if p < 1:
    kept = int(np.ceil(p * cols))  # all equal: the first ceil(p * cols) tokens
    assert want[:16].max() < kept, (want[:16], kept)
  xs = jax.device_put(x, NamedSharding(mesh_1d(), P(None, "d")))
  np.testing.assert_array_equal(np.asarray(f(keys, xs)), want)
  assert_masses_only(f.lower(keys, xs).compile(), rows, N)


def test_filtered_vocab_split_masses_float64(x64):
  """float64 logits: z's radix key has 64 bits, six levels (11 x 5 + 9)."""
  with x64(True):
    x = split_rows(cols=MASS_COLS).astype(np.float64)
    t = SPLIT_T.astype(np.float64)
    f = jax.jit(lambda k, v: ar.categorical(k, v, temperature=t, top_p=0.7, min_p=0.01))
    key = jax.random.key(9)
    want = np.asarray(f(key, x))
    xs = jax.device_put(x, NamedSharding(mesh_1d(), P(None, "d")))
    np.testing.assert_array_equal(np.asarray(f(key, xs)), want)
    assert_masses_only(f.lower(key, xs).compile(), ROWS, N, levels=6, last=512)
