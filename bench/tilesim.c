/* Causal THRIFT for arbitrary tile selections; see tilesim.h. Per (b, h,
 * query tile) every visible KV tile's partial softmax state (m, l, o) is
 * computed once high and, for full tiles, once low; each selection then only
 * picks and merges partials. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tilesim.h"

/* x (f32 [B,H,S,D]) -> quantize -> dequantize into y (f32, same shape). */
static int quant_roundtrip(lpattn_ctx *ctx, float *x, float *y, const int64_t shape[4],
                           lpattn_format f, lpattn_axis axis, int tile) {
  size_t cb, sb, oc;
  if (lpattn_qtensor_sizes(f, axis, tile, shape, &cb, &sb, &oc) != LPATTN_OK) return -1;
  lpattn_qtensor q = {f,
                      axis,
                      tile,
                      {shape[0], shape[1], shape[2], shape[3]},
                      malloc(cb ? cb : 1),
                      malloc(sb ? sb : 1),
                      malloc(sizeof(float) * (oc ? oc : 1))};
  lpattn_quant_params qp;
  lpattn_quant_params_init(&qp);
  qp.format = f;
  qp.axis = axis;
  qp.tile = tile;
  lpattn_tensor xt = lpattn_tensor_4d(x, LPATTN_F32, shape[0], shape[1], shape[2], shape[3]);
  lpattn_tensor yt = lpattn_tensor_4d(y, LPATTN_F32, shape[0], shape[1], shape[2], shape[3]);
  int rc = !q.codes || !q.scales || !q.outer || lpattn_quantize(ctx, &xt, &q, &qp) != LPATTN_OK ||
           lpattn_dequantize(ctx, &q, &yt) != LPATTN_OK;
  free(q.codes), free(q.scales), free(q.outer);
  return rc ? -1 : 0;
}

typedef struct {
  double m, l;
  double *o; /* D values, unnormalised (relative to m) */
} partial;

/* Softmax partial of one row over keys of scores s[0..n) with values V. */
static void fold(const double *s, const float *P, const float *V, int64_t n, int64_t D,
                 partial *pt) {
  double m = -INFINITY;
  for (int64_t c = 0; c < n; c++) m = s[c] > m ? s[c] : m;
  pt->m = m, pt->l = 0.0;
  for (int64_t d = 0; d < D; d++) pt->o[d] = 0.0;
  for (int64_t c = 0; c < n; c++) {
    double e = exp(s[c] - m);
    pt->l += e;
    double w = P ? (double)P[c] : e; /* low tiles: quantized P in the product */
    for (int64_t d = 0; d < D; d++) pt->o[d] += w * V[c * D + d];
  }
}

typedef struct {
  const bench_problem *p;
  int64_t T;
  double scale;
  int nsel;
  uint8_t *const *high;
  float *const *out;
  const float *qd, *kd, *vd; /* dequantized Q, K, V */
  int64_t first, last;       /* this worker's (b, h) range */
  int rc;
} sim_job;

/* One (b, h): every query tile's partials, then every selection's rows. */
static int sim_head(const sim_job *jb, int64_t bh, lpattn_ctx *ctx, partial *pt, double *s,
                    float *praw, float *pq, double *acc) {
  const bench_problem *p = jb->p;
  const int64_t T = jb->T, D = p->D, S = p->Sq, nt = S / T, G = p->Hq / p->Hkv;
  const int64_t bk = (bh / p->Hq * p->Hkv + bh % p->Hq / G) * S * D;
  const double sm_scale = jb->scale;
  for (int64_t qt = 0; qt < nt; qt++) {
    /* Low partials first need every full tile's P, quantized together. */
    for (int64_t r = 0; r < T; r++) {
      const int64_t row = qt * T + r;
      const float *q = p->q + (bh * S + row) * D, *qq = jb->qd + (bh * S + row) * D;
      for (int64_t j = 0; j <= qt; j++) {
        int64_t n = j < qt ? T : r + 1; /* the diagonal tile: keys <= row */
        for (int64_t c = 0; c < n; c++) {
          s[c] = dot_f64(q, p->k + bk + (j * T + c) * D, D) * sm_scale;
        }
        fold(s, NULL, p->v + bk + j * T * D, n, D, &pt[(r * nt + j) * 2]);
        if (j == qt) continue;
        double m = -INFINITY;
        for (int64_t c = 0; c < T; c++) {
          s[c] = dot_f64(qq, jb->kd + bk + (j * T + c) * D, D) * sm_scale;
          m = s[c] > m ? s[c] : m;
        }
        /* Low scores kept as P relative to the tile max (the partial's m). */
        for (int64_t c = 0; c < T; c++) praw[(r * nt + j) * T + c] = (float)exp(s[c] - m);
        pt[(r * nt + j) * 2 + 1].m = m;
      }
    }
    if (qt > 0) {
      const int64_t shape[4] = {1, T, nt, T};
      if (quant_roundtrip(ctx, praw, pq, shape, LPATTN_FMT_NVFP4, LPATTN_AXIS_D, (int)T)) return -1;
    }
    for (int64_t r = 0; r < T; r++)
      for (int64_t j = 0; j < qt; j++) {
        partial *lo = &pt[(r * nt + j) * 2 + 1];
        const float *P = pq + (r * nt + j) * T, *Pr = praw + (r * nt + j) * T;
        const float *V = jb->vd + bk + j * T * D;
        lo->l = 0.0;
        for (int64_t d = 0; d < D; d++) lo->o[d] = 0.0;
        for (int64_t c = 0; c < T; c++) {
          lo->l += Pr[c];
          for (int64_t d = 0; d < D; d++) lo->o[d] += (double)P[c] * V[c * D + d];
        }
      }
    /* Merge the chosen partials of every row, for every selection. */
    for (int sidx = 0; sidx < jb->nsel; sidx++) {
      const uint8_t *flag = jb->high[sidx] + (bh * nt + qt) * nt;
      for (int64_t r = 0; r < T; r++) {
        double M = -INFINITY, L = 0.0;
        for (int64_t j = 0; j <= qt; j++) {
          const partial *x = &pt[(r * nt + j) * 2 + (j < qt && !flag[j])];
          M = x->m > M ? x->m : M;
        }
        for (int64_t d = 0; d < D; d++) acc[d] = 0.0;
        for (int64_t j = 0; j <= qt; j++) {
          const partial *x = &pt[(r * nt + j) * 2 + (j < qt && !flag[j])];
          double w = exp(x->m - M);
          L += w * x->l;
          for (int64_t d = 0; d < D; d++) acc[d] += w * x->o[d];
        }
        float *o = jb->out[sidx] + (bh * S + qt * T + r) * D;
        for (int64_t d = 0; d < D; d++) o[d] = (float)(acc[d] / L);
      }
    }
  }
  return 0;
}

