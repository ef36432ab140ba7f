"""attention_varlen (and its backward): ragged batches in FlashAttention's cu_seqlens convention
(lpattn_attention_varlen; docs/SEMANTICS.md "Ragged batches")."""
import ctypes
import operator

from . import _api, _dlpack, _lib
from ._api import (INT32, _alloc, _descales, _same_dtype, _views, attn_params,
                   default_precision)
from ._context import context
from .errors import call

LAYOUT = "[total, H, D] (FlashAttention's varlen layout)"


def _host_cu(name, x):
    """cu_seqlens as a host int32 ctypes array: a 1-D integer array of any
    kind and device (a GPU one is copied to the host: the library reads the
    lengths there, lpattn.h "ragged batches") or a sequence of ints."""
    if hasattr(x, "__dlpack__"):
        (xv,) = _views((name, x), kind="index")
        xv.need_rank(1, "[n + 1] of cumulative lengths")
        vals = x.tolist()
    else:
        try:
            vals = [operator.index(c) for c in x]
        except TypeError:
            raise TypeError(f"{name}: expected a 1-D integer array or a sequence of ints, got "
                            f"{type(x).__name__}") from None
    for i, c in enumerate(vals):
        if not INT32[0] <= c <= INT32[1]:
            raise ValueError(f"{name}[{i}] = {c} is out of int32's range")
    arr = (ctypes.c_int32 * len(vals))(*vals)
    return arr, vals


def _cu_tensor(arr):
    n = len(arr)
    return _lib.Tensor(ctypes.addressof(arr), _lib.I32, _lib.c_i64_4(1, 1, 1, n),
                       _lib.c_i64_4(n, n, n, 1))


def _check_max(name, given, vals):
    """FlashAttention's max_seqlen_q/k: optional here; when given, at least
    the longest sequence (the library needs no bound)."""
    if given is None or len(vals) < 2:
        return
    longest = max(b - a for a, b in zip(vals, vals[1:]))
    if operator.index(given) < longest:
        raise ValueError(f"{name} = {given}, but a sequence has {longest} tokens")


def _packed(view):
    """[total, H, D] view -> lpattn_tensor {1, H, total, D} (strides kept)."""
    view.need_rank(3, LAYOUT)
    (T, H, D), (st, sh, sd) = view.shape, view.strides
    dt = _lib.E4M3 if view.dtype is None else view.dtype
    return _lib.Tensor(view.ptr, dt, _lib.c_i64_4(1, H, T, D), _lib.c_i64_4(0, sh, st, sd))


def _packed_rows(like, H, T, return_lse, return_entropy):
    """The aux of a packed call (lse / entropy [H, T] float32 arrays on
    like's device, as lpattn's [1, H, T, 1]) and those arrays."""
    aux = _lib.init(_lib.AttnAux, "lpattn_attn_aux_init")
    rows = []
    for want, field in ((return_lse, "lse"), (return_entropy, "entropy")):
        if want:
            arr = _alloc(like, (H, T), "float32")
            setattr(aux, field, _lib.Tensor(_dlpack.View(arr, field, write=True).ptr, _lib.F32,
                                            _lib.c_i64_4(1, H, T, 1), _lib.c_i64_4(H * T, T, 1, 1)))
            rows.append(arr)
    return aux, rows


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                     *, causal=False, precision=None, sm_scale=None, thrift_budget=None,
                     thrift_k=None, thrift_low="nvfp4", pasa=False, pasa_beta=None,
                     return_lse=False, return_entropy=False, backend="auto", block_q=None,
                     block_k=None, check_finite=False, out=None, leaky=False,
                     mx_scale_round_up=False, q_descale=None, k_descale=None, v_descale=None,
                     window=None, softcap=None):
    """Ragged batch attention, FlashAttention's flash_attn_varlen_func
    convention: q [total_q, Hq, D], k and v [total_k, Hkv, D] hold n
    sequences packed one after another; cu_seqlens_q / cu_seqlens_k are
    their cumulative lengths, n + 1 integers (int32, or int64 within
    int32's range) starting at 0, ending at total_q / total_k. Sequence b
    attends only to its own keys (causal: bottom-right aligned per
    sequence); Hq a multiple of Hkv (GQA). Each sequence's rows are exactly
    lpattn.attention on its slices (bitwise; its tiles start at its first
    token). cu_seqlens may live on the GPU, as FlashAttention's do, but the
    library reads them on the host: a device array is copied (one
    synchronization), so pass host arrays in a hot loop. max_seqlen_q/k
    are accepted for FlashAttention's signature (checked when given, not
    needed). The other keywords are lpattn.attention's; static FP8
    descales are [n, Hkv]. A sequence with queries but no keys is an
    error. window=(left, right) and softcap (FlashAttention's window_size
    and softcap) apply per sequence as in lpattn.attention. Returns out [total_q, Hq, D] (q's kind and dtype), or
    (out, lse[, entropy]) with lse/entropy [Hq, total_q] float32
    (FlashAttention's varlen softmax_lse layout)."""
    qv, kv_, vv = _views(("q", q), ("k", k), ("v", v), kind="qkv")
    _same_dtype(qv, kv_, vv)
    tq, tk, tv = _packed(qv), _packed(kv_), _packed(vv)
    cq, vq = _host_cu("cu_seqlens_q", cu_seqlens_q)
    ck, vk = _host_cu("cu_seqlens_k", cu_seqlens_k)
    _check_max("max_seqlen_q", max_seqlen_q, vq)
    _check_max("max_seqlen_k", max_seqlen_k, vk)
    descales = (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))
    precision = default_precision(precision, qv, descales)
    p = attn_params(precision, causal, sm_scale, thrift_budget, thrift_k, thrift_low, pasa,
                    pasa_beta, block_q, block_k, check_finite, leaky, mx_scale_round_up,
                    window=window, softcap=softcap)
    n = max(len(vq) - 1, 1)
    keep = _descales(p, q, qv, n, tk.shape[1], descales)  # noqa: F841 (alive for the call)
    ctx = context(backend, qv, _dlpack.current_stream(q, qv))
    T, H = tq.shape[2], tq.shape[1]
    if out is None:
        out = _alloc(q, qv.shape, _dlpack.NAMES.get(qv.dtype, "bfloat16"))  # E4M3: bf16
    to = _packed(_dlpack.View(out, "out", kind="float", write=True))
    aux, rows = _packed_rows(q, H, T, return_lse, return_entropy)
    call("attention_varlen", ctx.handle, ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv),
         ctypes.byref(to), ctypes.byref(_cu_tensor(cq)), ctypes.byref(_cu_tensor(ck)),
         ctypes.byref(p), ctypes.byref(aux))
    res = _dlpack.finish(q, out)
    if not rows:
        return res
    return (res,) + tuple(_dlpack.finish(q, r) for r in rows)


