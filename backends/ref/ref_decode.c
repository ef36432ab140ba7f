/* ref decode through a paged pool (SEMANTICS "Decode"): a row at absolute
 * position p sees the tiles a causal prefill row p sees (tiles j < p/T full,
 * stored quantized or high when THRIFT selects them; tile p/T diagonal and
 * high). The context is split into chunks of LP_DECODE_CHUNK_TILES tiles,
 * each folded from a fresh row state, and the chunks' (O, LSE, H) are merged
 * by SPEC 7 in order (core's host merge). The row engine is the prefill's.
 * Sharded decode (lpattn_kv_batch kv_start/q_start): positions are the
 * slot's (q's row r at row0 + r), chunks counted in global tiles, and an
 * earlier shard's rows lie past all of its tiles (all full). */
#include <stdlib.h>
#include <string.h>

#include "fp8s.h"
#include "kvpool.h"
#include "ref_internal.h"
#include "tiles.h"
#include "window.h"

typedef struct {
  float *Q, *Qd, *kt, *vt, *kx, *kshift, *qbar, *score, *o, *mo;
  double *acc;
  uint8_t *kind, *mode;
  ref_row *rows;
  ref_scratch w;
} decode_buf;

static void buf_free(decode_buf *b) {
  free(b->Q), free(b->Qd), free(b->kt), free(b->vt), free(b->kx), free(b->kshift);
  free(b->qbar), free(b->score), free(b->o), free(b->mo), free(b->acc), free(b->kind);
  free(b->mode), free(b->rows);
  ref_scratch_free(&b->w);
}

static lpattn_status buf_alloc(decode_buf *b, int64_t Sq, int64_t T, int64_t D, int64_t ntile) {
  const size_t f = sizeof(float);
  memset(b, 0, sizeof *b);
  b->Q = malloc(f * (size_t)(Sq * D)), b->Qd = malloc(f * (size_t)(Sq * D));
  b->kt = malloc(f * (size_t)(T * D)), b->vt = malloc(f * (size_t)(T * D));
  b->kx = malloc(f * (size_t)(T * D)), b->kshift = malloc(f * (size_t)D);
  b->qbar = malloc(f * (size_t)D), b->score = malloc(f * (size_t)ntile), b->o = malloc(f * (size_t)D);
  b->mo = malloc(f * (size_t)(Sq * (D + 2)));
  b->acc = malloc(sizeof(double) * (size_t)(Sq * D));
  b->kind = malloc((size_t)ntile), b->mode = malloc((size_t)ntile);
  b->rows = malloc(sizeof(ref_row) * (size_t)Sq);
  lpattn_status st = ref_scratch_alloc(&b->w, T);
  if (st == LPATTN_OK && b->Q && b->Qd && b->kt && b->vt && b->kx && b->kshift && b->qbar &&
      b->score && b->o && b->mo && b->acc && b->kind && b->mode && b->rows)
    return LPATTN_OK;
  buf_free(b);
  return LPATTN_ERR_OUT_OF_MEMORY;
}

/* Folds chunk result (o, lse, h) of a row into its merged state m = [O (D),
 * LSE, H] (SPEC 7 through core's host merge; the first chunk is copied). */
static void merge_chunk(int64_t D, int first, float *o, float lse, float h, float *m) {
  if (first) {
    memcpy(m, o, sizeof(float) * (size_t)D);
    m[D] = lse, m[D + 1] = h;
    return;
  }
  lpattn_tensor ta = lpattn_tensor_4d(m, LPATTN_F32, 1, 1, 1, D);
  lpattn_tensor tb = lpattn_tensor_4d(o, LPATTN_F32, 1, 1, 1, D);
  lpattn_tensor la = lpattn_tensor_4d(m + D, LPATTN_F32, 1, 1, 1, 1);
  lpattn_tensor ha = lpattn_tensor_4d(m + D + 1, LPATTN_F32, 1, 1, 1, 1);
  lpattn_tensor lb = lpattn_tensor_4d(&lse, LPATTN_F32, 1, 1, 1, 1);
  lpattn_tensor hb = lpattn_tensor_4d(&h, LPATTN_F32, 1, 1, 1, 1);
  lp_host_merge(&ta, &la, &ha, &tb, &lb, &hb, &ta, &la, &ha);
}

/* Rows ra..rb-1 of the call (slot positions row0 + r) all lie in query tile
 * i; the slot's tiles are 0..jl (jl < i: an earlier shard, every tile full). */
