#!/bin/sh
# Builds and runs scripts/plan_equiv.cc (host only: no GPU, no CUDA): the
# prefill and paged decode dispatch plans (backends/gpu/gpu_plan.h,
# gpu_decode_plan.h) against the decisions they replaced.
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
out=${TMPDIR:-/tmp}/plan_equiv.$$
mkdir -p "$out"
for f in quant error formats status; do
  cc -std=c11 -O1 -I"$here/include" -I"$here/core" -I"$here/backends/math" -c "$here/core/$f.c" -o "$out/$f.o"
done
c++ -std=c++17 -O1 -Wall -Wextra -I"$here/include" -I"$here/core" -I"$here/backends/gpu" -I"$here/backends/math" \
  "$here/scripts/plan_equiv.cc" "$out"/*.o -lm -o "$out/plan_equiv"
"$out/plan_equiv"
c++ -std=c++17 -O1 -Wall -Wextra -I"$here/include" -I"$here/core" -I"$here/backends/gpu" \
  "$here/scripts/decode_plan_equiv.cc" -o "$out/decode_plan_equiv"
"$out/decode_plan_equiv"
rm -rf "$out"
