"""Property test of the Python boundary (issue 28 "Keep it from coming back").

Random shapes, strides (negative, zero, padded, not a multiple of the
element, huge on a size-1 axis), dtypes, ranks, read-only and non-contiguous
buffers and out-of-range integers for attention, attention_backward,
quantize / dequantize, merge_states and every KVPool method. Each call
either succeeds and matches a NumPy float64 reference within its
precision's bound, or raises ValueError / TypeError / LpattnError; and it
never writes a byte outside the elements of the arrays it may write (every
buffer sits between guard regions, and inputs must stay unchanged).

Cases are drawn by Hypothesis when it is installed (derandomized), else by a
seeded generator of the same draws; LPATTN_PROPERTY_CASES scales the count."""
import os
import random
import unittest

import numpy as np

import lpattn
from common import reference, rel_err

try:
    from hypothesis import given, settings, strategies as st
except ImportError:
    given = None

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BF16 = None

CASES = int(os.environ.get("LPATTN_PROPERTY_CASES", "200"))
ALLOWED = (ValueError, TypeError, lpattn.LpattnError)
GUARD = 64
BOUND = {"high": 1e-4, "fp8": 0.1, "nvfp4": 0.35, "mxfp4": 0.5, "thrift": 0.35}
HALF_BOUND = 4e-3  # float16 / bfloat16 storage of the inputs and the output
INT_JUNK = [2 ** 32 + 64, 2 ** 64, -2 ** 63 - 1, 2 ** 31]


class Buffers:
    """Every buffer of one call: base arrays with guard bytes, the views over
    them and whether the call may write each."""

    def __init__(self, rng):
        self.rng, self.items = rng, []

    def array(self, shape, dtype=np.float32, *, write=False, data=None):
        """A view of `shape` laid out as the draw says (np.ndarray)."""
        rng, dtype = self.rng, np.dtype(dtype)
        kind = rng.choice(["c", "c", "c", "perm", "pad", "neg", "zero", "odd", "huge", "ro"])
        if write and kind == "zero" and rng.random() < 0.7:
            kind = "c"
        item = dtype.itemsize
        n = int(np.prod(shape)) if shape else 1
        span = 2 * n * item + 64 * item  # room for padding and odd strides
        base = np.full(span + 2 * GUARD + 256, 0xA5, np.uint8)
        org = GUARD + (-(base.ctypes.data + GUARD)) % 256  # 256-aligned (pool memory)
        inner = base[org:org + span]
        if kind == "odd" and len(shape) and shape[-1] > 1:
            strides = list(_dense(shape, item))
            strides[-1] = item + 2 if item > 1 else 3
            strides = _outer(shape, strides)
        elif kind == "pad":
            strides = _outer(shape, [item + item * (i == len(shape) - 1) for i in range(len(shape))])
        elif kind == "zero" and len(shape) > 1:
            strides = list(_dense(shape, item))
            strides[rng.randrange(len(shape))] = 0
        elif kind == "huge":
            strides = list(_dense(shape, item))
            for i, s in enumerate(shape):
                if s == 1:
                    strides[i] = 2 ** 60
        elif kind == "perm" and len(shape) >= 2:
            order = list(range(len(shape)))
            rng.shuffle(order)
            dense = _dense([shape[i] for i in order], item)
            strides = [0] * len(shape)
            for pos, i in enumerate(order):
                strides[i] = dense[pos]
        else:
            strides = list(_dense(shape, item))
        start = 0
        if kind == "neg" and len(shape):
            ax = rng.randrange(len(shape))
            start = (shape[ax] - 1) * strides[ax]
            strides[ax] = -strides[ax]
        foot = _footprint(shape, strides, start, item)
        if foot is None or foot[1] > span:
            strides, start = list(_dense(shape, item)), 0
        raw = inner[start:start + item].view(dtype)
        view = np.lib.stride_tricks.as_strided(raw, shape=tuple(shape), strides=tuple(strides),
                                               writeable=True)
        values = data if data is not None else self.rng_normal(shape)
        try:
            np.copyto(view, np.asarray(values).astype(dtype), casting="unsafe")
        except ValueError:  # overlapping (zero-stride) destination: fill through one element
            view.reshape(-1)[:1] = np.asarray(values).reshape(-1)[:1].astype(dtype)
        if kind == "ro" or (not write and rng.random() < 0.2):
            view.flags.writeable = False
        mask = np.zeros(base.size, bool)
        idx = _byte_offsets(shape, strides, org + start, item)
        mask[idx] = True
        self.items.append((view, base, base.copy(), mask, write))
        return view

    def rng_normal(self, shape):
        r = np.random.default_rng(self.rng.randrange(2 ** 32))
        return r.standard_normal(shape)

    def check(self, case):
        for view, base, before, mask, write in self.items:
            changed = base != before
            bad = changed & ~mask if write else changed
            if bad.any():
                raise AssertionError(f"{case}: {int(bad.sum())} bytes written outside an output "
                                     f"(first at byte {int(np.nonzero(bad)[0][0])} of {base.size})")


