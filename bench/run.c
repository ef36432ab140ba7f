/* Library calls on host memory, timing and backend choice. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int bench_threads(const bench_opts *o) {
  if (o->threads > 0) return o->threads;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

const char *precision_name(lpattn_precision p) {
  switch (p) {
    case LPATTN_PREC_HIGH:
      return "HIGH";
    case LPATTN_PREC_FP8:
      return "FP8";
    case LPATTN_PREC_NVFP4:
      return "NVFP4";
    case LPATTN_PREC_MXFP4:
      return "MXFP4";
    case LPATTN_PREC_THRIFT:
      return "THRIFT";
  }
  return "?";
}

lpattn_status bench_open(const bench_opts *o, lpattn_backend b, lpattn_ctx **ctx) {
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.num_threads = o->threads;
  return lpattn_create(b, &cp, ctx);
}

lpattn_backend bench_default_backend(const bench_opts *o) {
  if (o->backend != LPATTN_BACKEND_AUTO) return o->backend;
  return lpattn_backend_available(LPATTN_BACKEND_CPU) ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF;
}

static uint16_t *to_f16(const float *x, int64_t n, uint16_t *dst) {
  for (int64_t i = 0; i < n; i++) dst[i] = lpattn_f32_to_f16(x[i]);
  return dst;
}

void views_make(bench_views *w, const bench_problem *p, lpattn_dtype dt) {
  const int64_t nq = p->B * p->Hq * p->Sq * p->D, nk = p->B * p->Hkv * p->Skv * p->D;
  void *q = p->q, *k = p->k, *v = p->v;
  w->buf = NULL;
  if (dt == LPATTN_F16) {
    uint16_t *b = malloc(sizeof(uint16_t) * (size_t)(nq + 2 * nk));
    if (!b) { /* a benchmark cannot go on without its inputs */
      fprintf(stderr, "lpattn-bench: out of memory\n");
      exit(1);
    }
    w->buf = b;
    q = to_f16(p->q, nq, b);
    k = to_f16(p->k, nk, b + nq);
    v = to_f16(p->v, nk, b + nq + nk);
  }
  w->q = lpattn_tensor_4d(q, dt, p->B, p->Hq, p->Sq, p->D);
  w->k = lpattn_tensor_4d(k, dt, p->B, p->Hkv, p->Skv, p->D);
  w->v = lpattn_tensor_4d(v, dt, p->B, p->Hkv, p->Skv, p->D);
}

void views_free(bench_views *w) {
  free(w->buf);
  w->buf = NULL;
}

lpattn_status bench_attention(lpattn_ctx *ctx, const bench_views *w, const bench_problem *p,
                              const lpattn_attn_params *ap, float *out, float *lse, float *ent,
                              int32_t *sel, double *secs) {
  lpattn_tensor o = lpattn_tensor_4d(out, LPATTN_F32, p->B, p->Hq, p->Sq, p->D);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  if (lse) aux.lse = lpattn_tensor_4d(lse, LPATTN_F32, p->B, p->Hq, p->Sq, 1);
  if (ent) aux.entropy = lpattn_tensor_4d(ent, LPATTN_F32, p->B, p->Hq, p->Sq, 1);
  if (sel) {
    int64_t nkt = (p->Skv + ap->block_k - 1) / ap->block_k;
    int k = ap->thrift_k > 0 ? (ap->thrift_k < nkt ? ap->thrift_k : (int)nkt)
                             : lpattn_thrift_k((int)nkt, ap->thrift_budget, ap->causal);
    aux.selection =
        lpattn_tensor_4d(sel, LPATTN_I32, p->B, p->Hq, (p->Sq + ap->block_q - 1) / ap->block_q, k);
  }
  double t0 = now_seconds();
  lpattn_status st = lpattn_attention(ctx, &w->q, &w->k, &w->v, &o, ap, &aux);
  if (st == LPATTN_OK) st = lpattn_synchronize(ctx);
  if (secs) *secs = now_seconds() - t0;
  return st;
}
