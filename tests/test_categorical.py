"""`jax_argreduce.categorical` on the CPU handler (SPEC §1c): statistics and contract.

Statistics, every seed and threshold fixed in advance (the tests are deterministic; a p-value
below the threshold is a failure, not bad luck):
  * chi-square goodness of fit against ``softmax(logits / T)`` (float64 reference from the logits
    as rounded to their dtype): peaked, flat, masked with -inf, T = 0.5 / 1 / 2 (scalar and per
    row), vocabularies 1..33, 1000 and 4099 (not a multiple of any block size, the mass put on
    the ragged ends), float32 / bfloat16 / float16 / float64 logits; bins with an expected count
    below 5 are pooled; p >= 1e-6. Many draws per call: a scalar key puts the row index in the
    counter, so each row of one call is an independent draw;
  * the Gumbel noise itself (the internal noisy-maximum output): Kolmogorov-Smirnov against the
    Gumbel CDF (p >= 1e-6), its documented range, its upper tail P(G > 8);
  * tails: a head 12 above a 20,000-token tail (mass 10.9%, 12,000 draws) and a head 18 above a
    200,000-token tail (mass 0.30%, 10,000 draws; the precise version with millions of draws is
    on the GPU, tests/test_gpu_categorical.py): observed tail count within 5 standard errors;
  * independence: agreement of two keys' samples at chance (1/V within 5 standard errors) for
    every key impl and ways of deriving keys; the joint law of adjacent rows' samples (chi-square
    against the product of uniforms);
  * the distribution equals jax.random.categorical's (two-sample chi-square, p >= 1e-6).
Exactness: every index is the first argmax of fl(fl(logit * fl(1/T)) + G), G read back one
column at a time (the handler's skipping never changes a sample).
Contract: indices in range whatever the logits (NaN, ±inf, subnormal, random bits), -inf never
drawn, an all -inf row gives 0, the first NaN wins, T == 0 rows are exactly ``argmax``; the same
key gives the same samples (eager, jit, export), a sample depends only on (key, row, column):
not on the logits' dtype (bfloat16/float16 logits == their float32 widening), the index dtype
(x64), trailing -inf columns, the rows after it, or (per-row keys) the row's position in the
batch; vmap equals a loop; key impls and raw keys; errors; grad (float0); jax.export.
"""

from __future__ import annotations

import math
import re
import time
from decimal import Decimal
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_argreduce
import reference
from jax_argreduce import _ffi, _primitives
from stats import (P_MIN, SIGMAS, check_tail_mass, chi2_sf, chi_square_gof, chi_square_two_sample,
                   gumbel_cdf, kolmogorov_sf, report, softmax_probs, within_sigmas)

IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")
# ffi/gumbel.h: kGumbelMinF32 / kGumbelMaxF32, kGumbelMinF64 / kGumbelMaxF64.
G_MIN_F32, G_MAX_F32 = float.fromhex("-0x1.90a3aap+1"), float.fromhex("0x1.6dfb52p+4")
G_MIN_F64, G_MAX_F64 = float.fromhex("-0x1.e7686d3aca577p+1"), float.fromhex("0x1.686fc0af622d7p+5")


# ------------------------------------------------------------------------------ sampling

def sample(key, logits, **kw) -> np.ndarray:
  return np.asarray(jax_argreduce.categorical(key, logits, **kw))


def tiled(row, rows: int, dtype=np.float32):
  """``rows`` copies of one logits row (each an independent draw under a scalar key)."""
  return jnp.asarray(np.tile(np.asarray(row, np.float64).astype(
      reference.np_dtype(dtype))[None], (rows, 1)))


def noise(key, rows: int, col: int, dtype=np.float32) -> np.ndarray:
  """G(key, row, col) for rows 0..rows-1, from the noisy maximum of a row whose only finite
  logit (0) sits at column ``col`` (internal output of the primitive)."""
  x = np.full((rows, col + 1), -np.inf, dtype)
  x[:, col] = 0
  bits = jax.random.key_data(key).reshape(1, 2).astype(np.uint32)
  noise_dtype = np.float64 if np.dtype(dtype) == np.float64 else np.float32
  values, indices = _primitives.categorical_last_axis(
      bits, jnp.asarray(x), jnp.ones((1,), noise_dtype), jnp.zeros((2,), np.int32),
      index_dtype=np.int32)
  assert (np.asarray(indices) == col).all()
  return np.asarray(values)


# ------------------------------------------------------------------------------ the helpers

def test_statistics_helpers_against_known_values():
  # scipy.stats.chi2.sf / kstwobign.sf values.
  assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-9)
  assert chi2_sf(124.342, 100) == pytest.approx(0.05000071576997178, rel=1e-9)
  assert chi2_sf(50.0, 9) == pytest.approx(1.0772382022574693e-07, rel=1e-9)
  assert chi2_sf(4.0, 9) == pytest.approx(0.9114125268316792, rel=1e-9)
  assert chi2_sf(1500.0, 1000) == pytest.approx(1.0454640385980825e-22, rel=1e-9)
  assert kolmogorov_sf(1.3580986393225505 / math.sqrt(1e6), 10**6) == pytest.approx(0.05,
                                                                                     rel=1e-3)
  stat, df, p = chi_square_gof(np.repeat(np.arange(4), 25), [0.25] * 4)
  assert (stat, df, p) == (0.0, 3, 1.0)
  _, _, p = chi_square_gof(np.zeros(1000, int), [0.5, 0.5])
  assert p < 1e-100


# ------------------------------------------------------------------------------ goodness of fit

def _normal_row(seed, cols, scale=1.0):
  return np.random.default_rng(seed).standard_normal(cols) * scale


def _ragged_row(seed, cols, bump_cols, bump=3.0, scale=0.5):
  row = _normal_row(seed, cols, scale)
  row[np.asarray(bump_cols) % cols] += bump
  return row