def _dense(shape, item):
    st_, acc = [], item
    for n in reversed(shape):
        st_.append(acc)
        acc *= max(int(n), 1)
    return list(reversed(st_))


def _outer(shape, inner_strides):
    """Row-major strides whose last axis has the given stride (padding rows)."""
    out, acc = [0] * len(shape), inner_strides[-1] if shape else 0
    for i in reversed(range(len(shape))):
        out[i] = acc
        acc = acc * max(int(shape[i]), 1) + (4 if i == len(shape) - 1 else 0)
    return out


def _footprint(shape, strides, start, item):
    lo = hi = start
    for n, s in zip(shape, strides):
        if n == 0:
            return (0, 0)
        if abs(s) >= 2 ** 40 and n > 1:
            return None
        if n > 1:
            lo, hi = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
    return (lo, hi + item) if lo >= 0 else None


def _byte_offsets(shape, strides, origin, item):
    idx = np.array([origin], np.int64)
    for n, s in zip(shape, strides):
        if n == 0:
            return np.zeros(0, np.int64)
        if n > 1:
            idx = (idx[:, None] + np.arange(n, dtype=np.int64)[None, :] * s).reshape(-1)
    return (idx[:, None] + np.arange(item)[None, :]).reshape(-1)


def _dtype(rng, allow_bad=True):
    pool = [np.float32] * 5 + [np.float16] * 2 + ([BF16] if BF16 is not None else [])
    if allow_bad:
        pool += [np.float64, np.int32]
    return rng.choice(pool)


def _shape(rng, shape):
    """shape, or (rarely) one of another rank."""
    r = rng.random()
    if r < 0.05:
        return shape[1:]
    if r < 0.08:
        return shape + [1]
    return shape


def _bound(precision, dtypes):
    half = any(np.dtype(d).itemsize == 2 for d in dtypes)
    return BOUND[precision] + (HALF_BOUND if half else 0)


def _maybe(rng, good, p=0.08):
    return rng.choice(INT_JUNK) if rng.random() < p else good


# ---- the calls ---------------------------------------------------------------

def case_attention(rng):
    bufs = Buffers(rng)
    B, Hkv = rng.choice([1, 2]), rng.choice([1, 2])
    Hq = Hkv * rng.choice([1, 2]) + (1 if rng.random() < 0.05 else 0)
    D = rng.choice([16, 32, 64, 64, 40 if rng.random() < 0.1 else 32])
    Skv = rng.randrange(1, 97)
    causal = rng.random() < 0.5
    Sq = rng.randrange(1, Skv + 1) if causal else rng.randrange(1, 81)
    precision = rng.choice(["high", "high", "fp8", "nvfp4", "mxfp4", "thrift"])
    layout = rng.choice(["bhsd", "bhsd", "bshd"])
    dts = [_dtype(rng, rng.random() < 0.15) for _ in range(3)]
    if rng.random() < 0.8:
        dts[2] = dts[1]
    lay = (lambda s: s) if layout == "bhsd" else (lambda s: [s[0], s[2], s[1], s[3]])
    q = bufs.array(_shape(rng, lay([B, Hq, Sq, D])), dts[0])
    k = bufs.array(_shape(rng, lay([B, Hkv, Skv, D])), dts[1])
    v = bufs.array(lay([B, Hkv, Skv, D]), dts[2])
    kw = dict(causal=causal, precision=precision, layout=layout, return_lse=rng.random() < 0.5)
    if rng.random() < 0.3:
        kw["sm_scale"] = rng.choice([0.0, -1.0, 0.05, 0.2, 100.0, float("nan")])
    if rng.random() < 0.15:
        kw["block_q"] = _maybe(rng, 64, 0.5)
    if rng.random() < 0.1:
        kw["q_start"], kw["kv_start"] = rng.choice([Skv - Sq, 2 ** 64, -2 ** 63 - 1, -1]), 0
    if precision == "thrift" and rng.random() < 0.3:
        kw["thrift_k"] = _maybe(rng, 1, 0.5)
    if rng.random() < 0.4:
        kw["out"] = bufs.array(_shape(rng, list(q.shape)), rng.choice([q.dtype, np.float32]),
                               write=True)
    try:
        res = lpattn.attention(q, k, v, **kw)
    except ALLOWED:
        return bufs.check("attention")
    bufs.check("attention")
    out, lse = res if kw["return_lse"] else (res, None)
    if "out" in kw:
        assert out is kw["out"]
    tr = (lambda x: x) if layout == "bhsd" else (lambda x: np.swapaxes(x, 1, 2))
    scale = kw.get("sm_scale")
    want, want_lse = reference(tr(q), tr(k), tr(v), causal, scale)
    err = rel_err(tr(out), want)
    assert err <= _bound(precision, dts + [out.dtype]), ("attention", precision, err, kw)
    if lse is not None and precision == "high":
        assert np.allclose(lse, want_lse, atol=1e-3), "lse"


