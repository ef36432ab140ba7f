#!/usr/bin/env python3
"""Run bench_paged (decode through lpattn's paged KV pool on CUDA) and time
PyTorch SDPA (flash and cuDNN, f16, GQA) on the same shapes in the same run;
print a markdown table.

Usage: bench_paged.py BENCH_BINARY OUT.md [quick]
"""
import json
import os
import platform
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cuda import peers_decode, fmt  # noqa: E402


def main():
    binary, out = sys.argv[1], sys.argv[2]
    args = [binary] + sys.argv[3:4]
    p = subprocess.run(args, capture_output=True, text=True)
    sys.stderr.write(p.stderr)
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    copy = next(r["gbs"] for r in rows if r["kind"] == "copy")
    dev = torch.cuda.get_device_name()
    lines = ["## Paged decode (issue 12): 32 q heads, 8 kv heads, D = 128, f16 queries, Sq = 1", "",
             "Machine: %s, torch %s, CUDA %s, host %s." % (dev, torch.__version__, torch.version.cuda,
                                                          platform.node()),
             "Command: `python3 bench/cuda/bench_paged.py build/bench/cuda/bench_paged OUT.md` (median of 50 "
             "timed lpattn_paged_decode calls, CUDA events, pool filled by appends once before).",
             "GB/s = stored bytes the decode reads (completed pages in their format, the current tile "
             "high) / time; copy = cudaMemcpy d2d in the same run, (read + write) / time: %.0f GB/s." % copy,
             "B/token = device bytes per token of the pool (library count / cudaMemGetInfo difference).",
             "pipelined ms = calls back to back (the host's work hidden behind the kernels); host us = the "
             "call's return on the host (median).", "",
             "| B | context | precision | lpattn ms | GB/s | % of copy | SDPA flash ms | SDPA cuDNN ms | "
             "speed-up vs cuDNN | B/token lib | B/token dev | pipelined ms | host us |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    cache = {}
    for r in (r for r in rows if r["kind"] == "paged"):
        if "ms" not in r:
            lines.append("| %d | %d | %s | %s | | | | | | | | | |" % (r["B"], r["ctx"], r["prec"], r["status"]))
            print(lines[-1], flush=True)
            continue
        fl, cu = peers_decode(cache, r["B"], r["ctx"])
        lines.append("| %d | %d | %s | %.4f | %.0f | %.0f%% | %s | %s | %s | %.0f | %.0f | %s | %s |" % (
            r["B"], r["ctx"], r["prec"], r["ms"], r["gbs"], 100.0 * r["gbs"] / copy, fmt(fl, "%.4f"),
            fmt(cu, "%.4f"), fmt(cu and cu / r["ms"], "%.2fx"), r["lib_bytes_per_token"],
            r["dev_bytes_per_token"], fmt(r.get("pipe_ms"), "%.4f"), fmt(r.get("host_us"), "%.1f")))
        print(lines[-1], flush=True)
    ms = {(r["B"], r["ctx"], r["prec"]): r["ms"] for r in rows if r["kind"] == "paged" and "ms" in r}
    ratios = ["B = %d, context %d: THRIFT (NVFP4, budget 5%%) / NVFP4 = %.2fx" % (b, c, ms[(b, c, "thrift")] / t)
              for (b, c, p), t in ms.items() if p == "nvfp4" and (b, c, "thrift") in ms]
    if ratios:
        lines += [""] + ["- " + x for x in ratios]
        print("\n".join(ratios), flush=True)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
