/* The API front of the FP8_STATIC pool (lpattn.h lpattn_kv_pool_set_descales,
 * SEMANTICS "Static FP8 pages"): a new sequence's slot takes its per-KV-head
 * k/v descales. Every argument (on host backends every slot and value) is
 * checked before anything is written; the backend writes the slots. */
#include <math.h>
#include <stdlib.h>

#include "argcheck.h"
#include "error.h"
#include "internal.h"

/* A descale table {1, 1, n, Hkv} of F32 (host backends: every value finite
 * and > 0). */
static lpattn_status check_table(const lpattn_ctx *ctx, const char *name, const lpattn_tensor *t,
                                 int64_t n, int64_t hkv) {
  LP_TRY_ARG(name, lp_check_view(t, 0));
  if (t->dtype != LPATTN_F32) return lp_dtype_fail(name, t->dtype, "F32");
  const int64_t want[4] = {1, 1, n, hkv};
  for (int i = 0; i < 4; i++)
    if (t->shape[i] != want[i]) return lp_shape_fail(name, t->shape, want);
  if (!host(ctx)) return LPATTN_OK; /* device memory: graph-capturable, unread here */
  for (int64_t i = 0; i < n; i++)
    for (int64_t h = 0; h < hkv; h++) {
      const float d = ((const float *)t->data)[i * t->stride[2] + h * t->stride[3]];
      if (!(isfinite(d) && d > 0.0f))
        return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "%s[%lld, %lld] = %g: descales must be finite and > 0",
                       name, (long long)i, (long long)h, (double)d);
    }
  return LPATTN_OK;
}

/* Host backends: every slot in range, none twice. */
static lpattn_status check_slots(const lpattn_kv_pool *pool, const lpattn_tensor *slots) {
  char *seen = calloc((size_t)pool->p.num_slots, 1);
  if (!seen) return lp_fail(LPATTN_ERR_OUT_OF_MEMORY, "out of host memory checking the slots");
  lpattn_status st = LPATTN_OK;
  for (int64_t i = 0; i < slots->shape[3] && st == LPATTN_OK; i++) {
    const int32_t s = ((const int32_t *)slots->data)[i * slots->stride[3]];
    if (s < 0 || s >= pool->p.num_slots || seen[s])
      st = lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "slots[%lld] = %d: expected a slot 0..%d, none twice",
                   (long long)i, (int)s, (int)pool->p.num_slots - 1);
    else seen[s] = 1;
  }
  free(seen);
  return st;
}

lpattn_status lpattn_kv_pool_set_descales(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_tensor *slots,
                                          const lpattn_tensor *k_descale, const lpattn_tensor *v_descale) {
  lp_err_clear();
  if (!ctx || !pool || !slots || !k_descale || !v_descale)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !pool ? "pool" : !slots ? "slots"
                   : !k_descale ? "k_descale" : "v_descale");
  if (pool->ctx != ctx)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "pool belongs to another context%s",
                   pool->ctx ? "" : " (its context was freed)");
  if (pool->p.precision != LPATTN_PREC_FP8_STATIC)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "pool precision %d: descales belong to FP8_STATIC pools",
                   (int)pool->p.precision);
  LP_TRY_ARG("slots", lp_check_view(slots, 0));
  if (slots->dtype != LPATTN_I32) return lp_dtype_fail("slots", slots->dtype, "I32");
  const int64_t n = slots->shape[3], hkv = pool->p.num_kv_heads, want[4] = {1, 1, 1, n};
  if (slots->shape[0] != 1 || slots->shape[1] != 1 || slots->shape[2] != 1 || n < 1)
    return lp_shape_fail("slots", slots->shape, want);
  LP_TRY(check_table(ctx, "k_descale", k_descale, n, hkv));
  LP_TRY(check_table(ctx, "v_descale", v_descale, n, hkv));
  if (host(ctx)) LP_TRY(check_slots(pool, slots));
  if (!ctx->vt->kv_set_descales)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the %s backend has no FP8_STATIC pool", lpattn_backend_name(ctx->kind));
  return lp_err_backend(ctx->vt->kv_set_descales(ctx, pool, slots, k_descale, v_descale), ctx,
                        "kv_pool_set_descales");
}
