"""attention, merge_states, quantize / dequantize, thrift_k, pasa_beta."""
import ctypes
import math

from . import _dlpack, _lib
from ._context import context
from .errors import call

LAYOUTS = {"bhsd": (0, 1, 2, 3), "bshd": (0, 2, 1, 3)}


def _choice(name, value, table):
    if value not in table:
        raise ValueError(f"{name} = {value!r}, expected one of {sorted(table)}")
    return table[value]


def _views(*named, stream_of=None):
    vs = [_dlpack.View(obj, name) for name, obj in named]
    dev = {(v.device_type, v.device_id) for v in vs}
    if len(dev) > 1:
        raise ValueError("tensors on different devices: " + ", ".join(
            f"{v.name} on {v.device_type}:{v.device_id}" for v in vs))
    for v in vs:
        if v.on_gpu and _dlpack.namespace_of(v.obj) not in ("torch", "cupy", "jax"):
            raise TypeError(f"{v.name}: GPU arrays are taken from torch, CuPy and JAX "
                            f"(got {type(v.obj).__name__})")
    return vs


def attn_params(precision="nvfp4", causal=False, sm_scale=None, thrift_budget=None,
                thrift_k=None, thrift_low="nvfp4", pasa=False, pasa_beta=None, block_q=None,
                block_k=None, check_finite=False, leaky=False, mx_scale_round_up=False,
                q_start=None, kv_start=None):
    p = _lib.init(_lib.AttnParams, "lpattn_attn_params_init")
    p.precision = _choice("precision", precision, _lib.PRECISIONS)
    p.causal = int(bool(causal))
    if sm_scale is not None:
        p.sm_scale = float(sm_scale)
    if thrift_budget is not None:
        p.thrift_budget = float(thrift_budget)
    if thrift_k is not None:
        p.thrift_k = int(thrift_k)
    p.thrift_low = _choice("thrift_low", thrift_low, _lib.FORMATS)
    p.pasa = int(bool(pasa))
    if pasa_beta is not None:
        p.pasa_beta = float(pasa_beta)
    if block_q is not None:
        p.block_q = int(block_q)
    if block_k is not None:
        p.block_k = int(block_k)
    p.check_finite = int(bool(check_finite))
    p.leaky = int(bool(leaky))
    p.mx_scale_round_up = int(bool(mx_scale_round_up))
    if q_start is not None or kv_start is not None:  # absolute positions (lpattn.h)
        p.positions, p.q_start, p.kv_start = 1, int(q_start or 0), int(kv_start or 0)
    return p


def _row_outputs(like, B, H, S, return_lse, return_entropy):
    aux = _lib.init(_lib.AttnAux, "lpattn_attn_aux_init")
    outs = []
    for want, field in ((return_lse, "lse"), (return_entropy, "entropy")):
        if want:
            arr = _dlpack.empty(like, (B, H, S), "float32")
            setattr(aux, field, _dlpack.View(arr, field).tensor(shape4=True))
            t = getattr(aux, field)
            t.shape = _lib.c_i64_4(B, H, S, 1)
            t.stride = _lib.c_i64_4(H * S, S, 1, 1)
            outs.append(arr)
    return aux, outs


def attention(q, k, v, *, causal=False, precision="nvfp4", layout="bhsd", sm_scale=None,
              thrift_budget=None, thrift_k=None, thrift_low="nvfp4", pasa=False,
              pasa_beta=None, return_lse=False, return_entropy=False, backend="auto",
              block_q=None, block_k=None, check_finite=False, out=None, leaky=False,
              mx_scale_round_up=False, q_start=None, kv_start=None):
    """softmax(sm_scale q k^T [causal mask]) v in lpattn's low precision.

    q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D] (layout "bhsd"; "bshd" takes
    [B, S, H, D]): any DLPack tensors of one device (torch, NumPy, CuPy, JAX
    on the CPU), float32/float16/bfloat16 (GPU backends: float16/bfloat16).
    The causal mask is bottom-right aligned. precision: "high", "fp8",
    "nvfp4", "mxfp4" or "thrift" (thrift_budget / thrift_k, tiles outside
    the selection in thrift_low). leaky (research only): every tile low with
    scales spanning the tile (the future-leakage paper's "leaky" baseline).
    mx_scale_round_up: MXFP4's scale rule that never clips (use it for
    training). q_start / kv_start (either given: absolute positions): the
    sequence positions of the first query and the first key, for a shard of
    a longer sequence (kv_start a multiple of block_k; the causal mask is
    then key position <= query position; lpattn.h "Absolute positions").
    Returns out (q's kind, dtype and layout), or
    (out, lse[, entropy]) with lse/entropy [B, Hq, Sq] float32 (nats)."""
    perm = _choice("layout", layout, LAYOUTS)
    qv, kv_, vv = _views(("q", q), ("k", k), ("v", v))
    stream = _dlpack.current_stream(q, qv)
    ctx = context(backend, qv, stream)
    tq, tk, tv = qv.tensor(perm), kv_.tensor(perm), vv.tensor(perm)
    B, H, S = tq.shape[0], tq.shape[1], tq.shape[2]
    if out is None:
        out = _dlpack.empty(q, qv.shape, _dlpack.NAMES.get(qv.dtype, "float32"))
    ov = _dlpack.View(out, "out")
    p = attn_params(precision, causal, sm_scale, thrift_budget, thrift_k, thrift_low, pasa,
                    pasa_beta, block_q, block_k, check_finite, leaky, mx_scale_round_up,
                    q_start, kv_start)
    aux, rows = _row_outputs(q, B, H, S, return_lse, return_entropy)
    to = ov.tensor(perm)
    call("attention", ctx.handle, ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv),
         ctypes.byref(to), ctypes.byref(p), ctypes.byref(aux))
    res = _dlpack.finish(q, out)
    if not rows:
        return res
    return (res,) + tuple(_dlpack.finish(q, r) for r in rows)


