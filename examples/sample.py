"""Token picking in a small decoder-only language model with ``jax_argreduce``.

A decoder written in plain JAX (token embedding, pre-norm blocks of multi-head causal
self-attention and an MLP, a KV cache for incremental decoding, a final norm and an LM head,
weights from a fixed seed) decodes ``--steps`` tokens per sequence. Each decode step is one
``jax.jit`` that donates the KV cache; the next token is picked from the ``[batch, vocab]``
logits either greedily (``jax_argreduce.argmax(logits, axis=-1)``) or by sampling from
``softmax(logits / T)`` with one key per sequence (``jax_argreduce.categorical(keys, logits,
temperature=T)``, the fused Gumbel-max sampler, where the installed package has it; else
Gumbel noise from ``jax.random`` plus ``jax_argreduce.argmax``, vmapped over the batch).

``--top-k``, ``--top-p``, ``--min-p`` (sample mode) filter what is sampled (SPEC §1f: the
first k tokens, then the smallest head holding mass p, then the tokens at least min_p times as
likely as the top one): one value for every sequence, or comma-separated values, one per
sequence, passed to ``jax_argreduce.categorical`` as serving engines pass per-request settings.

``--compare`` runs the same model and prompt again with the reference picker (``jnp.argmax``;
in sample mode ``jax.random.categorical(key, logits / T)``, or with filters the JAX sort-based
sampler of ``jax_samplers.py`` beside this file: ``lax.top_k``, sort, softmax, cumsum, mask),
reports both speeds, wall time and the device time per step from a short profiler trace, and
checks the result: greedy tokens must be identical (exit code 1 if not); sampled tokens come
from different generators, so both samplers are checked by distribution instead (a chi-square
test of many draws from one fixed logits row against ``softmax(logits / T)``, renormalized
over the reference's kept set with filters, threshold fixed in advance; with filters also a
two-sample chi-square between ours and the reference's draws; exit code 1 if ours fails).
``--logits FILE.npy`` skips the model and picks from saved logits of shape ``[rows, vocab]``
or ``[vocab]`` instead.

  python examples/sample.py                              # CPU-sized defaults, vocab 202048
  python examples/sample.py --compare --mode sample --temperature 0.8
  python examples/sample.py --compare --mode sample --temperature 0.8 --top-k 50 --top-p 0.9
  python examples/sample.py --mode sample --batch 3 --top-p 0.9,0.5,1 --min-p 0.05
  python examples/sample.py --batch 64 --layers 4 --dim 512 --heads 8 --steps 256 \\
      --dtype bfloat16 --compare                         # on a GPU
  python examples/sample.py --logits logits.npy --compare
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import inspect
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jax_argreduce

# The JAX filtered samplers (--compare's reference with filters; benchmarks/bench.py's too) live
# beside this file: importable however this file is loaded (as a script or by path).
sys.path.insert(0, str(Path(__file__).resolve().parent))
import jax_samplers  # noqa: E402

ArgmaxFn = Callable[..., jax.Array]
# (keys [batch], logits [batch, vocab], temperature) -> token ids [batch]
SampleFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
_SAMPLE_KEY_TAG = 1  # the sampling keys are fold_in(key(seed), tag), apart from the weights'
_PROMPT_KEY_TAG = 2
_CHECK_KEY_TAG = 3   # keys of the --compare distribution check

# The fused sampler (SPEC §1c) where the installed jax_argreduce has it, and its filters (§1f).
HAS_FUSED_SAMPLER = hasattr(jax_argreduce, "categorical")
HAS_FILTERS = HAS_FUSED_SAMPLER and "top_p" in inspect.signature(
    jax_argreduce.categorical).parameters
FILTERS = ("top_k", "top_p", "min_p")


# ----------------------------------------------------------------------------------------------
# Token picking: greedy (argmax) or sampling, each by our package or by the JAX reference.
# ----------------------------------------------------------------------------------------------

def sample_fused(keys: jax.Array, logits: jax.Array, temperature: jax.Array,
                 **filters) -> jax.Array:
  """``jax_argreduce.categorical``: one call for the batch, one key per row, noise never
  materialized; ``filters``: top_k, top_p, min_p (a scalar or one value per row)."""
  return jax_argreduce.categorical(keys, logits, temperature=temperature, **filters)


def sample_gumbel_argmax(keys: jax.Array, logits: jax.Array, temperature: jax.Array,
                         argmax_fn: ArgmaxFn = jax_argreduce.argmax) -> jax.Array:
  """Gumbel-max written for one row and vmapped: float32 noise from ``jax.random.gumbel``
  added to ``logits / T``, then ``argmax_fn`` (the fallback before the fused sampler)."""
  def one(key, row):
    noise = jax.random.gumbel(key, row.shape, jnp.float32)
    return argmax_fn(row.astype(jnp.float32) / temperature + noise)
  return jax.vmap(one)(keys, logits)


def sample_jax_random(keys: jax.Array, logits: jax.Array, temperature: jax.Array) -> jax.Array:
  """The reference: ``jax.random.categorical(key, logits / T)`` per row, in float32 (bfloat16
  logits are cast first: ``jax.random`` would otherwise draw bfloat16 noise, which is biased)."""
  return jax.vmap(lambda k, row: jax.random.categorical(
      k, row.astype(jnp.float32) / temperature))(keys, logits)


@dataclasses.dataclass(frozen=True)
class Picker:
  """How one implementation picks tokens. ``tag`` names its jitted decode step
  (``decode_step_<tag>``); ``name``/``sample_name`` are printed for greedy/sample mode.
  ``filters``: ((name, value), ...) passed to ``sample`` as keywords, a value a scalar or a
  tuple (one per sequence)."""
  tag: str
  name: str
  argmax: ArgmaxFn
  sample_name: str
  sample: SampleFn
  filters: tuple = ()

  def label(self, mode: str) -> str:
    return self.name if mode == "greedy" else self.sample_name

  def sample_kwargs(self, row: int | None = None) -> dict:
    """The filters as ``sample``'s keywords: per-sequence values as a concrete array (the JAX
    reference's ``lax.top_k`` needs its k at trace time), or ``row``'s value only."""
    if row is not None:
      return {n: v[row] if isinstance(v, tuple) else v for n, v in self.filters}
    return {n: np.asarray(v) if isinstance(v, tuple) else v for n, v in self.filters}


OURS = Picker("ours", "jax_argreduce.argmax", jax_argreduce.argmax,
              "jax_argreduce.categorical" if HAS_FUSED_SAMPLER
              else "Gumbel noise + jax_argreduce.argmax",
              sample_fused if HAS_FUSED_SAMPLER else sample_gumbel_argmax)
REFERENCE = Picker("jnp", "jnp.argmax", jnp.argmax, "jax.random.categorical", sample_jax_random)
# Pickers --compare runs, ours first.
PICKERS: dict[str, Picker] = {"ours": OURS, "jnp": REFERENCE}


def describe_filters(filters: tuple) -> str:
  return ", ".join(f"{n}={','.join(f'{x:g}' for x in v) if isinstance(v, tuple) else f'{v:g}'}"
                   for n, v in filters)


def pickers_for(filters: tuple) -> dict[str, Picker]:
  """:data:`PICKERS`, or with filters ours passing them to ``jax_argreduce.categorical`` and
  the JAX sort-based sampler (``jax_samplers.sample_rows``) as the reference."""
  if not filters:
    return PICKERS
  text = describe_filters(filters)
  ours = dataclasses.replace(OURS, sample_name=f"jax_argreduce.categorical({text})",
                             sample=sample_fused, filters=filters)
  ref = dataclasses.replace(REFERENCE, sample_name=f"JAX sort-based sampler ({text})",
                            sample=jax_samplers.sample_rows, filters=filters)
  return {"ours": ours, "jnp": ref}


def pick_tokens(logits: jax.Array, seq_keys: jax.Array, pos: jax.Array, temperature: jax.Array,
                *, mode: str, picker: Picker = OURS) -> jax.Array:
  """Picks one token id per row of ``logits`` ``[batch, vocab]``; returns ``[batch]`` int32.

  greedy: ``picker.argmax(logits, axis=-1)`` on the whole batch. sample: one draw per row from
  ``softmax(logits / temperature)`` (over what ``picker.filters`` keep) by ``picker.sample``,
  row ``i`` keyed by
  ``fold_in(seq_keys[i], pos)``, so a sequence's samples depend on its key and position only.
  """
  if mode == "greedy":
    return picker.argmax(logits, axis=-1)
  if mode != "sample":
    raise ValueError(f"mode must be 'greedy' or 'sample', got {mode!r}")
  step_keys = jax.vmap(lambda k: jax.random.fold_in(k, pos))(seq_keys)
  return picker.sample(step_keys, logits, temperature, **picker.sample_kwargs())


def sequence_keys(seed: int, n: int) -> jax.Array:
  """Per-sequence (per-row) sampling keys: row ``i`` gets the same key whatever ``n`` is."""
  base = jax.random.fold_in(jax.random.key(seed), _SAMPLE_KEY_TAG)
  return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(n))


# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ModelConfig:
  vocab: int = 202048
  dim: int = 64
  layers: int = 2
  heads: int = 2
  tied: bool = False
  dtype: str = "float32"

  @property
  def head_dim(self) -> int:
    return self.dim // self.heads

  @property
  def mlp_dim(self) -> int:
    return 4 * self.dim


def init_params(cfg: ModelConfig, seed: int) -> dict:
  """Weights from ``jax.random.key(seed)``: drawn in float32, then cast to ``cfg.dtype``."""
  key = jax.random.key(seed)
  dtype = DTYPES[cfg.dtype]
  counter = iter(range(1 << 30))

  def normal(shape, std):
    w = std * jax.random.normal(jax.random.fold_in(key, next(counter)), shape, jnp.float32)
    return w.astype(dtype)

  d, m = cfg.dim, cfg.mlp_dim
  params = {"embed": normal((cfg.vocab, d), 1.0), "layers": []}
  for _ in range(cfg.layers):
    params["layers"].append({
        "norm1": jnp.ones((d,), dtype),
        "wq": normal((d, d), d ** -0.5), "wk": normal((d, d), d ** -0.5),
        "wv": normal((d, d), d ** -0.5), "wo": normal((d, d), d ** -0.5),
        "norm2": jnp.ones((d,), dtype),
        "w1": normal((d, m), d ** -0.5), "w2": normal((m, d), m ** -0.5),
    })
  params["norm_f"] = jnp.ones((d,), dtype)
  if not cfg.tied:
    params["head"] = normal((d, cfg.vocab), d ** -0.5)
  return params


def init_cache(cfg: ModelConfig, batch: int, max_len: int) -> list:
  """Per layer, keys and values ``[batch, max_len, heads, head_dim]`` (zeros)."""
  shape = (batch, max_len, cfg.heads, cfg.head_dim)
  dtype = DTYPES[cfg.dtype]
  return [(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(cfg.layers)]


def _rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
  xf = x.astype(jnp.float32)
  y = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)
  return (y * scale.astype(jnp.float32)).astype(x.dtype)


def _positions(pos: jax.Array, dim: int) -> jax.Array:
  """Sinusoidal position embeddings ``[T, dim]`` (float32) of integer positions ``[T]``."""
  half = dim // 2
  freqs = jnp.exp(-math.log(10000.0) * jnp.arange(half, dtype=jnp.float32) / half)
  angles = pos.astype(jnp.float32)[:, None] * freqs[None, :]
  emb = jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)
  return jnp.pad(emb, ((0, 0), (0, dim - 2 * half)))


def forward(params: dict, cache: list, tokens: jax.Array, start, cfg: ModelConfig):
  """Runs ``tokens`` ``[batch, T]`` at positions ``start .. start+T-1`` against the cache.

  Writes their keys and values into the cache and returns the final-normed hidden states
  ``[batch, T, dim]`` and the updated cache.
  """
  b, t = tokens.shape
  h_, hd = cfg.heads, cfg.head_dim
  pos = start + jnp.arange(t, dtype=jnp.int32)
  x = params["embed"][tokens] + _positions(pos, cfg.dim).astype(params["embed"].dtype)
  max_len = cache[0][0].shape[1]
  visible = jnp.arange(max_len)[None, :] <= pos[:, None]  # [T, max_len]: causal, and unwritten
  new_cache = []                                            # slots are later positions
  for layer, (k_cache, v_cache) in zip(params["layers"], cache):
    h = _rms_norm(x, layer["norm1"])
    q = (h @ layer["wq"]).reshape(b, t, h_, hd)
    k = (h @ layer["wk"]).reshape(b, t, h_, hd)
    v = (h @ layer["wv"]).reshape(b, t, h_, hd)
    k_cache = lax.dynamic_update_slice(k_cache, k, (0, start, 0, 0))
    v_cache = lax.dynamic_update_slice(v_cache, v, (0, start, 0, 0))
    scores = jnp.einsum("bthd,bshd->bhts", q, k_cache,
                        preferred_element_type=jnp.float32) * hd ** -0.5
    scores = jnp.where(visible, scores, -jnp.inf)
    probs = jax.nn.softmax(scores, axis=-1).astype(v_cache.dtype)
    attn = jnp.einsum("bhts,bshd->bthd", probs, v_cache).reshape(b, t, cfg.dim)
    x = x + attn @ layer["wo"]
    x = x + jax.nn.gelu(_rms_norm(x, layer["norm2"]) @ layer["w1"]) @ layer["w2"]
    new_cache.append((k_cache, v_cache))
  return _rms_norm(x, params["norm_f"]), new_cache


def lm_head(params: dict, h: jax.Array) -> jax.Array:
  """Logits ``[..., vocab]`` in the model dtype."""
  w = params["head"] if "head" in params else params["embed"].T
  return h @ w


def _prefill(params, cache, prompt, *, cfg):
  _, cache = forward(params, cache, prompt, 0, cfg)
  return cache


def next_logits(params, cache, tokens, pos, *, cfg):
  """``tokens`` ``[batch]`` at ``pos`` in: the logits ``[batch, vocab]`` of the next position
  and the updated cache."""
  h, cache = forward(params, cache, tokens[:, None], pos, cfg)
  return lm_head(params, h[:, -1]), cache


def decode_step(params, cache, tokens, pos, seq_keys, temperature, *, cfg, mode, picker):
  """One token per sequence: ``tokens`` ``[batch]`` at ``pos`` in, the next ones out."""
  logits, cache = next_logits(params, cache, tokens, pos, cfg=cfg)
  return pick_tokens(logits, seq_keys, pos, temperature, mode=mode, picker=picker), cache


# ----------------------------------------------------------------------------------------------
# Decoding
# ----------------------------------------------------------------------------------------------

class _Bar:
  """A carriage-return progress bar on stderr, for when tqdm is not installed."""

  def __init__(self, total: int, desc: str, width: int = 30):
    self.total, self.desc, self.width, self.n = total, desc, width, 0
    self.start = self.drawn = time.perf_counter()
    self._draw()

  def _draw(self):
    self.drawn = time.perf_counter()
    filled = self.width * self.n // max(self.total, 1)
    elapsed = time.perf_counter() - self.start
    sys.stderr.write(f"\r{self.desc}: [{'#' * filled}{'.' * (self.width - filled)}] "
                     f"{self.n}/{self.total} steps, {elapsed:.1f} s")
    sys.stderr.flush()

  def update(self, n: int = 1):
    self.n += n
    if self.n >= self.total or time.perf_counter() - self.drawn >= 0.1:  # at most 10 Hz
      self._draw()

  def close(self):
    sys.stderr.write("\n")
    sys.stderr.flush()


class _NoBar:
  def update(self, n: int = 1):
    pass

  def close(self):
    pass


def progress_bar(total: int, desc: str):
  if not sys.stderr.isatty():
    return _NoBar()  # no carriage returns in logs
  sys.stdout.flush()  # the bar goes to stderr: keep the lines printed so far above it
  try:
    from tqdm import tqdm
  except ImportError:
    return _Bar(total, desc)
  return tqdm(total=total, desc=desc, unit="step", leave=True)


def _named(name: str, fn: Callable) -> Callable:
  """``fn`` under ``name``: jitted, its XLA module (and profiler events) is ``jit_<name>``."""
  def f(*args):
    return fn(*args)
  f.__name__ = f.__qualname__ = name
  return f


@functools.lru_cache(maxsize=16)
def compiled_steps(cfg: ModelConfig, mode: str, picker: Picker):
  """The jitted prefill and decode step (each donates the KV cache), reused across calls. The
  step is ``decode_step_<picker.tag>``, so each picker's step has its own module name."""
  prefill = jax.jit(functools.partial(_prefill, cfg=cfg), donate_argnums=(1,))
  step = jax.jit(_named(f"decode_step_{picker.tag}", functools.partial(
      decode_step, cfg=cfg, mode=mode, picker=picker)), donate_argnums=(1,))
  return prefill, step


