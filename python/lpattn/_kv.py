"""The paged KV pool (SPEC 9) and batched decode: the pool's memory is a
uint8 tensor the caller owns, page tables and lengths are int32 tensors
(int64 ones are converted, within int32's range)."""
import ctypes

from . import _dlpack, _fast, _lib
import types

from ._api import (INT32, INT64, _alloc, _choice, _descales, _int, _views, attn_params,
                   _row_outputs, shared_params_addr)
from ._context import context
from .errors import call, check

ALIGN = 256


def pool_bytes(num_pages, num_slots, num_kv_heads, num_q_heads, head_dim, *, precision,
               **kw):
    """(page_bytes, slot_bytes, pool_bytes) of a pool with these params
    (precision, a required keyword, and the rest as KVPool takes them)."""
    p = _pool_params(num_pages, num_slots, num_kv_heads, num_q_heads, head_dim,
                     precision=precision, **kw)
    pb, sb, tb = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    call("kv_pool_size", ctypes.byref(p), ctypes.byref(pb), ctypes.byref(sb), ctypes.byref(tb))
    return pb.value, sb.value, tb.value


def _pool_params(num_pages, num_slots, num_kv_heads, num_q_heads, head_dim, *, precision,
                 page_size=64, high_dtype="float16", thrift_low="nvfp4", pasa=False,
                 pasa_beta=None, check_finite=False, head_dim_v=None):
    p = _lib.init(_lib.PoolParams, "lpattn_kv_pool_params_init")
    p.num_pages, p.num_slots = _int("num_pages", num_pages), _int("num_slots", num_slots)
    p.num_kv_heads, p.num_q_heads = _int("num_kv_heads", num_kv_heads), _int("num_q_heads", num_q_heads)
    p.head_dim = _int("head_dim", head_dim)
    # MLA: V and out at head_dim_v (lpattn.h lpattn_kv_pool_params)
    p.head_dim_v = 0 if head_dim_v is None else _int("head_dim_v", head_dim_v)
    p.page_size = _int("page_size", page_size)
    if p.page_size < 32:
        raise ValueError(
            f"page_size = {p.page_size}: a page is one tile of the cache (SPEC 9) and holds at "
            "least 32 tokens (MXFP4 groups 32 keys per scale); expected a multiple of 32 in "
            "[32, 256]. An engine with 16-token blocks maps two blocks onto one 32-token page "
            "(lpattn.serving.paged_from_flashinfer)")
    p.precision = _choice("precision", precision, _lib.PRECISIONS)
    p.high_dtype = _choice("high_dtype", high_dtype,
                           {"float32": _lib.F32, "float16": _lib.F16, "bfloat16": _lib.BF16})
    p.thrift_low = _choice("thrift_low", thrift_low, _lib.FORMATS)
    p.pasa = int(bool(pasa))
    if pasa_beta is not None:
        p.pasa_beta = float(pasa_beta)  # c_float: out-of-range values become inf, rejected
    p.check_finite = int(bool(check_finite))
    return p


