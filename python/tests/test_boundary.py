"""The Python boundary (issue 28 items 1-6, issue 29 items 3, 4 and 6): each
test failed before its fix (out-of-bounds writes, silent narrowing, weak
errors, lossy defaults)."""
import unittest

import numpy as np

import lpattn
import lpattn.serving
from common import rand, reference, rel_err

H, D = 2, 64


def pool(**kw):
    kw.setdefault("precision", "nvfp4")
    return lpattn.KVPool(4, 2, H, H, D, high_dtype="float32", **kw)


def i32(*x):
    return np.array(x, np.int32)


class WrittenArrays(unittest.TestCase):
    """Item 1 and 2: memory the call writes must be the caller's, writable
    and (pool memory) one dense block."""

    def test_pool_memory_not_contiguous(self):
        need = lpattn.pool_bytes(4, 2, H, H, D, precision="nvfp4", high_dtype="float32")[2]
        buf = np.zeros(2 * need + 512, np.uint8)
        off = (-buf.ctypes.data) % 256
        for mem in (buf[off:off + 2 * need][::-1], buf[off:off + 2 * need][::2],
                    buf[off:off + need].reshape(-1, 16)[:, :8]):
            with self.assertRaisesRegex(ValueError, "memory: expected a contiguous array"):
                pool(memory=mem)

    def test_read_only_outputs(self):
        q = rand(1, H, 64, D)
        ro = np.zeros_like(q)
        ro.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "out: the array is read-only"):
            lpattn.attention(q, q, q, out=ro)
        self.assertFalse(ro.any())
        need = lpattn.pool_bytes(4, 2, H, H, D, precision="nvfp4", high_dtype="float32")[2]
        mem = np.zeros(need, np.uint8)
        mem.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "memory: the array is read-only"):
            pool(memory=mem)

    def test_read_only_memmap(self):
        import os
        import tempfile
        q = rand(1, H, 64, D)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "out.bin")
            np.zeros(q.shape, np.float32).tofile(path)
            mm = np.memmap(path, np.float32, mode="r", shape=q.shape)
            with self.assertRaisesRegex(ValueError, "out: the array is read-only"):
                lpattn.attention(q, q, q, out=mm)
            del mm

    def test_read_only_inputs_still_taken(self):
        q = rand(1, H, 64, D)
        q.flags.writeable = False  # inputs are only read
        np.testing.assert_allclose(lpattn.attention(q, q, q), reference(q, q, q)[0], atol=2e-5)

    def test_writable_out_is_written(self):
        q = rand(1, H, 64, D)
        out = np.zeros_like(q)
        self.assertIs(lpattn.attention(q, q, q, out=out), out)
        np.testing.assert_allclose(out, reference(q, q, q)[0], atol=2e-5)


class Views(unittest.TestCase):
    def test_byte_stride_not_element_multiple(self):  # item 3
        raw = np.zeros(64 * 6 * H * D + 16, np.uint8)
        x = np.lib.stride_tricks.as_strided(raw.view(np.float32)[:1], (1, H, 64, D),
                                            (0, 64 * D * 6, D * 6, 6))
        with self.assertRaisesRegex(ValueError, r"q: byte strides .* not multiples of the 4-byte"):
            lpattn.attention(x, x, x)

    def test_rank(self):  # item 4 and issue 29 item 6
        q = rand(1, H, 64, D)
        with self.assertRaisesRegex(ValueError, r"q: expected a 4-D array \[B, H, S, D\] "
                                                r"\(layout 'bhsd'\), got 3-D"):
            lpattn.attention(q[0], q, q)
        with self.assertRaisesRegex(ValueError, r"k: expected a 4-D array \[B, S, H, D\] "
                                                r"\(layout 'bshd'\), got 5-D"):
            lpattn.attention(q, q[..., None], q, layout="bshd")
        with self.assertRaisesRegex(ValueError, "out: expected a 4-D array"):
            lpattn.attention(q, q, q, out=np.zeros((1, H, 64, D, 1), np.float32))
        with self.assertRaisesRegex(ValueError, r"lse_a: expected a 3-D array"):
            lpattn.merge_states(q, q, q, q[..., 0])

    def test_huge_sq_is_the_library_error(self):  # item 6
        q = np.broadcast_to(rand(1, 1, 1, 16), (1, 1, 2 ** 31, 16))
        with self.assertRaises(lpattn.LpattnError) as cm:
            lpattn.attention(q, q, q)
        self.assertEqual(cm.exception.status_name, "SIZE_OVERFLOW")
        with self.assertRaises(lpattn.LpattnError) as cm:  # the backward's gradients too
            lse = np.broadcast_to(np.float32(0), (1, 1, 2 ** 31))
            lpattn.attention_backward(q, q, q, q, lse, q)
        self.assertEqual(cm.exception.status_name, "SIZE_OVERFLOW")


