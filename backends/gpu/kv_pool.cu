/* Host glue of the paged KV pool on the GPU backends (SPEC 9, lpattn.h
 * "paged KV storage"): CUDA, and HIP when built with LPATTN_HIP (runtime
 * names through backends/hip/vendor.h). Pool memory in device memory
 * (cudaMalloc when the caller gives none), laid out by core/kvpage.h.
 * Append and decode only enqueue kernels on the context's stream: lengths,
 * slots and page tables are read on the device (THRIFT's k and selection
 * too), so a decode step can be captured in a graph. The one exception is the decode's partial-state
 * buffer, owned by the pool and grown (stream-ordered, no synchronization) when
 * a call needs more than any call before it. */
#include "kv_pool.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gpu_backend.h"
#include "gpu_decode_plan.h"
#include "kvpage.h"
#include "lp_gpu_args.h"
#include "lp_gpu_kv_args.h"

/* HIP's decode kernel reads its queries' codes from a quantize launch; the
 * CUDA kernel quantizes its rows itself (the same quantizer, no launch). */
#if defined(LPATTN_HIP)
#define GPU_DECODE_QUANT_Q 1
#define GPU_DECODE_NT 256 /* LPH_NT (lp_gpu_decode_hip.cuh) */
#else
#define GPU_DECODE_QUANT_Q 0
#define GPU_DECODE_NT 128 /* lpd_body's 4 warps (lp_gpu_decode.cuh) */
#endif

namespace GPU_NS {

/* ---- kernels: decode variants and the quantizer (gen/registry_*.inc) ----- */
typedef lpattn_status (*gpu_dec_fn)(const lp_gpu_pdecode_args *, const lp_gpu_dec_launch *, cudaStream_t);
#define GPU_POOL_SET_DEFAULT(...) __VA_ARGS__
#if defined(LPATTN_CUDA_ALL_VARIANTS) || defined(LPATTN_HIP_ALL)
#define GPU_POOL_SET_ALL(...) __VA_ARGS__
#else
#define GPU_POOL_SET_ALL(...)
#endif
/* the queries' quantizer (HIP's low pools), the decode variants (their own
 * registries, gen/registry_quant.inc and registry_decode.inc) */
#define LPATTN_QUANT(set, name, hd, dt)                        \
  lpattn_status name(const lp_gpu_quant_args *, cudaStream_t); \
  static lpattn_status (*const gpu_pool_quant_k)(const lp_gpu_quant_args *, cudaStream_t) = name;
#include "registry_quant.inc"
#undef LPATTN_QUANT
#define LPATTN_DECODE(set, name, hd, dt) \
  GPU_POOL_SET_##set(lpattn_status name(const lp_gpu_pdecode_args *, const lp_gpu_dec_launch *, cudaStream_t);)
#include "registry_decode.inc"
#undef LPATTN_DECODE

static const struct {
  int head_dim, dtype;
  gpu_dec_fn fn;
} gpu_dec_table[] = {
#define LPATTN_DECODE(set, name, hd, dt) GPU_POOL_SET_##set({hd, dt, name}, )
#include "registry_decode.inc"
#undef LPATTN_DECODE
    {0, 0, NULL}};

static gpu_dec_fn find_decode(int64_t D, int dt) {
  for (size_t i = 0; gpu_dec_table[i].fn; i++)
    if (gpu_dec_table[i].head_dim == D && gpu_dec_table[i].dtype == dt) return gpu_dec_table[i].fn;
  return NULL;
}
static int has_decode(int64_t D, int dt) { return find_decode(D, dt) != NULL; }
static const lp_gpu_decode_dev gpu_decode_dev = {GPU_DECODE_QUANT_Q, GPU_DECODE_NT, 8, has_decode};

/* gen/lp_gpu_decode_append, gen/lp_gpu_decode_thrift */
lpattn_status gpu_pool_append(const lp_gpu_append_args *a, cudaStream_t st);
lpattn_status gpu_pool_merge(const lp_gpu_merge_args *a, cudaStream_t st);
lpattn_status gpu_pool_thrift_append(const lp_gpu_append_args *a, cudaStream_t st);
lpattn_status gpu_pool_thrift_select(const lp_gpu_pdecode_args *a, cudaStream_t st);
lpattn_status gpu_pool_ids_add(int32_t *p, int32_t n, cudaStream_t st);
lpattn_status gpu_pool_set_descales(const lp_gpu_descales_args *a, cudaStream_t st);

/* ---- pool ------------------------------------------------------------------ */
typedef struct {
  lp_kv_layout L;
  int device;
  cudaStream_t stream;
  float *part; /* decode partial states */
  size_t part_bytes;
} gpu_pool_state;

static gpu_pool_state *pool_of(lpattn_kv_pool *p) { return (gpu_pool_state *)p->impl; }

/* A pool's work goes on the calling context's current stream (lpattn_set_stream
 * orders it after the previous one); the last one used is kept for teardown. */
static gpu_pool_state *on_stream(lpattn_ctx *ctx, lpattn_kv_pool *p) {
  gpu_pool_state *k = pool_of(p);
  k->stream = (cudaStream_t)ctx->params.stream;
  return k;
}

lpattn_status gpu_pool_init(lpattn_ctx *ctx, lpattn_kv_pool *pool) {
  const lpattn_kv_pool_params *p = &pool->p;
  if (p->page_size != 64 || (p->high_dtype != LPATTN_F16 && p->high_dtype != LPATTN_BF16))
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the " GPU_NAME " backend's pools take page_size 64 and an f16 or bf16 "
                   "high_dtype (asked: page_size %lld, %s)", (long long)p->page_size, lp_dtype_name(p->high_dtype));
  if (p->pasa && p->high_dtype != LPATTN_F16) return LPATTN_ERR_UNSUPPORTED; /* K' is f16 (SEMANTICS PASA) */
#if defined(LPATTN_HIP)
  /* the HIP decode kernel (backends/gpu/kernels/lp_gpu_decode_hip.cuh) has no THRIFT / PASA tiles yet */
  if (p->pasa || p->precision == LPATTN_PREC_THRIFT) return LPATTN_ERR_UNSUPPORTED;
  if (p->precision == LPATTN_PREC_FP8_STATIC)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.precision = FP8_STATIC: the " GPU_NAME " decode kernel "
                   "has no static FP8 pages yet (CUDA, ref and cpu have them)");
