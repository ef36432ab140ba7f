#!/usr/bin/env bash
# The main job: build (release) and report every precision's error, NaN count
# and entropy statistics on the CPU for a default problem. Extra arguments go
# to lpattn-bench (e.g. `scripts/run.sh pasa`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -d build ] || meson setup build --buildtype=release >/dev/null
ninja -C build >/dev/null
exec ./build/bench/lpattn-bench "$@"