@dataclasses.dataclass
class Generation:
  tokens: np.ndarray        # [batch, steps] generated token ids
  step_s: list[float]       # wall time of each decode step; the first one compiles it
  prefill_s: float          # wall time of the prompt prefill, compile included

  @property
  def steady_s(self) -> list[float]:
    return self.step_s[1:]


def make_prompt(cfg: ModelConfig, batch: int, prompt_len: int, seed: int) -> jax.Array:
  key = jax.random.fold_in(jax.random.key(seed), _PROMPT_KEY_TAG)
  return jax.random.randint(key, (batch, prompt_len), 0, cfg.vocab, dtype=jnp.int32)


def generate(cfg: ModelConfig, *, batch: int = 2, prompt_len: int = 8, steps: int = 16,
             mode: str = "greedy", temperature: float = 1.0, seed: int = 0,
             picker: Picker = OURS, params: dict | None = None, desc: str | None = None,
             max_len: int | None = None, marker: str | None = None) -> Generation:
  """Decodes ``steps`` tokens for ``batch`` prompts; the tokens are ``Generation.tokens``.

  The prompt (random token ids) and the weights come from ``seed``; ``picker`` picks the
  tokens (:data:`OURS` or :data:`REFERENCE`). ``desc`` shows a progress bar. ``max_len`` sizes
  the KV cache (default ``prompt_len + steps``: pass the same to reuse a compiled step);
  ``marker``: each step runs inside a profiler annotation ``<marker>:<i>`` (the trace
  parser's marker and a label: :func:`device_step_spans`).
  """
  if params is None:
    params = init_params(cfg, seed)
  prompt = make_prompt(cfg, batch, prompt_len, seed)
  seq_keys = sequence_keys(seed, batch)
  temp = jnp.float32(temperature)
  cache = init_cache(cfg, batch, max(max_len or 0, prompt_len + steps))

  prefill, step = compiled_steps(cfg, mode, picker)

  t0 = time.perf_counter()
  if prompt_len > 1:  # the last prompt token is the first decode step's input
    cache = jax.block_until_ready(prefill(params, cache, prompt[:, :-1]))
  prefill_s = time.perf_counter() - t0

  bar = progress_bar(steps, desc) if desc else None
  tok, out, step_s = prompt[:, -1], [], []
  for i in range(steps):
    t0 = time.perf_counter()
    with (jax.profiler.TraceAnnotation(f"{marker}:{i}") if marker
          else contextlib.nullcontext()):
      tok, cache = step(params, cache, tok, jnp.int32(prompt_len - 1 + i), seq_keys, temp)
      tok.block_until_ready()
    step_s.append(time.perf_counter() - t0)
    out.append(tok)
    if bar is not None:
      bar.update(1)
  if bar is not None:
    bar.close()
  return Generation(np.stack([np.asarray(t) for t in out], axis=1), step_s, prefill_s)