#endif
  const int dv = p->head_dim_v > 0 ? p->head_dim_v : p->head_dim;
  if (dv != p->head_dim) { /* MLA (K 576, V 512 stored at 576): HIGH, FP8, NVFP4 pages */
    const lpattn_format f = lp_low_format(p->precision, p->thrift_low);
    if (p->precision == LPATTN_PREC_THRIFT || p->precision == LPATTN_PREC_FP8_STATIC || p->pasa ||
        (p->precision != LPATTN_PREC_HIGH && f == LPATTN_FMT_MXFP4) || !find_decode(p->head_dim, p->high_dtype))
      return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.head_dim = %d, head_dim_v = %d: the " GPU_NAME " backend's "
                     "MLA pools take head dims 576/512 in HIGH, FP8 or NVFP4 without PASA (asked: precision %d%s); "
                     "ref and cpu take the rest", p->head_dim, dv, (int)p->precision, p->pasa ? ", PASA" : "");
  }
  if (!find_decode(p->head_dim, p->high_dtype)) return LPATTN_ERR_UNSUPPORTED;
  gpu_pool_state *k = (gpu_pool_state *)calloc(1, sizeof *k);
  if (!k) return LPATTN_ERR_OUT_OF_MEMORY;
  lpattn_status st = lp_kv_layout_init(&k->L, p);
  if (st != LPATTN_OK) {
    free(k);
    return st;
  }
  k->device = ctx->params.device;
  k->stream = (cudaStream_t)ctx->params.stream;
  if (cudaSetDevice(k->device) != cudaSuccess) {
    free(k);
    return LPATTN_ERR_BACKEND;
  }
  if (!pool->mem) {
    void *m = NULL;
    if (cudaMalloc(&m, pool->bytes ? pool->bytes : 1) != cudaSuccess) {
      (void)cudaGetLastError();
      free(k);
      return LPATTN_ERR_OUT_OF_MEMORY;
    }
    pool->mem = (uint8_t *)m;
    pool->owned = 1;
  }
  /* slot headers (lengths) start at zero; pages are written before read */
  if (cudaMemsetAsync(pool->mem, 0, (size_t)p->num_slots * k->L.slot_bytes, k->stream) != cudaSuccess) {
    if (pool->owned) (void)cudaFree(pool->mem), pool->mem = NULL, pool->owned = 0;
    free(k);
    return LPATTN_ERR_BACKEND;
  }
  pool->impl = k;
  return LPATTN_OK;
}