# name -> (logits row (float64 values), rows drawn, temperature, dtype)
GOF_CASES = {
    "peaked": ([6, 3, 2, 1, 0, 0, -1, -2, -4, -8], 200_000, None, "float32"),
    "flat1": ([0.0], 1000, None, "float32"),
    "flat2": ([0.0] * 2, 200_000, None, "float32"),
    "flat3": ([1.5] * 3, 200_000, None, "float32"),
    "flat4": ([0.0] * 4, 200_000, None, "float32"),  # one Philox call per stream covers the row
    "flat5": ([-3.0] * 5, 200_000, None, "float32"),
    "flat8": ([0.0] * 8, 200_000, None, "float32"),
    "flat9": ([2.0] * 9, 200_000, None, "float32"),
    "flat17": ([0.0] * 17, 200_000, None, "float32"),
    "masked": ([-np.inf, 1, 0.5, -np.inf, -np.inf, 0, 2, -np.inf, -1, 0.25, 3, -np.inf],
               200_000, None, "float32"),
    "masked_one_finite": ([-np.inf] * 6 + [-1e30] + [-np.inf] * 5, 20_000, None, "float32"),
    "t0.5": (_normal_row(1, 33, 1.5), 200_000, 0.5, "float32"),
    "t1": (_normal_row(1, 33, 1.5), 200_000, 1.0, "float32"),
    "t2": (_normal_row(1, 33, 1.5), 200_000, 2.0, "float32"),
    "t0.37_float64": (_normal_row(1, 33, 1.5), 200_000, 0.37, "float64"),
    "bfloat16": (_normal_row(2, 13, 2.0), 200_000, None, "bfloat16"),
    "float16": (_normal_row(2, 13, 2.0), 200_000, None, "float16"),
    "float32": (_normal_row(2, 13, 2.0), 200_000, None, "float32"),
    "float64": (_normal_row(2, 13, 2.0), 200_000, None, "float64"),
    "bfloat16_t1.7": (_normal_row(3, 29, 2.0), 200_000, 1.7, "bfloat16"),
    "vocab1000": (_ragged_row(4, 1000, [0, 1, 2, 7, 8, 995, 996, 997, 998, 999]),
                  60_000, None, "float32"),
    "vocab4099": (_ragged_row(5, 4099, [0, 1, 2, 3, 4, 4088, 4095, 4096, 4097, 4098]),
                  20_000, None, "float32"),
    "vocab4099_bfloat16_t0.8": (
        _ragged_row(6, 4099, [0, 3, 4, 5, 4091, 4092, 4097, 4098], bump=2.5),
        15_000, 0.8, "bfloat16"),
    "vocab4099_float64": (_ragged_row(7, 4099, [1, 2, 4096, 4097, 4098]), 10_000, None,
                          "float64"),
}


@pytest.mark.parametrize("case", list(GOF_CASES))
def test_chi_square_goodness_of_fit(case, x64):
  row, rows, temperature, dtype = GOF_CASES[case]
  with x64(dtype == "float64"):
    logits = tiled(row, rows, dtype)
    got = sample(jax.random.key(1234), logits, temperature=temperature)
    probs = softmax_probs(np.asarray(logits)[0], 1.0 if temperature is None else temperature)
  stat, df, p = chi_square_gof(got, probs)
  report(case, rows=rows, chi2=stat, df=df, p=p)
  assert p >= P_MIN, f"{case}: chi2 {stat:.1f} on {df} df, p = {p:.3g}"


def test_chi_square_per_row_temperatures():
  """One call, three temperatures as a per-row array (and rows of T == 0, exactly argmax)."""
  row = _normal_row(8, 21, 1.5)
  temps = np.array([0.5, 1.0, 2.0, 0.0], np.float32)
  rows_each = 100_000
  t = np.repeat(temps, rows_each)
  got = sample(jax.random.key(77), tiled(row, t.size), temperature=jnp.asarray(t))
  for i, temp in enumerate(temps):
    part = got[i * rows_each:(i + 1) * rows_each]
    if temp == 0:
      assert (part == np.argmax(row.astype(np.float32))).all()
      continue
    stat, df, p = chi_square_gof(part, softmax_probs(row.astype(np.float32), temp))
    report(f"per-row T={temp}", rows=rows_each, chi2=stat, df=df, p=p)
    assert p >= P_MIN, (temp, stat, df, p)


