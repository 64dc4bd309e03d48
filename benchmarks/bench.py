"""jax_argreduce vs the JAX reference: device time from the profiler trace (SPEC §3, §3b, §4).

    python benchmarks/bench.py [MODES] [options]      MODES: comma-separated, default "all"

Modes (one process, same inputs for ours and the reference; timing in benchmarks/timing.py):

  chain     SPEC §3b, the figure users feel: an unrolled ``lax.scan`` of K=16 decode-like steps,
            ``logits = h @ W`` ([B,256] x [256,V]), ``tok = pick(logits)``, ``h = 0.5*h + E[tok]``.
            Per step: program span / K. Reported: step(ours) - step(ref) (µs, negative =
            faster), our kernels' device time per step (events of our custom call / our
            ``jax_argreduce`` kernels), the reference pick's estimated device time per step
            (Δ + ours), and the isolated spans of the same [B, V] pick beside them. Picks:
            argmax (vs ``jnp.argmax``) and, where the package has it, ``categorical`` (keys
            folded per step; vs ``jax.random.categorical(key, logits / T)``). ``--rolled``:
            the same chain as a rolled scan (a while loop, as decode loops are usually written).
            ``--keys split``: the step keys from one ``jax.random.split(key, K)`` before the
            loop, scanned over, instead of ``fold_in(key, i)`` per step (NOTES.md try 72: a
            per-step fold_in is a kernel of its own before our call). top_k (vs
            ``jax.lax.top_k``) picks the token at place ``step % k`` of its k indices.
  isolated  SPEC §3: per op and shape, span per call (median), kernel sum, device events per
            call, wall time per call inside a jitted program reducing R distinct inputs,
            GB/s and % of the copy bandwidth measured in the same trace, launch path/geometry.
            Ops: argmax/argmin (vs jnp.argmax/argmin), max_with_index (vs ``jnp.max`` and
            ``jnp.argmax`` in one jit: what users write, and XLA may fuse the two reductions
            into one multi-output kernel, so it is the cheapest exact-enough jnp reference),
            categorical (vs ``jax.random.categorical(key, logits / T)``, plus our argmax of
            the same logits as ``ours:argmax``), top_k at each ``--ks`` k (vs
            ``jax.lax.top_k``, plus ``ours:argmax``: the one-read floor).
            filtered_categorical (SPEC §1f, §3c; chain and isolated): one case per ``--filters``
            configuration, labelled ``categorical@<filters>`` (``categorical@k50p0.9``: top_k=50,
            top_p=0.9; ``@p0.9``; ``@minp0.05``), ``jax_argreduce.categorical(key, logits,
            temperature=T, top_k=.., top_p=.., min_p=..)`` vs the JAX sort-based sampler of
            examples/jax_samplers.py (``lax.top_k`` + categorical over the k; sort, softmax,
            cumsum, mask; min-p mask), with our unfiltered categorical (``ours:categorical``,
            the same-run baseline: the rows' ``÷ base``) and ``jax.random.categorical``
            (unfiltered) beside. Isolated, our samples on a few rows are checked to lie in
            the kept set (numpy, float64).
  example   examples/sample.py's own decode step (vocab 202048, batch 8, dim 256, 2 layers,
            heads 4), greedy and sample, float32 and bfloat16: device span per step, ours vs
            the reference picker, same run.
  sharded   issues 11, 45: a 1-D mesh over all devices, rows sharded and vocab sharded
            inputs: span per call (largest per-device span), ours vs the reference on the same
            sharded input and both on one device; the collectives in each compiled module;
            ours vs the one-device result. argmax (vs ``jnp.argmax`` and numpy) unless
            ``--ops`` names top_k (vs ``lax.top_k``) or filtered_categorical (vs the JAX
            sampler; ours must equal our unsharded sample). Off-GPU it runs on
            ``--host-devices`` (4) virtual CPU devices.
  all       chain,isolated,example.

Outputs go to ``--out DIR`` (default: a new temporary folder, printed), never into the source
tree unless asked: ``results.json`` (every raw number), ``BENCHMARKS.md`` (in-chain table first,
then the example, isolated, sharded, SPEC §4 targets met/missed from benchmarks/targets.py,
kernels, environment, method). ``--summary PATH`` also writes the medians per case (the file to
commit as ``benchmarks/results_summary.json``).

Forcing paths: ``--methods auto,kernel,xla`` (our "auto" route, the FFI handler, the exact XLA
path). Kernel variants in one process: ``--variants "base=;nopdl=pdl:false"`` calls
``jax_argreduce._ffi.debug_set_plan_options(**options)`` before each variant's calls (the
options read at start plus the variant's), each variant its own impl ``ours[name]``.

Without a GPU the trace has no GPU events: ``--cpu-events`` takes the CPU executor's events
instead (development only: exercises the trace parsing; the numbers are CPU times). ``--quick``
runs tiny shapes with few iterations (CPU smoke test of every mode).

    python3 benchmarks/bench.py --out /tmp/b                       # all single-device modes
    python3 benchmarks/bench.py chain --dtypes bf16 --shapes 8x202048,256x202048
    python3 benchmarks/bench.py isolated --ops argmax,argmin --methods auto,kernel,xla
    python3 benchmarks/bench.py chain,isolated --ops filtered_categorical \\
        --filters k50p0.9,p0.9,minp0.05 --shapes 1x202048,8x202048,64x128256,256x202048
    python3 benchmarks/bench.py isolated --methods kernel --variants "base=;nopdl=pdl:false"
    python3 benchmarks/bench.py sharded                            # on the 2-GPU machine
    python3 benchmarks/bench.py sharded --ops argmax,top_k,filtered_categorical --ks 50 \
        --filters k50p0.9,p0.9 --shapes 8x202048,32x202048,256x202048   # issue 45
    python3 benchmarks/bench.py all --quick --cpu-events           # CPU smoke test
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import targets as targets_mod  # noqa: E402
import timing  # noqa: E402

MODES = ("chain", "isolated", "example", "sharded")
OPS = ("argmax", "argmin", "max_with_index", "categorical", "top_k", "filtered_categorical")
OFF_BY_DEFAULT = ("top_k", "filtered_categorical")  # --ops: the long cases, asked for by name
DTYPES = {"float32": "float32", "f32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "f16": "float16"}
SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}

# Default shapes per isolated op (--shapes replaces them for every op).
ISOLATED_SHAPES = {
    "argmax": targets_mod.SPEC_SHAPES,
    "argmin": ((1, 202048), (8, 202048), (4096, 4096), (65536, 64)),
    "max_with_index": ((1, 202048), (8, 202048), (256, 202048), (4096, 4096)),
    "categorical": ((1, 32000), (1, 202048), (8, 202048), (32, 202048), (256, 202048)),
    "top_k": ((1, 202048), (8, 202048), (64, 128256), (256, 202048)),  # SPEC §3c
    "filtered_categorical": ((1, 202048), (8, 202048), (64, 128256), (256, 202048)),
}
TOP_K_KS = (1, 16, 50, 256, 1024)  # --ks default
FILTERS = ("k50p0.9", "p0.9", "minp0.05")  # --filters default: SPEC §3c's k, p and min_p
QUICK_SHAPES = ((1, 3000), (8, 2000), (64, 128))
QUICK_CHAIN_SHAPES = ((1, 3000), (4, 2000))
QUICK_SHARDED = (("float32", 8, 4000), ("bfloat16", 16, 4000))
CHAIN_DIM = 256
QUICK_CHAIN_DIM = 32
EXAMPLE = dict(vocab=202048, batch=8, dim=256, layers=2, heads=4, prompt_len=8)
QUICK_EXAMPLE = dict(vocab=3000, batch=2, dim=32, layers=2, heads=2, prompt_len=4)


def log(msg: str) -> None:
  print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# Adapter to the package's internals. The fallbacks serve the package as it was before the
# restructure (jax_argreduce._api._argreduce, _primitive, cuda_launch_plan): the
# `gpu_check.sh baseline` stage times that build with this benchmark, ops it lacks skipped.


def has_op(op: str) -> bool:
  import inspect
  import jax_argreduce
  if op == "filtered_categorical":  # a parameter of categorical, not an op of its own
    return hasattr(jax_argreduce, "categorical") and "top_p" in inspect.signature(
        jax_argreduce.categorical).parameters
  return op in ("argmax", "argmin") or hasattr(jax_argreduce, op)


def reduce(x, op: str = "argmax", method: str = "auto"):
  """Our ``op`` over the last axis of ``x`` by ``method`` ("auto", "kernel", "xla")."""
  from jax_argreduce import _api
  if hasattr(_api, "reduce"):
    return _api.reduce(x, -1, False, op=op, method=method)
  if op in ("argmax", "argmin"):  # pre-restructure package
    return _api._argreduce(x, -1, False, is_min=op == "argmin", method=method)
  if method != "auto":
    raise NotImplementedError(f"method={method!r} for {op} needs jax_argreduce._api.reduce")
  import jax_argreduce
  return getattr(jax_argreduce, op)(x, axis=-1)


def route(op: str, platform: str, shape, dtype, k: int = 0) -> str | None:
  """"kernel" or "xla": the path method "auto" takes (None where unknown)."""
  import numpy as np
  try:
    from jax_argreduce import _dispatch
  except ImportError:
    _dispatch = None
  if _dispatch is not None:
    try:
      if op == "top_k":
        return _dispatch.route(op, platform, tuple(shape), np.dtype(dtype), k=k)
      return _dispatch.route(op, platform, tuple(shape), np.dtype(dtype))
    except Exception:  # noqa: BLE001 - informational
      return None
  try:  # pre-restructure package
    from jax_argreduce import _ffi, _primitive
    if op not in ("argmax", "argmin"):
      return None
    if platform == "cpu":
      return "kernel" if _primitive._cpu_kernel_wins(shape) else "xla"
    wins = _ffi.HAS_CUDA and _primitive._cuda_kernel_wins(shape, np.dtype(dtype))
    return "kernel" if wins else "xla"
  except Exception:  # noqa: BLE001 - informational
    return None


def launch_plan(rows: int, cols: int, dtype: str, op: str, k: int = 0) -> dict | None:
  """What the CUDA handler launches for [rows, cols] (None off-GPU / without CUDA)."""
  from jax_argreduce import _ffi
  try:
    if not getattr(_ffi, "HAS_CUDA", False):
      return None
    if op == "top_k":
      if k > getattr(_ffi, "TOP_K_MAX_K", 0):
        return None
      plan = _ffi.debug_top_k_plan(rows, cols, k, ITEMSIZE[dtype])
      return {"path": "select", "levels": [lv["chunks"] for lv in plan["levels"]],
              "elements_per_thread": plan["elements_per_thread"],
              "workspace_bytes": plan["workspace_bytes"]}
    if op in ("categorical", "filtered_categorical"):
      return None  # planned for the sampler's policy: the traced kernel's geometry says it
    if hasattr(_ffi, "debug_launch_plan"):
      plan = _ffi.debug_launch_plan(rows, cols, dtype, op=op)  # launched from the host
    elif op in ("argmax", "argmin"):  # pre-restructure package
      plan = _ffi.cuda_launch_plan(rows, cols, dtype, op == "argmin")
    else:
      return None
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dict(plan).items()}
  except Exception as e:  # noqa: BLE001 - informational
    return {"error": repr(e)}


class PlanOptions:
  """``--variants``: process-wide kernel plan options, set before each variant's calls."""

  def __init__(self):
    from jax_argreduce import _ffi
    self.set = getattr(_ffi, "debug_set_plan_options", None)
    if self.set is None:
      raise SystemExit("--variants needs jax_argreduce._ffi.debug_set_plan_options(**options), "
                       "which this build of jax_argreduce does not have")
    get = getattr(_ffi, "debug_plan_options", None)
    self.defaults = dict(get()) if get else {}

  def apply(self, options: dict) -> None:
    self.set(**{**self.defaults, **options})

  def reset(self) -> None:
    if self.defaults:
      self.set(**self.defaults)