void gpu_pool_fini(lpattn_kv_pool *pool) {
  gpu_pool_state *k = pool_of(pool);
  if (!k) return;
  (void)cudaSetDevice(k->device);
  if (k->part) (void)cudaFreeAsync(k->part, k->stream);
  (void)cudaStreamSynchronize(k->stream);
  if (pool->owned) (void)cudaFree(pool->mem), pool->mem = NULL, pool->owned = 0;
  free(k);
  pool->impl = NULL;
}

static lp_gpu_pool gpu_pool(lpattn_kv_pool *pool) {
  const lp_kv_layout *L = &pool_of(pool)->L;
  lp_gpu_pool g;
  memset(&g, 0, sizeof g);
  g.mem = pool->mem;
  g.num_slots = pool->p.num_slots, g.num_pages = pool->p.num_pages;
  g.slot_bytes = (int64_t)L->slot_bytes, g.page_bytes = (int64_t)L->page_bytes;
  g.kc = L->kc, g.ks = L->ks, g.ko = L->ko, g.vc = L->vc, g.vs = L->vs, g.vo = L->vo;
  g.head_bytes = L->head_bytes, g.kmean = L->kmean, g.qmean = L->qmean, g.hk = L->hk, g.hv = L->hv;
  g.rk = L->rk, g.rv = L->rv, g.qrows = L->qrows;
  g.T = L->T, g.D = L->D, g.Hkv = L->Hkv, g.Hq = L->Hq, g.Dk = L->Dk, g.Dv = L->Dv;
  g.prec = L->prec, g.fmt = L->fmt, g.hdt = pool->p.high_dtype;
  g.has_low = L->has_low, g.has_high_pages = L->has_high_pages, g.has_ring = L->has_ring;
  g.mx_round_up = pool->p.mx_scale_round_up;
  g.has_kmean = L->has_kmean, g.has_qmean = L->has_qmean, g.pasa = pool->p.pasa;
  g.pasa_beta = pool->p.pasa_beta;
  g.fp8s = L->fp8s, g.ds = (int64_t)L->ds;
  return g;
}

/* The kernels index slots, lengths and each table row contiguously. */
static int unit_strides(const lpattn_kv_batch *b) {
  return b->slots.stride[3] == 1 && b->lengths.stride[3] == 1 && b->page_table.stride[3] == 1;
}

static lp_gpu_seqs gpu_seqs(const lpattn_kv_batch *b) {
  lp_gpu_seqs s;
  s.num_seqs = b->num_seqs;
  s.slots = (const int32_t *)b->slots.data, s.lens = (const int32_t *)b->lengths.data;
  s.table = (const int32_t *)b->page_table.data;
  s.table_stride = b->page_table.stride[2], s.max_pages = b->page_table.shape[3];
  s.kv_start = (const int32_t *)b->kv_start.data, s.q_start = (const int32_t *)b->q_start.data;
  s.len_add = 0;
  return s;
}

lpattn_status gpu_kv_append(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_append_call *call) {
  gpu_pool_state *k = on_stream(ctx, pool);
  if (call->n > INT32_MAX) return LPATTN_ERR_SIZE_OVERFLOW;
  if (!unit_strides(call->batch)) return LPATTN_ERR_UNSUPPORTED;
  CK(cudaSetDevice(k->device));
  lp_gpu_append_args a;
  memset(&a, 0, sizeof a);
  a.pool = gpu_pool(pool), a.seqs = gpu_seqs(call->batch);
  a.seqs.len_add = (int32_t)call->len_add; /* a prefill's piece (core checked the sum) */
  a.k = call->k->data, a.v = call->v->data, a.kdt = call->k->dtype, a.vdt = call->v->dtype;
  memcpy(a.sk, call->k->stride, sizeof a.sk), memcpy(a.sv, call->v->stride, sizeof a.sv);
  if (call->q) {
    a.q = call->q->data, a.qdt = call->q->dtype;
    memcpy(a.sq, call->q->stride, sizeof a.sq);
  }
  a.n = (int)call->n;
  TRY(gpu_pool_append(&a, k->stream));
  return gpu_pool_thrift_append(&a, k->stream);
}

