/* Block quantizers over host tensors (SPEC 2): qtensor sizes and packing,
 * every domain of the layout against lp_quantize_domain, strides, round trips,
 * non-finite tokens and stochastic rounding. Scalar vectors: test_quant.c. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "formats.h"
#include "testutil.h"

#define SENTINEL 0xAB

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