def _grads64(q, k, v, dout, causal, scale):
    """dq, dk, dv of softmax(scale q k^T) v in float64 (Hq == Hkv)."""
    q, k, v, dout = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if causal:
        Sq, Skv = q.shape[2], k.shape[2]
        s = np.where(np.arange(Skv)[None, :] > np.arange(Sq)[:, None] + Skv - Sq, -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = np.einsum("bhqk,bhqd->bhkd", p, dout)
    dp = np.einsum("bhqd,bhkd->bhqk", dout, v)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    return np.einsum("bhqk,bhkd->bhqd", ds, k), np.einsum("bhqk,bhqd->bhkd", ds, q), dv


def case_backward(rng):
    bufs = Buffers(rng)
    B, H_, D = 1, rng.choice([1, 2]), rng.choice([16, 32, 64])
    Skv = rng.randrange(1, 80)
    causal = rng.random() < 0.5
    Sq = rng.randrange(1, Skv + 1)
    precision = rng.choice(["high", "high", "high", "nvfp4", "fp8"])
    dt = rng.choice([np.float32, np.float32, np.float16])
    q = bufs.array(_shape(rng, [B, H_, Sq, D]), dt)
    k, v = (bufs.array([B, H_, Skv, D], dt) for _ in range(2))
    dout = bufs.array(_shape(rng, [B, H_, Sq, D]), _dtype(rng, rng.random() < 0.1))
    try:
        out, lse = lpattn.attention(q, k, v, causal=causal, precision=precision, return_lse=True)
        lse_in = bufs.array(_shape(rng, list(lse.shape)), np.float32, data=lse)
        dq, dk, dv = lpattn.attention_backward(q, k, v, out, lse_in, dout, causal=causal,
                                               precision=precision, seed=_maybe(rng, 7))
    except ALLOWED:
        return bufs.check("attention_backward")
    bufs.check("attention_backward")
    want = _grads64(q, k, v, dout, causal, D ** -0.5)
    for got, w, name in zip((dq, dk, dv), want, "qkv"):
        assert got.shape == w.shape and np.isfinite(got).all(), name
        if precision == "high" and np.linalg.norm(w) > 1e-3 and np.array_equal(lse_in, lse):
            assert rel_err(got, w) < (3e-3 if dt == np.float16 else 1e-4), ("d" + name, rel_err(got, w))


def case_quantize(rng):
    bufs = Buffers(rng)
    fmt, axis = rng.choice(["nvfp4", "mxfp4", "fp8"]), rng.choice(["d", "s"])
    D = rng.choice([16, 32, 64, 24])
    S = rng.choice([64, 128, 32, 17])
    x = bufs.array(_shape(rng, [1, rng.choice([1, 2]), S, D]), _dtype(rng, rng.random() < 0.1))
    kw = dict(axis=axis, tile=_maybe(rng, rng.choice([64, 32, 64])), seed=_maybe(rng, 3),
              rounding=rng.choice(["nearest", "stochastic"]))
    try:
        qt = lpattn.quantize(x, fmt, **kw)
        bufs.check("quantize")
        if rng.random() < 0.2:  # a damaged QuantizedTensor must be refused, not read past
            qt.codes = rng.choice([qt.codes[: len(qt.codes) // 2], qt.codes[::2], None])
        y = lpattn.dequantize(qt, rng.choice(["float32", "float32", "float16", "float64"]))
    except ALLOWED:
        return bufs.check("quantize")
    bufs.check("dequantize")
    tol = {"nvfp4": 0.2, "mxfp4": 0.3, "fp8": 0.08}[fmt] + (HALF_BOUND if y.dtype.itemsize == 2 else 0)
    assert y.shape == x.shape and rel_err(y, x) < tol, (fmt, rel_err(y, x))


def case_merge(rng):
    bufs = Buffers(rng)
    H_, D, Sq, n = rng.choice([1, 2]), rng.choice([16, 32]), rng.randrange(1, 40), rng.randrange(2, 80)
    q, k, v = (np.random.default_rng(rng.randrange(99)).standard_normal(s).astype(np.float32)
               for s in ([1, H_, Sq, D], [1, H_, n, D], [1, H_, n, D]))
    cut = rng.randrange(1, n)
    oa, la = lpattn.attention(q, k[:, :, :cut], v[:, :, :cut], return_lse=True)
    ob, lb = lpattn.attention(q, k[:, :, cut:], v[:, :, cut:], return_lse=True)
    args = [bufs.array(_shape(rng, list(oa.shape)), _dtype(rng, rng.random() < 0.1), data=oa),
            bufs.array(_shape(rng, list(la.shape)), np.float32, data=la),
            bufs.array(list(ob.shape), np.float32, data=ob),
            bufs.array(list(lb.shape), np.float32, data=lb)]
    try:
        o, lse = lpattn.merge_states(*args)
    except ALLOWED:
        return bufs.check("merge_states")
    bufs.check("merge_states")
    oa, la, ob, lb = (np.asarray(a, np.float64) for a in args)  # the states as given
    want_lse = np.logaddexp(la, lb)
    want = oa * np.exp(la - want_lse)[..., None] + ob * np.exp(lb - want_lse)[..., None]
    assert rel_err(o, want) < _bound("high", [args[0].dtype]), rel_err(o, want)
    assert np.allclose(lse, want_lse, atol=1e-3)


def case_pool(rng):
    bufs = Buffers(rng)
    H_, D = rng.choice([1, 2]), rng.choice([32, 64])
    T = rng.choice([32, 64, 64, 16, 48, 2 ** 32 + 64]) if rng.random() < 0.15 else rng.choice([32, 64])
    precision = rng.choice(["high", "fp8", "nvfp4", "mxfp4", "thrift"])
    pages, slots_n = 8, 2
    params = dict(precision=precision, page_size=T, high_dtype="float32")
    try:
        need = lpattn.pool_bytes(_maybe(rng, pages, 0.05), slots_n, H_, H_, D, **params)[2]
        mem = None
        if rng.random() < 0.5:
            mem = bufs.array([need], np.uint8, write=True, data=np.zeros(need))
        pool = lpattn.KVPool(pages, slots_n, H_, H_, D, memory=mem, **params)
    except ALLOWED:
        return bufs.check("KVPool")
    n = rng.randrange(1, 2 * T)
    k, v, q = (np.random.default_rng(rng.randrange(99)).standard_normal([1, H_, n + 1, D])
               .astype(np.float32) for _ in range(3))
    it = np.float32 if rng.random() < 0.08 else rng.choice([np.int32, np.int64])
    row = list(range(pages // 2)) if rng.random() > 0.1 else [99, 0, 1, 2]
    table = bufs.array(_shape(rng, [2, pages // 2]), it, data=np.array([row, [4, 5, 6, 7]]))
    slots = bufs.array([2], it, data=np.array([0, 1]))
    ok = True
    k0 = bufs.array(list(k[:, :, :n].shape), _dtype(rng, False), data=k[:, :, :n])
    k = np.concatenate([np.asarray(k0, np.float32), k[:, :, n:]], axis=2)  # what the pool holds
    try:
        pool.append(k0, v[:, :, :n], slots[:1], np.zeros(1, it), table[:1])
        pool.append(k[:, :, :n], v[:, :, :n], slots[1:], np.zeros(1, it), table[1:])
        pool.slot_copy(0, _maybe(rng, 1))  # the same tokens: a no-op that must stay one
        lens = np.array([n, n], it)
        pool.append(np.concatenate([k[:, :, n:]] * 2), np.concatenate([v[:, :, n:]] * 2),
                    slots, lens, table, max_length=_maybe(rng, n, 0.05))
        qd = np.concatenate([q[:, :, n:]] * 2)
        out = pool.decode(qd, slots, lens + 1, table,
                          out=bufs.array([2, H_, 1, D], np.float32, write=True)
                          if rng.random() < 0.3 else None)
    except ALLOWED:
        ok = False
    bufs.check("KVPool")
    if not ok:
        return
    want = reference(q[:, :, n:], k, v, causal=True)[0]
    for i in range(2):
        e = rel_err(out[i:i + 1], want)
        assert e <= BOUND[precision], ("decode", precision, e)


CALLS = [case_attention] * 4 + [case_backward, case_quantize, case_merge, case_pool]


def run_case(rng):
    rng.choice(CALLS)(rng)


class Property(unittest.TestCase):
    def test_seeded(self):
        for seed in range(CASES * 3):
            run_case(random.Random(seed))

    if given is not None:
        @settings(max_examples=CASES, deadline=None, derandomize=True, database=None)
        @given(st.randoms(use_true_random=False))
        def test_hypothesis(self, rng):
            run_case(rng)


if __name__ == "__main__":
    unittest.main()
