/* The host glue of the GPU backends: CUDA, and HIP when built with
 * LPATTN_HIP (hipcc, or nvcc through tests/hip/shim), the runtime names
 * mapped by backends/hip/vendor.h, as ggml does. Context (device + stream),
 * a workspace owned by the context and grown on demand (the only allocation
 * a call may make; growing it synchronizes the stream), kernel dispatch
 * through the generated registry (gen/registry.inc of the backend being
 * built), and the device KV cache. Every call is asynchronous on the
 * context's stream except lpattn_quantize with check_finite (it reads a flag
 * back) and workspace growth. */
#include "lp_gpu_ops.h" /* the runtime (CUDA, or HIP through vendor.h) */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "internal.h"
#include "lp_gpu_args.h"
#include "kv_pool.h" /* paged pool entries (backends/gpu/kv_pool.cu) */

#if defined(LPATTN_HIP)
#define LPG_NAME "hip"
#define LPG_VTABLE_FN lpattn_hip_backend
/* no cp.async on HIP: low tiles are decoded in-kernel from the codes */
#define LPG_DEQUANT_KV 0
#else
#define LPG_NAME "cuda"
#define LPG_VTABLE_FN lpattn_cuda_backend
#define LPG_DEQUANT_KV 1
#endif

namespace LPG_NS {

/* ---- kernel registry (codegen/manifest.py) ------------------------------- */
typedef lpattn_status (*lpc_attn_fn)(const lp_gpu_attn_args *, cudaStream_t);
#define LPC_SET_DEFAULT(...) __VA_ARGS__
#if defined(LPATTN_CUDA_ALL_VARIANTS) || defined(LPATTN_HIP_ALL)
#define LPC_SET_ALL(...) __VA_ARGS__
#else
#define LPC_SET_ALL(...)
#endif
#define LPC_DECL_ATTN(set, name) LPC_SET_##set(lpattn_status name(const lp_gpu_attn_args *, cudaStream_t);)
/* one quant/dequant/merge entry per backend, reached by op */
#define LPC_DECL_QUANT(set, name)                                  \
  lpattn_status name(const lp_gpu_quant_args *, cudaStream_t); \
  static lpattn_status (*const lpc_quant_k)(const lp_gpu_quant_args *, cudaStream_t) = name;
#define LPC_DECL_DEQUANT(set, name)                                    \
  lpattn_status name(const lp_gpu_dequant_args *, cudaStream_t); \
  static lpattn_status (*const lpc_dequant_k)(const lp_gpu_dequant_args *, cudaStream_t) = name;
#define LPC_DECL_MERGE(set, name)                                  \
  lpattn_status name(const lp_gpu_merge_args *, cudaStream_t); \
  static lpattn_status (*const lpc_merge_k)(const lp_gpu_merge_args *, cudaStream_t) = name;
#define LPC_DECL_DECODE(set, name) /* paged decode: backends/gpu/kv_pool.cu */
#define LPATTN_KERNEL(set, name, op, hd, dt, prec, causal, pasa, ent) LPC_DECL_##op(set, name)
#include "registry.inc"
#undef LPATTN_KERNEL

static const struct {
  int head_dim, dtype;
  lpc_attn_fn fn;
} lpc_attn_table[] = {
#define LPC_ROW_ATTN(set, name, hd, dt) LPC_SET_##set({hd, dt, name}, )
#define LPC_ROW_QUANT(set, name, hd, dt)
#define LPC_ROW_DEQUANT(set, name, hd, dt)
#define LPC_ROW_MERGE(set, name, hd, dt)
#define LPC_ROW_DECODE(set, name, hd, dt)
#define LPATTN_KERNEL(set, name, op, hd, dt, prec, causal, pasa, ent) LPC_ROW_##op(set, name, hd, dt)
#include "registry.inc"
#undef LPATTN_KERNEL
    {0, 0, NULL}};

static lpc_attn_fn find_attn(int64_t D, lpattn_dtype dt) {
  for (size_t i = 0; lpc_attn_table[i].fn; i++)
    if (lpc_attn_table[i].head_dim == D && lpc_attn_table[i].dtype == (int)dt) return lpc_attn_table[i].fn;
  return NULL;
}

/* ---- context --------------------------------------------------------------- */
typedef struct {
  int device, nsm, warp;
  cudaStream_t stream;
  void *ws;
  size_t ws_size;
  int *flag; /* check_finite result */
} lpc_impl;

static lpc_impl *impl_of(lpattn_ctx *ctx) { return (lpc_impl *)ctx->impl; }

#define CK(call) \
  do { if ((call) != cudaSuccess) return LPATTN_ERR_BACKEND; } while (0)
#define TRY(call) \
  do { lpattn_status st_ = (call); if (st_ != LPATTN_OK) return st_; } while (0)

__global__ void lpc_probe_kernel(void) {}

static lpattn_status lpc_init(lpattn_ctx *ctx, const lpattn_context_params *p) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= p->device) {
    (void)cudaGetLastError(); /* clear the sticky "no device" error */
    return LPATTN_ERR_UNSUPPORTED_HARDWARE;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, p->device));
  CK(cudaSetDevice(p->device));
  /* Only arch-specific cubins are built (nvidia_archs), no PTX to JIT: the
   * device is usable iff it has an image of this file's probe kernel. */
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, lpc_probe_kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return LPATTN_ERR_UNSUPPORTED_HARDWARE;
  }
  lpc_impl *im = (lpc_impl *)calloc(1, sizeof *im);
  if (!im) return LPATTN_ERR_OUT_OF_MEMORY;
  im->device = p->device;
  im->nsm = prop.multiProcessorCount;
  im->warp = prop.warpSize; /* 64 on CDNA, 32 on NVIDIA and RDNA: the kernels ask the compiler */
  im->stream = (cudaStream_t)p->stream;
  if (cudaMalloc(&im->flag, sizeof(int)) != cudaSuccess) {
    free(im);
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  ctx->impl = im;
  return LPATTN_OK;
}

