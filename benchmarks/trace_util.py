"""Reads per-call device times out of a JAX profiler trace (SPEC §3).

``jax.profiler.start_trace(dir, create_perfetto_trace=True)`` / ``stop_trace()`` leave, under
``dir/plugins/profile/<run>/``, ``<host>.trace.json.gz`` (the Chrome trace-event JSON the SPEC
names), ``perfetto_trace.json.gz`` (the same events without the ``metadata`` field; jax writes
it by loading the former) and ``<host>.xplane.pb``. Each JSON is ``{"traceEvents": [...]}``;
seen with jax 0.10.2 (CPU) and 0.11.2 (H200, CUDA 13):

- ``ph == "M"`` events name processes (``process_name``: ``/device:GPU:0`` for the GPU,
  ``/host:CPU`` for the host) and threads (``thread_name``: ``Stream #14(Compute,MemcpyD2D,
  Memset)`` on the GPU; other versions add derived lines such as ``XLA Ops``/``XLA Modules``,
  which repeat the ops and must not be counted twice).
- ``ph == "X"`` events are intervals, ``ts``/``dur`` in µs. Every kernel and memset XLA ran
  for a jitted function ``f`` carries ``args.hlo_module == "jit_f"`` and ``args.hlo_op``;
  kernels carry ``args.kernel_details`` (``"regs:48 static_shared:65 dynamic_shared:0
  grid:640,1,1 block:256,1,1 occ_pct:62.5"``), memsets ``args.Memset_details``; all carry
  ``correlation_id`` (one per launch; the host-side launch event has the same one). GPU events
  have no ``run_id`` (the host's ``CommonPjRtLoadedExecutable::Execute (jit_f...)`` event
  does); the CPU executor's events do have one.

:func:`module_events` collects, per ``hlo_module``, the device events (GPU stream events; on
a machine without a GPU, optionally the CPU executor's events, for developing this tooling);
:func:`host_markers` reads the benchmark's own per-call host markers; :func:`split_calls` cuts
a module's events into executions (markers, else run_id, else equal chunks, else gaps);
:func:`summarize` gives per call the span (first start to last end) and the sum of event
durations, and their medians.
"""

from __future__ import annotations

import bisect
import collections
import gzip
import json
import re
import statistics
from pathlib import Path

# Thread names of derived (non-stream) lines on a GPU process: they repeat the stream events.
_DERIVED_LINES = ("xla ops", "xla modules", "steps", "tensorflow", "framework", "source code",
                  "launch stats", "xla traceme", "host threads", "task environment")


