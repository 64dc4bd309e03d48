"""Filtered sampling (SPEC §1f): ``categorical(..., top_k=, top_p=, min_p=)``.

* every sample lies in the kept set of the numpy reference (reference.filtered_kept), on
  rows of every special fill, and enough draws reach every token of small kept sets (so the
  handler's kept set equals the reference's, not just a subset);
* chi-square against softmax(z) renormalized over the kept set;
* filters that keep everything give the unfiltered sample bit for bit, row by row;
* a row's sample does not depend on its batch (per-row keys), vmap equals a loop;
* top-p's boundary is exact where the mass before a token equals p times the total;
* checks name the parameter.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_argreduce
from jax_argreduce import _ffi
import reference
from _common import staged_candidates_sample, staged_prefix_sample
from stats import P_MIN, chi_square_gof, report

FILTERS = [
    dict(top_k=5), dict(top_p=0.5), dict(min_p=0.1), dict(top_k=50, top_p=0.9),
    dict(top_p=0.9, min_p=0.05), dict(top_k=700, top_p=0.3), dict(top_k=3, min_p=0.5),
]


def _ref(kw):
  return dict(k=kw.get("top_k"), p=kw.get("top_p"), min_p=kw.get("min_p"))


def _rows(seed, rows=24, cols=1000, dtype=np.float32):
  rng = np.random.default_rng(seed)
  x = (rng.standard_normal((rows, cols)) * 3).astype(dtype)
  x[1] = 1.0                          # all equal: ties everywhere
  x[2, 5] = np.nan                    # a NaN wins
  x[3] = -np.inf                      # nothing but -inf: index 0
  x[4, :10] = np.inf                  # +inf tops
  x[5, ::2] = 2.5                     # ties across the row
  x[6] = np.round(x[6])               # many ties at each value
  x[7, 100:] = -np.inf                # a short row inside a long one
  return x


@pytest.mark.parametrize("method", ["auto", "xla"])
@pytest.mark.parametrize("kw", FILTERS, ids=str)
def test_samples_inside_the_reference_kept_set(kw, method):
  x = _rows(0)
  outside = []
  for seed in range(8):
    keys = jax.random.split(jax.random.key(seed), x.shape[0])
    got = np.asarray(jax_argreduce.categorical(keys, x, temperature=0.8, method=method, **kw))
    for r in range(x.shape[0]):
      if not reference.filtered_kept(x[r], 0.8, **_ref(kw))[got[r]]:
        outside.append((seed, r, int(got[r])))
  assert not outside, f"{kw}: samples outside the kept set (seed, row, col): {outside[:5]}"


@pytest.mark.parametrize("kw", [dict(top_k=4), dict(top_p=0.6), dict(min_p=0.3),
                                dict(top_k=6, top_p=0.8, min_p=0.2)], ids=str)
def test_small_kept_sets_are_reached_whole(kw):
  # 2000 draws of one row: every kept token (probability >= 1/10 here) appears, none other.
  rng = np.random.default_rng(3)
  row = np.concatenate([np.linspace(2.0, 0.0, 8), rng.standard_normal(200) - 4]).astype(
      np.float32)
  x = np.tile(row, (2000, 1))
  got = np.asarray(jax_argreduce.categorical(jax.random.key(7), x, **kw))
  kept = reference.filtered_kept(row, 1.0, **_ref(kw))
  assert set(np.unique(got)) == set(np.flatnonzero(kept)), kw


@pytest.mark.parametrize("kw,temperature", [
    (dict(top_k=10), 1.0), (dict(top_p=0.8), 0.7), (dict(min_p=0.05), 1.3),
    (dict(top_k=40, top_p=0.9, min_p=0.01), 0.8)], ids=str)
def test_chi_square_against_the_renormalized_distribution(kw, temperature):
  rng = np.random.default_rng(11)
  row = (rng.standard_normal(3000) * 2).astype(np.float32)
  n = 20000
  got = np.asarray(jax_argreduce.categorical(jax.random.key(5), np.tile(row, (n, 1)),
                                             temperature=temperature, **kw))
  probs = reference.filtered_probs(row, temperature, **_ref(kw))
  assert probs[got].min() > 0
  stat, df, p = chi_square_gof(got, probs)
  report(f"filtered {kw} T={temperature}", rows=n, chi2=stat, df=df, p=p)
  assert p >= P_MIN, f"{kw}: chi2 {stat:.1f} on {df} df, p = {p:.3g}"


def test_filters_that_keep_everything_give_the_unfiltered_sample():
  x = _rows(1)
  keys = jax.random.split(jax.random.key(2), x.shape[0])
  base = np.asarray(jax_argreduce.categorical(keys, x, temperature=0.8))
  for kw in (dict(top_k=0), dict(top_k=x.shape[1]), dict(top_p=1.0), dict(min_p=0.0),
             dict(top_k=10 ** 12, top_p=1.0, min_p=0.0)):
    got = np.asarray(jax_argreduce.categorical(keys, x, temperature=0.8, **kw))
    np.testing.assert_array_equal(got, base, err_msg=str(kw))


@pytest.mark.parametrize("scale", [0.3, 3.0, 8.0])
def test_top_p_and_min_p_draw_what_top_k_of_their_kept_set_draws(scale):
  """Top-p and min-p keep a prefix of the sampler's order (the reference's kept set: its n
  first tokens), so they sample what top_k = n samples, bit for bit: both are the largest
  noisy key over the same tokens. Peaked rows (scale 3, 8: few kept) take the CPU handler's
  draw over the listed kept tokens, flat ones (0.3: most kept) its pass over the row."""
  rng = np.random.default_rng(int(scale * 10))
  x = (rng.standard_normal((12, 20000)) * scale).astype(np.float32)
  x[1] = np.round(x[1])                # ties at the crossing
  x[2, 5000:] = -np.inf                # a tail of -inf
  keys = jax.random.split(jax.random.key(11), x.shape[0])
  for kw in (dict(top_p=0.9), dict(top_p=0.5, min_p=0.01), dict(min_p=0.05), dict(min_p=1e-4)):
    n = np.array([reference.filtered_kept(row, 0.8, p=kw.get("top_p"),
                                          min_p=kw.get("min_p")).sum() for row in x])
    got = np.asarray(jax_argreduce.categorical(keys, x, temperature=0.8, **kw))
    want = np.asarray(jax_argreduce.categorical(keys, x, temperature=0.8, top_k=n))
    np.testing.assert_array_equal(got, want, err_msg=str(kw))


def test_top_p_keeps_its_last_token_on_rows_drawn_by_a_pass():
  """Top-p's last kept token (its bar) with and without min-p where the CPU handler draws by a
  pass over the masked row, not a list (FewLikely: tokens above the crossing bucket in the
  row's first sixteenth): 8 tokens of 1 and 8 of 0 alternating, p = 0.75 keeps the 8 and the
  first 0 (column 1, the lowest column of its ties), which wins about 4% of the draws."""
  x = np.tile(np.float32([1, 0]), 8)
  rows = np.tile(x, (2000, 1))
  with jax.default_device(jax.devices("cpu")[0]):
    keys = jax.random.split(jax.random.key(12), rows.shape[0])
    for kw in (dict(top_p=0.75), dict(top_p=0.75, min_p=0.01)):
      n = reference.filtered_kept(x, 1.0, p=kw["top_p"], min_p=kw.get("min_p")).sum()
      assert n == 9
      got = np.asarray(jax_argreduce.categorical(keys, rows, **kw))
      want = np.asarray(jax_argreduce.categorical(keys, rows, top_k=9))
      np.testing.assert_array_equal(got, want, err_msg=str(kw))
      assert (got == 1).sum() > 20, kw  # the bar itself was drawn


def test_per_row_filters_mix_filtered_and_unfiltered_rows():
  x = _rows(2)
  rows = x.shape[0]
  keys = jax.random.split(jax.random.key(3), rows)
  top_p = np.where(np.arange(rows) % 2 == 0, 1.0, 0.3).astype(np.float32)
  top_k = np.where(np.arange(rows) % 3 == 0, 0, 20)
  got = np.asarray(jax_argreduce.categorical(keys, x, top_k=top_k, top_p=top_p))
  base = np.asarray(jax_argreduce.categorical(keys, x))
  for r in range(rows):
    kept = reference.filtered_kept(x[r], 1.0, k=int(top_k[r]), p=float(top_p[r]))
    assert kept[got[r]], r
    if top_k[r] == 0 and top_p[r] == 1.0:
      assert got[r] == base[r], r


def test_a_rows_sample_does_not_depend_on_its_batch():
  x = _rows(4)
  keys = jax.random.split(jax.random.key(4), x.shape[0])
  kw = dict(top_k=30, top_p=0.7, temperature=0.9)
  whole = np.asarray(jax_argreduce.categorical(keys, x, **kw))
  for r in (0, 5, 11):
    alone = np.asarray(jax_argreduce.categorical(keys[r], x[r], **kw))
    assert alone == whole[r]
  looped = [int(jax_argreduce.categorical(k, v, **kw)) for k, v in zip(keys, x)]
  mapped = jax.vmap(lambda k, v: jax_argreduce.categorical(k, v, **kw))(keys, x)
  np.testing.assert_array_equal(np.asarray(mapped), looped)


def test_top_p_boundary_is_exact():
  # Four equal tokens: masses 1, 1, 1, 1 (of 4). p = 0.5: the third has 2 before it, not
  # below 2: exactly two kept. p = 0.5 + 2^-24 (float32): the third is kept too.
  x = np.tile(np.array([0.0, 0.0, 0.0, 0.0, -30.0], np.float32), (4000, 1))
  got = np.asarray(jax_argreduce.categorical(jax.random.key(0), x, top_p=0.5))
  assert set(np.unique(got)) == {0, 1}
  got = np.asarray(jax_argreduce.categorical(jax.random.key(0), x,
                                             top_p=np.float32(0.5) + np.float32(2 ** -24)))
  assert set(np.unique(got)) == {0, 1, 2}


def test_zero_temperature_and_top_1_are_argmax():
  x = _rows(5)
  keys = jax.random.split(jax.random.key(6), x.shape[0])
  want = reference.argmax(x, axis=-1)
  got = np.asarray(jax_argreduce.categorical(keys, x, temperature=0.0, top_p=0.5))
  np.testing.assert_array_equal(got, want)
  got = np.asarray(jax_argreduce.categorical(keys, x, top_k=1))
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_other_dtypes(dtype):
  x = _rows(6, rows=8, cols=300).astype(np.float64).astype(reference.np_dtype(dtype))
  keys = jax.random.split(jax.random.key(8), x.shape[0])
  with jax.enable_x64(dtype == "float64"):
    got = np.asarray(jax_argreduce.categorical(keys, jnp.asarray(x), top_k=20, top_p=0.8))
  for r in range(x.shape[0]):
    assert reference.filtered_kept(x[r], 1.0, k=20, p=0.8)[got[r]], r


@pytest.mark.parametrize("kw,error,match", [
    (dict(top_p=0.0), ValueError, "top_p"), (dict(top_p=1.5), ValueError, "top_p"),
    (dict(top_p=float("nan")), ValueError, "top_p"), (dict(min_p=-0.1), ValueError, "min_p"),
    (dict(min_p=1.01), ValueError, "min_p"), (dict(top_k=-1), ValueError, "top_k"),
    (dict(top_k=2.5), TypeError, "top_k"), (dict(top_k=True), TypeError, "top_k"),
    (dict(top_p="a"), TypeError, "top_p"), (dict(top_p=np.ones(3) * 0.5), ValueError, "top_p"),
], ids=str)
def test_checks_name_the_parameter(kw, error, match):
  with pytest.raises(error, match=match):
    jax_argreduce.categorical(jax.random.key(0), jnp.zeros((4, 10)), **kw)


def test_traced_filters_are_not_checked_and_keep_the_top_token():
  x = _rows(7, rows=8, cols=50)
  f = jax.jit(lambda p, m: jax_argreduce.categorical(jax.random.key(0), x, top_p=p, min_p=m))
  want = reference.argmax(x, axis=-1)
  np.testing.assert_array_equal(np.asarray(f(np.float32(0.0), np.float32(0.0))), want)
  np.testing.assert_array_equal(np.asarray(f(np.float32(1.0), np.float32(2.0))), want)


def test_axis_name_with_filters_is_not_supported_yet():
  with pytest.raises(NotImplementedError, match="axis_name"):
    jax_argreduce.categorical(jax.random.key(0), jnp.zeros((2, 8)), top_k=2, axis_name="x")


def test_top_k_bound():
  x = _rows(9, rows=8, cols=300)
  keys = jax.random.split(jax.random.key(9), x.shape[0])
  k = np.array([3, 5, 1, 8, 2, 7, 4, 6])
  want = np.asarray(jax_argreduce.categorical(keys, x, top_k=k, top_p=0.9))
  # A traced per-row top_k with a static bound: the same samples (the bound selects more
  # candidates than a row keeps; the values are clipped to [1, bound]).
  f = jax.jit(lambda kk: jax_argreduce.categorical(keys, x, top_k=kk, top_p=0.9, top_k_bound=8))
  np.testing.assert_array_equal(np.asarray(f(k)), want)
  assert "k_bound=8" in str(jax.make_jaxpr(f)(k))
  # Traced values outside [1, bound] are clipped: 0 ("all") becomes 1 (the argmax of z).
  got = np.asarray(f(np.zeros(8, np.int32)))
  np.testing.assert_array_equal(got, np.asarray(jax_argreduce.categorical(keys, x, top_k=1)))
  # Concrete values: bounded by their maximum rounded up to a power of two.
  lowered = jax.jit(lambda: jax_argreduce.categorical(keys, x, top_k=k)).lower().as_text()
  assert "k_bound = 8" in lowered
  with pytest.raises(ValueError, match="top_k_bound"):
    jax_argreduce.categorical(keys, x, top_k=k, top_k_bound=4)
  with pytest.raises(ValueError, match="top_k_bound"):
    jax_argreduce.categorical(keys, x, top_p=0.5, top_k_bound=4)
  with pytest.raises(ValueError, match="top_k_bound"):
    jax_argreduce.categorical(keys, x, top_k=3, top_k_bound=0)
  # A concrete 0 ("keep all") under a bound would be clipped to greedy.
  with pytest.raises(ValueError, match="keeps all"):
    jax_argreduce.categorical(keys, x, top_k=np.where(k == 5, 0, k), top_k_bound=8)


def test_no_top_k_promise():
  """k_bound -1 (no row has a top-k: top_k None or concrete zeros) reaches the primitive, so
  the CUDA handler may spread each row over many blocks; a traced top_k promises nothing."""
  x = _rows(12, rows=8, cols=100)
  key = jax.random.key(12)
  jaxpr = lambda **kw: str(jax.make_jaxpr(lambda v: jax_argreduce.categorical(key, v, **kw))(x))
  assert "k_bound=-1" in jaxpr(top_p=0.9) and "k_bound=-1" in jaxpr(min_p=0.1)
  assert "k_bound=-1" in jaxpr(top_k=np.zeros(8, np.int32), top_p=0.5)
  assert "k_bound=-1" not in jaxpr(top_k=np.array([0, 1, 0, 0, 0, 0, 0, 0]), top_p=0.5)
  # Values of at least the width keep every token too.
  assert "k_bound=-1" in jaxpr(top_k=np.array([0, 100, 0, 500, 0, 0, 0, 0]), top_p=0.5)
  assert "k_bound=-1" not in jaxpr(top_k=np.array([0, 99, 0, 500, 0, 0, 0, 0]), top_p=0.5)
  traced = jax.make_jaxpr(lambda v, k: jax_argreduce.categorical(key, v, top_k=k, top_p=0.5))
  assert "k_bound=0" in str(traced(x, np.zeros(8, np.int32)))
  # Without top_p the handler is told so (the CUDA spread path then skips top-p's levels).
  lowered = lambda **kw: jax.jit(lambda v: jax_argreduce.categorical(key, v, **kw)).lower(
      x).as_text()
  assert "has_top_p = false" in lowered(min_p=0.1)
  assert "has_top_p = true" in lowered(top_p=0.9, min_p=0.1)
  # The samples are those of a call that states every row's top_k as "all" explicitly.
  explicit = jax.jit(lambda v, k: jax_argreduce.categorical(key, v, top_k=k, top_p=0.7,
                                                            min_p=0.01))
  np.testing.assert_array_equal(
      np.asarray(jax_argreduce.categorical(key, x, top_p=0.7, min_p=0.01)),
      np.asarray(explicit(x, np.zeros(8, np.int32))))


def test_spread_workspace_sizes():
  """The CUDA spread path's workspace (k_bound -1; launch_plan.h PlanFilterSpread), a pure
  function of the shape: per row two pair arrays of its chunks, a 64-byte state, three
  histograms of 2048 uint64 masses and 1024 uint32 counts per chunk, + 16 for alignment;
  float64, more than 512 rows or a top-k promise take other paths (the split path's bound)."""
  align = lambda n: (n + 15) // 16 * 16
  def want(rows, cols):
    chunks = max(1, min(-(-264 // rows), max(1, cols // 1024)))
    chunk = -(-cols // chunks)
    chunks = -(-cols // chunk)
    pairs = rows * chunks * 8
    return 2 * align(pairs) + rows * 64 + rows * 3 * 2048 * 8 + rows * chunks * 1024 * 4 + 16
  size = lambda rows, cols, k=-1, itemsize=4: _ffi.cuda_workspace_bytes(
      "filtered_categorical", rows, cols, k, itemsize)
  for rows, cols in [(1, 202048), (8, 202048), (64, 128256), (256, 202048), (512, 5), (3, 7)]:
    assert size(rows, cols) == size(rows, cols, itemsize=2) == want(rows, cols), (rows, cols)
  assert want(1, 202048) - 16 > 197 * 4096  # one row: 197 chunks of 1026 columns
  base = _ffi.CUDA_WORKSPACE_BYTES
  assert size(513, 1000) == base and size(8, 1000, itemsize=8) == base and size(8, 1000, 0) == base


def test_top_k_past_int64_keeps_every_token():
  x = _rows(10, rows=8, cols=50)
  keys = jax.random.split(jax.random.key(10), 8)
  base = np.asarray(jax_argreduce.categorical(keys, x))
  np.testing.assert_array_equal(np.asarray(jax_argreduce.categorical(keys, x, top_k=2 ** 64)),
                                base)
  with pytest.raises(ValueError, match="top_k"):
    jax_argreduce.categorical(keys, x, top_k=-2 ** 70)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.int64])
def test_top_k_of_any_numpy_integer_dtype(dtype):
  # 8/16-bit numpy values were refused by the clip to int32's range (np.minimum with INT32_MAX).
  x = _rows(12, rows=8, cols=50)
  keys = jax.random.split(jax.random.key(12), 8)
  want = np.asarray(jax_argreduce.categorical(keys, x, top_k=3))
  for top_k in (dtype(3), np.full((8,), 3, dtype)):
    np.testing.assert_array_equal(
        np.asarray(jax_argreduce.categorical(keys, x, top_k=top_k)), want)


def test_top_k_bound_under_vmap_and_per_row_keys():
  x = _rows(11, rows=8, cols=200)
  keys = jax.random.split(jax.random.key(11), 8)
  k = np.array([4, 1, 9, 16, 2, 7, 3, 5])
  want = np.asarray(jax_argreduce.categorical(keys, x, top_k=k, min_p=0.1))
  f = lambda kk, v, kv: jax_argreduce.categorical(kk, v, top_k=kv, min_p=0.1, top_k_bound=16)
  got = jax.jit(jax.vmap(f))(keys, x, k)
  np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("shards,k_bound", [(2, 8), (4, 50), (5, 16)])
def test_staged_candidates_equal_the_unsplit_sample(shards, k_bound):
  """The candidate exchange's stages composed on one device (_common.staged_candidates_sample)
  give the unsplit call's samples bit for bit: per-row top_k in [1, k_bound], top_p, min_p and
  temperatures (zeros included), ties straddling the blocks, NaN and -inf rows. (The meshes
  of test_sharding.py run the same stages with the real exchange.)"""
  rows, cols = 24, 1000
  x = _rows(13, rows=rows, cols=cols)
  x[8, :] = np.round(x[8] / 4)                            # wide ties across every block
  x[9, [10, 260, 510, 760]] = 9.0                         # equal tops, one per block
  rng = np.random.default_rng(13)
  kw = dict(top_k=rng.integers(1, k_bound + 1, rows), top_p=rng.uniform(0.2, 1.0, rows),
            min_p=np.where(np.arange(rows) % 3 == 0, 0.05, 0.0),
            temperature=np.where(np.arange(rows) % 5 == 0, 0.0, 0.8).astype(np.float32))
  cpu = jax.devices("cpu")[0]
  for seed in range(3):
    keys = jax.random.split(jax.random.key(seed), rows)
    want = np.asarray(jax_argreduce.categorical(keys, x, **kw))
    got = staged_candidates_sample(cpu, keys, x, shards, k_bound, **kw)
    np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}")


@pytest.mark.parametrize("shards", [2, 5])
@pytest.mark.parametrize("top_p", [True, False], ids=["top_p", "min_p"])
def test_staged_prefix_equals_the_unsplit_sample(shards, top_p):
  """The mass exchange's stages composed on one device (_common.staged_prefix_sample: the
  blocks' tops, top-p's levels summed, the draws, the pairs) give the unsplit call's samples
  bit for bit: per-row top_p (crossings in tie groups straddling the blocks), min_p and
  temperatures (zeros included), NaN and -inf rows; without top_p, no levels. (The meshes of
  test_sharding.py run the same stages with the real exchange.)"""
  rows, cols = 24, 1000
  x = _rows(17, rows=rows, cols=cols)
  x[8, :] = np.round(x[8] / 4)                            # wide ties across every block
  x[9, [10, 260, 510, 760]] = 9.0                         # equal tops, one per block
  x[10, :] = 1.0                                          # one value: the top's ties
  rng = np.random.default_rng(17)
  kw = dict(min_p=np.where(np.arange(rows) % 3 == 0, 0.05, 0.0),
            temperature=np.where(np.arange(rows) % 5 == 0, 0.0, 0.8).astype(np.float32))
  if top_p:
    kw["top_p"] = np.where(np.arange(rows) % 7 == 0, 1.0, rng.uniform(0.05, 1.0, rows))
  cpu = jax.devices("cpu")[0]
  for seed in range(3):
    keys = jax.random.split(jax.random.key(seed), rows)
    want = np.asarray(jax_argreduce.categorical(keys, x, **kw))
    got = staged_prefix_sample(cpu, keys, x, shards, **kw)
    np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_wide_16_bit_top_p_equals_the_per_token_masses(dtype):
  """16-bit rows of at least 8192 columns sum top-p's masses per logit value (the CPU
  handler's TopPBar: a count per value, one exp each); the mass exchange's stages
  (staged_prefix_sample: per-token masses in every shard's levels) must give the same
  samples bit for bit, including ties, NaN, +-inf and a row of one value; and the exact
  boundary of test_top_p_boundary_is_exact holds on wide rows (a miscounted value moves it)."""
  wide = np.full((1000, 8192), -30.0, reference.np_dtype(dtype))
  wide[:, :4] = 0.0                            # masses 1, 1, 1, 1; the rest 0
  keys = jax.random.split(jax.random.key(5), wide.shape[0])
  for p, kept in [(np.float32(0.5), {0, 1}), (np.float32(0.5) + np.float32(2 ** -24), {0, 1, 2})]:
    got = np.asarray(jax_argreduce.categorical(keys, jnp.asarray(wide), top_p=p))
    assert set(np.unique(got)) == kept, (p, np.unique(got))
  rows, cols = 10, 16384
  x = _rows(23, rows=rows, cols=cols).astype(reference.np_dtype(dtype))
  x[8] = np.round(x[8].astype(np.float32) / 4).astype(x.dtype)   # few values, many ties each
  rng = np.random.default_rng(23)
  kw = dict(top_p=rng.uniform(0.05, 0.99, rows),
            min_p=np.where(np.arange(rows) % 3 == 0, 0.05, 0.0),
            temperature=np.where(np.arange(rows) % 4 == 0, 1.0, 0.7).astype(np.float32))
  cpu = jax.devices("cpu")[0]
  for seed in range(2):
    keys = jax.random.split(jax.random.key(seed), rows)
    want = np.asarray(jax_argreduce.categorical(keys, jnp.asarray(x), **kw))
    got = staged_prefix_sample(cpu, keys, jnp.asarray(x), 2, **kw)
    np.testing.assert_array_equal(want, got, err_msg=f"{dtype} seed {seed}")
    if seed == 0:  # and inside the numpy reference's kept sets (slow at this width: once)
      for r in range(rows):
        assert reference.filtered_kept(x[r], float(kw["temperature"][r]),
                                       p=float(kw["top_p"][r]),
                                       min_p=float(kw["min_p"][r]))[want[r]], r
