/* ref decode against the host KV cache: a row at absolute position p sees
 * the tiles a causal prefill row p sees (SEMANTICS "Decode"): tiles j < p/T
 * full (stored quantized, or high when THRIFT selects them), tile p/T
 * diagonal and high. The row engine is the prefill's. */
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "ref_internal.h"
#include "tiles.h"

typedef struct {
  float *Q, *Qd, *kt, *vt, *kx, *kshift, *qbar, *score, *o;
  double *acc;
  uint8_t *kind, *mode;
  ref_row *rows;
  ref_scratch w;
} decode_buf;

static void buf_free(decode_buf *b) {
  free(b->Q), free(b->Qd), free(b->kt), free(b->vt), free(b->kx), free(b->kshift);
  free(b->qbar), free(b->score), free(b->o), free(b->acc), free(b->kind), free(b->mode);
  free(b->rows);
  ref_scratch_free(&b->w);
}

static lpattn_status buf_alloc(decode_buf *b, int64_t Sq, int64_t T, int64_t D, int64_t ntile) {
  const size_t f = sizeof(float);
  memset(b, 0, sizeof *b);
  b->Q = malloc(f * (size_t)(Sq * D)), b->Qd = malloc(f * (size_t)(Sq * D));
  b->kt = malloc(f * (size_t)(T * D)), b->vt = malloc(f * (size_t)(T * D));
  b->kx = malloc(f * (size_t)(T * D)), b->kshift = malloc(f * (size_t)D);
  b->qbar = malloc(f * (size_t)D), b->score = malloc(f * (size_t)ntile), b->o = malloc(f * (size_t)D);
  b->acc = malloc(sizeof(double) * (size_t)(Sq * D));
  b->kind = malloc((size_t)ntile), b->mode = malloc((size_t)ntile);
  b->rows = malloc(sizeof(ref_row) * (size_t)Sq);
  lpattn_status st = ref_scratch_alloc(&b->w, T);
  if (st == LPATTN_OK && b->Q && b->Qd && b->kt && b->vt && b->kx && b->kshift && b->qbar &&
      b->score && b->o && b->acc && b->kind && b->mode && b->rows)
    return LPATTN_OK;
  buf_free(b);
  return LPATTN_ERR_OUT_OF_MEMORY;
}