class KVPool:
    """A pool of `num_pages` pages of `page_size` tokens (all KV heads of one
    layer) plus `num_slots` sequence slots, in `memory`: a writable,
    contiguous tensor the caller owns (uint8 by convention; made like `like`
    when not given: same kind and device).

    precision is required (there is no lossy default): "high" keeps pages
    in high_dtype, "fp8" / "nvfp4" / "mxfp4" / "thrift" store completed
    pages quantized; "fp8_static" (SPEC 11, vLLM/FlashInfer's FP8 KV cache)
    stores E4M3 codes only (2 * head_dim bytes a token and KV head) under
    per-(sequence, KV head) descales that set_descales gives each new
    sequence's slot before its first append (decode/prefill take
    q_descale; ref, cpu and cuda backends). page_size: a multiple of 32 in [32, 256] (a page is a
    tile; see lpattn.serving for engines with 16-token blocks). head_dim_v:
    V's (and out's) head dim where it differs (MLA: head_dim 576, head_dim_v
    512; append's v may be a view k[..., :512]); CPU and ref backends.

    A sequence is (slot, page-table row, length); one call appends to or
    decodes a whole batch: `slots`, `lengths` [num_seqs], `page_table`
    [num_seqs, max_pages], int32 or int64 (int64 is converted to int32 with
    a range check: a copy, and on a GPU a device sync), on the pool's device
    (lpattn.h "paged KV storage" says what each must hold). max_length
    (append, decode, prefill) bounds every length of the call and sizes the
    launch and workspace; without it a GPU pool's decode takes the page
    table's capacity (max_pages * page_size: no device read, so the call
    can be captured in a CUDA graph; give the batch's longest length for
    the smallest launch and workspace), and the rest read the lengths (on
    a GPU a device sync). Use a pool from the thread that made it (it holds
    that thread's lpattn context)."""

    def __init__(self, num_pages, num_slots, num_kv_heads, num_q_heads, head_dim, *,
                 precision, like=None, memory=None, backend="auto", **params):
        self.params = _pool_params(num_pages, num_slots, num_kv_heads, num_q_heads, head_dim,
                                   precision=precision, **params)
        _, _, need = pool_bytes(num_pages, num_slots, num_kv_heads, num_q_heads, head_dim,
                                precision=precision, **params)
        self.bytes = need
        if memory is None:
            if like is None:
                import numpy as np
                like = np.empty(0, dtype=np.float32)
            memory = _dlpack.empty(like, (need + ALIGN,), "uint8")
            off = (-_dlpack.View(memory, "memory").ptr) % ALIGN
            memory = memory[off:off + need]
        (mv,) = _views(("memory", memory), write=("memory",))
        if not mv.contiguous():  # the library takes (pointer, bytes): one dense block
            raise ValueError(f"memory: expected a contiguous array, got shape {mv.shape} with "
                             f"strides {mv.strides} (elements)")
        self.memory = memory
        self._mem_view, self._mem_gpu = mv, mv.on_gpu
        self._ctx = context(backend, mv, _dlpack.current_stream(memory, mv))
        nbytes = 1
        for n in mv.shape:
            nbytes *= n
        self.handle = ctypes.c_void_p()
        call("kv_pool_create", self._ctx.handle, ctypes.byref(self.params), ctypes.c_void_p(mv.ptr),
             nbytes * mv.itemsize, ctypes.byref(self.handle))
        self.page_size = self.params.page_size
        self.backend = self._ctx.backend
        self._precision = {v: k for k, v in _lib.PRECISIONS.items()}[self.params.precision]
        # decode's fast path (_fast): out's head dim, the GPU whose stream the pool follows
        self._dv = self.params.head_dim_v or self.params.head_dim
        self._stream_dev = mv.device_id if mv.on_gpu else -1

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

    def _length_bound(self, max_length, page_table):
        """decode's max_length as given; without it, on a GPU pool, the page
        table's capacity (max_pages * page_size): a bound on every length that
        needs no device read of the lengths (chunks past a sequence's length
        are empty launches that the merge does not read; a row's bits do not
        depend on the bound, SEMANTICS "Decode"; the workspace, num_seqs * Hq
        * Sq * (head_dim + 2) floats a chunk of 1024 tokens, grows with it).
        Host pools, append and prefill read the lengths (_batch): a prefill's
        pieces would each be sized by the capacity."""
        if max_length is None and self._mem_gpu:
            shape = getattr(page_table, "shape", None)
            if shape is not None and len(shape) == 2:
                return int(shape[1]) * self.page_size
        return max_length

    def _batch(self, slots, lengths, page_table, max_length):
        slots, lengths, page_table = (as_int32(x, n) for x, n in (
            (slots, "slots"), (lengths, "lengths"), (page_table, "page_table")))
        vs = _views(("slots", slots), ("lengths", lengths), ("page_table", page_table),
                    kind="index")
        vs[0].need_rank(1, "[num_seqs] int32")
        vs[1].need_rank(1, "[num_seqs] int32")
        vs[2].need_rank(2, "[num_seqs, max_pages] int32")
        b = _lib.init(_lib.Batch, "lpattn_kv_batch_init")
        b.num_seqs = _int("num_seqs (slots.shape[0])", vs[0].shape[0])
        b.slots, b.lengths = vs[0].tensor(shape4=True), vs[1].tensor(shape4=True)
        b.page_table = vs[2].tensor(shape4=True)
        if max_length is None and vs[1].on_gpu and _capturing(lengths):
            raise ValueError("max_length is required inside a CUDA graph capture (without it the "
                             "lengths are read on the host: a device sync, which the capture "
                             "refuses); give the largest length the graph's replays will see")
        if max_length is None:  # reads the lengths (a device sync on GPUs)
            max_length = int(max(int(x) for x in _host_ints(lengths))) if b.num_seqs else 0
        b.max_length = _int("max_length", max_length, INT64)
        return b, (vs, slots, lengths, page_table)

    def _sync_stream(self, like):
        if self._mem_gpu:  # the pool's device work follows the caller's current stream
            self._ctx.use_stream(_dlpack.current_stream(like, self._mem_view))

    def _live(self):
        if not getattr(self, "handle", None):
            raise ValueError("KVPool: the pool is closed")

    def append(self, k, v, slots, lengths, page_table, q=None, *, max_length=None):
        """Append n tokens to each sequence: k, v [num_seqs, Hkv, n, D]; q None or
        [num_seqs, Hq, n, D] (THRIFT reads the queries). lengths: tokens held
        before the call (0 starts a sequence in its slot)."""
        self._live()
        b, keep = self._batch(slots, lengths, page_table, max_length)
        named = [("k", k), ("v", v)] + ([("q", q)] if q is not None else [])
        vs = _views(*named, kind="float")
        ts = [x.tensor(layout="[num_seqs, heads, n, head_dim]") for x in vs]
        self._sync_stream(k)
        call("kv_append", self._ctx.handle, self.handle, ctypes.byref(b), ctypes.byref(ts[0]),
             ctypes.byref(ts[1]), ctypes.byref(ts[2]) if q is not None else None)
        del keep

    def set_descales(self, slots, k_descale, v_descale):
        """Set up new sequences of an "fp8_static" pool (lpattn.h
        lpattn_kv_pool_set_descales): slot slots[i] takes k_descale[i, h] and
        v_descale[i, h] (float32 [num_seqs, Hkv] on the pool's device, or one
        number for all) and is emptied. Appends then store E4M3(k / k_descale),
        E4M3(v / v_descale); call it before a sequence's first append."""
        self._live()
        slots = as_int32(slots, "slots")
        (sv,) = _views(("slots", slots), kind="index")
        sv.need_rank(1, "[num_seqs] int32")
        n, hkv = sv.shape[0], self.params.num_kv_heads
        holder = types.SimpleNamespace()
        keep = _descales(holder, self.memory, sv, n, hkv,
                         (("k_descale", k_descale), ("v_descale", v_descale)))
        for name in ("k_descale", "v_descale"):
            if not hasattr(holder, name):
                raise ValueError(f"set_descales: {name} is required")
        self._sync_stream(self.memory)
        call("kv_pool_set_descales", self._ctx.handle, self.handle,
             ctypes.byref(sv.tensor(shape4=True)), ctypes.byref(holder.k_descale),
             ctypes.byref(holder.v_descale))
        del keep

    def _q_descale(self, p, q, qv, num_seqs, q_descale):
        """An "fp8_static" pool's q_descale ([num_seqs, Hkv] or one number) into p."""
        if q_descale is None:
            return []
        return _descales(p, q, qv, num_seqs, self.params.num_kv_heads,
                         (("q_descale", q_descale),))

    def slot_copy(self, src, dst):
        """Copy slot src's state to slot dst (fork a sequence)."""
        self._live()
        call("kv_slot_copy", self._ctx.handle, self.handle, _int("src", src), _int("dst", dst))

    def decode(self, q, slots, lengths, page_table, *, max_length=None, sm_scale=None,
               thrift_budget=None, thrift_k=None, check_finite=False, return_lse=False,
               return_entropy=False, out=None, kv_start=None, q_start=None, window=None,
               softcap=None, q_descale=None):
        """Batched decode: q [num_seqs, Hq, Sq, D] (Sq <= page_size) are the
        queries of each sequence's last Sq positions, attending causally to
        lengths[i] tokens (more new tokens: prefill, which appends them). Returns out like q (and lse / entropy [num_seqs,
        Hq, Sq] float32 when asked).

        Sharded decode (this pool holds a run of each sequence's pages;
        lpattn.h lpattn_kv_batch): kv_start, q_start int32 [num_seqs], both or
        neither: the global position of each slot's first token (a multiple
        of page_size) and of q's first row. A shard is the sequence's last
        (kv_start + length == q_start + Sq) or holds whole pages ending at or
        before the first query's tile. lpattn.distributed.paged_decode merges
        the ranks' states.

        window=(left, right) (right is moot: decode is causal): each row sees
        the keys at positions p - left .. p; pages wholly before the window
        are not read. softcap: s = softcap * tanh(s / softcap). Host
        backends and CUDA, every pool precision but PASA (docs/SEMANTICS.md
        "Sliding window and softcap"); CUDA MLA pools and HIP: UNSUPPORTED.

        q_descale ("fp8_static" pools): float32 [num_seqs, Hkv] or one
        number; q is cast to E4M3(q / q_descale) (None: 1)."""
        max_length = self._length_bound(max_length, page_table)
        if (_fast.mod is not None and self.handle and max_length is not None and kv_start is None
                and q_start is None and q_descale is None and not (return_lse or return_entropy)):
            addr = shared_params_addr(self._precision, True, sm_scale, thrift_budget, thrift_k,
                                      check_finite=check_finite, window=window, softcap=softcap)
            r = addr and _fast.mod.decode(self._ctx, self.handle.value, q, slots, lengths,
                                          page_table, max_length, out, addr, self._dv,
                                          self._stream_dev)
            if type(r) is int:
                check("paged_decode", r)
            if r is not None:
                return r
        self._live()
        b, keep = self._batch(slots, lengths, page_table, max_length)
        if (kv_start is None) != (q_start is None):
            raise ValueError("decode: give both kv_start and q_start, or neither")
        if kv_start is not None:
            kv_start, q_start = as_int32(kv_start, "kv_start"), as_int32(q_start, "q_start")
            pv = _views(("kv_start", kv_start), ("q_start", q_start), kind="index")
            for v in pv:
                v.need_rank(1, "[num_seqs] int32")
            b.kv_start, b.q_start = pv[0].tensor(shape4=True), pv[1].tensor(shape4=True)
            keep = (keep, pv, kv_start, q_start)
        (qv,) = _views(("q", q), kind="float")
        tq = qv.tensor(layout="[num_seqs, Hq, Sq, head_dim]")
        p = attn_params(self._precision_name(), True, sm_scale, thrift_budget, thrift_k,
                        check_finite=check_finite, window=window, softcap=softcap)
        keep = (keep, self._q_descale(p, q, qv, b.num_seqs, q_descale))
        self._sync_stream(q)
        if out is None:
            dv = self._dv  # MLA: out at head_dim_v
            out = _alloc(q, tuple(qv.shape[:3]) + (dv,), _dlpack.NAMES[qv.dtype])
        to = _dlpack.View(out, "out", kind="float", write=True).tensor(
            layout="[num_seqs, Hq, Sq, head_dim_v]")
        aux, rows = _row_outputs(q, tq.shape[0], tq.shape[1], tq.shape[2], return_lse,
                                 return_entropy)
        call("paged_decode", self._ctx.handle, self.handle, ctypes.byref(b), ctypes.byref(tq),
             ctypes.byref(to), ctypes.byref(p), ctypes.byref(aux))
        del keep
        return (out, *rows) if rows else out

    def prefill(self, q, k, v, slots, lengths, page_table, *, max_length=None, sm_scale=None,
                thrift_budget=None, thrift_k=None, check_finite=False, return_lse=False,
                return_entropy=False, out=None, window=None, softcap=None, cu_seqlens=None,
                q_descale=None):
        """Prefill against the pool (FlashInfer's BatchPrefillWithPagedKVCache,
        SGLang's "extend"; lpattn.h lpattn_paged_prefill): appends n new
        tokens to each sequence (k, v [num_seqs, Hkv, n, D], q [num_seqs, Hq,
        n, D]; any n, one per call) and attends each causally to the
        sequence's cached tokens (lengths: tokens held before the call, each
        sequence its own) and to the new tokens before it. Returns out
        [num_seqs, Hq, n, head_dim_v] (and lse / entropy when asked). Row r
        of sequence i is bitwise the decode of position lengths[i] + r, so a
        prompt gives the same rows however it is cut into calls. Every
        backend (CUDA/HIP: the lengths stay on the device; THRIFT pools
        there take no selection="paper", docs/SEMANTICS.md); keywords as
        decode.

        Ragged counts (lpattn_paged_prefill_varlen; FlashAttention's varlen
        layout, as lpattn.attention_varlen): with cu_seqlens (num_seqs + 1
        integers from 0 to total, never decreasing; host or device array, or
        a sequence of ints), q [total, Hq, D], k, v [total, Hkv, D] hold each
        sequence's new tokens one after another, sequence i's count
        cu_seqlens[i + 1] - cu_seqlens[i] (0: the sequence is skipped).
        Returns out [total, Hq, head_dim_v] (lse / entropy [Hq, total]); each
        row is bitwise the one prefill of that sequence alone gives.
        q_descale: as decode's ([num_seqs, Hkv] also with cu_seqlens)."""
        self._live()
        if cu_seqlens is not None:
            return self._prefill_varlen(q, k, v, slots, lengths, page_table, cu_seqlens,
                                        max_length, out, return_lse, return_entropy,
                                        attn_params(self._precision_name(), True, sm_scale,
                                                    thrift_budget, thrift_k,
                                                    check_finite=check_finite, window=window,
                                                    softcap=softcap), q_descale)
        b, keep = self._batch(slots, lengths, page_table, max_length)
        vs = _views(("q", q), ("k", k), ("v", v), kind="float")
        tq, tk, tv = (x.tensor(layout="[num_seqs, heads, n, head_dim]") for x in vs)
        p = attn_params(self._precision_name(), True, sm_scale, thrift_budget, thrift_k,
                        check_finite=check_finite, window=window, softcap=softcap)
        keep = (keep, self._q_descale(p, q, vs[0], b.num_seqs, q_descale))
        self._sync_stream(q)
        if out is None:
            dv = self._dv
            out = _alloc(q, tuple(vs[0].shape[:3]) + (dv,), _dlpack.NAMES[vs[0].dtype])
        to = _dlpack.View(out, "out", kind="float", write=True).tensor(
            layout="[num_seqs, Hq, n, head_dim_v]")
        aux, rows = _row_outputs(q, tq.shape[0], tq.shape[1], tq.shape[2], return_lse,
                                 return_entropy)
        call("paged_prefill", self._ctx.handle, self.handle, ctypes.byref(b), ctypes.byref(tk),
             ctypes.byref(tv), ctypes.byref(tq), ctypes.byref(to), ctypes.byref(p),
             ctypes.byref(aux))
        del keep
        return (out, *rows) if rows else out

    def _prefill_varlen(self, q, k, v, slots, lengths, page_table, cu_seqlens, max_length, out,
                        return_lse, return_entropy, p, q_descale=None):
        from ._varlen import _cu_tensor, _host_cu, _packed, _packed_rows
        b, keep = self._batch(slots, lengths, page_table, max_length)
        cu, vals = _host_cu("cu_seqlens", cu_seqlens)
        if len(vals) != b.num_seqs + 1:
            raise ValueError(f"cu_seqlens has {len(vals)} entries, expected num_seqs + 1 = "
                             f"{b.num_seqs + 1}")
        vs = _views(("q", q), ("k", k), ("v", v), kind="float")
        tq, tk, tv = (_packed(x) for x in vs)
        keep = (keep, self._q_descale(p, q, vs[0], b.num_seqs, q_descale))
        self._sync_stream(q)
        T, H = tq.shape[2], tq.shape[1]
        if out is None:
            dv = self._dv
            out = _alloc(q, (T, H, dv), _dlpack.NAMES[vs[0].dtype])
        to = _packed(_dlpack.View(out, "out", kind="float", write=True))
        aux, rows = _packed_rows(q, H, T, return_lse, return_entropy)
        call("paged_prefill_varlen", self._ctx.handle, self.handle, ctypes.byref(b),
             ctypes.byref(tk), ctypes.byref(tv), ctypes.byref(tq), ctypes.byref(to),
             ctypes.byref(_cu_tensor(cu)), ctypes.byref(p), ctypes.byref(aux))
        del keep
        return (out, *rows) if rows else out

    def plan_decode(self, q, slots, lengths, page_table, *, max_length, out=None, **kw):
        """A DecodePlan for repeated decode steps of one batch layout
        (lpattn.h "decode plans"): validation, parameters, launch geometry
        and (GPU) a workspace, once. q and out fix the shapes, dtypes and
        strides of every run (out: made like q when None); slots, lengths,
        page_table: int32 arrays bound to the plan (write new values into
        them in place between runs); max_length: the largest length any run
        will see. Keywords as decode (sm_scale, thrift_budget, thrift_k,
        check_finite, return_lse, return_entropy, kv_start, q_start, window,
        softcap, q_descale).

            plan = pool.plan_decode(q, slots, lengths, table, max_length=4096, out=out)
            plan.run(q, out)     # on a GPU: capturable in torch.cuda.graph"""
        from ._plan import DecodePlan
        return DecodePlan(self, q, slots, lengths, page_table, max_length=max_length, out=out,
                          **kw)

    def _precision_name(self):
        return self._precision


