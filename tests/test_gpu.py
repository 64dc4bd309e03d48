"""GPU tests (marker ``gpu``): the CUDA handlers against the numpy reference on fresh data.

Every launch path forced through the plan options (``_ffi.debug_set_plan_options``): team of
lanes with rows looped, one block per row, split rows through the workspace with and without
programmatic dependent launch; all four ops (``max_with_index`` values
bit for bit), widths straddling warp/block/vector/scan-step boundaries (the plan's
``row_step``), unaligned row starts, all four float dtypes, the shared special-value fills
(``reference.py``), >= 10,000 generated cases, repeated calls inside one jitted program
(command buffers, XLA's default) with poisoned outputs, vmap/grad, a second GPU, and the
INT32_MAX-wide row / >2^31-element array. Tests of the kernels force ``method="kernel"``
(``"auto"`` routes small float32 inputs to the exact XLA path: ``_dispatch.handler_wins``);
``test_auto_routing_follows_dispatch`` checks that "auto" lowers as ``_dispatch`` says. The standalone launcher check
(tests/cuda/kernel_check.cu) runs plain and under compute-sanitizer memcheck and racecheck (a
binary built ahead can be named by JAX_ARGREDUCE_KERNEL_CHECK).
Skipped without a GPU (conftest).

Plan options are process-wide and read by the handler when it runs. A program XLA captured in
a command buffer replays its kernels without calling the handler again, so every test that
forces options compiles its own functions (``_runner``) and never reuses an executable under
other options.
"""

import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_argreduce
import reference
from _common import (BLOCK_OPTION_SETS, CHECK_RUNS, OPTION_SETS, TEAM_OPTION_SETS,  # noqa: F401
                     cuda_check_exe, needs_cuda_build, plan_options, run_cuda_check, x64_for)
from jax_argreduce import _api, _dispatch, _ffi
from reference import OPS, fill_rows, random_rows

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda_build")]

DTYPES = ["float32", "bfloat16", "float16", "float64"]
SEED = int(os.environ.get("JAX_ARGREDUCE_TEST_SEED", np.random.SeedSequence().entropy % 2**32))

# Plan option sets: name -> kwargs of _ffi.debug_set_plan_options.


@pytest.fixture
def rng():
  print(f"seed {SEED}")
  return np.random.default_rng(SEED)


_RUNNERS = {}


def _runner(options, ops=OPS, axis=-1):
  """A jitted function computing ``ops`` on the kernel path; one per (options, ops, axis), so
  no executable runs under two option sets."""
  key = (options, tuple(ops), axis)
  if key not in _RUNNERS:
    _RUNNERS[key] = jax.jit(lambda v: {op: _api.reduce(v, axis, False, op=op, method="kernel")
                                       for op in ops})
  return _RUNNERS[key]


def kernel_op(op, axis=-1, keepdims=False):
  """The public op ``op`` forced onto the kernel path (``method="kernel"``)."""
  return lambda v: _api.reduce(v, axis, keepdims, op=op, method="kernel")


def run_ops(x, options="default", ops=OPS, axis=-1):
  """{op: result} of the kernel path on x (numpy results), under plan options ``options``."""
  with plan_options(options):
    return jax.device_get(_runner(options, ops, axis)(jnp.asarray(x)))


def check_ops(x, got, axis=-1, msg=""):
  for op, result in got.items():
    reference.assert_matches(result, reference.argreduce(x, axis, False, op=op), op=op, msg=msg)


def plan(rows, cols, dtype, options="default"):
  with plan_options(options):
    return _ffi.debug_launch_plan(rows, cols, reference.np_dtype(dtype))


def sm_count():
  """Streaming multiprocessors of the first GPU (None where jax does not say)."""
  return getattr(jax.devices()[0], "core_count", None)


def cc_major():
  """Compute capability major of the first GPU ("9.0" -> 9)."""
  return int(str(jax.devices()[0].compute_capability).split(".")[0])


