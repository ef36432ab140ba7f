#!/usr/bin/env python3
"""ThriftAttention at the model level (issue 33): held-out NLL of a small
byte-level LM with every attention call through lpattn.attention.

The model is bench/train_leak.py's (imported, not copied): trained here with
PyTorch's SDPA (exact attention; --ckpt saves it so a later run only
evaluates), then evaluated in parallel mode (one forward per held-out
sequence) with each layer's attention through lpattn at one precision:
  high, fp8, <fmt>_all (every tile low: leaky=True), <fmt> (causal-safe:
  diagonal tiles high), thrift_<fmt>_<pct>[+rule...] (THRIFT at pct% of the
  tiles, low tiles in <fmt>); fmt = nvfp4 | mxfp4. Rules (--rules): paper
  (selection="paper", the published rule: leaks under causal), sink, kmax,
  gqa (lpattn thrift_rule flags; docs/SEMANTICS.md "THRIFT selection rules").
Recovery of a mode = (NLL(base) - NLL(mode)) / (NLL(base) - NLL(high)) against
both baselines (<fmt>_all, <fmt>); spread over sequences: the 10/50/90th
percentiles of the per-sequence recovery and a bootstrap 95% interval of the
pooled one. Analyses (--analysis): layers (one layer low, the rest high),
positions (the NLL gap by position, row within a tile, target byte class),
heads (per layer and head: attention entropy against the output error).

CPU smoke (a few minutes on 2 cores):
  nice python3 bench/thrift_nll.py --device cpu --layers 3 --dmodel 128 --heads 4 \\
      --ctx-train 1024 --ctx 1024 --steps 300 --batch 4 --eval-seqs 8 --block 32 \\
      --ckpt /tmp/thrift_cpu.pt
GPU (the issue's scale): the command in --help's epilog. The rules (--rules)
run on every backend's prefill (cuda/hip: block 64, the GPU's only tile).
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_leak as tl  # noqa: E402  (the model, the corpus, the batches)
import lpattn  # noqa: E402

EPILOG = """GPU at the issue's scale (train once at the longest context, then evaluate):
  python3 bench/thrift_nll.py --device cuda --layers 6 --dmodel 512 --heads 8 \\
      --ctx-train 8192 --ctx 2048,8192 --steps 2000 --batch 8 --lr 1e-3 \\
      --eval-seqs 32 --corpus-mb 32 --ckpt /tmp/thrift_8k.pt --rules paper \\
      --analysis layers,positions,heads --out bench/thrift_nll_out
