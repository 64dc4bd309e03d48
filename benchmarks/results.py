"""RESULTS.md and its plots, written from the committed benchmark summaries.

    python benchmarks/results.py            # writes benchmarks/RESULTS.md, results_<op>.png and
                                            # the README's in-chain table
    python benchmarks/results.py --check    # exit 1 where those differ from what it writes

Every figure in RESULTS.md is a median that a ``bench.py --summary`` run wrote: the committed
``benchmarks/results_summary.json`` and any ``benchmarks/results_summary_<name>.json`` beside it
(a run of another kind, e.g. ``bench.py sharded`` on several GPUs). Nothing is typed in here:
a section whose cases no summary holds says so and points to the newest log entry of that kind
(BENCHMARKS.md), so the page cannot drift from the runs. Δ and speed-ups are computed from the
summary's medians.

A section is one entry of ``SECTIONS``: the op names of the summaries' case keys (``"<mode>
<op> <dtype> <rows>x<cols>[ <layout>]"``, as bench.py writes them) and a line on what it is.
A new op measured by bench.py is one more entry. The plots need matplotlib (not a dependency
of the package; ``--check`` does not).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "RESULTS.md"
LOG = HERE / "BENCHMARKS.md"
README = HERE.parent / "README.md"
# The README's performance summary is written between these lines (the rest of it is prose).
README_BEGIN = "<!-- in-chain table: written by benchmarks/results.py -->"
README_END = "<!-- end of the in-chain table -->"
# Its one table: the in-chain Δ of these ops side by side.
README_OPS = ("argmax", "categorical")
DTYPES = ("float32", "bfloat16", "float16", "float64")


@dataclasses.dataclass(frozen=True)
class Section:
  key: str                    # anchor and plot name (results_<key>.png)
  title: str
  about: str                  # what is measured against what, one line
  ops: tuple                  # op names in the summaries' case keys
  modes: tuple = ("chain", "isolated")
  example: str | None = None  # the example's mode (greedy / sample) whose step belongs here
  platform: str = "gpu"       # summaries whose timing source is a GPU trace, or the others
  log_words: tuple = ()       # a log heading naming one of these is this section's last record
  plot: bool = False          # the in-chain Δ per shape as a picture


SECTIONS = (
    Section("argmax", "argmax / argmin",
            "`jax_argreduce.argmax` / `argmin` against `jnp.argmax` / `jnp.argmin` on the same "
            "inputs (random normal logits).",
            ("argmax", "argmin"), example="greedy", plot=True),
    Section("with_index", "max_with_index / min_with_index",
            "`jax_argreduce.max_with_index` against `jnp.max` + `jnp.argmax` in one jit (what "
            "users write; XLA may fuse the two reductions).",
            ("max_with_index", "min_with_index")),
    Section("categorical", "categorical (fused Gumbel-max sampler)",
            "`jax_argreduce.categorical(key, logits, temperature=T)` against "
            "`jax.random.categorical(key, logits / T)` (threefry keys); `ours:argmax` is our "
            "argmax of the same logits, for scale.",
            ("categorical",), example="sample", plot=True),
    Section("top_k", "top_k",
            "`jax_argreduce.top_k(logits, k)` against `jax.lax.top_k(logits, k)` (XLA's TopK "
            "kernel for k <= 16, a sort of the row beyond) at k = 16, 50, 256, 1024; "
            "`ours:argmax` is our argmax of the same logits, the one-read floor. In-chain, the "
            "token is place `step % k` of the k indices.",
            ("top_k@16", "top_k@50", "top_k@256", "top_k@1024")),
    Section("filtered", "Filtered categorical (top-k, top-p, min-p)",
            "`jax_argreduce.categorical(key, logits, temperature=T, top_k=.., top_p=.., "
            "min_p=..)` (`@k50p0.9`: top_k 50, top_p 0.9) against the sampler JAX decoders "
            "write (examples/jax_samplers.py: `lax.top_k` + categorical over the k; sort, "
            "softmax, cumsum, mask; min-p mask); `ours:categorical` is our unfiltered sampler "
            "on the same logits (ours ÷ it: what the filters cost), `jax.random.categorical` "
            "unfiltered.",
            ("categorical@k50p0.9", "categorical@p0.9", "categorical@minp0.05")),
    Section("sharded", "Sharded inputs (argmax)",
            "A 1-D mesh over every GPU of one host, rows split or the vocabulary split, against "
            "`jnp.argmax` on the same sharded input; span = the largest per-device span.",
            ("argmax",), modes=("sharded",), log_words=("sharded",)),
    Section("cpu", "CPU",
            "The CPU handler against `jnp.argmax` (and `jax.random.categorical`) on XLA's CPU "
            "backend.",
            ("argmax", "argmin", "max_with_index", "categorical"), modes=("isolated",),
            platform="cpu", log_words=("cpu",)),
    Section("cpu_filtered", "CPU: filtered categorical",
            "The CPU handler's filtered sampler against the JAX sampler of "
            "examples/jax_samplers.py on XLA's CPU backend, as in the GPU section above; "
            "`ours:categorical` is our unfiltered sampler on the same logits.",
            ("categorical@k50p0.9", "categorical@p0.9", "categorical@minp0.05"),
            modes=("isolated",), platform="cpu", log_words=("cpu",)),
)

TABLE_TITLES = {
    "chain": "In-chain: device time per decode step",
    "isolated": "Isolated: span per call",
    "sharded": "Sharded: span per call",
}
METHODS = {
    "chain": "SPEC §3b's decode chain (an unrolled `lax.scan` of steps `logits = h @ W`, the "
             "pick, `h = 0.5*h + E[tok]`): program span per step from the JAX profiler's "
             "device trace, median over calls, ours and the reference in the same process on "
             "the same inputs. Δ = ours − reference per step: negative is faster.",
    "isolated": "SPEC §3: each pick jitted alone on [rows, cols] logits, span per call (first "
                "to last device event, launch gaps included) from the profiler trace, median "
                "over calls. speed-up = reference ÷ ours: above 1, ours is faster.",
    "sharded": "Span per call from the profiler trace, the largest per-device span, median "
               "over calls. speed-up = `jnp.argmax` ÷ ours: above 1, ours is faster.",
    "example": "`examples/sample.py`'s jitted decode step (the model, the pick, the donated KV "
               "cache): device span per step from the profiler trace, median over steps.",
}


# ---------------------------------------------------------------------------------------------
# Reading the summaries


@dataclasses.dataclass
class Summary:
  path: Path
  data: dict

  @property
  def name(self) -> str:
    return self.path.name

  @property
  def platform(self) -> str:
    sources = set(self.data.get("timing_source", {}).values())
    return "gpu" if sources and sources <= {"GPU trace"} else "cpu"

  def cases(self, mode: str, ops: tuple) -> list[dict]:
    """The summary's cases of ``mode`` and ``ops``, parsed from their keys."""
    out = []
    for key, values in self.data.get("cases", {}).items():
      parts = key.split()
      if len(parts) < 4 or parts[0] != mode or parts[1] not in ops:
        continue
      rows, cols = (int(v) for v in parts[3].split("x"))
      out.append({"mode": mode, "op": parts[1], "dtype": parts[2], "shape": parts[3],
                  "rows": rows, "cols": cols, "layout": parts[4] if len(parts) > 4 else None,
                  "values": values})
    return out

  def measured(self, where: str = "") -> str:
    """Machine, software, commit and date of the run, from the summary (and git); ``where``:
    the summary's folder as the reader's page names it."""
    env = self.data.get("env", {})
    machine = env.get("gpu_name") or env.get("device_kind") or "an unnamed device"
    if env.get("driver_version"):
      machine += f" (driver {env['driver_version']})"
    commit = env.get("commit")
    committed = committed_in(self.path)
    code = (f"commit `{commit}`" if commit else
            "a commit the summary does not record (" + (
                f"the summary was committed in `{committed}`)" if committed else
                "the summary is not committed yet)"))
    date = str(env.get("date", "an unrecorded date"))[:10]
    note = f" The build: {env['note']}." if env.get("note") else ""
    return (f"{machine}, jax {env.get('jax', '?')}, jax_argreduce "
            f"{env.get('jax_argreduce', '?')} at {code}, {date} (`{where}{self.name}`).{note}")


