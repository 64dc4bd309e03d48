"""Helpers shared by the test modules: the ops under test, by name and by forced path, and the
CUDA plan option sets the GPU modules run under.

The numpy reference lives in ``reference.py``; the jnp counterpart of each op is what its
errors and result dtypes are compared with.
"""

from __future__ import annotations

import contextlib
import importlib.util
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_argreduce
import reference
from jax_argreduce import _api, _ffi
from reference import np_dtype  # noqa: F401  (re-exported)

# Paths a test can force: the public function, or _api.reduce with method "kernel" / "xla".
METHODS = ("public", "kernel", "xla")
FLOATS = ("float16", "bfloat16", "float32")
ALL_OPS = reference.OPS

# op -> (ours, numpy reference, jnp) for argmax / argmin.
OPS = {op: (getattr(jax_argreduce, op), reference.REFERENCE[op], getattr(jnp, op))
       for op in reference.ARG_OPS}


_EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


@contextlib.contextmanager
def example_module(name: str):
  """``examples/<name>.py`` loaded by path (examples/ is not a package), registered in
  sys.modules while in use: its dataclasses resolve their module by name."""
  module_name = f"jax_argreduce_example_{name}"
  spec = importlib.util.spec_from_file_location(module_name, _EXAMPLES / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[module_name] = module
  try:
    spec.loader.exec_module(module)
    yield module
  finally:
    sys.modules.pop(module_name, None)


def jnp_like(op):
  """The jnp function whose errors and index dtype ``op`` must reproduce."""
  return getattr(jnp, {"max_with_index": "argmax", "min_with_index": "argmin"}.get(op, op))


def op_fn(op, method):
  """``op`` (any of ALL_OPS) through the public function or one forced path:
  ``fn(x, axis=None, keepdims=False)``."""
  if method == "public":
    public = getattr(jax_argreduce, op)
    return lambda x, axis=None, keepdims=False: public(x, axis=axis, keepdims=keepdims)
  return lambda x, axis=None, keepdims=False: _api.reduce(x, axis, keepdims, op=op,
                                                          method=method)


# CUDA plan option sets (jax_argreduce._ffi.debug_set_plan_options) the GPU tests run under.
# "auto" merges the split path's partials in the last block for few rows launched from the
# host (a one-op program) and in a second kernel inside CUDA graphs; "merge_kernel" and
# "last_block" force one of them everywhere.
OPTION_SETS = {
    "default": dict(pdl=True, merge="auto"),
    "no_pdl": dict(pdl=False, merge="auto"),
    "merge_kernel": dict(pdl=True, merge="kernel"),
    "last_block": dict(pdl=True, merge="last_block"),  # also inside CUDA graphs, any rows
}
# The team path at every width (shapes that take it get exactly this many lanes per row; 64:
# a team of two warps, for the order-key ops).
TEAM_OPTION_SETS = {f"team{n}": dict(OPTION_SETS["default"], team=n)
                    for n in (1, 2, 4, 8, 16, 32, 64)}
# The block path at both block widths (one block per row where the rows fit one per SM; 512
# threads: the order-key ops).
BLOCK_OPTION_SETS = {f"block{n}": dict(OPTION_SETS["default"], path="block", block=n)
                     for n in (256, 512)}
_ALL_OPTION_SETS = {**OPTION_SETS, **TEAM_OPTION_SETS, **BLOCK_OPTION_SETS}


@contextlib.contextmanager
def plan_options(name):
  """Process-wide plan options inside the block (restored after)."""
  before = _ffi.debug_plan_options()
  try:
    yield _ffi.debug_set_plan_options(**_ALL_OPTION_SETS[name])
  finally:
    _ffi.debug_set_plan_options(**before)


def x64_for(dtype):
  """jax_enable_x64 on exactly for float64 inputs."""
  return jax.enable_x64(np.dtype(reference.np_dtype(dtype)) == np.float64)


# A checker's runs (tests/cuda/*_check.cu), each its own test so that pytest-xdist spreads them
# over workers: every case plain, then compute-sanitizer's memcheck and racecheck on the quick
# cases (each run alone takes minutes under a sanitizer).
CHECK_RUNS = ("plain", "memcheck", "racecheck")

_BUILT: dict = {}  # name -> the binary this process built (once per xdist worker)


def cuda_check_exe(name: str, sources, prebuilt_env: str | None = None, *, cu=None,
                   flags=()):
  """(exe, compute-sanitizer path or None) of tests/cuda/<name>.cu (or of the source text
  ``cu``) linked with the ffi/ ``sources``, built once per test process with nvcc for this GPU
  (``-arch=native``), or the binary named by the environment variable ``prebuilt_env`` (built
  ahead for this GPU); skips without nvcc."""
  import atexit
  import os
  import shutil
  import subprocess
  import tempfile
  nvcc, sanitizer = shutil.which("nvcc"), shutil.which("compute-sanitizer")
  if prebuilt_env and os.environ.get(prebuilt_env):
    return os.environ[prebuilt_env], sanitizer
  if not nvcc:
    pytest.skip("nvcc not found")
  if name not in _BUILT:
    here = os.path.dirname(__file__)
    ffi = os.path.join(here, "..", "ffi")
    folder = pathlib.Path(tempfile.mkdtemp(prefix=name + "_"))
    atexit.register(shutil.rmtree, folder, True)
    src = os.path.join(here, "cuda", name + ".cu")
    if cu is not None:
      src = str(folder / (name + ".cu"))
      pathlib.Path(src).write_text(cu)
    exe = str(folder / name)
    subprocess.run([nvcc, "-std=c++17", "-arch=native", "-O2", *flags, "-I", ffi,
                    "-I", os.path.join(here, "cuda"), src,
                    *(os.path.join(ffi, s) for s in sources), "-o", exe], check=True)
    _BUILT[name] = exe
  return _BUILT[name], sanitizer


def run_cuda_check(exe: str, sanitizer: str | None, run: str, *options: str,
                   timeout: float | None = None) -> str:
  """Runs a checker built by ``cuda_check_exe``: ``run`` "plain" runs every case,
  "memcheck" / "racecheck" the quick cases under that compute-sanitizer tool (skips without
  compute-sanitizer). Fails unless it exits 0; returns its summary lines (also printed)."""
  import re
  import subprocess
  if run == "plain":
    cmd = [exe, *options]
  else:
    if not sanitizer:
      pytest.skip("compute-sanitizer not found")
    cmd = [sanitizer, "--tool", run, "--error-exitcode", "5", exe, "--quick", *options]
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
  # The checker's last line ("<name>_check: N cases, ...", whatever the binary is called) and
  # the sanitizer's.
  summary = [line for line in r.stdout.splitlines() if "SUMMARY" in line or
             re.match(r"\w+_check: ", line)]
  print(run, *options, summary)
  assert r.returncode == 0, r.stdout[-3000:]
  assert summary, r.stdout[-3000:]
  return "\n".join(summary)


@pytest.fixture
def needs_cuda_build():
  if not _ffi.HAS_CUDA:
    pytest.skip("jax_argreduce was built without CUDA")


def staged_candidates_sample(device, key, x, shards: int, k_bound: int, **filters):
  """The split vocabulary's candidate exchange (_sharding.split_filtered_sample) composed by
  hand on one device: the z-ranked candidates of each of ``shards`` equal column blocks
  (the ``scaled_top_k`` handler), concatenated in shard order with their global columns, then
  the filtered handler on them with its ``columns`` operand — the stages a vocab-split call
  runs, without a mesh (so that one GPU runs the CUDA handlers of both stages). Returns the
  samples (global columns) as numpy."""
  from jax_argreduce import _primitives
  platform = "cuda" if device.platform == "gpu" else device.platform
  temperature = filters.pop("temperature", None)

  def staged(k, v):
    keys, logits, t, index_dtype, params = _staged_operands(k, v, temperature, filters)
    params[0] = jnp.clip(params[0], 1, k_bound)
    width = logits.shape[-1] // shards
    values, columns = [], []
    for s in range(shards):
      value, local = _primitives._scaled_top_k_block(
          logits[..., s * width:(s + 1) * width], t, k_bound, platform=platform)
      values.append(value)
      columns.append(local + np.int32(s * width))
    _, indices = _primitives._filtered_handler(
        keys, jnp.concatenate(values, -1), t, *params, _primitives.NO_OFFSETS,
        jnp.concatenate(columns, -1), index_dtype=index_dtype, method="kernel",
        k_bound=k_bound, has_top_p=True, platform=platform)
    return indices

  return _run_staged(staged, device, key, x, "jax_argreduce_scaled_top_k_cuda")


def staged_prefix_sample(device, key, x, shards: int, **filters):
  """The split vocabulary's mass exchange without a top-k (_sharding.split_prefix_sample)
  composed by hand on one device: each of ``shards`` equal column blocks' first token (the
  ``scaled_top_k`` handler, k = 1), top-p's levels per block (``top_p_level``) with their
  masses summed here (uint32 limbs) and the last level's counts stacked per block, each
  block's draw (``split_filtered_draw``, its global column offset) and the pairs combined —
  the stages a vocab-split call runs, without a mesh (so that one GPU runs their CUDA
  handlers). ``top_p`` absent: no levels, as the partition rule. Returns the samples (global
  columns) as numpy."""
  from jax_argreduce import _primitives, _sharding
  platform = "cuda" if device.platform == "gpu" else device.platform
  temperature = filters.pop("temperature", None)
  has_top_p = filters.get("top_p") is not None

  def staged(k, v):
    keys, logits, t, index_dtype, params = _staged_operands(k, v, temperature, filters)
    width = logits.shape[-1] // shards
    blocks = [logits[..., s * width:(s + 1) * width] for s in range(shards)]
    tops = jnp.concatenate([_primitives._scaled_top_k_block(b, t, 1, platform=platform)[0]
                            for b in blocks], -1)
    levels = _ffi.mass_levels(logits.dtype)[0] if has_top_p else 0
    above = jnp.zeros((*logits.shape[:-1], 0, _ffi.MASS_LEVEL_WIDTH, _ffi.MASS_LIMBS),
                      np.uint32)
    counts = np.zeros((0,), np.uint32)
    for level in range(levels):
      hists = [_primitives._top_p_level_block(b, t, params[1], tops, above, level,
                                              platform=platform) for b in blocks]
      if level < levels - 1:
        above = jnp.concatenate([above, sum(hists)[..., None, :, :]], axis=-3)
      else:
        counts = jnp.stack(hists, axis=-2)
    if not levels:
      above = np.zeros((0,), np.uint32)
    values, indices = [], []
    for s, b in enumerate(blocks):
      offsets = np.array([0, s * width], np.int32)
      value, local = _primitives._split_draw_block(
          keys, b, t, *params, offsets, tops, above, counts, index_dtype=index_dtype,
          method="kernel", platform=platform)
      values.append(value)
      indices.append(local + np.asarray(s * width, local.dtype))
    return _sharding.combine_pairs(jnp.stack(values, -1), jnp.stack(indices, -1), False)[1]

  return _run_staged(staged, device, key, x, "jax_argreduce_split_filtered_draw_cuda")


def _staged_operands(k, v, temperature, filters):
  """The staged samplers' operands as the partition rule's blocks get them: ``(keys, logits,
  temperature, index_dtype)`` and the filters (top_k, top_p, min_p) as row operands."""
  from jax_argreduce import _params
  keys, logits, t, index_dtype = _api._sampler_operands(k, v, temperature, v.ndim - 1,
                                                        "categorical")
  params = [_params.operand(p, filters.get(n), logits.shape[:-1], "categorical")
            for p, n in zip(_params.FILTERS, ("top_k", "top_p", "min_p"))]
  return keys, logits, t, index_dtype, params


def _run_staged(staged, device, key, x, cuda_target: str):
  """``staged(key, x)`` jitted on ``device`` as numpy; on a GPU its program must call
  ``cuda_target``."""
  f = jax.jit(staged)
  args = jax.device_put((key, x), device)
  if device.platform == "gpu":
    assert cuda_target in f.lower(*args).as_text(), f"the GPU program does not call {cuda_target}"
  with jax.default_device(device):
    return np.asarray(f(*args))