def test_chi_square_row_independence():
  """Joint law of the samples of rows 2i and 2i+1 (and of rows i and i + 4096) under one
  scalar key: the product of the uniform marginals (36 cells)."""
  v, n = 6, 240_000
  got = sample(jax.random.key(5), jnp.zeros((n, v)))
  for name, (a, b) in {"adjacent": (got[0::2], got[1::2]),
                       "lag4096": (got[:n // 2], got[4096:4096 + n // 2])}.items():
    stat, df, p = chi_square_gof(a * v + b, np.full(v * v, 1.0 / (v * v)))
    report(f"row pairs {name}", pairs=a.size, chi2=stat, df=df, p=p)
    assert p >= P_MIN, (name, stat, df, p)


def test_chi_square_against_jax_random_categorical():
  """Same logits, 200,000 draws each: ours and jax.random.categorical's are one law."""
  row = np.asarray(_normal_row(9, 40, 1.3), np.float32)
  row[[3, 17]] = -np.inf
  n = 200_000
  ours = sample(jax.random.key(11), tiled(row, n))
  theirs = np.asarray(jax.random.categorical(jax.random.key(12), jnp.asarray(row), shape=(n,)))
  stat, df, p = chi_square_two_sample(ours, theirs, row.size)
  report("vs jax.random.categorical", draws=n, chi2=stat, df=df, p=p)
  assert p >= P_MIN, (stat, df, p)
  # And each against the exact law.
  for name, s in (("ours", ours), ("jax.random", theirs)):
    stat, df, p = chi_square_gof(s, softmax_probs(row))
    report(f"{name} vs softmax", chi2=stat, df=df, p=p)
    assert p >= P_MIN, (name, stat, df, p)


def test_chi_square_xla_method():
  """The internal path for platforms without a handler: the same law (other noise)."""
  row = _normal_row(10, 19, 1.5)
  n = 100_000
  logits = tiled(row, n)
  got = np.asarray(jax_argreduce.categorical(jax.random.key(3), logits, temperature=0.7,
                                             method="xla"))
  stat, df, p = chi_square_gof(got, softmax_probs(np.asarray(logits)[0], 0.7))
  report("method=xla", rows=n, chi2=stat, df=df, p=p)
  assert p >= P_MIN
  kernel = sample(jax.random.key(3), logits, temperature=0.7)
  stat, df, p = chi_square_two_sample(got, kernel, row.size)
  report("method=xla vs kernel", chi2=stat, df=df, p=p)
  assert p >= P_MIN


@pytest.mark.parametrize("impl", IMPLS + ("raw",))
def test_chi_square_every_key_impl(impl):
  row = _normal_row(11, 11, 1.0)
  n = 100_000
  key = jax.random.PRNGKey(21) if impl == "raw" else jax.random.key(21, impl=impl)
  stat, df, p = chi_square_gof(sample(key, tiled(row, n)), softmax_probs(row.astype(np.float32)))
  report(f"key impl {impl}", rows=n, chi2=stat, df=df, p=p)
  assert p >= P_MIN


def test_chi_square_per_row_keys():
  """One key per row (split keys), the same logits on every row."""
  row = _normal_row(12, 23, 1.0)
  n = 100_000
  keys = jax.random.split(jax.random.key(8), n)
  stat, df, p = chi_square_gof(sample(keys, tiled(row, n)), softmax_probs(row.astype(np.float32)))
  report("per-row keys", rows=n, chi2=stat, df=df, p=p)
  assert p >= P_MIN


def test_traced_negative_temperature_samples_softmax_of_logits_over_t():
  """Documented: under jit a negative T is not checked and samples softmax(logits / T)."""
  row = _normal_row(13, 7, 1.0)
  n = 60_000
  f = jax.jit(lambda k, x, t: jax_argreduce.categorical(k, x, temperature=t))
  got = np.asarray(f(jax.random.key(4), tiled(row, n), jnp.float32(-1.5)))
  stat, df, p = chi_square_gof(got, softmax_probs(row.astype(np.float32), -1.5))
  report("traced T=-1.5", rows=n, chi2=stat, df=df, p=p)
  assert p >= P_MIN
  # A traced NaN temperature: every y is NaN, the row returns 0.
  assert (np.asarray(f(jax.random.key(4), tiled(row, 50), jnp.float32(np.nan))) == 0).all()


# ------------------------------------------------------------------------------ the noise

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_noise_is_gumbel(dtype, x64):
  """G(key, row, col) read back through the noisy maximum: Kolmogorov-Smirnov against the
  Gumbel CDF on both halves of several words of a generator block (float32 columns 0, 1, 2, 3,
  6: halves 0..3 and 6 of the 8-column blocks; float64 columns 0, 1, 2), its documented range,
  and P(G > 8) = 3.35e-4 within 5 standard errors."""
  rows = 250_000
  lo, hi = (G_MIN_F32, G_MAX_F32) if dtype == "float32" else (G_MIN_F64, G_MAX_F64)
  cols = (0, 1, 2, 3, 6) if dtype == "float32" else (0, 1, 2)
  all_g = []
  with x64(dtype == "float64"):
    for col in cols:
      g = noise(jax.random.key(99), rows, col, np.dtype(dtype)).astype(np.float64)
      assert g.min() >= lo and g.max() <= hi, (g.min(), g.max())
      gs = np.sort(g)
      cdf = gumbel_cdf(gs)
      d = max(np.max(np.arange(1, rows + 1) / rows - cdf), np.max(cdf - np.arange(rows) / rows))
      p = kolmogorov_sf(d, rows)
      report(f"noise {dtype} col {col}", n=rows, ks_d=float(d), p=p, mean=float(g.mean()),
             var=float(g.var()), max=float(g.max()))
      assert p >= P_MIN, (col, d, p)
      all_g.append(g)
  g = np.concatenate(all_g)
  tail_p = 1 - math.exp(-math.exp(-8.0))
  z, ok = within_sigmas(float((g > 8).sum()), g.size, tail_p)
  report(f"noise {dtype} P(G>8)", n=g.size, observed=int((g > 8).sum()),
         expected=g.size * tail_p, z=z)
  assert ok, z
  # Columns of one row are not correlated with each other (nor with the next row's).
  a, b = all_g[0], all_g[1]
  r = float(np.corrcoef(a, b)[0, 1])
  assert abs(r) <= SIGMAS / math.sqrt(rows), r
  r = float(np.corrcoef(a[:-1], a[1:])[0, 1])
  assert abs(r) <= SIGMAS / math.sqrt(rows), r


def noise_rows(key, rows: int, cols: int, col_offset: int = 0) -> np.ndarray:
  """float32 G(key, row, col_offset + col) for every row and column: per row r, the noisy
  maxima of a [cols, cols] call whose only finite logit of row c (0) is at column c, one key
  per row (so each is its key's row 0), offsets (r, col_offset)."""
  data = jax.random.key_data(key).reshape(1, 2).astype(np.uint32)
  x = np.full((cols, cols), -np.inf, np.float32)
  np.fill_diagonal(x, 0)
  x = jnp.asarray(x)
  keys = jnp.asarray(np.repeat(data, cols, axis=0))
  out = []
  for r in range(rows):
    values, indices = _primitives.categorical_last_axis(
        keys, x, jnp.ones((1,), np.float32), jnp.asarray([r, col_offset], np.int32),
        index_dtype=np.int32)
    assert (np.asarray(indices) == np.arange(cols)).all()
    out.append(np.asarray(values))
  return np.stack(out)


@pytest.mark.parametrize("cols,col_offset,dtype", [
    (64, 0, "float32"), (203, 0, "float32"), (1000, 0, "float32"), (1000, 0, "bfloat16"),
    (203, 5, "float32"), (1000, 8, "float16")])
@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_samples_are_the_argmax_of_logits_over_t_plus_noise(cols, col_offset, dtype,
                                                            temperature):
  """Skipping never changes a sample: each index is exactly the first argmax of fl(fl(logit *
  fl(1 / T)) + G) (float32 steps, numpy; 16-bit logits widened exactly), G read back one
  column at a time, on rows where the noise decides (flat), where the logits do (scale 4),
  peaked (also by more than the noise's range: runs skipped before their generator call),
  with ties of equal logits, ±inf and NaN logits, ragged vocabularies (203: a tail after the
  runs of 8) and a vocabulary shard's column offset (runs off the noise's blocks of 8
  columns at offset 5)."""
  rows = 48
  key = jax.random.key(2024)
  g = noise_rows(key, rows, cols, col_offset)
  rng = np.random.default_rng(cols + col_offset)
  q = rows // 4
  x = np.concatenate([
      np.zeros((q, cols)), rng.normal(0, 4, (q, cols)), rng.normal(0, 1, (q, cols)),
      np.round(rng.normal(0, 2, (q, cols)))]).astype(reference.np_dtype(dtype))
  x[2 * q: 3 * q, cols // 3] = 9.0  # peaked rows
  x[3 * q, ::7] = -np.inf
  x[3 * q + 1, cols // 2] = np.inf
  x[3 * q + 2, cols // 2:] = -np.inf
  x[3 * q + 3, cols - 2] = np.nan
  x[3 * q + 4, cols // 4] = 40.0  # a head above what any noise lifts the rest to
  inv_t = np.float32(1) / np.float32(temperature)
  y = (x.astype(np.float32) * inv_t).astype(np.float32) + g
  want = np.argmax(y, axis=-1)  # the first NaN, else the first maximum
  _, got = _primitives.categorical_last_axis(
      jax.random.key_data(key).reshape(1, 2).astype(np.uint32), jnp.asarray(x),
      jnp.full((1,), temperature, np.float32), jnp.asarray([0, col_offset], np.int32),
      index_dtype=np.int32)
  np.testing.assert_array_equal(np.asarray(got), want)


def test_noise_does_not_depend_on_logits_dtype_or_temperature():
  """The float32 noise is the same for float32, bfloat16 and float16 logits."""
  g32 = noise(jax.random.key(5), 1000, 5, np.float32)
  for dtype in ("bfloat16", "float16"):
    np.testing.assert_array_equal(noise(jax.random.key(5), 1000, 5, reference.np_dtype(dtype)),
                                  g32)


# ------------------------------------------------------------------------------ tails

def _tail_count(head: float, tail: int, draws: int, chunk: int, dtype, seed: int) -> int:
  """Draws from [head, 0 x tail] (chunks of rows under keys folded from ``seed``); how many
  draws land in the tail."""
  x = np.zeros((chunk, tail + 1), reference.np_dtype(dtype))
  x[:, 0] = head
  x = jnp.asarray(x)
  f = jax.jit(lambda k, v: jnp.sum(jax_argreduce.categorical(k, v) != 0))
  base = jax.random.key(seed)
  count = 0
  for i in range(draws // chunk):
    count += int(f(jax.random.fold_in(base, i), x))
  return count


@pytest.mark.parametrize("head,tail,draws,chunk", [
    (12.0, 20_000, 12_000, 2_000),    # tail mass 10.9%: 1,313 expected, 5 sigma = 13%
    (18.0, 200_000, 10_000, 500),     # tail mass 0.304%: 30.4 expected (GPU: 4M draws)
])
def test_tail_mass(head, tail, draws, chunk):
  """A head ``head`` logits above a tail of ``tail`` zero logits: P(tail) = tail e^-head /
  (1 + tail e^-head); the tail needs noise near head + G_head, far into G's upper tail."""
  start = time.perf_counter()
  observed = _tail_count(head, tail, draws, chunk, "float32", seed=int(head))
  check_tail_mass("tail", head, tail, observed, draws, start)


# ------------------------------------------------------------------------------ contract

def _scaled(x, t):
  """a = fl(logit * fl(1 / T)) in the noise's type (float32; float64 for float64 logits): the
  part of y = a + G that decides the special cases (G is finite)."""
  wide = np.float64 if x.dtype == np.float64 else np.float32
  t = np.broadcast_to(np.asarray(1.0 if t is None else t, wide), x.shape[:1])
  with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
    inv_t = (wide(1) / t.astype(wide)).astype(wide)
    return x.astype(wide) * inv_t[:, None]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_indices_valid_on_any_logits(dtype, x64):
  """Special-value rows (NaN, ±inf, subnormals, lowest, random bits, ...) under several
  temperatures: the index is in range; with a = logit * (1/T) in the noise's type, the first
  NaN a wins, else the first +inf a, else an a that is not -inf unless every a is -inf (then
  0) — so a -inf logit is never drawn unless the row is all -inf (or a finite logit / T
  overflows to -inf); T = 0 rows equal argmax."""
  rng = np.random.default_rng(2024)
  with x64(dtype == "float64"):
    for rows, cols in ((400, 7), (300, 33), (100, 1000), (7, 4099)):
      x = reference.fill_rows(dtype, rng, rows, cols)
      for t in (None, 0.3, 1.0, 2.5,
                np.where(rng.random(rows) < 0.3, 0.0, rng.uniform(0.1, 3, rows))):
        tt = None if t is None else jnp.asarray(t, np.float64 if dtype == "float64"
                                                else np.float32)
        got = sample(jax.random.key(int(rng.integers(1 << 30))), x, temperature=tt)
        assert got.shape == (rows,)
        assert got.dtype == (np.int64 if jax.config.jax_enable_x64 else np.int32)
        assert ((got >= 0) & (got < cols)).all()
        t_row = np.broadcast_to(np.asarray(1.0 if t is None else t), (rows,))
        greedy = t_row == 0
        np.testing.assert_array_equal(got[greedy], reference.argmax(x, axis=-1)[greedy])
        a = _scaled(x, np.where(greedy, 1.0, t_row))
        has_nan, has_pinf = np.isnan(a).any(axis=1), np.isposinf(a).any(axis=1)
        all_ninf = np.isneginf(a).all(axis=1)
        sel = ~greedy & has_nan
        np.testing.assert_array_equal(got[sel], np.argmax(np.isnan(a), axis=1)[sel])
        sel = ~greedy & ~has_nan & has_pinf
        np.testing.assert_array_equal(got[sel], np.argmax(np.isposinf(a), axis=1)[sel])
        assert (got[~greedy & all_ninf] == 0).all()
        picked = a[np.arange(rows), got]
        assert not np.isneginf(picked[~greedy & ~all_ninf]).any(), "drew a -inf logit"
        finite_row = ~greedy & ~has_nan & ~has_pinf & ~all_ninf
        assert np.isfinite(picked[finite_row]).all()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_temperature_zero_is_argmax(dtype, x64):
  rng = np.random.default_rng(7)
  with x64(dtype == "float64"):
    x = reference.fill_rows(dtype, rng, 500, 257)
    want = np.asarray(jax_argreduce.argmax(x, axis=-1))
    np.testing.assert_array_equal(want, reference.argmax(x, axis=-1))
    for key in (jax.random.key(0), jax.random.split(jax.random.key(1), 500)):
      np.testing.assert_array_equal(sample(key, x, temperature=0.0), want)
      np.testing.assert_array_equal(sample(key, x, temperature=jnp.zeros(500)), want)
      t = np.where(np.arange(500) % 3 == 0, 0.0, 1.0)
      got = sample(key, x, temperature=t)
      np.testing.assert_array_equal(got[::3], want[::3])
      # The other rows are the rows' samples at T = 1.
      np.testing.assert_array_equal(got[t != 0], sample(key, x)[t != 0])
    # Under jit, traced temperatures.
    f = jax.jit(lambda k, v, t: jax_argreduce.categorical(k, v, temperature=t))
    np.testing.assert_array_equal(np.asarray(f(jax.random.key(3), x, 0.0)), want)


def test_neg_inf_never_drawn_and_all_neg_inf_row_gives_zero():
  rng = np.random.default_rng(9)
  rows, cols = 20_000, 37
  x = np.where(rng.random((rows, cols)) < 0.9, -np.inf, rng.standard_normal((rows, cols)) * 5)
  x[:50] = -np.inf
  x[50:100] = -np.inf
  x[50:100, 36] = -1e30  # a single finite logit, far below the others
  x[100:150] = -np.inf
  x[100:150, 35] = -3e38  # as low as float32 goes (T >= 1: logit / T does not overflow)
  x = x.astype(np.float32)
  all_ninf = np.isneginf(x).all(axis=1)
  assert all_ninf.sum() > 50
  for t in (None, 0.0, 0.05, 1.0, 40.0):
    got = sample(jax.random.key(1), x, temperature=t)
    assert (got[all_ninf] == 0).all()
    assert (got[50:100] == 36).all()
    check = ~all_ninf
    if t is None or t == 0 or t >= 1:
      assert (got[100:150] == 35).all()
    else:  # -3e38 / 0.05 overflows to -inf: y ties the -inf logits' (documented above)
      check[100:150] = False
    assert np.isfinite(x[np.arange(rows), got][check]).all()


def test_nan_logit_wins_like_argmax():
  x = np.zeros((4, 300), np.float32)
  x[0, [200, 100, 250]] = np.nan
  x[1, 299] = np.nan
  x[2, 0] = np.nan
  x[3, [7, 8]] = [np.inf, np.nan]
  for t in (None, 0.0, 0.5):
    np.testing.assert_array_equal(sample(jax.random.key(0), x, temperature=t), [100, 299, 0, 8])


def test_positive_inf_wins_first():
  x = np.zeros((3, 50), np.float32)
  x[0, [40, 9]] = np.inf
  x[1, 49] = np.inf
  x[2] = np.inf
  np.testing.assert_array_equal(sample(jax.random.key(0), x, temperature=3.0), [9, 49, 0])


@pytest.mark.parametrize("method", ["auto", "xla"])
@pytest.mark.parametrize("temperature", [1e30, 1e38, 3e38, float("inf")])
def test_huge_temperature_never_draws_neg_inf(temperature, method):
  """SPEC §1c: -inf logits are never drawn unless the whole row is -inf; a T however large,
  inf included, leaves infinite logits infinite (softmax(logits / T) is uniform over the
  finite ones), on the XLA path too, whose 1 / T is 0 there (-inf * 0 would be a NaN, which
  wins); eager and under jit (XLA's CPU arithmetic flushes a subnormal 1 / T)."""
  x = np.zeros((1000, 4), np.float32)
  x[:, 0] = -np.inf
  jitted = jax.jit(lambda k, v: jax_argreduce.categorical(k, v, temperature=temperature,
                                                          method=method))
  for got in (sample(jax.random.key(0), x, temperature=temperature, method=method),
              np.asarray(jitted(jax.random.key(0), x))):
    assert (got != 0).all(), f"T={temperature}: drew the -inf logit in {(got == 0).sum()} rows"
    stat, df, p = chi_square_gof(got, [0, 1 / 3, 1 / 3, 1 / 3])
    assert p >= P_MIN


def test_same_key_same_samples_eager_and_jit():
  rng = np.random.default_rng(10)
  x = jnp.asarray(rng.standard_normal((64, 1000)).astype(np.float32))
  key = jax.random.key(42)
  a = sample(key, x, temperature=0.9)
  np.testing.assert_array_equal(a, sample(key, x, temperature=0.9))
  f = jax.jit(lambda k, v: jax_argreduce.categorical(k, v, temperature=0.9))
  np.testing.assert_array_equal(np.asarray(f(key, x)), a)
  g = jax.jit(lambda v: jax_argreduce.categorical(key, v, temperature=0.9))  # key a constant
  np.testing.assert_array_equal(np.asarray(g(x)), a)
  h = jax.jit(lambda k, v, t: jax_argreduce.categorical(k, v, temperature=t))
  np.testing.assert_array_equal(np.asarray(h(key, x, jnp.float32(0.9))), a)
  # Temperature None == 1.0 == per-row ones; scalar == per-row array of that value.
  b = sample(key, x)
  np.testing.assert_array_equal(sample(key, x, temperature=1.0), b)
  np.testing.assert_array_equal(sample(key, x, temperature=np.ones(64, np.float32)), b)
  np.testing.assert_array_equal(sample(key, x, temperature=jnp.full((64,), 0.9)), a)
  assert (a != b).any()


def test_unsharded_program_is_the_handler_call_alone():
  """No XLA kernel before the handler's: an unsharded call passes no offsets (an empty
  constant; a constant [0, 0] became a broadcast kernel, one more launch per step)."""
  x = jnp.zeros((4, 1000), np.float32)
  for t in (None, 0.7):
    text = jax.jit(lambda k, v: jax_argreduce.categorical(k, v, temperature=t)).lower(
        jax.random.key(0), x).compile().as_text()
    ops = {m[1] for m in re.findall(r"^\s*(?:ROOT\s+)?%\S+\s*=\s*(.*?)\s+([a-z][\w-]*)\(",
                                    text, re.M)}
    assert "custom-call" in ops, text
    assert ops <= {"parameter", "constant", "bitcast", "custom-call", "get-tuple-element",
                   "tuple"}, (ops, text)


def _agreement(a, b, v):
  """(rate, z) of a == b against the chance rate 1/v."""
  n = a.size
  rate = float((a == b).mean())
  return rate, (rate - 1 / v) / math.sqrt((1 / v) * (1 - 1 / v) / n)


@pytest.mark.parametrize("impl", IMPLS + ("raw",))
def test_different_keys_are_uncorrelated(impl):
  """Two keys' samples of the same flat logits agree at the chance rate 1/V (within 5 standard
  errors): seeds 0/1/2/large, split keys, folded keys; for every impl and raw keys."""
  v, n = 10, 100_000
  x = jnp.zeros((n, v))

  def key(seed):
    return jax.random.PRNGKey(seed) if impl == "raw" else jax.random.key(seed, impl=impl)

  pairs = {
      "seed 0 vs 1": (key(0), key(1)),
      "seed 1 vs 2": (key(1), key(2)),
      "seed 7 vs 2**31+7": (key(7), key(2**31 + 7)),
      "split": tuple(jax.random.split(key(3), 2)),
      "fold_in 1 vs 2": (jax.random.fold_in(key(3), 1), jax.random.fold_in(key(3), 2)),
      "key vs its split": (key(5), jax.random.split(key(5), 1)[0]),
  }
  failures = []
  for name, (k1, k2) in pairs.items():
    rate, z = _agreement(sample(k1, x), sample(k2, x), v)
    report(f"agreement {impl} {name}", n=n, rate=rate, chance=1 / v, z=z)
    if abs(z) > SIGMAS:
      failures.append(f"{name}: agreement {rate:.4f} (chance {1 / v}), z = {z:.1f}")
  assert not failures, f"{impl}: " + "; ".join(failures)


def test_rows_of_one_key_are_uncorrelated():
  v, n = 10, 100_000
  got = sample(jax.random.key(0), jnp.zeros((2 * n, v)))
  rate, z = _agreement(got[:n], got[n:], v)
  report("agreement rows r vs r + n", n=n, rate=rate, z=z)
  assert abs(z) <= SIGMAS
  # Identical rows do not give identical samples.
  assert len(np.unique(got[:100])) == v


def test_raw_key_equals_typed_key_with_the_same_data():
  x = jnp.asarray(np.random.default_rng(1).standard_normal((50, 300)).astype(np.float32))
  np.testing.assert_array_equal(sample(jax.random.PRNGKey(3), x),
                                sample(jax.random.key(3), x))
  keys = jax.random.split(jax.random.key(4), 50)
  np.testing.assert_array_equal(sample(jax.random.key_data(keys), x), sample(keys, x))
  for impl in ("rbg", "unsafe_rbg"):
    k = jax.random.key(5, impl=impl)
    np.testing.assert_array_equal(sample(jax.random.key_data(k), x), sample(k, x))


def test_sample_does_not_depend_on_dtype_width_or_later_rows(x64):
  """A sample depends only on (key, row, column, logits, T): bfloat16/float16 logits give the
  samples of their exact float32 widening; trailing -inf columns change nothing (the column
  counter is global); the first rows' samples do not depend on the rows after them; the index
  dtype (x64) changes nothing."""
  rng = np.random.default_rng(11)
  x = rng.standard_normal((300, 1001)).astype(np.float32) * 2
  key = jax.random.key(6)
  for dtype in ("bfloat16", "float16"):
    low = x.astype(reference.np_dtype(dtype))
    np.testing.assert_array_equal(sample(key, low, temperature=0.7),
                                  sample(key, low.astype(np.float32), temperature=0.7))
  want = sample(key, x)
  padded = np.concatenate([x, np.full((300, 4099), -np.inf, np.float32)], axis=1)
  np.testing.assert_array_equal(sample(key, padded), want)
  np.testing.assert_array_equal(sample(key, x[:37]), want[:37])
  np.testing.assert_array_equal(sample(key, x[:1]), want[:1])
  with x64(True):
    got = sample(key, x)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    # float64 logits draw float64 noise (another stream): not the float32 samples.
    assert (sample(key, x.astype(np.float64)) != want).mean() > 0.9
  # Integer logits are sampled as float logits.
  xi = rng.integers(-5, 5, (300, 9)).astype(np.int32)
  np.testing.assert_array_equal(sample(key, xi), sample(key, xi.astype(np.float32)))


def test_axis_argument():
  rng = np.random.default_rng(12)
  x = rng.standard_normal((5, 300, 7)).astype(np.float32)
  key = jax.random.key(9)
  for axis in (0, 1, 2, -1, -2, -3):
    want = sample(key, np.moveaxis(x, axis, -1))
    got = sample(key, x, axis=axis)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
  keys = jax.random.split(key, (5, 7))
  np.testing.assert_array_equal(sample(keys, x, axis=1),
                                sample(keys, np.moveaxis(x, 1, -1)))
  # 1-D logits: one sample (shape ()); an empty batch: an empty result.
  assert sample(key, x[0, :, 0]).shape == ()
  assert sample(key, np.zeros((0, 5), np.float32)).shape == (0,)
  assert sample(jax.random.split(key, 0), np.zeros((0, 5), np.float32)).shape == (0,)


def test_per_row_keys_position_independent():
  """With one key per row a row's sample does not depend on its position in the batch."""
  rng = np.random.default_rng(13)
  b, v = 257, 301
  x = rng.standard_normal((b, v)).astype(np.float32)
  keys = jax.random.split(jax.random.key(10), b)
  t = rng.uniform(0.2, 2, b).astype(np.float32)
  t[::5] = 0
  want = sample(keys, x, temperature=t)
  perm = rng.permutation(b)
  np.testing.assert_array_equal(sample(keys[perm], x[perm], temperature=t[perm]), want[perm])
  for i in (0, b - 1):
    assert int(sample(keys[i], x[i], temperature=t[i])) == want[i]
    assert sample(keys[i:i + 1], x[i:i + 1], temperature=t[i:i + 1])[0] == want[i]
  # A 2-D batch with keys of the batch shape.
  np.testing.assert_array_equal(
      sample(keys[:256].reshape(16, 16), x[:256].reshape(16, 16, v),
             temperature=t[:256].reshape(16, 16)).reshape(-1), want[:256])
  # Typed and raw per-row keys, every impl.
  for impl in IMPLS:
    ks = jax.random.split(jax.random.key(1, impl=impl), b)
    got = sample(ks, x)
    np.testing.assert_array_equal(sample(ks[perm], x[perm]), got[perm])


@pytest.mark.parametrize("method", ["auto", "xla"])
def test_vmap_equals_loop(method):
  """On the handler and on the XLA path (whose row counter under vmap counts the rows that
  share a key, as the handler does)."""
  rng = np.random.default_rng(14)
  x = jnp.asarray(rng.standard_normal((6, 4, 37)).astype(np.float32))
  keys = jax.random.split(jax.random.key(11), (6, 4))
  ts = jnp.asarray([0.0, 0.5, 1.0, 2.0, 3.0, 0.0], np.float32)
  cat = lambda k, v, **kw: jax_argreduce.categorical(k, v, method=method, **kw)
  loop = np.array([[int(cat(keys[i, j], x[i, j])) for j in range(4)] for i in range(6)])
  np.testing.assert_array_equal(np.asarray(jax.vmap(cat)(keys, x)), loop)
  np.testing.assert_array_equal(np.asarray(jax.vmap(jax.vmap(cat))(keys, x)), loop)
  np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(cat))(keys, x)), loop)
  np.testing.assert_array_equal(
      np.asarray(jax.vmap(cat, in_axes=(1, 1), out_axes=1)(keys, x)), loop)
  np.testing.assert_array_equal(
      np.asarray(jax.vmap(cat, in_axes=(1, 1))(keys, x)), loop.T)
  # Shared key, vmapped logits: each batch element is the unbatched call.
  k = jax.random.key(12)
  loop = np.stack([np.asarray(cat(k, x[i])) for i in range(6)])
  np.testing.assert_array_equal(np.asarray(jax.vmap(lambda v: cat(k, v))(x)), loop)
  np.testing.assert_array_equal(np.asarray(jax.vmap(cat, in_axes=(None, 0))(k, x)), loop)
  # Vmapped keys, shared logits.
  ks = jax.random.split(k, 5)
  loop = np.stack([np.asarray(cat(ks[i], x[0])) for i in range(5)])
  np.testing.assert_array_equal(np.asarray(jax.vmap(cat, in_axes=(0, None))(ks, x[0])), loop)
  # Vmapped temperature (with per-row keys and logits).
  f = lambda kk, v, t: cat(kk, v, temperature=t)
  loop = np.stack([np.asarray(f(keys[i], x[i], ts[i])) for i in range(6)])
  np.testing.assert_array_equal(np.asarray(jax.vmap(f)(keys, x, ts)), loop)
  np.testing.assert_array_equal(np.asarray(jax.vmap(f, in_axes=(0, 0, 0))(keys, x, ts)), loop)
  loop = np.stack([np.asarray(f(k, x[0], ts[i])) for i in range(6)])
  np.testing.assert_array_equal(np.asarray(jax.vmap(f, in_axes=(None, None, 0))(k, x[0], ts)),
                                loop)
  # Per-row temperatures inside a vmap over a batch.
  tr = jnp.asarray(rng.uniform(0.1, 2, (6, 4)).astype(np.float32))
  loop = np.stack([np.asarray(f(keys[i], x[i], tr[i])) for i in range(6)])
  np.testing.assert_array_equal(np.asarray(jax.vmap(f)(keys, x, tr)), loop)
  # Raw per-row keys under vmap.
  raw = jax.random.key_data(keys)
  np.testing.assert_array_equal(np.asarray(jax.vmap(cat)(raw, x)),
                                np.asarray(jax.vmap(cat)(keys, x)))


@pytest.mark.parametrize("method", ["auto", "xla"])
@pytest.mark.parametrize("shape", [(4, 1, 3), (1, 1, 3), (4, 1, 1, 3), (1, 4, 3), (4, 1)])
def test_size_one_batch_dims(shape, method):
  """Size-1 batch dimensions with a key per row (vmap makes one): the handler's Shardy rule
  once gave the flat key dimension a compound factor of size 1, which Shardy refuses."""
  x = jnp.asarray(np.random.default_rng(16).standard_normal(shape).astype(np.float32))
  k = jax.random.key(0)
  cat = lambda kk, v, **kw: jax_argreduce.categorical(kk, v, method=method, **kw)
  loop = np.stack([np.asarray(cat(k, x[i])) for i in range(shape[0])])
  np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(lambda v: cat(k, v)))(x)), loop)
  ts = jnp.linspace(0.5, 2.0, shape[0], dtype=np.float32)
  loop = np.stack([np.asarray(cat(k, x[i], temperature=ts[i])) for i in range(shape[0])])
  np.testing.assert_array_equal(
      np.asarray(jax.vmap(lambda v, t: cat(k, v, temperature=t))(x, ts)), loop)
  keys = jax.random.split(k, shape[:-1])
  per_row = jax.jit(cat)(keys, x)
  np.testing.assert_array_equal(
      np.asarray(per_row).reshape(-1),
      [int(cat(kk, v)) for kk, v in zip(keys.reshape(-1), x.reshape(-1, shape[-1]))])


def test_grad_jvp_and_eval_shape():
  rng = np.random.default_rng(15)
  x = jnp.asarray(rng.standard_normal((3, 50)).astype(np.float32))
  key = jax.random.key(0)

  def loss(v):
    idx = jax_argreduce.categorical(key, v, temperature=0.5)
    return jnp.sum(jnp.take_along_axis(v, idx[:, None], -1) ** 2)

  idx = sample(key, x, temperature=0.5)
  want = np.zeros(x.shape, np.float32)
  want[np.arange(3), idx] = 2 * np.asarray(x)[np.arange(3), idx]
  np.testing.assert_allclose(np.asarray(jax.grad(loss)(x)), want, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(loss))(x)), want, rtol=1e-6)
  out, tangent = jax.jvp(lambda v: jax_argreduce.categorical(key, v), (x,), (x,))
  assert tangent.dtype == jax.dtypes.float0 and tangent.shape == (3,)
  np.testing.assert_array_equal(np.asarray(out), sample(key, x))
  # Gradient with respect to a temperature used elsewhere: zero through the sample.
  g = jax.grad(lambda t: jnp.sum(jax_argreduce.categorical(key, x, temperature=t)
                                 .astype(jnp.float32)) + t)(jnp.float32(1.0))
  assert float(g) == 1.0
  spec = jax.eval_shape(lambda k, v: jax_argreduce.categorical(k, v),
                        key, jax.ShapeDtypeStruct((2, 3, 7), jnp.bfloat16))
  assert spec.shape == (2, 3) and spec.dtype == jnp.int32


