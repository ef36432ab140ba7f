"""Issue 29: the SDPA drop-in with no precision argument, on CUDA f16/bf16
tensors, against FlashAttention's own acceptance rule (tests/test_flash_attn.py
test_flash_attn_output): max |out - ref| <= 2 max |out_pt - ref| + atol,
where ref is the attention of the same 16-bit inputs in float32, out_pt the
same math in the input dtype (scores and P V in 16 bits, softmax in float32)
and atol the float32 rounding floor of ref. Head dims and (Sq, Sk) pairs are
FlashAttention's; B = 2, 6 query heads as MHA, GQA (2 KV heads) and MQA.
Causal calls take Sq == Sk only (torch aligns is_causal top-left, lpattn
bottom-right: the drop-in hands those to torch). Every call must be one
lpattn takes (sdpa_unsupported_reason is None): nothing falls back."""
import unittest

try:
    import torch
    import lpattn.torch as lt
except Exception:
    torch = None

import lpattn

HAVE_CUDA = (torch is not None and torch.cuda.is_available()
             and "cuda" in lpattn.available_backends())

DIMS = (32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256)
PAIRS = ((113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256),
         (1024, 1024), (1023, 1024), (1024, 1023), (2048, 2048))
HEADS = ((6, 6), (6, 2), (6, 1))


def math(q, k, v, causal, upcast):
    """FlashAttention's attention_ref: upcast (f32 throughout) or the 16-bit
    math (scores and P V in the input dtype, softmax in float32)."""
    dt = q.dtype
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    s = (q / q.shape[-1] ** 0.5) @ k.transpose(-1, -2)
    if causal:
        Sq, Sk = q.shape[2], k.shape[2]
        r = torch.arange(Sq, device=q.device)[:, None]
        c = torch.arange(Sk, device=q.device)[None, :]
        s = s.masked_fill(c > r + (Sk - Sq), float("-inf"))
    p = torch.softmax(s.float(), dim=-1).to(v.dtype)
    o = p @ v
    return o if upcast else o.to(dt)


@unittest.skipUnless(HAVE_CUDA, "no CUDA device or lpattn built without cuda")
class FlashAttentionRule(unittest.TestCase):
    def test_dropin_default_precision(self):
        g = torch.Generator(device="cuda").manual_seed(0)
        worst, cases = 0.0, 0
        for dt in (torch.float16, torch.bfloat16):
            for D in DIMS:
                for hq, hk in HEADS:
                    for causal in (False, True):
                        for Sq, Sk in PAIRS:
                            if causal and Sq != Sk:
                                continue
                            q = torch.randn(2, hq, Sq, D, device="cuda", dtype=dt, generator=g)
                            k = torch.randn(2, hk, Sk, D, device="cuda", dtype=dt, generator=g)
                            v = torch.randn(2, hk, Sk, D, device="cuda", dtype=dt, generator=g)
                            gqa = hq != hk
                            self.assertIsNone(lt.sdpa_unsupported_reason(
                                q, k, v, is_causal=causal, enable_gqa=gqa))
                            out = lt.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                  enable_gqa=gqa)
                            ref = math(q, k, v, causal, True)
                            pt = math(q, k, v, causal, False)
                            atol = 2 * (ref + 0.3 - 0.3 - ref).abs().max().item()
                            err = (out.float() - ref).abs().max().item()
                            bound = 2 * (pt.float() - ref).abs().max().item() + atol
                            what = f"{dt} D {D} heads {hq}/{hk} causal {causal} {Sq}x{Sk}"
                            self.assertLessEqual(err, bound, what)
                            worst = max(worst, err / bound)
                            cases += 1
        print(f"\n{cases} cases, worst err / bound {worst:.3f}")


if __name__ == "__main__":
    unittest.main()
