#!/usr/bin/env python3
"""SPEC 2 on the GPU (docs/SEMANTICS.md "Non-finite inputs", issue 28 item 9): a NaN at a
masked key must not reach the rows that do not attend it.

  nan_masked.py BACKEND   (ref, cpu or cuda) the reproducer: a NaN in K or V at key t + 1,
                          the masked future of rows <= t in their diagonal tile; prints, per
                          tensor and precision, how many of those rows of O, and of dQ with
                          dO zero after t, are non-finite (the contract: 0).
  nan_masked.py ab OUT.md the cost of the masked-tile checks (lp_gpu_nonfinite.cuh), same run:
                          LPATTN_NF_OFF=1 (checks off) against the default, alternating, 5
                          rounds, each round a fresh process per setting, with the sm_90a
                          kernels and with LPATTN_NO_WGMMA=1 (mma.sync); causal prefill
                          (HIGH, FP8, NVFP4) and backward (HIGH), B = 1, H = 32, D = 128,
                          f16; medians. Writes a markdown table to OUT.md.
  nan_masked.py time      (what ab runs) one process's timings, JSON lines.

LPATTN_LIBRARY=... PYTHONPATH=python; torch for cuda. The C test is tests/cuda/test_cuda_nan.c.
"""
import json
import os
import statistics
import subprocess
import sys

import numpy as np

import lpattn


def reproducer(be):
    S, D = 128, 64
    cuda = be == "cuda"
    if cuda:
        import torch
    rng = np.random.default_rng(0)
    base = [rng.standard_normal((1, 1, S, D)).astype(np.float16) for _ in range(4)]
    t = 40
    for which in ("v", "k"):
        for prec in ("high", "nvfp4", "mxfp4", "fp8"):
            q, k, v, do = [x.copy() for x in base]
            (v if which == "v" else k)[0, 0, t + 1, 3] = np.nan
            do[0, 0, t + 1:] = 0
            if cuda:
                q, k, v, do = [torch.from_numpy(x).cuda() for x in (q, k, v, do)]
            try:
                o, lse = lpattn.attention(q, k, v, causal=True, precision=prec, backend=be, return_lse=True)
                dq, dk, dv = lpattn.attention_backward(q, k, v, o, lse, do, causal=True, precision=prec, backend=be)
            except Exception as e:
                print(which, prec, "err", str(e)[:80])
                continue
            f = (lambda x: x.float().cpu().numpy()) if cuda else np.asarray
            o, dq = f(o), f(dq)
            bo = [r for r in range(t + 1) if not np.isfinite(o[0, 0, r]).all()]
            bq = [r for r in range(t + 1) if not np.isfinite(dq[0, 0, r]).all()]
            print(be, which, prec, "O rows <= t non-finite:", len(bo), " dQ rows <= t non-finite:", len(bq))


SIZES = (4096, 16384)
FWD = ("high", "fp8", "nvfp4")


def time_one():
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_cuda import timed

    for S in SIZES:
        g = torch.Generator(device="cuda").manual_seed(S)
        q, k, v, do = (torch.randn(1, 32, S, 128, device="cuda", dtype=torch.float16, generator=g) for _ in range(4))
        for prec in FWD:
            ms = timed(lambda: lpattn.attention(q, k, v, causal=True, precision=prec, backend="cuda"), 10)
            print(json.dumps({"what": f"fwd {prec} S={S}", "ms": ms}), flush=True)
        o, lse = lpattn.attention(q, k, v, causal=True, backend="cuda", return_lse=True)
        ms = timed(lambda: lpattn.attention_backward(q, k, v, o, lse, do, causal=True, backend="cuda"), 10)
        print(json.dumps({"what": f"bwd high S={S}", "ms": ms}), flush=True)


def ab(out):
    res = {}  # (what, mma, off) -> [ms]
    for rnd in range(5):
        for mma in ("0", "1"):
            for off in ("0", "1") if rnd % 2 == 0 else ("1", "0"):
                env = dict(os.environ, LPATTN_NF_OFF=off, LPATTN_NO_WGMMA=mma)
                p = subprocess.run([sys.executable, os.path.abspath(__file__), "time"], env=env, capture_output=True,
                                   text=True, check=True)
                for line in p.stdout.splitlines():
                    r = json.loads(line)
                    res.setdefault((r["what"], mma, off), []).append(r["ms"])
        print(f"round {rnd + 1} done", file=sys.stderr, flush=True)
    rows = ["| call (causal, D = 128, f16) | kernels | checks off ms | checks on ms | on / off |",
            "|---|---|---|---|---|"]
    for (what, mma, off) in sorted(k for k in res if k[2] == "1"):
        a, b = statistics.median(res[(what, mma, "1")]), statistics.median(res[(what, mma, "0")])
        rows.append(f"| {what} | {'mma.sync' if mma == '1' else 'sm_90a'} | {a:.3f} | {b:.3f} | {b / a:.3f} |")
    text = "\n".join(rows) + "\n"
    with open(out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    if sys.argv[1] == "ab":
        ab(sys.argv[2])
    elif sys.argv[1] == "time":
        time_one()
    else:
        reproducer(sys.argv[1])