def block_per_row_here(rows, cols, dtype):
  """Whether this GPU's planner gives rows of at most one per SM a block each instead of the
  split path (test_launch_plan.block_per_row with this GPU's SM count)."""
  from test_launch_plan import block_per_row
  sms = sm_count()
  return (sms is not None and rows <= sms and
          block_per_row(rows, cols, np.dtype(reference.np_dtype(dtype)).itemsize, sms))


# One shape per path and option set; the planner's choice is asserted, not assumed.
PATH_CASES = [
    ("team", "default", 300000, 40),     # teams of lanes, more rows than teams (row loop)
    ("team", "no_pdl", 4096, 8),
    ("team", "default", 4096, 4096),
    ("team", "default", 1024, 3001),     # two-warp teams where the rows are 12 KB (float32)
    ("team", "default", 1023, 3001),     # a block's last two-warp teams past the last row
    ("block", "default", 400, 20000),    # one block per row
    ("block", "no_pdl", 256, 202048),    # more rows than SMs
    ("block", "default", 1024, 16384),   # rows of >= 32 KB that 32-lane teams would underfill
    ("block", "default", 100, 20001),    # half the SMs' count of rows or more, <= 256 KB each
    ("block", "no_pdl", 128, 16384),
    ("split", "default", 1, 202048),     # several blocks per row, workspace + merge, PDL
    ("split", "no_pdl", 1, 202048),
    ("split", "default", 8, 202049),
    ("split", "no_pdl", 8, 202049),
    ("split", "default", 32, 202048),
    ("split", "default", 64, 32000),     # a block per row instead where 128 >= the SMs
    ("split", "no_pdl", 32, 202048),
    ("split", "no_pdl", 64, 32000),
    ("split", "default", 100, 202048),   # up to one row per SM
    ("split", "no_pdl", 100, 202048),
    ("split", "merge_kernel", 1, 202048),  # the merge kernel (default: the last block merges)
    ("split", "merge_kernel", 8, 202049),
    ("split", "merge_kernel", 32, 202048),
]