static lpattn_status decode_tile(const lp_kv_seq *sq, const lpattn_attn_problem *pr,
                                 const ref_cfg *cfg0, decode_buf *bf, int64_t s, int64_t hq,
                                 int64_t i, int64_t ra, int64_t rb, int k) {
  const lpattn_kv_pool_params *pp = &sq->pool->p;
  const int64_t T = pp->page_size, D = cfg0->D, row0 = lp_kv_seq_row0(sq, pr->Sq);
  const int64_t jl = (sq->len - 1) / T < i ? (sq->len - 1) / T : i;
  const int hk = (int)(hq / (pp->num_q_heads / pp->num_kv_heads));
  const int thrift = pp->precision == LPATTN_PREC_THRIFT;
  ref_cfg fc = *cfg0;
  const ref_cfg *cfg = &fc;
  if (sq->L.fp8s) { /* SPEC 11 with the slot's descales (ref_attention.c's factors) */
    const float *ds = lp_kv_seq_descales(sq);
    fc.fp8s = 1;
    fc.s_mul = (double)lp_fp8s_descale(pr->q_descale, s, hk) * ds[hk] * pr->sm_scale;
    fc.o_mul = (double)ds[pp->num_kv_heads + hk] / 448.0;
  }
  /* Absolute positions, causal and the sliding window: without a window,
   * tiles j < i are full and tile i diagonal; a tile outside the window of
   * rows ra..rb-1 is skipped and none of its pages is read. */
  const lp_mask msk = {1, 0, pr->window_left, -1, T};
  for (int64_t j = 0; j <= jl; j++)
    bf->kind[j] = (uint8_t)lp_mask_kind(&msk, i * T, row0 + rb - 1, j * T, j * T + T - 1);
  if (thrift) {
    const int64_t qt = pr->selection_mode == LPATTN_SELECT_CAUSAL ? i - 1 : i;
    if (qt >= 0) lp_kv_seq_qmean(sq, (int)hq, qt, bf->qbar);
    for (int64_t j = 0; j <= jl; j++)
      bf->score[j] = (qt >= 0 && bf->kind[j] == LP_TILE_FULL)
                         ? lp_dot_f32(bf->qbar, lp_kv_seq_kmean(sq, hk, j), D) : 0.0f;
  }
  lp_tile_modes(pp->precision, 0, k, jl + 1, bf->kind, bf->score, bf->mode);
  /* The window's left edge: a completed tile of an FP8/NVFP4/MXFP4 pool
   * has no high copy, so it is read low, masked per element (SEMANTICS
   * "Sliding window and softcap"); THRIFT pools keep every tile high. */
  for (int64_t j = 0; !thrift && pp->precision != LPATTN_PREC_HIGH && j < i && j <= jl; j++)
    if (bf->kind[j] == LP_TILE_DIAG) bf->mode[j] = LP_MODE_LOW;
  int any_low = 0;
  for (int64_t j = 0; j <= jl; j++) any_low |= bf->mode[j] == LP_MODE_LOW;
  if (any_low && cfg->fp8s) { /* Q^: the code values of E4M3(q / q_descale) */
    const float qd = lp_fp8s_descale(pr->q_descale, s, hk);
    for (int64_t e = ra * D; e < rb * D; e++) bf->Qd[e] = lpattn_e4m3_to_f32(lp_fp8s_code(bf->Q[e], qd));
  } else if (any_low) {
    ref_quant_rows(cfg, bf->Q + ra * D, rb - ra, bf->Qd + ra * D);
  }

  for (int64_t c0 = 0, c1; c0 <= jl; c0 = c1 + 1) {
    c1 = lp_decode_chunk_start(lp_decode_chunk_of(c0, sq->tile0) + 1, sq->tile0) - 1;
    if (c1 > jl) c1 = jl;
    for (int64_t r = ra; r < rb; r++) ref_row_init(&bf->rows[r], bf->acc + r * D, D);
    for (int64_t j = c0; j <= c1; j++) {
      if (bf->mode[j] == LP_MODE_SKIP) continue; /* outside the window */
      ref_tile t = {bf->mode[j] == LP_MODE_LOW, T, bf->kt, bf->vt, NULL};
      if (t.low) {
        t.nk = lp_kv_seq_read_low(sq, hk, j, bf->kt, bf->vt); /* T, or FP8_STATIC's tokens */
        if (!t.nk) return LPATTN_ERR_BACKEND;
      } else {
        t.nk = lp_kv_seq_read_high(sq, hk, j, bf->kt, bf->vt);
        if (t.nk < 0) return LPATTN_ERR_BACKEND;
      }
      if (cfg->pasa) {
        /* As in prefill: the diagonal tile borrows tile i-1's mean; tile 0
         * (diagonal, always high) its own first key. */
        const float *src = i > 0 ? lp_kv_seq_kmean(sq, hk, j < i ? j : i - 1) : bf->kt;
        ref_pasa_shift(pp->pasa_beta, src, D, bf->kshift);
        t.kshift = bf->kshift;
        if (!t.low) {
          ref_pasa_kprime(cfg, bf->kt, bf->kshift, t.nk, bf->kx);
          t.k = bf->kx;
        }
      }
      for (int64_t r = ra; r < rb; r++) {
        int64_t first, nvis = lp_mask_range(&msk, row0 + r, j * T, t.nk, &first);
        ref_row_tile_at(cfg, &bf->rows[r], bf->Q + r * D, bf->Qd + r * D, &t, first, nvis, &bf->w);
      }
    }
    for (int64_t r = ra; r < rb; r++) {
      float lse, h;
      for (int64_t d = 0; cfg->fp8s && d < D; d++) bf->rows[r].acc[d] *= cfg->o_mul;
      ref_row_finish(&bf->rows[r], D, bf->o, &lse, &h);
      merge_chunk(D, c0 == 0, bf->o, lse, h, bf->mo + r * (D + 2));
    }
  }
  for (int64_t r = ra; r < rb; r++) {
    const float *m = bf->mo + r * (D + 2);
    for (int64_t d = 0; d < pr->out->shape[3]; d++)
      lp_store_f32(pr->out->data, pr->out->dtype, lp_off4(pr->out, s, hq, r, d), m[d]);
    if (pr->lse) lp_store_f32(pr->lse->data, LPATTN_F32, lp_off4(pr->lse, s, hq, r, 0), m[D]);
    if (pr->entropy)
      lp_store_f32(pr->entropy->data, LPATTN_F32, lp_off4(pr->entropy, s, hq, r, 0), m[D + 1]);
  }
  return LPATTN_OK;
}

