"""Token picking in a small decoder-only language model with ``jax_argreduce.argmax``.

A decoder written in plain JAX (token embedding, pre-norm blocks of multi-head causal
self-attention and an MLP, a KV cache for incremental decoding, a final norm and an LM head,
weights from a fixed seed) decodes ``--steps`` tokens per sequence. Each decode step is one
``jax.jit`` that donates the KV cache; the next token is picked from the ``[batch, vocab]``
logits either greedily (``jax_argreduce.argmax(logits, axis=-1)``) or by Gumbel-max sampling
(temperature-scaled logits plus Gumbel noise from a per-sequence key, then argmax; written for
one sequence and ``jax.vmap``'d over the batch). ``--compare`` runs the same model and prompt
again with ``jnp.argmax`` as the picker, reports both speeds, and checks that greedy tokens are
identical (exit code 1 if not). ``--logits FILE.npy`` skips the model and picks from saved
logits of shape ``[rows, vocab]`` or ``[vocab]`` instead.

  python examples/sample.py                              # CPU-sized defaults, vocab 202048
  python examples/sample.py --compare --mode sample --temperature 0.8
  python examples/sample.py --batch 64 --layers 4 --dim 512 --heads 8 --steps 256 \\
      --dtype bfloat16 --compare                         # on a GPU
  python examples/sample.py --logits logits.npy --compare
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import statistics
import sys
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jax_argreduce

ArgmaxFn = Callable[..., jax.Array]

# Pickers --compare runs, by the name printed for them.
PICKERS: dict[str, ArgmaxFn] = {
    "jax_argreduce.argmax": jax_argreduce.argmax,
    "jnp.argmax": jnp.argmax,
}
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
_SAMPLE_KEY_TAG = 1  # the sampling keys are fold_in(key(seed), tag), apart from the weights'
_PROMPT_KEY_TAG = 2


# ----------------------------------------------------------------------------------------------
# Token picking: the one place a future fused sampler (e.g. a jax_argreduce Gumbel-max
# function) would replace "Gumbel noise + argmax".
# ----------------------------------------------------------------------------------------------

def pick_tokens(logits: jax.Array, seq_keys: jax.Array, pos: jax.Array, temperature: jax.Array,
                *, mode: str, argmax_fn: ArgmaxFn = jax_argreduce.argmax) -> jax.Array:
  """Picks one token id per row of ``logits`` ``[batch, vocab]``; returns ``[batch]`` int32.

  greedy: ``argmax_fn(logits, axis=-1)`` on the whole batch. sample: Gumbel-max sampling from
  ``softmax(logits / temperature)``, written for one sequence and vmapped over the batch; the
  noise of row ``i`` at position ``pos`` comes from ``fold_in(seq_keys[i], pos)``, so a
  sequence's samples depend on its key and position only.
  """
  if mode == "greedy":
    return argmax_fn(logits, axis=-1)
  if mode != "sample":
    raise ValueError(f"mode must be 'greedy' or 'sample', got {mode!r}")

  def sample_one(row: jax.Array, key: jax.Array) -> jax.Array:  # row: [vocab]
    noise = jax.random.gumbel(jax.random.fold_in(key, pos), row.shape, jnp.float32)
    return argmax_fn(row.astype(jnp.float32) / temperature + noise)

  return jax.vmap(sample_one)(logits, seq_keys)


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


def _decode_step(params, cache, tokens, pos, seq_keys, temperature, *, cfg, mode, argmax_fn):
  """One token per sequence: ``tokens`` ``[batch]`` at ``pos`` in, the next ones out."""
  h, cache = forward(params, cache, tokens[:, None], pos, cfg)
  logits = lm_head(params, h[:, -1])  # [batch, vocab]
  return pick_tokens(logits, seq_keys, pos, temperature, mode=mode, argmax_fn=argmax_fn), cache


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


@functools.lru_cache(maxsize=16)
def _compiled(cfg: ModelConfig, mode: str, argmax_fn: ArgmaxFn):
  """The jitted prefill and decode step (each donates the KV cache), reused across calls."""
  prefill = jax.jit(functools.partial(_prefill, cfg=cfg), donate_argnums=(1,))
  step = jax.jit(functools.partial(_decode_step, cfg=cfg, mode=mode, argmax_fn=argmax_fn),
                 donate_argnums=(1,))
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
             argmax_fn: ArgmaxFn = jax_argreduce.argmax, params: dict | None = None,
             desc: str | None = None) -> Generation:
  """Decodes ``steps`` tokens for ``batch`` prompts; the tokens are ``Generation.tokens``.

  The prompt (random token ids) and the weights come from ``seed``; ``argmax_fn`` picks the
  tokens (``jax_argreduce.argmax`` or ``jnp.argmax``). ``desc`` shows a progress bar.
  """
  if params is None:
    params = init_params(cfg, seed)
  prompt = make_prompt(cfg, batch, prompt_len, seed)
  seq_keys = sequence_keys(seed, batch)
  temp = jnp.float32(temperature)
  cache = init_cache(cfg, batch, prompt_len + steps)

  prefill, step = _compiled(cfg, mode, argmax_fn)

  t0 = time.perf_counter()
  if prompt_len > 1:  # the last prompt token is the first decode step's input
    cache = jax.block_until_ready(prefill(params, cache, prompt[:, :-1]))
  prefill_s = time.perf_counter() - t0

  bar = progress_bar(steps, desc) if desc else None
  tok, out, step_s = prompt[:, -1], [], []
  for i in range(steps):
    t0 = time.perf_counter()
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
# Command line
# ----------------------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      description=__doc__.split("\n\n")[0],
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
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
                 help="argmax of the logits, or Gumbel-max sampling at --temperature")
  d.add_argument("--temperature", type=float, default=1.0, help="sample mode only")
  d.add_argument("--seed", type=int, default=0, help="weights, prompt and sampling keys")
  d.add_argument("--compare", action="store_true",
                 help="also run with jnp.argmax and report speed and agreement")
  d.add_argument("--logits", metavar="FILE.npy",
                 help="pick from saved logits [rows, vocab] or [vocab] instead of the model "
                      "(model and decoding sizes are then ignored)")
  return p


def _device_line() -> str:
  dev = jax.devices()[0]
  return (f"backend {jax.default_backend()}, device {dev.device_kind} ({dev}), "
          f"{jax.device_count()} device(s); jax {jax.__version__}, "
          f"jax_argreduce {jax_argreduce.__version__} (CUDA handler compiled in: "
          f"{'yes' if jax_argreduce.HAS_CUDA else 'no'})")


def _speed_line(name: str, gen: Generation, batch: int) -> str:
  steady = gen.steady_s
  first = f"prefill {gen.prefill_s * 1e3:.0f} ms, first step (compile) {gen.step_s[0] * 1e3:.0f} ms"
  if not steady:
    return f"{name}: {first}; no steady-state steps (use --steps >= 2)"
  med = statistics.median(steady)
  return (f"{name}: {batch * len(steady) / sum(steady):,.0f} tokens/s, "
          f"{med * 1e3:.3f} ms/step (median of {len(steady)} steps after the first); {first}")


def _print_tokens(tokens: np.ndarray, show_seqs: int = 8, show_tokens: int = 8):
  print(f"first {min(show_tokens, tokens.shape[1])} generated token ids per sequence:")
  for i, row in enumerate(tokens[:show_seqs]):
    more = " ..." if tokens.shape[1] > show_tokens else ""
    print(f"  seq {i}: {' '.join(str(int(t)) for t in row[:show_tokens])}{more}")
  if tokens.shape[0] > show_seqs:
    print(f"  ... ({tokens.shape[0] - show_seqs} more sequences)")


def run_model(args) -> int:
  cfg = ModelConfig(vocab=args.vocab, dim=args.dim, layers=args.layers, heads=args.heads,
                    tied=args.tied, dtype=args.dtype or "float32")
  params = init_params(cfg, args.seed)
  n_params = sum(int(np.prod(w.shape)) for w in jax.tree_util.tree_leaves(params))
  temp = f", temperature {args.temperature:g}" if args.mode == "sample" else ""
  print(f"model: vocab {cfg.vocab:,}, dim {cfg.dim}, layers {cfg.layers}, heads {cfg.heads} "
        f"(head_dim {cfg.head_dim}), mlp {cfg.mlp_dim}, {'tied' if cfg.tied else 'untied'} "
        f"LM head, {n_params / 1e6:.1f}M params, {cfg.dtype}")
  print(f"decode: batch {args.batch}, prompt {args.prompt_len}, steps {args.steps}, "
        f"mode {args.mode}{temp}, seed {args.seed}")
  print(_device_line())

  names = list(PICKERS) if args.compare else ["jax_argreduce.argmax"]
  gens = {}
  # With --compare every picker runs twice, in turn, and the second runs are reported: the
  # first run of the process would otherwise also pay for clocks ramping up.
  for rep in range(2 if args.compare else 1):
    for name in names:
      gen = generate(cfg, batch=args.batch, prompt_len=args.prompt_len, steps=args.steps,
                     mode=args.mode, temperature=args.temperature, seed=args.seed,
                     argmax_fn=PICKERS[name], params=params, desc=name)
      if rep:  # report the first run's prefill and first step: the ones that compiled
        gen = dataclasses.replace(gen, prefill_s=gens[name].prefill_s,
                                  step_s=[gens[name].step_s[0]] + gen.step_s[1:])
      gens[name] = gen
  for name in names:
    print(_speed_line(name, gens[name], args.batch))
  ours = gens["jax_argreduce.argmax"]
  _print_tokens(ours.tokens)
  if not args.compare:
    return 0

  ref = gens["jnp.argmax"]
  if ours.steady_s and ref.steady_s:
    ratio = statistics.median(ref.steady_s) / statistics.median(ours.steady_s)
    print(f"median step latency, jnp.argmax / jax_argreduce.argmax: {ratio:.2f}x")
  same = np.array_equal(ours.tokens, ref.tokens)
  what = "greedy" if args.mode == "greedy" else "sampled (same Gumbel noise)"
  if same:
    print(f"{what} tokens identical to jnp.argmax: yes ({ours.tokens.size} tokens)")
    return 0
  diff = np.argwhere(ours.tokens != ref.tokens)
  seq, pos = (int(v) for v in diff[0])
  print(f"{what} tokens identical to jnp.argmax: NO ({len(diff)} of {ours.tokens.size} differ; "
        f"first at seq {seq}, step {pos}: {ours.tokens[seq, pos]} vs {ref.tokens[seq, pos]})")
  # Same logits, same argmax: a greedy mismatch is a bug. Sampled tokens add the same noise
  # to the same logits too, so a mismatch there is reported, but only greedy fails the run.
  return 1 if args.mode == "greedy" else 0


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
           else ""))
  print(_device_line())

  x = jnp.asarray(rows)
  greedy = functools.partial(pick_tokens, seq_keys=None, pos=None, temperature=None,
                             mode="greedy")
  idx = np.asarray(jax.jit(functools.partial(greedy, argmax_fn=jax_argreduce.argmax))(x))
  ref = (np.asarray(jax.jit(functools.partial(greedy, argmax_fn=jnp.argmax))(x))
         if args.compare else None)
  sampled = None
  if args.mode == "sample":
    sample = jax.jit(functools.partial(pick_tokens, mode="sample",
                                       argmax_fn=jax_argreduce.argmax))
    sampled = np.asarray(sample(x, sequence_keys(args.seed, rows.shape[0]), jnp.int32(0),
                                jnp.float32(args.temperature)))

  header = f"{'row':>6} {'argmax':>10} {'logit':>14}"
  if ref is not None:
    header += f" {'jnp.argmax':>10} {'agree':>5}"
  if sampled is not None:
    header += f" {'sampled':>10}"
  print(header)
  for r in range(rows.shape[0]):
    line = f"{r:>6} {int(idx[r]):>10} {float(rows[r, idx[r]]):>14.7g}"
    if ref is not None:
      line += f" {int(ref[r]):>10} {'yes' if ref[r] == idx[r] else 'NO':>5}"
    if sampled is not None:
      line += f" {int(sampled[r]):>10}"
    print(line)

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
  return 0


def main(argv: list[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  if args.mode == "sample" and not args.temperature > 0:
    print("error: --temperature must be > 0 in sample mode", file=sys.stderr)
    return 2
  if args.logits:
    return run_logits(args)
  for flag in ("vocab", "dim", "layers", "heads", "batch", "prompt_len", "steps"):
    if getattr(args, flag) < 1:
      print(f"error: --{flag.replace('_', '-')} must be >= 1", file=sys.stderr)
      return 2
  if args.dim % args.heads:
    print(f"error: --dim {args.dim} is not a multiple of --heads {args.heads}", file=sys.stderr)
    return 2
  return run_model(args)


if __name__ == "__main__":
  sys.exit(main())
