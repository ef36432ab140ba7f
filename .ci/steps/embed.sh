#!/usr/bin/env bash
# Embedding checks: lpattn as a meson subproject, and a vendored build with a
# plain compiler command line (no meson, no Python).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tests/embed/consumer_check.sh
bash tests/embed/vendor_check.sh
