#!/usr/bin/env python3
"""Independent oracle for the scalar formats: the built library (argv[1],
loaded with ctypes) against ml_dtypes and numpy.

ml_dtypes rounds to nearest even like SPEC 2 but maps overflow of the "fn"
types (no inf) to NaN, where lpattn saturates: the encoders are compared
with ml_dtypes applied to the input clipped to the format's maximum.
Exit 77 (skip) when numpy or ml_dtypes is missing."""
import ctypes
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
    rnd = np.random.default_rng(1).integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32).view(np.float32)
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

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
