#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test lpattn.
# Idempotent and quick when everything is already there.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

need_apt=()
command -v meson >/dev/null || need_apt+=(meson)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v cc >/dev/null || need_apt+=(gcc)
command -v c++ >/dev/null || need_apt+=(g++)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
[ -f /usr/include/hwy/highway.h ] || need_apt+=(libhwy-dev)
python3 -c 'import jinja2' 2>/dev/null || need_apt+=(python3-jinja2)
command -v python3 >/dev/null || need_apt+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
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
