/* The KV cache of every backend (lpattn.h "decode against a quantized KV
 * cache"): a convenience that owns a paged pool (kvpool.h) with
 * one slot per sequence and fixed page tables (sequence s holds pages
 * s * ntile ... s * ntile + ntile - 1), so the cache and the paged API share
 * one implementation: storage, append, decode. */
#ifndef LPATTN_KVCACHE_H
#define LPATTN_KVCACHE_H

#include "internal.h"
#include "kvpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The vtable entries (arguments validated by core). */
lpattn_status lp_kv_create(lpattn_ctx *ctx, const lpattn_kv_cache_params *p,
                           lpattn_kv_cache **out);
void lp_kv_free(lpattn_kv_cache *c);
lpattn_status lp_kv_append(lpattn_ctx *ctx, lpattn_kv_cache *c, int seq, const lpattn_tensor *k,
                           const lpattn_tensor *v, const lpattn_tensor *q);
/* Decode of every sequence through the backend's paged_decode. */
lpattn_status lp_kv_decode(lpattn_ctx *ctx, lpattn_kv_cache *c, const lpattn_attn_problem *pr);

/* The pool behind a cache, and sequence seq as the pool readers see it
 * (host backends). */
lpattn_kv_pool *lp_kv_cache_pool(const lpattn_kv_cache *c);
void lp_kv_cache_seq(const lpattn_kv_cache *c, int seq, lp_kv_seq *s);

/* Dequantized completed tile j (kvpool.h lp_kv_seq_read_low). */
int lp_kv_read_low(const lpattn_kv_cache *c, int seq, int h, int64_t j, float *k, float *v);

#ifdef __cplusplus
}
#endif
#endif
