/* Decode plans (lpattn.h "decode plans"): lpattn_paged_decode's host work
 * once per batch layout, then runs that only update pointers. GPU backends
 * keep the launch in the plan (vtable decode_plan / decode_run); host
 * backends run lpattn_paged_decode's path with the plan's views, which
 * checks the ids and lengths each time. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "internal.h"

struct lpattn_decode_plan {
  lpattn_ctx *ctx;            /* NULL once the context was freed */
  lpattn_kv_pool *pool;
  lpattn_kv_batch batch;      /* the caller's batch, copied */
  lpattn_tensor q, out;       /* the plan's views; a run swaps their data */
  lpattn_attn_params params;  /* host path: as given */
  lpattn_attn_aux aux;        /* as given (host path), resolved (GPU) */
  int has_params, has_aux;
  void *state;                /* backend state (vt->decode_plan) */
};

/* lpattn_free() of the plan's context: release the backend state while the
 * backend is alive; the header stays for lpattn_decode_plan_free. */
static void plan_detach(void *obj) {
  lpattn_decode_plan *pl = obj;
  if (pl->ctx && pl->state && pl->ctx->vt->decode_plan_free) pl->ctx->vt->decode_plan_free(pl->ctx, pl->state);
  pl->state = NULL;
  pl->ctx = NULL;
}

lpattn_status lpattn_paged_decode_plan(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                       const lpattn_kv_batch *batch, const lpattn_tensor *q,
                                       const lpattn_tensor *out, const lpattn_attn_params *params,
                                       const lpattn_attn_aux *aux_in, lpattn_decode_plan **plan) {
  lp_err_clear();
  if (plan) *plan = NULL; /* on every failure (lpattn.h "Conventions") */
  if (!plan) return lp_fail(LPATTN_ERR_NULL_POINTER, "plan is NULL");
  lpattn_decode_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return lp_fail(LPATTN_ERR_OUT_OF_MEMORY, "out of host memory for the plan");
  lpattn_attn_aux aux;
  lpattn_attn_problem pr;
  lpattn_status st = lp_paged_decode_check(ctx, pool, batch, q, out, params, aux_in, 0, &pl->batch,
                                           &aux, &pr);
  if (st != LPATTN_OK) {
    free(pl);
    return st;
  }
  pl->ctx = ctx, pl->pool = pool, pl->q = *q, pl->out = *out;
  lpattn_attn_params_init(&pl->params);
  lpattn_attn_aux_init(&pl->aux);
  (void)lp_take_params(&pl->params, sizeof pl->params, params); /* checked by the call above */
  (void)lp_take_params(&pl->aux, sizeof pl->aux, aux_in);
  pl->has_params = params != NULL, pl->has_aux = aux_in != NULL;
  pr.q = &pl->q, pr.out = &pl->out;
  if (ctx->vt->decode_plan) {
    st = lp_err_backend(ctx->vt->decode_plan(ctx, pool, &pl->batch, &pr, &pl->state), ctx, "decode_plan");
    if (st != LPATTN_OK) {
      free(pl);
      return st;
    }
  }
  st = lp_ctx_track(ctx, pl, plan_detach);
  if (st != LPATTN_OK) {
    plan_detach(pl);
    free(pl);
    return lp_fail(st, "out of host memory for the plan");
  }
  *plan = pl;
  return LPATTN_OK;
}

lpattn_status lpattn_decode_plan_run(lpattn_decode_plan *pl, const void *q, void *out) {
  if (!pl) {
    lp_err_clear();
    return lp_fail(LPATTN_ERR_NULL_POINTER, "plan is NULL");
  }
  lpattn_ctx *ctx = pl->ctx;
  if (!q) q = pl->q.data;
  if (!out) out = pl->out.data;
  if (!ctx || ((uintptr_t)q - (uintptr_t)pl->q.data) % 16 || ((uintptr_t)out - (uintptr_t)pl->out.data) % 16) {
    lp_err_clear();
    if (!ctx) return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "plan: its context was freed");
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "q = %p, out = %p: aligned unlike the plan's q = %p, "
                   "out = %p (mod 16 bytes)", q, out, pl->q.data, pl->out.data);
  }
  if (pl->state) { /* the hot path: no validation left, no error text to clear */
    lpattn_status st = ctx->vt->decode_run(ctx, pl->state, q, out);
    return st == LPATTN_OK ? st : lp_err_backend(st, ctx, "decode_plan_run");
  }
  lpattn_tensor tq = pl->q, to = pl->out;
  tq.data = (void *)q, to.data = out;
  return lpattn_paged_decode(ctx, pl->pool, &pl->batch, &tq, &to, pl->has_params ? &pl->params : NULL,
                             pl->has_aux ? &pl->aux : NULL);
}

void lpattn_decode_plan_free(lpattn_decode_plan *pl) {
  if (!pl) return;
  if (pl->ctx) {
    lp_ctx_untrack(pl->ctx, pl);
    plan_detach(pl);
  }
  free(pl);
}