/* Each worker owns its buffers and a ref context (contexts are one-thread). */
static void *sim_worker(void *arg) {
  sim_job *jb = arg;
  const int64_t T = jb->T, D = jb->p->D, nt = jb->p->Sq / T;
  partial *pt = malloc(sizeof(partial) * (size_t)(T * nt * 2));
  double *obuf = malloc(sizeof(double) * (size_t)(T * nt * 2 * D));
  double *s = malloc(sizeof(double) * (size_t)T), *acc = malloc(sizeof(double) * (size_t)D);
  float *praw = calloc((size_t)(T * nt * T), sizeof(float)); /* unused slots stay 0 */
  float *pq = malloc(sizeof(float) * (size_t)(T * nt * T));
  lpattn_ctx *ctx = NULL;
  jb->rc = -1;
  if (pt && obuf && s && acc && praw && pq &&
      lpattn_create(LPATTN_BACKEND_REF, NULL, &ctx) == LPATTN_OK) {
    for (int64_t i = 0; i < T * nt * 2; i++) pt[i].o = obuf + i * D;
    jb->rc = 0;
    for (int64_t bh = jb->first; bh < jb->last && !jb->rc; bh++)
      jb->rc = sim_head(jb, bh, ctx, pt, s, praw, pq, acc);
  }
  lpattn_free(ctx);
  free(pt), free(obuf), free(s), free(acc), free(praw), free(pq);
  return NULL;
}

int tilesim_run(const bench_problem *p, int T, double sm_scale, int threads, int nsel,
                uint8_t *const *high, float *const *out) {
  enum { MAXT = 64 };
  const int64_t D = p->D, S = p->Sq, nbh = p->B * p->Hq;
  if (p->Sq != p->Skv || S % T) return -1;
  const int64_t qs[4] = {p->B, p->Hq, S, D}, ks[4] = {p->B, p->Hkv, S, D};
  const int64_t nq = p->B * p->Hq * S * D, nk = p->B * p->Hkv * S * D;
  float *qd = malloc(sizeof(float) * (size_t)nq), *kd = malloc(sizeof(float) * (size_t)nk);
  float *vd = malloc(sizeof(float) * (size_t)nk);
  lpattn_ctx *ctx = NULL;
  int rc = -1;
  if (!qd || !kd || !vd || lpattn_create(LPATTN_BACKEND_REF, NULL, &ctx) != LPATTN_OK) goto done;
  if (quant_roundtrip(ctx, p->q, qd, qs, LPATTN_FMT_NVFP4, LPATTN_AXIS_D, T) ||
      quant_roundtrip(ctx, p->k, kd, ks, LPATTN_FMT_NVFP4, LPATTN_AXIS_D, T) ||
      quant_roundtrip(ctx, p->v, vd, ks, LPATTN_FMT_NVFP4, LPATTN_AXIS_S, T))
    goto done;
  if (threads < 1) threads = 1;
  if (threads > MAXT) threads = MAXT;
  if (threads > nbh) threads = (int)nbh;
  sim_job jobs[MAXT];
  pthread_t tid[MAXT];
  int started[MAXT] = {0};
  for (int i = 0; i < threads; i++) {
    jobs[i] = (sim_job){
        p, T, sm_scale, nsel, high, out, qd, kd, vd, nbh * i / threads, nbh * (i + 1) / threads, 0};
    if (i > 0) started[i] = pthread_create(&tid[i], NULL, sim_worker, &jobs[i]) == 0;
  }
  sim_worker(&jobs[0]);
  rc = jobs[0].rc;
  for (int i = 1; i < threads; i++) {
    if (started[i])
      pthread_join(tid[i], NULL);
    else
      sim_worker(&jobs[i]);
    rc |= jobs[i].rc;
  }
done:
  lpattn_free(ctx);
  free(qd), free(kd), free(vd);
  return rc;
}
