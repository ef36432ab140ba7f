#!/usr/bin/env bash
# The CUDA attention objects must hold the machine code the backend claims:
# sm_120a code issues the block-scaled FP4 tensor-core MMA (OMMA in SASS) for
# NVFP4/MXFP4 tiles, sm_80/86/89/90a code the f16/bf16 mma.sync (HMMA) and no OMMA,
# and sm_90a code also the warpgroup MMA (HGMMA) of the HIGH prefill kernel (_wg);
# the backward objects (lpattn_cuda_bwd_*) HMMA on every arch.
# Usage: .ci/sass_check.sh [BUILD_DIR]   (exit 77 when cuobjdump is missing)
set -uo pipefail
build=${1:-build-cuda}
export PATH=$PATH:/usr/local/cuda/bin
if ! command -v cuobjdump >/dev/null 2>&1; then
  echo "sass_check: cuobjdump not found; skipped"
  exit 77
fi
mapfile -t objs < <(find "$build" -name '*lpattn_cuda_attn_*.cu.o' | sort)
if [ ${#objs[@]} -eq 0 ]; then
  echo "sass_check: no CUDA attention objects under $build"
  exit 1
fi
fail=0
seen120=0
for o in "${objs[@]}"; do
  # Count instructions per architecture section of the SASS dump.
  counts=$(cuobjdump --dump-sass "$o" | awk '
    /arch = sm_/ { arch = $3 }
    /OMMA/ { omma[arch]++ }
    /HMMA/ { hmma[arch]++ }
    /HGMMA/ { hgmma[arch]++ }
    END { for (a in hmma) print a, hmma[a] + 0, omma[a] + 0, hgmma[a] + 0
          for (a in omma) if (!(a in hmma)) print a, 0, omma[a], hgmma[a] + 0 }')
  [ -n "$counts" ] || { echo "FAIL $o: no SASS"; fail=1; continue; }
  while read -r arch hmma omma hgmma; do
    case $arch in
      sm_120a|sm_121a) ok=$((omma > 0)) ;;
      sm_90a) ok=$((hmma > 0 && omma == 0 && hgmma > 0)) ;;
      sm_80|sm_86|sm_89) ok=$((hmma > 0 && omma == 0)) ;;
      *) ok=1 ;;
    esac
    printf '%s %-8s HMMA %5d OMMA %4d HGMMA %4d %s\n' "$([ $ok = 1 ] && echo ok || echo FAIL)" "$arch" "$hmma" "$omma" "$hgmma" "$(basename "$o")"
    [ $ok = 1 ] || fail=1
    [ "$arch" = sm_120a ] && seen120=1
  done <<<"$counts"
done
# The backward kernels (f16/bf16 mma.sync on every arch, no FP4 path): HMMA.
while read -r o; do
  [ -n "$o" ] || continue
  while read -r arch hmma; do
    ok=$((hmma > 0))
    printf '%s %-8s HMMA %5d %s\n' "$([ $ok = 1 ] && echo ok || echo FAIL)" "$arch" "$hmma" "$(basename "$o")"
    [ $ok = 1 ] || fail=1
  done < <(cuobjdump --dump-sass "$o" | awk '/arch = sm_/ { arch = $3; n[arch] += 0 } /HMMA/ { n[arch]++ }
                                             END { for (a in n) print a, n[a] }')
done < <(find "$build" -name '*lpattn_cuda_bwd_*.cu.o' | sort)
if [ $seen120 = 0 ]; then
  echo "sass_check: no sm_120a code (configure with -Dnvidia_archs=90a,120a)"
  fail=1
fi
exit $fail
