"""GPU tests (marker ``gpu``): the CUDA handler against numpy on fresh random data.

Every launch path (team of lanes with rows looped, one block per row, several blocks per row
merged through the workspace), widths straddling warp/block/vector/scan-step boundaries,
unaligned row starts, all four float dtypes, special values, generated cases, repeated calls
inside one jitted program (command buffers, XLA's default) with poisoned outputs, and the
INT32_MAX-wide row / >2^31-element array. Skipped without a GPU (conftest).
"""

import os
import shutil
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_argreduce
from jax_argreduce import _api, _ffi

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, ml_dtypes.bfloat16, np.float16, np.float64]
SEED = int(os.environ.get("JAX_ARGREDUCE_TEST_SEED", np.random.SeedSequence().entropy % 2**32))


@pytest.fixture
def rng():
  print(f"seed {SEED}")
  return np.random.default_rng(SEED)


@pytest.fixture(autouse=True)
def _needs_cuda_build():
  if not _ffi.HAS_CUDA:
    pytest.skip("jax_argreduce was built without CUDA")


def x64_for(dtype):
  return jax.enable_x64(np.dtype(dtype) == np.float64)


def reference(x, is_min, axis=-1):
  # numpy on the exact float32 widening for bfloat16 (widening is exact, order preserved).
  x = np.asarray(x)
  if x.dtype == ml_dtypes.bfloat16:
    x = x.astype(np.float32)
  return (np.argmin if is_min else np.argmax)(x, axis=axis)


def run_kernel(x, is_min, method="kernel", axis=-1):
  return np.asarray(_api._argreduce(jnp.asarray(x), axis, False, is_min=is_min, method=method))


def plan(rows, cols, dtype):
  return _ffi.cuda_launch_plan(rows, cols, np.dtype(dtype).name)


def sm_count():
  """Streaming multiprocessors of the first GPU (None where jax does not say)."""
  return getattr(jax.devices()[0], "core_count", None)


def with_specials(x, rng):
  """Plants NaNs, ties, infinities, signed zeros and subnormals in random rows of x."""
  x = x.copy()
  rows, cols = x.shape
  finfo = ml_dtypes.finfo(x.dtype)
  tiny = np.array(finfo.smallest_subnormal, x.dtype)
  for r in range(rows):
    kind = rng.integers(0, 9)
    pos = lambda k=1: rng.integers(0, cols, size=k)
    if kind == 1:
      x[r, pos(3)] = np.nan
    elif kind == 2:
      x[r, pos(4)] = np.array(60000 if x.dtype == np.float16 else 1e6, x.dtype)
      x[r, pos(4)] = -np.array(60000 if x.dtype == np.float16 else 1e6, x.dtype)
    elif kind == 3:
      x[r] = -np.inf
    elif kind == 4:
      x[r] = np.nan
    elif kind == 5:
      x[r] = np.where(np.arange(cols) % 2, np.array(0, x.dtype), -np.array(0, x.dtype))
    elif kind == 6:
      x[r] = finfo.min
    elif kind == 7:  # subnormals only: exact order needed, jnp.argmax would flush them
      x[r] = tiny * rng.integers(-5, 6, size=cols).astype(x.dtype)
    elif kind == 8:
      x[r, pos(2)] = np.inf
      x[r, pos(2)] = -np.inf
  return x


def random_rows(rng, rows, cols, dtype):
  return rng.standard_normal((rows, cols), dtype=np.float32).astype(dtype)


# One shape per dispatch path; the planner's choice is asserted, not assumed.
PATH_CASES = [
    ("team", 300000, 40),        # teams of lanes, more rows than teams in the grid (row loop)
    ("team", 4096, 8),
    ("team", 4096, 4096),
    ("block", 400, 20000),       # one block per row
    ("cluster", 1, 202048),      # one thread block cluster per row (sm_90), merged in DSMEM
    ("cluster", 8, 202049),
    ("cluster", 32, 202048),
    ("cluster", 100, 202048),     # up to one row per SM still takes a cluster per row
    ("block", 256, 202048),       # more rows than SMs: one 256-thread block each
    # Several blocks per row through the workspace + done counter: on Hopper only with
    # clusters off (test_done_counter_path_without_clusters, kernel_check).
]


