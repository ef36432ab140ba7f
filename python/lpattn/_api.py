"""attention, attention_backward, merge_states, thrift_k, pasa_beta (quantize: _quant.py)."""
import ctypes
import math
import numbers
import operator

from . import _dlpack, _fast, _lib
from ._context import context
from .errors import call, check

LAYOUTS = {"bhsd": (0, 1, 2, 3), "bshd": (0, 2, 1, 3)}
LAYOUT_TEXT = {"bhsd": "[B, H, S, D] (layout 'bhsd')", "bshd": "[B, S, H, D] (layout 'bshd')"}
INT32 = (-2 ** 31, 2 ** 31 - 1)
INT64 = (-2 ** 63, 2 ** 63 - 1)
UINT64 = (0, 2 ** 64 - 1)


def _int(name, value, rng=INT32):
    """value as a Python int within the C type's range `rng` (ctypes would
    narrow it silently): TypeError for a non-integer, ValueError outside."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} = {value!r}: expected an integer") from None
    if not rng[0] <= v <= rng[1]:
        raise ValueError(f"{name} = {v} is out of range: expected {rng[0]}..{rng[1]}")
    return v


def _float_ok(name, value):
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} = {value!r}: expected a number") from None


def check_sm_scale(sm_scale):
    """sm_scale as a float: None means 1/sqrt(D) (the C API's 0); 0, a
    negative or NaN scale is not one (lpattn.h: (0, 16]): ValueError. The
    upper bound is the library's."""
    if sm_scale is None:
        return None
    s = _float_ok("sm_scale", sm_scale)
    if not s > 0.0:
        raise ValueError(f"sm_scale = {sm_scale!r}, expected None (1/sqrt(head_dim)) or a "
                         "scale in (0, 16]")
    return s


def _same_dtype(*vs):
    """k and v (merge: o_a and o_b) share one dtype; blame the odd one out,
    naming both dtypes (q, when given first, decides which is odd)."""
    first, a, b = (None,) + vs if len(vs) == 2 else vs
    if a.dtype == b.dtype:
        return
    odd, other = (a, b) if first is not None and first.dtype == b.dtype else (b, a)
    raise TypeError(f"{odd.name} is {odd.dtype_name} but {other.name} is {other.dtype_name}: "
                    f"{a.name} and {b.name} take one dtype")


def _alloc(like, shape, dtype, probe=None):
    """An output array; when the allocation fails, `probe` asks the library
    whether the call's shapes are valid at all (its SIZE_OVERFLOW / BAD_SHAPE
    error is then raised instead of MemoryError)."""
    try:
        return _dlpack.empty(like, shape, dtype)
    except (MemoryError, RuntimeError, ValueError) as e:
        if probe is None or (isinstance(e, RuntimeError) and "memory" not in str(e).lower()):
            raise
        probe()
        raise


_dummy = (ctypes.c_uint8 * 64)()


def _probe_attention(ctx, tq, tk, tv, p):
    """Validate an attention call without running it: out is a made-up
    dense view of q's shape over a small buffer and aux.lse has a wrong
    dtype, which the library checks after every shape (core/api.c
    lp_resolve_attention): a failure that is not aux.lse's is the call's."""
    sh = tuple(tq.shape)
    st = (sh[1] * sh[2] * sh[3], sh[2] * sh[3], sh[3], 1)
    fake = _lib.Tensor(ctypes.addressof(_dummy), tq.dtype, _lib.c_i64_4(*sh), _lib.c_i64_4(*st))
    aux = _lib.init(_lib.AttnAux, "lpattn_attn_aux_init")
    aux.lse = _lib.Tensor(ctypes.addressof(_dummy), _lib.I32, _lib.c_i64_4(sh[0], sh[1], sh[2], 1),
                          _lib.c_i64_4(sh[1] * sh[2], sh[2], 1, 1))
    st = _lib.lib.lpattn_attention(ctx.handle, ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv),
                                   ctypes.byref(fake), ctypes.byref(p), ctypes.byref(aux))
    if st != 0 and not (_lib.lib.lpattn_last_error() or b"").startswith(b"aux.lse"):
        from .errors import check
        check("attention", st)


