#!/usr/bin/env python3
"""Plot of a bench_cuda.py prefill table (issue 16): TFLOP/s of every precision and of
PyTorch SDPA (flash, cuDNN) against S, one panel per mask.

usage: python3 bench/cuda/plot_prefill.py TABLE.md OUT.png [TITLE]
TABLE.md: the markdown that bench_cuda.py writes (or any file holding its prefill table:
rows "| S | D | causal | precision | lpattn ms | TFLOP/s | SDPA flash ms | SDPA cuDNN ms | ...").
Rows of D = 128 are plotted. Needs matplotlib (pip install matplotlib).
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(path):
    out = []
    for line in open(path):
        f = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(f) < 8 or not f[0].isdigit():
            continue
        out.append({"S": int(f[0]), "D": int(f[1]), "causal": int(f[2]), "prec": f[3],
                    "ms": float(f[4]), "tf": float(f[5]),
                    "flash": float(f[6]) if f[6] != "-" else None,
                    "cudnn": float(f[7]) if f[7] != "-" else None})
    return [r for r in out if r["D"] == 128]


def flops(S, causal, D=128, H=32):
    f = 4.0 * S * S * D * H
    return f / 2 if causal else f


def main():
    table, png = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else "lpattn prefill, B = 1, H = 32, D = 128, f16"
    rs = rows(table)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for ax, causal in zip(axes, (0, 1)):
        sel = [r for r in rs if r["causal"] == causal]
        for prec in sorted({r["prec"] for r in sel}, key=["high", "fp8", "nvfp4", "mxfp4", "thrift"].index):
            pts = sorted((r["S"], r["tf"]) for r in sel if r["prec"] == prec)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label="lpattn " + prec)
        for key, name, style in (("cudnn", "SDPA cuDNN", "k--"), ("flash", "SDPA flash", "k:")):
            pts = sorted({(r["S"], flops(r["S"], causal) / (r[key] * 1e-3) / 1e12) for r in sel if r[key]})
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("S (queries = keys)")
        ax.set_title("causal" if causal else "non-causal")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("TFLOP/s")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
