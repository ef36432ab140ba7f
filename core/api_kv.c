/* The paged KV pool's public entry points (lpattn.h "paged KV storage"):
 * validate every argument (on host backends every id and length too), then
 * dispatch to the context's backend. Nothing is written before validation
 * has passed. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvpage.h"
#include "kvpool.h"
#include "tiles.h"

#define TRY(expr)                          \
  do {                                     \
    lpattn_status st_ = (expr);            \
    if (st_ != LPATTN_OK) return st_;      \
  } while (0)

static int host(const lpattn_ctx *ctx) { return ctx->vt->host_memory && ctx->vt->host_memory(); }

static int is_float_io(lpattn_dtype t) {
  return t == LPATTN_F32 || t == LPATTN_F16 || t == LPATTN_BF16;
}

static int valid_format(lpattn_format f) {
  return f == LPATTN_FMT_NVFP4 || f == LPATTN_FMT_MXFP4 || f == LPATTN_FMT_FP8;
}

static int shape_is(const lpattn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return t->shape[0] == a && t->shape[1] == b && t->shape[2] == c && t->shape[3] == d;
}

void lpattn_kv_pool_params_init(lpattn_kv_pool_params *p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->page_size = 64;
  p->high_dtype = LPATTN_F16;
  p->precision = LPATTN_PREC_NVFP4;
  p->thrift_low = LPATTN_FMT_NVFP4;
}

void lpattn_kv_batch_init(lpattn_kv_batch *b) {
  if (!b) return;
  memset(b, 0, sizeof *b);
  b->struct_size = sizeof *b;
}

/* Copies and checks pool params, resolving pasa_beta. */
static lpattn_status take_pool_params(const lpattn_kv_pool_params *in, lpattn_kv_pool_params *p) {
  if (!in) return LPATTN_ERR_NULL_POINTER;
  lpattn_kv_pool_params_init(p);
  TRY(lp_take_params(p, sizeof *p, in));
  if (p->num_kv_heads < 1 || p->num_q_heads < 1 || p->num_pages < 0 || p->num_slots < 0)
    return LPATTN_ERR_BAD_SHAPE;
  TRY(lp_check_head_dim(p->head_dim));
  if (p->num_q_heads % p->num_kv_heads) return LPATTN_ERR_BAD_GQA;
  if (p->page_size < 32 || p->page_size > 256 || p->page_size % 32)
    return LPATTN_ERR_INVALID_ARGUMENT;
  if (!is_float_io(p->high_dtype)) return LPATTN_ERR_BAD_DTYPE;
  if ((unsigned)p->precision > LPATTN_PREC_THRIFT || !valid_format(p->thrift_low))
    return LPATTN_ERR_INVALID_ARGUMENT;
  const lpattn_format low = lp_low_format(p->precision, p->thrift_low);
  if (p->precision != LPATTN_PREC_HIGH && low == LPATTN_FMT_MXFP4 && p->head_dim % 32)
    return LPATTN_ERR_BAD_HEAD_DIM;
  if (p->pasa_beta != 0.0f && !(p->pasa_beta > 0.0f && p->pasa_beta < 1.0f))
    return LPATTN_ERR_INVALID_ARGUMENT;
  if (p->pasa_beta == 0.0f) p->pasa_beta = (float)lpattn_pasa_beta(LPATTN_F16, p->page_size, 0.0);
  return LPATTN_OK;
}

lpattn_status lpattn_kv_pool_size(const lpattn_kv_pool_params *params, size_t *page_bytes,
                                  size_t *slot_bytes, size_t *pool_bytes) {
  lpattn_kv_pool_params p;
  TRY(take_pool_params(params, &p));
  lp_kv_layout L;
  TRY(lp_kv_layout_init(&L, &p));
  size_t total;
  TRY(lp_kv_pool_bytes(&L, p.num_slots, p.num_pages, &total));
  if (page_bytes) *page_bytes = L.page_bytes;
  if (slot_bytes) *slot_bytes = L.slot_bytes;
  if (pool_bytes) *pool_bytes = total;
  return LPATTN_OK;
}

/* lpattn_free() of the pool's context: release its memory while the
 * backend is alive; the header stays for lpattn_kv_pool_free. */
static void pool_detach(void *obj) {
  lpattn_kv_pool *pool = obj;
  if (pool->ctx && pool->ctx->vt->pool_fini) pool->ctx->vt->pool_fini(pool);
  pool->ctx = NULL;
}

