#!/bin/sh
# Cross-build lpattn for aarch64 (Highway NEON/SVE/SVE2 + scalar) and run the
# CPU backend's test suite under qemu-user. Usage: .ci/steps/arm64.sh [build-dir]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-ci-arm}

# The toolchain is installed once per machine by `scripts/setup.sh --cross`; CI
# never changes the host's packages. Without it the step says so and passes.
if ! command -v aarch64-linux-gnu-g++ >/dev/null || ! command -v qemu-aarch64 >/dev/null ||
   [ ! -e /usr/lib/aarch64-linux-gnu/pkgconfig/libhwy.pc ]; then
  echo "arm64: SKIPPED: no aarch64 cross toolchain (g++-aarch64-linux-gnu, libhwy-dev:arm64," \
    "qemu-user); run scripts/setup.sh --cross once to check the arm64 build"
  exit 0
fi

[ -f "$build/build.ninja" ] ||
  meson setup "$build" "$root" --cross-file "$root/.ci/cross-aarch64.txt" -Dbench=false
# Only what the cpu suite runs: Debian 12's aarch64 cross GCC 12 has an
# internal compiler error on tests/ref/test_ref_high.c at -O3.
# cpu_paged (every paged property on every Highway target against ref) takes over
# 5 minutes under qemu: it runs natively in the main suite only, for now.
ninja -C "$build" -j2 tests/cpu/test_cpu_formats tests/cpu/test_cpu_quant_sweep tests/cpu/test_cpu_attention \
  tests/cpu/test_cpu_decode_int
meson test -C "$build" --no-rebuild --print-errorlogs cpu_formats cpu_quant_sweep cpu_attention \
  cpu_decode_int codegen_check codegen_names
