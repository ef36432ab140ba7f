/* Per-row online-softmax state of SPEC 3 with the entropy accumulator r
 * (SPEC/seed 002, r divided by l at the end) and PASA's running frame G
 * (SEMANTICS "PASA"), plus the state merge of SPEC 7. Scalar per row: the
 * backend computes rowmax / sums over a tile with its own SIMD and calls
 * these between the passes. Without PASA pass c = 0: G stays 0 and this is
 * plain SPEC 3. */
#ifndef LPK_SOFTMAX_H
#define LPK_SOFTMAX_H
#include "lpk_fn.h"
/* m: running max in frame G; l: sum of exp; r: sum of P * (score - G);
 * G: PASA pseudo-average; n: tiles folded in so far. */
typedef struct { float m, l, r, G; int n; } lpk_row;

LPK_FN void lpk_row_init(lpk_row *st) {
  st->m = -lpk_from_bits(0x7f800000u);
  st->l = 0.0f, st->r = 0.0f, st->G = 0.0f, st->n = 0;
}

/* Step of one tile, between the max pass and the exp pass. */
typedef struct { float m_new, G_new, alpha, dm_prev, dm_cur, bias; } lpk_step;

/* smax: rowmax of this tile's (shifted) scores, -inf if the row sees none;
 * c: the tile's PASA correction (0 without PASA). P = exp(S' + bias). */
LPK_FN lpk_step lpk_row_begin(const lpk_row *st, float smax, float c) {
  lpk_step s;
  int n = st->n + 1;
  /* a zero sum (no PASA) is not divided: a GPU's 0 / x takes a slow path */
  const float gsum = (float)(n - 1) * st->G + c;
  s.G_new = gsum == 0.0f ? gsum : (gsum == 0.0f ? 1.0f : gsum) / (float)n;
  s.dm_prev = st->G - s.G_new;
  s.dm_cur = c - s.G_new;
  float old = st->m + s.dm_prev, cur = smax + s.dm_cur;
  s.m_new = old > cur ? old : cur;
  if (s.m_new == -lpk_from_bits(0x7f800000u)) { /* nothing visible yet */
    s.alpha = 1.0f, s.bias = 0.0f;
  } else {
    s.alpha = expf(old - s.m_new);
    s.bias = s.dm_cur - s.m_new;
  }
  return s;
}

/* sum_p = sum P, sum_ps = sum P * S' (both over the tile's row). The caller
 * scales acc by s.alpha and adds P V. */
LPK_FN void lpk_row_end(lpk_row *st, const lpk_step *s, float sum_p, float sum_ps) {
  st->r = s->alpha * (st->r + st->l * s->dm_prev) + (sum_ps + sum_p * s->dm_cur);
  st->l = s->alpha * st->l + sum_p;
  st->m = s->m_new, st->G = s->G_new, st->n += 1;
}

/* The same two steps without PASA (c = 0, so G stays 0 and n only counts):
 * what row_begin / row_end compute then, on m, l, r alone, for kernels
 * whose registers cannot carry G and n. A row state whose n is unused
 * (row_finish reads n == 0 as l == 0). */
LPK_FN lpk_step lpk_row0_begin(const lpk_row *st, float smax) {
  lpk_step s;
  s.G_new = 0.0f, s.dm_prev = 0.0f, s.dm_cur = 0.0f;
  s.m_new = st->m > smax ? st->m : smax;
  if (s.m_new == -lpk_from_bits(0x7f800000u)) {
    s.alpha = 1.0f, s.bias = 0.0f;
  } else {
    s.alpha = expf(st->m - s.m_new);
    s.bias = -s.m_new;
  }
  return s;
}
LPK_FN void lpk_row0_end(lpk_row *st, const lpk_step *s, float sum_p, float sum_ps) {
  st->r = s->alpha * st->r + sum_ps;
  st->l = s->alpha * st->l + sum_p;
  st->m = s->m_new, st->n = 1;
}

/* O = acc * inv_l; a row that saw no key gives O = 0, LSE = -inf, H = 0.
 * (Not !(l > 0): a NaN l from a non-finite input must stay NaN.) */
LPK_FN void lpk_row_finish(const lpk_row *st, float *inv_l, float *lse, float *ent) {
  if (st->n == 0 || st->l == 0.0f) {
    *inv_l = 0.0f, *lse = -lpk_from_bits(0x7f800000u), *ent = 0.0f;
    return;
  }
  float logl = logf(st->l);
  *inv_l = 1.0f / st->l;
  *lse = st->m + logl + st->G;
  *ent = st->m + logl - st->r / st->l;
}

/* SPEC 7 for one row: weights of the two partials and the merged LSE/H.
 * An empty partial (LSE = -inf) is the identity; 0 log 0 = 0. */
LPK_FN float lpk_xlogx(float w) { return w > 0.0f ? w * logf(w) : 0.0f; }
LPK_FN void lpk_merge(float la, float ha, float lb, float hb, float *wa, float *wb,
                          float *lse, float *ent) {
  float ninf = -lpk_from_bits(0x7f800000u);
  if (la == ninf && lb == ninf) {
    *wa = *wb = 0.0f, *lse = ninf, *ent = 0.0f;
    return;
  }
  float m = la > lb ? la : lb;
  float l = m + logf(expf(la - m) + expf(lb - m));
  *wa = expf(la - l), *wb = expf(lb - l);
  *lse = l;
  *ent = (*wa > 0.0f ? *wa * ha : 0.0f) + (*wb > 0.0f ? *wb * hb : 0.0f) - lpk_xlogx(*wa) -
         lpk_xlogx(*wb);
}
#endif
