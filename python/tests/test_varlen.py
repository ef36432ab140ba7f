"""lpattn.attention_varlen (ragged batches, FlashAttention's cu_seqlens
convention) on the host backends, against a NumPy loop over the sequences:
the f64 reference per sequence, and lpattn.attention per sequence (bitwise)."""
import unittest

import numpy as np

import lpattn
from common import rand, reference, rel_err

# seq 1: no queries; seq 3: one decode row; seq 4: more queries than keys
LQ, LK = [5, 0, 70, 1, 90, 130], [5, 33, 100, 64, 40, 130]
HQ, HKV, D = 4, 2, 64


def cumsum(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def packed(seed):
    """q [total_q, HQ, D], k, v [total_k, HKV, D]"""
    return rand(sum(LQ), HQ, D, seed=seed), rand(sum(LK), HKV, D, seed=seed + 1), \
        rand(sum(LK), HKV, D, seed=seed + 2)


def exact(causal):
    """common.reference with SEMANTICS' fully masked rows: out 0, LSE -inf."""
    def fn(q, k, v):
        out, lse = reference(q, k, v, causal)
        dead = np.isnan(lse)
        return np.where(dead[..., None], 0.0, out), np.where(dead, -np.inf, lse)
    return fn


def per_sequence(fn, q, k, v, cq, ck):
    """fn(q_b, k_b, v_b) on each sequence's [1, H, S, D] slices, rows put back
    in packed order: (out [total_q, HQ, D], lse [HQ, total_q])."""
    out = np.full(q.shape, np.nan, np.float32)
    lse = np.full((HQ, q.shape[0]), np.nan, np.float32)
    for b in range(len(cq) - 1):
        if cq[b + 1] == cq[b]:
            continue
        sl = [x[a:e].transpose(1, 0, 2)[None] for x, a, e in
              ((q, cq[b], cq[b + 1]), (k, ck[b], ck[b + 1]), (v, ck[b], ck[b + 1]))]
        o, l = fn(*sl)
        out[cq[b]:cq[b + 1]] = o[0].transpose(1, 0, 2)
        lse[:, cq[b]:cq[b + 1]] = l[0]
    return out, lse


class Varlen(unittest.TestCase):
    backends = [b for b in ("ref", "cpu") if b in lpattn.available_backends()]

    def test_high_matches_reference(self):
        q, k, v = packed(1)
        cq, ck = cumsum(LQ), cumsum(LK)
        for causal in (False, True):
            out, lse = lpattn.attention_varlen(q, k, v, cq, ck, max(LQ), max(LK), causal=causal,
                                               return_lse=True)
            self.assertEqual(out.shape, q.shape)
            self.assertEqual(lse.shape, (HQ, sum(LQ)))
            want, want_lse = per_sequence(exact(causal), q, k, v, cq, ck)
            np.testing.assert_allclose(out, want, atol=2e-5)
            np.testing.assert_allclose(lse, want_lse, atol=2e-5)

    def test_equals_per_sequence_attention_bitwise(self):
        q, k, v = packed(4)
        cq, ck = cumsum(LQ), cumsum(LK)
        for backend in self.backends:
            for prec in ("high", "fp8", "nvfp4", "mxfp4", "thrift"):
                for causal in (False, True):
                    kw = dict(causal=causal, precision=prec, backend=backend)
                    out, lse = lpattn.attention_varlen(q, k, v, cq, ck, return_lse=True, **kw)
                    want, want_lse = per_sequence(
                        lambda a, b, c: lpattn.attention(a, b, c, return_lse=True, **kw),
                        q, k, v, cq, ck)
                    self.assertTrue(np.array_equal(out, want), (backend, prec, causal))
                    self.assertTrue(np.array_equal(lse, want_lse), (backend, prec, causal))
                    if prec != "high":
                        ref, _ = per_sequence(exact(causal), q, k, v, cq, ck)
                        self.assertLess(rel_err(out, ref), 0.25, (backend, prec, causal))

    def test_cu_seqlens_kinds(self):
        q, k, v = packed(7)
        want = lpattn.attention_varlen(q, k, v, cumsum(LQ), cumsum(LK), causal=True)
        for cq, ck in ((cumsum(LQ).astype(np.int64), cumsum(LK).astype(np.int64)),
                       (list(cumsum(LQ)), tuple(int(c) for c in cumsum(LK))),
                       (cumsum(LQ)[::-1].copy()[::-1], cumsum(LK))):  # strided view
            out = lpattn.attention_varlen(q, k, v, cq, ck, causal=True)
            self.assertTrue(np.array_equal(out, want))
        big = rand(sum(LQ), HQ, 2 * D, seed=9)[..., :D]  # strided q, written into a given out
        out = np.empty_like(q)
        res = lpattn.attention_varlen(big, k, v, cumsum(LQ), cumsum(LK), out=out)
        self.assertIs(res, out)
        want, _ = per_sequence(exact(False), big, k, v, cumsum(LQ), cumsum(LK))
        np.testing.assert_allclose(out, want, atol=2e-5)

    def test_bad_cu_seqlens(self):
        q, k, v = packed(10)
        cq, ck = cumsum(LQ), cumsum(LK)
        bad = cq.copy()
        bad[3] = bad[2] - 1
        with self.assertRaisesRegex(lpattn.LpattnError, "never decrease"):
            lpattn.attention_varlen(q, k, v, bad, ck)
        bad = cq.copy()
        bad[-1] -= 1
        with self.assertRaisesRegex(lpattn.LpattnError, "BAD_SHAPE.*cu_seqlens_q"):
            lpattn.attention_varlen(q, k, v, bad, ck)
        with self.assertRaisesRegex(lpattn.LpattnError, "entries"):
            lpattn.attention_varlen(q, k, v, cq, np.delete(ck, 1))
        with self.assertRaisesRegex(ValueError, "int32"):
            lpattn.attention_varlen(q, k, v, cq.astype(np.int64) + 2 ** 40, ck)
        with self.assertRaisesRegex(TypeError, "cu_seqlens_k"):
            lpattn.attention_varlen(q, k, v, cq, ck.astype(np.float32))
        with self.assertRaisesRegex(ValueError, "max_seqlen_q"):
            lpattn.attention_varlen(q, k, v, cq, ck, max_seqlen_q=100)
        with self.assertRaisesRegex(ValueError, r"3-D array \[total, H, D\]"):
            lpattn.attention_varlen(q[None], k, v, cq, ck)
        empty_k = ck.copy()
        empty_k[1] = empty_k[0]  # sequence 0 keeps its queries but loses its keys
        empty_k[2] = ck[2]
        with self.assertRaisesRegex(lpattn.LpattnError, "sequence 0 has 5 queries"):
            lpattn.attention_varlen(q, k, v, cq, empty_k)


class VarlenTorch(unittest.TestCase):
    def setUp(self):
        try:
            import torch  # noqa: F401
            import lpattn.torch  # noqa: F401
        except ImportError:
            self.skipTest("torch is not installed")

    def test_torch_op_and_int64_lengths(self):
        import torch
        import lpattn.torch as lt
        q, k, v = (torch.from_numpy(x) for x in packed(13))
        cq, ck = (torch.from_numpy(cumsum(x)).long() for x in (LQ, LK))
        out, lse = lt.attention_varlen(q, k, v, cq, ck, max(LQ), max(LK), causal=True,
                                       return_lse=True)
        want, want_lse = lpattn.attention_varlen(q.numpy(), k.numpy(), v.numpy(), cq.numpy(),
                                                 ck.numpy(), causal=True, return_lse=True)
        self.assertIsInstance(out, torch.Tensor)
        self.assertTrue(np.array_equal(out.numpy(), want))
        self.assertTrue(np.array_equal(lse.numpy(), want_lse))
        compiled = torch.compile(lambda *a: lt.attention_varlen(*a, causal=True), fullgraph=True,
                                 backend="aot_eager")
        self.assertTrue(torch.equal(compiled(q, k, v, cq, ck), out))

    def test_backward(self):
        import torch
        import lpattn.torch as lt
        from lpattn import _varlen
        cq, ck = cumsum(LQ), cumsum(LK)
        tq, tk = torch.from_numpy(cq), torch.from_numpy(ck)
        w = torch.from_numpy(rand(sum(LQ), HQ, D, seed=21))
        leaves = [torch.from_numpy(x).requires_grad_() for x in packed(19)]
        out = lt.attention_varlen(*leaves, tq, tk, causal=True)
        (out * w).sum().backward()
        got = [x.grad for x in leaves]
        # HIGH: bitwise the per-sequence lt.attention backward; close to torch's own in float64
        for x in leaves:
            x.grad = None
        for b in range(len(LQ)):
            if LQ[b]:
                sl = [x[a:e].transpose(0, 1)[None] for x, a, e in
                      ((leaves[0], cq[b], cq[b + 1]), (leaves[1], ck[b], ck[b + 1]),
                       (leaves[2], ck[b], ck[b + 1]))]
                o = lt.attention(*sl, causal=True)
                (o[0].transpose(0, 1) * w[cq[b]:cq[b + 1]]).sum().backward()
        for g, x, name in zip(got, leaves, "qkv"):
            self.assertTrue(torch.equal(g, x.grad), name)
        d64 = [x.detach().double().requires_grad_() for x in leaves]
        for b in range(len(LQ)):
            if LQ[b]:
                q_, k_, v_ = (x[a:e].transpose(0, 1) for x, a, e in
                              ((d64[0], cq[b], cq[b + 1]), (d64[1], ck[b], ck[b + 1]),
                               (d64[2], ck[b], ck[b + 1])))
                k_, v_ = (t.repeat_interleave(HQ // HKV, 0) for t in (k_, v_))
                s = q_ @ k_.transpose(1, 2) / D ** 0.5
                mask = torch.ones(s.shape[-2:], dtype=torch.bool).tril(s.shape[-1] - s.shape[-2])
                p_ = torch.softmax(s.masked_fill(~mask, float("-inf")), -1).nan_to_num()
                ((p_ @ v_).transpose(0, 1) * w[cq[b]:cq[b + 1]].double()).sum().backward()
        for g, x, name in zip(got, d64, "qkv"):
            torch.testing.assert_close(g.double(), x.grad, atol=2e-4, rtol=0, msg=name)
        # NVFP4 (stochastic rounding): sequence b is the per-sequence backward with its seed
        q, k, v = (x.detach() for x in leaves)
        out, lse = lt.attention_varlen(q, k, v, tq, tk, causal=True, precision="nvfp4",
                                       return_lse=True)
        grads = _varlen.attention_varlen_backward(q, k, v, out, lse, w, cq, ck, causal=True,
                                                  precision="nvfp4", seed=5)
        for b in range(len(LQ)):
            if LQ[b]:
                a, e, c, f = cq[b], cq[b + 1], ck[b], ck[b + 1]
                want = lpattn.attention_backward(q[a:e][None], k[c:f][None], v[c:f][None],
                                                 out[a:e][None], lse[:, a:e][None], w[a:e][None],
                                                 causal=True, precision="nvfp4", layout="bshd",
                                                 seed=_varlen._seq_seed(5, b))
                for g, x, sl in zip(grads, want, (slice(a, e), slice(c, f), slice(c, f))):
                    self.assertTrue(torch.equal(g[sl], x[0]), b)
            else:  # keys without queries: zero gradients
                self.assertFalse(grads[1][ck[b]:ck[b + 1]].any())


class VarlenCuda(unittest.TestCase):
    """On a GPU: device cu_seqlens (FlashAttention's habit) and host ones give
    the per-sequence lpattn.attention calls bitwise, GQA, every precision."""

    def setUp(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed")
        if not torch.cuda.is_available() or "cuda" not in lpattn.available_backends():
            self.skipTest("no CUDA device or lpattn cuda backend")

    def test_cuda_matches_per_sequence(self):
        import torch
        import lpattn.torch as lt
        q, k, v = (torch.from_numpy(x).to("cuda", torch.bfloat16) for x in packed(16))
        cq, ck = cumsum(LQ), cumsum(LK)
        for prec in ("high", "fp8", "nvfp4", "mxfp4", "thrift"):
            for causal in (False, True):
                kw = dict(causal=causal, precision=prec)
                out, lse = lt.attention_varlen(q, k, v, torch.from_numpy(cq).cuda(),
                                               torch.from_numpy(ck).cuda(), return_lse=True, **kw)
                host = lpattn.attention_varlen(q, k, v, cq, ck, **kw)
                self.assertTrue(torch.equal(out, host), (prec, causal))
                for b in range(len(LQ)):
                    if not LQ[b]:
                        continue
                    sl = [x[a:e].transpose(0, 1)[None] for x, a, e in
                          ((q, cq[b], cq[b + 1]), (k, ck[b], ck[b + 1]), (v, ck[b], ck[b + 1]))]
                    o, l = lpattn.attention(*sl, return_lse=True, **kw)
                    self.assertTrue(torch.equal(out[cq[b]:cq[b + 1]], o[0].transpose(0, 1)),
                                    (prec, causal, b))
                    self.assertTrue(torch.equal(lse[:, cq[b]:cq[b + 1]], l[0]), (prec, causal, b))
                if prec == "high":
                    ref = lpattn.attention_varlen(*(x.float().cpu().numpy() for x in (q, k, v)),
                                                  cq, ck, causal=causal)
                    err = (out.float().cpu() - torch.from_numpy(ref)).abs().max().item()
                    self.assertLess(err, 2e-2, causal)
                if prec in ("high", "nvfp4") and causal:  # backward: per-sequence, derived seeds
                    from lpattn import _varlen
                    dout = torch.randn_like(out)
                    grads = _varlen.attention_varlen_backward(q, k, v, out, lse, dout, cq, ck,
                                                              seed=9, **kw)
                    for b in range(len(LQ)):
                        if not LQ[b]:
                            continue
                        a, e, c, f = cq[b], cq[b + 1], ck[b], ck[b + 1]
                        want = lpattn.attention_backward(
                            q[a:e][None], k[c:f][None], v[c:f][None], out[a:e][None],
                            lse[:, a:e][None], dout[a:e][None], layout="bshd",
                            seed=_varlen._seq_seed(9, b), **kw)
                        for g, x, sl in zip(grads, want, (slice(a, e), slice(c, f), slice(c, f))):
                            self.assertTrue(torch.equal(g[sl], x[0]), (prec, b))


if __name__ == "__main__":
    unittest.main()
