/* The f64 reference (exact softmax, no tiling) and error metrics. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "common.h"

typedef struct {
  const bench_problem *p;
  int causal;
  double scale;
  int64_t r0, first, last; /* this worker's (b, h, row) range, flattened */
  double *o, *lse, *ent;
} ref_job;

/* One row: two passes over the visible keys (max, then exp sums). */
static void ref_row(const ref_job *j, int64_t b, int64_t h, int64_t r, double *s, double *o,
                    double *lse, double *ent) {
  const bench_problem *p = j->p;
  const int64_t D = p->D, hk = h / (p->Hq / p->Hkv);
  const float *q = p->q + ((b * p->Hq + h) * p->Sq + r) * D;
  const float *K = p->k + (b * p->Hkv + hk) * p->Skv * D;
  const float *V = p->v + (b * p->Hkv + hk) * p->Skv * D;
  int64_t n = j->causal ? r + (p->Skv - p->Sq) + 1 : p->Skv;
  if (n > p->Skv) n = p->Skv;
  for (int64_t d = 0; d < D; d++) o[d] = 0.0;
  if (n <= 0) {
    if (lse) *lse = -INFINITY;
    if (ent) *ent = 0.0;
    return;
  }
  double m = -INFINITY;
  for (int64_t c = 0; c < n; c++) {
    s[c] = dot_f64(q, K + c * D, D) * j->scale;
    if (s[c] > m) m = s[c];
  }
  double l = 0.0, ps = 0.0;
  for (int64_t c = 0; c < n; c++) {
    double e = exp(s[c] - m);
    l += e;
    ps += e * (s[c] - m);
    for (int64_t d = 0; d < D; d++) o[d] += e * V[c * D + d];
  }
  for (int64_t d = 0; d < D; d++) o[d] /= l;
  if (lse) *lse = m + log(l);
  if (ent) *ent = log(l) - ps / l; /* -sum p log p with p = e / l */
}

static void *ref_worker(void *arg) {
  const ref_job *j = arg;
  const bench_problem *p = j->p;
  const int64_t rows = p->Sq - j->r0;
  double *s = malloc(sizeof(double) * (size_t)p->Skv);
  for (int64_t t = j->first; t < j->last; t++) {
    int64_t bh = t / rows, r = j->r0 + t % rows;
    double *lse = j->lse ? j->lse + t : NULL, *ent = j->ent ? j->ent + t : NULL;
    ref_row(j, bh / p->Hq, bh % p->Hq, r, s, j->o + t * p->D, lse, ent);
  }
  free(s);
  return NULL;
}

void ref64_attention(const bench_problem *p, int causal, double sm_scale, int64_t r0, int threads,
                     double *o, double *lse, double *ent) {
  enum { MAXT = 64 };
  if (threads < 1) threads = 1;
  if (threads > MAXT) threads = MAXT;
  const int64_t total = p->B * p->Hq * (p->Sq - r0);
  ref_job jobs[MAXT];
  pthread_t tid[MAXT];
  int started[MAXT] = {0};
  /* Causal rows grow in cost: interleaving would balance better, but equal
   * contiguous shares over many heads are close enough and keep rows local. */
  for (int i = 0; i < threads; i++) {
    jobs[i] = (ref_job){p, causal, sm_scale, r0, total * i / threads, total * (i + 1) / threads,
                        o, lse,    ent};
    if (i > 0) started[i] = pthread_create(&tid[i], NULL, ref_worker, &jobs[i]) == 0;
  }
  ref_worker(&jobs[0]);
  for (int i = 1; i < threads; i++) {
    if (started[i])
      pthread_join(tid[i], NULL);
    else
      ref_worker(&jobs[i]);
  }
}

err_stats compare_rows(const bench_problem *p, const float *out, const double *ref, int64_t r0) {
  err_stats e = {0.0, 0.0, 0, 0};
  double num = 0.0, den = 0.0;
  const int64_t rows = p->Sq - r0, D = p->D;
  for (int64_t bh = 0; bh < p->B * p->Hq; bh++)
    for (int64_t r = 0; r < rows; r++)
      for (int64_t d = 0; d < D; d++) {
        double x = out[(bh * p->Sq + r0 + r) * D + d], y = ref[(bh * rows + r) * D + d];
        e.n++;
        if (!isfinite(x)) {
          e.nonfinite++;
          continue;
        }
        num += (x - y) * (x - y);
        den += y * y;
        if (fabs(x - y) > e.max_abs) e.max_abs = fabs(x - y);
      }
  e.rel_rmse = e.nonfinite == e.n ? NAN : den > 0.0 ? sqrt(num / den) : sqrt(num);
  return e;
}

ent_stats entropy_stats(const float *h, const double *href, int64_t n) {
  ent_stats s = {0.0, INFINITY, -INFINITY, 0.0};
  for (int64_t i = 0; i < n; i++) {
    s.mean += h[i];
    if (h[i] < s.min) s.min = h[i];
    if (h[i] > s.max) s.max = h[i];
    double dev = fabs(h[i] - href[i]);
    if (!(dev <= s.max_dev)) s.max_dev = dev; /* NaN propagates */
  }
  s.mean /= (double)n;
  return s;
}