def test_export_round_trip():
  checks = jax_argreduce.export_disabled_checks()
  rng = np.random.default_rng(16)
  x = rng.standard_normal((8, 1001)).astype(np.float32)
  key = jax.random.key(17)
  keys = jax.random.split(key, 8)
  t = rng.uniform(0, 2, 8).astype(np.float32)
  fn = jax.jit(lambda k, v, tt: jax_argreduce.categorical(k, v, temperature=tt))
  for k in (key, keys):
    exported = jax.export.export(fn, disabled_checks=checks)(k, x, t)
    assert _ffi.target("categorical", "cpu") in exported.mlir_module()
    restored = jax.export.deserialize(exported.serialize())
    np.testing.assert_array_equal(np.asarray(restored.call(k, x, t)),
                                  sample(k, x, temperature=t))
  # Symbolic batch (scalar key) and symbolic vocabulary.
  for spec, part in (("b, 1001", x[:3]), ("8, n", x[:, :77]), ("b, n", x[:3, :77])):
    exported = jax.export.export(jax.jit(lambda k, v: jax_argreduce.categorical(k, v)),
                                 disabled_checks=checks)(
        jax.ShapeDtypeStruct((), key.dtype),
        jax.ShapeDtypeStruct(jax.export.symbolic_shape(spec), jnp.float32))
    restored = jax.export.deserialize(exported.serialize())
    np.testing.assert_array_equal(np.asarray(restored.call(key, x)), sample(key, x))
    np.testing.assert_array_equal(np.asarray(restored.call(key, part)), sample(key, part))


