"""The random-weight Llama decoder stack of bench/e2e_decode.py (issue 32 item 6).

RMSNorm, RoPE (rotate-half), GQA attention through a callable, SwiGLU MLP, an
untied LM head (tie: the embedding); weights drawn on the device from a seed.
A layer is three pure functions of tensors (`pre`: norm, QKV projection, RoPE;
`post`: output projection, residual, norm, MLP; `final`: norm, LM head), so
that `compile=True` can hand each to torch.compile once for every layer (the
weights are arguments, not captured): what serving engines do to fuse the
small ops around attention. The attention itself is never compiled."""
import math

import torch
import torch.nn.functional as F


def gen(device, seed):
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def _rms(x, w, dt):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dt) * w


def _rope(x, cos, sin, dt):  # x [B, h, 1, D]; cos/sin [B, 1, 1, D/2]
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).to(dt)


def _pre(h, n1, wqkv, cos, sin, hq: int, hkv: int):
    """Norm, QKV projection and RoPE of one layer: q [B, hq, 1, D], k, v [B, hkv, 1, D]."""
    B, dt, D = h.shape[0], h.dtype, cos.shape[-1] * 2
    qkv = _rms(h, n1, dt) @ wqkv.t()
    q, k, v = qkv.split((hq * D, hkv * D, hkv * D), dim=-1)
    q = _rope(q.view(B, hq, 1, D), cos, sin, dt)
    k = _rope(k.view(B, hkv, 1, D), cos, sin, dt)
    return q, k, v.reshape(B, hkv, 1, D)


def _post(h, o, wo, n2, wgu, wdown):
    """Output projection, residual, norm and SwiGLU MLP of one layer: the new h."""
    h = h + o.reshape(h.shape[0], -1) @ wo.t()
    gate, up = (_rms(h, n2, h.dtype) @ wgu.t()).chunk(2, dim=-1)
    return h + (F.silu(gate) * up) @ wdown.t()


def _final(h, norm, head):
    return _rms(h, norm, h.dtype) @ head.t()


class Model:
    """Random-weight Llama decoder stack (f16 on the device, seeded)."""

    def __init__(self, a, device, dtype, compile=False):
        self.a, self.dev, self.dt = a, device, dtype
        H, Hq, Hkv, D, I, V = a.hidden, a.hq, a.hkv, a.head_dim, a.mlp, a.vocab
        g = gen(device, a.seed)

        def w(out_f, in_f):
            x = torch.empty(out_f, in_f, device=device, dtype=torch.float32)
            x.normal_(0.0, 1.0 / math.sqrt(in_f), generator=g)
            return x.to(dtype)

        self.embed = torch.empty(V, H, device=device, dtype=torch.float32).normal_(
            0.0, 1.0, generator=g).to(dtype)
        self.layers = []
        for _ in range(a.layers):
            self.layers.append(dict(
                wqkv=w((Hq + 2 * Hkv) * D, H), wo=w(H, Hq * D),
                wgu=w(2 * I, H), wdown=w(H, I),
                n1=torch.ones(H, device=device, dtype=dtype),
                n2=torch.ones(H, device=device, dtype=dtype)))
        self.norm = torch.ones(H, device=device, dtype=dtype)
        self.head = self.embed if a.tie else w(V, H)
        self.inv_freq = 1.0 / (a.rope_theta ** (
            torch.arange(0, D, 2, device=device, dtype=torch.float32) / D))
        wrap = (lambda f: torch.compile(f, dynamic=False, fullgraph=True)) if compile else (lambda f: f)
        self.pre, self.post, self.final = wrap(_pre), wrap(_post), wrap(_final)

    @staticmethod
    def weight_bytes(a):
        per = ((a.hq + 2 * a.hkv) * a.head_dim * a.hidden + a.hidden * a.hq * a.head_dim
               + 3 * a.hidden * a.mlp + 2 * a.hidden)
        return 2 * (a.layers * per + a.vocab * a.hidden * (1 if a.tie else 2) + a.hidden)

    def step(self, tok, pos, attn, logits_out):
        """One greedy step: tok [B] int64 (overwritten with the next token),
        pos [B] int64 (the new token's position), attn(layer, q, k, v) -> o
        [B, Hq, 1, D]."""
        a = self.a
        h = self.embed[tok]  # [B, H]
        ang = pos.float()[:, None] * self.inv_freq[None, :]
        cos, sin = ang.cos()[:, None, None, :], ang.sin()[:, None, None, :]
        for i, L in enumerate(self.layers):
            q, k, v = self.pre(h, L["n1"], L["wqkv"], cos, sin, a.hq, a.hkv)
            o = attn(i, q, k, v)
            h = self.post(h, o, L["wo"], L["n2"], L["wgu"], L["wdown"])
        logits = self.final(h, self.norm, self.head)
        logits_out.copy_(logits)
        tok.copy_(logits.argmax(-1))
        pos.add_(1)
