/* The ref row engine (ref_internal.h): SEMANTICS "A low tile", "High tiles"
 * and "PASA" for one query row, accumulated in f64. */
#include <math.h>
#include <stdlib.h>

#include "kvpage.h"
#include "ref_internal.h"
#include "window.h"

lpattn_status ref_scratch_alloc(ref_scratch *w, int64_t Bk) {
  w->s = malloc(sizeof(double) * (size_t)Bk);
  w->p = malloc(sizeof(float) * (size_t)Bk);
  w->codes = malloc((size_t)Bk);
  w->scales = malloc((size_t)Bk);
  if (w->s && w->p && w->codes && w->scales) return LPATTN_OK;
  ref_scratch_free(w);
  return LPATTN_ERR_OUT_OF_MEMORY;
}

void ref_scratch_free(ref_scratch *w) {
  free(w->s), free(w->p), free(w->codes), free(w->scales);
  w->s = NULL, w->p = NULL, w->codes = w->scales = NULL;
}

/* Round to f16 through f32, as a kernel storing an f32 result in f16 does. */
static double f16r(double x) { return lpattn_f16_to_f32(lpattn_f32_to_f16((float)x)); }

static double dot(const float *a, const float *b, int64_t D) {
  double s = 0.0;
  for (int64_t d = 0; d < D; d++) s += (double)a[d] * b[d];
  return s;
}

static double score(const ref_cfg *cfg, const float *q, const float *qd, const ref_tile *t,
                    int64_t c) {
  const float *k = t->k + c * cfg->D;
  if (t->low) {
    double s = dot(qd, k, cfg->D) * (cfg->fp8s ? cfg->s_mul : cfg->sm_scale);
    return cfg->pasa ? f16r(s) : s;
  }
  if (cfg->pasa) return f16r(dot(q, k, cfg->D)); /* K' already carries sm_scale */
  if (cfg->score_f16) return f16r(dot(q, k, cfg->D)) * cfg->sm_scale;
  return dot(q, k, cfg->D) * cfg->sm_scale;
}

/* The score with the softcap applied (PASA and a softcap never meet). */
static double capped(const ref_cfg *cfg, const float *q, const float *qd, const ref_tile *t,
                     int64_t c) {
  return lp_softcap_f64(score(cfg, q, qd, t, c), cfg->softcap);
}

void ref_row_init(ref_row *st, double *acc, int64_t D) {
  st->m = -INFINITY;
  st->l = st->r = st->G = 0.0;
  st->n = 0;
  st->acc = acc;
  for (int64_t d = 0; d < D; d++) acc[d] = 0.0;
}

/* acc += s1 * (P^ . Vq): P (in w->s) quantized along the tile's keys. */
static void low_pv(const ref_cfg *cfg, ref_row *st, const ref_tile *t, int64_t k0, int64_t k1,
                   ref_scratch *w) {
  const int64_t D = cfg->D, Bk = cfg->Bk;
  for (int64_t c = 0; c < Bk; c++) w->p[c] = c >= k0 && c < k1 ? (float)w->s[c] : 0.0f;
  if (cfg->low == LPATTN_FMT_FP8) {
    /* Fixed scale: P is in [0, 1], s1 = 1/448 (FP8_STATIC: applied with
     * v_descale at the end, so that the products of codes are exact). */
    for (int64_t c = k0; c < k1; c++) {
      double pd = lpattn_e4m3_to_f32(lpattn_f32_to_e4m3(w->p[c] * 448.0f));
      if (!cfg->fp8s) pd /= 448.0;
      for (int64_t d = 0; d < D; d++) st->acc[d] += pd * t->v[c * D + d];
    }
    return;
  }
  const lp_quant_cfg qc = {cfg->low, 0, 0, cfg->mx_round_up};
  const int G = lp_group_size(cfg->low);
  float outer;
  lp_quantize_domain(&qc, w->p, 1, (int)Bk, NULL, w->codes, w->scales, &outer);
  for (int64_t c = k0; c < k1; c++) {
    double pd = lp_dequant_elem(cfg->low, w->codes[c], w->scales[c / G], outer);
    for (int64_t d = 0; d < D; d++) st->acc[d] += pd * t->v[c * D + d];
  }
}

void ref_row_tile(const ref_cfg *cfg, ref_row *st, const float *q, const float *qd,
                  const ref_tile *t, int64_t nvis, ref_scratch *w) {
  ref_row_tile_at(cfg, st, q, qd, t, 0, nvis, w);
}

