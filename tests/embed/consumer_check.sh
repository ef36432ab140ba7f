#!/bin/sh
# Embedding check 1: a downstream meson project uses lpattn as a subproject.
# Copies tests/embed/consumer to a scratch directory, links this lpattn tree
# in as subprojects/lpattn, configures (forcing the subproject even if an
# installed lpattn exists), builds and runs the consumer.
# Needs: meson, ninja, a C and C++ compiler (libhwy-dev for the cpu backend).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/lpattn-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
cp -R "$root/tests/embed/consumer" "$work/consumer"
mkdir -p "$work/consumer/subprojects"
ln -s "$root" "$work/consumer/subprojects/lpattn"
meson setup "$work/build" "$work/consumer" --force-fallback-for=lpattn >"$work/setup.log" 2>&1 ||
  { cat "$work/setup.log"; exit 1; }
ninja -C "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/build/consumer"
# lpattn's tests and benchmarks are off by default in a subproject.
if grep -q "lpattn-bench\|test_api" "$work/build/build.ninja"; then
  echo "consumer_check: lpattn's tests or benchmarks were built as a subproject"; exit 1
fi
echo "consumer_check: ok"