# ---------------------------------------------------------------------------------------------
# Arguments


def _shape(s: str) -> tuple[int, int]:
  try:
    r, c = s.lower().strip().split("x")
    return int(r), int(c)
  except ValueError:
    raise SystemExit(f"bad shape {s!r}: use ROWSxCOLS, e.g. 1x202048")


def _value(v: str):
  low = v.strip().lower()
  if low in ("true", "false"):
    return low == "true"
  if low == "none":
    return None
  for cast in (int, float):
    try:
      return cast(v)
    except ValueError:
      pass
  return v.strip()


def parse_filter(text: str) -> dict:
  """``k50p0.9`` -> {"top_k": 50, "top_p": 0.9}; ``minp0.05`` -> {"min_p": 0.05}: any of
  k<int>, p<float>, minp<float>, in that order (SPEC §1f's)."""
  m = re.fullmatch(r"(?:k(\d+))?(?:p(\d*\.?\d+))?(?:minp(\d*\.?\d+))?", text.strip())
  if not m or not any(m.groups()):
    raise SystemExit(f"bad filter {text!r}: use k<int>, p<float>, minp<float> in that order, "
                     "e.g. k50p0.9, p0.9, minp0.05")
  k, p, minp = m.groups()
  out = {"top_k": int(k) if k else None, "top_p": float(p) if p else None,
         "min_p": float(minp) if minp else None}
  return {name: v for name, v in out.items() if v is not None}


def parse_variants(text: str) -> list[tuple[str, dict]]:
  """``name=k1:v1,k2:v2;name2=...`` -> [(name, {k1: v1, ...}), ...] (``name=``: defaults)."""
  out = []
  for part in filter(None, (p.strip() for p in text.split(";"))):
    name, eq, opts = part.partition("=")
    if not eq or not name.strip().isidentifier():
      raise SystemExit(f"bad variant {part!r}: use name=key:value,key:value (name an identifier)")
    kw = {}
    for item in filter(None, (i.strip() for i in opts.split(","))):
      k, colon, v = item.partition(":")
      if not colon:
        raise SystemExit(f"bad variant option {item!r} in {part!r}: use key:value")
      kw[k.strip()] = _value(v)
    out.append((name.strip(), kw))
  if len({n for n, _ in out}) != len(out):
    raise SystemExit("variant names must be distinct")
  return out


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=__doc__.split("\n", 2)[2])
  p.add_argument("modes", nargs="?", default="all",
                 help="comma-separated: chain, isolated, example, sharded, all (default all = "
                      "chain,isolated,example)")
  p.add_argument("--shapes", help="ROWSxCOLS,... for chain and isolated (default per mode/op)")
  p.add_argument("--dtypes", default="float32,bfloat16", help="float32,bfloat16,float16")
  p.add_argument("--ops", default=",".join(o for o in OPS if o not in OFF_BY_DEFAULT),
                 help="isolated: argmax,argmin,max_with_index,categorical,top_k,"
                      "filtered_categorical; chain: argmax, categorical, top_k, "
                      "filtered_categorical (ops the package lacks are skipped with a note; "
                      "default: all but top_k and filtered_categorical)")
  p.add_argument("--ks", default=",".join(map(str, TOP_K_KS)),
                 help="top_k: the k of each case (1,16,50,256,1024)")
  p.add_argument("--filters", default=",".join(FILTERS),
                 help="filtered_categorical: one case per configuration, k<int>p<float>minp"
                      "<float>, any of the three (k50p0.9,p0.9,minp0.05)")
  p.add_argument("--methods", default="auto", help="our paths: auto,kernel,xla")
  p.add_argument("--variants", help='kernel variants: "name=k:v,k:v;name2=..." (see above)')
  p.add_argument("--iters", type=int, help="traced calls per case (isolated 30, chain 20, "
                 "example 24, sharded 20; quick 5)")
  p.add_argument("--inputs", type=int, default=4, help="distinct inputs rotated among (4)")
  p.add_argument("--warmup", type=int, default=3, help="untraced calls per case first (3)")
  p.add_argument("--rounds", type=int, default=3, help="traced calls in this many rounds, "
                 "cases interleaved (3)")
  p.add_argument("--steps", type=int, default=16, help="chain: unrolled steps K (16)")
  p.add_argument("--rolled", action="store_true",
                 help="chain: a rolled lax.scan (unroll=1, a while loop, as decode loops are "
                 "usually written) instead of SPEC §3b's unrolled one")
  p.add_argument("--keys", choices=("fold_in", "split"), default="fold_in",
                 help="chain, categorical only: step keys as fold_in(key, i) in the step "
                 "(default) or one jax.random.split(key, K) before the loop, scanned over")
  p.add_argument("--temperature", type=float, default=0.8, help="categorical T (0.8)")
  p.add_argument("--logits", choices=("normal", "peaked"), default="normal",
                 help="isolated inputs: normal(0, 1), or peaked: the same with 20 columns per "
                      "row at 25 + normal(0, 1), an LLM-like head far above the tail (normal)")
  p.add_argument("--wall-r", type=int, help="isolated: distinct inputs per jitted program "
                 "for the wall time (16; quick 2; 0 skips)")
  p.add_argument("--wall-repeats", type=int, help="timed runs of it (10; quick 3)")
  p.add_argument("--numpy", action="store_true",
                 help="isolated: also numpy.argmax/argmin wall time on the host copy")
  p.add_argument("--copy-mib", type=int, help="copy-bandwidth buffer (2048 on GPU; 16 off-GPU "
                 "or quick)")
  p.add_argument("--host-devices", type=int, default=4,
                 help="sharded: virtual CPU devices when there is no GPU (4)")
  p.add_argument("--out", help="output folder (default: a new temporary folder)")
  p.add_argument("--summary", help="also write the medians per case as JSON here")
  p.add_argument("--trace-dir", help="profiler output (default: a temp folder, deleted)")
  p.add_argument("--keep-trace", action="store_true", help="keep the trace folder")
  p.add_argument("--quick", action="store_true", help="tiny shapes, few iterations")
  p.add_argument("--cpu-events", action="store_true",
                 help="no GPU: time the CPU executor's trace events (development only)")
  p.add_argument("--no-command-buffers", action="store_true",
                 help="XLA_FLAGS=--xla_gpu_enable_command_buffer= (no CUDA graphs)")
  p.add_argument("--no-check", action="store_true", help="skip the result checks")
  a = p.parse_args(argv)
  modes = []
  for m in filter(None, (m.strip() for m in a.modes.split(","))):
    if m == "all":
      modes += ["chain", "isolated", "example"]
    elif m in MODES:
      modes.append(m)
    else:
      p.error(f"unknown mode {m!r}; use {', '.join(MODES)} or all")
  a.mode_list = list(dict.fromkeys(modes))
  a.shape_list = [_shape(s) for s in a.shapes.split(",") if s.strip()] if a.shapes else None
  try:
    a.dtype_list = [DTYPES[d.strip()] for d in a.dtypes.split(",") if d.strip()]
  except KeyError as e:
    p.error(f"unknown dtype {e}; use float32, bfloat16 or float16")
  a.op_list = [o.strip() for o in a.ops.split(",") if o.strip()]
  for o in a.op_list:
    if o not in OPS:
      p.error(f"unknown op {o!r}; use {', '.join(OPS)}")
  a.k_list = [int(k) for k in a.ks.split(",") if k.strip()]
  a.filter_list = [f.strip() for f in a.filters.split(",") if f.strip()]
  for f in a.filter_list:
    parse_filter(f)
  # The cases' op labels: top_k once per k ("top_k@50"), the filtered sampler once per
  # configuration ("categorical@k50p0.9").
  expand = {"top_k": [f"top_k@{k}" for k in a.k_list],
            "filtered_categorical": [f"categorical@{f}" for f in a.filter_list]}
  a.pick_list = [lab for o in a.op_list for lab in expand.get(o, [o])]
  a.method_list = [m.strip() for m in a.methods.split(",") if m.strip()]
  for m in a.method_list:
    if m not in ("auto", "kernel", "xla"):
      p.error(f"unknown method {m!r}; use auto, kernel, xla")
  a.variant_list = parse_variants(a.variants) if a.variants else []
  if a.wall_r is None:
    a.wall_r = 2 if a.quick else 16
  if a.wall_repeats is None:
    a.wall_repeats = 3 if a.quick else 10
  if min(a.inputs, a.steps, a.wall_repeats, a.rounds) < 1 or (a.iters is not None and a.iters < 1):
    p.error("--iters, --inputs, --steps, --rounds, --wall-repeats must be >= 1")
  return a


