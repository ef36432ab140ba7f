"""Loads liblpattn and declares its C API (include/lpattn.h) for ctypes.

The library is found, in order: $LPATTN_LIBRARY (a path), next to this
package (a wheel or `pip install .`), the source tree's build/ directory, then
the system's library path (an installed lpattn)."""
import ctypes
import ctypes.util
import glob
import os

c_i64_4 = ctypes.c_int64 * 4

F32, F16, BF16, E4M3, E5M2, E2M1, E8M0, I32 = range(8)
BACKENDS = {"auto": 0, "ref": 1, "cpu": 2, "cuda": 3, "hip": 4}
PRECISIONS = {"high": 0, "fp8": 1, "nvfp4": 2, "mxfp4": 3, "thrift": 4, "fp8_static": 5}
FORMATS = {"nvfp4": 0, "mxfp4": 1, "fp8": 2}
SELECTIONS = {"causal": 0, "paper": 1}
THRIFT_RULES = {"sink": 1, "kmax": 2, "gqa": 4}  # lpattn_thrift_rule flags
STATUS_NAMES = [
    "OK", "INVALID_ARGUMENT", "NULL_POINTER", "BAD_SHAPE", "BAD_STRIDE", "BAD_DTYPE",
    "BAD_HEAD_DIM", "BAD_GQA", "SIZE_OVERFLOW", "UNSUPPORTED", "UNSUPPORTED_HARDWARE",
    "OUT_OF_MEMORY", "NONFINITE", "BACKEND", "PARAMS_SIZE", "CACHE_FULL", "BAD_LAYOUT",
    "BAD_PAGE",
]


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("shape", c_i64_4), ("stride", c_i64_4)]


class ContextParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("num_threads", ctypes.c_int),
                ("device", ctypes.c_int), ("stream", ctypes.c_void_p)]


class QuantParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("format", ctypes.c_int),
                ("rounding", ctypes.c_int), ("seed", ctypes.c_uint64), ("axis", ctypes.c_int),
                ("tile", ctypes.c_int), ("mx_scale_round_up", ctypes.c_int),
                ("check_finite", ctypes.c_int)]


class QTensor(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int), ("axis", ctypes.c_int), ("tile", ctypes.c_int),
                ("shape", c_i64_4), ("codes", ctypes.c_void_p), ("scales", ctypes.c_void_p),
                ("outer", ctypes.c_void_p)]


class AttnParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("precision", ctypes.c_int),
                ("causal", ctypes.c_int), ("sm_scale", ctypes.c_float),
                ("block_q", ctypes.c_int), ("block_k", ctypes.c_int), ("leaky", ctypes.c_int),
                ("thrift_low", ctypes.c_int), ("thrift_budget", ctypes.c_float),
                ("thrift_k", ctypes.c_int), ("selection", ctypes.c_int), ("pasa", ctypes.c_int),
                ("pasa_beta", ctypes.c_float), ("score_f16", ctypes.c_int),
                ("mx_scale_round_up", ctypes.c_int), ("check_finite", ctypes.c_int),
                ("q_start", ctypes.c_int64), ("kv_start", ctypes.c_int64),
                ("positions", ctypes.c_int),
                # static-scale FP8 (SPEC 11): f32 [B, Hkv] descales, data NULL = 1
                ("q_descale", Tensor), ("k_descale", Tensor), ("v_descale", Tensor),
                # sliding window (-1 = unbounded) and softcap (0 = off)
                ("window_left", ctypes.c_int), ("window_right", ctypes.c_int),
                ("softcap", ctypes.c_float),
                ("thrift_rule", ctypes.c_int)]  # lpattn_thrift_rule flags


class AttnAux(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("lse", Tensor), ("entropy", Tensor),
                ("selection", Tensor)]


class AttnGrads(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("dq", Tensor), ("dk", Tensor), ("dv", Tensor),
                ("seed", ctypes.c_uint64)]


class PoolParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("num_kv_heads", ctypes.c_int),
                ("num_q_heads", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("page_size", ctypes.c_int), ("high_dtype", ctypes.c_int),
                ("precision", ctypes.c_int), ("thrift_low", ctypes.c_int), ("pasa", ctypes.c_int),
                ("pasa_beta", ctypes.c_float), ("mx_scale_round_up", ctypes.c_int),
                ("check_finite", ctypes.c_int), ("num_pages", ctypes.c_int32),
                ("num_slots", ctypes.c_int32), ("head_dim_v", ctypes.c_int)]


class Batch(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("num_seqs", ctypes.c_int),
                ("slots", Tensor), ("lengths", Tensor), ("page_table", Tensor),
                ("max_length", ctypes.c_int64), ("kv_start", Tensor), ("q_start", Tensor)]


