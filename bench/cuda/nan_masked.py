#!/usr/bin/env python3
"""Diagnostic for docs/SEMANTICS.md "Non-finite inputs" (the CUDA deviation): a NaN
in K or V at key t + 1, the masked future of rows <= t in their diagonal tile. Do rows
<= t of the forward's O, and of dQ with dO zero after t, stay finite?

Usage: LPATTN_LIBRARY=... PYTHONPATH=python nan_masked.py BACKEND (ref, cpu or cuda).
Prints, per tensor and precision, how many of those rows are non-finite (the contract: 0).
"""
import sys

import numpy as np

import lpattn

be = sys.argv[1]
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