def iters_for(args, mode: str) -> int:
  if args.iters:
    return args.iters
  return 5 if args.quick else {"isolated": 30, "chain": 20, "example": 24, "sharded": 20}[mode]


# ---------------------------------------------------------------------------------------------
# Shared pieces


@dataclasses.dataclass
class Ctx:
  """What every mode needs: jax, the platform, the trace device, the implementations."""
  args: argparse.Namespace
  jax: object
  jnp: object
  np: object
  gpu: bool
  device: str | None        # "gpu", "cpu" (--cpu-events) or None
  plan_options: PlanOptions | None
  notes: list

  @property
  def platform(self) -> str:
    return "cuda" if self.gpu else "cpu"

  def note(self, text: str) -> None:
    if text not in self.notes:
      self.notes.append(text)


def ours_impls(ctx: Ctx, pick: "Pick") -> list[tuple[str, str, dict | None]]:
  """(impl label, method, variant options or None) for every configuration of ours (the
  methods the op has: the sampler, auto only)."""
  out = []
  for method in ctx.args.method_list:
    if method not in pick.methods:
      continue
    base = "ours" if method == "auto" else f"ours:{method}"
    if ctx.args.variant_list:
      out += [(f"{base}[{name}]", method, kw) for name, kw in ctx.args.variant_list]
    else:
      out.append((base, method, None))
  return out


PEAKED_HEAD = (20, 25.0)  # --logits peaked: columns per row lifted, by how much


def make_inputs(ctx: Ctx, shape, dtype, count, tag, scale=1.0, sharding=None, peaked=False):
  """``count`` distinct random-normal arrays (input i the same whatever count is); peaked:
  PEAKED_HEAD[0] random columns of each row (of the last axis) lifted by PEAKED_HEAD[1]."""
  jax, jnp = ctx.jax, ctx.jnp
  base = jax.random.key(zlib.crc32(f"{shape}:{dtype}:{tag}".encode()) % (2**31))
  xs = []
  for i in range(count):
    k = jax.random.fold_in(base, i)
    x = scale * jax.random.normal(k, shape, jnp.float32)
    if peaked:
      rows, cols = math.prod(shape[:-1]), shape[-1]
      head = jax.random.randint(jax.random.fold_in(k, 1), (rows, PEAKED_HEAD[0]), 0, cols)
      x = x.reshape(rows, cols)
      r = jnp.arange(rows)[:, None]
      x = x.at[r, head].set(x[r, head] + PEAKED_HEAD[1]).reshape(shape)  # repeats: once
    x = x.astype(dtype)
    xs.append(jax.device_put(x, sharding) if sharding is not None else x)
  return xs


def _safe(s: str) -> str:
  return "".join(ch if ch.isalnum() else "_" for ch in s)


def compiled_case(ctx: Ctx, label: str, name: str, body, inputs, **meta) -> timing.Case:
  """A case whose function is the compiled ``named_jit(name, body)`` for ``inputs[0]``'s
  shapes: its HLO text gives our custom calls (``ours_us``) and collectives."""
  jitted = timing.named_jit(name, body)
  compiled = jitted.lower(*inputs[0]).compile()
  text = compiled.as_text() or ""
  meta.setdefault("collectives", timing.collectives(text))
  return timing.Case(label=label, fn=compiled, inputs=inputs, module="jit_" + name,
                     our_ops=timing.our_custom_calls(text), meta=meta, traceable=body)


def variant_of(case: timing.Case, label: str) -> timing.Case:
  """Another variant's case on the same compiled function (told apart by its markers)."""
  return dataclasses.replace(case, label=label, meta=dict(case.meta), result=None)


def variant_setup(ctx: Ctx, options: dict | None):
  if options is None or ctx.plan_options is None:
    return None
  return lambda: ctx.plan_options.apply(options)


def run_session(ctx: Ctx, cases, mode: str) -> timing.Trace:
  it = iters_for(ctx.args, mode)
  log(f"[{mode}] {len(cases)} cases: warming up ...")
  timing.warm_up(cases, ctx.args.warmup)
  tr = timing.trace_cases(cases, iters=it, rounds=ctx.args.rounds, device=ctx.device,
                          trace_dir=ctx.args.trace_dir, keep_trace=ctx.args.keep_trace, log=log)
  if ctx.plan_options:
    ctx.plan_options.reset()
  for c in cases:
    if c.result and c.result.get("warning"):
      ctx.note(f"{mode} {c.label}: {c.result['warning']}")
  return tr


def span(case: timing.Case | None) -> float | None:
  return case.result["span_us"] if case is not None and case.result else None


def _div(a, b):
  return a / b if a is not None and b else None


def _sub(a, b):
  return a - b if a is not None and b is not None else None


def plan_string(plan: dict | None, path: str | None) -> str:
  if path == "xla":
    return "xla path"
  if not plan:
    return path or ""
  if "error" in plan:
    return "plan error"
  dims = lambda v: "x".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
  s = str(plan.get("path", "?"))
  if "grid" in plan and "block" in plan:
    s += f" {dims(plan['grid'])}x{dims(plan['block'])}"
  extra = [f"{k} {dims(plan[k])}" for k in ("team", "parts", "blocks_per_row")
           if not isinstance(plan.get(k), bool) and plan.get(k) not in (None, 0, 1)]
  extra += ["pdl"] if plan.get("pdl") is True else []
  extra += ["last block merges"] if plan.get("last_block_merges") is True else []
  return s + (f" ({', '.join(extra)})" if extra else "")


def geometry(case: timing.Case | None, ours_only=False) -> str:
  if case is None or not case.result:
    return ""
  for k in case.result["kernels"]:
    if k.get("details") and (k["ours"] or not ours_only):
      return timing.geometry_string(k["details"])
  return ""


# ---------------------------------------------------------------------------------------------
# isolated


@dataclasses.dataclass(frozen=True)
class Extra:
  """A case beside ours and the reference on the same inputs: a floor or a same-run baseline."""
  impl: str                # its impl label ("ours:argmax")
  op: str | None           # the package's op it calls (None: not ours)
  body: object             # (logits, key) -> result
  chain: bool = False      # also in the chain (its result: tokens [B])


@dataclasses.dataclass
class Pick:
  """One op of the benchmark: our body and the reference's, both ``(logits, key) -> result``
  over the last axis, and what the modes need of it."""
  op: str                  # the package's op ("top_k" for every k)
  label: str               # the cases' op label ("top_k@50")
  ref_label: str
  ref: object              # (logits, key) -> result
  ours: object             # method -> (logits, key) -> result
  check: object            # (got, want, logits) -> bool
  token: object = None     # chain: (result, step index) -> tokens [B]; None: not in the chain
  keyed: bool = False      # the isolated inputs carry a PRNG key
  methods: tuple = ("auto", "kernel", "xla")
  extras: tuple = ()       # Extra cases beside (isolated; chain where Extra.chain)
  base: str | None = None  # the extra our rows are divided by (``base_ratio``)
  mismatch: str = ""       # what a failed check means (default: differs from the reference)
  k: int = 0


FILTER_CHECK_ROWS = 8  # isolated, filtered sampler: rows whose samples are checked