def as_int32(x, name):
    """x itself when it is not int64; else an int32 copy of x (same kind and
    device), after checking every value fits (a device sync on GPUs)."""
    if not hasattr(x, "__dlpack__"):
        return x  # View's TypeError names it
    dt = str(getattr(x, "dtype", ""))
    if dt not in ("int64", "torch.int64"):
        return x
    kind = _dlpack.namespace_of(x)
    n = 1
    for s in x.shape:
        n *= int(s)
    if n:
        lo, hi = int(x.min()), int(x.max())
        if lo < INT32[0] or hi > INT32[1]:
            raise ValueError(f"{name}: int64 values {lo}..{hi} do not fit int32 (lpattn's ids "
                             "and lengths are int32)")
    if kind == "torch":
        import torch
        return x.to(torch.int32)
    if kind == "jax":
        import jax.numpy as jnp
        return jnp.asarray(x, dtype=jnp.int32)
    return x.astype("int32")


def _capturing(x):
    """True while torch captures a CUDA graph on the current stream."""
    if _dlpack.namespace_of(x) != "torch":
        return False
    import torch
    return torch.cuda.is_current_stream_capturing()


def _host_ints(x):
    kind = _dlpack.namespace_of(x)
    if kind == "torch":
        return x.detach().cpu().tolist()
    if kind == "cupy":
        return x.get().tolist()
    import numpy as np
    return np.asarray(x).tolist()
