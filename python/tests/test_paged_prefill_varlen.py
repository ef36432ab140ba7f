"""Ragged prefill against the paged pool (KVPool.prefill with cu_seqlens,
lpattn.h lpattn_paged_prefill_varlen) on the host backends: each sequence its
own count (0 included, counts above page_size, counts crossing tile borders),
packed in FlashAttention's varlen layout [total, H, D]; the rows and LSE are
bitwise those of one KVPool.prefill per sequence; bad cu_seqlens are refused
and write nothing."""
import unittest

import numpy as np

import lpattn
from common import rand

H, HQ, D, T, NS = 2, 4, 64, 32, 3
COUNTS = ([37, 0, 70], [0, 100, 27], [64, 1, 0])  # sequence lengths end at 101, 101, 97


class PagedPrefillVarlenTest(unittest.TestCase):
    backends = [b for b in ("ref", "cpu") if b in lpattn.available_backends()]

    def _pool(self, backend, precision):
        return lpattn.KVPool(NS * 4, NS, H, HQ, D, page_size=T, precision=precision,
                             high_dtype="float32", backend=backend)

    def test_ragged_equals_per_sequence(self):
        slots = np.array([2, 0, 1], dtype=np.int32)
        table = np.arange(NS * 4, dtype=np.int32)[::-1].reshape(4, NS).T.copy()  # interleaved
        for backend in self.backends:
            for precision in ("high", "fp8", "nvfp4", "mxfp4", "thrift"):
                with self.subTest(backend=backend, precision=precision):
                    a, b = self._pool(backend, precision), self._pool(backend, precision)
                    lens = np.zeros(NS, np.int32)
                    for r, counts in enumerate(COUNTS):
                        cu = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
                        total = int(cu[-1])
                        q, k, v = (rand(total, h, D, seed=10 * r + i)
                                   for i, h in enumerate((HQ, H, H)))
                        # cu_seqlens as int32, int64 and a list of ints
                        cus = (cu, cu.astype(np.int64), [int(c) for c in cu])[r]
                        out, lse = a.prefill(q, k, v, slots, lens, table, cu_seqlens=cus,
                                             return_lse=True)
                        self.assertEqual(out.shape, (total, HQ, D))
                        self.assertEqual(lse.shape, (HQ, total))
                        for i in range(NS):
                            s0, s1 = cu[i], cu[i + 1]
                            if s0 == s1:
                                continue
                            tr = lambda x: np.ascontiguousarray(x[s0:s1].transpose(1, 0, 2)[None])
                            o1, l1 = b.prefill(tr(q), tr(k), tr(v), slots[i:i + 1],
                                               lens[i:i + 1], table[i:i + 1], return_lse=True)
                            np.testing.assert_array_equal(out[s0:s1], o1[0].transpose(1, 0, 2))
                            np.testing.assert_array_equal(lse[:, s0:s1], l1[0])
                        lens += np.asarray(counts, np.int32)
                    a.close(), b.close()

    def test_bad_cu_seqlens(self):
        pool = self._pool(self.backends[0], "nvfp4")
        slots, table = np.arange(NS, dtype=np.int32), np.arange(NS * 4, dtype=np.int32).reshape(NS, 4)
        lens = np.zeros(NS, np.int32)
        q, k, v = rand(10, HQ, D, seed=1), rand(10, H, D, seed=2), rand(10, H, D, seed=3)
        out = np.full((10, HQ, D), -7.0, np.float32)
        for cu, err, word in (([0, 6, 4, 10], lpattn.LpattnError, "never decrease"),
                              ([1, 4, 6, 10], lpattn.LpattnError, r"cu_seqlens\[0\]"),
                              ([0, 4, 6, 9], lpattn.LpattnError, r"cu_seqlens\[3\]"),
                              ([0, 4, 10], ValueError, "num_seqs"),
                              ([0, 4, 6, 2**31], ValueError, "int32")):
            with self.subTest(cu=cu):
                with self.assertRaisesRegex(err, word):
                    pool.prefill(q, k, v, slots, lens, table, cu_seqlens=cu, out=out)
        self.assertTrue((out == -7.0).all())  # nothing written
        # the pool is untouched: the same call with good offsets starts from length 0
        o = pool.prefill(q, k, v, slots, lens, table, cu_seqlens=[0, 4, 4, 10])
        self.assertEqual(o.shape, (10, HQ, D))
        pool.close()


if __name__ == "__main__":
    unittest.main()
