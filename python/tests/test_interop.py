"""Other array libraries through DLPack: JAX on the CPU (skipped without jax),
NumPy bfloat16 (ml_dtypes). CuPy takes the torch GPU path's code (not
installed here)."""
import unittest

import numpy as np

import lpattn
from common import rand, reference

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    jax = None
try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None


@unittest.skipIf(jax is None, "jax is not installed")
class Jax(unittest.TestCase):
    def test_attention_returns_jax_arrays(self):
        cpu = jax.devices("cpu")[0]  # f32 attention: the CPU backends
        q, k, v = (jax.device_put(jnp.asarray(rand(1, 2, 64, 64, seed=s)), cpu) for s in (1, 2, 3))
        out, lse = lpattn.attention(q, k, v, causal=True, precision="high", return_lse=True)
        self.assertIsInstance(out, jax.Array)
        want, want_lse = reference(np.asarray(q), np.asarray(k), np.asarray(v), True)
        np.testing.assert_allclose(np.asarray(out), want, atol=2e-5)
        np.testing.assert_allclose(np.asarray(lse), want_lse, atol=2e-5)
        bf = lpattn.attention(q.astype(jnp.bfloat16), k.astype(jnp.bfloat16),
                              v.astype(jnp.bfloat16), causal=True, precision="high")
        self.assertEqual(bf.dtype, jnp.bfloat16)

    def test_gpu_arrays_zero_copy(self):
        gpus = [d for d in jax.devices() if d.platform == "gpu"] if jax.default_backend() == "gpu" else []
        if not gpus or "cuda" not in lpattn.available_backends():
            self.skipTest("no JAX GPU device or lpattn built without cuda")
        host = [rand(1, 2, 128, 64, seed=s).astype(np.float16) for s in (7, 8, 9)]
        q, k, v = (jax.device_put(jnp.asarray(x), gpus[0]) for x in host)
        out, lse = lpattn.attention(q, k, v, causal=True, precision="high", return_lse=True)
        self.assertIsInstance(out, jax.Array)
        self.assertEqual(next(iter(out.devices())).platform, "gpu")
        self.assertEqual(out.dtype, jnp.float16)
        want, want_lse = reference(*(x.astype(np.float32) for x in host), True)
        np.testing.assert_allclose(np.asarray(out, dtype=np.float32), want, atol=5e-3)
        np.testing.assert_allclose(np.asarray(lse), want_lse, atol=5e-3)


@unittest.skipIf(ml_dtypes is None, "ml_dtypes is not installed")
class NumpyBfloat16(unittest.TestCase):
    def test_bfloat16_in_and_out(self):
        q, k, v = (rand(1, 2, 64, 64, seed=s).astype(ml_dtypes.bfloat16) for s in (4, 5, 6))
        out = lpattn.attention(q, k, v, precision="high")
        self.assertEqual(out.dtype, ml_dtypes.bfloat16)
        want = reference(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32))[0]
        np.testing.assert_allclose(out.astype(np.float32), want, atol=2e-2)
        y = lpattn.dequantize(lpattn.quantize(q), "bfloat16")
        self.assertEqual(y.dtype, ml_dtypes.bfloat16)


if __name__ == "__main__":
    unittest.main()
