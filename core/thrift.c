/* ThriftAttention budget (SPEC 5), the tile bookkeeping of tiles.h, and the
 * derived-parameter rules of internal.h (low format, THRIFT k). */
#include <math.h>
#include <stdint.h>

#include "formats.h"
#include "internal.h"
#include "thrift_k.h"
#include "tiles.h"
#include "window.h"

/* The k rule lives in thrift_k.h (shared with the GPU backends). */
int lpattn_thrift_k(int n_tiles, float budget, int causal) {
  return lp_thrift_k_calc(n_tiles, budget, causal);
}

lpattn_format lp_low_format(lpattn_precision p, lpattn_format thrift_low) {
  switch (p) {
    case LPATTN_PREC_FP8: case LPATTN_PREC_FP8_STATIC: return LPATTN_FMT_FP8;
    case LPATTN_PREC_MXFP4: return LPATTN_FMT_MXFP4;
    case LPATTN_PREC_THRIFT: return thrift_low;
    default: return LPATTN_FMT_NVFP4;
  }
}

int lp_thrift_k_for(int k_fixed, float budget, int causal, int64_t n_tiles) {
  return lp_thrift_k_rule(k_fixed, budget, causal, n_tiles);
}

/* The causal mask alone (no window): core/window.c's rules. */
int lp_tile_kind(int causal, int64_t off, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const lp_mask m = {causal, off, -1, -1, 1};
  return lp_mask_kind(&m, r0, r1, c0, c1);
}

int64_t lp_tile_visible(int causal, int64_t off, int64_t r, int64_t c0, int64_t nk) {
  const lp_mask m = {causal, off, -1, -1, 1};
  int64_t first;
  return lp_mask_range(&m, r, c0, nk, &first); /* first = 0: a prefix */
}

/* NaN scores (non-finite inputs) rank last so the order stays total. */
static float rank_key(float s) { return isnan(s) ? -INFINITY : s; }

void lp_tile_modes(lpattn_precision prec, int leaky, int k, int64_t nkt, const uint8_t *kind,
                   const float *score, uint8_t *mode) {
  int64_t ndiag = 0;
  for (int64_t j = 0; j < nkt; j++) {
    if (kind[j] == LP_TILE_MASKED) mode[j] = LP_MODE_SKIP;
    else if (prec == LPATTN_PREC_HIGH) mode[j] = LP_MODE_HIGH;
    else if (leaky || prec == LPATTN_PREC_FP8_STATIC) mode[j] = LP_MODE_LOW; /* SPEC 11 */
    else if (kind[j] == LP_TILE_DIAG) mode[j] = LP_MODE_HIGH, ndiag++;
    else mode[j] = LP_MODE_LOW;
  }
  if (prec != LPATTN_PREC_THRIFT || leaky) return;
  /* Repeated arg-max with a strict comparison: ties go to the lower j. */
  for (int64_t picked = ndiag; picked < k; picked++) {
    int64_t best = -1;
    for (int64_t j = 0; j < nkt; j++) {
      if (kind[j] != LP_TILE_FULL || mode[j] != LP_MODE_LOW) continue;
      if (best < 0 || rank_key(score[j]) > rank_key(score[best])) best = j;
    }
    if (best < 0) break;
    mode[best] = LP_MODE_HIGH;
  }
}

void lp_mean_rows_f32(const void *base, lpattn_dtype dt, int64_t off, int64_t row_stride,
                      int64_t elem_stride, int64_t n, int64_t D, float divisor, float *mean) {
  for (int64_t d = 0; d < D; d++) {
    float s = 0.0f;
    for (int64_t r = 0; r < n; r++) {
      const float x = lp_load_f32(base, dt, off + r * row_stride + d * elem_stride);
      s += isfinite(x) ? x : 0.0f; /* a NaN/Inf input never moves the mean */
    }
    mean[d] = s / divisor;
  }
}

float lp_dot_f32(const float *a, const float *b, int64_t D) {
  float s = 0.0f;
  for (int64_t d = 0; d < D; d++) s += a[d] * b[d];
  return s;
}

/* ---- a query tile's plan (shared by the host backends' prefill and backward) ---- */

/* f32 dot of qbar with one key row, d ascending; a non-finite key element
 * counts as zero, as in the tile means (SEMANTICS "Non-finite inputs"). */
static float dot_finite(const float *a, const float *k, int64_t D) {
  float s = 0.0f;
  for (int64_t d = 0; d < D; d++) s += isfinite(k[d]) ? a[d] * k[d] : 0.0f;
  return s;
}

/* Qbar of the selection: query tile qt's Sq-clipped rows of head hq, or with
 * the GQA rule of every q head of hq's KV group (f32 sum over heads, then
 * rows, in order; one division by rows x heads). */