/* FP8_STATIC slots' descales (core checked the views; device memory is not
 * read on the host: a bad slot id is skipped, a bad value gives that slot's
 * rows unspecified values, lpattn.h) */
lpattn_status gpu_kv_set_descales(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_tensor *slots,
                                  const lpattn_tensor *k_descale, const lpattn_tensor *v_descale) {
  gpu_pool_state *k = on_stream(ctx, pool);
  if (slots->shape[3] > INT32_MAX) return LPATTN_ERR_SIZE_OVERFLOW;
  CK(cudaSetDevice(k->device));
  lp_gpu_descales_args a;
  memset(&a, 0, sizeof a);
  a.pool = gpu_pool(pool);
  a.slots = (const int32_t *)slots->data, a.sslot = slots->stride[3], a.n = (int)slots->shape[3];
  a.k = (const float *)k_descale->data, a.sk[0] = k_descale->stride[2], a.sk[1] = k_descale->stride[3];
  a.v = (const float *)v_descale->data, a.sv[0] = v_descale->stride[2], a.sv[1] = v_descale->stride[3];
  return gpu_pool_set_descales(&a, k->stream);
}

lpattn_status gpu_slot_copy(lpattn_ctx *ctx, lpattn_kv_pool *pool, int32_t src, int32_t dst) {
  gpu_pool_state *k = on_stream(ctx, pool);
  if (src == dst) return LPATTN_OK;
  CK(cudaSetDevice(k->device));
  const size_t sb = k->L.slot_bytes;
  CK(cudaMemcpyAsync(pool->mem + (size_t)dst * sb, pool->mem + (size_t)src * sb, sb,
                     cudaMemcpyDeviceToDevice, k->stream));
  return LPATTN_OK;
}

