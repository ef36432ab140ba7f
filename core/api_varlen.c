/* The API front of ragged batches (lpattn_attention_varlen, lpattn.h
 * "ragged batches"; SEMANTICS "Ragged batches"): FlashAttention's
 * cu_seqlens convention, run as lpattn_attention on each sequence's slices
 * of the packed tensors (lp_resolve_attention, then the backend's
 * attention), so every backend and precision gives each sequence exactly
 * that call's result. Validation first (the packing and cu_seqlens, the
 * packed tensors as one call, then every sequence's call), then one launch
 * per sequence: nothing is written before all of it has passed. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "argcheck.h"
#include "error.h"
#include "internal.h"

/* A packed tensor: B = 1, rows along dimension 2. */
static lpattn_status check_packed(const char *name, const lpattn_tensor *t, int out) {
  LP_TRY_ARG(name, lp_check_view(t, out));
  if (t->shape[0] != 1)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "%s.shape[0] = %lld, expected 1: a ragged batch packs "
                   "its sequences along dimension 2", name, (long long)t->shape[0]);
  return LPATTN_OK;
}

/* Entries [s, s + n) of dimension `dim` of a checked view t (n >= 1). */
static lpattn_tensor slice(const lpattn_tensor *t, int dim, int64_t s, int64_t n) {
  lpattn_tensor r = *t;
  r.data = (char *)t->data + (size_t)(s * t->stride[dim]) * lp_dtype_bytes(t->dtype);
  r.shape[dim] = n;
  return r;
}

/* The whole call: views, packing, cu_seqlens, the aux and descales
 * ({1, 1, n, Hkv}) that the per-sequence calls see only in slices. */
static lpattn_status check_call(const lpattn_tensor *q, const lpattn_tensor *k,
                                const lpattn_tensor *v, const lpattn_tensor *out,
                                const lpattn_tensor *cu_q, const lpattn_tensor *cu_k,
                                const lpattn_attn_params *p, const lpattn_attn_aux *aux) {
  LP_TRY(check_packed("q", q, 0));
  LP_TRY(check_packed("k", k, 0));
  LP_TRY(check_packed("v", v, 0));
  LP_TRY(check_packed("out", out, 1));
  if (!same_shape(v, k->shape)) return lp_shape_fail("v", v->shape, k->shape);
  if (!same_shape(out, q->shape)) return lp_shape_fail("out", out->shape, q->shape);
  LP_TRY(lp_check_cu_seqlens("cu_seqlens_q", cu_q, 0, q->shape[2]));
  LP_TRY(lp_check_cu_seqlens("cu_seqlens_k", cu_k, 0, k->shape[2]));
  const int64_t n = cu_q->shape[3] - 1;
  if (cu_k->shape[3] != n + 1)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "cu_seqlens_k has %lld entries but cu_seqlens_q %lld: "
                   "one per sequence plus one, in both", (long long)cu_k->shape[3],
                   (long long)(n + 1));
  if (p->positions || p->q_start || p->kv_start)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.positions = %d, q_start = %lld, kv_start = "
                   "%lld: each sequence of a ragged batch is bottom-right aligned", p->positions,
                   (long long)p->q_start, (long long)p->kv_start);
  if (aux->selection.data)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "aux.selection: a ragged batch has no selection "
                   "output (THRIFT's k differs per sequence)");
  const int64_t row[4] = {1, q->shape[1], q->shape[2], 1};
  const lpattn_tensor *rows[2] = {&aux->lse, &aux->entropy};
  static const char *const rname[2] = {"aux.lse", "aux.entropy"};
  for (int i = 0; i < 2; i++) {
    if (!rows[i]->data) continue;
    LP_TRY_ARG(rname[i], lp_check_view(rows[i], 1));
    if (!same_shape(rows[i], row)) return lp_shape_fail(rname[i], rows[i]->shape, row);
  }
  const int64_t ds[4] = {1, 1, n, k->shape[1]};
  const lpattn_tensor *d[3] = {&p->q_descale, &p->k_descale, &p->v_descale};
  static const char *const dname[3] = {"params.q_descale", "params.k_descale", "params.v_descale"};
  for (int i = 0; i < 3; i++) {
    if (!d[i]->data) continue;
    LP_TRY_ARG(dname[i], lp_check_view(d[i], 0));
    if (!same_shape(d[i], ds)) return lp_shape_fail(dname[i], d[i]->shape, ds);
  }
  return LPATTN_OK;
}

/* Sequence b's call as lpattn_attention's: its slices, params (descales:
 * row b) and aux, resolved into pr, which points into the rest (so c must
 * outlive the launch). */
