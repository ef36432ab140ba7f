"""lpattn.distributed on CPU: 2, 3 and 4 processes over gloo (torch.multiprocessing,
file:// rendezvous). Ring prefill (zigzag and contiguous), sharded
decode and the ring backward equal the single-process call within the bounds
of docs/SEMANTICS.md "Absolute positions"; the causal leak test holds across
shard borders. Skipped without torch / torch.distributed / gloo."""
import os
import sys
import tempfile
import unittest

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    HAVE = dist.is_available() and dist.is_gloo_available()
except Exception:  # NumPy-only machines (or a torch that cannot load)
    HAVE = False

BACKEND = "cpu"
# Sharded vs whole (docs/SEMANTICS.md "Absolute positions"): "high" max |dO|
# (the merge's f32 rounding); low precisions: relative L2 of O (each shard
# quantizes P against its own running max; NVFP4's P is scale-free up to rare
# one-code flips). LSE never sees P's quantization: max |dLSE| <= 2e-6 always.
BOUND = {"high": 2e-6, "fp8": 1.5e-2, "nvfp4": 2e-3}
LSE_BOUND = 2e-6


def rnd(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def data(n, seed=0):
    return rnd(1, 4, n, 64, seed=seed), rnd(1, 2, n, 64, seed=seed + 1) + 0.5, \
        rnd(1, 2, n, 64, seed=seed + 2)


def maxdiff(a, b):
    return (a.double() - b.double()).abs().max().item()


def odiff(prec, a, b):
    """The measure BOUND bounds."""
    if prec == "high":
        return maxdiff(a, b)
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def check_ring(rank, world, ld, lpattn):
    c = 128 if world == 2 else 64
    n = 2 * world * c
    q, k, v = data(n)
    for prec in ("high", "fp8", "nvfp4"):
        want, want_lse = lpattn.attention(q, k, v, causal=True, precision=prec, return_lse=True,
                                          backend=BACKEND)
        parts = [ld.zigzag_shard(x, rank, world) for x in (q, k, v)]
        out, lse = ld.ring_attention(*parts, causal=True, precision=prec, backend=BACKEND)
        got, got_lse = ld.zigzag_unshard(out), ld.zigzag_unshard(lse)
        d, dl = odiff(prec, got, want), maxdiff(got_lse, want_lse)
        assert d <= BOUND[prec] and dl <= LSE_BOUND, (world, prec, d, dl)
        if rank == 0:
            print(f"ring zigzag world {world} {prec}: O {d:.3g} (bound {BOUND[prec]}), max |dO| "
                  f"{maxdiff(got, want):.3g}, "
                  f"max |dLSE| {dl:.3g}")
    # contiguous layout, non-causal too
    for causal in (True, False):
        want = lpattn.attention(q, k, v, causal=causal, precision="high", backend=BACKEND)
        m = n // world
        parts = [x[:, :, rank * m:(rank + 1) * m] for x in (q, k, v)]
        out, _ = ld.ring_attention(*parts, causal=causal, layout="contiguous", precision="high",
                                   backend=BACKEND)
        full = [torch.empty_like(out) for _ in range(world)]
        dist.all_gather(full, out)
        d = maxdiff(torch.cat(full, dim=2), want)
        assert d <= BOUND["high"], ("contiguous", causal, d)


def check_leak(rank, world, ld):
    """Perturb every token after t (Q, K, V): rows <= t bitwise unchanged,
    for t at a shard border and inside a shard."""
    c = 64
    n = 2 * world * c
    q, k, v = data(n, seed=10)
    for t in (c - 1, 3 * c - 1, c + 20):
        for prec in ("nvfp4", "high"):
            outs = []
            for pert in (False, True):
                xs = [x.clone() for x in (q, k, v)]
                if pert:
                    for i, x in enumerate(xs):
                        x[:, :, t + 1:] = 3.0 * rnd(*x[:, :, t + 1:].shape, seed=99 + i) + 1.0
                parts = [ld.zigzag_shard(x, rank, world) for x in xs]
                out, lse = ld.ring_attention(*parts, causal=True, precision=prec, backend=BACKEND)
                outs.append((ld.zigzag_unshard(out), ld.zigzag_unshard(lse)))
            (o0, l0), (o1, l1) = outs
            assert torch.equal(o0[:, :, :t + 1], o1[:, :, :t + 1]), ("leak O", world, t, prec)
            assert torch.equal(l0[:, :, :t + 1], l1[:, :, :t + 1]), ("leak LSE", world, t, prec)
            assert not torch.equal(o0, o1)  # the perturbation did reach the later rows


def check_decode(rank, world, ld, lpattn):
    L = 64 * (2 * world) + 37  # the last rank holds a partial tile
    q_all, k, v = data(L, seed=20)
    per = 128
    s0 = rank * per
    s1 = L if rank == world - 1 else s0 + per
    for sq in (1, 3):
        q = q_all[:, :, L - sq:]
        for prec in ("high", "nvfp4"):
            want, want_lse = lpattn.attention(q, k, v, causal=True, precision=prec,
                                              return_lse=True, backend=BACKEND)
            got, lse = ld.sharded_decode(q, k[:, :, s0:s1], v[:, :, s0:s1], s0, precision=prec,
                                         return_lse=True, backend=BACKEND)
            d, dl = odiff(prec, got, want), maxdiff(lse, want_lse)
            assert d <= BOUND[prec] and dl <= LSE_BOUND, ("decode", world, sq, prec, d, dl)
            if rank == 0:
                print(f"decode world {world} Sq {sq} {prec}: O {d:.3g}, max |dO| {maxdiff(got, want):.3g}")


def _pool_with(lpattn, prec, T, seqs, borders):
    """A pool holding tokens [a, b) of each sequence (k, v) of seqs."""
    n = len(seqs)
    pool = lpattn.KVPool(n * 64, n, 2, 4, 64, page_size=T, precision=prec, backend=BACKEND)
    slots = torch.arange(n, dtype=torch.int32)
    table = torch.arange(n * 64, dtype=torch.int32).reshape(n, 64)
    lens = torch.zeros(n, dtype=torch.int32)
    for i, ((k, v), (a, b)) in enumerate(zip(seqs, borders)):
        if b > a:
            pool.append(k[:, :, a:b], v[:, :, a:b], slots[i:i + 1], lens[i:i + 1],
                        table[i:i + 1])
            lens[i] = b - a
    return pool, slots, lens, table


def check_paged(rank, world, ld, lpattn):
    """Each rank's pool holds page_split's run of each sequence; the merged
    decode equals one pool's: within the merge's rounding where the runs are
    whole decode chunks (sequence 0 at 2 and 3 ranks), within BOUND where
    they cut chunks (FP8: half its own distance to HIGH)."""
    T, lens = 32, (1600, 700, 45)  # the earlier ranks hold nothing of the third
    seqs = [data(n, seed=50 + i)[1:] for i, n in enumerate(lens)]
    qs = [data(n, seed=50 + i)[0] for i, n in enumerate(lens)]
    splits = [ld.page_split(n, world, page_size=T) for n in lens]
    # runs of whole decode chunks (16 pages) for sequence 0 at 2 and 3 ranks
    aligned = [all(b % (16 * T) == 0 for b in s[1:-1]) for s in splits]
    assert aligned[0] == (world < 4) and not aligned[1], splits
    mine = [(s[rank], s[rank + 1]) for s in splits]
    for sq in (1, 5):
        q = torch.cat([x[:, :, n - sq:n] for x, n in zip(qs, lens)])
        for prec in ("high", "nvfp4", "fp8"):
            whole, ws, wl, wt = _pool_with(lpattn, prec, T, seqs, [(0, n) for n in lens])
            want, want_lse = whole.decode(q, ws, wl, wt, return_lse=True)
            if prec == "high":
                high = want
            pool, slots, held, table = _pool_with(lpattn, prec, T, seqs, mine)
            kv0 = torch.tensor([a for a, _ in mine], dtype=torch.int32)
            got, lse = ld.paged_decode(pool, q, slots, held, table, kv0, return_lse=True)
            for i in range(len(lens)):
                d = maxdiff(got[i], want[i]) if aligned[i] else odiff(prec, got[i], want[i])
                dl = maxdiff(lse[i], want_lse[i])
                # FP8 cut inside a chunk: half its own distance to HIGH (SEMANTICS)
                bound = (BOUND["high"] if aligned[i] else 0.5 * odiff(prec, want[i], high[i])
                         if prec == "fp8" else BOUND[prec])
                assert d <= bound and dl <= LSE_BOUND, ("paged", world, sq, prec, i, d, dl)
                if rank == 0 and sq == 1:
                    print(f"paged decode world {world} {prec} seq {i}: O {d:.3g} (bound "
                          f"{bound:.3g}), max |dLSE| {dl:.3g}")


def check_paged_device_path(rank, world, ld, lpattn):
    """The GPU pools' path of paged_decode (every sequence decoded, one packed
    all-gather, no host round trip) run on host pools: it equals the host
    path; unchecked (check_errors=False) a failure raises on its own rank and
    is NaN in the others' merged rows. (Host pools check lengths >= Sq on the
    host, so here every rank holds some of every sequence; the GPU kernel
    takes empty runs.)"""
    T, lens = 32, (1600, 3000)
    seqs = [data(n, seed=50 + i)[1:] for i, n in enumerate(lens)]
    qs = [data(n, seed=50 + i)[0] for i, n in enumerate(lens)]
    mine = [(s[rank], s[rank + 1]) for s in (ld.page_split(n, world, page_size=T) for n in lens)]
    q = torch.cat([x[:, :, n - 1:n] for x, n in zip(qs, lens)])
    pool, slots, held, table = _pool_with(lpattn, "nvfp4", T, seqs, mine)
    kv0 = torch.tensor([a for a, _ in mine], dtype=torch.int32)
    want, want_lse = ld.paged_decode(pool, q, slots, held, table, kv0, return_lse=True)
    for check in (True, False):
        got, lse = ld._paged_decode_device(pool, q, slots, held, table, kv0, None, None, True, world,
                                           {}, check)
        d, dl = maxdiff(got, want), maxdiff(lse, want_lse)
        assert d <= 1e-6 and dl <= 1e-6, ("device path", world, check, d, dl)
    bad = kv0.clone()
    if rank == 0:
        bad[0] += 1  # not a multiple of page_size: this rank's decode fails
    try:
        got = ld._paged_decode_device(pool, q, slots, held, table, bad, None, None, False, world, {}, False)
        assert rank != 0, "rank 0 decoded a bad kv_start"
        assert bool(torch.isnan(got).all()), ("unchecked failure not NaN", rank)
    except lpattn.LpattnError:
        assert rank == 0
    if rank == 0:
        print(f"paged decode device path on host pools, world {world}: equal to the host path")


def check_backward(rank, world, ld, lpattn):
    c = 64
    n = 2 * world * c
    q, k, v = data(n, seed=30)
    w = rnd(1, 4, n, 64, seed=33)
    out, lse = lpattn.attention(q, k, v, causal=True, precision="high", return_lse=True,
                                backend=BACKEND)
    want = lpattn.attention_backward(q, k, v, out, lse, w, causal=True, precision="high",
                                     backend=BACKEND)
    parts = [ld.zigzag_shard(x, rank, world).requires_grad_() for x in (q, k, v)]
    o, _ = ld.ring_attention(*parts, causal=True, precision="high", backend=BACKEND)
    (o * ld.zigzag_shard(w, rank, world)).sum().backward()
    for name, p, g in zip(("dq", "dk", "dv"), parts, want):
        d = maxdiff(ld.zigzag_unshard(p.grad), g)
        assert d <= 2e-5, ("backward", world, name, d)
        if rank == 0:
            print(f"ring backward world {world} {name}: max diff {d:.3g}")


def check_errors(rank, world, ld):
    """A bad input on one rank raises on every rank (none is left waiting in a
    collective); a shard layout that breaks the tile rule raises everywhere."""
    q, k, v = data(128, seed=50)
    kv_start = 32 if rank == 0 else 128 * rank  # rank 0: not a multiple of block_k
    try:
        ld.sharded_decode(q[:, :, -1:], k, v, kv_start, q_start=128 * world - 1, backend=BACKEND)
        raise AssertionError("sharded_decode accepted a bad kv_start on rank 0")
    except (ValueError, RuntimeError) as e:
        assert isinstance(e, ValueError if rank == 0 else RuntimeError), (rank, repr(e))
    parts = [x[:, :, :96] for x in (q, k, v)]  # contiguous shards of 96 tokens: not whole tiles
    try:
        ld.ring_attention(*parts, causal=True, layout="contiguous", precision="high", backend=BACKEND)
        raise AssertionError("ring_attention accepted shards that split tiles")
    except ValueError as e:
        assert "whole tiles" in str(e), repr(e)


def _worker(rank, world, init):
    import lpattn
    import lpattn.distributed as ld
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    try:
        check_ring(rank, world, ld, lpattn)
        check_leak(rank, world, ld)
        check_decode(rank, world, ld, lpattn)
        check_paged(rank, world, ld, lpattn)
        check_paged_device_path(rank, world, ld, lpattn)
        check_backward(rank, world, ld, lpattn)
        check_errors(rank, world, ld)
    finally:
        dist.destroy_process_group()


@unittest.skipIf(not HAVE, "torch.distributed with gloo is not available")
class Helpers(unittest.TestCase):
    def need_backend(self):
        import lpattn
        if BACKEND not in lpattn.available_backends():
            self.skipTest(f"the {BACKEND} backend is not built")

    def test_pair_kw(self):
        import lpattn.distributed as ld
        self.assertIsNone(ld._pair_kw(True, 0, 64, 64, 64, 64))  # keys all in the future
        self.assertEqual(ld._pair_kw(True, 128, 64, 0, 128, 64), {"causal": False})
        # a partial last tile is diagonal (high) in the whole call: not non-causal
        self.assertEqual(ld._pair_kw(True, 292, 1, 128, 165, 64), {"causal": True})
        self.assertEqual(ld._pair_kw(True, 128, 128, 64, 128, 64),
                         {"causal": True, "q_start": 128, "kv_start": 64})
        self.assertEqual(ld._pair_kw(False, 0, 64, 64, 64, 64), {"causal": False})

    def test_backward_keywords(self):
        import lpattn.distributed as ld
        kw = {"precision": "nvfp4", "block_k": 64, "check_finite": True, "return_entropy": False}
        self.assertEqual(ld._backward_kw(kw), {"precision": "nvfp4", "block_k": 64})

    def test_page_split(self):
        import lpattn.distributed as ld
        self.assertEqual(ld.page_split(1600, 3, page_size=32), [0, 512, 1024, 1600])
        self.assertEqual(ld.page_split(700, 2, page_size=32), [0, 320, 700])
        self.assertEqual(ld.page_split(40, 2, page_size=32), [0, 0, 40])  # all in the last

    def test_pool_positions_errors(self):
        self.need_backend()
        import lpattn
        (k, v), q = data(100)[1:], data(100)[0][:, :, -1:]
        for prec, err in (("nvfp4", None), ("thrift", lpattn.UnsupportedError)):
            pool, slots, lens, table = _pool_with(lpattn, prec, 32, [(k, v)], [(0, 100)])
            kv0, q0 = torch.zeros(1, dtype=torch.int32), torch.full((1,), 99, dtype=torch.int32)
            with self.assertRaisesRegex(ValueError, "both kv_start and q_start"):
                pool.decode(q, slots, lens, table, kv_start=kv0)
            if err is None:
                a = pool.decode(q, slots, lens, table)
                self.assertTrue(torch.equal(a, pool.decode(q, slots, lens, table, kv_start=kv0,
                                                           q_start=q0)))
                with self.assertRaisesRegex(lpattn.LpattnError, "multiple of page_size"):
                    pool.decode(q, slots, lens, table, kv_start=kv0 + 1, q_start=q0)
            else:
                with self.assertRaises(err):
                    pool.decode(q, slots, lens, table, kv_start=kv0, q_start=q0)

    def test_positions_errors(self):
        self.need_backend()
        import lpattn
        q, k, v = data(128)
        with self.assertRaisesRegex(lpattn.LpattnError, "multiple of block_k = 64"):
            lpattn.attention(q, k, v, causal=True, kv_start=32, backend=BACKEND)
        with self.assertRaises(lpattn.UnsupportedError):
            lpattn.attention(q, k, v, causal=True, precision="thrift", kv_start=64,
                             backend=BACKEND)
        # the default call, spelled with positions
        a = lpattn.attention(q, k, v, causal=True, backend=BACKEND)
        b = lpattn.attention(q, k, v, causal=True, q_start=0, kv_start=0, backend=BACKEND)
        self.assertTrue(torch.equal(a, b))

    def test_one_rank(self):
        self.need_backend()
        import lpattn
        import lpattn.distributed as ld
        with tempfile.TemporaryDirectory() as tmp:
            dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "r"),
                                    rank=0, world_size=1)
            try:
                q, k, v = data(256, seed=40)
                want = lpattn.attention(q, k, v, causal=True, precision="high", backend=BACKEND)
                parts = [x.clone().requires_grad_() for x in (q, k, v)]
                out, _ = ld.ring_attention(*parts, causal=True, precision="high", backend=BACKEND)
                self.assertLessEqual(maxdiff(out, want), BOUND["high"])
                out.sum().backward()
                self.assertTrue(all(p.grad is not None for p in parts))
            finally:
                dist.destroy_process_group()


@unittest.skipIf(not HAVE, "torch.distributed with gloo is not available")
class Distributed(unittest.TestCase):
    def run_world(self, world):
        import lpattn
        if BACKEND not in lpattn.available_backends():
            self.skipTest(f"the {BACKEND} backend is not built")
        with tempfile.TemporaryDirectory() as tmp:
            # fork: the workers inherit the imported torch (spawn re-imports it
            # in every process: ~5 s of CPU each). No torch op has run in this
            # process yet (unittest runs Distributed before Helpers: classes
            # sorted by name; run.py runs test_distributed first), so no OpenMP
            # pool is forked. JAX starts threads when imported: then spawn.
            method = "fork" if "fork" in mp.get_all_start_methods() and "jax" not in sys.modules else "spawn"
            mp.start_processes(_worker, args=(world, os.path.join(tmp, "rendezvous")),
                               nprocs=world, join=True, start_method=method)

    def test_two_ranks(self):
        self.run_world(2)

    def test_three_ranks(self):
        self.run_world(3)

    def test_four_ranks(self):
        self.run_world(4)


if __name__ == "__main__":
    unittest.main()
