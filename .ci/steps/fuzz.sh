#!/usr/bin/env bash
# The fuzz target (tests/fuzz, issue 11) under libFuzzer with ASan+UBSan for a
# bounded time (LPATTN_FUZZ_SECONDS, default 60), starting from the checked-in
# corpus; new inputs go to a scratch folder, not into the tree. Without clang
# the seeded driver (meson test fuzz_replay) is what runs, in the other steps.
# What it covers: every public entry point (fuzz_api.c: attention, backward,
# decode, quantize, merge, KV caches; fuzz_pool.c: the paged pool; fuzz_varlen.c:
# ragged batches) on the ref and cpu backends, the cpu backend built for the
# Highway targets AVX2 (the one that runs) and EMU128 alone, not for all five
# (the ASan build of five targets was most of this step's time);
# LPATTN_FUZZ_HWY_DISABLED changes the set (empty: every target).
# The other targets' code is the same source at another vector width; the
# ASan+UBSan step runs the cpu tests on each (tests/cpu force every target) and
# the corpus (fuzz_replay) on the best one.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
  echo "fuzz: clang not found; only the seeded driver runs (meson test fuzz_replay)"
  exit 0
fi
BUILD=build-ci-fuzz
# Highway targets left out of this build (x86: AVX2 is what runs, EMU128 the
# baseline that dynamic dispatch needs beside it).
hwy_off=
[ "$(uname -m)" = x86_64 ] && hwy_off="(HWY_SSSE3|HWY_SSE4|HWY_AVX3|HWY_AVX3_DL)"
hwy_off=${LPATTN_FUZZ_HWY_DISABLED-$hwy_off}
if [ ! -d "$BUILD" ]; then
  CC=clang CXX=clang++ meson setup "$BUILD" --buildtype=debugoptimized -Db_ndebug=false \
    -Db_sanitize=address,undefined -Db_lundef=false -Dbench=false -Dfuzz=true \
    -Dc_args=-fsanitize=fuzzer-no-link \
    "-Dcpp_args=-fsanitize=fuzzer-no-link${hwy_off:+ -DHWY_DISABLED_TARGETS=$hwy_off}" >/dev/null
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
