#!/usr/bin/env python3
"""A fixed workload for profiling lpattn's CUDA attention backward under ncu
(bench/RESULTS_cuda_h100.md "Session 11"): one [1, 32, S, 128] f16 forward,
then two backward calls at the given precision, non-causal.

Usage: LPATTN_LIBRARY=B/liblpattn.so PYTHONPATH=python \\
         ncu -k regex:gpu_bwd_d --launch-skip 2 --launch-count 2 --set full -o R \\
         python3 bench/cuda/prof_backward.py 4096 fp8
(the skip passes the first call's prep/dkdv launches; see RESULTS for the
sections and the source-page export).
"""
import sys

import torch

import lpattn


def main():
    S = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    prec = sys.argv[2] if len(sys.argv) > 2 else "fp8"
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = [torch.randn(1, 32, S, 128, device="cuda", dtype=torch.float16, generator=g) for _ in range(4)]
    out, lse = lpattn.attention(q, k, v, causal=False, precision=prec, return_lse=True, backend="cuda")
    for _ in range(2):
        lpattn.attention_backward(q, k, v, out, lse, do, causal=False, precision=prec, backend="cuda")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
