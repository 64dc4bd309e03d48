"""Differential test: the four ops against numpy on >= 10,000 seeded random cases.

Every case (one input array, one axis, one keepdims) is compared, for argmax, argmin,
max_with_index and min_with_index, through the CPU FFI handler (``method="kernel"``), the
integer-key XLA path (``method="xla"``) and the public functions, against the numpy reference
(``reference.py``): indices by value, ``max_with_index`` values bit for bit (NaN payloads, the
sign of zero), shapes, and the dtypes ``jnp.argmax`` returns. Compilation dominates, so a
limited set of (shape, dtype, axis, keepdims) combinations is reused with many fresh random
fills (``reference.FILLS``: NaNs of any sign/payload, ±inf, ±0, subnormals, ties, rows of the
lowest finite value and of -inf, built from bit patterns).

Seed: ``JAX_ARGREDUCE_TEST_SEED`` (default below); ``JAX_ARGREDUCE_TEST_CASES`` scales the
number of cases per dtype.
"""

from __future__ import annotations

import functools
import math
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_argreduce
import reference
from jax_argreduce import _api, _ffi, _xla
from reference import FILLS, Fmt, make_input

SEED = int(os.environ.get("JAX_ARGREDUCE_TEST_SEED", "271828"))
MIN_CASES = 10_000
CASES_PER_DTYPE = max(int(os.environ.get("JAX_ARGREDUCE_TEST_CASES", "2560")), 2560)
DTYPES = reference.DTYPES
OPS = reference.OPS
PATHS = ("public", "kernel", "xla")
WIDE_FILLS = 3          # fills per wide (200k-300k) combination
# Compilation dominates: every combination runs all 12 results (3 paths x 4 ops) in one jitted
# program on every fill; every EAGER_EVERY-th combination also calls each op eagerly (one
# compilation per op and path) on its first EAGER_FILLS fills (the eager executables are
# the same for every fill: more fills repeat them, at ~1 ms of dispatch per call).
EAGER_EVERY = 8
EAGER_FILLS = 12
MAX_SMALL_ELEMENTS = 24_000

_CASES: dict[str, int] = {}  # dtype -> cases compared (filled in by test_against_numpy)


# ----------------------------------------------------------------------------- combinations

def _reduction_width(rng):
  u = rng.random()
  if u < 0.5:
    return int(rng.integers(1, 17))
  if u < 0.85:
    return int(rng.integers(17, 301))
  return int(rng.integers(301, 3001))


def _fit(shape, axis):
  """Shrinks the non-reduced dims until the array holds at most MAX_SMALL_ELEMENTS."""
  shape = list(shape)
  while math.prod(shape) > MAX_SMALL_ELEMENTS:
    others = [i for i in range(len(shape)) if (axis is None or i != axis % len(shape))
              and shape[i] > 1]
    i = max(others, key=lambda j: shape[j])
    shape[i] = max(1, shape[i] // 2)
  return tuple(shape)


def combinations(dtype_index: int):
  """[(shape, axis, keepdims, x64, wide)]: every rank 1-4 with every axis (incl. negative and
  None), a sweep of reduction widths around powers of two, and a few 200k-300k wide rows."""
  rng = np.random.default_rng([SEED, dtype_index, 1])
  always_x64 = DTYPES[dtype_index] == "float64"
  out = []
  n = 0
  for rank in range(1, 5):
    for axis in [None, *range(rank), *range(-rank, 0)]:
      shape = [int(rng.integers(1, 7)) for _ in range(rank)]
      if axis is None:
        shape = [int(rng.integers(1, 9)) for _ in range(rank)]
        shape[int(rng.integers(rank))] = _reduction_width(rng)
      else:
        shape[axis] = _reduction_width(rng)
      out.append((_fit(shape, axis), axis, bool(n % 2), always_x64 or n % 4 == 3, False))
      n += 1
  for width in (1, 2, 3, 31, 32, 33, 127, 128, 129, 256, 1023, 1024, 1025, 4096):
    rank = int(rng.integers(1, 5))
    axis = int(rng.integers(-rank, rank))
    shape = [int(rng.integers(1, 6)) for _ in range(rank)]
    shape[axis] = width
    out.append((_fit(shape, axis), axis, bool(rng.integers(2)),
                always_x64 or rng.random() < 0.25, False))
  w = lambda: int(rng.integers(200_000, 300_001))  # noqa: E731
  out.append(((w(),), [None, 0, -1][dtype_index % 3], bool(rng.integers(2)), always_x64, True))
  out.append(((2, w()), -1, bool(rng.integers(2)), always_x64, True))
  out.append(((w(), 2) if dtype_index % 2 else (3, w() // 3, 1), 0 if dtype_index % 2 else None,
              bool(rng.integers(2)), always_x64 or dtype_index == 2, True))
  return out


# ----------------------------------------------------------------------------- tests

def _describe_rows(x, axis, got, want, limit=3):
  """The first differing rows of an index mismatch, as hex bits (for the failure message)."""
  f_bits = reference.bits_dtype(x.dtype)
  rows = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis]) if axis is not None \
      else x.reshape(1, -1)
  got, want = np.asarray(got).reshape(-1), np.asarray(want).reshape(-1)
  lines = []
  for r in np.nonzero(got != want)[0][:limit]:
    row = rows[r].view(f_bits)
    show = ", ".join(f"{v:#x}" for v in row[:16]) + (", ..." if row.size > 16 else "")
    lines.append(f"    row {r}: got {got[r]}, want {want[r]} (got value bits "
                 f"{row[got[r]]:#x}, want value bits {row[want[r]]:#x}); row bits [{show}]")
  return "\n".join(lines)


