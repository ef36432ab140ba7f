"""lpattn.distributed: context parallelism over torch.distributed.

Ring attention for prefill and sharded decode, built on lpattn's absolute
positions (lpattn.h "Absolute positions") and mergeable (O, LSE) states
(SPEC 7). Communication goes through torch.distributed only (NCCL on GPUs,
gloo on CPU); lpattn has no transport of its own.

    import torch.distributed as dist, lpattn.distributed as ld
    q_l, k_l, v_l = (ld.zigzag_shard(x, rank, world) for x in (q, k, v))
    out_l, lse_l = ld.ring_attention(q_l, k_l, v_l, causal=True, precision="nvfp4")
    out = ld.zigzag_unshard(out_l)   # all ranks: the whole sequence's output

Layouts of a sequence of N tokens over R ranks (tensors [B, H, S, D]):
- "zigzag" (default, balances causal work): 2R chunks of N / 2R tokens; rank
  r holds chunks r and 2R - 1 - r, concatenated.
- "contiguous": rank r holds tokens [r N / R, (r + 1) N / R).
A chunk (a rank's part) other than the sequence's last must hold whole KV
tiles (a multiple of block_k, 64 by default) so every rank quantizes the
whole sequence's tiles; the functions check it.

Sharded paged decode: each rank's lpattn.KVPool holds a run of each
sequence's pages (page_split), appended there in the rank's own order; the
rank holding a sequence's end takes its new tokens. paged_decode decodes
every rank's pool with the runs' positions and merges the (O, LSE) states.

Accuracy: the sharded result equals lpattn.attention on the whole sequence
within the merge's f32 rounding under "high" (tests: 2e-6 absolute on unit
data); low precisions quantize P against each shard's running max, so they
differ by a few of their own rounding steps (docs/SEMANTICS.md). THRIFT:
unsupported (its top-k needs every tile's score). Backward: ring_attention
is differentiable (autograd) on backends with lpattn_attention_backward (ref,
cpu); the ring pass carries dK/dV partials home.
"""
import inspect

import torch
import torch.distributed as dist

from . import _api

__all__ = ["zigzag_shard", "zigzag_unshard", "shard_positions", "ring_attention",
           "sharded_decode", "page_split", "paged_decode"]

CHUNK_PAGES = 16  # LP_DECODE_CHUNK_TILES: decode's chunks, counted in the sequence's pages


def _group_info(group):
    return dist.get_rank(group), dist.get_world_size(group)


def shard_positions(n_local, rank, world, layout="zigzag"):
    """[(position, local offset, length)] of a rank's tokens: n_local tokens
    per rank of a sequence of n_local * world tokens."""
    if layout == "contiguous":
        return [(rank * n_local, 0, n_local)]
    if layout != "zigzag":
        raise ValueError(f"layout = {layout!r}, expected 'zigzag' or 'contiguous'")
    if n_local % 2:
        raise ValueError(f"zigzag: {n_local} tokens per rank, expected an even number")
    c = n_local // 2
    return [(rank * c, 0, c), ((2 * world - 1 - rank) * c, c, c)]


def zigzag_shard(x, rank, world, dim=2):
    """The part of the whole sequence x that rank holds under "zigzag"."""
    chunks = x.chunk(2 * world, dim=dim)
    if len(chunks) != 2 * world or x.shape[dim] % (2 * world):
        raise ValueError(f"sequence of {x.shape[dim]} tokens: not a multiple of 2 * world = {2 * world}")
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim=dim).contiguous()


def zigzag_unshard(x, dim=2, group=None):
    """All-gather every rank's zigzag part and put the sequence in order."""
    _, world = _group_info(group)
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous(), group=group)
    halves = [p.chunk(2, dim=dim) for p in parts]
    order = [halves[r][0] for r in range(world)] + [halves[r][1] for r in reversed(range(world))]
    return torch.cat(order, dim=dim)


def _check_tiles(n, world, layout, kw):
    """Every rank's shards, checked on every rank (the same inputs give the
    same verdict everywhere, so no rank is left waiting in the ring): each
    starts at a multiple of block_k (its KV tiles are the whole sequence's)
    and of block_q (its query tiles get the whole call's tile classes), and
    holds whole tiles except at the sequence's end."""
    bq, bk = kw.get("block_q") or 64, kw.get("block_k") or 64
    n_total = n * world
    for r in range(world):
        for pos, _, m in shard_positions(n, r, world, layout):
            if pos % bk or pos % bq or (m % bk and pos + m != n_total):
                raise ValueError(f"a shard of tokens [{pos}, {pos + m}) of {n_total}: shards must "
                                 f"start at a multiple of block_q = {bq} and block_k = {bk} and hold "
                                 "whole tiles except at the sequence's end")


