/* Sliding window and logit softcap (docs/SEMANTICS.md "Sliding window and
 * softcap"): the mask every host backend applies and the softcap of a score,
 * each written once. Not installed. */
#ifndef LPATTN_WINDOW_H
#define LPATTN_WINDOW_H

#include <math.h>
#include <stdint.h>

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

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

static inline lp_mask lp_mask_of(const lpattn_attn_problem *pr) {
  lp_mask m = {pr->causal, pr->off, pr->window_left, pr->window_right, pr->Bq};
  return m;
}

/* Class of KV tile c0..c1 (c1 not clipped to Skv - 1) for query rows r0..r1
 * (r1 clipped to the call's last row; tiles.h LP_TILE_*): MASKED when no row
 * sees a key, FULL when every row sees every key, DIAG otherwise (high,
 * SEMANTICS). The window's left edge tests fullness on the query tile's
 * unclipped last row r0 + bq - 1, so that a row's tile classes do not
 * depend on how many rows follow it in the call (decode = prefill). */
int lp_mask_kind(const lp_mask *m, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

/* Keys of tile c0..c0+nk-1 that row r sees: keys c0 + *first .. c0 + *first
 * + n - 1, n returned (0: none, *first = 0). A window's keys are a run. */
int64_t lp_mask_range(const lp_mask *m, int64_t r, int64_t c0, int64_t nk, int64_t *first);

/* softcap * tanh(s / softcap) (cap > 0), else s; f64 (ref) and f32 (cpu). */
static inline double lp_softcap_f64(double s, double cap) {
  return cap > 0.0 ? cap * tanh(s / cap) : s;
}
static inline float lp_softcap_f32(float s, float cap) {
  return cap > 0.0f ? cap * tanhf(s / cap) : s;
}

/* Validates params' window_left/right and softcap into pr (after the rest of
 * resolve_params; Skv sizes THRIFT's k): INVALID_ARGUMENT for bad values,
 * UNSUPPORTED with PASA. */
lpattn_status lp_resolve_window(const lpattn_attn_params *p, lpattn_attn_problem *pr);

/* UNSUPPORTED, naming the field, when pr has a window or a softcap and ctx's
 * backend does not take them (cuda, hip). */
lpattn_status lp_window_backend(const lpattn_ctx *ctx, const lpattn_attn_problem *pr);

#ifdef __cplusplus
}
#endif
#endif
