"""Issue 29: the SDPA drop-in with no precision argument, on CUDA f16/bf16
tensors, against FlashAttention's own acceptance rule (tests/test_flash_attn.py
test_flash_attn_output): max |out - ref| <= 2 max |out_pt - ref| + atol,
where ref is the attention of the same 16-bit inputs in float32, out_pt the
same math in the input dtype (scores and P V in 16 bits, softmax in float32)
and atol the float32 rounding floor of ref. Head dims and (Sq, Sk) pairs are
FlashAttention's; B = 2, 6 query heads as MHA, GQA (2 KV heads) and MQA.
Causal calls take Sq == Sk only (torch aligns is_causal top-left, lpattn
bottom-right: the drop-in hands those to torch). Every call must be one
lpattn takes (sdpa_unsupported_reason is None): nothing falls back. The grid,
references and rule: fa_rule.py (shared with test_fa_grid, which runs the
grid forward and backward through lpattn.torch.attention)."""
import unittest

try:
    import torch
    import lpattn.torch as lt
    from fa_rule import DIMS, DTYPES, HEADS, PAIRS, err_bound, math
except Exception:
    torch = None

import lpattn

HAVE_CUDA = (torch is not None and torch.cuda.is_available()
             and "cuda" in lpattn.available_backends())


@unittest.skipUnless(HAVE_CUDA, "no CUDA device or lpattn built without cuda")
class FlashAttentionRule(unittest.TestCase):
    def test_dropin_default_precision(self):
        g = torch.Generator(device="cuda").manual_seed(0)
        worst, cases = 0.0, 0
        for dt in DTYPES:
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
                            err, bound = err_bound(out, ref, pt)
                            what = f"{dt} D {D} heads {hq}/{hk} causal {causal} {Sq}x{Sk}"
                            self.assertLessEqual(err, bound, what)
                            worst = max(worst, err / bound)
                            cases += 1
        print(f"\n{cases} cases, worst err / bound {worst:.3f}")


if __name__ == "__main__":
    unittest.main()