def test_export_xla_method_with_symbolic_batch():
  """The XLA path (method="xla", the path of platforms without the handler) exports with a
  symbolic batch, one key or a key per row, and samples as the unexported call."""
  x = np.random.default_rng(18).standard_normal((5, 300)).astype(np.float32)
  b, = jax.export.symbolic_shape("b")
  for keys_of in (lambda v: jax.random.key(19), lambda v: jax.random.split(jax.random.key(19),
                                                                          v.shape[0])):
    fn = jax.jit(lambda v: jax_argreduce.categorical(keys_of(v), v, method="xla"))
    exported = jax.export.export(fn)(jax.ShapeDtypeStruct((b, 300), jnp.float32))
    restored = jax.export.deserialize(exported.serialize())
    np.testing.assert_array_equal(np.asarray(restored.call(x)), np.asarray(fn(x)))


@pytest.mark.parametrize("method", ["auto", "xla"])
def test_eager_call_makes_no_transfer_of_its_own(method):
  """Eagerly, with device inputs, under jax.transfer_guard("disallow") (as
  jax.random.categorical): the default temperature and the offsets operand are constants of
  the call's own program, and a concrete temperature's check is allowed its own read."""
  key = jax.random.key(20)
  x = jnp.zeros((2, 5))
  t = jnp.full((2,), 0.5)
  with jax.transfer_guard("disallow"):
    jax_argreduce.categorical(key, x, method=method).block_until_ready()
    jax_argreduce.categorical(key, x, temperature=t, method=method).block_until_ready()


