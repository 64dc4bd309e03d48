"""jax_argreduce._ffi: the FFI API version check before registration, the warning of a CUDA
lowering without the CUDA handlers."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_argreduce
from jax_argreduce import _ffi

FIX = "pip install --no-build-isolation"


def test_the_build_records_the_headers_it_was_built_against():
  """The module carries its FFI API version and jaxlib, and this jaxlib accepts them."""
  import jaxlib.version
  built, runtime = _ffi.BUILT_FFI_API_VERSION, _ffi.runtime_ffi_api_version()
  assert built is not None and runtime is not None
  assert _ffi.MIN_FFI_API_VERSION <= built <= runtime
  assert _ffi.BUILT_JAXLIB_VERSION
  if _ffi.BUILT_JAXLIB_VERSION == jaxlib.version.__version__:
    assert built == runtime  # the same headers
  _ffi.check_ffi_api_version(built, runtime, _ffi.BUILT_JAXLIB_VERSION)


@pytest.mark.parametrize("built, runtime, accepted", [
    ((0, 3), (0, 3), True),
    ((0, 1), (0, 5), True),   # older headers: XLA keeps supporting them
    ((0, 3), (0, 5), True),
    ((0, 5), (0, 3), False),  # newer headers than the running XLA (the wheel of a newer jaxlib)
    ((0, 4), (0, 3), False),
    ((1, 0), (0, 9), False),  # a newer major version
    ((0, 0), (0, 3), False),  # below XLA's minimum
])
def test_version_rule_is_xla_registration_rule(built, runtime, accepted):
  """XLA's rule (xla/ffi/ffi_registry.cc): MIN <= built <= runtime, as (major, minor) pairs."""
  if accepted:
    _ffi.check_ffi_api_version(built, runtime, "0.10.2")
    return
  with pytest.raises(ImportError) as e:
    _ffi.check_ffi_api_version(built, runtime, "0.12.1")
  message = str(e.value)
  assert f"FFI API {built[0]}.{built[1]}" in message and FIX in message
  assert f"{runtime[0]}.{runtime[1]}" in message and "0.12.1" in message


def test_unknown_versions_pass():
  _ffi.check_ffi_api_version(None, (0, 3))
  _ffi.check_ffi_api_version((0, 3), None)


# Imports jax_argreduce with its module's recorded FFI API version replaced (the module is loaded
# as usual, then the attribute is set before _ffi reads it) and every registration recorded.
_FAKE_IMPORT = textwrap.dedent("""
    import importlib.abc, sys
    import jax, jax.numpy as jnp

    FAKE = tuple(map(int, sys.argv[1].split(".")))
    registered = []
    jax.ffi.register_ffi_target = lambda name, *a, **k: registered.append(name)
    jax.ffi.register_ffi_type = lambda name, *a, **k: registered.append(name)

    class RecordedVersion(importlib.abc.MetaPathFinder):
      def find_spec(self, name, path, target=None):
        if name != "jax_argreduce._argreduce":
          return None
        for finder in sys.meta_path:
          spec = None if finder is self else finder.find_spec(name, path, target)
          if spec is not None:
            break
        exec_module = spec.loader.exec_module
        def patched(module):
          exec_module(module)
          module.xla_ffi_api_version = FAKE
        spec.loader.exec_module = patched
        return spec

    sys.meta_path.insert(0, RecordedVersion())
    try:
      import jax_argreduce
      print("IMPORTED")
    except ImportError as e:
      print("IMPORT ERROR:", e)
    print("REGISTERED:", len(registered))
    print("JAX STILL WORKS:", int((jnp.ones(3) + 1).sum()))
""")


def _import_with_recorded_version(version: str) -> str:
  result = subprocess.run([sys.executable, "-c", _FAKE_IMPORT, version], capture_output=True,
                          text=True, timeout=120)
  assert result.returncode == 0, result.stderr
  return result.stdout


