/* ref prefill: query tile by query tile, KV tiles in increasing j, each
 * computed high or low as SEMANTICS says, folded by the row engine. */
#include <stdlib.h>
#include <string.h>

#include "fp8s.h"
#include "ref_internal.h"
#include "tiles.h"
#include "window.h"

typedef struct {
  float *K, *V, *kbar, *Q, *Qd, *qbar, *score, *kt, *vt, *kx, *kshift, *o;
  float *lowk, *lowv; /* per KV tile: its low form with its own shift, made once */
  double *acc;
  uint8_t *kind, *mode, *have_low;
  ref_row *rows;
  ref_scratch w;
} prefill_buf;

static void buf_free(prefill_buf *b) {
  free(b->K), free(b->V), free(b->kbar), free(b->Q), free(b->Qd), free(b->qbar);
  free(b->score), free(b->kt), free(b->vt), free(b->kx), free(b->kshift), free(b->o);
  free(b->lowk), free(b->lowv), free(b->have_low);
  free(b->acc), free(b->kind), free(b->mode), free(b->rows);
  ref_scratch_free(&b->w);
}

static lpattn_status buf_alloc(prefill_buf *b, const lpattn_attn_problem *pr, int64_t nkt) {
  const size_t D = (size_t)pr->D, Bq = (size_t)pr->Bq, Bk = (size_t)pr->Bk, f = sizeof(float);
  memset(b, 0, sizeof *b);
  b->K = malloc(f * (size_t)pr->Skv * D), b->V = malloc(f * (size_t)pr->Skv * D);
  b->kbar = malloc(f * (size_t)nkt * D);
  b->Q = malloc(f * Bq * D), b->Qd = malloc(f * Bq * D), b->qbar = malloc(f * D);
  b->score = malloc(f * (size_t)nkt);
  b->kt = malloc(f * Bk * D), b->vt = malloc(f * Bk * D), b->kx = malloc(f * Bk * D);
  b->kshift = malloc(f * D), b->o = malloc(f * D);
  b->acc = malloc(sizeof(double) * Bq * D);
  b->lowk = malloc(f * (size_t)nkt * Bk * D), b->lowv = malloc(f * (size_t)nkt * Bk * D);
  b->kind = malloc((size_t)nkt), b->mode = malloc((size_t)nkt), b->have_low = malloc((size_t)nkt);
  b->rows = malloc(sizeof(ref_row) * Bq);
  lpattn_status st = ref_scratch_alloc(&b->w, pr->Bk);
  if (st == LPATTN_OK && b->K && b->V && b->kbar && b->Q && b->Qd && b->qbar && b->score &&
      b->kt && b->vt && b->kx && b->kshift && b->o && b->acc && b->kind && b->mode && b->rows &&
      b->lowk && b->lowv && b->have_low)
    return LPATTN_OK;
  buf_free(b);
  return LPATTN_ERR_OUT_OF_MEMORY;
}

void ref_load_rows(const lpattn_tensor *t, int64_t b, int64_t h, int64_t s0, int64_t n,
                   int64_t D, float *dst) {
  for (int64_t s = 0; s < n; s++)
    for (int64_t d = 0; d < D; d++)
      dst[s * D + d] = lp_load_f32(t->data, t->dtype, lp_off4(t, b, h, s0 + s, d));
}

/* FP8_STATIC: rows as the exact values of their E4M3 codes (SPEC 11's cast). */
static void load_codes(const lpattn_tensor *t, int64_t b, int64_t h, int64_t s0, int64_t n,
                       int64_t D, float d, float *dst) {
  for (int64_t s = 0; s < n; s++)
    lp_fp8s_row(t, lp_off4(t, b, h, s0 + s, 0), t->stride[3], D, d, dst + s * D);
}

static void write_selection(const lpattn_attn_problem *pr, const uint8_t *mode, int64_t nkt,
                            int64_t b, int64_t hq, int64_t i) {
  const lpattn_tensor *t = pr->selection;
  int32_t *p = t->data;
  int64_t e = 0;
  for (int64_t j = 0; j < nkt && e < pr->thrift_k; j++)
    if (mode[j] == LP_MODE_HIGH) p[lp_off4(t, b, hq, i, e++)] = (int32_t)j;
  for (; e < pr->thrift_k; e++) p[lp_off4(t, b, hq, i, e)] = -1;
}

static void write_row(const lpattn_attn_problem *pr, const ref_row *st, float *o, int64_t b,
                      int64_t hq, int64_t r) {
  float lse, h;
  ref_row_finish(st, pr->D, o, &lse, &h);
  for (int64_t d = 0; d < pr->D; d++)
    lp_store_f32(pr->out->data, pr->out->dtype, lp_off4(pr->out, b, hq, r, d), o[d]);
  if (pr->lse) lp_store_f32(pr->lse->data, LPATTN_F32, lp_off4(pr->lse, b, hq, r, 0), lse);
  if (pr->entropy)
    lp_store_f32(pr->entropy->data, LPATTN_F32, lp_off4(pr->entropy, b, hq, r, 0), h);
}