/* core/kvcache.c's arrays on the device (vtable ids_*) */
lpattn_status gpu_ids_alloc(lpattn_ctx *ctx, const int32_t *host, size_t n, int32_t **out) {
  CK(cudaSetDevice(ctx->params.device));
  void *d = NULL;
  if (cudaMalloc(&d, n ? n * 4 : 4) != cudaSuccess) {
    (void)cudaGetLastError();
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  const cudaStream_t st = (cudaStream_t)ctx->params.stream;
  if (n && (cudaMemcpyAsync(d, host, n * 4, cudaMemcpyHostToDevice, st) != cudaSuccess ||
            cudaStreamSynchronize(st) != cudaSuccess)) { /* at creation only: host is freed next */
    (void)cudaFree(d);
    return LPATTN_ERR_BACKEND;
  }
  *out = (int32_t *)d;
  return LPATTN_OK;
}

void gpu_ids_free(lpattn_ctx *ctx, int32_t *p) {
  (void)cudaSetDevice(ctx->params.device);
  (void)cudaStreamSynchronize((cudaStream_t)ctx->params.stream);
  (void)cudaFree(p);
}

lpattn_status gpu_ids_add(lpattn_ctx *ctx, int32_t *p, int32_t n) {
  CK(cudaSetDevice(ctx->params.device));
  return gpu_pool_ids_add(p, n, (cudaStream_t)ctx->params.stream);
}

/* One decode launch, all but the stream: what gpu_paged_decode builds per
 * call and a plan (gpu_decode_plan) keeps. */
typedef struct {
  gpu_dec_fn fn;
  lp_gpu_dec_launch k; /* the plan's kernel and grid */
  lp_gpu_pdecode_args a;
  lp_gpu_merge_args m;
  lp_gpu_quant_args qa; /* HIP, low pools: the queries' quantizer (quant_q) */
  int quant_q, select;
  int device;
  float *ws; /* a plan's own workspace */
} gpu_decode_call;

/* The call's plan (gpu_decode_plan.h) and the workspace bytes it needs
 * (part: NULL to size only; else the workspace the pointers are carved from). */
static lpattn_status decode_setup(lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                                  const lpattn_attn_problem *pr, float *part, size_t *need_out,
                                  gpu_decode_call *c) {
  const lp_kv_layout *L = &pool_of(pool)->L;
  lp_gpu_decode_problem dp;
  memset(&dp, 0, sizeof dp);
  dp.D = L->D, dp.Hq = L->Hq, dp.Hkv = L->Hkv, dp.T = L->T;
  dp.has_low = L->has_low, dp.fmt = L->fmt, dp.has_qmean = L->has_qmean, dp.pasa = pool->p.pasa;
  dp.fp8s = L->fp8s;
  dp.hdt = pool->p.high_dtype, dp.qdt = pr->q->dtype;
  dp.unit_strides = unit_strides(batch), dp.score_f16 = pr->score_f16;
  dp.num_seqs = batch->num_seqs, dp.sharded = batch->kv_start.data != NULL;
  dp.Sq = (int)pr->q->shape[2], dp.max_length = batch->max_length;
  dp.win = pr->window_left >= 0 || pr->softcap != 0.0f; /* decode is causal: window_right is moot */
  if (dp.win && L->D > 256) /* the d576 (MLA) variant has no _win kernels (compile time) */
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.window_left / softcap: the " GPU_NAME " backend's MLA "
                   "pools (head dims %d/%d) have no sliding window or softcap; ref and cpu do",
                   (int)L->D, (int)L->Dv);
  lp_gpu_decode_plan P;
  if (!lp_gpu_decode_plan_make(&dp, &gpu_decode_dev, &P)) return P.st;
  *need_out = P.ws;
  if (!part) return LPATTN_OK;
  memset(c, 0, sizeof *c);
  c->fn = find_decode(dp.D, dp.hdt), c->k = P.k;
  uint8_t *w = (uint8_t *)part;
  const int ns = dp.num_seqs, Hq = dp.Hq, D = dp.D, Sq = dp.Sq;
  {
    lp_gpu_pdecode_args &a = c->a;
    a.pool = gpu_pool(pool), a.seqs = gpu_seqs(batch);
    a.seqs.len_add = (int32_t)pr->len_add;
    a.q = pr->q->data;
    memcpy(a.sq, pr->q->stride, sizeof a.sq);
    a.Sq = Sq, a.nchunk = P.nchunk, a.chunk_tiles = LP_DECODE_CHUNK_TILES, a.sm_scale = pr->sm_scale;
    a.win_left = (int)pr->window_left; /* -1 or >= 0 (an int in params) */
    a.softcap = pr->softcap;
    a.part_o = (float *)(w + P.at_o), a.part_l = (float *)(w + P.at_l), a.part_h = (float *)(w + P.at_h);
    if (dp.fp8s && pr->q_descale) { /* {1, 1, num_seqs, Hkv} (core/fp8s.c) */
      a.q_desc = (const float *)pr->q_descale->data;
      a.sqd[0] = pr->q_descale->stride[2], a.sqd[1] = pr->q_descale->stride[3];
    }
    if (P.quant_q) { /* the queries quantized once per token (HIP) */
      lp_gpu_quant_args &qa = c->qa;
      qa.x = pr->q->data, qa.dtype = pr->q->dtype;
      memcpy(qa.sx, pr->q->stride, sizeof qa.sx);
      qa.B = ns, qa.H = Hq, qa.S = Sq, qa.D = D;
      qa.format = (lpattn_format)dp.fmt, qa.axis = LPATTN_AXIS_D, qa.tile = 64;
      qa.mx_round_up = pool->p.mx_scale_round_up;
      qa.codes = w + P.at_qc, qa.scales = w + P.at_qs, qa.outer = (float *)(w + P.at_qo);
      qa.rows = Sq;
      a.qcodes = qa.codes, a.qscales = qa.scales, a.qouter = qa.outer;
      c->quant_q = 1;
    }
    if (P.select) { /* record the queries, select on the device (k from each length) */
      a.sel = (uint32_t *)(w + P.at_sel), a.sel_words = P.words;
      a.thrift_k = pr->thrift_k, a.thrift_budget = pr->thrift_budget;
      a.sel_causal = pr->selection_mode == LPATTN_SELECT_CAUSAL;
      c->select = 1;
    }
  }
  lp_gpu_merge_args &m = c->m;
  m.n = P.nchunk, m.part_o = c->a.part_o, m.part_l = c->a.part_l, m.part_h = c->a.part_h;
  m.B = ns, m.H = Hq, m.S = Sq, m.D = L->Dv, m.Dp = D; /* MLA: out's 512 of the 576 */
  m.out = pr->out->data, m.out_dtype = pr->out->dtype;
  memcpy(m.sout, pr->out->stride, sizeof m.sout);
  if (pr->lse) m.lse = (float *)pr->lse->data, memcpy(m.slse, pr->lse->stride, sizeof m.slse);
  if (pr->entropy) m.ent = (float *)pr->entropy->data, memcpy(m.sent, pr->entropy->stride, sizeof m.sent);
  return LPATTN_OK;
}

