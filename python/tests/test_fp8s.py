"""Static-scale FP8 (SPEC 11, precision "fp8_static") through Python on the
host backends: ref against an independent NumPy/f64 model of SPEC 11 (codes
by ml_dtypes, not by lpattn), E4M3 inputs (NumPy ml_dtypes, torch
float8_e4m3fn) equal to the 16-bit inputs the call casts, descales as
numbers or arrays, and bad descales rejected."""
import math
import unittest

import numpy as np

import lpattn
from common import rand, rel_err

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None
try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def e4m3(x):
    """E4M3 (fn) values of x: round to nearest even, saturating at +-448 (ml_dtypes)."""
    x = np.clip(np.asarray(x, dtype=np.float32), -448.0, 448.0)  # NaN stays NaN
    return x.astype(ml_dtypes.float8_e4m3fn)


def model(q, k, v, qd, kd, vd, causal, bk=64):
    """SPEC 11 in f64: codes of x / descale, S = (Q^ . K^T) qd kd sm_scale,
    online softmax over KV tiles of bk keys, P^ = E4M3(448 P) (P in f32),
    O = (P^ . V^) vd / 448 / l, l the sum of the unquantized P."""
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    sm = float(np.float32(1.0 / math.sqrt(D)))
    out = np.zeros(q.shape)
    lse = np.zeros((B, Hq, Sq))
    for b in range(B):
        for h in range(Hq):
            hk = h // G
            cq = e4m3(q[b, h] / qd[b, hk]).astype(np.float64)
            ck = e4m3(k[b, hk] / kd[b, hk]).astype(np.float64)
            cv = e4m3(v[b, hk] / vd[b, hk]).astype(np.float64)
            s = cq @ ck.T * float(qd[b, hk]) * float(kd[b, hk]) * sm
            for i in range(Sq):
                n = min(i + Skv - Sq + 1, Skv) if causal else Skv
                m, l, acc = -np.inf, 0.0, np.zeros(D)
                for j0 in range(0, n, bk):
                    sj = s[i, j0:min(j0 + bk, n)]
                    mx = max(m, sj.max())
                    a = math.exp(m - mx) if m > -np.inf else 0.0
                    p = np.exp(sj - mx)
                    ph = e4m3(p.astype(np.float32) * np.float32(448.0)).astype(np.float64)
                    l = a * l + p.sum()
                    acc = a * acc + ph @ cv[j0:j0 + len(sj)]
                    m = mx
                if n > 0:
                    out[b, h, i] = acc * float(vd[b, hk]) / 448.0 / l
                lse[b, h, i] = m + math.log(l) if n > 0 else -np.inf
    return out, lse


def descales(B, Hkv, seed, base):
    return (np.random.default_rng(seed).uniform(1.0, 2.0, (B, Hkv)) * base / 448.0).astype(np.float32)


