"""Filtered sampling as JAX decoders write it today: the reference for jax_argreduce's filters.

What MaxText, JetStream and Gemma's samplers do (SPEC §3c), in one function per step of SPEC
§1f's order (temperature, top-k, top-p, min-p), each a plain JAX program:

- top-k: ``lax.top_k(logits / T, k)``, ``jax.random.categorical`` over the k values, the
  index mapped back through the k indices;
- top-p: sort the row descending, softmax, cumulative sum, mask the tokens whose mass before
  them is ``>= p`` (the first is always kept), ``jax.random.categorical`` on the masked logits
  (the cut-off is a logit threshold on the unsorted row, as JetStream writes it: the sort
  carries no indices);
- top-k then top-p: the same mass rule on the k sorted values;
- min-p: mask where ``softmax <  min_p * its maximum``.

``z = logits / T`` is computed in float32 (bfloat16 logits are cast first, as the example's
unfiltered reference does: ``jax.random`` would draw bfloat16 noise otherwise), which is also
SPEC §1f's z, so on rows without near-ties the kept sets are SPEC §1f's (tests/test_jax_samplers
.py): the benchmark compares like with like. They differ from jax_argreduce's where float32
masses cannot resolve a boundary (jax_argreduce sums exact fixed-point masses) and, for top-p
alone, where logits tie at the cut-off (the threshold keeps every tied token). Samples come from
``jax.random`` (threefry): the same distribution as jax_argreduce's, other samples.

Used by ``benchmarks/bench.py`` (the filtered cases' reference) and ``examples/sample.py``
(``--compare`` with ``--top-k`` / ``--top-p`` / ``--min-p``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def lax_top_k_bound(top_k, vocab: int) -> int:
  """``lax.top_k``'s static k for ``top_k``: None, an int, or concrete ints (one per row).

  0 where no row filters (None, 0 or ``>= vocab`` everywhere); the largest k where every row
  filters; ``vocab`` (a full sort) where some rows filter and others keep all.
  """
  if top_k is None:
    return 0
  ks = np.asarray(top_k).reshape(-1)
  keep_all = (ks <= 0) | (ks >= vocab)
  if keep_all.all():
    return 0
  return vocab if keep_all.any() else int(ks.max())


def _column(v):
  """A per-row value (scalar or [...]) as a column broadcasting against [..., n]."""
  return jnp.asarray(v)[..., None]


def _mass_before(z_sorted):
  """Per token of rows sorted descending: the probability mass of the tokens before it."""
  probs = jax.nn.softmax(z_sorted, axis=-1)
  return jnp.cumsum(probs, axis=-1) - probs


def filter_logits(z, *, k_bound: int = 0, top_k=None, top_p=None, min_p=None):
  """The candidates of ``z`` ``[..., V]`` (float32) and their logits, filtered tokens ``-inf``.

  Returns ``(logits [..., n], token ids [..., n] or None)``: with ``k_bound`` (static) the
  ``lax.top_k(z, k_bound)`` values and indices, rows whose own ``top_k`` (traced, [...]) is
  smaller masking the rest; else the row itself (ids None). ``top_p``, ``min_p``: None or
  scalars / arrays of the batch shape.
  """
  ids = None
  if k_bound:
    z, ids = lax.top_k(z, k_bound)  # sorted descending
    if top_k is not None and not (isinstance(top_k, (int, np.integer)) and top_k == k_bound):
      k = jnp.asarray(top_k)
      k = _column(jnp.where((k <= 0) | (k > k_bound), k_bound, k))
      z = jnp.where(jnp.arange(k_bound) < k, z, -jnp.inf)
  if top_p is not None:
    p = _column(top_p).astype(jnp.float32)
    if ids is not None:  # the k values are sorted already
      z = jnp.where(_mass_before(z) < p, z, -jnp.inf)
    else:
      s = jnp.flip(jnp.sort(z, axis=-1), axis=-1)
      count = jnp.sum(_mass_before(s) < p, axis=-1, keepdims=True)
      cutoff = jnp.take_along_axis(s, jnp.maximum(count, 1) - 1, axis=-1)
      z = jnp.where(z >= cutoff, z, -jnp.inf)
  if min_p is not None:
    probs = jax.nn.softmax(z, axis=-1)
    keep = probs >= _column(min_p).astype(jnp.float32) * jnp.max(probs, axis=-1, keepdims=True)
    z = jnp.where(keep, z, -jnp.inf)
  return z, ids


def scaled(logits, temperature):
  """``logits / T`` in float32; ``temperature`` a scalar or one value per row."""
  return logits.astype(jnp.float32) / _column(temperature).astype(jnp.float32)


def sample(key, logits, temperature=1.0, *, top_k=None, top_p=None, min_p=None,
           k_bound: int | None = None):
  """One draw per row of ``logits`` ``[..., V]`` with one key (``jax.random.categorical``'s
  batching), from ``softmax(logits / T)`` renormalized over what the filters keep.

  ``top_k``: None, an int, or concrete ints per row (``lax.top_k`` takes a static k:
  :func:`lax_top_k_bound`); traced per-row values need ``k_bound``. ``top_p``, ``min_p``:
  None, a scalar or one value per row. Returns int32 token ids of the batch shape.
  """
  if k_bound is None:
    k_bound = lax_top_k_bound(top_k, logits.shape[-1])
  z, ids = filter_logits(scaled(logits, temperature), k_bound=k_bound, top_k=top_k,
                         top_p=top_p, min_p=min_p)
  i = jax.random.categorical(key, z, axis=-1).astype(jnp.int32)
  return i if ids is None else jnp.take_along_axis(ids, i[..., None], axis=-1)[..., 0]


def sample_rows(keys, logits, temperature, *, top_k=None, top_p=None, min_p=None):
  """:func:`sample` with one key per row (``keys [B]``, ``logits [B, V]``), vmapped as the
  example's unfiltered reference is; the filters as in :func:`sample`."""
  rows = logits.shape[0]
  k_bound = lax_top_k_bound(top_k, logits.shape[-1])
  per_row = lambda v: None if v is None else jnp.broadcast_to(jnp.asarray(v), (rows,))
  t, k, p, m = (per_row(v) for v in (temperature, top_k, top_p, min_p))
  one = lambda key, row, t, k, p, m: sample(key, row, t, top_k=k, top_p=p, min_p=m,
                                            k_bound=k_bound)
  return jax.vmap(one)(keys, logits, t, k, p, m)


def kept(logits, temperature=1.0, *, top_k=None, top_p=None, min_p=None):
  """What :func:`sample` draws from, as a boolean mask ``[..., V]`` (finite logits)."""
  k_bound = lax_top_k_bound(top_k, logits.shape[-1])
  z, ids = filter_logits(scaled(logits, temperature), k_bound=k_bound, top_k=top_k,
                         top_p=top_p, min_p=min_p)
  keep = jnp.isfinite(z)
  if ids is None:
    return keep
  mask = jnp.zeros(logits.shape, bool)
  return jnp.put_along_axis(mask, ids, keep, axis=-1, inplace=False)
