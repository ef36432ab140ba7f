/* Block quantizers (SPEC 2, SEMANTICS "Quantization details"): Philox for
 * stochastic rounding, one quantization domain at a time, and the host
 * tensor quantizer of the ref and cpu backends. Every float operation is
 * IEEE f32 in the order the semantics page writes it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "error.h"
#include "formats.h"

/* ---- Philox4x32-10 (Salmon et al., SC'11) -------------------------------- */
void lp_philox4x32_10_block(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r) { /* Weyl key schedule between rounds */
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

void lp_philox4x32_10(uint64_t key, uint64_t counter, uint32_t out[4]) {
  const uint32_t c[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
  const uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
  lp_philox4x32_10_block(c, k, out);
}

uint32_t lp_sr_byte(uint64_t seed, uint64_t n) {
  uint32_t w[4];
  lp_philox4x32_10(seed, n / 16, w);
  return (w[(n / 4) % 4] >> (8 * (n % 4))) & 0xFFu;
}

/* (2r + 1) * 2^-9: 9 bits, exact in f32, in (0, 1); x rounds up iff u < t. */
float lp_sr_uniform(uint64_t seed, uint64_t n) { return (float)(2 * lp_sr_byte(seed, n) + 1) * 0x1p-9f; }

int lp_group_size(lpattn_format f) {
  return f == LPATTN_FMT_NVFP4 ? 16 : f == LPATTN_FMT_MXFP4 ? 32 : 0;
}

/* ---- one domain ------------------------------------------------------------ */
static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

/* E8M0 code of an MXFP4 group with finite amax > 0, read off the exponent
 * bits: floor rule 2^(floor(log2 amax) - 2); round-up rule 2^ceil(log2(amax/6)). */
static uint8_t mx_scale_code(float amax, int round_up) {
  if (!round_up) {
    int field = (int)(f32_bits(amax) >> 23);
    return (uint8_t)(field > 2 ? field - 2 : 0);
  }
  uint32_t r = f32_bits(amax / 6.0f);
  int field = (int)(r >> 23);
  uint32_t frac = r & 0x7FFFFFu;
  /* subnormal r = frac * 2^-149: ceil(log2 r) + 127 is 1 only above 2^-127 */
  int code = field ? field + (frac != 0) : (frac > 0x400000u);
  return (uint8_t)(code > 254 ? 254 : code);
}

static float sr_u(const lp_quant_cfg *cfg, const int64_t *sr_index, int i) {
  return cfg->stochastic ? lp_sr_uniform(cfg->seed, (uint64_t)(sr_index ? sr_index[i] : i)) : 0.0f;
}

static uint8_t enc_e2m1(const lp_quant_cfg *cfg, float v, const int64_t *sr_index, int i) {
  return cfg->stochastic ? lp_e2m1_encode_sr(v, sr_u(cfg, sr_index, i)) : lpattn_f32_to_e2m1(v);
}

static uint8_t enc_e4m3(const lp_quant_cfg *cfg, float v, const int64_t *sr_index, int i) {
  return cfg->stochastic ? lp_e4m3_encode_sr(v, sr_u(cfg, sr_index, i)) : lpattn_f32_to_e4m3(v);
}

/* amax of the finite values of x[i0..i1) (stride s); *bad = 1 if any is not. */
static float finite_amax(const float *x, int64_t s, int i0, int i1, int *bad) {
  float m = 0.0f;
  for (int i = i0; i < i1; i++) {
    float v = x[i * s];
    if (!isfinite(v))
      *bad = 1;
    else if (fabsf(v) > m)
      m = fabsf(v);
  }
  return m;
}

/* Without sr_index, element i of the domain draws u for n = i. */
int lp_quantize_domain(const lp_quant_cfg *cfg, const float *x, int64_t stride, int n,
                       const int64_t *sr_index, uint8_t *codes, uint8_t *scales, float *outer) {
  int G = lp_group_size(cfg->format), any_bad = 0;
  if (cfg->format == LPATTN_FMT_FP8) {
    float amax = finite_amax(x, stride, 0, n, &any_bad);
    float scale = any_bad ? NAN : amax / 448.0f;
    *outer = scale;
    for (int i = 0; i < n; i++)
      codes[i] = scale > 0.0f ? enc_e4m3(cfg, x[i * stride] / scale, sr_index, i) : 0;
    return any_bad;
  }
  int ignored = 0;
  float o = cfg->format == LPATTN_FMT_NVFP4 ? finite_amax(x, stride, 0, n, &ignored) / 2688.0f
                                            : 1.0f;
  *outer = o;
  /* A last group shorter than G (a head dim that is no multiple of G) is
   * quantized as if zero-padded: the zeros change no amax (SEMANTICS "Head
   * dimensions"). */
  for (int g = 0; g < (n + G - 1) / G; g++) {
    int bad = 0, i0 = g * G, i1 = i0 + G < n ? i0 + G : n;
    float amax = finite_amax(x, stride, i0, i1, &bad);
    uint8_t sc;
    float so; /* the divisor of the elements: s * outer, or the E8M0 scale */
    if (bad) {
      sc = cfg->format == LPATTN_FMT_NVFP4 ? 0x7F : 0xFF;
      so = 0.0f;
      any_bad = 1;
    } else if (cfg->format == LPATTN_FMT_NVFP4) {
      sc = o > 0.0f ? lpattn_f32_to_e4m3((amax / 6.0f) / o) : 0x00;
      so = lpattn_e4m3_to_f32(sc) * o;
    } else {
      sc = amax > 0.0f ? mx_scale_code(amax, cfg->mx_round_up) : 0x00;
      so = amax > 0.0f ? lpattn_e8m0_to_f32(sc) : 0.0f;
    }
    scales[g] = sc;
    /* so == 0: a zero group, or a scale that decodes (or underflows) to 0 */
    for (int i = i0; i < i1; i++) codes[i] = so > 0.0f ? enc_e2m1(cfg, x[i * stride] / so, sr_index, i) : 0;
  }
  return any_bad;
}

float lp_dequant_elem(lpattn_format format, uint8_t code, uint8_t scale_code, float outer) {
  switch (format) {
    case LPATTN_FMT_NVFP4: return (lpattn_e2m1_to_f32(code) * lpattn_e4m3_to_f32(scale_code)) * outer;
    case LPATTN_FMT_MXFP4: return (lpattn_e2m1_to_f32(code) * lpattn_e8m0_to_f32(scale_code)) * outer;
    default: return lpattn_e4m3_to_f32(code) * outer; /* FP8: the group scale is 1 */
  }
}

void lp_dequantize_domain(lpattn_format format, const uint8_t *codes, const uint8_t *scales,
                          float outer, int n, float *y) {
  int G = lp_group_size(format);
  for (int i = 0; i < n; i++) y[i] = lp_dequant_elem(format, codes[i], G ? scales[i / G] : 0, outer);
}

/* ---- sizes of a qtensor ---------------------------------------------------- */
static int mul_ok(int64_t a, int64_t b, int64_t *r) {
  if (a != 0 && b > INT64_MAX / a) return 0;
  *r = a * b;
  return 1;
}

static int to_size(int64_t v, size_t *out) {
  if ((uint64_t)v > (uint64_t)SIZE_MAX) return 0;
  if (out) *out = (size_t)v;
  return 1;
}

lpattn_status lpattn_qtensor_sizes(lpattn_format format, lpattn_axis axis, int tile,
                                   const int64_t shape[4], size_t *codes_bytes,
                                   size_t *scales_bytes, size_t *outer_count) {
  lp_err_clear();
  if (!shape) return lp_fail(LPATTN_ERR_NULL_POINTER, "shape is NULL");
  if ((unsigned)format > LPATTN_FMT_FP8 || (unsigned)axis > LPATTN_AXIS_S)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "format = %d, axis = %d: expected a format 0-2 and axis 0-1",
                   (int)format, (int)axis);
  if (axis == LPATTN_AXIS_S && (tile <= 0 || tile % 32))
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "tile = %d, expected a positive multiple of 32", tile);
  for (int i = 0; i < 4; i++)
    if (shape[i] <= 0)
      return lp_fail(LPATTN_ERR_BAD_SHAPE, "shape[%d] = %lld, expected > 0", i, (long long)shape[i]);
  int64_t G = lp_group_size(format), B = shape[0], H = shape[1], S = shape[2], D = shape[3];
  if (axis == LPATTN_AXIS_D && G && D % G)
    return lp_fail(LPATTN_ERR_BAD_HEAD_DIM, "shape[3] = %lld is not a multiple of the group size %lld",
                   (long long)D, (long long)G);
  int64_t bh, bhs, all, rows, len, ndom;
  const lpattn_status ovf = LPATTN_ERR_SIZE_OVERFLOW;
  /* every logical index (the SR counter) must fit too */
  if (!mul_ok(B, H, &bh) || !mul_ok(bh, S, &bhs) || !mul_ok(bhs, D, &all))
    return lp_fail(ovf, "shape: the element count overflows int64");
  if (axis == LPATTN_AXIS_D) {
    rows = bhs; /* one domain per token */
    len = D;
    ndom = bhs;
  } else {
    if (S > INT64_MAX - (tile - 1)) return lp_fail(ovf, "shape[2] padded to the tile overflows int64");
    len = (S + tile - 1) / tile * tile; /* Sp */
    if (!mul_ok(bh, D, &rows) || !mul_ok(rows, len / tile, &ndom))
      return lp_fail(ovf, "shape: the scale count overflows int64");
  }
  int64_t codes, scales = 0;
  if (!mul_ok(rows, len, &codes)) return lp_fail(ovf, "shape: the code count overflows int64");
  if (format != LPATTN_FMT_FP8) {
    scales = codes / G;
    codes /= 2; /* E2M1: two per byte; len is even */
  }
  if (!to_size(codes, codes_bytes) || !to_size(scales, scales_bytes) ||
      !to_size(format == LPATTN_FMT_MXFP4 ? 0 : ndom, outer_count))
    return lp_fail(ovf, "shape: the byte counts overflow size_t");
  return LPATTN_OK;
}

