#!/usr/bin/env bash
# Validation of the GPU backends on a machine with an NVIDIA GPU (the device
# machine of bench/RESULTS_cuda_h100.md): builds the CUDA backend and the HIP
# backend through the HIP-on-CUDA shim (release, outside the source tree),
# runs their test suites and the Python tests on CUDA tensors, then the
# benchmarks asked for. Everything it prints also goes to $OUT (default
# /tmp/lpattn-gpu-check), with one tarball of it all.
#
# Usage: scripts/gpu_check.sh [STEP ...]
#   STEP: tests (cuda + hip shim + python), decode (paged decode, quick),
#         decode-full, prefill, backward, ncu-decode (ncu profile of the
#         NVFP4 decode kernel at B = 16, 128k), memcheck, racecheck (the cuda
#         suite under compute-sanitizer --tool memcheck / racecheck, every
#         test wrapped, no meson timeout: racecheck can take an hour);
#         default: tests decode.
# Env: LPATTN_ARCHS (default 90a), LPATTN_GPU_BUILD (default /tmp/lpattn-gpu),
#      LPATTN_SANITIZE_TESTS (memcheck/racecheck: test names, default the
#      whole cuda suite).
set -uo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
OUT=${OUT:-/tmp/lpattn-gpu-check}
B=${LPATTN_GPU_BUILD:-/tmp/lpattn-gpu}
ARCHS=${LPATTN_ARCHS:-90a}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests decode)
export PATH=/usr/local/cuda/bin:$PATH
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
run() { # name command...: output to $OUT/name.log, status to the summary
  local name=$1; shift
  local t0=$SECONDS
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  log "$name: rc=$rc ($((SECONDS - t0)) s)"
  tail -n 5 "$OUT/$name.log" | sed 's/^/   /' | tee -a "$OUT/summary.txt"
  return $rc
}
log "$(date -u +%FT%TZ) commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?') steps: ${steps[*]}"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$OUT/summary.txt"

build() {
  [ -d "$B/cuda" ] || meson setup "$B/cuda" -Dcuda=enabled -Dnvidia_archs="$ARCHS" -Dcpu=disabled \
    --buildtype=release >/dev/null || return 1
  ninja -C "$B/cuda"
}
build_hip() {
  [ -d "$B/hip" ] || meson setup "$B/hip" -Dcuda=disabled -Dhip_shim=true -Dcpu=disabled \
    --buildtype=release >/dev/null || return 1
  ninja -C "$B/hip"
}
# The cuda suite with every test under compute-sanitizer (tool $1): a hazard
# or invalid access fails the test (--error-exitcode); CUDA API errors the
# library answers itself (an unsupported attribute, say) are not reported.
sanitize() {
  local tool=$1
  # shellcheck disable=SC2086
  meson test -C "$B/cuda" --suite cuda --no-rebuild --print-errorlogs --num-processes 1 \
    --timeout-multiplier 0 --wrapper "compute-sanitizer --tool $tool --error-exitcode 99 \
    --report-api-errors no --print-limit 50" ${LPATTN_SANITIZE_TESTS:-}
  local rc=$?
  # every test's own output (the sanitizer's ERROR SUMMARY lines) to $OUT
  cp "$B/cuda/meson-logs/testlog-compute-sanitizer.txt" "$OUT/$tool-testlog.txt" 2>/dev/null
  grep -h "ERROR SUMMARY" "$OUT/$tool-testlog.txt" | sort | uniq -c
  return $rc
}
run build build || { log "build failed"; exit 1; }
LIB=$(ls "$B"/cuda/liblpattn.so* | head -1)

for s in "${steps[@]}"; do
  case $s in
  tests)
    run test-cuda meson test -C "$B/cuda" --suite cuda --print-errorlogs --no-rebuild
    run build-hip build_hip && run test-hip meson test -C "$B/hip" --suite hip --print-errorlogs --no-rebuild
    run test-python env LPATTN_LIBRARY="$LIB" PYTHONPATH="$SRC/python" python3 python/tests/run.py
    ;;
  decode) run bench-decode python3 bench/cuda/bench_paged.py "$B/cuda/bench/cuda/bench_paged" "$OUT/decode.md" quick ;;
  decode-full) run bench-decode-full python3 bench/cuda/bench_paged.py "$B/cuda/bench/cuda/bench_paged" "$OUT/decode_full.md" ;;
  prefill) run bench-prefill python3 bench/cuda/bench_cuda.py "$B/cuda/bench/cuda/bench_cuda" "$OUT/prefill.md" prefill ;;
  backward) run bench-backward env LPATTN_LIBRARY="$LIB" PYTHONPATH="$SRC/python" \
    python3 bench/cuda/bench_backward.py "$OUT/backward.md" ;;
  ncu-decode) run ncu-decode ncu --set full -k regex:decode_d128_f16_nvfp4 -c 1 -o "$OUT/decode_nvfp4" \
    "$B/cuda/bench/cuda/bench_paged" 16 131072 nvfp4 &&
    ncu --import "$OUT/decode_nvfp4.ncu-rep" --page details >"$OUT/ncu_decode_details.txt" 2>&1 &&
    ncu --import "$OUT/decode_nvfp4.ncu-rep" --page source --print-source sass --csv 2>/dev/null |
      gzip >"$OUT/ncu_decode_sass.csv.gz" ;;
  memcheck) run memcheck sanitize memcheck ;;
  racecheck) run racecheck sanitize racecheck ;;
  *) log "unknown step $s" ;;
  esac
done
tar -C "$OUT" -czf /tmp/gpu_check.tgz . && mv /tmp/gpu_check.tgz "$OUT/all.tgz"
log "done: $OUT"
