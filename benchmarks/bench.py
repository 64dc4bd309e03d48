"""jax_argreduce vs jnp.argmax: GPU time per call from the profiler trace, as SPEC §3 says.

What it measures, in ONE process on the SAME inputs
---------------------------------------------------
For every case (shape rows x cols, dtype, op argmax/argmin) it times

- ``jax_argreduce`` with ``method="auto"`` (the public path), and with ``--methods`` also
  ``"kernel"`` (always the FFI handler) and ``"xla"`` (our exact integer-key fallback);
- the reference ``jnp.argmax`` / ``jnp.argmin`` (over the last axis);
- with ``--torch``, ``torch.argmax`` on the same buffers (DLPack; CUDA events around one call
  queued behind a GPU sleep, so GPU time without host launch gaps: not a span).

Two figures per case:

(a) **GPU span per call** from the JAX profiler's device trace. Each case's function is jitted
    under its own name (``bench_<impl>_<op>_<dtype>_<rows>x<cols>``), so every device event of
    it carries ``args.hlo_module == "jit_bench_..."``. Everything is compiled and warmed up
    first; then ONE ``jax.profiler.start_trace(dir, create_perfetto_trace=True)`` session runs
    each case ``--iters`` times, rotating among ``--inputs`` distinct random-normal inputs
    (never zeros), the cases of one shape/dtype interleaved in ``--rounds`` rounds (ours and
    jnp see the same inputs and the same drifts); each call runs inside a host marker
    (``jax.profiler.TraceAnnotation("bench_call:<name>:<i>")``) and is waited for
    (``block_until_ready``; optional host sleep ``--sleep-us``). From
    ``plugins/profile/<run>/<host>.trace.json.gz`` the GPU events (kernels, memsets, memcpys
    on the ``Stream #`` lines) of each module are cut into calls by those markers (an event
    belongs to the last marker that started before it: exact, since each call is waited for;
    fallbacks in ``trace_util.split_calls``). Per call: the **span** (first event start to
    last event end, launch gaps between a call's kernels included: the number quoted) and the
    **sum** of event durations; the median over calls is reported, with the kernel names and
    their ``kernel_details`` (grid, block, registers).
(b) **Wall time per call** inside one jitted program that reduces ``--wall-r`` (16) distinct
    inputs passed as a tuple (R separate reductions of the same shape, not vmap), timed with
    ``time.perf_counter`` around ``block_until_ready``, median of ``--wall-repeats``, / R.
    Measured outside the trace session.

Bandwidth: bytes read (rows*cols*itemsize) / span, against the device's copy bandwidth
measured at start in the same process and trace: a jitted ``jnp.copy`` of a ``--copy-mib``
(2048) MiB float32 buffer, (bytes read + bytes written) / span (about 4.3 TB/s on an H200).

Launch geometry: ``jax_argreduce._ffi.cuda_launch_plan(rows, cols, dtype)`` where the CUDA
handler is built and a GPU is present (path, team, blocks_per_row, grid, block), and the
trace's ``kernel_details`` for us and for XLA.

Outputs (``--out DIR``, default this folder): a table on stdout, ``results.json`` (all raw
numbers + environment), ``BENCHMARKS.md`` (table, SPEC §4 targets met/missed, geometry) and
``speedup.png`` (jnp span / our span per shape, float32 and bfloat16; needs matplotlib).

Running it on the GPU machine (H200, jax with the CUDA plugin, package built with nvcc; on
this workplace's image put ``/opt/torch/.venv/bin:/usr/local/cuda/bin`` first on PATH: the
bare ``pip`` there is a system one without scikit-build-core; ``--target /tmp/ja`` plus
``PYTHONPATH=/tmp/ja`` builds beside an existing install; seen taking ~20 s)::

    python3 -m pip install --no-build-isolation --no-deps -e .   # CUDA handler if nvcc found
    python3 benchmarks/bench.py                  # full SPEC §3 table: ~30 s on an H200
    python3 benchmarks/bench.py --methods auto,kernel,xla --argmin --torch
    python3 benchmarks/bench.py --shapes 1x202048,4096x4096 --dtypes bfloat16 --iters 50

On a machine without a GPU (development): the trace holds CPU events only, so the span
columns are empty and only wall times are reported (``--cpu-events`` takes the CPU executor's
events instead, to exercise the trace parsing); results then go to a temporary folder unless
``--out`` is given, so CPU numbers never land in ``benchmarks/results.json``. ``--quick`` runs a
few small shapes with fewer iterations.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import trace_util  # noqa: E402

SPEC_SHAPES = [(1, 32000), (1, 128256), (1, 202048), (1, 262144), (8, 202048), (32, 202048),
               (256, 202048), (4096, 8), (4096, 128), (4096, 4096), (65536, 64), (65536, 1024)]
QUICK_SHAPES = [(1, 32000), (8, 20000), (4096, 8), (1024, 128), (256, 1024)]
ARGMIN_SHAPES = [(1, 202048), (8, 202048), (4096, 4096), (65536, 64)]
DTYPE_NAMES = {"float32": "float32", "f32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
               "float16": "float16", "f16": "float16"}
SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
METHODS = ("auto", "kernel", "xla")
LARGE_SHAPES = [(4096, 4096), (65536, 1024), (256, 202048)]


# ---------------------------------------------------------------------------------------------
# Arguments and environment


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--shapes", help="comma-separated ROWSxCOLS (default: SPEC §3's twelve)")
  p.add_argument("--dtypes", default="float32,bfloat16", help="float32,bfloat16 (f32, bf16)")
  p.add_argument("--methods", default="auto", help="jax_argreduce methods: auto,kernel,xla")
  p.add_argument("--argmin", action="store_true",
                 help=f"also argmin on {', '.join(f'{r}x{c}' for r, c in ARGMIN_SHAPES)} "
                      "(those selected; with --quick on the quick shapes)")
  p.add_argument("--iters", type=int, default=None, help="traced calls per case (30; quick 10)")
  p.add_argument("--inputs", type=int, default=4, help="distinct inputs rotated among (4)")
  p.add_argument("--warmup", type=int, default=3, help="untraced calls per case first (3)")
  p.add_argument("--sleep-us", type=float, default=0.0,
                 help="host sleep after each traced call (0: calls are split by host markers; "
                      "a sleep only helps the gap fallback)")
  p.add_argument("--rounds", type=int, default=3,
                 help="traced calls of a shape/dtype run in this many rounds, cases "
                      "interleaved (3)")
  p.add_argument("--gap-us", type=float, default=50.0,
                 help="fallback split: a gap longer than this starts a new call (50)")
  p.add_argument("--wall-r", type=int, default=None,
                 help="distinct inputs reduced in one jitted program for wall time (16; quick 4)")
  p.add_argument("--wall-repeats", type=int, default=None, help="timed runs of it (10; quick 5)")
  p.add_argument("--copy-mib", type=int, default=None,
                 help="buffer for the copy-bandwidth reference (2048 on GPU, 64 on CPU/quick)")
  p.add_argument("--out", help="output folder (default: benchmarks/; a temp folder off-GPU)")
  p.add_argument("--trace-dir", help="where the profiler writes (default: a temp folder)")
  p.add_argument("--keep-trace", action="store_true", help="do not delete a temp trace folder")
  p.add_argument("--quick", action="store_true", help="small shapes, fewer iterations")
  p.add_argument("--torch", action="store_true", help="add torch.argmax (CUDA events)")
  p.add_argument("--no-plot", action="store_true", help="skip speedup.png")
  p.add_argument("--cpu-events", action="store_true",
                 help="without a GPU, take the CPU executor's trace events as 'device' events "
                      "(development only: exercises the trace parsing)")
  p.add_argument("--no-command-buffers", action="store_true",
                 help="set XLA_FLAGS=--xla_gpu_enable_command_buffer= (no CUDA graphs)")
  p.add_argument("--no-check", action="store_true", help="skip the result check vs jnp")
  a = p.parse_args(argv)

  if a.shapes:
    a.shape_list = [_parse_shape(s) for s in a.shapes.split(",") if s.strip()]
  else:
    a.shape_list = list(QUICK_SHAPES if a.quick else SPEC_SHAPES)
  a.dtype_list = []
  for d in a.dtypes.split(","):
    d = d.strip()
    if d not in DTYPE_NAMES:
      p.error(f"unknown dtype {d!r}; use float32, bfloat16 or float16")
    a.dtype_list.append(DTYPE_NAMES[d])
  a.method_list = [m.strip() for m in a.methods.split(",") if m.strip()]
  for m in a.method_list:
    if m not in METHODS:
      p.error(f"unknown method {m!r}; use {', '.join(METHODS)}")
  if a.iters is None:
    a.iters = 10 if a.quick else 30
  if a.wall_r is None:
    a.wall_r = 4 if a.quick else 16
  if a.wall_repeats is None:
    a.wall_repeats = 5 if a.quick else 10
  if a.iters < 1 or a.inputs < 1 or a.wall_r < 1 or a.wall_repeats < 1:
    p.error("--iters, --inputs, --wall-r, --wall-repeats must be >= 1")
  return a


def _parse_shape(s: str) -> tuple[int, int]:
  try:
    r, c = s.lower().strip().split("x")
    return int(r), int(c)
  except ValueError:
    raise SystemExit(f"bad shape {s!r}: use ROWSxCOLS, e.g. 1x202048")


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
  line = out.strip().splitlines()[0] if out.strip() else ""
  fields = [f.strip() for f in line.split(",")]
  keys = ["name", "driver_version", "memory_total", "max_sm_clock", "max_mem_clock"]
  return dict(zip(keys, fields)) if len(fields) >= 2 else {}


def environment(jax, device) -> dict:
  import jaxlib
  import numpy as np
  smi = _nvidia_smi()
  env = {
      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "host": platform.node(),
      "python": platform.python_version(),
      "jax": jax.__version__,
      "jaxlib": getattr(jaxlib, "__version__", "?"),
      "numpy": np.__version__,
      "backend": jax.default_backend(),
      "platform_version": None,
      "device_kind": getattr(device, "device_kind", str(device)),
      "gpu_name": smi.get("name") or getattr(device, "device_kind", None),
      "driver_version": smi.get("driver_version"),
      "nvidia_smi": smi or None,
      "compute_capability": getattr(device, "compute_capability", None),
      "core_count": getattr(device, "core_count", None),
      "xla_flags": os.environ.get("XLA_FLAGS", ""),
  }
  try:
    env["platform_version"] = jax.extend.backend.get_backend().platform_version
  except Exception:  # noqa: BLE001
    try:
      env["platform_version"] = device.client.platform_version
    except Exception:  # noqa: BLE001
      pass
  if not env["driver_version"] and env["platform_version"]:
    env["driver_version"] = f"(nvidia-smi absent) {env['platform_version']}"
  try:
    import jax_argreduce
    from jax_argreduce import _argreduce, _ffi
    env["jax_argreduce"] = getattr(jax_argreduce, "__version__", "?")
    env["jax_argreduce_module"] = getattr(_argreduce, "__file__", None)
    env["has_cuda"] = bool(_ffi.HAS_CUDA)
  except Exception as e:  # noqa: BLE001
    env["jax_argreduce_error"] = repr(e)
  return env


# ---------------------------------------------------------------------------------------------
# Cases


class Case:
  """One timed function: ``impl`` is ja_auto / ja_kernel / ja_xla / jnp / torch."""

  def __init__(self, group, impl, name, fn, wall_fn):
    self.group, self.impl, self.name, self.fn, self.wall_fn = group, impl, name, fn, wall_fn
    self.trace = None
    self.wall_us = None
    self.wall_samples = []
    self.match = None
    self.torch_us = None


class Group:
  """Cases sharing shape, dtype and op (so they share inputs)."""

  def __init__(self, rows, cols, dtype, op):
    self.rows, self.cols, self.dtype, self.op = rows, cols, dtype, op
    self.cases: list[Case] = []
    self.plan = None
    self.torch = None

  @property
  def tag(self):
    return f"{self.op}_{SHORT[self.dtype]}_{self.rows}x{self.cols}"

  @property
  def shape_str(self):
    return f"{self.rows}x{self.cols}"

  def case(self, impl):
    return next((c for c in self.cases if c.impl == impl), None)


def _named_jit(jax, name, body):
  """jax.jit of ``body`` under ``name``: the module (and every trace event) is ``jit_<name>``."""
  def f(*args):
    return body(*args)
  f.__name__ = name
  f.__qualname__ = name
  return jax.jit(f)


def build_groups(args, jax, jnp):
  from jax_argreduce import _api
  groups = []
  argmin_shapes = set(args.shape_list if args.quick else ARGMIN_SHAPES) & set(args.shape_list)
  ops = [("argmax", False)] + ([("argmin", True)] if args.argmin else [])
  for rows, cols in args.shape_list:
    for dtype in args.dtype_list:
      for op, is_min in ops:
        if is_min and (rows, cols) not in argmin_shapes:
          continue
        g = Group(rows, cols, dtype, op)
        ref = jnp.argmin if is_min else jnp.argmax
        for method in args.method_list:
          red = (lambda m, mn: lambda x: _api._argreduce(x, -1, False, is_min=mn, method=m))(
              method, is_min)
          name = f"bench_ja_{method}_{g.tag}"
          g.cases.append(Case(
              g, f"ja_{method}", name, _named_jit(jax, name, red),
              _named_jit(jax, "wall_" + name[6:], lambda *xs, red=red: tuple(red(x) for x in xs))))
        red = lambda x, ref=ref: ref(x, axis=-1)
        name = f"bench_jnp_{g.tag}"
        g.cases.append(Case(g, "jnp", name, _named_jit(jax, name, red),
                            _named_jit(jax, "wall_" + name[6:],
                                       lambda *xs, red=red: tuple(red(x) for x in xs))))
        groups.append(g)
  return groups


def make_inputs(jax, jnp, rows, cols, dtype, count, seed_tag):
  """``count`` distinct random-normal [rows, cols] arrays; input i is the same for any count."""
  base = jax.random.key(zlib.crc32(f"{rows}x{cols}:{dtype}:{seed_tag}".encode()) % (2**31))
  return [jax.random.normal(jax.random.fold_in(base, i), (rows, cols), dtype=jnp.dtype(dtype))
          for i in range(count)]


def launch_plan(g, gpu: bool):
  """What the CUDA handler will launch for this group (None off-GPU or without CUDA)."""
  if not gpu:
    return None
  try:
    from jax_argreduce import _ffi, _primitive
    if not _ffi.HAS_CUDA:
      return {"path": "xla (package built without CUDA)"}
    plan = _ffi.cuda_launch_plan(g.rows, g.cols, g.dtype, g.op == "argmin")
    plan["auto_uses_kernel"] = _primitive._cuda_kernel_wins((g.rows, g.cols), g.dtype)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in plan.items()}
  except Exception as e:  # noqa: BLE001 - informational
    return {"error": repr(e)}


def plan_string(plan, impl) -> str:
  if not plan:
    return ""
  if "error" in plan:
    return "plan error"
  if impl == "ja_xla" or (impl == "ja_auto" and plan.get("auto_uses_kernel") is False):
    return "xla fallback"
  if "grid" not in plan:
    return str(plan.get("path", ""))
  dims = lambda v: "x".join(str(i) for i in v) if isinstance(v, (list, tuple)) else str(v)
  extra = []
  if plan.get("cluster"):
    extra.append(f"cluster {plan['cluster']}")
  if plan.get("team"):
    extra.append(f"team {plan['team']}")
  if plan.get("blocks_per_row") and plan["blocks_per_row"] != 1:
    extra.append(f"bpr {plan['blocks_per_row']}")
  s = f"{plan.get('path', '?')} {dims(plan['grid'])}x{dims(plan['block'])}"
  return s + (f" ({', '.join(extra)})" if extra else "")


# ---------------------------------------------------------------------------------------------
# Measurement


MARKER = "bench_call:"


def run_traced(jax, name, fn, inputs, first, stop, sleep_s):
  """Calls ``first..stop-1``, each inside a host marker ``bench_call:<name>:<i>``, waited for."""
  for i in range(first, stop):
    with jax.profiler.TraceAnnotation(f"{MARKER}{name}:{i}"):
      fn(inputs[i % len(inputs)]).block_until_ready()
    if sleep_s:
      time.sleep(sleep_s)


def wall_time(jax, fn, xs, repeats):
  jax.block_until_ready(fn(*xs))  # compile + warm up
  jax.block_until_ready(fn(*xs))
  samples = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*xs))
    samples.append((time.perf_counter() - t0) * 1e6 / len(xs))
  return statistics.median(samples), samples


def torch_time(inputs, op, iters):
  """torch.argmax/argmin (dim=-1) on the same buffers (DLPack, no copy): median µs per call.

  Each call is bracketed by CUDA events and queued behind ~50 µs of GPU sleep
  (``torch.cuda._sleep``), so the events time the GPU work of the call (its kernels and the
  gaps between them on the GPU) rather than torch's host dispatch: closer to our "sum"
  than to the trace span, which includes host launch gaps.
  """
  import torch
  ts = [torch.from_dlpack(x) for x in inputs]
  f = torch.argmin if op == "argmin" else torch.argmax
  for t in ts:
    f(t, dim=-1)
  torch.cuda.synchronize()
  sleep = getattr(torch.cuda, "_sleep", None)
  events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(iters)]
  for i, (start, end) in enumerate(events):
    if sleep is not None:
      sleep(100_000)  # cycles: ~50 µs at 2 GHz, longer than torch's dispatch
    start.record()
    f(ts[i % len(ts)], dim=-1)
    end.record()
    torch.cuda.synchronize()
  samples = [start.elapsed_time(end) * 1e3 for start, end in events]
  return statistics.median(samples), samples


def measure(args, jax, jnp, np):
  device = jax.devices()[0]
  gpu = device.platform == "gpu" or jax.default_backend() in ("gpu", "cuda", "rocm")
  env = environment(jax, device)
  groups = build_groups(args, jax, jnp)
  for g in groups:
    g.plan = launch_plan(g, gpu)
  notes = []

  # Copy-bandwidth reference.
  copy_mib = args.copy_mib or (2048 if gpu and not args.quick else 64)
  copy_n = copy_mib * (1 << 20) // 4
  copy_x = jax.random.normal(jax.random.key(7), (copy_n,), jnp.float32)
  copy_name = f"bench_copy_{copy_mib}MiB"
  copy_fn = _named_jit(jax, copy_name, lambda x: jnp.copy(x))
  copy_fn(copy_x).block_until_ready()
  copy_iters = max(5, min(args.iters, 10))

  # Inputs (shared by every case of a shape/dtype), compile, warm up, check.
  print(f"[bench] {len(groups)} groups, {sum(len(g.cases) for g in groups)} jitted cases on "
        f"{env['gpu_name'] or env['device_kind']} ({env['backend']}); compiling...", flush=True)
  t0 = time.perf_counter()
  inputs = {}
  for g in groups:
    key = (g.rows, g.cols, g.dtype)
    if key not in inputs:
      inputs[key] = make_inputs(jax, jnp, g.rows, g.cols, g.dtype, args.inputs, "bench")
    xs = inputs[key]
    ref = None
    for c in g.cases:
      for i in range(args.warmup):
        out = c.fn(xs[i % len(xs)])
      out.block_until_ready()
      if not args.no_check:
        got = np.asarray(c.fn(xs[0]))
        if ref is None:
          ref = np.asarray((jnp.argmin if g.op == "argmin" else jnp.argmax)(xs[0], axis=-1))
        c.match = bool(np.array_equal(got, ref))
        if not c.match:
          notes.append(f"MISMATCH: {c.name} differs from jnp.{g.op} on a random-normal input")
  print(f"[bench] compiled and warmed up in {time.perf_counter() - t0:.1f} s", flush=True)

  # One trace session around everything.
  tmp_trace = args.trace_dir is None
  trace_dir = Path(args.trace_dir or tempfile.mkdtemp(prefix="jax_argreduce_trace_"))
  trace_dir.mkdir(parents=True, exist_ok=True)
  opts = jax.profiler.ProfileOptions()
  opts.python_tracer_level = 0  # no Python frames: a smaller trace, less host overhead
  sleep_s = args.sleep_us * 1e-6
  t0 = time.perf_counter()
  jax.profiler.start_trace(str(trace_dir), create_perfetto_trace=True, profiler_options=opts)
  try:
    run_traced(jax, copy_name, copy_fn, [copy_x], 0, copy_iters, sleep_s)
    # Interleave a group's cases in rounds, so that slow drifts (clocks, host state) hit ours
    # and jnp alike.
    rounds = max(1, min(args.rounds, args.iters))
    bounds = [args.iters * r // rounds for r in range(rounds + 1)]
    for g in groups:
      xs = inputs[(g.rows, g.cols, g.dtype)]
      for r in range(rounds):
        for c in g.cases:
          run_traced(jax, c.name, c.fn, xs, bounds[r], bounds[r + 1], sleep_s)
  finally:
    jax.profiler.stop_trace()
  print(f"[bench] traced in {time.perf_counter() - t0:.1f} s", flush=True)
  del copy_x

  trace_file = trace_util.find_trace_file(trace_dir)
  trace = trace_util.load_trace(trace_file)
  device_kind = "gpu" if gpu else ("cpu" if args.cpu_events else None)
  by_module, trace_info = ({}, {}) if device_kind is None else trace_util.module_events(
      trace, device_kind)
  markers = trace_util.host_markers(trace, MARKER)
  n_events = sum(len(v) for v in by_module.values())
  if device_kind == "gpu" and not by_module:
    notes.append("no GPU events with hlo_module in the trace: reporting wall time only")
    device_kind = None
  elif device_kind is None:
    notes.append("no GPU: the trace has CPU events only, so GPU spans are not reported "
                 "(wall time only; --cpu-events exercises the parsing on CPU executor events)")
  elif device_kind == "cpu":
    notes.append("--cpu-events: 'span' columns are CPU executor event times, not GPU times")
  timing_source = {"gpu": "GPU trace", "cpu": "CPU executor trace (dev only)",
                   None: "wall time only"}[device_kind]
  print(f"[bench] trace {trace_file} ({trace_file.stat().st_size / 1e6:.1f} MB): "
        f"{n_events} device events with hlo_module in {len(by_module)} modules; "
        f"timing source: {timing_source}", flush=True)

  def summarize(name, n):
    if device_kind is None:
      return None
    s = trace_util.summarize(trace_util.events_for(by_module, "jit_" + name), n, args.gap_us,
                             markers=markers.get(name))
    if s["warning"]:
      notes.append(f"{name}: {s['warning']}")
    return s

  copy = {"mib": copy_mib, "bytes_moved": 2 * copy_n * 4, "trace": summarize(copy_name,
                                                                             copy_iters)}
  copy["bw_bytes_per_s"] = (copy["bytes_moved"] / (copy["trace"]["span_us"] * 1e-6)
                            if copy["trace"] and copy["trace"]["span_us"] else None)
  for g in groups:
    for c in g.cases:
      c.trace = summarize(c.name, args.iters)
  splits = sorted({c.trace["split"] for g in groups for c in g.cases if c.trace})
  del trace

  # Torch (optional), on the traced inputs, outside the trace.
  if args.torch:
    try:
      import torch
      if not (gpu and torch.cuda.is_available()):
        raise RuntimeError("torch sees no CUDA device")
      for g in groups:
        g.torch = torch_time(inputs[(g.rows, g.cols, g.dtype)], g.op, args.iters)[0]
    except Exception as e:  # noqa: BLE001
      notes.append(f"--torch skipped: {e!r}")
      args.torch = False
  del inputs

  # Wall time: R distinct inputs in one jitted program (copy bandwidth on the wall clock too).
  t0 = time.perf_counter()
  copy_wall = None
  if device_kind is None:  # the only copy figure off-GPU
    cx = jax.random.normal(jax.random.key(7), (copy_n,), jnp.float32)
    copy_wall = wall_time(jax, copy_fn, [cx], args.wall_repeats)[0]
    copy["bw_wall_bytes_per_s"] = copy["bytes_moved"] / (copy_wall * 1e-6)
    del cx
  wall_inputs_key, wall_xs = None, None
  for g in groups:
    key = (g.rows, g.cols, g.dtype)
    if key != wall_inputs_key:
      wall_xs = None
      wall_xs = make_inputs(jax, jnp, g.rows, g.cols, g.dtype, args.wall_r, "bench")
      wall_inputs_key = key
    for c in g.cases:
      c.wall_us, c.wall_samples = wall_time(jax, c.wall_fn, wall_xs, args.wall_repeats)
  del wall_xs
  print(f"[bench] wall times in {time.perf_counter() - t0:.1f} s", flush=True)

  if tmp_trace and not args.keep_trace:
    shutil.rmtree(trace_dir, ignore_errors=True)
    trace_dir_note = f"{trace_dir} (deleted; --keep-trace keeps it)"
  else:
    trace_dir_note = str(trace_dir)

  return {
      "env": env, "groups": groups, "copy": copy, "notes": notes, "gpu": gpu,
      "timing_source": timing_source, "has_spans": device_kind is not None,
      "trace": {"dir": trace_dir_note, "file": trace_file.name, "splits": splits,
                "events": n_events, **trace_info},
  }


# ---------------------------------------------------------------------------------------------
# Reporting


def _fmt(v, spec=".2f", none="-"):
  return none if v is None else format(v, spec)


def rows_for_report(res, args):
  """One row per (group, our method): ours vs jnp, all numbers the table shows."""
  copy_bw = res["copy"].get("bw_bytes_per_s") or res["copy"].get("bw_wall_bytes_per_s")
  out = []
  for g in res["groups"]:
    ref = g.case("jnp")
    for c in g.cases:
      if c.impl == "jnp":
        continue
      ours_span = c.trace["span_us"] if c.trace else None
      ref_span = ref.trace["span_us"] if ref.trace else None
      nbytes = g.rows * g.cols * {"float32": 4, "bfloat16": 2, "float16": 2}[g.dtype]
      t = ours_span if ours_span else c.wall_us
      bw = nbytes / (t * 1e-6) if t else None
      geo = plan_string(g.plan, c.impl)
      if not geo and c.trace and c.trace["kernels"]:
        d = c.trace["kernels"][0].get("details")
        geo = trace_util.geometry_string(d) if d else ""
      out.append({
          "shape": g.shape_str, "rows": g.rows, "cols": g.cols, "dtype": g.dtype, "op": g.op,
          "method": c.impl[3:], "ours_span_us": ours_span, "jnp_span_us": ref_span,
          "ratio_span": (ref_span / ours_span) if ours_span and ref_span else None,
          "ours_sum_us": c.trace["sum_us"] if c.trace else None,
          "jnp_sum_us": ref.trace["sum_us"] if ref.trace else None,
          "ours_kernels": c.trace["events_per_call"] if c.trace else None,
          "jnp_kernels": ref.trace["events_per_call"] if ref.trace else None,
          "ours_wall_us": c.wall_us, "jnp_wall_us": ref.wall_us,
          "ratio_wall": (ref.wall_us / c.wall_us) if c.wall_us and ref.wall_us else None,
          "bytes_read": nbytes, "gbps": bw / 1e9 if bw else None,
          "pct_copy_bw": 100 * bw / copy_bw if bw and copy_bw else None,
          "bw_basis": "span" if ours_span else "wall",
          "geometry": geo, "torch_us": g.torch, "match": c.match,
      })
  return out



def _row_cells(r, torch: bool, markdown: bool) -> list[str]:
  """One result row's cells, for the console table or (markdown) BENCHMARKS.md."""
  op = r["op"] if r["method"] == "auto" else (
      f"{r['op']} [{r['method']}]" if markdown else f"{r['op']}[{r['method']}]")
  sep = " / " if markdown else "/"
  mismatch = " **MISMATCH**" if markdown else " MISMATCH"
  cells = [r["shape"], r["dtype"] if markdown else SHORT[r["dtype"]], op,
           _fmt(r["ours_span_us"]), _fmt(r["jnp_span_us"]), _fmt(r["ratio_span"]),
           _fmt(r["ours_sum_us"]), f"{_fmt(r['ours_kernels'], 'd')}/{_fmt(r['jnp_kernels'], 'd')}",
           f"{_fmt(r['ours_wall_us'], '.1f')}{sep}{_fmt(r['jnp_wall_us'], '.1f')}",
           _fmt(r["gbps"], ".0f"), _fmt(r["pct_copy_bw"], ".0f"),
           r["geometry"] + ("" if r["match"] in (True, None) else mismatch)]
  if torch:
    cells.insert(5, _fmt(r["torch_us"]))
  return cells