/* ---- host tensor quantizer ------------------------------------------------- */
static int all_finite(const lpattn_tensor *x) {
  for (int64_t b = 0; b < x->shape[0]; b++)
    for (int64_t h = 0; h < x->shape[1]; h++)
      for (int64_t s = 0; s < x->shape[2]; s++)
        for (int64_t d = 0; d < x->shape[3]; d++)
          if (!isfinite(lp_load_f32(x->data, x->dtype, lp_off4(x, b, h, s, d)))) return 0;
  return 1;
}

/* Where one domain's codes, group scales and outer scale go. */
static void store_domain(const lpattn_qtensor *q, const uint8_t *codes, const uint8_t *gsc, float o,
                         int n, int64_t code_at, int64_t scale_at, int64_t outer_at) {
  if (q->format == LPATTN_FMT_FP8) {
    memcpy(q->codes + code_at, codes, (size_t)n);
  } else {
    uint8_t *dst = q->codes + code_at / 2; /* code_at is even */
    for (int i = 0; i < n; i += 2) dst[i / 2] = (uint8_t)((codes[i] & 0xFu) | (codes[i + 1] & 0xFu) << 4);
    memcpy(q->scales + scale_at, gsc, (size_t)(n / lp_group_size(q->format)));
  }
  if (q->format != LPATTN_FMT_MXFP4) q->outer[outer_at] = o;
}

