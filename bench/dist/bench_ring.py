"""Context-parallel benchmark of issue 15: ring prefill and sharded decode
over torch.distributed (NCCL), scaling vs one GPU measured in the same run.

    torchrun --nproc-per-node 2 bench/dist/bench_ring.py            # 2 x H200
    torchrun --nproc-per-node 2 bench/dist/bench_ring.py --quick    # smoke run
    torchrun --nproc-per-node 2 bench/dist/bench_ring.py --cpu      # gloo, cpu backend,
                                                                    # tiny sizes (script check)

Needs the lpattn Python package with the cuda backend (pip install . with
-Dcuda=enabled) and torch with NCCL. Rank 0 prints one row per case:
tokens, precision, one-GPU time (rank 0 alone, the whole problem, the same
kernels), the R-GPU time (every rank, max over ranks), speed-up and scaling
efficiency (speed-up / R). Targets (issue 15, R = 2): causal prefill at 256k
>= 1.7x, decode at 1M with an NVFP4 cache >= 1.6x.

Prefill: B = 1, 32 q heads, 8 KV heads, D = 128, bf16, causal, zigzag
layout; tokens 128k, 256k, 512k (512k one-GPU: if it does not fit, the
row says so). Decode: one query token (batch 8 sequences), the cache of
1M tokens split evenly over the ranks (each rank's keys as a bf16 tensor
quantized by the call: this measures the sharded attention + merge). Pool
decode: the same over paged KVPools (bf16 high copies, page 64), each rank's
pool holding its lpattn.distributed.page_split run of every sequence
(paged_decode; a row says UNSUPPORTED where the backend refuses positions in
the paged decode: HIP). Precisions: high and nvfp4.

Ran on two H200 (bench/RESULTS_cuda_h100.md); `--cpu` (2 gloo processes, the cpu backend) ran as a check
of the script, its times mean nothing. The GPU backends take positions only for fully visible and
equal-length diagonal blocks, which is what the zigzag ring produces.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist

import lpattn
import lpattn.distributed as ld

DEV, BACKEND = "cuda", "cuda"


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def timed(fn, reps, group=None):
    fn()  # warm-up (workspace growth, kernel load)
    sync()
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    dt = torch.tensor([(time.perf_counter() - t0) / reps], device=DEV)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=group)
    return dt.item()


def single(fn, reps):
    """One GPU (rank 0 alone); the others wait at the barrier."""
    t = None
    if dist.get_rank() == 0:
        try:
            fn()
            sync()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            sync()
            t = (time.perf_counter() - t0) / reps
        except (torch.cuda.OutOfMemoryError, lpattn.LpattnError) as e:
            print(f"  one device: {type(e).__name__}: {e}")
    empty_cache()
    dist.barrier()
    return t


def empty_cache():
    if DEV == "cuda":
        torch.cuda.empty_cache()


def row(name, n, prec, t1, tr, world):
    if dist.get_rank():
        return
    if t1 is None:
        print(f"{name:8s} {n:>8d} {prec:6s} one device: n/a      {world} ranks: {tr * 1e3:9.2f} ms")
        return
    s = t1 / tr
    print(f"{name:8s} {n:>8d} {prec:6s} one device: {t1 * 1e3:9.2f} ms  {world} ranks: "
          f"{tr * 1e3:9.2f} ms  speed-up {s:5.2f}x  efficiency {s / world:5.1%}", flush=True)


def prefill(n, prec, reps, world, rank):
    g = torch.Generator(device=DEV).manual_seed(0)
    mk = lambda h: torch.randn(1, h, n, 128, device=DEV, dtype=torch.bfloat16, generator=g)  # noqa
    q, k, v = mk(32), mk(8), mk(8)
    kw = dict(precision=prec, backend=BACKEND)
    t1 = single(lambda: lpattn.attention(q, k, v, causal=True, **kw), reps)
    parts = [ld.zigzag_shard(x, rank, world) for x in (q, k, v)]
    del q, k, v
    empty_cache()
    tr = timed(lambda: ld.ring_attention(*parts, causal=True, **kw), reps)
    row("prefill", n, prec, t1, tr, world)


def decode(n, prec, reps, world, rank, batch=8):
    g = torch.Generator(device=DEV).manual_seed(1)
    q = torch.randn(batch, 32, 1, 128, device=DEV, dtype=torch.bfloat16, generator=g)
    per = (n // world // 64) * 64
    s0 = rank * per
    s1 = n if rank == world - 1 else s0 + per
    kw = dict(precision=prec, backend=BACKEND)
    t1 = None
    if n * batch * 8 * 128 * 2 * 2 <= 40 * 2**30:  # the whole cache on one GPU
        kall = torch.randn(batch, 8, n, 128, device=DEV, dtype=torch.bfloat16, generator=g)
        t1 = single(lambda: lpattn.attention(q, kall, kall, causal=True, **kw), reps)
        del kall
        empty_cache()
    k = torch.randn(batch, 8, s1 - s0, 128, device=DEV, dtype=torch.bfloat16, generator=g)
    tr = timed(lambda: ld.sharded_decode(q, k, k, s0, q_start=n - 1, **kw), reps)
    row("decode", n, prec, t1, tr, world)


def _tokens(batch, t, m):
    """K/V of tokens [t, t + m) [batch, 8, m, 128] bf16, a function of the
    global token, head and channel alone: the same on every device (a
    seeded torch generator is not across GPUs), so shards = the whole."""
    f = lambda n, c: (torch.arange(n, device=DEV, dtype=torch.float32) * c)  # noqa: E731
    tok = torch.remainder(torch.arange(t, t + m, device=DEV, dtype=torch.float64) * 0.6180340, 1.0)
    x = (f(batch, 0.2360679)[:, None, None, None] + f(8, 0.4142136)[None, :, None, None]
         + tok.float()[None, None, :, None] + f(128, 0.7320508))
    return ((torch.remainder(torch.sin(x * 12.9898) * 43758.5453, 1.0) - 0.5) * 3.4).to(torch.bfloat16)


def fill_pool(prec, batch, a, b, page=64, step=65536):
    """A KVPool holding tokens [a, b) of `batch` sequences (random bf16 K/V
    appended `step` tokens at a time), with its slots, lengths and table."""
    npg = -(-(b - a) // page)
    pool = lpattn.KVPool(batch * npg, batch, 8, 32, 128, page_size=page, precision=prec,
                         high_dtype="bfloat16", like=torch.empty(0, device=DEV),
                         backend=BACKEND)
    i32 = dict(dtype=torch.int32, device=DEV)
    slots, table = torch.arange(batch, **i32), torch.arange(batch * npg, **i32).view(batch, npg)
    for t in range(a, b, step):
        m = min(step, b - t)
        kv = _tokens(batch, t, m)
        pool.append(kv, kv, slots, torch.full((batch,), t - a, **i32), table, max_length=t - a)
    return pool, slots, torch.full((batch,), b - a, **i32), table


def decode_pool(n, prec, reps, world, rank, batch=8):
    """Decode over paged pools: rank 0 alone with the whole cache, then every
    rank with its page_split run (lpattn.distributed.paged_decode). The GPU
    backends answer UNSUPPORTED to positions until their kernels take them:
    the row then says so."""
    g = torch.Generator(device=DEV).manual_seed(1)
    q = torch.randn(batch, 32, 1, 128, device=DEV, dtype=torch.bfloat16, generator=g)
    t1 = want = None
    if rank == 0:
        whole = fill_pool(prec, batch, 0, n)
        t1 = single(lambda: whole[0].decode(q, *whole[1:], max_length=n), reps)
        want = whole[0].decode(q, *whole[1:], max_length=n).float()
        del whole
    else:
        single(None, reps)
    empty_cache()
    b = ld.page_split(n, world)
    pool, slots, lens, table = fill_pool(prec, batch, b[rank], b[rank + 1])
    kv0 = torch.full((batch,), b[rank], dtype=torch.int32, device=DEV)
    qs = torch.full((batch,), n - 1, dtype=torch.int32, device=DEV)
    try:  # timed without the per-call error-flag read (a host wait), as the one-pool decode;
        # max_length: the rank's page table's reach (its share), paged_decode's default
        tr = timed(lambda: ld.paged_decode(pool, q, slots, lens, table, kv0, q_start=qs,
                                           check_errors=False), reps)
    except lpattn.UnsupportedError as e:
        if rank == 0:
            print(f"pool     {n:>8d} {prec:6s} sharded pool decode: {e}")
        return
    row("pool", n, prec, t1, tr, world)
    got = ld.paged_decode(pool, q, slots, lens, table, kv0, q_start=qs, max_length=n).float()
    if rank == 0 and want is not None:
        print(f"         sharded vs one pool: max |dO| {(got - want).abs().max().item():.2e} "
              f"(|O| max {want.abs().max().item():.2e}, {q.dtype} outputs)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cpu", action="store_true", help="gloo and the cpu backend, tiny sizes")
    ap.add_argument("--sizes", help="prefill tokens, comma-separated (default 128k,256k,512k)")
    ap.add_argument("--decode-tokens", type=int, help="decode context (default 1M)")
    ap.add_argument("--precisions", default="high,nvfp4")
    a = ap.parse_args()
    global DEV, BACKEND
    rank = int(os.environ.get("RANK", 0))
    if a.cpu:
        DEV, BACKEND = "cpu", "cpu"
        dist.init_process_group("gloo")
        sizes, dec = [1024, 2048], 8192
    else:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        dist.init_process_group("nccl")
        sizes = [8192, 16384] if a.quick else [131072, 262144, 524288]
        dec = 65536 if a.quick else 1 << 20
    if a.sizes is not None:  # "" or "none": decode only
        sizes = [int(x) for x in a.sizes.split(",") if x and x != "none"]
    if a.decode_tokens:
        dec = a.decode_tokens
    world = dist.get_world_size()
    if rank == 0:
        name = torch.cuda.get_device_name() if DEV == "cuda" else "CPU (gloo)"
        print(f"lpattn {lpattn.__version__}, {world} ranks, {name}")
    for prec in a.precisions.split(","):
        for n in sizes:
            prefill(n, prec, a.reps, world, rank)
        decode(dec, prec, a.reps, world, rank)
        decode_pool(dec, prec, max(a.reps, 20), world, rank)  # ms per call: more reps
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
