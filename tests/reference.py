"""The one numpy reference of the test suite, and the special-value fills CPU and GPU tests share.

Reference (SPEC §1, §1b): ``argmax``/``argmin`` are numpy's exactly; ``max_with_index`` /
``min_with_index`` return ``(values, indices)`` with ``indices`` numpy's argmax (argmin) and
``values`` the element at that index, bit for bit (NaN payload, sign of zero). bfloat16 arrays
(ml_dtypes) are compared on their float32 widening, which is exact and order-preserving
(``test_differential.test_bfloat16_reference`` checks that numpy agrees on the two).

Fills: special values are built from bit patterns (``Fmt``), never from float arithmetic that
could round or flush them: NaNs of both signs with random payloads (quiet and signalling),
±inf, ±0, subnormals, the lowest finite value, ties, rows entirely NaN / -inf / lowest.
``FILLS`` are functions ``(fmt, rng, m, cols) -> [m, cols] bits``; ``make_input`` spreads them
over the rows of an array along any axis, ``fill_rows`` gives a [rows, cols] array of a dtype.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

OPS = ("argmax", "argmin", "max_with_index", "min_with_index")
ARG_OPS = ("argmax", "argmin")
WITH_INDEX_OPS = ("max_with_index", "min_with_index")
DTYPES = ("float16", "bfloat16", "float32", "float64")


def np_dtype(name) -> np.dtype:
  """numpy dtype of a dtype name or type (bfloat16 from ml_dtypes)."""
  return np.dtype(ml_dtypes.bfloat16) if str(name) == "bfloat16" else np.dtype(name)


def is_min(op: str) -> bool:
  return op in ("argmin", "min_with_index")


def with_value(op: str) -> bool:
  return op in WITH_INDEX_OPS


def bits_dtype(dtype) -> np.dtype:
  """Unsigned integer dtype of the same width (to compare floats bit for bit)."""
  return np.dtype(f"uint{8 * np.dtype(dtype).itemsize}")


def as_bits(x) -> np.ndarray:
  x = np.asarray(x)
  return x.view(bits_dtype(x.dtype)) if x.dtype.kind == "f" or x.dtype == np_dtype(
      "bfloat16") else x


def _exact(x: np.ndarray) -> np.ndarray:
  """The array numpy compares: bfloat16 widened to float32 (exact)."""
  return x.astype(np.float32) if x.dtype == np_dtype("bfloat16") else x


# ----------------------------------------------------------------------------- reference

def argreduce(x, axis=None, keepdims=False, *, op: str = "argmax"):
  """numpy's answer for ``op`` (one of ``OPS``): indices, or ``(values, indices)``."""
  x = np.asarray(x)
  fn = np.argmin if is_min(op) else np.argmax
  indices = fn(_exact(x), axis=axis, keepdims=keepdims)
  if not with_value(op):
    return indices
  if x.ndim == 0 or axis is None:
    flat = x.reshape(-1)
    values = flat[np.asarray(indices).reshape(-1)].reshape(np.shape(indices))
  else:
    idx = indices if keepdims else np.expand_dims(indices, axis)
    values = np.take_along_axis(x, idx, axis=axis)
    if not keepdims:
      values = np.squeeze(values, axis)
  return values, indices


def argmax(x, axis=None, keepdims=False):
  return argreduce(x, axis, keepdims, op="argmax")


def argmin(x, axis=None, keepdims=False):
  return argreduce(x, axis, keepdims, op="argmin")


def max_with_index(x, axis=-1, keepdims=False):
  return argreduce(x, axis, keepdims, op="max_with_index")


def min_with_index(x, axis=-1, keepdims=False):
  return argreduce(x, axis, keepdims, op="min_with_index")


REFERENCE = {"argmax": argmax, "argmin": argmin, "max_with_index": max_with_index,
             "min_with_index": min_with_index}


def top_k(x, k: int, axis: int = -1):
  """SPEC §1e on decoded floats (not the package's integer keys): per row along ``axis``, the
  ``k`` first elements ordered by (is NaN, value) descending with -0.0 == +0.0, then index
  ascending; ``(values, indices)`` with ``k`` in place of ``axis``, values bit for bit."""
  x = np.asarray(x)
  moved = np.moveaxis(x, axis, -1)
  wide = _exact(moved)
  if wide.dtype.kind == "f":
    nan = np.isnan(wide)
    value = np.where(nan, 0, wide)
    keys = [-value, -nan.astype(np.int8)]
  else:  # integers, bool: their own order
    keys = [-wide.astype(np.int64)]
  cols = moved.shape[-1]
  index = np.broadcast_to(np.arange(cols), moved.shape)
  order = np.lexsort([index, *keys], axis=-1)[..., :k]  # last key primary
  values = np.take_along_axis(moved, order, axis=-1)
  return np.moveaxis(values, -1, axis), np.moveaxis(order, -1, axis)


