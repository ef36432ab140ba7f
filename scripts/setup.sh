#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test lpattn.
# Idempotent and quick when everything is already there.
#   scripts/setup.sh --build   build tools only (apt: meson, ninja, gcc, g++, pkg-config,
#                              libhwy-dev); what scripts/run.sh needs: no Python packages
#   scripts/setup.sh           the above, and for the test suite (scripts/test.sh):
#                              python3-jinja2, python3-venv, pip; numpy and ml_dtypes,
#                              and torch (CPU) unless LPATTN_NO_TORCH=1, for the Python tests
#   scripts/setup.sh --cross   once per machine, by hand: what the CI steps arm64 and hip
#                              compile with (they skip, saying so, without it): the arm64
#                              dpkg architecture, g++-aarch64-linux-gnu, libhwy-dev:arm64,
#                              qemu-user; hipcc and libamdhip64-dev. This changes the host's
#                              package configuration; CI never does it itself.
set -euo pipefail
mode=${1:---test}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
apt_install() {
  echo "setup: apt-get install $*"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

if [ "$mode" = --cross ]; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "setup: dpkg --add-architecture arm64"
    $SUDO dpkg --add-architecture arm64
  fi
  need=()
  command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
  command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
  [ -e /usr/lib/aarch64-linux-gnu/pkgconfig/libhwy.pc ] || need+=(libhwy-dev:arm64)
  command -v hipcc >/dev/null || need+=(hipcc)
  [ -e /usr/include/hip/hip_runtime.h ] || need+=(libamdhip64-dev)
  [ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"
  echo "setup: cross toolchains ready (CI steps arm64 and hip)"
  exit 0
fi

need_apt=()
command -v meson >/dev/null || need_apt+=(meson)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v cc >/dev/null || need_apt+=(gcc)
command -v c++ >/dev/null || need_apt+=(g++)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
[ -f /usr/include/hwy/highway.h ] || need_apt+=(libhwy-dev)
if [ "$mode" != --build ]; then
  command -v python3 >/dev/null || need_apt+=(python3)
  python3 -c 'import jinja2' 2>/dev/null || need_apt+=(python3-jinja2)
  python3 -c 'import ensurepip, venv' 2>/dev/null || need_apt+=(python3-venv)
  python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
  # Python.h: the C extension lpattn._fastcall (optional; the package falls back to ctypes)
  python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' ||
    need_apt+=(python3-dev)
fi
[ ${#need_apt[@]} -eq 0 ] || apt_install "${need_apt[@]}"
[ "$mode" = --build ] && exit 0

# ml_dtypes is the independent FP4/FP8 oracle of the format tests (PyPI only).
if ! python3 -c 'import numpy, ml_dtypes' 2>/dev/null; then
  echo "setup: pip install numpy ml_dtypes"
  python3 -m pip install -q numpy ml_dtypes 2>/dev/null ||
    python3 -m pip install -q --break-system-packages numpy ml_dtypes
fi
# PyTorch (CPU use) for the Python package's torch tests; skipped where it
# cannot be installed (the tests then skip) or with LPATTN_NO_TORCH=1.
if [ "${LPATTN_NO_TORCH:-0}" != 1 ] && ! python3 -c 'import torch' 2>/dev/null; then
  echo "setup: pip install torch (for the Python tests; LPATTN_NO_TORCH=1 skips it)"
  python3 -m pip install -q torch 2>/dev/null ||
    python3 -m pip install -q --break-system-packages torch 2>/dev/null ||
    echo "setup: torch is not installable here; its Python tests will skip"
fi
