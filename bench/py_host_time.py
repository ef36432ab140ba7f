"""Host time per call of lpattn's Python entry points (issue 32 item 1): the
median over repeats of timeit of `number` back-to-back calls, in us per call,
once through the C extension lpattn._fastcall and once through ctypes
(_fast.disabled()), the two alternated round by round in one process.
On the CPU backend with a tiny problem the time is the Python + C overhead;
on a GPU, with a small decode (kernels shorter than the host work), the time
the caller's thread spends per call, next to PyTorch SDPA in the same process.
--graph also times a CUDA graph replay of one decode step (plan.run) against
the eager kernel time (CUDA events) at --context tokens.

    LPATTN_LIBRARY=build/liblpattn.so PYTHONPATH=python python3 bench/py_host_time.py --device cpu
    LPATTN_LIBRARY=build/liblpattn.so PYTHONPATH=python python3 bench/py_host_time.py --device cuda \\
        --graph --context 131072 --precision nvfp4"""
import argparse
import statistics
import timeit

import torch

import lpattn
from lpattn import _fast


def per_call(fn, number, repeat, sync):
    fn()
    sync()
    times = []
    for _ in range(repeat):
        t = timeit.timeit(fn, number=number)
        sync()
        times.append(t / number * 1e6)
    return statistics.median(times)


def ab(fn, number, repeat, sync):
    """(median us with the extension, median us through ctypes), alternated:
    a round of `number` calls each way, `repeat` rounds."""
    got = {True: [], False: []}
    for _ in range(repeat):
        for fast in ((True, False) if _fast.enabled() else (False,)):
            if fast:
                got[fast].append(per_call(fn, number, 1, sync))
            else:
                with _fast.disabled():
                    got[fast].append(per_call(fn, number, 1, sync))
    return tuple(statistics.median(got[f]) if got[f] else float("nan") for f in (True, False))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--precision", default="nvfp4")
    ap.add_argument("--number", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--graph", action="store_true", help="CUDA graph replay vs kernel time")
    ap.add_argument("--context", type=int, default=131072)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", default="32,8", help="Hq,Hkv (the host times: 1,1 for a tiny problem)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=0, help="the host-time rows' context (0: 64 on the "
                    "CPU, 256 on a GPU)")
    a = ap.parse_args()
    dev = a.device
    gpu = dev == "cuda"
    dt = torch.float16 if gpu else torch.float32
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    Hq, Hkv = (int(x) for x in a.heads.split(","))
    D, n = a.head_dim, a.tokens or (256 if gpu else 64)
    B = a.batch
    pool = lpattn.KVPool(max(64, B * (n // 64 + 2)), B, Hkv, Hq, D, precision=a.precision,
                         like=torch.empty(0, device=dev), high_dtype="float16" if gpu else "float32")
    i32 = dict(dtype=torch.int32, device=dev)
    slots = torch.arange(B, **i32)
    table = torch.arange(B * (n // 64 + 2), **i32).view(B, -1)
    k, v = (torch.randn(B, Hkv, n, D, dtype=dt, device=dev) for _ in range(2))
    pool.append(k, v, slots, torch.zeros(B, **i32), table, max_length=0)
    lens = torch.full((B,), n, **i32)
    q = torch.randn(B, Hq, 1, D, dtype=dt, device=dev)
    out = torch.empty_like(q)
    plan = pool.plan_decode(q, slots, lens, table, max_length=n, out=out)
    kk, vv = (x.repeat_interleave(Hq // Hkv, 1) for x in (k, v))
    aout = torch.empty_like(q)
    aplan = lpattn.attention_plan(q, k, v, causal=True, out=aout)
    rows = [
        ("KVPool.decode (eager, out=, max_length=)",
         lambda: pool.decode(q, slots, lens, table, max_length=n, out=out)),
        ("KVPool.decode (eager, defaults)", lambda: pool.decode(q, slots, lens, table)),
        ("DecodePlan.run(q, out)", lambda: plan.run(q, out)),
        ("DecodePlan.run()", lambda: plan.run()),
        ("lpattn.attention (decode shape, high)",
         lambda: lpattn.attention(q, k, v, causal=True)),
        ("lpattn.attention (same, out=)",
         lambda: lpattn.attention(q, k, v, causal=True, out=aout)),
        ("AttentionPlan.run(q, k, v, out)", lambda: aplan.run(q, k, v, aout)),
        ("torch SDPA (decode shape, GQA expanded)",
         lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, vv)),
    ]
    print(f"device {dev}, precision {a.precision}, B = {B}, Hq = {Hq}, Hkv = {Hkv}, D = {D}, "
          f"context {n}: host us per call (median of {a.repeat} rounds x {a.number}; "
          f"extension {'loaded' if _fast.enabled() else 'absent'})")
    print(f"  {'call':44s} {'C ext':>8s} {'ctypes':>8s}")
    for name, fn in rows:
        fast, slow = ab(fn, a.number, a.repeat, sync)
        print(f"  {name:44s} {fast:8.2f} {slow:8.2f}")
    if a.graph and gpu:
        graph_replay(a, dt)


def graph_replay(a, dt):
    """Replay time of a captured plan.run at a.context tokens per sequence vs
    the eager kernel time, both by CUDA events over 50 calls."""
    Hkv, Hq, D, B, n = 8, 32, 128, a.batch, a.context
    pages = (n + 63) // 64 + 1
    pool = lpattn.KVPool(B * pages, B, Hkv, Hq, D, precision=a.precision,
                         like=torch.empty(0, device="cuda"))
    i32 = dict(dtype=torch.int32, device="cuda")
    slots, table = torch.arange(B, **i32), torch.arange(B * pages, **i32).view(B, pages)
    chunk = 8192
    for s in range(0, n, chunk):  # prefill in chunks (append takes any count)
        m = min(chunk, n - s)
        k, v = (torch.randn(B, Hkv, m, D, dtype=dt, device="cuda") for _ in range(2))
        pool.append(k, v, slots, torch.full((B,), s, **i32), table, max_length=s)
    lens = torch.full((B,), n, **i32)
    q = torch.randn(B, Hq, 1, D, dtype=dt, device="cuda")
    out = torch.empty_like(q)
    plan = pool.plan_decode(q, slots, lens, table, max_length=n, out=out)
    plan.run(q, out)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.run(q, out)

    def timed(fn, reps=50):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        torch.cuda.synchronize()
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1) / reps

    eager = timed(lambda: plan.run(q, out))
    replay = timed(g.replay)
    host = per_call(g.replay, 200, 5, torch.cuda.synchronize)
    print(f"graph: B = {B}, context {n}, {a.precision}: eager plan.run {eager * 1e3:.1f} us/call "
          f"(stream time), graph replay {replay * 1e3:.1f} us/call, replay host {host:.2f} us")


if __name__ == "__main__":
    main()
