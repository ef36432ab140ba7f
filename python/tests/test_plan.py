"""Decode plans on the host backends (KVPool.plan_decode, lpattn.h "decode
plans"): a run equals KVPool.decode bitwise, follows lengths and page tables
written in place, and refuses what does not fit the plan. The CUDA graph
tests are in test_plan_cuda.py."""
import unittest

import numpy as np

import lpattn
from common import rand

H, HQ, D, T = 2, 4, 64, 64


def _pool(precision="nvfp4", backend="auto"):
    return lpattn.KVPool(8, 2, H, HQ, D, precision=precision, high_dtype="float32",
                         backend=backend)


class PlanTest(unittest.TestCase):
    def setUp(self):
        self.pool = _pool()
        self.slots = np.array([0, 1], dtype=np.int32)
        self.table = np.array([[0, 1, 2, 3], [4, 5, 6, 7]], dtype=np.int32)
        k, v = rand(2, H, 100, D, seed=1), rand(2, H, 100, D, seed=2)
        self.pool.append(k, v, self.slots, np.zeros(2, np.int32), self.table, max_length=0)
        self.k, self.v = k, v

    def test_run_equals_decode(self):
        lens = np.array([100, 100], dtype=np.int32)
        q = rand(2, HQ, 1, D, seed=3)
        want, lse = self.pool.decode(q, self.slots, lens, self.table, max_length=100, return_lse=True)
        plan = self.pool.plan_decode(q, self.slots, lens, self.table, max_length=256,
                                     return_lse=True)
        got, glse = plan.run()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(glse, lse)
        q2 = rand(2, HQ, 1, D, seed=4)
        out2 = np.empty_like(q2)
        got2, _ = plan.run(q2, out2)
        self.assertIs(got2, out2)
        np.testing.assert_array_equal(got2, self.pool.decode(q2, self.slots, lens, self.table,
                                                             max_length=100))
        plan.close()

    def test_lengths_and_table_in_place(self):
        lens = np.array([100, 100], dtype=np.int32)
        q = rand(2, HQ, 1, D, seed=5)
        out = np.empty_like(q)
        plan = self.pool.plan_decode(q, self.slots, lens, self.table, max_length=200, out=out)
        for step in range(3):  # append a token, then decode it with the same plan
            k1, v1 = rand(2, H, 1, D, seed=10 + step), rand(2, H, 1, D, seed=20 + step)
            self.pool.append(k1, v1, self.slots, lens, self.table, max_length=200)
            lens += 1
            q[...] = rand(2, HQ, 1, D, seed=30 + step)
            got = plan.run(q, out)
            want = self.pool.decode(q, self.slots, lens, self.table, max_length=200)
            np.testing.assert_array_equal(got, want)
        # new slots and table rows, written in place: the sequences swap places
        self.slots[...] = [1, 0]
        self.table[[0, 1]] = self.table[[1, 0]]
        got = plan.run(q, out).copy()
        want = self.pool.decode(q, self.slots, lens, self.table, max_length=200)
        np.testing.assert_array_equal(got, want)

    def test_bad_input(self):
        lens = np.array([100, 100], dtype=np.int32)
        q = rand(2, HQ, 1, D, seed=6)
        plan = self.pool.plan_decode(q, self.slots, lens, self.table, max_length=100)
        lens[0] = 101  # beyond the plan's max_length: checked at the run, nothing written
        out = np.full_like(q, 7.0)
        with self.assertRaisesRegex(lpattn.LpattnError, "max_length"):
            plan.run(q, out)
        self.assertTrue((out == 7.0).all())
        lens[0] = 100
        with self.assertRaisesRegex(ValueError, "the plan was made for"):
            plan.run(rand(2, HQ, 2, D, seed=7))
        with self.assertRaisesRegex(ValueError, "the plan was made for"):
            plan.run(q.astype(np.float16))
        with self.assertRaisesRegex(TypeError, "int64"):
            self.pool.plan_decode(q, self.slots, lens.astype(np.int64), self.table, max_length=100)
        with self.assertRaisesRegex(ValueError, "max_length is required"):
            self.pool.plan_decode(q, self.slots, lens, self.table, max_length=None)
        with self.assertRaisesRegex(lpattn.LpattnError, "BAD_SHAPE"):
            self.pool.plan_decode(rand(2, HQ, 1, 32), self.slots, lens, self.table, max_length=100)
        self.pool.close()
        with self.assertRaisesRegex(ValueError, "KVPool was closed"):
            plan.run(q, out)
        plan.close()
        with self.assertRaisesRegex(ValueError, "plan is closed"):
            plan.run(q, out)

    def test_every_precision_and_backend(self):
        for backend in lpattn.available_backends():
            if backend not in ("ref", "cpu"):
                continue
            for prec in ("high", "fp8", "nvfp4", "mxfp4", "thrift"):
                pool = _pool(prec, backend)
                pool.append(self.k, self.v, self.slots, np.zeros(2, np.int32), self.table,
                            q=rand(2, HQ, 100, D, seed=8), max_length=0)
                lens = np.array([100, 100], dtype=np.int32)
                q = rand(2, HQ, 3, D, seed=9)
                plan = pool.plan_decode(q, self.slots, lens, self.table, max_length=100,
                                        return_entropy=True)
                got, ent = plan.run()
                want, went = pool.decode(q, self.slots, lens, self.table, max_length=100,
                                         return_entropy=True)
                np.testing.assert_array_equal(got, want, err_msg=f"{backend} {prec}")
                np.testing.assert_array_equal(ent, went, err_msg=f"{backend} {prec}")


