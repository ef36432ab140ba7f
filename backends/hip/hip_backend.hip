/* The HIP backend's host side: device and stream, the per-call workspace,
 * and the launches of the generated kernels (gen/). Tensors are device
 * pointers; work is queued on the context's stream. Written with the CUDA
 * runtime names through vendor.h, like the kernels. */
#include <stdlib.h>
#include <string.h>

#include "vendor.h"
#include "lp_hip_args.h"

extern "C" {
#include "internal.h"
}

/* Kernels of the manifest: attention variants by head dim from the
 * registry (ALL-set ones only when built with -Dvariants=all). */
#if LPATTN_HIP_ALL
#define LPH_SET_ALL(...) __VA_ARGS__
#else
#define LPH_SET_ALL(...)
#endif
#define LPH_SET_DEFAULT(...) __VA_ARGS__
#define LPH_DECL_ATTN(name, hd) extern "C" __global__ void name(lp_hip_attn_args);
#define LPH_ROW_ATTN(name, hd) {hd, name},
#define LPH_DECL_QUANT(name, hd)
#define LPH_ROW_QUANT(name, hd)
#define LPH_DECL_MERGE(name, hd)
#define LPH_ROW_MERGE(name, hd)
#define LPH_DECL_DEQUANT(name, hd)
#define LPH_ROW_DEQUANT(name, hd)
#define LPATTN_KERNEL(set, name, op, hd, ...) LPH_SET_##set(LPH_DECL_##op(name, hd))
#include "registry.inc"
#undef LPATTN_KERNEL
typedef void (*lph_attn_fn)(lp_hip_attn_args);
static const struct {
  int head_dim;
  lph_attn_fn fn;
} attn_kernels[] = {
#define LPATTN_KERNEL(set, name, op, hd, ...) LPH_SET_##set(LPH_ROW_##op(name, hd))
#include "registry.inc"
#undef LPATTN_KERNEL
};

extern "C" __global__ void lpattn_hip_quant(lp_hip_attn_args a, int which);
extern "C" __global__ void lpattn_hip_quant_v(lp_hip_attn_args a);
extern "C" __global__ void lpattn_hip_quant_mean(lp_hip_attn_args a, int which);
extern "C" __global__ void lpattn_hip_quant_plan(lp_hip_attn_args a);
extern "C" __global__ void lpattn_hip_merge(lp_hip_merge_args a);
extern "C" __global__ void lpattn_hip_quant_tensor(lp_hip_quant_args a);
extern "C" __global__ void lpattn_hip_quant_scan(lp_hip_quant_args a);
extern "C" __global__ void lpattn_hip_dequant(lp_hip_quant_args a);

typedef struct {
  int device, warp;
  cudaStream_t stream;
  void *work; /* grown on demand, freed at fini */
  size_t work_bytes;
} hip_state;

static hip_state *st_of(lpattn_ctx *ctx) { return (hip_state *)ctx->impl; }

static lpattn_status check(cudaError_t e) {
  if (e == cudaSuccess) return LPATTN_OK;
  return e == cudaErrorMemoryAllocation ? LPATTN_ERR_OUT_OF_MEMORY : LPATTN_ERR_BACKEND;
}
#define TRY(x)                                  \
  do {                                          \
    lpattn_status s_ = (x);                     \
    if (s_ != LPATTN_OK) return s_;             \
  } while (0)

static lpattn_status hip_init(lpattn_ctx *ctx, const lpattn_context_params *p) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || p->device >= n)
    return LPATTN_ERR_UNSUPPORTED_HARDWARE;
  cudaDeviceProp prop;
  if (cudaSetDevice(p->device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, p->device) != cudaSuccess)
    return LPATTN_ERR_UNSUPPORTED_HARDWARE;
  hip_state *s = (hip_state *)calloc(1, sizeof *s);
  if (!s) return LPATTN_ERR_OUT_OF_MEMORY;
  s->device = p->device;
  s->warp = prop.warpSize; /* 64 on CDNA, 32 on RDNA: the kernels ask the compiler */
  s->stream = (cudaStream_t)p->stream;
  ctx->impl = s;
  return LPATTN_OK;
}

