#!/usr/bin/env bash
# The Python package as a user gets it: the manylinux CPU wheel of
# scripts/wheel.sh (pip wheel + auditwheel repair; ref + cpu backends), installed
# in a fresh virtual environment, imports (with its C extension lpattn._fastcall)
# and runs attention with NumPy alone on the cpu backend, from outside the source tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d "${TMPDIR:-/tmp}/lpattn-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
if ! python3 -m venv "$work/venv" 2>"$work/venv.err"; then
  tail -5 "$work/venv.err"
  echo "wheel: python3 -m venv fails (scripts/setup.sh installs python3-venv; or the disk is full)"; exit 1
fi
bash scripts/wheel.sh cpu "$work/dist"
"$work/venv/bin/pip" install -q numpy
"$work/venv/bin/pip" install -q --no-deps "$work"/dist/lpattn-*manylinux*.whl
cd "$work"
env -u LPATTN_LIBRARY "$work/venv/bin/python" - <<'PY'
import numpy as np
import lpattn
assert "cpu" in lpattn.available_backends(), lpattn.available_backends()
x = np.random.default_rng(0).standard_normal((1, 2, 64, 64)).astype(np.float32)
out, lse = lpattn.attention(x, x, x, causal=True, precision="high", return_lse=True)
assert out.shape == x.shape and np.isfinite(out).all()
from lpattn import _fast
assert _fast.enabled(), "the wheel has no lpattn._fastcall (Python.h missing at build time?)"
print("wheel: lpattn", lpattn.__version__, "from", lpattn.library_path, lpattn.available_backends(),
      "with", _fast.mod.__name__)
PY
