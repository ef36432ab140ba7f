/* Block quantizers (SPEC 2, SEMANTICS "Quantization details"): Philox, known
 * vectors computed by hand, exact ties, zero and non-finite groups. The host
 * tensor layouts, error bounds and stochastic rounding: test_quant_tensor.c. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "formats.h"
#include "testutil.h"

#define SENTINEL 0xAB

static lp_quant_cfg cfg_of(lpattn_format f) {
  lp_quant_cfg c = {f, 0, 0, 0};
  return c;
}

static int codes_equal(const uint8_t *got, const uint8_t *want, int n, const char *what) {
  int bad = 0;
  for (int i = 0; i < n; i++)
    if (got[i] != want[i] && bad++ < 4) fprintf(stderr, "  %s[%d] = %#x, want %#x\n", what, i, got[i], want[i]);
  return bad == 0;
}

/* ---- Philox --------------------------------------------------------------- */
static void test_philox(void) {
  /* Random123 kat_vectors, philox4x32 10 */
  static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                     {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                     {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
  static const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
  static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                      {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                      {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
  for (int i = 0; i < 3; i++) {
    uint32_t out[4];
    lp_philox4x32_10_block(ctr[i], key[i], out);
    CHECK(memcmp(out, want[i], sizeof out) == 0, "philox KAT %d: %08x %08x %08x %08x", i, out[0], out[1],
          out[2], out[3]);
  }
  /* the 64-bit interface: key = (k0 low, k1 high), counter = (c0 low, c1 high, 0, 0) */
  uint32_t a[4], b[4];
  const uint32_t c2[4] = {0x243f6a88u, 0x85a308d3u, 0, 0}, k2[2] = {0xa4093822u, 0x299f31d0u};
  lp_philox4x32_10(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, a);
  lp_philox4x32_10_block(c2, k2, b);
  CHECK(memcmp(a, b, sizeof a) == 0, "64-bit key/counter split");
  lp_philox4x32_10(0, 0, a);
  CHECK(a[0] == 0x6627e8d5u && a[3] == 0x9b00dbd8u, "philox zero vector via 64-bit API");
  /* SPEC 2: r(n) = byte n % 4 of word (n / 4) % 4 of block n / 16, u = (2r + 1) * 2^-9 */
  lp_philox4x32_10(77, 5, a);
  CHECK(lp_sr_byte(77, 5 * 16 + 9) == ((a[2] >> 8) & 0xFFu), "sr_byte word and byte selection");
  CHECK(lp_sr_uniform(77, 5 * 16 + 9) == (float)(2 * ((a[2] >> 8) & 0xFFu) + 1) / 512.0f, "sr_uniform of the byte");
  int bad = 0;
  for (uint64_t n = 0; n < 4096; n++) {
    uint32_t w[4];
    lp_philox4x32_10(0x1234, n >> 4, w);
    const uint32_t r = (w[(n >> 2) & 3] >> (8 * (n & 3))) & 0xFFu;
    float u = lp_sr_uniform(0x1234, n);
    bad += !(u > 0.0f && u < 1.0f) || lp_sr_byte(0x1234, n) != r || u * 512.0f != (float)(2 * r + 1);
  }
  CHECK(bad == 0, "u = (2r + 1) * 2^-9 of the byte r of n (%d)", bad);
}

/* SPEC 2's rule: x in [a, b) rounds to b iff (2r + 1) * 2^-9 < t = (x - a) / (b - a);
 * over the 256 bytes, E[round(x)] is within 2^-9 (b - a) of x (both encoders, both signs). */
static void test_sr_rule(void) {
  int bad = 0, far = 0;
  for (int k = 0; k < 4000; k++) {
    const int fp8 = k & 1;
    /* x on a fine grid between E2M1 (0..6) or E4M3 (2^-9..448) values, either sign */
    const float mag = fp8 ? ldexpf(1.0f + (float)(k % 997) / 997.0f, (k / 8) % 16 - 7) : (float)(k % 1201) / 200.0f;
    const float x = (k & 2) ? -mag : mag;
    const float ax = fabsf(x);
    float lo = 0.0f, hi = 0.0f; /* the grid neighbours of |x| by search */
    for (int c = 0; c < (fp8 ? 0x7f : 8); c++) {
      const float v = fp8 ? lpattn_e4m3_to_f32((uint8_t)c) : lpattn_e2m1_to_f32((uint8_t)c);
      if (v <= ax) lo = v;
      if (v > ax && hi == 0.0f) hi = v;
    }
    if (hi == 0.0f || lo == ax) continue; /* saturated or on the grid: no rounding */
    const float a = x < 0 ? -hi : lo, b = x < 0 ? -lo : hi, t = (x - a) / (b - a);
    double sum = 0.0;
    int ups = 0;
    for (uint32_t r = 0; r < 256; r++) {
      const float u = (float)(2 * r + 1) * 0x1p-9f;
      const float y = fp8 ? lpattn_e4m3_to_f32(lp_e4m3_encode_sr(x, u)) : lpattn_e2m1_to_f32(lp_e2m1_encode_sr(x, u));
      const int to_b = (float)(2 * r + 1) * 0x1p-9f < t;
      bad += y != (to_b ? b : a);
      ups += to_b, sum += y;
    }
    far += fabs(sum / 256.0 - (double)x) > 0x1p-9 * (double)(b - a) * (1.0 + 1e-6) ||
           fabs(ups / 256.0 - (double)t) > 0x1p-9;
  }
  CHECK(bad == 0, "SR rounds to b iff (2r + 1) * 2^-9 < t (%d)", bad);
  CHECK(far == 0, "SR mean within 2^-9 (b - a) of x (%d)", far);
}

/* ---- known vectors ---------------------------------------------------------- */
static void test_nvfp4_known(void) {
  /* group 0: amax 6 -> scale (6/6)/outer = 448 (0x7E), s*outer ~ 1: the grid itself.
   * group 1: amax 1 -> 74.67 -> E4M3 72 (0x69), s*outer = 72*6/2688 = 0.160714.
   * group 2: amax 1e-6 -> scale rounds to 0 -> zero codes. group 3: zeros. */
  float x[64] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.5f, -1, -1.5f, -2, -3, -4, -6, 0.3f,
                 1.0f, -1.0f, 0.5f, 0.4f, 0.25f, 0.1f, -0.2f, 0.7f, 0.85f, 0.05f, 0.03f, -0.35f, 0.6f, 0.3f, -0.45f, 0};
  for (int i = 32; i < 48; i++) x[i] = i % 2 ? 1e-6f : -5e-7f;
  static const uint8_t want[64] = {0, 1, 2, 3, 4, 5, 6, 7, 0x9, 0xA, 0xB, 0xC, 0xD, 0xE, 0xF, 1,
                                   7, 0xF, 5, 4, 3, 1, 0xA, 6, 7, 1, 0, 0xC, 6, 4, 0xD, 0};
  static const uint8_t want_sc[4] = {0x7E, 0x69, 0x00, 0x00};
  uint8_t codes[64], sc[4];
  float outer;
  lp_quant_cfg c = cfg_of(LPATTN_FMT_NVFP4);
  CHECK(lp_quantize_domain(&c, x, 1, 64, NULL, codes, sc, &outer) == 0, "nvfp4 finite");
  CHECK(codes_equal(codes, want, 64, "nvfp4 codes"), "nvfp4 known codes");
  CHECK(codes_equal(sc, want_sc, 4, "nvfp4 scales"), "nvfp4 known scales");
  CHECK(outer == 6.0f / 2688.0f, "nvfp4 outer %a", outer);
  float y[64];
  lp_dequantize_domain(LPATTN_FMT_NVFP4, codes, sc, outer, 64, y);
  CHECK(y[18] == (3.0f * 72.0f) * outer && y[14] == (-6.0f * 448.0f) * outer && y[40] == 0.0f,
        "nvfp4 dequant = (e*s)*outer");
  /* strided: the same values every 3rd float */
  float xs[64 * 3];
  for (int i = 0; i < 64; i++) xs[3 * i] = x[i], xs[3 * i + 1] = 1e9f, xs[3 * i + 2] = NAN;
  uint8_t codes2[64], sc2[4];
  float outer2;
  lp_quantize_domain(&c, xs, 3, 64, NULL, codes2, sc2, &outer2);
  CHECK(!memcmp(codes, codes2, 64) && !memcmp(sc, sc2, 4) && outer2 == outer, "nvfp4 domain stride");
}

/* Exact ties inside a block: amax 2.625 = 21 * 2^-3 makes outer = 2^-10, so
 * every s * outer and x below is exact. Group 0: s = 448, s*outer = 0.4375;
 * group 1: amax 1 -> 170.67 -> s = 176, s*outer = 0.171875. Ties go even. */
static void test_nvfp4_ties(void) {
  float x[32] = {2.625f, 3.5f * 0.4375f, 0.75f * 0.4375f, 1.75f * 0.4375f, 2.5f * 0.4375f, 5.0f * 0.4375f,
                 -0.25f * 0.4375f, -1.25f * 0.4375f};
  x[16] = 1.0f, x[17] = 3.5f * 0.171875f, x[18] = 0.75f * 0.171875f, x[19] = -5.0f * 0.171875f;
  uint8_t want[32] = {7, 6, 2, 4, 4, 6, 0x8, 0xA};
  want[16] = 7, want[17] = 6, want[18] = 2, want[19] = 0xE;
  uint8_t codes[32], sc[2];
  float outer;
  lp_quant_cfg c = cfg_of(LPATTN_FMT_NVFP4);
  lp_quantize_domain(&c, x, 1, 32, NULL, codes, sc, &outer);
  CHECK(outer == 0x1p-10f && sc[0] == 0x7E && sc[1] == 0x73, "tie domain: outer %a scales %#x %#x", outer, sc[0],
        sc[1]);
  CHECK(codes_equal(codes, want, 32, "tie codes"), "nvfp4 ties go to the even code");
}

static void test_mxfp4_known(void) {
  /* group 0: amax 5 -> floor(log2 5) - 2 = 0 -> code 127, scale 1; ties go even.
   * group 1: amax 0.1 = 1.6 * 2^-4 -> 2^-6, code 121. */
  float x[64] = {5.0f, 2.5f, -0.25f, 1.25f, 3.5f, 0.75f, 1.75f, 4.9f, -5.0f, 0.1f};
  x[32] = 0.1f, x[33] = 0.05f, x[34] = -0.02f, x[35] = 0.03f;
  uint8_t want[64] = {6, 4, 0x8, 2, 6, 2, 4, 6, 0xE, 0};
  want[32] = 7, want[33] = 5, want[34] = 0xB, want[35] = 4; /* 6.4, 3.2, -1.28, 1.92 */
  uint8_t codes[64], sc[2];
  float outer;
  lp_quant_cfg c = cfg_of(LPATTN_FMT_MXFP4);
  lp_quantize_domain(&c, x, 1, 64, NULL, codes, sc, &outer);
  CHECK(codes_equal(codes, want, 64, "mxfp4 codes"), "mxfp4 known codes");
  CHECK(sc[0] == 127 && sc[1] == 121 && outer == 1.0f, "mxfp4 scales %d %d", sc[0], sc[1]);
  /* amax 7: floor rule 2^0 clips 7 to 6; round-up 2^ceil(log2(7/6)) = 2 gives 3.5 -> 4 */
  float z[32] = {7.0f, 6.0f};
  lp_quantize_domain(&c, z, 1, 32, NULL, codes, sc, &outer);
  CHECK(sc[0] == 127 && codes[0] == 7 && codes[1] == 7, "mxfp4 floor rule clips");
  c.mx_round_up = 1;
  lp_quantize_domain(&c, z, 1, 32, NULL, codes, sc, &outer);
  CHECK(sc[0] == 128 && codes[0] == 6 && codes[1] == 5, "mxfp4 round-up rule: %d %d %d", sc[0], codes[0], codes[1]);
  z[0] = 6.0f; /* exact power of two after /6: ceil keeps it */
  lp_quantize_domain(&c, z, 1, 32, NULL, codes, sc, &outer);
  CHECK(sc[0] == 127 && codes[0] == 7, "mxfp4 round-up at a power of two");
  z[0] = 0.1f, z[1] = 0; /* 0.1/6 = 2^-5.9 -> 2^-5 */
  lp_quantize_domain(&c, z, 1, 32, NULL, codes, sc, &outer);
  CHECK(sc[0] == 122, "mxfp4 round-up 0.1: %d", sc[0]);
  /* tiny amax: the scale code clamps at 0 (2^-127) */
  c.mx_round_up = 0;
  z[0] = 0x1.8p-126f; /* floor(log2) - 2 + 127 = -1 */
  lp_quantize_domain(&c, z, 1, 32, NULL, codes, sc, &outer);
  CHECK(sc[0] == 0 && codes[0] == 5 && lp_dequant_elem(LPATTN_FMT_MXFP4, codes[0], sc[0], 1.0f) == 0x1.8p-126f,
        "mxfp4 clamps scale at code 0: %d %d", sc[0], codes[0]);
}

static void test_fp8_known(void) {
  /* amax 448 -> scale 1: the codes are E4M3 of x (17 is a tie -> 16) */
  float x[8] = {448, -1, 0.5f, 300, 17, -0.001f, 0, 1};
  static const uint8_t want[8] = {0x7E, 0xB8, 0x30, 0x79, 0x58, 0x81, 0x00, 0x38};
  uint8_t codes[8];
  float scale;
  lp_quant_cfg c = cfg_of(LPATTN_FMT_FP8);
  CHECK(lp_quantize_domain(&c, x, 1, 8, NULL, codes, NULL, &scale) == 0, "fp8 finite");
  CHECK(scale == 1.0f && codes_equal(codes, want, 8, "fp8 codes"), "fp8 known, scale %g", scale);
  /* amax 2 -> scale 2/448: 1 -> 224 (0x76), 2 -> 448, -0.5 -> -112 (0xEE) */
  float z[4] = {1, 2, -0.5f, 0};
  static const uint8_t wz[4] = {0x76, 0x7E, 0xEE, 0};
  lp_quantize_domain(&c, z, 1, 4, NULL, codes, NULL, &scale);
  CHECK(scale == 2.0f / 448.0f && codes_equal(codes, wz, 4, "fp8 codes 2"), "fp8 known 2");
  CHECK(lp_dequant_elem(LPATTN_FMT_FP8, 0x76, 0, scale) == 224.0f * scale, "fp8 dequant");
}

static void test_zero_and_nonfinite_domain(void) {
  uint8_t codes[64], sc[4];
  float outer, x[64] = {0};
  lp_quant_cfg c = cfg_of(LPATTN_FMT_NVFP4);
  memset(codes, SENTINEL, sizeof codes), memset(sc, SENTINEL, sizeof sc);
  lp_quantize_domain(&c, x, 1, 64, NULL, codes, sc, &outer);
  int zero = outer == 0.0f;
  for (int i = 0; i < 64; i++) zero &= codes[i] == 0;
  for (int g = 0; g < 4; g++) zero &= sc[g] == 0;
  CHECK(zero, "nvfp4 zero domain: outer 0, scales 0x00, codes 0");
  c.format = LPATTN_FMT_MXFP4;
  lp_quantize_domain(&c, x, 1, 64, NULL, codes, sc, &outer);
  CHECK(sc[0] == 0 && sc[1] == 0 && codes[5] == 0, "mxfp4 zero groups");
  c.format = LPATTN_FMT_FP8;
  lp_quantize_domain(&c, x, 1, 64, NULL, codes, NULL, &outer);
  CHECK(outer == 0.0f && codes[7] == 0, "fp8 zero domain");

  /* a NaN / inf poisons only its own group; the outer scale stays finite */
  for (int i = 0; i < 64; i++) x[i] = (float)(i % 13) * 0.37f - 2.0f;
  uint8_t ref[64], rsc[4];
  float router;
  c.format = LPATTN_FMT_NVFP4;
  lp_quantize_domain(&c, x, 1, 64, NULL, ref, rsc, &router);
  static const float bads[3] = {NAN, INFINITY, -INFINITY};
  for (int k = 0; k < 3; k++) {
    float xb[64];
    memcpy(xb, x, sizeof xb);
    xb[20] = bads[k];
    float keep = fabsf(x[20]);
    int ok = lp_quantize_domain(&c, xb, 1, 64, NULL, codes, sc, &outer) == 1;
    ok &= sc[1] == 0x7F && sc[0] == rsc[0] && sc[2] == rsc[2] && sc[3] == rsc[3];
    for (int i = 16; i < 32; i++) ok &= codes[i] == 0;
    ok &= !memcmp(codes, ref, 16) && !memcmp(codes + 32, ref + 32, 32);
    /* x[20] is not the domain amax, so outer is unchanged */
    ok &= keep < router * 2688.0f && outer == router;
    float y[64];
    lp_dequantize_domain(LPATTN_FMT_NVFP4, codes, sc, outer, 64, y);
    for (int i = 0; i < 64; i++) ok &= (i >= 16 && i < 32) == (isnan(y[i]) != 0);
    CHECK(ok, "nvfp4 non-finite %g poisons its group only", bads[k]);
  }
  c.format = LPATTN_FMT_MXFP4;
  x[40] = NAN;
  CHECK(lp_quantize_domain(&c, x, 1, 64, NULL, codes, sc, &outer) == 1 && sc[1] == 0xFF && sc[0] != 0xFF,
        "mxfp4 NaN group scale 0xFF");
  c.format = LPATTN_FMT_FP8;
  CHECK(lp_quantize_domain(&c, x, 1, 64, NULL, codes, NULL, &outer) == 1 && isnan(outer) && codes[0] == 0,
        "fp8 NaN domain scale");
}

int main(void) {
  test_philox();
  test_sr_rule();
  test_nvfp4_known();
  test_nvfp4_ties();
  test_mxfp4_known();
  test_fp8_known();
  test_zero_and_nonfinite_domain();
  return test_finish();
}
