/* lpattn_paged_prefill (lpattn.h "paged KV storage", SEMANTICS "Prefill
 * against the paged pool"): n new tokens of every sequence appended to the
 * pool and attended, causally, to the sequence's cached tokens and to each
 * other. The new tokens are cut into pieces; each piece is appended
 * (vt->kv_append) and then its rows are decoded (vt->paged_decode, at most
 * page_size rows), so the tile that is diagonal for those rows still has
 * its high copy in the slot (FP8/NVFP4/MXFP4 pools keep only the two newest
 * tiles high). A row is therefore bitwise the paged decode of that row,
 * whatever the chunking. Host backends cut each sequence's new tokens at
 * its tile borders (they read the lengths). Device backends cannot read
 * the lengths without a wait: their pieces are vt->prefill_step tokens
 * counted from each sequence's first new token (so one count for all
 * sequences gives one append and one decode per piece for the whole batch),
 * and each piece reaches the lengths on the device through len_add; a piece
 * of page_size tokens spans at most the two tiles the slot keeps high
 * (backends/gpu/kv_pool.cu gpu_prefill_step says which pools take it). The
 * whole call is validated before anything is written.
 * lpattn_paged_prefill_varlen takes the same path with each sequence's own
 * count (cu_seqlens over packed rows, host memory), one sequence at a time;
 * a sequence of count 0 is skipped. */
#include <stddef.h>
#include <string.h>

#include "argcheck.h"
#include "error.h"
#include "internal.h"
#include "kvpage.h"
#include "kvpool.h"
#include "window.h"

static int32_t id_at(const lpattn_tensor *t, int64_t i) {
  return ((const int32_t *)t->data)[i * t->stride[3]];
}

/* Rows [r0, r0 + n) of batch entry s of t ([S, H, rows, D]) as a [1, H, n, D] view. */
static lpattn_tensor rows_of(const lpattn_tensor *t, int64_t s, int64_t r0, int64_t n) {
  lpattn_tensor v = *t;
  v.data = (char *)t->data + (size_t)(s * t->stride[0] + r0 * t->stride[2]) * lp_dtype_bytes(t->dtype);
  v.shape[0] = 1, v.shape[2] = n;
  return v;
}

static lpattn_status check_out(const lpattn_kv_pool_params *pp, const lpattn_tensor *q,
                               const lpattn_tensor *out, int packed) {
  LP_TRY_ARG("out", lp_check_view(out, 1));
  if (!is_float_io(out->dtype))
    return lp_fail(LPATTN_ERR_BAD_DTYPE, "out.dtype = %s, expected F32, F16 or BF16",
                   lp_dtype_name(out->dtype));
  if (out->shape[0] != q->shape[0] || out->shape[1] != pp->num_q_heads ||
      out->shape[2] != q->shape[2] || out->shape[3] != pp->head_dim_v)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "out.shape = {%lld, %lld, %lld, %lld}, expected {%s = %lld, "
                   "num_q_heads = %d, %s = %lld, head_dim_v = %d}", (long long)out->shape[0],
                   (long long)out->shape[1], (long long)out->shape[2], (long long)out->shape[3],
                   packed ? "packed" : "num_seqs", (long long)q->shape[0], pp->num_q_heads,
                   packed ? "total" : "n", (long long)q->shape[2], pp->head_dim_v);
  return LPATTN_OK;
}

/* What every piece of one call shares. */
typedef struct {
  lpattn_ctx *ctx;
  lpattn_kv_pool *pool;
  const lpattn_kv_batch *b;
  const lpattn_tensor *k, *v, *q, *out;
  const lpattn_attn_params *params;
  const lpattn_attn_aux *aux;
  int dev; /* device backend: lengths stay on the device, a piece adds its offset there */
} pf_call;

/* Rows [r0, r0 + n) of every batch entry of t ([S, H, rows, D]). */
static lpattn_tensor rows_all(const lpattn_tensor *t, int64_t r0, int64_t n) {
  lpattn_tensor v = *t;
  v.data = (char *)t->data + (size_t)(r0 * t->stride[2]) * lp_dtype_bytes(t->dtype);
  v.shape[2] = n;
  return v;
}