def print_table(rows, res, args):
  hdr = ["shape", "dtype", "op", "ours µs", "jnp µs", "jnp/ours", "ours sum", "#k o/j",
         "wall o/j µs", "GB/s", "%copy", "path/geometry"]
  if args.torch:
    hdr.insert(5, "torch µs")
  lines = [_row_cells(r, args.torch, markdown=False) for r in rows]
  widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h)
            for i, h in enumerate(hdr)]
  fmt_row = lambda cells: "  ".join(c.rjust(w) if 2 < i < len(cells) - 1 else c.ljust(w)
                                    for i, (c, w) in enumerate(zip(cells, widths)))
  print()
  print(fmt_row(hdr))
  print(fmt_row(["-" * w for w in widths]))
  for l in lines:
    print(fmt_row(l))
  print()


def evaluate_targets(rows, res):
  """SPEC §4 targets, met/missed from this run's numbers (argmax, method auto, span)."""
  if not res["has_spans"] or res["timing_source"] != "GPU trace":
    why = "not evaluated: no GPU trace spans in this run (" + res["timing_source"] + ")"
    names = ["never slower than jnp.argmax (any shape, dtype)",
             "1-8 rows x >=32k cols: one launch, span <= 3.0 us",
             "large inputs (4096x4096, 65536x1024, 256x202048): >= 90% of copy bandwidth",
             "bfloat16 4096x4096 <= 8.5 us, 65536x1024 <= 33 us",
             "65536x64: <= 5.5 us float32, <= 4 us bfloat16"]
    return [{"target": n, "status": "not evaluated", "detail": why} for n in names] + [
        {"target": "fused Gumbel-max sampling", "status": "not measured",
         "detail": "not part of this benchmark"}]
  auto = [r for r in rows if r["method"] == "auto" and r["ours_span_us"]]
  am = [r for r in auto if r["op"] == "argmax"]
  find = lambda shape, dt: next((r for r in am if (r["rows"], r["cols"]) == shape
                                 and r["dtype"] == dt), None)
  out = []

  def add(name, checks):
    """checks: list of (label, ok or None if not measured, text)."""
    measured = [c for c in checks if c[1] is not None]
    if not measured:
      out.append({"target": name, "status": "not measured", "detail": "shapes not in this run"})
      return
    bad = [c for c in measured if not c[1]]
    status = "met" if not bad else "missed"
    missing = [c[0] for c in checks if c[1] is None]
    detail = "; ".join(f"{c[0]}: {c[2]}" for c in (bad or measured))
    if missing:
      detail += f" (not measured: {', '.join(missing)})"
      if status == "met":
        status = "met (partial)"
    out.append({"target": name, "status": status, "detail": detail, "checks": [
        {"case": c[0], "ok": c[1], "value": c[2]} for c in checks]})

  add("never slower than jnp (every shape, dtype and op measured, method auto)",
      [(f"{r['op']} {SHORT[r['dtype']]} {r['shape']}",
        r["jnp_span_us"] is not None and r["ours_span_us"] <= r["jnp_span_us"],
        f"{r['ours_span_us']:.2f} vs {_fmt(r['jnp_span_us'])} us") for r in auto])
  checks = []
  for rows_, cols in [s for s in SPEC_SHAPES if s[0] <= 8 and s[1] >= 32000]:
    for dt in ("float32", "bfloat16"):
      r = find((rows_, cols), dt)
      lab = f"{SHORT[dt]} {rows_}x{cols}"
      checks.append((lab, None, "") if r is None else (
          lab, r["ours_span_us"] <= 3.0 and r["ours_kernels"] == 1,
          f"{r['ours_span_us']:.2f} us, {r['ours_kernels']} launch(es)"))
  add("1-8 rows x >=32k cols: one launch, span <= 3.0 us", checks)
  checks = []
  for shape in LARGE_SHAPES:
    for dt in ("float32", "bfloat16"):
      r = find(shape, dt)
      lab = f"{SHORT[dt]} {shape[0]}x{shape[1]}"
      checks.append((lab, None, "") if r is None or r["pct_copy_bw"] is None else (
          lab, r["pct_copy_bw"] >= 90.0, f"{r['pct_copy_bw']:.0f}% ({r['gbps']:.0f} GB/s)"))
  add("large inputs (4096x4096, 65536x1024, 256x202048): >= 90% of copy bandwidth, f32 and bf16",
      checks)
  checks = []
  for shape, limit in [((4096, 4096), 8.5), ((65536, 1024), 33.0)]:
    r = find(shape, "bfloat16")
    lab = f"bf16 {shape[0]}x{shape[1]} <= {limit} us"
    checks.append((lab, None, "") if r is None else (
        lab, r["ours_span_us"] <= limit, f"{r['ours_span_us']:.2f} us"))
  add("bfloat16 4096x4096 <= 8.5 us, 65536x1024 <= 33 us", checks)
  checks = []
  for dt, limit in [("float32", 5.5), ("bfloat16", 4.0)]:
    r = find((65536, 64), dt)
    lab = f"{SHORT[dt]} 65536x64 <= {limit} us"
    checks.append((lab, None, "") if r is None else (
        lab, r["ours_span_us"] <= limit, f"{r['ours_span_us']:.2f} us"))
  add("65536x64: <= 5.5 us float32, <= 4 us bfloat16", checks)
  out.append({"target": "fused Gumbel-max sampling (1x202048 <= 3.5 us, 256x202048 <= 80 us)",
              "status": "not measured", "detail": "not part of this benchmark"})
  return out