(cuda takes block 64, the default; --data repeat gives a model that must attend far back)"""

FORMATS = ("nvfp4", "mxfp4")
RULE_FLAGS = ("sink", "kmax", "gqa")


def mode_kwargs(name):
    """lpattn.attention keywords of a mode name (module docstring)."""
    if name in ("high", "fp8"):
        return dict(precision=name)
    parts = name.split("+")
    base, rules = parts[0], parts[1:]
    if base in FORMATS:
        return dict(precision=base)
    if base.endswith("_all") and base[:-4] in FORMATS:
        return dict(precision=base[:-4], leaky=True)
    f = base.split("_")
    if len(f) != 3 or f[0] != "thrift" or f[1] not in FORMATS:
        raise SystemExit(f"mode {name!r}: expected high, fp8, <fmt>, <fmt>_all or thrift_<fmt>_<pct>")
    kw = dict(precision="thrift", thrift_low=f[1], thrift_budget=float(f[2]) / 100.0)
    flags = [r for r in rules if r != "paper"]
    for r in flags:
        if r not in RULE_FLAGS:
            raise SystemExit(f"mode {name!r}: rule {r!r} is not paper or one of {RULE_FLAGS}")
    if "paper" in rules:
        kw["selection"] = "paper"
    if flags:
        kw["thrift_rule"] = "+".join(flags)
    return kw


def default_modes(budgets, rules):
    out = ["high", "fp8"]
    for fmt in FORMATS:
        out += [f"{fmt}_all", fmt]
        for b in budgets:
            out.append(f"thrift_{fmt}_{b:g}")
            out += [f"thrift_{fmt}_{b:g}+{r}" for r in rules]
    return out


class Attend:
    """train_leak.Block's attention hook: SDPA for training, lpattn for
    evaluation with per-layer keywords, optionally recording per-head errors."""

    def __init__(self, args):
        self.args, self.layer_kw, self.probe = args, None, None

    def __call__(self, blk, q, k, v):
        if self.layer_kw is None:  # training: exact attention
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        dt = torch.bfloat16 if q.is_cuda else torch.float32
        q, k, v = (t.to(dt).contiguous() for t in (q, k, v))
        kw = dict(causal=True, block_q=self.args.block, block_k=self.args.block)
        if self.probe is not None:
            return self.probe(blk.layer_idx, q, k, v, kw)
        return lpattn.attention(q, k, v, **kw, **self.layer_kw(blk.layer_idx))


def repeat_batches(data, n, ctx, gen):
    """--data repeat: each sequence is a text chunk of ctx/2 bytes followed by
    the same chunk again, so the second half is predictable only by attending
    back ctx/2 positions (induction heads): a small model whose NLL depends
    on long-range attention, for CPU-scale runs."""
    h = (ctx + 2) // 2
    i = torch.randint(0, len(data) - h - 1, (n,), generator=gen)
    c = torch.stack([data[j:j + h] for j in i.tolist()])
    x = torch.cat([c, c], 1)[:, :ctx + 1]
    return x[:, :-1], x[:, 1:]


def load_or_train(args, hook):
    conf = dict(layers=args.layers, dmodel=args.dmodel, heads=args.heads, ctx=args.ctx_train)
    if args.ckpt and os.path.exists(args.ckpt):
        ck = torch.load(args.ckpt, map_location="cpu")
        conf = ck["conf"]
        m = tl.Model(conf["layers"], conf["dmodel"], conf["heads"], conf["ctx"], "high")
        m.load_state_dict(ck["state"])
        print(f"loaded {args.ckpt}: {conf}", flush=True)
        return m.to(args.device).eval(), conf
    train_data, _ = tl.corpus(args.corpus_mb << 20)
    if args.data == "repeat":
        tl.batches = repeat_batches  # train_leak.train draws its batches through this name
    targs = argparse.Namespace(device=args.device, steps=args.steps, lr=args.lr, batch=args.batch,
                               layers=conf["layers"], dmodel=conf["dmodel"], heads=conf["heads"],
                               ctx=conf["ctx"])
    t0 = time.time()
    hook.layer_kw = None
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.device == "cuda"):
        m, _ = tl.train(targs, "high", 0, train_data)
    print(f"trained in {time.time() - t0:.0f} s", flush=True)
    if args.ckpt:
        torch.save({"conf": conf, "state": m.state_dict()}, args.ckpt)
    return m.eval(), conf


def eval_seqs(args, held, ctx):
    gen = torch.Generator().manual_seed(1234 + ctx)
    x, y = (repeat_batches if args.data == "repeat" else tl.batches)(held, args.eval_seqs, ctx, gen)
    return x, y


@torch.no_grad()
def nll(args, m, hook, x, y, layer_kw):
    """Per-position NLL [N, S] (nats) with attention keywords layer_kw(layer)."""
    hook.layer_kw = layer_kw
    out = []
    for i in range(0, len(x), args.eval_batch):
        xb, yb = x[i:i + args.eval_batch].to(args.device), y[i:i + args.eval_batch].to(args.device)
        logits = m(xb).float()
        out.append(F.cross_entropy(logits.transpose(1, 2), yb, reduction="none").cpu())
    return torch.cat(out).double()


def recovery(base, mode, high):
    """Pooled recovery and per-sequence recoveries of mode against base."""
    pooled = (base.mean() - mode.mean()) / (base.mean() - high.mean())
    per = (base.mean(1) - mode.mean(1)) / (base.mean(1) - high.mean(1))
    return pooled.item(), per


def boot_ci(base, mode, high, n=1000):
    g = torch.Generator().manual_seed(7)
    b, mo, h = base.mean(1), mode.mean(1), high.mean(1)
    idx = torch.randint(0, len(b), (n, len(b)), generator=g)
    r = (b[idx].mean(1) - mo[idx].mean(1)) / (b[idx].mean(1) - h[idx].mean(1))
    return torch.quantile(r, 0.025).item(), torch.quantile(r, 0.975).item()


def pct(x):
    return f"{100 * x:.0f}%"


def main_table(ctx, res, nlay):
    L = [f"### context {ctx}: held-out NLL (nats per byte), recovery of the FP4 gap", "",
         "recovery = (NLL(base) - NLL(mode)) / (NLL(base) - NLL(high)); base = every tile low "
         "(`_all`) or causal-safe; [a, b] = bootstrap 95% over sequences; p10/p50/p90 = "
         "per-sequence recovery percentiles.", "",
         "| mode | NLL | vs every-tile low | 95% | vs causal-safe | 95% | per-seq p10/p50/p90 (safe) |",
         "|---|---|---|---|---|---|---|"]
    high = res["high"]
    for name, t in res.items():
        cells = [name, f"{t.mean():.4f}"]
        fmt = next((f for f in FORMATS if f in name.split("+")[0]), None)
        if fmt and name not in (f"{fmt}_all",):
            for base in (f"{fmt}_all", fmt):
                if base == name or base not in res:
                    cells += ["", ""]
                    continue
                r, per = recovery(res[base], t, high)
                lo, hi = boot_ci(res[base], t, high)
                cells += [pct(r), f"[{pct(lo)}, {pct(hi)}]"]
            if fmt in res and name != fmt:
                q = torch.quantile(recovery(res[fmt], t, high)[1], torch.tensor([0.1, 0.5, 0.9],
                                   dtype=torch.float64))
                cells.append("/".join(pct(v) for v in q.tolist()))
            else:
                cells.append("")
        else:
            cells += ["", "", "", "", ""]
        L.append("| " + " | ".join(cells) + " |")
    return L


def byte_class(y):
    c = torch.zeros_like(y)
    c[((y >= 65) & (y <= 90)) | ((y >= 97) & (y <= 122)) | (y == 95)] = 1
    c[(y >= 48) & (y <= 57)] = 2
    c[(y == 32) | (y == 10) | (y == 9)] = 3
    return c


def position_tables(args, ctx, res, y, modes):
    """Where the NLL gap sits: position in the sequence, row within a query
    tile, target byte class; each cell = share of the mode's total gap."""
    high = res["high"]
    S = high.shape[1]
    pos = torch.arange(S)
    edges = [0, args.block, 4 * args.block, 16 * args.block, 64 * args.block, 256 * args.block]
    pb = [(a, min(b, S)) for a, b in zip(edges, edges[1:] + [S]) if a < S and a < min(b, S)]
    groups = [(f"pos [{a}, {b})", (pos >= a) & (pos < b)) for a, b in pb]
    r = pos % args.block
    groups += [("tile row < 8", r < 8), ("tile row 8..B-9", (r >= 8) & (r < args.block - 8)),
               ("tile row >= B-8", r >= args.block - 8)]
    L = [f"### context {ctx}: where the gap sits (share of the mode's total NLL gap over high; "
         "fraction of positions in brackets)", "",
         "| group | " + " | ".join(modes) + " |", "|---" * (len(modes) + 1) + "|"]
    cls = byte_class(y)
    rows = [(name, msk.expand_as(high)) for name, msk in groups]
    rows += [(f"target {n}", cls == i) for i, n in enumerate(("punct/other", "letter", "digit", "space"))]
    for name, msk in rows:
        cells = []
        for mo in modes:
            d = res[mo] - high
            cells.append(f"{100 * d[msk].sum().item() / d.sum().item():.0f}%")
        L.append(f"| {name} ({100 * msk.double().mean().item():.0f}%) | " + " | ".join(cells) + " |")
    return L