def test_jax_array_protocol_logits_and_wide_integer_temperatures():
  """Logits given through __jax_array__ (as argmax takes them); integer temperatures past
  int32 (a jit argument would wrap them: 2**63 to 0, i.e. argmax) are taken as floats."""
  class Wrapped:
    def __init__(self, x):
      self.x = x

    def __jax_array__(self):
      return self.x

  key = jax.random.key(21)
  x = jnp.asarray(np.random.default_rng(22).standard_normal((64, 50)).astype(np.float32))
  np.testing.assert_array_equal(sample(key, Wrapped(x)), sample(key, x))
  huge = sample(key, x, temperature=float(2**63))
  for t in (2**63, np.uint64(2**63), np.array([2**63] * 64, np.uint64)):
    np.testing.assert_array_equal(sample(key, x, temperature=t), huge)
  assert not (huge == sample(key, x, temperature=0)).all()  # not argmax


def test_integer_temperature_past_int64_is_a_float():
  """A Python int past int64 (2**70) is a float64 temperature, as logits / T takes it; one past
  float64 says so (it used to be reported as "not a real number")."""
  key = jax.random.key(23)
  x = jnp.asarray(np.random.default_rng(24).standard_normal((64, 50)).astype(np.float32))
  want = sample(key, x, temperature=float(2**70))
  np.testing.assert_array_equal(sample(key, x, temperature=2**70), want)
  np.testing.assert_array_equal(sample(key, x, temperature=[2**70] * 64), want)
  np.testing.assert_array_equal(
      sample(key, x, temperature=np.array([2**70] * 64, dtype=object)), want)
  np.testing.assert_array_equal(sample(key, x[:1], temperature=np.array([2**70], dtype=object)),
                                want[:1])
  mixed = [2**70, 1.5, np.float32(2), np.int64(3)]  # ints and floats: one float64 array
  np.testing.assert_array_equal(sample(key, x[:4], temperature=mixed),
                                sample(key, x[:4], temperature=np.asarray(mixed, np.float64)))
  for t in (10**400, [10**400, 1], [10**400, float("inf")], np.array([1, 10**400], object)):
    with pytest.raises(ValueError, match="too large for float64"):
      jax_argreduce.categorical(key, x[:2], temperature=t)


