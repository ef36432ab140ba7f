/* Block quantizers (SPEC 2, SEMANTICS "Quantization details"): known
 * vectors computed by hand, zero and non-finite groups, the qtensor layouts,
 * error bounds, stochastic rounding and Philox. */
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
  /* u(n) = (word n%4 of block n/4) >> 8 * 2^-24 */
  lp_philox4x32_10(77, 5, a);
  CHECK(lp_sr_uniform(77, 22) == (float)(a[2] >> 8) / 16777216.0f, "sr_uniform word selection");
  int bad = 0;
  for (uint64_t n = 0; n < 4096; n++) {
    float u = lp_sr_uniform(0x1234, n);
    bad += !(u >= 0.0f && u < 1.0f);
  }
  CHECK(bad == 0, "u in [0, 1)");
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

/* ---- host tensors --------------------------------------------------------- */
typedef struct {
  lpattn_qtensor q;
  size_t nc, ns, no;
} qbuf;

static void qbuf_init(qbuf *b, lpattn_format f, lpattn_axis ax, int tile, const int64_t shape[4]) {
  memset(b, 0, sizeof *b);
  b->q.format = f, b->q.axis = ax, b->q.tile = tile;
  memcpy(b->q.shape, shape, sizeof b->q.shape);
  if (lpattn_qtensor_sizes(f, ax, tile, shape, &b->nc, &b->ns, &b->no) != LPATTN_OK) abort();
  b->q.codes = malloc(b->nc + 1);
  b->q.scales = malloc(b->ns + 1);
  b->q.outer = malloc(sizeof(float) * (b->no + 1));
  memset(b->q.codes, SENTINEL, b->nc + 1);
  memset(b->q.scales, SENTINEL, b->ns + 1);
  memset(b->q.outer, SENTINEL, sizeof(float) * (b->no + 1));
}

static void qbuf_free(qbuf *b) { free(b->q.codes), free(b->q.scales), free(b->q.outer); }

static int qbuf_equal(const qbuf *a, const qbuf *b) {
  return a->nc == b->nc && !memcmp(a->q.codes, b->q.codes, a->nc) && !memcmp(a->q.scales, b->q.scales, a->ns) &&
         !memcmp(a->q.outer, b->q.outer, sizeof(float) * a->no);
}

static lpattn_quant_params params(lpattn_format f, lpattn_axis ax, int tile, int sr, uint64_t seed) {
  lpattn_quant_params p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p, p.format = f, p.axis = ax, p.tile = tile, p.seed = seed;
  p.rounding = sr ? LPATTN_ROUND_STOCHASTIC : LPATTN_ROUND_NEAREST_EVEN;
  return p;
}

/* A contiguous [B,H,S,D] view (kept local: the test needs only this file's code). */
static lpattn_tensor bhsd(void *data, lpattn_dtype dt, int64_t b, int64_t h, int64_t s, int64_t d) {
  lpattn_tensor t = {data, dt, {b, h, s, d}, {h * s * d, s * d, d, 1}};
  return t;
}

static float *random_bhsd(const int64_t s[4], uint32_t seed) {
  int64_t n = s[0] * s[1] * s[2] * s[3];
  float *x = malloc(sizeof(float) * (size_t)n);
  uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; i++) {
    r ^= r >> 12, r ^= r << 25, r ^= r >> 27;
    float u = (float)((r * 0x2545F4914F6CDD1Dull) >> 40) * 0x1p-24f;
    x[i] = (u - 0.5f) * 8.0f * (1 + (float)(i % 7)); /* uneven magnitudes across groups */
  }
  return x;
}

static uint8_t code_at(const qbuf *b, int64_t i) {
  return b->q.format == LPATTN_FMT_FP8 ? b->q.codes[i] : (uint8_t)(b->q.codes[i / 2] >> (i % 2 * 4) & 0xF);
}

