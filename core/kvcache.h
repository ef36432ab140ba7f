/* The host KV cache of the ref and cpu backends (SEMANTICS "Decode").
 *
 * Per sequence and KV head, tokens are grouped in tiles of T. A tile is
 * quantized once, when the first token of the next tile arrives (K per token
 * along D, shifted by beta * Kbar_j under PASA; V per channel over the tile),
 * and its key mean Kbar_j is kept. High-precision copies (high_dtype) exist
 * for every tile under HIGH and THRIFT (any tile may be selected high) and
 * for the two newest tiles otherwise (they can be diagonal tiles of the rows
 * being decoded). Queries of the two newest query tiles are kept row by row
 * (overwritten, never summed, so append and decode may both give them);
 * older query tiles keep only their mean. */
#ifndef LPATTN_KVCACHE_H
#define LPATTN_KVCACHE_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The vtable entries (arguments validated by core). */
lpattn_status lp_kv_create(lpattn_ctx *ctx, const lpattn_kv_cache_params *p,
                           lpattn_kv_cache **out);
void lp_kv_free(lpattn_kv_cache *c);
lpattn_status lp_kv_append(lpattn_ctx *ctx, lpattn_kv_cache *c, int seq, const lpattn_tensor *k,
                           const lpattn_tensor *v, const lpattn_tensor *q);

/* Record the queries of a sequence's last Sq positions (decode), taken from
 * batch index `seq` of q [num_seqs, Hq, Sq, D]. */
void lp_kv_record_q(lpattn_kv_cache *c, int seq, const lpattn_tensor *q);

/* Format of the quantized tiles (meaningless under HIGH). */
lpattn_format lp_kv_low_format(const lpattn_kv_cache *c);

/* High copy of tile j as f32: keys and values [n x D], n = tokens present.
 * Returns n, or -1 when the tile has no high copy any more. */
int64_t lp_kv_read_high(const lpattn_kv_cache *c, int seq, int h, int64_t j, float *k, float *v);

/* Dequantized completed tile j, [T x D] each; k holds k - beta * Kbar_j under
 * PASA. Returns 0 when tile j is not quantized (incomplete, or HIGH). */
int lp_kv_read_low(const lpattn_kv_cache *c, int seq, int h, int64_t j, float *k, float *v);

/* Key mean of completed tile j (D floats) or NULL. */
const float *lp_kv_kmean(const lpattn_kv_cache *c, int seq, int h, int64_t j);

/* Mean of query tile j of q head hq: f32 sum of its T rows (missing rows are
 * zero) in row order, divided by T. */
void lp_kv_qmean(const lpattn_kv_cache *c, int seq, int hq, int64_t j, float *mean);

#ifdef __cplusplus
}
#endif
#endif
