"""Differential test: argmax/argmin against numpy on >= 10,000 seeded random cases.

Every case (one input array, one axis, one keepdims) is compared, for argmax and argmin, through
the CPU FFI handler (``method="kernel"``), the integer-key XLA path (``method="xla"``) and the
public functions, against ``np.argmax``/``np.argmin``: values, shape, and the dtype ``jnp.argmax``
returns. Compilation dominates, so a limited set of (shape, dtype, axis, keepdims) combinations
is reused with many fresh random fills; the fills inject NaNs (any sign/payload), ±inf, ±0,
subnormals, ties, rows of the lowest finite value and rows of -inf, built from bit patterns.

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

from jax_argreduce import argmax, argmin
from jax_argreduce._api import _argreduce

SEED = int(os.environ.get("JAX_ARGREDUCE_TEST_SEED", "271828"))
MIN_CASES = 10_000
CASES_PER_DTYPE = max(int(os.environ.get("JAX_ARGREDUCE_TEST_CASES", "2560")), 2560)
DTYPES = ("float16", "bfloat16", "float32", "float64")
WIDE_FILLS = 3          # fills per wide (200k-300k) combination
JIT_EVERY = 5           # every JIT_EVERY-th combination also runs under jax.jit
JIT_FILLS = 3           # ... on its first JIT_FILLS fills
MAX_SMALL_ELEMENTS = 24_000

_CASES: dict[str, int] = {}  # dtype -> cases compared (filled in by test_against_numpy)


# ----------------------------------------------------------------------------- float formats

class Fmt:
  """Bit layout of a float dtype; special values are built from bit patterns."""

  def __init__(self, name: str):
    self.name = name
    self.dtype = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
    self.nbits = 8 * self.dtype.itemsize
    self.ubits = np.dtype(f"uint{self.nbits}")
    self.mant = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}[name]
    one = self.ubits.type(1)
    self.sign = one << self.ubits.type(self.nbits - 1)
    self.mant_mask = (one << self.ubits.type(self.mant)) - one
    self.inf = (self.sign - one) ^ self.mant_mask       # exponent all ones, mantissa 0
    self.qnan = self.inf | (one << self.ubits.type(self.mant - 1))
    self.max_finite = (self.inf - one)                    # largest finite magnitude
    self.min_normal = self.mant_mask + one

  def u(self, v):
    return np.asarray(v, dtype=self.ubits)

  def view(self, bits):
    return np.asarray(bits, dtype=self.ubits).view(self.dtype)

  def from_float(self, values):
    return np.asarray(values).astype(self.dtype).view(self.ubits)

  def random_sign(self, rng, shape):
    return np.where(rng.random(shape) < 0.5, self.sign, self.ubits.type(0)).astype(self.ubits)

  def nans(self, rng, shape):
    """Quiet and signalling NaNs of both signs with random payloads."""
    payload = rng.integers(1, int(self.mant_mask) + 1, size=shape, dtype=np.uint64)
    payload = payload.astype(self.ubits)
    kind = rng.integers(0, 3, size=shape)
    bits = np.where(kind == 0, self.qnan, self.inf | payload).astype(self.ubits)
    return bits | self.random_sign(rng, shape)

  def subnormals(self, rng, shape, max_mantissa=None):
    hi = int(self.mant_mask) if max_mantissa is None else max_mantissa
    mant = rng.integers(1, hi + 1, size=shape, dtype=np.uint64).astype(self.ubits)
    return mant | self.random_sign(rng, shape)

  def palette(self):
    """Every kind of special value, as bits."""
    z = self.ubits.type(0)
    one = self.from_float(np.float32(1.0))[()]
    vals = [z, self.sign, self.inf, self.inf | self.sign, self.qnan, self.qnan | self.sign,
            self.ubits.type(1), self.ubits.type(1) | self.sign,            # ± smallest subnormal
            self.ubits.type(2), self.mant_mask, self.mant_mask | self.sign,  # largest subnormal
            self.min_normal, self.min_normal | self.sign,
            self.max_finite, self.max_finite | self.sign,                  # max / lowest
            one, one | self.sign]
    return self.u(vals)


# ----------------------------------------------------------------------------- row fills
# Each fill takes (fmt, rng, m, cols) and returns [m, cols] bits.

def _normal(f, rng, m, cols):
  scale = 10.0 ** rng.integers(-3, 4)
  return f.from_float(rng.standard_normal((m, cols)) * scale)


def _small_ints(f, rng, m, cols):  # the max repeated at several positions
  return f.from_float(rng.integers(-3, 4, size=(m, cols)).astype(np.float32))


def _all_equal(f, rng, m, cols):
  row = _normal(f, rng, m, 1)
  return np.repeat(row, cols, axis=1)


def _one_nan(f, rng, m, cols):
  b = _normal(f, rng, m, cols)
  b[np.arange(m), rng.integers(0, cols, size=m)] = f.nans(rng, m)
  return b


def _several_nans(f, rng, m, cols):
  b = _normal(f, rng, m, cols) if rng.random() < 0.5 else _palette(f, rng, m, cols)
  mask = rng.random((m, cols)) < rng.uniform(0.01, 0.5)
  b[mask] = f.nans(rng, int(mask.sum()))
  return b


def _all_nan(f, rng, m, cols):
  return f.nans(rng, (m, cols))


def _infs(f, rng, m, cols):
  b = _normal(f, rng, m, cols)
  mask = rng.random((m, cols)) < rng.uniform(0.05, 0.6)
  b[mask] = f.inf | f.random_sign(rng, int(mask.sum()))
  return b


def _all_neg_inf(f, rng, m, cols):
  return np.full((m, cols), f.inf | f.sign, dtype=f.ubits)


def _all_pos_inf(f, rng, m, cols):
  return np.full((m, cols), f.inf, dtype=f.ubits)


def _signed_zeros(f, rng, m, cols):
  b = f.random_sign(rng, (m, cols))  # only +0 / -0
  if rng.random() < 0.5:             # plus values of one sign: a zero is the max or the min
    mask = rng.random((m, cols)) < 0.5
    sign = f.sign if rng.random() < 0.5 else f.ubits.type(0)
    b[mask] = _normal(f, rng, 1, int(mask.sum()))[0] & ~f.sign | sign
  return b


def _subnormals(f, rng, m, cols):
  b = f.subnormals(rng, (m, cols))
  mask = rng.random((m, cols)) < 0.2
  b[mask] = f.random_sign(rng, int(mask.sum()))  # ±0 among them
  return b


def _tiny_subnormals(f, rng, m, cols):  # k * smallest subnormal, k small: close values, ties
  return f.subnormals(rng, (m, cols), max_mantissa=int(rng.integers(1, 6)))


def _lowest(f, rng, m, cols):
  return np.full((m, cols), f.max_finite | f.sign, dtype=f.ubits)


def _lowest_and_neg_inf(f, rng, m, cols):
  b = np.full((m, cols), f.max_finite | f.sign, dtype=f.ubits)
  b[rng.random((m, cols)) < 0.5] = f.inf | f.sign
  return b


def _random_bits(f, rng, m, cols):
  return rng.integers(0, 2 ** f.nbits, size=(m, cols), dtype=np.uint64).astype(f.ubits)


def _palette(f, rng, m, cols):
  p = f.palette()
  return p[rng.integers(0, len(p), size=(m, cols))]


FILLS = (_normal, _small_ints, _all_equal, _one_nan, _several_nans, _all_nan, _infs,
         _all_neg_inf, _all_pos_inf, _signed_zeros, _subnormals, _tiny_subnormals, _lowest,
         _lowest_and_neg_inf, _random_bits, _palette)


def make_input(f: Fmt, rng, shape, axis):
  """Random array of ``shape``; every row along ``axis`` (the whole array if None) gets a fill."""
  if axis is None:
    rows, cols = 1, math.prod(shape)
  else:
    cols = shape[axis]
    rows = math.prod(shape) // cols
  if rng.random() < 0.4:  # one fill for the whole case, else one per row
    kinds = np.full(rows, rng.integers(0, len(FILLS)))
  else:
    kinds = rng.integers(0, len(FILLS), size=rows)
  bits = np.empty((rows, cols), dtype=f.ubits)
  for k in np.unique(kinds):
    idx = np.nonzero(kinds == k)[0]
    bits[idx] = FILLS[k](f, rng, len(idx), cols)
  x = f.view(bits)
  if axis is None:
    return x.reshape(shape)
  axis %= len(shape)
  moved = shape[:axis] + shape[axis + 1:] + (cols,)
  return np.moveaxis(x.reshape(moved), -1, axis)


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


# ----------------------------------------------------------------------------- reference

def reference(x: np.ndarray, axis, keepdims, is_min):
  """numpy's answer; bfloat16 on its exact float32 widening (see test_bfloat16_reference)."""
  if x.dtype == np.dtype(ml_dtypes.bfloat16):
    x = x.astype(np.float32)
  fn = np.argmin if is_min else np.argmax
  return fn(x, axis=axis, keepdims=keepdims)


