/* Helpers of the ref backend tests: random data, an independent naive f64
 * attention, and a one-call wrapper around lpattn_attention. */
#ifndef LPATTN_REFUTIL_H
#define LPATTN_REFUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lpattn.h"
#include "testutil.h"

typedef struct {
  uint64_t s;
} rng_t;

static inline double rng_u(rng_t *r) { /* splitmix64 -> [0, 1) */
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-53;
}

static inline double rng_normal(rng_t *r) {
  double u1 = rng_u(r), u2 = rng_u(r);
  return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

static inline void fill_uniform(rng_t *r, float *x, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * rng_u(r));
}

static inline void fill_normal(rng_t *r, float *x, int64_t n, double mean, double sd) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)(mean + sd * rng_normal(r));
}

/* Problem shape; arrays in the tests are contiguous [B, H, S, D] f32. */
typedef struct {
  int64_t B, Hq, Hkv, Sq, Skv, D;
} shape_t;

static inline int64_t nq(shape_t s) { return s.B * s.Hq * s.Sq * s.D; }
static inline int64_t nkv(shape_t s) { return s.B * s.Hkv * s.Skv * s.D; }
static inline int64_t nrows(shape_t s) { return s.B * s.Hq * s.Sq; }

/* softmax(scale q k^T [bottom-right causal mask]) v in f64, written from the
 * definition; LSE = log sum exp s, H = -sum p log p. Masked rows: 0, -inf, 0. */
static inline void naive_attention(shape_t sh, const float *q, const float *k, const float *v,
                                   double scale, int causal, double *o, double *lse, double *ent) {
  double *s = malloc(sizeof(double) * (size_t)sh.Skv);
  const int64_t D = sh.D, off = sh.Skv - sh.Sq;
  for (int64_t b = 0; b < sh.B; b++)
    for (int64_t h = 0; h < sh.Hq; h++) {
      const int64_t hk = h / (sh.Hq / sh.Hkv);
      for (int64_t i = 0; i < sh.Sq; i++) {
        const float *qi = q + ((b * sh.Hq + h) * sh.Sq + i) * D;
        const int64_t row = (b * sh.Hq + h) * sh.Sq + i;
        int64_t n = causal ? i + off + 1 : sh.Skv;
        if (n > sh.Skv) n = sh.Skv;
        double *oi = o + row * D;
        for (int64_t d = 0; d < D; d++) oi[d] = 0.0;
        if (n <= 0) {
          lse[row] = -INFINITY, ent[row] = 0.0;
          continue;
        }
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
          const float *kj = k + ((b * sh.Hkv + hk) * sh.Skv + j) * D;
          double acc = 0.0;
          for (int64_t d = 0; d < D; d++) acc += (double)qi[d] * kj[d];
          s[j] = acc * scale;
          if (s[j] > mx) mx = s[j];
        }
        double z = 0.0;
        for (int64_t j = 0; j < n; j++) z += exp(s[j] - mx);
        const double lz = mx + log(z);
        double h_ = 0.0;
        for (int64_t j = 0; j < n; j++) {
          const double p = exp(s[j] - lz);
          const float *vj = v + ((b * sh.Hkv + hk) * sh.Skv + j) * D;
          for (int64_t d = 0; d < D; d++) oi[d] += p * vj[d];
          if (p > 0) h_ -= p * log(p);
        }
        lse[row] = lz, ent[row] = h_;
      }
    }
  free(s);
}

/* ||a - b|| / ||b|| over n values (a f32, b f64). */
static inline double rel_rmse(const float *a, const double *b, int64_t n) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; i++) {
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += b[i] * b[i];
  }
  return sqrt(num / den);
}

static inline double nonfinite_fraction(const float *a, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad += !isfinite(a[i]);
  return (double)bad / (double)n;
}

/* Contiguous f32 views of the arrays; lse/ent/sel may be NULL. */
static inline lpattn_status run_attention(lpattn_ctx *ctx, shape_t sh, const float *q,
                                          const float *k, const float *v,
                                          const lpattn_attn_params *p, float *out, float *lse,
                                          float *ent, int32_t *sel, int sel_k) {
  lpattn_tensor tq = lpattn_tensor_4d((void *)q, LPATTN_F32, sh.B, sh.Hq, sh.Sq, sh.D);
  lpattn_tensor tk = lpattn_tensor_4d((void *)k, LPATTN_F32, sh.B, sh.Hkv, sh.Skv, sh.D);
  lpattn_tensor tv = lpattn_tensor_4d((void *)v, LPATTN_F32, sh.B, sh.Hkv, sh.Skv, sh.D);
  lpattn_tensor to = lpattn_tensor_4d(out, LPATTN_F32, sh.B, sh.Hq, sh.Sq, sh.D);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  if (lse) aux.lse = lpattn_tensor_4d(lse, LPATTN_F32, sh.B, sh.Hq, sh.Sq, 1);
  if (ent) aux.entropy = lpattn_tensor_4d(ent, LPATTN_F32, sh.B, sh.Hq, sh.Sq, 1);
  if (sel) {
    int64_t nqt = (sh.Sq + p->block_q - 1) / p->block_q;
    aux.selection = lpattn_tensor_4d(sel, LPATTN_I32, sh.B, sh.Hq, nqt, sel_k);
  }
  return lpattn_attention(ctx, &tq, &tk, &tv, &to, p, &aux);
}

static inline lpattn_ctx *ref_ctx(void) {
  lpattn_ctx *ctx = NULL;
  if (lpattn_create(LPATTN_BACKEND_REF, NULL, &ctx) != LPATTN_OK) {
    fprintf(stderr, "cannot create the ref context\n");
    exit(1);
  }
  return ctx;
}

#endif
