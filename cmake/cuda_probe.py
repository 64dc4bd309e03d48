"""Prints what the CMake configure needs to know about CUDA in the Python it builds for.

Two lines, each empty when nothing was found:
  nvcc=<path>    nvcc of the nvidia-cuda-nvcc wheel (CUDA 13: site-packages/nvidia/cu13/bin),
                 the one `pip install "jax[cuda13]"` brings; its headers and libraries come
                 from the nvidia-cuda-runtime, nvidia-cuda-crt and nvidia-nvvm wheels beside it.
  plugin=<name>  the CUDA jax plugin installed (jax_cuda13_plugin, ...): a GPU jax.
Nothing is imported but `importlib` (no jax, no CUDA library is loaded).
"""

import importlib.util
import os

# Modules of jax's CUDA plugins, newest CUDA first: the kernels (jax-cudaNN-plugin) and the
# PJRT plugin (jax-cudaNN-pjrt, under the jax_plugins namespace).
PLUGINS = ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_plugins.xla_cuda13",
           "jax_plugins.xla_cuda12")


def _spec(name):
  try:
    return importlib.util.find_spec(name)
  except (ImportError, ValueError):
    return None


def wheel_nvcc() -> str:
  spec = _spec("nvidia")  # a namespace package shared by NVIDIA's wheels
  for base in (spec.submodule_search_locations or []) if spec else []:
    nvcc = os.path.join(base, "cu13", "bin", "nvcc")
    if os.path.isfile(nvcc) and os.access(nvcc, os.X_OK):
      return nvcc
  return ""


def cuda_plugin() -> str:
  return next((name for name in PLUGINS if _spec(name) is not None), "")


if __name__ == "__main__":
  print(f"nvcc={wheel_nvcc()}")
  print(f"plugin={cuda_plugin()}")
