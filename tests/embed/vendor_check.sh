#!/bin/sh
# Embedding check 2: vendor lpattn without meson or Python. Compiles core/,
# backends/ref and (when Highway's headers are found) backends/cpu with its
# checked-in generated kernels (backends/cpu/gen, globbed) straight from the
# sources with cc/c++, links tests/embed/vendor_main.c and runs it.
# Needs: a C11 and a C++17 compiler; libhwy-dev for the cpu backend.
# CC, CXX, CFLAGS and CXXFLAGS are honoured; NO_CPU=1 builds ref only.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/lpattn-vendor.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
CC=${CC:-cc}
CXX=${CXX:-c++}
# The project's own rules: no fast-math, no FMA contraction (bit-exact formats).
common="-O2 -I$root -I$root/include -I$root/core -ffp-contract=off -fno-fast-math"
defs=""
cpu=0
if [ "${NO_CPU:-0}" != 1 ] && echo '#include <hwy/highway.h>' | $CXX -std=c++17 -x c++ -E - >/dev/null 2>&1; then
  cpu=1
  # Every generated variant is compiled, so the registry lists them all.
  defs="-DLPATTN_HAVE_CPU=1 -DLPATTN_CPU_ALL_VARIANTS=1"
fi
hwy_cflags="" hwy_libs="-lhwy"
if [ $cpu = 1 ] && command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libhwy; then
  hwy_cflags=$(pkg-config --cflags libhwy)
  hwy_libs=$(pkg-config --libs libhwy)
fi

n=0
compile() { # compiler std source
  n=$((n + 1))
  obj="$work/$n.o"
  $1 -std=$2 $common $defs -c "$3" -o "$obj"
}
for f in "$root"/core/*.c "$root"/backends/ref/*.c; do
  compile "$CC ${CFLAGS:-}" c11 "$f"
done
libs="-lm -lpthread"
if [ $cpu = 1 ]; then
  for f in "$root"/backends/cpu/*.cc "$root"/backends/cpu/gen/*.cc; do
    compile "$CXX ${CXXFLAGS:-} $hwy_cflags" c++17 "$f"
  done
  libs="$hwy_libs $libs"
fi
$CC ${CFLAGS:-} -std=c11 -O2 -I"$root/include" -c "$root/tests/embed/vendor_main.c" -o "$work/main.o"
# Link with the C++ driver: the cpu backend needs the C++ runtime.
link=$CC
[ $cpu = 1 ] && link=$CXX
$link -o "$work/vendor_main" "$work/main.o" "$work"/[0-9]*.o $libs
if [ $cpu = 1 ]; then "$work/vendor_main" cpu; else "$work/vendor_main"; fi
echo "vendor_check: ok ($n library sources, cpu backend: $([ $cpu = 1 ] && echo yes || echo no))"
