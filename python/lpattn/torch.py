"""PyTorch integration: lpattn's calls as torch.library ops (with fake
implementations, so torch.compile traces them without graph breaks), an
autograd formula over lpattn_attention_backward, and a drop-in for
torch.nn.functional.scaled_dot_product_attention.

    import lpattn.torch as lt
    out = lt.attention(q, k, v, causal=True)                 # exact ("high") by default
    out = lt.attention(q, k, v, causal=True, precision="nvfp4")  # low precision, by name
    torch.nn.functional.scaled_dot_product_attention = lt.scaled_dot_product_attention
"""
import ctypes
import itertools
import weakref
from typing import Optional

import torch
from torch import Tensor

from . import _api, _kv, _lib, _quant, _varlen

__all__ = ["attention", "attention_varlen", "merge_states", "quantize", "dequantize", "kv_append", "paged_decode",
           "scaled_dot_product_attention", "sdpa_unsupported_reason", "BACKWARD_MESSAGE"]

BACKWARD_MESSAGE = ("lpattn's backward needs the forward's LSE: call lpattn.torch.attention with "
                    "grad enabled on inputs that require grad (it keeps the LSE then)")


def _opt(x):
    return None if x is None or x <= 0 else x


# ---- attention ---------------------------------------------------------------

@torch.library.custom_op("lpattn::attention", mutates_args=())
def _attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, precision: str, layout: str,
               sm_scale: float, thrift_budget: float, thrift_k: int, thrift_low: str,
               pasa: bool, return_lse: bool, return_entropy: bool,
               backend: str, leaky: bool = False,
               mx_scale_round_up: bool = False, window_left: int = -1, window_right: int = -1,
               softcap: float = 0.0) -> tuple[Tensor, Tensor, Tensor]:
    res = _api.attention(q.detach(), k.detach(), v.detach(), causal=causal, precision=precision,
                         layout=layout, sm_scale=_opt(sm_scale),
                         thrift_budget=_opt(thrift_budget), thrift_k=_opt(thrift_k),
                         thrift_low=thrift_low, pasa=pasa, return_lse=return_lse,
                         return_entropy=return_entropy, backend=backend, leaky=leaky,
                         mx_scale_round_up=mx_scale_round_up,
                         window=(window_left, window_right), softcap=softcap)
    res = list(res) if isinstance(res, tuple) else [res]
    empty = q.new_empty((0,), dtype=torch.float32)
    lse = res[1] if return_lse else empty
    ent = res[-1] if return_entropy else empty.clone()
    return res[0], lse, ent


def _rows(q, layout, want):
    if not want:
        return q.new_empty((0,), dtype=torch.float32)
    B, H, S = (q.shape[0], q.shape[1], q.shape[2]) if layout == "bhsd" else \
        (q.shape[0], q.shape[2], q.shape[1])
    return q.new_empty((B, H, S), dtype=torch.float32)


@_attention.register_fake
def _(q, k, v, causal, precision, layout, sm_scale, thrift_budget, thrift_k, thrift_low, pasa,
      return_lse, return_entropy, backend, leaky=False, mx_scale_round_up=False, window_left=-1,
      window_right=-1, softcap=0.0):
    return torch.empty_like(q), _rows(q, layout, return_lse), _rows(q, layout, return_entropy)


@torch.library.custom_op("lpattn::attention_backward", mutates_args=())
def _attention_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, dout: Tensor,
                        causal: bool, precision: str, layout: str, sm_scale: float,
                        thrift_budget: float, thrift_k: int, thrift_low: str, pasa: bool,
                        backend: str, leaky: bool, mx_scale_round_up: bool,
                        seed: int, window_left: int = -1, window_right: int = -1,
                        softcap: float = 0.0) -> tuple[Tensor, Tensor, Tensor]:
    return _api.attention_backward(q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(),
                                   dout.detach().contiguous(), causal=causal, precision=precision,
                                   layout=layout, sm_scale=_opt(sm_scale),
                                   thrift_budget=_opt(thrift_budget), thrift_k=_opt(thrift_k),
                                   thrift_low=thrift_low, pasa=pasa, backend=backend, seed=seed,
                                   leaky=leaky, mx_scale_round_up=mx_scale_round_up,
                                   window=(window_left, window_right), softcap=softcap)


