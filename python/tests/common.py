"""Shared helpers of the Python tests: random data and an f64 reference."""
import numpy as np


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def reference(q, k, v, causal=False, sm_scale=None):
    """softmax(s q k^T [bottom-right causal mask]) v and the LSE, in float64;
    q [B, Hq, Sq, D], k/v [B, Hkv, Skv, D]."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, Hq, Sq, D = q.shape
    rep = Hq // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * (sm_scale or 1.0 / np.sqrt(D))
    if causal:
        Skv = k.shape[2]
        mask = np.arange(Skv)[None, :] > (np.arange(Sq)[:, None] + Skv - Sq)
        s = np.where(mask, -np.inf, s)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    lse = np.log(p.sum(-1)) + m[..., 0]
    return np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v), lse


def rel_err(got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def cuda_skip_reason(torch):
    """Why a test on CUDA tensors cannot run here (torch missing, no CUDA
    device, or a library without the CUDA backend), or None."""
    import lpattn
    if torch is None:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    if "cuda" not in lpattn.available_backends():
        return "the library has no CUDA backend"
    return None
