"""quantize / dequantize and their QuantizedTensor (SPEC 2)."""
import ctypes
import math

from . import _dlpack, _lib
from ._api import INT64, UINT64, _alloc, _choice, _int, _views
from ._context import context
from .errors import call


class QuantizedTensor:
    """A tensor in lpattn's block format (lpattn_qtensor): uint8 codes, uint8
    group scales (E4M3 for NVFP4, E8M0 for MXFP4; empty for FP8) and float32
    outer scales (empty for MXFP4), arrays of the input's kind."""

    def __init__(self, fmt, axis, tile, shape, codes, scales, outer):
        self.format, self.axis, self.tile, self.shape = fmt, axis, tile, tuple(shape)
        self.codes, self.scales, self.outer = codes, scales, outer

    def _c(self, write=False):
        """The lpattn_qtensor; checks that codes, scales and outer are
        contiguous arrays of one device holding at least the bytes the
        format needs (the C struct has pointers only)."""
        fmt = _choice("format", self.format, _lib.FORMATS)
        axis = _choice("axis", self.axis, {"d": 0, "s": 1})
        tile = _int("tile", self.tile)
        if len(self.shape) != 4:
            raise ValueError(f"QuantizedTensor.shape = {self.shape}, expected [B, H, S, D]")
        shape = _lib.c_i64_4(*(_int("shape", n, INT64) for n in self.shape))
        cb, sb, oc = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
        call("qtensor_sizes", fmt, axis, tile, shape, ctypes.byref(cb), ctypes.byref(sb),
             ctypes.byref(oc))
        ptrs, dev = [], set()
        for name, a, kind, need in (("codes", self.codes, "bytes", cb.value),
                                    ("scales", self.scales, "bytes", sb.value),
                                    ("outer", self.outer, "float", oc.value)):
            if not need:
                ptrs.append(None)
                continue
            if a is None:
                raise ValueError(f"QuantizedTensor.{name} is None, the format needs {need}")
            v = _dlpack.View(a, "QuantizedTensor." + name, kind=kind, write=write)
            if kind == "float" and v.dtype != _lib.F32:
                raise TypeError(f"{v.name}: {v.dtype_name} is not accepted; use float32")
            n = math.prod(v.shape)
            if not v.contiguous() or n < need:
                raise ValueError(f"{v.name}: expected a contiguous array of at least {need} "
                                 f"elements, got shape {v.shape} strides {v.strides}")
            dev.add((v.device_type, v.device_id))
            ptrs.append(v.ptr)
        if len(dev) > 1:
            raise ValueError("QuantizedTensor: codes, scales and outer on different devices")
        return _lib.QTensor(fmt, axis, tile, shape, *ptrs)

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
    (Philox, `seed`, 0 <= seed < 2**64). Bit-exact on every backend."""
    (xv,) = _views(("x", x), kind="float")
    p = _lib.init(_lib.QuantParams, "lpattn_quant_params_init")
    p.format = _choice("format", format, _lib.FORMATS)
    p.axis = _choice("axis", axis, {"d": 0, "s": 1})
    p.tile = _int("tile", tile)
    p.rounding = _choice("rounding", rounding, {"nearest": 0, "stochastic": 1})
    p.seed = _int("seed", seed, UINT64)
    p.mx_scale_round_up, p.check_finite = int(bool(mx_scale_round_up)), int(bool(check_finite))
    tx = xv.tensor()
    ctx = context(backend, xv, _dlpack.current_stream(x, xv))
    cb, sb, oc = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    call("qtensor_sizes", p.format, p.axis, p.tile, tx.shape, ctypes.byref(cb),
         ctypes.byref(sb), ctypes.byref(oc))
    qt = QuantizedTensor(format, axis, p.tile, list(tx.shape),
                         _alloc(x, (cb.value,), "uint8"), _alloc(x, (sb.value,), "uint8"),
                         _alloc(x, (oc.value,), "float32"))
    c = qt._c(write=True)
    call("quantize", ctx.handle, ctypes.byref(tx), ctypes.byref(c), ctypes.byref(p))
    return qt


def dequantize(qt, dtype="float32", *, backend="auto"):
    """QuantizedTensor -> array [B, H, S, D] of `dtype` (float32, float16 or
    bfloat16), of the codes' kind."""
    _choice("dtype", dtype, {"float32": 0, "float16": 1, "bfloat16": 2})
    c = qt._c()  # checks the arrays against the format's sizes first
    (cv,) = _views(("QuantizedTensor.codes", qt.codes), kind="bytes")
    ctx = context(backend, cv, _dlpack.current_stream(qt.codes, cv))
    y = _alloc(qt.codes, tuple(c.shape), dtype)
    ty = _dlpack.View(y, "y", write=True).tensor()
    call("dequantize", ctx.handle, ctypes.byref(c), ctypes.byref(ty))
    return _dlpack.finish(qt.codes, y)
