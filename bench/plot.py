#!/usr/bin/env python3
"""PNG plots from lpattn-bench CSVs: the PASA sweeps and Thrift recovery vs length.

usage: python3 bench/plot.py [CSV_DIR]   (default bench/out; PNGs go next to the CSVs)
Needs matplotlib (Debian: apt-get install python3-matplotlib); the C tool does not
(the main report writes its own plot, main.svg, without it).
"""
import csv
import math
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot.py: matplotlib is not installed (apt-get install python3-matplotlib)")


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(s):
    try:
        return float(s)
    except ValueError:
        return math.nan


def plot_pasa(rows, out):
    methods = [("f32", "FA f32"), ("f16s", "f16 scores / f32 softmax"), ("pasa", "PASA (f16)")]
    panels = [("uniform", "x0", "Am = 0.5"), ("uniform", "Am", "x0 = 20"),
              ("hybrid", "x0", "Am = 10"), ("hybrid", "Am", "x0 = 20")]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, (dist, sweep, fixed) in zip(axes.flat, panels):
        sel = [r for r in rows if r["dist"] == dist and r["sweep"] == sweep]
        xs = [num(r[sweep]) for r in sel]
        for key, label in methods:
            ys = [num(r[key + "_rmse"]) for r in sel]
            nan = [num(r[key + "_naninf_pct"]) for r in sel]
            ax.plot(xs, ys, marker="o", label=label)
            for x, y, n in zip(xs, ys, nan):
                if n > 0:  # NaN/Inf outputs: marked with text, as the seed does
                    finite = y == y
                    ax.annotate("%s NaN %.3g%%" % (label.split()[0], n),
                                (x, y if finite else 0.92),
                                xycoords="data" if finite else ("data", "axes fraction"),
                                textcoords="offset points", xytext=(0, 6), fontsize=8,
                                ha="center", color="red")
        ax.set_yscale("log")
        ax.set_xlabel(sweep)
        ax.set_ylabel("relative RMSE vs f64")
        ax.set_title("%s, %s" % (dist, fixed))
        ax.grid(True, alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote", out)


def plot_thrift_length(rows, out):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [num(r["S"]) for r in rows]
    for b in ("5", "10", "25"):
        ax.plot(xs, [num(r["rec_" + b]) for r in rows], marker="o",
                label="%s%% vs all-FP4" % b)
        ax.plot(xs, [num(r["rec_%s_diag" % b]) for r in rows], marker="x", linestyle="--",
                label="%s%% vs FP4 with diagonal high" % b)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length")
    ax.set_ylabel("share of FP4 error recovered")
    ax.set_title("ThriftAttention (NVFP4) recovery vs length")
    ax.axhline(0, color="gray", linewidth=0.8)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote", out)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "bench/out"
    done = 0
    jobs = [("pasa.csv", "pasa.png", plot_pasa),
            ("thrift_length.csv", "thrift_length.png", plot_thrift_length)]
    for csv_name, png, fn in jobs:
        path = os.path.join(d, csv_name)
        if os.path.exists(path):
            fn(read(path), os.path.join(d, png))
            done += 1
    if not done:
        sys.exit("plot.py: no pasa.csv or thrift_length.csv in %s" % d)


if __name__ == "__main__":
    main()
