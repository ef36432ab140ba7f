#!/usr/bin/env bash
# Embedding checks: every recipe of docs/vendoring.md as written (install into a
# scratch prefix, then pkg-config, CMake find_package; a meson subproject from a
# copied tree; plain cc/c++ without a build system), each running tests/embed/app.c.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tests/embed/recipes.sh