def mismatch(got, want, *, op: str) -> str | None:
  """None when ``got`` (indices, or (values, indices)) equals the reference ``want``: indices
  by value, values bit for bit (shape and dtype included); else what differs."""
  if with_value(op):
    (got_v, got_i), (want_v, want_i) = got, want
    problem = mismatch(got_i, want_i, op="argmax")
    if problem is not None:
      return "indices: " + problem
    got_v, want_v = np.asarray(got_v), np.asarray(want_v)
    if got_v.dtype != want_v.dtype:
      return f"values dtype {got_v.dtype}, want {want_v.dtype}"
    if got_v.shape != want_v.shape:
      return f"values shape {got_v.shape}, want {want_v.shape}"
    diff = np.nonzero((as_bits(got_v) != as_bits(want_v)).reshape(-1))[0]
    if diff.size:
      g, w = as_bits(got_v).reshape(-1), as_bits(want_v).reshape(-1)
      return f"values differ in bits at {diff[:5].tolist()}: got " + ", ".join(
          f"{int(g[i]):#x}" for i in diff[:5]) + "; want " + ", ".join(
              f"{int(w[i]):#x}" for i in diff[:5])
    return None
  got, want = np.asarray(got), np.asarray(want)
  if got.shape != want.shape:
    return f"shape {got.shape}, want {want.shape}"
  diff = np.nonzero((got != want).reshape(-1))[0]
  if diff.size:
    return (f"indices differ at {diff[:5].tolist()}: got {got.reshape(-1)[diff[:5]].tolist()}, "
            f"want {want.reshape(-1)[diff[:5]].tolist()}")
  return None


def assert_matches(got, want, *, op: str, msg: str = "") -> None:
  problem = mismatch(got, want, op=op)
  assert problem is None, f"{op}: {problem} {msg}"


# ----------------------------------------------------------------------------- float formats

class Fmt:
  """Bit layout of a float dtype; special values are built from bit patterns."""

  def __init__(self, name):
    self.dtype = np_dtype(name)
    self.name = "bfloat16" if self.dtype == np_dtype("bfloat16") else self.dtype.name
    self.nbits = 8 * self.dtype.itemsize
    self.ubits = bits_dtype(self.dtype)
    self.mant = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}[self.name]
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
  wide = np.float64 if f.nbits == 64 else np.float32
  scale = wide(10.0) ** wide(rng.integers(-3, 4))
  return f.from_float(rng.standard_normal((m, cols), dtype=wide) * scale)


def _small_ints(f, rng, m, cols):  # the max repeated at many positions
  return f.from_float(rng.integers(-3, 4, size=(m, cols)).astype(np.float32))


def _planted_ties(f, rng, m, cols):
  """The row's max and min each planted at a few scattered positions (ties far apart: across
  threads, blocks and parts of a split row), ±0 among the planted copies when they are 0."""
  b = _normal(f, rng, m, cols)
  for value in (f.from_float(np.float32(1e4 if f.name != "float16" else 6e4)),
                f.from_float(np.float32(-1e4 if f.name != "float16" else -6e4))):
    pos = rng.integers(0, cols, size=(m, 4))
    b[np.arange(m)[:, None], pos] = value
  return b


def _all_equal(f, rng, m, cols):
  row = _normal(f, rng, m, 1)
  return np.repeat(row, cols, axis=1)


def _one_nan(f, rng, m, cols):
  b = _normal(f, rng, m, cols)
  b[np.arange(m), rng.integers(0, cols, size=m)] = f.nans(rng, m)
  return b


def _few_nans(f, rng, m, cols):
  """Two or three NaNs (random sign and payload) anywhere: the first one must win."""
  b = _normal(f, rng, m, cols)
  pos = rng.integers(0, cols, size=(m, 3))
  b[np.arange(m)[:, None], pos] = f.nans(rng, (m, 3))
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


FILLS = (_normal, _small_ints, _planted_ties, _all_equal, _one_nan, _few_nans, _several_nans,
         _all_nan, _infs, _all_neg_inf, _all_pos_inf, _signed_zeros, _subnormals,
         _tiny_subnormals, _lowest, _lowest_and_neg_inf, _random_bits, _palette)
FILL_NAMES = tuple(fill.__name__.lstrip("_") for fill in FILLS)