def _fns(axis, keepdims):
  """(path, op) -> fn(x) for the three paths and the four ops."""
  def make(path, op):
    if path == "public":
      public = getattr(jax_argreduce, op)
      return lambda v: public(v, axis=axis, keepdims=keepdims)
    return lambda v: _api.reduce(v, axis, keepdims, op=op, method=path)
  return {(path, op): make(path, op) for path in PATHS for op in OPS}


def _jitted(axis, keepdims):
  """One jitted program computing all twelve results (3 paths x 4 ops)."""
  fns = _fns(axis, keepdims)
  return jax.jit(lambda v: {key: fn(v) for key, fn in fns.items()})


def _problem(op, got, want, want_aval, x, axis):
  """None, or what is wrong with one result."""
  got_i = got[1] if reference.with_value(op) else got
  want_i = want[1] if reference.with_value(op) else want
  if got_i.dtype != want_aval.dtype:
    return f"index dtype {got_i.dtype}, want {want_aval.dtype}"
  if got_i.shape != want_aval.shape:
    return f"shape {got_i.shape}, want {want_aval.shape} (jnp)"
  problem = reference.mismatch(got, want, op=op)
  if problem is not None and problem.startswith(("indices differ", "indices: indices differ")):
    problem += "\n" + _describe_rows(x, axis, np.asarray(got_i), want_i)
  return problem


