#!/usr/bin/env bash
# Runs the HIP backend on an NVIDIA GPU: builds it with nvcc through the
# HIP-on-CUDA shim (tests/hip/shim, wave size 32: the FMA path) and runs the
# HIP tests (parity with ref, causal leak) and the CUDA test suites built for
# HIP (prefill, decode + KV cache, quantize). Needs nvcc and a CUDA GPU;
# without a GPU the tests skip. BUILD overrides the build directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-hipshim}
[ -d "$BUILD" ] || meson setup "$BUILD" -Dhip_shim=true -Dcpu=disabled -Dbench=false \
  -Dvariants=all >/dev/null
ninja -C "$BUILD" -j2 >/dev/null
meson test -C "$BUILD" --suite hip --print-errorlogs --verbose
