"""jax_argreduce: fast, numpy-exact argmax/argmin for JAX.

``argmax``/``argmin`` are drop-ins for ``jnp.argmax``/``jnp.argmin`` that run on XLA FFI
handlers: cooperative CUDA kernels on NVIDIA GPUs and a CPU handler elsewhere.
"""

from jax_argreduce._api import argmax, argmin
from jax_argreduce._ffi import HAS_CUDA

__all__ = ["argmax", "argmin", "HAS_CUDA"]
__version__ = "0.1.0"
