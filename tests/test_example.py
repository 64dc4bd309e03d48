"""CPU smoke test of examples/sample.py: the decoder runs, its pickers agree, output is right."""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_argreduce
from _common import example_module

# Small enough that every run compiles and decodes in about a second on a 2-core CPU.
SMALL = ["--vocab", "1000", "--dim", "32", "--heads", "2", "--layers", "2", "--batch", "3",
         "--prompt-len", "4", "--steps", "5"]


@pytest.fixture(scope="module")
def sample():
  with example_module("sample") as module:
    yield module


def _small_config(sample, dtype="float32"):
  return sample.ModelConfig(vocab=1000, dim=32, layers=2, heads=2, dtype=dtype)


def test_greedy_compare_cli(sample, capsys):
  assert sample.main(SMALL + ["--mode", "greedy", "--compare"]) == 0
  out = capsys.readouterr().out
  assert "greedy tokens identical to jnp.argmax: yes (15 tokens)" in out
  for name in (r"jax_argreduce\.argmax", r"jnp\.argmax"):
    m = re.search(rf"^{name}: ([\d,]+) tokens/s, ([\d.]+) ms/step \(wall, median", out, re.M)
    assert m, out
    # Issue 13: tokens/s and ms/step both from the median step (batch 3).
    tokens_per_s, ms = float(m.group(1).replace(",", "")), float(m.group(2))
    assert tokens_per_s == pytest.approx(3e3 / ms, rel=0.01, abs=1)
  assert len(re.findall(r"^  seq \d+: \d+( \d+)*$", out, re.M)) == 3
  # The device time per step from a short profiler trace (CPU executor events off-GPU).
  m = re.search(r"^device span per step \(profiler trace, median of 5 steps, (.*?)\): "
                r"jax_argreduce\.argmax ([\d.]+) µs, jnp\.argmax ([\d.]+) µs; "
                r"ours - reference ([-+][\d.]+) µs \(([\d.]+)x\)$", out, re.M)
  assert m, out
  assert float(m.group(2)) > 0 and float(m.group(3)) > 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_greedy_tokens_equal_jnp_argmax(sample, dtype):
  cfg = _small_config(sample, dtype)
  params = sample.init_params(cfg, seed=1)
  runs = [sample.generate(cfg, batch=3, prompt_len=4, steps=6, seed=1, params=params,
                          picker=p) for p in (sample.OURS, sample.REFERENCE)]
  ours, ref = (r.tokens for r in runs)
  assert ours.shape == (3, 6) and ours.dtype == np.int32
  assert ((0 <= ours) & (ours < cfg.vocab)).all()
  np.testing.assert_array_equal(ours, ref)


def test_sample_reproducible(sample, capsys):
  cfg = _small_config(sample)
  kw = dict(batch=3, prompt_len=4, steps=6, mode="sample", temperature=0.8)
  a = sample.generate(cfg, seed=5, **kw).tokens
  b = sample.generate(cfg, seed=5, **kw).tokens
  c = sample.generate(cfg, seed=6, **kw).tokens
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)
  assert sample.main(SMALL + ["--mode", "sample", "--temperature", "0.8", "--seed", "5"]) == 0
  out = capsys.readouterr().out
  assert "mode sample, temperature 0.8, seed 5" in out


def test_temperature_in_greedy_mode_is_refused(sample, capsys):
  """--temperature has no effect on argmax: refused in greedy mode rather than ignored."""
  assert sample.main(SMALL + ["--temperature", "0.5"]) == 2
  assert "--temperature applies to --mode sample only" in capsys.readouterr().err
  # --help gives one default, the one taken (1.0)
  help_text = " ".join(sample._parser().format_help().split())
  assert "--temperature TEMPERATURE --mode sample only (1.0 when omitted) --seed" in help_text
  assert "(default: None)" not in help_text  # --dtype, --logits: no default shown


