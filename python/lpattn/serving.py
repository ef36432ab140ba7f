"""Serving conventions on top of lpattn.KVPool.

FlashInfer (and vLLM, SGLang) describe a paged batch as CSR arrays:

    indptr        [num_seqs + 1]  sequence i owns indices[indptr[i]:indptr[i+1]]
    indices       [nnz]           the engine's block ids, in sequence order
    last_page_len [num_seqs]      tokens in each sequence's last block (1..block)

paged_from_flashinfer turns them into the (page_table, lengths) that
KVPool.append / KVPool.decode take. int32 and int64 inputs are accepted (the
results are int32, in the inputs' kind and on their device; the arrays are
read on the host, so GPU inputs cost a sync).

Block sizes below 32 (vLLM's 16): an lpattn page is one tile of 32..256
tokens (SPEC 9; MXFP4 groups 32 keys), so an engine with `block_size`-token
blocks makes its pool's pages r = page_size / block_size blocks wide and
allocates blocks in aligned runs of r: engine block r*j + t (t < r) is token
slot t*block_size.. of lpattn page j. Give page_size (the pool's) and
block_size (the engine's); each sequence's blocks must then come in such
aligned runs (a ValueError names the first one that does not), and page j
of the pool stands for engine blocks r*j .. r*j + r - 1 (size the pool with
num_pages = engine_blocks // r).
"""
import numpy as np

from . import _dlpack
from ._api import INT32

__all__ = ["paged_from_flashinfer"]


def _host(x, name):
    kind = _dlpack.namespace_of(x)
    if kind == "torch":
        x = x.detach().cpu().numpy()
    elif kind == "cupy":
        x = x.get()
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: {a.dtype.name} is not accepted; use int32 or int64")
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {a.shape}")
    return a.astype(np.int64)


def _like(a, like):
    """int32 array a in like's kind and device."""
    kind = _dlpack.namespace_of(like)
    if kind == "torch":
        import torch
        return torch.from_numpy(a).to(like.device)
    if kind == "cupy":
        import cupy
        with like.device:
            return cupy.asarray(a)
    return a


def paged_from_flashinfer(indptr, indices, last_page_len, page_size, *, block_size=None):
    """(page_table [num_seqs, max_pages] int32, lengths [num_seqs] int32) of
    a FlashInfer-style paged batch (module docstring). page_size: the pool's
    (a multiple of 32 in [32, 256]); block_size: the engine's block size
    when it is smaller (page_size a multiple of it; default page_size).
    lengths count each sequence's tokens: pass them to decode as they are,
    and to append as the lengths before the call. Rows are padded with page
    0 beyond each sequence's pages (the library reads only the first
    ceil(length / page_size))."""
    ip, ix, last = (_host(x, n) for x, n in ((indptr, "indptr"), (indices, "indices"),
                                             (last_page_len, "last_page_len")))
    page_size = int(page_size)
    block = page_size if block_size is None else int(block_size)
    if block < 1 or page_size % block:
        raise ValueError(f"block_size = {block}: expected a divisor of page_size = {page_size}")
    r = page_size // block
    n = len(ip) - 1
    if n < 0 or len(last) != n:
        raise ValueError(f"indptr has {len(ip)} entries and last_page_len {len(last)}: "
                         "expected num_seqs + 1 and num_seqs")
    if n and (ip[0] != 0 or (np.diff(ip) < 0).any() or ip[-1] > len(ix)):
        raise ValueError(f"indptr: expected non-decreasing offsets from 0 to at most "
                         f"len(indices) = {len(ix)}")
    counts = np.diff(ip) if n else np.zeros(0, np.int64)
    if ((counts > 0) & ((last < 1) | (last > block))).any():
        i = int(np.nonzero((counts > 0) & ((last < 1) | (last > block)))[0][0])
        raise ValueError(f"last_page_len[{i}] = {int(last[i])}, expected 1..{block}")
    if len(ix) and (ix.min() < 0 or ix.max() > INT32[1]):
        raise ValueError("indices: expected block ids in 0..2^31 - 1")
    lengths = np.where(counts > 0, (counts - 1) * block + last, 0)
    if lengths.size and lengths.max() > INT32[1]:
        raise ValueError("a sequence's length does not fit int32")
    pages = (counts + r - 1) // r
    table = np.zeros((n, max(int(pages.max()) if n else 0, 1)), np.int32)
    for i in range(n):
        blocks = ix[ip[i]:ip[i + 1]]
        first = blocks[::r]
        if r > 1:
            want = first[:, None] + np.arange(r)[None, :]
            got = np.full(want.shape, -1, np.int64).reshape(-1)
            got[:len(blocks)] = blocks
            got = got.reshape(want.shape)
            ok = (first % r == 0) & ((got == want) | (got < 0)).all(axis=1)
            if not ok.all():
                j = int(np.nonzero(~ok)[0][0])
                raise ValueError(
                    f"sequence {i}: blocks {blocks[j * r:(j + 1) * r].tolist()} are not an aligned "
                    f"run of {r} (block r*j .. r*j + {r - 1} with r = {r}): with {block}-token "
                    f"blocks and {page_size}-token pages, allocate blocks in aligned runs")
        table[i, :len(first)] = first // r
    return _like(table, indptr), _like(lengths.astype(np.int32), indptr)
