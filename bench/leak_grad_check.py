#!/usr/bin/env python3
"""Issue 35 item 4: does lpattn's MXFP4 backward differentiate what its
forward computes, in the leaky mode (every tile low) and in the safe mode
(diagonal tiles high)? A float64 PyTorch model of the forward (SEMANTICS "A
low tile", the quantizers taken from lpattn.quantize, not re-derived) gives:
  A  autograd of the forward with straight-through quantizers
     (x + (q(x) - x).detach() for Q, K, V and each low tile's P);
  B  SPEC 10's gradient with unquantized backward operands: P = exp(S - LSE)
     from the forward's scores, Delta = rowsum(dO * O) with the forward's O,
     dV = P^T dO, dS = P (dO V^T - Delta), dQ = s dS K, dK = s dS^T Q (the
     value the library's stochastically rounded gradient should average to);
  C  the gradient of exact (unquantized) attention.
It checks the forward (O within f32 rounding of the model), the mean of the
library's backward over N seeds against B (the error must shrink like
1/sqrt(N); a floor is a bias), and that no gradient reaches a key in the
future of the one row whose dO is nonzero.

Usage: LPATTN_LIBRARY=BUILD/liblpattn.so.0 PYTHONPATH=python \
       python3 bench/leak_grad_check.py [--S 128] [--D 64] [--block 32] [--seeds 64]
"""
import argparse

import torch

import lpattn


def deq(x, axis, tile=64):
    """x (f64 [1, 1, S, D]) through lpattn's MXFP4 quantizer (RNE, round-up
    scales), back as f64."""
    qt = lpattn.quantize(x.float().contiguous(), "mxfp4", axis=axis, tile=tile, mx_scale_round_up=True,
                         backend="ref")
    return torch.from_dlpack(lpattn.dequantize(qt, backend="ref")).double()


