"""jax_argreduce: fast, numpy-exact reductions to an index for JAX.

``argmax``/``argmin`` are drop-ins for ``jnp.argmax``/``jnp.argmin``; ``max_with_index`` /
``min_with_index`` return the extreme value and its index in one pass; ``top_k`` the k first
elements of each row, exactly; ``categorical`` is a fused Gumbel-max sampler (one pass over the
logits, noise never materialized). They run on XLA FFI handlers: CUDA kernels on NVIDIA GPUs and
a CPU handler elsewhere.
"""

from jax_argreduce._api import (argmax, argmin, categorical, max_with_index, min_with_index,
                                top_k)
from jax_argreduce._ffi import HAS_CUDA, export_disabled_checks

__all__ = ["argmax", "argmin", "max_with_index", "min_with_index", "top_k", "categorical",
           "HAS_CUDA", "export_disabled_checks"]
__version__ = "0.2.0"  # the one version source (pyproject.toml reads it; CHANGELOG.md)