lpattn_status lpattn_kv_pool_create(lpattn_ctx *ctx, const lpattn_kv_pool_params *params,
                                    void *mem, size_t bytes, lpattn_kv_pool **out) {
  if (!ctx || !params || !out) return LPATTN_ERR_NULL_POINTER;
  *out = NULL;
  lpattn_kv_pool_params p;
  TRY(take_pool_params(params, &p));
  if (p.num_pages < 1 || p.num_slots < 1) return LPATTN_ERR_BAD_SHAPE;
  if (p.high_dtype == LPATTN_F32 && !host(ctx)) return LPATTN_ERR_BAD_DTYPE;
  if (p.check_finite && !host(ctx)) return LPATTN_ERR_UNSUPPORTED;
  lp_kv_layout L;
  TRY(lp_kv_layout_init(&L, &p));
  size_t need;
  TRY(lp_kv_pool_bytes(&L, p.num_slots, p.num_pages, &need));
  if (mem && (bytes < need || (uintptr_t)mem % LP_KV_ALIGN)) return LPATTN_ERR_INVALID_ARGUMENT;
  if (!ctx->vt->pool_init) return LPATTN_ERR_UNSUPPORTED;
  lpattn_kv_pool *pool = calloc(1, sizeof *pool);
  if (!pool) return LPATTN_ERR_OUT_OF_MEMORY;
  pool->ctx = ctx, pool->p = p, pool->mem = mem, pool->bytes = need;
  lpattn_status st = ctx->vt->pool_init(ctx, pool);
  if (st == LPATTN_OK) {
    st = lp_ctx_track(ctx, pool, pool_detach);
    if (st != LPATTN_OK && ctx->vt->pool_fini) ctx->vt->pool_fini(pool);
  }
  if (st != LPATTN_OK) {
    free(pool);
    return st;
  }
  *out = pool;
  return LPATTN_OK;
}

void lpattn_kv_pool_free(lpattn_kv_pool *pool) {
  if (!pool) return;
  if (pool->ctx) {
    lp_ctx_untrack(pool->ctx, pool);
    pool_detach(pool);
  }
  free(pool);
}

size_t lpattn_kv_pool_bytes(const lpattn_kv_pool *pool) { return pool ? pool->bytes : 0; }

/* ---- batches ------------------------------------------------------------- */

static int32_t id_at(const lpattn_tensor *t, int64_t i) {
  return ((const int32_t *)t->data)[i * t->stride[3]];
}

static lpattn_status check_ids(const lpattn_tensor *t, int64_t a, int64_t b, int64_t c,
                               int64_t d) {
  TRY(lp_check_view(t, 0));
  if (t->dtype != LPATTN_I32) return LPATTN_ERR_BAD_DTYPE;
  return shape_is(t, a, b, c, d) ? LPATTN_OK : LPATTN_ERR_BAD_SHAPE;
}

