/* Plans (lpattn.h "plans: a step without host work"): lpattn_paged_decode's
 * and lpattn_attention's host work once per layout, then runs that only
 * update pointers. GPU backends keep the decode launch in the plan (vtable
 * decode_plan / decode_run) and take an attention plan's resolved problem;
 * host backends run the eager path with the plan's views, which reads the
 * ids, lengths (and checked values) each time. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "argcheck.h"
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

/* ---- attention plans ------------------------------------------------------ */

struct lpattn_attn_plan {
  lpattn_ctx *ctx;            /* NULL once the context was freed */
  lpattn_tensor q, k, v, out; /* the plan's views; a run swaps their data */
  lpattn_attn_params params;  /* the caller's, copied: pr's descale views point here */
  lpattn_attn_aux aux_in;     /* as given (host path) */
  lpattn_attn_aux aux;        /* resolved: pr's lse/entropy/selection point here */
  int has_aux;
  lpattn_attn_problem pr;
};

static void attn_plan_detach(void *obj) { ((lpattn_attn_plan *)obj)->ctx = NULL; }

lpattn_status lpattn_attention_plan(lpattn_ctx *ctx, const lpattn_tensor *q, const lpattn_tensor *k,
                                    const lpattn_tensor *v, const lpattn_tensor *out,
                                    const lpattn_attn_params *params, const lpattn_attn_aux *aux_in,
                                    lpattn_attn_plan **plan) {
  lp_err_clear();
  if (plan) *plan = NULL;
  if (!plan) return lp_fail(LPATTN_ERR_NULL_POINTER, "plan is NULL");
  if (!q || !k || !v || !out)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !q ? "q" : !k ? "k" : !v ? "v" : "out");
  lpattn_attn_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return lp_fail(LPATTN_ERR_OUT_OF_MEMORY, "out of host memory for the plan");
  pl->q = *q, pl->k = *k, pl->v = *v, pl->out = *out;
  lpattn_attn_params_init(&pl->params);
  lpattn_attn_aux_init(&pl->aux_in);
  lpattn_status st = lp_take_params(&pl->params, sizeof pl->params, params);
  if (st == LPATTN_OK) st = lp_take_params(&pl->aux_in, sizeof pl->aux_in, aux_in);
  pl->has_aux = aux_in != NULL;
  if (st == LPATTN_OK)
    st = lp_resolve_attention(ctx, &pl->q, &pl->k, &pl->v, &pl->out, &pl->params,
                              pl->has_aux ? &pl->aux_in : NULL, &pl->pr, &pl->aux, 1);
  if (st == LPATTN_OK && !ctx->vt->attention)
    st = lp_fail(LPATTN_ERR_UNSUPPORTED, "the %s backend has no attention", lpattn_backend_name(ctx->kind));
  if (st == LPATTN_OK && lp_ctx_track(ctx, pl, attn_plan_detach) != LPATTN_OK)
    st = lp_fail(LPATTN_ERR_OUT_OF_MEMORY, "out of host memory for the plan");
  if (st != LPATTN_OK) {
    free(pl);
    return st;
  }
  pl->ctx = ctx;
  *plan = pl;
  return LPATTN_OK;
}

lpattn_status lpattn_attention_plan_run(lpattn_attn_plan *pl, const void *q, const void *k,
                                        const void *v, void *out) {
  if (!pl) {
    lp_err_clear();
    return lp_fail(LPATTN_ERR_NULL_POINTER, "plan is NULL");
  }
  lpattn_ctx *ctx = pl->ctx;
  const void *const want[4] = {pl->q.data, pl->k.data, pl->v.data, pl->out.data};
  const void *got[4] = {q ? q : want[0], k ? k : want[1], v ? v : want[2], out ? out : want[3]};
  int bad = -1;
  for (int i = 0; i < 4; i++)
    if (((uintptr_t)got[i] - (uintptr_t)want[i]) % 16) bad = i;
  if (!ctx || bad >= 0) {
    static const char *const name[4] = {"q", "k", "v", "out"};
    lp_err_clear();
    if (!ctx) return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "plan: its context was freed");
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "%s = %p: aligned unlike the plan's %p (mod 16 bytes)",
                   name[bad], got[bad], want[bad]);
  }
  lpattn_tensor tq = pl->q, tk = pl->k, tv = pl->v, to = pl->out;
  tq.data = (void *)got[0], tk.data = (void *)got[1], tv.data = (void *)got[2], to.data = (void *)got[3];
  if (host(ctx)) /* values are read on the host (check_finite, descales): the whole path */
    return lpattn_attention(ctx, &tq, &tk, &tv, &to, &pl->params, pl->has_aux ? &pl->aux_in : NULL);
  lpattn_attn_problem pr = pl->pr;
  pr.q = &tq, pr.k = &tk, pr.v = &tv, pr.out = &to;
  lpattn_status st = ctx->vt->attention(ctx, &pr);
  return st == LPATTN_OK ? st : lp_err_backend(st, ctx, "attention_plan_run");
}

void lpattn_attention_plan_free(lpattn_attn_plan *pl) {
  if (!pl) return;
  if (pl->ctx) lp_ctx_untrack(pl->ctx, pl);
  free(pl);
}
