"""Decode plans (lpattn.h "decode plans"): KVPool.plan_decode does the host
work of a batch layout once; DecodePlan.run costs a pointer check and one C
call, and on a GPU enqueues kernels only, so it can be captured in a CUDA
graph (torch.cuda.graph) whose replays read the ids, lengths and queries
written in place."""
import ctypes
import weakref

from . import _dlpack, _fast, _lib
from ._api import (INT64, LAYOUT_TEXT, LAYOUTS, _alloc, _choice, _descales, _int, _row_outputs,
                   _same_dtype, _views, attn_params, default_precision)
from ._context import context
from .errors import check

_run = _lib.lib.lpattn_decode_plan_run
_run.restype, _run.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_make = _lib.lib.lpattn_paged_decode_plan
_make.restype = ctypes.c_int
_make.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_lib.Batch),
                  ctypes.POINTER(_lib.Tensor), ctypes.POINTER(_lib.Tensor),
                  ctypes.POINTER(_lib.AttnParams), ctypes.POINTER(_lib.AttnAux),
                  ctypes.POINTER(ctypes.c_void_p)]
_free = _lib.lib.lpattn_decode_plan_free
_free.restype, _free.argtypes = None, [ctypes.c_void_p]
_arun = _lib.lib.lpattn_attention_plan_run
_arun.restype, _arun.argtypes = ctypes.c_int, [ctypes.c_void_p] * 5
_amake = _lib.lib.lpattn_attention_plan
_amake.restype = ctypes.c_int
_amake.argtypes = [ctypes.c_void_p] + [ctypes.POINTER(_lib.Tensor)] * 4 + [
    ctypes.POINTER(_lib.AttnParams), ctypes.POINTER(_lib.AttnAux), ctypes.POINTER(ctypes.c_void_p)]
_afree = _lib.lib.lpattn_attention_plan_free
_afree.restype, _afree.argtypes = None, [ctypes.c_void_p]
_RUN, _ARUN = (ctypes.cast(f, ctypes.c_void_p).value for f in (_run, _arun))  # for _fast

# Plans dropped while a CUDA graph was being captured (freeing device memory
# there would invalidate the capture): freed by the next plan made.
_deferred = []


def _capturing():
    try:
        import torch
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except Exception:  # no torch: nothing captures
        return False


def _release(handle, free=_free):
    if _capturing():
        _deferred.append((free, handle))
    else:
        free(handle)


def _flush_deferred():
    while _deferred and not _capturing():
        free, handle = _deferred.pop()
        free(handle)


def _torch_stream_fn(device_id):
    """A cheap reader of torch's current stream on the device (an int)."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return lambda: raw(device_id)
    return lambda: torch.cuda.current_stream(device_id).cuda_stream


def _sig(obj, view):
    """What a run's argument must match: shape, strides, dtype, device."""
    if _dlpack.namespace_of(obj) == "torch":
        return ("torch", tuple(obj.shape), tuple(obj.stride()), obj.dtype, obj.device)
    return ("view", view.shape, view.strides, view.dtype, view.device_type, view.device_id)


class _Arg:
    """One pointer argument of a plan's run: its signature and the last
    object seen with its pointer (None: the plan's own, which C keeps)."""

    __slots__ = ("name", "sig", "write", "last", "last_ptr")

    def __init__(self, name, obj, view, write):
        self.name, self.write, self.sig = name, write, _sig(obj, view)
        self.last, self.last_ptr = obj, None

    def ptr(self, x):
        if x is None:
            return None
        if x is self.last:
            return self.last_ptr
        if _dlpack.namespace_of(x) == "torch" and self.sig[0] == "torch":
            got = ("torch", tuple(x.shape), tuple(x.stride()), x.dtype, x.device)
            if self.write:
                _dlpack._check_writable(x, self.name)
            p = x.data_ptr()
        else:
            v = _dlpack.View(x, self.name, kind="qkv", write=self.write)
            got = ("view", v.shape, v.strides, v.dtype, v.device_type, v.device_id)
            p = v.ptr
        if got != self.sig:
            raise ValueError(f"plan run: {self.name} is {got[1:]} "
                             f"(shape, strides, dtype, device), the plan was made for "
                             f"{self.sig[1:]}: make a plan per layout")
        self.last, self.last_ptr = x, p
        return p


