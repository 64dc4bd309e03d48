"""Shared test setup: 4 virtual CPU devices, an x64 on/off helper, and the `gpu` marker skip.

XLA reads ``XLA_FLAGS`` when the backend starts, so the flag is appended here, before any test
module imports jax (pytest imports conftest.py first).
"""

from __future__ import annotations

import os
import sys

_DEVICE_FLAG = "--xla_force_host_platform_device_count=4"
if _DEVICE_FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _DEVICE_FLAG).strip()

# Under pytest-xdist (`-n auto`) several processes share a GPU: none may take most of its memory
# up front (XLA's default), or the others run out of it.
if os.environ.get("PYTEST_XDIST_WORKER"):
  os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402  (after XLA_FLAGS on purpose)
import pytest  # noqa: E402


def enable_x64(enabled: bool = True):
  """Context manager setting ``jax_enable_x64`` to ``enabled`` inside its block.

  ``jax.enable_x64(value)`` (a config State, jax >= 0.8, the only form left in jax 0.11);
  ``jax.experimental.enable_x64()/disable_x64()`` on older jax.
  """
  state = getattr(jax, "enable_x64", None)
  if state is not None:
    return state(bool(enabled))
  from jax import experimental  # pragma: no cover - jax < 0.8
  return experimental.enable_x64() if enabled else experimental.disable_x64()


@pytest.fixture
def x64():
  """The :func:`enable_x64` context-manager factory: ``with x64(True): ...``."""
  return enable_x64


@pytest.fixture(params=[False, True], ids=["x32", "x64"])
def x64_mode(request):
  """Runs the test once with ``jax_enable_x64`` off and once on; yields the flag."""
  with enable_x64(request.param):
    yield request.param


def pytest_collection_modifyitems(config, items):
  """Puts the tests marked ``long`` first (pytest-xdist hands tests out in this order, so the
  checkers under compute-sanitizer, minutes each, start at once instead of after the rest) and
  skips every test marked ``gpu`` (markers declared in pyproject.toml) without a GPU backend."""
  items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable
  gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
  if not gpu_items:
    return
  backend = jax.default_backend()
  if backend == "gpu":
    return
  skip = pytest.mark.skip(reason=f"needs a GPU (jax.default_backend() is {backend!r})")
  for item in gpu_items:
    item.add_marker(skip)


def pytest_report_header(config):
  return (f"jax {jax.__version__}, backend {jax.default_backend()}, "
          f"{jax.device_count()} devices, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}, "
          f"python {sys.version.split()[0]}")
