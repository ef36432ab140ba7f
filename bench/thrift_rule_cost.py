#!/usr/bin/env python3
"""What THRIFT's selection rules (lpattn thrift_rule; docs/SEMANTICS.md "THRIFT
selection rules") add to a GPU prefill: each rule's call time against rule 0's
(THRIFT nvfp4 at 10%, causal, block 64) and HIGH's, CUDA events, mean of 10
calls after 3 warm-ups. --profile adds torch.profiler's per-kernel table of
one KMAX call (gpu_kmax_kernel, gpu_qbar_kernel, gpu_select_kernel beside the
attention kernel).

  LPATTN_LIBRARY=build/liblpattn.so python3 bench/thrift_rule_cost.py [--profile]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import lpattn  # noqa: E402

SHAPES = [(1, 32, 8, 8192, 128), (1, 32, 32, 8192, 128), (1, 16, 16, 16384, 64)]
RULES = [None, "sink", "gqa", "kmax", "kmax+gqa", "sink+kmax+gqa"]


def call(q, k, v, rule, prec="thrift"):
    kw = dict(causal=True, precision=prec, block_q=64, block_k=64)
    if prec == "thrift":
        kw.update(thrift_budget=0.1, thrift_low="nvfp4", thrift_rule=rule)
    return lambda: lpattn.attention(q, k, v, **kw)


def timed(f, reps=10):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        f()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / reps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    for B, H, Hkv, S, D in SHAPES:
        q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16) + 0.3
        v = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16)
        hi = timed(call(q, k, v, None, "high"))
        base = timed(call(q, k, v, None))
        print(f"B{B} H{H} Hkv{Hkv} S{S} D{D} causal bf16: high {hi:.3f} ms, thrift rule 0 {base:.3f} ms")
        for r in RULES[1:]:
            t = timed(call(q, k, v, r))
            print(f"  {r:14s} {t:.3f} ms  (+{t - base:.3f} ms, {100 * (t - base) / base:.1f}% of rule 0)", flush=True)
        if args.profile:
            from torch.profiler import ProfilerActivity, profile
            f = call(q, k, v, "kmax")
            f()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                f()
                torch.cuda.synchronize()
            print(p.key_averages().table(sort_by="cuda_time_total", row_limit=8))


if __name__ == "__main__":
    main()
