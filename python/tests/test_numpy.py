"""lpattn with NumPy arrays on the host backends (cpu when built, else ref)."""
import unittest

import numpy as np

import lpattn
from common import rand, reference, rel_err


class Attention(unittest.TestCase):
    def test_high_matches_reference(self):
        q, k, v = rand(2, 4, 80, 64, seed=1), rand(2, 2, 96, 64, seed=2), rand(2, 2, 96, 64, seed=3)
        for causal in (False, True):
            out, lse = lpattn.attention(q, k, v, causal=causal, precision="high", return_lse=True)
            want, want_lse = reference(q, k, v, causal)
            self.assertIsInstance(out, np.ndarray)
            self.assertEqual(out.shape, q.shape)
            self.assertEqual(lse.shape, (2, 4, 80))
            np.testing.assert_allclose(out, want, atol=2e-5)
            np.testing.assert_allclose(lse, want_lse, atol=2e-5)

    def test_every_head_dim(self):
        # D no multiple of 16 (SEMANTICS "Head dimensions"): exact in HIGH,
        # low precisions with groups that pass D quantized as if zero-padded
        for d in (40, 80, 96, 111):
            q, k, v = rand(1, 2, 70, d, seed=d), rand(1, 1, 90, d, seed=d + 1), rand(1, 1, 90, d, seed=d + 2)
            want, _ = reference(q, k, v, True)
            np.testing.assert_allclose(lpattn.attention(q, k, v, causal=True, precision="high"), want,
                                       atol=2e-5)
            for prec, tol in (("fp8", 0.05), ("nvfp4", 0.2), ("mxfp4", 0.25)):
                out = lpattn.attention(q, k, v, causal=True, precision=prec)
                self.assertLess(rel_err(out, want), tol, (d, prec))

    def test_low_precisions_close(self):
        q, k, v = rand(1, 2, 128, 128, seed=4), rand(1, 2, 128, 128, seed=5), rand(1, 2, 128, 128, seed=6)
        want, _ = reference(q, k, v, True)
        for prec, tol in (("fp8", 0.05), ("nvfp4", 0.2), ("mxfp4", 0.25), ("thrift", 0.2)):
            out = lpattn.attention(q, k, v, causal=True, precision=prec)
            self.assertLess(rel_err(out, want), tol, prec)
            self.assertTrue(np.isfinite(out).all(), prec)

    def test_bshd_layout_and_entropy(self):
        q, k, v = rand(1, 64, 4, 32, seed=7), rand(1, 64, 4, 32, seed=8), rand(1, 64, 4, 32, seed=9)
        out, lse, ent = lpattn.attention(q, k, v, layout="bshd", precision="high",
                                         return_lse=True, return_entropy=True)
        want, want_lse = reference(*(x.transpose(0, 2, 1, 3) for x in (q, k, v)))
        self.assertEqual(out.shape, q.shape)
        np.testing.assert_allclose(out.transpose(0, 2, 1, 3), want, atol=2e-5)
        np.testing.assert_allclose(lse, want_lse, atol=2e-5)
        self.assertTrue((ent >= 0).all() and (ent <= np.log(64) + 1e-4).all())

    def test_strided_input_zero_copy(self):
        big = rand(1, 4, 64, 128, seed=10)
        q = big[..., :64]  # non-contiguous view: rows of stride 128
        k, v = rand(1, 4, 64, 64, seed=11), rand(1, 4, 64, 64, seed=12)
        out = lpattn.attention(q, k, v, precision="high", sm_scale=0.1)
        np.testing.assert_allclose(out, reference(q, k, v, sm_scale=0.1)[0], atol=2e-5)
        kb = np.broadcast_to(k[:, :1], k.shape)  # read-only, stride 0 over heads
        out = lpattn.attention(q, kb, v, precision="high")
        np.testing.assert_allclose(out, reference(q, kb, v)[0], atol=2e-5)

    def test_float16_and_backend_choice(self):
        q, k, v = (rand(1, 2, 64, 64, seed=s, dtype=np.float16) for s in (13, 14, 15))
        for backend in set(lpattn.available_backends()) & {"ref", "cpu"}:
            out = lpattn.attention(q, k, v, precision="high", backend=backend)
            self.assertEqual(out.dtype, np.float16)
            self.assertLess(rel_err(out, reference(q, k, v)[0]), 2e-3, backend)