static void hip_fini(lpattn_ctx *ctx) {
  hip_state *s = st_of(ctx);
  if (!s) return;
  (void)cudaStreamSynchronize(s->stream); /* nothing to report from a destructor */
  (void)cudaFree(s->work);
  free(s);
  ctx->impl = NULL;
}

static lpattn_status hip_sync(lpattn_ctx *ctx) {
  return check(cudaStreamSynchronize(st_of(ctx)->stream));
}

/* Workspace of at least n bytes; the old one is freed after queued work. */
static lpattn_status work(hip_state *s, size_t n, void **out) {
  if (n > s->work_bytes) {
    TRY(check(cudaStreamSynchronize(s->stream)));
    (void)cudaFree(s->work); /* the stream is drained: it cannot fail on queued work */
    s->work = NULL, s->work_bytes = 0;
    TRY(check(cudaMalloc(&s->work, n)));
    s->work_bytes = n;
  }
  *out = s->work;
  return LPATTN_OK;
}

/* ---- quantize / dequantize ---------------------------------------------- */

static unsigned blocks(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

static lp_hip_quant_args quant_args(const lpattn_tensor *x, const lpattn_qtensor *q) {
  lp_hip_quant_args a;
  memset(&a, 0, sizeof a);
  a.xt = x->dtype;
  for (int i = 0; i < 4; i++) a.sx[i] = x->stride[i];
  a.codes = q->codes, a.scales = q->scales, a.outer = q->outer;
  a.B = (int)q->shape[0], a.H = (int)q->shape[1], a.S = (int)q->shape[2], a.D = (int)q->shape[3];
  a.fmt = q->format, a.axis = q->axis, a.tile = q->tile;
  return a;
}

static lpattn_status hip_quantize(lpattn_ctx *ctx, const lpattn_tensor *x, const lpattn_qtensor *q,
                                  const lpattn_quant_params *p) {
  hip_state *s = st_of(ctx);
  lp_hip_quant_args a = quant_args(x, q);
  a.x = x->data;
  a.stochastic = p->rounding == LPATTN_ROUND_STOCHASTIC;
  a.mx_round_up = p->mx_scale_round_up, a.seed = p->seed;
  const int64_t n = (int64_t)a.B * a.H * a.S * a.D;
  if (p->check_finite) { /* nothing may be written when x holds a non-finite value */
    int flag = 0;
    TRY(work(s, sizeof(int), (void **)&a.nonfinite));
    TRY(check(cudaMemsetAsync(a.nonfinite, 0, sizeof(int), s->stream)));
    lpattn_hip_quant_scan<<<blocks(n, 256), 256, 0, s->stream>>>(a);
    TRY(check(cudaMemcpyAsync(&flag, a.nonfinite, sizeof flag, cudaMemcpyDeviceToHost, s->stream)));
    TRY(check(cudaStreamSynchronize(s->stream)));
    if (flag) return LPATTN_ERR_NONFINITE;
  }
  const int64_t ndom = a.axis == LPATTN_AXIS_D
                           ? (int64_t)a.B * a.H * a.S
                           : (int64_t)a.B * a.H * ((a.S + a.tile - 1) / a.tile) * a.D;
  lpattn_hip_quant_tensor<<<blocks(ndom, 64), 64, 0, s->stream>>>(a);
  return check(cudaGetLastError());
}

static lpattn_status hip_dequantize(lpattn_ctx *ctx, const lpattn_qtensor *q, const lpattn_tensor *y) {
  lp_hip_quant_args a = quant_args(y, q);
  a.y = y->data;
  const int64_t n = (int64_t)a.B * a.H * a.S * a.D;
  lpattn_hip_dequant<<<blocks(n, 256), 256, 0, st_of(ctx)->stream>>>(a);
  return check(cudaGetLastError());
}

/* ---- attention ----------------------------------------------------------- */

static void strides(const lpattn_tensor *t, int64_t out[4]) {
  for (int i = 0; i < 4; i++) out[i] = t->stride[i];
}

static lpattn_status hip_attention(lpattn_ctx *ctx, const lpattn_attn_problem *pr) {
  hip_state *s = st_of(ctx);
  lph_attn_fn fn = NULL;
  for (size_t i = 0; i < sizeof attn_kernels / sizeof attn_kernels[0]; i++)
    if (attn_kernels[i].head_dim == pr->D) fn = attn_kernels[i].fn;
  /* leaky + PASA would shift a low diagonal tile by another tile's mean,
   * which the tile preparation does not do. */
  if (!fn || (pr->leaky && pr->pasa && pr->precision != LPATTN_PREC_HIGH))
    return LPATTN_ERR_UNSUPPORTED;
  lp_hip_attn_args a;
  memset(&a, 0, sizeof a);
  a.q = pr->q->data, a.k = pr->k->data, a.v = pr->v->data, a.out = pr->out->data;
  strides(pr->q, a.sq), strides(pr->k, a.sk), strides(pr->v, a.sv), strides(pr->out, a.so);
  a.qt = pr->q->dtype, a.kt = pr->k->dtype, a.ot = pr->out->dtype;
  if (pr->lse) a.lse = (float *)pr->lse->data, strides(pr->lse, a.sl);
  if (pr->entropy) a.ent = (float *)pr->entropy->data, strides(pr->entropy, a.se);
  if (pr->selection) a.sel = (int32_t *)pr->selection->data, strides(pr->selection, a.ss);
  a.sel_k = pr->thrift_k;
  a.B = (int)pr->B, a.Hq = (int)pr->Hq, a.Hkv = (int)pr->Hkv, a.Sq = (int)pr->Sq;
  a.Skv = (int)pr->Skv, a.D = (int)pr->D, a.Bq = pr->Bq, a.Bk = pr->Bk;
  a.nqt = (a.Sq + a.Bq - 1) / a.Bq, a.nkt = (a.Skv + a.Bk - 1) / a.Bk;
  a.causal = pr->causal, a.leaky = pr->leaky, a.prec = pr->precision, a.low = pr->low;
  a.pasa = pr->pasa, a.score_f16 = pr->score_f16, a.mx_round_up = pr->mx_round_up;
  a.selection_mode = pr->selection_mode, a.sm_scale = pr->sm_scale, a.pasa_beta = pr->pasa_beta;

  const int thrift = pr->precision == LPATTN_PREC_THRIFT, low = pr->precision != LPATTN_PREC_HIGH;
  const size_t D = (size_t)a.D, f = sizeof(float), tiles = (size_t)a.B * a.Hq * a.nqt * a.nkt;
  const size_t kvrows = (size_t)a.B * a.Hkv * a.nkt * a.Bk;
  const int fp8 = low && pr->low == LPATTN_FMT_FP8, qrows = a.B * a.Hq * a.Sq;
  enum { NSLOT = 11 };
  size_t sz[NSLOT] = {(size_t)a.B * a.Hkv * a.nkt * D * f,
                      thrift ? (size_t)a.B * a.Hq * a.nqt * D * f : 0,
                      thrift ? tiles * f : 0,
                      tiles,
                      low ? (size_t)qrows * D * f : 0,
                      low ? kvrows * D * f : 0,
                      low ? kvrows * D * f : 0,
                      fp8 ? (size_t)qrows * D : 0,
                      fp8 ? kvrows * D : 0,
                      fp8 ? (size_t)qrows * f : 0,
                      fp8 ? kvrows * f : 0};
  size_t total = 0;
  for (int i = 0; i < NSLOT; i++) total += (sz[i] + 255) & ~(size_t)255;
  char *w;
  TRY(work(s, total, (void **)&w));
  void **slot[NSLOT] = {(void **)&a.w.kmean, (void **)&a.w.qmean, (void **)&a.w.score,
                        (void **)&a.w.mode,  (void **)&a.w.qd,    (void **)&a.w.kd,
                        (void **)&a.w.vd,    (void **)&a.w.qc,    (void **)&a.w.kc,
                        (void **)&a.w.qo,    (void **)&a.w.ko};
  for (int i = 0; i < NSLOT; i++) {
    *slot[i] = sz[i] ? (void *)w : NULL;
    w += (sz[i] + 255) & ~(size_t)255;
  }

  cudaStream_t st = s->stream;
  const int T = 256;
  lpattn_hip_quant_mean<<<blocks((int64_t)a.B * a.Hkv * a.nkt * a.D, T), T, 0, st>>>(a, 0);
  if (thrift)
    lpattn_hip_quant_mean<<<blocks((int64_t)a.B * a.Hq * a.nqt * a.D, T), T, 0, st>>>(a, 1);
  lpattn_hip_quant_plan<<<blocks((int64_t)a.B * a.Hq * a.nqt, 64), 64, 0, st>>>(a);
  if (low) {
    lpattn_hip_quant<<<blocks((int64_t)a.B * a.Hq * a.Sq, 64), 64, 0, st>>>(a, 0);
    lpattn_hip_quant<<<blocks((int64_t)a.B * a.Hkv * a.Skv, 64), 64, 0, st>>>(a, 1);
    lpattn_hip_quant_v<<<blocks((int64_t)a.B * a.Hkv * a.nkt * a.D, 64), 64, 0, st>>>(a);
  }
  /* 16 rows per wave keeps [16][Bk] P and per-row codes in shared memory */
  a.r16 = a.D <= 128 && a.Bk <= 128;
  const int waves = 4, threads = waves * s->warp, rows = a.r16 ? 16 : 1;
  const size_t shmem = (size_t)waves * rows * (a.Bk * f + a.Bk + a.Bk / 16);
  fn<<<dim3((unsigned)a.nqt, (unsigned)a.Hq, (unsigned)a.B), threads, shmem, st>>>(a);
  return check(cudaGetLastError());
}

/* ---- merge --------------------------------------------------------------- */

static lpattn_status hip_merge(lpattn_ctx *ctx, const lpattn_tensor *o_a, const lpattn_tensor *lse_a,
                               const lpattn_tensor *h_a, const lpattn_tensor *o_b,
                               const lpattn_tensor *lse_b, const lpattn_tensor *h_b,
                               const lpattn_tensor *o, const lpattn_tensor *lse,
                               const lpattn_tensor *h) {
  lp_hip_merge_args a;
  memset(&a, 0, sizeof a);
  a.oa = o_a->data, a.ob = o_b->data, a.o = o->data;
  a.la = (const float *)lse_a->data, a.lb = (const float *)lse_b->data, a.l = (float *)lse->data;
  strides(o_a, a.soa), strides(o_b, a.sob), strides(o, a.so);
  strides(lse_a, a.sla), strides(lse_b, a.slb), strides(lse, a.sl);
  if (h) {
    a.ha = (const float *)h_a->data, a.hb = (const float *)h_b->data, a.h = (float *)h->data;
    strides(h_a, a.sha), strides(h_b, a.shb), strides(h, a.sh);
  }
  a.ta = o_a->dtype, a.tb = o_b->dtype, a.to = o->dtype;
  a.B = (int)o_a->shape[0], a.H = (int)o_a->shape[1], a.S = (int)o_a->shape[2];
  a.D = (int)o_a->shape[3];
  const int64_t rows = (int64_t)a.B * a.H * a.S;
  lpattn_hip_merge<<<blocks(rows, 128), 128, 0, st_of(ctx)->stream>>>(a);
  return check(cudaGetLastError());
}

/* ---- KV cache: not ported to HIP yet ------------------------------------- */

static lpattn_status hip_cache_create(lpattn_ctx *ctx, const lpattn_kv_cache_params *p,
                                      lpattn_kv_cache **out) {
  (void)ctx, (void)p, (void)out;
  return LPATTN_ERR_UNSUPPORTED;
}

static int hip_host_memory(void) { return 0; }

static const lpattn_backend_vtable hip_vtable = {
    "hip",          hip_init,  hip_fini, hip_quantize, hip_dequantize, hip_attention,
    hip_merge,      hip_cache_create, NULL, NULL,      NULL,           hip_host_memory,
    hip_sync,
};

extern "C" const lpattn_backend_vtable *lpattn_hip_backend(void) { return &hip_vtable; }