/* Enqueue the call's kernels on st: nothing else (graph-capturable). */
static lpattn_status decode_launch(const gpu_decode_call *c, cudaStream_t st) {
  if (c->quant_q) TRY(gpu_pool_quant_k(&c->qa, st));
  if (c->select) TRY(gpu_pool_thrift_select(&c->a, st));
  TRY(c->fn(&c->a, &c->k, st));
  return gpu_pool_merge(&c->m, st);
}

/* The pool's decode workspace holds `need` bytes: grows only, stream-ordered;
 * warm it up before graph capture (the current device set). */
static lpattn_status grow_part(gpu_pool_state *k, size_t need) {
  if (need <= k->part_bytes) return LPATTN_OK;
  TRY(gpu_no_capture(k->stream, "the pool's decode workspace"));
  if (k->part) CK(cudaFreeAsync(k->part, k->stream));
  k->part = NULL, k->part_bytes = 0;
  if (cudaMallocAsync((void **)&k->part, need + need / 4, k->stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  k->part_bytes = need + need / 4;
  return LPATTN_OK;
}

lpattn_status gpu_paged_decode(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                               const lpattn_attn_problem *pr) {
  gpu_pool_state *k = on_stream(ctx, pool);
  if (batch->num_seqs <= 0) return LPATTN_OK;
  size_t need;
  gpu_decode_call c;
  TRY(decode_setup(pool, batch, pr, NULL, &need, &c));
  CK(cudaSetDevice(k->device));
  TRY(grow_part(k, need));
  TRY(decode_setup(pool, batch, pr, k->part, &need, &c));
  return decode_launch(&c, k->stream);
}

/* ---- paged prefill (core/api_prefill.c): the pieces' rule ------------------ */
/* A piece of page_size tokens counted from a sequence's first new token
 * (position len + a, a a multiple of T) spans at most two tiles, i and
 * i + 1; after its append the slot ring still holds both high (the append
 * writes tile i + 1 into ring index (i + 1) & 1, which held tile i - 1), and
 * HIGH pages hold every tile. Its e - a rows are then decoded in one call
 * (lengths + e, Sq = e - a), and each row is bitwise the decode of that row
 * alone (len = its position + 1), because in lpd_body (lp_gpu_decode*.cuh)
 * every quantity of a row is the row's own: its tiles low or high by its
 * own position (lpd_sel_ring / lpd_sel_pages, keys <= its position; a tile
 * it does not take leaves its state as it was: alpha 1, P = 0, no row_end),
 * its P quantized against its own running max over the tiles it sees, its
 * Q quantized alone, and a chunk holding only tiles it does not see gives
 * LSE = -inf, which the merge adds as exact zeros (as for the batch's
 * chunk count); keys of later rows of the piece are masked (P = 0, their
 * finite V adds zeros; non-finite V is zeroed where a row does not see it).
 * FP8_STATIC pages (lpd_sel_fp8s) read the row's own tile low, masked per
 * key: keys of later rows have P = 0 and finite codes (a NaN code of a
 * later token reaches the row, as in any decode of several rows).
 * Two pool kinds read call-wide quantities instead, so they take pieces of
 * one token (each row then is a decode of Sq = 1, as appending one token at
 * a time): THRIFT (k from the call's length, lpt_select_kernel, where the
 * row's own context has one tile less for the first tile's rows; PASA and
 * THRIFT's high tiles take the diagonal shift rule from the call's first
 * tile on, lpd_ctx::kshift) and HIGH pools with PASA (every tile high, the
 * same kshift rule). THRIFT with selection = paper reads the mean of the
 * query rows appended so far, which depends on where the host backends
 * cut: UNSUPPORTED. Also done here, before core writes anything: what the
 * pieces' appends and decodes would refuse (unit strides, the decode plan),
 * and the decode workspace grown to the largest piece's (pr->q: its rows),
 * so that no piece grows it (inside a graph capture that would fail after
 * earlier pieces were written). */
lpattn_status gpu_prefill_step(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                               const lpattn_attn_problem *pr, int64_t *step) {
  gpu_pool_state *k = on_stream(ctx, pool);
  const lp_kv_layout *L = &k->L;
  if (L->has_qmean && pr->selection_mode != LPATTN_SELECT_CAUSAL)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.selection = paper: the " GPU_NAME " backend's paged "
                   "prefill cuts the new tokens elsewhere than the host backends, and paper selection reads "
                   "the mean of the rows appended so far (causal selection is taken)");
  if (!unit_strides(batch))
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "batch: the " GPU_NAME " backend reads slots, lengths and page "
                   "table rows with unit element strides");
  size_t need;
  gpu_decode_call c;
  const lpattn_status st = decode_setup(pool, batch, pr, NULL, &need, &c); /* the pieces' decodes (any Sq <= T) */
  if (st != LPATTN_OK)
    return lp_fail(st, "the " GPU_NAME " paged decode that attends each piece's rows does not take this call "
                   "(q.dtype = %s with a %s pool: it takes q in the pool's high dtype, no f16 scores)",
                   lp_dtype_name(pr->q->dtype), lp_dtype_name(pool->p.high_dtype));
  CK(cudaSetDevice(k->device));
  TRY(grow_part(k, need));
  *step = L->has_qmean || (pool->p.pasa && !L->has_low) ? 1 : L->T;
  return LPATTN_OK;
}

