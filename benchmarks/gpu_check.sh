#!/usr/bin/env bash
# One call on the GPU machine: build for sm_90, then the stages asked for. Everything lands in
# $OUT (default ./out), at most 8 files: run.log (build, every stage's console output, summary),
# results.json + BENCHMARKS.md + results_summary.json (one bench.py run of the benchmark
# stages), pytest_gpu.log (test), sweep.md (sweep), baseline.md (baseline).
#   benchmarks/gpu_check.sh [STAGE[,STAGE...]] [extra bench.py args...]
# Stages:
#   chain    bench.py chain: the in-chain table (SPEC §3b)
#   bench    bench.py isolated: the isolated table (SPEC §3)
#   example  bench.py example (the example's decode step, ours vs reference, device span) and
#            examples/sample.py --compare at vocab 202048 (greedy f32/bf16, sample)
#   sharded  bench.py sharded (issue 11; run it on the 2-GPU machine)
#   test     pytest -m gpu (GPU tests against numpy, compute-sanitizer included)
#   sweep    bench.py isolated,chain --methods kernel --variants "$SWEEP" (kernel plan options
#            switched in one process through jax_argreduce._ffi.debug_set_plan_options: no
#            rebuild); SWEEP="name=key:value,...;name2=..." (default below), SWEEP_SHAPES,
#            SWEEP_OPS (argmax), SWEEP_METHODS (kernel; the sampler's: auto), e.g.
#            SWEEP="base=;t8=team:8;t4=team:4" SWEEP_OPS=categorical SWEEP_METHODS=auto
#   baseline build $BASELINE_DIR (default .baseline: `git archive` of the commit to compare
#            with) beside this tree and run bench.py chain,isolated --ops argmax on it first
#            (baseline.md): the same-run comparison with the previous build
#   all      chain,bench,example,test
# The chain/bench/example/sharded stages run as ONE bench.py call (one BENCHMARKS.md, in-chain
# table first); extra arguments go to it. (The former ncu stage is gone: kernel_profile.cu does
# not build against the restructured ffi/; the former probe stage's results are in NOTES.md.)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
stage=${1:-all}
shift || true
stage=${stage//all/chain,bench,example,test}
for s in ${stage//,/ }; do
  case $s in chain|bench|example|sharded|test|sweep|baseline) ;;
    *) echo "unknown stage '$s' (all, chain, bench, example, sharded, test, sweep, baseline)"; exit 2 ;;
  esac
done
has() { [[ ,$stage, == *,$1,* ]]; }
export PYTHONUNBUFFERED=1
log="$OUT/run.log"

# The package is installed as a plain (non-editable) build into $PKG and found through
# PYTHONPATH, so a second build (the baseline stage: the commit in $BASELINE_DIR, e.g. a
# `git archive` of the previous main) can be imported by another process of the same run.
# pytest runs from /tmp so the source tree's jax_argreduce/ (no extension) is not imported.
# PREBUILT=DIR / BASELINE_PREBUILT=DIR: use packages already built (pip --target) for this
# machine's Python, jaxlib and sm_90 instead of building here (saves device time).
PKG=${PREBUILT:-${PKG:-/tmp/jax_argreduce_pkg}}
build() {  # build SRC_DIR TARGET_DIR
  rm -rf "$2"
  python3 -m pip install --no-build-isolation --no-deps -q --target "$2" \
    -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C cmake.define.JAX_ARGREDUCE_CUDA=ON \
    -C "cmake.define.CMAKE_CUDA_FLAGS=${CUDAFLAGS:-}" -C build-dir=/tmp/build_$(basename "$2") \
    "$1" >"/tmp/build_$(basename "$2").log" 2>&1 || { tail -50 "/tmp/build_$(basename "$2").log"; return 1; }
}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"
  t0=$(date +%s)
  if has baseline && [[ -z ${BASELINE_PREBUILT:-} ]]; then  # both builds at once (CPU only)
    build "${BASELINE_DIR:-.baseline}" /tmp/jax_argreduce_base & base_pid=$!
  fi
  if [[ -n ${PREBUILT:-} ]]; then
    echo "== prebuilt package $PREBUILT (built elsewhere for this Python, jaxlib and sm_90)"
  else
    echo "== build (sm_90) into $PKG"
    build . "$PKG" || exit 1
  fi
  if has baseline && [[ -z ${BASELINE_PREBUILT:-} ]]; then wait $base_pid || exit 1; fi
  echo "built in $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$log"
