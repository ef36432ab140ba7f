#!/usr/bin/env python3
"""The future-leakage experiment of "Future leakage in block-quantized
attention" (../shared/seeds/000_*), through lpattn's PyTorch integration.

A small causal byte-level transformer is trained three times, attention
forward *and* backward through lpattn.torch.attention:
  high   f16/f32 attention (no quantization): the baseline;
  safe   MXFP4, lpattn's default causal-safe mode (diagonal tiles high);
  leaky  MXFP4 with every tile low and V's scales spanning the tile (the
         paper's "Leaky" model: a row's output can see later tokens of its tile).
Both MXFP4 runs use the never-clipping scale rule (mx_scale_round_up) so that
the backward's stochastic rounding is unbiased (docs/SEMANTICS.md "Backward").
Each model is evaluated on held-out text in parallel mode (one forward over
each whole sequence, as in training) and autoregressive mode (each position's
loss from a forward over its prefix alone, as in generation). A model that
learned to read the future through quantization scales does better in
parallel mode than in autoregressive mode: gap = autoregressive - parallel.

Text: the Python standard library's sources (they ship with Python), bytes,
the last 5% held out. Output: the table (markdown) on stdout and in
OUT/train_leak.md, the gradient norm of every step in OUT/grad_norms.csv, and
OUT/grad_norms.png when matplotlib is installed.

Usage: train_leak.py [--device cpu|cuda] [--steps N] [--layers L] [--dmodel D]
                     [--heads H] [--ctx S] [--batch B] [--seeds K] [--out DIR]
The defaults are the H100 configuration; a CPU smoke run, e.g.
  --steps 150 --layers 2 --dmodel 128 --ctx 128 --batch 8 --seeds 1
"""
import argparse
import csv
import glob
import math
import os
import sysconfig
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import lpattn
import lpattn.torch as lt

MODES = {
    "high": dict(precision="high"),
    "safe": dict(precision="mxfp4", mx_scale_round_up=True),
    "leaky": dict(precision="mxfp4", mx_scale_round_up=True, leaky=True),
}
SETUP = {}  # --block, --mx-floor, --bwd: set by main() for every mode


class _Blocked(torch.autograd.Function):
    """lpattn.attention / attention_backward with block_q = block_k = --block
    (lpattn.torch.attention takes lpattn's default blocks)."""

    @staticmethod
    def forward(ctx, q, k, v, kw):
        q, k, v = (t.detach().contiguous() for t in (q, k, v))
        out, lse = (torch.from_dlpack(t) for t in lpattn.attention(q, k, v, causal=True, return_lse=True, **kw))
        ob = out
        if SETUP.get("delta") == "unq":
            # The backward's Delta = rowsum(dO * O) from the output with the
            # quantizers of P and V taken out: softmax(Qd Kd^T s) V (leaky: every
            # tile low, so Qd and Kd everywhere), so that dS's rows sum to ~0.
            if not kw.get("leaky"):
                raise SystemExit("--delta unq: leaky mode only")
            up = kw.get("mx_scale_round_up", False)
            qd, kd = (torch.from_dlpack(lpattn.dequantize(lpattn.quantize(t, "mxfp4", axis="d", mx_scale_round_up=up)))
                      for t in (q, k))
            ob = F.scaled_dot_product_attention(qd, kd, v, is_causal=True).to(out.dtype)
        ctx.save_for_backward(q, k, v, ob, lse)
        ctx.kw = kw
        return out

    @staticmethod
    def backward(ctx, dout):
        seed = int(torch.randint(0, 2 ** 62, (1,)).item())  # as lpattn.torch's backward
        g = lpattn.attention_backward(*ctx.saved_tensors, dout.contiguous(), causal=True, seed=seed, **ctx.kw)
        return tuple(torch.from_dlpack(t) for t in g) + (None,)


def attend_lpattn(q, k, v, mode):
    """lpattn's forward; its backward (--bwd lib), or the gradient of exact
    attention at the same inputs (--bwd exact: a straight-through estimator
    around the whole low-precision forward)."""
    kw = dict(mode)
    if SETUP.get("mx_floor") and kw.get("precision") == "mxfp4":
        kw["mx_scale_round_up"] = False
    if SETUP.get("block") or SETUP.get("delta") == "unq":
        if SETUP.get("block"):
            kw["block_q"] = kw["block_k"] = SETUP["block"]
        out = _Blocked.apply(q, k, v, kw)
    else:
        out = lt.attention(q, k, v, causal=True, **kw)
    if SETUP.get("bwd") == "exact" and torch.is_grad_enabled():
        ex = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = out.detach() + (ex - ex.detach())
    return out


