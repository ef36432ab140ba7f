/* TEMPORARY front of the paged KV pool API (lpattn.h "paged KV storage"),
 * written by the gpukv branch only so its GPU kernels can be tested before
 * the real front (branch hostkv: validation of every id/length, host pool)
 * lands. The lead drops this file in favour of hostkv's; it validates only
 * what the GPU tests need. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvpage.h"

void lpattn_kv_pool_params_init(lpattn_kv_pool_params *p) {
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->page_size = 64;
  p->high_dtype = LPATTN_F16;
  p->precision = LPATTN_PREC_NVFP4;
  p->thrift_low = LPATTN_FMT_NVFP4;
}

void lpattn_kv_batch_init(lpattn_kv_batch *b) {
  memset(b, 0, sizeof *b);
  b->struct_size = sizeof *b;
}

lpattn_status lpattn_kv_pool_size(const lpattn_kv_pool_params *p, size_t *page_bytes,
                                  size_t *slot_bytes, size_t *pool_bytes) {
  if (!p) return LPATTN_ERR_NULL_POINTER;
  lp_kv_layout L;
  lpattn_status st = lp_kv_layout_init(&L, p);
  if (st != LPATTN_OK) return st;
  size_t all = 0;
  st = lp_kv_pool_bytes(&L, p->num_slots, p->num_pages, &all);
  if (st != LPATTN_OK) return st;
  if (page_bytes) *page_bytes = L.page_bytes;
  if (slot_bytes) *slot_bytes = L.slot_bytes;
  if (pool_bytes) *pool_bytes = all;
  return LPATTN_OK;
}

static void pool_detach(void *obj) {
  lpattn_kv_pool *pool = (lpattn_kv_pool *)obj;
  if (pool->ctx && pool->ctx->vt->pool_fini) pool->ctx->vt->pool_fini(pool);
  pool->ctx = NULL;
}

lpattn_status lpattn_kv_pool_create(lpattn_ctx *ctx, const lpattn_kv_pool_params *p, void *mem,
                                    size_t bytes, lpattn_kv_pool **out) {
  if (!ctx || !p || !out) return LPATTN_ERR_NULL_POINTER;
  *out = NULL;
  if (p->num_kv_heads < 1 || p->num_q_heads < 1 || p->num_q_heads % p->num_kv_heads ||
      p->num_pages < 1 || p->num_slots < 1)
    return LPATTN_ERR_INVALID_ARGUMENT;
  if (!ctx->vt->pool_init) return LPATTN_ERR_UNSUPPORTED;
  size_t need = 0;
  lpattn_status st = lpattn_kv_pool_size(p, NULL, NULL, &need);
  if (st != LPATTN_OK) return st;
  if (mem && (bytes < need || ((uintptr_t)mem % LP_KV_ALIGN))) return LPATTN_ERR_INVALID_ARGUMENT;
  lpattn_kv_pool *pool = calloc(1, sizeof *pool);
  if (!pool) return LPATTN_ERR_OUT_OF_MEMORY;
  pool->ctx = ctx, pool->p = *p, pool->mem = mem, pool->bytes = need;
  if (pool->p.pasa && pool->p.pasa_beta == 0.0f)
    pool->p.pasa_beta = (float)lpattn_pasa_beta(LPATTN_F16, p->page_size, 0.0);
  st = ctx->vt->pool_init(ctx, pool);
  if (st == LPATTN_OK) st = lp_ctx_track(ctx, pool, pool_detach);
  if (st != LPATTN_OK) {
    if (pool->impl && ctx->vt->pool_fini) ctx->vt->pool_fini(pool);
    free(pool);
    return st;
  }
  *out = pool;
  return LPATTN_OK;
}

void lpattn_kv_pool_free(lpattn_kv_pool *pool) {
  if (!pool) return;
  if (pool->ctx) {
    lp_ctx_untrack(pool->ctx, pool);
    pool_detach(pool);
  }
  free(pool);
}

size_t lpattn_kv_pool_bytes(const lpattn_kv_pool *pool) { return pool ? pool->bytes : 0; }

lpattn_status lpattn_kv_append(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                               const lpattn_tensor *k, const lpattn_tensor *v, const lpattn_tensor *q) {
  if (!ctx || !pool || !batch || !k || !v) return LPATTN_ERR_NULL_POINTER;
  if (pool->ctx != ctx) return LPATTN_ERR_INVALID_ARGUMENT;
  if (k->shape[0] != batch->num_seqs || k->shape[1] != pool->p.num_kv_heads ||
      k->shape[3] != pool->p.head_dim || memcmp(k->shape, v->shape, sizeof k->shape))
    return LPATTN_ERR_BAD_SHAPE;
  if (!ctx->vt->kv_append) return LPATTN_ERR_UNSUPPORTED;
  lpattn_kv_append_call c;
  memset(&c, 0, sizeof c);
  c.batch = batch, c.n = k->shape[2], c.k = k, c.v = v, c.q = q;
  return ctx->vt->kv_append(ctx, pool, &c);
}

lpattn_status lpattn_kv_slot_copy(lpattn_ctx *ctx, lpattn_kv_pool *pool, int32_t src, int32_t dst) {
  if (!ctx || !pool) return LPATTN_ERR_NULL_POINTER;
  if (src < 0 || dst < 0 || src >= pool->p.num_slots || dst >= pool->p.num_slots)
    return LPATTN_ERR_INVALID_ARGUMENT;
  if (!ctx->vt->slot_copy) return LPATTN_ERR_UNSUPPORTED;
  return ctx->vt->slot_copy(ctx, pool, src, dst);
}

lpattn_status lpattn_paged_decode(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                                  const lpattn_tensor *q, const lpattn_tensor *out,
                                  const lpattn_attn_params *params, const lpattn_attn_aux *aux) {
  if (!ctx || !pool || !batch || !q || !out) return LPATTN_ERR_NULL_POINTER;
  if (pool->ctx != ctx) return LPATTN_ERR_INVALID_ARGUMENT;
  const lpattn_kv_pool_params *p = &pool->p;
  if (q->shape[0] != batch->num_seqs || q->shape[1] != p->num_q_heads || q->shape[3] != p->head_dim ||
      q->shape[2] < 1 || q->shape[2] > p->page_size || memcmp(q->shape, out->shape, sizeof q->shape))
    return LPATTN_ERR_BAD_SHAPE;
  if (!ctx->vt->paged_decode) return LPATTN_ERR_UNSUPPORTED;
  lpattn_attn_problem pr;
  memset(&pr, 0, sizeof pr);
  pr.q = q, pr.out = out;
  if (aux && aux->lse.data) pr.lse = &aux->lse;
  if (aux && aux->entropy.data) pr.entropy = &aux->entropy;
  pr.B = batch->num_seqs, pr.Hq = p->num_q_heads, pr.Hkv = p->num_kv_heads;
  pr.Sq = q->shape[2], pr.Skv = batch->max_length, pr.D = p->head_dim;
  pr.causal = 1;
  pr.sm_scale = params && params->sm_scale != 0.0f ? params->sm_scale : 1.0f / sqrtf((float)p->head_dim);
  pr.Bq = pr.Bk = p->page_size;
  pr.precision = p->precision;
  pr.mx_round_up = p->mx_scale_round_up;
  if (params) pr.thrift_budget = params->thrift_budget, pr.thrift_k = params->thrift_k;
  return ctx->vt->paged_decode(ctx, pool, batch, &pr);
}
