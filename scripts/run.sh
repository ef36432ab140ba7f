#!/usr/bin/env bash
# The main job: build (release) the library and the report tool, then report every
# precision's error, NaN count and entropy statistics on the CPU for a default
# problem. Extra arguments go to lpattn-bench (e.g. `scripts/run.sh pasa`);
# `scripts/run.sh decode` runs the CPU decode benchmark instead.
# Installs only the build tools (scripts/setup.sh --build: apt, no Python packages)
# and builds only what it runs (not the tests), printing ninja's progress lines.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --build
[ -d build ] || meson setup build --buildtype=release
target=bench/lpattn-bench
[ "${1:-}" = decode ] && target=bench/cpu/decode_speed
ninja -C build "$target"
# `decode`: the CPU paged decode benchmark (bench/cpu/decode_speed.c).
if [ "${1:-}" = decode ]; then shift; exec ./build/bench/cpu/decode_speed "$@"; fi
exec ./build/bench/lpattn-bench "$@"