lpattn_status lp_host_quantize(const lpattn_tensor *x, const lpattn_qtensor *q,
                               const lpattn_quant_params *p) {
  if (p->check_finite && !all_finite(x))
    return lp_fail(LPATTN_ERR_NONFINITE, "x holds a non-finite value (check_finite)");
  const int64_t B = q->shape[0], H = q->shape[1], S = q->shape[2], D = q->shape[3];
  const int G = lp_group_size(q->format), along_d = q->axis == LPATTN_AXIS_D;
  const int n = along_d ? (int)D : q->tile;
  const lp_quant_cfg cfg = {q->format, p->rounding == LPATTN_ROUND_STOCHASTIC, p->seed,
                            p->mx_scale_round_up};
  float *buf = malloc(sizeof(float) * (size_t)n);
  int64_t *idx = malloc(sizeof(int64_t) * (size_t)n);
  uint8_t *codes = malloc((size_t)n), *gsc = malloc((size_t)(G ? n / G : 1));
  if (!buf || !idx || !codes || !gsc) {
    free(buf), free(idx), free(codes), free(gsc);
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  float o;
  for (int64_t bh = 0; bh < B * H; bh++) {
    const int64_t b = bh / H, h = bh % H;
    if (along_d) {
      for (int64_t s = 0; s < S; s++) {
        const int64_t row = bh * S + s;
        for (int i = 0; i < n; i++) {
          buf[i] = lp_load_f32(x->data, x->dtype, lp_off4(x, b, h, s, i));
          idx[i] = row * D + i;
        }
        lp_quantize_domain(&cfg, buf, 1, n, idx, codes, gsc, &o);
        store_domain(q, codes, gsc, o, n, row * D, G ? row * (D / G) : 0, row);
      }
      continue;
    }
    const int64_t ntile = (S + n - 1) / n, Sp = ntile * n;
    for (int64_t t = 0; t < ntile; t++) {
      for (int64_t d = 0; d < D; d++) {
        for (int i = 0; i < n; i++) {
          const int64_t s = t * n + i;
          /* zero padding is exact, so its SR index never matters */
          buf[i] = s < S ? lp_load_f32(x->data, x->dtype, lp_off4(x, b, h, s, d)) : 0.0f;
          idx[i] = s < S ? (bh * S + s) * D + d : 0;
        }
        lp_quantize_domain(&cfg, buf, 1, n, idx, codes, gsc, &o);
        const int64_t chan = bh * D + d;
        store_domain(q, codes, gsc, o, n, chan * Sp + t * n, G ? (chan * Sp + t * n) / G : 0,
                     (bh * ntile + t) * D + d);
      }
    }
  }
  free(buf), free(idx), free(codes), free(gsc);
  return LPATTN_OK;
}

/* Code, group-scale code and outer scale of logical element (b, h, s, d). */
static float dequant_at(const lpattn_qtensor *q, int64_t b, int64_t h, int64_t s, int64_t d) {
  const int64_t H = q->shape[1], S = q->shape[2], D = q->shape[3], bh = b * H + h;
  const int G = lp_group_size(q->format);
  int64_t at, outer_at;
  if (q->axis == LPATTN_AXIS_D) {
    at = (bh * S + s) * D + d;
    outer_at = bh * S + s;
  } else {
    const int64_t ntile = (S + q->tile - 1) / q->tile;
    at = (bh * D + d) * (ntile * q->tile) + s;
    outer_at = (bh * ntile + s / q->tile) * D + d;
  }
  uint8_t code = q->format == LPATTN_FMT_FP8 ? q->codes[at] : (uint8_t)(q->codes[at / 2] >> (at % 2 * 4) & 0xFu);
  uint8_t sc = G ? q->scales[at / G] : 0;
  float o = q->format == LPATTN_FMT_MXFP4 ? 1.0f : q->outer[outer_at];
  return lp_dequant_elem(q->format, code, sc, o);
}

lpattn_status lp_host_dequantize(const lpattn_qtensor *q, const lpattn_tensor *y) {
  for (int64_t b = 0; b < q->shape[0]; b++)
    for (int64_t h = 0; h < q->shape[1]; h++)
      for (int64_t s = 0; s < q->shape[2]; s++)
        for (int64_t d = 0; d < q->shape[3]; d++)
          lp_store_f32(y->data, y->dtype, lp_off4(y, b, h, s, d), dequant_at(q, b, h, s, d));
  return LPATTN_OK;
}