def test_sample_compare_cli_checks_distribution(sample, capsys):
  assert sample.main(SMALL + ["--mode", "sample", "--temperature", "0.8", "--compare",
                              "--check-draws", "1024", "--trace-steps", "2"]) == 0
  out = capsys.readouterr().out
  m = re.search(r"^sampling check: 1024 draws per sampler .* chi-square fails above ([\d.]+) "
                r"\(df (\d+), p < 0.0001\)$", out, re.M)
  assert m, out
  assert float(m.group(1)) == pytest.approx(sample.chi2_threshold(int(m.group(2))), abs=0.05)
  for name in (sample.OURS.sample_name, "jax.random.categorical"):
    assert re.search(rf"^  {re.escape(name)}: chi2 [\d.]+, total variation [\d.]+: pass$",
                     out, re.M), out
  assert "identical to jnp.argmax" not in out  # sampled tokens are not compared by index
  assert re.search(r"^device span per step \(profiler trace, median of 2 steps", out, re.M)


def test_chi2_threshold_matches_table(sample):
  # chi-square quantiles 1 - 1e-4 (scipy.stats.chi2.ppf): df 15, 31, 63.
  for df, exact in [(15, 44.263), (31, 69.106), (63, 113.505)]:
    assert sample.chi2_threshold(df) == pytest.approx(exact, rel=0.01)


def test_equal_mass_bins(sample):
  rng = np.random.default_rng(0)
  for logits in (rng.standard_normal(5000), np.r_[5.0, rng.standard_normal(999)],
                 np.r_[np.full(3, 5.0), np.full(997, -np.inf)]):
    p = np.exp(logits - logits.max())
    p /= p.sum()
    bins, mass = sample.equal_mass_bins(p, 16, 1000)
    assert bins.shape == p.shape and mass.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(np.bincount(bins, weights=p), mass)
    assert (mass * 1000 >= 5).all() and len(mass) >= 2


def test_distribution_check_rejects_wrong_samplers(sample):
  row = np.asarray(jax.random.normal(jax.random.key(3), (500,))) * 2.0
  good = sample.sample_jax_random
  hot = lambda k, x, t: sample.sample_jax_random(k, x, 2.0 * t)   # wrong temperature
  flat = lambda k, x, t: jax.vmap(lambda kk: jax.random.randint(kk, (), 0, x.shape[-1]))(k)
  res = sample.distribution_check(row, 1.0, {"good": good, "hot": hot, "flat": flat},
                                  draws=2000, seed=0)["results"]
  assert res["good"]["ok"] and not res["hot"]["ok"] and not res["flat"]["ok"]
  assert res["good"]["tv"] < res["hot"]["tv"]


def test_fused_sampler_path(sample, monkeypatch):
  # The call the example makes once jax_argreduce.categorical exists: one call for the batch,
  # keys [batch], temperature as a keyword. Checked here with a stand-in when it does not.
  calls = []

  def categorical(key, logits, axis=-1, *, temperature=None):
    calls.append((key.shape, logits.shape, axis))
    return sample.sample_jax_random(key, logits, temperature)

  if not sample.HAS_FUSED_SAMPLER:
    monkeypatch.setattr(jax_argreduce, "categorical", categorical, raising=False)
  else:
    assert sample.OURS.sample is sample.sample_fused
  logits = jax.random.normal(jax.random.key(1), (4, 300))
  keys = sample.sequence_keys(0, 4)
  picker = dataclasses.replace(sample.OURS, tag="fused_test", sample=sample.sample_fused)
  tokens = np.asarray(sample.pick_tokens(logits, keys, jnp.int32(3), jnp.float32(0.7),
                                         mode="sample", picker=picker))
  assert tokens.shape == (4,) and ((0 <= tokens) & (tokens < 300)).all()
  if not sample.HAS_FUSED_SAMPLER:
    assert calls == [((4,), (4, 300), -1)]


