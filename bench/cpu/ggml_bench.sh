#!/usr/bin/env bash
# bench/cpu/ggml_bench.sh (issue 34 item 5): build ggml-org/ggml's CPU library
# at a pinned commit (release, native flags, no OpenMP: ggml's own thread
# pool) and bench/cpu/ggml_decode.c against it and an lpattn build, then run
# it: lpattn's paged decode next to ggml_flash_attn_ext, calls alternating.
#   bench/cpu/ggml_bench.sh LPATTN_BUILD_DIR GGML_SOURCE [ggml_decode args...]
# GGML_SOURCE: a ggml checkout or a git URL (cloned to $WORK/ggml); WORK
# (default /tmp/ggml-bench) holds the ggml build and the harness binary.
set -euo pipefail
GGML_COMMIT=d99724f2b141fed9e1a9f402213506c081433465  # ggml master, 2025-08 ("readme : update ...")
lp=$(cd "${1:?lpattn build dir}" && pwd); src=${2:?ggml checkout or URL}; shift 2
here=$(cd "$(dirname "$0")/../.." && pwd)
work=${WORK:-/tmp/ggml-bench}; mkdir -p "$work"
if [ ! -d "$src/.git" ] && [ ! -f "$src/CMakeLists.txt" ]; then
  [ -d "$work/ggml" ] || git clone -q "$src" "$work/ggml"
  src=$work/ggml
fi
have=$(git -C "$src" rev-parse HEAD)
[ "$have" = "$GGML_COMMIT" ] || echo "note: ggml at $have, not the pinned $GGML_COMMIT" >&2
if [ ! -f "$work/build/src/libggml-cpu.a" ]; then
  cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >/dev/null
  ninja -C "$work/build" -j2 ggml ggml-base ggml-cpu >/dev/null
fi
g++ -O2 -march=native -x c "$here/bench/cpu/ggml_decode.c" -x none -I"$here/include" -I"$src/include" \
  -o "$work/ggml_decode" "$work/build/src/libggml.a" "$work/build/src/libggml-cpu.a" \
  "$work/build/src/libggml-base.a" -L"$lp" -llpattn -Wl,-rpath,"$lp" -lpthread -lm
echo "ggml $have, lpattn $(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet HEAD -- backends/cpu || echo +dirty backends/cpu), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
exec "$work/ggml_decode" "$@"