# ----------------------------------------------------------------------------------------------
# Device time per step (--compare): a short profiler trace
# ----------------------------------------------------------------------------------------------

# The trace is read by the benchmarks' parser (benchmarks/timing.py: one parser of the profiler
# trace for bench.py and this example), found from this file so that the script runs from any
# directory. Not part of the installed package (benchmark tooling, not API), so only --compare
# needs it: a copy of this script without the repository's benchmarks/ skips the device time.
_BENCHMARKS_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


def _timing():
  """``benchmarks/timing.py`` of this checkout, or None where this script has no checkout."""
  if not (_BENCHMARKS_DIR / "timing.py").is_file():
    return None
  if str(_BENCHMARKS_DIR) not in sys.path:
    sys.path.insert(0, str(_BENCHMARKS_DIR))
  import timing  # noqa: PLC0415
  return timing


def device_step_spans(cfg: ModelConfig, params: dict, pickers: list[Picker], *, batch: int,
                      prompt_len: int, steps: int, max_len: int, mode: str, temperature: float,
                      seed: int) -> tuple[dict[str, float | None], str]:
  """Median device span (µs) of one decode step per picker, from one profiler trace.

  Runs ``steps`` decode steps per picker (the compiled steps of the timed runs: same
  ``max_len``) inside one ``jax.profiler`` session, each step inside a host marker; per step
  the span is the first to the last device event of the step's module (``jit_decode_step_
  <tag>``). On GPU these are GPU kernel events; without a GPU, the CPU executor's events
  (CPU time: only the parsing is meaningful there). Returns ({picker tag: µs}, source).
  """
  timing = _timing()
  if timing is None:
    return {}, f"not measured (no trace parser: {_BENCHMARKS_DIR / 'timing.py'} is missing)"
  device = "gpu" if jax.default_backend() == "gpu" else "cpu"
  source = "GPU events" if device == "gpu" else "CPU executor events: no GPU"
  tdir = tempfile.mkdtemp(prefix="sample_trace_")
  jax.profiler.start_trace(tdir, create_perfetto_trace=True)
  try:
    for p in pickers:
      generate(cfg, batch=batch, prompt_len=prompt_len, steps=steps, mode=mode,
               temperature=temperature, seed=seed, picker=p, params=params, max_len=max_len,
               marker=timing.MARKER + p.tag)
  finally:
    jax.profiler.stop_trace()
  modules = {p.tag: f"jit_decode_step_{p.tag}" for p in pickers}
  spans = {}
  try:
    trace = timing.load_trace(timing.find_trace_file(tdir))
    by_module, _ = timing.module_events(trace, device)
    markers = timing.host_markers(trace)
    for tag, module in modules.items():
      calls, _ = timing.split_calls(timing.events_for(by_module, module),
                                    {tag: markers.get(tag, [])})
      spans[tag] = timing.summarize_calls(calls.get(tag, []))["spans_us"]
  finally:
    shutil.rmtree(tdir, ignore_errors=True)
  # The first step of a run pays for host-side warm-up: the median of the others.
  med = {tag: statistics.median(v[1:] or v) if v else None for tag, v in spans.items()}
  return med, source