def _choice(name, value, table):
    if value not in table:
        raise ValueError(f"{name} = {value!r}, expected one of {sorted(table)}")
    return table[value]


def _window(window):
    """(left, right) of a sliding window as the C ints (-1 = unbounded; None
    on a side, or window None, too). Bad values are the library's to name."""
    if window is None:
        return -1, -1
    try:
        left, right = window
    except (TypeError, ValueError):
        raise TypeError(f"window = {window!r}: expected (left, right), each an int >= 0 or "
                        "-1 / None (unbounded)") from None
    return tuple(-1 if x is None else _int(f"window[{i}]", x) for i, x in enumerate((left, right)))


def _views(*named, kind="any", write=()):
    vs = [_dlpack.View(obj, name, kind=kind, write=name in write) for name, obj in named]
    dev = {(v.device_type, v.device_id) for v in vs}
    if len(dev) > 1:
        raise ValueError("tensors on different devices: " + ", ".join(
            f"{v.name} on {v.device_type}:{v.device_id}" for v in vs))
    for v in vs:
        if v.on_gpu and _dlpack.namespace_of(v.obj) not in ("torch", "cupy", "jax"):
            raise TypeError(f"{v.name}: GPU arrays are taken from torch, CuPy and JAX "
                            f"(got {type(v.obj).__name__})")
    return vs


def attn_params(precision="high", causal=False, sm_scale=None, thrift_budget=None,
                thrift_k=None, thrift_low="nvfp4", pasa=False, pasa_beta=None, block_q=None,
                block_k=None, check_finite=False, leaky=False, mx_scale_round_up=False,
                q_start=None, kv_start=None, selection=None, thrift_rule=None, window=None,
                softcap=None):
    p = _lib.init(_lib.AttnParams, "lpattn_attn_params_init")
    p.window_left, p.window_right = _window(window)
    if softcap is not None:
        p.softcap = _float_ok("softcap", softcap)
    p.precision = _choice("precision", precision, _lib.PRECISIONS)
    p.causal = int(bool(causal))
    if sm_scale is not None:
        p.sm_scale = check_sm_scale(sm_scale)
    if thrift_budget is not None:
        p.thrift_budget = _float_ok("thrift_budget", thrift_budget)
    if thrift_k is not None:
        p.thrift_k = _int("thrift_k", thrift_k)
    p.thrift_low = _choice("thrift_low", thrift_low, _lib.FORMATS)
    if selection is not None:
        p.selection = _choice("selection", selection, _lib.SELECTIONS)
    if thrift_rule:  # "sink+kmax" or ("sink", "kmax"): lpattn_thrift_rule flags
        names = thrift_rule.split("+") if isinstance(thrift_rule, str) else list(thrift_rule)
        p.thrift_rule = sum(_choice("thrift_rule", n, _lib.THRIFT_RULES) for n in set(names))
    p.pasa = int(bool(pasa))
    if pasa_beta is not None:
        p.pasa_beta = _float_ok("pasa_beta", pasa_beta)
    if block_q is not None:
        p.block_q = _int("block_q", block_q)
    if block_k is not None:
        p.block_k = _int("block_k", block_k)
    p.check_finite = int(bool(check_finite))
    p.leaky = int(bool(leaky))
    p.mx_scale_round_up = int(bool(mx_scale_round_up))
    if q_start is not None or kv_start is not None:  # absolute positions (lpattn.h)
        p.positions = 1
        p.q_start = _int("q_start", q_start or 0, INT64)
        p.kv_start = _int("kv_start", kv_start or 0, INT64)
    return p


_SHARED_PARAMS = {}  # argument tuple -> its lpattn_attn_params (read, never written, by the C calls)