/* Appends new tokens [a, e) and decodes their rows. s >= 0: sequence s as
 * a batch of one, rows r0 + a .. r0 + e of batch entry ts of the tensors
 * (ts = s, r0 = 0; packed: ts = 0, r0 = cu_seqlens[s]); len its length
 * (host backends: the pool length before the call). s < 0 (device
 * backends, one count for all): every sequence, rows [a, e) of every
 * entry. Host backends get their lengths as host arrays (len + a, then
 * len + e); device backends get the batch's own device lengths and add a,
 * then e, on the device (len_add). */
static lpattn_status piece(const pf_call *c, int64_t s, int64_t ts, int64_t r0, int64_t len,
                           int64_t a, int64_t e) {
  const lpattn_kv_batch *b = c->b;
  const int one_seq = s >= 0;
  int32_t cur = (int32_t)(len + a);
  lpattn_kv_batch one = *b;
  if (one_seq) {
    one.num_seqs = 1;
    one.slots.data = (int32_t *)b->slots.data + s * b->slots.stride[3];
    one.slots.shape[3] = 1;
    one.page_table.data = (int32_t *)b->page_table.data + s * b->page_table.stride[2];
    one.page_table.shape[2] = 1;
    if (c->dev) {
      one.lengths.data = (int32_t *)b->lengths.data + s * b->lengths.stride[3];
      one.lengths.shape[3] = 1;
    } else {
      one.lengths = lpattn_tensor_4d(&cur, LPATTN_I32, 1, 1, 1, 1);
    }
  }
  /* device: max_length bounds every length (the decode's chunk count) */
  one.max_length = c->dev ? b->max_length + a : cur;
  lpattn_tensor pk, pv, pq, po;
  if (one_seq) {
    pk = rows_of(c->k, ts, r0 + a, e - a), pv = rows_of(c->v, ts, r0 + a, e - a);
    pq = rows_of(c->q, ts, r0 + a, e - a), po = rows_of(c->out, ts, r0 + a, e - a);
  } else {
    pk = rows_all(c->k, a, e - a), pv = rows_all(c->v, a, e - a);
    pq = rows_all(c->q, a, e - a), po = rows_all(c->out, a, e - a);
  }
  const lpattn_kv_append_call call = {&one, e - a, &pk, &pv, &pq, c->dev ? a : 0};
  lpattn_ctx *ctx = c->ctx;
  LP_TRY(lp_err_backend(ctx->vt->kv_append(ctx, c->pool, &call), ctx, "paged_prefill (append)"));
  cur = (int32_t)(len + e);
  one.max_length = c->dev ? b->max_length + e : cur;
  const lpattn_attn_aux *aux = c->aux;
  lpattn_attn_aux a1 = *aux, ra;
  if (aux->lse.data) a1.lse = one_seq ? rows_of(&aux->lse, ts, r0 + a, e - a) : rows_all(&aux->lse, a, e - a);
  if (aux->entropy.data)
    a1.entropy = one_seq ? rows_of(&aux->entropy, ts, r0 + a, e - a) : rows_all(&aux->entropy, a, e - a);
  lpattn_attn_problem pr;
  int cf;
  lpattn_attn_params p1; /* FP8_STATIC: q_descale's row s, as a batch of one */
  lpattn_attn_params_init(&p1);
  LP_TRY_ARG("params", lp_take_params(&p1, sizeof p1, c->params));
  if (p1.q_descale.data && one_seq) {
    p1.q_descale.data = (float *)p1.q_descale.data + s * p1.q_descale.stride[2];
    p1.q_descale.shape[2] = 1;
  }
  LP_TRY(lp_resolve_decode(!c->dev, &p1, &a1, &c->pool->p, one.num_seqs, e - a, one.max_length, &ra, &pr, &cf));
  pr.q = &pq, pr.out = &po, pr.len_add = c->dev ? e : 0;
  return lp_err_backend(ctx->vt->paged_decode(ctx, c->pool, &one, &pr), ctx, "paged_prefill (decode)");
}

