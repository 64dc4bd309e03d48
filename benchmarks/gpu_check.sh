#!/usr/bin/env bash
# One call on the GPU machine: build for sm_90, run the GPU tests against numpy, then the
# benchmark; logs under $OUT (or ./out), a short table printed last.
#   benchmarks/gpu_check.sh [all|test|bench] [extra bench.py args...]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
stage=${1:-all}
shift || true
export PYTHONUNBUFFERED=1

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"
} 2>&1 | tee "$OUT/env.txt"

echo "== build (sm_90)"
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -q \
  -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C cmake.define.JAX_ARGREDUCE_CUDA=ON -e . \
  >"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
python3 -c "import jax_argreduce as j; assert j.HAS_CUDA; from jax_argreduce import _ffi; print(_ffi.cuda_launch_plan(1, 202048, 'float32'))"

rc=0
if [[ $stage == all || $stage == test ]]; then
  echo "== pytest -m gpu"
  python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest_gpu.log" | tail -40
  rc=${PIPESTATUS[0]}
fi
if [[ $stage == all || $stage == bench ]]; then
  echo "== benchmark"
  python3 benchmarks/bench.py --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log" | tail -60
  rc=$(( rc | PIPESTATUS[0] ))
fi
echo "== summary"
grep -E "passed|failed|error" "$OUT/pytest_gpu.log" 2>/dev/null | tail -2
grep -E "ERROR SUMMARY|RACECHECK" "$OUT/pytest_gpu.log" 2>/dev/null | tail -4
exit $rc
