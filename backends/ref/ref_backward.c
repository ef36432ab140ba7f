/* ref backward (SPEC 10, SEMANTICS "Backward"), in f64: for every query tile
 * and every KV tile in the mode the forward gave it, the gradients of the
 * function the forward computed, with P = exp(S - LSE) rebuilt from the
 * forward's scores and LSE and Delta = rowsum(dO * O).
 * - High tiles: exact products of the operands as given.
 * - Low tiles: the four products dV = P^T dO, dP = dO V^T, dQ = dS K and
 *   dK = dS^T Q quantize both operands in the tile's format along the
 *   product's reduction axis, with stochastic rounding (one Philox stream per
 *   operand, element index = the element's logical index), scales RNE.
 * dK and dV are summed over the q heads of a GQA group in head order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_internal.h"
#include "tiles.h"
#include "window.h"

/* The eight quantized backward operands, in the order their Philox streams
 * are numbered (SEMANTICS "Backward"). */
enum { OP_P_R, OP_DO_R, OP_DO_D, OP_V_D, OP_DS_C, OP_K_C, OP_DS_R, OP_Q_R };

typedef struct {
  const lpattn_bwd_problem *bp;
  const lpattn_attn_problem *pr;
  ref_cfg cfg;
  int quantize;
  int64_t nkt, W; /* W: the widest matrix side, max(Bq, Bk, D) */
  float *K, *V, *kbar, *qbar, *score, *O;
  double *dK, *dV, *dQ, *P, *delta, *lse;
  double *J; /* [Bq x Bk] softcap's ds/du = 1 - tanh^2 (1 without a softcap) */
  uint8_t *kind, *mode;
  /* [W x W] float scratch: operands zero-padded to whole tiles, and their
   * quantized forms */
  float *Q, *Qd, *dO, *Kt, *Vt, *lowk, *m1, *m2, *x, *y;
  int64_t *idx;
  uint8_t *codes, *scales;
} bwd;

static void bwd_free(bwd *w) {
  void *p[] = {w->K, w->V, w->kbar, w->qbar, w->score, w->O, w->dK, w->dV, w->dQ, w->P,
               w->delta, w->lse, w->kind, w->mode, w->Q, w->Qd, w->dO, w->Kt, w->Vt, w->lowk,
               w->m1, w->m2, w->x, w->y, w->idx, w->codes, w->scales, w->J};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

static lpattn_status bwd_alloc(bwd *w) {
  const lpattn_attn_problem *pr = w->pr;
  const size_t S = (size_t)pr->Skv * (size_t)pr->D, WW = (size_t)(w->W * w->W), f = sizeof(float);
  const size_t n = (size_t)w->nkt, d = sizeof(double);
  w->K = malloc(f * S), w->V = malloc(f * S), w->kbar = malloc(f * n * (size_t)pr->D);
  w->qbar = malloc(f * (size_t)pr->D), w->score = malloc(f * n), w->O = malloc(f * WW);
  w->dK = malloc(d * S), w->dV = malloc(d * S), w->dQ = malloc(d * WW), w->P = malloc(d * WW);
  w->J = malloc(d * WW);
  w->delta = malloc(d * (size_t)w->W), w->lse = malloc(d * (size_t)w->W);
  w->kind = malloc(n), w->mode = malloc(n);
  float **fl[] = {&w->Q, &w->Qd, &w->dO, &w->Kt, &w->Vt, &w->lowk, &w->m1, &w->m2};
  int ok = 1;
  for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) ok &= (*fl[i] = calloc(WW, f)) != NULL;
  w->x = malloc(f * (size_t)w->W), w->y = malloc(f * (size_t)w->W);
  w->idx = malloc(sizeof(int64_t) * (size_t)w->W);
  w->codes = malloc((size_t)w->W), w->scales = malloc((size_t)w->W);
  void *p[] = {w->K, w->V, w->kbar, w->qbar, w->score, w->O, w->dK, w->dV, w->dQ, w->P,
               w->delta, w->lse, w->kind, w->mode, w->x, w->y, w->idx, w->codes, w->scales, w->J};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) ok &= p[i] != NULL;
  if (ok) return LPATTN_OK;
  bwd_free(w);
  return LPATTN_ERR_OUT_OF_MEMORY;
}

