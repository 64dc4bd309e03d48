"""GPU tests of top_k (marker ``gpu``): the CUDA row-select kernels (``method="kernel"``)
against the CPU handler (itself tested against numpy in test_top_k.py, which also runs here on
the GPU backend) on fresh random data, every plan shape (level 0 alone; two, three and four
levels; 8, 16 and 32 elements per thread), PDL on and off, repeated calls in one jitted program
(command buffers) over poisoned outputs; the exact XLA path on the GPU (XLA's TopK kernel for
k <= 16 and its sort beyond) with ties; the launcher check (tests/cuda/select_check.cu) plain
and under compute-sanitizer memcheck and racecheck. Skipped without a GPU (conftest).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_argreduce as ar
import reference
from _common import (CHECK_RUNS, cuda_check_exe, needs_cuda_build, plan_options,  # noqa: F401
                     run_cuda_check)
from jax_argreduce import _ffi

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda_build")]

SEED = int(os.environ.get("JAX_ARGREDUCE_TEST_SEED", np.random.SeedSequence().entropy % 2**32))


@pytest.fixture
def rng():
  print(f"seed {SEED}")
  return np.random.default_rng(SEED)


def on_cpu(x, k):
  cpu = jax.devices("cpu")[0]
  with jax.default_device(cpu):
    values, indices = ar.top_k(jax.device_put(x, cpu), k)
  return np.asarray(values), np.asarray(indices)


def assert_same(got, want, what=""):
  gv, gi = (np.asarray(a) for a in got)
  wv, wi = want
  bad = np.nonzero((gi != wi).any(axis=-1) | (reference.as_bits(gv) != reference.as_bits(wv)
                                               ).any(axis=-1))[0]
  assert bad.size == 0, (f"{what}: {bad.size} rows differ, first {bad[:5].tolist()}: got "
                         f"{gi[bad[0]][:8].tolist()}, want {wi[bad[0]][:8].tolist()}")


# (rows, cols, k): the plan shapes on the GPU (tests/test_top_k.py's test_workspace_sizes names
# them): one level (one chunk per row), two levels at each elements-per-thread, deep levels.
PLAN_SHAPES = [(300, 1000, 10), (3, 1000, 1000), (4096, 4096, 50), (64, 20000, 16),
               (1, 202048, 50), (8, 202048, 50), (256, 202048, 50), (1, 202048, 1024),
               (2, 128256, 256), (64, 128256, 50), (1, 262144, 16), (7, 50257, 333)]


@pytest.mark.parametrize("pdl", [True, False], ids=["pdl", "no_pdl"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("rows,cols,k", PLAN_SHAPES, ids=lambda v: str(v))
def test_kernels_equal_cpu(rows, cols, k, dtype, pdl, rng):
  kinds = rng.integers(0, len(reference.FILLS), size=rows)
  x = reference.fill_rows(dtype, rng, rows, cols, kinds)
  name = "default" if pdl else "no_pdl"
  with plan_options(name):
    got = jax.jit(lambda v: ar.top_k(v, k, method="kernel"))(x)
    assert_same(got, on_cpu(x, k), f"{rows}x{cols} k={k} {dtype} {name}")


def test_repeated_calls_in_one_program(rng):
  """Several calls in one jitted program (XLA's command buffer), each on fresh data, over
  outputs XLA reuses: every result complete and right."""
  xs = [reference.random_rows(rng, 8, 202048, "bfloat16") for _ in range(3)]
  f = jax.jit(lambda a, b, c: [ar.top_k(v, 50, method="kernel") for v in (a, b, c)])
  for _ in range(2):
    outs = f(*xs)
    for x, got in zip(xs, outs):
      assert_same(got, on_cpu(x, 50))
    xs = xs[1:] + [reference.random_rows(rng, 8, 202048, "bfloat16")]


@pytest.mark.parametrize("k", [1, 8, 16, 17, 50])
def test_xla_path_on_gpu_with_ties(k):
  """The exact XLA path on the GPU (XLA's TopK kernel for k <= 16, a sort beyond) keeps the
  lowest index first among equal keys, as the SPEC order needs."""
  rng = np.random.default_rng(k)
  x = rng.integers(0, 3, size=(64, 5000)).astype(np.float32)
  x[:, rng.integers(0, 5000, 40)] = -0.0
  for method in ("xla", "kernel"):
    got = jax.jit(lambda v: ar.top_k(v, k, method=method))(x)
    want_v, want_i = reference.top_k(x, k)
    assert_same(got, (want_v, want_i.astype(np.int32)), method)


def test_float64_takes_the_xla_path():
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    x = reference.fill_rows("float64", rng, 18, 3000, np.arange(18))
    f = jax.jit(lambda v: ar.top_k(v, 20))
    assert "jax_argreduce_top_k" not in f.lower(x).compile().as_text()
    want_v, want_i = reference.top_k(x, 20)
    assert_same(f(x), (want_v, want_i.astype(np.int32)))


def test_large_k_takes_the_xla_path():
  rng = np.random.default_rng(2)
  x = reference.random_rows(rng, 2, 5000, "float32")
  k = _ffi.TOP_K_MAX_K + 1
  f = jax.jit(lambda v: ar.top_k(v, k))
  assert "jax_argreduce_top_k" not in f.lower(x).compile().as_text()
  want_v, want_i = reference.top_k(x, k)
  assert_same(f(x), (want_v, want_i.astype(np.int32)))


def test_grad_on_gpu(rng):
  x = jnp.asarray(reference.random_rows(rng, 4, 100000, "float32"))
  g = jax.jit(jax.grad(lambda v: ar.top_k(v, 50, method="kernel")[0].sum()))(x)
  _, idx = on_cpu(np.asarray(x), 50)
  want = np.zeros(x.shape, np.float32)
  np.put_along_axis(want, idx, 1.0, axis=-1)
  np.testing.assert_array_equal(np.asarray(g), want)


@pytest.mark.long
@pytest.mark.parametrize("run,options", [pytest.param("plain", (), id="plain")] + [
    pytest.param(tool, (pdl,), id=tool + pdl)
    for pdl in ("--pdl=1", "--pdl=0") for tool in CHECK_RUNS[1:]])
def test_select_check_under_compute_sanitizer(run, options):
  """tests/cuda/select_check.cu: every plan shape and format, PDL on and off, from the host
  and replayed from a CUDA graph; memcheck and racecheck clean on the quick cases."""
  # JAX_ARGREDUCE_SELECT_CHECK: a binary built ahead for this GPU (saves the nvcc build here).
  exe, sanitizer = cuda_check_exe(
      "select_check", ["top_k_kernels.cu", "sample_topk_kernels.cu", "launch_plan.cc"],
      prebuilt_env="JAX_ARGREDUCE_SELECT_CHECK")
  run_cuda_check(exe, sanitizer, run, *options)
