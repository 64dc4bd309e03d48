"""benchmarks/results.py, the page written from the benchmark summaries (no GPU): a mode's cases
come from every summary that holds some, each summary named with its commit."""

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _results_module():
  spec = importlib.util.spec_from_file_location("results_page", ROOT / "benchmarks/results.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # its dataclasses look their module up
  spec.loader.exec_module(module)
  return module


def _summary(module, path, commit, cases):
  data = {"env": {"gpu_name": "GPU", "jax": "0.11.2", "jax_argreduce": "0.2.0",
                  "date": "2026-12-07", "commit": commit},
          "timing_source": {"chain": "GPU trace"}, "cases": cases}
  path.write_text(json.dumps(data))
  return module.Summary(path, data)


def _case(ours, ref):
  return {"ref": "jax_samplers.sample", "jax_samplers.sample": ref, "ours": ours,
          "ours:categorical": 1.0, "jax.random.categorical": 2.0}


def test_a_mode_takes_cases_from_every_summary(tmp_path):
  module = _results_module()
  section = next(s for s in module.SECTIONS if s.key == "filtered")
  older = _summary(module, tmp_path / "results_summary_a.json", "aaaaaaa", {
      "chain categorical@k50p0.9 float32 8x202048": _case(95.0, 514.0),
      "chain categorical@p0.9 float32 8x202048": _case(1588.0, 580.0)})
  newer = _summary(module, tmp_path / "results_summary_b.json", "bbbbbbb", {
      "chain categorical@p0.9 float32 8x202048": _case(154.0, 579.0),
      "chain categorical@minp0.05 float32 8x202048": _case(98.0, 100.0)})
  text = "\n".join(module.section_text(section, [newer, older], []))
  # Each case once, from the first summary holding it; both summaries named.
  assert "+1008.00" not in text and "-425.00" in text, text  # p0.9 from `newer`
  assert "-419.00" in text and "-2.00" in text, text
  assert "`bbbbbbb`" in text and "`aaaaaaa`" in text, text
