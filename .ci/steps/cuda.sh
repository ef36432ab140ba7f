#!/usr/bin/env bash
# CI has no GPU: compile the CUDA backend (default variant set) once per code
# path, and check that every CUDA test skips. The kernels branch on the arch in
# three ways: sm_80 (mma.sync, FP8 converted in software; sm_86 compiles the
# same source), sm_90a (wgmma kernels, cvt.e4m3x2, the bulk-copy paged decode;
# sm_89's FP8 path is the same source as sm_90a's non-wgmma kernels) and sm_120a
# (block-scaled FP4 MMA, __CUDA_ARCH_FEAT_SM120_ALL). The D = 256 kernels,
# the same templates at another head dim, are built for sm_120a alone (the
# device runs build every kernel for sm_90a already). LPATTN_CI_CUDA_ARCHS and
# LPATTN_CI_CUDA_D256 change the sets (e.g. 80,86,89,90a,120a and all: the full
# set, as `pip install . -Csetup-args=-Dcuda=enabled` builds it without a GPU).
# The GPU tests run on the device machine (tests/cuda).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
if ! command -v nvcc >/dev/null; then
  echo "cuda: nvcc not found (install the CUDA toolkit); cannot compile the CUDA backend"
  exit 1
fi
archs=${LPATTN_CI_CUDA_ARCHS:-80,90a,120a}
d256=${LPATTN_CI_CUDA_D256:-120a}
BUILD=build-ci-cuda
[ -d "$BUILD" ] || meson setup "$BUILD" -Dcuda=enabled "-Dnvidia_archs=$archs" \
  "-Dnvidia_d256_archs=$d256" -Dcpu=disabled -Dbench=false >/dev/null
ninja -C "$BUILD" -j2
# Without a GPU every CUDA test must skip (exit 77), not fail.
meson test -C "$BUILD" --suite cuda --no-rebuild --print-errorlogs
