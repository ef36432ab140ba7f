"""The paged KV pool (SPEC 9) and batched decode: the pool's memory is a
uint8 tensor the caller owns, page tables and lengths are int32 tensors."""
import ctypes

from . import _dlpack, _lib
from ._api import _choice, _views, attn_params, _row_outputs
from ._context import context
from .errors import call

ALIGN = 256


def pool_bytes(num_pages, num_slots, num_kv_heads, num_q_heads, head_dim, **kw):
    """(page_bytes, slot_bytes, pool_bytes) of a pool with these params."""
    p = _pool_params(num_pages, num_slots, num_kv_heads, num_q_heads, head_dim, **kw)
    pb, sb, tb = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    call("kv_pool_size", ctypes.byref(p), ctypes.byref(pb), ctypes.byref(sb), ctypes.byref(tb))
    return pb.value, sb.value, tb.value


def _pool_params(num_pages, num_slots, num_kv_heads, num_q_heads, head_dim, page_size=64,
                 precision="nvfp4", high_dtype="float16", thrift_low="nvfp4", pasa=False,
                 pasa_beta=None, check_finite=False):
    p = _lib.init(_lib.PoolParams, "lpattn_kv_pool_params_init")
    p.num_pages, p.num_slots = int(num_pages), int(num_slots)
    p.num_kv_heads, p.num_q_heads, p.head_dim = int(num_kv_heads), int(num_q_heads), int(head_dim)
    p.page_size = int(page_size)
    p.precision = _choice("precision", precision, _lib.PRECISIONS)
    p.high_dtype = _choice("high_dtype", high_dtype,
                           {"float32": _lib.F32, "float16": _lib.F16, "bfloat16": _lib.BF16})
    p.thrift_low = _choice("thrift_low", thrift_low, _lib.FORMATS)
    p.pasa = int(bool(pasa))
    if pasa_beta is not None:
        p.pasa_beta = float(pasa_beta)
    p.check_finite = int(bool(check_finite))
    return p


