#!/usr/bin/env bash
# CI step for the HIP backend (issue 5): with hipcc (scripts/setup.sh --cross), build the
# backend for every AMD target of -Damd_archs, then read the kernels back out
# of the code objects and check that each kernel the manifest lists for HIP
# (default set) is there for each target, and that the attention kernels
# use the matrix cores where the target has them: f16/bf16 MFMA on gfx90a,
# those and FP8 MFMA on gfx940, none on gfx1030 (FMA path). No AMD GPU is
# needed or used.
set -euo pipefail
cd "$(dirname "$0")/../.."
# hipcc is installed once per machine by `scripts/setup.sh --cross`; CI never
# changes the host's packages. Without it the step says so and passes.
if ! command -v hipcc >/dev/null || [ ! -e /usr/include/hip/hip_runtime.h ]; then
  echo "hip: SKIPPED: hipcc/libamdhip64-dev not installed; run scripts/setup.sh --cross once" \
    "to compile the HIP backend here"
  exit 0
fi
ARCHS=${LPATTN_AMD_ARCHS:-gfx90a,gfx940,gfx1030}
BUILD=build-ci-hip
[ -d "$BUILD" ] || meson setup "$BUILD" -Dhip=enabled -Dcpu=disabled -Dbench=false \
  "-Damd_archs=$ARCHS" >/dev/null
ninja -C "$BUILD" -j2 >/dev/null

# clang-offload-bundler and llvm-readelf of the LLVM that hipcc drives.
llvm_bin=$(dirname "$(hipcc -print-prog-name=clang-offload-bundler 2>/dev/null)")
tool() {
  for d in "$llvm_bin" /opt/rocm/llvm/bin; do
    [ -x "$d/$1" ] && { echo "$d/$1"; return; }
  done
  command -v "$1" 2>/dev/null && return
  echo "hip: $1 not found" >&2
  return 1
}
BUNDLER=$(tool clang-offload-bundler)
READELF=$(tool llvm-readelf)
OBJDUMP=$(tool llvm-objdump)

# Each hipcc object carries a clang offload bundle (section .hip_fatbin) with
# one code object per target; a kernel is a symbol with a "<name>.kd"
# kernel descriptor next to it.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for obj in "$BUILD"/backends/hip/*.o; do
  rm -f "$work/fb"
  objcopy --dump-section .hip_fatbin="$work/fb" "$obj" "$work/copy.o" 2>/dev/null || true
  [ -s "$work/fb" ] || continue # the host glue has no device code
  ids=$("$BUNDLER" --list --type=o --input="$work/fb") || exit 1
  for id in $ids; do
    case $id in hip*-amdgcn-*) ;; *) continue ;; esac
    arch=${id##*--}
    arch=${arch%%:*}
    "$BUNDLER" --unbundle --type=o --input="$work/fb" --targets="$id" --output="$work/co" || exit 1
    "$READELF" --symbols "$work/co" | awk -v a="$arch" '$NF ~ /\.kd$/ {sub(/\.kd$/, "", $NF); print a, $NF}'
    case $obj in
      *_attn_*) # matrix instructions of this attention object on this target
        "$OBJDUMP" -d "$work/co" | awk -v a="$arch" -v o="$(basename "$obj")" '
          /v_mfma_f32_16x16x16_?f16/ { h++ } /v_mfma_f32_16x16x16_?bf16/ { b++ } /v_mfma_.*fp8/ { f++ }
          END { printf "%s %s %d %d %d\n", a, o, h, b, f }' >>"$work/mfma" ;;
    esac
  done
done >"$work/list" || { echo "hip: could not read the code objects"; exit 1; }
sort -u "$work/list" >"$work/have"

fail=0
for arch in ${ARCHS//,/ }; do
  n=$(awk -v a="$arch" '$1 == a' "$work/have" | wc -l)
  echo "hip: $arch: $n kernels: $(awk -v a="$arch" '$1 == a {printf "%s ", $2}' "$work/have")"
done
for k in $(python3 -c 'import sys; sys.path.insert(0, "codegen")
import manifest, names
print(" ".join(names.name(v) for v in manifest.variants("default", "hip")))'); do
  for arch in ${ARCHS//,/ }; do
    if ! grep -qx "$arch $k" "$work/have"; then
      echo "hip: MISSING $k for $arch"
      fail=1
    fi
  done
done
[ $fail -eq 0 ] && echo "hip: every manifest kernel is in the code objects of: $ARCHS"
while read -r arch obj h b f; do
  want_h=0
  case $obj in *_f16.o) want_h=1 ;; esac
  case $arch in
    # low tiles are bf16 (codes x group scale); high tiles the input type
    gfx90a) ok=$((b > 0 && (h > 0) == want_h)) ;;
    gfx94*) ok=$((b > 0 && (h > 0) == want_h && f > 0)) ;;
    gfx1*) ok=$((h + b + f == 0)) ;;
    *) ok=1 ;;
  esac
  printf 'hip: %s %-8s MFMA f16 %3d bf16 %3d fp8 %3d %s\n' "$([ $ok = 1 ] && echo ok || echo FAIL)" \
    "$arch" "$h" "$b" "$f" "$obj"
  [ $ok = 1 ] || fail=1
done <"$work/mfma"
exit $fail