static void thrift_qbar(const lpattn_attn_problem *pr, int64_t b, int64_t hq, int64_t qt,
                        float *qbar) {
  const int64_t D = pr->D, r0 = qt * pr->Bq, n = pr->Sq - r0 < pr->Bq ? pr->Sq - r0 : pr->Bq;
  const lpattn_tensor *q = pr->q;
  if (!(pr->thrift_rule & LPATTN_THRIFT_RULE_GQA) || pr->Hq == pr->Hkv) {
    lp_mean_rows_f32(q->data, q->dtype, lp_off4(q, b, hq, r0, 0), q->stride[2], q->stride[3], n, D,
                     (float)n, qbar);
    return;
  }
  const int64_t G = pr->Hq / pr->Hkv, h0 = hq / G * G;
  for (int64_t d = 0; d < D; d++) {
    float s = 0.0f;
    for (int64_t h = h0; h < h0 + G; h++)
      for (int64_t r = 0; r < n; r++) {
        const float x = lp_load_f32(q->data, q->dtype, lp_off4(q, b, h, r0 + r, d));
        s += isfinite(x) ? x : 0.0f;
      }
    qbar[d] = s / (float)(n * G);
  }
}

void lp_thrift_scores(const lpattn_attn_problem *pr, const float *K, int64_t ldk, const float *kbar,
                      int64_t ldb, float *qbar, float *score, int64_t b, int64_t hq, int64_t i,
                      int64_t nkt, const uint8_t *kind) {
  const int64_t D = pr->D, Bk = pr->Bk;
  const int64_t qt = (pr->causal && pr->selection_mode == LPATTN_SELECT_CAUSAL) ? i - 1 : i;
  for (int64_t j = 0; j < nkt; j++) score[j] = 0.0f;
  if (qt >= 0) { /* else no past query tile: all ties, the lowest j wins */
    thrift_qbar(pr, b, hq, qt, qbar);
    for (int64_t j = 0; j < nkt; j++) {
      if (kind[j] != LP_TILE_FULL) continue;
      if (!(pr->thrift_rule & LPATTN_THRIFT_RULE_KMAX)) {
        score[j] = lp_dot_f32(qbar, kbar + j * ldb, D);
        continue;
      }
      const int64_t nk = pr->Skv - j * Bk < Bk ? pr->Skv - j * Bk : Bk;
      float m = -INFINITY; /* the largest Qbar . k over the tile's keys */
      for (int64_t c = 0; c < nk; c++) {
        const float s = dot_finite(qbar, K + (j * Bk + c) * ldk, D);
        if (s > m) m = s;
      }
      score[j] = m;
    }
  }
  /* The sink: a full tile 0 ranks first (it still counts among the k). */
  if ((pr->thrift_rule & LPATTN_THRIFT_RULE_SINK) && nkt > 0 && kind[0] == LP_TILE_FULL)
    score[0] = INFINITY;
}

void lp_tile_means(const lpattn_attn_problem *pr, const float *K, int64_t nkt, float *kbar) {
  const int64_t D = pr->D;
  for (int64_t j = 0; j < nkt; j++) {
    int64_t n = pr->Skv - j * pr->Bk < pr->Bk ? pr->Skv - j * pr->Bk : pr->Bk;
    lp_mean_rows_f32(K, LPATTN_F32, j * pr->Bk * D, D, 1, n, D, (float)n, kbar + j * D);
  }
}

int64_t lp_tile_plan(const lpattn_attn_problem *pr, const float *K, int64_t ldk, const float *kbar,
                     float *qbar, float *score, int64_t b, int64_t hq, int64_t i, int64_t nkt,
                     uint8_t *kind, uint8_t *mode) {
  const int64_t Bq = pr->Bq, Bk = pr->Bk;
  const int64_t r0 = i * Bq, nr = pr->Sq - r0 < Bq ? pr->Sq - r0 : Bq;
  const lp_mask msk = lp_mask_of(pr); /* causal and sliding window (core/window.c) */
  int64_t last_full = -1;
  for (int64_t j = 0; j < nkt; j++) {
    const int64_t c0 = j * Bk;
    kind[j] = (uint8_t)lp_mask_kind(&msk, r0, r0 + nr - 1, c0, c0 + Bk - 1);
    if (kind[j] == LP_TILE_FULL) last_full = j;
  }
  if (pr->precision == LPATTN_PREC_THRIFT && !pr->leaky)
    lp_thrift_scores(pr, K, ldk, kbar, pr->D, qbar, score, b, hq, i, nkt, kind);
  lp_tile_modes(pr->precision, pr->leaky, pr->thrift_k, nkt, kind, score, mode);
  return last_full;
}
