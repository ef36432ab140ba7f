"""The one list of kernel variants that exist (issue 3).

A variant fixes some axes at compile time and leaves the rest to run time.
Axis values: None = decided at run time by the kernel, otherwise fixed.
Templates hold no selection logic: render.py renders every template of a
backend for exactly the variants listed here.
"""
from collections import namedtuple

Variant = namedtuple("Variant", "backend op head_dim dtype precision causal pasa entropy")
Variant.__new__.__defaults__ = (None,) * 6  # head_dim .. entropy default to run time

OPS = ("attn", "decode", "quant", "dequant", "merge")
DTYPES = ("f32", "f16", "bf16")
PRECISIONS = ("high", "fp8", "nvfp4", "mxfp4", "thrift")
HEAD_DIMS = (64, 128, 256)

# Per backend: the language dialect its templates expand the shared macros in
# (templates/common/*.j2) and the file extension of per-variant kernels.
BACKENDS = {
    "cpu": {"dialect": "cpp"},
    "cuda": {"dialect": "cuda"},
    "hip": {"dialect": "hip"},
}


def _cpu(which):
    # Precision, mask and features are run-time on the CPU: only the head dim
    # changes the SIMD loop structure enough to be worth a compile-time copy.
    # "dx" (head_dim None) handles every D; the registry prefers the exact one.
    dims = (None, 128) if which == "default" else (None,) + HEAD_DIMS
    return [Variant("cpu", "attn", d) for d in dims]


def _cuda(which):
    # mma.sync register tiles need the head dim and the 16-bit input type at
    # compile time; precision, mask, PASA and entropy are run-time branches.
    # Decode runs the attn kernels (absolute query tiles, split KV).
    # The default set keeps CI's two-arch nvcc build short.
    dims = (64, 128) if which == "default" else HEAD_DIMS
    out = [Variant("cuda", "attn", d, t) for d in dims for t in ("f16", "bf16")]
    return out + [Variant("cuda", op) for op in ("quant", "dequant", "merge")]


def _hip(which):
    # The generic (wave-level) kernel keeps per-lane slices of the head dim in
    # registers, so D is compile time; input dtypes, precision, mask, PASA and
    # entropy are run-time branches. "quant" is lpattn_quantize plus the
    # tile preparation the attention kernel reads (means, dequantized low
    # Q/K/V). Three AMD targets build every kernel: the default set stays small.
    dims = (64, 128) if which == "default" else HEAD_DIMS
    return ([Variant("hip", "attn", d) for d in dims] +
            [Variant("hip", op) for op in ("quant", "dequant", "merge")])


def variants(which="default", backend=None):
    """All variants of set `which` ('default' or 'all'), optionally of one backend."""
    if which not in ("default", "all"):
        raise ValueError("variant set must be 'default' or 'all'")
    out = _cpu(which) + _cuda(which) + _hip(which)
    return [v for v in out if backend is None or v.backend == backend]
