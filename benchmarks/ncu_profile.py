"""float32 shapes that the dispatch routes to XLA, through our exact XLA path and through
jnp.argmax, under `ncu --clock-control none` (benchmarks/gpu_check.sh ncu), to compare XLA's
kernels for both. Each case: 4 distinct inputs, each reduced once, then the first again, so
the L2 state of the last launches matches bench.py's rotation of 4 inputs. (Our own kernels
are profiled without JAX: benchmarks/kernel_profile.cu.)"""
import jax
import jax.numpy as jnp
import numpy as np

from jax_argreduce import _api

CASES = [((32, 202048), jnp.float32), ((4096, 4096), jnp.float32)]


def run(shape, dtype, fn):
  # Host-made inputs: the only kernels in the profile are the reductions.
  rng = np.random.default_rng(0)
  xs = [jax.device_put(rng.standard_normal(shape, np.float32).astype(dtype)) for _ in range(4)]
  f = jax.jit(fn)
  for x in xs + xs[:1]:
    f(x).block_until_ready()


for shape, dtype in CASES:
  print("case", shape, jnp.dtype(dtype).name, "xla path, then jnp.argmax", flush=True)
  run(shape, dtype, lambda v: _api._argreduce(v, -1, False, is_min=False, method="xla"))
  run(shape, dtype, lambda v: jnp.argmax(v, axis=-1))