def in_kept_set(tokens, logits, temperature, top_k=None, top_p=None, min_p=None,
                slack=1e-5) -> bool:
  """Whether each row's token lies in SPEC §1f's kept set of its row of ``logits``: numpy in
  float64 (ours sums exact fixed-point masses), a relative ``slack`` on the masses so that a
  boundary token is not called wrong for the last bits of a sum. Only the sampled token's
  place is computed: O(columns) per row."""
  import numpy as np
  inv_t = np.float32(1) / np.float32(temperature)  # z as the handlers compute it
  for t, row in zip(np.asarray(tokens).reshape(-1), np.asarray(logits)):
    z = (row.astype(np.float32) * inv_t).astype(np.float64)
    zt = z[t]
    before = (z > zt) | ((z == zt) & (np.arange(z.size) < t))  # SPEC §1 order
    if top_k and before.sum() >= top_k:
      return False
    e = np.exp(z - z.max())
    if top_p is not None and top_p < 1:
      total = e.sum() if not top_k or top_k >= e.size else np.partition(e, -top_k)[-top_k:].sum()
      if e[before].sum() >= top_p * total * (1 + slack):
        return False
    if min_p and e[t] < min_p * (1 - slack):
      return False
  return True


def pick_of(ctx: Ctx, label: str) -> Pick:
  """The table of ops: ``label`` one of ``args.pick_list``."""
  jax, jnp, np, T = ctx.jax, ctx.jnp, ctx.np, ctx.args.temperature
  import jax_argreduce
  same = lambda got, want, *_: bool(np.array_equal(np.asarray(got), np.asarray(want)))
  tokens = lambda res, i: res
  floor = (Extra("ours:argmax", "argmax", lambda x, key: reduce(x, "argmax")),)
  if label in ("argmax", "argmin"):
    ref = jnp.argmax if label == "argmax" else jnp.argmin
    return Pick(label, label, f"jnp.{label}", lambda x, key: ref(x, axis=-1),
                lambda m: (lambda x, key: reduce(x, label, m)), same,
                token=tokens if label == "argmax" else None)
  if label == "max_with_index":
    return Pick(label, label, "jnp.max+jnp.argmax",
                lambda x, key: (jnp.max(x, axis=-1), jnp.argmax(x, axis=-1)),
                lambda m: (lambda x, key: reduce(x, label, m)),
                lambda got, want, _x: same(got[1], want[1]) and bool(np.array_equal(
                    np.asarray(got[0], np.float32), np.asarray(want[0], np.float32),
                    equal_nan=True)))
  if label == "categorical":
    return Pick(label, label, "jax.random.categorical",
                lambda x, key: jax.random.categorical(key, x / T, axis=-1),
                lambda m: (lambda x, key: jax_argreduce.categorical(key, x, temperature=T)),
                lambda got, want, _x: np.asarray(got).shape == np.asarray(want).shape,
                token=tokens, keyed=True, methods=("auto",), extras=floor)
  if label.startswith("categorical@"):  # the filtered sampler, SPEC §1f / §3c
    filters = parse_filter(label.split("@", 1)[1])
    samplers = load_example().jax_samplers
    rows = FILTER_CHECK_ROWS
    return Pick("filtered_categorical", label, "jax_samplers.sample",
                lambda x, key: samplers.sample(key, x, T, **filters),
                lambda m: (lambda x, key: jax_argreduce.categorical(
                    key, x, temperature=T, method=m, **filters)),
                lambda got, want, x: in_kept_set(np.asarray(got)[:rows], x[:rows], T,
                                                 **filters),
                token=tokens, keyed=True, base="ours:categorical",
                mismatch=f"a sample of the first {rows} rows outside the kept set", extras=(
                    Extra("ours:categorical", "categorical",
                          lambda x, key: jax_argreduce.categorical(key, x, temperature=T),
                          chain=True),
                    Extra("jax.random.categorical", None,
                          lambda x, key: jax.random.categorical(key, x / T, axis=-1),
                          chain=True)))
  if label.startswith("top_k@"):
    k = int(label.split("@")[1])

    def place(res, i):  # the token at place i % k of the k indices: every place is used
      idx = res[1]
      at = jnp.full((idx.shape[0], 1), i % k, dtype=np.int32)
      return jnp.take_along_axis(idx, at, axis=-1)[:, 0]

    return Pick("top_k", label, "lax.top_k", lambda x, key: jax.lax.top_k(x, k),
                lambda m: (lambda x, key: jax_argreduce.top_k(x, k, method=m)),
                lambda got, want, _x: same(got[1], want[1]) and same(
                    np.asarray(got[0], np.float32), np.asarray(want[0], np.float32)),
                token=place, extras=floor, k=k)
  raise ValueError(label)


def isolated_groups(ctx: Ctx) -> list[dict]:
  """(op, dtype, shape) groups, each with its cases: ours per impl, the reference, and for
  the sampler and top_k also our argmax of the same logits."""
  a, jax = ctx.args, ctx.jax
  groups = []
  for label in a.pick_list:
    pick = pick_of(ctx, label)
    if not has_op(pick.op):
      ctx.note(f"isolated: jax_argreduce has no {pick.op} yet: skipped")
      continue
    shapes = a.shape_list or (QUICK_SHAPES if a.quick else ISOLATED_SHAPES[pick.op])
    for dtype in a.dtype_list:
      for rows, cols in shapes:
        if pick.k > cols:
          continue
        tag = f"{_safe(label)}_{SHORT[dtype]}_{rows}x{cols}"
        xs = make_inputs(ctx, (rows, cols), dtype, a.inputs, "bench",
                         peaked=a.logits == "peaked")
        inputs = [(x, jax.random.key(i)) for i, x in enumerate(xs)]
        g = {"op": label, "dtype": dtype, "rows": rows, "cols": cols, "ref": pick.ref_label,
             "cases": {}, "route": route(pick.op, ctx.platform, (rows, cols), dtype, pick.k),
             "extra_routes": {}, "base": pick.base,
             "plan": launch_plan(rows, cols, dtype, pick.op, pick.k) if ctx.gpu else None,
             "keyed": pick.keyed}
        g["cases"]["ref"] = compiled_case(ctx, "ref_" + tag, f"bench_ref_{tag}", pick.ref,
                                          inputs)
        built = {}
        for impl, method, options in ours_impls(ctx, pick):
          if method not in built:  # variants share one compiled function
            name = f"bench_{_safe(impl.split('[')[0])}_{tag}"
            try:
              built[method] = compiled_case(ctx, impl + "_" + tag, name, pick.ours(method),
                                            inputs)
            except NotImplementedError as e:
              ctx.note(f"isolated {label} {impl}: {e}")
              continue
            c = built[method]
          else:
            c = variant_of(built[method], impl + "_" + tag)
          c.setup = variant_setup(ctx, options)
          g["cases"][impl] = c
        for ex in pick.extras:
          if ex.op is not None and not has_op(ex.op):
            continue
          sfx = _safe(ex.impl)
          g["cases"][ex.impl] = compiled_case(ctx, f"{sfx}_{tag}", f"bench_{sfx}_{tag}",
                                              ex.body, inputs)
          if ctx.plan_options and ex.op:  # the default plan, whatever variant ran before it
            g["cases"][ex.impl].setup = ctx.plan_options.reset
          g["extra_routes"][ex.impl] = ex.op and route(ex.op, ctx.platform, (rows, cols), dtype)
        if not a.no_check:
          want = g["cases"]["ref"].call(0)
          for impl, c in g["cases"].items():
            if impl.startswith("ours") and impl not in g["extra_routes"]:
              if c.setup:
                c.setup()
              c.meta["match"] = pick.check(c.call(0), want, inputs[0][0])
              if not c.meta["match"]:
                ctx.note(f"MISMATCH: isolated {tag} {impl}: "
                         + (pick.mismatch or f"differs from {pick.ref_label}"))
        g["wall_inputs"] = None
        groups.append(g)
  return groups


