/* Sliding window and logit softcap (docs/SEMANTICS.md "Sliding window and
 * softcap"): the problem's mask and the parameters' rules; the mask's math
 * itself is in mask.h, shared with the GPU kernels. Not installed. */
#ifndef LPATTN_WINDOW_H
#define LPATTN_WINDOW_H

#include <math.h>
#include <stdint.h>

#include "internal.h"
#include "mask.h" /* lp_mask, lp_mask_kind, lp_mask_range, lp_softcap_f32 */

#ifdef __cplusplus
extern "C" {
#endif

static inline lp_mask lp_mask_of(const lpattn_attn_problem *pr) {
  lp_mask m = {pr->causal, pr->off, pr->window_left, pr->window_right, pr->Bq};
  return m;
}

/* softcap * tanh(s / softcap) (cap > 0), else s, in f64 (ref); f32:
 * lp_softcap_f32 (mask.h, shared with the GPU kernels). */
static inline double lp_softcap_f64(double s, double cap) {
  return cap > 0.0 ? cap * tanh(s / cap) : s;
}

/* Validates params' window_left/right and softcap into pr (after the rest of
 * resolve_params; Skv sizes THRIFT's k): INVALID_ARGUMENT for bad values,
 * UNSUPPORTED with PASA. */
lpattn_status lp_resolve_window(const lpattn_attn_params *p, lpattn_attn_problem *pr);

/* The op a call's window and softcap are for (lp_window_backend). */
typedef enum { LP_WINDOW_PREFILL, LP_WINDOW_BACKWARD, LP_WINDOW_DECODE } lp_window_op;

/* UNSUPPORTED, naming the field, when pr has a window or a softcap and ctx's
 * backend does not take them for op (cuda, hip: the prefill takes them but
 * for static FP8, the backward too; decode on cuda, not yet on hip). */
lpattn_status lp_window_backend(const lpattn_ctx *ctx, const lpattn_attn_problem *pr, lp_window_op op);

#ifdef __cplusplus
}
#endif
#endif
