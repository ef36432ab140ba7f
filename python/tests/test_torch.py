"""lpattn.torch: the torch.library ops on CPU tensors (and CUDA tensors when a
GPU and lpattn's cuda backend are there), torch.compile without graph breaks,
the backward stub and the SDPA drop-in. Skipped without torch."""
import unittest

import numpy as np

try:
    import torch
    import lpattn.torch as lt
except Exception:  # NumPy-only machines (or a torch that cannot load)
    torch = None

import lpattn
from common import reference

HAVE_CUDA = (torch is not None and torch.cuda.is_available()
             and "cuda" in lpattn.available_backends())


def rnd(*shape, seed=0, dtype=None, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device=device, dtype=dtype or torch.float32)


@unittest.skipIf(torch is None, "torch is not installed")
class TorchCPU(unittest.TestCase):
    def test_op_matches_numpy_path(self):
        q, k, v = rnd(1, 4, 96, 64, seed=1), rnd(1, 2, 96, 64, seed=2), rnd(1, 2, 96, 64, seed=3)
        out, lse = lt.attention(q, k, v, causal=True, precision="nvfp4", return_lse=True)
        self.assertIsInstance(out, torch.Tensor)
        np_out, np_lse = lpattn.attention(q.numpy(), k.numpy(), v.numpy(), causal=True,
                                          precision="nvfp4", return_lse=True)
        np.testing.assert_array_equal(out.numpy(), np_out)
        np.testing.assert_array_equal(lse.numpy(), np_lse)
        direct = lpattn.attention(q, k, v, causal=True)  # torch in, torch out
        self.assertIsInstance(direct, torch.Tensor)

    def test_bf16_and_layout(self):
        q, k, v = (rnd(2, 64, 4, 64, seed=s, dtype=torch.bfloat16) for s in (4, 5, 6))
        out = lt.attention(q, k, v, layout="bshd", precision="high")
        self.assertEqual(out.dtype, torch.bfloat16)
        self.assertEqual(out.shape, q.shape)
        want = torch.nn.functional.scaled_dot_product_attention(
            *(x.float().transpose(1, 2) for x in (q, k, v))).transpose(1, 2)
        self.assertLess((out.float() - want).abs().max().item(), 2e-2)

    def test_compile_fullgraph(self):
        q, k, v = rnd(1, 2, 64, 64, seed=7), rnd(1, 2, 128, 64, seed=8), rnd(1, 2, 128, 64, seed=9)

        def layer(q, k, v):
            o, lse = lt.attention(q * 2, k, v, causal=True, return_lse=True)
            qt = lt.quantize(o, "fp8")
            return lt.dequantize(qt) + lse[..., None]

        compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(q, k, v), layer(q, k, v), rtol=0, atol=0)
        explain = torch._dynamo.explain(layer)(q, k, v)
        self.assertEqual(explain.graph_break_count, 0)

    def test_compile_paged_decode(self):
        pool = lpattn.KVPool(4, 1, 2, 2, 64, like=torch.empty(0), high_dtype="float32",
                             precision="nvfp4")
        slots, table = torch.tensor([0], dtype=torch.int32), torch.tensor([[0, 1]], dtype=torch.int32)
        k, v = rnd(1, 2, 80, 64, seed=10), rnd(1, 2, 80, 64, seed=11)
        lt.kv_append(pool, k, v, slots, torch.tensor([0], dtype=torch.int32), table, 0)
        lens = torch.tensor([80], dtype=torch.int32)

        def step(q):
            return lt.paged_decode(pool, q, slots, lens, table, 80) * 2

        q = rnd(1, 2, 1, 64, seed=12)
        compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(q), step(q), rtol=0, atol=0)

    def test_backward_matches_torch(self):
        # HIGH: lpattn's gradients equal torch autograd through the f64 definition
        q, k, v = rnd(1, 4, 80, 64, seed=13), rnd(1, 2, 80, 64, seed=17), rnd(1, 2, 80, 64, seed=18)
        dout = rnd(1, 4, 80, 64, seed=19)
        qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
        lt.attention(qs, ks, vs, causal=True, precision="high").backward(dout)
        qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
        ref = torch.nn.functional.scaled_dot_product_attention(
            qd, kd.repeat_interleave(2, 1), vd.repeat_interleave(2, 1), is_causal=True)
        ref.backward(dout.double())
        for got, want in ((qs.grad, qd.grad), (ks.grad, kd.grad), (vs.grad, vd.grad)):
            err = (got.double() - want).norm() / want.norm()
            self.assertLess(err.item(), 1e-5)
        # gradcheck (f32, so loose tolerances) on a small problem
        small = [rnd(1, 1, 40, 16, seed=s).requires_grad_() for s in (20, 21, 22)]
        self.assertTrue(torch.autograd.gradcheck(
            lambda a, b, c: lt.attention(a, b, c, causal=True, precision="high"), small,
            eps=1e-2, atol=2e-2, rtol=2e-2, fast_mode=True))

    def test_backward_bshd_bf16_and_lse(self):
        # [B, S, H, D] bf16 tensors: the gradients are the bhsd ones, transposed;
        # return_lse=True still differentiates through out
        q, k, v = (rnd(1, 96, 2, 64, seed=s, dtype=torch.bfloat16) for s in (30, 31, 32))
        dout = rnd(1, 96, 2, 64, seed=33, dtype=torch.bfloat16)
        a = [t.clone().requires_grad_() for t in (q, k, v)]
        out, lse = lt.attention(*a, causal=True, precision="high", layout="bshd", return_lse=True)
        self.assertEqual(tuple(lse.shape), (1, 2, 96))  # [B, H, S] in both layouts, as FlashAttention
        out.backward(dout)
        b = [t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v)]
        lt.attention(*b, causal=True, precision="high").backward(dout.transpose(1, 2))
        for x, y in zip(a, b):
            self.assertEqual(x.grad.dtype, torch.bfloat16)
            torch.testing.assert_close(x.grad, y.grad.transpose(1, 2), rtol=0, atol=0)

    def test_backward_refuses_lse_gradient(self):
        q = rnd(1, 2, 64, 64, seed=26).requires_grad_()
        out, lse = lt.attention(q, q.detach(), q.detach(), causal=True, precision="high", return_lse=True)
        with self.assertRaisesRegex(NotImplementedError, "not of lse"):
            (out.sum() + lse.sum()).backward()

    def test_backward_low_precision(self):
        # NVFP4: stochastic rounding from torch's generator: reproducible under
        # torch.manual_seed, different across seeds, close to the HIGH gradient
        q, k, v = (rnd(1, 2, 128, 64, seed=s) for s in (23, 24, 25))
        grads = []
        for seed in (1, 1, 2):
            torch.manual_seed(seed)
            qs = q.clone().requires_grad_()
            lt.attention(qs, k, v, causal=True, precision="nvfp4").sum().backward()
            grads.append(qs.grad)
        torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
        self.assertFalse(torch.equal(grads[0], grads[2]))
        qh = q.clone().requires_grad_()
        lt.attention(qh, k, v, causal=True, precision="high").sum().backward()
        self.assertLess(((grads[0] - qh.grad).norm() / qh.grad.norm()).item(), 0.5)

    def test_sdpa_dropin(self):
        q, k, v = rnd(1, 4, 64, 64, seed=14), rnd(1, 2, 64, 64, seed=15), rnd(1, 2, 64, 64, seed=16)
        F = torch.nn.functional
        got = lt.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True,
                                              precision="high")
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
        mask = torch.ones(64, 64, dtype=torch.bool)
        self.assertIn("attn_mask", lt.sdpa_unsupported_reason(q, q, q, attn_mask=mask))
        torch.testing.assert_close(lt.scaled_dot_product_attention(q, q, q, attn_mask=mask),
                                   F.scaled_dot_product_attention(q, q, q, attn_mask=mask))
        with self.assertRaisesRegex(NotImplementedError, "is_causal with Sq != Skv"):
            lt.scaled_dot_product_attention(q[:, :, :32], q, q, is_causal=True, strict=True)
        self.assertIn("head dim 4 ", lt.sdpa_unsupported_reason(*(rnd(1, 1, 8, 4),) * 3))
        self.assertIsNone(lt.sdpa_unsupported_reason(*(rnd(1, 1, 8, 40),) * 3))
        self.assertIn("require grad", lt.sdpa_unsupported_reason(q.requires_grad_(), k, v))

    def test_error_from_op(self):
        q, k = rnd(1, 4, 64, 128), rnd(1, 2, 64, 64)
        with self.assertRaisesRegex(lpattn.LpattnError, r"k.shape\[3\] = 64 but q.shape\[3\] = 128"):
            lt.attention(q, k, k)