def _attn_params_shared(*args, **kw):
    """attn_params(*args, **kw) as one struct per distinct argument tuple,
    for a caller that does not change it: building it is a third of an
    eager call's host time. Unhashable arguments (a list) build a new one."""
    key = (args, tuple(kw.items())) if kw else args
    try:
        p = _SHARED_PARAMS.get(key)
    except TypeError:
        return attn_params(*args, **kw)
    if p is None:
        p = attn_params(*args, **kw)
        if len(_SHARED_PARAMS) < 256:
            _SHARED_PARAMS[key] = p
    return p


def shared_params_addr(*args, **kw):
    """The address of _attn_params_shared's struct while it is cached (the
    cache never drops one, so the address outlives the call); None when
    attn_params raises (the caller's Python path then raises it in its own
    order) or the struct is not cached (unhashable arguments, a full cache):
    the C extension must not read a struct that is freed once this returns."""
    try:
        p = _attn_params_shared(*args, **kw)
        cached = _SHARED_PARAMS.get((args, tuple(kw.items())) if kw else args) is p
    except Exception:
        return None
    return ctypes.addressof(p) if cached else None


def _descales(p, like, qv, B, Hkv, named):
    """Static FP8's descales into p (lpattn.h q_descale ..): None (data NULL:
    1.0), a number (one float32 on q's device, broadcast by stride 0) or an
    array of [B, Hkv] (or one element) on q's device. Numbers and host
    arrays must be finite and > 0 (ValueError naming the descale and its
    [b, h]). Returns the views that keep the arrays alive."""
    keep = []
    for name, d in named:
        if d is None:
            continue
        if isinstance(d, numbers.Real) and not isinstance(d, bool):  # also NumPy scalars
            if not (math.isfinite(d) and d > 0):
                raise ValueError(f"{name} = {d!r}: a descale must be finite and > 0")
            arr = _dlpack.empty(like, (1,), "float32")
            arr[...] = float(d)
            d = arr
        (v,) = _views((name, d), kind="float")
        if (v.device_type, v.device_id) != (qv.device_type, qv.device_id):
            raise ValueError(f"{name} is on device {v.device_type}:{v.device_id}, q on "
                             f"{qv.device_type}:{qv.device_id}")
        if math.prod(v.shape) == 1:  # one value for every (b, kv head)
            st = (0, 0, 0, 0)
        elif len(v.shape) == 2:
            st = (0, 0) + tuple(v.strides)
        else:
            raise ValueError(f"{name}: expected a float32 [B, Hkv] = [{B}, {Hkv}] array or one "
                             f"value, got shape {tuple(v.shape)}")
        t = _lib.Tensor(v.ptr, v.dtype, _lib.c_i64_4(1, 1, B, Hkv), _lib.c_i64_4(*st))
        if len(v.shape) == 2 and tuple(v.shape) != (B, Hkv):
            t.shape = _lib.c_i64_4(1, 1, *v.shape)  # the library names the mismatch
        elif not v.on_gpu and v.dtype == _lib.F32:
            for b in range(B):
                for h in range(Hkv):
                    x = ctypes.c_float.from_address(v.ptr + 4 * (b * st[2] + h * st[3])).value
                    if not (math.isfinite(x) and x > 0):
                        raise ValueError(f"{name}[{b}, {h}] = {x}: a descale must be finite and > 0")
        setattr(p, name, t)
        keep.append(v)
    return keep


_NO_ROWS = _lib.init(_lib.AttnAux, "lpattn_attn_aux_init")  # calls without row outputs (read only)
_fast.bind(_NO_ROWS)


def _row_outputs(like, B, H, S, return_lse, return_entropy):
    if not (return_lse or return_entropy):
        return _NO_ROWS, []
    aux = _lib.init(_lib.AttnAux, "lpattn_attn_aux_init")
    outs = []
    for want, field in ((return_lse, "lse"), (return_entropy, "entropy")):
        if want:
            arr = _alloc(like, (B, H, S), "float32")
            setattr(aux, field, _dlpack.View(arr, field, write=True).tensor(shape4=True))
            t = getattr(aux, field)
            t.shape = _lib.c_i64_4(B, H, S, 1)
            t.stride = _lib.c_i64_4(H * S, S, 1, 1)
            outs.append(arr)
    return aux, outs



