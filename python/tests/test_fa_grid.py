"""Issue 27: FlashAttention's own test grid, forward and backward, through
lpattn.torch.attention (precision "high", autograd's backward: lpattn's
lpattn_attention_backward) on each backend built and available among ref,
cpu and cuda, against FlashAttention's acceptance rule for out, dq, dk, dv.

What is taken from Dao-AILab/flash-attention (fa_rule.py has the code):
- The grid of tests/test_flash_attn.py test_flash_attn_output: B = 4, 6
  query heads over 6 / 2 / 1 KV heads (MHA, GQA, MQA), causal and not,
  f16 and bf16, head dims 32 ... 256 (40, 59, 111 included), the ten (Sq, Sk)
  pairs from (113, 203) to (2048, 2048); dropout 0, no ALiBi, window or
  softcap. q, k, v and dout are standard normal in the 16-bit dtype.
- Causal with Sq != Sk included: FlashAttention (2.1 and later) masks
  bottom-right (key c masked iff c > r + Sk - Sq), lpattn too
  (docs/SEMANTICS.md "Tiles and their precision"); a row with no key
  ((512, 256), (1024, 1023)) is out = 0 in both and gets zero gradients.
- References: attention_ref upcast (float32 throughout) and the 16-bit math
  with reorder_ops=True (FA's out_pt); gradients by torch.autograd through
  each with the same dout. x_ref stays float32 (FA rounds out_ref and its
  gradients to the 16-bit dtype): stricter.
- Rule, for each of out, dq, dk, dv: max |x - x_ref| <= 2 max |x_pt - x_ref|
  + atol, atol = 2 max |x_ref + 0.3 - 0.3 - x_ref| (hopper/test_flash_attn.py,
  FA3; here float32's floor, ~1e-7 of |x_ref|). FA2's test_flash_attn.py
  asserts 2x for out and 3x for dq, dk, dv without atol (no eps for dk/dv):
  issue 27 asks 2x for all four, which is what is checked.

Cost: on CUDA the whole grid (1320 cases) runs by default. On the host
backends (ref, cpu) a sample runs by default (CI has 2 cores; ~10 s there):
each head dim twice, once f16 once bf16, over the six pairs up to 512,
MHA/GQA/MQA and causal rotated (causal (512, 256) among them), at B = 2
(FA's 4 halved for time). LPATTN_FA_GRID=full runs the whole grid at B = 4
on the host too (cpu: ~40 min on 2 cores; ref, the f64 oracle: hours;
LPATTN_FA_GRID_BACKENDS=cpu keeps it to cpu). Each case's references are
computed once and serve every backend; on the CPU the 16-bit math's products
are float32 products rounded to the dtype, as a GPU GEMM forms them
(fa_rule._mm: torch's CPU float16 matmul is slow).
"""
import os
import time
import unittest

try:
    import torch
    import lpattn.torch as lt
    from fa_rule import DIMS, DTYPES, HEADS, PAIRS, err_bound, math
except Exception:
    torch = None

import lpattn

AVAILABLE = lpattn.available_backends()
ONLY = os.environ.get("LPATTN_FA_GRID_BACKENDS")  # e.g. "cpu": the full grid without ref
HOST = [b for b in ("ref", "cpu") if b in AVAILABLE and (not ONLY or b in ONLY.split(","))] \
    if torch is not None else []
HAVE_CUDA = torch is not None and torch.cuda.is_available() and "cuda" in AVAILABLE
FULL = os.environ.get("LPATTN_FA_GRID", "") == "full"
NAMES = ("out", "dq", "dk", "dv")


def full_grid():
    for dt in DTYPES:
        for D in DIMS:
            for hq, hk in HEADS:
                for causal in (False, True):
                    for Sq, Sk in PAIRS:
                        yield 4, dt, D, hq, hk, causal, Sq, Sk


def sample():
    """Each head dim once per dtype over the pairs up to 512, heads and
    causal rotated so that every (heads, causal) and every small pair
    appears, causal (512, 256) (rows with no key) among them."""
    small = PAIRS[:6]
    n = 0
    for D in DIMS:
        for dt in DTYPES:
            hq, hk = HEADS[n % 3]
            causal = (n // 3) % 2 == 1
            Sq, Sk = small[(n + n // 6) % 6]
            yield 2, dt, D, hq, hk, causal, Sq, Sk
            n += 1


def references(q, k, v, dout, causal):
    """(x_ref, x_pt) for x = out, dq, dk, dv: the float32 math and the 16-bit
    math (reorder_ops) with their autograd gradients for dout."""
    res = []
    for upcast in (True, False):
        leaves = [(x.float() if upcast else x).detach().requires_grad_() for x in (q, k, v)]
        o = math(*leaves, causal, upcast, reorder=not upcast)
        grads = torch.autograd.grad(o, leaves, dout.to(o.dtype))
        res.append((o.detach(),) + tuple(grads))
    return list(zip(*res))


class Grid:
    def run_cases(self, cases, backends, device):
        g = torch.Generator(device=device).manual_seed(0)
        worst = {n: (0.0, None) for n in NAMES}
        bad, count, t0 = [], 0, time.time()
        for B, dt, D, hq, hk, causal, Sq, Sk in cases:
            q, k, v, dout = (torch.randn(B, h, S, D, device=device, dtype=dt, generator=g)
                             for h, S in ((hq, Sq), (hk, Sk), (hk, Sk), (hq, Sq)))
            refs = references(q, k, v, dout, causal)
            for be in backends:
                leaves = [x.clone().requires_grad_() for x in (q, k, v)]
                out = lt.attention(*leaves, causal=causal, precision="high", backend=be)
                grads = torch.autograd.grad(out, leaves, dout)
                what = f"{be} {dt} B {B} D {D} heads {hq}/{hk} causal {causal} {Sq}x{Sk}"
                for name, x, (ref, pt) in zip(NAMES, (out.detach(),) + grads, refs):
                    self.assertEqual(x.dtype, dt, what)
                    err, bound = err_bound(x, ref, pt)
                    if not err <= bound:  # NaN fails too
                        bad.append(f"{what} {name}: max err {err:.3g} > bound {bound:.3g}")
                    elif err / bound > worst[name][0]:
                        worst[name] = (err / bound, what)
                count += 1
        print(f"\n{count} backend-cases ({', '.join(backends)}) in {time.time() - t0:.1f} s; "
              f"worst err / bound: " +
              "; ".join(f"{n} {r:.3f} ({w})" for n, (r, w) in worst.items()))
        self.assertFalse(bad, f"{len(bad)} of {count * 4} checks out of FlashAttention's rule:\n"
                         + "\n".join(bad[:40]))


@unittest.skipUnless(HOST, "torch missing or no host backend")
class HostGrid(Grid, unittest.TestCase):
    def test_fa_grid_host(self):
        self.run_cases(full_grid() if FULL else sample(), HOST, "cpu")


@unittest.skipUnless(HAVE_CUDA, "no CUDA device or lpattn built without cuda")
class CudaGrid(Grid, unittest.TestCase):
    def test_fa_grid_cuda(self):
        self.run_cases(full_grid(), ["cuda"], "cuda")


if __name__ == "__main__":
    unittest.main()