def find_trace_file(trace_dir: str | Path) -> Path:
  """The trace of the newest profiling run under ``trace_dir``.

  Prefers ``*.trace.json.gz`` (has the ``metadata`` block), else ``perfetto_trace.json.gz``.
  """
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
  if isinstance(data, list):  # bare event array
    data = {"traceEvents": data}
  return data


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
  """Device events that carry ``args.hlo_module``, grouped by module name, in time order.

  Args:
    trace: the loaded trace (:func:`load_trace`).
    device: "gpu" (events on GPU stream lines) or "cpu" (events on the host process; only
      useful to exercise this code on a machine without a GPU: those are CPU executor times).

  Returns:
    (events by module, info): info names the processes and threads the events came from.
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
  used_threads = set()
  for e in events:
    if e.get("ph") != "X":
      continue
    args = e.get("args") or {}
    module = args.get("hlo_module")
    if not module or not keep(e.get("pid"), e.get("tid")):
      continue
    by_module[str(module)].append(e)
    used_threads.add((e.get("pid"), e.get("tid")))
  for evs in by_module.values():
    evs.sort(key=lambda e: float(e["ts"]))
  info = {
      "processes": sorted({procs.get(p, str(p)) for p, _ in used_threads}),
      "threads": sorted({threads.get(k, str(k[1])) for k in used_threads}),
  }
  return dict(by_module), info


def events_for(by_module: dict[str, list[dict]], module: str) -> list[dict]:
  """Events of ``module``: exact name, else names that extend it with a non-word character
  (``jit_f(3)``, ``jit_f.1``), never a name that merely starts with it (``jit_f2``)."""
  if module in by_module:
    return by_module[module]
  pat = re.compile(re.escape(module) + r"(?![A-Za-z0-9_])")
  out = [e for name, evs in by_module.items() if pat.match(name) for e in evs]
  return sorted(out, key=lambda e: float(e["ts"]))


def host_markers(trace: dict, prefix: str = "bench_call:") -> dict[str, list[float]]:
  """Start times of the host markers the benchmark wraps around each call, per case.

  The benchmark runs call ``i`` of case ``name`` inside
  ``jax.profiler.TraceAnnotation(f"{prefix}{name}:{i}")`` and waits for it
  (``block_until_ready``) before the next marker starts, so every device event of call ``i``
  lies after marker ``i`` starts and before marker ``i + 1`` starts. Returns
  ``{name: [start µs of marker 0, 1, ...]}`` (host events only).
  """
  events = trace.get("traceEvents", [])
  procs, _ = _names(events)
  out: dict[str, list[tuple[int, float]]] = collections.defaultdict(list)
  for e in events:
    name = e.get("name")
    if e.get("ph") != "X" or not isinstance(name, str) or not name.startswith(prefix):
      continue
    if _is_gpu_process(procs.get(e.get("pid"), "")):
      continue
    case, _, index = name[len(prefix):].rpartition(":")
    try:
      out[case].append((int(index), float(e["ts"])))
    except ValueError:
      continue
  return {case: [ts for _, ts in sorted(v)] for case, v in out.items()}


def split_calls(events: list[dict], gap_us: float = 50.0, markers: list[float] | None = None,
                n_calls: int | None = None) -> tuple[list[list[dict]], str]:
  """Cuts one module's events (time order) into executions, by the first rule that applies:

  1. ``markers`` (host start times of each call, :func:`host_markers`): an event belongs to
     the last marker that started before it. Exact whenever the caller waits for each call.
  2. ``args.run_id`` on every event (one id per execution; the CPU executor has it, GPU
     events in jax 0.11 do not).
  3. ``n_calls``: when the events divide evenly into ``n_calls`` chunks of the same sequence
     of event names (XLA runs the same thunks every call), consecutive chunks.
  4. gaps: a new call starts wherever an event begins more than ``gap_us`` after every
     earlier event has ended (the benchmark sleeps between calls; but the launch gap inside
     one call can reach tens of µs under the profiler, so this is the last resort).

  Returns:
    (calls, how): how names the rule ("markers", "run_id", "count", "gap>50us").
  """
  if not events:
    return [], "none"
  if markers:
    groups: list[list[dict]] = [[] for _ in markers]
    for e in events:
      i = bisect.bisect_right(markers, float(e["ts"])) - 1
      if i >= 0:
        groups[i].append(e)
    return [g for g in groups if g], "markers"
  run_ids = [(e.get("args") or {}).get("run_id") for e in events]
  if all(r is not None for r in run_ids):
    by_id: dict = collections.OrderedDict()
    for e, r in zip(events, run_ids):
      by_id.setdefault(r, []).append(e)
    return sorted(by_id.values(), key=lambda c: float(c[0]["ts"])), "run_id"
  if n_calls and len(events) % n_calls == 0:
    k = len(events) // n_calls
    chunks = [events[i:i + k] for i in range(0, len(events), k)]
    first = [e.get("name") for e in chunks[0]]
    if all([e.get("name") for e in c] == first for c in chunks):
      return chunks, "count"
  calls, end = [], None
  for e in events:
    start = float(e["ts"])
    if end is None or start - end > gap_us:
      calls.append([])
      end = start
    calls[-1].append(e)
    end = max(end, start + float(e.get("dur", 0.0)))
  return calls, f"gap>{gap_us:g}us"


_KV = re.compile(r"([A-Za-z_][A-Za-z0-9_ ]*?)\s*[:=]\s*([0-9][0-9.,]*)")


def parse_kernel_details(details) -> dict:
  """``kernel_details`` (a string of ``key:value`` pairs, newline or space separated; or a
  dict) as a dict; grid/block become ``"x,y,z"`` strings, other numbers ints or floats. The
  raw text is kept under ``raw``."""
  if isinstance(details, dict):
    return dict(details)
  text = str(details)
  out: dict = {"raw": text}
  for key, value in _KV.findall(text):
    key = key.strip().replace(" ", "_").lower()
    value = value.rstrip(",")
    if "," in value:
      out[key] = value
    else:
      try:
        out[key] = int(value)
      except ValueError:
        try:
          out[key] = float(value)
        except ValueError:
          out[key] = value
  # Some versions spell the geometry as grid_x/grid_y/grid_z, block_x/...
  for dim in ("grid", "block"):
    if dim not in out and f"{dim}_x" in out:
      out[dim] = ",".join(str(out.get(f"{dim}_{c}", 1)) for c in "xyz")
  return out


def geometry_string(details: dict) -> str:
  """Short ``grid(...) block(...) regs N`` text from :func:`parse_kernel_details` output."""
  parts = []
  if "grid" in details:
    parts.append(f"grid({details['grid']})")
  if "block" in details:
    parts.append(f"block({details['block']})")
  for key in ("regs", "registers_per_thread", "registers"):
    if key in details:
      parts.append(f"regs {details[key]}")
      break
  return " ".join(parts)


def summarize(events: list[dict], expected_calls: int | None = None, gap_us: float = 50.0,
              drop_first: int = 0, markers: list[float] | None = None) -> dict:
  """Per-call span and kernel-time sum of one module's events, with their medians.

  Args:
    events: the module's device events (:func:`events_for`).
    expected_calls: how many executions the benchmark made (a warning when it differs).
    gap_us: threshold for :func:`split_calls` when there is no ``run_id``.
    drop_first: executions to ignore at the start (extra warm-up).
    markers: host start time of each call (:func:`host_markers`), the preferred way to split.

  Returns:
    dict with ``span_us`` and ``sum_us`` (medians), ``spans_us``/``sums_us`` (per call),
    ``span_min_us``/``span_p90_us``, ``events_per_call`` (the most common count) and ``events_per_call_all``, ``kernels``
    (name, median duration, parsed kernel_details per distinct event name, in call order),
    ``split`` (how calls were split), ``calls`` and ``warning`` (None or a message).
  """
  calls, how = split_calls(events, gap_us, markers, expected_calls)
  calls = calls[drop_first:]
  if not calls:
    return {"calls": 0, "split": how, "span_us": None, "span_min_us": None, "span_p90_us": None, "sum_us": None, "spans_us": [],
            "sums_us": [], "events_per_call": 0, "events_per_call_all": [], "kernels": [],
            "warning": "no device events for this module"}
  spans, sums, counts = [], [], []
  durations: dict[str, list[float]] = collections.OrderedDict()
  details: dict[str, dict] = {}
  for call in calls:
    start = min(float(e["ts"]) for e in call)
    end = max(float(e["ts"]) + float(e.get("dur", 0.0)) for e in call)
    spans.append(end - start)
    sums.append(sum(float(e.get("dur", 0.0)) for e in call))
    counts.append(len(call))
    for e in call:
      name = str(e.get("name", "?"))
      durations.setdefault(name, []).append(float(e.get("dur", 0.0)))
      kd = (e.get("args") or {}).get("kernel_details")
      if kd is not None and name not in details:
        details[name] = parse_kernel_details(kd)
  warning = None
  if expected_calls is not None and len(calls) != expected_calls - drop_first:
    warning = (f"split into {len(calls)} calls ({how}), expected {expected_calls - drop_first}; "
               "medians are over what was found")
  counts_mode = collections.Counter(counts).most_common(1)[0][0]
  return {
      "calls": len(calls),
      "split": how,
      "span_us": statistics.median(spans),
      "span_min_us": min(spans),
      "span_p90_us": sorted(spans)[min(len(spans) - 1, int(0.9 * len(spans)))],
      "sum_us": statistics.median(sums),
      "spans_us": spans,
      "sums_us": sums,
      "events_per_call": counts_mode,
      "events_per_call_all": counts,
      "kernels": [{"name": n, "median_us": statistics.median(d), "count": len(d),
                   "details": details.get(n)} for n, d in durations.items()],
      "warning": warning,
  }