@_attention_backward.register_fake
def _(q, k, v, out, lse, dout, causal, precision, layout, sm_scale, thrift_budget, thrift_k,
      thrift_low, pasa, backend, leaky, mx_scale_round_up, seed, window_left=-1, window_right=-1,
      softcap=0.0):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _backward(ctx, dout, dlse, dent):
    for g, name in ((dlse, "lse"), (dent, "entropy")):
        if g is not None and g.numel() and bool(g.any()):
            raise NotImplementedError(f"lpattn's backward takes the gradient of out only, not of {name} "
                                      f"(detach the {name} output, or use torch's attention)")
    q, k, v, out, lse = ctx.saved_tensors
    if lse.numel() == 0:
        raise RuntimeError(BACKWARD_MESSAGE)
    # One Philox seed per call for the stochastic rounding of the low tiles'
    # backward operands, drawn from torch's generator (torch.manual_seed
    # makes training runs reproducible).
    seed = int(torch.randint(0, 2 ** 62, (1,)).item())
    dq, dk, dv = torch.ops.lpattn.attention_backward(q, k, v, out, lse, dout, *ctx.args, seed,
                                                     *ctx.window)
    return (dq, dk, dv) + (None,) * ctx.n_rest


def _setup(ctx, inputs, output):
    q, k, v, causal, precision, layout, sm_scale, thrift_budget, thrift_k, thrift_low, pasa, \
        return_lse, return_entropy, backend = inputs[:14]
    rest = tuple(inputs[14:])  # leaky, mx_scale_round_up, window_left, window_right, softcap
    leaky, mx_up, wl, wr, cap = rest + (False, False, -1, -1, 0.0)[len(rest):]
    ctx.window = (wl, wr, cap)
    ctx.save_for_backward(q, k, v, output[0], output[1])
    ctx.args = (causal, precision, layout, sm_scale, thrift_budget, thrift_k, thrift_low, pasa,
                backend, leaky, mx_up)
    ctx.n_rest = len(inputs) - 3


torch.library.register_autograd("lpattn::attention", _backward, setup_context=_setup)


def attention(q, k, v, *, causal=False, precision="high", layout="bhsd", sm_scale=None,
              thrift_budget=None, thrift_k=None, thrift_low="nvfp4", pasa=False,
              return_lse=False, return_entropy=False, backend="auto", leaky=False,
              mx_scale_round_up=False, window=None, softcap=None):
    """lpattn.attention as the op torch.ops.lpattn.attention (see there).
    Differentiable: with grad enabled and an input that requires grad, the
    forward keeps its LSE and backward runs lpattn_attention_backward
    (SPEC 10: low tiles' backward products in their format with stochastic
    rounding; PASA has no backward yet). precision defaults to "high";
    sm_scale None means 1/sqrt(D) (0 is rejected, as lpattn.attention).
    window=(left, right) and softcap as lpattn.attention (host backends)."""
    _api.check_sm_scale(sm_scale)  # before 0.0 below stands for None
    if thrift_k is not None:
        _api._int("thrift_k", thrift_k)
    need_lse = return_lse or (torch.is_grad_enabled() and
                              any(t.requires_grad for t in (q, k, v)))
    out, lse, ent = torch.ops.lpattn.attention(
        q, k, v, causal, precision, layout, float(sm_scale or 0.0), float(thrift_budget or 0.0),
        int(thrift_k or 0), thrift_low, pasa, need_lse, return_entropy, backend, bool(leaky),
        bool(mx_scale_round_up), *_api._window(window), float(softcap or 0.0))
    rest = ([lse] if return_lse else []) + ([ent] if return_entropy else [])
    return (out, *rest) if rest else out


@torch.library.custom_op("lpattn::attention_varlen", mutates_args=())
def _attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor,
                      cu_seqlens_k: Tensor, causal: bool, precision: str, sm_scale: float,
                      thrift_budget: float, thrift_k: int, thrift_low: str, return_lse: bool,
                      backend: str) -> tuple[Tensor, Tensor]:
    res = _varlen.attention_varlen(q.detach(), k.detach(), v.detach(), cu_seqlens_q,
                                   cu_seqlens_k, causal=causal, precision=precision,
                                   sm_scale=_opt(sm_scale), thrift_budget=_opt(thrift_budget),
                                   thrift_k=_opt(thrift_k), thrift_low=thrift_low,
                                   return_lse=return_lse, backend=backend)
    return res if return_lse else (res, q.new_empty((0,), dtype=torch.float32))


