/* Host KV cache (kvcache.h): storage, append and the readers decode uses. */
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "kvcache.h"
#include "tiles.h"

typedef struct {
  int64_t T, D, Hkv, Hq, ntile, nslot;
  int has_low;
  lpattn_format fmt;
  int G;           /* group size of fmt, 0 for FP8 */
  size_t esz;      /* bytes of one high element */
  uint8_t *hk, *hv; /* [seq][h][slot][T][D] in high_dtype */
  /* Quantized tiles, [seq][h][tile] blocks: K rows along D, V channels along T. */
  size_t kc_n, ks_n, vc_n, vs_n; /* bytes of one tile's codes / scales */
  uint8_t *kc, *ks, *vc, *vs;
  float *ko, *vo;  /* [..][T] per token, [..][D] per channel */
  float *kmean;    /* [seq][h][tile][D] */
  float *qmean;    /* [seq][hq][tile][D] of query tiles left the window */
  float *qbuf;     /* [seq][hq][2][T][D] rows of the two newest query tiles */
  float *tmp;      /* T * D scratch */
  uint8_t *ctmp, *stmp; /* scratch codes / scales of one domain */
} kv_impl;

static kv_impl *impl_of(const lpattn_kv_cache *c) { return (kv_impl *)c->impl; }

static size_t code_bytes(lpattn_format f, int64_t n) {
  return f == LPATTN_FMT_FP8 ? (size_t)n : (size_t)(n / 2);
}

/* E2M1 codes travel unpacked (one per byte) between the helpers; storage
 * packs them two a byte, element 2k in the low nibble (as lpattn.h). */
static void store_codes(lpattn_format f, const uint8_t *c, int64_t n, uint8_t *dst) {
  if (f == LPATTN_FMT_FP8) {
    memcpy(dst, c, (size_t)n);
    return;
  }
  for (int64_t i = 0; i < n; i += 2) dst[i / 2] = (uint8_t)((c[i] & 0xF) | (c[i + 1] << 4));
}

static void load_codes(lpattn_format f, const uint8_t *src, int64_t n, uint8_t *c) {
  if (f == LPATTN_FMT_FP8) {
    memcpy(c, src, (size_t)n);
    return;
  }
  for (int64_t i = 0; i < n; i += 2) c[i] = src[i / 2] & 0xF, c[i + 1] = src[i / 2] >> 4;
}

static size_t hslot_off(const kv_impl *m, int seq, int64_t h, int64_t j) {
  return (size_t)((((int64_t)seq * m->Hkv + h) * m->nslot + j % m->nslot) * m->T * m->D);
}

static int64_t tile_index(const kv_impl *m, int seq, int64_t h, int64_t j) {
  return ((int64_t)seq * m->Hkv + h) * m->ntile + j;
}

void lp_kv_free(lpattn_kv_cache *c) {
  if (!c) return;
  kv_impl *m = impl_of(c);
  if (m) {
    free(m->hk), free(m->hv), free(m->kc), free(m->ks), free(m->vc), free(m->vs);
    free(m->ko), free(m->vo), free(m->kmean), free(m->qmean), free(m->qbuf);
    free(m->tmp), free(m->ctmp), free(m->stmp);
    free(m);
  }
  free(c->lengths);
  free(c);
}

static void *zalloc(int64_t n, size_t sz, int *fail) {
  if (n <= 0) return NULL;
  void *p = calloc((size_t)n, sz);
  if (!p) *fail = 1;
  return p;
}