@pytest.mark.parametrize("t", [
    [2**70, "1.5"], [2**70, None], [10**400, None], [2**70, True], [2**70, 1j],
    [2**70, Fraction(1, 2)], Fraction(1, 2), Decimal("0.5"), [Fraction(1, 2)] * 2,
    np.array([2**70, "1.5"], dtype=object), np.array([0.5, None], dtype=object),
], ids=lambda t: repr(t)[:40])
def test_object_temperatures_of_non_numbers_are_refused(t):
  """Only ints and floats convert (as jnp takes them): strings, None, bools, complex numbers,
  Fraction and Decimal, alone, in a list or an object array, are not real numbers here."""
  with pytest.raises(TypeError, match="temperature must be a real number"):
    jax_argreduce.categorical(jax.random.key(0), jnp.zeros((2, 5)), temperature=t)


@pytest.mark.parametrize("shape", [(5, 1), (1,), (2, 3, 1)])
def test_one_category_is_index_zero_without_a_scan(shape, x64_mode):
  """One category: index 0 for every row, NaN, -inf and any T alike, with neither the
  handler call nor any noise in the program (auto); method="kernel" still calls the handler,
  which agrees."""
  x = np.full(shape, -np.inf, np.float32)
  x.reshape(-1)[::2] = np.nan
  key = jax.random.key(25)
  for t in (None, 0.0, 0.5, np.inf):
    out = jax_argreduce.categorical(key, x, temperature=t)
    assert out.shape == shape[:-1] and out.dtype == jnp.asarray(0).dtype
    np.testing.assert_array_equal(out, np.zeros(shape[:-1]))
    np.testing.assert_array_equal(jax_argreduce.categorical(key, x, temperature=t,
                                                            method="kernel"), out)
  text = jax.jit(lambda v: jax_argreduce.categorical(key, v)).lower(x).as_text()
  # no call and no noise (-log(-log(u)): the XLA path's logs), as the XLA path would have
  assert "custom_call" not in text and "stablehlo.log" not in text, text
  xla = jax.jit(lambda v: jax_argreduce.categorical(key, v, method="xla")).lower(x).as_text()
  assert "stablehlo.log" in xla
  kernel = jax.jit(lambda v: jax_argreduce.categorical(key, v, method="kernel"))
  assert _ffi.target("categorical", "cpu") in kernel.lower(x).as_text()


