"""FlashAttention's acceptance grid and rule, shared by test_sdpa_fa_rule (the
SDPA drop-in on CUDA, forward) and test_fa_grid (lpattn.torch.attention on
every backend, forward and backward).

From Dao-AILab/flash-attention tests/test_flash_attn.py test_flash_attn_output:
the head dims, the ten (Sq, Sk) pairs, 6 query heads over 6 / 2 / 1 KV heads
(MHA, GQA, MQA), f16 and bf16, and attention_ref: the reference (upcast:
float32 throughout) and the same math in 16 bits (upcast=False: the score and
P V products in the input dtype, torch.softmax of the 16-bit scores, P in the
input dtype, so its backward runs on the rounded P too; reorder_ops=True
scales k instead of q). The causal mask is bottom-right
(key c masked iff c > r + Sk - Sq), a row that sees no key is 0.
The rule (x = out, dq, dk or dv): max |x - x_ref| <= 2 max |x_pt - x_ref| +
atol, atol = 2 max |x_ref + 0.3 - 0.3 - x_ref| (hopper/test_flash_attn.py's
floor; here x_ref stays float32, so it is float32's rounding floor)."""
import torch

DIMS = (32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256)
PAIRS = ((113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256),
         (1024, 1024), (1023, 1024), (1024, 1023), (2048, 2048))
HEADS = ((6, 6), (6, 2), (6, 1))
DTYPES = (torch.float16, torch.bfloat16)


def _mm(a, b):
    """a @ b; on the CPU a 16-bit product is the float32 product of the
    16-bit operands rounded to their dtype (a GPU GEMM's float32
    accumulation; torch's CPU float16 matmul is ~20x slower)."""
    if a.is_cuda or a.dtype == torch.float32:
        return a @ b
    return (a.float() @ b.float()).to(a.dtype)


def math(q, k, v, causal, upcast, reorder=False):
    """attention_ref: upcast (float32 throughout, out in float32) or the
    16-bit math (out in the input dtype); reorder: k / sqrt(D) in place of
    q / sqrt(D) (FA's reorder_ops, which its 16-bit reference uses)."""
    dt = q.dtype
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    root = q.shape[-1] ** 0.5
    s = _mm(q, (k / root).transpose(-1, -2)) if reorder else _mm(q / root, k.transpose(-1, -2))
    masked = None
    if causal:
        Sq, Sk = q.shape[2], k.shape[2]
        r = torch.arange(Sq, device=q.device)[:, None]
        c = torch.arange(Sk, device=q.device)[None, :]
        masked = c > r + (Sk - Sq)
        s = s.masked_fill(masked, float("-inf"))
    p = torch.softmax(s, dim=-1).to(v.dtype)  # 16-bit s: float32 inside, P rounded
    if masked is not None and bool(masked.all(-1).any()):  # rows with no key: 0, not NaN
        p = p.masked_fill(masked.all(-1, keepdim=True), 0.0)
    o = _mm(p, v)
    return o if upcast else o.to(dt)


def atol(ref):
    return 2 * (ref + 0.3 - 0.3 - ref).abs().max().item()


def err_bound(x, ref, pt):
    """(max |x - ref|, 2 max |pt - ref| + atol(ref)): FlashAttention's rule
    holds when the first is <= the second."""
    err = (x.float() - ref).abs().max().item()
    return err, 2 * (pt.float() - ref).abs().max().item() + atol(ref)