/* ---- decode plans (core/api_plan.c): the call above, built once ----------- */
lpattn_status gpu_decode_plan(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                              const lpattn_attn_problem *pr, void **state) {
  gpu_pool_state *k = pool_of(pool);
  size_t need;
  gpu_decode_call probe;
  TRY(decode_setup(pool, batch, pr, NULL, &need, &probe));
  gpu_decode_call *c = (gpu_decode_call *)calloc(1, sizeof *c);
  if (!c) return LPATTN_ERR_OUT_OF_MEMORY;
  float *ws = NULL;
  if (cudaSetDevice(k->device) != cudaSuccess || cudaMalloc((void **)&ws, need ? need : 16) != cudaSuccess) {
    (void)cudaGetLastError();
    free(c);
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  (void)decode_setup(pool, batch, pr, ws, &need, c);
  c->ws = ws, c->device = k->device;
  (void)ctx;
  *state = c;
  return LPATTN_OK;
}

lpattn_status gpu_decode_run(lpattn_ctx *ctx, void *state, const void *q, void *out) {
  gpu_decode_call *c = (gpu_decode_call *)state;
  c->a.q = q, c->qa.x = q, c->m.out = out;
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess || (dev != c->device && cudaSetDevice(c->device) != cudaSuccess))
    return LPATTN_ERR_BACKEND;
  return decode_launch(c, (cudaStream_t)ctx->params.stream);
}

void gpu_decode_plan_free(lpattn_ctx *ctx, void *state) {
  gpu_decode_call *c = (gpu_decode_call *)state;
  (void)cudaSetDevice(c->device);
  (void)cudaStreamSynchronize((cudaStream_t)ctx->params.stream); /* a queued run may still use ws */
  (void)cudaFree(c->ws);
  free(c);
}

} // namespace GPU_NS