# ----------------------------------------------------------------------------------------------
# Sampling check (--compare --mode sample): by distribution, not index equality
# ----------------------------------------------------------------------------------------------

CHECK_BINS = 16          # equal-probability-mass bins of the vocabulary
CHECK_ALPHA = 1e-4       # fixed in advance: a correct sampler fails once in 10,000 seeds
_Z_ALPHA = 3.719         # the standard normal quantile 1 - CHECK_ALPHA


def chi2_threshold(df: int) -> float:
  """The chi-square quantile ``1 - CHECK_ALPHA`` by the Wilson-Hilferty approximation (no
  scipy needed): df 15 -> 44.6 (exact 44.26), df 31 -> 69.3 (exact 69.11)."""
  c = 2.0 / (9.0 * df)
  return df * (1.0 - c + _Z_ALPHA * math.sqrt(c)) ** 3


def equal_mass_bins(p: np.ndarray, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
  """Tokens grouped into about ``k`` bins of equal probability mass (tokens in descending
  probability; a token heavier than 1/k gets a bin of its own), bins merged until each expects
  at least 5 of ``n`` draws. Returns (bin of each token, mass of each bin)."""
  order = np.argsort(-p, kind="stable")
  mid = np.cumsum(p[order]) - p[order] / 2
  b = np.minimum((mid * k).astype(np.int64), k - 1)
  _, b = np.unique(b, return_inverse=True)   # consecutive labels 0..m-1, in mass order
  mass = np.bincount(b, weights=p[order])
  label, acc, relabel = 0, 0.0, np.empty(len(mass), np.int64)
  for j, m in enumerate(mass):               # merge light bins into the next one
    relabel[j] = label
    acc += m
    if acc * n >= 5:
      label, acc = label + 1, 0.0
  if relabel[-1] == label and label:         # a light last group joins the one before
    relabel[relabel == label] = label - 1
  b = relabel[b]
  bins = np.empty_like(b)
  bins[order] = b
  return bins, np.bincount(bins, weights=p)


def distribution_check(row: np.ndarray, temperature: float, samplers: dict[str, SampleFn], *,
                       draws: int, seed: int, kept: np.ndarray | None = None) -> dict:
  """Draws ``draws`` samples from one logits ``row`` with each sampler (each draw its own key,
  the row repeated over a batch) and tests each sample's token frequencies against the exact
  ``softmax(row / temperature)`` (float64; renormalized over ``kept``, a boolean mask, where
  given) by chi-square over :func:`equal_mass_bins`.

  Returns {"df", "threshold", "bins", "results": {name: {"chi2", "ok", "tv", "counts",
  "outside"}}}; ``tv`` is the total-variation distance between the binned frequencies and the
  binned probabilities, ``counts`` the draws per bin, ``outside`` the draws outside ``kept``.
  """
  z = row.astype(np.float64) / temperature
  p = np.exp(z - z.max())
  if kept is not None:
    p = np.where(kept, p, 0.0)
  p /= p.sum()
  bins, mass = equal_mass_bins(p, CHECK_BINS, draws)
  df = len(mass) - 1
  vocab = row.shape[-1]
  chunk = max(1, min(draws, (1 << 22) // vocab))
  n_chunks = -(-draws // chunk)
  n = chunk * n_chunks
  rows = jnp.broadcast_to(jnp.asarray(row), (chunk, vocab))
  keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), _CHECK_KEY_TAG), n)
  temp = jnp.float32(temperature)
  out = {"df": df, "threshold": chi2_threshold(max(df, 1)), "bins": len(mass), "draws": n,
         "results": {}}
  for name, fn in samplers.items():
    f = jax.jit(fn)
    tokens = np.concatenate([np.asarray(f(keys[i * chunk:(i + 1) * chunk], rows, temp))
                             for i in range(n_chunks)])
    if tokens.min() < 0 or tokens.max() >= vocab:
      out["results"][name] = {"chi2": math.inf, "ok": False, "tv": 1.0, "counts": None,
                              "outside": n}
      continue
    obs = np.bincount(bins[tokens], minlength=len(mass))
    expected = n * mass
    chi2 = float(np.sum((obs - expected) ** 2 / expected))
    out["results"][name] = {"chi2": chi2, "ok": chi2 <= out["threshold"],
                            "tv": float(0.5 * np.abs(obs / n - mass).sum()), "counts": obs,
                            "outside": int(np.sum(p[tokens] == 0))}
  return out


def two_sample_check(a: np.ndarray | None, b: np.ndarray | None) -> dict:
  """Chi-square homogeneity of two equal-size samples' bin counts (from
  :func:`distribution_check`: every bin expects at least 5 draws of each), and their total
  variation. Returns {"chi2", "df", "threshold", "ok", "tv"}."""
  if a is None or b is None:  # a sampler drew out of range
    return {"chi2": math.inf, "df": 0, "threshold": 0.0, "ok": False, "tv": 1.0}
  used = (a + b) > 0
  chi2 = float(np.sum((a[used] - b[used]) ** 2 / (a[used] + b[used])))
  df = max(int(used.sum()) - 1, 1)
  return {"chi2": chi2, "df": df, "threshold": chi2_threshold(df),
          "ok": chi2 <= chi2_threshold(df), "tv": float(0.5 * np.abs(a - b).sum() / a.sum())}


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
  """Appends "(default: X)" only where there is a default to show (not None)."""

  def _get_help_string(self, action):
    return action.help if action.default is None else super()._get_help_string(action)


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      description=__doc__.split("\n\n")[0],
      formatter_class=_HelpFormatter)
  m = p.add_argument_group("model")
  m.add_argument("--vocab", type=int, default=202048, help="vocabulary size (logits per row)")
  m.add_argument("--dim", type=int, default=64, help="model width")
  m.add_argument("--layers", type=int, default=2, help="transformer blocks")
  m.add_argument("--heads", type=int, default=2, help="attention heads (must divide --dim)")
  m.add_argument("--tied", action="store_true", help="tie the LM head to the embedding")
  m.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                 help="model dtype (float32 when not given); with --logits, cast the logits "
                      "to it (the file's dtype when not given)")
  d = p.add_argument_group("decoding")
  d.add_argument("--batch", type=int, default=2, help="sequences decoded together")
  d.add_argument("--prompt-len", type=int, default=8, help="random prompt tokens per sequence")
  d.add_argument("--steps", type=int, default=16, help="tokens generated per sequence")
  d.add_argument("--mode", choices=("greedy", "sample"), default="greedy",
                 help="argmax of the logits, or sampling from softmax(logits / --temperature)")
  # None: omitted (greedy mode refuses a given one; sample mode takes 1.0)
  d.add_argument("--temperature", type=float, default=None,
                 help="--mode sample only (1.0 when omitted)")
  d.add_argument("--seed", type=int, default=0, help="weights, prompt and sampling keys")
  for flag, what in (("top-k", "keep the k most likely tokens (0: all)"),
                     ("top-p", "then the smallest head of them holding mass p (1: all)"),
                     ("min-p", "then the tokens at least min_p times as likely as the top one "
                               "(0: all)")):
    d.add_argument(f"--{flag}", metavar="V[,V...]",
                   help=f"--mode sample only: {what}; one value, or one per sequence "
                        "(comma-separated)")
  c = p.add_argument_group("comparison")
  c.add_argument("--compare", action="store_true",
                 help="also run with the reference picker (jnp.argmax; in sample mode "
                      "jax.random.categorical, or with filters the JAX sort-based sampler of "
                      "jax_samplers.py) and report speeds and agreement")
  c.add_argument("--trace-steps", type=int, default=8,
                 help="--compare: decode steps per picker in the profiler trace that gives "
                      "the device time per step (0: no trace)")
  c.add_argument("--check-draws", type=int, default=2048,
                 help="--compare --mode sample: draws per sampler for the distribution check")
  c.add_argument("--logits", metavar="FILE.npy",
                 help="pick from saved logits [rows, vocab] or [vocab] instead of the model "
                      "(model and decoding sizes are then ignored)")
  c.add_argument("--show-rows", type=int, default=8,
                 help="--logits: rows printed before the rest is summarized")
  return p