/* Logical index of element (r, c) of an operand tile: base + r * rs + c * cs. */
typedef struct {
  int64_t base, rs, cs;
} lin;

/* dst = the [R x C] matrix src (row-major, C wide) quantized along its rows
 * (each column is a domain of R values) or along its columns (each row a
 * domain of C values), then dequantized; a copy when not quantizing. */
static void qdq(bwd *w, int op, const float *src, int64_t R, int64_t C, int along_rows, lin ix,
                float *dst) {
  if (!w->quantize) {
    memcpy(dst, src, sizeof(float) * (size_t)(R * C));
    return;
  }
  /* one Philox key per operand: seed + (op + 1) * golden ratio (mod 2^64) */
  const lp_quant_cfg qc = {w->pr->low, 1, w->bp->seed + (uint64_t)(op + 1) * 0x9E3779B97F4A7C15ull,
                           w->pr->mx_round_up};
  const int64_t nd = along_rows ? C : R, n = along_rows ? R : C;
  const int64_t es = along_rows ? C : 1, ds = along_rows ? 1 : C; /* element / domain strides */
  for (int64_t a = 0; a < nd; a++) {
    for (int64_t e = 0; e < n; e++) {
      const int64_t r = along_rows ? e : a, c = along_rows ? a : e;
      w->idx[e] = ix.base + r * ix.rs + c * ix.cs;
    }
    float outer;
    lp_quantize_domain(&qc, src + a * ds, es, (int)n, w->idx, w->codes, w->scales, &outer);
    lp_dequantize_domain(qc.format, w->codes, w->scales, outer, (int)n, w->y);
    for (int64_t e = 0; e < n; e++) dst[a * ds + e * es] = w->y[e];
  }
}

/* Zero-padded copy of n rows of D values into a whole tile of T rows. */
static void pad_rows(const float *src, int64_t n, int64_t T, int64_t D, float *dst) {
  memcpy(dst, src, sizeof(float) * (size_t)(n * D));
  memset(dst + n * D, 0, sizeof(float) * (size_t)((T - n) * D));
}

static double dotf(const float *a, const float *b, int64_t D) {
  double s = 0.0;
  for (int64_t d = 0; d < D; d++) s += (double)a[d] * b[d];
  return s;
}

/* dst[c][d] += scale * sum over the nr query rows r of A[r][c] * B[r][d]
 * (A: [.. x Bk], B: [.. x D]): the products reduced along the query rows. */
static void add_at_b(const float *A, const float *B, int64_t nr, int64_t nk, int64_t Bk, int64_t D,
                     double scale, double *dst) {
  for (int64_t c = 0; c < nk; c++)
    for (int64_t d = 0; d < D; d++) {
      double s = 0.0;
      for (int64_t r = 0; r < nr; r++) s += (double)A[r * Bk + c] * B[r * D + d];
      dst[c * D + d] += scale * s;
    }
}

/* One (query tile, KV tile) pair: rows [r0, r0 + nr) of q head hq, keys
 * [c0, c0 + nk); P holds the pair's probabilities ([Bq x Bk], 0 where masked). */