def default_precision(precision, qv, descales):
    """precision=None: "fp8_static" for E4M3 inputs or any descale given
    (static FP8 by what they are, SPEC 11), else "high" (exact by default)."""
    if precision is not None:
        return precision
    fp8s = qv.dtype == _lib.E4M3 or any(d is not None for _, d in descales)
    return "fp8_static" if fp8s else "high"

def attention(q, k, v, *, causal=False, precision=None, layout="bhsd", sm_scale=None,
              thrift_budget=None, thrift_k=None, thrift_low="nvfp4", pasa=False,
              pasa_beta=None, return_lse=False, return_entropy=False, backend="auto",
              block_q=None, block_k=None, check_finite=False, out=None, leaky=False,
              mx_scale_round_up=False, q_start=None, kv_start=None, q_descale=None,
              k_descale=None, v_descale=None, selection=None, thrift_rule=None, window=None,
              softcap=None):
    """softmax(sm_scale q k^T [causal mask]) v, exact ("high") by default.

    q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D] (layout "bhsd"; "bshd" takes
    [B, S, H, D]): any DLPack tensors of one device (torch, NumPy, CuPy, JAX
    on the CPU), float32/float16/bfloat16 (GPU backends: float16/bfloat16).
    The causal mask is bottom-right aligned. precision: "high" (default:
    f32 accumulation of the inputs as given), or a low precision by name:
    "fp8", "nvfp4", "mxfp4" or "thrift" (thrift_budget / thrift_k, tiles
    outside the selection in thrift_low). sm_scale: None (1/sqrt(D)) or a
    scale in (0, 16]; 0 is rejected (ValueError). out: a writable array of
    q's shape and dtype (read-only arrays: ValueError). leaky (research only): every tile low with
    scales spanning the tile (the future-leakage paper's "leaky" baseline).
    mx_scale_round_up: MXFP4's scale rule that never clips (use it for
    training). q_start / kv_start (either given: absolute positions): the
    sequence positions of the first query and the first key, for a shard of
    a longer sequence (kv_start a multiple of block_k; the causal mask is
    then key position <= query position; lpattn.h "Absolute positions").
    Static-scale FP8 (precision "fp8_static", SPEC 11; FlashAttention-3's
    convention): q, k, v float8_e4m3fn codes (torch, or NumPy with
    ml_dtypes), or 16-bit/f32 inputs the call casts to E4M3(x / descale);
    q_descale / k_descale / v_descale: None (1.0), a number, or a float32
    [B, Hkv] array on q's device (values must be finite and > 0: checked
    here for numbers and host arrays). E4M3 inputs or a descale imply
    "fp8_static" when precision is None (else "high"); their out is
    bfloat16 unless out is given.
    selection (THRIFT): "causal" (default, SPEC 4) or "paper" (the published
    rule: leaks under causal). thrift_rule (THRIFT, prefill): rules
    joined by "+" or a sequence of them, "sink" (KV tile 0 ranked first),
    "kmax" (a tile's importance is its largest Qbar . k), "gqa" (one
    selection per KV head) (docs/SEMANTICS.md "THRIFT selection rules").
    window=(left, right) (FlashAttention's window_size; -1 or None =
    unbounded): query i sees key j iff i + off - left <= j <= i + off + right
    (off = Sk - Sq, or the positions' offset), within the causal mask when
    causal. softcap (Gemma 2): s = softcap * tanh(s / softcap) before the
    softmax; None/0 = off. Both: every backend's prefill (cuda/hip: not
    fp8_static's; their backward: not yet) (docs/SEMANTICS.md "Sliding
    window and softcap"). Returns out (q's kind, dtype and layout), or
    (out, lse[, entropy]) with lse/entropy [B, Hq, Sq] float32 (nats)."""
    if (_fast.mod is not None and not (return_lse or return_entropy) and q_descale is None
            and k_descale is None and v_descale is None and type(layout) is str and layout in LAYOUTS):
        addr = shared_params_addr(  # None: E4M3 q is not taken (so "high" is the default)
            "high" if precision is None else precision, causal, sm_scale, thrift_budget,
            thrift_k, thrift_low, pasa, pasa_beta, block_q, block_k, check_finite, leaky,
            mx_scale_round_up, q_start, kv_start, selection, thrift_rule, window, softcap)
        r = addr and _fast.mod.attention(q, k, v, out, LAYOUTS[layout], backend, addr)
        if type(r) is int:
            check("attention", r)
        if r is not None:
            return r
    perm = _choice("layout", layout, LAYOUTS)
    qv, kv_, vv = _views(("q", q), ("k", k), ("v", v), kind="qkv")
    _same_dtype(qv, kv_, vv)
    tq, tk, tv = (x.tensor(perm, layout=LAYOUT_TEXT[layout]) for x in (qv, kv_, vv))
    descales = (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))
    precision = default_precision(precision, qv, descales)
    given = any(d is not None for _, d in descales)  # _descales writes them into p
    p = (attn_params if given else _attn_params_shared)(
        precision, causal, sm_scale, thrift_budget, thrift_k, thrift_low, pasa, pasa_beta,
        block_q, block_k, check_finite, leaky, mx_scale_round_up, q_start, kv_start,
        selection, thrift_rule, window, softcap)
    keep = _descales(p, q, qv, tk.shape[0], tk.shape[1], descales)  # noqa: F841 (alive for the call)
    stream = _dlpack.current_stream(q, qv)
    ctx = context(backend, qv, stream)
    B, H, S = tq.shape[0], tq.shape[1], tq.shape[2]
    probe = lambda: _probe_attention(ctx, tq, tk, tv, p)  # noqa: E731
    if out is None:
        out = _alloc(q, qv.shape, _dlpack.NAMES.get(qv.dtype, "bfloat16"), probe)  # E4M3: bf16
    ov = _dlpack.View(out, "out", kind="float", write=True)
    to = ov.tensor(perm, layout=LAYOUT_TEXT[layout])
    aux, rows = _row_outputs(q, B, H, S, return_lse, return_entropy)
    call("attention", ctx.handle, ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv),
         ctypes.byref(to), ctypes.byref(p), ctypes.byref(aux))
    res = _dlpack.finish(q, out)
    if not rows:
        return res
    return (res,) + tuple(_dlpack.finish(q, r) for r in rows)