class Errors(unittest.TestCase):
    def test_detail_and_status(self):
        q, k = rand(1, 4, 64, 128), rand(1, 2, 64, 64)
        with self.assertRaises(lpattn.LpattnError) as cm:
            lpattn.attention(q, k, k)
        e = cm.exception
        self.assertEqual(e.status_name, "BAD_SHAPE")
        self.assertEqual(e.status, 3)
        self.assertIn("k.shape[3] = 64 but q.shape[3] = 128", str(e))
        self.assertIn("k.shape[3] = 64", lpattn.last_error())

    def test_more_details(self):
        q = rand(1, 3, 64, 64)
        k = rand(1, 2, 64, 64)
        with self.assertRaisesRegex(lpattn.LpattnError, "not a multiple of k.shape.1. = 2"):
            lpattn.attention(q, k, k)
        with self.assertRaisesRegex(lpattn.LpattnError, r"params.sm_scale = 100"):
            lpattn.attention(k, k, k, sm_scale=100.0)
        with self.assertRaisesRegex(lpattn.LpattnError, "block_k = 48"):
            lpattn.attention(k, k, k, block_k=48)
        bad = rand(1, 2, 64, 4)
        with self.assertRaisesRegex(lpattn.LpattnError, r"head_dim = 4, expected an integer in \[8, 256\]"):
            lpattn.attention(bad, bad, bad)
        nan = k.copy()
        nan[0, 1, 2, 3] = np.nan
        with self.assertRaisesRegex(lpattn.LpattnError, r"q\[0, 1, 2, 3\] is not finite"):
            lpattn.attention(nan, k, k, check_finite=True)

    def test_python_side_checks(self):
        k = rand(1, 2, 64, 64)
        with self.assertRaisesRegex(ValueError, "precision"):
            lpattn.attention(k, k, k, precision="fp2")
        with self.assertRaisesRegex(ValueError, "layout"):
            lpattn.attention(k, k, k, layout="sbhd")
        with self.assertRaisesRegex(TypeError, "DLPack"):
            lpattn.attention([1.0], k, k)
        with self.assertRaisesRegex(TypeError, "q: float64 is not accepted; use float32, "
                                    "float16 or bfloat16"):
            lpattn.attention(k.astype(np.float64), k, k)
        with self.assertRaises(ValueError):
            lpattn.attention(k, k, k, backend="cuda")  # host arrays


class Binding(unittest.TestCase):
    def test_struct_sizes_match_the_library(self):
        # Each params init writes sizeof(C struct) into struct_size.
        from lpattn import _lib
        import ctypes
        for struct, fn in ((_lib.ContextParams, "lpattn_context_params_init"),
                           (_lib.QuantParams, "lpattn_quant_params_init"),
                           (_lib.AttnParams, "lpattn_attn_params_init"),
                           (_lib.AttnAux, "lpattn_attn_aux_init"),
                           (_lib.PoolParams, "lpattn_kv_pool_params_init"),
                           (_lib.Batch, "lpattn_kv_batch_init")):
            buf = (ctypes.c_uint8 * 1024)()
            getattr(_lib.lib, fn).argtypes = [ctypes.c_void_p]
            getattr(_lib.lib, fn)(buf)
            getattr(_lib.lib, fn).argtypes = [ctypes.POINTER(struct)]
            self.assertEqual(ctypes.c_size_t.from_buffer(buf).value, ctypes.sizeof(struct),
                             struct.__name__)

    def test_version_and_backends(self):
        self.assertRegex(lpattn.__version__, r"^\d+\.\d+\.\d+$")
        self.assertIn("ref", lpattn.available_backends())


