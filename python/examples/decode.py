"""The README's paged decode example in Python: a pool of NVFP4 pages in
memory the caller owns, two sequences that share a 100-token prompt (the
second forked from the first), and a few decode steps of both in one batch.
NumPy on the CPU; with torch tensors on a GPU (like=torch.empty(0,
device="cuda"), int32 tables on the GPU) the same calls run on the cuda
backend."""
import numpy as np

import lpattn

HKV, HQ, D, PAGE, PAGES, PROMPT = 8, 8, 128, 64, 16, 100
rng = np.random.default_rng(1)


def rnd(*shape):
    return rng.uniform(-0.5, 0.5, shape).astype(np.float32)


pool = lpattn.KVPool(PAGES, 2, HKV, HQ, D, page_size=PAGE, precision="nvfp4")
page_bytes, _, _ = lpattn.pool_bytes(PAGES, 2, HKV, HQ, D, precision="nvfp4")
print(f"pool {pool.memory.nbytes} bytes (a {pool.memory.dtype} array you own), "
      f"{page_bytes / PAGE:.0f} bytes per token")

# Sequence i: slot i, page table row i, length. Page 0 (tokens 0-63 of the
# prompt) is shared once sequence 1 is forked.
slots = np.array([0, 1], np.int32)
table = np.array([[0, 1, 2, 3, 4, 5, 6, 7], [0, 9, 10, 11, 12, 13, 14, 15]], np.int32)
lens = np.array([0, 0], np.int32)

# Prefill sequence 0's prompt, then fork: sequence 1 shares page 0, gets its
# own page 9 for tokens 64-99 (under NVFP4 the incomplete tile is in the slot).
pool.append(rnd(1, HKV, PROMPT, D), rnd(1, HKV, PROMPT, D), slots[:1], lens[:1], table[:1])
pool.slot_copy(0, 1)
lens[:] = PROMPT

# Decode steps: append each sequence's new token, then attend.
for step in range(3):
    pool.append(rnd(2, HKV, 1, D), rnd(2, HKV, 1, D), slots, lens, table)  # lengths: before
    lens += 1
    out, lse = pool.decode(rnd(2, HQ, 1, D), slots, lens, table, return_lse=True)
print(f"backend {pool.backend}, lengths {lens[0]} {lens[1]}, out[0] = {out[0, 0, 0, 0]:f}, "
      f"lse[0] = {lse[0, 0, 0]:f}")