static void test_sizes(void) {
  const int64_t s[4] = {2, 3, 40, 64};
  size_t c, sc, o;
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 0, s, &c, &sc, &o), LPATTN_OK);
  CHECK(c == 2 * 3 * 40 * 32 && sc == 2 * 3 * 40 * 4 && o == 2 * 3 * 40, "nvfp4 D sizes %zu %zu %zu", c, sc, o);
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_MXFP4, LPATTN_AXIS_S, 32, s, &c, &sc, &o), LPATTN_OK);
  CHECK(c == 2 * 3 * 64 * 32 && sc == 2 * 3 * 64 * 2 && o == 0, "mxfp4 S sizes %zu %zu %zu", c, sc, o);
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_FP8, LPATTN_AXIS_S, 64, s, &c, &sc, &o), LPATTN_OK);
  CHECK(c == 2 * 3 * 64 * 64 && sc == 0 && o == 2 * 3 * 1 * 64, "fp8 S sizes %zu %zu %zu", c, sc, o);
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_NVFP4, LPATTN_AXIS_S, 48, s, &c, &sc, &o),
               LPATTN_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(lpattn_qtensor_sizes((lpattn_format)7, LPATTN_AXIS_D, 64, s, &c, &sc, &o),
               LPATTN_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_FP8, (lpattn_axis)2, 64, s, &c, &sc, &o),
               LPATTN_ERR_INVALID_ARGUMENT);
  const int64_t d48[4] = {1, 1, 4, 48}, neg[4] = {1, 0, 4, 64}, huge[4] = {1 << 20, 1 << 20, 1 << 20, 1 << 20};
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, d48, &c, &sc, &o), LPATTN_OK);
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_MXFP4, LPATTN_AXIS_D, 64, d48, &c, &sc, &o),
               LPATTN_ERR_BAD_HEAD_DIM);
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_FP8, LPATTN_AXIS_D, 64, neg, &c, &sc, &o), LPATTN_ERR_BAD_SHAPE);
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_NVFP4, LPATTN_AXIS_S, 64, huge, &c, &sc, &o),
               LPATTN_ERR_SIZE_OVERFLOW);
  const int64_t longs[4] = {1, 1, INT64_MAX - 3, 64};
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_FP8, LPATTN_AXIS_S, 64, longs, &c, &sc, &o),
               LPATTN_ERR_SIZE_OVERFLOW);
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_FP8, LPATTN_AXIS_S, 64, NULL, &c, &sc, &o), LPATTN_ERR_NULL_POINTER);
}

/* The literal nibble order: element 2k low, 2k+1 high. */
static void test_packing(void) {
  const int64_t s[4] = {1, 1, 1, 16};
  float x[16] = {6, 1, -0.5f, 3};
  lpattn_tensor t = {x, LPATTN_F32, {1, 1, 1, 16}, {16, 16, 16, 1}};
  qbuf b;
  qbuf_init(&b, LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, s);
  lpattn_quant_params p = params(LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, 0, 0);
  CHECK_STATUS(lp_host_quantize(&t, &b.q, &p), LPATTN_OK);
  CHECK(b.q.codes[0] == 0x27 && b.q.codes[1] == 0x59 && b.q.codes[2] == 0 && b.q.codes[8] == SENTINEL,
        "packed bytes %#x %#x", b.q.codes[0], b.q.codes[1]);
  qbuf_free(&b);
}

/* Every domain of the layout equals lp_quantize_domain on the gathered
 * values (zero-padded on AXIS_S), and nothing outside the sizes is written. */
