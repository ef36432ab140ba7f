/* The host paged KV pool of the ref and cpu backends (lpattn.h "paged KV
 * storage", byte layout in kvpage.h, SEMANTICS "Decode").
 *
 * Append writes each token's K/V into the slot's ring (FP8/NVFP4/MXFP4) or
 * into its page's high part (HIGH/THRIFT), and the THRIFT query rows into the
 * slot. When a tile completes, its page gets the key mean (PASA/THRIFT) and,
 * unless HIGH, the quantized tile (K per token along D, shifted by
 * beta * Kbar under PASA; V per channel over the tile), exactly once. A THRIFT
 * query tile leaves the slot (its mean goes to its page) when the tile two
 * later starts. The readers below serve decode. */
#ifndef LPATTN_KVPOOL_H
#define LPATTN_KVPOOL_H

#include "internal.h"
#include "kvpage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Slot header (kvpage.h): int64 length at 0, int32 flags at 8. */
static inline int64_t lp_slot_len(const uint8_t *slot) { return *(const int64_t *)slot; }
static inline int32_t lp_slot_flags(const uint8_t *slot) { return *(const int32_t *)(slot + 8); }

/* One sequence of a host pool as the readers see it. */
typedef struct {
  const lpattn_kv_pool *pool;
  lp_kv_layout L;
  uint8_t *slot;
  const int32_t *pages;  /* its page table row */
  int64_t page_stride;   /* elements between ids */
  int64_t len;           /* tokens attended to */
  /* Decode positions (lpattn_kv_batch kv_start/q_start): global tile of the
   * slot's tile 0, and q's first row in slot positions (q_start - kv_start);
   * without positions 0 and -1 (q's rows are the last Sq of len). */
  int64_t tile0, qpos;
} lp_kv_seq;

/* Slot position of q's first row of Sq: as today (len - Sq) or from the
 * batch's positions. Row r of a decode is at qpos + r; its query tile
 * (qpos + r) / T may lie past the slot's tiles (an earlier shard). */
static inline int64_t lp_kv_seq_row0(const lp_kv_seq *s, int64_t Sq) {
  return s->qpos >= 0 ? s->qpos : s->len - Sq;
}

/* Sequence i of a validated batch (host tensors). */
void lp_kv_seq_of(const lpattn_kv_pool *pool, const lpattn_kv_batch *b, int64_t i, lp_kv_seq *s);

static inline uint8_t *lp_kv_page_ptr(const lp_kv_seq *s, int64_t j) {
  return s->pool->mem + lp_kv_page_off(&s->L, s->pool->p.num_slots, s->pages[j * s->page_stride]);
}

/* High copy of tile j of KV head h, [T][D] in high_dtype (K or V), or NULL
 * when it has none any more (a completed tile out of the ring). *n = tokens
 * of the tile present. */
const uint8_t *lp_kv_high_ptr(const lp_kv_seq *s, int v, int h, int64_t j, int64_t *n);

/* High copy as f32 ([n x D] each); returns n, or -1 when there is none. */
int64_t lp_kv_seq_read_high(const lp_kv_seq *s, int h, int64_t j, float *k, float *v);

/* Dequantized completed tile j, [T x D] each (k holds k - beta * Kbar_j under
 * PASA). Returns its tokens (T; FP8_STATIC: the tokens present, also of the
 * last partial tile, as their code values, rows past them zero), or 0 when
 * tile j is not quantized (incomplete, or HIGH). */
int lp_kv_seq_read_low(const lp_kv_seq *s, int h, int64_t j, float *k, float *v);

/* FP8_STATIC: the slot's k_descale [Hkv] then v_descale [Hkv]. */
static inline const float *lp_kv_seq_descales(const lp_kv_seq *s) {
  return (const float *)(s->slot + s->L.ds);
}

/* Key mean of completed tile j (D floats), or NULL. */
const float *lp_kv_seq_kmean(const lp_kv_seq *s, int h, int64_t j);

/* Mean of query tile j of q head hq: f32 sum of its T rows (missing rows are
 * zero) in row order, divided by T (THRIFT pools). */
void lp_kv_seq_qmean(const lp_kv_seq *s, int hq, int64_t j, float *mean);

/* The vtable entries of the host backends (arguments validated by core). */
lpattn_status lp_host_pool_init(lpattn_ctx *ctx, lpattn_kv_pool *pool);
void lp_host_pool_fini(lpattn_kv_pool *pool);
lpattn_status lp_host_kv_append(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                const lpattn_kv_append_call *call);
lpattn_status lp_host_slot_copy(lpattn_ctx *ctx, lpattn_kv_pool *pool, int32_t src, int32_t dst);
/* FP8_STATIC: INVALID_ARGUMENT unless slot `slot` (batch entry i) holds
 * descales that are finite and > 0 (set by lpattn_kv_pool_set_descales). */
lpattn_status lp_kv_check_descales(const lpattn_kv_pool *pool, const lp_kv_layout *L, int64_t i,
                                   int32_t slot);
/* FP8_STATIC: slot slots[i] gets descales row i of k_descale and v_descale
 * ({1, 1, n, Hkv}) and is emptied (length 0). */
lpattn_status lp_host_set_descales(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_tensor *slots,
                                   const lpattn_tensor *k_descale, const lpattn_tensor *v_descale);

/* Records the queries q [num_seqs, Hq, Sq, D] of each sequence's last Sq
 * positions in its slot (THRIFT; a no-op otherwise), as decode does. */
void lp_host_record_q(lpattn_kv_pool *pool, const lpattn_kv_batch *b, const lpattn_tensor *q);

#ifdef __cplusplus
}
#endif
#endif
