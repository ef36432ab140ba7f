"""Decode plans (lpattn.h "decode plans"): KVPool.plan_decode does the host
work of a batch layout once; DecodePlan.run costs a pointer check and one C
call, and on a GPU enqueues kernels only, so it can be captured in a CUDA
graph (torch.cuda.graph) whose replays read the ids, lengths and queries
written in place."""
import ctypes
import weakref

from . import _dlpack, _lib
from ._api import _alloc, _int, _row_outputs, _views, attn_params, INT64
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

# Plans dropped while a CUDA graph was being captured (freeing device memory
# there would invalidate the capture): freed by the next plan made.
_deferred = []


def _capturing():
    try:
        import torch
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except Exception:  # no torch: nothing captures
        return False


def _release(handle):
    if _capturing():
        _deferred.append(handle)
    else:
        _free(handle)


def _flush_deferred():
    while _deferred and not _capturing():
        _free(_deferred.pop())


def _torch_stream_fn(device_id):
    """A cheap reader of torch's current stream on the device (an int)."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return lambda: raw(device_id)
    return lambda: torch.cuda.current_stream(device_id).cuda_stream


class DecodePlan:
    """KVPool.plan_decode's result. run(q=None, out=None) decodes the bound
    batch: q (None: the q given at plan time) must have the plan's shape,
    dtype, strides and device; out (None: the plan's out) likewise. Returns
    out, or (out, lse[, entropy]): the plan's own lse/entropy arrays,
    rewritten by every run. The slots, lengths and page_table (and
    kv_start / q_start) arrays stay bound: write new values into them in
    place between runs (lengths <= max_length); a run reads them then."""

    def __init__(self, pool, q, slots, lengths, page_table, *, max_length, out=None,
                 sm_scale=None, thrift_budget=None, thrift_k=None, check_finite=False,
                 return_lse=False, return_entropy=False, kv_start=None, q_start=None):
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
                        check_finite=check_finite)
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
        self._sig_q = self._sig(q, qv)
        self._sig_out = self._sig(out, ov)
        self._last_q, self._last_qp = q, None  # None: the plan's own pointer
        self._last_o, self._last_op = out, None
        self._ctx = pool._ctx
        self._stream = None
        if qv.on_gpu and _dlpack.namespace_of(q) == "torch":
            self._stream = _torch_stream_fn(qv.device_id)
        elif qv.on_gpu:
            self._stream = lambda: _dlpack.current_stream(q, qv)

    @staticmethod
    def _sig(obj, view):
        if _dlpack.namespace_of(obj) == "torch":
            return ("torch", tuple(obj.shape), tuple(obj.stride()), obj.dtype, obj.device)
        return ("view", view.shape, view.strides, view.dtype, view.device_type, view.device_id)

    def _ptr(self, obj, name, sig, write):
        """obj's data pointer after checking it matches the plan's view."""
        if _dlpack.namespace_of(obj) == "torch" and sig[0] == "torch":
            got = ("torch", tuple(obj.shape), tuple(obj.stride()), obj.dtype, obj.device)
            if write and obj.is_inference():
                _dlpack._check_writable(obj, name)
            ptr = obj.data_ptr()
        else:
            v = _dlpack.View(obj, name, kind="float", write=write)
            got = ("view", v.shape, v.strides, v.dtype, v.device_type, v.device_id)
            ptr = v.ptr
        if got != sig:
            raise ValueError(f"DecodePlan.run: {name} is {got[1:]} (shape, strides, dtype, "
                             f"device), the plan was made for {sig[1:]}: make a plan per layout")
        return ptr

    def run(self, q=None, out=None):
        """Decode with the plan (see the class). The hot path: the same q
        and out objects (or None) as the last run."""
        if self.handle is None:
            raise ValueError("DecodePlan: the plan is closed")
        if q is None or q is self._last_q:
            qp = self._last_qp if q is not None else None
        else:
            qp = self._ptr(q, "q", self._sig_q, False)
            self._last_q, self._last_qp = q, qp
        res = self._result
        if out is None or out is self._last_o:
            op = self._last_op if out is not None else None
            if out is not None and out is not self.out:
                res = (out, *self._rows) if self._rows else out
        else:
            op = self._ptr(out, "out", self._sig_out, True)
            self._last_o, self._last_op = out, op
            res = (out, *self._rows) if self._rows else out
        if self.pool.handle is None:
            raise ValueError("DecodePlan: its KVPool was closed")
        if self._stream is not None:
            s = self._stream()
            if s != self._ctx.stream:
                self._ctx.use_stream(s)
        st = _run(self.handle, qp, op)
        if st:
            check("decode_plan_run", st)
        return res

    def close(self):
        """Release the plan (its arrays stay the caller's)."""
        if self.handle is not None:
            self._fin()
            self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
