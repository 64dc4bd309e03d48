"""The CMake configure (CMakeLists.txt, cmake/cuda.cmake): the CUDA decision is made anew at
every configure, pip's nvcc is found, and a CUDA jax plugin without a compiler is an error.

Each test configures the project in a scratch build directory (nothing is compiled) with a PATH
of its own: symlinks to the host tools, and nvcc only where the test puts it. Marked ``build``;
skipped without cmake, ninja, a C++ compiler or nanobind, and the tests that enable CUDA without
an nvcc to use. The nvcc of this Python's nvidia-cuda-nvcc wheel, if one is installed, would be
found by every configure: the tests that need none skip there.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.build

ROOT = pathlib.Path(__file__).resolve().parents[1]
CMAKE = shutil.which("cmake")
HOST_TOOLS = ("c++", "g++", "cc", "gcc", "ninja", "as", "ld", "ar", "ranlib")

if (CMAKE is None or shutil.which("ninja") is None or shutil.which("c++") is None
    or importlib.util.find_spec("nanobind") is None or not (ROOT / "CMakeLists.txt").is_file()):
  pytest.skip("needs the source tree, cmake, ninja, a C++ compiler and nanobind",
              allow_module_level=True)

sys.path.insert(0, str(ROOT / "cmake"))
import cuda_probe  # noqa: E402

sys.path.pop(0)


def _system_nvcc() -> str | None:
  """A real nvcc to put on a test's PATH: CUDACXX, PATH, /usr/local/cuda, pip's wheel."""
  for candidate in (os.environ.get("CUDACXX"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc",
                    cuda_probe.wheel_nvcc()):
    if candidate and os.access(candidate, os.X_OK):
      return candidate
  return None


NVCC = _system_nvcc()
WHEEL_NVCC = cuda_probe.wheel_nvcc()

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs a CUDA compiler (nvcc)")
needs_no_wheel_nvcc = pytest.mark.skipif(
    bool(WHEEL_NVCC), reason="this Python has the nvidia-cuda-nvcc wheel: every configure finds it")
needs_no_cuda_plugin = pytest.mark.skipif(
    bool(cuda_probe.cuda_plugin()),
    reason="this Python has a CUDA jax plugin: a configure without nvcc stops")


@pytest.fixture
def tools(tmp_path):
  """A bin directory of symlinks to the host tools (no nvcc)."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  for tool in HOST_TOOLS:
    if (path := shutil.which(tool)) is not None:
      (bin_dir / tool).symlink_to(path)
  return bin_dir


def _nvcc_dir(tmp_path) -> pathlib.Path:
  """A directory holding only an nvcc (a symlink to the real one)."""
  d = tmp_path / "cuda_bin"
  if not d.exists():
    d.mkdir()
    (d / "nvcc").symlink_to(NVCC)
  return d


def configure(build_dir, path_dirs, *defines, pythonpath=None, check=True, cmake_args=()):
  """Runs the configure; returns (return code, its output with whitespace runs as one space)."""
  env = {k: v for k, v in os.environ.items()
         if k not in ("CUDACXX", "CUDA_PATH", "CUDAARCHS", "PYTHONPATH", "CMAKE_ARGS")}
  env["PATH"] = os.pathsep.join(str(d) for d in path_dirs)
  if pythonpath:
    env["PYTHONPATH"] = str(pythonpath)
  result = subprocess.run(
      [CMAKE, "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
       f"-DPython_EXECUTABLE={sys.executable}", *cmake_args, *(f"-D{d}" for d in defines)],
      env=env, capture_output=True, text=True, timeout=300)
  out = " ".join((result.stdout + result.stderr).split())  # CMake wraps long messages
  if check:
    assert result.returncode == 0, out
  return result.returncode, out


def cuda_line(out: str) -> str:
  """The configure's last word on the CUDA handler."""
  lines = re.findall(r"jax_argreduce: CUDA handler .*?(?= -- |$)", out)
  return lines[-1] if lines else ""


def cuda_on(out: str) -> bool:
  return "CUDA handler ON" in cuda_line(out)