def _describe_rows(x, axis, got, want, limit=3):
  """The first differing rows of a mismatch, as hex bits (for the failure message)."""
  f_bits = np.dtype(f"uint{8 * x.dtype.itemsize}")
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


# ----------------------------------------------------------------------------- tests

def _fns(axis, keepdims):
  """name -> (fn(x, is_min)) for the three paths."""
  return {
      "kernel": lambda v, is_min: _argreduce(v, axis, keepdims, is_min=is_min, method="kernel"),
      "xla": lambda v, is_min: _argreduce(v, axis, keepdims, is_min=is_min, method="xla"),
      "public": lambda v, is_min: (argmin if is_min else argmax)(v, axis=axis, keepdims=keepdims),
  }


def _jitted(axis, keepdims):
  """One jitted program computing all six results (3 paths x argmax/argmin)."""
  fns = _fns(axis, keepdims)

  @jax.jit
  def run(v):
    return {(name, is_min): fn(v, is_min) for name, fn in fns.items() for is_min in (False, True)}

  return run


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
      fns = _fns(axis, keepdims)
      jitted = _jitted(axis, keepdims) if ci % JIT_EVERY == 0 else None
      for fi in range(WIDE_FILLS if wide else small_fills):
        x = make_input(f, rng, shape, axis)
        xj = jnp.asarray(x)
        assert xj.dtype == f.dtype
        results = {(name, is_min): fn(xj, is_min)
                   for name, fn in fns.items() for is_min in (False, True)}
        if jitted is not None and fi < JIT_FILLS:
          results.update({(f"jit-{name}", is_min): r for (name, is_min), r in jitted(xj).items()})
        for (name, is_min), got in results.items():
          want = reference(x, axis, keepdims, is_min)
          comparisons += 1
          problem = None
          if got.dtype != want_aval.dtype:
            problem = f"dtype {got.dtype}, want {want_aval.dtype}"
          elif got.shape != want.shape or got.shape != want_aval.shape:
            problem = f"shape {got.shape}, want {want.shape} (jnp: {want_aval.shape})"
          elif not np.array_equal(np.asarray(got), want):
            problem = "values differ\n" + _describe_rows(x, axis, np.asarray(got), want)
          if problem is not None and len(failures) < 20:
            failures.append(
                f"  {'argmin' if is_min else 'argmax'} via {name}: {dtype}{list(shape)} "
                f"axis={axis} keepdims={keepdims} x64={use_x64} (combination {ci}, fill {fi}, "
                f"seed {SEED}): {problem}")
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
  for i, dtype in enumerate(DTYPES):
    f = Fmt(dtype)
    rng = np.random.default_rng([SEED, i, 3])
    for fill in FILLS:
      bits = fill(f, rng, 4, 64)
      assert bits.shape == (4, 64) and bits.dtype == f.ubits, fill.__name__
    def x(fill):
      with np.errstate(invalid="ignore"):  # casting signalling NaNs
        return f.view(fill(f, rng, 8, 50)).astype(np.float64)
    assert np.isnan(x(_all_nan)).all()
    assert (np.isnan(x(_one_nan)).sum(axis=1) >= 1).all()
    assert (x(_all_neg_inf) == -np.inf).all()
    assert (x(_lowest) == float(ml_dtypes.finfo(f.dtype).min)).all()
    sub = x(_subnormals)
    tiny = float(ml_dtypes.finfo(f.dtype).smallest_normal)
    assert ((np.abs(sub) < tiny)).all() and (sub != 0).any()
    z = x(_signed_zeros)
    assert (np.signbit(z) & (z == 0)).any() and (~np.signbit(z) & (z == 0)).any()
    pal = f.view(f.palette()).astype(np.float64)
    assert np.isnan(pal).any() and np.isposinf(pal).any() and np.isneginf(pal).any()
  # numpy (the reference) must itself see subnormals in this process (no flush-to-zero).
  assert np.argmax(np.array([1e-45, 3e-45, 2e-45], np.float32)) == 1
  assert np.argmin(np.array([-1e-45, -3e-45, -2e-45], np.float32)) == 1


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


