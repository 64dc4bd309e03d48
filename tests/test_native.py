"""The C++ pieces tested without JAX: the sampler's noise (tests/cpp/gumbel_test.cc: Philox
known answers, the own logs' accuracy, the noise range and tail, pinned bits shared with the
CUDA check), the own exp and the fixed-point masses (tests/cpp/exact_math_test.cc: ExpF32
against a correctly rounded reference over every float32 in [-104, 0]) and the CPU SIMD scan
against the scalar reference on every ISA path the machine has (benchmarks/cpu_row_reduce_bench.cc
--test). All are built here with the system C++ compiler."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler")


def _build_and_run(tmp_path, source, extra_flags, args, timeout):
  exe = tmp_path / pathlib.Path(source).stem
  build = subprocess.run([CXX, "-std=c++17", "-O2", "-I", str(ROOT / "ffi"), str(ROOT / source),
                          "-o", str(exe), *extra_flags], capture_output=True, text=True)
  if build.returncode != 0:
    pytest.fail(f"build of {source} failed:\n{build.stderr[-3000:]}")
  run = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
  return run.stdout


def test_gumbel_noise_host(tmp_path):
  out = _build_and_run(tmp_path, "tests/cpp/gumbel_test.cc", ["-pthread", "-lquadmath"], [], 600)
  assert "FAIL" not in out


def test_exact_math_host(tmp_path):
  # -march=native: std::fma as an instruction (same results, a few times faster than the call).
  out = _build_and_run(tmp_path, "tests/cpp/exact_math_test.cc",
                       ["-march=native", "-pthread", "-lquadmath"], [], 600)
  assert "exact_math_test: PASS" in out and "FAIL" not in out


def test_cpu_row_reduce_against_scalar_reference(tmp_path):
  out = _build_and_run(tmp_path, "benchmarks/cpu_row_reduce_bench.cc", [], ["--test"], 600)
  assert "PASS" in out and "FAIL" not in out