class Helpers(unittest.TestCase):
    def test_merge_states(self):
        q, k, v = rand(1, 2, 32, 64, seed=20), rand(1, 2, 128, 64, seed=21), rand(1, 2, 128, 64, seed=22)
        oa, la, ha = lpattn.attention(q, k[:, :, :64], v[:, :, :64], precision="high",
                                      return_lse=True, return_entropy=True)
        ob, lb, hb = lpattn.attention(q, k[:, :, 64:], v[:, :, 64:], precision="high",
                                      return_lse=True, return_entropy=True)
        o, lse, h = lpattn.merge_states(oa, la, ob, lb, ha, hb)
        want, want_lse, want_h = lpattn.attention(q, k, v, precision="high", return_lse=True,
                                                  return_entropy=True)
        np.testing.assert_allclose(o, want, atol=1e-5)
        np.testing.assert_allclose(lse, want_lse, atol=1e-5)
        np.testing.assert_allclose(h, want_h, atol=1e-4)
        o2, lse2 = lpattn.merge_states(oa, la, ob, lb)
        np.testing.assert_allclose(o2, o, atol=0)

    def test_quantize_roundtrip(self):
        x = rand(1, 2, 64, 64, seed=30)
        for fmt, axis, tol in (("nvfp4", "d", 0.15), ("mxfp4", "d", 0.2), ("fp8", "d", 0.05),
                               ("nvfp4", "s", 0.15)):
            qt = lpattn.quantize(x, fmt, axis=axis)
            self.assertEqual(qt.codes.dtype, np.uint8)
            y = lpattn.dequantize(qt)
            self.assertEqual(y.shape, x.shape)
            self.assertLess(rel_err(y, x), tol, (fmt, axis))
            again = lpattn.dequantize(lpattn.quantize(y, fmt, axis=axis))
            np.testing.assert_array_equal(again, y)  # representable values are fixed points
        a = lpattn.quantize(x, rounding="stochastic", seed=7)
        b = lpattn.quantize(x, rounding="stochastic", seed=7)
        np.testing.assert_array_equal(a.codes, b.codes)
        with self.assertRaisesRegex(lpattn.LpattnError, "not a multiple of the group size"):
            lpattn.quantize(rand(1, 1, 4, 24))

    def test_thrift_k_and_pasa_beta(self):
        self.assertEqual(lpattn.thrift_k(100, 0.05, causal=False), 5)
        self.assertEqual(lpattn.thrift_k(100, 0.05), lpattn.thrift_k(100, 0.05, True))
        self.assertEqual(lpattn.thrift_k(0, 0.5), 0)
        self.assertEqual(lpattn.thrift_k(10, 1.0), 10)
        b = lpattn.pasa_beta("float16", 64)
        self.assertTrue(0.9 < b < 1.0, b)
        self.assertTrue(np.isnan(lpattn.pasa_beta("float16", 0)))