class Integers(unittest.TestCase):
    """Item 5: ctypes narrows silently; every integer is checked first."""

    def test_out_of_range(self):
        q = rand(1, H, 64, D)
        p = pool()
        cases = [lambda: p.slot_copy(2 ** 32, 1), lambda: p.slot_copy(0, -2 ** 31 - 1),
                 lambda: pool(precision="high", page_size=2 ** 32 + 64),
                 lambda: lpattn.KVPool(2 ** 32 + 8, 1, H, H, D, precision="nvfp4"),
                 lambda: lpattn.thrift_k(2 ** 32 + 5, 0.5),
                 lambda: lpattn.attention(q, q, q, block_q=2 ** 32 + 64),
                 lambda: lpattn.attention(q, q, q, q_start=2 ** 64),
                 lambda: lpattn.attention(q, q, q, thrift_k=2 ** 31, precision="thrift"),
                 lambda: lpattn.quantize(q, tile=2 ** 32 + 64, axis="s"),
                 lambda: lpattn.quantize(q, seed=2 ** 64),
                 lambda: lpattn.quantize(q, seed=-1),
                 lambda: lpattn.pasa_beta("float16", 2 ** 32 + 64),
                 lambda: p.decode(rand(1, H, 1, D), i32(0), i32(1), i32(0)[None],
                                  max_length=2 ** 64 + 100)]
        for i, f in enumerate(cases):
            with self.assertRaisesRegex(ValueError, "out of range", msg=str(i)):
                f()
        with self.assertRaisesRegex(TypeError, "expected an integer"):
            lpattn.attention(q, q, q, block_q=64.0)
        self.assertEqual(lpattn.thrift_k(5, 0.5), lpattn.thrift_k(np.int64(5), 0.5))


class Errors(unittest.TestCase):
    """Issue 29 item 6."""

    def test_dtype_names(self):
        q = rand(1, H, 64, D)
        with self.assertRaisesRegex(TypeError, "^q: float64 is not accepted; use float32, "
                                               "float16 or bfloat16$"):
            lpattn.attention(q.astype(np.float64), q, q)
        with self.assertRaisesRegex(TypeError, "v: int32 is not accepted"):
            lpattn.attention(q, q, q.astype(np.int32))
        with self.assertRaisesRegex(TypeError, "slots: float32 is not accepted; use int32"):
            pool().decode(rand(1, H, 1, D), np.zeros(1, np.float32), i32(1), i32(0)[None])

    def test_odd_dtype_blamed(self):
        q = rand(1, H, 64, D)
        with self.assertRaisesRegex(TypeError, "^k is float16 but v is float32"):
            lpattn.attention(q, q.astype(np.float16), q)
        with self.assertRaisesRegex(TypeError, "^v is float16 but k is float32"):
            lpattn.attention(q, q, q.astype(np.float16))
        out = lpattn.attention(q, q.astype(np.float16), q.astype(np.float16))  # q may differ
        self.assertEqual(out.dtype, np.float32)

    def test_sm_scale_zero(self):
        q = rand(1, H, 64, D)
        for bad in (0.0, -1.0, float("nan")):
            with self.assertRaisesRegex(ValueError, "sm_scale = .*expected None"):
                lpattn.attention(q, q, q, sm_scale=bad)
        np.testing.assert_array_equal(lpattn.attention(q, q, q, sm_scale=None),
                                      lpattn.attention(q, q, q, sm_scale=D ** -0.5))


