"""End-to-end greedy decode of a Llama-shaped stack (issue 32 item 6): tokens/s of
one whole decode step (all layers + final norm + LM head + argmax) captured in a
CUDA graph and replayed, with the attention either torch SDPA over a contiguous
f16 cache or an lpattn KVPool per layer (high / fp8 / nvfp4 / mxfp4).

Model: RMSNorm, RoPE (theta 500000, rotate-half), GQA attention, SwiGLU MLP,
an untied LM head (--tie: the embedding), random f16 weights drawn on the
device from --seed. Defaults: 8 layers of Llama-3-8B's shape (hidden 4096,
32 q / 8 kv heads, D 128, MLP 14336, vocab 32000) and the issue's three shapes
(B 1 x 32k, B 1 x 128k, B 16 x 32k).

The context is filled without a prefill: seeded random K/V (the same for
every mode) written into the SDPA cache or appended to the pools in chunks;
the fill is timed on its own ("fill s"). Then the step is run eagerly
(CUDA events: "eager step ms"), captured once in torch.cuda.graph and
replayed --steps times ("step ms (graph)"; tokens/s = B * steps / seconds);
each step writes the next token id into the graph's static input and
advances the lengths in place, so replays decode real successive tokens.

SDPA's cache (mode sdpa): [B, Hkv, max_ctx, D] f16 per layer, max_ctx = context
+ the steps this run takes, rounded up to 256 (what transformers' StaticCache
does: a fixed-size cache and an additive mask over it). A step writes the new
K/V at each sequence's length (scatter_, no host sync) and calls SDPA on the
whole cache with a [B, 1, 1, max_ctx] mask built on the device from the
lengths: graph-safe, and the keys read beyond the valid prefix are at most
2 * steps + 256 of the context (< 1% at 32k). GQA is folded into the query
rows (q [B, Hkv, G, D] against K/V [B, Hkv, *, D]: no repeat of K/V and no
need of enable_gqa). torch picks the kernel (a mask rules out its flash
kernel); --sdpa-backend pins one (efficient, cudnn, math) to compare. As a
masked kernel may not split the keys over the SMs at B = 1, mode sdpa_flash
is the stronger f16 baseline: the FlashAttention-2 op under SDPA's flash
backend, varlen, over a [B, max_ctx, Hkv, D] cache with the lengths on the
device (seqused_k; no mask). "x SDPA" is against the faster of the two.

lpattn (modes high, fp8, nvfp4, mxfp4, thrift): one KVPool per layer
(page_size 64, f16 high pages), the step appends the token with
KVPool.append(max_length=...) at the lengths held in a device tensor and
runs a DecodePlan made once per layer (lengths bound, written in place).
fp8_static: SPEC 11's page format (E4M3 codes only, 2 * D bytes a token and
KV head), each sequence's k/v descales set once per layer before its first
append (KVPool.set_descales) from the amax of its first context chunk / 448
(per KV head; vLLM's calculate_kv_scales takes the first forward's amax the
same way), q_descale 1. Host backends for now: where the pool refuses it (GPU
pools answer UNSUPPORTED until the kernel lands) the mode is skipped with a
note.

--compile hands each layer's non-attention ops (norms, projections, RoPE,
SwiGLU; bench/e2e_model.py) to torch.compile, as serving engines fuse them:
without it ~40 small kernels per layer take more of a B = 1 step than the
attention does, whatever its precision.

Memory: the weights and each mode's cache (one at a time) are estimated and
printed before allocation; a mode that does not fit is skipped with a note.

    # the GPU run (H200; LPATTN_LIBRARY: a -Dcuda=enabled build)
    LPATTN_LIBRARY=B/liblpattn.so PYTHONPATH=python python3 bench/e2e_decode.py \\
        --modes sdpa,sdpa_flash,high,fp8,nvfp4,fp8_static --check --out e2e.md
    # the CPU smoke test with the logits check (high vs SDPA, same weights and context)
    LPATTN_LIBRARY=build/liblpattn.so PYTHONPATH=python python3 bench/e2e_decode.py --device cpu \\
        --layers 2 --hidden 256 --heads 4,2 --mlp 512 --vocab 1000 --context 256 --batch 2 \\
        --steps 4 --modes sdpa,high,nvfp4,fp8_static --check"""
import argparse
import contextlib
import platform
import sys
import time

import torch
import torch.nn.functional as F

import lpattn
from e2e_model import Model, gen

POOL_MODES = ("high", "fp8", "nvfp4", "mxfp4", "thrift", "fp8_static")
PAGE = 64


