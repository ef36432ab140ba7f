#!/usr/bin/env python3
"""Per-kernel GPU time of one paged decode call (torch.profiler, CUPTI): the
decode kernel and the merge of its chunks, by name, for B sequences of
CONTEXT tokens, 32 q heads, 8 kv heads, D 128, f16, page 64. Tells a change
in a call's time apart into its kernels (issue 30's B = 1 figure).

  LPATTN_LIBRARY=build/liblpattn.so python3 bench/cuda/decode_kernels.py [B] [CONTEXT] [PRECISION ...]
"""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import lpattn  # noqa: E402


def main():
    B = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    ctx = int(sys.argv[2]) if len(sys.argv) > 2 else 131072
    precs = sys.argv[3:] or ["high", "fp8", "nvfp4"]
    Hq, Hkv, D, T, step, reps = 32, 8, 128, 64, 8192, 20
    torch.manual_seed(0)
    for prec in precs:
        maxp = ctx // T + 1
        pool = lpattn.KVPool(B * maxp, B, Hkv, Hq, D, precision=prec, page_size=T, like=torch.empty(0, device="cuda"))
        slots = torch.arange(B, dtype=torch.int32, device="cuda")
        table = torch.arange(B * maxp, dtype=torch.int32, device="cuda").view(B, maxp)
        for at in range(0, ctx, step):
            k = torch.randn(B, Hkv, step, D, device="cuda", dtype=torch.float16)
            v = torch.randn(B, Hkv, step, D, device="cuda", dtype=torch.float16)
            q = torch.randn(B, Hq, step, D, device="cuda", dtype=torch.float16) if prec == "thrift" else None
            lens = torch.full((B,), at, dtype=torch.int32, device="cuda")
            pool.append(k, v, slots, lens, table, q, max_length=at + step)
        lens = torch.full((B,), ctx, dtype=torch.int32, device="cuda")
        q = torch.randn(B, Hq, 1, D, device="cuda", dtype=torch.float16)
        out = torch.empty_like(q)
        f = lambda: pool.decode(q, slots, lens, table, max_length=ctx, out=out)  # noqa: E731
        for _ in range(3):
            f()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(reps):
                f()
            torch.cuda.synchronize()
        print(f"== B {B} context {ctx} {prec}: per call, {reps} calls")
        for e in sorted(p.key_averages(), key=lambda e: -e.device_time_total):
            if e.device_time_total > 0:
                print(f"  {e.key[:60]:60s} {e.device_time_total / reps:9.2f} us  x{e.count / reps:.0f}")
        pool.close()


if __name__ == "__main__":
    main()