@unittest.skipUnless(HAVE_CUDA, "no CUDA device or lpattn built without cuda")
class TorchCUDA(unittest.TestCase):
    def test_attention_on_gpu(self):
        q, k, v = (rnd(2, 4, 256, 128, seed=s, dtype=torch.float16, device="cuda") for s in (20, 21, 22))
        for prec, tol in (("high", 2e-3), ("fp8", 0.05), ("nvfp4", 0.2)):
            out, lse = lt.attention(q, k, v, causal=True, precision=prec, return_lse=True)
            self.assertTrue(out.is_cuda and out.dtype == torch.float16)
            want, want_lse = reference(q.float().cpu().numpy(), k.float().cpu().numpy(),
                                       v.float().cpu().numpy(), True)
            err = np.linalg.norm(out.float().cpu().numpy() - want) / np.linalg.norm(want)
            self.assertLess(err, tol, prec)
            if prec == "high":
                np.testing.assert_allclose(lse.cpu().numpy(), want_lse, atol=1e-3)
            self.assertTrue(torch.isfinite(lse).all())
            cpu = lpattn.attention(q.cpu(), k.cpu(), v.cpu(), causal=True, precision=prec)
            diff = (out.cpu().float() - cpu.float()).norm() / cpu.float().norm()
            self.assertLess(diff.item(), 0.02, prec)  # GPU and CPU backends agree

    def test_current_stream(self):
        q, k, v = (rnd(1, 2, 128, 64, seed=s, dtype=torch.float16, device="cuda") for s in (23, 24, 25))
        ref = lt.attention(q, k, v, causal=True)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            out = lt.attention(q, k, v, causal=True)
        torch.cuda.current_stream().wait_stream(s)
        torch.testing.assert_close(out, ref, rtol=0, atol=0)

    def test_compile_inductor_on_gpu(self):
        q, k, v = (rnd(1, 4, 128, 64, seed=s, dtype=torch.bfloat16, device="cuda") for s in (26, 27, 28))

        def block(x, k, v):
            h = torch.nn.functional.gelu(x)
            return lt.scaled_dot_product_attention(h, k, v, is_causal=True) + x

        compiled = torch.compile(block, fullgraph=True)
        torch.testing.assert_close(compiled(q, k, v), block(q, k, v), rtol=2e-2, atol=2e-2)

    def test_paged_pool_on_gpu(self):
        H, D, n = 4, 128, 100
        pool = lpattn.KVPool(8, 2, H, H, D, like=torch.empty(0, device="cuda"), precision="nvfp4")
        self.assertTrue(pool.memory.is_cuda)
        k, v, q = (rnd(1, H, n + 1, D, seed=s, dtype=torch.float16, device="cuda") for s in (30, 31, 32))
        i32 = dict(dtype=torch.int32, device="cuda")
        slots, table = torch.tensor([0], **i32), torch.tensor([[0, 1, 2]], **i32)
        pool.append(k[:, :, :n], v[:, :, :n], slots, torch.tensor([0], **i32), table, max_length=0)
        pool.append(k[:, :, n:], v[:, :, n:], slots, torch.tensor([n], **i32), table, max_length=n)
        out = pool.decode(q[:, :, n:], slots, torch.tensor([n + 1], **i32), table, max_length=n + 1)
        full = lt.attention(q, k, v, causal=True, precision="nvfp4")
        self.assertLess((out[:, :, 0].float() - full[:, :, n].float()).abs().max().item(), 2e-2)


if __name__ == "__main__":
    unittest.main()