@_attention_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, precision, sm_scale, thrift_budget, thrift_k,
      thrift_low, return_lse, backend):
    shape = (q.shape[1], q.shape[0]) if return_lse else (0,)
    return torch.empty_like(q), q.new_empty(shape, dtype=torch.float32)


@torch.library.custom_op("lpattn::attention_varlen_backward", mutates_args=())
def _attention_varlen_backward(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor,
                               cu_seqlens_k: Tensor, out: Tensor, lse: Tensor, dout: Tensor,
                               causal: bool, precision: str, sm_scale: float,
                               thrift_budget: float, thrift_k: int, thrift_low: str,
                               backend: str, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    return _varlen.attention_varlen_backward(
        q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(), dout.detach(),
        cu_seqlens_q, cu_seqlens_k, causal=causal, precision=precision, sm_scale=_opt(sm_scale),
        thrift_budget=_opt(thrift_budget), thrift_k=_opt(thrift_k), thrift_low=thrift_low,
        backend=backend, seed=seed)


@_attention_varlen_backward.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, dout, causal, precision, sm_scale,
      thrift_budget, thrift_k, thrift_low, backend, seed):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _varlen_backward(ctx, dout, dlse):
    if dlse is not None and dlse.numel() and bool(dlse.any()):
        raise NotImplementedError("lpattn's backward takes the gradient of out only, not of lse")
    q, k, v, cq, ck, out, lse = ctx.saved_tensors
    if lse.numel() == 0:
        raise RuntimeError(BACKWARD_MESSAGE.replace("attention", "attention_varlen"))
    seed = int(torch.randint(0, 2 ** 62, (1,)).item())  # as attention's backward
    dq, dk, dv = torch.ops.lpattn.attention_varlen_backward(q, k, v, cq, ck, out, lse,
                                                            dout.contiguous(), *ctx.args, seed)
    return (dq, dk, dv) + (None,) * ctx.n_rest


def _varlen_setup(ctx, inputs, output):
    q, k, v, cq, ck, causal, precision, sm_scale, thrift_budget, thrift_k, thrift_low, \
        _, backend = inputs
    ctx.save_for_backward(q, k, v, cq, ck, output[0], output[1])
    ctx.args = (causal, precision, sm_scale, thrift_budget, thrift_k, thrift_low, backend)
    ctx.n_rest = len(inputs) - 3


torch.library.register_autograd("lpattn::attention_varlen", _varlen_backward,
                                setup_context=_varlen_setup)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                     *, causal=False, precision="high", sm_scale=None, thrift_budget=None,
                     thrift_k=None, thrift_low="nvfp4", return_lse=False, backend="auto"):
    """lpattn.attention_varlen as the op torch.ops.lpattn.attention_varlen:
    q [total_q, Hq, D], k/v [total_k, Hkv, D], cu_seqlens int32/int64
    [n + 1] (read on the host: a CUDA tensor costs a copy and a
    synchronization). Differentiable as lpattn.torch.attention (each
    sequence's lpattn_attention_backward, sequence b's SR seed derived from
    one drawn per call). Returns out, or (out, lse [Hq, total_q])."""
    _api.check_sm_scale(sm_scale)  # before 0.0 below stands for None
    if thrift_k is not None:
        _api._int("thrift_k", thrift_k)
    for name, m, cu in (("max_seqlen_q", max_seqlen_q, cu_seqlens_q),
                        ("max_seqlen_k", max_seqlen_k, cu_seqlens_k)):
        if m is not None and not torch.compiler.is_compiling():
            _varlen._check_max(name, m, cu.tolist())
    need_lse = return_lse or (torch.is_grad_enabled() and
                              any(t.requires_grad for t in (q, k, v)))
    out, lse = torch.ops.lpattn.attention_varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_k, causal, precision, float(sm_scale or 0.0),
        float(thrift_budget or 0.0), int(thrift_k or 0), thrift_low, need_lse, backend)
    return (out, lse) if return_lse else out


# ---- merge, quantize ------------------------------------------------------------