def attention_backward(q, k, v, out, lse, dout, *, causal=False, precision="nvfp4",
                       layout="bhsd", sm_scale=None, thrift_budget=None, thrift_k=None,
                       thrift_low="nvfp4", pasa=False, pasa_beta=None, backend="auto",
                       block_q=None, block_k=None, seed=0, leaky=False,
                       mx_scale_round_up=False, q_start=None, kv_start=None):
    """Gradients (dq, dk, dv) of attention(q, k, v, ...) (SPEC 10) from the
    forward's out and lse ([B, Hq, Sq] float32, return_lse=True) and dout.
    Pass the forward's keywords. Tiles the forward computed high are
    differentiated exactly; low tiles quantize the backward products'
    operands with stochastic rounding drawn from `seed`. dk/dv are summed
    over the q heads of a GQA group. q_start / kv_start as attention: a
    shard's partial gradients (dq over its keys, dk/dv from its queries)
    given the whole row's out and lse."""
    perm = _choice("layout", layout, LAYOUTS)
    qv, kv_, vv, ov, lv, gv = _views(("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse),
                                     ("dout", dout))
    stream = _dlpack.current_stream(q, qv)
    ctx = context(backend, qv, stream)
    tq, tk, tv, to, tg = (x.tensor(perm) for x in (qv, kv_, vv, ov, gv))
    tl = lv.tensor(shape4=True)
    B, H, S = tq.shape[0], tq.shape[1], tq.shape[2]
    if lv.shape != (B, H, S):
        raise ValueError(f"lse.shape = {lv.shape}, expected {(B, H, S)} (attention(..., return_lse=True))")
    tl.shape = _lib.c_i64_4(B, H, S, 1)
    tl.stride = _lib.c_i64_4(lv.strides[0], lv.strides[1], lv.strides[2], 1)
    grads = [_dlpack.empty(x, vw.shape, _dlpack.NAMES.get(vw.dtype, "float32"))
             for x, vw in ((q, qv), (k, kv_), (v, vv))]
    g = _lib.init(_lib.AttnGrads, "lpattn_attn_grads_init")
    g.dq, g.dk, g.dv = (_dlpack.View(a, n).tensor(perm) for a, n in zip(grads, ("dq", "dk", "dv")))
    g.seed = int(seed) & (2 ** 64 - 1)
    p = attn_params(precision, causal, sm_scale, thrift_budget, thrift_k, thrift_low, pasa,
                    pasa_beta, block_q, block_k, leaky=leaky, mx_scale_round_up=mx_scale_round_up,
                    q_start=q_start, kv_start=kv_start)
    call("attention_backward", ctx.handle, ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv),
         ctypes.byref(to), ctypes.byref(tl), ctypes.byref(tg), ctypes.byref(p), ctypes.byref(g))
    return tuple(_dlpack.finish(q, a) for a in grads)


def merge_states(o_a, lse_a, o_b, lse_b, h_a=None, h_b=None, *, backend="auto"):
    """Merge two partial attention states over disjoint key sets (SPEC 7):
    o [B, H, S, D], lse and entropy h [B, H, S] float32. Returns (o, lse) or
    (o, lse, h) when both entropies are given."""
    named = [("o_a", o_a), ("lse_a", lse_a), ("o_b", o_b), ("lse_b", lse_b)]
    with_h = h_a is not None or h_b is not None
    if with_h:
        if h_a is None or h_b is None:
            raise ValueError("merge_states: give both h_a and h_b, or neither")
        named += [("h_a", h_a), ("h_b", h_b)]
    vs = _views(*named)
    ctx = context(backend, vs[0], _dlpack.current_stream(o_a, vs[0]))
    o = _dlpack.empty(o_a, vs[0].shape, _dlpack.NAMES.get(vs[0].dtype, "float32"))
    lse = _dlpack.empty(o_a, vs[1].shape, "float32")
    outs = [o, lse] + ([_dlpack.empty(o_a, vs[1].shape, "float32")] if with_h else [])
    ov = [_dlpack.View(x, n) for x, n in zip(outs, ("o", "lse", "h"))]

    def row(v):
        t = v.tensor(shape4=True) if len(v.shape) == 4 else None
        if len(v.shape) == 3:  # [B, H, S] -> [B, H, S, 1]
            t = _lib.Tensor(v.ptr, v.dtype if v.dtype is not None else 0,
                            _lib.c_i64_4(*v.shape, 1), _lib.c_i64_4(*v.strides, 1))
        return t

    ts = [vs[0].tensor(), row(vs[1]), vs[2].tensor(), row(vs[3])]
    hs = [row(vs[4]), row(vs[5])] if with_h else [None, None]
    to, tl = ov[0].tensor(), row(ov[1])
    th = row(ov[2]) if with_h else None
    ref = lambda t: ctypes.byref(t) if t is not None else None  # noqa: E731
    call("merge_states", ctx.handle, ref(ts[0]), ref(ts[1]), ref(hs[0]), ref(ts[2]),
         ref(ts[3]), ref(hs[1]), ref(to), ref(tl), ref(th))
    return tuple(_dlpack.finish(o_a, x) for x in outs)