def test_pick_tokens_cold_sampling_is_argmax(sample):
  logits = jax.random.normal(jax.random.key(0), (4, 777))
  keys = sample.sequence_keys(0, 4)
  want = np.argmax(np.asarray(logits), axis=-1)
  greedy = sample.pick_tokens(logits, keys, jnp.int32(0), jnp.float32(1), mode="greedy")
  cold = sample.pick_tokens(logits, keys, jnp.int32(0), jnp.float32(1e-6), mode="sample")
  np.testing.assert_array_equal(greedy, want)
  np.testing.assert_array_equal(cold, want)


def _rows(out: str, columns: int) -> list[list[str]]:
  return [line.split() for line in out.splitlines()
          if re.fullmatch(r"\s*\d+" + r"\s+\S+" * (columns - 1), line)]


def test_logits_file(sample, tmp_path, capsys):
  rng = np.random.default_rng(0)
  logits = rng.standard_normal((5, 300)).astype(np.float32)
  logits[1, [7, 9]] = 50.0      # tie: the lowest index wins
  logits[2, [4, 8]] = np.nan    # the first NaN wins, as in numpy
  path = tmp_path / "logits.npy"
  np.save(path, logits)

  assert sample.main(["--logits", str(path), "--compare"]) == 0
  out = capsys.readouterr().out
  rows = _rows(out, 5)  # row, argmax, logit, jnp.argmax, agree
  want = np.argmax(logits, axis=-1)
  assert [int(r[0]) for r in rows] == list(range(5))
  assert [int(r[1]) for r in rows] == want.tolist()
  for r, i in zip(rows, want):
    np.testing.assert_allclose(float(r[2]), logits[int(r[0]), i], rtol=1e-6)
  assert [int(r[3]) for r in rows] == want.tolist() and all(r[4] == "yes" for r in rows)
  assert "jnp.argmax agrees on 5/5 rows" in out

  assert sample.main(["--logits", str(path), "--mode", "sample", "--temperature", "0.5"]) == 0
  rows = _rows(capsys.readouterr().out, 4)  # row, argmax, logit, sampled
  assert [int(r[1]) for r in rows] == want.tolist()
  assert all(0 <= int(r[3]) < 300 for r in rows)
  assert int(rows[2][3]) == 4  # NaN + noise is NaN: the first NaN is still picked

  # Issue 13: past --show-rows rows (8), the rest is summarized in one line.
  many = rng.standard_normal((20, 50)).astype(np.float32)
  np.save(tmp_path / "many.npy", many)
  assert sample.main(["--logits", str(tmp_path / "many.npy")]) == 0
  out = capsys.readouterr().out
  rows = _rows(out, 3)
  assert [int(r[0]) for r in rows] == list(range(8))
  assert [int(r[1]) for r in rows] == np.argmax(many[:8], axis=-1).tolist()
  assert "... 12 more rows" in out
  assert "jax_argreduce.argmax equals numpy.argmax on all 20 rows" in out

  np.save(tmp_path / "one.npy", logits[0])
  assert sample.main(["--logits", str(tmp_path / "one.npy")]) == 0
  rows = _rows(capsys.readouterr().out, 3)
  assert [(int(r[0]), int(r[1])) for r in rows] == [(0, int(want[0]))]


# Filters (SPEC §1f): --top-k / --top-p / --min-p, one value or one per sequence.

def test_filtered_sample_compare_cli(sample, capsys):
  assert sample.main(SMALL + ["--mode", "sample", "--temperature", "0.8", "--top-k", "50",
                              "--top-p", "0.9", "--compare", "--check-draws", "1024",
                              "--trace-steps", "2"]) == 0
  out = capsys.readouterr().out
  assert "mode sample, temperature 0.8, top_k=50, top_p=0.9, seed 0" in out
  m = re.search(r"^sampling check: 1024 draws per sampler .* vs softmax\(logits / 0.8\) over "
                r"the JAX sampler's kept set \((\d+) tokens; sequence 0's top_k=50, top_p=0.9\)",
                out, re.M)
  assert m and 1 <= int(m.group(1)) <= 50, out
  for name in ("jax_argreduce.categorical(top_k=50, top_p=0.9)",
               "JAX sort-based sampler (top_k=50, top_p=0.9)"):
    assert re.search(rf"^  {re.escape(name)}: chi2 [\d.]+, total variation [\d.]+: pass$",
                     out, re.M), out
  assert re.search(r"^  ours vs the JAX sampler: two-sample chi2 [\d.]+ \(df \d+, fails above "
                   r"[\d.]+\), total variation [\d.]+: pass$", out, re.M), out
  assert re.search(r"^device span per step \(profiler trace, median of 2 steps", out, re.M)