def fill_bits(f: Fmt, rng, rows: int, cols: int, kinds=None) -> np.ndarray:
  """[rows, cols] bits: one fill for all rows (40% of calls) or one per row; ``kinds`` (fill
  indices, one per row) forces the choice."""
  if kinds is None:
    if rng.random() < 0.4:
      kinds = np.full(rows, rng.integers(0, len(FILLS)))
    else:
      kinds = rng.integers(0, len(FILLS), size=rows)
  kinds = np.asarray(kinds)
  bits = np.empty((rows, cols), dtype=f.ubits)
  for k in np.unique(kinds):
    idx = np.nonzero(kinds == k)[0]
    bits[idx] = FILLS[k](f, rng, len(idx), cols)
  return bits


def fill_rows(dtype, rng, rows: int, cols: int, kinds=None) -> np.ndarray:
  """A [rows, cols] array of ``dtype`` whose rows carry the special-value fills."""
  f = Fmt(dtype)
  return f.view(fill_bits(f, rng, rows, cols, kinds))


def make_input(f: Fmt, rng, shape, axis):
  """Random array of ``shape``; every row along ``axis`` (the whole array if None) gets a fill."""
  if axis is None:
    rows, cols = 1, math.prod(shape)
  else:
    cols = shape[axis]
    rows = math.prod(shape) // cols
  x = f.view(fill_bits(f, rng, rows, cols))
  if axis is None:
    return x.reshape(shape)
  axis %= len(shape)
  moved = shape[:axis] + shape[axis + 1:] + (cols,)
  return np.moveaxis(x.reshape(moved), -1, axis)


def random_rows(rng, rows: int, cols: int, dtype) -> np.ndarray:
  """Plain random normal rows (no special values) of ``dtype``."""
  return rng.standard_normal((rows, cols), dtype=np.float32).astype(np_dtype(dtype))


def scaled_logits(row, temperature) -> np.ndarray:
  """z of SPEC §1c/§1f as the handlers compute it: the logit widened exactly to float32
  (float64 for float64 logits) times the correctly rounded 1/T; ±inf logits stay ±inf."""
  noise = np.float64 if np.asarray(row).dtype == np.float64 else np.float32
  x = np.asarray(row).astype(noise)
  inv_t = noise(1) / noise(temperature)
  with np.errstate(invalid="ignore", over="ignore"):
    z = x * inv_t
  return np.where(np.isinf(x), x, z)


def sampler_order(z) -> np.ndarray:
  """The columns of a row of z in §1 order: NaN first (lowest column first), then larger z,
  the lowest column among equal z."""
  z = np.asarray(z)
  cols = np.arange(z.size)
  nan = np.isnan(z)
  finite_key = np.where(nan, 0, z)
  # lexsort: last key primary. NaN first, then z descending, then column ascending.
  return np.lexsort((cols, -finite_key.astype(np.float64), ~nan))


def filtered_kept(row, temperature=1.0, k=None, p=None, min_p=None) -> np.ndarray:
  """The kept set of SPEC §1f steps 1-3 as a boolean mask over the row (numpy reference).
  Masses: E = float32(exp(d)), d = float32(z - z_max) (0 where z == z_max), top-p over
  floor(E * 2^32) with an exact comparison against p (float32) times their sum."""
  from fractions import Fraction
  z = scaled_logits(row, temperature)
  order = sampler_order(z)
  n = z.size
  kk = n if k is None or k <= 0 or k >= n else int(k)
  first = order[0]
  kept = np.zeros(n, bool)
  if np.isnan(z[first]) or z[first] == -np.inf:
    kept[first] = True  # a NaN wins; a row of -inf keeps its first token
    return kept
  z_max = z[first]
  zk = z[order[:kk]]
  with np.errstate(invalid="ignore", over="ignore"):
    d = np.where(zk == z_max, 0.0, (zk.astype(np.float64) - np.float64(z_max))).astype(np.float32)
  e = np.exp(d.astype(np.float64)).astype(np.float32)
  count = kk
  if p is not None and np.float32(p) < 1:
    w = [int(math.floor(float(v) * 2.0**32)) for v in e]
    total = sum(w)
    threshold = Fraction(float(np.float32(p))) * total
    before, c = 0, 0
    while c < kk and before < threshold:
      before += w[c]
      c += 1
    count = min(count, c)
  if min_p is not None and np.float32(min_p) > 0:
    c = int(np.argmin(e >= np.float32(min_p))) if not np.all(e >= np.float32(min_p)) else kk
    count = min(count, c)
  kept[order[:max(count, 1)]] = True
  return kept


def filtered_probs(row, temperature=1.0, **filters) -> np.ndarray:
  """softmax(z) renormalized over the kept set (float64), for chi-square tests."""
  kept = filtered_kept(row, temperature, **filters)
  z = scaled_logits(row, temperature).astype(np.float64)
  logit = np.where(kept, z, -np.inf)
  m = np.max(logit)
  w = np.where(kept, np.exp(logit - m), 0.0)
  return w / w.sum()
