#!/usr/bin/env python3
"""Time lpattn's CUDA attention backward (precision HIGH, and FP8, NVFP4 and
MXFP4 as a ratio to HIGH) and PyTorch SDPA's backward (flash and cuDNN
backends) on the same shapes in the same run (issue 14's targets: B = 1,
H = 32, D = 128, S = 4k-16k, f16; HIGH >= 0.5x SDPA, low <= 1x HIGH's time);
write a markdown table.

Usage: LPATTN_LIBRARY=.../liblpattn.so bench_backward.py OUT.md [S,S,...]
(the lpattn Python package on PYTHONPATH, e.g. PYTHONPATH=python). Each
backward is timed alone (the forward that produced out/LSE, or SDPA's graph, is built once outside the timing);
the median of the repetitions is reported, and FLOP/s counts 2.5 forward
matmuls' worth (4 S^2 D H per forward, halved when causal).
"""
import os
import platform
import sys


import torch  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lpattn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cuda import timed  # noqa: E402

B, H = 1, 32
D = int(os.environ.get("LPATTN_BENCH_D", "128"))  # issue 14 names D = 128 and f16
DT = os.environ.get("LPATTN_BENCH_DTYPE", "f16")


def inputs(S):
    g = torch.Generator(device="cuda").manual_seed(S)
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[DT]
    return [torch.randn(B, H, S, D, device="cuda", dtype=dt, generator=g) for _ in range(4)]


# LPATTN_BENCH_LOW=fp8,nvfp4 picks the low precisions timed ("" none)
LOW = tuple(x for x in os.environ.get("LPATTN_BENCH_LOW", "fp8,nvfp4,mxfp4").split(",") if x)


def lpattn_bwd(S, causal, reps, precision="high"):
    q, k, v, do = inputs(S)
    out, lse = lpattn.attention(q, k, v, causal=causal, precision=precision, return_lse=True, backend="cuda")
    run = lambda: lpattn.attention_backward(q, k, v, out, lse, do, causal=causal, precision=precision,
                                            backend="cuda")
    return timed(run, reps)


def sdpa_bwd(S, causal, backend, reps):
    q, k, v, do = inputs(S)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    try:
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))

            def run():
                torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
            return timed(run, reps)
    except RuntimeError:
        return None


def tflops(S, causal, ms):
    if ms is None:
        return "-"
    f = 2.5 * 4.0 * S * S * D * H * B * (0.5 if causal else 1.0)
    return "%.0f" % (f / (ms * 1e-3) / 1e12)


def main():
    out_md = sys.argv[1]
    sizes = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [4096, 8192, 16384]
    rows = []
    for S in sizes:
        for causal in (0, 1):
            reps = 5 if S >= 16384 else 20
            lp = lpattn_bwd(S, causal, reps)
            fl = sdpa_bwd(S, causal, SDPBackend.FLASH_ATTENTION, reps)
            cu = sdpa_bwd(S, causal, SDPBackend.CUDNN_ATTENTION, reps)
            best = min(x for x in (fl, cu) if x is not None) if (fl or cu) else None
            ratio = "%.2f" % (best / lp) if best else "-"
            fmt = lambda x: "%.3f" % x if x is not None else "-"
            low = [lpattn_bwd(S, causal, reps, p) for p in LOW]
            rows.append("| %d | %d | %s | %s | %s | %s | %s | %s | %s |" % (
                S, causal, fmt(lp), tflops(S, causal, lp), fmt(fl), fmt(cu), tflops(S, causal, best), ratio,
                " | ".join("%s (%.2f)" % (fmt(x), x / lp) for x in low)))
            print(rows[-1], flush=True)
    dev = torch.cuda.get_device_name()
    with open(out_md, "w") as f:
        f.write("# Attention backward: lpattn CUDA (HIGH and the low precisions) vs PyTorch SDPA\n\n")
        f.write("%s, torch %s, %s; B = %d, H = %d, D = %d, %s; median ms of one backward.\n"
                "speed = SDPA's best / lpattn (1 = as fast as SDPA; issue 14 asks >= 0.5).\n"
                "Low columns: lpattn's backward at that precision, ms (its time / HIGH's; issue 14 asks <= 1).\n\n"
                % (dev, torch.__version__, platform.node(), B, H, D, DT))
        f.write("| S | causal | lpattn ms | lpattn TFLOP/s | SDPA flash ms | SDPA cuDNN ms | SDPA best TFLOP/s | speed | "
                + " | ".join("%s ms (x HIGH)" % p for p in LOW) + " |\n")
        f.write("| --- " * (8 + len(LOW)) + "|\n")
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
