#!/usr/bin/env python3
"""Independent oracle for the scalar formats: the built library (argv[1],
loaded with ctypes) against ml_dtypes and numpy.

ml_dtypes rounds to nearest even like SPEC 2 but maps overflow of the "fn"
types (no inf) to NaN, where lpattn saturates: the encoders are compared
with ml_dtypes applied to the input clipped to the format's maximum.
Exit 77 (skip) when numpy or ml_dtypes is missing."""
import ctypes
import math
import sys

try:
    import numpy as np
    import ml_dtypes
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

passed = failed = 0


def check(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {what} {detail}", file=sys.stderr)


lib = ctypes.CDLL(sys.argv[1])


def fn(name, res, arg):
    f = getattr(lib, name)
    f.restype, f.argtypes = res, [arg]
    return f


u8, u16, f32 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_float
DECODERS = {  # name: (our decoder, ml_dtypes type, number of codes)
    "e2m1": (fn("lpattn_e2m1_to_f32", f32, u8), ml_dtypes.float4_e2m1fn, 16),
    "e4m3": (fn("lpattn_e4m3_to_f32", f32, u8), ml_dtypes.float8_e4m3fn, 256),
    "e5m2": (fn("lpattn_e5m2_to_f32", f32, u8), ml_dtypes.float8_e5m2, 256),
    "e8m0": (fn("lpattn_e8m0_to_f32", f32, u8), ml_dtypes.float8_e8m0fnu, 256),
    "f16": (fn("lpattn_f16_to_f32", f32, u16), np.float16, 65536),
    "bf16": (fn("lpattn_bf16_to_f32", f32, u16), ml_dtypes.bfloat16, 65536),
}
ENCODERS = {  # name: (our encoder, ml_dtypes type, saturation limit or None, NaN code)
    "e2m1": (fn("lpattn_f32_to_e2m1", u8, f32), ml_dtypes.float4_e2m1fn, 6.0, 0x0),
    "e4m3": (fn("lpattn_f32_to_e4m3", u8, f32), ml_dtypes.float8_e4m3fn, 448.0, 0x7F),
    "e5m2": (fn("lpattn_f32_to_e5m2", u8, f32), ml_dtypes.float8_e5m2, None, 0x7E),
    "f16": (fn("lpattn_f32_to_f16", u16, f32), np.float16, None, 0x7E00),
    "bf16": (fn("lpattn_f32_to_bf16", u16, f32), ml_dtypes.bfloat16, None, 0x7FC0),
}


def same(a, b):
    """Bitwise-equal as values: NaN matches NaN, and -0 differs from +0."""
    a, b = np.float32(a), np.float32(b)
    if np.isnan(a) or np.isnan(b):
        return bool(np.isnan(a) and np.isnan(b))
    return a.view(np.uint32) == b.view(np.uint32)


for name, (dec, mlt, n) in DECODERS.items():
    codes = np.arange(n, dtype=np.uint16 if n > 256 else np.uint8)
    want = codes.view(mlt).astype(np.float32)  # ml_dtypes keeps one fp4 code a byte
    bad = [int(c) for c, w in zip(codes, want) if not same(dec(int(c)), w)]
    check(not bad, f"decode {name}", f"{len(bad)} codes, first {bad[:4]}")


def sweep():
    """Dense f32 inputs: every f16 value, every midpoint of adjacent f16
    values and the f32 neighbours of each midpoint (this covers the ties of
    every 8- and 4-bit format), powers of two across the whole f32 range,
    random bit patterns, and the specials."""
    h = np.arange(0x10000, dtype=np.uint16).view(np.float16).astype(np.float32)
    h = h[np.isfinite(h)]
    s = np.sort(np.unique(h.astype(np.float64)))
    mid = ((s[1:] + s[:-1]) / 2).astype(np.float32)
    up = np.nextafter(mid, np.float32(np.inf))
    down = np.nextafter(mid, np.float32(-np.inf))
    pow2 = np.ldexp(np.float32(1), np.arange(-149, 128)).astype(np.float32)
    bf_mid = (np.arange(0x10000, dtype=np.uint32) << 16 | 0x8000).view(np.float32)
    rnd = np.random.default_rng(1).integers(0, 2**32, 60000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    big = np.array([448, 464, 479.99, 480, 1e6, 57344, 61439.996, 61440, 65504, 65519.99, 65520,
                    3.4e38, np.inf, np.nan], dtype=np.float32)
    x = np.concatenate([h, mid, up, down, pow2, pow2 * np.float32(1.5), bf_mid, rnd, big])
    return np.concatenate([x, -x])


xs = sweep()
for name, (enc, mlt, limit, nan_code) in ENCODERS.items():
    finite = xs[~np.isnan(xs)]
    ref = np.clip(finite, -limit, limit) if limit else finite
    with np.errstate(over="ignore"):  # f16/bf16/e5m2 overflow to inf on purpose
        want = ref.astype(mlt)
    want = want.view(np.uint8 if mlt not in (np.float16, ml_dtypes.bfloat16) else np.uint16)
    got = np.fromiter((enc(float(v)) for v in finite), dtype=want.dtype, count=len(finite))
    bad = np.nonzero(got != want)[0]
    check(len(bad) == 0, f"encode {name} ({len(finite)} inputs)",
          ", ".join(f"{finite[i]!r}->{got[i]:#x} want {want[i]:#x}" for i in bad[:4]))
    nans = [float("nan"), -float("nan"), np.uint32(0x7F800001).view(np.float32)]
    check(all(enc(float(v)) == nan_code for v in nans), f"encode {name} NaN", f"want {nan_code:#x}")


# ---- block quantizers through the public API (ref backend) ----------------
# An independent transcription of SEMANTICS "Quantization details" in numpy
# f32 arithmetic, with ml_dtypes doing every rounding to E2M1/E4M3 and frexp
# giving the MXFP4 exponents, then laid out as lpattn.h documents.
F32 = np.float32
E2M1, E4M3 = ml_dtypes.float4_e2m1fn, ml_dtypes.float8_e4m3fn


def rne(v, t, limit):
    return np.clip(np.asarray(v, F32), -limit, limit).astype(t).view(np.uint8)


def ref_domain(x, fmt, round_up):
    """codes (one a byte), group scale codes, outer of one domain (f32 x)."""
    x = np.asarray(x, F32)
    amax = F32(np.abs(x).max())
    if fmt == 2:  # FP8
        scale = amax / F32(448)
        codes = rne(x / scale, E4M3, 448) if scale > 0 else np.zeros(len(x), np.uint8)
        return codes, np.zeros(0, np.uint8), scale
    G = 16 if fmt == 0 else 32
    outer = amax / F32(2688) if fmt == 0 else F32(1)
    codes, scales = np.zeros(len(x), np.uint8), []
    for g in range(0, len(x), G):
        xg = x[g:g + G]
        ga = F32(np.abs(xg).max())
        if fmt == 0:
            sc = int(rne([(ga / F32(6)) / outer], E4M3, 448)[0]) if outer > 0 else 0
            so = F32(np.array([sc], np.uint8).view(E4M3).astype(F32)[0]) * outer
        elif ga > 0:
            if round_up:
                m, e = math.frexp(float(ga / F32(6)))
                ex = e - 1 if m == 0.5 else e  # ceil(log2)
            else:
                ex = math.frexp(float(ga))[1] - 1 - 2  # floor(log2) - 2
            sc = min(max(ex + 127, 0), 254)
            so = F32(2.0 ** (sc - 127))
        else:
            sc, so = 0, F32(0)
        scales.append(sc)
        if so > 0:
            codes[g:g + G] = rne(xg / so, E2M1, 6)
    return codes, np.array(scales, np.uint8), outer


def ref_quantize(x, fmt, axis, tile, round_up):
    B, H, S, D = x.shape
    doms = []  # (values, code offset, outer index)
    if axis == 0:
        for r, row in enumerate(x.reshape(-1, D)):
            doms.append((row, r * D, r))
    else:
        nt = -(-S // tile)
        Sp = nt * tile
        xp = np.zeros((B, H, Sp, D), F32)
        xp[:, :, :S] = x
        for b in range(B):
            for h in range(H):
                for t in range(nt):
                    for d in range(D):
                        chan = (b * H + h) * D + d
                        doms.append((xp[b, h, t * tile:(t + 1) * tile, d], chan * Sp + t * tile,
                                     ((b * H + h) * nt + t) * D + d))
    n = len(doms[0][0])
    codes = np.zeros(len(doms) * n, np.uint8)
    scales = np.zeros(len(doms) * n // (16 if fmt == 0 else 32) if fmt != 2 else 0, np.uint8)
    outer = np.zeros(len(doms), F32)
    for vals, at, oi in doms:
        c, sc, o = ref_domain(vals, fmt, round_up)
        codes[at:at + n] = c
        if fmt != 2:
            G = 16 if fmt == 0 else 32
            scales[at // G:at // G + len(sc)] = sc
        outer[oi] = o
    if fmt != 2:
        codes = (codes[0::2] & 15) | ((codes[1::2] & 15) << 4)
    return codes.astype(np.uint8), scales, (outer if fmt != 1 else np.zeros(0, F32))


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("shape", ctypes.c_int64 * 4), ("stride", ctypes.c_int64 * 4)]


class QTensor(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int), ("axis", ctypes.c_int), ("tile", ctypes.c_int),
                ("shape", ctypes.c_int64 * 4), ("codes", ctypes.c_void_p),
                ("scales", ctypes.c_void_p), ("outer", ctypes.c_void_p)]


class QParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("format", ctypes.c_int), ("rounding", ctypes.c_int),
                ("seed", ctypes.c_uint64), ("axis", ctypes.c_int), ("tile", ctypes.c_int),
                ("mx_scale_round_up", ctypes.c_int), ("check_finite", ctypes.c_int)]


def lib_quantize(ctx, x, fmt, axis, tile, round_up):
    shape = (ctypes.c_int64 * 4)(*x.shape)
    nc, ns, no = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    st = lib.lpattn_qtensor_sizes(fmt, axis, tile, shape, ctypes.byref(nc), ctypes.byref(ns), ctypes.byref(no))
    assert st == 0, st
    codes, scales = np.zeros(nc.value, np.uint8), np.zeros(max(ns.value, 1), np.uint8)
    outer = np.zeros(max(no.value, 1), F32)
    strides = [s // 4 for s in x.strides]
    t = Tensor(x.ctypes.data, 0, shape, (ctypes.c_int64 * 4)(*strides))
    q = QTensor(fmt, axis, tile, shape, codes.ctypes.data, scales.ctypes.data, outer.ctypes.data)
    p = QParams()
    lib.lpattn_quant_params_init(ctypes.byref(p))
    p.format, p.axis, p.tile, p.mx_scale_round_up = fmt, axis, tile, round_up
    st = lib.lpattn_quantize(ctx, ctypes.byref(t), ctypes.byref(q), ctypes.byref(p))
    return st, codes, scales[:ns.value], outer[:no.value]


def check_block_quantizers():
    ctx = ctypes.c_void_p()
    if lib.lpattn_create(1, None, ctypes.byref(ctx)) != 0:  # LPATTN_BACKEND_REF
        print("note: no ref backend, block quantizers not checked")
        return
    rng = np.random.default_rng(5)
    for shape, axis, tile in [((2, 2, 5, 64), 0, 64), ((1, 2, 40, 8), 1, 32), ((1, 1, 70, 4), 1, 64)]:
        x = (rng.standard_normal(shape) * np.exp2(rng.integers(-12, 12, shape))).astype(F32)
        x[0, 0, 1] = 0  # a zero token
        x[0, -1, 2, :2] = [2.5, -0.75]  # ties once the scale is 1-ish
        # a group whose amax / 6 is a power of two (MXFP4 round-up keeps it)
        grp = (-1, -1, 3, slice(None)) if axis == 0 else (0, -1, slice(0, 32), 3)
        x[grp] = (rng.standard_normal(x[grp].shape) * 0.01).astype(F32)
        x[grp][5] = 12.0 if axis == 0 else 1.5
        for fmt in (0, 1, 2):
            for up in ((0, 1) if fmt == 1 else (0,)):
                st, c, sc, o = lib_quantize(ctx, x, fmt, axis, tile, up)
                wc, wsc, wo = ref_quantize(x, fmt, axis, tile, up)
                ok = st == 0 and np.array_equal(c, wc) and np.array_equal(sc, wsc) and \
                    np.array_equal(o.view(np.uint32), wo.view(np.uint32))
                check(ok, f"block quantizer fmt {fmt} axis {axis} round_up {up}",
                      f"status {st}, codes differ at {np.nonzero(c != wc)[0][:4] if len(c) == len(wc) else 'len'}")
    lib.lpattn_free(ctx)


lib.lpattn_create.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
lib.lpattn_quantize.argtypes = [ctypes.c_void_p] + [ctypes.c_void_p] * 3
lib.lpattn_free.argtypes = [ctypes.c_void_p]
check_block_quantizers()

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