typedef struct {
  lpattn_tensor q, k, v, out;
  lpattn_attn_params p;
  lpattn_attn_aux a, ax;
  lpattn_attn_problem pr;
} seq_call;

static lpattn_status resolve_seq(lpattn_ctx *ctx, const lpattn_tensor *q, const lpattn_tensor *k,
                                 const lpattn_tensor *v, const lpattn_tensor *out,
                                 int64_t qs, int64_t qn, int64_t ks, int64_t kn,
                                 const lpattn_attn_params *p, const lpattn_attn_aux *aux,
                                 int64_t b, seq_call *c) {
  c->q = slice(q, 2, qs, qn), c->out = slice(out, 2, qs, qn);
  c->k = slice(k, 2, ks, kn), c->v = slice(v, 2, ks, kn);
  c->p = *p;
  lpattn_tensor *d[3] = {&c->p.q_descale, &c->p.k_descale, &c->p.v_descale};
  for (int i = 0; i < 3; i++)
    if (d[i]->data) *d[i] = slice(d[i], 2, b, 1);
  c->a = *aux;
  if (aux->lse.data) c->a.lse = slice(&aux->lse, 2, qs, qn);
  if (aux->entropy.data) c->a.entropy = slice(&aux->entropy, 2, qs, qn);
  return lp_resolve_attention(ctx, &c->q, &c->k, &c->v, &c->out, &c->p, &c->a, &c->pr, &c->ax, 1);
}

lpattn_status lpattn_attention_varlen(lpattn_ctx *ctx, const lpattn_tensor *q,
                                      const lpattn_tensor *k, const lpattn_tensor *v,
                                      const lpattn_tensor *out, const lpattn_tensor *cu_seqlens_q,
                                      const lpattn_tensor *cu_seqlens_k,
                                      const lpattn_attn_params *params,
                                      const lpattn_attn_aux *aux_in) {
  lp_err_clear();
  if (!ctx || !q || !k || !v || !out || !cu_seqlens_q || !cu_seqlens_k)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !q ? "q" : !k ? "k"
                   : !v ? "v" : !out ? "out" : !cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k");
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  LP_TRY_ARG("params", lp_take_params(&p, sizeof p, params));
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  LP_TRY_ARG("aux", lp_take_params(&aux, sizeof aux, aux_in));
  const lpattn_tensor *cus[2] = {cu_seqlens_q, cu_seqlens_k};
  for (int i = 0; i < 2; i++) /* read on the host below: device memory would crash */
    if (ctx->vt->host_readable && cus[i]->data && !ctx->vt->host_readable(cus[i]->data))
      return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "%s is in device memory; lpattn_attention_varlen "
                     "reads it on the host (one launch per sequence): pass a host copy",
                     i ? "cu_seqlens_k" : "cu_seqlens_q");
  LP_TRY(check_call(q, k, v, out, cu_seqlens_q, cu_seqlens_k, &p, &aux));
  const int64_t n = cu_seqlens_q->shape[3] - 1;
  seq_call c;
  /* The packed tensors as one call: what every sequence shares (dtypes,
   * heads, head dim, params; check_finite's scan) fails here, named
   * without a sequence. */
  LP_TRY(resolve_seq(ctx, q, k, v, out, 0, q->shape[2], 0, k->shape[2], &p, &aux, 0, &c));
  p.check_finite = 0;
  char name[48];
  /* pass 0 validates every sequence's call, pass 1 runs them */
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t b = 0; b < n; b++) {
      const int64_t qs = lp_cu_at(cu_seqlens_q, b), qn = lp_cu_at(cu_seqlens_q, b + 1) - qs;
      const int64_t ks = lp_cu_at(cu_seqlens_k, b), kn = lp_cu_at(cu_seqlens_k, b + 1) - ks;
      if (qn == 0) continue;
      snprintf(name, sizeof name, "sequence %lld", (long long)b);
      if (kn == 0)
        return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "%s has %lld queries (cu_seqlens_q[%lld..%lld]) "
                       "but no keys: every query needs at least one key", name, (long long)qn,
                       (long long)b, (long long)(b + 1));
      LP_TRY_ARG(name, resolve_seq(ctx, q, k, v, out, qs, qn, ks, kn, &p, &aux, b, &c));
      if (pass == 0) continue;
      LP_TRY_ARG(name, lp_err_backend(ctx->vt->attention(ctx, &c.pr), ctx, "attention_varlen"));
    }
  }
  return LPATTN_OK;
}
