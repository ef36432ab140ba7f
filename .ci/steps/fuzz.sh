#!/usr/bin/env bash
# The fuzz target (tests/fuzz, issue 11) under libFuzzer with ASan+UBSan for a
# bounded time (LPATTN_FUZZ_SECONDS, default 60), starting from the checked-in
# corpus; new inputs go to a scratch folder, not into the tree. Without clang
# the seeded driver (meson test fuzz_replay) is what runs, in the other steps.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
  echo "fuzz: clang not found; only the seeded driver runs (meson test fuzz_replay)"
  exit 0
fi
BUILD=build-ci-fuzz
if [ ! -d "$BUILD" ]; then
  CC=clang CXX=clang++ meson setup "$BUILD" --buildtype=debugoptimized -Db_ndebug=false \
    -Db_sanitize=address,undefined -Db_lundef=false -Dbench=false -Dfuzz=true \
    -Dc_args=-fsanitize=fuzzer-no-link -Dcpp_args=-fsanitize=fuzzer-no-link >/dev/null
fi
ninja -C "$BUILD" -j2 tests/fuzz/fuzz_api
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1
# One input is bounded (tests/fuzz/fuzz_pool.c CALL_ELEMS): every unit runs in
# a few seconds under ASan+UBSan, so -timeout=20 fails only on a real hang;
# units over 5 s are printed (-report_slow_units) to catch a regression.
"$BUILD/tests/fuzz/fuzz_api" -max_total_time="${LPATTN_FUZZ_SECONDS:-60}" -timeout=20 \
  -report_slow_units=5 -rss_limit_mb=4096 -max_len=256 -len_control=0 -print_final_stats=1 \
  "$scratch" tests/fuzz/corpus
