"""Filtered sampling on the GPU (marker ``gpu``; skipped without one): the CUDA handler
``filtered_categorical`` (ffi/sample_kernels.cu) against the CPU handler, whose semantics are
the reference (tests/test_filtered.py checks them against numpy).

* GPU samples == CPU samples (``jax.devices("cpu")`` in the same process), exactly, on rows of
  every special fill (ties, NaNs, ±inf, all -inf, all equal, subnormals, random bits) and on
  peaked rows (20 tokens 25 above a normal tail), every float dtype, shapes from 1x1 to
  8x202048 and odd widths, shared and per-row filters and temperatures (zeros included),
  scalar and per-row keys, under jit and vmap; the GPU program calls the CUDA handler;
* tests/cuda/sample_check.cu (the launcher against cpu_sample.h's SampleRow, bit for bit,
  index and noisy maximum) and tests/cuda/sample_topk_check.cu (the top-k path) plain and under
  compute-sanitizer memcheck and racecheck; binaries built ahead can be named by
  JAX_ARGREDUCE_SAMPLE_CHECK and JAX_ARGREDUCE_SAMPLE_TOPK_CHECK.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jax_argreduce
import reference
from _common import (CHECK_RUNS, cuda_check_exe, needs_cuda_build, run_cuda_check,  # noqa: F401
                     staged_candidates_sample, staged_prefix_sample, x64_for)

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda_build")]

DTYPES = ["float32", "bfloat16", "float16", "float64"]
TARGET = "jax_argreduce_filtered_categorical_cuda"

FILTERS = [
    dict(top_k=5), dict(top_p=0.5), dict(min_p=0.1), dict(top_k=50, top_p=0.9),
    dict(top_p=0.9, min_p=0.05), dict(top_k=700, top_p=0.3), dict(top_k=3, min_p=0.5),
    dict(top_k=1), dict(top_p=1e-6), dict(top_k=1024, top_p=0.999, min_p=1.0),
]


def cpu_device():
  return jax.devices("cpu")[0]


def gpu_device():
  return jax.devices("gpu")[0]


def logits(dtype, rng, rows, cols):
  """Rows of every special fill, and peaked rows: 20 tokens 25 above a normal tail."""
  x = reference.fill_rows(dtype, rng, rows, cols, rng.integers(0, len(reference.FILLS), rows))
  x = np.asarray(x)
  for r in range(0, rows, 3):
    row = rng.standard_normal(cols)
    row[rng.integers(0, cols, 20)] += 25
    x[r] = row.astype(x.dtype)
  return x


def sample(device, key, x, **kw):
  """The sample on `device`; the filters are constants of the program (arrays: per row)."""
  f = jax.jit(lambda k, v: jax_argreduce.categorical(k, v, method="kernel", **kw))
  args = jax.device_put((key, x), device)
  if device.platform == "gpu":
    assert TARGET in f.lower(*args).as_text(), "the GPU program does not call the CUDA handler"
  with jax.default_device(device):
    return np.asarray(f(*args))


def assert_same(got, want, what):
  bad = np.nonzero(got != want)[0]
  assert bad.size == 0, (f"{what}: {bad.size} rows differ, first {bad[:5].tolist()}: got "
                         f"{got[bad[:5]].tolist()}, want {want[bad[:5]].tolist()}")


SHAPES = [(1, 1), (3, 7), (24, 1000), (37, 4099), (8, 202048), (5, 50001)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,cols", SHAPES, ids=str)
def test_gpu_equals_cpu_shared_filters(rows, cols, dtype):
  rng = np.random.default_rng([rows, cols, DTYPES.index(dtype)])
  with x64_for(dtype):
    x = logits(dtype, rng, rows, cols)
    noise = np.float64 if dtype == "float64" else np.float32
    for i, kw in enumerate(FILTERS):
      key = jax.random.key(i) if i % 2 else jax.random.split(jax.random.key(i), rows)
      kw = dict(kw, temperature=noise([0.8, 1.0, 1e-30][i % 3]))
      want = sample(cpu_device(), key, x, **kw)
      got = sample(gpu_device(), key, x, **kw)
      assert_same(got, want, f"{rows}x{cols} {dtype} {kw}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,cols", [(64, 3001), (256, 2048), (16, 202048)], ids=str)
def test_gpu_equals_cpu_per_row_filters(rows, cols, dtype):
  """Every parameter per row, from values that switch each filter on and off (top_k 0 or past
  cols, top_p 1, min_p 0, T 0) and the edges (top_k 1, cols - 1, cols; top_p tiny)."""
  rng = np.random.default_rng([rows, cols, 7, DTYPES.index(dtype)])
  with x64_for(dtype):
    x = logits(dtype, rng, rows, cols)
    noise = np.float64 if dtype == "float64" else np.float32

    def pick(values, dt):
      return np.asarray(values, dt)[rng.integers(0, len(values), rows)]

    kw = dict(temperature=pick([0.0, 0.8, 1.0, 1.7], noise),
              top_k=pick([0, 1, 2, 50, 1024, cols - 1, cols, cols + 5], np.int32),
              top_p=pick([1.0, 0.9, 0.5, 1e-6, 1e-45], np.float32),
              min_p=pick([0.0, 0.05, 1.0], np.float32))
    for key in (jax.random.key(11), jax.random.split(jax.random.key(12), rows)):
      want = sample(cpu_device(), key, x, **kw)
      got = sample(gpu_device(), key, x, **kw)
      assert_same(got, want, f"{rows}x{cols} {dtype} per row")


def test_gpu_equals_cpu_vmap():
  rng = np.random.default_rng(19)
  x = logits("float32", rng, 30, 30011).reshape(6, 5, 30011)
  keys = jax.random.split(jax.random.key(6), (6, 5))
  p = rng.uniform(0.1, 1.0, 6).astype(np.float32)
  f = jax.jit(jax.vmap(lambda k, v, pp: jax_argreduce.categorical(k, v, top_k=100, top_p=pp,
                                                                   method="kernel")))
  got = np.asarray(f(*jax.device_put((keys, x, p), gpu_device())))
  with jax.default_device(cpu_device()):
    want = np.asarray(f(*jax.device_put((keys, x, p), cpu_device())))
  np.testing.assert_array_equal(got, want)


def test_traced_out_of_range_filters_keep_the_top_token():
  rng = np.random.default_rng(20)
  x = logits("float32", rng, 16, 5000)
  f = jax.jit(lambda v, p, m: jax_argreduce.categorical(jax.random.key(0), v, top_p=p,
                                                         min_p=m, method="kernel"))
  want = reference.argmax(x, axis=-1)
  for p, m in ((0.0, 0.0), (1.0, 2.0), (0.0, 1.5)):
    got = np.asarray(f(*jax.device_put((x, np.float32(p), np.float32(m)), gpu_device())))
    # A NaN top (argmax's answer) or the top of the order: the same column.
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("rows,cols,shards,k_bound", [(24, 1000, 4, 50), (37, 4099, 3, 8),
                                                      (8, 202048, 4, 64)], ids=str)
def test_gpu_candidate_stages_equal_cpu(rows, cols, shards, k_bound, dtype):
  """A split vocabulary's candidate exchange, its stages composed on one GPU
  (_common.staged_candidates_sample: the CUDA scaled_top_k select per column block, then the
  CUDA filtered handler with the global columns): the CPU's unsplit samples, bit for bit."""
  rng = np.random.default_rng([rows, cols, shards, DTYPES.index(dtype)])
  x = logits(dtype, rng, rows, cols)
  kw = dict(top_k=rng.integers(1, k_bound + 1, rows).astype(np.int32),
            top_p=rng.choice(np.float32([1.0, 0.9, 0.5, 1e-6]), rows),
            min_p=rng.choice(np.float32([0.0, 0.05, 1.0]), rows),
            temperature=rng.choice(np.float32([0.0, 0.8, 1.0, 1.7]), rows))
  for key in (jax.random.key(3), jax.random.split(jax.random.key(4), rows)):
    want = sample(cpu_device(), key, x, **kw)
    got = staged_candidates_sample(gpu_device(), key, x, shards, k_bound, **kw)
    assert_same(got, want, f"{rows}x{cols} {dtype} {shards} shards, k_bound {k_bound}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("rows,cols,shards", [(24, 1000, 4), (37, 4099 * 3, 3),
                                              (8, 202048, 2)], ids=str)