def test_per_sequence_filters(sample, capsys):
  filters = (("top_k", (0, 20, 5)), ("top_p", (0.9, 0.5, 1.0)), ("min_p", 0.05))
  logits = jax.random.normal(jax.random.key(2), (3, 300)) * 2.0
  keys = sample.sequence_keys(0, 3)
  pickers = sample.pickers_for(filters)
  assert pickers["ours"].sample is sample.sample_fused
  for picker in pickers.values():
    kept = np.asarray(sample.jax_samplers.kept(logits, 0.8, **picker.sample_kwargs()))
    assert kept[1].sum() <= 20 and kept[2].sum() <= 5
    step = jax.jit(lambda pos, picker=picker: sample.pick_tokens(
        logits, keys, pos, jnp.float32(0.8), mode="sample", picker=picker))
    drawn = np.stack([np.asarray(step(jnp.int32(i))) for i in range(20)])
    assert all(kept[r, drawn[:, r]].all() for r in range(3)), (picker.sample_name, drawn)
  assert sample.main(SMALL + ["--mode", "sample", "--top-k", "0,20,5", "--top-p", "0.9,0.5,1",
                              "--min-p", "0.05"]) == 0
  out = capsys.readouterr().out
  assert "mode sample, temperature 1, top_k=0,20,5, top_p=0.9,0.5,1, min_p=0.05" in out
  assert len(re.findall(r"^  seq \d+: \d+( \d+)*$", out, re.M)) == 3


@pytest.mark.parametrize("flags,error", [
    (["--top-k", "5"], "apply to --mode sample only"),
    (["--mode", "sample", "--top-p", "0.9,0.5"], "--top-p has 2 values: give one, or one per "
                                                 "sequence (--batch) (3)"),
    (["--mode", "sample", "--top-p", "0"], "--top-p '0': every value must be in (0, 1]"),
    (["--mode", "sample", "--min-p", "1.5"], "--min-p '1.5': every value must be in [0, 1]"),
    (["--mode", "sample", "--top-k", "2.5"], "--top-k '2.5': expected int values"),
])
def test_filter_flags_refused(sample, capsys, flags, error):
  assert sample.main(SMALL + flags) == 2
  assert error in capsys.readouterr().err


def test_two_sample_check_rejects_other_filters(sample):
  # Draws of top_k=10 against draws of top_k=20 from the same row: the bins of the kept set of
  # the first tell them apart; two samplers of the same filters pass.
  row = np.asarray(jax.random.normal(jax.random.key(4), (400,))) * 2.0
  kept = np.asarray(sample.jax_samplers.kept(jnp.asarray(row), 1.0, top_k=10))
  ref = lambda k: (lambda keys, x, t: sample.jax_samplers.sample_rows(keys, x, t, top_k=k))
  fused = lambda keys, x, t: sample.sample_fused(keys, x, t, top_k=10)
  res = sample.distribution_check(row, 1.0, {"ref": ref(10), "ours": fused, "wide": ref(20)},
                                  draws=2000, seed=0, kept=kept)["results"]
  assert res["ref"]["ok"] and res["ours"]["ok"] and not res["wide"]["ok"]
  assert res["ref"]["outside"] == res["ours"]["outside"] == 0 < res["wide"]["outside"]
  assert sample.two_sample_check(res["ours"]["counts"], res["ref"]["counts"])["ok"]
  assert not sample.two_sample_check(res["wide"]["counts"], res["ref"]["counts"])["ok"]