def attention_backward(q, k, v, out, lse, dout, *, causal=False, precision="high",
                       layout="bhsd", sm_scale=None, thrift_budget=None, thrift_k=None,
                       thrift_low="nvfp4", pasa=False, pasa_beta=None, backend="auto",
                       block_q=None, block_k=None, seed=0, leaky=False,
                       mx_scale_round_up=False, q_start=None, kv_start=None, window=None,
                       softcap=None):
    """Gradients (dq, dk, dv) of attention(q, k, v, ...) (SPEC 10) from the
    forward's out and lse ([B, Hq, Sq] float32, return_lse=True) and dout.
    Pass the forward's keywords. Tiles the forward computed high are
    differentiated exactly; low tiles quantize the backward products'
    operands with stochastic rounding drawn from `seed`. dk/dv are summed
    over the q heads of a GQA group. q_start / kv_start as attention: a
    shard's partial gradients (dq over its keys, dk/dv from its queries)
    given the whole row's out and lse. window, softcap: the forward's (the
    softcap's slope 1 - tanh^2 scales dS)."""
    perm = _choice("layout", layout, LAYOUTS)
    qv, kv_, vv, ov, lv, gv = _views(("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse),
                                     ("dout", dout), kind="float")
    _same_dtype(qv, kv_, vv)
    tq, tk, tv, to, tg = (x.tensor(perm, layout=LAYOUT_TEXT[layout])
                          for x in (qv, kv_, vv, ov, gv))
    lv.need_rank(3, "[B, H, Sq] float32 (attention(..., return_lse=True))")
    B, H, S = tq.shape[0], tq.shape[1], tq.shape[2]
    if lv.shape != (B, H, S):
        raise ValueError(f"lse.shape = {lv.shape}, expected {(B, H, S)} (attention(..., return_lse=True))")
    tl = _lib.Tensor(lv.ptr, lv.dtype, _lib.c_i64_4(B, H, S, 1),
                     _lib.c_i64_4(lv.strides[0], lv.strides[1], lv.strides[2], 1))
    p = attn_params(precision, causal, sm_scale, thrift_budget, thrift_k, thrift_low, pasa,
                    pasa_beta, block_q, block_k, leaky=leaky, mx_scale_round_up=mx_scale_round_up,
                    q_start=q_start, kv_start=kv_start, window=window, softcap=softcap)
    g = _lib.init(_lib.AttnGrads, "lpattn_attn_grads_init")
    g.seed = _int("seed", seed, UINT64)
    stream = _dlpack.current_stream(q, qv)
    ctx = context(backend, qv, stream)
    probe = lambda: _probe_attention(ctx, tq, tk, tv, p)  # noqa: E731
    grads = [_alloc(x, vw.shape, _dlpack.NAMES[vw.dtype], probe)
             for x, vw in ((q, qv), (k, kv_), (v, vv))]
    g.dq, g.dk, g.dv = (_dlpack.View(a, n, write=True).tensor(perm)
                        for a, n in zip(grads, ("dq", "dk", "dv")))
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
    vs = _views(*named, kind="float")
    _same_dtype(vs[0], vs[2])
    for v in vs:
        if v.name.startswith("o_"):
            v.need_rank(4, "[B, H, S, D]")
        else:
            v.need_rank(3, "[B, H, S] float32")

    def row(v):  # [B, H, S] -> [B, H, S, 1]
        return _lib.Tensor(v.ptr, v.dtype, _lib.c_i64_4(*v.shape, 1), _lib.c_i64_4(*v.strides, 1))

    ts = [vs[0].tensor(), row(vs[1]), vs[2].tensor(), row(vs[3])]
    hs = [row(vs[4]), row(vs[5])] if with_h else [None, None]
    ctx = context(backend, vs[0], _dlpack.current_stream(o_a, vs[0]))
    o = _alloc(o_a, vs[0].shape, _dlpack.NAMES[vs[0].dtype])
    lse = _alloc(o_a, vs[1].shape, "float32")
    outs = [o, lse] + ([_alloc(o_a, vs[1].shape, "float32")] if with_h else [])
    ov = [_dlpack.View(x, n, write=True) for x, n in zip(outs, ("o", "lse", "h"))]
    to, tl = ov[0].tensor(), row(ov[1])
    th = row(ov[2]) if with_h else None
    ref = lambda t: ctypes.byref(t) if t is not None else None  # noqa: E731
    call("merge_states", ctx.handle, ref(ts[0]), ref(ts[1]), ref(hs[0]), ref(ts[2]),
         ref(ts[3]), ref(hs[1]), ref(to), ref(tl), ref(th))
    return tuple(_dlpack.finish(o_a, x) for x in outs)


def thrift_k(n_tiles, budget, causal=True):
    """ThriftAttention's k for n KV tiles and budget f (SPEC 5)."""
    return _lib.lib.lpattn_thrift_k(_int("n_tiles", n_tiles), _float_ok("budget", budget),
                                    int(bool(causal)))


def pasa_beta(storage="float16", block=64, beta0=0.0):
    """PASA's beta for storage "float16"/"bfloat16" and block size (SPEC 6)."""
    dt = _choice("storage", storage, {"float16": _lib.F16, "bfloat16": _lib.BF16})
    return _lib.lib.lpattn_pasa_beta(dt, _int("block", block), _float_ok("beta0", beta0))