def write_json(path, res, rows, targets, args):
  def case_dict(c):
    return {"impl": c.impl, "name": c.name, "hlo_module": "jit_" + c.name, "trace": c.trace,
            "wall_us": c.wall_us, "wall_samples_us": c.wall_samples, "matches_jnp": c.match}
  data = {
      "env": res["env"],
      "config": {"shapes": [f"{r}x{c}" for r, c in args.shape_list], "dtypes": args.dtype_list,
                 "methods": args.method_list, "argmin": args.argmin, "iters": args.iters,
                 "inputs": args.inputs, "warmup": args.warmup, "sleep_us": args.sleep_us, "rounds": args.rounds,
                 "gap_us": args.gap_us, "wall_r": args.wall_r, "wall_repeats": args.wall_repeats,
                 "quick": args.quick, "torch": args.torch, "argv": sys.argv[1:]},
      "timing_source": res["timing_source"],
      "trace": res["trace"],
      "copy_bandwidth": {**res["copy"],
                         "tb_per_s": (res["copy"].get("bw_bytes_per_s") or 0) / 1e12 or None},
      "rows": rows,
      "targets": targets,
      "groups": [{"shape": g.shape_str, "dtype": g.dtype, "op": g.op, "launch_plan": g.plan,
                  "torch_us": g.torch, "cases": [case_dict(c) for c in g.cases]}
                 for g in res["groups"]],
      "notes": res["notes"],
  }
  path.write_text(json.dumps(data, indent=1, default=str) + "\n")


