#!/usr/bin/env bash
# The test suite: build (release, warnings on) and run every meson test.
# GPU tests skip (exit 77) on machines without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
BUILD=${LPATTN_BUILD_DIR:-build}
[ -d "$BUILD" ] || meson setup "$BUILD" --buildtype="${LPATTN_BUILDTYPE:-release}" \
  ${LPATTN_MESON_ARGS:-} >/dev/null || exit 1
ninja -C "$BUILD" || exit 1
meson test -C "$BUILD" --print-errorlogs --num-processes 2 2>&1 | tee "$BUILD/test-summary.txt"
rc=${PIPESTATUS[0]}
# meson leaves out the summary lines whose count is zero.
n() { awk -v k="$1" '$1 == k":" {v = $2} END {print v + 0}' "$BUILD/test-summary.txt"; }
echo "tests: $(n Ok) passed, $(( $(n Fail) + $(n Timeout) )) failed, $(n Skipped) skipped"
exit "$rc"
