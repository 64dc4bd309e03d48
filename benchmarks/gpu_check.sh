#!/usr/bin/env bash
# One call on the GPU machine: build for sm_90, then (by stage) the benchmark, the example
# decode loop with --compare, and the GPU tests against numpy (pytest -m gpu, incl. the
# compute-sanitizer run). Logs and results under $OUT (or ./out), a short summary last.
#   benchmarks/gpu_check.sh [all|test|example|bench|ncu] [extra bench.py args...]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
stage=${1:-all}
shift || true
export PYTHONUNBUFFERED=1
log="$OUT/run.log"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"
  echo "== build (sm_90)"
  t0=$(date +%s)
  python3 -m pip install --no-build-isolation --no-deps -q \
    -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C cmake.define.JAX_ARGREDUCE_CUDA=ON -e . \
    >/tmp/build.log 2>&1 || { tail -50 /tmp/build.log; exit 1; }
  echo "built in $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$log"
[[ ${PIPESTATUS[0]} == 0 ]] || exit 1

rc=0
if [[ $stage == all || $stage == bench ]]; then
  echo "== benchmark" | tee -a "$log"
  python3 benchmarks/bench.py --out "$OUT" "$@" 2>&1 | tee -a "$log" | tail -45
  rc=$(( rc | PIPESTATUS[0] ))
fi
if [[ $stage == all || $stage == example ]]; then
  echo "== example: greedy decode at vocab 202048, --compare" | tee -a "$log"
  for dt in float32 bfloat16; do
    python3 examples/sample.py --vocab 202048 --batch 8 --layers 2 --dim 256 --heads 4 \
      --steps 64 --dtype $dt --compare 2>/dev/null | tee -a "$log"
    rc=$(( rc | PIPESTATUS[0] ))
  done
fi
if [[ $stage == all || $stage == test ]]; then
  echo "== pytest -m gpu" | tee -a "$log"
  timeout ${TEST_TIMEOUT:-900} python3 -m pytest -m gpu -q -rsP --durations=12 -p no:cacheprovider \
    tests > "$OUT/pytest_gpu.log" 2>&1
  rc=$(( rc | $? ))
  tail -25 "$OUT/pytest_gpu.log"
fi
if [[ $stage == ncu ]]; then
  echo "== ncu (our kernels, second launch of each case)" | tee -a "$log"
  ncu --clock-control none -k regex:'(Team|Block|Cluster)Kernel' --launch-skip-before-match 0 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    python3 benchmarks/ncu_profile.py > "$OUT/ncu.log" 2>&1
  rc=$(( rc | $? ))
  grep -E "Kernel<|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Block Size|Grid Size|Cluster Size|Stall|One or More|Issued Warp" "$OUT/ncu.log" | head -150
fi
echo "== summary (exit $rc)"
grep -hE "^[0-9]+ (passed|failed)|passed|failed" "$OUT/pytest_gpu.log" 2>/dev/null | tail -1
grep -hE "SUMMARY" "$OUT/pytest_gpu.log" 2>/dev/null | tail -4
grep -hE "identical|tokens/s" "$log" 2>/dev/null | tail -8
exit $rc