def _seq_seed(seed, b):
    """Sequence b's Philox seed: seed for b = 0, then a splitmix64 step per sequence."""
    return (seed + b * 0x9E3779B97F4A7C15) % 2 ** 64


def attention_varlen_backward(q, k, v, out, lse, dout, cu_seqlens_q, cu_seqlens_k, *,
                              causal=False, precision="high", sm_scale=None, thrift_budget=None,
                              thrift_k=None, thrift_low="nvfp4", pasa=False, pasa_beta=None,
                              backend="auto", block_q=None, block_k=None, seed=0):
    """Gradients (dq, dk, dv) of attention_varlen (packed as q, k, v; dk/dv
    summed over a GQA group) from its out, lse ([Hq, total_q], return_lse=True)
    and dout: lpattn.attention_backward on each sequence's slices (SPEC 10),
    sequence b with seed + b * 0x9E3779B97F4A7C15 (mod 2^64) so that the
    sequences' stochastic rounding is independent. Keys of sequences without
    queries get zero gradients. torch, NumPy and CuPy arrays."""
    _, vq = _host_cu("cu_seqlens_q", cu_seqlens_q)
    _, vk = _host_cu("cu_seqlens_k", cu_seqlens_k)
    if len(vq) != len(vk) or len(vq) < 2:
        raise ValueError(f"cu_seqlens_q has {len(vq)} entries, cu_seqlens_k {len(vk)}: expected "
                         "n + 1 each, n >= 1")
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)):
        _packed(_dlpack.View(x, name, kind="float"))  # [total, H, D] or a clear error
    grads = []
    for x in (q, k, v):
        g = _dlpack.empty(x, tuple(x.shape), str(x.dtype).replace("torch.", ""))
        g[...] = 0
        grads.append(g)
    kw = dict(causal=causal, precision=precision, layout="bshd", sm_scale=sm_scale,
              thrift_budget=thrift_budget, thrift_k=thrift_k, thrift_low=thrift_low, pasa=pasa,
              pasa_beta=pasa_beta, backend=backend, block_q=block_q, block_k=block_k)
    for b in range(len(vq) - 1):
        a, e, c, f = vq[b], vq[b + 1], vk[b], vk[b + 1]
        if a == e:
            continue
        dq, dk, dv = _api.attention_backward(q[a:e][None], k[c:f][None], v[c:f][None],
                                             out[a:e][None], lse[:, a:e][None], dout[a:e][None],
                                             seed=_seq_seed(seed, b), **kw)
        grads[0][a:e], grads[1][c:f], grads[2][c:f] = dq[0], dk[0], dv[0]
    return tuple(grads)