lpattn_status lp_kv_create(lpattn_ctx *ctx, const lpattn_kv_cache_params *p,
                           lpattn_kv_cache **out) {
  lpattn_kv_cache *c = calloc(1, sizeof *c);
  kv_impl *m = calloc(1, sizeof *m);
  if (!c || !m) {
    free(c), free(m);
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  c->ctx = ctx;
  c->p = *p;
  c->impl = m;
  int fail = 0;
  const int64_t S = p->num_seqs;
  m->T = p->tile, m->D = p->head_dim, m->Hkv = p->num_kv_heads, m->Hq = p->num_q_heads;
  m->ntile = lp_tile_count(p->max_tokens, m->T);
  m->has_low = p->precision != LPATTN_PREC_HIGH;
  m->nslot = (p->precision == LPATTN_PREC_HIGH || p->precision == LPATTN_PREC_THRIFT)
                 ? m->ntile : (m->ntile < 2 ? m->ntile : 2);
  m->fmt = lp_low_format(p->precision, p->thrift_low);
  m->G = lp_group_size(m->fmt);
  m->esz = p->high_dtype == LPATTN_F32 ? 4 : 2;
  const int64_t heads = S * m->Hkv, td = m->T * m->D;
  c->lengths = zalloc(S, sizeof(int64_t), &fail);
  m->hk = zalloc(heads * m->nslot * td, m->esz, &fail);
  m->hv = zalloc(heads * m->nslot * td, m->esz, &fail);
  if (m->has_low) {
    m->kc_n = m->vc_n = code_bytes(m->fmt, td);
    m->ks_n = m->vs_n = m->G ? (size_t)(td / m->G) : 0;
    const int64_t nt = heads * m->ntile;
    m->kc = zalloc(nt * (int64_t)m->kc_n, 1, &fail);
    m->vc = zalloc(nt * (int64_t)m->vc_n, 1, &fail);
    m->ks = zalloc(nt * (int64_t)m->ks_n, 1, &fail);
    m->vs = zalloc(nt * (int64_t)m->vs_n, 1, &fail);
    m->ko = zalloc(nt * m->T, sizeof(float), &fail);
    m->vo = zalloc(nt * m->D, sizeof(float), &fail);
  }
  m->kmean = zalloc(heads * m->ntile * m->D, sizeof(float), &fail);
  m->qmean = zalloc(S * m->Hq * m->ntile * m->D, sizeof(float), &fail);
  m->qbuf = zalloc(S * m->Hq * 2 * td, sizeof(float), &fail);
  m->tmp = zalloc(td, sizeof(float), &fail);
  m->ctmp = zalloc(m->T > m->D ? m->T : m->D, 1, &fail);
  m->stmp = zalloc(m->T > m->D ? m->T : m->D, 1, &fail);
  if (fail) {
    lp_kv_free(c);
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  *out = c;
  return LPATTN_OK;
}

lpattn_format lp_kv_low_format(const lpattn_kv_cache *c) { return impl_of(c)->fmt; }

static lp_quant_cfg quant_cfg(const lpattn_kv_cache *c) {
  lp_quant_cfg q = {impl_of(c)->fmt, 0, 0, c->p.mx_scale_round_up != 0};
  return q;
}

/* Tile j of (seq, h) just completed: keep its key mean, quantize it. */
static void complete_tile(lpattn_kv_cache *c, int seq, int64_t h, int64_t j) {
  kv_impl *m = impl_of(c);
  const int64_t T = m->T, D = m->D, t = tile_index(m, seq, h, j);
  const size_t ho = hslot_off(m, seq, h, j);
  const uint8_t *hk = m->hk + ho * m->esz, *hv = m->hv + ho * m->esz;
  float *kbar = m->kmean + t * D;
  lp_mean_rows_f32(hk, c->p.high_dtype, 0, D, 1, T, D, (float)T, kbar);
  if (!m->has_low) return;
  const lp_quant_cfg cfg = quant_cfg(c);
  /* K per token along D, shifted first under PASA (SEMANTICS). */
  for (int64_t r = 0; r < T; r++) {
    float *x = m->tmp + r * D;
    for (int64_t d = 0; d < D; d++) {
      x[d] = lp_load_f32(hk, c->p.high_dtype, r * D + d);
      if (c->p.pasa) x[d] = x[d] - c->p.pasa_beta * kbar[d];
    }
    lp_quantize_domain(&cfg, x, 1, (int)D, NULL, m->ctmp, m->stmp, &m->ko[t * T + r]);
    store_codes(m->fmt, m->ctmp, D, m->kc + t * m->kc_n + code_bytes(m->fmt, r * D));
    if (m->G) memcpy(m->ks + t * m->ks_n + r * D / m->G, m->stmp, (size_t)(D / m->G));
  }
  /* V per channel along the tile's keys. */
  for (int64_t r = 0; r < T; r++)
    for (int64_t d = 0; d < D; d++) m->tmp[r * D + d] = lp_load_f32(hv, c->p.high_dtype, r * D + d);
  for (int64_t d = 0; d < D; d++) {
    lp_quantize_domain(&cfg, m->tmp + d, D, (int)T, NULL, m->ctmp, m->stmp, &m->vo[t * D + d]);
    store_codes(m->fmt, m->ctmp, T, m->vc + t * m->vc_n + code_bytes(m->fmt, d * T));
    if (m->G) memcpy(m->vs + t * m->vs_n + d * T / m->G, m->stmp, (size_t)(T / m->G));
  }
}

static float *qrow(const kv_impl *m, int seq, int64_t hq, int64_t p) {
  int64_t slot = (p / m->T) % 2;
  return m->qbuf + ((((int64_t)seq * m->Hq + hq) * 2 + slot) * m->T + p % m->T) * m->D;
}

/* Query tile j leaves the window: keep its mean, clear its rows for j + 2. */
static void freeze_qtile(lpattn_kv_cache *c, int seq, int64_t j) {
  kv_impl *m = impl_of(c);
  for (int64_t hq = 0; hq < m->Hq; hq++) {
    float *rows = qrow(m, seq, hq, j * m->T);
    float *mean = m->qmean + (((int64_t)seq * m->Hq + hq) * m->ntile + j) * m->D;
    lp_mean_rows_f32(rows, LPATTN_F32, 0, m->D, 1, m->T, m->D, (float)m->T, mean);
    memset(rows, 0, sizeof(float) * (size_t)(m->T * m->D));
  }
}

static void put_q(kv_impl *m, int seq, int64_t p, const lpattn_tensor *q, int64_t b, int64_t s) {
  for (int64_t hq = 0; hq < m->Hq; hq++) {
    float *dst = qrow(m, seq, hq, p);
    for (int64_t d = 0; d < m->D; d++)
      dst[d] = lp_load_f32(q->data, q->dtype, lp_off4(q, b, hq, s, d));
  }
}

lpattn_status lp_kv_append(lpattn_ctx *ctx, lpattn_kv_cache *c, int seq, const lpattn_tensor *k,
                           const lpattn_tensor *v, const lpattn_tensor *q) {
  (void)ctx;
  kv_impl *m = impl_of(c);
  const int64_t n = k->shape[2], D = m->D;
  if (n > c->p.max_tokens - c->lengths[seq]) return LPATTN_ERR_CACHE_FULL;
  for (int64_t s = 0; s < n; s++) {
    const int64_t p = c->lengths[seq], j = p / m->T, r = p % m->T;
    if (r == 0 && j >= 1)
      for (int64_t h = 0; h < m->Hkv; h++) complete_tile(c, seq, h, j - 1);
    if (r == 0 && j >= 2) freeze_qtile(c, seq, j - 2);
    for (int64_t h = 0; h < m->Hkv; h++) {
      const size_t o = hslot_off(m, seq, h, j) + (size_t)(r * D);
      for (int64_t d = 0; d < D; d++) {
        int64_t ko = h * k->stride[1] + s * k->stride[2] + d * k->stride[3];
        int64_t vo = h * v->stride[1] + s * v->stride[2] + d * v->stride[3];
        lp_store_f32(m->hk, c->p.high_dtype, (int64_t)o + d, lp_load_f32(k->data, k->dtype, ko));
        lp_store_f32(m->hv, c->p.high_dtype, (int64_t)o + d, lp_load_f32(v->data, v->dtype, vo));
      }
    }
    if (q) put_q(m, seq, p, q, 0, s);
    c->lengths[seq] = p + 1;
  }
  return LPATTN_OK;
}

void lp_kv_record_q(lpattn_kv_cache *c, int seq, const lpattn_tensor *q) {
  kv_impl *m = impl_of(c);
  const int64_t Sq = q->shape[2], len = c->lengths[seq];
  for (int64_t s = 0; s < Sq; s++) put_q(m, seq, len - Sq + s, q, seq, s);
}

int64_t lp_kv_read_high(const lpattn_kv_cache *c, int seq, int h, int64_t j, float *k, float *v) {
  const kv_impl *m = impl_of(c);
  const int64_t len = c->lengths[seq], cur = (len - 1) / m->T;
  if (j < 0 || j > cur || j <= cur - m->nslot) return -1;
  int64_t n = len - j * m->T;
  if (n > m->T) n = m->T;
  const size_t o = hslot_off(m, seq, h, j);
  for (int64_t i = 0; i < n * m->D; i++) {
    k[i] = lp_load_f32(m->hk, c->p.high_dtype, (int64_t)o + i);
    v[i] = lp_load_f32(m->hv, c->p.high_dtype, (int64_t)o + i);
  }
  return n;
}

int lp_kv_read_low(const lpattn_kv_cache *c, int seq, int h, int64_t j, float *k, float *v) {
  const kv_impl *m = impl_of(c);
  const int64_t T = m->T, D = m->D;
  /* Quantized once the first token of tile j + 1 arrived. */
  if (!m->has_low || j < 0 || (j + 1) * T >= c->lengths[seq]) return 0;
  const int64_t t = tile_index(m, seq, h, j);
  /* Stack scratch (T, D <= 256): readers may run on several threads. */
  uint8_t codes[256];
  float col[256];
  for (int64_t r = 0; r < T; r++) {
    load_codes(m->fmt, m->kc + t * m->kc_n + code_bytes(m->fmt, r * D), D, codes);
    lp_dequantize_domain(m->fmt, codes, m->G ? m->ks + t * m->ks_n + r * D / m->G : NULL,
                         m->ko[t * T + r], (int)D, k + r * D);
  }
  for (int64_t d = 0; d < D; d++) {
    load_codes(m->fmt, m->vc + t * m->vc_n + code_bytes(m->fmt, d * T), T, codes);
    lp_dequantize_domain(m->fmt, codes, m->G ? m->vs + t * m->vs_n + d * T / m->G : NULL,
                         m->vo[t * D + d], (int)T, col);
    for (int64_t r = 0; r < T; r++) v[r * D + d] = col[r];
  }
  return 1;
}

const float *lp_kv_kmean(const lpattn_kv_cache *c, int seq, int h, int64_t j) {
  const kv_impl *m = impl_of(c);
  if (j < 0 || (j + 1) * m->T >= c->lengths[seq]) return NULL; /* not completed */
  return m->kmean + tile_index(m, seq, h, j) * m->D;
}

void lp_kv_qmean(const lpattn_kv_cache *c, int seq, int hq, int64_t j, float *mean) {
  const kv_impl *m = impl_of(c);
  const int64_t cur = (c->lengths[seq] - 1) / m->T;
  if (j <= cur - 2) {
    memcpy(mean, m->qmean + (((int64_t)seq * m->Hq + hq) * m->ntile + j) * m->D,
           sizeof(float) * (size_t)m->D);
    return;
  }
  lp_mean_rows_f32(qrow(m, seq, hq, j * m->T), LPATTN_F32, 0, m->D, 1, m->T, m->D, (float)m->T, mean);
}
