#!/usr/bin/env python3
"""Where a 16k HIGH prefill from Python loses time against the C bench (issue 32).

B = 1, H = 32, S = 16384, D = 128, f16, non-causal and causal, the C bench's
data (bench_cuda.c: q, v ~ U-like rand, k shifted by 0.2). Times, CUDA events,
median of --reps after warm-up, alternated over --rounds:
  py:      lpattn.attention(q, k, v)                  (a new out each call)
  py_out:  lpattn.attention(q, k, v, out=o)
  py_bshd: lpattn.attention on [B, S, H, D] views (layout "bshd")
  c_raw:   the same call's lpattn_attention with the arguments the Python
           call built (recorded once), in this process: the C cost alone
  c:       bench_cuda prefill-high's row for S = 16k (a subprocess, same GPU)
The in-process forms are interleaved call by call (form A, form B, ... per
repetition), so the GPU's clock and power state is the same for each.
then one torch.profiler trace of each Python form: every kernel it launches
with its time, so an extra pass (a cast, a copy, a memset) shows by name.

    LPATTN_LIBRARY=B/liblpattn.so PYTHONPATH=python python3 bench/cuda/py_prefill_gap.py \\
        B/bench/cuda/bench_cuda [--out gap.md]"""
import argparse
import json
import statistics
import subprocess

import torch

import lpattn


def raw_call(fn):
    """fn's lpattn_attention call with its arguments recorded once: a closure
    that calls the C function directly (no views, params or checks)."""
    from lpattn import _api
    orig, seen = _api.call, []
    _api.call = lambda *args: (seen.append(args), orig(*args))[1]
    try:
        fn()
    finally:
        _api.call = orig
    args = seen[-1]
    return lambda: orig(*args)


def interleaved(fns, reps):
    """{name: median ms} timing each fn once per repetition, in turn."""
    for f in fns.values():
        f(), f()
    torch.cuda.synchronize()
    ts = {n: [] for n in fns}
    for _ in range(reps):
        for n, f in fns.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            f()
            b.record()
            b.synchronize()
            ts[n].append(a.elapsed_time(b))
    return {n: statistics.median(t) for n, t in ts.items()}


def c_bench(binary):
    p = subprocess.run([binary, "prefill-high"], capture_output=True, text=True, check=True)
    rows = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    return {r["causal"]: r["ms"] for r in rows if r["S"] == 16384 and r["prec"] == "high"}


def kernels(fn):
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0:
            out.append((e.key[:90], e.count, t / 1e3))
    return sorted(out, key=lambda r: -r[2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_cuda")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    S, H, D = 16384, 32, 128
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, H, S, D, device="cuda", generator=g).half()
    k = (torch.randn(1, H, S, D, device="cuda", generator=g) + 0.2).half()
    v = torch.randn(1, H, S, D, device="cuda", generator=g).half()
    o = torch.empty_like(q)
    qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    forms = {
        "py": lambda c: (lambda: lpattn.attention(q, k, v, causal=c)),
        "py_out": lambda c: (lambda: lpattn.attention(q, k, v, causal=c, out=o)),
        "py_bshd": lambda c: (lambda: lpattn.attention(qs, ks, vs, causal=c, layout="bshd")),
    }
    res = {(f, c): [] for f in list(forms) + ["c_raw", "c"] for c in (0, 1)}
    for _ in range(a.rounds):
        for c, ms in c_bench(a.bench_cuda).items():
            res[("c", c)].append(ms)
        for c in (0, 1):
            fns = {f: mk(bool(c)) for f, mk in forms.items()}
            fns["c_raw"] = raw_call(fns["py_out"])
            for f, ms in interleaved(fns, a.reps).items():
                res[(f, c)].append(ms)
    lines = [f"torch {torch.__version__}, {torch.cuda.get_device_name()}, lpattn {lpattn.__version__}",
             "", "| form | causal | ms (median of rounds) | x C bench | x c_raw |", "|---|---|---|---|---|"]
    for (f, c), v_ in res.items():
        if not v_:
            continue
        ms = statistics.median(v_)
        cm = statistics.median(res[("c", c)]) if res[("c", c)] else float("nan")
        rm = statistics.median(res[("c_raw", c)])
        lines.append(f"| {f} | {c} | {ms:.3f} ({', '.join(f'{x:.3f}' for x in v_)}) | "
                     f"{ms / cm:.3f} | {ms / rm:.3f} |")
    for f, mk in forms.items():
        lines += ["", f"kernels of one {f} call (non-causal): name, count, ms"]
        lines += [f"- {n} x{cnt}: {t:.3f}" for n, cnt, t in kernels(mk(False))]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