def run_isolated(ctx: Ctx) -> dict:
  a, jax, jnp, np = ctx.args, ctx.jax, ctx.jnp, ctx.np
  groups = isolated_groups(ctx)
  copy_mib = a.copy_mib or (2048 if ctx.gpu and not a.quick else 16)
  copy_n = copy_mib * (1 << 20) // 4
  copy_x = jax.random.normal(jax.random.key(7), (copy_n,), jnp.float32)
  copy = compiled_case(ctx, "copy", f"bench_copy_{copy_mib}MiB", lambda x: jnp.copy(x),
                       [(copy_x,)])
  cases = [copy] + [c for g in groups for c in g["cases"].values()]
  tr = run_session(ctx, cases, "isolated")
  copy_bytes = 2 * copy_n * 4
  copy_bw = _div(copy_bytes, span(copy) and span(copy) * 1e-6)
  if copy_bw is None:  # no trace spans: the wall clock
    copy_bw = copy_bytes / (timing.wall_time(copy.fn, (copy_x,), a.wall_repeats)[0] * 1e-6)
  del copy_x

  # Wall time: R distinct inputs reduced in one jitted program; numpy on the host copy.
  if a.wall_r or a.numpy:
    t0 = time.perf_counter()
    for g in groups:
      xs = make_inputs(ctx, (g["rows"], g["cols"]), g["dtype"], max(a.wall_r, 1), "bench",
                       peaked=a.logits == "peaked")
      keys = [jax.random.key(i) for i in range(len(xs))]
      for impl, c in g["cases"].items():
        if not a.wall_r:
          break
        one = c.traceable
        body = lambda *args, one=one: tuple(one(x, k) for x, k in zip(args[::2], args[1::2]))
        flat = tuple(v for pair in zip(xs, keys) for v in pair)
        if c.setup:
          c.setup()
        fn = timing.named_jit("wall_" + c.module[len("jit_bench_"):], body)
        c.meta["wall_us"] = timing.wall_time(fn, flat, a.wall_repeats, per=len(xs))[0]
      if a.numpy and g["op"] in ("argmax", "argmin"):
        host = np.asarray(xs[0])
        f = np.argmax if g["op"] == "argmax" else np.argmin
        ts = []
        for _ in range(a.wall_repeats):
          t1 = time.perf_counter()
          f(host, axis=-1)
          ts.append((time.perf_counter() - t1) * 1e6)
        g["numpy_us"] = statistics.median(ts)
    if ctx.plan_options:
      ctx.plan_options.reset()
    log(f"[isolated] wall times in {time.perf_counter() - t0:.1f} s")

  rows = []
  for g in groups:
    ref = g["cases"]["ref"]
    nbytes = g["rows"] * g["cols"] * ITEMSIZE[g["dtype"]]
    for impl, c in g["cases"].items():
      if impl == "ref":
        continue
      s = span(c)
      base = g["base"] and impl not in g["extra_routes"] and g["cases"].get(g["base"])
      t = s or c.meta.get("wall_us")
      bw = _div(nbytes, t and t * 1e-6)
      path = ("xla" if ":xla" in impl else "kernel" if ":kernel" in impl
              else g["extra_routes"][impl] if impl in g["extra_routes"] else g["route"])
      geo = plan_string(g["plan"], path) if g["plan"] or path == "xla" else (
          geometry(c, ours_only=True) or (path or ""))
      rows.append({
          "mode": "isolated", "op": g["op"], "dtype": g["dtype"], "rows": g["rows"],
          "cols": g["cols"], "shape": f"{g['rows']}x{g['cols']}", "impl": impl,
          "ref": g["ref"], "ours_us": s, "ref_us": span(ref), "ratio": _div(s, span(ref)),
          "speedup": _div(span(ref), s), "delta_us": _sub(s, span(ref)),
          "sum_us": c.result and c.result["sum_us"],
          "events": c.result and c.result["events_per_call"],
          "ref_events": ref.result and ref.result["events_per_call"],
          "kernel_us": c.result and c.result["ours_us"],
          "wall_us": c.meta.get("wall_us"), "ref_wall_us": ref.meta.get("wall_us"),
          "numpy_us": g.get("numpy_us"), "gbps": bw and bw / 1e9,
          "pct_copy": bw and 100 * bw / copy_bw, "path": geo, "match": c.meta.get("match"),
          "base": g["base"] if base else None, "base_us": span(base) if base else None,
          "base_ratio": _div(s, span(base)) if base else None,
          "prev_us": targets_mod.ISOLATED_OURS_2026_11_30.get(
              (g["op"], g["dtype"], f"{g['rows']}x{g['cols']}")) if impl == "ours" else None,
      })
  return {"rows": rows, "source": tr.source, "copy": {"mib": copy_mib, "span_us": span(copy),
          "tb_per_s": copy_bw / 1e12}, "cases": cases,
          "plans": [{k: g[k] for k in ("op", "dtype", "rows", "cols", "route", "plan")}
                    for g in groups]}


# ---------------------------------------------------------------------------------------------
# chain (SPEC §3b)


def chain_variant(args) -> dict | None:
  """How the chain differs from SPEC §3b's (an unrolled scan, keys folded per step), or None."""
  if not args.rolled and args.keys == "fold_in":
    return None
  return {"rolled": args.rolled, "keys": args.keys}


def run_chain(ctx: Ctx) -> dict:
  a, jax, jnp, lax = ctx.args, ctx.jax, ctx.jnp, ctx.jax.lax
  K = a.steps
  dim = QUICK_CHAIN_DIM if a.quick else CHAIN_DIM
  shapes = a.shape_list or (QUICK_CHAIN_SHAPES if a.quick else targets_mod.CHAIN_SHAPES)
  picks = [pick_of(ctx, label) for label in a.pick_list]
  picks = [p for p in picks if p.token is not None]
  if chain_variant(a):  # also in results_summary.json
    ctx.note(f"chain: not SPEC §3b's chain: {chain_variant(a)}")
  for p in list(picks):
    if not has_op(p.op):
      ctx.note(f"chain: jax_argreduce has no {p.op} yet: skipped")
      picks.remove(p)
  tokens = lambda res, i: res

  def chain(pick, token):
    def run(h0, W, E, key):
      def step(h, x):
        logits = h @ W
        i = x if a.keys != "split" else 0
        tok = token(pick(logits, x if a.keys == "split" else jax.random.fold_in(key, x)), i)
        return 0.5 * h + E[tok], tok
      xs = jax.random.split(key, K) if a.keys == "split" else jnp.arange(K)
      return lax.scan(step, h0, xs, unroll=1 if a.rolled else True)
    return run

  weights = {}
  groups = []
  for pick in picks:
    op, ref_label, ref_pick, ours_pick = pick.label, pick.ref_label, pick.ref, pick.ours
    for dtype in a.dtype_list:
      for B, V in shapes:
        if pick.k > V:
          continue
        if (V, dtype) not in weights:
          weights[(V, dtype)] = (
              make_inputs(ctx, (dim, V), dtype, 1, "W", scale=dim ** -0.5)[0],
              make_inputs(ctx, (V, dim), dtype, 1, "E")[0])
        W, E = weights[(V, dtype)]
        h0s = make_inputs(ctx, (B, dim), dtype, a.inputs, "h0")
        inputs = [(h, W, E, jax.random.key(i)) for i, h in enumerate(h0s)]
        tag = f"{_safe(op)}_{SHORT[dtype]}_{B}x{V}"
        g = {"op": op, "dtype": dtype, "rows": B, "cols": V, "ref": ref_label, "cases": {},
             "iso": {}, "route": route(pick.op, ctx.platform, (B, V), dtype, pick.k),
             "extra_routes": {}, "base": pick.base}
        g["cases"]["ref"] = compiled_case(ctx, "chain_ref_" + tag, f"chain_ref_{tag}",
                                          chain(ref_pick, pick.token), inputs)
        # The isolated pick on [B, V] logits, beside.
        logits = make_inputs(ctx, (B, V), dtype, a.inputs, "bench")
        iso_in = [(x, jax.random.key(i)) for i, x in enumerate(logits)]
        g["iso"]["ref"] = compiled_case(ctx, "iso_ref_" + tag, f"iso_ref_{tag}", ref_pick, iso_in)
        for impl, method, options in ours_impls(ctx, pick):
          # One executable per variant: XLA captures the handler's launches into a CUDA graph
          # at an executable's first run, so variants cannot share one (their plan options are
          # applied before that first run by the case's setup).
          sfx = _safe(impl)
          try:
            c, ic = (compiled_case(ctx, f"chain_{impl}_{tag}", f"chain_{sfx}_{tag}",
                                   chain(ours_pick(method), pick.token), inputs),
                     compiled_case(ctx, f"iso_{impl}_{tag}", f"iso_{sfx}_{tag}",
                                   ours_pick(method), iso_in))
          except NotImplementedError as e:
            ctx.note(f"chain {op} {impl}: {e}")
            continue
          c.setup = ic.setup = variant_setup(ctx, options)
          g["cases"][impl], g["iso"][impl] = c, ic
          if (op == "argmax" or op.startswith("top_k@")) and not a.no_check:
            if c.setup:
              c.setup()
            same = ctx.np.array_equal(ctx.np.asarray(c.call(0)[1]),
                                      ctx.np.asarray(g["cases"]["ref"].call(0)[1]))
            c.meta["match"] = bool(same)
            if not same:
              ctx.note(f"MISMATCH: chain {tag} {impl}: tokens differ from {ref_label}")
        for ex in pick.extras:
          if not ex.chain or (ex.op is not None and not has_op(ex.op)):
            continue
          sfx = _safe(ex.impl)
          c, ic = (compiled_case(ctx, f"chain_{ex.impl}_{tag}", f"chain_{sfx}_{tag}",
                                 chain(ex.body, tokens), inputs),
                   compiled_case(ctx, f"iso_{ex.impl}_{tag}", f"iso_{sfx}_{tag}", ex.body,
                                 iso_in))
          if ctx.plan_options and ex.op:  # the default plan, whatever variant ran before it
            c.setup = ic.setup = ctx.plan_options.reset
          g["cases"][ex.impl], g["iso"][ex.impl] = c, ic
          g["extra_routes"][ex.impl] = ex.op and route(ex.op, ctx.platform, (B, V), dtype)
        groups.append(g)
  cases = [c for g in groups for d in (g["cases"], g["iso"]) for c in d.values()]
  tr = run_session(ctx, cases, "chain")
  rows = []
  for g in groups:
    ref = g["cases"]["ref"]
    ref_step = _div(span(ref), K)
    for impl, c in g["cases"].items():
      if impl == "ref":
        continue
      step = _div(span(c), K)
      delta = _sub(step, ref_step)
      kern = c.result["ours_us"] / K if c.result else None
      # The filters against our unfiltered sampler: by our kernels' time per step (what the
      # filters cost the pick; none where a path runs no kernel of ours), and by step.
      base = g["base"] and impl not in g["extra_routes"] and g["cases"].get(g["base"])
      base_kern = base.result["ours_us"] / K if base and base.result else None
      # step(ours) = rest + kern and step(ref) = rest + ref pick, so ref pick = kern - Δ.
      ref_pick_est = kern - delta if delta is not None and kern else None
      shape = f"{g['rows']}x{g['cols']}"
      rows.append({
          "mode": "chain", "op": g["op"], "dtype": g["dtype"], "rows": g["rows"],
          "cols": g["cols"], "shape": shape, "impl": impl, "ref": g["ref"],
          "ours_us": step, "ref_us": ref_step, "delta_us": delta, "ratio": _div(step, ref_step),
          "kernel_us": kern, "ref_pick_us": ref_pick_est,
          "pick_ratio": _div(kern, ref_pick_est) if ref_pick_est and ref_pick_est > 0 else None,
          "iso_us": span(g["iso"].get(impl)), "iso_ref_us": span(g["iso"]["ref"]),
          "events": c.result and c.result["events_per_call"] / K,
          "ref_events": ref.result and ref.result["events_per_call"] / K,
          "path": ("xla path" if ":xla" in impl else g["extra_routes"].get(impl, g["route"]) or "")
          if impl.startswith("ours") else "", "match": c.meta.get("match"),
          "base": g["base"] if base else None, "base_us": base_kern,
          "base_ratio": _div(kern, base_kern) if kern and base_kern else None,
          "base_delta_us": _sub(step, _div(span(base), K)) if base else None,
          "prev_delta_us": targets_mod.CHAIN_DELTA_2026_11_30.get((g["dtype"], shape))
          if g["op"] == "argmax" and impl == "ours" else None,
      })
  return {"rows": rows, "source": tr.source, "steps": K, "dim": dim, "cases": cases}


