"""CPU smoke test of examples/sample.py: the decoder runs, its pickers agree, output is right."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_argreduce

_PATH = pathlib.Path(__file__).resolve().parents[1] / "examples" / "sample.py"

# Small enough that every run compiles and decodes in about a second on a 2-core CPU.
SMALL = ["--vocab", "1000", "--dim", "32", "--heads", "2", "--layers", "2", "--batch", "3",
         "--prompt-len", "4", "--steps", "5"]


@pytest.fixture(scope="module")
def sample():
  # examples/ is not a package: load the script by path (registered in sys.modules first, so
  # its dataclasses resolve their module).
  name = "jax_argreduce_example_sample"
  spec = importlib.util.spec_from_file_location(name, _PATH)
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  try:
    spec.loader.exec_module(module)
    yield module
  finally:
    sys.modules.pop(name, None)


def _small_config(sample, dtype="float32"):
  return sample.ModelConfig(vocab=1000, dim=32, layers=2, heads=2, dtype=dtype)


def test_greedy_compare_cli(sample, capsys):
  assert sample.main(SMALL + ["--mode", "greedy", "--compare"]) == 0
  out = capsys.readouterr().out
  assert "greedy tokens identical to jnp.argmax: yes (15 tokens)" in out
  assert re.search(r"^jax_argreduce\.argmax: [\d,]+ tokens/s, [\d.]+ ms/step", out, re.M)
  assert re.search(r"^jnp\.argmax: [\d,]+ tokens/s, [\d.]+ ms/step", out, re.M)
  assert len(re.findall(r"^  seq \d+: \d+( \d+)*$", out, re.M)) == 3


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_greedy_tokens_equal_jnp_argmax(sample, dtype):
  cfg = _small_config(sample, dtype)
  params = sample.init_params(cfg, seed=1)
  runs = [sample.generate(cfg, batch=3, prompt_len=4, steps=6, seed=1, params=params,
                          argmax_fn=fn) for fn in (jax_argreduce.argmax, jnp.argmax)]
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

  np.save(tmp_path / "one.npy", logits[0])
  assert sample.main(["--logits", str(tmp_path / "one.npy")]) == 0
  rows = _rows(capsys.readouterr().out, 3)
  assert [(int(r[0]), int(r[1])) for r in rows] == [(0, int(want[0]))]