def test_raw_key_shape_error_names_the_key_data():
  with pytest.raises(ValueError, match=r"got \(2,\) \(raw key data of shape \(2, 2\)"):
    jax_argreduce.categorical(jnp.zeros((2, 2), jnp.uint32), jnp.zeros((2, 2, 5)))


@pytest.mark.parametrize("bad,exc", [
    (lambda k, x: jax_argreduce.categorical(k, x, temperature=-1.0), ValueError),
    (lambda k, x: jax_argreduce.categorical(k, x, temperature=-0.0001), ValueError),
    (lambda k, x: jax_argreduce.categorical(k, x, temperature=float("nan")), ValueError),
    (lambda k, x: jax_argreduce.categorical(k, x, temperature=np.array([1.0, -1.0, 1.0])),
     ValueError),
    (lambda k, x: jax_argreduce.categorical(k, x, temperature=jnp.array([1.0, np.nan, 1.0])),
     ValueError),
    (lambda k, x: jax_argreduce.categorical(k, x, temperature=np.ones(4)), ValueError),
    (lambda k, x: jax_argreduce.categorical(jax.random.split(k, 2), x), ValueError),
    (lambda k, x: jax_argreduce.categorical(jax.random.split(k, (3, 5)), x), ValueError),
    (lambda k, x: jax_argreduce.categorical(jax.random.split(k, 3), x.T), ValueError),
    (lambda k, x: jax_argreduce.categorical(jax.random.PRNGKey(0)[None].repeat(2, 0), x),
     ValueError),
    (lambda k, x: jax_argreduce.categorical(jnp.array([1, 2], jnp.int32), x), TypeError),
    (lambda k, x: jax_argreduce.categorical(jnp.float32(1.0), x), TypeError),
    (lambda k, x: jax_argreduce.categorical(k, x.astype(jnp.complex64)), TypeError),
    (lambda k, x: jax_argreduce.categorical(x, k), TypeError),  # swapped: "PRNG key array"
    (lambda k, x: jax_argreduce.categorical(k, jnp.zeros((3, 0))), ValueError),
    (lambda k, x: jax_argreduce.categorical(k, jnp.zeros((3, 0)), axis=1), ValueError),
    (lambda k, x: jax_argreduce.categorical(k, x, axis=2), IndexError),
    (lambda k, x: jax_argreduce.categorical(k, x, axis=-3), IndexError),
    (lambda k, x: jax_argreduce.categorical(k, jnp.float32(1.0)), ValueError),
    # raw uint32 keys: the default impl's key data (2 words), as jax.random takes them
    (lambda k, x: jax_argreduce.categorical(jnp.zeros(3, jnp.uint32), x), ValueError),
    (lambda k, x: jax_argreduce.categorical(jnp.zeros(1, jnp.uint32), x), ValueError),
    (lambda k, x: jax_argreduce.categorical(jnp.zeros((3,), jnp.uint32), x), ValueError),
    # temperatures must be real numbers
    (lambda k, x: jax_argreduce.categorical(k, x, temperature="1"), TypeError),
    (lambda k, x: jax_argreduce.categorical(k, x, temperature=True), TypeError),
    (lambda k, x: jax_argreduce.categorical(k, x, temperature=1 + 1j), TypeError),
    (lambda k, x: jax_argreduce.categorical(k, x, temperature=np.ones(3, bool)), TypeError),
])
@pytest.mark.parametrize("cols", [5, 1])  # one column (index 0 without a scan) checks alike
def test_errors(bad, exc, cols):
  with pytest.raises(exc):
    bad(jax.random.key(0), jnp.zeros((3, cols)))


def test_swapped_arguments_say_so():
  with pytest.raises(TypeError, match="PRNG key array; the arguments are"):
    jax_argreduce.categorical(jnp.zeros((3, 5)), jax.random.key(0))


def test_raw_keys_and_temperature_dtypes_accepted():
  """Raw uint32 keys of the default impl's width, one or one per row; real temperatures of any
  float or integer dtype, bfloat16 included."""
  x = jax.random.normal(jax.random.key(3), (3, 50))
  raw = jax.random.PRNGKey(5)
  per_row = jnp.stack([raw, raw + 1, raw + 2])
  assert jax_argreduce.categorical(raw, x).shape == (3,)
  assert jax_argreduce.categorical(per_row, x).shape == (3,)
  want = np.asarray(jax_argreduce.categorical(raw, x, temperature=2.0))
  for t in (2, np.float16(2), jnp.bfloat16(2), jnp.full((3,), 2, jnp.int32), [2.0, 2.0, 2.0]):
    np.testing.assert_array_equal(np.asarray(jax_argreduce.categorical(raw, x, temperature=t)),
                                  want, err_msg=repr(t))


def test_concrete_checks_are_skipped_under_jit():
  """Traced temperatures are not checked (documented); concrete ones inside jit are."""
  x = jnp.zeros((3, 5))
  f = jax.jit(lambda t: jax_argreduce.categorical(jax.random.key(0), x, temperature=t))
  assert f(jnp.float32(-1.0)).shape == (3,)
  with pytest.raises(ValueError):
    jax.jit(lambda v: jax_argreduce.categorical(jax.random.key(0), v, temperature=-1.0))(x)