# ---------------------------------------------------------------------------------------------
# example


def load_example():
  path = HERE.parent / "examples" / "sample.py"
  name = "jax_argreduce_example_sample"
  if name in sys.modules:
    return sys.modules[name]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module  # before exec: its dataclasses resolve their module
  spec.loader.exec_module(module)
  return module


class Stepper:
  """The example's decode step run one step per call (the KV cache is donated and carried)."""

  def __init__(self, ex, cfg, params, picker, mode, batch, prompt_len, temperature, seed=0,
               window=64):
    jnp = ex.jnp
    self.step = ex.compiled_steps(cfg, mode, picker)[1]
    self.params, self.prompt_len, self.window = params, prompt_len, window
    self.cache = ex.init_cache(cfg, batch, prompt_len + window)
    self.tok = ex.make_prompt(cfg, batch, prompt_len, seed)[:, -1]
    self.keys = ex.sequence_keys(seed, batch)
    self.temp = jnp.float32(temperature)
    self.i = 0
    self.jnp = jnp

  def __call__(self):
    # The attention runs over the whole cache window whatever the position: positions wrap.
    pos = self.jnp.int32(self.prompt_len - 1 + self.i % self.window)
    self.tok, self.cache = self.step(self.params, self.cache, self.tok, pos, self.keys,
                                     self.temp)
    self.i += 1
    return self.tok


def run_example(ctx: Ctx) -> dict:
  a = ctx.args
  ex = load_example()
  conf = QUICK_EXAMPLE if a.quick else EXAMPLE
  groups = []
  for dtype in [d for d in a.dtype_list if d in ex.DTYPES]:
    cfg = ex.ModelConfig(vocab=conf["vocab"], dim=conf["dim"], layers=conf["layers"],
                         heads=conf["heads"], dtype=dtype)
    params = ex.init_params(cfg, 0)
    for mode in ("greedy", "sample"):
      g = {"op": mode, "dtype": dtype, "rows": conf["batch"], "cols": conf["vocab"],
           "cases": {}, "names": {}}
      for key, picker in (("ours", ex.OURS), ("ref", ex.REFERENCE)):
        label = f"example_{key}_{mode}_{SHORT[dtype]}"
        fn = Stepper(ex, cfg, params, picker, mode, conf["batch"], conf["prompt_len"],
                     a.temperature)
        g["cases"][key] = timing.Case(label=label, fn=fn, inputs=[()],
                                      module=f"jit_decode_step_{picker.tag}")
        g["names"][key] = picker.label(mode)
      groups.append(g)
  cases = [c for g in groups for c in g["cases"].values()]
  tr = run_session(ctx, cases, "example")
  rows = []
  for g in groups:
    o, r = g["cases"]["ours"], g["cases"]["ref"]
    rows.append({
        "mode": "example", "op": g["op"], "dtype": g["dtype"], "rows": g["rows"],
        "cols": g["cols"], "shape": f"{g['rows']}x{g['cols']}", "impl": "ours",
        "ours_name": g["names"]["ours"], "ref": g["names"]["ref"],
        "ours_us": span(o), "ref_us": span(r), "delta_us": _sub(span(o), span(r)),
        "ratio": _div(span(o), span(r)), "kernel_us": o.result and o.result["ours_us"],
        "events": o.result and o.result["events_per_call"],
        "ref_events": r.result and r.result["events_per_call"]})
  return {"rows": rows, "source": tr.source, "config": conf, "cases": cases}


# ---------------------------------------------------------------------------------------------
# sharded (issue 11)


def sharded_labels(a) -> list[str]:
  """The picks of the sharded mode: argmax, top_k and the filtered sampler among ``--ops``
  (issue 45), argmax alone where none of them is named."""
  labels = [lab for lab in a.pick_list
            if lab == "argmax" or lab.startswith(("top_k@", "categorical@"))]
  return labels or ["argmax"]


def run_sharded(ctx: Ctx) -> dict:
  """Each pick on a 1-D mesh over all devices, rows split and vocab split, beside its
  reference on the same sharded inputs and both on one device; ours must equal the one-device
  result (argmax: numpy; top_k: ``lax.top_k``; the sampler: our unsharded sample, SPEC §1f's
  invariance), and the compiled HLO's collectives are listed."""
  a, jax, np = ctx.args, ctx.jax, ctx.np
  from jax.sharding import NamedSharding, PartitionSpec as P
  devices = jax.devices()
  n = len(devices)
  if n < 2:
    ctx.note(f"sharded: only {n} device: nothing to shard")
  # Explicit axes (jax.make_mesh's default since jax 0.9): the sharding is in the type, so
  # the handler calls are partitioned (jax_argreduce/_sharding.py); Auto axes take XLA's path.
  from jax.sharding import AxisType
  mesh = jax.make_mesh((len(devices),), ("d",), axis_types=(AxisType.Explicit,),
                       devices=devices)
  specs = {"rows": P("d", None), "vocab": P(None, "d")}
  todo = a.shape_list and [(d, r, c) for d in a.dtype_list for r, c in a.shape_list]
  todo = todo or [t for t in (QUICK_SHARDED if a.quick else targets_mod.SHARDED_CASES)
                  if t[0] in a.dtype_list]
  groups = []
  for label in sharded_labels(a):
    pick = pick_of(ctx, label)
    if not has_op(pick.op):
      ctx.note(f"sharded: jax_argreduce has no {pick.op} yet: skipped")
      continue
    ours = pick.ours("auto")
    for dtype, R, C in todo:
      tag = f"{_safe(label)}_{SHORT[dtype]}_{R}x{C}"
      single = make_inputs(ctx, (R, C), dtype, a.inputs, "sharded")
      inputs = [(x, jax.random.key(i)) for i, x in enumerate(single)]
      base = {"op": label, "dtype": dtype, "rows": R, "cols": C, "n": n,
              "ref_label": pick.ref_label}
      singles = {
          "ours": compiled_case(ctx, "single_ours_" + tag, "sh_single_ours_" + tag, ours,
                                inputs),
          "ref": compiled_case(ctx, "single_ref_" + tag, "sh_single_ref_" + tag, pick.ref,
                               inputs)}
      if label == "argmax":
        wants = [np.argmax(np.asarray(x), axis=-1) for x in single]
        exact = lambda got, i, _ref: bool(np.array_equal(np.asarray(got), wants[i]))
      elif pick.op == "top_k":
        wants = [singles["ref"].call(i) for i in range(len(inputs))]
        exact = lambda got, i, _ref: pick.check(got, wants[i], single[i])
      else:  # the sampler: the unsharded sample (ours), and the reference's own
        wants = {impl: [c.call(i) for i in range(len(inputs))] for impl, c in singles.items()}
        exact = lambda got, i, ref: bool(np.array_equal(
            np.asarray(got), np.asarray(wants["ref" if ref else "ours"][i])))
      for layout, spec in specs.items():
        if (R if layout == "rows" else C) % n:
          ctx.note(f"sharded {tag} {layout}: {R if layout == 'rows' else C} does not "
                   f"divide over {n} devices: skipped")
          continue
        xs = [(jax.device_put(x, NamedSharding(mesh, spec)), key) for x, key in inputs]
        ref = pick.ref
        if layout == "vocab" and label != "argmax":
          # lax.top_k and sort refuse an explicitly split axis: what a JAX user writes is a
          # reshard of the vocabulary (a gather), then the op.
          whole = NamedSharding(mesh, P(None, None))
          ref = lambda x, key, f=pick.ref: f(jax.sharding.reshard(x, whole), key)
        g = {**base, "layout": layout, "singles": singles, "cases": {
            "ours": compiled_case(ctx, f"sh_ours_{layout}_{tag}", f"sh_ours_{layout}_{tag}",
                                  ours, xs),
            "ref": compiled_case(ctx, f"sh_ref_{layout}_{tag}", f"sh_ref_{layout}_{tag}",
                                 ref, xs)}}
        for k, c in g["cases"].items():
          c.meta["exact"] = all(exact(c.call(i), i, k == "ref") for i in range(len(xs)))
          if not c.meta["exact"] and k == "ours":
            ctx.note(f"MISMATCH: sharded {tag} {layout} {k} differs from the one-device "
                     "result")
        groups.append(g)
  cases = list({id(c): c for g in groups for c in (*g["cases"].values(),
                                                   *g["singles"].values())}.values())
  tr = run_session(ctx, cases, "sharded")
  rows = []
  for g in groups:
    o, r = g["cases"]["ours"], g["cases"]["ref"]
    rows.append({
        "mode": "sharded", "op": g["op"], "dtype": g["dtype"], "rows": g["rows"],
        "cols": g["cols"], "shape": f"{g['rows']}x{g['cols']}", "layout": g["layout"],
        "impl": "ours", "ref": g["ref_label"], "devices": g["n"],
        "ours_us": span(o), "ref_us": span(r), "ratio": _div(span(o), span(r)),
        "delta_us": _sub(span(o), span(r)),
        "single_ours_us": span(g["singles"]["ours"]), "single_ref_us": span(g["singles"]["ref"]),
        "collectives": len(o.meta["collectives"]), "ours_collectives": o.meta["collectives"],
        "ref_collectives": r.meta["collectives"],
        "devices_in_trace": o.result and o.result["devices"],
        "exact": o.meta["exact"], "ref_exact": r.meta["exact"]})
  return {"rows": rows, "source": tr.source, "devices": [str(d) for d in devices],
          "cases": cases}