@needs_nvcc
@needs_no_wheel_nvcc
@needs_no_cuda_plugin
def test_cuda_decision_is_made_again_at_every_configure(tmp_path, tools):
  """Issue 43: a first configure without nvcc, then nvcc on PATH: the same build directory
  builds the CUDA handlers (CMake had cached the compiler as NOTFOUND). An explicit OFF, or
  architectures, hold for their configure only; a cached compiler is not used once gone."""
  build = tmp_path / "build"
  nvcc_dir = _nvcc_dir(tmp_path)
  _, out = configure(build, [tools])
  assert not cuda_on(out), out
  _, out = configure(build, [tools, nvcc_dir])
  assert cuda_on(out), out
  assert f"{nvcc_dir / 'nvcc'} (PATH" in cuda_line(out), out
  assert "architectures 80-real;90-real;100" in cuda_line(out), out
  _, out = configure(build, [tools, nvcc_dir], "JAX_ARGREDUCE_CUDA=OFF")
  assert "CUDA handler OFF (JAX_ARGREDUCE_CUDA=OFF)" in cuda_line(out), out
  _, out = configure(build, [tools, nvcc_dir], "CMAKE_CUDA_ARCHITECTURES=90")
  assert cuda_on(out) and cuda_line(out).endswith("architectures 90"), out
  _, out = configure(build, [tools, nvcc_dir])  # neither OFF nor 90 stuck
  assert cuda_on(out), out
  assert "architectures 80-real;90-real;100" in cuda_line(out), out
  # nvcc gone from PATH: the compiler cached by the configures above is not used.
  rc, out = configure(build, [tools], "JAX_ARGREDUCE_CUDA=ON", check=False)
  assert rc != 0 and "JAX_ARGREDUCE_CUDA=ON but no CUDA compiler was found" in out, out
  _, out = configure(build, [tools])
  assert "CUDA handler OFF: no CUDA compiler found" in cuda_line(out), out


@needs_no_wheel_nvcc
def test_cuda_jax_plugin_without_compiler_fails_with_the_fix(tmp_path, tools):
  """Where a CUDA jax plugin is installed and no CUDA compiler is found, the configure stops
  naming the fix instead of building a CPU-only module; JAX_ARGREDUCE_CUDA=OFF still builds."""
  site = tmp_path / "site"
  (site / "jax_cuda13_plugin").mkdir(parents=True)
  (site / "jax_cuda13_plugin" / "__init__.py").write_text("")
  rc, out = configure(tmp_path / "build", [tools], pythonpath=site, check=False)
  assert rc != 0, out
  assert "CUDA jax plugin jax_cuda13_plugin is installed but no CUDA compiler" in out, out
  assert "pip install nvidia-cuda-nvcc" in out and "JAX_ARGREDUCE_CUDA=OFF" in out, out
  _, out = configure(tmp_path / "build", [tools], "JAX_ARGREDUCE_CUDA=OFF", pythonpath=site)
  assert "CUDA handler OFF (JAX_ARGREDUCE_CUDA=OFF)" in cuda_line(out), out


@needs_nvcc
@needs_no_wheel_nvcc
def test_nvcc_of_the_nvidia_cuda_nvcc_wheel_is_found(tmp_path, tools):
  """With no nvcc on PATH, the nvcc of the nvidia-cuda-nvcc wheel (site-packages/nvidia/cu13/
  bin, where `pip install "jax[cuda13]"` puts it) is used; nvcc on PATH comes first. The
  wheel here is a directory of that layout whose nvcc is the real one."""
  site = tmp_path / "site"
  wheel_bin = site / "nvidia" / "cu13" / "bin"
  wheel_bin.mkdir(parents=True)
  (wheel_bin / "nvcc").symlink_to(NVCC)
  build = tmp_path / "build"
  _, out = configure(build, [tools], pythonpath=site)
  assert cuda_on(out), out
  assert f"{wheel_bin / 'nvcc'} (the nvidia-cuda-nvcc wheel" in cuda_line(out), out
  _, out = configure(build, [tools, _nvcc_dir(tmp_path)], pythonpath=site)
  assert f"{_nvcc_dir(tmp_path) / 'nvcc'} (PATH" in cuda_line(out), out


@needs_no_wheel_nvcc
@needs_no_cuda_plugin
def test_option_cached_by_an_older_configure_is_not_taken(tmp_path, tools):
  """A build directory configured by an older CMakeLists.txt, whose JAX_ARGREDUCE_CUDA was a
  cache option (here ON): the next configure without the option decides anew (AUTO: no
  compiler, the CPU handler) instead of taking the cached value."""
  init = tmp_path / "older_cache.cmake"
  init.write_text('set(JAX_ARGREDUCE_CUDA "ON" CACHE STRING '
                  '"Build the CUDA handler: AUTO, ON or OFF")\n')
  _, out = configure(tmp_path / "build", [tools], cmake_args=[f"-C{init}"])
  assert "CUDA handler OFF: no CUDA compiler found" in cuda_line(out), out


def test_unknown_cuda_mode_is_an_error(tmp_path, tools):
  rc, out = configure(tmp_path / "build", [tools], "JAX_ARGREDUCE_CUDA=maybe", check=False)
  assert rc != 0 and "JAX_ARGREDUCE_CUDA must be AUTO, ON or OFF" in out, out
