/* Sliding window and logit softcap (window.h, SEMANTICS "Sliding window and
 * softcap"): the parameters' rules, THRIFT's k over a window, which
 * backends take them (the mask's math: mask.h). */
#include "window.h"

#include "error.h"
#include "thrift_k.h"
#include "tiles.h"

int lp_thrift_k_window(const lpattn_attn_problem *pr, int k_fixed, int causal, int64_t n_tiles) {
  const int64_t right = pr->causal ? 0 : pr->window_right;
  return lp_thrift_k_span(k_fixed, pr->thrift_budget, causal, n_tiles, pr->window_left, right, pr->Bq, pr->Bk);
}

lpattn_status lp_resolve_window(const lpattn_attn_params *p, lpattn_attn_problem *pr) {
  const lpattn_status bad = LPATTN_ERR_INVALID_ARGUMENT;
  if (p->window_left < -1)
    return lp_fail(bad, "params.window_left = %d, expected -1 (unbounded) or >= 0", p->window_left);
  if (p->window_right < -1)
    return lp_fail(bad, "params.window_right = %d, expected -1 (unbounded) or >= 0", p->window_right);
  if (!(p->softcap == 0.0f || (p->softcap > 0.0f && isfinite(p->softcap))))
    return lp_fail(bad, "params.softcap = %g, expected 0 (off) or finite and > 0", (double)p->softcap);
  pr->window_left = p->window_left;
  pr->window_right = p->window_right;
  pr->softcap = p->softcap;
  if (pr->pasa && (p->window_left >= 0 || p->window_right >= 0))
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.window_left = %d, window_right = %d: PASA has no "
                   "sliding window yet", p->window_left, p->window_right);
  if (pr->pasa && p->softcap != 0.0f)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.softcap = %g: PASA's shifted scores have no "
                   "softcap yet", (double)p->softcap);
  if (pr->precision == LPATTN_PREC_THRIFT && pr->window_left >= 0)
    pr->thrift_k = lp_thrift_k_window(pr, p->thrift_k, pr->causal, lp_tile_count(pr->Skv, pr->Bk));
  return LPATTN_OK;
}

lpattn_status lp_window_backend(const lpattn_ctx *ctx, const lpattn_attn_problem *pr, lp_window_op op) {
  if (ctx->kind != LPATTN_BACKEND_CUDA && ctx->kind != LPATTN_BACKEND_HIP) return LPATTN_OK;
  /* The GPU prefill and backward take them on their mma.sync kernels (not
   * static FP8's sm_90a kernel); CUDA's paged decode (pools, caches and the
   * paged prefill, which all run on it) in every pool precision; HIP's
   * decode kernel (lp_gpu_decode_hip.cuh) not yet. */
  if (op == LP_WINDOW_PREFILL && pr->precision != LPATTN_PREC_FP8_STATIC) return LPATTN_OK;
  if (op == LP_WINDOW_BACKWARD) return LPATTN_OK;
  if (op == LP_WINDOW_DECODE && ctx->kind == LPATTN_BACKEND_CUDA) return LPATTN_OK;
  const char *be = lpattn_backend_name(ctx->kind);
  const char *what = op == LP_WINDOW_PREFILL ? "static FP8 (FP8_STATIC) prefill" : "decode (caches, pools)";
  if (pr->window_left >= 0)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.window_left: the %s backend's %s has no sliding window yet",
                   be, what);
  if (pr->window_right >= 0)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.window_right: the %s backend's %s has no sliding window yet",
                   be, what);
  if (pr->softcap != 0.0f)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.softcap: the %s backend's %s has no softcap yet", be, what);
  return LPATTN_OK;
}