# ---------------------------------------------------------------------------------------------
# Reporting


def _f(v, spec=".2f"):
  if v is None:
    return "-"
  if isinstance(v, bool):
    return "yes" if v else "NO"
  return format(v, spec) if isinstance(v, (int, float)) else str(v)


def _pair(a, b, spec=".2f"):
  return f"{_f(a, spec)} / {_f(b, spec)}"


# (header, cell function) per mode: one definition for the console and BENCHMARKS.md.
COLUMNS = {
    "chain": [
        ("shape", lambda r: r["shape"]), ("dtype", lambda r: r["dtype"]),
        ("op", lambda r: r["op"]), ("impl", lambda r: r["impl"]),
        ("step ours µs", lambda r: _f(r["ours_us"])), ("step ref µs", lambda r: _f(r["ref_us"])),
        ("Δ µs/step", lambda r: _f(r["delta_us"], "+.2f")),
        ("Δ 11-30", lambda r: _f(r["prev_delta_us"], "+.2f")),
        ("our kernels µs/step", lambda r: _f(r["kernel_us"])),
        ("ref pick µs/step (est.)", lambda r: _f(r["ref_pick_us"])),
        ("isolated ours / ref µs", lambda r: _pair(r["iso_us"], r["iso_ref_us"])),
        ("Δ base µs/step", lambda r: _f(r.get("base_delta_us"), "+.2f")),
        ("kernels ÷ base", lambda r: _f(r.get("base_ratio"))),
        ("events/step o/r", lambda r: _pair(r["events"], r["ref_events"], ".1f")),
        ("path", lambda r: r["path"] + ("" if r["match"] in (True, None) else " MISMATCH")),
    ],
    "example": [
        ("dtype", lambda r: r["dtype"]), ("mode", lambda r: r["op"]),
        ("batch x vocab", lambda r: r["shape"]), ("ours", lambda r: r["ours_name"]),
        ("ref", lambda r: r["ref"]), ("ours µs/step", lambda r: _f(r["ours_us"], ".1f")),
        ("ref µs/step", lambda r: _f(r["ref_us"], ".1f")),
        ("Δ µs/step", lambda r: _f(r["delta_us"], "+.2f")),
        ("ref/ours", lambda r: _f(r["ratio"] and 1 / r["ratio"], ".3f")),
        ("our kernels µs/step", lambda r: _f(r["kernel_us"])),
        ("events/step o/r", lambda r: _pair(r["events"], r["ref_events"], "d")),
    ],
    "isolated": [
        ("shape", lambda r: r["shape"]), ("dtype", lambda r: r["dtype"]),
        ("op", lambda r: r["op"]), ("impl", lambda r: r["impl"]),
        ("ours µs", lambda r: _f(r["ours_us"])), ("ref µs", lambda r: _f(r["ref_us"])),
        ("ref/ours", lambda r: _f(r["speedup"])), ("11-30 µs", lambda r: _f(r["prev_us"])),
        ("base µs", lambda r: _f(r.get("base_us"))), ("÷ base", lambda r: _f(r.get("base_ratio"))),
        ("sum µs", lambda r: _f(r["sum_us"])),
        ("#ev o/r", lambda r: _pair(r["events"], r["ref_events"], "d")),
        ("wall o/r µs", lambda r: _pair(r["wall_us"], r["ref_wall_us"], ".1f")),
        ("numpy µs", lambda r: _f(r["numpy_us"], ".1f")),
        ("GB/s", lambda r: _f(r["gbps"], ".0f")), ("%copy", lambda r: _f(r["pct_copy"], ".0f")),
        ("path / geometry", lambda r: r["path"]
         + ("" if r["match"] in (True, None) else " MISMATCH")),
    ],
    "sharded": [
        ("shape", lambda r: r["shape"]), ("dtype", lambda r: r["dtype"]),
        ("op", lambda r: r.get("op", "argmax")), ("sharded", lambda r: r["layout"]),
        ("devices", lambda r: _f(r["devices"], "d")),
        ("ours µs", lambda r: _f(r["ours_us"])), ("ref µs", lambda r: _f(r["ref_us"])),
        ("ours/ref", lambda r: _f(r["ratio"])),
        ("1 device ours / ref µs", lambda r: _pair(r["single_ours_us"], r["single_ref_us"])),
        ("ours collectives", lambda r: ", ".join(r["ours_collectives"]) or "none"),
        ("ref collectives", lambda r: ", ".join(r["ref_collectives"]) or "none"),
        ("exact o/r", lambda r: _pair(r["exact"], r["ref_exact"])),
    ],
}
TITLES = {"chain": "In-chain (SPEC §3b): device time per decode-like step",
          "example": "The example's decode step (examples/sample.py)",
          "isolated": "Isolated (SPEC §3): span per call",
          "sharded": "Sharded (issue 11): span per call, largest per-device span"}


def _columns(mode, rows):
  cols = COLUMNS[mode]
  if mode == "isolated" and not any(r.get("numpy_us") for r in rows):
    cols = [c for c in cols if c[0] != "numpy µs"]
  if mode == "isolated" and not any(r.get("prev_us") for r in rows):
    cols = [c for c in cols if c[0] != "11-30 µs"]
  if mode == "chain" and not any(r.get("prev_delta_us") is not None for r in rows):
    cols = [c for c in cols if c[0] != "Δ 11-30"]
  if not any(r.get("base") for r in rows):  # no filtered sampler: nothing to divide by
    cols = [c for c in cols if "base" not in c[0]]
  return cols


def console_table(mode, rows) -> str:
  cols = _columns(mode, rows)
  cells = [[h for h, _ in cols]] + [[fn(r) for _, fn in cols] for r in rows]
  w = [max(len(c[i]) for c in cells) for i in range(len(cols))]
  lines = ["  ".join(c.ljust(w[i]) for i, c in enumerate(row)).rstrip() for row in cells]
  lines.insert(1, "  ".join("-" * x for x in w))
  return "\n".join(lines)


def md_table(mode, rows) -> list[str]:
  cols = _columns(mode, rows)
  out = ["| " + " | ".join(h for h, _ in cols) + " |", "|" + "---|" * len(cols)]
  out += ["| " + " | ".join(fn(r) for _, fn in cols) + " |" for r in rows]
  return out


METHOD = {
    "chain": "A {U} `lax.scan` of K={K} steps: `logits = h @ W` ([B,{D}] x "
             "[{D},V]), `tok = pick(logits)`, `h = 0.5*h + E[tok]` (a true dependency), one jitted "
             "program per case. Step = program span / K. Δ = step(ours) − step(ref). *our "
             "kernels* = device time per step of the events of our custom call (its kernels, "
             "in the `jax_argreduce` namespace); *ref pick (est.)* = our kernels − Δ: what the "
             "reference's pick costs a step, assuming the rest of the step is unchanged. "
             "*isolated* = the same pick alone on [B, V] random-normal logits, same trace. "
             "Δ 11-30 = SPEC §3b's measurement of main on 2026-11-30. Filtered sampler "
             "(`categorical@<filters>`): *Δ base* = step(ours) − step(`ours:categorical`, our "
             "unfiltered sampler, same run); *kernels ÷ base* = our kernels per step, filtered "
             "÷ unfiltered.",
    "example": "examples/sample.py's jitted decode step (`compiled_steps`: the model, the pick, "
               "the donated KV cache), one step per call, ours and the reference picker in the "
               "same trace; span = the step's device span (first to last device event).",
    "isolated": "Each case jitted under its own name; span = first to last device event of "
                "a call, sum = sum of event durations; *ref/ours* > 1: ours faster. *wall* = one "
                "jitted program reducing R distinct inputs, perf_counter around "
                "block_until_ready, median, / R. GB/s = bytes read / span; %copy against a "
                "jitted `jnp.copy` (read + write) in the same trace. max_with_index's "
                "reference is `jnp.max` + `jnp.argmax` in one jit; categorical's is "
                "`jax.random.categorical(key, logits / T)` (T={T}, threefry, noise in the "
                "logits' dtype), with our argmax of the same logits as `ours:argmax`. "
                "`categorical@<filters>` (SPEC §1f; k50p0.9 = top_k 50, top_p 0.9): ours with "
                "the filters against examples/jax_samplers.py's `sample` (what JAX decoders "
                "write: `lax.top_k` + categorical over the k; sort, softmax, cumsum, mask; "
                "min-p mask; z in float32), beside our unfiltered sampler `ours:categorical` "
                "(*base*: ours ÷ base is what the filters cost) and `jax.random.categorical` "
                "unfiltered; our samples of the first rows checked inside the kept set.",
    "sharded": "A 1-D mesh over all devices; rows sharded = `P('d', None)`, vocab sharded = "
               "`P(None, 'd')`; span per call = the largest per-device span; *1 device* = the "
               "same input unsharded on device 0. Collectives from the compiled HLO text "
               "(`lower(x).compile().as_text()`), result shapes. *exact*: equal to numpy.",
}


