/* Helpers of the GPU tests: device buffers, random tensors, comparisons
 * against the ref backend. The same tests run on the CUDA backend and, built
 * with LPATTN_TEST_HIP (tests/hip), on the HIP backend, whose device memory
 * comes from tests/hip/devmem.hip. Exit 77 when no device is usable. */
#ifndef LPATTN_CUDATEST_H
#define LPATTN_CUDATEST_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats.h"
#include "lpattn.h"
#include "testutil.h"

#if defined(LPATTN_TEST_HIP)
#define CT_BACKEND LPATTN_BACKEND_HIP
#define CT_NAME "hip"
void *ht_dalloc(size_t n); /* exits when the allocation fails */
void ht_dfree(void *p);
void ht_up(void *d, const void *h, size_t n);
void ht_down(void *h, const void *d, size_t n);
void ht_dset(void *d, int byte, size_t n);
int ht_dsync(void); /* 1: the device reports no error */
#else
#include <cuda_runtime_api.h>
#define CT_BACKEND LPATTN_BACKEND_CUDA
#define CT_NAME "cuda"
static inline void *ht_dalloc(size_t n) {
  void *p = NULL;
  if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc(%zu) failed\n", n);
    exit(1);
  }
  return p;
}
static inline void ht_dfree(void *p) { cudaFree(p); }
static inline void ht_up(void *d, const void *h, size_t n) { cudaMemcpy(d, h, n, cudaMemcpyHostToDevice); }
static inline void ht_down(void *h, const void *d, size_t n) {
  cudaDeviceSynchronize();
  cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);
}
static inline void ht_dset(void *d, int byte, size_t n) { cudaMemset(d, byte, n); }
static inline int ht_dsync(void) { return cudaDeviceSynchronize() == cudaSuccess; }
#endif