/* Both entries: cu NULL (n new tokens for every sequence, [num_seqs, H, n,
 * D]) or cu_seqlens (packed [1, H, total, D], sequence i's count cu[i + 1] -
 * cu[i]). */
static lpattn_status prefill(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                             const lpattn_tensor *k, const lpattn_tensor *v,
                             const lpattn_tensor *q, const lpattn_tensor *out,
                             const lpattn_tensor *cu, const lpattn_attn_params *params,
                             const lpattn_attn_aux *aux_in, const char *fn) {
  lpattn_kv_batch in;
  lpattn_kv_batch_init(&in);
  LP_TRY_ARG("batch", lp_take_params(&in, sizeof in, batch));
  if (in.kv_start.data || in.q_start.data)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "batch.kv_start/q_start: prefill appends to whole "
                   "sequences (a sharded pool is decoded with lpattn_paged_decode)");
  lpattn_kv_batch b;
  int64_t n;
  LP_TRY(lp_kv_append_check(ctx, pool, batch, k, v, q, cu, &b, &n));
  if (n < 1) return lp_fail(LPATTN_ERR_BAD_SHAPE, "k.shape[2] = %lld: no new token to prefill", (long long)n);
  int64_t most = n; /* the largest count of a sequence */
  if (cu) {
    most = 0;
    for (int64_t s = 0; s < b.num_seqs; s++)
      if (lp_cu_at(cu, s + 1) - lp_cu_at(cu, s) > most) most = lp_cu_at(cu, s + 1) - lp_cu_at(cu, s);
  }
  if (b.max_length + most > INT32_MAX)
    return lp_fail(LPATTN_ERR_SIZE_OVERFLOW, "batch.max_length + %s = %lld, at most 2^31 - 1",
                   cu ? "the largest count" : "n", (long long)(b.max_length + most));
  const lpattn_kv_pool_params *pp = &pool->p;
  LP_TRY(check_out(pp, q, out, cu != NULL));
  lpattn_attn_aux aux;
  lpattn_attn_problem pr;
  int check_finite;
  lpattn_attn_params p0;
  lpattn_attn_params_init(&p0);
  LP_TRY_ARG("params", lp_take_params(&p0, sizeof p0, params));
  if (cu && p0.q_descale.data) { /* FP8_STATIC: q_descale is [num_seqs, Hkv] also when packed */
    LP_TRY(lp_resolve_decode(host(ctx), &p0, NULL, pp, b.num_seqs, n, b.max_length + most, &aux, &pr,
                             &check_finite));
    p0.q_descale.data = NULL;
  }
  LP_TRY(lp_resolve_decode(host(ctx), &p0, aux_in, pp, q->shape[0], n, b.max_length + most, &aux, &pr,
                           &check_finite));
  LP_TRY(lp_window_backend(ctx, &pr, LP_WINDOW_DECODE));
  if (check_finite && !host(ctx))
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.check_finite: only host backends scan inputs");
  if (check_finite) {
    LP_TRY_ARG("q", lp_scan_finite(q));
    LP_TRY_ARG("k", lp_scan_finite(k));
    LP_TRY_ARG("v", lp_scan_finite(v));
    lp_kv_layout L;
    lp_kv_layout_init(&L, pp);
    for (int64_t i = 0; i < b.num_seqs; i++)
      if (id_at(&b.lengths, i) > 0 && (!cu || lp_cu_at(cu, i + 1) > lp_cu_at(cu, i)) &&
          (lp_slot_flags(pool->mem + lp_kv_slot_off(&L, id_at(&b.slots, i))) & LP_SLOT_NONFINITE))
        return lp_fail(LPATTN_ERR_NONFINITE, "sequence %lld (slot %d) holds a non-finite K/V/Q "
                       "(check_finite)", (long long)i, (int)id_at(&b.slots, i));
  }
  if (!ctx->vt->paged_decode)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the %s backend has no paged decode", lpattn_backend_name(ctx->kind));
  const pf_call c = {ctx, pool, &b, k, v, q, out, params, &aux, !host(ctx)};
  const int64_t T = pp->page_size;
  int64_t step = 0; /* host backends: each sequence cut at its tile borders */
  if (c.dev) { /* the lengths are device memory: the backend's step from the first new token */
    if (!ctx->vt->prefill_step)
      return lp_fail(LPATTN_ERR_UNSUPPORTED, "%s: the %s backend has no prefill against the paged pool",
                     fn, lpattn_backend_name(ctx->kind));
    lpattn_kv_batch bm = b;
    bm.max_length = b.max_length + most;
    lpattn_tensor q1 = *q; /* the largest piece's rows: at most page_size */
    q1.shape[2] = most < T ? most : T;
    pr.q = &q1, pr.out = out;
    LP_TRY(lp_err_backend(ctx->vt->prefill_step(ctx, pool, &bm, &pr, &step), ctx, fn));
    if (step < 1 || step > T) return lp_fail(LPATTN_ERR_BACKEND, "%s: piece of %lld tokens", fn, (long long)step);
    if (!cu) { /* one count for every sequence: one append and one decode per piece */
      for (int64_t a = 0, e; a < n; a = e) {
        e = a + step < n ? a + step : n;
        LP_TRY(piece(&c, -1, 0, 0, 0, a, e));
      }
      return LPATTN_OK;
    }
  }
  for (int64_t s = 0; s < b.num_seqs; s++) {
    const int64_t len = c.dev ? 0 : id_at(&b.lengths, s);
    const int64_t r0 = cu ? lp_cu_at(cu, s) : 0, ns = cu ? lp_cu_at(cu, s + 1) - r0 : n;
    for (int64_t a = 0, e; a < ns; a = e) { /* ns = 0: the sequence is skipped */
      e = step ? a + step : a + (T - (len + a) % T); /* host: to the end of the tile of token a */
      if (e > ns) e = ns;
      LP_TRY(piece(&c, s, cu ? 0 : s, r0, len, a, e));
    }
  }
  return LPATTN_OK;
}

