"""examples/jax_samplers.py, the JAX filtered samplers the benchmark and the example compare
against: on easy rows (distinct logits, thresholds well inside the gaps between consecutive
masses, so float32 arithmetic cannot move a boundary) they keep what SPEC §1f keeps
(reference.filtered_kept) and draw from its renormalized distribution."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reference
from _common import example_module
from stats import P_MIN, chi_square_gof, report

T = 0.8


@pytest.fixture(scope="module")
def js():
  with example_module("jax_samplers") as module:
    yield module


def _distinct_row(seed: int, vocab: int, dtype) -> np.ndarray:
  rng = np.random.default_rng(seed)
  row = np.unique((2.0 * rng.standard_normal(vocab)).astype(dtype))
  rng.shuffle(row)
  return row


def _masses(row, k=None):
  """Per token in SPEC order within the top-k: (mass before it, mass relative to the top),
  float64, from reference.scaled_logits' z."""
  z = reference.scaled_logits(row, T).astype(np.float64)
  order = reference.sampler_order(z)[:k or None]
  e = np.exp(z[order] - z[order[0]])
  return (np.cumsum(e) - e) / e.sum(), e


def _between(values, count: int) -> float:
  """A threshold halfway between values[count - 1] and values[count]."""
  return float((values[count - 1] + values[count]) / 2)


def _easy_filters(row, k, p_count, minp_count) -> dict:
  """Filters whose boundaries fall halfway between consecutive masses: top_p keeps the first
  ``p_count`` of the top-k, min_p the first ``minp_count`` (None: that filter off)."""
  before, rel = _masses(row, k)
  out = {"top_k": k}
  if p_count is not None:
    out["top_p"] = _between(before, p_count)
  if minp_count is not None:
    out["min_p"] = _between(rel, minp_count)
  return out


CASES = [  # (top_k, tokens top_p keeps, tokens min_p keeps)
    (7, None, None), (50, None, None), (None, 12, None), (None, None, 9), (50, 20, None),
    (50, 30, 10), (None, 5, 25), (3, 2, None)]


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_kept_sets_equal_spec(js, case, dtype):
  for seed in range(3):
    row = _distinct_row(seed, 2000 if dtype == np.float32 else 200, dtype)
    kw = _easy_filters(row, *case)
    got = np.asarray(js.kept(jnp.asarray(row), T, **kw))
    want = reference.filtered_kept(row, T, k=kw["top_k"], p=kw.get("top_p"),
                                   min_p=kw.get("min_p"))
    np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}, {kw}")


def test_per_row_filters_equal_spec(js):
  # One value per row, as the example passes them: lax.top_k's static k is their largest, or
  # the whole row where a row keeps all (k = 0).
  rows = np.stack([_distinct_row(s, 3000, np.float32)[:1500] for s in range(4)])
  cases = [(5, None, None), (0, 10, None), (40, None, 6), (None, 3, 2)]
  kws = [_easy_filters(r, *c) for r, c in zip(rows, cases)]
  top_k = np.array([kw["top_k"] or 0 for kw in kws])
  top_p = np.array([kw.get("top_p", 1.0) for kw in kws], np.float32)
  min_p = np.array([kw.get("min_p", 0.0) for kw in kws], np.float32)
  assert js.lax_top_k_bound(top_k, rows.shape[1]) == rows.shape[1]
  assert js.lax_top_k_bound(top_k[top_k > 0], rows.shape[1]) == 40
  got = np.asarray(js.kept(jnp.asarray(rows), T, top_k=top_k, top_p=top_p, min_p=min_p))
  for r, kw in enumerate(kws):
    want = reference.filtered_kept(rows[r], T, k=kw["top_k"], p=kw.get("top_p"),
                                   min_p=kw.get("min_p"))
    np.testing.assert_array_equal(got[r], want, err_msg=f"row {r}, {kw}")
  keys = jax.random.split(jax.random.key(0), len(rows))
  drawn = np.asarray(js.sample_rows(keys, jnp.asarray(rows), T, top_k=top_k, top_p=top_p,
                                    min_p=min_p))
  assert all(got[r, t] for r, t in enumerate(drawn)), drawn


@pytest.mark.parametrize("case", [(10, None, None), (None, 6, None), (None, None, 5),
                                  (12, 8, None)], ids=str)
def test_draws_follow_the_filtered_distribution(js, case):
  row = _distinct_row(5, 300, np.float32) / 2
  kw = _easy_filters(row, *case)
  n = 20000
  x = jnp.broadcast_to(jnp.asarray(row), (n, row.size))
  got = np.asarray(jax.jit(lambda key, x: js.sample(key, x, T, **kw))(jax.random.key(1), x))
  probs = reference.filtered_probs(row, T, k=kw["top_k"], p=kw.get("top_p"),
                                   min_p=kw.get("min_p"))
  stat, df, p = chi_square_gof(got, probs)
  report(f"jax_samplers {kw}", draws=n, chi2=stat, df=df, p=p)
  assert p >= P_MIN, (kw, stat, df, p)