def corpus(limit_bytes):
    src = sysconfig.get_paths()["stdlib"]
    data = bytearray()
    for path in sorted(glob.glob(os.path.join(src, "*.py"))):
        with open(path, "rb") as f:
            data += f.read()
        if len(data) >= limit_bytes:
            break
    t = torch.frombuffer(bytearray(data[:limit_bytes]), dtype=torch.uint8).long()
    cut = int(len(t) * 0.95)
    return t[:cut], t[cut:]


class Block(nn.Module):
    attend = None  # f(block, q, k, v) -> out [B, H, S, dh] instead of lpattn (bench/thrift_nll.py)

    def __init__(self, d, h, mode):
        super().__init__()
        self.h, self.mode = h, MODES[mode]
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        B, S, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, S, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        with torch.no_grad():  # the keys' shared component: |mean over tokens| / rms of the rest, per head
            km = k.mean(2, keepdim=True)
            self.kshare = float((km.norm(dim=-1) / (k - km).norm(dim=-1).pow(2).mean(2, keepdim=True).sqrt()).max())
        dt = torch.bfloat16 if x.is_cuda or SETUP.get("bf16") else torch.float32  # GPU backends take 16-bit inputs
        if self.attend is not None:
            a = self.attend(self, q, k, v).to(x.dtype)
        else:
            a = attend_lpattn(q.to(dt), k.to(dt), v.to(dt), self.mode).to(x.dtype)
        x = x + self.proj(a.transpose(1, 2).reshape(B, S, d))
        return x + self.mlp(self.ln2(x))


