#!/usr/bin/env bash
# The main job: build (release) and report every precision's error, NaN count
# and entropy statistics on the CPU for a default problem. Extra arguments go
# to lpattn-bench (e.g. `scripts/run.sh pasa`); `scripts/run.sh decode` runs
# the CPU decode benchmark instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -d build ] || meson setup build --buildtype=release >/dev/null
ninja -C build >/dev/null
# `decode`: the CPU paged decode benchmark (bench/cpu/decode_speed.c).
if [ "${1:-}" = decode ]; then shift; exec ./build/bench/cpu/decode_speed "$@"; fi
exec ./build/bench/lpattn-bench "$@"