static void check_layout(lpattn_format f, lpattn_axis ax, int tile, const int64_t s[4], int sr) {
  const int64_t B = s[0], H = s[1], S = s[2], D = s[3];
  float *x = random_bhsd(s, 7);
  lpattn_tensor t = bhsd(x, LPATTN_F32, B, H, S, D);
  qbuf b;
  qbuf_init(&b, f, ax, tile, s);
  lpattn_quant_params p = params(f, ax, tile, sr, 99);
  CHECK_STATUS(lp_host_quantize(&t, &b.q, &p), LPATTN_OK);
  int G = lp_group_size(f), n = ax == LPATTN_AXIS_D ? (int)D : tile, bad = 0;
  int64_t ntile = (S + tile - 1) / tile, Sp = ntile * tile, ndom = ax == LPATTN_AXIS_D ? B * H * S : B * H * ntile * D;
  lp_quant_cfg c = {f, sr, 99, 0};
  float *buf = malloc(sizeof(float) * (size_t)n);
  int64_t *idx = malloc(sizeof(int64_t) * (size_t)n);
  uint8_t *codes = malloc((size_t)n), sc[64];
  for (int64_t dom = 0; dom < ndom; dom++) {
    int64_t code0, outer_at;
    if (ax == LPATTN_AXIS_D) { /* dom = row of [B][H][S] */
      for (int i = 0; i < n; i++) buf[i] = x[dom * D + i], idx[i] = dom * D + i;
      code0 = dom * D, outer_at = dom;
    } else { /* dom = [B][H][tile][D] */
      int64_t d = dom % D, tt = dom / D % ntile, bh = dom / D / ntile;
      for (int i = 0; i < n; i++) {
        int64_t ss = tt * tile + i;
        buf[i] = ss < S ? x[(bh * S + ss) * D + d] : 0.0f;
        idx[i] = ss < S ? (bh * S + ss) * D + d : 0;
      }
      code0 = (bh * D + d) * Sp + tt * tile, outer_at = dom;
    }
    float o;
    lp_quantize_domain(&c, buf, 1, n, idx, codes, sc, &o);
    for (int i = 0; i < n; i++) bad += code_at(&b, code0 + i) != codes[i];
    for (int g = 0; G && g < n / G; g++) bad += b.q.scales[code0 / G + g] != sc[g];
    if (f != LPATTN_FMT_MXFP4) bad += memcmp(&b.q.outer[outer_at], &o, sizeof o) != 0;
  }
  bad += b.q.codes[b.nc] != SENTINEL || b.q.scales[b.ns] != SENTINEL;
  CHECK(bad == 0, "layout fmt %d axis %d tile %d S %lld sr %d: %d mismatches", f, ax, tile, (long long)S, sr, bad);
  if (ax == LPATTN_AXIS_S && S % tile) { /* padding: zero codes, zero padded groups */
    int pad_ok = 1;
    for (int64_t r = 0; r < B * H * D; r++)
      for (int64_t ss = S; ss < Sp; ss++) pad_ok &= code_at(&b, r * Sp + ss) == 0;
    CHECK(pad_ok, "AXIS_S padding codes are zero");
  }
  free(buf), free(idx), free(codes), free(x);
  qbuf_free(&b);
}

/* BSHD strides, f16 input and SR: the codes only depend on logical values. */
static void test_strided_equals_contiguous(lpattn_format f, lpattn_axis ax) {
  const int64_t s[4] = {2, 3, 40, 32}, B = 2, H = 3, S = 40, D = 32;
  float *x = random_bhsd(s, 3), *xs = malloc(sizeof(float) * (size_t)(B * H * S * D));
  uint16_t *xh = malloc(2 * (size_t)(B * H * S * D));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t q = 0; q < S; q++)
        for (int64_t d = 0; d < D; d++) {
          int64_t i = ((b * H + h) * S + q) * D + d;
          x[i] = lpattn_f16_to_f32(lpattn_f32_to_f16(x[i])); /* f16-exact values */
          xs[((b * S + q) * H + h) * D + d] = x[i];
          xh[i] = lpattn_f32_to_f16(x[i]);
        }
  lpattn_tensor tc = bhsd(x, LPATTN_F32, B, H, S, D);
  lpattn_tensor th = bhsd(xh, LPATTN_F16, B, H, S, D);
  lpattn_tensor ts = {xs, LPATTN_F32, {B, H, S, D}, {S * H * D, D, H * D, 1}};
  for (int sr = 0; sr < 2; sr++) {
    qbuf a, b, c;
    qbuf_init(&a, f, ax, 32, s), qbuf_init(&b, f, ax, 32, s), qbuf_init(&c, f, ax, 32, s);
    lpattn_quant_params p = params(f, ax, 32, sr, 5);
    lp_host_quantize(&tc, &a.q, &p), lp_host_quantize(&ts, &b.q, &p), lp_host_quantize(&th, &c.q, &p);
    CHECK(qbuf_equal(&a, &b), "BSHD == BHSD, fmt %d axis %d sr %d", f, ax, sr);
    CHECK(qbuf_equal(&a, &c), "f16 input == f32 input, fmt %d axis %d sr %d", f, ax, sr);
    qbuf_free(&a), qbuf_free(&b), qbuf_free(&c);
  }
  free(x), free(xs), free(xh);
}

