"""Device time per call from one JAX profiler trace (SPEC §3), shared by bench.py and the example.

How a measurement goes: every timed function is jitted under its own name (:func:`named_jit`:
its module, and every device event XLA runs for it, is ``jit_<name>``); each :class:`Case` is
warmed up, then ONE ``jax.profiler.start_trace(dir, create_perfetto_trace=True)`` session runs
every case ``iters`` times (:func:`trace_cases`: cases interleaved in rounds, inputs rotated),
each call inside a host marker ``TraceAnnotation("bench_call:<label>:<i>")`` and waited for.
:class:`Trace` then cuts each module's device events into calls by those markers and gives per
call the **span** (first event start to last event end, launch gaps included; on several
devices the largest per-device span) and the **sum** of event durations, and their medians.
Several cases may share one jitted function (e.g. kernel variants set process-wide between
calls): their markers tell their calls apart.

The trace format (``plugins/profile/<run>/<host>.trace.json.gz``, Chrome trace-event JSON; seen
with jax 0.10.2 on CPU and 0.11.2 on an H200, CUDA 13):

- ``ph == "M"`` events name processes (``/device:GPU:0`` per GPU, ``/host:CPU``) and threads
  (``Stream #14(Compute,...)`` on a GPU; some versions add derived lines such as ``XLA Ops``
  that repeat the stream events and must not be counted twice).
- ``ph == "X"`` events are intervals, ``ts``/``dur`` in µs. Every kernel and memset XLA ran for
  ``jit_f`` carries ``args.hlo_module == "jit_f"`` and ``args.hlo_op`` (the HLO instruction: a
  custom call's kernels carry the custom call's name); kernels carry ``args.kernel_details``
  (``"regs:48 ... grid:640,1,1 block:256,1,1 ..."``). The CPU executor's events (thunks, one per
  HLO op, with ``args.device_ordinal`` and ``args.run_id``) are used only off-GPU, to exercise
  this code (``device="cpu"``): they are CPU times, not GPU times.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import dataclasses
import datetime
import gzip
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

MARKER = "bench_call:"

# Thread names of derived (non-stream) lines on a GPU process: they repeat the stream events.
_DERIVED_LINES = ("xla ops", "xla modules", "steps", "tensorflow", "framework", "source code",
                  "launch stats", "xla traceme", "host threads", "task environment")


# ---------------------------------------------------------------------------------------------
# Reading the trace


def find_trace_file(trace_dir: str | Path) -> Path:
  """The trace of the newest profiling run under ``trace_dir`` (``*.trace.json.gz``, else
  ``perfetto_trace.json.gz``)."""
  trace_dir = Path(trace_dir)
  runs = sorted((p for p in trace_dir.glob("plugins/profile/*") if p.is_dir()),
                key=lambda p: p.stat().st_mtime)
  candidates = []
  for run in reversed(runs):
    candidates = sorted(run.glob("*.trace.json.gz")) or sorted(run.glob("perfetto_trace.json.gz"))
    if candidates:
      break
  if not candidates:  # some versions write elsewhere: search the whole tree
    candidates = (sorted(trace_dir.rglob("*.trace.json.gz"))
                  or sorted(trace_dir.rglob("perfetto_trace.json.gz")))
  if not candidates:
    raise FileNotFoundError(f"no *.trace.json.gz or perfetto_trace.json.gz under {trace_dir}")
  return max(candidates, key=lambda p: p.stat().st_size)


def load_trace(path: str | Path) -> dict:
  with gzip.open(path, "rt") as f:
    data = json.load(f)
  return {"traceEvents": data} if isinstance(data, list) else data


def _names(events):
  procs, threads = {}, {}
  for e in events:
    if e.get("ph") != "M":
      continue
    if e.get("name") == "process_name":
      procs[e.get("pid")] = str(e.get("args", {}).get("name", ""))
    elif e.get("name") == "thread_name":
      threads[(e.get("pid"), e.get("tid"))] = str(e.get("args", {}).get("name", ""))
  return procs, threads


def _is_gpu_process(name: str) -> bool:
  n = name.lower()
  return "/device:gpu" in n or "/device:cuda" in n or "/device:rocm" in n


def module_events(trace: dict, device: str = "gpu") -> tuple[dict[str, list[dict]], dict]:
  """Device events that carry ``args.hlo_module``, by module name, in time order.

  ``device``: "gpu" (events on the GPU stream lines) or "cpu" (the host process's executor
  events; development only). Returns (events by module, info naming processes and threads).
  """
  events = trace.get("traceEvents", [])
  procs, threads = _names(events)
  if device == "gpu":
    pids = {pid for pid, name in procs.items() if _is_gpu_process(name)}
    gpu_threads = {k: v for k, v in threads.items() if k[0] in pids}
    stream_threads = {k for k, v in gpu_threads.items() if v.lower().startswith("stream")}
    if stream_threads:
      keep = lambda pid, tid: (pid, tid) in stream_threads
    else:  # unnamed or differently named stream lines: everything but the derived lines
      derived = {k for k, v in gpu_threads.items() if v.lower().startswith(_DERIVED_LINES)}
      keep = lambda pid, tid: pid in pids and (pid, tid) not in derived
  elif device == "cpu":
    pids = {pid for pid, name in procs.items() if not _is_gpu_process(name)}
    keep = lambda pid, tid: pid in pids
  else:
    raise ValueError(f"device must be 'gpu' or 'cpu', got {device!r}")
  by_module: dict[str, list[dict]] = collections.defaultdict(list)
  used = set()
  for e in events:
    if e.get("ph") != "X":
      continue
    module = (e.get("args") or {}).get("hlo_module")
    if module and keep(e.get("pid"), e.get("tid")):
      by_module[str(module)].append(e)
      used.add((e.get("pid"), e.get("tid")))
  for evs in by_module.values():
    evs.sort(key=lambda e: float(e["ts"]))
  info = {"processes": sorted({procs.get(p, str(p)) for p, _ in used}),
          "threads": sorted({threads.get(k, str(k[1])) for k in used})}
  return dict(by_module), info


def events_for(by_module: dict[str, list[dict]], module: str) -> list[dict]:
  """Events of ``module``: the exact name, else names extending it with a non-word character
  (``jit_f(3)``, ``jit_f.1``), never a name that merely starts with it (``jit_f2``)."""
  if module in by_module:
    return by_module[module]
  pat = re.compile(re.escape(module) + r"(?![A-Za-z0-9_])")
  out = [e for name, evs in by_module.items() if pat.match(name) for e in evs]
  return sorted(out, key=lambda e: float(e["ts"]))


def host_markers(trace: dict, prefix: str = MARKER) -> dict[str, list[float]]:
  """``{label: [host start µs of call 0, 1, ...]}`` from the ``<prefix><label>:<i>`` markers."""
  events = trace.get("traceEvents", [])
  procs, _ = _names(events)
  out: dict[str, list[tuple[int, float]]] = collections.defaultdict(list)
  for e in events:
    name = e.get("name")
    if e.get("ph") != "X" or not isinstance(name, str) or not name.startswith(prefix):
      continue
    if _is_gpu_process(procs.get(e.get("pid"), "")):
      continue
    label, _, index = name[len(prefix):].rpartition(":")
    try:
      out[label].append((int(index), float(e["ts"])))
    except ValueError:
      continue
  return {label: [ts for _, ts in sorted(v)] for label, v in out.items()}


def split_calls(events: list[dict], markers: dict[str, list[float]] | None = None,
                n_calls: int | None = None, gap_us: float = 50.0
                ) -> tuple[dict[str, list[list[dict]]], str]:
  """Cuts one module's events (time order) into calls, by the first rule that applies:

  1. ``markers`` ``{label: [host start of each call]}`` (one or more labels sharing the
     module): an event belongs to the latest marker that started before it. Exact, since every
     call is waited for before the next marker starts.
  2. ``args.run_id`` on every event (the CPU executor has it; GPU events in jax 0.11 do not).
  3. ``n_calls``: equal chunks with the same sequence of event names.
  4. gaps longer than ``gap_us`` (last resort: launch gaps inside a call can be long).

  Returns ({label: calls} (label "" without markers), how).
  """
  if not events:
    return {}, "none"
  if markers:
    starts = sorted((ts, label, i) for label, tss in markers.items() for i, ts in enumerate(tss))
    keys = [s[0] for s in starts]
    groups: dict[tuple, list[dict]] = collections.defaultdict(list)
    for e in events:
      j = bisect.bisect_right(keys, float(e["ts"])) - 1
      if j >= 0:
        groups[starts[j][1:]].append(e)
    out: dict[str, list[list[dict]]] = {label: [] for label in markers}
    for (label, _), evs in sorted(groups.items(), key=lambda kv: kv[0][1]):
      out[label].append(evs)
    return out, "markers"
  run_ids = [(e.get("args") or {}).get("run_id") for e in events]
  if all(r is not None for r in run_ids):
    by_id: dict = {}
    for e, r in zip(events, run_ids):
      by_id.setdefault(r, []).append(e)
    return {"": sorted(by_id.values(), key=lambda c: float(c[0]["ts"]))}, "run_id"
  if n_calls and len(events) % n_calls == 0:
    k = len(events) // n_calls
    chunks = [events[i:i + k] for i in range(0, len(events), k)]
    first = [e.get("name") for e in chunks[0]]
    if all([e.get("name") for e in c] == first for c in chunks):
      return {"": chunks}, "count"
  calls, end = [], None
  for e in events:
    start = float(e["ts"])
    if end is None or start - end > gap_us:
      calls.append([])
      end = start
    calls[-1].append(e)
    end = max(end, start + float(e.get("dur", 0.0)))
  return {"": calls}, f"gap>{gap_us:g}us"


_KV = re.compile(r"([A-Za-z_][A-Za-z0-9_ ]*?)\s*[:=]\s*([0-9][0-9.,]*)")


def parse_kernel_details(details) -> dict:
  """``kernel_details`` (``key:value`` pairs, or a dict) as a dict; grid/block as ``"x,y,z"``."""
  if isinstance(details, dict):
    return dict(details)
  out: dict = {"raw": str(details)}
  for key, value in _KV.findall(str(details)):
    key, value = key.strip().replace(" ", "_").lower(), value.rstrip(",")
    if "," in value:
      out[key] = value
      continue
    try:
      out[key] = int(value)
    except ValueError:
      try:
        out[key] = float(value)
      except ValueError:
        out[key] = value
  for dim in ("grid", "block"):
    if dim not in out and f"{dim}_x" in out:
      out[dim] = ",".join(str(out.get(f"{dim}_{c}", 1)) for c in "xyz")
  return out


def geometry_string(details: dict | None) -> str:
  """``grid(...) block(...) regs N`` from :func:`parse_kernel_details` output."""
  if not details:
    return ""
  parts = [f"{d}({details[d]})" for d in ("grid", "block") if d in details]
  for key in ("regs", "registers_per_thread", "registers"):
    if key in details:
      parts.append(f"regs {details[key]}")
      break
  return " ".join(parts)


def is_ours(event: dict, our_ops: frozenset | set = frozenset()) -> bool:
  """An event of our handler: a kernel in the ``jax_argreduce`` C++ namespace, or any event of
  one of ``our_ops`` (names of our custom-call instructions, :func:`our_custom_calls`)."""
  return ("jax_argreduce" in str(event.get("name", ""))
          or (event.get("args") or {}).get("hlo_op") in our_ops)


def _device_key(e: dict):
  return (e.get("pid"), (e.get("args") or {}).get("device_ordinal"))


def summarize_calls(calls: list[list[dict]], how: str = "", expected: int | None = None,
                    our_ops: frozenset | set = frozenset()) -> dict:
  """Per-call span and sum of one case's calls, their medians and the kernels seen.

  span: per device, first event start to last event end; a call's span is the largest over
  the devices it ran on (one device: simply the call's span). ``ours_us``: the summed duration
  of our handler's events (:func:`is_ours`).
  """
  res: dict[str, Any] = {"calls": len(calls), "split": how, "warning": None}
  if not calls:
    res.update(span_us=None, sum_us=None, ours_us=None, spans_us=[], events_per_call=0,
               devices=0, kernels=[], warning="no device events for this case")
    return res
  spans, sums, ours, counts, ndev = [], [], [], [], []
  durations: dict[str, list[float]] = {}
  details: dict[str, dict] = {}
  for call in calls:
    per_dev: dict = collections.defaultdict(list)
    for e in call:
      per_dev[_device_key(e)].append(e)
    spans.append(max(max(float(e["ts"]) + float(e.get("dur", 0.0)) for e in evs)
                     - min(float(e["ts"]) for e in evs) for evs in per_dev.values()))
    ndev.append(len(per_dev))
    sums.append(sum(float(e.get("dur", 0.0)) for e in call) / len(per_dev))
    ours.append(sum(float(e.get("dur", 0.0)) for e in call if is_ours(e, our_ops))
                / len(per_dev))
    counts.append(len(call) // len(per_dev))
    for e in call:
      name = str(e.get("name", "?"))
      durations.setdefault(name, []).append(float(e.get("dur", 0.0)))
      kd = (e.get("args") or {}).get("kernel_details")
      if kd is not None and name not in details:
        details[name] = parse_kernel_details(kd)
  if expected is not None and len(calls) != expected:
    res["warning"] = f"split into {len(calls)} calls ({how}), expected {expected}"
  res.update(
      span_us=statistics.median(spans), span_min_us=min(spans),
      span_p90_us=sorted(spans)[min(len(spans) - 1, int(0.9 * len(spans)))],
      sum_us=statistics.median(sums), ours_us=statistics.median(ours), spans_us=spans,
      events_per_call=collections.Counter(counts).most_common(1)[0][0],
      devices=max(ndev),
      kernels=[{"name": n, "median_us": statistics.median(d), "count": len(d),
                "ours": "jax_argreduce" in n, "details": details.get(n)}
               for n, d in durations.items()])
  return res


# ---------------------------------------------------------------------------------------------
# Compiled HLO text


_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s+([a-z][\w\-]*)\(", re.M)
COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter",
               "collective-broadcast", "ragged-all-to-all")


def our_custom_calls(hlo_text: str) -> frozenset:
  """Names of the custom-call instructions whose target is one of ours (``jax_argreduce*``)."""
  out = set()
  for m in _INSTR.finditer(hlo_text):
    if m.group(3) == "custom-call":
      line_end = hlo_text.find("\n", m.end())
      line = hlo_text[m.start(): line_end if line_end >= 0 else None]
      if re.search(r'custom_call_target="jax_argreduce', line):
        out.add(m.group(1))
  return frozenset(out)


def collectives(hlo_text: str) -> list[str]:
  """``"op result-shape"`` for every collective in a compiled module (async pairs once)."""
  out = []
  for m in _INSTR.finditer(hlo_text):
    op = m.group(3)
    base = op[:-len("-start")] if op.endswith("-start") else op
    if base in COLLECTIVES:
      shape = re.sub(r"\{[^{}]*\}", "", m.group(2)).strip()  # drop layouts
      out.append(f"{base} {shape}")
  return out


# ---------------------------------------------------------------------------------------------
# Running cases under the profiler


def named_jit(name: str, fn: Callable, **jit_kwargs):
  """``jax.jit(fn)`` under ``name``: its module and every device event are ``jit_<name>``."""
  import jax

  def f(*args):
    return fn(*args)
  f.__name__ = f.__qualname__ = name
  return jax.jit(f, **jit_kwargs)


@dataclasses.dataclass(eq=False)
class Case:
  """One timed thing. ``label`` is unique (markers); ``fn`` is a :func:`named_jit` function or
  its compiled form (cases may share one: ``module`` names its trace module); ``inputs`` are
  argument tuples, rotated call by call; ``setup`` runs before each batch of its calls (e.g. to
  select a kernel variant); ``our_ops`` names our custom calls in its compiled module (for
  ``ours_us``)."""
  label: str
  fn: Callable
  inputs: Sequence[tuple]
  module: str = ""
  setup: Callable[[], None] | None = None
  our_ops: frozenset = frozenset()
  meta: dict = dataclasses.field(default_factory=dict)
  result: dict | None = None
  traceable: Callable | None = None  # ``fn`` as a traceable function, where ``fn`` is compiled

  def __post_init__(self):
    if not self.module:
      self.module = "jit_" + getattr(self.fn, "__name__", self.label)

  def call(self, i: int):
    return self.fn(*self.inputs[i % len(self.inputs)])


def _block(x):
  import jax
  return jax.block_until_ready(x)


def warm_up(cases: Sequence[Case], n: int = 3) -> None:
  for c in cases:
    if c.setup:
      c.setup()
    for i in range(max(1, n)):
      _block(c.call(i))


@dataclasses.dataclass
class Trace:
  """What one profiler session left: device events by module and the host markers."""
  by_module: dict
  markers: dict
  source: str            # "GPU trace", "CPU executor trace (dev only)" or "none"
  file: str = ""
  info: dict = dataclasses.field(default_factory=dict)

  def summarize(self, cases: Sequence[Case], iters: int | None = None) -> None:
    """Sets ``case.result`` for every case (None when the trace has no device events)."""
    by_mod: dict[str, list[Case]] = collections.defaultdict(list)
    for c in cases:
      by_mod[c.module].append(c)
    for module, group in by_mod.items():
      if self.source == "none":
        for c in group:
          c.result = None
        continue
      events = events_for(self.by_module, module)
      marks = {c.label: self.markers.get(c.label, []) for c in group}
      if not all(marks.values()):
        marks = None if len(group) == 1 else marks
      calls, how = split_calls(events, marks, iters)
      for c in group:
        c.result = summarize_calls(calls.get(c.label if marks else "", []), how, iters,
                                   c.our_ops)


def trace_cases(cases: Sequence[Case], *, iters: int, rounds: int = 3, device: str | None = "gpu",
                trace_dir: str | Path | None = None, keep_trace: bool = False,
                sleep_us: float = 0.0, log: Callable[[str], None] = print) -> Trace:
  """Runs every case ``iters`` times inside one profiler session and summarizes them.

  The calls of all cases are interleaved in ``rounds`` rounds (slow drifts hit every case
  alike); each call runs inside its marker and is waited for. ``device``: "gpu", "cpu"
  (the CPU executor's events, development only) or None (no trace summary).
  """
  import jax
  own_dir = trace_dir is None
  tdir = Path(trace_dir or tempfile.mkdtemp(prefix="jax_argreduce_trace_"))
  tdir.mkdir(parents=True, exist_ok=True)
  opts = jax.profiler.ProfileOptions()
  opts.python_tracer_level = 0  # no Python frames: a smaller trace, less host overhead
  rounds = max(1, min(rounds, iters))
  bounds = [iters * r // rounds for r in range(rounds + 1)]
  t0 = time.perf_counter()
  jax.profiler.start_trace(str(tdir), create_perfetto_trace=True, profiler_options=opts)
  try:
    for r in range(rounds):
      for c in cases:
        if c.setup:
          c.setup()
        for i in range(bounds[r], bounds[r + 1]):
          with jax.profiler.TraceAnnotation(f"{MARKER}{c.label}:{i}"):
            _block(c.call(i))
          if sleep_us:
            time.sleep(sleep_us * 1e-6)
  finally:
    jax.profiler.stop_trace()
  path = find_trace_file(tdir)
  data = load_trace(path)
  by_module, info = module_events(data, device) if device else ({}, {})
  source = {"gpu": "GPU trace", "cpu": "CPU executor trace (dev only)"}.get(device, "none")
  if device and not by_module:
    source = "none"
  tr = Trace(by_module, host_markers(data), source, str(path), info)
  log(f"[timing] {len(cases)} cases x {iters} calls traced in {time.perf_counter() - t0:.1f} s; "
      f"{sum(map(len, by_module.values()))} device events in {len(by_module)} modules "
      f"({path.stat().st_size / 1e6:.1f} MB); source: {source}")
  tr.summarize(cases, iters)
  if own_dir and not keep_trace:
    shutil.rmtree(tdir, ignore_errors=True)
  else:
    log(f"[timing] trace kept in {tdir}")
  return tr


def wall_time(fn: Callable, args: tuple, repeats: int = 10, per: int = 1) -> tuple[float, list]:
  """Median wall µs of ``fn(*args)`` (perf_counter around block_until_ready) / ``per``."""
  _block(fn(*args))
  _block(fn(*args))
  samples = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    _block(fn(*args))
    samples.append((time.perf_counter() - t0) * 1e6 / per)
  return statistics.median(samples), samples


# ---------------------------------------------------------------------------------------------
# Environment


def _nvidia_smi() -> dict:
  exe = shutil.which("nvidia-smi")
  if not exe:
    return {}
  try:
    out = subprocess.run(
        [exe, "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem",
         "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout
  except Exception:  # noqa: BLE001 - informational only
    return {}
  fields = [f.strip() for f in (out.strip().splitlines() or [""])[0].split(",")]
  keys = ["name", "driver_version", "memory_total", "max_sm_clock", "max_mem_clock"]
  return dict(zip(keys, fields)) if len(fields) >= 2 else {}


def environment() -> dict:
  import jax
  import jaxlib
  import numpy as np
  dev = jax.devices()[0]
  smi = _nvidia_smi()
  env = {
      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "host": platform.node(), "python": platform.python_version(), "jax": jax.__version__,
      "jaxlib": getattr(jaxlib, "__version__", "?"), "numpy": np.__version__,
      "backend": jax.default_backend(), "device_kind": getattr(dev, "device_kind", str(dev)),
      "device_count": jax.device_count(),
      "gpu_name": smi.get("name"), "driver_version": smi.get("driver_version"),
      "compute_capability": getattr(dev, "compute_capability", None),
      "core_count": getattr(dev, "core_count", None),
      "xla_flags": os.environ.get("XLA_FLAGS", ""),
  }
  with contextlib.suppress(Exception):
    env["platform_version"] = dev.client.platform_version
  try:
    import jax_argreduce
    from jax_argreduce import _ffi
    env["jax_argreduce"] = getattr(jax_argreduce, "__version__", "?")
    env["has_cuda"] = bool(getattr(_ffi, "HAS_CUDA", False))
  except Exception as e:  # noqa: BLE001
    env["jax_argreduce_error"] = repr(e)
  return env