/* Host checks of ids and lengths. n: tokens appended (0 for decode). */
static lpattn_status check_host_batch(const lpattn_kv_pool *pool, const lpattn_kv_batch *b,
                                      int append, int64_t n, int64_t Sq) {
  const int64_t S = b->num_seqs, T = pool->p.page_size, width = b->page_table.shape[3];
  const int32_t npages = pool->p.num_pages;
  lp_kv_layout L;
  lp_kv_layout_init(&L, &pool->p);
  /* owner[page]: the sequence that writes it in this append, or -1. */
  int32_t *mark = malloc(sizeof(int32_t) * (size_t)(npages > pool->p.num_slots ? npages : pool->p.num_slots));
  int32_t *owner = append ? malloc(sizeof(int32_t) * (size_t)npages) : NULL;
  if (!mark || (append && !owner)) {
    free(mark), free(owner);
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  lpattn_status st = LPATTN_OK;
  for (int32_t i = 0; i < pool->p.num_slots; i++) mark[i] = -1;
  for (int64_t i = 0; i < S && st == LPATTN_OK; i++) {
    const int32_t slot = id_at(&b->slots, i), len = id_at(&b->lengths, i);
    if (slot < 0 || slot >= pool->p.num_slots || mark[slot] >= 0) {
      st = LPATTN_ERR_INVALID_ARGUMENT; /* out of range or repeated */
    } else if (len < 0 || len > b->max_length) {
      st = LPATTN_ERR_INVALID_ARGUMENT;
    } else if (!append && len < Sq) {
      st = LPATTN_ERR_BAD_SHAPE;
    } else {
      const int64_t have = lp_slot_len(pool->mem + lp_kv_slot_off(&L, slot));
      if (append ? (len != 0 && len != have) : len != have) st = LPATTN_ERR_INVALID_ARGUMENT;
      else if (lp_tile_count(len, T) > width) st = LPATTN_ERR_BAD_PAGE;
      else if (append && lp_tile_count(len + n, T) > width) st = LPATTN_ERR_CACHE_FULL;
    }
    mark[slot < 0 || slot >= pool->p.num_slots ? 0 : slot] = (int32_t)i;
  }
  /* Page ids of each table: in range, no id twice. */
  for (int32_t p = 0; p < npages; p++) mark[p] = -1;
  for (int64_t i = 0; i < S && st == LPATTN_OK; i++) {
    const int32_t *row = (const int32_t *)b->page_table.data + i * b->page_table.stride[2];
    const int64_t need = lp_tile_count(id_at(&b->lengths, i) + n, T);
    for (int64_t j = 0; j < need && st == LPATTN_OK; j++) {
      const int32_t p = row[j * b->page_table.stride[3]];
      if (p < 0 || p >= npages || mark[p] == (int32_t)i) st = LPATTN_ERR_BAD_PAGE;
      else mark[p] = (int32_t)i;
    }
  }
  /* Append: a page written here (a tile that completes, or under HIGH/THRIFT
   * any tile touched) belongs to one sequence and is no other sequence's
   * completed page. THRIFT's query means of tiles leaving the slot are not
   * counted: equal prefixes write equal means. */
  if (append && st == LPATTN_OK) {
    for (int32_t p = 0; p < npages; p++) owner[p] = -1;
    for (int64_t i = 0; i < S && st == LPATTN_OK; i++) {
      const int32_t *row = (const int32_t *)b->page_table.data + i * b->page_table.stride[2];
      const int64_t len = id_at(&b->lengths, i), end = len + n;
      const int64_t j0 = len / T; /* the tile of the first new token */
      const int64_t j1 = L.has_high_pages ? (end - 1) / T : end / T - 1;
      for (int64_t j = j0; j <= j1 && st == LPATTN_OK; j++) {
        const int32_t p = row[j * b->page_table.stride[3]];
        if (owner[p] >= 0 && owner[p] != (int32_t)i) st = LPATTN_ERR_BAD_PAGE;
        owner[p] = (int32_t)i;
      }
    }
    for (int64_t i = 0; i < S && st == LPATTN_OK; i++) {
      const int32_t *row = (const int32_t *)b->page_table.data + i * b->page_table.stride[2];
      const int64_t need = lp_tile_count(id_at(&b->lengths, i) + n, T);
      for (int64_t j = 0; j < need && st == LPATTN_OK; j++) {
        const int32_t p = row[j * b->page_table.stride[3]];
        if (owner[p] >= 0 && owner[p] != (int32_t)i) st = LPATTN_ERR_BAD_PAGE;
      }
    }
  }
  free(mark), free(owner);
  return st;
}

static lpattn_status take_batch(const lpattn_kv_batch *in, lpattn_kv_batch *b) {
  if (!in) return LPATTN_ERR_NULL_POINTER;
  lpattn_kv_batch_init(b);
  TRY(lp_take_params(b, sizeof *b, in));
  if (b->num_seqs < 1) return LPATTN_ERR_BAD_SHAPE;
  TRY(check_ids(&b->slots, 1, 1, 1, b->num_seqs));
  TRY(check_ids(&b->lengths, 1, 1, 1, b->num_seqs));
  const lpattn_tensor *pt = &b->page_table;
  TRY(lp_check_view(pt, 0));
  if (pt->dtype != LPATTN_I32) return LPATTN_ERR_BAD_DTYPE;
  if (!shape_is(pt, 1, 1, b->num_seqs, pt->shape[3])) return LPATTN_ERR_BAD_SHAPE;
  if (b->max_length < 0 || b->max_length > INT32_MAX) return LPATTN_ERR_INVALID_ARGUMENT;
  return LPATTN_OK;
}

static lpattn_status check_pool(const lpattn_ctx *ctx, const lpattn_kv_pool *pool) {
  if (pool->ctx != ctx) return LPATTN_ERR_INVALID_ARGUMENT;
  return LPATTN_OK;
}

lpattn_status lpattn_kv_append(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                               const lpattn_tensor *k, const lpattn_tensor *v,
                               const lpattn_tensor *q) {
  if (!ctx || !pool || !batch || !k || !v) return LPATTN_ERR_NULL_POINTER;
  TRY(check_pool(ctx, pool));
  lpattn_kv_batch b;
  TRY(take_batch(batch, &b));
  TRY(lp_check_view(k, 0));
  TRY(lp_check_view(v, 0));
  if (q) TRY(lp_check_view(q, 0));
  if (!is_float_io(k->dtype) || !is_float_io(v->dtype) || (q && !is_float_io(q->dtype)))
    return LPATTN_ERR_BAD_DTYPE;
  const lpattn_kv_pool_params *pp = &pool->p;
  const int64_t n = k->shape[2];
  if (!shape_is(k, b.num_seqs, pp->num_kv_heads, n, pp->head_dim) ||
      !shape_is(v, b.num_seqs, pp->num_kv_heads, n, pp->head_dim) ||
      (q && !shape_is(q, b.num_seqs, pp->num_q_heads, n, pp->head_dim)))
    return LPATTN_ERR_BAD_SHAPE;
  if (n > INT32_MAX) return LPATTN_ERR_SIZE_OVERFLOW;
  if (host(ctx)) TRY(check_host_batch(pool, &b, 1, n, 0));
  if (pp->check_finite) {
    TRY(lp_scan_finite(k));
    TRY(lp_scan_finite(v));
    if (q) TRY(lp_scan_finite(q));
  }
  if (!ctx->vt->kv_append) return LPATTN_ERR_UNSUPPORTED;
  const lpattn_kv_append_call call = {&b, n, k, v, q};
  return ctx->vt->kv_append(ctx, pool, &call);
}

lpattn_status lpattn_kv_slot_copy(lpattn_ctx *ctx, lpattn_kv_pool *pool, int32_t src,
                                  int32_t dst) {
  if (!ctx || !pool) return LPATTN_ERR_NULL_POINTER;
  TRY(check_pool(ctx, pool));
  if (src < 0 || src >= pool->p.num_slots || dst < 0 || dst >= pool->p.num_slots)
    return LPATTN_ERR_INVALID_ARGUMENT;
  if (!ctx->vt->slot_copy) return LPATTN_ERR_UNSUPPORTED;
  return ctx->vt->slot_copy(ctx, pool, src, dst);
}

lpattn_status lpattn_paged_decode(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                  const lpattn_kv_batch *batch, const lpattn_tensor *q,
                                  const lpattn_tensor *out, const lpattn_attn_params *params,
                                  const lpattn_attn_aux *aux_in) {
  if (!ctx || !pool || !batch || !q || !out) return LPATTN_ERR_NULL_POINTER;
  TRY(check_pool(ctx, pool));
  lpattn_kv_batch b;
  TRY(take_batch(batch, &b));
  TRY(lp_check_view(q, 0));
  TRY(lp_check_view(out, 1));
  if (!is_float_io(q->dtype) || !is_float_io(out->dtype)) return LPATTN_ERR_BAD_DTYPE;
  const lpattn_kv_pool_params *pp = &pool->p;
  const int64_t Sq = q->shape[2];
  if (!shape_is(q, b.num_seqs, pp->num_q_heads, Sq, pp->head_dim) ||
      !shape_is(out, b.num_seqs, pp->num_q_heads, Sq, pp->head_dim) || Sq > pp->page_size)
    return LPATTN_ERR_BAD_SHAPE;
  if (b.max_length < Sq) return LPATTN_ERR_BAD_SHAPE;
  lpattn_attn_problem pr;
  lpattn_attn_aux aux;
  int check_finite;
  TRY(lp_resolve_decode(params, aux_in, pp, b.num_seqs, Sq, b.max_length, &aux, &pr,
                        &check_finite));
  pr.q = q, pr.out = out;
  if (host(ctx)) TRY(check_host_batch(pool, &b, 0, 0, Sq));
  if (check_finite && !host(ctx)) return LPATTN_ERR_UNSUPPORTED;
  if (check_finite) {
    TRY(lp_scan_finite(q));
    lp_kv_layout L;
    lp_kv_layout_init(&L, pp);
    for (int64_t i = 0; i < b.num_seqs; i++)
      if (lp_slot_flags(pool->mem + lp_kv_slot_off(&L, id_at(&b.slots, i))) & LP_SLOT_NONFINITE)
        return LPATTN_ERR_NONFINITE;
  }
  if (!ctx->vt->paged_decode) return LPATTN_ERR_UNSUPPORTED;
  return ctx->vt->paged_decode(ctx, pool, &b, &pr);
}