/* quantize -> dequantize within the format's bound, and dequantize writes
 * exactly lp_dequant_elem into strided f32 and rounded f16. */
static void test_roundtrip(lpattn_format f, lpattn_axis ax) {
  const int64_t s[4] = {1, 2, 72, 64}, B = 1, H = 2, S = 72, D = 64;
  float *x = random_bhsd(s, 11);
  lpattn_tensor t = bhsd(x, LPATTN_F32, B, H, S, D);
  qbuf b;
  qbuf_init(&b, f, ax, 64, s);
  lpattn_quant_params p = params(f, ax, 64, 0, 0);
  lp_host_quantize(&t, &b.q, &p);
  float *y = malloc(sizeof(float) * (size_t)(B * H * S * D));
  uint16_t *yh = malloc(2 * (size_t)(B * H * S * D));
  lpattn_tensor ty = {y, LPATTN_F32, {B, H, S, D}, {S * H * D, D, H * D, 1}}; /* BSHD */
  lpattn_tensor th = bhsd(yh, LPATTN_F16, B, H, S, D);
  CHECK_STATUS(lp_host_dequantize(&b.q, &ty), LPATTN_OK);
  CHECK_STATUS(lp_host_dequantize(&b.q, &th), LPATTN_OK);
  int bad = 0, bad16 = 0, G = lp_group_size(f);
  double worst = 0;
  for (int64_t h = 0; h < H; h++)
    for (int64_t q = 0; q < S; q++)
      for (int64_t d = 0; d < D; d++) {
        float xv = x[(h * S + q) * D + d], yv = y[(q * H + h) * D + d];
        bad16 += yh[(h * S + q) * D + d] != lpattn_f32_to_f16(yv);
        /* the group's amax bounds the error: E2M1 steps are at most 1/3
         * of 6 at the top, plus scale rounding / saturation */
        float gmax = 0;
        if (ax == LPATTN_AXIS_D) {
          int64_t g0 = G ? d / G * G : 0, n = G ? G : D;
          for (int64_t k = g0; k < g0 + n; k++) gmax = fmaxf(gmax, fabsf(x[(h * S + q) * D + k]));
        } else {
          int64_t g0 = G ? q / G * G : q / 64 * 64, n = G ? G : 64;
          for (int64_t k = g0; k < g0 + n && k < S; k++) gmax = fmaxf(gmax, fabsf(x[(h * S + k) * D + d]));
        }
        double err = fabs((double)yv - xv), bound = f == LPATTN_FMT_FP8 ? fabsf(xv) / 16.0 + gmax / 448.0 * 0x1p-9
                                                 : f == LPATTN_FMT_NVFP4 ? gmax * (1.0 / 6.0) * (1 + 1.0 / 16)
                                                                         : gmax * 0.5;
        worst = fmax(worst, err / (gmax > 0 ? gmax : 1));
        bad += err > bound * 1.0001 + 1e-30;
      }
  CHECK(bad == 0, "fmt %d axis %d: %d errors over the bound (worst %.3g of amax)", f, ax, bad, worst);
  CHECK(bad16 == 0, "f16 dequant is the rounded f32 one (%d)", bad16);
  free(x), free(y), free(yh);
  qbuf_free(&b);
}

