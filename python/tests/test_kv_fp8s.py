"""The static-scale FP8 pool (KVPool(..., precision="fp8_static"), lpattn.h
lpattn_kv_pool_set_descales) through Python on the host backends: pages of
2048 B a token at 8 KV heads x D 128; descales set per (sequence, KV head)
before the first append; prefill rows equal lpattn.attention's fp8_static
causal prefill (block = page size; bitwise on ref) with the same descales;
decode of the last row is the prefill's; bad descales are refused."""
import unittest

import numpy as np

import lpattn
from common import rand, rel_err

H, HQ, D, T, N = 2, 4, 64, 64, 200


class KVPoolFp8sTest(unittest.TestCase):
    backends = [b for b in ("ref", "cpu") if b in lpattn.available_backends()]

    def test_bytes(self):
        page, slot, total = lpattn.pool_bytes(100, 4, 8, 32, 128, precision="fp8_static")
        self.assertEqual(page, 2048 * 64)
        self.assertEqual(slot, 256)
        self.assertEqual(total, 100 * page + 4 * slot)

    def test_prefill_equals_attention(self):
        q, k, v = (rand(2, h, N, D, seed=i) for i, h in enumerate((HQ, H, H)))
        kd = np.array([[0.01, 0.02], [0.03, 0.005]], np.float32)
        vd = np.array([[0.02, 0.01], [0.004, 0.03]], np.float32)
        qd = np.array([[0.02, 0.01], [0.01, 0.02]], np.float32)
        for be in self.backends:
            with self.subTest(backend=be):
                pool = lpattn.KVPool(8, 2, H, HQ, D, precision="fp8_static", backend=be)
                slots = np.array([1, 0], np.int32)
                table = np.arange(8, dtype=np.int32).reshape(2, 4).copy()
                pool.set_descales(slots, kd, vd)
                lens = np.zeros(2, np.int32)
                out = pool.prefill(q, k, v, slots, lens, table, q_descale=qd)
                for s in range(2):
                    ref = lpattn.attention(q[s:s + 1], k[s:s + 1], v[s:s + 1], causal=True,
                                           precision="fp8_static", block_q=T, block_k=T,
                                           q_descale=qd[s:s + 1], k_descale=kd[s:s + 1],
                                           v_descale=vd[s:s + 1], backend=be)
                    if be == "ref":
                        np.testing.assert_array_equal(out[s:s + 1], ref)
                    else:
                        self.assertLess(rel_err(out[s:s + 1], ref), 1e-5)
                lens[:] = N
                last = pool.decode(q[:, :, N - 1:], slots, lens, table, q_descale=qd)
                np.testing.assert_array_equal(last, out[:, :, N - 1:])
                plan = pool.plan_decode(q[:, :, N - 1:].copy(), slots, lens, table,
                                        max_length=N, q_descale=qd)
                np.testing.assert_array_equal(plan.run(), last)

    def test_bad_descales(self):
        for be in self.backends:
            # zeroed memory: a slot's descales are defined once set (lpattn.h)
            _, _, need = lpattn.pool_bytes(4, 2, H, HQ, D, precision="fp8_static")
            buf = np.zeros(need + 256, np.uint8)
            off = -buf.ctypes.data % 256
            pool = lpattn.KVPool(4, 2, H, HQ, D, precision="fp8_static", backend=be,
                                 memory=buf[off:off + need])
            slots = np.array([0, 1], np.int32)
            for bad in (0.0, -1.0, float("nan"), float("inf")):
                with self.assertRaises(ValueError):
                    pool.set_descales(slots, bad, 1.0)
            arr = np.ones((2, H), np.float32)
            arr[1, 1] = 0.0
            with self.assertRaises((ValueError, lpattn.LpattnError)):
                pool.set_descales(slots, 1.0, arr)
            with self.assertRaises(lpattn.LpattnError):  # [1, H] for 2 slots
                pool.set_descales(slots, np.ones((1, H), np.float32) * 2, 1.0)
            # no descales yet: the append is refused
            kk = np.zeros((2, H, 3, D), np.float32)
            with self.assertRaises(lpattn.LpattnError):
                pool.append(kk, kk, slots, np.zeros(2, np.int32), np.arange(4, dtype=np.int32).reshape(2, 2))
            other = lpattn.KVPool(4, 2, H, HQ, D, precision="fp8", backend=be)
            with self.assertRaises(lpattn.LpattnError):
                other.set_descales(slots, 1.0, 1.0)


if __name__ == "__main__":
    unittest.main()
