#!/usr/bin/env bash
# One call on the GPU machine: build for sm_90, then (by stage) the benchmark, the example
# decode loop with --compare, and the GPU tests against numpy (pytest -m gpu, incl. the
# compute-sanitizer run). Logs and results under $OUT (or ./out), a short summary last.
#   benchmarks/gpu_check.sh [STAGE[,STAGE...]] [extra bench.py args...]
# Stages: all (= bench,example,test), test, example, bench, ncu (our kernels and the XLA
# paths under ncu), probe (benchmarks/launch_probe.cu under ncu), sweep (rebuild with each
# tuning variant in $SWEEP and benchmark the kernels; runs last, ends on the default build).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
stage=${1:-all}
shift || true
stage=${stage//all/bench,example,test}
for s in ${stage//,/ }; do
  case $s in bench|example|test|ncu|probe|sweep) ;;
    *) echo "unknown stage '$s' (all, bench, example, test, ncu, probe, sweep)"; exit 2 ;;
  esac
done
has() { [[ ,$stage, == *,$1,* ]]; }
build() {  # build [CMAKE_CUDA_FLAGS]: always passed, so a sweep variant's flags do not stick
  python3 -m pip install --no-build-isolation --no-deps -q \
    -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C cmake.define.JAX_ARGREDUCE_CUDA=ON \
    -C "cmake.define.CMAKE_CUDA_FLAGS=${1:-${CUDAFLAGS:-}}" -e . >/tmp/build.log 2>&1 ||
    { tail -50 /tmp/build.log; return 1; }
}
export PYTHONUNBUFFERED=1
log="$OUT/run.log"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"
  echo "== build (sm_90)"
  t0=$(date +%s)
  build || exit 1
  echo "built in $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$log"
[[ ${PIPESTATUS[0]} == 0 ]] || exit 1

rc=0
if has bench; then
  echo "== benchmark" | tee -a "$log"
  python3 benchmarks/bench.py --out "$OUT" "$@" 2>&1 | tee -a "$log" | tail -45
  rc=$(( rc | PIPESTATUS[0] ))
fi
if has example; then
  echo "== example: greedy decode at vocab 202048, --compare" | tee -a "$log"
  for dt in float32 bfloat16; do
    python3 examples/sample.py --vocab 202048 --batch 8 --layers 2 --dim 256 --heads 4 \
      --steps 64 --dtype $dt --compare 2>/dev/null | tee -a "$log"
    rc=$(( rc | PIPESTATUS[0] ))
  done
fi
if has test; then
  echo "== pytest -m gpu" | tee -a "$log"
  timeout ${TEST_TIMEOUT:-900} python3 -m pytest -m gpu -q -rsP --durations=12 -p no:cacheprovider \
    tests > "$OUT/pytest_gpu.log" 2>&1
  rc=$(( rc | $? ))
  tail -25 "$OUT/pytest_gpu.log"
fi
NCU_SECTIONS="--section SpeedOfLight --section LaunchStats --section Occupancy \
  --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
if has ncu; then
  # L2 as in bench.py (no flush between launches): 4 inputs per case, rotated.
  echo "== ncu: our kernels (benchmarks/kernel_profile.cu) on the missed-target shapes" | tee -a "$log"
  nvcc -O3 -std=c++17 -arch=sm_90 -Iffi -o /tmp/kernel_profile benchmarks/kernel_profile.cu \
    ffi/argreduce_kernels.cu > "$OUT/nvcc_kernel_profile.log" 2>&1 &&
    timeout 240 ncu --clock-control none --cache-control none $NCU_SECTIONS \
      --section SourceCounters /tmp/kernel_profile > "$OUT/ncu.log" 2>&1
  rc=$(( rc | $? ))
  python3 benchmarks/ncu_summary.py --group 5 "$OUT/ncu.log" | tee -a "$log"
  echo "== ncu: our XLA path vs jnp.argmax (float32 shapes routed to XLA)" | tee -a "$log"
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 150 ncu --clock-control none \
    --cache-control none $NCU_SECTIONS python3 benchmarks/ncu_profile.py \
    > "$OUT/ncu_xla.log" 2>&1
  rc=$(( rc | $? ))
  python3 benchmarks/ncu_summary.py "$OUT/ncu_xla.log" | grep -v "^    " | tee -a "$log"
fi
if has probe; then
  echo "== launch probe under ncu (gpu__time_duration per launch)" | tee -a "$log"
  nvcc -O3 -arch=sm_90 -o /tmp/launch_probe benchmarks/launch_probe.cu \
    > "$OUT/nvcc_probe.log" 2>&1 &&
    timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
      /tmp/launch_probe > "$OUT/probe.log" 2>&1
  rc=$(( rc | $? ))
  python3 benchmarks/ncu_summary.py --group 5 --probe "$OUT/probe.log" | tee -a "$log"
fi
if has sweep; then
  # NAME=CMAKE_CUDA_FLAGS;... (the first is the default build, for a same-run baseline)
  SWEEP=${SWEEP:-"base=;unroll8=-DJAX_ARGREDUCE_UNROLL=8;waves0=-DJAX_ARGREDUCE_TEAM_WAVES=0"}
  SWEEP_SHAPES=${SWEEP_SHAPES:-1x32000,1x202048,8x202048,32x202048,256x202048,4096x128,4096x4096,65536x64,65536x1024}
  IFS=';' read -ra variants <<< "$SWEEP"
  for v in "${variants[@]}"; do
    name=${v%%=*}; flags=${v#*=}
    echo "== sweep $name: CMAKE_CUDA_FLAGS='$flags'" | tee -a "$log"
    build "$flags" || { rc=1; continue; }
    python3 benchmarks/bench.py --shapes "$SWEEP_SHAPES" --methods kernel --iters 20 \
      --wall-r 1 --wall-repeats 1 --no-plot --out "$OUT/sweep_$name" > "$OUT/sweep_$name.log" 2>&1
    rc=$(( rc | $? ))
    # shape, dtype, ours and jnp span (µs), path/geometry (the table's columns 12 on)
    grep -E "^[0-9]+x[0-9]+ " "$OUT/sweep_$name.log" |
      awk '{g = $12; for (i = 13; i <= NF; i++) g = g " " $i; print $1, $2, $4, $5, g}' |
      tee -a "$log"
  done
  build || rc=1
fi
echo "== summary (exit $rc)"
if has test; then
  grep -hE "^[0-9]+ (passed|failed)|passed|failed" "$OUT/pytest_gpu.log" 2>/dev/null | tail -1
  grep -hE "SUMMARY" "$OUT/pytest_gpu.log" 2>/dev/null | tail -4
fi
has example && grep -hE "identical|tokens/s" "$log" 2>/dev/null | tail -8
exit $rc