/* A NaN in one token poisons that token's group only; check_finite writes nothing. */
static void test_nonfinite_tensor(lpattn_format f) {
  const int64_t s[4] = {1, 2, 8, 64};
  float *x = random_bhsd(s, 21);
  lpattn_tensor t = bhsd(x, LPATTN_F32, 1, 2, 8, 64);
  qbuf a, b;
  qbuf_init(&a, f, LPATTN_AXIS_D, 64, s), qbuf_init(&b, f, LPATTN_AXIS_D, 64, s);
  lpattn_quant_params p = params(f, LPATTN_AXIS_D, 64, 0, 0);
  lp_host_quantize(&t, &a.q, &p);
  const int64_t row = 1 * 8 + 3; /* h = 1, s = 3 */
  x[row * 64 + 40] = NAN;
  p.check_finite = 1;
  CHECK_STATUS(lp_host_quantize(&t, &b.q, &p), LPATTN_ERR_NONFINITE);
  int untouched = 1;
  for (size_t i = 0; i < b.nc; i++) untouched &= b.q.codes[i] == SENTINEL;
  for (size_t i = 0; i < b.ns; i++) untouched &= b.q.scales[i] == SENTINEL;
  CHECK(untouched, "check_finite writes nothing");
  p.check_finite = 0;
  CHECK_STATUS(lp_host_quantize(&t, &b.q, &p), LPATTN_OK);
  float *y = malloc(sizeof(float) * 2 * 8 * 64);
  lpattn_tensor ty = bhsd(y, LPATTN_F32, 1, 2, 8, 64);
  lp_host_dequantize(&b.q, &ty);
  int G = lp_group_size(f), ok = 1;
  for (int64_t i = 0; i < 2 * 8 * 64; i++) {
    int in_group = i / 64 == row && (G == 0 || (i % 64) / G == 40 / G);
    ok &= in_group == (isnan(y[i]) != 0);
  }
  /* other rows' codes, scales and outer are bitwise those of the clean run */
  int rb = f == LPATTN_FMT_FP8 ? 64 : 32, sb = G ? 64 / G : 0;
  ok &= !memcmp(a.q.codes, b.q.codes, (size_t)(row * rb)) &&
        !memcmp(a.q.codes + (row + 1) * rb, b.q.codes + (row + 1) * rb, (size_t)((15 - row) * rb));
  ok &= !memcmp(a.q.scales, b.q.scales, (size_t)(row * sb));
  CHECK(ok, "fmt %d: NaN poisons its own group only", f);
  free(x), free(y);
  qbuf_free(&a), qbuf_free(&b);
}