def _device_line() -> str:
  dev = jax.devices()[0]
  return (f"backend {jax.default_backend()}, device {dev.device_kind} ({dev}), "
          f"{jax.device_count()} device(s); jax {jax.__version__}, "
          f"jax_argreduce {jax_argreduce.__version__} (CUDA handler compiled in: "
          f"{'yes' if jax_argreduce.HAS_CUDA else 'no'}; fused sampler: "
          f"{'yes' if HAS_FUSED_SAMPLER else 'no'})")


def _speed_line(name: str, gen: Generation, batch: int) -> str:
  steady = gen.steady_s
  first = f"prefill {gen.prefill_s * 1e3:.0f} ms, first step (compile) {gen.step_s[0] * 1e3:.0f} ms"
  if not steady:
    return f"{name}: {first}; no steady-state steps (use --steps >= 2)"
  med = statistics.median(steady)  # tokens/s and ms/step both from the median step
  return (f"{name}: {batch / med:,.0f} tokens/s, {med * 1e3:.3f} ms/step (wall, median of "
          f"{len(steady)} steps after the first); {first}")


def _print_tokens(tokens: np.ndarray, show_seqs: int = 8, show_tokens: int = 8):
  print(f"first {min(show_tokens, tokens.shape[1])} generated token ids per sequence:")
  for i, row in enumerate(tokens[:show_seqs]):
    more = " ..." if tokens.shape[1] > show_tokens else ""
    print(f"  seq {i}: {' '.join(str(int(t)) for t in row[:show_tokens])}{more}")
  if tokens.shape[0] > show_seqs:
    print(f"  ... ({tokens.shape[0] - show_seqs} more sequences)")