def _runtime_version() -> tuple[int, int]:
  """This jaxlib's FFI API version, read here from its header (not through _ffi)."""
  header = pathlib.Path(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h").read_text()
  return tuple(int(re.search(rf"#define XLA_FFI_API_{part} (\d+)", header)[1])
               for part in ("MAJOR", "MINOR"))


def test_runtime_version_is_the_running_jaxlib_headers():
  assert _ffi.runtime_ffi_api_version() == _runtime_version()


def test_import_refuses_headers_newer_than_the_running_jaxlib():
  """A module built against newer FFI headers than this jaxlib's: an ImportError naming the
  fix, raised before anything is registered, and JAX keeps working (issue 43: the refused
  registration used to stop the backend, failing every computation)."""
  runtime = _runtime_version()
  newer = f"{runtime[0]}.{runtime[1] + 1}"
  out = _import_with_recorded_version(newer)
  assert "IMPORT ERROR:" in out and "IMPORTED" not in out, out
  assert f"FFI API {newer}" in out and FIX in out, out
  assert "REGISTERED: 0" in out and "JAX STILL WORKS: 6" in out, out


def test_import_accepts_headers_older_than_the_running_jaxlib():
  """The same import with an older recorded version (a wheel built against an older jaxlib)
  registers every target."""
  out = _import_with_recorded_version("0.1")
  assert "IMPORTED" in out, out
  assert f"REGISTERED: {len(_ffi.all_targets()) + len(list(_ffi._argreduce.types()))}" in out
  assert "JAX STILL WORKS: 6" in out


@pytest.fixture
def without_cuda_handlers(monkeypatch):
  """This process as a build without the CUDA handlers would be, the warning not given yet."""
  monkeypatch.setattr(_ffi, "HAS_CUDA", False)
  monkeypatch.setattr(_ffi, "_TARGETS", {k: v for k, v in _ffi._TARGETS.items()
                                         if k[1] != "cuda"})
  monkeypatch.setattr(_ffi, "_warned_no_cuda", False, raising=False)


def _export_for_cuda(fn, *args):
  """Lowers ``fn`` for a CUDA GPU (no GPU needed): what a GPU computation's lowering does."""
  return jax.export.export(jax.jit(fn), platforms=["cuda"],
                           disabled_checks=jax_argreduce.export_disabled_checks())(*args)


def test_cuda_lowering_without_cuda_handlers_warns_once(without_cuda_handlers):
  x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 300_000)), jnp.bfloat16)
  key = jax.random.key(0)
  with pytest.warns(UserWarning, match=r"jax_argreduce\.HAS_CUDA is False") as record:
    _export_for_cuda(lambda a: jax_argreduce.argmax(a, axis=-1), x)
    _export_for_cuda(lambda a: jax_argreduce.max_with_index(a), x)
    _export_for_cuda(lambda k, a: jax_argreduce.categorical(k, a), key, x)
  ours = [w for w in record if "jax_argreduce.HAS_CUDA" in str(w.message)]
  assert len(ours) == 1  # once per process
  assert issubclass(ours[0].category, _ffi.NoCudaHandlerWarning)
  message = str(ours[0].message)
  assert "JAX_ARGREDUCE_CUDA=ON" in message and "nvidia-cuda-nvcc" in message


def test_cpu_lowering_without_cuda_handlers_does_not_warn(without_cuda_handlers, recwarn):
  x = jnp.ones((4, 1000), jnp.float32)
  jax.jit(lambda a: jax_argreduce.argmax(a, axis=-1)).lower(x)
  jax.export.export(jax.jit(lambda a: jax_argreduce.argmax(a, axis=-1)), platforms=["cpu"],
                    disabled_checks=jax_argreduce.export_disabled_checks())(x)
  assert not [w for w in recwarn if issubclass(w.category, _ffi.NoCudaHandlerWarning)]


@pytest.mark.skipif(not _ffi.HAS_CUDA, reason="a build with the CUDA handlers")
def test_cuda_lowering_with_cuda_handlers_calls_them(recwarn):
  x = jnp.ones((4, 300_000), jnp.bfloat16)
  exported = _export_for_cuda(lambda a: jax_argreduce.argmax(a, axis=-1), x)
  assert _ffi.target("argreduce", "cuda") in exported.mlir_module()
  assert not [w for w in recwarn if issubclass(w.category, _ffi.NoCudaHandlerWarning)]