static void lpc_fini(lpattn_ctx *ctx) {
  lpc_impl *im = impl_of(ctx);
  if (!im) return;
  (void)cudaSetDevice(im->device);
  (void)cudaStreamSynchronize(im->stream);
  (void)cudaFree(im->ws);
  (void)cudaFree(im->flag);
  free(im);
  ctx->impl = NULL;
}

static lpattn_status lpc_sync(lpattn_ctx *ctx) {
  CK(cudaSetDevice(impl_of(ctx)->device));
  CK(cudaStreamSynchronize(impl_of(ctx)->stream));
  return LPATTN_OK;
}

/* Carves 256-byte-aligned pieces out of the context's workspace. */
typedef struct {
  size_t used;
} lpc_carve;

static size_t carve(lpc_carve *c, size_t bytes) {
  size_t at = c->used;
  c->used += (bytes + 255) / 256 * 256;
  return at;
}

static lpattn_status ensure_ws(lpc_impl *im, size_t bytes) {
  if (bytes <= im->ws_size) return LPATTN_OK;
  CK(cudaStreamSynchronize(im->stream));
  (void)cudaFree(im->ws);
  im->ws = NULL;
  im->ws_size = 0;
  size_t want = bytes + bytes / 4;
  if (cudaMalloc(&im->ws, want) != cudaSuccess) {
    (void)cudaGetLastError();
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  im->ws_size = want;
  return LPATTN_OK;
}

static void strides(const lpattn_tensor *t, int64_t s[4]) { memcpy(s, t->stride, sizeof t->stride); }

static int vec_ok(const lpattn_tensor *t) {
  return t->stride[3] == 1 && t->stride[0] % 8 == 0 && t->stride[1] % 8 == 0 &&
         t->stride[2] % 8 == 0 && ((uintptr_t)t->data % 16) == 0;
}

/* ---- quantize / dequantize ----------------------------------------------- */
static lpattn_status check_finite_dev(lpc_impl *im, const lpattn_tensor *t) {
  CK(cudaMemsetAsync(im->flag, 0, sizeof(int), im->stream));
  TRY(lpc_scan_finite(t, im->flag, im->stream));
  int h = 0;
  CK(cudaMemcpyAsync(&h, im->flag, sizeof h, cudaMemcpyDeviceToHost, im->stream));
  CK(cudaStreamSynchronize(im->stream));
  return h ? LPATTN_ERR_NONFINITE : LPATTN_OK;
}

static lpattn_status lpc_quantize(lpattn_ctx *ctx, const lpattn_tensor *x, const lpattn_qtensor *q,
                                  const lpattn_quant_params *p) {
  lpc_impl *im = impl_of(ctx);
  CK(cudaSetDevice(im->device));
  if (p->check_finite) TRY(check_finite_dev(im, x));
  lp_gpu_quant_args a;
  memset(&a, 0, sizeof a);
  a.x = x->data, a.dtype = x->dtype;
  strides(x, a.sx);
  a.B = (int)q->shape[0], a.H = (int)q->shape[1], a.S = (int)q->shape[2], a.D = (int)q->shape[3];
  a.format = q->format, a.axis = q->axis, a.tile = q->axis == LPATTN_AXIS_S ? q->tile : 64;
  a.stochastic = p->rounding == LPATTN_ROUND_STOCHASTIC, a.seed = p->seed;
  a.mx_round_up = p->mx_scale_round_up;
  a.codes = q->codes, a.scales = q->scales, a.outer = q->outer, a.rows = q->shape[2];
  return lpc_quant_k(&a, im->stream);
}

static lpattn_status lpc_dequantize(lpattn_ctx *ctx, const lpattn_qtensor *q, const lpattn_tensor *y) {
  lpc_impl *im = impl_of(ctx);
  CK(cudaSetDevice(im->device));
  lp_gpu_dequant_args a;
  memset(&a, 0, sizeof a);
  a.codes = q->codes, a.scales = q->scales, a.outer = q->outer;
  a.format = q->format, a.axis = q->axis, a.tile = q->axis == LPATTN_AXIS_S ? q->tile : 64;
  a.B = (int)q->shape[0], a.H = (int)q->shape[1], a.S = (int)q->shape[2], a.D = (int)q->shape[3];
  a.y = y->data, a.dtype = y->dtype;
  strides(y, a.sy);
  return lpc_dequant_k(&a, im->stream);
}

/* ---- merge ------------------------------------------------------------------ */
static lpattn_status lpc_merge(lpattn_ctx *ctx, const lpattn_tensor *o_a, const lpattn_tensor *lse_a,
                               const lpattn_tensor *h_a, const lpattn_tensor *o_b,
                               const lpattn_tensor *lse_b, const lpattn_tensor *h_b,
                               const lpattn_tensor *o, const lpattn_tensor *lse,
                               const lpattn_tensor *h) {
  lpc_impl *im = impl_of(ctx);
  CK(cudaSetDevice(im->device));
  lp_gpu_merge_args a;
  memset(&a, 0, sizeof a);
  a.n = 2;
  const lpattn_tensor *os[2] = {o_a, o_b}, *ls[2] = {lse_a, lse_b}, *hs[2] = {h_a, h_b};
  for (int i = 0; i < 2; i++) {
    a.o[i] = os[i]->data, a.odt[i] = os[i]->dtype;
    strides(os[i], a.so[i]);
    a.l[i] = (const float *)ls[i]->data;
    strides(ls[i], a.sl[i]);
    if (hs[i]) {
      a.hh[i] = (const float *)hs[i]->data;
      strides(hs[i], a.sh[i]);
    }
  }
  a.B = (int)o->shape[0], a.H = (int)o->shape[1], a.S = (int)o->shape[2], a.D = (int)o->shape[3];
  a.out = o->data, a.out_dtype = o->dtype;
  strides(o, a.sout);
  a.lse = (float *)lse->data;
  strides(lse, a.slse);
  if (h) {
    a.ent = (float *)h->data;
    strides(h, a.sent);
  }
  return lpc_merge_k(&a, im->stream);
}

/* ---- attention ------------------------------------------------------------- */
static lpattn_status qview_alloc(lpc_carve *c, lpattn_format f, lpattn_axis ax, int tile,
                                 const int64_t shape[4], size_t off[3]) {
  size_t cb, sb, oc;
  TRY(lpattn_qtensor_sizes(f, ax, tile, shape, &cb, &sb, &oc));
  off[0] = carve(c, cb), off[1] = carve(c, sb ? sb : 1), off[2] = carve(c, (oc ? oc : 1) * 4);
  return LPATTN_OK;
}

static lp_gpu_qview qview_at(void *ws, const size_t off[3], int64_t rows) {
  lp_gpu_qview v;
  v.codes = (const uint8_t *)ws + off[0];
  v.scales = (const uint8_t *)ws + off[1];
  v.outer = (const float *)((const uint8_t *)ws + off[2]);
  v.rows = rows;
  return v;
}

static lpattn_status quant_into(lpc_impl *im, const lpattn_tensor *x, const lp_gpu_qview *v,
                                lpattn_format f, lpattn_axis ax, int mx_up, const float *shift,
                                float beta, int shift_tiles) {
  lp_gpu_quant_args a;
  memset(&a, 0, sizeof a);
  a.x = x->data, a.dtype = x->dtype;
  strides(x, a.sx);
  a.B = (int)x->shape[0], a.H = (int)x->shape[1], a.S = (int)x->shape[2], a.D = (int)x->shape[3];
  a.format = f, a.axis = ax, a.tile = 64, a.mx_round_up = mx_up;
  a.codes = (uint8_t *)v->codes, a.scales = (uint8_t *)v->scales, a.outer = (float *)v->outer;
  a.rows = v->rows;
  a.shift_mean = shift, a.beta = beta, a.shift_tile = 64, a.shift_tiles = shift_tiles;
  return lpc_quant_k(&a, im->stream);
}

static lpattn_status lpc_attention(lpattn_ctx *ctx, const lpattn_attn_problem *pr) {
  lpc_impl *im = impl_of(ctx);
  const lpattn_dtype dt = pr->q->dtype;
  if (pr->k->dtype != dt || (dt != LPATTN_F16 && dt != LPATTN_BF16)) return LPATTN_ERR_UNSUPPORTED;
  if (pr->Bq != 64 || pr->Bk != 64) return LPATTN_ERR_UNSUPPORTED;
  if (pr->pasa && dt != LPATTN_F16) return LPATTN_ERR_UNSUPPORTED; /* f16 scores need f16 Q */
  lpc_attn_fn fn = find_attn(pr->D, dt);
  if (!fn) return LPATTN_ERR_UNSUPPORTED;
  CK(cudaSetDevice(im->device));
  const int B = (int)pr->B, Hq = (int)pr->Hq, Hkv = (int)pr->Hkv, Sq = (int)pr->Sq,
            Skv = (int)pr->Skv, D = (int)pr->D;
  const int nkt = (Skv + 63) / 64, nqt = (Sq + 63) / 64;
  const bool low = pr->precision != LPATTN_PREC_HIGH, thrift = pr->precision == LPATTN_PREC_THRIFT;
  lpc_carve c = {0};
  size_t oq[3] = {0, 0, 0}, ok[3] = {0, 0, 0}, ov[3] = {0, 0, 0}, omean = 0, osel = 0, okd = 0, ovd = 0;
  const int64_t qs[4] = {B, Hq, Sq, D}, ks[4] = {B, Hkv, Skv, D};
  if (low) {
    TRY(qview_alloc(&c, pr->low, LPATTN_AXIS_D, 64, qs, oq));
    TRY(qview_alloc(&c, pr->low, LPATTN_AXIS_D, 64, ks, ok));
    TRY(qview_alloc(&c, pr->low, LPATTN_AXIS_S, 64, ks, ov));
    if (LPG_DEQUANT_KV) { /* exact bf16 copies that cp.async streams in */
      okd = carve(&c, (size_t)B * Hkv * Skv * D * 2);
      ovd = carve(&c, (size_t)B * Hkv * Skv * D * 2);
    }
  }
  if (thrift || pr->pasa) omean = carve(&c, (size_t)B * Hkv * nkt * D * 4);
  if (thrift) osel = carve(&c, (size_t)B * Hq * nqt * pr->thrift_k * 4);
  TRY(ensure_ws(im, c.used));
  char *ws = (char *)im->ws;
  float *kmean = (thrift || pr->pasa) ? (float *)(ws + omean) : NULL;

  if (kmean) {
    lpc_mean_args m;
    memset(&m, 0, sizeof m);
    m.k = pr->k->data, m.dtype = dt;
    strides(pr->k, m.sk);
    m.B = B, m.H = Hkv, m.D = D, m.T = 64, m.Skv = Skv, m.j0 = 0, m.j1 = nkt, m.tiles = nkt;
    m.mean = kmean;
    TRY(lpc_tile_means(&m, im->stream));
  }
  lp_gpu_attn_args a;
  memset(&a, 0, sizeof a);
  if (low) {
    a.qq = qview_at(ws, oq, Sq), a.kq = qview_at(ws, ok, Skv), a.vq = qview_at(ws, ov, Skv);
    TRY(quant_into(im, pr->q, &a.qq, pr->low, LPATTN_AXIS_D, pr->mx_round_up, NULL, 0, 0));
    TRY(quant_into(im, pr->k, &a.kq, pr->low, LPATTN_AXIS_D, pr->mx_round_up,
                   pr->pasa ? kmean : NULL, pr->pasa_beta, nkt));
    TRY(quant_into(im, pr->v, &a.vq, pr->low, LPATTN_AXIS_S, pr->mx_round_up, NULL, 0, 0));
    if (LPG_DEQUANT_KV) {
      a.kd = ws + okd, a.vd = ws + ovd;
      TRY(lpc_dequant_kv(&a.kq, &a.vq, pr->low, (int64_t)B * Hkv, Skv, D, ws + okd, ws + ovd, im->stream));
    }
  }
  if (thrift) {
    lpc_select_args s;
    memset(&s, 0, sizeof s);
    s.q = pr->q->data, s.qdt = dt;
    strides(pr->q, s.sq);
    s.B = B, s.Hq = Hq, s.Hkv = Hkv, s.Sq = Sq, s.Skv = Skv, s.D = D, s.T = 64;
    s.causal = pr->causal, s.sel_causal = pr->selection_mode == LPATTN_SELECT_CAUSAL;
    s.leaky = pr->leaky, s.nkt = nkt, s.kmean = kmean, s.kmean_tiles = nkt;
    s.k = pr->thrift_k, s.sel = (int *)(ws + osel), s.sel_tiles = nqt, s.sel_k = pr->thrift_k;
    if (pr->selection) {
      s.out = (int *)pr->selection->data;
      strides(pr->selection, s.so);
      s.out_k = (int)pr->selection->shape[3];
    }
    TRY(lpc_select(&s, nqt, im->stream));
    a.sel = s.sel, a.sel_tiles = nqt, a.sel_k = pr->thrift_k;
  }
  a.q = pr->q->data, a.k = pr->k->data, a.v = pr->v->data, a.out = pr->out->data;
  strides(pr->q, a.sq), strides(pr->k, a.sk), strides(pr->v, a.sv), strides(pr->out, a.so);
  a.out_dtype = pr->out->dtype;
  if (pr->lse) a.lse = (float *)pr->lse->data, strides(pr->lse, a.sl);
  if (pr->entropy) a.ent = (float *)pr->entropy->data, strides(pr->entropy, a.se);
  a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.Sq = Sq, a.Skv = Skv, a.D = D;
  a.causal = pr->causal, a.leaky = pr->leaky, a.prec = pr->precision, a.low = pr->low;
  a.pasa = pr->pasa, a.score_f16 = pr->score_f16, a.mx_round_up = pr->mx_round_up;
  a.sm_scale = pr->sm_scale, a.pasa_beta = pr->pasa_beta;
  a.nkt = nkt, a.nqx = nqt, a.kmean = kmean, a.kmean_tiles = nkt, a.split = 1;
  a.vec16 = vec_ok(pr->q) && vec_ok(pr->k) && vec_ok(pr->v);
  a.warp = im->warp;
  return fn(&a, im->stream);
}

/* ---- device KV cache ------------------------------------------------------ */
typedef struct {
  int64_t maxt, maxtiles;
  void *khi, *vhi;
  void *blob; /* quantized K/V, key means, query ring, lengths */
  lp_gpu_qview kq, vq;
  float *kmean, *qring;
  int *lens;
  int64_t *ring_top;
} lpc_cache;

static lpattn_format cache_low(const lpattn_kv_cache_params *p) {
  return p->precision == LPATTN_PREC_FP8 ? LPATTN_FMT_FP8
         : p->precision == LPATTN_PREC_MXFP4 ? LPATTN_FMT_MXFP4
         : p->precision == LPATTN_PREC_THRIFT ? p->thrift_low
                                              : LPATTN_FMT_NVFP4;
}

static void lpc_cache_free(lpattn_kv_cache *c) {
  if (!c) return;
  lpc_cache *k = (lpc_cache *)c->impl;
  if (k) {
    (void)cudaSetDevice(impl_of(c->ctx)->device);
    (void)cudaStreamSynchronize(impl_of(c->ctx)->stream);
    (void)cudaFree(k->khi), (void)cudaFree(k->vhi), (void)cudaFree(k->blob);
    free(k->ring_top);
    free(k);
  }
  free(c->lengths);
  free(c);
}

static lpattn_status lpc_cache_create(lpattn_ctx *ctx, const lpattn_kv_cache_params *p,
                                      lpattn_kv_cache **out) {
  lpc_impl *im = impl_of(ctx);
  if (p->tile != 64 || (p->high_dtype != LPATTN_F16 && p->high_dtype != LPATTN_BF16))
    return LPATTN_ERR_UNSUPPORTED;
  if (p->pasa && p->high_dtype != LPATTN_F16) return LPATTN_ERR_UNSUPPORTED;
  if (!find_attn(p->head_dim, p->high_dtype)) return LPATTN_ERR_UNSUPPORTED;
  if (p->max_tokens > INT32_MAX - 64) return LPATTN_ERR_SIZE_OVERFLOW;
  CK(cudaSetDevice(im->device));
  lpattn_kv_cache *c = (lpattn_kv_cache *)calloc(1, sizeof *c);
  lpc_cache *k = (lpc_cache *)calloc(1, sizeof *k);
  if (c) c->lengths = (int64_t *)calloc((size_t)p->num_seqs, sizeof(int64_t));
  if (k) k->ring_top = (int64_t *)malloc(sizeof(int64_t) * (size_t)p->num_seqs);
  if (!c || !k || !c->lengths || !k->ring_top) {
    if (c) free(c->lengths);
    if (k) free(k->ring_top);
    free(c), free(k);
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  c->ctx = ctx, c->p = *p, c->impl = k;
  for (int i = 0; i < p->num_seqs; i++) k->ring_top[i] = -1;
  const int64_t S = p->num_seqs, Hkv = p->num_kv_heads, D = p->head_dim, T = p->tile;
  k->maxt = p->max_tokens, k->maxtiles = (p->max_tokens + T - 1) / T;
  const size_t hi = (size_t)S * Hkv * k->maxt * D * 2;
  lpc_carve cv = {0};
  size_t okq[3] = {0, 0, 0}, ovq[3] = {0, 0, 0};
  const int64_t shape[4] = {S, Hkv, k->maxt, D};
  lpattn_status st = LPATTN_OK;
  if (p->precision != LPATTN_PREC_HIGH) {
    st = qview_alloc(&cv, cache_low(p), LPATTN_AXIS_D, 64, shape, okq);
    if (st == LPATTN_OK) st = qview_alloc(&cv, cache_low(p), LPATTN_AXIS_S, 64, shape, ovq);
  }
  size_t omean = carve(&cv, (size_t)S * Hkv * k->maxtiles * D * 4);
  size_t oring = carve(&cv, (size_t)S * p->num_q_heads * 3 * T * D * 4);
  size_t olens = carve(&cv, (size_t)S * 4);
  if (st == LPATTN_OK && (cudaMalloc(&k->khi, hi) != cudaSuccess || cudaMalloc(&k->vhi, hi) != cudaSuccess ||
                          cudaMalloc(&k->blob, cv.used) != cudaSuccess)) {
    (void)cudaGetLastError();
    st = LPATTN_ERR_OUT_OF_MEMORY;
  }
  if (st == LPATTN_OK && cudaMemsetAsync(k->blob, 0, cv.used, im->stream) != cudaSuccess)
    st = LPATTN_ERR_BACKEND;
  if (st != LPATTN_OK) {
    lpc_cache_free(c);
    return st;
  }
  k->kq = qview_at(k->blob, okq, k->maxt), k->vq = qview_at(k->blob, ovq, k->maxt);
  k->kmean = (float *)((char *)k->blob + omean);
  k->qring = (float *)((char *)k->blob + oring);
  k->lens = (int *)((char *)k->blob + olens);
  *out = c;
  return LPATTN_OK;
}

/* A view of sequence `seq`'s high buffer: [1, Hkv, n, D] from position pos. */
static lpattn_tensor hi_view(const lpattn_kv_cache *c, void *buf, int seq, int64_t pos, int64_t n) {
  const lpc_cache *k = (const lpc_cache *)c->impl;
  const int64_t Hkv = c->p.num_kv_heads, D = c->p.head_dim;
  lpattn_tensor t;
  t.data = (char *)buf + (((int64_t)seq * Hkv * k->maxt + pos) * D) * 2;
  t.dtype = c->p.high_dtype;
  t.shape[0] = 1, t.shape[1] = Hkv, t.shape[2] = n, t.shape[3] = D;
  t.stride[0] = Hkv * k->maxt * D, t.stride[1] = k->maxt * D, t.stride[2] = D, t.stride[3] = 1;
  return t;
}

static void ring_advance(lpc_impl *im, lpattn_kv_cache *c, int seq, int64_t last_tile) {
  lpc_cache *k = (lpc_cache *)c->impl;
  int64_t from = k->ring_top[seq] + 1 > last_tile - 2 ? k->ring_top[seq] + 1 : last_tile - 2;
  for (int64_t t = from; t <= last_tile; t++)
    lpc_ring_zero(k->qring, seq, c->p.num_q_heads, c->p.tile, c->p.head_dim, t, im->stream);
  if (last_tile > k->ring_top[seq]) k->ring_top[seq] = last_tile;
}

static lpattn_status lpc_cache_append(lpattn_ctx *ctx, lpattn_kv_cache *c, int seq,
                                      const lpattn_tensor *kt, const lpattn_tensor *vt,
                                      const lpattn_tensor *qt) {
  lpc_impl *im = impl_of(ctx);
  lpc_cache *k = (lpc_cache *)c->impl;
  CK(cudaSetDevice(im->device));
  const int64_t len = c->lengths[seq], n = kt->shape[2], T = c->p.tile;
  ring_advance(im, c, seq, (len + n - 1) / T);
  lpc_cache_put_args pa;
  memset(&pa, 0, sizeof pa);
  pa.k = kt->data, pa.v = vt->data, pa.q = qt ? qt->data : NULL;
  pa.kdt = kt->dtype, pa.vdt = vt->dtype, pa.qdt = qt ? qt->dtype : 0, pa.hdt = c->p.high_dtype;
  strides(kt, pa.sk), strides(vt, pa.sv);
  if (qt) strides(qt, pa.sq);
  pa.seq = seq, pa.Hkv = c->p.num_kv_heads, pa.Hq = c->p.num_q_heads, pa.D = c->p.head_dim;
  pa.T = (int)T, pa.n = (int)n, pa.pos = len, pa.max_tokens = k->maxt, pa.ring_lo = k->ring_top[seq] - 2;
  pa.khi = k->khi, pa.vhi = k->vhi, pa.qring = k->qring;
  TRY(lpc_cache_put(&pa, im->stream));
  /* tiles completed by this append: key means, then (low precisions) quantized once */
  const int64_t j0 = len / T, j1 = (len + n) / T;
  if (j1 > j0) {
    lpattn_tensor kv = hi_view(c, k->khi, seq, 0, j1 * T);
    lpc_mean_args m;
    memset(&m, 0, sizeof m);
    m.k = kv.data, m.dtype = kv.dtype;
    strides(&kv, m.sk);
    m.B = 1, m.H = c->p.num_kv_heads, m.D = c->p.head_dim, m.T = (int)T, m.Skv = (int)(j1 * T);
    m.j0 = (int)j0, m.j1 = (int)j1, m.tiles = (int)k->maxtiles, m.dst_b0 = seq, m.mean = k->kmean;
    TRY(lpc_tile_means(&m, im->stream));
    if (c->p.precision != LPATTN_PREC_HIGH) {
      const lpattn_format f = cache_low(&c->p);
      for (int which = 0; which < 2; which++) {
        lpattn_tensor x = hi_view(c, which ? k->vhi : k->khi, seq, j0 * T, (j1 - j0) * T);
        const lp_gpu_qview *v = which ? &k->vq : &k->kq;
        lp_gpu_quant_args a;
        memset(&a, 0, sizeof a);
        a.x = x.data, a.dtype = x.dtype;
        strides(&x, a.sx);
        a.B = 1, a.H = (int)x.shape[1], a.S = (int)x.shape[2], a.D = (int)x.shape[3];
        a.format = f, a.axis = which ? LPATTN_AXIS_S : LPATTN_AXIS_D, a.tile = (int)T;
        a.mx_round_up = c->p.mx_scale_round_up;
        a.codes = (uint8_t *)v->codes, a.scales = (uint8_t *)v->scales, a.outer = (float *)v->outer;
        a.rows = k->maxt, a.dst_b0 = seq, a.dst_s0 = (int)(j0 * T);
        if (!which && c->p.pasa) {
          a.shift_mean = k->kmean, a.beta = c->p.pasa_beta, a.shift_tile = (int)T;
          a.shift_tiles = (int)k->maxtiles;
        }
        TRY(lpc_quant_k(&a, im->stream));
      }
    }
  }
  TRY(lpc_set_len(k->lens, seq, (int)(len + n), im->stream));
  c->lengths[seq] = len + n;
  return LPATTN_OK;
}

static lpattn_status lpc_decode(lpattn_ctx *ctx, lpattn_kv_cache *c, const lpattn_tensor *q,
                                const lpattn_tensor *out, const lpattn_attn_problem *pr) {
  lpc_impl *im = impl_of(ctx);
  lpc_cache *k = (lpc_cache *)c->impl;
  const lpattn_kv_cache_params *cp = &c->p;
  if (q->dtype != cp->high_dtype) return LPATTN_ERR_UNSUPPORTED;
  lpc_attn_fn fn = find_attn(cp->head_dim, cp->high_dtype);
  if (!fn) return LPATTN_ERR_UNSUPPORTED;
  CK(cudaSetDevice(im->device));
  const int B = cp->num_seqs, Hq = cp->num_q_heads, Hkv = cp->num_kv_heads, D = cp->head_dim;
  const int T = cp->tile, Sq = (int)q->shape[2], maxlen = (int)pr->Skv;
  /* record this call's queries (selection inputs of later rows) */
  int nqx = 1, kmax = 1;
  for (int s = 0; s < B; s++) {
    const int64_t len = c->lengths[s];
    lpc_cache_put_args pa;
    memset(&pa, 0, sizeof pa);
    pa.q = q->data, pa.qdt = q->dtype, pa.qb = s;
    strides(q, pa.sq);
    pa.seq = s, pa.Hkv = Hkv, pa.Hq = Hq, pa.D = D, pa.T = T, pa.n = Sq, pa.pos = len - Sq;
    pa.max_tokens = k->maxt, pa.ring_lo = k->ring_top[s] - 2, pa.qring = k->qring;
    TRY(lpc_cache_put(&pa, im->stream));
    int span = (int)((len - 1) / T - (len - Sq) / T + 1);
    if (span > nqx) nqx = span;
  }
  const bool thrift = cp->precision == LPATTN_PREC_THRIFT;
  /* K/V tiles shared by the q heads of a kv head; THRIFT selects per q head */
  const int pack = !thrift && Hq / Hkv <= 4 && Sq <= 16;
  const int maxtiles = (int)k->maxtiles, ntiles = (maxlen + T - 1) / T;
  int total = B * (pack ? Hkv : Hq) * nqx;
  int split = (4 * im->nsm + total - 1) / total;
  if (split > ntiles / 2) split = ntiles / 2;
  /* P of an FP8 or MXFP4 tile is quantized relative to the running max: a
   * split then needs the max of the splits before it (a max pass first);
   * under PASA the running max also moves with the frame, so no split. */
  const lpattn_format lowf = cache_low(cp);
  const int need_m = cp->precision != LPATTN_PREC_HIGH && lowf != LPATTN_FMT_NVFP4;
  if (need_m && cp->pasa) split = 1;
  if (split < 1) split = 1;
  lpc_carve cv = {0};
  size_t oqq[3] = {0, 0, 0};
  const int64_t qshape[4] = {B, Hq, Sq, D};
  if (cp->precision != LPATTN_PREC_HIGH) TRY(qview_alloc(&cv, cache_low(cp), LPATTN_AXIS_D, 64, qshape, oqq));
  size_t oksq = thrift ? carve(&cv, (size_t)B * 4) : 0;
  size_t osel = 0;
  int *kseq_h = NULL;
  if (thrift) {
    kseq_h = (int *)malloc(sizeof(int) * (size_t)B);
    if (!kseq_h) return LPATTN_ERR_OUT_OF_MEMORY;
    for (int s = 0; s < B; s++) {
      int n = (int)((c->lengths[s] + T - 1) / T);
      int kk = pr->thrift_k ? (pr->thrift_k < n ? pr->thrift_k : n) : lpattn_thrift_k(n, pr->thrift_budget, 1);
      kseq_h[s] = kk;
      if (kk > kmax) kmax = kk;
    }
    osel = carve(&cv, (size_t)B * Hq * maxtiles * kmax * 4);
  }
  size_t opo = 0, opl = 0, oph = 0, opm = 0;
  if (split > 1) {
    if (need_m) opm = carve(&cv, (size_t)split * B * Hq * Sq * 4);
    opo = carve(&cv, (size_t)split * B * Hq * Sq * D * 4);
    opl = carve(&cv, (size_t)split * B * Hq * Sq * 4);
    oph = carve(&cv, (size_t)split * B * Hq * Sq * 4);
  }
  lpattn_status st = ensure_ws(im, cv.used ? cv.used : 256);
  if (st == LPATTN_OK && thrift &&
      cudaMemcpyAsync((char *)im->ws + oksq, kseq_h, sizeof(int) * (size_t)B, cudaMemcpyHostToDevice,
                      im->stream) != cudaSuccess)
    st = LPATTN_ERR_BACKEND;
  if (st == LPATTN_OK && thrift && cudaStreamSynchronize(im->stream) != cudaSuccess) /* kseq_h is freed next */
    st = LPATTN_ERR_BACKEND;
  free(kseq_h);
  TRY(st);
  char *ws = (char *)im->ws;
  lp_gpu_attn_args a;
  memset(&a, 0, sizeof a);
  if (thrift) {
    lpc_select_args s;
    memset(&s, 0, sizeof s);
    s.qring = k->qring;
    s.B = B, s.Hq = Hq, s.Hkv = Hkv, s.Sq = Sq, s.Skv = maxlen, s.D = D, s.T = T;
    s.lens = k->lens, s.abs_tiles = 1, s.causal = 1;
    s.sel_causal = pr->selection_mode == LPATTN_SELECT_CAUSAL, s.nkt = maxtiles;
    s.kmean = k->kmean, s.kmean_tiles = maxtiles, s.kseq = (const int *)(ws + oksq);
    s.sel = (int *)(ws + osel), s.sel_tiles = maxtiles, s.sel_k = kmax;
    TRY(lpc_select(&s, nqx, im->stream));
    a.sel = s.sel, a.sel_tiles = maxtiles, a.sel_k = kmax;
  }
  if (cp->precision != LPATTN_PREC_HIGH) {
    a.qq = qview_at(ws, oqq, Sq);
    TRY(quant_into(im, q, &a.qq, cache_low(cp), LPATTN_AXIS_D, cp->mx_scale_round_up, NULL, 0, 0));
  }
  lpattn_tensor kv = hi_view(c, k->khi, 0, 0, k->maxt), vv = hi_view(c, k->vhi, 0, 0, k->maxt);
  a.q = q->data, a.k = kv.data, a.v = vv.data, a.out = out->data;
  strides(q, a.sq), strides(&kv, a.sk), strides(&vv, a.sv), strides(out, a.so);
  a.out_dtype = out->dtype;
  if (pr->lse) a.lse = (float *)pr->lse->data, strides(pr->lse, a.sl);
  if (pr->entropy) a.ent = (float *)pr->entropy->data, strides(pr->entropy, a.se);
  a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.Sq = Sq, a.Skv = maxlen, a.D = D;
  a.lens = k->lens, a.abs_tiles = 1;
  a.causal = 1, a.prec = cp->precision, a.low = cache_low(cp), a.pasa = cp->pasa;
  a.mx_round_up = cp->mx_scale_round_up, a.sm_scale = pr->sm_scale, a.pasa_beta = cp->pasa_beta;
  a.nkt = maxtiles, a.nqx = nqx, a.kq = k->kq, a.vq = k->vq;
  a.kmean = k->kmean, a.kmean_tiles = maxtiles, a.split = split, a.gqa_pack = pack;
  a.vec16 = vec_ok(q);
  a.warp = im->warp;
  if (split > 1) {
    a.part_o = (float *)(ws + opo), a.part_l = (float *)(ws + opl), a.part_h = (float *)(ws + oph);
  }
  if (split > 1 && need_m) {
    a.part_m = (float *)(ws + opm);
    a.maxpass = 1;
    TRY(fn(&a, im->stream));
    a.maxpass = 0;
  }
  TRY(fn(&a, im->stream));
  if (split == 1) return LPATTN_OK;
  lp_gpu_merge_args m;
  memset(&m, 0, sizeof m);
  m.n = split, m.part_o = a.part_o, m.part_l = a.part_l, m.part_h = a.part_h;
  m.B = B, m.H = Hq, m.S = Sq, m.D = D;
  m.out = out->data, m.out_dtype = out->dtype;
  strides(out, m.sout);
  if (pr->lse) m.lse = a.lse, strides(pr->lse, m.slse);
  if (pr->entropy) m.ent = a.ent, strides(pr->entropy, m.sent);
  return lpc_merge_k(&m, im->stream);
}

static int lpc_host_memory(void) { return 0; }

static lpattn_backend_vtable lpc_vtable;
} // namespace LPG_NS

extern "C" const lpattn_backend_vtable *LPG_VTABLE_FN(void) {
  using namespace LPG_NS;
  lpc_vtable.name = LPG_NAME;
  lpc_vtable.init = lpc_init;
  lpc_vtable.fini = lpc_fini;
  lpc_vtable.quantize = lpc_quantize;
  lpc_vtable.dequantize = lpc_dequantize;
  lpc_vtable.attention = lpc_attention;
  lpc_vtable.merge = lpc_merge;
  lpc_vtable.cache_create = lpc_cache_create;
  lpc_vtable.cache_free = lpc_cache_free;
  lpc_vtable.cache_append = lpc_cache_append;
  lpc_vtable.decode = lpc_decode;
  lpc_vtable.host_memory = lpc_host_memory;
  lpc_vtable.synchronize = lpc_sync;
  lpc_vtable.pool_init = lpg_pool_init;
  lpc_vtable.pool_fini = lpg_pool_fini;
  lpc_vtable.kv_append = lpg_kv_append;
  lpc_vtable.slot_copy = lpg_slot_copy;
  lpc_vtable.paged_decode = lpg_paged_decode;
  return &lpc_vtable;
}
