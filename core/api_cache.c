/* The KV cache's public entry points (lpattn.h "decode against a quantized
 * KV cache"): validate every argument, then dispatch to the context's
 * backend (host backends and the GPU backends share core/kvcache.c, a cache
 * on the paged pool). Above the pool API and the attention resolution in
 * core's layering (docs/ARCHITECTURE.md "core"): it calls them, they never
 * call it. Nothing is written before validation has passed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "argcheck.h"
#include "error.h"
#include "internal.h"
#include "window.h"

/* lpattn_free() of the cache's context (lpattn.h): release the cache's memory
 * while the backend is alive and leave the caller's handle, ctx = NULL. The
 * backend's cache_free releases what the cache owns and the header it is
 * given, so it is given a copy of the header. */
static void cache_detach(void *obj) {
  lpattn_kv_cache *c = obj, *copy = malloc(sizeof *copy);
  if (copy) { /* without it the memory leaks, but the handle stays safe */
    *copy = *c;
    c->ctx->vt->cache_free(copy);
  }
  c->ctx = NULL, c->lengths = NULL, c->impl = NULL;
}

lpattn_status lpattn_kv_cache_create(lpattn_ctx *ctx, const lpattn_kv_cache_params *params,
                                     lpattn_kv_cache **out) {
  lp_err_clear();
  if (out) *out = NULL; /* on every failure (lpattn.h "Conventions") */
  if (!ctx || !params || !out)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !params ? "params" : "out");
  lpattn_kv_cache_params p;
  lpattn_kv_cache_params_init(&p);
  LP_TRY_ARG("params", lp_take_params(&p, sizeof p, params));
  if (p.num_seqs < 1 || p.num_kv_heads < 1 || p.num_q_heads < 1 || p.max_tokens < 1)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "params: num_seqs = %d, num_kv_heads = %d, num_q_heads = %d, "
                   "max_tokens = %lld; expected each >= 1", p.num_seqs, p.num_kv_heads,
                   p.num_q_heads, (long long)p.max_tokens);
  LP_TRY_ARG("params", lp_check_head_dim(p.head_dim));
  if (p.num_q_heads % p.num_kv_heads)
    return lp_fail(LPATTN_ERR_BAD_GQA, "params.num_q_heads = %d is not a multiple of num_kv_heads = %d",
                   p.num_q_heads, p.num_kv_heads);
  if (!valid_block(p.tile))
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.tile = %d, expected a multiple of 32 in [32, 256]", p.tile);
  if (!is_float_io(p.high_dtype)) return lp_dtype_fail("params.high", p.high_dtype, "F32, F16 or BF16");
  if ((unsigned)p.precision > LPATTN_PREC_THRIFT || !valid_format(p.thrift_low))
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.precision = %d, thrift_low = %d: expected a "
                   "precision 0-4 and a format 0-2", (int)p.precision, (int)p.thrift_low);
  /* any head dim: the paged pool pads its rows (SEMANTICS "Head dimensions") */
  if (p.pasa_beta != 0.0f && !(p.pasa_beta > 0.0f && p.pasa_beta < 1.0f))
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.pasa_beta = %g, expected 0 (default) or in (0, 1)",
                   (double)p.pasa_beta);
  if (p.pasa_beta == 0.0f) p.pasa_beta = (float)lpattn_pasa_beta(LPATTN_F16, p.tile, 0.0);
  /* Worst case: every token stored in f32, for K and V, of every sequence. */
  int64_t per_seq = (int64_t)p.num_kv_heads * p.head_dim * 8;
  if (p.max_tokens > INT64_MAX / per_seq / p.num_seqs ||
      (uint64_t)(p.max_tokens * per_seq * p.num_seqs) > (uint64_t)SIZE_MAX / 2)
    return lp_fail(LPATTN_ERR_SIZE_OVERFLOW, "params.max_tokens = %lld: the cache's bytes overflow size_t",
                   (long long)p.max_tokens);
  if (!ctx->vt->cache_create)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the %s backend has no KV cache", lpattn_backend_name(ctx->kind));
  LP_TRY(lp_err_backend(ctx->vt->cache_create(ctx, &p, out), ctx, "kv_cache_create"));
  if (lp_ctx_track(ctx, *out, cache_detach) != LPATTN_OK) {
    ctx->vt->cache_free(*out);
    *out = NULL;
    return lp_fail(LPATTN_ERR_OUT_OF_MEMORY, "out of host memory tracking the cache");
  }
  return LPATTN_OK;
}

void lpattn_kv_cache_free(lpattn_kv_cache *cache) {
  if (!cache) return;
  if (!cache->ctx) { /* detached: only the handle is left */
    free(cache);
    return;
  }
  lp_ctx_untrack(cache->ctx, cache);
  cache->ctx->vt->cache_free(cache);
}

lpattn_status lpattn_kv_cache_length(const lpattn_kv_cache *cache, int seq, int64_t *len) {
  lp_err_clear();
  if (!cache || !len) return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !cache ? "cache" : "len");
  if (!cache->ctx) /* its context was freed */
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "cache: its context was freed (detached)");
  if (seq < 0 || seq >= cache->p.num_seqs)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "seq = %d, expected 0..%d", seq, cache->p.num_seqs - 1);
  *len = cache->lengths[seq];
  return LPATTN_OK;
}