@pytest.mark.parametrize("top_p", [True, False], ids=["top_p", "min_p"])
def test_gpu_prefix_stages_equal_cpu(rows, cols, shards, top_p, dtype):
  """A split vocabulary's mass exchange without a top-k, its stages composed on one GPU
  (_common.staged_prefix_sample: the CUDA scaled_top_k's tops, top_p_level per column block
  with the masses summed between, split_filtered_draw per block, the pairs combined): the
  CPU's unsplit samples, bit for bit."""
  rng = np.random.default_rng([rows, cols, shards, DTYPES.index(dtype), top_p])
  x = logits(dtype, rng, rows, cols)
  kw = dict(min_p=rng.choice(np.float32([0.0, 0.05, 0.5, 1.0]), rows),
            temperature=rng.choice(np.float32([0.0, 0.8, 1.0, 1.7]), rows))
  if top_p:
    kw["top_p"] = rng.choice(np.float32([1.0, 0.9, 0.5, 1e-6]), rows)
  for key in (jax.random.key(3), jax.random.split(jax.random.key(4), rows)):
    want = sample(cpu_device(), key, x, **kw)
    got = staged_prefix_sample(gpu_device(), key, x, shards, **kw)
    assert_same(got, want, f"{rows}x{cols} {dtype} {shards} shards, top_p {top_p}")


@pytest.mark.long
@pytest.mark.parametrize("run", CHECK_RUNS)
def test_sample_check_under_compute_sanitizer(run):
  """tests/cuda/sample_check.cu: every format and shape, random and adversarial rows, shared
  and per-row parameters, against SampleRow bit for bit; memcheck and racecheck clean on the
  quick cases."""
  exe, sanitizer = cuda_check_exe("sample_check", ["sample_kernels.cu", "launch_plan.cc"],
                                  prebuilt_env="JAX_ARGREDUCE_SAMPLE_CHECK")
  run_cuda_check(exe, sanitizer, run)


@pytest.mark.long
@pytest.mark.parametrize("run,options", [pytest.param("plain", (), id="plain")] + [
    pytest.param(tool, (pdl,), id=tool + pdl)
    for pdl in ("--pdl=1", "--pdl=0") for tool in CHECK_RUNS[1:]])
def test_sample_topk_check_under_compute_sanitizer(run, options):
  """tests/cuda/sample_topk_check.cu: the top-k path (select, then the filters and the draw on
  the candidates) against SampleRow bit for bit, and a split vocabulary's candidates against
  the unsharded row; memcheck and racecheck clean on the quick cases."""
  exe, sanitizer = cuda_check_exe(
      "sample_topk_check", ["sample_topk_kernels.cu", "top_k_kernels.cu", "launch_plan.cc"],
      prebuilt_env="JAX_ARGREDUCE_SAMPLE_TOPK_CHECK")
  run_cuda_check(exe, sanitizer, run, *options)