static uint64_t ct_rng = 0x9E3779B97F4A7C15ull;
static inline double ct_unif(void) { /* [0, 1) */
  ct_rng ^= ct_rng << 13, ct_rng ^= ct_rng >> 7, ct_rng ^= ct_rng << 17;
  return (double)(ct_rng >> 11) * 0x1p-53;
}
static inline double ct_normal(void) {
  double u = ct_unif() + 1e-12, v = ct_unif();
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static inline size_t ct_esize(lpattn_dtype t) { return t == LPATTN_F32 || t == LPATTN_I32 ? 4 : t <= LPATTN_BF16 ? 2 : 1; }

/* A host tensor and its device twin, contiguous [B, H, S, D]. */
typedef struct {
  lpattn_tensor h, d;
  size_t bytes;
} ct_pair;

static inline ct_pair ct_make(lpattn_dtype dt, int64_t b, int64_t h, int64_t s, int64_t d) {
  ct_pair p;
  p.bytes = (size_t)(b * h * s * d) * ct_esize(dt);
  p.h = lpattn_tensor_4d(calloc(1, p.bytes ? p.bytes : 1), dt, b, h, s, d);
  p.d = lpattn_tensor_4d(ht_dalloc(p.bytes), dt, b, h, s, d);
  return p;
}

static inline void ct_free(ct_pair *p) {
  free(p->h.data);
  ht_dfree(p->d.data);
}

static inline void ct_up(ct_pair *p) { ht_up(p->d.data, p->h.data, p->bytes); }
static inline void ct_down(ct_pair *p) { ht_down(p->h.data, p->d.data, p->bytes); }
/* Poison the device copy (NaN bytes) so unwritten outputs show. */
static inline void ct_poison(ct_pair *p) { ht_dset(p->d.data, 0xFF, p->bytes); }
/* pool-batch arrays on a device pool's side (dev) or a host one's */
static inline lpattn_tensor ct_i32(void *p, int64_t a, int64_t b) { return lpattn_tensor_4d(p, LPATTN_I32, 1, 1, a, b); }
static inline void *ct_put(int dev, const void *h, size_t n) {
  void *p = dev ? ht_dalloc(n) : malloc(n);
  if (dev) ht_up(p, h, n);
  else memcpy(p, h, n);
  return p;
}
static inline void ct_drop(int dev, void *p) { dev ? ht_dfree(p) : free(p); }

static inline int64_t ct_count(const lpattn_tensor *t) { return t->shape[0] * t->shape[1] * t->shape[2] * t->shape[3]; }

static inline float ct_get(const lpattn_tensor *t, int64_t i) { return lp_load_f32(t->data, t->dtype, i); }

/* Fill with N(mu, sigma) (stored rounded to the dtype) and upload. */
static inline void ct_fill(ct_pair *p, double mu, double sigma) {
  for (int64_t i = 0; i < ct_count(&p->h); i++)
    lp_store_f32(p->h.data, p->h.dtype, i, (float)(mu + sigma * ct_normal()));
  ct_up(p);
}
static inline void ct_fill_unif(ct_pair *p, double x0, double am) {
  for (int64_t i = 0; i < ct_count(&p->h); i++)
    lp_store_f32(p->h.data, p->h.dtype, i, (float)(x0 + am * (2.0 * ct_unif() - 1.0)));
  ct_up(p);
}

/* ||a - b|| / ||b|| over the host copies; NaN anywhere gives +inf. */
static inline double ct_relerr(const lpattn_tensor *a, const lpattn_tensor *b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < ct_count(a); i++) {
    double x = ct_get(a, i), y = ct_get(b, i);
    if (isnan(x) || isnan(y)) return INFINITY;
    num += (x - y) * (x - y), den += y * y;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline int64_t ct_nonfinite(const lpattn_tensor *a) {
  int64_t n = 0;
  for (int64_t i = 0; i < ct_count(a); i++) n += !isfinite(ct_get(a, i));
  return n;
}

static inline double ct_maxabs(const lpattn_tensor *a, const lpattn_tensor *b) {
  double m = 0;
  for (int64_t i = 0; i < ct_count(a); i++) {
    double x = ct_get(a, i), y = ct_get(b, i);
    if (isinf(x) && isinf(y) && (x > 0) == (y > 0)) continue;
    if (isnan(x) || isnan(y) || isinf(x) || isinf(y)) return INFINITY;
    if (fabs(x - y) > m) m = fabs(x - y);
  }
  return m;
}

/* A quantized tensor on both backends: h = ref's result in host memory,
 * d = the GPU's result in device memory (poisoned with 0xAB first), and
 * back = the GPU's result read back. Tile 64. */
typedef struct {
  size_t cb, sb, oc;
  lpattn_qtensor h, d, back;
} ct_qpair;

static inline lpattn_qtensor ct_qt(lpattn_format f, lpattn_axis ax, const int64_t s[4], void *c, void *sc, void *o) {
  lpattn_qtensor q = {f, ax, 64, {s[0], s[1], s[2], s[3]}, (uint8_t *)c, (uint8_t *)sc, (float *)o};
  return q;
}

static inline void ct_qpair_make(ct_qpair *q, lpattn_format f, lpattn_axis ax, const int64_t s[4]) {
  CHECK_STATUS(lpattn_qtensor_sizes(f, ax, 64, s, &q->cb, &q->sb, &q->oc), LPATTN_OK);
  const size_t cb = q->cb, sb = q->sb + 1, ob = q->oc * 4 + 4;
  q->h = ct_qt(f, ax, s, malloc(cb), malloc(sb), malloc(ob));
  q->back = ct_qt(f, ax, s, malloc(cb), malloc(sb), malloc(ob));
  q->d = ct_qt(f, ax, s, ht_dalloc(cb), ht_dalloc(sb), ht_dalloc(ob));
  ht_dset(q->d.codes, 0xAB, cb), ht_dset(q->d.scales, 0xAB, sb);
}

/* Quantize x with p on both backends and read the GPU's result back. */
static inline void ct_qpair_quantize(ct_qpair *q, lpattn_ctx *gpu, lpattn_ctx *ref, const ct_pair *x,
                                     const lpattn_quant_params *p) {
  CHECK_STATUS(lpattn_quantize(ref, &x->h, &q->h, p), LPATTN_OK);
  CHECK_STATUS(lpattn_quantize(gpu, &x->d, &q->d, p), LPATTN_OK);
  ht_dsync();
  ht_down(q->back.codes, q->d.codes, q->cb);
  if (q->sb) ht_down(q->back.scales, q->d.scales, q->sb);
  if (q->oc) ht_down(q->back.outer, q->d.outer, q->oc * 4);
}

static inline void ct_qpair_free(ct_qpair *q) {
  free(q->h.codes), free(q->h.scales), free(q->h.outer);
  free(q->back.codes), free(q->back.scales), free(q->back.outer);
  ht_dfree(q->d.codes), ht_dfree(q->d.scales), ht_dfree(q->d.outer);
}

/* Device caches the backend does not hold: the HIP decode kernel has no
 * THRIFT or PASA tiles yet (backends/gpu/kv_pool.cu), so those caches are
 * UNSUPPORTED there; a test checks that status and skips the case. */
static inline int ct_cache_unsupported(lpattn_precision prec, int pasa) {
#if defined(LPATTN_TEST_HIP)
  return pasa || prec == LPATTN_PREC_THRIFT;
#else
  (void)prec, (void)pasa;
  return 0;
#endif
}

/* A prefill problem (B, heads, lengths, D, input and output dtypes) and its
 * buffers, host and device: q, k, v, out, lse, entropy, selection (ksel
 * entries per query tile of 64 rows). */
typedef struct {
  int64_t B, Hq, Hkv, Sq, Skv, D;
  lpattn_dtype in, out;
} ct_shape;

typedef struct {
  ct_pair q, k, v, o, lse, ent, sel;
} ct_prob;

static inline ct_prob ct_prob_make(const ct_shape *s, int ksel) {
  ct_prob p;
  p.q = ct_make(s->in, s->B, s->Hq, s->Sq, s->D);
  p.k = ct_make(s->in, s->B, s->Hkv, s->Skv, s->D);
  p.v = ct_make(s->in, s->B, s->Hkv, s->Skv, s->D);
  p.o = ct_make(s->out, s->B, s->Hq, s->Sq, s->D);
  p.lse = ct_make(LPATTN_F32, s->B, s->Hq, s->Sq, 1);
  p.ent = ct_make(LPATTN_F32, s->B, s->Hq, s->Sq, 1);
  p.sel = ct_make(LPATTN_I32, s->B, s->Hq, (s->Sq + 63) / 64, ksel > 0 ? ksel : 1);
  return p;
}

static inline void ct_prob_free(ct_prob *p) {
  ct_free(&p->q), ct_free(&p->k), ct_free(&p->v), ct_free(&p->o);
  ct_free(&p->lse), ct_free(&p->ent), ct_free(&p->sel);
}

/* A mask of the window tests (test_cuda_window.c, test_cuda_backward.c):
 * causal, the sliding window (-1: unbounded), the softcap, absolute
 * positions (pos: q_start, kv_start). */
typedef struct {
  int causal, left, right;
  float cap;
  int pos;
  int64_t q_start, kv_start;
} ct_win;
static inline lpattn_attn_params ct_win_params(const ct_win *w, lpattn_precision prec) {
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.precision = prec, ap.causal = w->causal;
  ap.window_left = w->left, ap.window_right = w->right, ap.softcap = w->cap;
  if (w->pos) ap.positions = 1, ap.q_start = w->q_start, ap.kv_start = w->kv_start;
  return ap;
}

static inline int ct_setup(lpattn_ctx **cuda, lpattn_ctx **ref) {
  if (!lpattn_backend_available(CT_BACKEND)) return 0;
  if (lpattn_create(CT_BACKEND, NULL, cuda) != LPATTN_OK) return 0;
  if (lpattn_create(LPATTN_BACKEND_REF, NULL, ref) != LPATTN_OK) return 0;
  return 1;
}
#endif
