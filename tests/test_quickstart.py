"""examples/quickstart.py runs as a user runs it: its own process, from another directory.

The script checks its own results (against numpy and against the unsharded call) and exits
non-zero on a wrong one; this test checks that it runs, quickly, and prints its three parts.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

_PATH = pathlib.Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"


def test_quickstart_runs(tmp_path):
  # The script asks for its 4 CPU devices itself: run it without this suite's XLA_FLAGS, as a
  # user would.
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  proc = subprocess.run([sys.executable, str(_PATH)], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  lines = proc.stdout.splitlines()
  assert [line.split()[0] for line in lines] == ["greedy", "sampled", "filtered", "sharded"], \
      proc.stdout
  assert "(vocab split over 4 devices)" in lines[-1]
