"""CUDA graphs from Python (issue 32 item 2): KVPool.append, KVPool.decode,
DecodePlan.run, lpattn.attention and AttentionPlan.run captured in torch.cuda.graph (default
capture mode); replays follow lengths, page tables and queries written in
place and equal eager calls on a twin pool bitwise. Skipped without a CUDA
device (or a library built without the CUDA backend).

    LPATTN_LIBRARY=build/liblpattn.so PYTHONPATH=python python3 python/tests/run.py test_plan_cuda"""
import unittest

import lpattn
from lpattn import attention_plan

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

from common import cuda_skip_reason  # noqa: E402

HKV, HQ, D, PAGES, MAXLEN = 2, 8, 128, 24, 1024


def _skip():
    return cuda_skip_reason(torch)


@unittest.skipIf(_skip() is not None, _skip() or "")
class CudaGraphTest(unittest.TestCase):
    def _pool(self, precision):
        return lpattn.KVPool(PAGES, 2, HKV, HQ, D, precision=precision,
                             like=torch.empty(0, device="cuda"))

    def _check_precision(self, precision):
        torch.manual_seed(0)
        i32 = dict(dtype=torch.int32, device="cuda")
        f16 = dict(dtype=torch.float16, device="cuda")
        pools = [self._pool(precision), self._pool(precision)]  # graph, eager
        n0 = 126  # the steps cross into page 2 at token 128
        k0, v0 = torch.randn(2, HKV, n0, D, **f16), torch.randn(2, HKV, n0, D, **f16)
        q0 = torch.randn(2, HQ, n0, D, **f16)
        # per pool: slots, lengths before an append, lengths after it, page table
        st = []
        for pool in pools:
            slots = torch.tensor([0, 1], **i32)
            table = torch.arange(16, **i32).view(2, 8).contiguous()
            pool.append(k0, v0, slots, torch.zeros(2, **i32), table, q=q0, max_length=0)
            st.append((slots, torch.full((2,), n0, **i32), torch.full((2,), n0 + 1, **i32), table))
        # static inputs of the step
        k1, v1, q1 = (torch.empty(2, h, 1, D, **f16) for h in (HKV, HKV, HQ))
        qa, ka, va = (torch.empty(1, h, 192, D, **f16) for h in (HQ, HKV, HKV))
        for t in (k1, v1, q1, qa, ka, va):
            t.normal_()
        slots, lens_app, lens_dec, table = st[0]
        out_plan, out_dec, out_att = (torch.empty_like(q1), torch.empty_like(q1),
                                      torch.empty_like(qa))
        plan = pools[0].plan_decode(q1, slots, lens_dec, table, max_length=MAXLEN, out=out_plan)
        out_aplan = torch.empty_like(qa)
        aplan = attention_plan(qa, ka, va, causal=True, precision=precision, out=out_aplan)

        def step():
            pools[0].append(k1, v1, slots, lens_app, table, q=q1, max_length=MAXLEN)
            torch.add(lens_app, 1, out=lens_dec)
            plan.run(q1, out_plan)
            pools[0].decode(q1, slots, lens_dec, table, max_length=MAXLEN, out=out_dec)
            lpattn.attention(qa, ka, va, causal=True, precision=precision, out=out_att)
            aplan.run(qa, ka, va, out_aplan)

        # warm up on a side stream (torch's recipe): the attention workspace and the
        # launch attributes; no append (it would add a token)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            plan.run(q1, out_plan)
            pools[0].decode(q1, slots, lens_dec, table, max_length=MAXLEN, out=out_dec)
            lpattn.attention(qa, ka, va, causal=True, precision=precision, out=out_att)
            aplan.run(qa, ka, va, out_aplan)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # default capture mode ("global")
            step()
        e_slots, e_app, e_dec, e_table = st[1]
        for i in range(6):
            for t in (k1, v1, q1, qa, ka, va):  # new contents, in place
                t.normal_()
            if i == 1:  # new page ids for the page the next tokens open (in place)
                table[:, 2] = torch.tensor([20, 21], **i32)
                e_table[:, 2] = torch.tensor([20, 21], **i32)
            graph.replay()
            pools[1].append(k1, v1, e_slots, e_app, e_table, q=q1, max_length=MAXLEN)
            e_dec.copy_(e_app + 1)
            want = pools[1].decode(q1, e_slots, e_dec, e_table, max_length=MAXLEN)
            want_att = lpattn.attention(qa, ka, va, causal=True, precision=precision)
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(out_plan, want), f"{precision} step {i}: plan.run")
            self.assertTrue(torch.equal(out_dec, want), f"{precision} step {i}: decode")
            self.assertTrue(torch.equal(out_att, want_att), f"{precision} step {i}: attention")
            self.assertTrue(torch.equal(out_aplan, want_att), f"{precision} step {i}: attention plan")
            self.assertEqual(lens_dec.tolist(), [n0 + i + 1] * 2)
            lens_app.add_(1)  # the next step's lengths, in place
            e_app.add_(1)
        # the graph's pool equals the eager one: a decode of each after the steps
        qx = torch.randn(2, HQ, 1, D, **f16)
        a = pools[0].decode(qx, slots, lens_app, table, max_length=MAXLEN)
        b = pools[1].decode(qx, e_slots, e_app, e_table, max_length=MAXLEN)
        self.assertTrue(torch.equal(a, b), precision)

    def test_high(self):
        self._check_precision("high")

    def test_nvfp4(self):
        self._check_precision("nvfp4")

    def test_fp8(self):
        self._check_precision("fp8")

    def test_plan_equals_decode_eager(self):
        # plan/run outside a graph on the current (non-default) stream
        i32 = dict(dtype=torch.int32, device="cuda")
        k, v = (torch.randn(3, HKV, 300, D, dtype=torch.bfloat16, device="cuda") for _ in range(2))
        pool = lpattn.KVPool(PAGES, 3, HKV, HQ, D, precision="nvfp4", high_dtype="bfloat16",
                             like=torch.empty(0, device="cuda"))
        slots, table = torch.tensor([0, 1, 2], **i32), torch.arange(15, **i32).view(3, 5)
        pool.append(k, v, slots, torch.zeros(3, **i32), table, max_length=0)
        lens = torch.full((3,), 300, **i32)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            q = torch.randn(3, HQ, 1, D, dtype=torch.bfloat16, device="cuda")
            plan = pool.plan_decode(q, slots, lens, table, max_length=320, return_lse=True)
            out, lse = plan.run(q)
            want, wlse = pool.decode(q, slots, lens, table, max_length=320, return_lse=True)
        s.synchronize()
        self.assertTrue(torch.equal(out, want))
        self.assertTrue(torch.equal(lse, wlse))
        with self.assertRaisesRegex(ValueError, "the plan was made for"):
            plan.run(q.float())


if __name__ == "__main__":
    unittest.main()
