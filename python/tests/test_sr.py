"""SPEC 2's stochastic rounding against an independent NumPy implementation:
Philox4x32-10 (checked on Random123's known-answer vectors), the random byte
r of element n (byte n % 4 of word (n / 4) % 4 of the block at counter
n / 16, key = seed) and the rule "x rounds to b iff (2r + 1) * 2^-9 < t",
element by element through lpattn.quantize's stochastic mode (FP8 rows
whose scale is exactly 1, so every element's neighbours a < x < b and t are
known exactly); and the mean: E[round(x)] is within 2^-9 (b - a) of x."""
import unittest

import numpy as np

import lpattn

M32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(ctr, key):
    """ctr: 4 uint64 arrays holding 32-bit values (c0..c3); key: (k0, k1)."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) & M32 for c in ctr)
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(0x9E3779B9)) & M32, (k1 + np.uint64(0xBB67AE85)) & M32
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2  # < 2^64: no wrap
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & M32,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & M32)
    return c0, c1, c2, c3


def sr_bytes(seed, n):
    """SPEC 2's random byte of each logical index n (uint64 array)."""
    n = np.asarray(n, dtype=np.uint64)
    ctr = n >> np.uint64(4)
    w = np.stack(philox4x32_10((ctr & M32, ctr >> np.uint64(32), 0 * n, 0 * n),
                               (seed & 0xFFFFFFFF, seed >> 32)))
    word = w[(n >> np.uint64(2)) & np.uint64(3), np.arange(n.size)]
    return ((word >> (np.uint64(8) * (n & np.uint64(3)))) & np.uint64(0xFF)).astype(np.int64)


class StochasticRounding(unittest.TestCase):
    def test_philox_known_answers(self):
        # Random123 kat_vectors, philox4x32 10
        kat = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
               ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
               ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
                (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
        for ctr, key, want in kat:
            got = philox4x32_10([np.array([c], dtype=np.uint64) for c in ctr], key)
            self.assertEqual(tuple(int(g[0]) for g in got), want)

    def test_bits_per_element(self):
        """FP8 rows of D = 64 with one 448 (outer scale exactly 1): element n
        of [B, H, S, D] is a + t (b - a) with t = m / 64, or its negative."""
        B, H, S, D = 1, 2, 48, 64
        N = B * H * S * D
        rng = np.random.default_rng(3)
        # E4M3 neighbours in [1, 448): a = 2^e (1 + j / 8), step 2^e / 8
        e = rng.integers(0, 8, N)
        j = rng.integers(0, 8, N)
        m = rng.integers(1, 64, N)
        a = np.ldexp(1.0 + j / 8.0, e)
        step = np.ldexp(1.0 / 8.0, e)
        mag = (a + m / 64.0 * step).astype(np.float32)
        neg = rng.integers(0, 2, N).astype(bool)
        x = np.where(neg, -mag, mag).reshape(B, H, S, D)
        x[..., 0] = 448.0  # the row's amax: scale 448 / 448 = 1
        for seed in (0, 7, 0x123456789ABCDEF0):
            y = lpattn.dequantize(lpattn.quantize(x, "fp8", axis="d", rounding="stochastic", seed=seed))
            r = sr_bytes(seed, np.arange(N))
            # x > 0: up (to a + step) iff u < t = m / 64; x < 0: t is measured
            # from -(a + step), so toward zero (to -a) iff u < 1 - m / 64
            t = np.where(neg, 1.0 - m / 64.0, m / 64.0)
            go_b = (2 * r + 1) / 512.0 < t
            want_mag = np.where(go_b != neg, a + step, a)
            want = np.where(neg, -want_mag, want_mag).reshape(B, H, S, D)
            want[..., 0] = 448.0
            bad = np.count_nonzero(y != want)
            self.assertEqual(bad, 0, f"seed {seed}: {bad} of {N} elements differ from the 8-bit rule")

    def test_mean_within_granularity(self):
        """Over all 256 bytes the rounding probability is #{r: (2r + 1) / 512 < t} / 256,
        within 2^-9 of t; over many elements the quantizer's mean follows it."""
        t = np.arange(1, 64) / 64.0
        p = np.array([np.count_nonzero((2 * np.arange(256) + 1) / 512.0 < ti) / 256.0 for ti in t])
        self.assertLessEqual(float(np.max(np.abs(p - t))), 2.0 ** -9)
        # the quantizer: 0.7 between 0.5 and 1 (NVFP4 grid, scale ~ 1): mean 0.5 + 0.5 p(0.4)
        S, D = 256, 256
        x = np.full((1, 1, S, D), 0.7, dtype=np.float32)
        x[..., ::16] = 6.0
        y = lpattn.dequantize(lpattn.quantize(x, "nvfp4", axis="d", rounding="stochastic", seed=11))
        vals = y.reshape(-1, 16)[:, 1:]
        p_up = np.count_nonzero((2 * np.arange(256) + 1) / 512.0 < np.float32(0.4)) / 256.0
        # 61440 draws with p ~ 0.4: sd of the mean ~ 0.5 * 0.002; allow 5 sd
        self.assertLess(abs(float(vals.mean()) - (0.5 + 0.5 * p_up)), 0.005)
        self.assertLess(abs(0.5 * p_up - 0.2), 2.0 ** -9)


if __name__ == "__main__":
    unittest.main()