def _stream_reader(like, view):
    """None on the host; else a function giving the caller's current stream."""
    if not view.on_gpu:
        return None
    if _dlpack.namespace_of(like) == "torch":
        return _torch_stream_fn(view.device_id)
    return lambda: _dlpack.current_stream(like, view)


class _Plan:
    """What both plans share: the stream that a run follows, the result it
    returns, and release (close, or the with-statement, or collection)."""

    def _follow_stream(self):
        if self._stream is not None:
            s = self._stream()
            if s != self._ctx.stream:
                self._ctx.use_stream(s)

    def _returned(self, out):
        if out is None or out is self.out:
            return self._result
        return (out, *self._rows) if self._rows else out

    def close(self):
        """Release the plan (its arrays stay the caller's)."""
        if self.handle is not None:
            self._fin()
            self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class DecodePlan(_Plan):
    """KVPool.plan_decode's result. run(q=None, out=None) decodes the bound
    batch: q (None: the q given at plan time) must have the plan's shape,
    dtype, strides and device; out (None: the plan's out) likewise. Returns
    out, or (out, lse[, entropy]): the plan's own lse/entropy arrays,
    rewritten by every run. The slots, lengths and page_table (and
    kv_start / q_start) arrays stay bound: write new values into them in
    place between runs (lengths <= max_length); a run reads them then."""

    def __init__(self, pool, q, slots, lengths, page_table, *, max_length, out=None,
                 sm_scale=None, thrift_budget=None, thrift_k=None, check_finite=False,
                 return_lse=False, return_entropy=False, kv_start=None, q_start=None,
                 window=None, softcap=None, q_descale=None):
        _flush_deferred()
        pool._live()
        if max_length is None:
            raise ValueError("plan_decode: max_length is required: the largest length any run of "
                             "the plan will see (it sizes the launch and the workspace)")
        for name, x in (("slots", slots), ("lengths", lengths), ("page_table", page_table),
                        ("kv_start", kv_start), ("q_start", q_start)):
            if x is not None and str(getattr(x, "dtype", "")) in ("int64", "torch.int64"):
                raise TypeError(f"plan_decode: {name} is int64; a plan binds its arrays (runs "
                                "read the values written into them), so give int32 arrays")
        b, keep = pool._batch(slots, lengths, page_table, _int("max_length", max_length, INT64))
        if (kv_start is None) != (q_start is None):
            raise ValueError("plan_decode: give both kv_start and q_start, or neither")
        if kv_start is not None:
            pv = _views(("kv_start", kv_start), ("q_start", q_start), kind="index")
            for v in pv:
                v.need_rank(1, "[num_seqs] int32")
            b.kv_start, b.q_start = pv[0].tensor(shape4=True), pv[1].tensor(shape4=True)
            keep = (keep, pv)
        (qv,) = _views(("q", q), kind="float")
        tq = qv.tensor(layout="[num_seqs, Hq, Sq, head_dim]")
        p = attn_params(pool._precision_name(), True, sm_scale, thrift_budget, thrift_k,
                        check_finite=check_finite, window=window, softcap=softcap)
        keep = (keep, pool._q_descale(p, q, qv, b.num_seqs, q_descale))  # fp8_static pools
        pool._sync_stream(q)
        if out is None:
            out = _alloc(q, qv.shape, _dlpack.NAMES[qv.dtype])
        ov = _dlpack.View(out, "out", kind="float", write=True)
        to = ov.tensor(layout="[num_seqs, Hq, Sq, head_dim]")
        aux, rows = _row_outputs(q, tq.shape[0], tq.shape[1], tq.shape[2], return_lse,
                                 return_entropy)
        h = ctypes.c_void_p()
        check("paged_decode_plan", _make(pool._ctx.handle, pool.handle, ctypes.byref(b),
                                         ctypes.byref(tq), ctypes.byref(to), ctypes.byref(p),
                                         ctypes.byref(aux), ctypes.byref(h)))
        self.handle = h.value
        self._fin = weakref.finalize(self, _release, self.handle)
        self.pool, self._keep = pool, (keep, b, (slots, lengths, page_table, kv_start, q_start))
        self.q, self.out, self._rows = q, out, tuple(rows)
        self._result = (out, *rows) if rows else out
        self._q, self._out = _Arg("q", q, qv, False), _Arg("out", out, ov, True)
        self._ctx = pool._ctx
        self._stream = _stream_reader(q, qv)

    def run(self, q=None, out=None):
        """Decode with the plan (see the class). The hot path: the same q
        and out objects (or None) as the last run."""
        if self.handle is None:
            raise ValueError("DecodePlan: the plan is closed")
        if self.pool.handle is None:
            raise ValueError("DecodePlan: its KVPool was closed")
        qp = self._q.ptr(q)
        op = self._out.ptr(out)
        self._follow_stream()
        m = _fast.mod
        st = m.call(_RUN, self.handle, qp, op) if m is not None else _run(self.handle, qp, op)
        if st:
            check("decode_plan_run", st)
        return self._returned(out)