def write_outputs(out: Path, res: dict, targets: list[dict], args) -> None:
  out.mkdir(parents=True, exist_ok=True)
  env = res["env"]

  def strip(c: timing.Case):
    return {"label": c.label, "module": c.module, "meta": c.meta,
            "our_ops": sorted(c.our_ops), "trace": c.result}
  data = {"env": env, "argv": sys.argv[1:], "notes": res["notes"],
          "modes": {m: {k: v for k, v in r.items() if k != "cases"} | {
              "cases": [strip(c) for c in r["cases"]]} for m, r in res["modes"].items()},
          "targets": targets}
  (out / "results.json").write_text(json.dumps(data, indent=1, default=str) + "\n")

  gpu = env.get("gpu_name") or env.get("device_kind")
  L = ["# jax_argreduce benchmarks", "",
       f"{gpu}, jax {env['jax']}, {env['date']}; command `python benchmarks/bench.py "
       f"{' '.join(sys.argv[1:])}`. ours − reference: negative is faster.", ""]
  sources = {m: r["source"] for m, r in res["modes"].items()}
  if any(s != "GPU trace" for s in sources.values()):
    L += [f"**Not GPU numbers**: timing source {sources} (development run).", ""]
  for mode in ("chain", "example", "isolated", "sharded"):
    if mode in res["modes"]:
      L += [f"## {TITLES[mode]}", ""] + md_table(mode, res["modes"][mode]["rows"]) + [""]
  L += ["## SPEC §4 targets", "", "From the rows above (`benchmarks/targets.py`; impl `ours` = "
        "method auto, no variant).", ""]
  L += [f"- **{t['status']}** — {t['target']}: {t['detail']}" for t in targets]
  kern = []
  for mode, r in res["modes"].items():
    for c in r["cases"]:
      for k in (c.result or {}).get("kernels", [])[:6]:
        if k.get("details"):
          name = k["name"] if len(k["name"]) <= 70 else k["name"][:67] + "..."
          kern.append(f"| {mode} | {c.label} | `{name}` | {k['median_us']:.2f} | "
                      f"{timing.geometry_string(k['details'])} |")
  if kern:
    L += ["", "## Kernels", "", "Trace `kernel_details`, median duration (µs) per event name.", "",
          "| mode | case | kernel | µs | geometry |", "|---|---|---|---|---|"] + kern
  L += ["", "## Environment", ""]
  L += [f"- {k}: {v}" for k, v in env.items() if v not in (None, "")]
  if "isolated" in res["modes"]:
    L.append(f"- copy bandwidth: {res['modes']['isolated']['copy']['tb_per_s']:.2f} TB/s")
  L += ["", "## Method", "",
        "SPEC §3: every timed function is jitted under its own name; after "
        f"{args.warmup} warm-up calls one `jax.profiler` session runs each case (chain "
        f"{iters_for(args, 'chain')}, isolated {iters_for(args, 'isolated')}, example "
        f"{iters_for(args, 'example')}, sharded {iters_for(args, 'sharded')} calls), cases "
        f"interleaved in {args.rounds} rounds, rotating among {args.inputs} random-normal "
        + ("inputs (isolated: peaked, {} columns per row lifted by {}), ".format(*PEAKED_HEAD)
           if args.logits == "peaked" else "inputs, ")
        + "each call inside a host marker and waited for; device events "
        "(`args.hlo_module == jit_<name>`) are cut into calls by the markers; medians over "
        "calls (`benchmarks/timing.py`)."]
  for mode in res["modes"]:
    unroll = ("rolled (`unroll=1`: a while loop)" if args.rolled
              else "fully unrolled (`unroll=True`)")
    L += ["", f"- {mode}: " + METHOD[mode].format(K=args.steps, T=args.temperature, U=unroll,
                                                   D=res["modes"].get("chain", {}).get("dim", CHAIN_DIM))]
    if mode == "chain":
      L[-1] += (" Step keys (categorical): " + ("one `jax.random.split(key, K)` before the loop, "
                "scanned over." if args.keys == "split" else "`jax.random.fold_in(key, i)` "
                "in step i."))
  if res["notes"]:
    L += ["", "## Notes", ""] + [f"- {n}" for n in res["notes"]]
  (out / "BENCHMARKS.md").write_text("\n".join(L) + "\n")


def summary(res: dict) -> dict:
  """Medians per case only (to commit as benchmarks/results_summary.json)."""
  env = res["env"]
  cases = {}
  for mode, r in res["modes"].items():
    for row in r["rows"]:
      key = " ".join(filter(None, [mode, row["op"], row["dtype"], row["shape"],
                                   row.get("layout")]))
      entry = cases.setdefault(key, {"ref": row["ref"], row["ref"]: _round(row["ref_us"])})
      entry[row["impl"]] = _round(row["ours_us"])
      if mode == "chain":
        entry[f"{row['impl']} kernels"] = _round(row["kernel_us"])
  return {"env": {k: env.get(k) for k in ("date", "gpu_name", "device_kind", "driver_version",
                                          "jax", "jax_argreduce", "python")},
          "timing_source": {m: r["source"] for m, r in res["modes"].items()},
          "units": "µs: span per call (isolated, sharded), device span per step (chain, "
                   "example)", "cases": cases}


def _round(v):
  return None if v is None else round(v, 3)


# ---------------------------------------------------------------------------------------------


def main(argv=None) -> int:
  args = parse_args(argv)
  if args.no_command_buffers:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_gpu_enable_command_buffer=").strip()
  flag = f"--xla_force_host_platform_device_count={args.host_devices}"
  if "sharded" in args.mode_list and "xla_force_host_platform_device_count" not in os.environ.get(
      "XLA_FLAGS", ""):  # only CPU devices are affected: harmless on a GPU machine
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
  import jax
  import jax.numpy as jnp
  import numpy as np

  gpu = jax.default_backend() == "gpu"
  device = "gpu" if gpu else ("cpu" if args.cpu_events else None)
  ctx = Ctx(args, jax, jnp, np, gpu, device,
            PlanOptions() if args.variant_list else None, [])
  if not gpu:
    ctx.note("no GPU: " + ("--cpu-events: spans are CPU executor event times"
                                   if device else "no device spans (use --cpu-events)"))
  env = timing.environment()
  out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="jax_argreduce_bench_"))
  log(f"[bench] {env.get('gpu_name') or env['device_kind']} ({env['backend']}, "
      f"{env['device_count']} device(s)), jax {env['jax']}; modes {','.join(args.mode_list)}; "
      f"output {out}")

  runners = {"chain": run_chain, "isolated": run_isolated, "example": run_example,
             "sharded": run_sharded}
  res = {"env": env, "notes": ctx.notes, "modes": {}}
  for mode in args.mode_list:
    t0 = time.perf_counter()
    res["modes"][mode] = runners[mode](ctx)
    rows = res["modes"][mode]["rows"]
    log(f"\n== {TITLES[mode]} ({res['modes'][mode]['source']}; {time.perf_counter() - t0:.0f} s)")
    log(console_table(mode, rows) if rows else "(no rows)")
  all_rows = [r for m in res["modes"].values() for r in m["rows"]]
  targets = targets_mod.evaluate(all_rows)
  log("\n== SPEC §4 targets" + ("" if all(m["source"] == "GPU trace" for m in
                                         res["modes"].values()) else " (NOT a GPU run)"))
  for t in targets:
    if t["status"] != "not measured":
      log(f"  [{t['status']}] {t['target']}: {t['detail']}")
  for n in ctx.notes:
    log(f"  note: {n}")
  write_outputs(out, res, targets, args)
  log(f"[bench] wrote {out / 'results.json'} and {out / 'BENCHMARKS.md'}")
  if args.summary:
    Path(args.summary).parent.mkdir(parents=True, exist_ok=True)
    data = summary(res)
    if "chain" in res["modes"] and chain_variant(args):
      data["chain"] = chain_variant(args)
    Path(args.summary).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    log(f"[bench] wrote {args.summary}")
  return 1 if any(n.startswith("MISMATCH") for n in ctx.notes) else 0


if __name__ == "__main__":
  sys.exit(main())