@unittest.skipIf(ml_dtypes is None, "ml_dtypes is not installed")
class StaticFP8(unittest.TestCase):
    def setUp(self):
        self.q, self.k, self.v = rand(2, 4, 90, 64, seed=1), rand(2, 2, 130, 64, seed=2), rand(2, 2, 130, 64, seed=3)
        self.qd, self.kd, self.vd = descales(2, 2, 4, 4.0), descales(2, 2, 5, 4.0), descales(2, 2, 6, 3.0)

    def call(self, q, k, v, **kw):
        kw.setdefault("backend", "ref")
        return lpattn.attention(q, k, v, q_descale=self.qd, k_descale=self.kd, v_descale=self.vd, **kw)

    def test_ref_matches_numpy_model(self):
        for causal in (False, True):
            out, lse = self.call(self.q, self.k, self.v, causal=causal, return_lse=True)
            want, want_lse = model(self.q, self.k, self.v, self.qd, self.kd, self.vd, causal)
            self.assertLess(rel_err(out, want), 1e-6, causal)
            np.testing.assert_allclose(lse, want_lse, atol=1e-5)

    def test_e4m3_inputs_equal_cast_inputs(self):
        def codes(x, d, G):
            return e4m3(x / np.repeat(d, G, axis=1)[:, :, None, None])
        q8, k8, v8 = codes(self.q, self.qd, 2), codes(self.k, self.kd, 1), codes(self.v, self.vd, 1)
        for backend in ("ref", "cpu") if "cpu" in lpattn.available_backends() else ("ref",):
            want = self.call(self.q, self.k, self.v, causal=True, backend=backend)
            self.assertEqual(want.dtype, np.float32)
            got = self.call(q8, k8, v8, causal=True, backend=backend)  # implies fp8_static
            self.assertEqual(got.dtype.name, "bfloat16")  # E4M3 inputs: bf16 out (FA3)
            out = np.empty_like(want)
            self.call(q8, k8, v8, causal=True, backend=backend, out=out)
            np.testing.assert_array_equal(out, want)
            np.testing.assert_array_equal(got.astype(np.float32), want.astype(ml_dtypes.bfloat16).astype(np.float32))

    def test_descale_forms(self):
        # one number for every (b, kv head) equals the same value as an array
        a = lpattn.attention(self.q, self.k, self.v, q_descale=0.01, k_descale=0.02, v_descale=0.005,
                             backend="ref")
        full = lambda x: np.full((2, 2), x, np.float32)  # noqa: E731
        b = lpattn.attention(self.q, self.k, self.v, q_descale=full(0.01), k_descale=full(0.02),
                             v_descale=full(0.005), backend="ref")
        np.testing.assert_array_equal(a, b)
        # no descale: 1.0, explicit precision
        c = lpattn.attention(self.q, self.k, self.v, precision="fp8_static", backend="ref")
        d = lpattn.attention(self.q, self.k, self.v, q_descale=1.0, backend="ref")
        np.testing.assert_array_equal(c, d)
        # a transposed (strided) [B, Hkv] view
        e = self.call(self.q, self.k, self.v)
        f = lpattn.attention(self.q, self.k, self.v, q_descale=np.ascontiguousarray(self.qd.T).T,
                             k_descale=self.kd, v_descale=self.vd, backend="ref")
        np.testing.assert_array_equal(e, f)

    def test_bad_descales(self):
        for bad in (0.0, -1.0, math.nan, math.inf):
            with self.assertRaises(ValueError):
                lpattn.attention(self.q, self.k, self.v, k_descale=bad, backend="ref")
            arr = self.kd.copy()
            arr[1, 0] = bad
            with self.assertRaisesRegex(ValueError, r"k_descale\[1, 0\]"):
                lpattn.attention(self.q, self.k, self.v, k_descale=arr, backend="ref")
        with self.assertRaises(lpattn.LpattnError) as cm:  # [B, Hkv + 1]
            lpattn.attention(self.q, self.k, self.v, v_descale=np.ones((2, 3), np.float32), backend="ref")
        self.assertEqual(cm.exception.status_name, "BAD_SHAPE")
        with self.assertRaises(lpattn.LpattnError) as cm:  # descales need fp8_static
            lpattn.attention(self.q, self.k, self.v, precision="fp8", q_descale=0.5, backend="ref")
        self.assertEqual(cm.exception.status_name, "INVALID_ARGUMENT")
        q8 = e4m3(self.q)
        with self.assertRaises(lpattn.LpattnError) as cm:  # E4M3 inputs need fp8_static
            lpattn.attention(q8, e4m3(self.k), e4m3(self.v), precision="high", backend="ref")
        self.assertEqual(cm.exception.status_name, "BAD_DTYPE")

    @unittest.skipIf(torch is None or not hasattr(torch, "float8_e4m3fn"), "torch with float8 is not installed")
    def test_torch_float8(self):
        tq, tk, tv = (torch.from_numpy(x) for x in (self.q, self.k, self.v))
        qd, kd, vd = (torch.from_numpy(x) for x in (self.qd, self.kd, self.vd))
        G = torch.tensor([2, 1, 1])
        q8, k8, v8 = ((x / d.repeat_interleave(int(g), 1)[:, :, None, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
                      for x, d, g in zip((tq, tk, tv), (qd, kd, vd), G))
        for backend in ("ref", "cpu") if "cpu" in lpattn.available_backends() else ("ref",):
            want = lpattn.attention(tq, tk, tv, causal=True, q_descale=qd, k_descale=kd, v_descale=vd,
                                    backend=backend)
            got = lpattn.attention(q8, k8, v8, causal=True, q_descale=qd, k_descale=kd, v_descale=vd,
                                   backend=backend)
            self.assertEqual(got.dtype, torch.bfloat16)
            self.assertTrue(torch.equal(got, want.to(torch.bfloat16)), backend)


if __name__ == "__main__":
    unittest.main()