static void low_pair(bwd *w, int64_t b, int64_t hq, int64_t hk, int64_t r0, int64_t nr,
                     int64_t c0, int64_t nk) {
  const lpattn_attn_problem *pr = w->pr;
  const int64_t D = pr->D, Bq = pr->Bq, Bk = pr->Bk, Sq = pr->Sq, Skv = pr->Skv;
  const double sm = pr->sm_scale;
  const lin iP = {((b * pr->Hq + hq) * Sq + r0) * Skv + c0, Skv, 1};
  const lin iQ = {((b * pr->Hq + hq) * Sq + r0) * D, D, 1};
  const lin iK = {((b * pr->Hkv + hk) * Skv + c0) * D, D, 1};
  float *A = w->m1, *B = w->m2, *Pf = w->lowk; /* lowk is free once P is made */
  /* dV = P^T dO: P and dO along the query rows */
  for (int64_t e = 0; e < Bq * Bk; e++) Pf[e] = (float)w->P[e];
  qdq(w, OP_P_R, Pf, Bq, Bk, 1, iP, A);
  qdq(w, OP_DO_R, w->dO, Bq, D, 1, iQ, B);
  add_at_b(A, B, nr, nk, Bk, D, 1.0, w->dV + c0 * D);
  /* dP = dO V^T: both along d; dS = P (dP - Delta) */
  qdq(w, OP_DO_D, w->dO, Bq, D, 0, iQ, A);
  qdq(w, OP_V_D, w->Vt, Bk, D, 0, iK, B);
  for (int64_t r = 0; r < nr; r++)
    for (int64_t c = 0; c < nk; c++) {
      const double p = w->P[r * Bk + c];
      Pf[r * Bk + c] =
          p != 0.0 ? (float)(p * (dotf(A + r * D, B + c * D, D) - w->delta[r]) * w->J[r * Bk + c]) : 0.0f;
    }
  /* dQ = dS K: along the keys */
  qdq(w, OP_DS_C, Pf, Bq, Bk, 0, iP, A);
  qdq(w, OP_K_C, w->Kt, Bk, D, 1, iK, B);
  for (int64_t r = 0; r < nr; r++)
    for (int64_t d = 0; d < D; d++) {
      double s = 0.0;
      for (int64_t c = 0; c < nk; c++) s += (double)A[r * Bk + c] * B[c * D + d];
      w->dQ[r * D + d] += sm * s;
    }
  /* dK = dS^T Q: along the query rows */
  qdq(w, OP_DS_R, Pf, Bq, Bk, 1, iP, A);
  qdq(w, OP_Q_R, w->Q, Bq, D, 1, iQ, B);
  add_at_b(A, B, nr, nk, Bk, D, sm, w->dK + c0 * D);
}

static void high_pair(bwd *w, int64_t nr, int64_t c0, int64_t nk) {
  const int64_t D = w->pr->D, Bk = w->pr->Bk;
  const double sm = w->pr->sm_scale;
  for (int64_t r = 0; r < nr; r++)
    for (int64_t c = 0; c < nk; c++) {
      const double p = w->P[r * Bk + c];
      if (p == 0.0) continue;
      const float *dO = w->dO + r * D, *v = w->Vt + c * D, *k = w->Kt + c * D, *q = w->Q + r * D;
      const double ds = p * (dotf(dO, v, D) - w->delta[r]) * w->J[r * Bk + c];
      for (int64_t d = 0; d < D; d++) {
        w->dV[(c0 + c) * D + d] += p * dO[d];
        w->dQ[r * D + d] += sm * ds * k[d];
        w->dK[(c0 + c) * D + d] += sm * ds * q[d];
      }
    }
}

static void store(const lpattn_tensor *t, int64_t b, int64_t h, int64_t s0, int64_t n,
                  int64_t D, const double *src) {
  for (int64_t s = 0; s < n; s++)
    for (int64_t d = 0; d < D; d++)
      lp_store_f32(t->data, t->dtype, lp_off4(t, b, h, s0 + s, d), (float)src[s * D + d]);
}