[[ ${PIPESTATUS[0]} == 0 ]] || exit 1
export PYTHONPATH=$PKG${PYTHONPATH:+:$PYTHONPATH}
REPO=$PWD

rc=0
if has baseline; then
  # The previous build on the same GPU in the same run: argmax only, both tables.
  echo "== baseline: bench.py chain,isolated of ${BASELINE_DIR:-.baseline}" | tee -a "$log"
  PYTHONPATH=${BASELINE_PREBUILT:-/tmp/jax_argreduce_base} python3 benchmarks/bench.py chain,isolated --ops argmax \
    --out /tmp/baseline_out ${BASELINE_ARGS:-} 2>&1 | grep -vE "^\[(timing|chain|isolated)\]" \
    | tee -a "$log"
  rc=$(( rc | PIPESTATUS[0] ))
  cp /tmp/baseline_out/BENCHMARKS.md "$OUT/baseline.md" 2>/dev/null
fi
modes=()
has chain && modes+=(chain)
has bench && modes+=(isolated)
has example && modes+=(example)
has sharded && modes+=(sharded)
if (( ${#modes[@]} )); then
  m=$(IFS=,; echo "${modes[*]}")
  echo "== bench.py $m" | tee -a "$log"
  python3 benchmarks/bench.py "$m" --out "$OUT" --summary "$OUT/results_summary.json" "$@" \
    2>&1 | tee -a "$log" | grep -vE "^\[(timing|chain|isolated|example|sharded)\]"
  rc=$(( rc | PIPESTATUS[0] ))
fi
if has example; then
  echo "== examples/sample.py --compare at vocab 202048, batch 8, dim 256, 2 layers" | tee -a "$log"
  for args in "--dtype float32" "--dtype bfloat16" "--dtype bfloat16 --mode sample --temperature 0.8"; do
    # shellcheck disable=SC2086
    python3 examples/sample.py --vocab 202048 --batch 8 --layers 2 --dim 256 --heads 4 \
      --steps 64 --trace-steps 16 --compare $args 2>/dev/null | tee -a "$log"
    rc=$(( rc | PIPESTATUS[0] ))
  done
fi
if has test; then
  echo "== pytest -m gpu" | tee -a "$log"
  (cd /tmp && timeout "${TEST_TIMEOUT:-900}" python3 -m pytest -m gpu -q -rsP --durations=12 \
    -p no:cacheprovider --rootdir "$REPO" -c "$REPO/pyproject.toml" ${TESTS:-"$REPO/tests"} \
    > "$OUT/pytest_gpu.log" 2>&1)
  rc=$(( rc | $? ))
  tail -25 "$OUT/pytest_gpu.log" | tee -a "$log"
fi
if has sweep; then
  SWEEP=${SWEEP:-"base=;nopdl=pdl:false"}
  SWEEP_SHAPES=${SWEEP_SHAPES:-1x32000,1x202048,8x202048,16x202048,32x202048,256x202048,64x128256,4096x128,4096x4096,65536x64,65536x1024}
  echo "== sweep: --ops ${SWEEP_OPS:-argmax} --methods ${SWEEP_METHODS:-kernel} --variants '$SWEEP'" | tee -a "$log"
  python3 benchmarks/bench.py isolated,chain --ops "${SWEEP_OPS:-argmax}" \
    --methods "${SWEEP_METHODS:-kernel}" --variants "$SWEEP" \
    --shapes "$SWEEP_SHAPES" --iters 20 --wall-r 0 --out /tmp/sweep 2>&1 |
    grep -vE "^\[(timing|chain|isolated)\]" | tee -a "$log"
  rc=$(( rc | PIPESTATUS[0] ))
  cp /tmp/sweep/BENCHMARKS.md "$OUT/sweep.md" 2>/dev/null
fi
summary=$(  # read the log first, then append: grep must not read its own output
  echo "== summary (exit $rc)"
  if has test; then
    grep -hE "passed|failed" "$OUT/pytest_gpu.log" 2>/dev/null | tail -1
    grep -hE "SUMMARY" "$OUT/pytest_gpu.log" 2>/dev/null | tail -4
  fi
  grep -hE "^  \[(met|missed|met \(partial\))\]" "$log" 2>/dev/null | cut -c1-200
  has example && grep -hE "identical|device span per step|: (pass|FAIL)$" "$log" 2>/dev/null | tail -12
  grep -hE "MISMATCH" "$log" 2>/dev/null | head -5
)
echo "$summary" | tee -a "$log"
exit $rc