@pytest.mark.parametrize("path,options,rows,cols", PATH_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_path(path, options, rows, cols, dtype, rng):
  if rows > (sm_count() or rows) and path == "split":
    pytest.skip(f"{rows} rows > {sm_count()} SMs: the planner takes one block per row")
  with x64_for(dtype):
    if path == "split" and block_per_row_here(rows, cols, dtype):
      path = "block"  # this GPU has at most twice as many SMs as rows (launch_plan.h)
    p = plan(rows, cols, dtype, options)
    assert p["path"] == path, p
    assert p["pdl"] == (OPTION_SETS[options]["pdl"] and cc_major() >= 9), p
    x = fill_rows(dtype, rng, rows, cols)
    check_ops(x, run_ops(x, options), msg=f"{path} {options} {rows}x{cols} {dtype}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_team_width(dtype, rng):
  """Each team kernel (1-64 lanes per row, forced by the ``team`` option; the plan read back
  says it took it) on team-path shapes with odd widths (head and tail columns) and a row count
  that leaves a block's last teams without a row (2001): all four ops exact."""
  with x64_for(dtype):
    for rows, cols in ((4096, 129), (3000, 33), (2001, 1031), (300000, 5)):
      x = fill_rows(dtype, rng, rows, cols)
      for options, kw in TEAM_OPTION_SETS.items():
        p = plan(rows, cols, dtype, options)
        assert p["path"] == "team" and p["team"] == kw["team"], p
        check_ops(x, run_ops(x, options), msg=f"{options} {rows}x{cols} {dtype}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_block_width(dtype, rng):
  """Each block kernel (256 and 512 threads, forced by the ``path`` and ``block``
  options; the plan read back says it took it) on rows of one pass and of several (the
  plan's row_step, +-1) and odd widths (head and tail columns): all four ops exact. (Every
  case fits one wave; the row loop is test_row_loop_really_loops'.)"""
  with x64_for(dtype):
    for options, kw in BLOCK_OPTION_SETS.items():
      step = plan(8, 1 << 20, dtype, options)["row_step"]
      for rows, cols in ((8, step - 1), (8, step + 1), (37, 3 * step + 5), (3, 20001)):
        p = plan(rows, cols, dtype, options)
        assert p["path"] == "block" and p["block"] == kw["block"], p
        x = fill_rows(dtype, rng, rows, cols)
        x[:, [0, cols - 1]] = x[:, [cols - 1, 0]]  # the fills' extremes at the ends too
        check_ops(x, run_ops(x, options), msg=f"{options} {rows}x{cols} {dtype}")


def test_options_change_between_calls_of_one_executable(rng):
  """Options apply at the next handler call: eager calls (one custom call per executable, too
  small for a command buffer) reuse one executable under every option set; results stay
  exact whichever path each call takes."""
  x = random_rows(rng, 8, 202049, np.float32)
  x[:, [150001, 7]] = 50
  x[3, [190000, 9000]] = np.nan
  f = lambda v: _api.reduce(v, -1, False, op="max_with_index", method="kernel")  # noqa: E731
  for options in OPTION_SETS:
    with plan_options(options):
      got = jax.device_get(f(jnp.asarray(x)))
    reference.assert_matches(got, reference.max_with_index(x), op="max_with_index", msg=options)


def test_row_loop_really_loops():
  p = plan(300000, 40, np.float32)
  assert p["path"] == "team" and p["grid"] * p["block"] // p["team"] < 300000


@pytest.mark.parametrize("op", OPS)
def test_auto_routing_follows_dispatch(op, rng):
  """The public op ("auto") lowers to the CUDA handler exactly where ``_dispatch.route`` says
  for "cuda" (the in-chain rule of ``_dispatch.handler_wins``; no thresholds copied here) and
  to the exact XLA path elsewhere; results exact either way."""
  target = _ffi.target("max_with_index" if reference.with_value(op) else "argreduce", "cuda")
  shapes = [(1, 202048), (8, 202049), (8, 32000), (64, 128256), (4096, 64), (65536, 64),
            (16384, 96), (300, 4097), (7,), (2, 3, 257), (128, 16384), (2048, 1024)]
  fn = jax.jit(lambda v: getattr(jax_argreduce, op)(v, axis=-1))
  routes = set()
  for dtype in DTYPES:
    with x64_for(dtype):
      np_dtype = reference.np_dtype(dtype)
      for shape in shapes:
        want = _dispatch.route(op, "cuda", shape, np_dtype)
        routes.add(want)
        text = fn.lower(jax.ShapeDtypeStruct(shape, np_dtype)).as_text()
        assert (target in text) == (want == "kernel"), f"{op} {shape} {dtype}: route {want}"
        if np.prod(shape) <= 1 << 21:
          x = fill_rows(dtype, rng, int(np.prod(shape[:-1])), shape[-1]).reshape(shape)
          reference.assert_matches(jax.device_get(fn(x)), reference.argreduce(x, -1, op=op),
                                   op=op, msg=f"auto {shape} {dtype} ({want})")
  print(f"{op}: auto took {sorted(routes)}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_row_xla_split_on_gpu(dtype, rng):
  """One long row on the exact XLA path is reduced as rows of 128 columns (_xla.py): the four
  ops against numpy on the GPU, every fill, lengths with and without padding."""
  fns = {op: jax.jit(lambda v, op=op: _api.reduce(v, -1, False, op=op, method="xla"))
         for op in OPS}
  with x64_for(dtype):
    for cols in (16384, 32000, 202049, 262144):
      for _ in range(6):
        x = fill_rows(dtype, rng, 1, cols)
        for op, fn in fns.items():
          reference.assert_matches(jax.device_get(fn(x)), reference.argreduce(x, -1, op=op),
                                   op=op, msg=f"xla split 1x{cols} {dtype}")


def test_device_plans_keep_the_planner_invariants():
  """Plans read on this GPU keep what test_launch_plan checks on made-up devices."""
  from test_launch_plan import MAX_PARTIALS
  for options in OPTION_SETS:
    for rows, cols in [(1, 202048), (8, 128256), (64, 32000), (256, 202048), (4096, 8),
                       (65536, 1024), (1, 2 ** 31 - 1), (100, 20001)]:
      for dtype in DTYPES:
        p = plan(rows, cols, dtype, options)
        where = f"{rows}x{cols} {dtype} {options}: {p}"
        assert p["vector_elements"] == 16 // np.dtype(reference.np_dtype(dtype)).itemsize
        assert p["workspace_bytes"] <= _ffi.CUDA_WORKSPACE_BYTES - 16, where
        assert p["path"] in ("team", "block", "split"), where
        assert p["pdl"] == (OPTION_SETS[options]["pdl"] and cc_major() >= 9), where
        if p["path"] == "split":
          assert p["parts"] >= 2 and p["grid"] == rows * p["parts"], where
          assert rows * p["parts"] <= MAX_PARTIALS and rows <= sm_count(), where
        else:
          assert p["workspace_bytes"] == 0 and p["merge_grid"] == 0, where
        if rows <= min(64, sm_count()) and cols >= 32000:
          assert p["path"] == ("block" if block_per_row_here(rows, cols, dtype) else "split"), where


WIDTHS = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256,
          257, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4097, 202047, 202048, 202049]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 37])
@pytest.mark.parametrize("options", list(OPTION_SETS))
def test_widths(rows, dtype, options, rng):
  with x64_for(dtype):
    for cols in WIDTHS:
      x = fill_rows(dtype, rng, rows, cols)
      check_ops(x, run_ops(x, options), msg=f"{rows}x{cols} {dtype} {options}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("options", list(OPTION_SETS))
def test_scan_step_boundaries(dtype, options, rng):
  """Widths at one and two passes of the scan loop (the plan's row_step), +-1: few rows
  (split), 256 rows (one block per row, its own loads in flight) and 4096 rows
  (teams of lanes). Ties across passes, the last column included."""
  with x64_for(dtype):
    tested = 0
    for rows, probe in ((1, 1 << 24), (2, 1 << 24), (256, 1 << 24), (4096, 4096)):
      step = plan(rows, probe, dtype, options)["row_step"]
      for cols in (step - 1, step, step + 1, 2 * step - 1, 2 * step + 1):
        if plan(rows, cols, dtype, options)["row_step"] != step:
          continue  # the planner picked another geometry at this width: covered elsewhere
        x = random_rows(rng, rows, cols, dtype)
        x[:, rng.integers(0, cols, size=2)] = 50  # ties across blocks and passes
        x[:, cols - 1] = 50
        x[:, -1 - step // 2] = -50
        check_ops(x, run_ops(x, options), msg=f"{rows}x{cols} step {step}")
        tested += 1
    assert tested >= 4


@pytest.mark.parametrize("dtype", DTYPES)
def test_unaligned_row_starts(dtype, rng):
  """Slices and odd widths: rows that start off a 16-byte boundary."""
  with x64_for(dtype):
    base = random_rows(rng, 9, 202051, dtype)
    for sl in [np.s_[:, 1:], np.s_[:, 3:-2], np.s_[1:, 5:70001], np.s_[:, :7]]:
      f = jax.jit(lambda v, sl=sl: {op: kernel_op(op)(v[sl]) for op in OPS})
      check_ops(base[sl], jax.device_get(f(base)), msg=str(sl))
      x = np.ascontiguousarray(base[sl])
      x[:, rng.integers(0, x.shape[1], 3)] = np.nan
      check_ops(x, run_ops(x))


@pytest.mark.parametrize("options", list(OPTION_SETS))
def test_nan_in_different_blocks_first_wins(options, rng):
  cols = 202048
  x = random_rows(rng, 4, cols, np.float32)
  nan_a = np.array(0x7FC00123, np.uint32).view(np.float32)
  nan_b = np.array(0xFFA00001, np.uint32).view(np.float32)
  x[0, [150000, 9000, 199999]] = [nan_b, nan_a, np.nan]
  x[1, [cols - 1]] = nan_b
  x[2, [0, cols - 1]] = nan_a
  x[3] = nan_b
  got = run_ops(x, options)
  for op in OPS:
    indices = got[op][1] if reference.with_value(op) else got[op]
    np.testing.assert_array_equal(indices, [9000, cols - 1, 0, 0])
  check_ops(x, got, msg=options)  # values: the first NaN's payload and sign


@pytest.mark.parametrize("options", list(OPTION_SETS))
def test_ties_across_blocks_lowest_wins(options, rng):
  cols = 202048
  x = random_rows(rng, 3, cols, np.float32)
  x[0, [190000, 70000, 150001]] = 10
  x[1] = 3
  x[2] = 0.0
  x[2, [5000, 100000]] = -0.0  # -0 ties +0: the first zero wins, its sign kept
  x[2, 0] = -0.0
  got = run_ops(x, options)
  np.testing.assert_array_equal(got["argmax"], [70000, 0, 0])
  np.testing.assert_array_equal(got["max_with_index"][0].view(np.uint32)[2], 0x80000000)
  check_ops(x, got, msg=options)


def test_generated_cases(rng):
  """>= 10,000 random cases (shape, axis, dtype, special-value fills) against numpy, the four
  ops in one jitted program per shape, cycling through the plan option sets."""
  shapes = [(7,), (33,), (129,), (3, 31), (5, 1025), (2, 3, 257), (4, 2049), (2, 2, 2, 513),
            (1, 32000), (6, 4097), (64, 64), (2, 50000)]
  count = 0
  names = list(OPTION_SETS)
  for di, dtype in enumerate(DTYPES):
    f = reference.Fmt(dtype)
    options = names[di % len(names)]
    with x64_for(dtype), plan_options(options):
      for shape in shapes:
        for axis in [None] + list(range(-len(shape), len(shape))):
          reps = 15 if np.prod(shape) < 20000 else 3
          fn = jax.jit(lambda v, a=axis: {op: kernel_op(op, a)(v) for op in OPS})
          for _ in range(reps):
            x = reference.make_input(f, rng, shape, axis)
            got = jax.device_get(fn(x))
            for op in OPS:
              reference.assert_matches(got[op], reference.argreduce(x, axis, False, op=op),
                                       op=op, msg=f"{shape} axis={axis} {dtype} {options}")
              count += 1
  print(f"generated GPU cases: {count}")
  assert count >= 10_000


@pytest.mark.parametrize("options", list(OPTION_SETS))
def test_repeated_calls_in_one_program_poisoned(options, rng):
  """Several reductions in one jitted program (command buffers), fresh inputs every run, the
  output buffers donated from poison arrays so an unwritten row shows up."""
  shapes = [(1, 202048), (8, 202049), (4096, 96), (300, 4097), (64, 32000)]

  def program(xs, poisons):
    del poisons  # donated: XLA reuses them for the outputs
    outs, ys = [], []
    for x in xs:
      y = x * 1.5 + 0.25  # a fusion between custom calls (returned: the reference's input)
      ys.append(y)
      outs.append(kernel_op("argmax")(y))
      outs.append(kernel_op("argmin")(x))
      outs.extend(kernel_op("max_with_index")(y))
      outs.extend(kernel_op("min_with_index")(x))
    return outs, ys

  with plan_options(options):
    f = jax.jit(program, donate_argnums=1)  # a fresh executable per option set
    for _ in range(5):
      xs = [random_rows(rng, *s, np.float32) for s in shapes]
      for x in xs:
        x[:, rng.integers(0, x.shape[1], 2)] = np.nan if rng.random() < 0.5 else 9.0
      poisons = [p for s in shapes for p in (
          jnp.full(s[:1], -7, jnp.int32), jnp.full(s[:1], -7, jnp.int32),
          jnp.full(s[:1], -7.0, jnp.float32), jnp.full(s[:1], -7, jnp.int32),
          jnp.full(s[:1], -7.0, jnp.float32), jnp.full(s[:1], -7, jnp.int32))]
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs, ys = jax.device_get(f([jnp.asarray(x) for x in xs], poisons))
      for i, (x, y) in enumerate(zip(xs, ys)):
        o = outs[6 * i:6 * i + 6]
        reference.assert_matches(o[0], reference.argmax(y, axis=-1), op="argmax")
        reference.assert_matches(o[1], reference.argmin(x, axis=-1), op="argmin")
        reference.assert_matches((o[2], o[3]), reference.max_with_index(y), op="max_with_index")
        reference.assert_matches((o[4], o[5]), reference.min_with_index(x), op="min_with_index")


@pytest.mark.parametrize("op", ["argmax", "max_with_index", "categorical"])
def test_one_call_per_step_in_a_rolled_scan(op, rng):
  """A rolled lax.scan stacking each step's result (a decode loop collecting tokens) runs our
  call once per step: XLA's dynamic-slice fusion pass clones an FFI call whose result reaches
  an aligned dynamic-update-slice (here 256 rows of int32 per step), unless the call's results
  are behind the lowering's optimization barrier. Counted in the optimized HLO; results
  against numpy (argmax ops) and between the rolled and unrolled scan (categorical)."""
  rows, cols, steps = 256, 4096, 4
  logits = jnp.asarray(random_rows(rng, steps * rows, cols, np.float32).reshape(
      steps, rows, cols))
  if op == "categorical":
    keys = jax.random.split(jax.random.key(0), steps)
    pick = lambda x, k: jax_argreduce.categorical(k, x, temperature=0.5, method="kernel")
    xs = (logits, keys)
  else:
    f = kernel_op(op)
    pick = lambda x, k: f(x)
    xs = (logits, jnp.zeros(steps))

  def run(unroll):
    def step(carry, args):
      out = pick(*args)
      idx = out[1] if op == "max_with_index" else out
      return carry + idx.sum(), out
    return jax.jit(lambda xs: jax.lax.scan(step, jnp.int32(0), xs, unroll=unroll))

  target = _ffi.target("argreduce" if op == "argmax" else op, "cuda")
  hlo = run(1).lower(xs).compile().as_text()
  assert hlo.count(f'custom_call_target="{target}"') == 1, hlo
  _, got = jax.device_get(run(1)(xs))
  if op == "categorical":
    np.testing.assert_array_equal(got, jax.device_get(run(True)(xs))[1])
  else:
    for i in range(steps):
      want = getattr(reference, op)(np.asarray(logits[i]), axis=-1)
      reference.assert_matches(got[i] if op == "argmax" else (got[0][i], got[1][i]), want,
                               op=op)


def test_vmap_and_grad_on_gpu(rng):
  x = random_rows(rng, 6, 50000, np.float32).reshape(2, 3, 50000)
  argmax, max_with_index = kernel_op("argmax"), kernel_op("max_with_index")
  min_with_index = kernel_op("min_with_index")
  got = jax.jit(jax.vmap(argmax, in_axes=1))(x)
  np.testing.assert_array_equal(np.asarray(got), np.argmax(x.transpose(1, 0, 2), axis=-1))
  got = jax.device_get(jax.jit(jax.vmap(max_with_index, in_axes=1))(x))
  reference.assert_matches(got, reference.max_with_index(x.transpose(1, 0, 2)),
                           op="max_with_index")
  g = jax.grad(lambda v: jnp.sum(jnp.take_along_axis(
      v, argmax(v)[:, None], -1) ** 2))(x[0])
  want = np.zeros_like(x[0])
  want[np.arange(3), np.argmax(x[0], -1)] = 2 * x[0].max(-1)
  np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6)
  g = jax.jit(jax.grad(lambda v: jnp.sum(min_with_index(v)[0] ** 2)))(x[0])
  want = np.zeros_like(x[0])
  want[np.arange(3), np.argmin(x[0], -1)] = 2 * x[0].min(-1)
  np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6)
  t = rng.standard_normal(x[0].shape).astype(np.float32)
  (_, idx), (tv, _) = jax.jvp(max_with_index, (x[0],), (t,))
  np.testing.assert_array_equal(np.asarray(tv), t[np.arange(3), np.asarray(idx)])


def test_second_gpu(rng):
  """The handler plans for and launches on the stream's device (XLA's DeviceOrdinal), not
  the thread's current device."""
  devices = jax.devices()
  if len(devices) < 2:
    pytest.skip("needs two GPUs")
  for options in OPTION_SETS:
    x = fill_rows("bfloat16", rng, 8, 202049)
    f = jax.jit(lambda v: {op: _api.reduce(v, -1, False, op=op, method="kernel") for op in OPS})
    with plan_options(options):
      for dev in devices[:2][::-1]:
        got = jax.device_get(f(jax.device_put(x, dev)))
        check_ops(x, got, msg=f"{dev} {options}")


def _free_bytes():
  stats = jax.devices()[0].memory_stats() or {}
  return stats.get("bytes_limit", 0) - stats.get("bytes_in_use", 0)


def test_int32_max_row_float16():
  cols = np.iinfo(np.int32).max
  if _free_bytes() < 3 * cols * 2:
    pytest.skip("not enough GPU memory for a [1, INT32_MAX] float16 row")
  x = jax.random.normal(jax.random.key(1), (1, cols), jnp.float16)
  x = x.at[0, cols - 3].set(1000).at[0, 12345].set(-1000)
  for options in OPTION_SETS:
    with plan_options(options):  # eager calls: one executable per op, run under both options
      assert int(kernel_op("argmax")(x)[0]) == cols - 3
      assert int(kernel_op("argmin")(x)[0]) == 12345
      v, i = kernel_op("max_with_index")(x)
      assert (float(v[0]), int(i[0])) == (1000.0, cols - 3)
  x = x.at[0, cols - 1].set(jnp.nan)
  assert int(kernel_op("argmin")(x)[0]) == cols - 1
  v, i = kernel_op("min_with_index")(x)
  assert int(i[0]) == cols - 1 and np.isnan(float(v[0]))
  del x


def test_more_than_2_31_elements(rng):
  rows, cols = 40000, 60000  # 2.4e9 elements of float16
  if _free_bytes() < 3 * rows * cols * 2:
    pytest.skip("not enough GPU memory for a >2^31-element array")
  x = jax.random.normal(jax.random.key(2), (rows, cols), jnp.float16)
  pos_max = rng.integers(0, cols, size=rows)
  pos_min = (pos_max + 1 + rng.integers(0, cols - 1, size=rows)) % cols
  x = x.at[np.arange(rows), pos_max].set(1000).at[np.arange(rows), pos_min].set(-1000)
  np.testing.assert_array_equal(np.asarray(kernel_op("argmax")(x)), pos_max)
  np.testing.assert_array_equal(np.asarray(kernel_op("argmin")(x)), pos_min)
  v, i = kernel_op("max_with_index")(x)
  np.testing.assert_array_equal(np.asarray(i), pos_max)
  assert (np.asarray(v) == 1000).all()
  del x


# Option sets for the sanitizers: PDL on and off, the split path's merge in its last block, in
# a second kernel and "auto" (every path under each, CUDA-graph capture included). The plain
# run takes every option set itself.
SANITIZER_OPTIONS = [("--pdl=1", "--merge=1"), ("--pdl=0", "--merge=1"),
                     ("--pdl=1", "--merge=0"), ("--pdl=1", "--merge=2")]


@pytest.mark.long
@pytest.mark.parametrize("run,options", [pytest.param("plain", (), id="plain")] + [
    pytest.param(tool, options, id=tool + "".join(options))
    for options in SANITIZER_OPTIONS for tool in CHECK_RUNS[1:]])
def test_kernel_check_under_compute_sanitizer(run, options):
  """tests/cuda/kernel_check.cu: every path under every option set, memcheck
  (out-of-bounds/misaligned global and shared accesses) and racecheck (shared memory hazards)
  clean on one case per path. The split path's global-memory ordering (partials, then the
  last block's acq_rel counter, or the merge kernel after griddepcontrol.wait) is covered by
  the result checks, not by racecheck."""
  exe, sanitizer = cuda_check_exe("kernel_check", ["argreduce_kernels.cu", "launch_plan.cc"],
                                  prebuilt_env="JAX_ARGREDUCE_KERNEL_CHECK")
  run_cuda_check(exe, sanitizer, run, *options)
