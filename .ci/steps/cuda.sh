#!/usr/bin/env bash
# CI has no GPU: compile the CUDA backend for sm_80, 86, 89, 90a and 120a (default
# variant set). The GPU tests run on the device machine (tests/cuda).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
if ! command -v nvcc >/dev/null; then
  echo "cuda: nvcc not found (install the CUDA toolkit); cannot compile the CUDA backend"
  exit 1
fi
[ -d build-ci-cuda ] || meson setup build-ci-cuda -Dcuda=enabled -Dnvidia_archs=80,86,89,90a,120a \
  -Dcpu=disabled -Dbench=false >/dev/null
ninja -C build-ci-cuda -j2
# Without a GPU every CUDA test must skip (exit 77), not fail.
meson test -C build-ci-cuda --suite cuda --no-rebuild --print-errorlogs