def context_chunks(a, B, layer, device, dtype, chunk):
    """Seeded random K/V of the context, chunk by chunk (the same for every mode)."""
    for c, s in enumerate(range(0, a.context, chunk)):
        m = min(chunk, a.context - s)
        g = gen(device, a.seed * 1000003 + 7919 * (layer + 1) + c)
        k = torch.randn(B, a.hkv, m, a.head_dim, device=device, dtype=torch.float32, generator=g)
        v = torch.randn(B, a.hkv, m, a.head_dim, device=device, dtype=torch.float32, generator=g)
        yield s, m, k.to(dtype), v.to(dtype)


class SdpaAttn:
    def __init__(self, a, B, max_ctx, device, dtype):
        self.a, self.max_ctx = a, max_ctx
        shape = (B, a.hkv, max_ctx, a.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(a.layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(a.layers)]
        self.ar = torch.arange(max_ctx, device=device)
        self.mask = None
        self.dt = dtype

    @staticmethod
    def bytes(a, B, max_ctx):
        return 2 * a.layers * B * a.hkv * max_ctx * a.head_dim * 2

    def fill(self, B, device, chunk):
        for i in range(self.a.layers):
            for s, m, k, v in context_chunks(self.a, B, i, device, self.dt, chunk):
                self.k[i][:, :, s:s + m] = k
                self.v[i][:, :, s:s + m] = v

    def begin(self, pos):  # once per step: the mask of the valid prefix (incl. the new token)
        valid = self.ar[None, :] <= pos[:, None]
        self.mask = torch.zeros(valid.shape, device=pos.device, dtype=self.dt).masked_fill(
            ~valid, float("-inf"))[:, None, None, :]
        self.idx = pos.view(-1, 1, 1, 1).expand(-1, self.a.hkv, 1, self.a.head_dim)

    def __call__(self, i, q, k, v):
        B, Hq, _, D = q.shape
        self.k[i].scatter_(2, self.idx, k)
        self.v[i].scatter_(2, self.idx, v)
        qg = q.view(B, self.a.hkv, Hq // self.a.hkv, D)  # head h uses kv head h // G
        o = F.scaled_dot_product_attention(qg, self.k[i], self.v[i], attn_mask=self.mask)
        return o.reshape(B, Hq, 1, D)


class FlashAttn(SdpaAttn):
    """Mode sdpa_flash: the FlashAttention-2 op under SDPA's flash backend (private aten op),
    varlen, over [B, max_ctx, Hkv, D] with seqused_k = the lengths: flash_attn_with_kvcache's way."""

    def __init__(self, a, B, max_ctx, device, dtype):
        self.a, self.max_ctx, self.dt = a, max_ctx, dtype
        shape = (B, max_ctx, a.hkv, a.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(a.layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(a.layers)]
        i32 = dict(dtype=torch.int32, device=device)
        self.cu_q = torch.arange(B + 1, **i32)
        self.cu_k = torch.arange(B + 1, **i32) * max_ctx
        self.used = torch.zeros(B, **i32)

    def fill(self, B, device, chunk):
        for i in range(self.a.layers):
            for s, m, k, v in context_chunks(self.a, B, i, device, self.dt, chunk):
                self.k[i][:, s:s + m] = k.transpose(1, 2)
                self.v[i][:, s:s + m] = v.transpose(1, 2)

    def begin(self, pos):
        self.used.copy_(pos + 1)
        self.idx = pos.view(-1, 1, 1, 1).expand(-1, 1, self.a.hkv, self.a.head_dim)

    def __call__(self, i, q, k, v):
        B, Hq, _, D = q.shape
        self.k[i].scatter_(1, self.idx, k.transpose(1, 2))
        self.v[i].scatter_(1, self.idx, v.transpose(1, 2))
        n = B * self.max_ctx
        o = torch.ops.aten._flash_attention_forward(
            q.reshape(B, Hq, D), self.k[i].view(n, self.a.hkv, D), self.v[i].view(n, self.a.hkv, D),
            self.cu_q, self.cu_k, 1, self.max_ctx, 0.0, False, False, seqused_k=self.used)[0]
        return o.view(B, Hq, 1, D)


class PoolAttn:
    def __init__(self, a, B, max_ctx, device, dtype, precision):
        self.a, self.dt, self.precision = a, dtype, precision
        self.pages = -(-max_ctx // PAGE)
        i32 = dict(dtype=torch.int32, device=device)
        like = torch.empty(0, device=device)
        self.pools = [lpattn.KVPool(B * self.pages, B, a.hkv, a.hq, a.head_dim,
                                    precision=precision, like=like, page_size=PAGE,
                                    high_dtype="float16" if dtype == torch.float16 else "float32")
                      for _ in range(a.layers)]
        self.slots = torch.arange(B, **i32)
        self.table = torch.arange(B * self.pages, **i32).view(B, self.pages)
        self.lens = torch.zeros(B, **i32)      # tokens held before the step (append)
        self.lens_dec = torch.zeros(B, **i32)  # after the append (the plans' lengths)
        self.max_ctx, self.plans = max_ctx, None

    @staticmethod
    def bytes(a, B, max_ctx, precision):
        pages = -(-max_ctx // PAGE)
        return a.layers * lpattn.pool_bytes(B * pages, B, a.hkv, a.hq, a.head_dim,
                                            precision=precision, page_size=PAGE)[2]

    def fill(self, B, device, chunk):
        i32 = dict(dtype=torch.int32, device=device)
        for i, pool in enumerate(self.pools):
            for s, m, k, v in context_chunks(self.a, B, i, device, self.dt, chunk):
                if s == 0 and self.precision == "fp8_static":  # descales before the first append
                    kd, vd = (x.abs().amax(dim=(2, 3)).float().div(448.0).clamp_min(1e-6)
                              for x in (k, v))
                    pool.set_descales(self.slots, kd, vd)
                pool.append(k, v, self.slots, torch.full((B,), s, **i32), self.table,
                            max_length=s)
        self.lens_dec.fill_(self.a.context + 1)
        q = torch.zeros(B, self.a.hq, 1, self.a.head_dim, device=device, dtype=self.dt)
        self.plans = [p.plan_decode(q, self.slots, self.lens_dec, self.table,
                                    max_length=self.max_ctx) for p in self.pools]

    def begin(self, pos):
        self.lens.copy_(pos)  # pos: tokens held before this step
        torch.add(self.lens, 1, out=self.lens_dec)

    def __call__(self, i, q, k, v):
        self.pools[i].append(k, v, self.slots, self.lens, self.table, max_length=self.max_ctx)
        return self.plans[i].run(q.contiguous())


def free_bytes(device):
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    with open("/proc/meminfo") as f:
        return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable:"))


def run_mode(model, a, B, mode, device):
    """Fills, times eager and graph steps; returns a row dict (a note when skipped)."""
    dt, gpu = model.dt, device.type == "cuda"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    extra = 2 * a.steps + 16 + (3 if gpu else 0)
    max_ctx = -(-(a.context + extra) // 256) * 256
    try:
        need = (SdpaAttn.bytes(a, B, max_ctx) if mode.startswith("sdpa")
                else PoolAttn.bytes(a, B, max_ctx, mode))
    except lpattn.LpattnError as e:
        print(f"  {mode}: skipped, the pool refuses it ({e})")
        return dict(mode=mode, note=f"skipped: the pool refuses precision {mode} ({str(e)[:80]})")
    chunk_b = 4 * B * a.hkv * min(a.chunk, a.context) * a.head_dim * 4
    free = free_bytes(device)
    print(f"  {mode}: KV memory {need / 2**30:.2f} GiB (max_ctx {max_ctx}) + fill buffers "
          f"{chunk_b / 2**30:.2f} GiB; free {free / 2**30:.2f} GiB")
    if need + chunk_b > 0.92 * free:
        print(f"  {mode}: skipped: it does not fit ({(need + chunk_b) / 2**30:.1f} GiB needed)")
        return dict(mode=mode, note=f"skipped: needs {(need + chunk_b) / 2**30:.1f} GiB, "
                    f"{free / 2**30:.1f} GiB free")
    if mode == "sdpa_flash" and not gpu:  # FlashAttention runs on CUDA only
        return dict(mode=mode, note="skipped: CUDA only")
    cls = {"sdpa": SdpaAttn, "sdpa_flash": FlashAttn}.get(mode)
    try:
        attn = (cls(a, B, max_ctx, device, dt) if cls is not None
                else PoolAttn(a, B, max_ctx, device, dt, mode))
    except lpattn.UnsupportedError as e:  # e.g. fp8_static pools on a GPU backend, for now
        print(f"  {mode}: skipped, the pool refuses it ({e})")
        return dict(mode=mode, note=f"skipped: the pool refuses precision {mode} ({str(e)[:80]})")
    sync()
    t0 = time.perf_counter()
    attn.fill(B, device, a.chunk)
    sync()
    fill_s = time.perf_counter() - t0
    tok = torch.randint(0, a.vocab, (B,), device=device, generator=gen(device, a.seed + 1))
    pos = torch.full((B,), a.context, dtype=torch.int64, device=device)
    logits = torch.empty(B, a.vocab, device=device, dtype=dt)

    def step():
        attn.begin(pos)
        model.step(tok, pos, attn, logits)

    def run(fn, n):  # --sdpa-backend pins SDPA's kernel, through the capture too
        with (torch.nn.attention.sdpa_kernel(getattr(torch.nn.attention.SDPBackend, a.sdpa_backend))
              if a.sdpa_backend != "auto" else contextlib.nullcontext()):
            return fn(n)

    # the first step: its logits are what --check compares (same weights, context, token)
    run(lambda n: step(), 1)
    sync()
    first = logits.float().cpu().clone()
    tokens = [int(x) for x in tok.tolist()]

    def eager(n):
        if gpu:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(n):
                step()
            e1.record()
            torch.cuda.synchronize()
            return e0.elapsed_time(e1) / n
        t = time.perf_counter()
        for _ in range(n):
            step()
        return (time.perf_counter() - t) * 1e3 / n

    eager_ms = run(eager, a.steps)
    graph_ms = None
    if gpu and not a.no_graph:
        side = torch.cuda.Stream()  # warm-up on a side stream (torch's recipe)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run(lambda n: step(), 1)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            run(lambda n: step(), 1)
        g.replay()  # one untimed replay
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(a.steps):
            g.replay()
        e1.record()
        torch.cuda.synchronize()
        graph_ms = e0.elapsed_time(e1) / a.steps
        del g
    held = int(pos[0]) - a.context
    assert held <= extra, (held, extra)
    ms = graph_ms if graph_ms is not None else eager_ms
    row = dict(mode=mode, graph_ms=graph_ms, eager_ms=eager_ms, tps=B * 1e3 / ms, fill_s=fill_s,
               first=first, tokens=tokens)
    del attn
    if gpu:
        torch.cuda.empty_cache()
    return row


def fmt(x, f):
    return "-" if x is None else format(x, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--batch", default=None, help="comma list; with --context: every pair "
                    "(default: the issue's shapes 1x32k, 1x128k, 16x32k)")
    ap.add_argument("--context", default=None, help="comma list of context lengths")
    ap.add_argument("--modes", default="sdpa,sdpa_flash,high,fp8,nvfp4,fp8_static")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--heads", default="32,8", help="Hq,Hkv")
    ap.add_argument("--head-dim", type=int, default=0, help="0: hidden / Hq")
    ap.add_argument("--mlp", type=int, default=14336)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--tie", action="store_true", help="the LM head is the embedding")
    ap.add_argument("--rope-theta", type=float, default=500000.0)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=4096, help="fill chunk (tokens)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float16", choices=("float16", "float32"))
    ap.add_argument("--sdpa-backend", default="auto",
                    choices=("auto", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"))
    ap.add_argument("--no-graph", action="store_true", help="time eager steps only")
    ap.add_argument("--compile", action="store_true", help="torch.compile the layers' "
                    "non-attention ops (bench/e2e_model.py), as serving engines fuse them")
    ap.add_argument("--check", action="store_true", help="assert that high's (and sdpa_flash's) "
                    "first-step logits match sdpa's (sdpa and high are run)")
    ap.add_argument("--tol", type=float, default=None, help="--check: the bound on max |diff| / "
                    "max |logit| (default 4e-3 in float16, 1e-5 in float32)")
    ap.add_argument("--out", default=None, help="also write the markdown here")
    a = ap.parse_args()
    a.hq, a.hkv = (int(x) for x in a.heads.split(","))
    a.head_dim = a.head_dim or a.hidden // a.hq
    if a.tol is None:  # measured on the smoke shape: rel 6e-4 (f16), 3e-7 (f32); a mask missing
        a.tol = 4e-3 if a.dtype == "float16" else 1e-5  # the new token gives 7.7e-3 (f16)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device (use --device cpu for the smoke test)")
    dtype = getattr(torch, a.dtype)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if a.check:
        modes = ["sdpa", "high"] + [m for m in modes if m not in ("sdpa", "high")]
    for m in modes:
        if m not in ("sdpa", "sdpa_flash") + POOL_MODES:
            sys.exit(f"--modes: unknown mode {m!r} (sdpa, sdpa_flash, {', '.join(POOL_MODES)})")
    if a.batch is None and a.context is None:
        shapes = [(1, 32768), (1, 131072), (16, 32768)]
    else:
        shapes = [(int(b), int(c)) for b in (a.batch or "1").split(",")
                  for c in (a.context or "32768").split(",")]
    wb = Model.weight_bytes(a)
    free = free_bytes(device)
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"device {device} ({dev_name}), torch {torch.__version__}, lpattn {lpattn.__version__}")
    print(f"model: {a.layers} layers, hidden {a.hidden}, heads {a.hq}/{a.hkv}, D {a.head_dim}, "
          f"MLP {a.mlp}, vocab {a.vocab}, {a.dtype}; weights {wb / 2**30:.2f} GiB "
          f"(free {free / 2**30:.1f} GiB)")
    if wb > 0.9 * free:
        sys.exit(f"the weights ({wb / 2**30:.1f} GiB) do not fit the free memory "
                 f"({free / 2**30:.1f} GiB): fewer --layers or a smaller --vocab")
    model = Model(a, device, dtype, compile=a.compile)
    lines = [f"Command: `{' '.join(['python3'] + sys.argv)}`  ",
             f"Machine: {dev_name} ({device.type}), torch {torch.__version__}, "
             f"lpattn {lpattn.__version__} ({lpattn.library_path}), SDPA backend {a.sdpa_backend}, "
             f"{a.layers} layers, hidden {a.hidden}, heads {a.hq}/{a.hkv}, D {a.head_dim}, "
             f"MLP {a.mlp}, vocab {a.vocab}, {a.steps} steps"
             + (", non-attention ops torch.compile'd" if a.compile else "")
             + ("" if device.type == "cuda" and not a.no_graph else "; no CUDA graphs (eager)"),
             "",
             "| B | context | mode | step ms (graph) | tokens/s | x SDPA | eager step ms | fill s |",
             "|---|---|---|---|---|---|---|---|"]
    notes, failed = [], False
    for B, ctx in shapes:
        a.context = ctx
        print(f"B = {B}, context {ctx}:")
        rows = []
        for m in modes:
            try:
                rows.append(run_mode(model, a, B, m, device))
            except Exception as e:  # report it and go on with the other modes
                import traceback
                traceback.print_exc()
                rows.append(dict(mode=m, note=f"FAILED: {type(e).__name__}: {str(e)[:160]}"))
                failed = True
                if device.type == "cuda":
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
        base = next((r for r in rows if r.get("mode") == "sdpa" and "tps" in r), None)
        fast = max((r for r in rows if r["mode"].startswith("sdpa") and "tps" in r),
                   key=lambda r: r["tps"], default=None)  # "x SDPA": the faster f16 baseline
        if fast is not None:
            notes.append(f"B = {B}, context {ctx}: x SDPA is against {fast['mode']}")
        for r in rows:
            if "tps" not in r:
                notes.append(f"B = {B}, context {ctx}, {r['mode']}: {r['note']}")
                continue
            x = r["tps"] / fast["tps"] if fast else None
            lines.append(f"| {B} | {ctx} | {r['mode']} | {fmt(r['graph_ms'], '.3f')} | "
                         f"{r['tps']:.1f} | {fmt(x, '.2f')} | {r['eager_ms']:.3f} | "
                         f"{r['fill_s']:.2f} |")
        # every mode's first-step logits against SDPA's (same weights, context, token):
        # informative for the quantized pools; asserted (--check) for high and sdpa_flash
        for r in rows:
            if base is None or r is base or "first" not in r:
                continue
            diff = (base["first"] - r["first"]).abs().max().item()
            scale = base["first"].abs().max().item()
            same = sum(x == y for x, y in zip(base["tokens"], r["tokens"]))
            exact = r["mode"] in ("high", "sdpa_flash")
            msg = (f"check B = {B}, context {ctx}: {r['mode']} vs sdpa first-step logits max "
                   f"|diff| {diff:.3e} (max |logit| {scale:.3f}, rel {diff / scale:.2e}"
                   + (f", tol {a.tol}" if exact else "") + f"); next tokens equal "
                   f"{same}/{len(base['tokens'])}")
            print(msg)
            notes.append(msg)
            if a.check and exact and not diff <= a.tol * scale:
                failed = True
                notes.append(f"FAILED: {r['mode']}'s logits differ from sdpa's beyond --tol")
    text = "\n".join(lines + [""] + [f"- {n}" for n in notes]) + "\n"
    print()
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    if failed:
        sys.exit("FAILED: see the notes above")


if __name__ == "__main__":
    main()
