"""Prefill against the paged pool (KVPool.prefill, lpattn.h lpattn_paged_prefill)
on the host backends: a prompt longer than a page, cut into calls in several
ways, gives the same rows bitwise; they equal lpattn.attention's causal
prefill (block = page_size; bitwise on ref, where SEMANTICS "Decode" promises
decode rows equal prefill rows); sequences with different cached lengths in
one call; decode still refuses more rows than a page, naming prefill."""
import unittest

import numpy as np

import lpattn
from common import rand

H, HQ, D, T, N = 2, 4, 64, 64, 300


class PagedPrefillTest(unittest.TestCase):
    backends = [b for b in ("ref", "cpu") if b in lpattn.available_backends()]

    def _run(self, backend, precision, cuts, q, k, v):
        """Sequence 0 gets N tokens in calls of the sizes `cuts`; sequence 1
        (its own slot) gets 37 tokens first, then the same calls with sequence 0."""
        pool = lpattn.KVPool(16, 2, H, HQ, D, precision=precision, high_dtype="float32",
                             backend=backend)
        slots = np.array([0, 1], dtype=np.int32)
        table = np.arange(16, dtype=np.int32)[::-1].reshape(2, 8).copy()
        out = np.zeros((2, HQ, N + 37, D), np.float32)
        lens = np.zeros(2, np.int32)
        pre = 37
        out[1:, :, :pre] = pool.prefill(q[1:, :, :pre], k[1:, :, :pre], v[1:, :, :pre],
                                        slots[1:], lens[1:], table[1:])
        lens[1] = pre
        a = 0
        for c in cuts:
            first = lens.copy()
            qs = np.stack([q[i, :, first[i]:first[i] + c] for i in range(2)])
            ks = np.stack([k[i, :, first[i]:first[i] + c] for i in range(2)])
            vs = np.stack([v[i, :, first[i]:first[i] + c] for i in range(2)])
            o = pool.prefill(qs, ks, vs, slots, lens, table)
            for i in range(2):
                out[i, :, first[i]:first[i] + c] = o[i]
            lens += c
            a += c
        self.assertEqual(a, N)
        pool.close()
        return out

    def test_chunkings_and_oneshot(self):
        q, k, v = rand(2, HQ, N + 37, D, seed=1), rand(2, H, N + 37, D, seed=2), \
            rand(2, H, N + 37, D, seed=3)
        for backend in self.backends:
            for precision in ("high", "fp8", "nvfp4", "mxfp4"):
                with self.subTest(backend=backend, precision=precision):
                    a = self._run(backend, precision, [N], q, k, v)
                    for cuts in ([96, 96, 96, 12], [200, 100], [1, 127, 172]):
                        np.testing.assert_array_equal(self._run(backend, precision, cuts, q, k, v), a)
                    for i, n in ((0, N), (1, N + 37)):
                        want = lpattn.attention(q[i:i + 1, :, :n], k[i:i + 1, :, :n],
                                                v[i:i + 1, :, :n], causal=True,
                                                precision=precision, backend=backend,
                                                block_q=T, block_k=T)
                        if backend == "ref":
                            np.testing.assert_array_equal(a[i:i + 1, :, :n], want)
                        else:  # other summation orders (tests/api/test_paged_prefill.c)
                            err = np.linalg.norm(a[i:i + 1, :, :n] - want) / np.linalg.norm(want)
                            self.assertLess(err, 1e-3)

    def test_decode_refuses_more_than_a_page(self):
        pool = lpattn.KVPool(4, 1, H, HQ, D, precision="nvfp4", backend=self.backends[0])
        slots, table = np.zeros(1, np.int32), np.arange(4, dtype=np.int32)[None]
        q, k, v = rand(1, HQ, 100, D, seed=4), rand(1, H, 100, D, seed=5), rand(1, H, 100, D, seed=6)
        out, lse = pool.prefill(q, k, v, slots, np.zeros(1, np.int32), table, return_lse=True)
        self.assertEqual(out.shape, (1, HQ, 100, D))
        self.assertEqual(lse.shape, (1, HQ, 100))
        with self.assertRaisesRegex(lpattn.LpattnError, "paged_prefill"):
            pool.decode(q[:, :, 30:], slots, np.array([100], np.int32), table)
        with self.assertRaises(lpattn.LpattnError):  # lengths are not the slot's
            pool.prefill(q, k, v, slots, np.zeros(1, np.int32) + 5, table)
        pool.close()


if __name__ == "__main__":
    unittest.main()
