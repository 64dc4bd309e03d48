"""One process of tests/test_distributed.py: ``python _distributed_worker.py ADDRESS ID COUNT``.

Joins JAX's distributed runtime (coordinator at ADDRESS, process ID of COUNT; CPU collectives
over gloo), builds logits on a global mesh that splits the vocabulary over every process's
devices, and checks argmax, max_with_index, top_k and categorical (unfiltered and filtered)
against numpy (top_k against reference.top_k: values bit for bit; categorical against the
unsharded sample, which a vocab split must not change, and for filters the reference's kept
set; with a top-k bound, the compiled program exchanges only the shards' candidates, without
one top-p's masses and the shards' draws; never the logits). Prints "OK <id>" on success; any
mismatch raises (exit code 1).
"""

from __future__ import annotations

import re
import sys

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")
address, process_id, process_count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
jax.distributed.initialize(coordinator_address=address, num_processes=process_count,
                           process_id=process_id, initialization_timeout=60)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

import jax_argreduce as ar  # noqa: E402
import reference  # noqa: E402  (tests/: the numpy reference of SPEC §1e)

assert jax.process_count() == process_count, jax.process_count()
assert jax.device_count() == process_count * jax.local_device_count()

ROWS, COLS = 6, 40960  # wide enough for top-p's masses to move less than the logits
mesh = jax.make_mesh((jax.device_count(),), ("v",), axis_types=(AxisType.Explicit,))
shard = COLS // jax.device_count()

# The same logits in every process (one seed): ties across shards and NaNs, where only the
# total order (first NaN, lowest index on ties) gives numpy's answer.
x = np.random.default_rng(0).normal(size=(ROWS, COLS)).astype(np.float32)
x[1, [shard - 1, shard, 3 * shard]] = 9.0            # a tie over three shards: the first wins
x[2, [shard + 5, 2 * shard + 1]] = np.nan             # first NaN, in the second shard
x[2, 3] = np.inf
x[3, :] = -np.inf                                     # a row of -inf: index 0
x[4, [0, COLS - 1]] = 7.0                             # the first and the last column tie


def global_array(a):
  return jax.make_array_from_callback(a.shape, NamedSharding(mesh, P(None, "v")),
                                      lambda index: a[index])


def gathered(out):
  return np.asarray(multihost_utils.process_allgather(out, tiled=True))


def all_gather_sizes(fn, *args):
  """The element count of every all-gather's result in the compiled program of ``fn``."""
  text = jax.jit(fn).lower(*args).compile().as_text()
  return [int(np.prod([int(d) for d in m.group(1).split(",") if d]))
          for m in re.finditer(r"\[([0-9,]*)\][^=\n]*all-gather(?:-start)?\(", text)]


for dtype in (np.float32, jnp.bfloat16):
  host = x.astype(dtype)
  gx = global_array(host)
  expected = np.argmax(host.astype(np.float32), axis=-1)
  indices = gathered(jax.jit(lambda a: ar.argmax(a, axis=-1))(gx))
  np.testing.assert_array_equal(indices, expected)
  values, indices = jax.jit(lambda a: ar.max_with_index(a))(gx)
  values, indices = gathered(values), gathered(indices)
  np.testing.assert_array_equal(indices, expected)
  picked = host[np.arange(ROWS), expected]
  assert values.dtype == picked.dtype
  np.testing.assert_array_equal(values.view(np.uint16 if values.itemsize == 2 else np.uint32),
                                picked.view(np.uint16 if picked.itemsize == 2 else np.uint32))

  # top_k: each shard's k candidates, one exchange across the processes, the exact merge.
  for k in (1, 7, 40):
    values, indices = jax.jit(lambda a: ar.top_k(a, k))(gx)
    values, indices = gathered(values), gathered(indices)
    want_v, want_i = reference.top_k(host, k)
    reference.assert_matches((values, indices), (want_v, want_i.astype(np.int32)),
                             op="max_with_index", msg=f"top_k k={k}")

  # categorical: the sample of the vocab-split call equals the unsharded one (the noise is
  # keyed by the global column), which is a valid draw: never a -inf logit of a row with a
  # finite one, the first NaN where a row has one.
  sample = lambda a: ar.categorical(jax.random.key(7), a, temperature=0.8)
  sharded = gathered(jax.jit(sample)(gx))
  local = np.asarray(jax.jit(sample)(jax.device_put(host, jax.local_devices()[0])))
  np.testing.assert_array_equal(sharded, local)
  assert sharded[2] == shard + 5 and sharded[3] == 0
  finite = np.isfinite(host.astype(np.float32)[np.arange(ROWS), sharded])
  assert finite[[0, 1, 4, 5]].all(), sharded

  # Filtered sampling (SPEC §1f) on the vocab-split logits: the unsharded sample, inside the
  # kept set of the numpy reference.
  # With a top-k bound (k_bound: 64, 16) each shard's k_bound first tokens in the z order are
  # exchanged across the processes with their global columns, never the logits.
  per_row = dict(top_k=np.array([1, 16, 3, 7, 12, 5], np.int32), top_k_bound=16,
                 top_p=np.array([1.0, 0.5, 0.9, 1.0, 0.8, 0.3], np.float32),
                 min_p=np.array([0.0, 0.0, 0.1, 0.02, 0.0, 0.0], np.float32))
  for filters, k_bound in ((dict(top_k=40, top_p=0.9), 64), (dict(top_p=0.5), None),
                           (dict(min_p=0.2), None), (per_row, 16)):
    sample = lambda a: ar.categorical(jax.random.key(9), a, temperature=0.8, **filters)
    sharded = gathered(jax.jit(sample)(gx))
    local = np.asarray(jax.jit(sample)(jax.device_put(host, jax.local_devices()[0])))
    np.testing.assert_array_equal(sharded, local, err_msg=str(filters))
    for r in range(ROWS):
      ref = {name: None if filters.get(key) is None else np.ravel(filters[key])[
          r if np.ndim(filters[key]) else 0] for name, key in
          (("k", "top_k"), ("p", "top_p"), ("min_p", "min_p"))}
      assert reference.filtered_kept(host[r], 0.8, **ref)[sharded[r]], (filters, r)
    sizes = all_gather_sizes(sample, gx)
    if k_bound is not None:
      assert sizes == [ROWS * jax.device_count() * k_bound] * 2, sizes
    else:  # no top-k: the tops, top-p's last level's counts and the pairs (never the logits)
      n = jax.device_count()
      counts = [ROWS * n * 1024] if "top_p" in filters else []
      assert sorted(sizes) == sorted([ROWS * n] * 3 + counts), sizes

print(f"OK {process_id}", flush=True)
jax.distributed.shutdown()