/* SR: reproducible for a seed, different for another, unbiased, neighbours only. */
static void test_sr(void) {
  const int64_t s[4] = {1, 1, 64, 256};
  float *x = malloc(sizeof(float) * 64 * 256);
  for (int i = 0; i < 64 * 256; i++) x[i] = i % 16 == 0 ? 6.0f : 0.7f; /* every NVFP4 group: scale ~ 1 */
  lpattn_tensor t = bhsd(x, LPATTN_F32, 1, 1, 64, 256);
  qbuf a, b, c;
  qbuf_init(&a, LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, s), qbuf_init(&b, LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, s),
      qbuf_init(&c, LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, s);
  lpattn_quant_params p = params(LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, 1, 1234);
  lp_host_quantize(&t, &a.q, &p), lp_host_quantize(&t, &b.q, &p);
  p.seed = 1235;
  lp_host_quantize(&t, &c.q, &p);
  CHECK(qbuf_equal(&a, &b), "SR deterministic for a seed");
  CHECK(memcmp(a.q.codes, c.q.codes, a.nc) != 0, "SR differs for another seed");
  float *y = malloc(sizeof(float) * 64 * 256);
  lpattn_tensor ty = bhsd(y, LPATTN_F32, 1, 1, 64, 256);
  lp_host_dequantize(&a.q, &ty);
  double sum = 0;
  int n = 0, off = 0;
  for (int i = 0; i < 64 * 256; i++) {
    if (i % 16 == 0) continue;
    float e = y[i] / (lpattn_e4m3_to_f32(a.q.scales[i / 16]) * a.q.outer[i / 256]);
    off += e != 0.5f && e != 1.0f && fabsf(e - 0.5f) > 1e-6f && fabsf(e - 1.0f) > 1e-6f;
    sum += y[i], n++;
  }
  /* p(up) = 0.4: sd of the mean = 0.5*sqrt(.24/n) ~ 0.0020; allow 5 sd */
  CHECK(fabs(sum / n - 0.7) < 0.01, "SR unbiased: mean %.5f want 0.7", sum / n);
  CHECK(off == 0, "SR left the neighbours 0.5 / 1 %d times", off);
  /* scalar: u from Philox over many n, for FP4 and FP8 */
  double s4 = 0, s8 = 0;
  for (int i = 0; i < 200000; i++) {
    float u = lp_sr_uniform(42, (uint64_t)i);
    s4 += lpattn_e2m1_to_f32(lp_e2m1_encode_sr(-2.3f, u));
    s8 += lpattn_e4m3_to_f32(lp_e4m3_encode_sr(100.3f, u));
  }
  CHECK(fabs(s4 / 200000 + 2.3) < 0.006, "e2m1 SR mean %.5f want -2.3", s4 / 200000);
  CHECK(fabs(s8 / 200000 - 100.3) < 0.045, "e4m3 SR mean %.5f want 100.3", s8 / 200000);
  /* the u of element (b,h,s,d) is that of its logical index, in any layout */
  const int64_t s2[4] = {2, 2, 40, 32};
  float *z = random_bhsd(s2, 9);
  z[0] = 448.0f * 4;
  lpattn_tensor tz = bhsd(z, LPATTN_F32, 2, 2, 40, 32);
  qbuf q8;
  qbuf_init(&q8, LPATTN_FMT_FP8, LPATTN_AXIS_S, 32, s2);
  lpattn_quant_params p8 = params(LPATTN_FMT_FP8, LPATTN_AXIS_S, 32, 1, 77);
  lp_host_quantize(&tz, &q8.q, &p8);
  int bad = 0;
  for (int64_t bh = 0; bh < 4; bh++)
    for (int64_t q = 0; q < 40; q++)
      for (int64_t d = 0; d < 32; d++) {
        int64_t n = (bh * 40 + q) * 32 + d;
        float sc = q8.q.outer[(bh * 2 + q / 32) * 32 + d];
        bad += q8.q.codes[(bh * 32 + d) * 64 + q] != lp_e4m3_encode_sr(z[n] / sc, lp_sr_uniform(77, (uint64_t)n));
      }
  CHECK(bad == 0, "SR index is the logical [B,H,S,D] index (%d)", bad);
  free(x), free(y), free(z);
  qbuf_free(&a), qbuf_free(&b), qbuf_free(&c), qbuf_free(&q8);
}

int main(void) {
  test_philox();
  test_nvfp4_known();
  test_nvfp4_ties();
  test_mxfp4_known();
  test_fp8_known();
  test_zero_and_nonfinite_domain();
  test_sizes();
  test_packing();
  const lpattn_format fmts[3] = {LPATTN_FMT_NVFP4, LPATTN_FMT_MXFP4, LPATTN_FMT_FP8};
  const int64_t s1[4] = {2, 3, 5, 64}, s2[4] = {1, 2, 40, 16}, s3[4] = {2, 1, 96, 8};
  for (int i = 0; i < 3; i++) {
    check_layout(fmts[i], LPATTN_AXIS_D, 64, s1, 0);
    check_layout(fmts[i], LPATTN_AXIS_D, 64, s1, 1);
    check_layout(fmts[i], LPATTN_AXIS_S, 32, s2, 0);
    check_layout(fmts[i], LPATTN_AXIS_S, 64, s2, 1);
    check_layout(fmts[i], LPATTN_AXIS_S, 32, s3, 1);
    test_strided_equals_contiguous(fmts[i], LPATTN_AXIS_D);
    test_strided_equals_contiguous(fmts[i], LPATTN_AXIS_S);
    test_roundtrip(fmts[i], LPATTN_AXIS_D);
    test_roundtrip(fmts[i], LPATTN_AXIS_S);
    test_nonfinite_tensor(fmts[i]);
  }
  test_sr();
  return test_finish();
}