def attention_plan(q, k, v, *, out=None, causal=False, precision=None, layout="bhsd",
                   return_lse=False, return_entropy=False, backend="auto", q_descale=None,
                   k_descale=None, v_descale=None, **params):
    """An AttentionPlan: lpattn.attention's validation and parameters once
    for this layout of q, k, v and out (shapes, dtypes, strides; out made
    like q when None). Keywords as lpattn.attention (params: sm_scale,
    thrift_budget, thrift_k, thrift_low, pasa, pasa_beta, block_q, block_k,
    check_finite, leaky, mx_scale_round_up, q_start, kv_start, window, softcap). torch, NumPy
    and CuPy arrays.

        plan = lpattn.attention_plan(q, k, v, causal=True, out=out)
        plan.run(q, k, v, out)   # on a GPU: capturable in torch.cuda.graph after one run"""
    return AttentionPlan(q, k, v, out=out, causal=causal, precision=precision, layout=layout,
                         return_lse=return_lse, return_entropy=return_entropy, backend=backend,
                         q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, **params)


class AttentionPlan(_Plan):
    """attention_plan's result. run(q=None, k=None, v=None, out=None): each
    None takes the array given at plan time; others must match its shape,
    strides, dtype and device. Returns out, or (out, lse[, entropy]) (the
    plan's own lse/entropy arrays, rewritten by every run)."""

    def __init__(self, q, k, v, *, out, causal, precision, layout, return_lse, return_entropy,
                 backend, q_descale, k_descale, v_descale, **params):
        _flush_deferred()
        perm = _choice("layout", layout, LAYOUTS)
        qv, kv_, vv = _views(("q", q), ("k", k), ("v", v), kind="qkv")
        _same_dtype(qv, kv_, vv)
        tq, tk, tv = (x.tensor(perm, layout=LAYOUT_TEXT[layout]) for x in (qv, kv_, vv))
        descales = (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))
        precision = default_precision(precision, qv, descales)
        p = attn_params(precision, causal, **params)
        keep = _descales(p, q, qv, tk.shape[0], tk.shape[1], descales)
        ctx = context(backend, qv, _dlpack.current_stream(q, qv))
        if out is None:
            out = _alloc(q, qv.shape, _dlpack.NAMES.get(qv.dtype, "bfloat16"))
        ov = _dlpack.View(out, "out", kind="float", write=True)
        to = ov.tensor(perm, layout=LAYOUT_TEXT[layout])
        aux, rows = _row_outputs(q, tq.shape[0], tq.shape[1], tq.shape[2], return_lse,
                                 return_entropy)
        h = ctypes.c_void_p()
        check("attention_plan", _amake(ctx.handle, ctypes.byref(tq), ctypes.byref(tk),
                                       ctypes.byref(tv), ctypes.byref(to), ctypes.byref(p),
                                       ctypes.byref(aux), ctypes.byref(h)))
        self.handle = h.value
        self._fin = weakref.finalize(self, _release, self.handle, _afree)
        self._keep = (keep, p, aux, q, k, v)
        self.out, self._rows = out, tuple(rows)
        self._result = (out, *rows) if rows else out
        self._args = (_Arg("q", q, qv, False), _Arg("k", k, kv_, False), _Arg("v", v, vv, False),
                      _Arg("out", out, ov, True))
        self._ctx = ctx
        self._stream = _stream_reader(q, qv)

    def run(self, q=None, k=None, v=None, out=None):
        """Attention with the plan (see the class)."""
        if self.handle is None:
            raise ValueError("AttentionPlan: the plan is closed")
        a = self._args
        qp, kp, vp, op = a[0].ptr(q), a[1].ptr(k), a[2].ptr(v), a[3].ptr(out)
        self._follow_stream()
        m = _fast.mod
        st = (m.call(_ARUN, self.handle, qp, kp, vp, op) if m is not None
              else _arun(self.handle, qp, kp, vp, op))
        if st:
            check("attention_plan_run", st)
        return self._returned(out)

