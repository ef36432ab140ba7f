#!/usr/bin/env python3
"""Run bench_cuda (lpattn's CUDA backend) and time PyTorch SDPA (flash and
cuDNN backends) on the same shapes in the same run; write a markdown table.

Usage: bench_cuda.py BENCH_BINARY OUT.md [KINDS]   (KINDS: comma-separated of
prefill, prefill-high, prefill-dims, quant, decode; default all)
"""
import json
import platform
import subprocess
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F


def timed(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def sdpa_prefill(S, causal, backend, D=128):
    q, k, v = (torch.randn(1, 32, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
    try:
        with sdpa_kernel(backend):
            return timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)),
                         5 if S >= 16384 else 20)
    except RuntimeError:
        return None


def sdpa_decode(B, ctx, backend):
    q = torch.randn(B, 32, 1, 128, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(B, 8, ctx, 128, device="cuda", dtype=torch.float16) for _ in range(2))
    try:
        with sdpa_kernel(backend):
            return timed(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), 20)
    except RuntimeError:
        pass
    # backends without GQA: expanded K/V (the expansion is not timed)
    ke, ve = k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1)
    try:
        with sdpa_kernel(backend):
            return timed(lambda: F.scaled_dot_product_attention(q, ke, ve), 20)
    except RuntimeError:
        return None


def peers_decode(cache, B, ctx):
    """(SDPA flash ms, SDPA cuDNN ms) for a decode shape, timed once per shape."""
    if (B, ctx) not in cache:
        cache[(B, ctx)] = (sdpa_decode(B, ctx, SDPBackend.FLASH_ATTENTION),
                           sdpa_decode(B, ctx, SDPBackend.CUDNN_ATTENTION))
        torch.cuda.empty_cache()
    return cache[(B, ctx)]


def fmt(x, f="%.3f"):
    return "n/a" if x is None else f % x


def main():
    binary, out = sys.argv[1], sys.argv[2]
    rows = []
    for what in (sys.argv[3].split(",") if len(sys.argv) > 3 else ["all"]):
        p = subprocess.run([binary, what], capture_output=True, text=True, check=True)
        for line in p.stdout.splitlines():
            if line.startswith("{"):
                rows.append(json.loads(line))
    dev = torch.cuda.get_device_name()
    lines = ["# CUDA backend benchmark", "",
             "Machine: %s, torch %s, CUDA %s, host %s." % (dev, torch.__version__, torch.version.cuda,
                                                          platform.node()),
             "Command: `python3 bench/cuda/bench_cuda.py build-cuda/bench/cuda/bench_cuda OUT.md` "
             "(median of 5-20 timed runs after warm-up, CUDA events; f16 inputs and outputs).", "",
             "## Prefill (B=1, H=32, D=128 unless the D column says otherwise)", "",
             "ratio = SDPA time / lpattn time (above 1: lpattn faster).", "",
             "| S | D | causal | precision | lpattn ms | TFLOP/s | SDPA flash ms | SDPA cuDNN ms | ratio flash | ratio cuDNN |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    cache = {}
    for r in (r for r in rows if r["kind"] == "prefill"):
        D = r.get("D", 128)
        key = (r["S"], D, r["causal"])
        if key not in cache:
            cache[key] = (sdpa_prefill(r["S"], r["causal"], SDPBackend.FLASH_ATTENTION, D),
                          sdpa_prefill(r["S"], r["causal"], SDPBackend.CUDNN_ATTENTION, D))
        fl, cu = cache[key]
        lines.append("| %d | %d | %d | %s | %.3f | %.1f | %s | %s | %s | %s |" % (
            r["S"], D, r["causal"], r["prec"], r["ms"], r["tflops"], fmt(fl), fmt(cu),
            fmt(fl and fl / r["ms"], "%.2f"), fmt(cu and cu / r["ms"], "%.2f")))
        print(lines[-1], flush=True)
    lines += ["", "## Quantization pass (lpattn_quantize, [1, 32, S, 128] f16)", "",
              "GB/s = (bytes read + bytes written) / time; copy = cudaMemcpy D2D of the input "
              "(read + write), same run.", "",
              "| S | format | axis | ms | GB/s | copy GB/s | share of copy |", "|---|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["kind"] == "quant"):
        lines.append("| %d | %s | %s | %.4f | %.0f | %.0f | %.0f%% |" % (
            r["S"], r["fmt"], r["axis"], r["ms"], r["gbs"], r["copy_gbs"], 100.0 * r["gbs"] / r["copy_gbs"]))
        print(lines[-1], flush=True)
    lines += ["", "## Decode (32 q heads, 8 kv heads, D=128, one query token)", "",
              "GB/s = bytes of the KV cache in its stored precision / time.", "",
              "| B | context | precision | lpattn ms | GB/s | SDPA flash ms | SDPA cuDNN ms | ratio flash | ratio cuDNN |",
              "|---|---|---|---|---|---|---|---|---|"]
    cache = {}
    for r in (r for r in rows if r["kind"] == "decode"):
        fl, cu = peers_decode(cache, r["B"], r["ctx"])
        lines.append("| %d | %d | %s | %.3f | %.0f | %s | %s | %s | %s |" % (
            r["B"], r["ctx"], r["prec"], r["ms"], r["gbs"], fmt(fl), fmt(cu),
            fmt(fl and fl / r["ms"], "%.2f"), fmt(cu and cu / r["ms"], "%.2f")))
        print(lines[-1], flush=True)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