class AttentionPlanTest(unittest.TestCase):
    def test_run_equals_attention(self):
        for prec in ("high", "nvfp4"):
            q, k, v = rand(1, HQ, 80, D, seed=1), rand(1, H, 80, D, seed=2), rand(1, H, 80, D, seed=3)
            out = np.empty_like(q)
            plan = lpattn.attention_plan(q, k, v, causal=True, precision=prec, out=out, return_lse=True)
            for i in range(3):
                q[...], k[...] = rand(1, HQ, 80, D, seed=10 + i), rand(1, H, 80, D, seed=20 + i)
                v2 = rand(1, H, 80, D, seed=30 + i)
                got, lse = plan.run(q, k, v2, out)
                want, wlse = lpattn.attention(q, k, v2, causal=True, precision=prec, return_lse=True)
                np.testing.assert_array_equal(got, want, err_msg=prec)
                np.testing.assert_array_equal(lse, wlse, err_msg=prec)
            with self.assertRaisesRegex(ValueError, "the plan was made for"):
                plan.run(q, k[:, :, :40])
            plan.close()
        with self.assertRaisesRegex(lpattn.LpattnError, "BAD_GQA"):
            lpattn.attention_plan(rand(1, 3, 8, D), rand(1, 2, 8, D), rand(1, 2, 8, D))

    def test_bshd_layout(self):
        q, k, v = rand(2, 50, HQ, D, seed=4), rand(2, 70, H, D, seed=5), rand(2, 70, H, D, seed=6)
        plan = lpattn.attention_plan(q, k, v, layout="bshd", causal=True)
        np.testing.assert_array_equal(plan.run(), lpattn.attention(q, k, v, layout="bshd",
                                                                   causal=True))


class TorchHostPlanTest(unittest.TestCase):
    def setUp(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed")
        self.torch = torch

    def test_torch_cpu(self):
        torch = self.torch
        pool = lpattn.KVPool(8, 2, H, HQ, D, precision="fp8", like=torch.empty(0),
                             high_dtype="float32")
        i32 = dict(dtype=torch.int32)
        slots, table = torch.tensor([0, 1], **i32), torch.arange(8, **i32).view(2, 4)
        k, v = torch.randn(2, H, 70, D), torch.randn(2, H, 70, D)
        pool.append(k, v, slots, torch.zeros(2, **i32), table, max_length=0)
        lens = torch.tensor([70, 70], **i32)
        q, out = torch.randn(2, HQ, 1, D), torch.empty(2, HQ, 1, D)
        plan = pool.plan_decode(q, slots, lens, table, max_length=128, out=out)
        for i in range(2):
            q.copy_(torch.randn(2, HQ, 1, D))
            self.assertIs(plan.run(q, out), out)
            torch.testing.assert_close(out, pool.decode(q, slots, lens, table, max_length=128),
                                       rtol=0, atol=0)
        with self.assertRaisesRegex(ValueError, "the plan was made for"):
            plan.run(torch.randn(2, HQ, 1, 2 * D)[..., :D], out)  # other strides


if __name__ == "__main__":
    unittest.main()