def _first_logits(cfg: ModelConfig, params: dict, args) -> np.ndarray:
  """The logits of sequence 0 at the first decode step (after its prompt)."""
  prompt = make_prompt(cfg, args.batch, args.prompt_len, args.seed)
  cache = init_cache(cfg, args.batch, args.prompt_len)
  if args.prompt_len > 1:
    _, cache = forward(params, cache, prompt[:, :-1], 0, cfg)
  logits, _ = next_logits(params, cache, prompt[:, -1], jnp.int32(args.prompt_len - 1), cfg=cfg)
  return np.asarray(logits[0])


def run_model(args) -> int:
  cfg = ModelConfig(vocab=args.vocab, dim=args.dim, layers=args.layers, heads=args.heads,
                    tied=args.tied, dtype=args.dtype or "float32")
  params = init_params(cfg, args.seed)
  n_params = sum(int(np.prod(w.shape)) for w in jax.tree_util.tree_leaves(params))
  temp = f", temperature {args.temperature:g}" if args.mode == "sample" else ""
  if args.filters:
    temp += f", {describe_filters(args.filters)}"
  print(f"model: vocab {cfg.vocab:,}, dim {cfg.dim}, layers {cfg.layers}, heads {cfg.heads} "
        f"(head_dim {cfg.head_dim}), mlp {cfg.mlp_dim}, {'tied' if cfg.tied else 'untied'} "
        f"LM head, {n_params / 1e6:.1f}M params, {cfg.dtype}")
  print(f"decode: batch {args.batch}, prompt {args.prompt_len}, steps {args.steps}, "
        f"mode {args.mode}{temp}, seed {args.seed}")
  print(_device_line())

  by_tag = pickers_for(args.filters)
  our_picker, ref_picker = by_tag["ours"], by_tag["jnp"]
  pickers = list(by_tag.values()) if args.compare else [our_picker]
  gens: dict[str, Generation] = {}
  kw = dict(batch=args.batch, prompt_len=args.prompt_len, steps=args.steps, mode=args.mode,
            temperature=args.temperature, seed=args.seed, params=params)
  # With --compare every picker runs twice, in turn, and the second runs are reported: the
  # first run of the process would otherwise also pay for clocks ramping up.
  for rep in range(2 if args.compare else 1):
    for p in pickers:
      gen = generate(cfg, picker=p, desc=p.label(args.mode), **kw)
      if rep:  # report the first run's prefill and first step: the ones that compiled
        gen = dataclasses.replace(gen, prefill_s=gens[p.tag].prefill_s,
                                  step_s=[gens[p.tag].step_s[0]] + gen.step_s[1:])
      gens[p.tag] = gen
  for p in pickers:
    print(_speed_line(p.label(args.mode), gens[p.tag], args.batch))
  ours = gens[our_picker.tag]
  _print_tokens(ours.tokens)
  if not args.compare:
    return 0

  ref = gens[ref_picker.tag]
  name, ref_name = our_picker.label(args.mode), ref_picker.label(args.mode)
  if ours.steady_s and ref.steady_s:
    ratio = statistics.median(ref.steady_s) / statistics.median(ours.steady_s)
    print(f"median step wall time, {ref_name} / {name}: {ratio:.2f}x")
  if args.trace_steps > 0:
    spans, source = device_step_spans(
        cfg, params, pickers, batch=args.batch, prompt_len=args.prompt_len,
        steps=min(args.trace_steps, args.steps), max_len=args.prompt_len + args.steps,
        mode=args.mode, temperature=args.temperature, seed=args.seed)
    a, b = spans.get(our_picker.tag), spans.get(ref_picker.tag)
    if a and b:
      print(f"device span per step (profiler trace, median of {min(args.trace_steps, args.steps)}"
            f" steps, {source}): {name} {a:.1f} µs, {ref_name} {b:.1f} µs; ours - reference "
            f"{a - b:+.1f} µs ({b / a:.2f}x)")
    elif spans:
      print(f"device span per step: not found in the trace ({source})")
    else:
      print(f"device span per step: {source}")

  if args.mode == "sample":
    return _sample_check(cfg, params, args, by_tag)
  same = np.array_equal(ours.tokens, ref.tokens)
  if same:
    print(f"greedy tokens identical to jnp.argmax: yes ({ours.tokens.size} tokens)")
    return 0
  diff = np.argwhere(ours.tokens != ref.tokens)
  seq, pos = (int(v) for v in diff[0])
  print(f"greedy tokens identical to jnp.argmax: NO ({len(diff)} of {ours.tokens.size} differ; "
        f"first at seq {seq}, step {pos}: {ours.tokens[seq, pos]} vs {ref.tokens[seq, pos]})")
  return 1  # same logits, same argmax: a mismatch is a bug