@pytest.mark.parametrize("dtype_index", range(len(DTYPES)), ids=DTYPES)
def test_against_numpy(dtype_index, x64):
  dtype = DTYPES[dtype_index]
  f = Fmt(dtype)
  combos = combinations(dtype_index)
  n_wide = sum(c[-1] for c in combos)
  n_small = len(combos) - n_wide
  small_fills = -(-(CASES_PER_DTYPE - n_wide * WIDE_FILLS) // n_small)
  print(f"\n[{dtype}] seed={SEED} (override with JAX_ARGREDUCE_TEST_SEED): "
        f"{len(combos)} combinations, {small_fills} fills each ({WIDE_FILLS} for wide rows)")

  failures: list[str] = []
  cases = comparisons = 0
  for ci, (shape, axis, keepdims, use_x64, wide) in enumerate(combos):
    rng = np.random.default_rng([SEED, dtype_index, 2, ci])
    with x64(use_x64):
      want_aval = jax.eval_shape(
          functools.partial(jnp.argmax, axis=axis, keepdims=keepdims),
          jax.ShapeDtypeStruct(shape, f.dtype))
      eager = _fns(axis, keepdims) if ci % EAGER_EVERY == 0 else {}
      jitted = _jitted(axis, keepdims)
      for fi in range(WIDE_FILLS if wide else small_fills):
        x = make_input(f, rng, shape, axis)
        xj = jnp.asarray(x)
        assert xj.dtype == f.dtype
        results = {(f"jit-{path}", op): r for (path, op), r in jitted(xj).items()}
        if fi < EAGER_FILLS:
          results.update({key: fn(xj) for key, fn in eager.items()})
        results = jax.device_get(results)
        wants = {op: reference.argreduce(x, axis, keepdims, op=op) for op in OPS}
        for (path, op), got in results.items():
          comparisons += 1
          problem = _problem(op, got, wants[op], want_aval, x, axis)
          if problem is not None and len(failures) < 20:
            failures.append(
                f"  {op} via {path}: {dtype}{list(shape)} axis={axis} keepdims={keepdims} "
                f"x64={use_x64} (combination {ci}, fill {fi}, seed {SEED}): {problem}")
        cases += 1

  _CASES[dtype] = cases
  print(f"[{dtype}] {cases} cases, {comparisons} comparisons against numpy")
  assert not failures, f"{len(failures)}+ mismatches against numpy:\n" + "\n".join(failures)
  assert cases >= CASES_PER_DTYPE


def test_case_count():
  """At least MIN_CASES generated cases were compared (needs every dtype run of the module)."""
  missing = [d for d in DTYPES if d not in _CASES]
  if missing:
    pytest.skip(f"test_against_numpy did not run for {missing} in this session")
  total = sum(_CASES.values())
  print(f"\n{total} generated cases compared against numpy (seed {SEED}): {_CASES}")
  assert total >= MIN_CASES


# ----------------------------------------------------------------------------- harness checks

def test_fills_cover_special_values():
  """The generator really injects what it claims (so the differential test can catch them)."""
  r = reference
  for i, dtype in enumerate(DTYPES):
    f = Fmt(dtype)
    rng = np.random.default_rng([SEED, i, 3])
    for fill in FILLS:
      bits = fill(f, rng, 4, 64)
      assert bits.shape == (4, 64) and bits.dtype == f.ubits, fill.__name__
    def x(fill):
      with np.errstate(invalid="ignore"):  # casting signalling NaNs
        return f.view(fill(f, rng, 8, 50)).astype(np.float64)
    assert np.isnan(x(r._all_nan)).all()
    assert (np.isnan(x(r._one_nan)).sum(axis=1) >= 1).all()
    assert (np.isnan(x(r._few_nans)).sum(axis=1) >= 1).all()
    nan_bits = r._all_nan(f, rng, 64, 64)
    assert len(np.unique(nan_bits)) > 10 and (nan_bits & f.sign).any()  # payloads, both signs
    assert (x(r._all_neg_inf) == -np.inf).all()
    assert (x(r._lowest) == float(ml_dtypes.finfo(f.dtype).min)).all()
    ties = x(r._planted_ties)
    assert ((ties == ties.max(axis=1, keepdims=True)).sum(axis=1) >= 2).any()
    sub = x(r._subnormals)
    tiny = float(ml_dtypes.finfo(f.dtype).smallest_normal)
    assert ((np.abs(sub) < tiny)).all() and (sub != 0).any()
    z = x(r._signed_zeros)
    assert (np.signbit(z) & (z == 0)).any() and (~np.signbit(z) & (z == 0)).any()
    pal = f.view(f.palette()).astype(np.float64)
    assert np.isnan(pal).any() and np.isposinf(pal).any() and np.isneginf(pal).any()
  # numpy (the reference) must itself see subnormals in this process (no flush-to-zero).
  assert np.argmax(np.array([1e-45, 3e-45, 2e-45], np.float32)) == 1
  assert np.argmin(np.array([-1e-45, -3e-45, -2e-45], np.float32)) == 1


def test_reference_with_index_is_the_element_at_the_index():
  """The reference's values are the element at numpy's index, bit for bit."""
  nan_payload = np.array(0x7FC00123, np.uint32).view(np.float32)
  neg_nan = np.array(0xFFA00001, np.uint32).view(np.float32)
  x = np.array([[1.0, -0.0, 0.0, -1.0], [-0.0, 0.0, -0.0, 0.0], [3.0, nan_payload, neg_nan, 9]],
               np.float32)
  v, i = reference.max_with_index(x)
  np.testing.assert_array_equal(i, [0, 0, 1])
  np.testing.assert_array_equal(v.view(np.uint32), [0x3F800000, 0x80000000, 0x7FC00123])
  v, i = reference.min_with_index(x)
  np.testing.assert_array_equal(i, [3, 0, 1])
  np.testing.assert_array_equal(v.view(np.uint32), [0xBF800000, 0x80000000, 0x7FC00123])
  for axis, keepdims in [(None, False), (None, True), (0, False), (0, True), (-1, True)]:
    v, i = reference.max_with_index(x, axis=axis, keepdims=keepdims)
    assert v.shape == i.shape == np.argmax(x, axis=axis, keepdims=keepdims).shape
  v, i = reference.max_with_index(np.float32(2.5), axis=0)
  assert (v, i) == (np.float32(2.5), 0)
  bf = np.array([[0x8000, 0x0000, 0x7FC1]], np.uint16).view(ml_dtypes.bfloat16)
  v, i = reference.max_with_index(bf)
  assert i[0] == 2 and v.view(np.uint16)[0] == 0x7FC1
  assert reference.mismatch((v, i), (v, i), op="max_with_index") is None
  other = np.array([0x7FC2], np.uint16).view(ml_dtypes.bfloat16)
  assert "bits" in reference.mismatch((other, i), (v, i), op="max_with_index")


def test_make_input_places_fills_along_axis():
  """A row of the chosen fill runs along ``axis``, whatever the axis (checked on all-NaN rows)."""
  f = Fmt("float32")
  rng = np.random.default_rng(0)
  for shape, axis in [((3, 5, 7), 1), ((3, 5, 7), -3), ((4, 6), -1), ((2, 3, 4, 5), 2)]:
    for _ in range(20):
      x = make_input(f, rng, shape, axis)
      assert x.shape == shape and x.dtype == f.dtype
      nan_rows = np.isnan(x).all(axis=axis)
      any_nan = np.isnan(x).any(axis=axis)
      # some rows are entirely NaN along axis while other rows are not NaN at all
      assert nan_rows.shape == np.zeros(shape).sum(axis=axis).shape
      if nan_rows.any() and not any_nan.all():
        break
    else:
      pytest.fail(f"no mix of all-NaN and NaN-free rows along axis {axis} for {shape}")


def test_bfloat16_reference():
  """numpy on ml_dtypes.bfloat16 agrees with numpy on the float32 widening, which is exact."""
  every = np.arange(2 ** 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
  wide = every.astype(np.float32)
  finite = ~np.isnan(wide)
  assert np.array_equal(wide[finite].astype(ml_dtypes.bfloat16).view(np.uint16),
                        every[finite].view(np.uint16))
  rng = np.random.default_rng(SEED)
  x = rng.integers(0, 2 ** 16, size=(512, 61), dtype=np.uint16).view(ml_dtypes.bfloat16)
  x[::7] = every[rng.integers(0, 2 ** 16, size=(1, 61))]
  for axis in (0, 1, None):
    assert np.array_equal(np.argmax(x, axis=axis), np.argmax(x.astype(np.float32), axis=axis))
    assert np.array_equal(np.argmin(x, axis=axis), np.argmin(x.astype(np.float32), axis=axis))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("method,has_custom_call", [("kernel", True), ("auto", True),
                                                     ("xla", False)])
def test_methods_take_distinct_paths(op, method, has_custom_call):
  """On CPU "kernel"/"auto" lower to the op's FFI handler and "xla" does not (so the
  differential test really compares two implementations)."""
  fn = jax.jit(lambda v: _api.reduce(v, -1, False, op=op, method=method))
  text = fn.lower(jax.ShapeDtypeStruct((4, 100), jnp.float32)).as_text()
  handler = _ffi.target("max_with_index" if reference.with_value(op) else "argreduce", "cpu")
  assert handler is not None
  assert (handler in text) == has_custom_call
  assert not any(t in text for t in _ffi.all_targets() if t != handler)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("path,jit", [
    ("kernel", False), ("kernel", True), ("xla", False), ("xla", True), ("public", False),
    ("public", True),
])
@pytest.mark.parametrize("shape,axis", [((3, 9, 4, 1), 1), ((100, 9, 4, 1), 1), ((5, 2, 9, 1), 0)])
def test_bfloat16_subnormals_non_last_axis(op, path, jit, shape, axis):
  """Regression: XLA's CPU transpose of bfloat16 flushed subnormals when the reduction axis
  was moved last (found by the generator with seed 98765), and under jit XLA folded a bitcast
  workaround back into that transpose; the bits now move behind an optimization barrier."""
  rng = np.random.default_rng(5)
  bits = rng.integers(1, 0x80, size=shape).astype(np.uint16)  # subnormals
  bits[..., 1, :, :] |= np.uint16(0x8000)  # negative ones too
  x = bits.view(ml_dtypes.bfloat16)
  fn = _fns(axis, False)[(path, op)]
  got = (jax.jit(fn) if jit else fn)(jnp.asarray(x))
  reference.assert_matches(jax.device_get(got), reference.argreduce(x, axis, False, op=op),
                           op=op)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [16384, 16385, 202048 + 1])
def test_one_row_xla_split(dtype, cols, x64):
  """The XLA path reduces one long row as rows of 128 columns padded at the end (_xla.py): every
  fill, plus a winner in the last real column (next to the padding), a winner in the first,
  and ties in the first and last part, against numpy for all four ops, as [1, cols], [cols]
  and axis=None of a [1, cols] input (float64 with x64: int64 indices)."""
  assert cols >= _xla._SPLIT_MIN_COLUMNS
  with x64(dtype == "float64"):
    _check_one_row_xla_split(dtype, cols)


def _check_one_row_xla_split(dtype, cols):
  f = Fmt(dtype)
  rng = np.random.default_rng([SEED, cols, DTYPES.index(dtype)])
  fns = {op: jax.jit(lambda v, op=op: _api.reduce(v, -1, False, op=op, method="xla"))
         for op in OPS}
  # The split is what runs: a reduction over [ceil(cols / 128), 128] keys.
  hlo = fns["argmax"].lower(jnp.zeros((cols,), f.dtype)).as_text()
  assert f"tensor<{-(-cols // _xla._SPLIT_WIDTH)}x{_xla._SPLIT_WIDTH}xi" in hlo
  rows = [FILLS[k](f, rng, 1, cols)[0] for k in range(len(FILLS))]
  base = _normal_bits(f, rng, cols)
  top, bottom = f.from_float(np.float32(100.0))[()], f.from_float(np.float32(-100.0))[()]
  for positions in ([cols - 1], [0], [1, cols - 1], [cols - 130, cols - 2]):
    b = base.copy()
    b[positions] = top
    b[[p - 1 for p in positions if p > 0] or [cols - 1]] = bottom
    rows.append(b)
  for bits in rows:
    x = f.view(bits)
    for op in OPS:
      want = reference.argreduce(x, -1, False, op=op)
      reference.assert_matches(jax.device_get(fns[op](jnp.asarray(x))), want, op=op)
      reference.assert_matches(jax.device_get(fns[op](jnp.asarray(x[None]))),
                               reference.argreduce(x[None], -1, False, op=op), op=op)
  x = f.view(rows[0])[None]
  for op in ("argmax", "argmin"):
    got = _api.reduce(jnp.asarray(x), None, False, op=op, method="xla")
    reference.assert_matches(jax.device_get(got), reference.argreduce(x, None, False, op=op),
                             op=op)


def _normal_bits(f, rng, cols):
  return reference.FILLS[0](f, rng, 1, cols)[0]


def test_split_comparator_keeps_the_lower_index_of_equal_keys():
  """The split's comparator (_xla.pick_pair) alone: a larger key wins wherever it is, equal keys
  keep the lower index in either argument order (a CPU reduction runs in order, so the row
  tests above would not see a comparator that ignores the index; a GPU tree would)."""
  i32 = np.int32
  for a, b in ((3, 7), (7, 3)):
    key, index = _xla.pick_pair((i32(5), i32(a)), (i32(5), i32(b)))
    assert (int(key), int(index)) == (5, 3)
  for first, second in (((i32(4), i32(1)), (i32(6), i32(9))),
                        ((i32(6), i32(9)), (i32(4), i32(1)))):
    key, index = _xla.pick_pair(first, second)
    assert (int(key), int(index)) == (6, 9)