@pytest.mark.parametrize("method,has_custom_call", [("kernel", True), ("auto", True),
                                                     ("xla", False)])
def test_methods_take_distinct_paths(method, has_custom_call):
  """On CPU "kernel"/"auto" lower to the FFI handler and "xla" does not (so the differential
  test really compares two implementations)."""
  fn = jax.jit(lambda v: _argreduce(v, -1, False, is_min=False, method=method))
  text = fn.lower(jax.ShapeDtypeStruct((4, 100), jnp.float32)).as_text()
  assert ("jax_argreduce_cpu" in text) == has_custom_call


@pytest.mark.parametrize("method,jit", [
    ("kernel", False), ("kernel", True), ("xla", False), ("xla", True), ("public", False),
    ("public", True),
])
@pytest.mark.parametrize("shape,axis", [((3, 9, 4, 1), 1), ((100, 9, 4, 1), 1), ((5, 2, 9, 1), 0)])
def test_bfloat16_subnormals_non_last_axis(method, jit, shape, axis):
  """Regression: XLA's CPU transpose of bfloat16 flushed subnormals when the reduction axis
  was moved last (found by the generator with seed 98765), and under jit XLA folded a bitcast
  workaround back into that transpose; the bits now move behind an optimization barrier."""
  rng = np.random.default_rng(5)
  x = rng.integers(1, 0x80, size=shape).astype(np.uint16).view(ml_dtypes.bfloat16)  # subnormals
  fn = functools.partial(_fns(axis, False)[method], is_min=False)
  got = np.asarray((jax.jit(fn) if jit else fn)(jnp.asarray(x)))
  np.testing.assert_array_equal(got, reference(x, axis, False, False))
