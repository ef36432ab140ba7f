#!/usr/bin/env bash
# Same-run A/B of two source trees on a machine with an NVIDIA GPU (the
# device machine): builds both (release, CUDA only, in parallel), optionally
# runs the cuda suite of B, then alternates a benchmark between the builds
# ROUNDS times and prints the rows of each round side by side. This is how a
# kernel change is judged (bench/RESULTS_cuda_h100.md, "same-run A/B").
#
# Usage: scripts/gpu_ab.sh SRC_A SRC_B WHAT [ROUNDS]
#   SRC_A, SRC_B: source trees (e.g. `git archive BASE | tar -x -C A` and the
#                 working tree, carried to the device under an ignored folder)
#   WHAT: a bench_cuda.py mode list (fp8s, prefill-16k, prefill, ...) or
#         decode (bench_paged.py quick)
#   ROUNDS: default 2
# Env: OUT (default /tmp/lpattn-ab): logs and tables; LPATTN_ARCHS (90a);
#      LPATTN_AB_TESTS=1: run B's cuda suite after the builds;
#      LPATTN_AB_ARGS: extra meson setup arguments for both builds.
set -uo pipefail
[ $# -ge 3 ] || { sed -n 2,17p "$0"; exit 2; }
A=$(cd "$1" && pwd) B=$(cd "$2" && pwd) WHAT=$3 ROUNDS=${4:-2}
OUT=${OUT:-/tmp/lpattn-ab}
ARCHS=${LPATTN_ARCHS:-90a}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
L=$OUT/ab.txt
t0=$SECONDS
build() { # src dir jobs
  # shellcheck disable=SC2086
  (cd "$1" && meson setup "$2" -Dcuda=enabled -Dnvidia_archs="$ARCHS" -Dcpu=disabled \
    --buildtype=release ${LPATTN_AB_ARGS:-} >/dev/null && ninja -C "$2" -j "$3") >"$2.log" 2>&1
}
build "$A" /tmp/ab-A 8 & pa=$!
build "$B" /tmp/ab-B 8 & pb=$!
wait $pa; ra=$?
wait $pb; rb=$?
echo "builds: A rc=$ra B rc=$rb ($((SECONDS - t0)) s)" | tee -a "$L"
cp /tmp/ab-A.log /tmp/ab-B.log "$OUT/" 2>/dev/null
[ $ra -eq 0 ] && [ $rb -eq 0 ] || exit 1
if [ "${LPATTN_AB_TESTS:-0}" = 1 ]; then
  meson test -C /tmp/ab-B --suite cuda --no-rebuild --print-errorlogs >"$OUT/suite.log" 2>&1
  echo "cuda suite (B): rc=$? ($((SECONDS - t0)) s)" | tee -a "$L"
  grep -E "^(Ok|Fail|Skipped|Timeout):" "$OUT/suite.log" | tee -a "$L"
fi
for r in $(seq 1 "$ROUNDS"); do
  for x in A B; do
    src=$A; [ $x = B ] && src=$B
    md=$OUT/$x$r.md
    if [ "$WHAT" = decode ]; then
      (cd "$src" && python3 bench/cuda/bench_paged.py /tmp/ab-$x/bench/cuda/bench_paged "$md" quick) >/dev/null 2>&1
    else
      (cd "$src" && python3 bench/cuda/bench_cuda.py /tmp/ab-$x/bench/cuda/bench_cuda "$md" "$WHAT") >/dev/null 2>&1
    fi
    echo "== $x round $r (rc=$?, $((SECONDS - t0)) s)" | tee -a "$L"
    grep -E "^\| [0-9]" "$md" | tee -a "$L"
  done
done
echo "done ($((SECONDS - t0)) s): $OUT" | tee -a "$L"