/* Rows ra..rb-1 of the call (positions len - Sq + r) all lie in query tile i. */
static lpattn_status decode_tile(const lpattn_kv_cache *c, const lpattn_attn_problem *pr,
                                 const ref_cfg *cfg, decode_buf *bf, int s, int64_t hq,
                                 int64_t i, int64_t ra, int64_t rb, int k) {
  const int64_t T = c->p.tile, D = cfg->D, len = c->lengths[s], Sq = pr->Sq;
  const int hk = (int)(hq / (c->p.num_q_heads / c->p.num_kv_heads));
  const int thrift = c->p.precision == LPATTN_PREC_THRIFT;
  for (int64_t j = 0; j <= i; j++) bf->kind[j] = j < i ? LP_TILE_FULL : LP_TILE_DIAG;
  if (thrift) {
    const int64_t qt = pr->selection_mode == LPATTN_SELECT_CAUSAL ? i - 1 : i;
    if (qt >= 0) lp_kv_qmean(c, s, (int)hq, qt, bf->qbar);
    for (int64_t j = 0; j <= i; j++)
      bf->score[j] = (qt >= 0 && j < i) ? lp_dot_f32(bf->qbar, lp_kv_kmean(c, s, hk, j), D) : 0.0f;
  }
  lp_tile_modes(c->p.precision, 0, k, i + 1, bf->kind, bf->score, bf->mode);
  int any_low = 0;
  for (int64_t j = 0; j <= i; j++) any_low |= bf->mode[j] == LP_MODE_LOW;
  if (any_low) ref_quant_rows(cfg, bf->Q + ra * D, rb - ra, bf->Qd + ra * D);
  for (int64_t r = ra; r < rb; r++) ref_row_init(&bf->rows[r], bf->acc + r * D, D);

  for (int64_t j = 0; j <= i; j++) {
    ref_tile t = {bf->mode[j] == LP_MODE_LOW, T, bf->kt, bf->vt, NULL};
    if (t.low) {
      if (!lp_kv_read_low(c, s, hk, j, bf->kt, bf->vt)) return LPATTN_ERR_BACKEND;
    } else {
      t.nk = lp_kv_read_high(c, s, hk, j, bf->kt, bf->vt);
      if (t.nk < 0) return LPATTN_ERR_BACKEND;
    }
    if (cfg->pasa) {
      /* As in prefill: the diagonal tile borrows tile i-1's mean; tile 0
       * (diagonal, always high) its own first key. */
      const float *src = i > 0 ? lp_kv_kmean(c, s, hk, j < i ? j : i - 1) : bf->kt;
      ref_pasa_shift(c->p.pasa_beta, src, D, bf->kshift);
      t.kshift = bf->kshift;
      if (!t.low) {
        ref_pasa_kprime(cfg, bf->kt, bf->kshift, t.nk, bf->kx);
        t.k = bf->kx;
      }
    }
    for (int64_t r = ra; r < rb; r++) {
      int64_t nvis = lp_tile_visible(1, 0, len - Sq + r, j * T, t.nk);
      ref_row_tile(cfg, &bf->rows[r], bf->Q + r * D, bf->Qd + r * D, &t, nvis, &bf->w);
    }
  }
  for (int64_t r = ra; r < rb; r++) {
    float lse, h;
    ref_row_finish(&bf->rows[r], D, bf->o, &lse, &h);
    for (int64_t d = 0; d < D; d++)
      lp_store_f32(pr->out->data, pr->out->dtype, lp_off4(pr->out, s, hq, r, d), bf->o[d]);
    if (pr->lse) lp_store_f32(pr->lse->data, LPATTN_F32, lp_off4(pr->lse, s, hq, r, 0), lse);
    if (pr->entropy)
      lp_store_f32(pr->entropy->data, LPATTN_F32, lp_off4(pr->entropy, s, hq, r, 0), h);
  }
  return LPATTN_OK;
}

lpattn_status ref_decode(lpattn_ctx *ctx, lpattn_kv_cache *c, const lpattn_tensor *q,
                         const lpattn_tensor *out, const lpattn_attn_problem *pr) {
  (void)ctx, (void)out;
  const lpattn_kv_cache_params *cp = &c->p;
  const int64_t T = cp->tile, D = cp->head_dim, Sq = q->shape[2];
  const ref_cfg cfg = {D, T, pr->sm_scale, cp->pasa, pr->score_f16, cp->mx_scale_round_up,
                       lp_kv_low_format(c)};
  for (int s = 0; s < cp->num_seqs; s++) lp_kv_record_q(c, s, q);
  decode_buf bf;
  lpattn_status st = buf_alloc(&bf, Sq, T, D, lp_tile_count(cp->max_tokens, T));
  if (st != LPATTN_OK) return st;
  for (int s = 0; s < cp->num_seqs && st == LPATTN_OK; s++) {
    const int64_t len = c->lengths[s];
    const int n = (int)lp_tile_count(len, T);
    const int k = lp_thrift_k_seq(pr, n);
    for (int64_t hq = 0; hq < cp->num_q_heads && st == LPATTN_OK; hq++) {
      for (int64_t r = 0; r < Sq; r++)
        for (int64_t d = 0; d < D; d++)
          bf.Q[r * D + d] = lp_load_f32(q->data, q->dtype, lp_off4(q, s, hq, r, d));
      /* Sq <= T: the rows span at most two query tiles. */
      for (int64_t ra = 0; ra < Sq && st == LPATTN_OK;) {
        const int64_t i = (len - Sq + ra) / T;
        int64_t rb = ra;
        while (rb < Sq && (len - Sq + rb) / T == i) rb++;
        st = decode_tile(c, pr, &cfg, &bf, s, hq, i, ra, rb, k);
        ra = rb;
      }
    }
  }
  buf_free(&bf);
  return st;
}