class Paged(unittest.TestCase):
    H, D, T = 2, 64, 64

    def pool(self, precision="nvfp4", **kw):
        return lpattn.KVPool(8, 2, self.H, self.H, self.D, high_dtype="float32",
                             precision=precision, **kw)

    def test_decode_matches_prefill(self):
        n = 100
        k, v = rand(1, self.H, n + 1, self.D, seed=40), rand(1, self.H, n + 1, self.D, seed=41)
        q = rand(1, self.H, n + 1, self.D, seed=42)
        for prec in ("high", "nvfp4"):
            pool = self.pool(precision=prec)
            self.assertEqual(pool.memory.dtype, np.uint8)
            self.assertEqual(pool.memory.ctypes.data % 256, 0)
            slots = np.array([0], np.int32)
            table = np.array([[0, 1, 2, 3]], np.int32)
            pool.append(k[:, :, :n], v[:, :, :n], slots, np.array([0], np.int32), table,
                        q=q[:, :, :n])
            pool.append(k[:, :, n:], v[:, :, n:], slots, np.array([n], np.int32), table,
                        q=q[:, :, n:])
            out, lse = pool.decode(q[:, :, n:], slots, np.array([n + 1], np.int32), table,
                                   return_lse=True)
            full, full_lse = lpattn.attention(q, k, v, causal=True, precision=prec,
                                              return_lse=True)
            np.testing.assert_allclose(out[:, :, 0], full[:, :, n], atol=2e-5, err_msg=prec)
            np.testing.assert_allclose(lse[:, :, 0], full_lse[:, :, n], atol=2e-5)

    @unittest.skipUnless("cpu" in lpattn.available_backends(), "the cpu backend is not built")
    def test_mla_and_odd_head_dims(self):
        # MLA (head_dim 576 for q/k, head_dim_v 512; v a view of k's first
        # 512 channels) against a float64 NumPy model; D = 59 pages (rows
        # padded to 64, SEMANTICS "Head dimensions") against prefill.
        n = 150
        kl, ql = rand(1, 1, n, 576, seed=60), 3 * rand(1, 4, 1, 576, seed=61)
        pool = lpattn.KVPool(4, 1, 1, 4, 576, head_dim_v=512, high_dtype="float32",
                             precision="high", backend="cpu")
        slots, table = np.array([0], np.int32), np.array([[0, 1, 2, 3]], np.int32)
        pool.append(kl, kl[..., :512], slots, np.array([0], np.int32), table)
        out = pool.decode(ql, slots, np.array([n], np.int32), table)
        self.assertEqual(out.shape, (1, 4, 1, 512))
        s = np.einsum("hd,nd->hn", ql[0, :, 0].astype(np.float64), kl[0, 0].astype(np.float64))
        p = np.exp(s / np.sqrt(576) - (s / np.sqrt(576)).max(-1, keepdims=True))
        want = (p / p.sum(-1, keepdims=True)) @ kl[0, 0, :, :512].astype(np.float64)
        np.testing.assert_allclose(out[0, :, 0], want, atol=2e-6)
        k, v, q = (rand(1, 2, 81, 59, seed=s) for s in (62, 63, 64))
        for prec in ("high", "nvfp4", "mxfp4"):
            pool = lpattn.KVPool(4, 1, 2, 2, 59, high_dtype="float32", precision=prec, backend="cpu")
            pool.append(k, v, slots, np.array([0], np.int32), table)
            got = pool.decode(q[:, :, 80:], slots, np.array([81], np.int32), table)
            full = lpattn.attention(q, k, v, causal=True, precision=prec, backend="cpu")
            np.testing.assert_allclose(got[:, :, 0], full[:, :, 80], atol=2e-5, err_msg=prec)

    def test_batch_fork_and_errors(self):
        pool = self.pool()
        k, v = rand(2, self.H, 70, self.D, seed=50), rand(2, self.H, 70, self.D, seed=51)
        table = np.array([[0, 1, 2, 3], [0, 5, 6, 7]], np.int32)
        pool.append(k[:1], v[:1], np.array([0], np.int32), np.array([0], np.int32), table[:1])
        pool.slot_copy(0, 1)
        slots, lens = np.array([0, 1], np.int32), np.array([70, 70], np.int32)
        q = rand(2, self.H, 1, self.D, seed=52)
        out = pool.decode(q, slots, lens, table)
        same = pool.decode(q[:1], slots[:1], lens[:1], table[:1])
        np.testing.assert_array_equal(out[:1], same)  # batch-independent, bitwise
        np.testing.assert_array_equal(out[1:], pool.decode(q[1:], slots[1:], lens[1:], table[1:]))
        bad = table.copy()
        bad[1, 1] = 99
        with self.assertRaises(lpattn.LpattnError) as cm:
            pool.decode(q, slots, lens, bad)
        self.assertEqual(cm.exception.status_name, "BAD_PAGE")
        self.assertIn("batch.page_table[1][1] = 99, expected 0..7", str(cm.exception))
        with self.assertRaisesRegex(lpattn.LpattnError, "batch.slots.1. = 0 repeats"):
            pool.decode(q, np.array([0, 0], np.int32), lens, table)
        with self.assertRaisesRegex(lpattn.LpattnError, "src = 0, dst = 5"):
            pool.slot_copy(0, 5)

    def test_caller_memory(self):
        _, _, need = lpattn.pool_bytes(4, 1, 2, 2, 64, precision="nvfp4")
        raw = np.zeros(need + 256, np.uint8)
        off = (-raw.ctypes.data) % 256
        with lpattn.KVPool(4, 1, 2, 2, 64, precision="nvfp4", memory=raw[off:off + need]) as pool:
            self.assertEqual(pool.bytes, need)
        with self.assertRaisesRegex(lpattn.LpattnError, "the pool needs"):
            lpattn.KVPool(4, 1, 2, 2, 64, precision="nvfp4", memory=raw[off:off + 256])


if __name__ == "__main__":
    unittest.main()
