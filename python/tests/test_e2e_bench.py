"""bench/e2e_decode.py (issue 32 item 6) at its CPU smoke size: a 2-layer
random-weight Llama stack decodes with SDPA over a contiguous cache and with
lpattn pools; --check asserts the HIGH pool's first-step logits equal SDPA's
within the tolerance (same weights, context and token). Skipped without torch
or the cpu backend. A few seconds; not in a long suite.

    LPATTN_LIBRARY=build/liblpattn.so PYTHONPATH=python python3 python/tests/run.py test_e2e_bench"""
import os
import re
import subprocess
import sys
import unittest

import lpattn

try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "e2e_decode.py")
SMOKE = ["--device", "cpu", "--layers", "2", "--hidden", "256", "--heads", "4,2", "--mlp", "512",
         "--vocab", "1000", "--context", "256", "--batch", "2", "--steps", "4", "--check"]


def _skip():
    if torch is None:
        return "torch is not installed"
    if "cpu" not in lpattn.available_backends():
        return "lpattn's cpu backend is not built"
    if not os.path.exists(SCRIPT):
        return "bench/e2e_decode.py is not in this tree"
    return None


@unittest.skipIf(_skip() is not None, _skip() or "")
class E2eBenchTest(unittest.TestCase):
    def _run(self, *extra):
        env = dict(os.environ, LPATTN_LIBRARY=lpattn.library_path,
                   PYTHONPATH=os.pathsep.join([os.path.dirname(HERE)] + [
                       p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        r = subprocess.run([sys.executable, SCRIPT, *SMOKE, *extra], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        return r.stdout

    def _rows(self, out):
        return {m.group(1): m.group(0) for m in re.finditer(r"^\| 2 \| 256 \| (\w+) \|.*$", out, re.M)}

    def test_smoke_f16(self):
        out = self._run("--modes", "sdpa,high,fp8,nvfp4,fp8_static")
        rows = self._rows(out)
        # fp8_static: the host pools' static FP8 page format (SPEC 11) runs here
        self.assertEqual(sorted(rows), ["fp8", "fp8_static", "high", "nvfp4", "sdpa"], out)
        self.assertIn("high vs sdpa first-step logits", out)
        self.assertIn("fp8_static vs sdpa first-step logits", out)

    def test_check_f32(self):
        out = self._run("--modes", "sdpa,high", "--dtype", "float32")
        m = re.search(r"rel ([0-9.e+-]+), tol", out)
        self.assertIsNotNone(m, out)
        self.assertLess(float(m.group(1)), 1e-5)


if __name__ == "__main__":
    unittest.main()