def committed_in(path: Path) -> str:
  """The short hash of the last commit that changed ``path`` ("" if none)."""
  try:
    out = subprocess.run(["git", "log", "-1", "--format=%h", "--", path.name], cwd=path.parent,
                         capture_output=True, text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    out = ""
  return out


def load_summaries() -> list[Summary]:
  paths = [HERE / "results_summary.json"] + sorted(HERE.glob("results_summary_*.json"))
  return [Summary(p, json.loads(p.read_text())) for p in paths if p.is_file()]


def log_entry(words: tuple) -> str | None:
  """A link to the newest BENCHMARKS.md entry whose heading names one of ``words`` (the log is
  newest first), or None."""
  if not words or not LOG.is_file():
    return None
  for line in LOG.read_text().splitlines():
    if line.startswith("## ") and any(w in line.lower() for w in words):
      title = line[3:].strip()
      return f"[{title.replace('`', '')}](BENCHMARKS.md#{anchor(title)})"
  return None


def anchor(title: str) -> str:
  """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
  return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


# ---------------------------------------------------------------------------------------------
# Tables


def _impls(values: dict) -> tuple[str, list[str]]:
  """(the reference's name, our impls in the summary's order) of one case."""
  ref = values["ref"]
  ours = [k for k in values if k not in ("ref", ref) and not k.endswith(" kernels")]
  return ref, ours


def _us(v) -> str:
  return "-" if v is None else f"{v:.2f}"


def _order(cases: list[dict]) -> list[tuple]:
  """(op, shape) in the order a reader scans: op as listed, then rows, then columns."""
  seen = {(c["op"], c["shape"], c["rows"], c["cols"]) for c in cases}
  return [(op, shape) for op, shape, _, _ in sorted(seen, key=lambda k: (k[0], k[2], k[3]))]


def _dtypes(cases: list[dict]) -> list[str]:
  present = {c["dtype"] for c in cases}
  return [d for d in DTYPES if d in present] + sorted(present - set(DTYPES))


def _by_key(cases: list[dict]) -> dict:
  return {(c["op"], c["shape"], c["dtype"], c["layout"]): c for c in cases}


def chain_table(cases: list[dict]) -> list[str]:
  dts, by = _dtypes(cases), _by_key(cases)
  ops = sorted({c["op"] for c in cases})
  ref = cases[0]["values"]["ref"]
  head = ["shape"] + [f"{d} Δ µs/step" for d in dts] + [f"{d} step, {ref} / ours µs" for d in dts]
  lines = _table_head(head)
  for op, shape in _order(cases):
    deltas, steps = [], []
    for d in dts:
      c = by.get((op, shape, d, None))
      if c is None:
        deltas.append("-")
        steps.append("-")
        continue
      v = c["values"]
      delta = v["ours"] - v[v["ref"]]
      # No device time of our custom call: the call took the exact XLA path (no handler).
      path = " (XLA path)" if v.get("ours kernels") == 0 else ""
      deltas.append(f"{delta:+.2f}{path}")
      steps.append(f"{_us(v[v['ref']])} / {_us(v['ours'])}")
    label = shape if len(ops) == 1 else f"{op} {shape}"
    lines.append("| " + " | ".join([label] + deltas + steps) + " |")
  return lines


def isolated_table(cases: list[dict]) -> list[str]:
  dts, by = _dtypes(cases), _by_key(cases)
  refs = {c["op"]: c["values"]["ref"] for c in cases}
  extras = []
  for c in cases:
    extras += [i for i in _impls(c["values"])[1] if i != "ours" and i not in extras]
  head = ["op", "shape"]
  for d in dts:
    head += [f"{d} ref / ours µs", f"{d} speed-up"] + [f"{d} {e} µs" for e in extras]
  lines = _table_head(head)
  for op, shape in _order(cases):
    row = [op, shape]
    for d in dts:
      c = by.get((op, shape, d, None))
      v = c["values"] if c else {}
      ref, ours = (v.get(v["ref"]), v.get("ours")) if c else (None, None)
      row += [f"{_us(ref)} / {_us(ours)}",
              f"{ref / ours:.2f}x" if ref and ours else "-"]
      row += [_us(v.get(e)) for e in extras]
    lines.append("| " + " | ".join(row) + " |")
  named = ", ".join(f"`{r}` ({op})" if len(refs) > 1 else f"`{r}`" for op, r in refs.items())
  return lines + ["", f"ref: {named}."]


def sharded_table(cases: list[dict]) -> list[str]:
  lines = _table_head(["shape", "dtype", "split", "jnp.argmax / ours µs", "speed-up"])
  for c in sorted(cases, key=lambda c: (c["rows"], c["cols"], c["dtype"], c["layout"] or "")):
    v = c["values"]
    ref, ours = v.get(v["ref"]), v.get("ours")
    lines.append(f"| {c['shape']} | {c['dtype']} | {c['layout']} | {_us(ref)} / {_us(ours)} | "
                 + (f"{ref / ours:.2f}x" if ref and ours else "-") + " |")
  return lines


def example_table(cases: list[dict]) -> list[str]:
  lines = _table_head(["batch x vocab", "dtype", "reference", "ref / ours µs per step",
                       "Δ µs/step"])
  for c in sorted(cases, key=lambda c: (c["rows"], c["cols"], DTYPES.index(c["dtype"])
                                        if c["dtype"] in DTYPES else 99)):
    v = c["values"]
    ref, ours = v.get(v["ref"]), v.get("ours")
    lines.append(f"| {c['shape']} | {c['dtype']} | `{v['ref']}` | {_us(ref)} / {_us(ours)} | "
                 + (f"{ours - ref:+.2f}" if ref is not None and ours is not None else "-")
                 + " |")
  return lines


def _table_head(cols: list[str]) -> list[str]:
  return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]


TABLES = {"chain": chain_table, "isolated": isolated_table, "sharded": sharded_table}


# ---------------------------------------------------------------------------------------------
# Plot: the in-chain Δ per shape


def plot_chain(section: Section, cases: list[dict], summary: Summary, path: Path) -> None:
  import matplotlib  # noqa: PLC0415  (only the plots need it)
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  dts, by = _dtypes(cases), _by_key(cases)
  order = _order(cases)
  ref = cases[0]["values"]["ref"]
  colors = {"float32": "#4C72B0", "bfloat16": "#DD8452", "float16": "#55A868",
            "float64": "#8172B3"}
  height = 0.8 / len(dts)
  fig, ax = plt.subplots(figsize=(9, 0.27 * len(order) * len(dts) + 1.6), dpi=100)
  lo = hi = 0.0
  for j, d in enumerate(dts):
    for i, (op, shape) in enumerate(order):
      c = by.get((op, shape, d, None))
      if c is None:
        continue
      v = c["values"]
      delta = v["ours"] - v[v["ref"]]
      lo, hi = min(lo, delta), max(hi, delta)
      xla = v.get("ours kernels") == 0
      y = i + (j - (len(dts) - 1) / 2) * height
      ax.barh(y, delta, height=height * 0.92, color=colors.get(d, "#937860"),
              hatch="//" if xla else None, edgecolor="white" if xla else None, linewidth=0)
      ax.annotate(f"{delta:+.2f}", (delta, y), xytext=(4 if delta >= 0 else -4, 0),
                  textcoords="offset points", va="center", fontsize=7.5,
                  ha="left" if delta >= 0 else "right")
  span = max(hi - lo, 1.0)
  ax.set_xlim(lo - 0.16 * span, hi + 0.16 * span)
  ax.axvline(0, color="black", linewidth=0.8)
  ax.set_yticks(range(len(order)))
  ax.set_yticklabels([s if len({o for o, _ in order}) == 1 else f"{o} {s}" for o, s in order])
  ax.invert_yaxis()
  ax.set_xlabel(f"ours − {ref}, µs per decode step (negative: ours faster)")
  env = summary.data.get("env", {})
  ax.set_title(f"{section.title}, in-chain: Δ per step by shape (rows x cols)\n"
               f"{env.get('gpu_name') or env.get('device_kind', '')}, jax {env.get('jax', '?')}"
               + (f", commit {env['commit']}" if env.get("commit") else "")
               + f", {str(env.get('date', ''))[:10]}", fontsize=10)
  patch = matplotlib.patches.Patch
  handles = [patch(facecolor=colors.get(d, "#937860"), label=d) for d in dts]
  if any(c["values"].get("ours kernels") == 0 for c in cases):
    handles.append(patch(facecolor="gray", hatch="//", edgecolor="white",
                         label="hatched: the exact XLA path (no kernel of ours)"))
  # Few-row shapes (small Δ) are at the top: their left side is empty.
  ax.legend(handles=handles, loc="upper left", fontsize=8)
  ax.grid(axis="x", linewidth=0.3)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


# ---------------------------------------------------------------------------------------------
# The page


def section_text(section: Section, summaries: list[Summary], plots: list) -> list[str]:
  L = [f"## {section.title}", "", section.about, ""]
  pool = [s for s in summaries if s.platform == section.platform]
  tables, used = [], []
  for mode in section.modes:
    # A mode's cases from every summary that holds some (the first summary holding a case
    # gives it): runs of different filters or shapes, each with its own commit and note.
    cases, sources, seen = [], [], set()
    for s in pool:
      for case in s.cases(mode, section.ops):
        key = (case["op"], case["dtype"], case["shape"], case["layout"])
        if key in seen:
          continue
        seen.add(key)
        cases.append(case)
        if s not in sources:
          sources.append(s)
    if not sources:
      tables.append((mode, None, []))
      continue
    tables.append((mode, sources[0], cases))
    used.extend(sources)
  example = None
  if section.example:
    src = next((s for s in pool if s.cases("example", (section.example,))), None)
    if src:
      example = (src, src.cases("example", (section.example,)))
      used.append(src)
  if not used:
    names = ", ".join(f"`{s.name}`" for s in summaries) or "no summary"
    kind = "CPU" if section.platform == "cpu" else "GPU"
    L += [f"**Not in the committed summaries** ({names}: no {kind} run of "
          f"{'/'.join(section.modes)} cases for {', '.join(section.ops)}), so no figures here."]
    entry = log_entry(section.log_words)
    if entry:
      L += [f"The last such measurement is the log's entry {entry}."]
    L += ["A run of `bench.py` with `--summary benchmarks/results_summary_<name>.json` on such a "
          "machine, then `python benchmarks/results.py`, fills this section.", ""]
    return L
  measured = list(dict.fromkeys(s.measured() for s in used))
  L += ["Measured: " + " ".join(measured), ""]
  for mode, src, cases in tables:
    L += [f"### {TABLE_TITLES[mode]}", ""]
    if src is None:
      L += [f"Not measured: the summaries hold no {mode} cases of this op.", ""]
      continue
    variant = src.data.get(mode) if isinstance(src.data.get(mode), dict) else None
    L += [METHODS[mode] + (f" Not SPEC §3b's chain: {json.dumps(variant)}." if variant else ""),
          ""]
    L += TABLES[mode](cases) + [""]
    if mode == "chain" and section.plot:
      png = HERE / f"results_{section.key}.png"
      plots.append((section, cases, src, png))
      L += [f"![{section.title}: in-chain Δ per step by shape]({png.name})", ""]
  if example:
    src, cases = example
    L += ["### The example's decode step", "", METHODS["example"], ""]
    L += example_table(cases) + [""]
  return L


def render(summaries: list[Summary]) -> tuple[str, list]:
  plots: list = []
  L = ["# Results", "",
       "The current figures, one section per op. Written by `python benchmarks/results.py` from "
       "the committed summaries of the benchmark runs (`benchmarks/results_summary*.json`); do "
       "not edit by hand. How each run went, earlier runs and the tries behind the code: "
       "[BENCHMARKS.md](BENCHMARKS.md) (the log of runs) and [NOTES.md](NOTES.md) (the tries). "
       "Method: [BENCHMARKS.md, Method](BENCHMARKS.md#method) and SPEC §3.", ""]
  L += ["Sections: " + " · ".join(f"[{s.title}](#{anchor(s.title)})" for s in SECTIONS), ""]
  for s in SECTIONS:
    L += section_text(s, summaries, plots)
  return "\n".join(L).rstrip("\n") + "\n", plots


def readme_table(summaries: list[Summary]) -> list[str]:
  """The README's one table: in-chain Δ per step of README_OPS by shape and dtype."""
  pool = [s for s in summaries if s.platform == "gpu"]
  src = next((s for s in pool if s.cases("chain", README_OPS)), None)
  if src is None:
    return ["No in-chain figures in the committed summaries: see "
            "[benchmarks/RESULTS.md](benchmarks/RESULTS.md)."]
  cases = src.cases("chain", README_OPS)
  by, dts = _by_key(cases), _dtypes(cases)
  ops = [op for op in README_OPS if any(c["op"] == op for c in cases)]
  refs = {op: next(c["values"]["ref"] for c in cases if c["op"] == op) for op in ops}
  head = ["shape"] + [f"{op} {d}" for op in ops for d in dts]
  lines = _table_head(head)
  shapes = sorted({(c["rows"], c["cols"], c["shape"]) for c in cases})
  for _, _, shape in shapes:
    row = [shape]
    for op in ops:
      for d in dts:
        c = by.get((op, shape, d, None))
        if c is None:
          row.append("-")
          continue
        v = c["values"]
        xla = " (XLA path)" if v.get("ours kernels") == 0 else ""
        row.append(f"{v['ours'] - v[v['ref']]:+.2f}{xla}")
    lines.append("| " + " | ".join(row) + " |")
  against = ", ".join(f"{op} vs `{r}`" for op, r in refs.items())
  return [f"Δ µs per decode step, ours − reference ({against}); negative is faster.",
          f"Measured: {src.measured('benchmarks/')}", ""] + lines


def with_readme_table(readme: str, table: list[str]) -> str | None:
  """``readme`` with the text between the markers replaced by ``table`` (None: no markers)."""
  start, end = readme.find(README_BEGIN), readme.find(README_END)
  if start < 0 or end < start:
    return None
  return (readme[:start + len(README_BEGIN)] + "\n" + "\n".join(table) + "\n"
          + readme[end:])


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--check", action="store_true",
                 help="write nothing; exit 1 if RESULTS.md is not what the summaries give")
  args = p.parse_args(argv)
  summaries = load_summaries()
  text, plots = render(summaries)
  readme = README.read_text() if README.is_file() else ""
  new_readme = with_readme_table(readme, readme_table(summaries))
  if new_readme is None:
    print(f"{README.name} has no in-chain table markers ({README_BEGIN!r}): left as it is",
          file=sys.stderr)
    new_readme = readme
  if args.check:
    stale = [p.name for p, want in ((OUT, text), (README, new_readme))
             if not p.is_file() or p.read_text() != want]
    if stale:
      print(f"out of date: {', '.join(stale)}: run python benchmarks/results.py",
            file=sys.stderr)
      return 1
    print(f"{OUT.name} and the README's table are up to date")
    return 0
  OUT.write_text(text)
  if new_readme != readme:
    README.write_text(new_readme)
  try:
    for plot in plots:
      plot_chain(*plot)
  except ImportError:
    print("the plots need matplotlib (pip install matplotlib); RESULTS.md was written",
          file=sys.stderr)
    return 1
  print(f"wrote {OUT.relative_to(HERE.parent)}"
        + "".join(f", {png.relative_to(HERE.parent)}" for *_, png in plots))
  return 0


if __name__ == "__main__":
  sys.exit(main())