@pytest.mark.parametrize("path,rows,cols", PATH_CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_path(path, rows, cols, dtype, rng):
  if path == "cluster" and sm_count() is not None and rows > sm_count():
    pytest.skip(f"{rows} rows > {sm_count()} SMs: the planner takes one block per row")
  with x64_for(dtype):
    assert plan(rows, cols, dtype)["path"] == path
    x = with_specials(random_rows(rng, rows, cols, dtype), rng)
    for is_min in (False, True):
      np.testing.assert_array_equal(run_kernel(x, is_min), reference(x, is_min))


def test_done_counter_path_without_clusters(rng, tmp_path):
  """With clusters switched off (read once per process), few wide rows take the done-counter
  path: run them in a fresh process and compare with numpy here."""
  shapes = [(1, 202048), (2, 202049), (8, 131073), (1, 32000)]
  xs = {f"x{i}": random_rows(rng, *s, np.float32) for i, s in enumerate(shapes)}
  for i in range(len(shapes)):
    xs[f"x{i}"][:, rng.integers(0, shapes[i][1], 3)] = np.nan if i % 2 else 99
  np.savez(tmp_path / "in.npz", **xs)
  script = (
      "import numpy as np, jax_argreduce as ja\n"
      "from jax_argreduce import _ffi\n"
      f"d = np.load({str(tmp_path / 'in.npz')!r})\n"
      "out = {}\n"
      "for k in d.files:\n"
      "  x = d[k]\n"
      "  assert _ffi.cuda_launch_plan(*x.shape, 'float32')['path'] == 'multi_block'\n"
      "  out[k + 'max'] = np.asarray(ja.argmax(x, axis=-1))\n"
      "  out[k + 'min'] = np.asarray(ja.argmin(x, axis=-1))\n"
      f"np.savez({str(tmp_path / 'out.npz')!r}, **out)\n")
  env = dict(os.environ, JAX_ARGREDUCE_DISABLE_CLUSTERS="1")
  r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
  assert r.returncode == 0, r.stderr[-3000:]
  out = np.load(tmp_path / "out.npz")
  for k, x in xs.items():
    np.testing.assert_array_equal(out[k + "max"], np.argmax(x, axis=-1))
    np.testing.assert_array_equal(out[k + "min"], np.argmin(x, axis=-1))


def test_row_loop_really_loops():
  p = plan(300000, 40, np.float32)
  assert p["path"] == "team" and p["grid"] * p["block"] // p["team"] < 300000


WIDTHS = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256,
          257, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4097, 202047, 202048, 202049]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("rows", [1, 37])
def test_widths(rows, dtype, rng):
  with x64_for(dtype):
    for cols in WIDTHS:
      x = with_specials(random_rows(rng, rows, cols, dtype), rng)
      for is_min in (False, True):
        np.testing.assert_array_equal(run_kernel(x, is_min), reference(x, is_min),
                                      err_msg=f"{rows}x{cols} min={is_min}")


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
def test_scan_step_boundaries(dtype, rng):
  """Widths at one and two passes of the scan loop, +-1: 1 and 2 rows (clusters on sm_90,
  else several blocks per row) and 256 rows (one block per row, its own loads in flight)."""
  for rows in (1, 2, 256):
    step = plan(rows, 1 << 24, dtype)["row_step"]
    for cols in (step - 1, step, step + 1, 2 * step + 1):
      if plan(rows, cols, dtype)["row_step"] != step:
        continue  # planner picked another geometry at this width: covered elsewhere
      x = random_rows(rng, rows, cols, dtype)
      x[:, rng.integers(0, cols, size=2)] = 50  # ties across blocks
      x[:, cols - 1] = 50
      for is_min in (False, True):
        np.testing.assert_array_equal(run_kernel(x, is_min), reference(x, is_min))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_unaligned_row_starts(dtype, rng):
  """Slices and odd widths: rows that start off a 16-byte boundary."""
  with x64_for(dtype):
    base = random_rows(rng, 9, 202051, dtype)
    for sl in [np.s_[:, 1:], np.s_[:, 3:-2], np.s_[1:, 5:70001], np.s_[:, :7]]:
      x = with_specials(np.ascontiguousarray(base[sl]), rng)
      f = jax.jit(lambda v: jax_argreduce.argmax(v[sl], axis=-1))
      np.testing.assert_array_equal(np.asarray(f(base)), reference(base[sl], False))
      np.testing.assert_array_equal(run_kernel(x, True), reference(x, True))


