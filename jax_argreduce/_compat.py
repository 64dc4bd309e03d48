"""Every jax internal the package uses, in one place, with public homes where they exist.

What is imported from ``jax._src`` has no public equivalent on all supported jax versions
(0.10 - 0.12): the primitive impl helper, static-shape checks and the Shardy sharding-rule
builder.
"""

from __future__ import annotations

import jax
from jax.core import ShapedArray  # noqa: F401  (re-exported)
from jax.extend.core import Primitive  # noqa: F401
from jax.interpreters import ad, batching, mlir  # noqa: F401

from jax._src import core as _core
from jax._src import dispatch as _dispatch
from jax._src.custom_partitioning_sharding_rule import (  # noqa: F401
    CompoundFactor, SdyShardingRule, sdy_sharding_rule_to_mlir)

is_constant_dim = _core.is_constant_dim
is_constant_shape = _core.is_constant_shape
apply_primitive = _dispatch.apply_primitive
Zero = ad.Zero


def typeof(x):
  """The abstract value of ``x`` (``jax.typeof`` where it exists)."""
  return jax.typeof(x) if hasattr(jax, "typeof") else _core.get_aval(x)


def use_shardy() -> bool:
  """Whether the Shardy partitioner is on (always, on jax versions without the flag)."""
  return bool(getattr(jax.config, "jax_use_shardy_partitioner", True))