class Defaults(unittest.TestCase):
    """Issue 29 item 3: exact by default, low precision by name."""

    def test_attention_is_high(self):
        q, k, v = rand(1, 4, 128, 64, seed=1), rand(1, 2, 192, 64, seed=2), rand(1, 2, 192, 64, seed=3)
        out = lpattn.attention(q, k, v, causal=True)
        self.assertLess(rel_err(out, reference(q, k, v, causal=True)[0]), 1e-5)
        np.testing.assert_array_equal(out, lpattn.attention(q, k, v, causal=True, precision="high"))

    def test_pool_precision_required(self):
        with self.assertRaisesRegex(TypeError, "precision"):
            lpattn.KVPool(4, 1, H, H, D)
        with self.assertRaisesRegex(TypeError, "precision"):
            lpattn.pool_bytes(4, 1, H, H, D)


class Serving(unittest.TestCase):
    """Issue 29 item 4: int64 ids, FlashInfer's CSR form, page sizes."""

    def test_int64_tables(self):
        k, v = rand(2, H, 40, D, seed=5), rand(2, H, 40, D, seed=6)
        q = rand(2, H, 1, D, seed=7)
        outs = []
        for dt in (np.int32, np.int64):
            p = pool(precision="high")
            slots, table = np.array([0, 1], dt), np.array([[0], [1]], dt)
            p.append(k, v, slots, np.array([0, 0], dt), table)
            outs.append(p.decode(q, slots, np.array([40, 40], dt), table))
        np.testing.assert_array_equal(outs[0], outs[1])
        with self.assertRaisesRegex(ValueError, "lengths: int64 values .* do not fit int32"):
            pool().decode(q, np.array([0, 1]), np.array([2 ** 31, 1]), np.array([[0], [1]]))

    def test_page_size_below_32(self):
        with self.assertRaisesRegex(ValueError, r"page_size = 16: a page is one tile .*MXFP4 "
                                                r"groups 32 keys"):
            pool(page_size=16)
        with self.assertRaisesRegex(lpattn.LpattnError, r"page_size = 48, expected a multiple "
                                                        r"of 32 in \[32, 256\]"):
            pool(page_size=48)

    def test_flashinfer_same_page_size(self):
        table, lens = lpattn.serving.paged_from_flashinfer(
            np.array([0, 2, 2, 5]), np.array([3, 1, 0, 2, 4]), np.array([10, 5, 64]), 64)
        np.testing.assert_array_equal(table, [[3, 1, 0], [0, 0, 0], [0, 2, 4]])
        np.testing.assert_array_equal(lens, [74, 0, 192])
        self.assertEqual(table.dtype, np.int32)
        self.assertEqual(lens.dtype, np.int32)

    def test_flashinfer_16_token_blocks(self):
        # vLLM-style 16-token blocks onto 32-token pages: blocks in aligned pairs.
        table, lens = lpattn.serving.paged_from_flashinfer(
            np.array([0, 3, 4], np.int32), np.array([6, 7, 2, 4], np.int32),
            np.array([9, 16], np.int32), 32, block_size=16)
        np.testing.assert_array_equal(table, [[3, 1], [2, 0]])
        np.testing.assert_array_equal(lens, [41, 16])
        with self.assertRaisesRegex(ValueError, r"sequence 0: blocks \[7, 6\] are not an aligned"):
            lpattn.serving.paged_from_flashinfer(np.array([0, 2]), np.array([7, 6]),
                                                 np.array([1]), 32, block_size=16)
        with self.assertRaisesRegex(ValueError, r"last_page_len\[0\] = 17"):
            lpattn.serving.paged_from_flashinfer(np.array([0, 1]), np.array([0]),
                                                 np.array([17]), 32, block_size=16)

    def test_flashinfer_decode_matches_attention(self):
        n, T = 75, 32
        k, v, q = (rand(1, H, n, D, seed=s) for s in (8, 9, 10))
        indptr, indices, last = np.array([0, 5]), np.array([4, 5, 0, 1, 6]), np.array([11])
        table, lens = lpattn.serving.paged_from_flashinfer(indptr, indices, last, T, block_size=16)
        self.assertEqual(int(lens[0]), n)
        p = lpattn.KVPool(4, 1, H, H, D, precision="high", page_size=T, high_dtype="float32")
        p.append(k, v, i32(0), i32(0), table)
        out = p.decode(q[:, :, -1:], i32(0), lens, table)
        want = lpattn.attention(q[:, :, -1:], k, v, causal=True)
        np.testing.assert_allclose(out, want, atol=2e-6)


if __name__ == "__main__":
    unittest.main()