class Model(nn.Module):
    def __init__(self, layers, d, h, ctx, mode):
        super().__init__()
        self.emb, self.pos = nn.Embedding(256, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, h, mode) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, 256)

    def forward(self, x):
        y = self.emb(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for b in self.blocks:
            y = b(y)
        return self.head(self.ln(y))


def batches(data, n, ctx, gen):
    i = torch.randint(0, len(data) - ctx - 1, (n,), generator=gen)
    x = torch.stack([data[j:j + ctx + 1] for j in i.tolist()])
    return x[:, :-1], x[:, 1:]


def train(args, mode, seed, train_data):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    m = Model(args.layers, args.dmodel, args.heads, args.ctx, mode).to(args.device)
    opt = torch.optim.AdamW(m.parameters(), lr=args.lr, weight_decay=0.01)
    norms = []
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = (t.to(args.device) for t in batches(train_data, args.batch, args.ctx, gen))
        loss = F.cross_entropy(m(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        if step % (args.log_every or max(1, args.steps // 10)) == 0 or step == args.steps - 1:
            top = sorted(((float(p.grad.norm()), n) for n, p in m.named_parameters()), reverse=True)[:3]
        norms.append(float(torch.nn.utils.clip_grad_norm_(m.parameters(), args.clip)))
        opt.step()
        if step % (args.log_every or max(1, args.steps // 10)) == 0 or step == args.steps - 1:
            print(f"  {mode} seed {seed} step {step}: loss {loss.item():.3f}, grad norm {norms[-1]:.3f}"
                  f" (largest: {', '.join(f'{n} {g:.3g}' for g, n in top)}; key share "
                  f"{' '.join(f'{b.kshare:.2f}' for b in m.blocks)})", flush=True)
    return m, norms


@torch.no_grad()
def evaluate(args, m, held):
    """(parallel, autoregressive) mean loss in nats over the same positions."""
    gen = torch.Generator().manual_seed(1234)
    x, y = (t.to(args.device) for t in batches(held, args.eval_seqs, args.ctx, gen))
    par = F.cross_entropy(m(x).flatten(0, 1), y.flatten()).item()
    ar = 0.0
    for t in range(args.ctx):  # position t sees x[:, :t + 1] only
        ar += F.cross_entropy(m(x[:, :t + 1])[:, -1], y[:, t], reduction="sum").item()
    return par, ar / (args.ctx * x.shape[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dmodel", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--eval-seqs", type=int, default=16)
    ap.add_argument("--log-every", type=int, default=0, help="print every N steps (0: steps / 10)")
    ap.add_argument("--bf16", action="store_true", help="bf16 attention inputs on the CPU too (as on the GPU)")
    ap.add_argument("--delta", choices=("out", "unq"), default="out",
                    help="backward's Delta from the forward's output, or from softmax(Qd Kd^T) V (leaky only)")
    ap.add_argument("--warmup", type=int, default=20, help="linear lr warm-up steps")
    ap.add_argument("--clip", type=float, default=1.0, help="gradient-norm clipping")
    ap.add_argument("--block", type=int, default=0, help="block_q = block_k (0: lpattn's default)")
    ap.add_argument("--mx-floor", action="store_true", help="MXFP4's OCP (floor) scale rule instead of round-up")
    ap.add_argument("--bwd", choices=("lib", "exact"), default="lib",
                    help="attention backward: lpattn's (SPEC 10) or exact attention's gradient (straight-through)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    ap.add_argument("--out", default="bench/train_leak_out")
    args = ap.parse_args()
    SETUP.update(delta=args.delta, bf16=args.bf16, block=args.block, mx_floor=args.mx_floor, bwd=args.bwd)
    os.makedirs(args.out, exist_ok=True)
    train_data, held = corpus(8 << 20)
    print(f"text: {len(train_data)} training bytes, {len(held)} held out; {args.layers} layers, "
          f"d_model {args.dmodel}, {args.heads} heads, context {args.ctx}, batch {args.batch}, "
          f"{args.steps} steps, device {args.device}, lr {args.lr}, warm-up {args.warmup}, clip {args.clip}, "
          f"block {args.block or 'default'}, MXFP4 scales {'floor' if args.mx_floor else 'round-up'}, "
          f"backward {args.bwd}, Delta from {args.delta}{', bf16 attention' if args.bf16 else ''}", flush=True)
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"--modes: {m!r} is not one of {sorted(MODES)}")
    rows, curves = [], {}
    for mode in modes:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            t0 = time.time()
            m, norms = train(args, mode, seed, train_data)
            par, ar = evaluate(args, m, held)
            rows.append((mode, seed, par, ar, ar - par, time.time() - t0))
            curves[f"{mode}_{seed}"] = norms
            print(f"| {mode} | {seed} | {par:.4f} | {ar:.4f} | {ar - par:+.5f} | {rows[-1][5]:.0f} s |",
                  flush=True)
    lines = ["## Future leakage: parallel vs autoregressive held-out loss (nats per byte)", "",
             "Columns: model; training seed; parallel = loss with one forward over each whole "
             "held-out sequence; autoregressive = each position's loss from a forward over its "
             "prefix alone; gap = autoregressive - parallel (a model that reads the future "
             "through quantization scales has a positive gap); time = training + evaluation.", "",
             "| model | seed | parallel | autoregressive | gap | time |", "|---|---|---|---|---|---|"]
    lines += [f"| {r[0]} | {r[1]} | {r[2]:.4f} | {r[3]:.4f} | {r[4]:+.5f} | {r[5]:.0f} s |" for r in rows]
    lines += ["", "| model | mean gap | spread (max - min) over seeds |", "|---|---|---|"]
    for mode in modes:
        g = [r[4] for r in rows if r[0] == mode]
        lines.append(f"| {mode} | {sum(g) / len(g):+.5f} | {max(g) - min(g):.5f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(args.out, "train_leak.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "grad_norms.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step"] + list(curves))
        for i in range(args.steps):
            w.writerow([i] + [curves[k][i] for k in curves])
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        for k, v in curves.items():
            plt.plot(v, label=k, linewidth=0.8)
        plt.xlabel("step"), plt.ylabel("gradient norm (before clipping)"), plt.yscale("log"), plt.legend()
        plt.savefig(os.path.join(args.out, "grad_norms.png"), dpi=120)
    except ImportError:
        print("matplotlib is not installed: grad_norms.png not written (grad_norms.csv has the curves)")


if __name__ == "__main__":
    main()