def write_markdown(path, res, rows, targets, args, plot_name):
  env, copy = res["env"], res["copy"]
  bw = copy.get("bw_bytes_per_s")
  bw_txt = (f"{bw / 1e12:.2f} TB/s (jitted jnp.copy of {copy['mib']} MiB, read + write, "
            "trace span)" if bw else
            f"{(copy.get('bw_wall_bytes_per_s') or 0) / 1e9:.1f} GB/s (wall clock; no GPU trace)")
  L = ["# jax_argreduce benchmarks", "",
       f"- date: {env['date']}",
       f"- GPU: {env['gpu_name'] or env['device_kind']} (backend {env['backend']}"
       + (f", compute capability {env['compute_capability']}" if env.get("compute_capability")
          else "")
       + (f", {env['core_count']} SMs" if env.get("core_count") else "") + ")",
       f"- driver: {env.get('driver_version')}",
       f"- jax {env['jax']}, jaxlib {env['jaxlib']}, platform {env.get('platform_version')}, "
       f"python {env['python']}, jax_argreduce {env.get('jax_argreduce')} "
       f"(CUDA handler built: {env.get('has_cuda')})",
       f"- copy bandwidth: {bw_txt}",
       f"- timing source: {res['timing_source']}",
       f"- command: `python benchmarks/bench.py {' '.join(sys.argv[1:])}`".rstrip(), "",
       "## Method", "",
       "SPEC §3. Each case is jitted under its own name and run "
       f"{args.iters} times (after {args.warmup} warm-up calls) inside one "
       "`jax.profiler.start_trace(..., create_perfetto_trace=True)` session, rotating among "
       f"{args.inputs} random-normal inputs, ours and jnp interleaved in {args.rounds} rounds; "
       "each call inside a host marker (`TraceAnnotation`) and waited for "
       f"(`block_until_ready`), host sleep {args.sleep_us:g} µs. The device events (kernels, memsets) whose `args.hlo_module` is "
       f"`jit_<name>` are split into calls (by {', '.join(res['trace']['splits']) or '-'}); "
       "**span** = first event start to last event end of a call, **sum** = sum of event "
       "durations; medians over calls. *jnp/ours* = jnp span / our span (> 1: we are faster). "
       f"*wall* = one jitted program reducing {args.wall_r} distinct inputs, "
       f"perf_counter around block_until_ready, median of {args.wall_repeats}, / "
       f"{args.wall_r}. GB/s = bytes read / span ({'span' if res['has_spans'] else 'wall'}); "
       "%copy = that over the copy bandwidth. *#k o/j* = device events per call, ours/jnp."
       + (" *torch* = CUDA events around one `torch.argmax` queued behind a GPU sleep: GPU "
          "time without host launch gaps, so not comparable with the spans." if args.torch
          else ""), ""]
  hdr = ["shape", "dtype", "op", "ours µs", "jnp µs", "jnp/ours", "ours sum µs", "#k o/j",
         "wall ours/jnp µs", "GB/s", "% copy", "path / geometry"]
  if args.torch:
    hdr.insert(5, "torch µs")
  L += ["## Results", "", "| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
  for r in rows:
    L.append("| " + " | ".join(_row_cells(r, args.torch, markdown=True)) + " |")
  L += ["", "## SPEC §4 targets", "",
        "Computed from the numbers above (argmax unless stated, method auto, trace span).", ""]
  for t in targets:
    L.append(f"- **{t['status']}** — {t['target']}: {t['detail']}")
  L += ["", "## Kernels and launch geometry", "",
        "From the trace's `kernel_details` (median duration per call) and, for ours, "
        "`cuda_launch_plan`.", "", "| shape | dtype | op | impl | kernel | µs | geometry |",
        "|---|---|---|---|---|---|---|"]
  any_kernel = False
  for g in res["groups"]:
    for c in g.cases:
      for k in (c.trace or {}).get("kernels", []):
        any_kernel = True
        name = k["name"] if len(k["name"]) <= 60 else k["name"][:57] + "..."
        geo = trace_util.geometry_string(k["details"]) if k.get("details") else ""
        L.append(f"| {g.shape_str} | {g.dtype} | {g.op} | {c.impl} | `{name}` | "
                 f"{k['median_us']:.2f} | {geo} |")
  if not any_kernel:
    L.append("| - | - | - | - | (no device events) | - | - |")
  if plot_name:
    L += ["", f"![speedup]({plot_name})"]
  if res["notes"]:
    L += ["", "## Notes", ""] + [f"- {n}" for n in res["notes"]]
  path.write_text("\n".join(L) + "\n")


def write_plot(path, rows, res):
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    print("[bench] matplotlib is not installed: skipping the plot")
    return False
  key = "ratio_span" if res["has_spans"] else "ratio_wall"
  sel = [r for r in rows if r["method"] == "auto" and r["op"] == "argmax"]
  shapes = list(dict.fromkeys(r["shape"] for r in sel))
  dts = list(dict.fromkeys(r["dtype"] for r in sel))
  if not shapes:
    return False
  fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(shapes) + 2), 4.5))
  width = 0.8 / max(1, len(dts))
  for j, dt in enumerate(dts):
    vals = [next((r[key] for r in sel if r["shape"] == s and r["dtype"] == dt), None) or 0
            for s in shapes]
    xs = [i + (j - (len(dts) - 1) / 2) * width for i in range(len(shapes))]
    bars = ax.bar(xs, vals, width, label=dt)
    for b, v in zip(bars, vals):
      if v:
        ax.annotate(f"{v:.2f}", (b.get_x() + b.get_width() / 2, v), ha="center",
                    va="bottom", fontsize=7)
  ax.axhline(1.0, color="k", lw=1, ls="--")
  ax.set_xticks(range(len(shapes)))
  ax.set_xticklabels(shapes, rotation=35, ha="right")
  what = "GPU span" if res["timing_source"] == "GPU trace" else (
      "CPU executor span" if res["has_spans"] else "wall time")
  ax.set_ylabel(f"jnp.argmax / jax_argreduce ({what})")
  env = res["env"]
  ax.set_title(f"argmax speedup over jnp.argmax — {env['gpu_name'] or env['device_kind']}, "
               f"jax {env['jax']}", fontsize=10)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return True


