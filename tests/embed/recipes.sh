#!/usr/bin/env bash
# Runs the recipes of docs/vendoring.md as written: each ```sh block that follows a
# `<!-- recipe: NAME -->` line, in a fresh bash with `set -e`, HOME a scratch folder
# (the doc installs into $HOME/.local) and nothing else set; a block after
# `<!-- recipe: NAME file: F -->` is written to F in that recipe's folder first.
#   install     in a copy of this source tree (the files git knows of)
#   pkg-config  in app-pc/     with app.c (tests/embed/app.c)
#   cmake       in app-cmake/  with app.c
#   meson       in app-meson/  with app.c and subprojects/lpattn, a second copy
#   plain       in app-plain/  with app.c and third_party/lpattn -> the first copy
# Then checks that the subproject build used the copy without lpattn's tests or
# benchmarks, and that the plain build has the cpu backend where Highway is installed.
# Usage: tests/embed/recipes.sh [NAME ...] (default: all; install runs when a later one
# needs it). Needs meson, ninja, pkg-config, cmake (its recipe is skipped without it).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
doc=$root/docs/vendoring.md
work=$(mktemp -d "${TMPDIR:-/tmp}/lpattn-recipes.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(pkg-config cmake meson plain)

# The blocks, by recipe: $work/blocks/NAME.sh and $work/blocks/NAME.files/F.
mkdir -p "$work/blocks"
awk -v dir="$work/blocks" '
  /^<!-- recipe: / { name = $3; file = ($4 == "file:") ? $5 : ""; armed = 1; next }
  armed && /^```/ {
    if (inblock) { inblock = 0; armed = 0; close(out); next }
    inblock = 1
    if (file != "") { system("mkdir -p " dir "/" name ".files"); out = dir "/" name ".files/" file }
    else out = dir "/" name ".sh"
    next
  }
  inblock { print >> out }
' "$doc"
for n in install pkg-config cmake meson plain; do
  [ -s "$work/blocks/$n.sh" ] || { echo "recipes: docs/vendoring.md has no '$n' recipe"; exit 1; }
done

copy_tree() { # dest: the files git knows of (tracked or not ignored), else the whole tree
  mkdir -p "$1"
  if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$root" && git ls-files -z --cached --others --exclude-standard |
      xargs -0 sh -c 'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' sh |
      tar --null -T - -cf -) | tar -xf - -C "$1"
  else
    (cd "$root" && tar --exclude='./build*' --exclude='./.mesonpy-*' -cf - .) | tar -xf - -C "$1"
  fi
}
# The compiler cache stays where it was (it is no part of a recipe).
if command -v ccache >/dev/null && [ -z "${CCACHE_DIR:-}" ]; then
  CCACHE_DIR=$(ccache -k cache_dir 2>/dev/null || true)
  [ -n "$CCACHE_DIR" ] && export CCACHE_DIR
fi
export HOME=$work/home
mkdir -p "$HOME"
recipe() { # name folder
  local t0=$SECONDS
  if [ -d "$work/blocks/$1.files" ]; then cp "$work/blocks/$1.files"/* "$2/"; fi
  echo "--- recipe $1 (in ${2#$work/})"
  if ! (cd "$2" && bash -e "$work/blocks/$1.sh") >"$work/$1.log" 2>&1; then
    cat "$work/$1.log"; echo "recipes: '$1' FAILED as written in docs/vendoring.md"; exit 1
  fi
  grep -E "^lpattn |^cpu backend" "$work/$1.log" | sed 's/^/    /'
  echo "--- recipe $1: ok ($((SECONDS - t0)) s)"
}
app() { mkdir -p "$1" && cp "$root/tests/embed/app.c" "$1/app.c"; }

copy_tree "$work/src"
installed=0
for n in "${want[@]}"; do
  case $n in
  pkg-config | cmake | install)
    if [ $installed = 0 ]; then recipe install "$work/src"; installed=1; fi
    [ "$n" = install ] && continue
    if [ "$n" = cmake ] && ! command -v cmake >/dev/null; then
      echo "--- recipe cmake: SKIPPED (cmake not installed)"; continue
    fi
    dir=$work/app-$n
    [ "$n" = pkg-config ] && dir=$work/app-pc
    app "$dir"
    recipe "$n" "$dir"
    ;;
  meson)
    app "$work/app-meson"
    copy_tree "$work/app-meson/subprojects/lpattn"
    recipe meson "$work/app-meson"
    grep -q "subprojects/lpattn/core" "$work/app-meson/build/build.ninja" ||
      { echo "recipes: meson did not build subprojects/lpattn"; exit 1; }
    if grep -q "lpattn-bench\|test_api" "$work/app-meson/build/build.ninja"; then
      echo "recipes: lpattn's tests or benchmarks were built as a subproject"; exit 1
    fi
    ;;
  plain)
    app "$work/app-plain"
    mkdir -p "$work/app-plain/third_party"
    ln -s "$work/src" "$work/app-plain/third_party/lpattn"
    recipe plain "$work/app-plain"
    if pkg-config --exists libhwy && ! grep -q "^cpu backend: yes" "$work/plain.log"; then
      echo "recipes: the plain build has no cpu backend although Highway is installed"; exit 1
    fi
    ;;
  *) echo "recipes: no recipe '$n'"; exit 2 ;;
  esac
done
echo "recipes: ok (${want[*]})"
