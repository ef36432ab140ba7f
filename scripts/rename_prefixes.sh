#!/usr/bin/env bash
# Issue 10 item 4: the old helper prefixes become names that say where the
# code belongs. Mechanical and idempotent (run it again after merging a
# branch that still uses the old names; a tree without them is left as is):
#   lpc_  -> gpu_   GPU kernels and host glue (inside the lpattn_cuda /
#                   lpattn_hip namespaces): templates/gpu, backends/gpu
#   LPC_  -> GPU_   GPU macros and constants (LPC_BQ, LPC_ASYNC, ...)
#   LPG_  -> GPU_   GPU host-glue macros (LPG_NS, LPG_NAME, ...)
#   lpk_  -> cpu_   the CPU kernels' expansion of templates/common
# Every text file git tracks (or would track) outside gen/ is rewritten with
#   sed -E 's/\blpc_/gpu_/g; s/\bLP[CG]_/GPU_/g; s/\blpk_/cpu_/g'
# then gen/ is re-rendered (codegen/render.py). A new name that already
# exists with a different meaning would merge two identifiers: such names
# are listed first (a warning; after a partial merge the same identifier can
# legitimately stand in both spellings).
set -euo pipefail
cd "$(dirname "$0")/.."
self=scripts/rename_prefixes.sh
mapfile -t files < <(git ls-files -co --exclude-standard | grep -v -e '/gen/' -e "^$self\$" |
  while read -r f; do [ -f "$f" ] && grep -lIE '\b(lpc|lpk|LPC|LPG)_' "$f" || true; done)
if [ ${#files[@]} -eq 0 ]; then
  echo "rename_prefixes: no old prefix left; nothing to do"
  exit 0
fi
suffixes() { # identifiers of prefix $1 over the tree, without the prefix
  git ls-files -co --exclude-standard | grep -v -e '/gen/' -e "^$self\$" |
    while read -r f; do [ -f "$f" ] && grep -ohIE "\\b$1[A-Za-z0-9_]*" "$f" || true; done |
    sed -E "s/^$1//" | sort -u
}
for pair in "lpc_ gpu_" "LPC_ GPU_" "LPG_ GPU_" "LPC_ LPG_" "lpk_ cpu_"; do
  set -- $pair
  both=$(comm -12 <(suffixes "$1") <(suffixes "$2") | grep . || true)
  [ -z "$both" ] || echo "rename_prefixes: warning: $1X and $2X both exist for X in:" $both
done
sed -i -E 's/\blpc_/gpu_/g; s/\bLP[CG]_/GPU_/g; s/\blpk_/cpu_/g' "${files[@]}"
echo "rename_prefixes: rewrote ${#files[@]} files"
python3 codegen/render.py
