"""The kernels XLA's GPU compiler makes of the sampler's loops, compiled here with no GPU.

    JAX_PLATFORMS=cpu python benchmarks/gpu_hlo.py [--shapes 1x202048,8x32000] [--hlo-dir DIR]

Needs jax with its CUDA plugin installed (``pip install "jax[cuda13]"``; a GPU is not needed:
the GPU compiler runs on the host) and the package built with its CUDA handlers (a compile
only needs the FFI targets registered; it never calls them). Each program is compiled for an
H200 described by the GpuTargetConfigProto below (``jax.experimental.topologies``), for ours
(``jax_argreduce.categorical(key, logits, temperature=T)``) and the reference
(``jax.random.categorical(key, logits / T)``). Printed per program: the kernels of each
computation that runs on the device (the entry, loop bodies and conditions: fusions, async
fusion-starts, custom calls and copies, numbered suffixes dropped), so a change to how the
call's operands are formed can be judged by the kernels it adds or removes before any device
time is spent (NOTES.md try 73). Not a timing: a kernel of one thread costs ~1 µs in a chain
step on the H200 (NOTES.md try 72).

The loops are bench.py's chain step (``logits = h @ W``, ``tok = pick(logits, step key)``,
``h = 0.5 * h + E[tok]``, K = 16 steps, dim 256, T = 0.8) with the step key made five ways:
``fold_in(key, i)`` in the step (unrolled: SPEC §3b's chain), a ``jax.random.split(key, K)``
before the loop scanned over, and ``key, sub = split(key)`` carried, each unrolled and rolled;
and one step (the matmul and the pick) with a key per row (``arg``) or one key (``arg1``)
passed in.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no GPU here: the CPU runtime, the GPU compiler

# An H200 (132 SMs, compute capability 9.0), as XLA's GPU compiler reads a device.
H200_TARGET_CONFIG = """
gpu_device_info {
  threads_per_block_limit: 1024 threads_per_warp: 32 shared_memory_per_block: 49152
  shared_memory_per_core: 233472 threads_per_core_limit: 2048 core_count: 132
  fpus_per_core: 128 block_dim_limit_x: 2147483647 block_dim_limit_y: 65535
  block_dim_limit_z: 65535 memory_bandwidth: 4800000000000 l2_cache_size: 52428800
  clock_rate_ghz: 1.98 device_memory_size: 150000000000 shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 } registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
device_description_str: "NVIDIA H200"
"""

K, T, DIM = 16, 0.8, 256
KEYS = ("fold_in", "split", "carry", "arg", "arg1")


def device_kernels(hlo_text: str) -> dict[str, list[str]]:
  """Per computation that runs on the device (the entry, and the computations that while and
  conditional instructions name): its kernels, i.e. its fusion (async fusion-start too),
  custom-call and copy instructions, in order, with numbered suffixes dropped."""
  called = set(re.findall(r"\b(?:body|condition)=(%[\w.\-]+)", hlo_text))
  for branches in re.findall(r"branch_computations=\{([^}]*)\}", hlo_text):
    called.update(b.strip() for b in branches.split(","))
  out = {}
  for comp in re.split(r"\n(?=%\S+ \(|ENTRY )", hlo_text):
    head = comp.split("(", 1)[0].strip()
    if not (head.startswith("ENTRY ") or head in called):
      continue
    names = re.findall(r"^\s*(?:ROOT\s+)?%(\S+)\s*=\s*.*?\s"
                       r"(?:fusion|fusion-start|custom-call|copy|copy-start)\(", comp, re.M)
    if names:
      out[head] = [re.sub(r"[.\d]+$", "", n) for n in names]
  return out


def programs(jax, jnp):
  """(name, function of (h0, W, E, key), whether the key is one per row) of the loops, for
  ours and the reference."""
  import jax_argreduce
  lax = jax.lax
  picks = {"ours": lambda k, l: jax_argreduce.categorical(k, l, temperature=T),
           "ref": lambda k, l: (
               jax.random.categorical(k, l / T, axis=-1) if k.ndim == 0
               else jax.vmap(lambda kr, lr: jax.random.categorical(kr, lr / T))(k, l))}
  for keys in KEYS:
    for unroll in ((True,) if keys.startswith("arg") else (True, 1)):
      for who, pick in picks.items():
        def run(h0, W, E, key, pick=pick, keys=keys, unroll=unroll):
          def step(c, x):
            h, k = c
            if keys == "fold_in":
              sub = jax.random.fold_in(k, x)
            elif keys == "carry":
              k, sub = jax.random.split(k)
            else:  # split: the scanned key; arg, arg1: the key(s) passed in
              sub = x
            tok = pick(sub, h @ W)
            return (0.5 * h + E[tok], k), tok
          if keys.startswith("arg"):  # one step, the key(s) passed in
            return step((h0, None), key)[1]
          xs = jax.random.split(key, K) if keys == "split" else jnp.arange(K)
          return lax.scan(step, (h0, key), xs, unroll=unroll)
        loop = ("one step" if keys.startswith("arg")
                else "unrolled" if unroll is True else "rolled")
        yield f"{who} keys={keys} {loop}", run, keys == "arg"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--shapes", default="1x202048,8x32000", help="ROWSxCOLS,... of the logits")
  p.add_argument("--hlo-dir", help="also write each optimized HLO module here")
  a = p.parse_args(argv)
  import jax
  import jax.numpy as jnp
  from jax.experimental import topologies
  from jax.sharding import SingleDeviceSharding
  try:
    topo = topologies.get_topology_desc(platform="cuda", target_config=H200_TARGET_CONFIG,
                                        topology="1x1x1")
  except Exception as e:  # noqa: BLE001 - no CUDA plugin: say what is needed
    print(f"gpu_hlo: no GPU compiler here ({type(e).__name__}: {e}); install "
          "jax[cuda13] (a GPU is not needed)", file=sys.stderr)
    return 2
  s = SingleDeviceSharding(topo.devices[0])
  spec = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=s)
  key_dtype = jax.random.key(0).dtype
  for shape in a.shapes.split(","):
    rows, cols = map(int, shape.lower().split("x"))
    print(f"== logits float32 {rows}x{cols}: kernels per device computation")
    for name, fn, per_row_keys in programs(jax, jnp):
      key = jax.ShapeDtypeStruct((rows,) if per_row_keys else (), key_dtype, sharding=s)
      text = jax.jit(fn).lower(spec((rows, DIM), jnp.float32), spec((DIM, cols), jnp.float32),
                               spec((cols, DIM), jnp.float32), key).compile().as_text()
      if name.startswith("ours") and "custom_call_target=\"jax_argreduce_categorical" not in text:
        print("gpu_hlo: our call is not in the program: build the package with its CUDA "
              "handlers (JAX_ARGREDUCE_CUDA=ON)", file=sys.stderr)
        return 2
      if a.hlo_dir:
        os.makedirs(a.hlo_dir, exist_ok=True)
        with open(os.path.join(a.hlo_dir, f"{rows}x{cols} {name}.hlo".replace(" ", "_")),
                  "w") as f:
          f.write(text)
      for comp, kernels in device_kernels(text).items():
        counts = collections.Counter(kernels)
        print(f"  {name:32s} {comp[:24]:24s} {len(kernels):3d}: "
              + ", ".join(f"{n} x{c}" if c > 1 else n for n, c in counts.items()))
  return 0


if __name__ == "__main__":
  sys.exit(main())