@torch.library.custom_op("lpattn::merge_states", mutates_args=())
def _merge(o_a: Tensor, lse_a: Tensor, o_b: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    o, lse = _api.merge_states(o_a.detach(), lse_a.detach(), o_b.detach(), lse_b.detach())
    return o, lse


@_merge.register_fake
def _(o_a, lse_a, o_b, lse_b):
    return torch.empty_like(o_a), torch.empty_like(lse_a)


def merge_states(o_a, lse_a, o_b, lse_b):
    """Merge two partial states (o [B, H, S, D], lse [B, H, S]): (o, lse)."""
    return torch.ops.lpattn.merge_states(o_a, lse_a, o_b, lse_b)


def _qsizes(fmt, axis, tile, shape):
    cb, sb, oc = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    from .errors import call
    call("qtensor_sizes", _lib.FORMATS[fmt], {"d": 0, "s": 1}[axis], tile,
         _lib.c_i64_4(*shape), ctypes.byref(cb), ctypes.byref(sb), ctypes.byref(oc))
    return cb.value, sb.value, oc.value


@torch.library.custom_op("lpattn::quantize", mutates_args=())
def _quantize(x: Tensor, format: str, axis: str, tile: int, rounding: str,
              seed: int) -> tuple[Tensor, Tensor, Tensor]:
    qt = _quant.quantize(x.detach(), format, axis=axis, tile=tile, rounding=rounding, seed=seed)
    return qt.codes, qt.scales, qt.outer


@_quantize.register_fake
def _(x, format, axis, tile, rounding, seed):
    cb, sb, oc = _qsizes(format, axis, tile, [int(n) for n in x.shape])
    u8 = dict(dtype=torch.uint8, device=x.device)
    return x.new_empty((cb,), **u8), x.new_empty((sb,), **u8), \
        x.new_empty((oc,), dtype=torch.float32)


def quantize(x, format="nvfp4", *, axis="d", tile=64, rounding="nearest", seed=0):
    """lpattn.quantize as an op: an lpattn.QuantizedTensor of torch tensors."""
    tile, seed = _api._int("tile", tile), _api._int("seed", seed, (0, 2 ** 63 - 1))  # int64 op
    codes, scales, outer = torch.ops.lpattn.quantize(x, format, axis, tile, rounding, seed)
    return _quant.QuantizedTensor(format, axis, tile, list(x.shape), codes, scales, outer)


@torch.library.custom_op("lpattn::dequantize", mutates_args=())
def _dequantize(codes: Tensor, scales: Tensor, outer: Tensor, format: str, axis: str,
                tile: int, shape: list[int], dtype: torch.dtype) -> Tensor:
    qt = _quant.QuantizedTensor(format, axis, tile, shape, codes, scales, outer)
    return _quant.dequantize(qt, str(dtype).replace("torch.", ""))


@_dequantize.register_fake
def _(codes, scales, outer, format, axis, tile, shape, dtype):
    return codes.new_empty(shape, dtype=dtype)


def dequantize(qt, dtype=torch.float32):
    return torch.ops.lpattn.dequantize(qt.codes, qt.scales, qt.outer, qt.format, qt.axis,
                                       qt.tile, list(qt.shape), dtype)


# ---- paged pool -----------------------------------------------------------------

_pools = weakref.WeakValueDictionary()
_next_id = itertools.count(1)


def _pool_id(pool):
    pid = getattr(pool, "_torch_id", None)
    if pid is None:
        pid = pool._torch_id = next(_next_id)
        _pools[pid] = pool
    return pid


@torch.library.custom_op("lpattn::kv_append", mutates_args=("memory",))
def _kv_append(memory: Tensor, pool_id: int, k: Tensor, v: Tensor, q: Optional[Tensor],
               slots: Tensor, lengths: Tensor, page_table: Tensor, max_length: int) -> None:
    _pools[pool_id].append(k.detach(), v.detach(), slots, lengths, page_table,
                           None if q is None else q.detach(), max_length=max_length)


@_kv_append.register_fake
def _(memory, pool_id, k, v, q, slots, lengths, page_table, max_length):
    return None


@torch.library.custom_op("lpattn::paged_decode", mutates_args=())
def _paged_decode(memory: Tensor, pool_id: int, q: Tensor, slots: Tensor, lengths: Tensor,
                  page_table: Tensor, max_length: int, sm_scale: float, thrift_budget: float,
                  thrift_k: int) -> Tensor:
    return _pools[pool_id].decode(q.detach(), slots, lengths, page_table, max_length=max_length,
                                  sm_scale=_opt(sm_scale), thrift_budget=_opt(thrift_budget),
                                  thrift_k=_opt(thrift_k))


@_paged_decode.register_fake
def _(memory, pool_id, q, slots, lengths, page_table, max_length, sm_scale, thrift_budget,
      thrift_k):
    return torch.empty_like(q)


def kv_append(pool, k, v, slots, lengths, page_table, max_length, q=None):
    """pool.append as an op (the pool's memory tensor is what it mutates)."""
    torch.ops.lpattn.kv_append(pool.memory, _pool_id(pool), k, v, q, slots, lengths, page_table,
                               _api._int("max_length", max_length, _api.INT64))


def paged_decode(pool, q, slots, lengths, page_table, max_length, *, sm_scale=None,
                 thrift_budget=None, thrift_k=None):
    """pool.decode as an op."""
    _api.check_sm_scale(sm_scale)  # before 0.0 below stands for None
    if thrift_k is not None:
        _api._int("thrift_k", thrift_k)
    max_length = _api._int("max_length", max_length, _api.INT64)
    return torch.ops.lpattn.paged_decode(pool.memory, _pool_id(pool), q, slots, lengths,
                                         page_table, max_length, float(sm_scale or 0.0),
                                         float(thrift_budget or 0.0), int(thrift_k or 0))


# ---- SDPA drop-in -------------------------------------------------------------------

_sdpa = torch.nn.functional.scaled_dot_product_attention
_GPU_DTYPES = (torch.float16, torch.bfloat16)


def sdpa_unsupported_reason(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                            scale=None, enable_gqa=False):
    """Why lpattn does not take this scaled_dot_product_attention call (a
    sentence), or None when it does."""
    if attn_mask is not None:
        return "attn_mask (lpattn has only the causal mask)"
    if dropout_p != 0.0:
        return "dropout_p > 0"
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return "tensors that are not 4-D [B, H, S, D]"
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        return "inputs that require grad (the drop-in leaves training to torch; lpattn.torch.attention has lpattn's backward)"
    if value.shape[-1] != query.shape[-1] or key.shape[-1] != query.shape[-1]:
        return "a value head dim other than the query's"
    D = query.shape[-1]
    if not 8 <= D <= 256:
        return f"head dim {D} (lpattn takes [8, 256])"
    if query.shape[1] != key.shape[1] and not enable_gqa:
        return "different head counts without enable_gqa"
    if query.shape[1] % key.shape[1]:
        return "query heads not a multiple of KV heads"
    if is_causal and query.shape[-2] != key.shape[-2]:
        return ("is_causal with Sq != Skv (torch aligns the mask top-left, lpattn "
                "bottom-right)")
    if scale is not None and not 0 < scale <= 16:
        return "scale outside (0, 16]"
    if query.dtype not in (torch.float32,) + _GPU_DTYPES or key.dtype != value.dtype:
        return f"dtypes {query.dtype}/{key.dtype}/{value.dtype}"
    if query.is_cuda and (query.dtype not in _GPU_DTYPES or key.dtype not in _GPU_DTYPES):
        return "float32 on the GPU (the GPU kernels take float16/bfloat16)"
    if query.device.type not in ("cpu", "cuda"):
        return f"device {query.device.type}"
    return None


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *,
                                 precision="high", strict=False):
    """torch.nn.functional.scaled_dot_product_attention with lpattn inside:
    calls lpattn can take run in `precision` ("high" by default: a drop-in
    is exact unless a low precision is asked for by name); the others go to
    torch's own (strict=True raises NotImplementedError naming the reason
    instead)."""
    why = sdpa_unsupported_reason(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                  enable_gqa)
    if why is not None:
        if strict:
            raise NotImplementedError("lpattn does not take " + why)
        kw = {"enable_gqa": enable_gqa} if enable_gqa else {}
        return _sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                     is_causal=is_causal, scale=scale, **kw)
    return attention(query, key, value, causal=is_causal, precision=precision, sm_scale=scale)