class QuantizedTensor:
    """A tensor in lpattn's block format (lpattn_qtensor): uint8 codes, uint8
    group scales (E4M3 for NVFP4, E8M0 for MXFP4; empty for FP8) and float32
    outer scales (empty for MXFP4), arrays of the input's kind."""

    def __init__(self, fmt, axis, tile, shape, codes, scales, outer):
        self.format, self.axis, self.tile, self.shape = fmt, axis, tile, tuple(shape)
        self.codes, self.scales, self.outer = codes, scales, outer

    def _c(self):
        ptr = lambda a: _dlpack.View(a, "q").ptr if a is not None and _size(a) else None  # noqa
        return _lib.QTensor(_lib.FORMATS[self.format], {"d": 0, "s": 1}[self.axis], self.tile,
                            _lib.c_i64_4(*self.shape), ptr(self.codes), ptr(self.scales),
                            ptr(self.outer))

    def __repr__(self):
        return (f"QuantizedTensor({self.format}, axis={self.axis!r}, shape={self.shape}, "
                f"codes {_size(self.codes)} B, scales {_size(self.scales)} B, "
                f"outer {_size(self.outer)} floats)")


def _size(a):
    return int(math.prod(a.shape)) if a is not None else 0


def quantize(x, format="nvfp4", *, axis="d", tile=64, rounding="nearest", seed=0,
             mx_scale_round_up=False, check_finite=False, backend="auto"):
    """x [B, H, S, D] (float32/float16/bfloat16) -> QuantizedTensor (SPEC 2):
    axis "d" groups along the head dim (Q, K), "s" along the sequence in
    tiles of `tile` tokens (V); rounding "nearest" (even) or "stochastic"
    (Philox, `seed`). Bit-exact on every backend."""
    (xv,) = _views(("x", x))
    ctx = context(backend, xv, _dlpack.current_stream(x, xv))
    p = _lib.init(_lib.QuantParams, "lpattn_quant_params_init")
    p.format = _choice("format", format, _lib.FORMATS)
    p.axis = _choice("axis", axis, {"d": 0, "s": 1})
    p.tile = int(tile)
    p.rounding = _choice("rounding", rounding, {"nearest": 0, "stochastic": 1})
    p.seed, p.mx_scale_round_up, p.check_finite = seed, int(mx_scale_round_up), int(check_finite)
    tx = xv.tensor()
    cb, sb, oc = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    call("qtensor_sizes", p.format, p.axis, p.tile, tx.shape, ctypes.byref(cb),
         ctypes.byref(sb), ctypes.byref(oc))
    qt = QuantizedTensor(format, axis, p.tile, list(tx.shape),
                         _dlpack.empty(x, (cb.value,), "uint8"),
                         _dlpack.empty(x, (sb.value,), "uint8"),
                         _dlpack.empty(x, (oc.value,), "float32"))
    c = qt._c()
    call("quantize", ctx.handle, ctypes.byref(tx), ctypes.byref(c), ctypes.byref(p))
    return qt


def dequantize(qt, dtype="float32", *, backend="auto"):
    """QuantizedTensor -> array [B, H, S, D] of `dtype`, of the codes' kind."""
    (cv,) = _views(("q.codes", qt.codes))
    ctx = context(backend, cv, _dlpack.current_stream(qt.codes, cv))
    y = _dlpack.empty(qt.codes, qt.shape, dtype)
    ty = _dlpack.View(y, "y").tensor()
    c = qt._c()
    call("dequantize", ctx.handle, ctypes.byref(c), ctypes.byref(ty))
    return _dlpack.finish(qt.codes, y)


def thrift_k(n_tiles, budget, causal=True):
    """ThriftAttention's k for n KV tiles and budget f (SPEC 5)."""
    return _lib.lib.lpattn_thrift_k(int(n_tiles), float(budget), int(bool(causal)))


def pasa_beta(storage="float16", block=64, beta0=0.0):
    """PASA's beta for storage "float16"/"bfloat16" and block size (SPEC 6)."""
    dt = _choice("storage", storage, {"float16": _lib.F16, "bfloat16": _lib.BF16})
    return _lib.lib.lpattn_pasa_beta(dt, int(block), float(beta0))
