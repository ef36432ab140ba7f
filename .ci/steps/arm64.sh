#!/usr/bin/env bash
# aarch64 cross build; the CPU backend's tests run under qemu (NEON/SVE).
exec bash "$(dirname "$0")/../arm64.sh" build-ci-arm
