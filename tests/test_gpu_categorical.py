"""`jax_argreduce.categorical` on the GPU (marker ``gpu``; skipped without one).

* CPU indices == GPU indices, exactly, for the same key and logits (the CPU handler runs on
  the CPU device of the same process): 1x202048, 8x202048, 37x4099, 256x32000, 4096x128,
  65536x64 and more (every launch path: team with the row loop, block per row, split with and
  without PDL), float32/bfloat16/float16/float64, scalar and per-row keys, no / scalar
  / per-row temperatures (zeros included), special-value rows, unaligned slices taken inside
  jit, vmap, extreme temperatures, and peaked rows (LLM-like heads far above the tail);
* samples do not depend on the launch geometry: trailing -inf columns and more rows (another
  path) leave each row's sample unchanged;
* several sampler calls in one jitted program (command buffers) with poisoned, donated output
  buffers and fresh inputs every run;
* statistics with millions of draws: chi-square against softmax(logits / T) (p >= 1e-6), the
  far tail (a head 18 above a 200,000-token tail, 4M draws: 12,147 expected, 5 sigma = 4.5%)
  and a deeper one (head 21.5, tail mass 9.2e-5, 20M draws: 1,838 expected, 5 sigma = 12%);
* tests/cuda/gumbel_check.cu (the noise bit for bit device vs host) built with nvcc and run;
  a standalone launcher check of the sampler (written here, built with nvcc: every path and
  format against the host evaluation of the same header, outputs poisoned, offsets, unaligned
  rows) run plain and under compute-sanitizer memcheck and racecheck (one test each; a binary
  built ahead can be named by JAX_ARGREDUCE_CATEGORICAL_CHECK).

Plan options (``_ffi.debug_set_plan_options``) are process-wide and read when the handler runs;
an executable captured in a command buffer replays without calling the handler, so every option
set gets its own jitted functions (as tests/test_gpu.py does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_argreduce
import reference
from _common import (CHECK_RUNS, OPTION_SETS, TEAM_OPTION_SETS, cuda_check_exe,  # noqa: F401
                     needs_cuda_build, plan_options, run_cuda_check, x64_for)
from stats import P_MIN, check_tail_mass, chi_square_gof, report, softmax_probs

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda_build")]

DTYPES = ["float32", "bfloat16", "float16", "float64"]
HERE = os.path.dirname(os.path.abspath(__file__))
FFI = os.path.join(HERE, "..", "ffi")


def cpu_device():
  return jax.devices("cpu")[0]


def gpu_device():
  return jax.devices("gpu")[0]


_FNS = {}


def _fn(tag, with_t):
  """A jitted sampler per (tag, temperature given): one executable per plan option set."""
  k = (tag, with_t)
  if k not in _FNS:
    if with_t:
      _FNS[k] = jax.jit(lambda key, x, t: jax_argreduce.categorical(key, x, temperature=t))
    else:
      _FNS[k] = jax.jit(lambda key, x: jax_argreduce.categorical(key, x))
  return _FNS[k]


def run_on(device, key, x, t=None, tag="cpu"):
  """Samples on ``device`` (inputs committed there, so jit runs there): numpy indices."""
  args = (key, x) if t is None else (key, x, t)
  args = jax.device_put(args, device)
  with jax.default_device(device):
    return np.asarray(_fn(tag, t is not None)(*args))


def cpu_sample(key, x, t=None):
  return run_on(cpu_device(), key, x, t, "cpu")


def gpu_sample(key, x, t=None, options="default"):
  with plan_options(options):
    return run_on(gpu_device(), key, x, t, f"gpu-{options}")


def _mismatch(got, want, msg):
  bad = np.nonzero(np.asarray(got) != np.asarray(want))[0]
  assert bad.size == 0, (f"{msg}: {bad.size} of {np.size(want)} rows differ, first rows "
                         f"{bad[:8].tolist()}: gpu {np.asarray(got)[bad[:8]].tolist()} "
                         f"cpu {np.asarray(want)[bad[:8]].tolist()}")


def logits_for(dtype, rng, rows, cols, special=True):
  """Random normal rows (scale 1-4); with ``special``, one row in 8 carries a special-value
  fill (NaN, ±inf, subnormals, lowest, random bits, ...) and 20% of some rows are -inf."""
  x = (rng.standard_normal((rows, cols), dtype=np.float32) *
       np.float32(rng.uniform(1, 4))).astype(reference.np_dtype(dtype))
  if special and rows > 1:
    sel = np.nonzero(rng.random(rows) < 0.125)[0]
    if sel.size:
      x[sel] = reference.fill_rows(dtype, rng, sel.size, cols)
    masked = np.nonzero(rng.random(rows) < 0.25)[0]
    for r in masked[:64]:
      x[r, rng.random(cols) < 0.2] = -np.inf
  return x


SHAPES = [(1, 202048), (8, 202048), (37, 4099), (256, 32000), (4096, 128), (65536, 64),
          (1, 7), (3, 1), (5, 4), (300000, 5), (100, 20001), (2, 202049), (16, 131073),
          (1, 1 << 21)]


def _temperatures(kind, rows, dtype, rng):
  wide = np.float64 if reference.np_dtype(dtype) == np.float64 else np.float32
  if kind == "none":
    return None
  if kind == "scalar":
    return wide(0.7)
  t = rng.uniform(0.05, 3.0, rows).astype(wide)
  t[rng.random(rows) < 0.2] = 0
  return t


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_cpu_equals_gpu(shape, dtype):
  rows, cols = shape
  rng = np.random.default_rng([rows, cols, DTYPES.index(dtype)])
  with x64_for(dtype):
    x = logits_for(dtype, rng, rows, cols)
    cases = [("scalar key", jax.random.key(int(rng.integers(1 << 30))), "none"),
             ("scalar key", jax.random.key(int(rng.integers(1 << 30))), "per_row"),
             ("per-row keys", jax.random.split(jax.random.key(3), rows), "scalar"),
             ("raw per-row keys",
              jax.random.key_data(jax.random.split(jax.random.key(4), rows)), "per_row")]
    for name, key, tkind in cases:
      t = _temperatures(tkind, rows, dtype, rng)
      want = cpu_sample(key, x, t)
      assert ((want >= 0) & (want < cols)).all()
      for opt in OPTION_SETS:  # PDL on and off (each option set its own executables)
        got = gpu_sample(key, x, t, opt)
        _mismatch(got, want, f"{shape} {dtype} {name} T={tkind} options={opt}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_equals_gpu_unaligned_slices(dtype):
  """Slices taken inside the GPU program (rows starting off 16-byte alignment)."""
  rng = np.random.default_rng(17)
  with x64_for(dtype):
    base = logits_for(dtype, rng, 9, 202051)
    key = jax.random.key(5)
    for sl in [np.s_[:, 1:], np.s_[:, 3:-2], np.s_[1:, 5:70001], np.s_[:, :7], np.s_[2:, 1:4100]]:
      f = jax.jit(lambda v, sl=sl: jax_argreduce.categorical(key, v[sl], temperature=0.9))
      got = np.asarray(f(jax.device_put(base, gpu_device())))
      want = cpu_sample(key, np.ascontiguousarray(base[sl]), np.float32(0.9) if dtype !=
                        "float64" else np.float64(0.9))
      _mismatch(got, want, f"slice {sl} {dtype}")


def test_cpu_equals_gpu_vmap():
  rng = np.random.default_rng(18)
  x = rng.standard_normal((6, 5, 30011)).astype(np.float32)
  keys = jax.random.split(jax.random.key(6), (6, 5))
  t = rng.uniform(0, 2, 6).astype(np.float32)
  f = jax.jit(jax.vmap(lambda k, v, tt: jax_argreduce.categorical(k, v, temperature=tt)))
  got = np.asarray(f(*jax.device_put((keys, x, t), gpu_device())))
  with jax.default_device(cpu_device()):
    want = np.asarray(f(*jax.device_put((keys, x, t), cpu_device())))
  np.testing.assert_array_equal(got, want)
  loop = np.stack([cpu_sample(keys[i], x[i], t[i]) for i in range(6)])
  np.testing.assert_array_equal(got, loop)


# Team-path shapes: rows of 5-4099 columns (odd widths: head and tail columns), many rows.
TEAM_SHAPES = [(1000, 4099), (4096, 512), (4096, 128), (65536, 64), (3000, 33), (300000, 5)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_equals_gpu_every_team_width(dtype):
  """The team kernels of 1-32 lanes per row (each width forced on each shape) give the CPU's
  samples bit for bit: a team of 2-16 lanes shares a skip threshold and a warm start over the
  team's mask while the warp's other teams scan other rows; one lane shares nothing (NOTES.md
  try 51). Special-value rows, per-row temperatures with T = 0 among them, per-row keys."""
  rng = np.random.default_rng([51, DTYPES.index(dtype)])
  with x64_for(dtype):
    for rows, cols in TEAM_SHAPES:
      x = logits_for(dtype, rng, rows, cols)
      keys = jax.random.split(jax.random.key(int(rng.integers(1 << 30))), rows)
      t = _temperatures("per_row", rows, dtype, rng)
      want = cpu_sample(keys, x, t)
      for opt, kw in TEAM_OPTION_SETS.items():
        if kw["team"] > 32:  # the sampler's teams are at most a warp (test_launch_plan.py)
          continue
        _mismatch(gpu_sample(keys, x, t, opt), want, f"{rows}x{cols} {dtype} options={opt}")


def test_samples_do_not_depend_on_launch_geometry():
  """Trailing -inf columns and extra rows change the launch path, not a row's sample."""
  rng = np.random.default_rng(19)
  key = jax.random.key(7)
  for dtype in DTYPES:
    with x64_for(dtype):
      for rows, cols in ((8, 1000), (1, 4099), (37, 128), (256, 64)):
        x = logits_for(dtype, rng, rows, cols, special=False)
        want = gpu_sample(key, x)
        for width in (cols + 3, 32000, 202048, 1 << 20):
          pad = np.full((rows, width), -np.inf, x.dtype)
          pad[:, :cols] = x
          for options in OPTION_SETS:
            _mismatch(gpu_sample(key, pad, options=options), want,
                      f"{dtype} {rows}x{cols} padded to {width} {options}")
        more = np.concatenate([x, logits_for(dtype, rng, 5000, cols, special=False)])
        _mismatch(gpu_sample(key, more)[:rows], want, f"{dtype} {rows}x{cols} + 5000 rows")
        # Per-row keys: a row's sample does not depend on its position in the batch.
        keys = jax.random.split(key, rows)
        t = rng.uniform(0.1, 2, rows).astype(np.float32 if dtype != "float64" else np.float64)
        base = gpu_sample(keys, x, t)
        perm = rng.permutation(rows)
        _mismatch(gpu_sample(keys[perm], x[perm], t[perm]), base[perm], f"{dtype} permuted")