def layer_table(args, m, hook, x, y, res, nlay, modes):
    L = ["### one layer low (the others high): NLL - NLL(high), and its share of the all-layer gap", "",
         "| layer | " + " | ".join(modes) + " |", "|---" * (len(modes) + 1) + "|"]
    hi = res["high"].mean().item()
    for li in range(nlay):
        cells = []
        for mo in modes:
            kw = mode_kwargs(mo)
            t = nll(args, m, hook, x, y, lambda l, kw=kw, li=li: kw if l == li else {"precision": "high"})
            d = t.mean().item() - hi
            cells.append(f"{d:+.4f} ({100 * d / (res[mo].mean().item() - hi):.0f}%)")
        L.append(f"| {li} | " + " | ".join(cells) + " |")
        print(L[-1], flush=True)
    return L


def head_table(args, m, hook, x, y, modes):
    """High forward; each layer's q/k/v also through the modes: per (layer,
    head) mean attention entropy and relative output error ||O - O_high|| /
    ||O_high|| over rows, and their rank correlation across heads."""
    acc = {}

    def probe(li, q, k, v, kw):
        o, _, ent = lpattn.attention(q, k, v, **kw, return_lse=True, return_entropy=True)
        o32 = o.float()
        norm = o32.norm(dim=-1).clamp_min(1e-30)
        for mo in modes:
            e = (lpattn.attention(q, k, v, **kw, **mode_kwargs(mo)).float() - o32).norm(dim=-1) / norm
            a = acc.setdefault((li, mo), [0, 0])
            a[0] += e.mean(dim=(0, 2)).cpu().double()
            a[1] += 1
        a = acc.setdefault((li, "entropy"), [0, 0])
        a[0] += ent.float().mean(dim=(0, 2)).cpu().double()
        a[1] += 1
        return o

    hook.probe = probe
    try:
        nll(args, m, hook, x, y, lambda l: {"precision": "high"})
    finally:
        hook.probe = None
    layers = sorted({k[0] for k in acc})
    L = ["### per head: attention entropy (nats) and relative output error vs high", "",
         "| layer | head | entropy | " + " | ".join(modes) + " |", "|---" * (len(modes) + 3) + "|"]
    ent_all, err_all = [], {mo: [] for mo in modes}
    for li in layers:
        ent = acc[(li, "entropy")][0] / acc[(li, "entropy")][1]
        for h in range(len(ent)):
            errs = [acc[(li, mo)][0][h] / acc[(li, mo)][1] for mo in modes]
            ent_all.append(ent[h].item())
            for mo, e in zip(modes, errs):
                err_all[mo].append(float(e))
            L.append(f"| {li} | {h} | {ent[h]:.2f} | " + " | ".join(f"{e:.4f}" for e in errs) + " |")

    def rank(v):
        return torch.tensor(v).argsort().argsort().double()
    L += ["", "Spearman rank correlation of entropy with the error across heads: " +
          ", ".join(f"{mo} {torch.corrcoef(torch.stack([rank(ent_all), rank(err_all[mo])]))[0, 1]:+.2f}"
                    for mo in modes)]
    return L


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--ckpt", default="", help="load the model from here, or train and save here")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--dmodel", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--ctx-train", type=int, default=8192)
    ap.add_argument("--ctx", default="8192", help="comma-separated evaluation contexts (<= ctx-train)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--corpus-mb", type=int, default=8)
    ap.add_argument("--data", default="text", choices=("text", "repeat"),
                    help="text: held-out bytes; repeat: each sequence a chunk twice (repeat_batches)")
    ap.add_argument("--eval-seqs", type=int, default=16)
    ap.add_argument("--eval-batch", type=int, default=1)
    ap.add_argument("--block", type=int, default=64, help="block_q = block_k of every call")
    ap.add_argument("--budgets", default="5,10,25", help="THRIFT budgets in percent")
    ap.add_argument("--rules", default="", help="comma-separated rule sets for extra THRIFT rows, "
                    "e.g. paper,sink,kmax,sink+kmax")
    ap.add_argument("--modes", default="", help="comma-separated modes (default: every precision)")
    ap.add_argument("--analysis", default="", help="comma-separated: layers, positions, heads")
    ap.add_argument("--analysis-modes", default="nvfp4,thrift_nvfp4_5",
                    help="modes of the analyses")
    ap.add_argument("--out", default="bench/thrift_nll_out")
    args = ap.parse_args()
    torch.manual_seed(0)
    hook = Attend(args)
    tl.Block.attend = staticmethod(hook)
    m, conf = load_or_train(args, hook)
    for i, b in enumerate(m.blocks):
        b.layer_idx = i
    _, held = tl.corpus(args.corpus_mb << 20)
    budgets = [float(b) for b in args.budgets.split(",") if b]
    rules = [r for r in args.rules.split(",") if r]
    modes = args.modes.split(",") if args.modes else default_modes(budgets, rules)
    for f in FORMATS:  # the two baselines of every format in use
        if any(f in mo for mo in modes):
            modes += [b for b in (f"{f}_all", f) if b not in modes]
    if "high" not in modes:
        modes.insert(0, "high")
    amodes = [a for a in args.analysis_modes.split(",") if a]
    analyses = set(a for a in args.analysis.split(",") if a)
    os.makedirs(args.out, exist_ok=True)
    lines = [f"## ThriftAttention NLL: {conf['layers']} layers, d_model {conf['dmodel']}, "
             f"{conf['heads']} heads, trained at context {conf['ctx']}; block {args.block}, "
             f"{args.eval_seqs} held-out sequences, device {args.device}", ""]
    for ctx in [int(c) for c in args.ctx.split(",")]:
        if ctx > conf["ctx"]:
            raise SystemExit(f"--ctx {ctx} is longer than the model's context {conf['ctx']}")
        x, y = eval_seqs(args, held, ctx)
        res = {}
        for mo in modes + [a for a in amodes if a not in modes]:
            t0 = time.time()
            kw = mode_kwargs(mo)
            res[mo] = nll(args, m, hook, x, y, lambda l, kw=kw: kw)
            print(f"  ctx {ctx} {mo}: {res[mo].mean():.4f} ({time.time() - t0:.0f} s)", flush=True)
        lines += main_table(ctx, res, conf["layers"]) + [""]
        if "positions" in analyses:
            lines += position_tables(args, ctx, res, y, amodes) + [""]
        if "layers" in analyses:
            lines += layer_table(args, m, hook, x, y, res, conf["layers"], amodes) + [""]
        if "heads" in analyses:
            lines += head_table(args, m, hook, x[:max(1, args.eval_seqs // 4)],
                                y[:max(1, args.eval_seqs // 4)], amodes) + [""]
        torch.save(res, os.path.join(args.out, f"nll_ctx{ctx}.pt"))
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(args.out, "thrift_nll.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