lpattn_status lpattn_kv_cache_append(lpattn_ctx *ctx, lpattn_kv_cache *cache, int seq,
                                     const lpattn_tensor *k, const lpattn_tensor *v,
                                     const lpattn_tensor *q) {
  lp_err_clear();
  if (!ctx || !cache || !k || !v)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !cache ? "cache" : !k ? "k" : "v");
  if (cache->ctx != ctx)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "cache belongs to another context%s",
                   cache->ctx ? "" : " (its context was freed)");
  if (seq < 0 || seq >= cache->p.num_seqs)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "seq = %d, expected 0..%d", seq, cache->p.num_seqs - 1);
  LP_TRY_ARG("k", lp_check_view(k, 0));
  LP_TRY_ARG("v", lp_check_view(v, 0));
  if (!is_float_io(k->dtype)) return lp_dtype_fail("k", k->dtype, "F32, F16 or BF16");
  if (!is_float_io(v->dtype)) return lp_dtype_fail("v", v->dtype, "F32, F16 or BF16");
  const int64_t T = k->shape[2];
  const int64_t kv[4] = {1, cache->p.num_kv_heads, T, cache->p.head_dim};
  if (!same_shape(k, kv)) return lp_shape_fail("k", k->shape, kv);
  if (!same_shape(v, kv)) return lp_shape_fail("v", v->shape, kv);
  if (q) {
    LP_TRY_ARG("q", lp_check_view(q, 0));
    if (!is_float_io(q->dtype)) return lp_dtype_fail("q", q->dtype, "F32, F16 or BF16");
    const int64_t qs[4] = {1, cache->p.num_q_heads, T, cache->p.head_dim};
    if (!same_shape(q, qs)) return lp_shape_fail("q", q->shape, qs);
  }
  if (T > cache->p.max_tokens - cache->lengths[seq])
    return lp_fail(LPATTN_ERR_CACHE_FULL, "sequence %d holds %lld of max_tokens = %lld: no room for %lld more",
                   seq, (long long)cache->lengths[seq], (long long)cache->p.max_tokens, (long long)T);
  return lp_err_backend(ctx->vt->cache_append(ctx, cache, seq, k, v, q), ctx, "kv_cache_append");
}

lpattn_status lpattn_decode(lpattn_ctx *ctx, lpattn_kv_cache *cache, const lpattn_tensor *q,
                            const lpattn_tensor *out, const lpattn_attn_params *params,
                            const lpattn_attn_aux *aux_in) {
  lp_err_clear();
  if (!ctx || !cache || !q || !out)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !cache ? "cache" : !q ? "q" : "out");
  if (cache->ctx != ctx)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "cache belongs to another context%s",
                   cache->ctx ? "" : " (its context was freed)");
  LP_TRY_ARG("q", lp_check_view(q, 0));
  LP_TRY_ARG("out", lp_check_view(out, 1));
  if (!is_float_io(q->dtype)) return lp_dtype_fail("q", q->dtype, "F32, F16 or BF16");
  if (!is_float_io(out->dtype)) return lp_dtype_fail("out", out->dtype, "F32, F16 or BF16");
  const lpattn_kv_cache_params *cp = &cache->p;
  const int64_t Sq = q->shape[2];
  const int64_t qs[4] = {cp->num_seqs, cp->num_q_heads, Sq, cp->head_dim};
  if (!same_shape(q, qs)) return lp_shape_fail("q", q->shape, qs);
  if (!same_shape(out, q->shape)) return lp_shape_fail("out", out->shape, q->shape);
  if (Sq > cp->tile)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "q.shape[2] = %lld, expected at most the tile, %d",
                   (long long)Sq, cp->tile);
  int64_t max_len = 0;
  for (int s = 0; s < cp->num_seqs; s++) {
    if (cache->lengths[s] < Sq)
      return lp_fail(LPATTN_ERR_BAD_SHAPE, "sequence %d holds %lld tokens, fewer than q.shape[2] = %lld",
                     s, (long long)cache->lengths[s], (long long)Sq);
    if (cache->lengths[s] > max_len) max_len = cache->lengths[s];
  }
  lpattn_kv_pool_params sp;
  lpattn_kv_pool_params_init(&sp);
  sp.num_kv_heads = cp->num_kv_heads, sp.num_q_heads = cp->num_q_heads;
  sp.head_dim = cp->head_dim, sp.page_size = cp->tile, sp.precision = cp->precision;
  sp.thrift_low = cp->thrift_low, sp.pasa = cp->pasa, sp.pasa_beta = cp->pasa_beta;
  sp.mx_scale_round_up = cp->mx_scale_round_up;
  lpattn_attn_problem pr;
  lpattn_attn_aux aux;
  int check_finite;
  LP_TRY(lp_resolve_decode(host(ctx), params, aux_in, &sp, cp->num_seqs, Sq, max_len, &aux, &pr,
                        &check_finite));
  LP_TRY(lp_window_backend(ctx, &pr, LP_WINDOW_DECODE));
  pr.q = q, pr.out = out;
  if (check_finite && !host(ctx))
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.check_finite: only host backends scan inputs");
  if (check_finite) {
    LP_TRY_ARG("q", lp_scan_finite(q));
    LP_TRY_ARG("cache", lp_kv_cache_finite(cache)); /* non-finite K/V/Q recorded by append */
  }
  return lp_err_backend(ctx->vt->decode(ctx, cache, &pr), ctx, "decode");
}
