/* The sliding window's mask and the logit softcap (docs/SEMANTICS.md
 * "Sliding window and softcap"), written once for the host backends
 * (core/window.h, core/thrift.c) and the GPU kernels (the prefill's tile
 * loop, edge tiles and THRIFT selection: backends/gpu/kernels), as
 * core/thrift_k.h is. Header-only, plain C; LP_HD marks the functions host
 * + device under nvcc and hipcc. Not installed. */
#ifndef LPATTN_MASK_H
#define LPATTN_MASK_H

#include <math.h>
#include <stdint.h>

#ifndef LP_HD
#if defined(__CUDACC__) || defined(__HIPCC__)
#define LP_HD __host__ __device__
#else
#define LP_HD
#endif
#endif
/* inlined into the kernels, so that an lp_mask stays in registers */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define LP_MASK_FN static __forceinline__ LP_HD
#else
#define LP_MASK_FN static inline
#endif

/* How a KV tile relates to a query tile under the mask (tiles.h). */
enum { LP_TILE_MASKED = 0, LP_TILE_FULL = 1, LP_TILE_DIAG = 2 };

/* Which keys a row sees: row r sees key c iff lo(r) <= c <= hi(r), where
 * lo(r) = r + off - left (left < 0: unbounded) and hi(r) = r + off under
 * causal, else r + off + right (right < 0: unbounded). Decode passes its
 * absolute positions with off = 0. */
typedef struct {
  int causal;
  int64_t off, left, right;
  int64_t bq; /* query tile rows: the window's full test takes the tile's
                 unclipped last row r0 + bq - 1 */
} lp_mask;

/* hi(r) bounded? hi(r), lo(r) */
LP_MASK_FN int lp_mask_hi_bounded(const lp_mask *m) { return m->causal || m->right >= 0; }
LP_MASK_FN int64_t lp_mask_hi(const lp_mask *m, int64_t r) {
  return m->causal ? r + m->off : r + m->off + m->right;
}
LP_MASK_FN int64_t lp_mask_lo(const lp_mask *m, int64_t r) { return r + m->off - m->left; }

/* Class of KV tile c0..c1 (c1 not clipped to Skv - 1) for query rows r0..r1
 * (r1 clipped to the call's last row; LP_TILE_*): MASKED when no row sees a
 * key, FULL when every row sees every key, DIAG otherwise (an edge tile:
 * high, SEMANTICS). The window's left edge tests fullness on the query
 * tile's unclipped last row r0 + bq - 1, so that a row's tile classes do
 * not depend on how many rows follow it in the call (decode = prefill). */
LP_MASK_FN int lp_mask_kind(const lp_mask *m, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int hb = lp_mask_hi_bounded(m), lb = m->left >= 0;
  if ((hb && c0 > lp_mask_hi(m, r1)) || (lb && c1 < lp_mask_lo(m, r0))) return LP_TILE_MASKED;
  if ((!hb || c1 <= lp_mask_hi(m, r0)) && (!lb || c0 >= lp_mask_lo(m, r0 + m->bq - 1))) return LP_TILE_FULL;
  return LP_TILE_DIAG;
}

/* Keys of tile c0..c0+nk-1 that row r sees: keys c0 + *first .. c0 + *first
 * + n - 1, n returned (0: none, *first = 0). A window's keys are a run. */
LP_MASK_FN int64_t lp_mask_range(const lp_mask *m, int64_t r, int64_t c0, int64_t nk, int64_t *first) {
  int64_t a = 0, b = nk; /* keys c0 + a .. c0 + b - 1 */
  if (m->left >= 0 && lp_mask_lo(m, r) - c0 > a) a = lp_mask_lo(m, r) - c0;
  if (lp_mask_hi_bounded(m) && lp_mask_hi(m, r) - c0 + 1 < b) b = lp_mask_hi(m, r) - c0 + 1;
  if (b <= a) a = b = 0;
  *first = a;
  return b - a;
}

/* Whether row r sees key c. */
LP_MASK_FN int lp_mask_sees(const lp_mask *m, int64_t r, int64_t c) {
  return (!lp_mask_hi_bounded(m) || c <= lp_mask_hi(m, r)) && (m->left < 0 || c >= lp_mask_lo(m, r));
}

/* Rows r0 .. r0 + nr - 1 that see key c (the transpose of lp_mask_range:
 * the GPU backward's key-major pass): rows r0 + *first .. r0 + *first + n
 * - 1, n returned (0: none, *first = 0). The rows that see a key are a run. */
LP_MASK_FN int64_t lp_mask_rows(const lp_mask *m, int64_t c, int64_t r0, int64_t nr, int64_t *first) {
  int64_t a = 0, b = nr;
  if (lp_mask_hi_bounded(m)) { /* hi(r) >= c: r >= c - off (- right) */
    const int64_t lo = c - m->off - (m->causal ? 0 : m->right) - r0;
    if (lo > a) a = lo;
  }
  if (m->left >= 0) { /* lo(r) <= c: r <= c - off + left */
    const int64_t hi = c - m->off + m->left - r0 + 1;
    if (hi < b) b = hi;
  }
  if (b <= a) a = b = 0;
  *first = a;
  return b - a;
}

/* The query tiles of size bq over rows 0 .. sq - 1 with a row that sees one
 * of the keys c0..c1 (c1 clipped to the last key): tiles *i0 .. *i1 - 1
 * (none: *i0 >= *i1); the transpose of lp_mask_tiles. */
LP_MASK_FN void lp_mask_qtiles(const lp_mask *m, int64_t c0, int64_t c1, int64_t bq, int64_t sq, int64_t *i0,
                               int64_t *i1) {
  const int64_t nqt = (sq + bq - 1) / bq;
  int64_t a = 0, b = nqt;
  if (lp_mask_hi_bounded(m)) { /* a row r with hi(r) >= c0, r < sq */
    const int64_t r = c0 - m->off - (m->causal ? 0 : m->right);
    if (r > 0) a = r < sq ? r / bq : nqt;
  }
  if (m->left >= 0) { /* a row r with lo(r) <= c1 */
    const int64_t r = c1 - m->off + m->left;
    const int64_t e = r < 0 ? 0 : r / bq + 1;
    if (e < b) b = e;
  }
  *i0 = a, *i1 = b;
}

/* The non-masked KV tiles of size bk for query rows r0..r1 (r1 clipped) of
 * a call with nkt tiles: tiles *j0 .. *j1 - 1 (none: *j0 >= *j1). Every
 * tile outside the run is MASKED (lp_mask_kind), every one inside is not:
 * a window's tiles are a run. */
LP_MASK_FN void lp_mask_tiles(const lp_mask *m, int64_t r0, int64_t r1, int64_t bk, int64_t nkt,
                                       int64_t *j0, int64_t *j1) {
  int64_t a = 0, b = nkt;
  if (m->left >= 0) { /* c1 = j bk + bk - 1 >= lo(r0) */
    const int64_t lo = lp_mask_lo(m, r0);
    if (lo > 0) a = lo / bk;
  }
  if (lp_mask_hi_bounded(m)) { /* c0 = j bk <= hi(r1) */
    const int64_t hi = lp_mask_hi(m, r1);
    const int64_t e = hi < 0 ? 0 : hi / bk + 1;
    if (e < b) b = e;
  }
  *j0 = a, *j1 = b;
}

/* softcap * tanh(s / softcap) (cap > 0), else s, in f32 (cpu, GPU kernels). */
LP_MASK_FN float lp_softcap_f32(float s, float cap) {
  return cap > 0.0f ? cap * tanhf(s / cap) : s;
}

#endif
