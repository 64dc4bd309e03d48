"""Several processes on JAX's distributed runtime (jax.distributed, CPU collectives over gloo,
127.0.0.1 only): argmax, max_with_index, top_k and categorical on a global mesh whose vocabulary
axis spans both processes, exact against numpy (tests/_distributed_worker.py does the checks).
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import pytest

WORKER = pathlib.Path(__file__).with_name("_distributed_worker.py")
PROCESSES = 2
TIMEOUT_S = 180


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_two_processes_vocab_split_exact():
  env = dict(os.environ)
  env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"  # 4 devices in all
  env["JAX_PLATFORMS"] = "cpu"
  address = f"127.0.0.1:{_free_port()}"
  procs = [subprocess.Popen([sys.executable, str(WORKER), address, str(i), str(PROCESSES)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i in range(PROCESSES)]
  outputs = []
  try:
    for p in procs:
      out, _ = p.communicate(timeout=TIMEOUT_S)
      outputs.append(out)
  except subprocess.TimeoutExpired:
    pytest.fail(f"the processes did not finish in {TIMEOUT_S} s")
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  for i, (p, out) in enumerate(zip(procs, outputs)):
    assert p.returncode == 0, f"process {i}:\n{out}"
    assert f"OK {i}" in out, f"process {i}:\n{out}"