def _candidates():
    env = os.environ.get("LPATTN_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (here, os.path.join(here, os.pardir, os.pardir, "build")):
        for pat in ("liblpattn.so*", "liblpattn*.dylib", "lpattn*.dll"):
            yield from sorted(glob.glob(os.path.join(d, pat)))
    found = ctypes.util.find_library("lpattn")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise ImportError("lpattn: cannot load the C library (set LPATTN_LIBRARY to liblpattn.so); "
                      "tried " + ("; ".join(tried) or "nothing found"))


lib, path = _load()

_P = ctypes.POINTER
_st = ctypes.c_int
_ctx = ctypes.c_void_p
_protos = {
    "lpattn_version_string": (ctypes.c_char_p, []),
    "lpattn_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "lpattn_last_error": (ctypes.c_char_p, []),
    "lpattn_backend_available": (ctypes.c_int, [ctypes.c_int]),
    "lpattn_backend_name": (ctypes.c_char_p, [ctypes.c_int]),
    "lpattn_context_backend": (ctypes.c_int, [_ctx]),
    "lpattn_create": (_st, [ctypes.c_int, _P(ContextParams), _P(_ctx)]),
    "lpattn_free": (None, [_ctx]),
    "lpattn_set_stream": (_st, [_ctx, ctypes.c_void_p]),
    "lpattn_synchronize": (_st, [_ctx]),
    "lpattn_quant_params_init": (None, [_P(QuantParams)]),
    "lpattn_qtensor_sizes": (_st, [ctypes.c_int, ctypes.c_int, ctypes.c_int, c_i64_4,
                                   _P(ctypes.c_size_t), _P(ctypes.c_size_t), _P(ctypes.c_size_t)]),
    "lpattn_quantize": (_st, [_ctx, _P(Tensor), _P(QTensor), _P(QuantParams)]),
    "lpattn_dequantize": (_st, [_ctx, _P(QTensor), _P(Tensor)]),
    "lpattn_attn_params_init": (None, [_P(AttnParams)]),
    "lpattn_attn_aux_init": (None, [_P(AttnAux)]),
    "lpattn_attention": (_st, [_ctx, _P(Tensor), _P(Tensor), _P(Tensor), _P(Tensor),
                               _P(AttnParams), _P(AttnAux)]),
    "lpattn_attention_varlen": (_st, [_ctx] + [_P(Tensor)] * 6 + [_P(AttnParams), _P(AttnAux)]),
    "lpattn_merge_states": (_st, [_ctx] + [_P(Tensor)] * 9),
    "lpattn_attn_grads_init": (None, [_P(AttnGrads)]),
    "lpattn_attention_backward": (_st, [_ctx] + [_P(Tensor)] * 6 + [_P(AttnParams), _P(AttnGrads)]),
    "lpattn_kv_pool_params_init": (None, [_P(PoolParams)]),
    "lpattn_kv_pool_size": (_st, [_P(PoolParams), _P(ctypes.c_size_t), _P(ctypes.c_size_t),
                                  _P(ctypes.c_size_t)]),
    "lpattn_kv_pool_create": (_st, [_ctx, _P(PoolParams), ctypes.c_void_p, ctypes.c_size_t,
                                    _P(ctypes.c_void_p)]),
    "lpattn_kv_pool_free": (None, [ctypes.c_void_p]),
    "lpattn_kv_batch_init": (None, [_P(Batch)]),
    "lpattn_kv_append": (_st, [_ctx, ctypes.c_void_p, _P(Batch), _P(Tensor), _P(Tensor),
                               _P(Tensor)]),
    "lpattn_kv_slot_copy": (_st, [_ctx, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32]),
    "lpattn_kv_pool_set_descales": (_st, [_ctx, ctypes.c_void_p] + [_P(Tensor)] * 3),
    "lpattn_paged_decode": (_st, [_ctx, ctypes.c_void_p, _P(Batch), _P(Tensor), _P(Tensor),
                                  _P(AttnParams), _P(AttnAux)]),
    "lpattn_paged_prefill": (_st, [_ctx, ctypes.c_void_p, _P(Batch)] + [_P(Tensor)] * 4 +
                             [_P(AttnParams), _P(AttnAux)]),
    "lpattn_paged_prefill_varlen": (_st, [_ctx, ctypes.c_void_p, _P(Batch)] + [_P(Tensor)] * 5 +
                                    [_P(AttnParams), _P(AttnAux)]),
    "lpattn_thrift_k": (ctypes.c_int, [ctypes.c_int, ctypes.c_float, ctypes.c_int]),
    "lpattn_pasa_beta": (ctypes.c_double, [ctypes.c_int, ctypes.c_int, ctypes.c_double]),
}
for _name, (_res, _args) in _protos.items():
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args


def init(struct, fn=None):
    """A params struct with lpattn's defaults (struct_size set)."""
    s = struct()
    if fn is not None:
        getattr(lib, fn)(ctypes.byref(s))
    else:
        s.struct_size = ctypes.sizeof(struct)
    return s