lpattn_status lpattn_paged_prefill(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                   const lpattn_kv_batch *batch, const lpattn_tensor *k,
                                   const lpattn_tensor *v, const lpattn_tensor *q,
                                   const lpattn_tensor *out, const lpattn_attn_params *params,
                                   const lpattn_attn_aux *aux_in) {
  lp_err_clear();
  if (!ctx || !pool || !batch || !k || !v || !q || !out)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !pool ? "pool" : !batch ? "batch"
                   : !k ? "k" : !v ? "v" : !q ? "q" : "out");
  return prefill(ctx, pool, batch, k, v, q, out, NULL, params, aux_in, "lpattn_paged_prefill");
}

lpattn_status lpattn_paged_prefill_varlen(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                          const lpattn_kv_batch *batch, const lpattn_tensor *k,
                                          const lpattn_tensor *v, const lpattn_tensor *q,
                                          const lpattn_tensor *out, const lpattn_tensor *cu_seqlens,
                                          const lpattn_attn_params *params,
                                          const lpattn_attn_aux *aux_in) {
  lp_err_clear();
  if (!ctx || !pool || !batch || !k || !v || !q || !out || !cu_seqlens)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !pool ? "pool" : !batch ? "batch"
                   : !k ? "k" : !v ? "v" : !q ? "q" : !out ? "out" : "cu_seqlens");
  /* read on the host (the cut at tile borders): device memory would crash */
  if (ctx->vt->host_readable && cu_seqlens->data && !ctx->vt->host_readable(cu_seqlens->data))
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "cu_seqlens is in device memory; "
                   "lpattn_paged_prefill_varlen reads it on the host: pass a host copy");
  return prefill(ctx, pool, batch, k, v, q, out, cu_seqlens, params, aux_in,
                 "lpattn_paged_prefill_varlen");
}
