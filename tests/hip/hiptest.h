/* Helpers of the HIP tests: random data, and one attention call on any
 * backend (device buffers for hip, host buffers for ref) with f32 results.
 * Tests exit 77 when no HIP device is usable (no AMD GPU, and the shim
 * build without an NVIDIA one). */
#ifndef LPATTN_HIPTEST_H
#define LPATTN_HIPTEST_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "lpattn.h"
#include "testutil.h"

void *ht_dalloc(size_t n);
void ht_dfree(void *p);
void ht_up(void *d, const void *h, size_t n);
void ht_down(void *h, const void *d, size_t n);
void ht_dset(void *d, int byte, size_t n);

typedef struct {
  uint64_t s;
} ht_rng;
static double ht_u(ht_rng *r) { /* splitmix64 -> [0, 1) */
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}
static double ht_normal(ht_rng *r) {
  double u1 = ht_u(r), u2 = ht_u(r);
  return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}
static void ht_fill(ht_rng *r, float *x, int64_t n, double mean, double sd) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)(mean + sd * ht_normal(r));
}

typedef struct {
  int64_t B, Hq, Hkv, Sq, Skv, D;
} ht_shape;
static int64_t ht_nq(ht_shape s) { return s.B * s.Hq * s.Sq * s.D; }
static int64_t ht_nkv(ht_shape s) { return s.B * s.Hkv * s.Skv * s.D; }
static int64_t ht_rows(ht_shape s) { return s.B * s.Hq * s.Sq; }
static size_t ht_esize(lpattn_dtype t) { return t == LPATTN_F32 ? 4 : 2; }

/* A host array of n values stored as dt, on the device when dev. */
static void *ht_put(const float *x, int64_t n, lpattn_dtype dt, int dev) {
  const size_t bytes = (size_t)n * ht_esize(dt);
  void *h = malloc(bytes);
  for (int64_t i = 0; i < n; i++) lp_store_f32(h, dt, i, x[i]);
  if (!dev) return h;
  void *d = ht_dalloc(bytes);
  ht_up(d, h, bytes);
  free(h);
  return d;
}
static void *ht_out(size_t bytes, int dev) {
  if (!dev) return malloc(bytes);
  void *d = ht_dalloc(bytes);
  ht_dset(d, 0xFF, bytes); /* NaN in every float type: unwritten outputs show */
  return d;
}
/* Device (or host) n values of dt -> host f32, freeing the source. */
static void ht_take(void *src, int64_t n, lpattn_dtype dt, int dev, float *dst) {
  const size_t bytes = (size_t)n * ht_esize(dt);
  void *h = src;
  if (dev) {
    h = malloc(bytes);
    ht_down(h, src, bytes);
    ht_dfree(src);
  }
  for (int64_t i = 0; i < n; i++) dst[i] = lp_load_f32(h, dt, i);
  free(h);
}

/* Strides of a [B, H, S, D] view stored as BSHD (tokens of all heads
 * together), the other layout SPEC 1 names. */
static void ht_bshd(lpattn_tensor *t) {
  const int64_t H = t->shape[1], S = t->shape[2], D = t->shape[3];
  t->stride[3] = 1, t->stride[1] = D, t->stride[2] = H * D, t->stride[0] = S * H * D;
}

/* Attention of f32 host data stored as dt (outputs in dt too). lse, ent,
 * sel may be NULL; sel holds [B, Hq, nqt, ksel]. bshd: q/k/v/out are
 * read as BSHD views of the same (BHSD-ordered) arrays, a permutation of
 * the data that the caller's reference sees permuted alike. */
static lpattn_status ht_attention_l(lpattn_ctx *ctx, ht_shape sh, lpattn_dtype dt, const float *q,
                                    const float *k, const float *v, const lpattn_attn_params *p,
                                    float *o, float *lse, float *ent, int32_t *sel, int ksel,
                                    int bshd) {
  const int dev = lpattn_context_backend(ctx) == LPATTN_BACKEND_HIP;
  const int64_t nqt = (sh.Sq + p->block_q - 1) / p->block_q;
  void *dq = ht_put(q, ht_nq(sh), dt, dev), *dk = ht_put(k, ht_nkv(sh), dt, dev);
  void *dv = ht_put(v, ht_nkv(sh), dt, dev);
  void *dout = ht_out((size_t)ht_nq(sh) * ht_esize(dt), dev);
  void *dl = lse ? ht_out(4 * (size_t)ht_rows(sh), dev) : NULL;
  void *de = ent ? ht_out(4 * (size_t)ht_rows(sh), dev) : NULL;
  const size_t selb = 4 * (size_t)(sh.B * sh.Hq * nqt * ksel);
  void *ds = sel ? ht_out(selb, dev) : NULL;
  lpattn_tensor tq = lpattn_tensor_4d(dq, dt, sh.B, sh.Hq, sh.Sq, sh.D);
  lpattn_tensor tk = lpattn_tensor_4d(dk, dt, sh.B, sh.Hkv, sh.Skv, sh.D);
  lpattn_tensor tv = lpattn_tensor_4d(dv, dt, sh.B, sh.Hkv, sh.Skv, sh.D);
  lpattn_tensor to = lpattn_tensor_4d(dout, dt, sh.B, sh.Hq, sh.Sq, sh.D);
  if (bshd) ht_bshd(&tq), ht_bshd(&tk), ht_bshd(&tv), ht_bshd(&to);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lpattn_tensor_4d(dl, LPATTN_F32, sh.B, sh.Hq, sh.Sq, 1);
  aux.entropy = lpattn_tensor_4d(de, LPATTN_F32, sh.B, sh.Hq, sh.Sq, 1);
  aux.selection = lpattn_tensor_4d(ds, LPATTN_I32, sh.B, sh.Hq, nqt, ksel);
  lpattn_status st = lpattn_attention(ctx, &tq, &tk, &tv, &to, p, &aux);
  if (st == LPATTN_OK) st = lpattn_synchronize(ctx);
  ht_take(dout, ht_nq(sh), dt, dev, o);
  if (lse) ht_take(dl, ht_rows(sh), LPATTN_F32, dev, lse);
  if (ent) ht_take(de, ht_rows(sh), LPATTN_F32, dev, ent);
  if (sel) {
    if (dev) {
      ht_down(sel, ds, selb);
      ht_dfree(ds);
    } else {
      memcpy(sel, ds, selb);
      free(ds);
    }
  }
  if (dev) ht_dfree(dq), ht_dfree(dk), ht_dfree(dv);
  else free(dq), free(dk), free(dv);
  return st;
}
static lpattn_status ht_attention(lpattn_ctx *ctx, ht_shape sh, lpattn_dtype dt, const float *q,
                                  const float *k, const float *v, const lpattn_attn_params *p,
                                  float *o, float *lse, float *ent, int32_t *sel, int ksel) {
  return ht_attention_l(ctx, sh, dt, q, k, v, p, o, lse, ent, sel, ksel, 0);
}
#endif