def test_nan_in_different_blocks_first_wins(rng):
  cols = 202048
  x = random_rows(rng, 4, cols, np.float32)
  x[0, [150000, 9000, 199999]] = np.nan
  x[1, [cols - 1]] = np.nan
  x[2, [0, cols - 1]] = np.nan
  x[3] = np.nan
  for is_min in (False, True):
    np.testing.assert_array_equal(run_kernel(x, is_min), [9000, cols - 1, 0, 0])


def test_ties_across_blocks_lowest_wins(rng):
  cols = 202048
  x = random_rows(rng, 2, cols, np.float32)
  x[0, [190000, 70000, 150001]] = 10
  x[1] = 3
  np.testing.assert_array_equal(run_kernel(x, False), [70000, 0])


def test_generated_cases(rng):
  """>= 10,000 random cases (shape, axis, dtype, special values) against numpy."""
  shapes = [(7,), (33,), (129,), (3, 31), (5, 1025), (2, 3, 257), (4, 2049), (2, 2, 2, 513),
            (1, 32000), (6, 4097), (64, 64), (2, 50000)]
  count = 0
  for dtype in DTYPES:
    with x64_for(dtype):
      for shape in shapes:
        for axis in [None] + list(range(-len(shape), len(shape))):
          reps = 30 if np.prod(shape) < 20000 else 6
          fn_max = jax.jit(lambda v, a=axis: jax_argreduce.argmax(v, axis=a))
          fn_min = jax.jit(lambda v, a=axis: jax_argreduce.argmin(v, axis=a))
          for _ in range(reps):
            x = random_rows(rng, int(np.prod(shape[:-1])), shape[-1], dtype)
            x = with_specials(x, rng).reshape(shape)
            xr = x.astype(np.float32) if x.dtype == ml_dtypes.bfloat16 else x
            for fn, ref in ((fn_max, np.argmax), (fn_min, np.argmin)):
              got = np.asarray(fn(x))
              np.testing.assert_array_equal(got, ref(xr, axis=axis),
                                            err_msg=f"{shape} {axis} {np.dtype(dtype).name}")
              count += 1
  print(f"generated GPU cases: {count}")
  assert count >= 10_000


def test_repeated_calls_in_one_program_poisoned(rng):
  """Several argmaxes in one jitted program (command buffers), fresh inputs every run, the
  output buffers donated from poison (-7) arrays so an unwritten row shows up."""
  shapes = [(1, 202048), (8, 202049), (4096, 96), (300, 4097)]

  def program(xs, poisons):
    del poisons  # donated: XLA reuses them for the outputs
    outs = []
    for x in xs:
      y = x * 1.5 + 0.25  # a fusion between custom calls
      outs.append(jax_argreduce.argmax(y, axis=-1))
      outs.append(jax_argreduce.argmin(x, axis=-1))
    return outs

  f = jax.jit(program, donate_argnums=1)
  for _ in range(5):
    xs = [random_rows(rng, *s, np.float32) for s in shapes]
    poisons = [jnp.full(s[:1], -7, jnp.int32) for s in shapes for _ in range(2)]
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      outs = f([jnp.asarray(x) for x in xs], poisons)
    for i, x in enumerate(xs):
      np.testing.assert_array_equal(np.asarray(outs[2 * i]), np.argmax(x * np.float32(1.5) + np.float32(0.25), axis=-1))
      np.testing.assert_array_equal(np.asarray(outs[2 * i + 1]), np.argmin(x, axis=-1))