def main(argv=None):
  args = parse_args(argv)
  if args.no_command_buffers:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_gpu_enable_command_buffer=").strip()
  import jax
  import jax.numpy as jnp
  import numpy as np

  res = measure(args, jax, jnp, np)
  rows = rows_for_report(res, args)
  targets = evaluate_targets(rows, res)

  env = res["env"]
  bw = res["copy"].get("bw_bytes_per_s")
  print(f"{env['gpu_name'] or env['device_kind']} | driver {env.get('driver_version')} | "
        f"jax {env['jax']} | timing: {res['timing_source']} | copy bandwidth: "
        + (f"{bw / 1e12:.2f} TB/s (trace)" if bw else
           f"{(res['copy'].get('bw_wall_bytes_per_s') or 0) / 1e9:.1f} GB/s (wall)"))
  print_table(rows, res, args)
  for t in targets:
    print(f"  [{t['status']}] {t['target']}: {t['detail']}")
  for n in res["notes"]:
    print(f"  note: {n}")

  if args.out:
    out = Path(args.out)
  elif res["timing_source"] == "GPU trace":
    out = HERE
  else:
    out = Path(tempfile.mkdtemp(prefix="jax_argreduce_bench_"))
    print(f"[bench] no GPU trace: writing to {out}, not {HERE} (pass --out to choose)")
  out.mkdir(parents=True, exist_ok=True)
  plot_name = None
  if not args.no_plot and write_plot(out / "speedup.png", rows, res):
    plot_name = "speedup.png"
  write_json(out / "results.json", res, rows, targets, args)
  write_markdown(out / "BENCHMARKS.md", res, rows, targets, args, plot_name)
  print(f"[bench] wrote {out / 'results.json'}, {out / 'BENCHMARKS.md'}"
        + (f", {out / plot_name}" if plot_name else ""))
  return 0


if __name__ == "__main__":
  sys.exit(main())