/* Query tile i of q head hq: dQ rows, and its share of dK/dV. */
static void query_tile(bwd *w, int64_t b, int64_t hq, int64_t hk, int64_t i) {
  const lpattn_attn_problem *pr = w->pr;
  const int64_t D = pr->D, Bq = pr->Bq, Bk = pr->Bk;
  const int64_t r0 = i * Bq, nr = pr->Sq - r0 < Bq ? pr->Sq - r0 : Bq;
  const lp_mask msk = lp_mask_of(pr); /* causal and sliding window */
  memset(w->Q, 0, sizeof(float) * (size_t)(Bq * D)), memset(w->dO, 0, sizeof(float) * (size_t)(Bq * D));
  ref_load_rows(pr->q, b, hq, r0, nr, D, w->Q);
  ref_load_rows(w->bp->dout, b, hq, r0, nr, D, w->dO);
  ref_load_rows(pr->out, b, hq, r0, nr, D, w->O);
  for (int64_t r = 0; r < nr; r++) {
    w->delta[r] = dotf(w->dO + r * D, w->O + r * D, D);
    w->lse[r] = lp_load_f32(pr->lse->data, LPATTN_F32, lp_off4(pr->lse, b, hq, r0 + r, 0));
  }
  lp_tile_plan(pr, w->K, D, w->kbar, w->qbar, w->score, b, hq, i, w->nkt, w->kind, w->mode);
  int any_low = 0;
  for (int64_t j = 0; j < w->nkt; j++) any_low |= w->mode[j] == LP_MODE_LOW;
  if (any_low) ref_quant_rows(&w->cfg, w->Q, nr, w->Qd);
  memset(w->dQ, 0, sizeof(double) * (size_t)(Bq * D));
  for (int64_t j = 0; j < w->nkt; j++) {
    if (w->mode[j] == LP_MODE_SKIP) continue;
    const int low = w->mode[j] == LP_MODE_LOW;
    const int64_t c0 = j * Bk, nk = pr->Skv - c0 < Bk ? pr->Skv - c0 : Bk;
    pad_rows(w->K + c0 * D, nk, Bk, D, w->Kt);
    pad_rows(w->V + c0 * D, nk, Bk, D, w->Vt);
    if (low) ref_quant_rows(&w->cfg, w->Kt, nk, w->lowk); /* the forward's K (along d) */
    /* P = exp(S - LSE) with the forward's (softcapped) scores, 0 where
     * masked; J = d softcap(u) / du = 1 - tanh^2(u / softcap) */
    memset(w->P, 0, sizeof(double) * (size_t)(Bq * Bk));
    for (int64_t r = 0; r < nr; r++) {
      int64_t first;
      const int64_t nvis = lp_mask_range(&msk, r0 + r, c0, nk, &first);
      if (w->lse[r] == -INFINITY) continue;
      for (int64_t c = first; c < first + nvis; c++) {
        const double s = low ? dotf(w->Qd + r * D, w->lowk + c * D, D) : dotf(w->Q + r * D, w->Kt + c * D, D);
        const double u = s * pr->sm_scale, th = pr->softcap > 0.0f ? tanh(u / pr->softcap) : 0.0;
        w->P[r * Bk + c] = exp(lp_softcap_f64(u, pr->softcap) - w->lse[r]);
        w->J[r * Bk + c] = 1.0 - th * th;
      }
    }
    if (low)
      low_pair(w, b, hq, hk, r0, nr, c0, nk);
    else
      high_pair(w, nr, c0, nk);
  }
  store(w->bp->dq, b, hq, r0, nr, D, w->dQ);
}

/* quantize = 0 leaves the low tiles' backward operands unquantized (tests:
 * the mean over seeds must converge to that gradient). */
lpattn_status ref_backward_opts(const lpattn_bwd_problem *bp, int quantize) {
  bwd w;
  memset(&w, 0, sizeof w);
  w.bp = bp, w.pr = &bp->f, w.quantize = quantize;
  const lpattn_attn_problem *pr = w.pr;
  const int64_t D = pr->D, group = pr->Hq / pr->Hkv, nqt = lp_tile_count(pr->Sq, pr->Bq);
  w.nkt = lp_tile_count(pr->Skv, pr->Bk);
  w.W = pr->Bq > pr->Bk ? pr->Bq : pr->Bk;
  if (D > w.W) w.W = D;
  const ref_cfg cfg = {D, pr->Bk, pr->sm_scale, 0, 0, pr->mx_round_up, pr->low, 0, 0.0, 0.0,
                       pr->softcap};
  w.cfg = cfg;
  lpattn_status st = bwd_alloc(&w);
  if (st != LPATTN_OK) return st;
  for (int64_t b = 0; b < pr->B; b++)
    for (int64_t hk = 0; hk < pr->Hkv; hk++) {
      ref_load_rows(pr->k, b, hk, 0, pr->Skv, D, w.K);
      ref_load_rows(pr->v, b, hk, 0, pr->Skv, D, w.V);
      lp_tile_means(pr, w.K, w.nkt, w.kbar);
      memset(w.dK, 0, sizeof(double) * (size_t)(pr->Skv * D));
      memset(w.dV, 0, sizeof(double) * (size_t)(pr->Skv * D));
      for (int64_t g = 0; g < group; g++)
        for (int64_t i = 0; i < nqt; i++) query_tile(&w, b, hk * group + g, hk, i);
      store(bp->dk, b, hk, 0, pr->Skv, D, w.dK);
      store(bp->dv, b, hk, 0, pr->Skv, D, w.dV);
    }
  bwd_free(&w);
  return LPATTN_OK;
}

lpattn_status ref_backward(lpattn_ctx *ctx, const lpattn_bwd_problem *pr) {
  (void)ctx;
  return ref_backward_opts(pr, 1);
}