void ref_row_tile_at(const ref_cfg *cfg, ref_row *st, const float *q, const float *qd,
                     const ref_tile *t, int64_t first, int64_t nvis, ref_scratch *w) {
  if (nvis <= 0) return; /* the row sees none of this tile's keys */
  const int64_t k0 = first, k1 = first + nvis;
  const int64_t D = cfg->D;
  /* PASA frame: c undoes the shift; G is the running mean of the c's. */
  double c = 0.0;
  if (cfg->pasa && t->kshift) c = (float)(cfg->sm_scale * dot(q, t->kshift, D));
  st->n++;
  const double G = ((double)(st->n - 1) * st->G + c) / (double)st->n;
  const double dm_prev = st->G - G, dm_cur = c - G;
  double mx = -INFINITY;
  for (int64_t j = k0; j < k1; j++) {
    double x = capped(cfg, q, qd, t, j) + dm_cur;
    w->s[j] = x;
    if (x > mx || isnan(x)) mx = x;
  }
  const double mprev = st->m + dm_prev;
  const double m = st->n == 1 ? mx : (mprev > mx || isnan(mprev) ? mprev : mx);
  const double a = st->n == 1 ? 0.0 : exp(mprev - m);
  double sum_p = 0.0, sum_ps = 0.0;
  for (int64_t j = k0; j < k1; j++) {
    double p = exp(w->s[j] - m);
    sum_p += p;
    if (p != 0.0) sum_ps += p * w->s[j]; /* 0 * -inf counts as 0 */
    w->s[j] = p;
  }
  const double l_old = st->l;
  st->l = a * st->l + sum_p;
  st->r = a * (st->r + l_old * dm_prev) + sum_ps;
  for (int64_t d = 0; d < D; d++) st->acc[d] *= a;
  if (t->low) {
    low_pv(cfg, st, t, k0, k1, w);
  } else {
    for (int64_t j = k0; j < k1; j++)
      for (int64_t d = 0; d < D; d++) st->acc[d] += w->s[j] * t->v[j * D + d];
  }
  st->m = m;
  st->G = G;
}

void ref_row_finish(const ref_row *st, int64_t D, float *o, float *lse, float *h) {
  if (st->n == 0) {
    for (int64_t d = 0; d < D; d++) o[d] = 0.0f;
    *lse = -INFINITY;
    *h = 0.0f;
    return;
  }
  for (int64_t d = 0; d < D; d++) o[d] = (float)(st->acc[d] / st->l);
  const double ll = log(st->l);
  *lse = (float)(st->m + ll + st->G);
  *h = (float)(st->m + ll - st->r / st->l);
}

/* ---- tile preparation ---------------------------------------------------- */

void ref_quant_rows(const ref_cfg *cfg, const float *x, int64_t n, float *y) {
  const lp_quant_cfg qc = {cfg->low, 0, 0, cfg->mx_round_up};
  uint8_t codes[LP_KV_DIM_MAX], scales[LP_KV_DIM_MAX]; /* D: up to a pool's widest (kvpage.h) */
  for (int64_t r = 0; r < n; r++) {
    float outer;
    lp_quantize_domain(&qc, x + r * cfg->D, 1, (int)cfg->D, NULL, codes, scales, &outer);
    lp_dequantize_domain(cfg->low, codes, scales, outer, (int)cfg->D, y + r * cfg->D);
  }
}

void ref_quant_v(const ref_cfg *cfg, const float *v, int64_t nk, float *y) {
  const lp_quant_cfg qc = {cfg->low, 0, 0, cfg->mx_round_up};
  const int64_t D = cfg->D, Bk = cfg->Bk;
  uint8_t codes[256], scales[256];
  float col[256], deq[256];
  for (int64_t d = 0; d < D; d++) {
    /* The partial last tile is zero-padded to Bk (zeros leave amax alone). */
    for (int64_t c = 0; c < Bk; c++) col[c] = c < nk ? v[c * D + d] : 0.0f;
    float outer;
    lp_quantize_domain(&qc, col, 1, (int)Bk, NULL, codes, scales, &outer);
    lp_dequantize_domain(cfg->low, codes, scales, outer, (int)Bk, deq);
    for (int64_t c = 0; c < Bk; c++) y[c * D + d] = deq[c];
  }
}

void ref_pasa_kprime(const ref_cfg *cfg, const float *k, const float *kshift, int64_t nk,
                     float *out) {
  for (int64_t c = 0; c < nk; c++)
    for (int64_t d = 0; d < cfg->D; d++) {
      float x = (k[c * cfg->D + d] - kshift[d]) * cfg->sm_scale;
      out[c * cfg->D + d] = lpattn_f16_to_f32(lpattn_f32_to_f16(x));
    }
}

void ref_pasa_shift(float beta, const float *src, int64_t D, float *kshift) {
  for (int64_t d = 0; d < D; d++) kshift[d] = beta * src[d];
}
