/* Byte layout of the paged KV pool (SPEC 9, lpattn.h "paged KV storage"):
 * one description shared by every backend, so host and device code agree on
 * where each part of a page or slot lives. Pure arithmetic; no allocation.
 *
 * Pool:  [slot 0] ... [slot S-1] [page 0] ... [page N-1], each slot and page
 *        a multiple of LP_KV_ALIGN bytes.
 * Page (one tile of T tokens, all Hkv heads), sections in this order, each
 * starting at a multiple of 16 bytes:
 *   low part, per KV head h (FP8/NVFP4/MXFP4, THRIFT, FP8_STATIC), `head_bytes` apart:
 *     kc  K codes [T][D] along D (E2M1 packed two a byte, element 2k in the
 *         low nibble; FP8 one byte each)
 *     ks  K group scales [T][D/G] (E4M3 for NVFP4, E8M0 for MXFP4; none FP8)
 *     ko  K outer f32 [T] (NVFP4 outer, FP8 scale; none MXFP4)
 *     vc  V codes [D][T] along tokens, per channel
 *     vs  V group scales [D][T/G]
 *     vo  V outer f32 [D] (per channel of the tile; none MXFP4)
 *     (FP8_STATIC: kc and vc only, E4M3 codes written as each token is
 *     appended; the descales are the slot's)
 *   kmean f32 [Hkv][D]   key means of the tile (PASA or THRIFT)
 *   qmean f32 [Hq][D]    query tile means (THRIFT)
 *   hk, hv high_dtype [Hkv][T][D] each (HIGH and THRIFT)
 * D is the storage width (lp_kv_store_dim): the pool's head_dim (K, Q) and
 * head_dim_v (V) rounded up to whole groups, the channels past each true
 * width zero (SEMANTICS "Head dimensions": bitwise the quantization of the
 * true rows, as if zero-padded).
 * Slot (one sequence):
 *   header: int64 length, int32 flags (LP_SLOT_*), padding to 64 bytes
 *   rk, rv high_dtype [2][Hkv][T][D]: the two newest tiles, ring index
 *         tile % 2 (FP8/NVFP4/MXFP4 only)
 *   qrows f32 [2][Hq][T][D]: query rows of the two newest query tiles, ring
 *         index tile % 2 (THRIFT only)
 *   ds    f32 [2][Hkv]: k_descale then v_descale of each KV head (FP8_STATIC
 *         only; lpattn_kv_pool_set_descales) */
#ifndef LPATTN_KVPAGE_H
#define LPATTN_KVPAGE_H

#include <stddef.h>
#include <stdint.h>

#include "lpattn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LP_KV_ALIGN 256
/* Widest head dim of a host pool (MLA's 576 for Q/K; lpattn.h head_dim_v). */
#define LP_KV_DIM_MAX 576
enum { LP_SLOT_NONFINITE = 1 };

typedef struct {
  int T, D, Hkv, Hq;  /* D: storage width (lp_kv_store_dim) */
  int Dk, Dv;         /* true widths: head_dim (Q, K) and head_dim_v (V, out) */
  lpattn_precision prec;
  lpattn_format fmt;  /* low format (meaningless under HIGH) */
  int G;              /* group size of fmt; 0 for FP8 */
  int esz;            /* bytes of one high element */
  int has_low, has_high_pages, has_ring, has_kmean, has_qmean;
  int fp8s;           /* FP8_STATIC: E4M3 codes only, written per token; slot descales */
  /* page sections (bytes from the page start; head h adds h * head_bytes) */
  size_t kc, ks, ko, vc, vs, vo, head_bytes;
  size_t kmean, qmean, hk, hv;
  size_t page_bytes;
  /* slot sections */
  size_t rk, rv, qrows, ds;
  size_t slot_bytes;
} lp_kv_layout;

/* Storage width of a pool's K, V and Q rows: max(head_dim, head_dim_v)
 * rounded up to 16 channels (32 where the pages hold MXFP4). */
int lp_kv_store_dim(const lpattn_kv_pool_params *p);

/* Fills the layout; INVALID_ARGUMENT for a shape it cannot describe. */
lpattn_status lp_kv_layout_init(lp_kv_layout *L, const lpattn_kv_pool_params *p);

/* Pool bytes for num_slots slots and num_pages pages (SIZE_OVERFLOW). */
lpattn_status lp_kv_pool_bytes(const lp_kv_layout *L, int64_t num_slots, int64_t num_pages,
                               size_t *bytes);

static inline size_t lp_kv_slot_off(const lp_kv_layout *L, int64_t slot) {
  return (size_t)slot * L->slot_bytes;
}
static inline size_t lp_kv_page_off(const lp_kv_layout *L, int64_t num_slots, int64_t page) {
  return (size_t)num_slots * L->slot_bytes + (size_t)page * L->page_bytes;
}

/* Decode splits each sequence's context into chunks of this many tiles,
 * computed independently (online softmax restarted, P quantized against the
 * chunk's running max) and merged by SPEC 7 in an order fixed by the chunk
 * index (docs/SEMANTICS.md "Decode"). A constant, so
 * results depend on the sequence alone, never on the batch (SPEC 9). */
#define LP_DECODE_CHUNK_TILES 16

/* Chunks in global tiles (sharded decode, lpattn_kv_batch kv_start): chunk c
 * holds the sequence's tiles [c * C, (c + 1) * C), so a shard whose tile 0 is
 * the sequence's tile t0 cuts the whole sequence's chunks at its two ends
 * only. In the shard's own tile numbers: chunk c starts at local tile
 * lp_decode_chunk_start(c, t0) (clipped at 0); its chunks are 0 ..
 * lp_decode_chunk_of(last local tile, t0). t0 = 0 without positions. */
static inline int64_t lp_decode_chunk_of(int64_t j, int64_t t0) {
  return (j + t0 % LP_DECODE_CHUNK_TILES) / LP_DECODE_CHUNK_TILES;
}
static inline int64_t lp_decode_chunk_start(int64_t c, int64_t t0) {
  const int64_t j = c * LP_DECODE_CHUNK_TILES - t0 % LP_DECODE_CHUNK_TILES;
  return j < 0 ? 0 : j;
}

#ifdef __cplusplus
}
#endif
#endif