def peaked_logits(dtype, rng, rows, cols):
  """LLM-like rows, where a chunk whose largest logit / T plus the noise's largest value cannot
  reach the threshold may be skipped before its generator calls (the CPU does since NOTES.md
  try 55; the block kernel's try 56 was dropped): normal(0, 1) tails under heads of 20 columns
  at +22..+40, and rows where such an exit must not be taken or must not lose the winner: one
  head of 10-16 (the tail wins now and then), the strongest head in the row's last columns, a
  NaN or +inf late in a peaked row (they win), a -inf row, rows shifted by -100 (every
  chunk's bound is below 0, a threshold's initial value) and by +100."""
  x = rng.standard_normal((rows, cols), dtype=np.float32)
  kind = np.arange(rows) % 8
  for r in range(rows):
    if kind[r] in (0, 1, 2):
      x[r, rng.integers(0, cols, 20)] += rng.uniform(22, 40)
    elif kind[r] == 3:
      x[r, rng.integers(0, cols)] += rng.uniform(10, 16)
    elif kind[r] == 4:
      x[r, rng.integers(0, cols, 20)] += 25
      x[r, cols - 1 - rng.integers(0, 64)] += 40
    elif kind[r] == 5:
      x[r, rng.integers(0, cols, 20)] += 30
      x[r, cols - 1 - rng.integers(0, cols // 4)] = np.nan if r % 16 < 8 else np.inf
    elif kind[r] == 6:
      x[r] -= 100
      if r % 16 < 8:
        x[r, rng.integers(0, cols, 3)] += 30
    else:
      x[r] = -np.inf if r % 16 < 8 else x[r] + 100
  return x.astype(reference.np_dtype(dtype))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_cpu_equals_gpu_peaked_rows(dtype):
  """Peaked rows on the block-per-row path (more rows than SMs: 256x32000, 144x100000),
  scalar and per-row temperatures (0.3-2, zeros among them), per-row keys: the GPU's samples
  are the CPU's bit for bit (the CPU skips such runs of 8 columns: try 55)."""
  rng = np.random.default_rng([56, DTYPES.index(dtype)])
  for rows, cols in ((256, 32000), (144, 100000)):
    x = peaked_logits(dtype, rng, rows, cols)
    keys = jax.random.split(jax.random.key(int(rng.integers(1 << 30))), rows)
    t_rows = rng.uniform(0.3, 2.0, rows).astype(np.float32)
    t_rows[rng.random(rows) < 0.1] = 0
    for t in (np.float32(1.0), t_rows):
      want = cpu_sample(keys, x, t)
      for opt in OPTION_SETS:
        _mismatch(gpu_sample(keys, x, t, opt), want, f"peaked {rows}x{cols} {dtype} {opt}")


@pytest.mark.parametrize("temperature", [1e-45, 1e-40, 1e-38, 1e-30, 1e30, 1e38, 3e38, np.inf])
def test_cpu_equals_gpu_extreme_temperatures(temperature):
  """Subnormal and huge temperatures (1/T overflows or is subnormal): XLA:CPU runs with
  FTZ/DAZ set, the CUDA kernels in IEEE mode; the samples must still agree."""
  rng = np.random.default_rng(20)
  x = rng.standard_normal((64, 1000)).astype(np.float32)
  x[:, ::7] = -np.inf
  x[:, 5] = 0.0
  key = jax.random.key(8)
  t = np.float32(temperature)
  _mismatch(gpu_sample(key, x, t), cpu_sample(key, x, t), f"T={temperature}")


@pytest.mark.parametrize("options", list(OPTION_SETS))
def test_repeated_calls_in_one_program_poisoned(options):
  """Several sampler calls in one jitted program (command buffers), fresh inputs and keys
  every run, the index outputs donated from poison arrays so an unwritten row shows up;
  each compared with the CPU handler on the same (GPU-computed) logits."""
  shapes = [(1, 202048), (8, 202049), (4096, 96), (300, 4097), (64, 32000)]
  rng = np.random.default_rng(21)

  def program(keys, xs, temps, poisons):
    del poisons  # donated: XLA reuses them for the outputs
    outs, ys = [], []
    for k, x, t in zip(keys, xs, temps):
      y = x * 1.5 + 0.25  # a fusion between custom calls (returned: the reference's input)
      ys.append(y)
      outs.append(jax_argreduce.categorical(k, y, temperature=t))
      outs.append(jax_argreduce.categorical(jax.random.fold_in(k, 1), x))
    return outs, ys

  with plan_options(options):
    f = jax.jit(program, donate_argnums=3)
    for run in range(5):
      xs = [logits_for("float32", rng, *s) for s in shapes]
      keys = [jax.random.fold_in(jax.random.key(run), i) for i in range(len(shapes))]
      temps = [rng.uniform(0, 2, s[0]).astype(np.float32) for s in shapes]
      dev = gpu_device()
      poisons = [jnp.full(s[:1], -7, jnp.int32, device=dev) for s in shapes for _ in range(2)]
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs, ys = f(jax.device_put(keys, dev), jax.device_put(xs, dev),
                     jax.device_put(temps, dev), poisons)
      outs, ys = jax.device_get((outs, ys))
      for i, s in enumerate(shapes):
        _mismatch(outs[2 * i], cpu_sample(keys[i], ys[i], temps[i]), f"run {run} {s} y")
        _mismatch(outs[2 * i + 1], cpu_sample(jax.random.fold_in(keys[i], 1), xs[i]),
                  f"run {run} {s} x")


# ------------------------------------------------------------------------------ statistics

def _normal_row(seed, cols, scale=1.0):
  return np.random.default_rng(seed).standard_normal(cols) * scale


def _scattered_heads(seed, cols, heads, head=6.0):
  rng = np.random.default_rng(seed)
  row = rng.standard_normal(cols)
  pos = np.unique(np.concatenate([rng.integers(0, cols, heads), [0, cols - 1, cols - 2]]))
  row[pos] += head + rng.uniform(-1, 1, pos.size)
  return row


# name -> (logits row, draws, chunk rows, temperature, dtype)
GPU_GOF_CASES = {
    "peaked_v10": ([6, 3, 2, 1, 0, 0, -1, -2, -4, -8], 8_000_000, 2_000_000, None, "float32"),
    "flat_v4": ([0.0] * 4, 8_000_000, 2_000_000, None, "float32"),
    "masked_v12_t2": ([-np.inf, 1, 0.5, -np.inf, -np.inf, 0, 2, -np.inf, -1, 0.25, 3, -np.inf],
                      4_000_000, 1_000_000, 2.0, "bfloat16"),
    "v1000_t0.5": (_normal_row(1, 1000, 1.0), 2_000_000, 500_000, 0.5, "bfloat16"),
    "v4099": (_normal_row(2, 4099, 0.7), 2_000_000, 250_000, None, "float32"),
    "v4099_float16_t1.3": (_normal_row(3, 4099, 1.5), 1_000_000, 250_000, 1.3, "float16"),
    "v4099_float64": (_normal_row(4, 4099, 1.0), 500_000, 125_000, None, "float64"),
    "v202048_heads": (_scattered_heads(5, 202048, 200), 200_000, 10_000, 1.0, "bfloat16"),
}


@pytest.mark.parametrize("case", list(GPU_GOF_CASES))
def test_gpu_chi_square(case):
  row, draws, chunk, temperature, dtype = GPU_GOF_CASES[case]
  with x64_for(dtype):
    x = np.tile(np.asarray(row, np.float64).astype(reference.np_dtype(dtype))[None],
                (chunk, 1))
    probs = softmax_probs(x[0], 1.0 if temperature is None else temperature)
    xd = jax.device_put(x, gpu_device())
    f = jax.jit(lambda k, v: jnp.bincount(
        jax_argreduce.categorical(k, v, temperature=temperature), length=x.shape[1]))
    counts = None
    for i in range(draws // chunk):
      c = f(jax.random.fold_in(jax.random.key(31), i), xd)
      counts = c if counts is None else counts + c
    counts = np.asarray(counts)
  assert counts.sum() == draws  # bincount drops out-of-range indices: none may be missing
  samples = np.repeat(np.arange(counts.size), counts)
  stat, df, p = chi_square_gof(samples, probs)
  report(f"gpu {case}", draws=draws, chi2=stat, df=df, p=p)
  assert p >= P_MIN, f"{case}: chi2 {stat:.1f} on {df} df, p = {p:.3g}"


def _gpu_tail_count(head, tail, draws, chunk, seed):
  x = np.zeros((chunk, tail + 1), reference.np_dtype("bfloat16"))
  x[:, 0] = head
  assert float(x[0, 0]) == head  # exact in bfloat16
  xd = jax.device_put(x, gpu_device())
  f = jax.jit(lambda k, v: jnp.sum(jax_argreduce.categorical(k, v) != 0))
  total = jnp.zeros((), jnp.int32)
  base = jax.random.key(seed)
  calls = -(-draws // chunk)
  for i in range(calls):
    total = total + f(jax.random.fold_in(base, i), xd)
  return int(total), calls * chunk


@pytest.mark.parametrize("head,tail,draws", [
    (18.0, 200_000, 4_000_000),    # P(tail) = 3.04e-3: 12,147 expected, 5 sigma = 4.5%
    (21.5, 200_000, 20_000_000),   # P(tail) = 9.19e-5: 1,838 expected, 5 sigma = 11.7%
])
def test_gpu_far_tail(head, tail, draws):
  """A head ``head`` logits above ``tail`` zero logits: the tail is drawn when one of its
  noises beats head + G_head, i.e. G >= ~15 (head 18) or ~18.4 (head 21.5; G's largest value
  is 22.87). The generator's exact expectation (32-bit uniforms, noise capped at 22.87) is
  1.0e-5 / 1.1% (relative) below the softmax probability: far inside the bound."""
  start = time.perf_counter()
  observed, draws = _gpu_tail_count(head, tail, draws, 8192, seed=int(head * 10))
  check_tail_mass("gpu tail", head, tail, observed, draws, start)


# ------------------------------------------------------------------------------ standalone

def _nvcc():
  nvcc = shutil.which("nvcc")
  if not nvcc:
    pytest.skip("nvcc not found")
  return nvcc


def test_gumbel_check_device_equals_host(tmp_path):
  """tests/cuda/gumbel_check.cu: Philox known answers, the noise device vs host bit for bit,
  the pinned digests recomputed from the device."""
  exe = str(tmp_path / "gumbel_check")
  subprocess.run([_nvcc(), "-std=c++17", "-arch=native", "-O3", "-Xcompiler", "-mfma", "-I",
                  FFI, os.path.join(HERE, "cuda", "gumbel_check.cu"), "-o", exe], check=True)
  r = subprocess.run([exe], capture_output=True, text=True, timeout=600)
  print(r.stdout[-2000:])
  assert r.returncode == 0, r.stdout[-3000:]
  assert "gumbel_check: PASS" in r.stdout


CATEGORICAL_CHECK_CU = r"""
// Standalone check of the sampler's CUDA launcher (ffi/categorical_kernels.h) against the host
// evaluation of the same header (categorical.h: GumbelKeyPolicy::Row::Visit column by column,
// NoisyMaxEpilogue): indices and noisy maxima bit for bit. Buffers from plain cudaMalloc, so
// compute-sanitizer sees every out-of-bounds access; outputs poisoned; two launches back to
// back on one stream share the workspace; rows on and off 16-byte alignment; nonzero
// (row, column) counter offsets; scalar and per-row keys and temperatures; int32/int64 indices.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "categorical.h"
#include "categorical_kernels.h"
#include "launch_plan.h"

using namespace jax_argreduce;

#include "cuda_check.h"  // CHECK(call)

namespace {

size_t Width(Format f) { return static_cast<size_t>(FormatBytes(f)); }

uint64_t Encode(Format f, double v) {
  switch (f) {
    case Format::kF64: { uint64_t b; std::memcpy(&b, &v, 8); return b; }
    case Format::kF32: { float x = static_cast<float>(v); uint32_t b; std::memcpy(&b, &x, 4);
                         return b; }
    case Format::kBF16: { float x = static_cast<float>(v); uint32_t b; std::memcpy(&b, &x, 4);
                          return b >> 16; }
    case Format::kF16: { __half h = __float2half_rn(static_cast<float>(v));
                         uint16_t b; std::memcpy(&b, &h, 2); return b; }
  }
  return 0;
}

template <Format F>
void HostReference(const uint8_t* logits, int64_t rows, int64_t cols, const uint32_t* keys,
                   int64_t num_keys, const void* temperature, bool per_row,
                   const int32_t* offsets, std::vector<int64_t>* idx,
                   std::vector<uint64_t>* val) {
  using Policy = GumbelKeyPolicy<F>;
  using Bits = typename Policy::Bits;
  using Key = typename Policy::Key;
  const Policy policy{keys, rows / num_keys,
                      static_cast<const typename Policy::Noise*>(temperature), per_row,
                      offsets};
  std::vector<int64_t> i64(rows);
  std::vector<uint64_t> v(rows, 0);
  const NoisyMaxEpilogue epilogue{i64.data(), true, v.data()};
  const Bits* x = reinterpret_cast<const Bits*>(logits);
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = policy.ForRow(r);
    ArgPair<Key> best = ArgPair<Key>::Identity();
    for (int64_t c = 0; c < cols; ++c) {
      row.template Visit<1>(x + r * cols + c, static_cast<int32_t>(c), best.key, best.index);
    }
    epilogue(r, best, x + r * cols);
  }
  idx->assign(i64.begin(), i64.end());
  // The epilogue wrote 4-byte values (float32 noise) or 8-byte ones (float64) densely.
  val->assign(rows, 0);
  const size_t vw = F == Format::kF64 ? 8 : 4;
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(&(*val)[r], reinterpret_cast<const uint8_t*>(v.data()) + r * vw, vw);
  }
}

struct Case { int64_t rows, cols; };

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) quick |= std::strcmp(argv[i], "--quick") == 0;
  int device = 0;
  CHECK(cudaGetDevice(&device));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* d_ws = nullptr;
  CHECK(cudaMalloc(&d_ws, kWorkspaceBytes));
  std::vector<Case> cases = {{400000, 5}, {4096, 8}, {3, 1}, {5, 2}, {1000, 1023}, {300, 4097},
                             {150, 30001}, {1, 202049}, {2, 202047}, {8, 131073}, {100, 20001},
                             {64, 32000}, {1, 1 << 21}};
  if (quick) cases = {{40000, 5}, {300, 4097}, {1, 202049}, {8, 131073}, {100, 20001}};
  const Format formats[] = {Format::kF32, Format::kBF16, Format::kF16, Format::kF64};
  // PDL on / off, the split path's merge in its last block / in a second kernel.
  PlanOptions option_sets[3];
  option_sets[0].merge = MergeMode::kLastBlock;
  option_sets[1].pdl = false;
  option_sets[1].merge = MergeMode::kLastBlock;
  option_sets[2].merge = MergeMode::kKernel;
  std::mt19937_64 rng(20261201);
  std::normal_distribution<double> normal(0.0, 2.0);
  int total = 0, bad = 0, setups = 0;
  for (const PlanOptions& options : option_sets) {
    for (const Case& c : cases) {
      for (Format f : formats) {
        const size_t w = Width(f);
        const bool f64 = f == Format::kF64;
        const size_t tw = f64 ? 8 : 4;
        const int64_t n = c.rows * c.cols;
        const int64_t shift = setups++ % 2;  // every second setup: rows one element off
        struct Launch {
          std::vector<uint8_t> x, t;
          std::vector<uint32_t> keys;
          int64_t num_keys;
          bool per_row_t, int64_idx;
          int32_t offsets[2];
          bool null_offsets;  // zero offsets passed as nullptr (an unsharded call's [0] operand)
          void *d_x, *d_t, *d_keys, *d_off, *d_idx, *d_val;
        } L[2];
        for (int k = 0; k < 2; ++k) {
          Launch& l = L[k];
          l.x.assign((n + shift) * w, 0);
          for (int64_t r = 0; r < c.rows; ++r) {
            const int kind = static_cast<int>(rng() % 10);
            for (int64_t i = 0; i < c.cols; ++i) {
              double v = normal(rng);
              if (kind == 1 && rng() % 5 == 0) v = -INFINITY;       // masked
              if (kind == 2) v = -INFINITY;                          // all -inf
              if (kind == 3 && i == c.cols / 2) v = NAN;             // one NaN
              if (kind == 4 && (i == 0 || i == c.cols - 1)) v = INFINITY;
              if (kind == 5) v = 1.5;                                // all equal
              // Exact key ties across lanes and warps (the warp-threshold skip must keep the
              // lowest column): all +inf; huge logits that absorb any noise (fl(1e30 + G) ==
              // 1e30; float16: +inf) spread over the row; NaN at several columns.
              if (kind == 6) v = INFINITY;
              if (kind == 7 && i % 997 == 996) v = 1e30;
              if (kind == 8 && i % 389 == 101) v = NAN;
              const uint64_t b = Encode(f, v);
              std::memcpy(l.x.data() + (shift + r * c.cols + i) * w, &b, w);
            }
          }
          l.num_keys = (rng() % 2) ? c.rows : 1;
          l.keys.resize(2 * l.num_keys);
          for (auto& kw : l.keys) kw = static_cast<uint32_t>(rng());
          l.per_row_t = rng() % 2;
          const int64_t nt = l.per_row_t ? c.rows : 1;
          l.t.assign(nt * tw, 0);
          // T == 0 (argmax), ordinary T, and T where 1/T is not > 0 (inf, negative, NaN: the
          // general scan, not the prepared one) or subnormal (3e38, float32).
          const double temps[] = {0.0, 0.5, 1.0, 2.3, 0.05, 1.7, INFINITY, 3e38, -1.0, NAN};
          for (int64_t r = 0; r < nt; ++r) {
            const double tv = temps[rng() % 10];
            if (f64) std::memcpy(l.t.data() + r * 8, &tv, 8);
            const float tf = static_cast<float>(tv);
            if (!f64) std::memcpy(l.t.data() + r * 4, &tf, 4);
          }
          l.int64_idx = rng() % 2;
          l.offsets[0] = (rng() % 2) ? 0 : static_cast<int32_t>(rng() % 1000);
          l.offsets[1] = (rng() % 2) ? 0 : static_cast<int32_t>(rng() % 1000);
          l.null_offsets = l.offsets[0] == 0 && l.offsets[1] == 0 && rng() % 2;
          CHECK(cudaMalloc(&l.d_x, l.x.size()));
          CHECK(cudaMalloc(&l.d_t, l.t.size()));
          CHECK(cudaMalloc(&l.d_keys, l.keys.size() * 4));
          CHECK(cudaMalloc(&l.d_off, 8));
          CHECK(cudaMalloc(&l.d_idx, c.rows * 8));
          CHECK(cudaMalloc(&l.d_val, c.rows * tw));
          CHECK(cudaMemcpy(l.d_x, l.x.data(), l.x.size(), cudaMemcpyHostToDevice));
          CHECK(cudaMemcpy(l.d_t, l.t.data(), l.t.size(), cudaMemcpyHostToDevice));
          CHECK(cudaMemcpy(l.d_keys, l.keys.data(), l.keys.size() * 4, cudaMemcpyHostToDevice));
          CHECK(cudaMemcpy(l.d_off, l.offsets, 8, cudaMemcpyHostToDevice));
          CHECK(cudaMemsetAsync(l.d_idx, 0xA5, c.rows * 8, stream));
          CHECK(cudaMemsetAsync(l.d_val, 0x5A, c.rows * tw, stream));
        }
        CHECK(cudaMemsetAsync(d_ws, 0xEE, kWorkspaceBytes, stream));
        // `stream` is non-blocking: it does not wait for the legacy default stream, where the
        // copies above ran (a pageable cudaMemcpy may return before its DMA lands), so wait
        // for them here. (cudaMemset there once raced with the launches under load: the merge
        // read the 0xEE poison the late memset put over the partials.)
        CHECK(cudaDeviceSynchronize());
        for (int k = 0; k < 2; ++k) {  // back to back, one stream, one workspace
          Launch& l = L[k];
          CategoricalLaunch launch;
          launch.stream = stream;
          launch.device = device;
          launch.counter_slot = 3;
          launch.options = options;
          launch.format = f;
          launch.keys = static_cast<const uint32_t*>(l.d_keys);
          launch.num_keys = l.num_keys;
          launch.logits = static_cast<const uint8_t*>(l.d_x) + shift * w;
          launch.rows = c.rows;
          launch.cols = c.cols;
          launch.temperature = l.d_t;
          launch.temperature_per_row = l.per_row_t;
          launch.offsets = l.null_offsets ? nullptr : static_cast<const int32_t*>(l.d_off);
          launch.indices = l.d_idx;
          launch.index_is_int64 = l.int64_idx;
          launch.noisy_max = l.d_val;
          launch.workspace = d_ws;
          launch.workspace_bytes = kWorkspaceBytes;
          CHECK(LaunchCategorical(launch));
        }
        CHECK(cudaStreamSynchronize(stream));
        for (int k = 0; k < 2; ++k) {
          Launch& l = L[k];
          std::vector<int64_t> want_i;
          std::vector<uint64_t> want_v;
          const uint8_t* hx = l.x.data() + shift * w;
          DispatchFormat(f, false, [&](auto format, auto) {
            HostReference<decltype(format)::value>(hx, c.rows, c.cols, l.keys.data(),
                                                   l.num_keys, l.t.data(), l.per_row_t,
                                                   l.offsets, &want_i, &want_v);
          });
          std::vector<uint8_t> gi(c.rows * 8), gv(c.rows * tw);
          CHECK(cudaMemcpy(gi.data(), l.d_idx, gi.size(), cudaMemcpyDeviceToHost));
          CHECK(cudaMemcpy(gv.data(), l.d_val, gv.size(), cudaMemcpyDeviceToHost));
          int64_t mism = 0, first = -1;
          for (int64_t r = 0; r < c.rows; ++r) {
            int64_t gidx;
            if (l.int64_idx) std::memcpy(&gidx, gi.data() + r * 8, 8);
            else { int32_t g32; std::memcpy(&g32, gi.data() + r * 4, 4); gidx = g32; }
            uint64_t gval = 0;
            std::memcpy(&gval, gv.data() + r * tw, tw);
            if (gidx != want_i[r] || gval != want_v[r]) { if (first < 0) first = r; ++mism; }
          }
          ++total;
          if (mism) {
            ++bad;
            std::printf("MISMATCH %lldx%lld format %d pdl=%d merge=%s keys=%lld per_row_t=%d"
                        " offsets=(%d,%d): %lld rows, first row %lld\n",
                        (long long)c.rows, (long long)c.cols, static_cast<int>(f), options.pdl,
                        MergeModeName(options.merge), (long long)l.num_keys, l.per_row_t,
                        l.offsets[0], l.offsets[1], (long long)mism, (long long)first);
          }
          CHECK(cudaFree(l.d_x)); CHECK(cudaFree(l.d_t)); CHECK(cudaFree(l.d_keys));
          CHECK(cudaFree(l.d_off)); CHECK(cudaFree(l.d_idx)); CHECK(cudaFree(l.d_val));
        }
      }
    }
  }
  std::printf("categorical_check: %d launches, %d mismatches: %s\n", total, bad,
              bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
}
"""


@pytest.mark.long
@pytest.mark.parametrize("run", CHECK_RUNS)
def test_categorical_launcher_check_under_compute_sanitizer(run):
  """The launcher on every path and format == the host evaluation of categorical.h (indices
  and noisy maxima bit for bit); memcheck and racecheck clean on the quick set."""
  exe, sanitizer = cuda_check_exe("categorical_check", ["categorical_kernels.cu", "launch_plan.cc"],
                                  prebuilt_env="JAX_ARGREDUCE_CATEGORICAL_CHECK",
                                  cu=CATEGORICAL_CHECK_CU, flags=("-Xcompiler", "-mfma"))
  run_cuda_check(exe, sanitizer, run, timeout=900 if run == "plain" else 1800)
