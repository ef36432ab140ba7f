#!/usr/bin/env bash
# The Python package as a user installs it: `pip wheel .` (meson-python builds
# the library into the package; -Dcpu=disabled -Dcuda=disabled keep this step short, the
# test command already covers the cpu backend from Python), then the wheel in
# a fresh virtual environment imports and runs attention with NumPy alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d "${TMPDIR:-/tmp}/lpattn-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
python3 -m venv "$work/venv" 2>/dev/null || {
  apt-get install -y -qq python3-venv >/dev/null && python3 -m venv "$work/venv"; }
"$work/venv/bin/pip" install -q numpy
"$work/venv/bin/pip" wheel -q . --no-deps -w "$work/dist" -Csetup-args=-Dcpu=disabled \
  -Csetup-args=-Dcuda=disabled -Cbuild-dir="$work/build"
"$work/venv/bin/pip" install -q --no-deps "$work"/dist/lpattn-*.whl
cd "$work"
env -u LPATTN_LIBRARY "$work/venv/bin/python" - <<'PY'
import numpy as np
import lpattn
x = np.random.default_rng(0).standard_normal((1, 2, 64, 64)).astype(np.float32)
out, lse = lpattn.attention(x, x, x, causal=True, precision="high", return_lse=True)
assert out.shape == x.shape and np.isfinite(out).all()
print("wheel: lpattn", lpattn.__version__, "from", lpattn.library_path, lpattn.available_backends())
PY