def test_vmap_and_grad_on_gpu(rng):
  x = random_rows(rng, 6, 50000, np.float32).reshape(2, 3, 50000)
  got = jax.jit(jax.vmap(lambda v: jax_argreduce.argmax(v, axis=-1), in_axes=1))(x)
  np.testing.assert_array_equal(np.asarray(got), np.argmax(x.transpose(1, 0, 2), axis=-1))
  g = jax.grad(lambda v: jnp.sum(jnp.take_along_axis(v, jax_argreduce.argmax(v, axis=-1)[:, None], -1) ** 2))(x[0])
  want = np.zeros_like(x[0])
  want[np.arange(3), np.argmax(x[0], -1)] = 2 * x[0].max(-1)
  np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6)


def _free_bytes():
  stats = jax.devices()[0].memory_stats() or {}
  return stats.get("bytes_limit", 0) - stats.get("bytes_in_use", 0)


def test_int32_max_row_float16():
  cols = np.iinfo(np.int32).max
  if _free_bytes() < 3 * cols * 2:
    pytest.skip("not enough GPU memory for a [1, INT32_MAX] float16 row")
  x = jax.random.normal(jax.random.key(1), (1, cols), jnp.float16)
  x = x.at[0, cols - 3].set(1000).at[0, 12345].set(-1000)
  assert int(jax_argreduce.argmax(x, axis=-1)[0]) == cols - 3
  assert int(jax_argreduce.argmin(x, axis=-1)[0]) == 12345
  x = x.at[0, cols - 1].set(jnp.nan)
  assert int(jax_argreduce.argmin(x, axis=-1)[0]) == cols - 1
  del x


def test_more_than_2_31_elements(rng):
  rows, cols = 40000, 60000  # 2.4e9 elements of float16
  if _free_bytes() < 3 * rows * cols * 2:
    pytest.skip("not enough GPU memory for a >2^31-element array")
  x = jax.random.normal(jax.random.key(2), (rows, cols), jnp.float16)
  pos_max = rng.integers(0, cols, size=rows)
  pos_min = (pos_max + 1 + rng.integers(0, cols - 1, size=rows)) % cols
  x = x.at[np.arange(rows), pos_max].set(1000).at[np.arange(rows), pos_min].set(-1000)
  np.testing.assert_array_equal(np.asarray(jax_argreduce.argmax(x, axis=-1)), pos_max)
  np.testing.assert_array_equal(np.asarray(jax_argreduce.argmin(x, axis=-1)), pos_min)
  del x


def test_kernel_check_under_compute_sanitizer(tmp_path):
  """memcheck (out-of-bounds/misaligned global and shared accesses) and racecheck (shared
  memory hazards) clean on every path, clusters on and off (multi block + done counter, row
  loop), via tests/cuda/kernel_check.cu. The done counter's global memory ordering is covered
  by the result checks, not by racecheck."""
  nvcc, sanitizer = shutil.which("nvcc"), shutil.which("compute-sanitizer")
  if not nvcc or not sanitizer:
    pytest.skip("nvcc or compute-sanitizer not found")
  here = os.path.dirname(__file__)
  ffi = os.path.join(here, "..", "ffi")
  exe = str(tmp_path / "kernel_check")
  subprocess.run([nvcc, "-std=c++17", "-arch=native", "-O2", "-I", ffi,
                  os.path.join(here, "cuda", "kernel_check.cu"),
                  os.path.join(ffi, "argreduce_kernels.cu"), "-o", exe], check=True)
  plain = subprocess.run([exe], capture_output=True, text=True)
  assert plain.returncode == 0, plain.stdout[-3000:]
  no_clusters = dict(os.environ, JAX_ARGREDUCE_DISABLE_CLUSTERS="1")
  for env in (os.environ, no_clusters):  # cluster path, then done-counter path
    for tool in ("memcheck", "racecheck"):
      r = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "3", exe],
                         capture_output=True, text=True, env=env)
      summary = [l for l in r.stdout.splitlines() if "SUMMARY" in l]
      print(tool, "clusters off" if env is no_clusters else "clusters on", summary)
      assert r.returncode == 0, r.stdout[-3000:]