def _sample_check(cfg: ModelConfig, params: dict, args, pickers: dict[str, Picker]) -> int:
  """Both samplers against softmax(logits / T) on sequence 0's first logits row; with filters
  renormalized over the JAX reference's kept set (sequence 0's filter values), and ours
  against the reference's draws by a two-sample test."""
  row = _first_logits(cfg, params, args)
  ours, ref = pickers["ours"], pickers["jnp"]
  samplers = {p.sample_name: functools.partial(p.sample, **p.sample_kwargs(row=0))
              for p in pickers.values()}
  kept = None
  if ours.filters:
    kept = np.asarray(jax_samplers.kept(jnp.asarray(row), args.temperature,
                                        **ref.sample_kwargs(row=0)))
  res = distribution_check(row, args.temperature, samplers, draws=args.check_draws,
                           seed=args.seed, kept=kept)
  mine = res["results"][ours.sample_name]
  if res["df"] == 0:  # one bin holds every token: any sample fits, nothing is tested
    print(f"sampling check: not informative for this row: softmax(logits / "
          f"{args.temperature:g}) is too peaked (or keeps too few tokens) for more than one "
          f"equal-mass bin at {res['draws']} draws (raise --temperature or --check-draws, or "
          f"drop --tied)")
    return 1 if mine["outside"] else 0
  target = f"softmax(logits / {args.temperature:g})"
  if kept is not None:
    row_filters = tuple(ref.sample_kwargs(row=0).items())
    target += (f" over the JAX sampler's kept set ({int(kept.sum())} tokens; sequence 0's "
               f"{describe_filters(row_filters)})")
  print(f"sampling check: {res['draws']} draws per sampler from sequence 0's first logits row, "
        f"token frequencies in {res['bins']} equal-mass bins vs {target}; chi-square fails "
        f"above {res['threshold']:.1f} (df {res['df']}, p < {CHECK_ALPHA:g})")
  for name, r in res["results"].items():
    outside = f", {r['outside']} outside the kept set" if kept is not None and r["outside"] else ""
    print(f"  {name}: chi2 {r['chi2']:.1f}, total variation {r['tv']:.3f}{outside}: "
          f"{'pass' if r['ok'] else 'FAIL'}")
  ok = mine["ok"]
  if ours.filters:  # the two samplers' draws against each other, same bins
    two = two_sample_check(mine["counts"], res["results"][ref.sample_name]["counts"])
    print(f"  ours vs the JAX sampler: two-sample chi2 {two['chi2']:.1f} (df {two['df']}, fails "
          f"above {two['threshold']:.1f}), total variation {two['tv']:.3f}: "
          f"{'pass' if two['ok'] else 'FAIL'}")
    ok = ok and two["ok"]
  return 0 if ok else 1


