"""Helpers shared by the CPU test modules: the ops under test and their references."""

from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np

from jax_argreduce import argmax, argmin
from jax_argreduce._api import _argreduce

# op -> (ours, numpy reference, jnp)
OPS = {"argmax": (argmax, np.argmax, jnp.argmax), "argmin": (argmin, np.argmin, jnp.argmin)}
METHODS = ("public", "kernel", "xla")
FLOATS = ("float16", "bfloat16", "float32")


def np_dtype(name):
  return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def op_fn(op, method):
  """argmax/argmin through the public function or one forced path."""
  if method == "public":
    return OPS[op][0]
  is_min = op == "argmin"
  return lambda x, axis=None, keepdims=False: _argreduce(
      x, axis, keepdims, is_min=is_min, method=method)