def kinds(S, Bq, Bk):
    """[nqt, nkt] tile kinds under the causal mask (Sq = Skv): 0 masked,
    1 diagonal, 2 full (SEMANTICS "Tiles and their precision")."""
    nq, nk = -(-S // Bq), -(-S // Bk)
    k = torch.zeros(nq, nk, dtype=torch.long)
    for i in range(nq):
        r0, r1 = i * Bq, min(S, (i + 1) * Bq) - 1
        for j in range(nk):
            c0, c1 = j * Bk, j * Bk + Bk - 1
            k[i, j] = 2 if c1 <= r0 else 0 if c0 > r1 else 1
    return k


def model_forward(Q, K, V, leaky, Bq, Bk, ste):
    """O of the forward (SEMANTICS "A low tile": online softmax over KV tiles
    in increasing j, low tiles with Q, K along D, V along the keys per tile
    and P per row of the tile along the keys). ste: the quantizers pass the
    gradient straight through; m (the running max) is a constant."""
    S, D = Q.shape[2], Q.shape[3]
    sm = D ** -0.5
    st = (lambda x, q: x + (q - x).detach()) if ste else (lambda x, q: q)
    Qd, Kd, Vq = st(Q, deq(Q, "d")), st(K, deq(K, "d")), st(V, deq(V, "s", Bk))
    kd = kinds(S, Bq, Bk)
    O = torch.zeros_like(Q)
    pos = torch.arange(S)
    for i in range(kd.shape[0]):
        r0, r1 = i * Bq, min(S, (i + 1) * Bq)
        m = torch.full((r1 - r0, 1), -torch.inf, dtype=torch.float64)
        acc, l = torch.zeros(r1 - r0, D, dtype=torch.float64), torch.zeros(r1 - r0, 1, dtype=torch.float64)
        for j in range(kd.shape[1]):
            if kd[i, j] == 0:
                continue
            c0, c1 = j * Bk, min(S, (j + 1) * Bk)
            low = leaky or kd[i, j] == 2
            q, k, v = (Qd, Kd, Vq) if low else (Q, K, V)
            s = q[0, 0, r0:r1] @ k[0, 0, c0:c1].T * sm
            vis = pos[c0:c1][None, :] <= pos[r0:r1][:, None]
            mx = torch.where(vis, s.detach(), -torch.inf).amax(1, keepdim=True)
            mn = torch.maximum(m, mx)
            p = torch.where(vis, torch.exp(s - mn), torch.zeros_like(s))
            a = torch.exp(m - mn)
            l = a * l + p.sum(1, keepdim=True)
            if low:  # P^ per row along the keys, zero-padded to Bk
                pp = torch.zeros(r1 - r0, Bk, dtype=torch.float64)
                pp[:, :c1 - c0] = p.detach()
                p = st(p, deq(pp[None, None], "d")[0, 0, :, :c1 - c0])
            acc = a * acc + p @ v[0, 0, c0:c1]
            m = mn
        O[0, 0, r0:r1] = acc / l
    return O


def spec10_grad(Q, K, V, O, lse, dO, leaky, Bq, Bk, consistent=False):
    """B: SPEC 10 with unquantized backward operands (see the module doc).
    consistent: Delta = rowsum(P * dP) (= dO . P V) instead of dO . O, so
    that every row of dS sums to 0 as softmax's Jacobian does (B')."""
    S, D = Q.shape[2], Q.shape[3]
    sm = D ** -0.5
    q, k, v, o, g = (t[0, 0] for t in (Q, K, V, O, dO))
    qd, kd_ = deq(Q, "d")[0, 0], deq(K, "d")[0, 0]
    kd = kinds(S, Bq, Bk)
    low = torch.zeros(S, S, dtype=torch.bool)
    for i in range(kd.shape[0]):
        for j in range(kd.shape[1]):
            low[i * Bq:(i + 1) * Bq, j * Bk:(j + 1) * Bk] = bool(leaky and kd[i, j] > 0) or kd[i, j] == 2
    s = torch.where(low, qd @ kd_.T, q @ k.T) * sm
    vis = torch.arange(S)[None, :] <= torch.arange(S)[:, None]
    P = torch.where(vis, torch.exp(s - lse[0, 0][:, None]), torch.zeros_like(s))
    dV = P.T @ g
    dP = g @ v.T
    dS = P * (dP - ((P * dP).sum(1, keepdim=True) if consistent else (g * o).sum(1, keepdim=True)))
    return sm * dS @ k, sm * dS.T @ q, dV


def rel(a, b):
    return float((a - b).norm() / b.norm())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--S", type=int, default=128)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--scale", type=float, default=1.0, help="std of Q and K")
    ap.add_argument("--kmean", type=float, default=0.0,
                    help="add one random direction of this norm to every key (a shared key component)")
    args = ap.parse_args()
    S, D, Bk = args.S, args.D, args.block
    torch.manual_seed(0)
    Q, K = (torch.randn(1, 1, S, D, dtype=torch.float64) * args.scale for _ in range(2))
    V, dO = torch.randn(1, 1, S, D, dtype=torch.float64), torch.randn(1, 1, S, D, dtype=torch.float64)
    u = torch.randn(D, dtype=torch.float64)
    K = K + args.kmean * u / u.norm()
    # inputs as f32 values (the library's inputs)
    Q, K, V, dO = (t.float().double() for t in (Q, K, V, dO))
    kw = dict(causal=True, precision="mxfp4", mx_scale_round_up=True, block_q=Bk, block_k=Bk)
    for leaky in (False, True):
        name = "leaky" if leaky else "safe"
        # C: exact attention
        Qa, Ka, Va = (t.clone().requires_grad_() for t in (Q, K, V))
        Oc = torch.nn.functional.scaled_dot_product_attention(Qa, Ka, Va, is_causal=True)
        C = torch.autograd.grad((Oc * dO).sum(), (Qa, Ka, Va))
        # A: straight-through autograd of the model forward
        Qa, Ka, Va = (t.clone().requires_grad_() for t in (Q, K, V))
        Om = model_forward(Qa, Ka, Va, leaky, Bk, Bk, ste=True)
        A = torch.autograd.grad((Om * dO).sum(), (Qa, Ka, Va))
        for be in ("ref", "cpu"):
            f = lambda t: t.float().contiguous()  # noqa: E731
            O, lse = lpattn.attention(f(Q), f(K), f(V), return_lse=True, backend=be, leaky=leaky, **kw)
            O, lse = torch.from_dlpack(O).double(), torch.from_dlpack(lse).double()
            print(f"{name} {be}: forward O vs model: rel L2 {rel(O, Om.detach()):.2e}, "
                  f"max abs {float((O - Om.detach()).abs().max()):.2e}; vs exact {rel(O, Oc.detach()):.3f}")
            B = spec10_grad(Q, K, V, O, lse, dO, leaky, Bk, Bk)
            acc = [torch.zeros_like(Q) for _ in range(3)]
            rows = []
            for n in range(1, args.seeds + 1):
                g = lpattn.attention_backward(f(Q), f(K), f(V), f(O), lse.float(), f(dO), seed=n, backend=be,
                                              leaky=leaky, **kw)
                for a, x in zip(acc, g):
                    a += torch.from_dlpack(x).double()
                if n in (1, 4, 16, 64, 256) or n == args.seeds:
                    rows.append((n, [rel(a / n, b) for a, b in zip(acc, B)],
                                 [rel(a / n, x) for a, x in zip(acc, A)],
                                 [rel(a / n, x) for a, x in zip(acc, C)]))
            for n, rb, ra, rc in rows:
                fmt = lambda r: " ".join(f"{x:.4f}" for x in r)  # noqa: E731
                print(f"  mean of {n:3d} seeds, rel L2 (dQ dK dV) vs B {fmt(rb)} | vs A {fmt(ra)} | vs C {fmt(rc)}")
            B2 = spec10_grad(Q, K, V, O, lse, dO, leaky, Bk, Bk, consistent=True)
            print(f"  |B|/|C| {' '.join(f'{float(b.norm() / c.norm()):.3f}' for b, c in zip(B, C))}; "
                  f"B' (Delta = rowsum(P dP)) vs C {' '.join(f'{rel(b, c):.4f}' for b, c in zip(B2, C))}, "
                  f"|B'|/|C| {' '.join(f'{float(b.norm() / c.norm()):.3f}' for b, c in zip(B2, C))}")
            print(f"  B vs A {' '.join(f'{rel(b, a):.4f}' for a, b in zip(A, B))}; "
                  f"B vs C {' '.join(f'{rel(b, c):.4f}' for b, c in zip(B, C))}")
            # a gradient from row t only must not reach keys after t
            for t in (0, 5, Bk - 1, Bk + 3, S - 2):
                g1 = torch.zeros_like(dO)
                g1[0, 0, t] = dO[0, 0, t]
                dq, dk, dv = (torch.from_dlpack(x).double() for x in lpattn.attention_backward(
                    f(Q), f(K), f(V), f(O), lse.float(), f(g1), seed=7, backend=be, leaky=leaky, **kw))
                fut = float(dk[0, 0, t + 1:].abs().max() + dv[0, 0, t + 1:].abs().max()) if t + 1 < S else 0.0
                other = float(torch.cat([dq[0, 0, :t], dq[0, 0, t + 1:]]).abs().max())
                print(f"  dO row {t} only: max |dK|+|dV| over keys > {t}: {fut:.1e}; max |dQ| other rows {other:.1e}")


if __name__ == "__main__":
    main()
