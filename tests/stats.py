"""Statistics shared by the sampler's CPU and GPU tests (tests/test_categorical.py,
tests/test_gpu_categorical.py): chi-square goodness of fit and homogeneity with their p-values,
the Kolmogorov-Smirnov p-value, binomial z-scores and the far-tail mass check, and the float64
softmax / Gumbel references. numpy and math only (no scipy, no jax)."""

from __future__ import annotations

import math
import time

import numpy as np

P_MIN = 1e-6          # every goodness-of-fit p-value must be at least this
SIGMAS = 5.0          # every frequency within this many standard errors of its expectation
MIN_EXPECTED = 5.0    # chi-square bins with a smaller expected count are pooled


def chi2_sf(x: float, df: int) -> float:
  """P(chi2_df >= x): the regularized upper incomplete gamma Q(df/2, x/2) (series below
  a + 1, Lentz's continued fraction above; Numerical Recipes 6.2). No scipy needed."""
  a, x = df / 2.0, x / 2.0
  if x <= 0:
    return 1.0
  log_prefactor = -x + a * math.log(x) - math.lgamma(a)
  if x < a + 1:
    term = total = 1.0 / a
    ap = a
    for _ in range(100000):
      ap += 1
      term *= x / ap
      total += term
      if abs(term) < abs(total) * 1e-16:
        break
    return max(0.0, 1.0 - total * math.exp(log_prefactor))
  tiny = 1e-300
  b = x + 1 - a
  c, d = 1 / tiny, 1 / b
  h = d
  for i in range(1, 100000):
    an = -i * (i - a)
    b += 2
    d = an * d + b
    d = tiny if abs(d) < tiny else d
    c = b + an / c
    c = tiny if abs(c) < tiny else c
    d = 1 / d
    delta = d * c
    h *= delta
    if abs(delta - 1) < 1e-16:
      break
  return math.exp(log_prefactor) * h


def kolmogorov_sf(d: float, n: int) -> float:
  """P(D_n >= d) for the one-sample Kolmogorov-Smirnov statistic (asymptotic, Stephens'
  correction)."""
  lam = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
  if lam < 0.2:
    return 1.0
  return min(1.0, max(0.0, 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam)
                                   for k in range(1, 200))))


def _pool(observed, expected):
  """Keeps bins with expected >= MIN_EXPECTED, pools the rest into one bin (merged into the
  smallest kept bin if still below MIN_EXPECTED)."""
  observed, expected = np.asarray(observed, np.float64), np.asarray(expected, np.float64)
  keep = expected >= MIN_EXPECTED
  obs, exp = list(observed[keep]), list(expected[keep])
  if (~keep).any():
    o, e = observed[~keep].sum(), expected[~keep].sum()
    if e >= MIN_EXPECTED or not exp:
      obs.append(o)
      exp.append(e)
    else:
      i = int(np.argmin(exp))
      obs[i] += o
      exp[i] += e
  return np.asarray(obs), np.asarray(exp)


def chi_square_gof(samples, probs):
  """(statistic, df, p) of the samples against ``probs``; zero-probability categories must
  never be drawn and every index must be in range."""
  samples = np.asarray(samples).ravel()
  probs = np.asarray(probs, np.float64)
  assert samples.min() >= 0 and samples.max() < probs.size, "index out of range"
  counts = np.bincount(samples, minlength=probs.size).astype(np.float64)
  zero = probs == 0
  assert counts[zero].sum() == 0, f"drew zero-probability categories {np.nonzero(counts * zero)}"
  obs, exp = _pool(counts[~zero], samples.size * probs[~zero] / probs[~zero].sum())
  stat = float(np.sum((obs - exp) ** 2 / exp))
  df = max(len(obs) - 1, 1)
  return stat, df, chi2_sf(stat, df)


def chi_square_two_sample(a, b, size: int):
  """(statistic, df, p) of the homogeneity test of two equal-size samples over ``size``
  categories (bins with fewer than 2 * MIN_EXPECTED draws in all are pooled)."""
  ca = np.bincount(np.asarray(a).ravel(), minlength=size).astype(np.float64)
  cb = np.bincount(np.asarray(b).ravel(), minlength=size).astype(np.float64)
  assert ca.size == size and cb.size == size and ca.sum() == cb.sum()
  keep = ca + cb >= 2 * MIN_EXPECTED
  oa, ob = list(ca[keep]), list(cb[keep])
  if (~keep).any() and (ca[~keep] + cb[~keep]).sum() > 0:
    oa.append(ca[~keep].sum())
    ob.append(cb[~keep].sum())
  oa, ob = np.asarray(oa), np.asarray(ob)
  stat = float(np.sum((oa - ob) ** 2 / (oa + ob)))
  df = max(len(oa) - 1, 1)
  return stat, df, chi2_sf(stat, df)


def within_sigmas(observed: float, n: int, p: float):
  """(z, ok): the binomial z-score of ``observed`` successes in ``n`` trials of probability p."""
  sd = math.sqrt(n * p * (1 - p))
  z = (observed - n * p) / sd
  return z, abs(z) <= SIGMAS


def softmax_probs(logits, temperature=1.0):
  """softmax(logits / T) in float64 from the logits as rounded to their dtype (-inf -> 0)."""
  x = np.asarray(logits).astype(np.float64) / temperature
  m = np.max(x[np.isfinite(x)])
  p = np.where(np.isneginf(x), 0.0, np.exp(x - m))
  return p / p.sum()


def gumbel_cdf(g):
  return np.exp(-np.exp(-np.asarray(g, np.float64)))


def report(name, **stats):
  print(f"[categorical stats] {name}: " + ", ".join(
      f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in stats.items()))


def check_tail_mass(name, head, tail, observed, draws, start):
  """Asserts ``observed`` tail draws of ``draws`` within the sigma bound of the tail's
  softmax probability tail e^-head / (1 + tail e^-head); reports the statistics."""
  p = tail * math.exp(-head) / (1 + tail * math.exp(-head))
  z, ok = within_sigmas(observed, draws, p)
  report(f"{name} head={head} tail={tail}", draws=draws, observed=observed,
         expected=draws * p, frequency=observed / draws, p=p, z=z,
         seconds=time.perf_counter() - start)
  assert ok, f"{observed} tail draws of {draws}, expected {draws * p:.1f} (z = {z:.2f})"
