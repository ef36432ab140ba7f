"""The C extension lpattn._fastcall (python/lpattn/_fast.py) against the
ctypes path: every call here runs both ways (the extension on, then
_fast.disabled()) and must give the same outputs bitwise, or the same
exception type and message. The happy calls must take the extension (the
Python view building is made to fail under them)."""
import os
import unittest
from unittest import mock

import numpy as np

import lpattn
from lpattn import _api, _fast, _kv

try:
    import torch
except ImportError:
    torch = None


def _run(fn):
    """('ok', outputs) or ('err', type, message) of fn()."""
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 (the comparison is the test)
        return ("err", type(e), str(e), lpattn.last_error())
    rs = r if isinstance(r, tuple) else (r,)
    return ("ok", tuple(x.detach().clone() if torch.is_tensor(x) else np.array(x) for x in rs))


@unittest.skipIf(torch is None, "torch is not installed")
class FastcallTest(unittest.TestCase):
    def both(self, fn):
        got = _run(fn)
        with _fast.disabled():
            want = _run(fn)
        self.assertEqual(got[0], want[0], (got, want))
        if got[0] == "err":
            self.assertEqual(got[1:], want[1:])
        else:
            self.assertEqual(len(got[1]), len(want[1]))
            for a, b in zip(got[1], want[1]):
                if torch.is_tensor(a):
                    self.assertEqual((type(a), a.dtype, a.shape, a.stride(), a.requires_grad),
                                     (type(b), b.dtype, b.shape, b.stride(), b.requires_grad))
                    self.assertTrue(torch.equal(a, b) or (a.isnan() == b.isnan()).all())
        return got

    def taken(self, fn):
        """fn runs in the extension: the Python views are never built."""
        if not _fast.enabled():
            self.skipTest("the extension is not built")
        boom = mock.Mock(side_effect=AssertionError("the Python path ran"))
        with mock.patch.object(_api, "_views", boom), mock.patch.object(_kv.KVPool, "_batch", boom):
            return fn()

    def test_loaded(self):
        env = os.environ.get("LPATTN_FASTCALL")
        if env and env != "0":
            self.assertTrue(_fast.enabled(), f"LPATTN_FASTCALL={env} did not load")

    def qkv(self, dtype=torch.float32 if torch else None, hq=4, hkv=2, sq=5, sk=70, d=64):
        g = torch.Generator().manual_seed(0)
        return (torch.randn(2, hq, sq, d, generator=g).to(dtype),
                torch.randn(2, hkv, sk, d, generator=g).to(dtype),
                torch.randn(2, hkv, sk, d, generator=g).to(dtype))

    def test_attention_same(self):
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            q, k, v = self.qkv(dt)
            for kw in ({}, {"causal": True}, {"precision": "nvfp4", "causal": True},
                       {"sm_scale": 0.3, "window": (8, 0)}, {"backend": "ref"}):
                self.both(lambda: lpattn.attention(q, k, v, **kw))
                self.both(lambda: lpattn.attention(q, k, v, out=torch.empty_like(q), **kw))
                self.both(lambda: lpattn.attention(q, k, v, out=torch.empty_like(q).float(), **kw))
        q, k, v = self.qkv()
        self.both(lambda: lpattn.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           layout="bshd", causal=True))
        qn = q.transpose(2, 3).contiguous().transpose(2, 3)  # strided
        self.both(lambda: lpattn.attention(qn, k, v))
        qg = q.clone().requires_grad_()
        self.both(lambda: lpattn.attention(qg, k, v))
        self.both(lambda: lpattn.attention(torch.nn.Parameter(q), k, v))
        self.both(lambda: lpattn.attention(q, k, v, return_lse=True))  # not taken: same
        self.both(lambda: lpattn.attention(q.numpy(), k.numpy(), v.numpy()))  # not taken

    def test_attention_errors(self):
        q, k, v = self.qkv()
        cases = [
            lambda: lpattn.attention(q, k.half(), v),  # dtypes differ (Python's message)
            lambda: lpattn.attention(q[0], k, v),  # rank
            lambda: lpattn.attention(q, k[:, :, :, :32], v),  # the library's BAD_SHAPE
            lambda: lpattn.attention(q, k, v, out=torch.empty(2, 4, 5, 32)),  # out's shape
            lambda: lpattn.attention(q, k, v, out=torch.empty(q.shape, dtype=torch.int32)),
            lambda: lpattn.attention(q, k, v, precision="fp5"),
            lambda: lpattn.attention(q, k, v, layout="hsbd"),
            lambda: lpattn.attention(q, k, v, layout=["bhsd"]),
            lambda: lpattn.attention(q, k, v, sm_scale=0),
            lambda: lpattn.attention(q, k, v, backend="cuda"),
            lambda: lpattn.attention(q, k, v, backend="tpu"),
            lambda: lpattn.attention(q.long(), k, v),
            lambda: lpattn.attention(q, k, v, thrift_k=2.5),
            lambda: lpattn.attention(q, k, v, window=(1, 2, 3)),
            lambda: lpattn.attention(q, torch.randn(2, 3, 70, 64), torch.randn(2, 3, 70, 64)),
        ]
        for fn in cases:
            self.assertEqual(self.both(fn)[0], "err", fn.__code__.co_firstlineno)
        with torch.inference_mode():
            o = torch.empty_like(q)
        self.assertEqual(self.both(lambda: lpattn.attention(q, k, v, out=o))[0], "err")

    def test_attention_taken(self):
        q, k, v = self.qkv()
        out = torch.empty_like(q)
        got = self.taken(lambda: lpattn.attention(q, k, v, causal=True, out=out))
        self.assertIs(got, out)
        got = self.taken(lambda: lpattn.attention(q, k, v, causal=True))
        with _fast.disabled():
            self.assertTrue(torch.equal(got, lpattn.attention(q, k, v, causal=True)))
        with self.assertRaises(lpattn.LpattnError):  # the library's error, raised from the extension
            self.taken(lambda: lpattn.attention(q, k[:, :, :, :32], v))

    def test_uncached_params_not_taken(self):
        """Params the shared cache does not hold (unhashable arguments, a full
        cache) would be freed before the extension reads them: such calls go
        the Python path, with the same result."""
        q, k, v = self.qkv()
        self.assertIsNone(_api.shared_params_addr("high", False, None, None, None, "nvfp4",
                                                  False, None, None, None, False, False, False,
                                                  None, None, None, None, [8, 0], None))
        want = lpattn.attention(q, k, v, window=(8, 0))
        self.assertTrue(torch.equal(self.both(lambda: lpattn.attention(q, k, v, window=[8, 0]))[1][0],
                                    want))
        with mock.patch.dict(_api._SHARED_PARAMS, {i: None for i in range(256)}, clear=True):
            self.assertTrue(torch.equal(lpattn.attention(q, k, v, sm_scale=0.123),
                                        lpattn.attention(q, k, v, sm_scale=0.123)))
            self.assertIsNone(_api.shared_params_addr("high", False, 0.5))

    def pool(self):
        pool = lpattn.KVPool(8, 2, 2, 4, 64, precision="nvfp4", like=torch.empty(0),
                             high_dtype="float32")
        i32 = dict(dtype=torch.int32)
        slots, table = torch.arange(2, **i32), torch.arange(8, **i32).view(2, 4)
        g = torch.Generator().manual_seed(1)
        k, v = (torch.randn(2, 2, 100, 64, generator=g) for _ in range(2))
        pool.append(k, v, slots, torch.zeros(2, **i32), table, max_length=0)
        return pool, slots, torch.full((2,), 100, **i32), table

    def test_decode_same(self):
        pool, slots, lens, table = self.pool()
        q = torch.randn(2, 4, 1, 64)
        for kw in ({"max_length": 100}, {"max_length": 256, "out": torch.empty_like(q)},
                   {"max_length": 100, "sm_scale": 0.2, "window": (30, 0)},
                   {"max_length": 100, "return_lse": True}, {}):
            self.both(lambda: pool.decode(q, slots, lens, table, **kw))
        self.both(lambda: pool.decode(q, slots.long(), lens, table, max_length=100))
        self.both(lambda: pool.decode(q.half(), slots, lens, table, max_length=100))
        self.both(lambda: pool.decode(q, slots.numpy(), lens.numpy(), table.numpy(),
                                      max_length=100))
        got = self.taken(lambda: pool.decode(q, slots, lens, table, max_length=100))
        with _fast.disabled():
            self.assertTrue(torch.equal(got, pool.decode(q, slots, lens, table, max_length=100)))

    def test_decode_errors(self):
        pool, slots, lens, table = self.pool()
        q = torch.randn(2, 4, 1, 64)
        cases = [
            lambda: pool.decode(q, slots, lens, table, max_length=10),  # lengths > max_length
            lambda: pool.decode(q, torch.tensor([0, 9], dtype=torch.int32), lens, table,
                                max_length=100),  # slot out of range
            lambda: pool.decode(q[:, :, :, :32], slots, lens, table, max_length=100),
            lambda: pool.decode(q, slots, lens, table, max_length=100, out=torch.empty(2, 4, 1, 8)),
            lambda: pool.decode(q, slots, lens, table[0], max_length=100),
            lambda: pool.decode(q, slots, lens, table, max_length=2 ** 70),
            lambda: pool.decode(q, slots, lens, table, max_length=1.5),
            lambda: pool.decode(q, slots, lens, table, max_length=100, sm_scale=-1),
            lambda: pool.decode(q.long(), slots, lens, table, max_length=100),
        ]
        for fn in cases:
            self.assertEqual(self.both(fn)[0], "err", fn.__code__.co_firstlineno)
        pool.close()
        self.assertEqual(self.both(lambda: pool.decode(q, slots, lens, table, max_length=100))[0],
                         "err")

    def test_plan_runs(self):
        pool, slots, lens, table = self.pool()
        q = torch.randn(2, 4, 1, 64)
        out = torch.empty_like(q)
        plan = pool.plan_decode(q, slots, lens, table, max_length=128, out=out)
        self.both(lambda: plan.run(q, out))
        self.both(lambda: plan.run())
        self.both(lambda: plan.run(torch.randn(2, 4, 1, 32)))
        q2, k2, v2 = self.qkv()
        aplan = lpattn.attention_plan(q2, k2, v2, causal=True)
        self.both(lambda: aplan.run(q2, k2, v2))
        plan.close()
        self.assertEqual(self.both(lambda: plan.run(q, out))[0], "err")


if __name__ == "__main__":
    unittest.main()