class KVPool:
    """A pool of `num_pages` pages of `page_size` tokens (all KV heads of one
    layer) plus `num_slots` sequence slots, in `memory`: a uint8 tensor the
    caller owns (made like `like` when not given: same kind and device).

    A sequence is (slot, page-table row, length); one call appends to or
    decodes a whole batch: `slots`, `lengths` int32 [num_seqs], `page_table`
    int32 [num_seqs, max_pages], on the pool's device (lpattn.h "paged KV
    storage" says what each must hold). Use a pool from the thread that made
    it (it holds that thread's lpattn context)."""

    def __init__(self, num_pages, num_slots, num_kv_heads, num_q_heads, head_dim, *,
                 like=None, memory=None, backend="auto", **params):
        self.params = _pool_params(num_pages, num_slots, num_kv_heads, num_q_heads, head_dim,
                                   **params)
        _, _, need = pool_bytes(num_pages, num_slots, num_kv_heads, num_q_heads, head_dim,
                                **params)
        self.bytes = need
        if memory is None:
            if like is None:
                import numpy as np
                like = np.empty(0, dtype=np.float32)
            memory = _dlpack.empty(like, (need + ALIGN,), "uint8")
            off = (-_dlpack.View(memory, "memory").ptr) % ALIGN
            memory = memory[off:off + need]
        self.memory = memory
        (mv,) = _views(("memory", memory))
        self._ctx = context(backend, mv, _dlpack.current_stream(memory, mv))
        nbytes = 1
        for n in mv.shape:
            nbytes *= n
        self.handle = ctypes.c_void_p()
        call("kv_pool_create", self._ctx.handle, ctypes.byref(self.params), ctypes.c_void_p(mv.ptr),
             nbytes * mv.itemsize, ctypes.byref(self.handle))
        self.page_size = self.params.page_size
        self.backend = self._ctx.backend

    def close(self):
        """Release the pool object (its memory stays the caller's)."""
        if getattr(self, "handle", None):
            _lib.lib.lpattn_kv_pool_free(self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _batch(self, slots, lengths, page_table, max_length):
        vs = _views(("slots", slots), ("lengths", lengths), ("page_table", page_table))
        b = _lib.init(_lib.Batch, "lpattn_kv_batch_init")
        b.num_seqs = vs[0].shape[0] if vs[0].shape else 0
        b.slots, b.lengths = vs[0].tensor(shape4=True), vs[1].tensor(shape4=True)
        b.page_table = vs[2].tensor(shape4=True)
        if max_length is None:  # reads the lengths (a device sync on GPUs)
            max_length = int(max(int(x) for x in _host_ints(lengths))) if b.num_seqs else 0
        b.max_length = int(max_length)
        return b, vs

    def _sync_stream(self, like):
        mv = _dlpack.View(self.memory, "memory")
        self._ctx.use_stream(_dlpack.current_stream(like, mv))

    def append(self, k, v, slots, lengths, page_table, q=None, *, max_length=None):
        """Append n tokens to each sequence: k, v [num_seqs, Hkv, n, D]; q None or
        [num_seqs, Hq, n, D] (THRIFT reads the queries). lengths: tokens held
        before the call (0 starts a sequence in its slot)."""
        b, keep = self._batch(slots, lengths, page_table, max_length)
        named = [("k", k), ("v", v)] + ([("q", q)] if q is not None else [])
        vs = _views(*named)
        self._sync_stream(k)
        ts = [x.tensor() for x in vs]
        call("kv_append", self._ctx.handle, self.handle, ctypes.byref(b), ctypes.byref(ts[0]),
             ctypes.byref(ts[1]), ctypes.byref(ts[2]) if q is not None else None)
        del keep

    def slot_copy(self, src, dst):
        """Copy slot src's state to slot dst (fork a sequence)."""
        call("kv_slot_copy", self._ctx.handle, self.handle, int(src), int(dst))

    def decode(self, q, slots, lengths, page_table, *, max_length=None, sm_scale=None,
               thrift_budget=None, thrift_k=None, check_finite=False, return_lse=False,
               return_entropy=False, out=None, kv_start=None, q_start=None):
        """Batched decode: q [num_seqs, Hq, Sq, D] (Sq <= page_size) are the
        queries of each sequence's last Sq positions, attending causally to
        lengths[i] tokens. Returns out like q (and lse / entropy [num_seqs,
        Hq, Sq] float32 when asked).

        Sharded decode (this pool holds a run of each sequence's pages;
        lpattn.h lpattn_kv_batch): kv_start, q_start int32 [num_seqs], both or
        neither: the global position of each slot's first token (a multiple
        of page_size) and of q's first row. A shard is the sequence's last
        (kv_start + length == q_start + Sq) or holds whole pages ending at or
        before the first query's tile. lpattn.distributed.paged_decode merges
        the ranks' states."""
        b, keep = self._batch(slots, lengths, page_table, max_length)
        if (kv_start is None) != (q_start is None):
            raise ValueError("decode: give both kv_start and q_start, or neither")
        if kv_start is not None:
            pv = _views(("kv_start", kv_start), ("q_start", q_start))
            b.kv_start, b.q_start = pv[0].tensor(shape4=True), pv[1].tensor(shape4=True)
            keep = (keep, pv)
        (qv,) = _views(("q", q))
        self._sync_stream(q)
        if out is None:
            out = _dlpack.empty(q, qv.shape, _dlpack.NAMES.get(qv.dtype, "float32"))
        tq, to = qv.tensor(), _dlpack.View(out, "out").tensor()
        p = attn_params(self._precision_name(), True, sm_scale, thrift_budget, thrift_k,
                        check_finite=check_finite)
        aux, rows = _row_outputs(q, tq.shape[0], tq.shape[1], tq.shape[2], return_lse,
                                 return_entropy)
        call("paged_decode", self._ctx.handle, self.handle, ctypes.byref(b), ctypes.byref(tq),
             ctypes.byref(to), ctypes.byref(p), ctypes.byref(aux))
        del keep
        return (out, *rows) if rows else out

    def _precision_name(self):
        return {v: k for k, v in _lib.PRECISIONS.items()}[self.params.precision]


def _host_ints(x):
    kind = _dlpack.namespace_of(x)
    if kind == "torch":
        return x.detach().cpu().tolist()
    if kind == "cupy":
        return x.get().tolist()
    import numpy as np
    return np.asarray(x).tolist()
