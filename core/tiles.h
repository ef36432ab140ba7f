/* Tile bookkeeping shared by the host backends (SEMANTICS "Tiles and their
 * precision"): which KV tiles a query tile sees, which are computed high or
 * low, and the ThriftAttention importance scores that pick the high ones. */
#ifndef LPATTN_TILES_H
#define LPATTN_TILES_H

#include <stdint.h>
#include "lpattn.h"
#include "mask.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a KV tile relates to a query tile (LP_TILE_MASKED, _FULL, _DIAG): mask.h */
/* How a KV tile is computed for a query tile. */
enum { LP_MODE_SKIP = 0, LP_MODE_HIGH = 1, LP_MODE_LOW = 2 };

/* Query rows r0..r1 (inclusive, r1 clipped to Sq-1) and keys c0..c1 with
 * c1 = c0 + Bk - 1 NOT clipped to Skv-1, so a partial last KV tile is never
 * full under the causal mask, as in decode; off = pr->off (Skv - Sq, or
 * q_start - kv_start with absolute positions). Non-causal: FULL. */
int lp_tile_kind(int causal, int64_t off, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

/* Number of tiles of size b covering n items. */
static inline int64_t lp_tile_count(int64_t n, int64_t b) { return (n + b - 1) / b; }

/* Keys of a tile that row r sees: the keys c0..c0+nk-1 are a prefix-closed
 * set under the causal mask, so the answer is a count in [0, nk]. */
int64_t lp_tile_visible(int causal, int64_t off, int64_t r, int64_t c0, int64_t nk);

/* Modes of the nkt KV tiles of one query tile from their kinds.
 * HIGH: every non-masked tile high. FP8/NVFP4/MXFP4: full tiles low, diagonal
 * high. THRIFT: diagonal high and counted among k, then the best-scored full
 * tiles (ties to the lower j) up to k, the rest low. leaky: every non-masked
 * tile low (not for HIGH). FP8_STATIC (SPEC 11): every non-masked tile low.
 * score may be NULL unless THRIFT. */
void lp_tile_modes(lpattn_precision prec, int leaky, int k, int64_t nkt, const uint8_t *kind,
                   const float *score, uint8_t *mode);

/* Mean of n rows of D values (element d of row r at element offset
 * off + r * row_stride + d * elem_stride of base, any float dtype): f32 sum in
 * row order, then one f32 division by `divisor` (SEMANTICS: Qbar, Kbar).
 * Non-finite values count as zero, so they cannot reach other rows through
 * the selection or the PASA shift (SEMANTICS "Non-finite inputs"). */
void lp_mean_rows_f32(const void *base, lpattn_dtype dt, int64_t off, int64_t row_stride,
                      int64_t elem_stride, int64_t n, int64_t D, float divisor, float *mean);

/* Importance Shat = sum_d a[d] * b[d] in f32, d ascending. */
float lp_dot_f32(const float *a, const float *b, int64_t D);

#ifdef __cplusplus
}
#endif
#endif