def _agree(err, group, device):
    """Raise on every rank when any rank failed before a collective, instead
    of leaving the others blocked in it."""
    flag = torch.tensor([1 if err is not None else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if err is not None:
        raise err
    if int(flag.item()):
        raise RuntimeError("lpattn.distributed: another rank failed (its exception says why)")


def _backward_kw(kw):
    """The forward's keywords that the backward takes (check_finite, out,
    return_* are the forward's own)."""
    return {k: v for k, v in kw.items() if k in _BACKWARD_KW}


_BACKWARD_KW = set(inspect.signature(_api.attention_backward).parameters) - {
    "q", "k", "v", "out", "lse", "dout"}


def _pair_kw(causal, qpos, nq, kpos, nk, bk):
    """The call for query rows [qpos, qpos + nq) against keys [kpos, kpos + nk):
    None when every key is in every row's future, else attention keywords.
    Pairs whose every KV tile (a partial last one counted whole: it is
    diagonal, SEMANTICS) is in every row's past run non-causal, diagonal
    pairs of equal extent bottom-right (the plain call), the others with
    their positions."""
    if not causal:
        return {"causal": False}
    if kpos > qpos + nq - 1:
        return None
    if kpos + -(-nk // bk) * bk - 1 <= qpos:
        return {"causal": False}
    if qpos - kpos == nk - nq:
        return {"causal": True}
    return {"causal": True, "q_start": qpos, "kv_start": kpos}


def _merge(state, o, lse):
    if state is None:  # merged in float32, whatever the inputs' dtype
        return o.float(), lse
    return _api.merge_states(state[0], state[1], o, lse)


def _start_ring(buf, rank, world, group):
    """Send buf to rank + 1 and receive the block of rank - 1 (async)."""
    if world == 1:
        return buf, []
    recv = torch.empty_like(buf)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    g = (lambda r: dist.get_global_rank(group, r)) if group is not None else (lambda r: r)
    ops = [dist.P2POp(dist.isend, buf, g(nxt), group), dist.P2POp(dist.irecv, recv, g(prv), group)]
    return recv, dist.batch_isend_irecv(ops)


def _finish_ring(reqs):
    for r in reqs:
        r.wait()


def _forward(q, k, v, causal, layout, group, kw):
    rank, world = _group_info(group)
    n = q.shape[2]
    if k.shape[2] != n:
        raise ValueError(f"q holds {n} tokens but k holds {k.shape[2]}: shard q, k, v alike")
    segs, bk = shard_positions(n, rank, world, layout), kw.get("block_k") or 64
    _check_tiles(n, world, layout, kw)
    kv = torch.stack([k, v]).contiguous()
    states = [None] * len(segs)
    for step in range(world):
        src = (rank - step) % world
        pending = _start_ring(kv, rank, world, group) if step < world - 1 else None
        for si, (qp, qo, nq) in enumerate(segs):  # compute overlaps the transfer
            for kp, ko, nk in shard_positions(n, src, world, layout):
                pk = _pair_kw(causal, qp, nq, kp, nk, bk)
                if pk is None:
                    continue
                o, lse = _api.attention(q[:, :, qo:qo + nq], kv[0][:, :, ko:ko + nk],
                                        kv[1][:, :, ko:ko + nk], return_lse=True, **pk, **kw)
                states[si] = _merge(states[si], o, lse)
        if pending is not None:
            kv, reqs = pending
            _finish_ring(reqs)
    outs, lses = [], []
    for (qp, qo, nq), st in zip(segs, states):
        if st is None:  # no visible key (only possible for unusual layouts)
            st = (torch.zeros_like(q[:, :, qo:qo + nq]),
                  torch.full(q.shape[:2] + (nq,), float("-inf"), dtype=torch.float32,
                             device=q.device))
        outs.append(st[0].to(q.dtype))
        lses.append(st[1])
    return torch.cat(outs, dim=2), torch.cat(lses, dim=2)


def _backward(q, k, v, out, lse, dout, causal, layout, group, kw, seed):
    """Ring backward: K/V go around as in the forward; the dK/dV of a block
    travel one hop behind it, so each transfer overlaps the next step's
    compute, and after `world` hops each block's dK/dV are home."""
    rank, world = _group_info(group)
    n = q.shape[2]
    segs, bk = shard_positions(n, rank, world, layout), kw.get("block_k") or 64
    dq = torch.zeros_like(q, dtype=torch.float32)
    kv = torch.stack([k, v]).contiguous()
    pend_d = None  # the dK/dV of the block in hand, collected by the ranks before
    for step in range(world):
        src = (rank - step) % world
        pend_kv = _start_ring(kv, rank, world, group) if step < world - 1 else None
        dkv = torch.zeros(kv.shape, dtype=torch.float32, device=kv.device)
        for qp, qo, nq in segs:
            qs = slice(qo, qo + nq)
            for kp, ko, nk in shard_positions(n, src, world, layout):
                pk = _pair_kw(causal, qp, nq, kp, nk, bk)
                if pk is None:
                    continue
                ks = slice(ko, ko + nk)
                g = _api.attention_backward(q[:, :, qs], kv[0][:, :, ks], kv[1][:, :, ks],
                                            out[:, :, qs].contiguous(), lse[:, :, qs].contiguous(),
                                            dout[:, :, qs].contiguous(), seed=seed, **pk,
                                            **_backward_kw(kw))
                dq[:, :, qs] += g[0].float()
                dkv[0][:, :, ks] += g[1].float()
                dkv[1][:, :, ks] += g[2].float()
        if pend_d is not None:
            _finish_ring(pend_d[1])
            dkv += pend_d[0]
        pend_d = _start_ring(dkv, rank, world, group)
        if pend_kv is not None:
            kv = pend_kv[0]
            _finish_ring(pend_kv[1])
    _finish_ring(pend_d[1])
    dkv = pend_d[0]
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class _Ring(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, layout, group, kw, seed):
        out, lse = _forward(q.detach(), k.detach(), v.detach(), causal, layout, group, kw)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (causal, layout, group, kw, seed)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        causal, layout, group, kw, seed = ctx.args
        grads = _backward(q, k, v, out, lse, dout.contiguous(), causal, layout, group, kw, seed)
        return grads + (None,) * 5


def ring_attention(q, k, v, *, causal=True, layout="zigzag", group=None, seed=0, **kw):
    """Ring attention (prefill) of this rank's part of one sequence.

    q [B, Hq, n, D], k and v [B, Hkv, n, D]: the rank's n tokens in `layout`
    (zigzag_shard). K/V blocks travel around the ring (batch_isend_irecv);
    each step computes the block in hand while the next one is in flight.
    kw: lpattn.attention's keywords (precision, block_q, block_k, backend,
    pasa, ...). Returns (out [B, Hq, n, D], lse [B, Hq, n] float32) of this
    rank's queries. Differentiable (seed: the stochastic rounding of low
    tiles' backward operands)."""
    if kw.get("precision") == "thrift":
        raise ValueError("ring_attention: THRIFT is unsupported (its top-k needs every tile's score)")
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        return _Ring.apply(q, k, v, causal, layout, group, kw, seed)
    return _forward(q, k, v, causal, layout, group, kw)


def sharded_decode(q, k, v, kv_start, *, q_start=None, group=None, return_lse=False, **kw):
    """Decode against a KV cache split over the ranks of `group`.

    q [B, Hq, Sq, D]: the same queries on every rank (the sequence's last Sq
    positions); k, v [B, Hkv, n_r, D]: this rank's keys, at positions
    [kv_start, kv_start + n_r) (kv_start a multiple of block_k; n_r may be 0).
    q_start: position of q's first row (default: the sequence's length - Sq,
    from an all-reduce of the ranks' key ends). Each rank computes its
    partial (O, LSE); the partials are all-gathered and merged in rank order
    (SPEC 7), so every rank returns the same out (and lse)."""
    rank, world = _group_info(group)
    Sq, bk = q.shape[2], kw.get("block_k") or 64
    _agree(ValueError(f"kv_start = {kv_start} is not a multiple of block_k = {bk}")
           if kv_start % bk else None, group, q.device)
    if q_start is None:
        end = torch.tensor([kv_start + k.shape[2]], dtype=torch.int64, device=q.device)
        dist.all_reduce(end, op=dist.ReduceOp.MAX, group=group)
        q_start = int(end.item()) - Sq
    lse_shape = q.shape[:2] + (Sq,)
    pk = _pair_kw(True, q_start, Sq, kv_start, k.shape[2], bk) if k.shape[2] else None
    o = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.full(lse_shape, float("-inf"), dtype=torch.float32, device=q.device)
    err = None
    try:
        if pk is not None:
            o, lse = _api.attention(q, k, v, return_lse=True, **pk, **kw)
            o = o.float()
    except Exception as e:  # the others must not wait for this rank's partial
        err = e
    _agree(err, group, q.device)
    os_ = [torch.empty_like(o) for _ in range(world)]
    ls_ = [torch.empty_like(lse) for _ in range(world)]
    dist.all_gather(os_, o.contiguous(), group=group)
    dist.all_gather(ls_, lse.contiguous(), group=group)
    state = None
    for o_r, l_r in zip(os_, ls_):
        state = _merge(state, o_r, l_r)
    out = state[0].to(q.dtype)
    return (out, state[1]) if return_lse else out


def page_split(length, world, page_size=64, reserve=None):
    """Token borders [0, b_1, ..., b_{world-1}, length] of a sequence of
    `length` tokens split over `world` ranks for paged_decode: ranks before
    the last hold equal runs of whole pages (multiples of CHUNK_PAGES when
    there are that many, so every decode chunk is the whole sequence's and
    the merged result equals one pool's within the merge's rounding in every
    precision), all ending at least `reserve` tokens (default page_size)
    before the end; the last rank holds the rest and takes new tokens."""
    reserve = page_size if reserve is None else reserve
    full = max(length - reserve, 0) // page_size
    per = full // world
    if per >= CHUNK_PAGES:
        per -= per % CHUNK_PAGES
    return [r * per * page_size for r in range(world)] + [length]


def paged_decode(pool, q, slots, lengths, page_table, kv_start, *, q_start=None, group=None,
                 return_lse=False, check_errors=True, **kw):
    """Decode against paged KV pools sharded over the ranks of `group`.

    pool: this rank's lpattn.KVPool, holding a run of each sequence's pages.
    q [num_seqs, Hq, Sq, D]: the same queries on every rank (each sequence's
    last Sq positions). slots, lengths, page_table: this rank's batch
    (KVPool.decode); lengths[i] = 0 where the rank holds nothing of sequence
    i. kv_start int32 [num_seqs]: the global position of the rank's first
    token of each sequence (a multiple of page_size). q_start: positions of
    q's first rows (default: each sequence's length - Sq, from an all-reduce
    of the ranks' key ends). A run is the sequence's last (it ends at the last
    query) or whole pages ending at or before the first query's tile (lpattn.h
    lpattn_kv_batch). Each rank decodes its runs with their positions; the
    partial (O, LSE) are all-gathered and merged in rank order (SPEC 7), so
    every rank returns the same out (and lse [num_seqs, Hq, Sq] float32).
    Runs in rank order should follow the sequence (key order: the merge's
    rounding then matches page_split's bound). kw: KVPool.decode's keywords
    (sm_scale, max_length, check_finite). FP8/NVFP4/MXFP4/HIGH pools, host
    and GPU backends (THRIFT and PASA pools: UnsupportedError for now).

    check_errors (GPU pools): True, a failure on any rank raises on every rank,
    which reads the ranks' error flags on the host once per call (a wait for
    the device). False: no host wait, so the next step's launches overlap this
    one's work; a rank's own failure still raises there, another rank's shows
    as NaN in the merged out and lse (its partial is NaN). Host pools always
    check (they wait for their results anyway)."""
    rank, world = _group_info(group)
    n, Sq = q.shape[0], q.shape[2]
    if torch.as_tensor(slots).device.type != "cpu":
        return _paged_decode_device(pool, q, slots, lengths, page_table, kv_start, q_start, group,
                                    return_lse, world, kw, check_errors)
    lens = torch.as_tensor(lengths).detach().to("cpu", torch.int64)
    starts = torch.as_tensor(kv_start).detach().to("cpu", torch.int64)
    if q_start is None:
        end = torch.where(lens > 0, starts + lens, torch.zeros_like(lens)).to(q.device)
        dist.all_reduce(end, op=dist.ReduceOp.MAX, group=group)
        q_start = end.cpu() - Sq
    q_start = torch.as_tensor(q_start).detach().to("cpu", torch.int64)
    o = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.full(q.shape[:3], float("-inf"), dtype=torch.float32, device=q.device)
    idx = torch.nonzero(lens > 0).flatten()
    err = None
    try:
        _decode_runs(pool, q, slots, lengths, page_table, starts, q_start, idx, o, lse, kw)
    except Exception as e:  # the others must not wait for this rank's partial
        err = e
    _agree(err, group, q.device)
    os_ = [torch.empty_like(o) for _ in range(world)]
    ls_ = [torch.empty_like(lse) for _ in range(world)]
    dist.all_gather(os_, o, group=group)
    dist.all_gather(ls_, lse, group=group)
    state = None
    for o_r, l_r in zip(os_, ls_):
        state = _merge(state, o_r, l_r)
    out = state[0].to(q.dtype)
    return (out, state[1]) if return_lse else out


def _paged_decode_device(pool, q, slots, lengths, page_table, kv_start, q_start, group, return_lse,
                         world, kw, check_errors=True):
    """paged_decode on a GPU pool without a host round trip: every sequence
    decoded (one the rank holds nothing of gets LSE -inf from the kernel),
    (O, LSE, error flag) packed into one all-gather, merged in rank order; the
    flags are read on the host only with check_errors. (Host pools take the
    same path in the tests.)"""
    dev, i32 = slots.device, dict(dtype=torch.int32)
    starts = torch.as_tensor(kv_start).detach().to(dev, **i32).contiguous()
    lens = torch.as_tensor(lengths).detach().to(dev, **i32)
    Sq = q.shape[2]
    if q_start is None:
        end = torch.where(lens > 0, starts + lens, torch.zeros_like(lens))
        dist.all_reduce(end, op=dist.ReduceOp.MAX, group=group)
        q_start = end - Sq
    q_start = torch.as_tensor(q_start).detach().to(dev, **i32).contiguous()
    if kw.get("max_length") is None:  # sizes the launch: the table's reach, not a read of lengths
        kw = dict(kw, max_length=int(page_table.shape[-1]) * int(pool.page_size))
    rows, no = q.shape[0] * q.shape[1] * Sq, q.numel()
    err = None
    # this rank's (O, LSE, flag) in one f32 buffer: O decoded straight into it (unrounded)
    packed = torch.empty(no + rows + 1, dtype=torch.float32, device=q.device)
    try:
        _, lse = pool.decode(q, slots, lengths, page_table, kv_start=starts, q_start=q_start,
                             return_lse=True, out=packed[:no].view(q.shape), **kw)
        packed[no:-1] = lse.reshape(-1)
        packed[-1:].zero_()
    except Exception as e:  # the others must not wait for this rank's partial
        err = e
        packed.fill_(float("nan"))  # a failed rank's partial is NaN: merged rows show it even unchecked
        packed[-1] = 1.0
    gathered = torch.empty(world * packed.numel(), dtype=torch.float32, device=q.device)
    parts = gathered.view(world, -1).unbind(0)
    if dist.get_backend(group) == "gloo":  # older gloo has no all_gather_into_tensor
        dist.all_gather(list(parts), packed, group=group)
    else:
        dist.all_gather_into_tensor(gathered, packed, group=group)
    if err is not None:
        raise err
    state = None
    for x in parts:  # queued before the flags are read: one wait, at the end
        state = _merge(state, x[:no].view(q.shape), x[no:-1].view(q.shape[:3]))
    if check_errors and bool(torch.stack([x[-1] for x in parts]).any()):
        raise RuntimeError("lpattn.distributed: another rank failed (its exception says why)")
    out = state[0]
    if not check_errors:  # a NaN partial merges to LSE NaN and O 0: make O say it too
        out = out.masked_fill(torch.isnan(state[1]).unsqueeze(-1), float("nan"))
    out = out.to(q.dtype)
    return (out, state[1]) if return_lse else out


def _decode_runs(pool, q, slots, lengths, page_table, starts, q_start, idx, o, lse, kw):
    """This rank's runs decoded into o, lse (rows idx)."""
    if idx.numel():
        dev = slots.device
        sel = idx.to(dev)
        sub = lambda x: x.index_select(0, sel).contiguous()  # noqa: E731
        i32 = lambda x: x.to(torch.int32).to(dev).contiguous()  # noqa: E731
        o_r, l_r = pool.decode(q.index_select(0, idx.to(q.device)).contiguous(), sub(slots),
                               sub(lengths), sub(page_table), kv_start=i32(starts[idx]),
                               q_start=i32(q_start[idx]), return_lse=True, **kw)
        o[idx.to(q.device)] = o_r.float()
        lse[idx.to(q.device)] = l_r