lpattn_status ref_paged_decode(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                               const lpattn_kv_batch *batch, const lpattn_attn_problem *pr) {
  (void)ctx;
  const lpattn_kv_pool_params *pp = &pool->p;
  const lpattn_tensor *q = pr->q;
  /* D: the pool's storage width; q's channels past head_dim are zero, out
   * takes the first head_dim_v (SEMANTICS "Head dimensions") */
  const int64_t T = pp->page_size, D = lp_kv_store_dim(pp), Sq = pr->Sq;
  lp_kv_seq sq;
  int64_t longest = 0; /* scratch for the batch's tiles, not max_length's */
  for (int64_t s = 0; s < batch->num_seqs; s++) {
    lp_kv_seq_of(pool, batch, s, &sq);
    if (sq.len > longest) longest = sq.len;
  }
  const ref_cfg cfg = {D, T, pr->sm_scale, pp->pasa, pr->score_f16, pp->mx_scale_round_up,
                       sq.L.fmt, 0, 0.0, 0.0, pr->softcap};
  decode_buf bf;
  lpattn_status st = buf_alloc(&bf, Sq, T, D, lp_tile_count(longest, T));
  if (st != LPATTN_OK) return st; /* before anything is written */
  lp_host_record_q(pool, batch, q);
  for (int64_t s = 0; s < batch->num_seqs && st == LPATTN_OK; s++) {
    lp_kv_seq_of(pool, batch, s, &sq);
    const int64_t row0 = lp_kv_seq_row0(&sq, Sq);
    const int n = (int)lp_tile_count(sq.len, T);
    const int k = lp_thrift_k_seq(pr, n);
    for (int64_t hq = 0; hq < pp->num_q_heads && st == LPATTN_OK; hq++) {
      for (int64_t r = 0; r < Sq; r++)
        for (int64_t d = 0; d < D; d++)
          bf.Q[r * D + d] = d < q->shape[3] ? lp_load_f32(q->data, q->dtype, lp_off4(q, s, hq, r, d)) : 0.0f;
      /* Sq <= T: the rows span at most two query tiles. */
      for (int64_t ra = 0; ra < Sq && st == LPATTN_OK;) {
        const int64_t i = (row0 + ra) / T;
        int64_t rb = ra;
        while (rb < Sq && (row0 + rb) / T == i) rb++;
        st = decode_tile(&sq, pr, &cfg, &bf, s, hq, i, ra, rb, k);
        ra = rb;
      }
    }
  }
  buf_free(&bf);
  return st;
}
