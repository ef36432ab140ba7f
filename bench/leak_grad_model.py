#!/usr/bin/env python3
"""Issue 35 item 4: how far the MXFP4 safe and leaky models' parameter
gradients are from the exact model's, on one batch, for a model of
bench/train_leak.py trained N steps in the high mode (attention exact).

For each attention setting, the gradient of the batch loss over all
parameters is compared with the exact model's (precision high): cosine and
norm ratio, for one backward seed and for the mean of --seeds seeds (the
mean removes the stochastic rounding's noise and leaves the bias).
Settings: safe and leaky with lpattn's backward; leaky with exact
attention's gradient (--bwd exact); leaky with Delta from softmax(Qd Kd^T) V
(--delta unq). Also the loss of each forward on the batch.

Usage: LPATTN_LIBRARY=BUILD/liblpattn.so.0 PYTHONPATH=python \
       python3 bench/leak_grad_model.py [--steps 150] [--seeds 8] [train_leak.py's model flags]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_leak as tl  # noqa: E402


def flat_grad(m, x, y, mode, setup):
    tl.SETUP.clear()
    tl.SETUP.update(setup)
    for b in m.blocks:
        b.mode = tl.MODES[mode]
    m.zero_grad()
    loss = F.cross_entropy(m(x).flatten(0, 1), y.flatten())
    loss.backward()
    full = torch.cat([p.grad.flatten() for p in m.parameters()]).double()
    qkv = torch.cat([p.grad.flatten() for n, p in m.named_parameters() if ".qkv." in n]).double()
    return (full, qkv), loss.item()


def attn_errors(m, x, mode):
    """Each layer's attention output in `mode` against exact attention on the
    same q, k, v (the exact model's activations): rel L2 per layer."""
    errs = []

    def attend(block, q, k, v):
        ex = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        lo = tl.attend_lpattn(q, k, v, tl.MODES[mode])
        errs.append(float((lo - ex).norm() / ex.norm()))
        return ex

    tl.SETUP.clear()
    tl.Block.attend = staticmethod(attend)
    with torch.no_grad():
        m(x)
    tl.Block.attend = None
    return errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dmodel", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    args = ap.parse_args()
    train, _ = tl.corpus(8 << 20)
    targs = argparse.Namespace(device="cpu", warmup=20, clip=1.0, log_every=0, **vars(args))
    m, _ = tl.train(targs, "high", 0, train)
    gen = torch.Generator().manual_seed(99)
    x, y = tl.batches(train, args.batch, args.ctx, gen)
    refs, lref = flat_grad(m, x, y, "high", {})
    print(f"model: {args.layers} layers, d_model {args.dmodel}, {args.heads} heads, context {args.ctx}, "
          f"trained {args.steps} steps (high); batch {args.batch}; exact loss {lref:.4f}, |grad| "
          f"{refs[0].norm():.4f}, |grad of the qkv weights| {refs[1].norm():.4f}")
    for mode in ("safe", "leaky"):
        print(f"attention output vs exact, rel L2 per layer, {mode}: "
              f"{' '.join(f'{e:.4f}' for e in attn_errors(m, x, mode))}")
    print("| setting | batch loss | cos (1 seed) | cos (mean of seeds) | norm ratio (mean) | qkv: cos (1 seed) "
          "| qkv: cos (mean) | qkv: norm ratio (mean) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, mode, setup in (("safe", "safe", {}), ("leaky", "leaky", {}),
                              ("leaky, exact attention gradient", "leaky", {"bwd": "exact"}),
                              ("leaky, Delta from softmax(Qd Kd^T) V", "leaky", {"delta": "unq"})):
        torch.manual_seed(1)
        gs = []
        for _ in range(args.seeds):
            g, loss = flat_grad(m, x, y, mode, setup)
            gs.append(g)
        cells = []
        for k, ref in enumerate(refs):
            mean = torch.stack([g[k] for g in gs]).mean(0)
            cos = lambda a: float(a @ ref / (a.norm() * ref.norm()))  # noqa: E731
            cells += [f"{cos(gs[0][k]):.4f}", f"{cos(mean):.4f}", f"{float(mean.norm() / ref.norm()):.3f}"]
        print(f"| {name} | {loss:.4f} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
