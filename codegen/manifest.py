"""The one list of kernel variants that exist (issue 3).

A variant fixes some axes at compile time and leaves the rest to run time.
Axis values: None = decided at run time by the kernel, otherwise fixed.
The manifest decides which variants exist: render.py renders every template
of a backend for exactly the variants listed here, and which kernel paths an
attn variant has (attn_paths: gen/paths.inc), among which the prefill plan
(backends/gpu/gpu_plan.h) chooses per call. Tile shapes per head dim / dtype
are still the instance templates' (kernel_attn.cu.j2, kernel_decode.cu.j2). Only axes that some variant
fixes are declared (issue 10): precision, mask, PASA and entropy are run-time
branches of every kernel, so they are no axes here. gen/registry.inc is the
variants table the backends dispatch through and the parity tests iterate
(tests/variants.h).
"""
from collections import namedtuple

Variant = namedtuple("Variant", "backend op head_dim dtype")
Variant.__new__.__defaults__ = (None,) * 2  # head_dim, dtype default to run time

OPS = ("attn", "quant", "dequant", "merge", "decode", "bwd")  # decode: the paged decode kernels; bwd: backward
DTYPES = ("f16", "bf16")  # 16-bit inputs of the GPU attn kernels; f32 is run time
HEAD_DIMS = (64, 128, 256)
MLA_DIMS = (576,)  # decode only: the storage width of an MLA pool (K 576, V 512)
ATTN_DIMS_CUDA = (96,)  # prefill (attn) only, CUDA only (both sets)

# Per backend: its language dialect, the template folder of its instance files
# (CUDA and HIP share templates/gpu; the kernels themselves are plain code in
# backends/gpu/kernels and backends/math), the C++ namespace that keeps two GPU backends apart in one
# library, and how output extensions are spelled for its compiler.
BACKENDS = {
    "cpu": {"dialect": "cpp", "templates": "cpu"},
    "cuda": {"dialect": "cuda", "templates": "gpu", "ns": "lpattn_cuda"},
    "hip": {"dialect": "hip", "templates": "gpu", "ns": "lpattn_hip", "ext": {"cu": "hip"}},
}


def _cpu(which):
    # Precision, mask and features are run-time on the CPU: only the head dim
    # changes the SIMD loop structure enough to be worth a compile-time copy.
    # "dx" (head_dim None) handles every D; the registry prefers the exact one.
    dims = (None, 128) if which == "default" else (None,) + HEAD_DIMS
    return [Variant("cpu", "attn", d) for d in dims]


def _gpu(backend, which):
    # CUDA and HIP render the same templates (templates/gpu). Register tiles
    # (mma.sync fragments, MFMA operands) need the head dim and the 16-bit
    # input type at compile time; precision, mask, PASA and entropy are
    # run-time branches. Prefill runs the attn kernels, paged decode its own
    # (split KV over page chunks). The default set keeps CI's multi-arch builds short;
    # CUDA's covers 256 too (Gemma-class models, issue 27). Other head dims run
    # on the next larger variant with zero-padded channels (backends/gpu/gpu_pad.cu).
    dims = HEAD_DIMS if which == "all" or backend == "cuda" else (64, 128)
    # CUDA's prefill also at D = 96 (issue 27: D in (64, 96], e.g. 80 and 96,
    # would pad to 128 and lose a quarter of the rate or more); decode and
    # backward keep padding such dims to 128.
    adims = tuple(sorted(dims + ATTN_DIMS_CUDA)) if backend == "cuda" else dims
    out = [Variant(backend, "attn", d, t) for d in adims for t in ("f16", "bf16")]
    # Paged decode (templates/gpu/lp_gpu_decode.cuh): page formats at run time.
    out += [Variant(backend, "decode", d, t) for d in dims for t in ("f16", "bf16")]
    # MLA decode (issue 27 item 3): pools of head_dim 576 (Q, K) and head_dim_v
    # 512 store both at 576 (core/kvpage.h lp_kv_store_dim); CUDA only (HIP
    # pools of that shape answer UNSUPPORTED), HIGH, NVFP4 and FP8 kernels
    # (templates/gpu/kernel_decode.cu.j2: MLA_DIMS).
    if backend == "cuda":
        out += [Variant(backend, "decode", d, t) for d in MLA_DIMS for t in ("f16", "bf16")]
    # Backward (templates/gpu/lp_gpu_bwd.cuh: mma.sync; lp_gpu_bwd_wg.cuh: the
    # sm_90a wgmma kernels for HIGH at D <= 128, chosen at run time): CUDA only,
    # at the attention dims, so every D <= 256 runs forward and backward (issue
    # 27; D = 256 on mma.sync alone: the wgmma tiles' shared memory and dK/dV
    # accumulators do not fit); HIP answers UNSUPPORTED.
    if backend == "cuda":
        out += [Variant(backend, "bwd", d, t) for d in dims for t in ("f16", "bf16")]
    return out + [Variant(backend, op) for op in ("quant", "dequant", "merge")]


# The kernel paths of an attn variant (issue 30 item 2): which extern "C"
# kernels its entry has (templates/gpu/kernel_attn.cu.j2 renders them from
# this) and so which the dispatch plan may choose (backends/gpu/gpu_plan.h,
# through gen/paths.inc). "mma": the mma.sync / HIP kernels (every variant);
# the sm_90a ones (CUDA only, used on a 9.0 device): "wg" (HIGH), "wgl" (the
# low formats on bf16 copies; D a multiple of 64), "wg8" (FP8 on E4M3 wgmma: rows of 128 codes,
# so D = 128, in place of wgl's FP8), "wg8s" (static-scale FP8: its inputs
# are codes, so only the f16 variant at D = 128).
PATHS = ("mma", "wg", "wgl", "wg8", "wg8s")


def attn_paths(v):
    """The kernel paths of attn variant v, in PATHS order."""
    out = ["mma"]
    if BACKENDS[v.backend]["dialect"] == "cuda":
        out.append("wg")  # D = 96 too (32-channel boxes, lp_gpu_sm90_cfg.cuh)
        if v.head_dim % 64 == 0:  # wgl's P V products are of 64 channels
            out.append("wgl")
        if v.head_dim == 128:
            out.append("wg8")
            if v.dtype == "f16":
                out.append("wg8s")
    return tuple(out)


def variants(which="default", backend=None):
    """All variants of set `which` ('default' or 'all'), optionally of one backend."""
    if which not in ("default", "all"):
        raise ValueError("variant set must be 'default' or 'all'")
    out = _cpu(which) + _gpu("cuda", which) + _gpu("hip", which)
    return [v for v in out if backend is None or v.backend == backend]