/* One query tile of one q head against K/V of its kv head (in bf). */
static void query_tile(const lpattn_attn_problem *pr, const ref_cfg *cfg, prefill_buf *bf,
                       int64_t b, int64_t hq, int64_t i, int64_t nkt) {
  const int64_t D = pr->D, Bq = pr->Bq, Bk = pr->Bk;
  const int64_t r0 = i * Bq, nr = pr->Sq - r0 < Bq ? pr->Sq - r0 : Bq;
  const lp_mask msk = lp_mask_of(pr); /* causal and sliding window */
  if (cfg->fp8s) /* Q^ goes where low tiles read the row; every tile is low */
    load_codes(pr->q, b, hq, r0, nr, D, lp_fp8s_descale(pr->q_descale, b, hq / (pr->Hq / pr->Hkv)),
               bf->Qd);
  else
    ref_load_rows(pr->q, b, hq, r0, nr, D, bf->Q);
  const int64_t last_full = lp_tile_plan(pr, bf->K, D, bf->kbar, bf->qbar, bf->score, b, hq, i, nkt,
                                         bf->kind, bf->mode);
  if (pr->selection) write_selection(pr, bf->mode, nkt, b, hq, i);
  int any_low = 0;
  for (int64_t j = 0; j < nkt; j++) any_low |= bf->mode[j] == LP_MODE_LOW;
  if (any_low && !cfg->fp8s) ref_quant_rows(cfg, bf->Q, nr, bf->Qd);
  for (int64_t r = 0; r < nr; r++) ref_row_init(&bf->rows[r], bf->acc + r * D, D);

  for (int64_t j = 0; j < nkt; j++) {
    if (bf->mode[j] == LP_MODE_SKIP) continue;
    const int64_t c0 = j * Bk, nk = pr->Skv - c0 < Bk ? pr->Skv - c0 : Bk;
    const float *K = bf->K + c0 * D, *V = bf->V + c0 * D;
    ref_tile t = {bf->mode[j] == LP_MODE_LOW, nk, K, V, NULL};
    if (pr->pasa) {
      /* A diagonal tile borrows the last full tile's mean, or without one
       * its own first key, which every row seeing the tile sees: never a key
       * beyond the row's horizon (SPEC 4). */
      int64_t src = bf->kind[j] == LP_TILE_FULL ? j : last_full;
      ref_pasa_shift(pr->pasa_beta, src >= 0 ? bf->kbar + src * D : K, D, bf->kshift);
      t.kshift = bf->kshift;
    }
    if (t.low && !cfg->fp8s) { /* (FP8_STATIC: K, V already hold K^, V^) */
      /* A full tile's low form depends on j only; a leaky diagonal one may
       * borrow another tile's shift, so it is made afresh. */
      const int own = bf->kind[j] == LP_TILE_FULL;
      float *lk = own ? bf->lowk + j * Bk * D : bf->kt, *lv = own ? bf->lowv + j * Bk * D : bf->vt;
      if (!own || !bf->have_low[j]) {
        const float *kin = K;
        if (pr->pasa) {
          for (int64_t e = 0; e < nk * D; e++) bf->kx[e] = K[e] - bf->kshift[e % D];
          kin = bf->kx;
        }
        ref_quant_rows(cfg, kin, nk, lk);
        ref_quant_v(cfg, V, nk, lv);
        bf->have_low[j] = (uint8_t)own;
      }
      t.k = lk, t.v = lv;
    } else if (pr->pasa) {
      ref_pasa_kprime(cfg, K, bf->kshift, nk, bf->kt);
      t.k = bf->kt;
    }
    for (int64_t r = 0; r < nr; r++) {
      int64_t first, nvis = lp_mask_range(&msk, r0 + r, c0, nk, &first);
      ref_row_tile_at(cfg, &bf->rows[r], bf->Q + r * D, bf->Qd + r * D, &t, first, nvis, &bf->w);
    }
  }
  for (int64_t r = 0; r < nr; r++) {
    if (cfg->fp8s)
      for (int64_t d = 0; d < D; d++) bf->rows[r].acc[d] *= cfg->o_mul;
    write_row(pr, &bf->rows[r], bf->o, b, hq, r0 + r);
  }
}

lpattn_status ref_attention(lpattn_ctx *ctx, const lpattn_attn_problem *pr) {
  (void)ctx;
  const int64_t D = pr->D, nqt = lp_tile_count(pr->Sq, pr->Bq);
  const int64_t nkt = lp_tile_count(pr->Skv, pr->Bk), group = pr->Hq / pr->Hkv;
  const int fp8s = pr->precision == LPATTN_PREC_FP8_STATIC;
  ref_cfg cfg = {D, pr->Bk, pr->sm_scale, pr->pasa, pr->score_f16, pr->mx_round_up, pr->low,
                 fp8s, 0.0, 0.0, pr->softcap};
  prefill_buf bf;
  lpattn_status st = buf_alloc(&bf, pr, nkt);
  if (st != LPATTN_OK) return st;
  for (int64_t b = 0; b < pr->B; b++)
    for (int64_t hk = 0; hk < pr->Hkv; hk++) {
      if (fp8s) { /* SPEC 11: code values; the descales of (b, hk) scale S and O */
        const float qd = lp_fp8s_descale(pr->q_descale, b, hk);
        const float kd = lp_fp8s_descale(pr->k_descale, b, hk);
        const float vd = lp_fp8s_descale(pr->v_descale, b, hk);
        load_codes(pr->k, b, hk, 0, pr->Skv, D, kd, bf.K);
        load_codes(pr->v, b, hk, 0, pr->Skv, D, vd, bf.V);
        cfg.s_mul = (double)qd * kd * pr->sm_scale;
        cfg.o_mul = (double)vd / 448.0;
      } else {
        ref_load_rows(pr->k, b, hk, 0, pr->Skv, D, bf.K);
        ref_load_rows(pr->v, b, hk, 0, pr->Skv, D, bf.V);
      }
      memset(bf.have_low, 0, (size_t)nkt);
      lp_tile_means(pr, bf.K, nkt, bf.kbar);
      for (int64_t g = 0; g < group; g++)
        for (int64_t i = 0; i < nqt; i++) query_tile(pr, &cfg, &bf, b, hk * group + g, i, nkt);
    }
  buf_free(&bf);
  return LPATTN_OK;
}
