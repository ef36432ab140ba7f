"""Sliding window and logit softcap from Python (docs/SEMANTICS.md "Sliding
window and softcap"): attention, attention_backward and KVPool.decode on the
host backends against a NumPy float64 model."""
import unittest

import numpy as np

import lpattn
from common import rand, rel_err


def model(q, k, v, causal, window=None, softcap=None, dout=None):
    """O, LSE (and dq, dk, dv given dout) in float64 with FlashAttention's
    window_size rule (bottom-right) and s = cap * tanh(s / cap)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Hq, Sq, D = q.shape
    rep, Skv = Hq // k.shape[1], k.shape[2]
    K, V = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    u = np.einsum("bhqd,bhkd->bhqk", q, K) / np.sqrt(D)
    s = softcap * np.tanh(u / softcap) if softcap else u
    i, j = np.arange(Sq)[:, None] + Skv - Sq, np.arange(Skv)[None, :]
    seen = np.ones((Sq, Skv), bool)
    left, right = window or (-1, -1)
    if causal:
        seen &= j <= i
    if left is not None and left >= 0:
        seen &= j >= i - left
    if not causal and right is not None and right >= 0:
        seen &= j <= i + right
    s = np.where(seen, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    lse = np.log(p.sum(-1)) + m[..., 0]
    p /= p.sum(-1, keepdims=True)
    o = np.einsum("bhqk,bhkd->bhqd", p, V)
    if dout is None:
        return o, lse
    dout = np.asarray(dout, np.float64)
    dp = np.einsum("bhqd,bhkd->bhqk", dout, V)
    ds = p * (dp - (dout * o).sum(-1, keepdims=True))
    if softcap:
        ds *= 1 - np.tanh(u / softcap) ** 2
    ds /= np.sqrt(D)
    dq = np.einsum("bhqk,bhkd->bhqd", ds, K)
    fold = lambda x: x.reshape(B, k.shape[1], rep, *x.shape[2:]).sum(2)  # noqa: E731
    dk = fold(np.einsum("bhqk,bhqd->bhkd", ds, q))
    dv = fold(np.einsum("bhqk,bhqd->bhkd", p, dout))
    return o, lse, dq, dk, dv


CASES = [  # causal, window, softcap
    (True, (32, 0), None), (True, (100, -1), 4.0), (True, None, 2.0),
    (False, (20, 50), None), (False, (None, 30), 3.0), (True, (0, 0), None),
]


# the host backends this library has (a CUDA-only build has ref alone)
HOST = [b for b in ("ref", "cpu") if b in lpattn.available_backends()]


class Window(unittest.TestCase):
    def test_attention_and_backward_match_the_model(self):
        q, k, v = rand(1, 4, 150, 64, seed=1), rand(1, 2, 190, 64, seed=2), rand(1, 2, 190, 64, seed=3)
        dout = rand(1, 4, 150, 64, seed=4)
        for backend in HOST:
            for causal, window, cap in CASES:
                what = f"{backend} causal={causal} window={window} softcap={cap}"
                out, lse = lpattn.attention(q, k, v, causal=causal, window=window, softcap=cap,
                                            return_lse=True, backend=backend, block_q=32, block_k=32)
                mo, ml, mq, mk, mv = model(q, k, v, causal, window, cap, dout)
                self.assertLess(rel_err(out, mo), 2e-6, what)
                self.assertLess(np.abs(lse - ml).max(), 2e-5, what)
                dq, dk, dv = lpattn.attention_backward(q, k, v, out, lse, dout, causal=causal,
                                                       window=window, softcap=cap, backend=backend,
                                                       block_q=32, block_k=32)
                for got, want in ((dq, mq), (dk, mk), (dv, mv)):
                    if np.linalg.norm(want) < 1e-6:  # window (0, 0): dS = 0
                        self.assertLess(np.abs(got - want).max(), 1e-5, what)
                    else:
                        self.assertLess(rel_err(got, want), 2e-5, what)

    def test_low_precisions_keep_the_window(self):
        """Keys before every row's window change no row of any precision."""
        q, k, v = rand(1, 2, 256, 64, seed=5), rand(1, 2, 256, 64, seed=6), rand(1, 2, 256, 64, seed=7)
        k2, v2 = k.copy(), v.copy()
        k2[:, :, :60] *= -9.0
        v2[:, :, :60] = 40.0
        for prec in ("high", "fp8", "nvfp4", "mxfp4", "thrift"):
            a = lpattn.attention(q, k, v, causal=True, precision=prec, window=(128, 0), softcap=5.0,
                                 thrift_k=3)
            b = lpattn.attention(q, k2, v2, causal=True, precision=prec, window=(128, 0),
                                 softcap=5.0, thrift_k=3)
            np.testing.assert_array_equal(a[:, :, 60 + 128:], b[:, :, 60 + 128:], err_msg=prec)
            mo, _ = model(q, k, v, True, (128, 0), 5.0)
            self.assertLess(rel_err(a, mo), 0.2, prec)

    def test_pool_decode(self):
        H, D, T, n = 2, 64, 32, 150
        q, k, v = rand(1, H, n, D, seed=8), rand(1, H, n, D, seed=9), rand(1, H, n, D, seed=10)
        for prec, tol in (("high", 1e-5), ("thrift", 1e-5), ("nvfp4", 0.2)):
            pool = lpattn.KVPool(8, 1, H, H, D, page_size=T, high_dtype="float32", precision=prec)
            slots, table = np.array([0], np.int32), np.array([np.arange(8)], np.int32)
            pool.append(k[:, :, :n - 1], v[:, :, :n - 1], slots, np.array([0], np.int32), table,
                        q=q[:, :, :n - 1])
            pool.append(k[:, :, n - 1:], v[:, :, n - 1:], slots, np.array([n - 1], np.int32), table)
            out = pool.decode(q[:, :, n - 1:], slots, np.array([n], np.int32), table,
                              window=(70, 0), softcap=3.0, thrift_k=3)
            full = lpattn.attention(q, k, v, causal=True, precision=prec, window=(70, 0),
                                    softcap=3.0, block_q=T, block_k=T, thrift_k=3)
            mo, _ = model(q, k, v, True, (70, 0), 3.0)
            self.assertLess(rel_err(out[:, :, 0], full[:, :, -1]), tol, prec)
            self.assertLess(rel_err(out[:, :, 0], mo[:, :, -1]), 1e-5 if prec == "high" else 0.2,
                            prec)

    def test_varlen_and_plan(self):
        """attention_varlen applies the window per sequence; a plan keeps it."""
        lens = [70, 130]
        q, k, v = rand(200, 4, 64, seed=11), rand(200, 2, 64, seed=12), rand(200, 2, 64, seed=13)
        cu = np.array([0, 70, 200], np.int32)
        out = lpattn.attention_varlen(q, k, v, cu, cu, causal=True, window=(40, 0), softcap=2.5)
        for s0, n in zip(cu[:-1], lens):
            one = lambda x: np.ascontiguousarray(x[s0:s0 + n].transpose(1, 0, 2)[None])  # noqa: E731
            mo, _ = model(one(q), one(k), one(v), True, (40, 0), 2.5)
            self.assertLess(rel_err(out[s0:s0 + n].transpose(1, 0, 2)[None], mo), 2e-6)
        qq, kk, vv = rand(1, 2, 100, 64, seed=14), rand(1, 2, 100, 64, seed=15), rand(1, 2, 100, 64, seed=16)
        plan = lpattn.attention_plan(qq, kk, vv, causal=True, window=(30, 0), softcap=4.0)
        np.testing.assert_array_equal(plan.run(qq, kk, vv),
                                      lpattn.attention(qq, kk, vv, causal=True, window=(30, 0),
                                                       softcap=4.0))

    def test_torch_autograd(self):
        try:
            import torch
            import lpattn.torch as lt
        except ImportError:
            self.skipTest("torch is not installed")
        q, k, v = rand(1, 4, 96, 64, seed=17), rand(1, 2, 96, 64, seed=18), rand(1, 2, 96, 64, seed=19)
        dout = rand(1, 4, 96, 64, seed=20)
        tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
        out = lt.attention(tq, tk, tv, causal=True, window=(40, 0), softcap=3.0)
        out.backward(torch.tensor(dout))
        mo, _, mq, mk, mv = model(q, k, v, True, (40, 0), 3.0, dout)
        self.assertLess(rel_err(out.detach().numpy(), mo), 2e-6)
        for t, want in ((tq, mq), (tk, mk), (tv, mv)):
            self.assertLess(rel_err(t.grad.numpy(), want), 2e-5)

    def test_key_shards_merge_to_the_call(self):
        """Absolute positions: two key shards, merged, equal the single call."""
        q, k, v = rand(1, 2, 128, 64, seed=21), rand(1, 2, 256, 64, seed=22), rand(1, 2, 256, 64, seed=23)
        kw = dict(causal=True, window=(90, 0), softcap=3.0, return_lse=True)
        for backend in HOST:
            full, fl = lpattn.attention(q, k, v, backend=backend, **kw)
            a, b = (lpattn.attention(q, k[:, :, s:s + 128], v[:, :, s:s + 128], backend=backend,
                                     q_start=128, kv_start=s, **kw) for s in (0, 128))
            o, lse = lpattn.merge_states(a[0], a[1], b[0], b[1])
            self.assertLess(np.abs(o - full).max(), 2e-6, backend)
            self.assertLess(np.abs(lse - fl).max(), 2e-6, backend)

    def test_errors(self):
        q = rand(1, 2, 40, 64)
        with self.assertRaisesRegex(lpattn.LpattnError, "window_left"):
            lpattn.attention(q, q, q, window=(-3, 0))
        with self.assertRaisesRegex(lpattn.LpattnError, "softcap"):
            lpattn.attention(q, q, q, softcap=float("nan"))
        with self.assertRaisesRegex(lpattn.LpattnError, "PASA"):
            lpattn.attention(q, q, q, causal=True, pasa=True, window=(8, 0))
        with self.assertRaises(TypeError):
            lpattn.attention(q, q, q, window=16)


if __name__ == "__main__":
    unittest.main()