def run_logits(args) -> int:
  try:
    arr = np.load(args.logits)
  except (OSError, ValueError) as e:
    print(f"error: cannot read {args.logits}: {e}", file=sys.stderr)
    return 2
  if arr.dtype == np.dtype("V2"):  # bfloat16 saved by np.save(np.asarray(jax_array))
    arr = arr.view(jnp.bfloat16)
  if arr.ndim not in (1, 2) or arr.shape[-1] == 0 or arr.dtype.kind not in "fiubV":
    print(f"error: {args.logits}: expected [rows, vocab] or [vocab] real numbers with "
          f"vocab > 0, got shape {arr.shape} dtype {arr.dtype}", file=sys.stderr)
    return 2
  rows = arr.reshape(1, -1) if arr.ndim == 1 else arr
  note = ""
  if args.dtype:
    rows = np.asarray(jnp.asarray(rows).astype(DTYPES[args.dtype]))
  elif rows.dtype == np.float64 and jax.dtypes.canonicalize_dtype(np.float64) != np.float64:
    rows = rows.astype(np.float32)
    note = " (float64 cast to float32; set JAX_ENABLE_X64=1 to keep float64)"
  print(f"logits: {args.logits}, {rows.shape[0]} row(s) x vocab {rows.shape[1]:,}, "
        f"{rows.dtype}{note}; mode {args.mode}"
        + (f", temperature {args.temperature:g}, seed {args.seed}" if args.mode == "sample"
           else "") + (f", {describe_filters(args.filters)}" if args.filters else ""))
  print(_device_line())
  error = check_filter_rows(args.filters, rows.shape[0], "row of the file")
  if error:
    print(f"error: {error}", file=sys.stderr)
    return 2

  x = jnp.asarray(rows)
  greedy = functools.partial(pick_tokens, seq_keys=None, pos=None, temperature=None,
                             mode="greedy")
  idx = np.asarray(jax.jit(functools.partial(greedy, picker=OURS))(x))
  ref = (np.asarray(jax.jit(functools.partial(greedy, picker=REFERENCE))(x))
         if args.compare else None)
  sampled = None
  if args.mode == "sample":
    sample = jax.jit(functools.partial(pick_tokens, mode="sample",
                                       picker=pickers_for(args.filters)["ours"]))
    sampled = np.asarray(sample(x, sequence_keys(args.seed, rows.shape[0]), jnp.int32(0),
                                jnp.float32(args.temperature)))

  header = f"{'row':>6} {'argmax':>10} {'logit':>14}"
  if ref is not None:
    header += f" {'jnp.argmax':>10} {'agree':>5}"
  if sampled is not None:
    header += f" {'sampled':>10}"
  print(header)
  shown = min(rows.shape[0], max(args.show_rows, 0))
  for r in range(shown):
    line = f"{r:>6} {int(idx[r]):>10} {float(rows[r, idx[r]]):>14.7g}"
    if ref is not None:
      line += f" {int(ref[r]):>10} {'yes' if ref[r] == idx[r] else 'NO':>5}"
    if sampled is not None:
      line += f" {int(sampled[r]):>10}"
    print(line)
  if rows.shape[0] > shown:
    print(f"   ... {rows.shape[0] - shown} more rows (--show-rows N prints more)")

  if ref is not None:
    agree = int(np.sum(ref == idx))
    hint = ("" if agree == len(idx) else
            " (jnp.argmax flushes subnormals to zero; jax_argreduce follows numpy.argmax)")
    print(f"jnp.argmax agrees on {agree}/{len(idx)} rows{hint}")
  numpy_idx = np.argmax(rows, axis=-1)
  if not np.array_equal(numpy_idx, idx):
    bad = np.flatnonzero(numpy_idx != idx)
    print(f"jax_argreduce.argmax differs from numpy.argmax on {len(bad)} row(s), first row "
          f"{bad[0]}: {idx[bad[0]]} vs {numpy_idx[bad[0]]}")
    return 1
  print(f"jax_argreduce.argmax equals numpy.argmax on all {len(idx)} rows")
  return 0


# Per filter: the value's type and its range (SPEC §1f), as the flag's error says it.
_FILTER_RANGES = {"top_k": (int, lambda v: v >= 0, ">= 0"),
                  "top_p": (float, lambda v: 0 < v <= 1, "in (0, 1]"),
                  "min_p": (float, lambda v: 0 <= v <= 1, "in [0, 1]")}


def parse_filters(args) -> tuple:
  """``--top-k`` / ``--top-p`` / ``--min-p`` as Picker.filters: ((name, value), ...), a value
  a scalar or a tuple (one per sequence). Raises ValueError naming the flag."""
  out = []
  for name in FILTERS:
    text = getattr(args, name)
    if text is None:
      continue
    flag = "--" + name.replace("_", "-")
    cast, ok, rule = _FILTER_RANGES[name]
    try:
      values = tuple(cast(v) for v in text.split(","))
    except ValueError:
      raise ValueError(f"{flag} {text!r}: expected {cast.__name__} values, comma-separated")
    if not all(ok(v) for v in values):
      raise ValueError(f"{flag} {text!r}: every value must be {rule}")
    out.append((name, values[0] if len(values) == 1 else values))
  return tuple(out)


def check_filter_rows(filters: tuple, rows: int, what: str) -> str | None:
  """An error where a per-sequence filter has not one value per ``what`` (``rows``)."""
  for name, v in filters:
    if isinstance(v, tuple) and len(v) != rows:
      return (f"--{name.replace('_', '-')} has {len(v)} values: give one, or one per {what} "
              f"({rows})")
  return None


def main(argv: list[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  if args.mode == "greedy" and args.temperature is not None:
    print("error: --temperature applies to --mode sample only (greedy is argmax)",
          file=sys.stderr)
    return 2
  try:
    args.filters = parse_filters(args)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if args.filters and args.mode == "greedy":
    print("error: --top-k, --top-p and --min-p apply to --mode sample only (greedy is argmax)",
          file=sys.stderr)
    return 2
  if args.filters and not HAS_FILTERS:
    print("error: this jax_argreduce's categorical has no top_k/top_p/min_p (SPEC §1f)",
          file=sys.stderr)
    return 2
  if args.temperature is None:
    args.temperature = 1.0
  if args.mode == "sample" and not args.temperature > 0:
    print("error: --temperature must be > 0 in sample mode (T = 0 is --mode greedy)",
          file=sys.stderr)
    return 2
  if args.logits:
    return run_logits(args)
  error = check_filter_rows(args.filters, args.batch, "sequence (--batch)")
  if error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  for flag in ("vocab", "dim", "layers", "heads", "batch", "prompt_len", "steps", "check_draws"):
    if getattr(args, flag) < 1:
      print(f"error: --{flag.replace('_', '-')} must be >= 1", file=sys.stderr)
      return 2
  if args.dim % args.heads:
    print(f"error: --dim {args.dim} is not a multiple of --heads {args.heads}", file=sys.stderr)
    return 2
  return run_model(args)


if __name__ == "__main__":
  sys.exit(main())
