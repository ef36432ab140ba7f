"""Prefill against the paged pool on CUDA (KVPool.prefill, lpattn.h
lpattn_paged_prefill; docs/SEMANTICS.md "Prefill against the paged pool"):
rows bitwise the decode of their positions (a twin pool fed one token at a
time), chunked calls equal one call, varlen equals a call per sequence, and a
prefill captured in torch.cuda.graph replays to the eager bits, and a decode
without max_length (bounded by the page table) equals one with it. Skipped
without a CUDA device (or a library built without the CUDA backend).

    LPATTN_LIBRARY=build/liblpattn.so PYTHONPATH=python python3 python/tests/run.py test_prefill_cuda"""
import unittest

import lpattn

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

from common import cuda_skip_reason  # noqa: E402

HKV, HQ, D, PAGES = 2, 8, 128, 16
CACHED = (70, 1)  # two sequences, cached lengths differ
N = 150


def _skip():
    return cuda_skip_reason(torch)


@unittest.skipIf(_skip() is not None, _skip() or "")
class CudaPrefillTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        f16 = dict(dtype=torch.float16, device="cuda")
        self.i32 = dict(dtype=torch.int32, device="cuda")
        self.k, self.v = torch.randn(2, HKV, 100 + N, D, **f16), torch.randn(2, HKV, 100 + N, D, **f16)
        self.q = torch.randn(2, HQ, 100 + N, D, **f16)

    def _pool(self, precision):
        """A pool holding each sequence's cached tokens (queries recorded)."""
        pool = lpattn.KVPool(PAGES, 2, HKV, HQ, D, precision=precision,
                             like=torch.empty(0, device="cuda"))
        table = torch.arange(PAGES, **self.i32).flip(0).view(2, PAGES // 2).contiguous()
        for s, c in enumerate(CACHED):
            sl = torch.tensor([s], **self.i32)
            k, v, q = (x[s:s + 1, :, :c].contiguous() for x in (self.k, self.v, self.q))
            pool.append(k, v, sl, torch.zeros(1, **self.i32), table[s:s + 1].contiguous(), q=q,
                        max_length=0)
        return pool, torch.tensor([0, 1], **self.i32), table

    def _new(self, a, e):
        """new tokens [a, e) of both sequences: q, k, v [2, H, e - a, D]"""
        return tuple(torch.stack([x[s, :, c + a:c + e] for s, c in enumerate(CACHED)]).contiguous()
                     for x in (self.q, self.k, self.v))

    def _lens(self, a):
        return torch.tensor([c + a for c in CACHED], **self.i32)

    def test_rows_are_decode_rows(self):
        for precision in ("high", "fp8", "nvfp4", "mxfp4"):
            with self.subTest(precision=precision):
                pool, slots, table = self._pool(precision)
                q, k, v = self._new(0, N)
                out, lse = pool.prefill(q, k, v, slots, self._lens(0), table, return_lse=True)
                twin, _, _ = self._pool(precision)
                for t in range(N):
                    qt, kt, vt = self._new(t, t + 1)
                    twin.append(kt, vt, slots, self._lens(t), table, q=qt)
                    o, l = twin.decode(qt, slots, self._lens(t + 1), table, return_lse=True)
                    self.assertTrue(torch.equal(o, out[:, :, t:t + 1]), f"{precision} row {t}")
                    self.assertTrue(torch.equal(l, lse[:, :, t:t + 1]), f"{precision} lse {t}")
                chunked, _, _ = self._pool(precision)
                parts, a = [], 0
                for c in (5, 64, 81):
                    qc, kc, vc = self._new(a, a + c)
                    parts.append(chunked.prefill(qc, kc, vc, slots, self._lens(a), table))
                    a += c
                self.assertTrue(torch.equal(torch.cat(parts, dim=2), out), f"{precision} chunked")

    def test_varlen_is_per_sequence(self):
        counts = (N, 17)
        pool, slots, table = self._pool("nvfp4")
        q, k, v = self._new(0, N)
        packed = [torch.cat([x[s, :, :c] for s, c in enumerate(counts)], dim=1).transpose(0, 1).contiguous()
                  for x in (q, k, v)]  # [total, H, D]
        out = pool.prefill(*packed, slots, self._lens(0), table, cu_seqlens=[0, counts[0], sum(counts)])
        one, _, _ = self._pool("nvfp4")
        for s, c in enumerate(counts):
            qs, ks, vs = (x[s:s + 1, :, :c].contiguous() for x in (q, k, v))
            o = one.prefill(qs, ks, vs, slots[s:s + 1], self._lens(0)[s:s + 1],
                            table[s:s + 1].contiguous())
            r0 = 0 if s == 0 else counts[0]
            self.assertTrue(torch.equal(out[r0:r0 + c].transpose(0, 1), o[0]), f"sequence {s}")

    def test_graph_replay(self):
        pools = [self._pool("nvfp4"), self._pool("nvfp4")]  # graph, eager
        q, k, v = self._new(0, N)
        lens = self._lens(0)
        (gp, slots, table), (ep, _, _) = pools
        # warm-up: the pool's decode workspace at the pieces' largest size (no pool write)
        gp.decode(q[:, :, :64].contiguous(), slots, lens + 64, table, max_length=max(CACHED) + N)
        out = torch.empty(2, HQ, N, D, dtype=torch.float16, device="cuda")
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            gp.prefill(q, k, v, slots, lens, table, max_length=max(CACHED), out=out)
        g.replay()
        want = ep.prefill(q, k, v, slots, lens, table)
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out, want))

    def test_decode_without_max_length(self):
        """No max_length on a GPU pool: the page table's capacity (32 pages,
        two chunks) bounds the lengths instead of a device read of them; the
        bits equal the call given the longest length (one chunk), and the
        call captures in a graph."""
        for precision in ("high", "nvfp4"):
            with self.subTest(precision=precision):
                pool = lpattn.KVPool(64, 2, HKV, HQ, D, precision=precision,
                                     like=torch.empty(0, device="cuda"))
                slots = torch.tensor([0, 1], **self.i32)
                table = torch.arange(64, **self.i32).view(2, 32).contiguous()
                k, v, q = (x[:, :, :70].contiguous() for x in (self.k, self.v, self.q))
                pool.append(k, v, slots, torch.zeros(2, **self.i32), table, q=q, max_length=0)
                lens = torch.full((2,), 70, **self.i32)
                qd = self.q[:, :, 70:71].contiguous()
                want = pool.decode(qd, slots, lens, table, max_length=70)
                self.assertTrue(torch.equal(pool.decode(qd, slots, lens, table), want))
                out = torch.empty_like(want)
                pool.decode(qd, slots, lens, table, out=out)  # the workspace grows outside
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    pool.decode(qd, slots, lens, table, out=out)
                out.zero_()
                g.replay()
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(out, want))


if __name__ == "__main__":
    unittest.main()
