/* The paged KV pool's public entry points (lpattn.h "paged KV storage"):
 * validate every argument (on host backends every id and length too), then
 * dispatch to the context's backend. Nothing is written before validation
 * has passed. */
#include <stdlib.h>
#include <string.h>

#include "argcheck.h"
#include "error.h"
#include "internal.h"
#include "kvpage.h"
#include "kvpool.h"
#include "tiles.h"
#include "window.h"

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
  if (!in) return lp_fail(LPATTN_ERR_NULL_POINTER, "params is NULL");
  lpattn_kv_pool_params_init(p);
  LP_TRY_ARG("params", lp_take_params(p, sizeof *p, in));
  if (p->num_kv_heads < 1 || p->num_q_heads < 1 || p->num_pages < 0 || p->num_slots < 0)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "params: num_kv_heads = %d, num_q_heads = %d, num_pages = %d, "
                   "num_slots = %d; expected heads >= 1, pages and slots >= 0", p->num_kv_heads,
                   p->num_q_heads, (int)p->num_pages, (int)p->num_slots);
  if (p->head_dim_v == 0) p->head_dim_v = p->head_dim;
  if (p->head_dim < LP_HEAD_DIM_MIN || p->head_dim > LP_KV_DIM_MAX || p->head_dim_v < LP_HEAD_DIM_MIN ||
      p->head_dim_v > LP_KV_DIM_MAX)
    return lp_fail(LPATTN_ERR_BAD_HEAD_DIM, "params.head_dim = %d, head_dim_v = %d: expected head_dim in "
                   "[%d, %d] and head_dim_v 0 (= head_dim) or in the same range", p->head_dim,
                   p->head_dim_v, LP_HEAD_DIM_MIN, LP_KV_DIM_MAX);
  if (p->num_q_heads % p->num_kv_heads)
    return lp_fail(LPATTN_ERR_BAD_GQA, "params.num_q_heads = %d is not a multiple of num_kv_heads = %d",
                   p->num_q_heads, p->num_kv_heads);
  if (p->page_size < 32 || p->page_size > 256 || p->page_size % 32)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.page_size = %d, expected a multiple of 32 in [32, 256] "
                   "(a page is one tile, SPEC 9, and MXFP4 groups 32 keys)", p->page_size);
  if (!is_float_io(p->high_dtype))
    return lp_fail(LPATTN_ERR_BAD_DTYPE, "params.high_dtype = %s, expected F16, BF16 or F32",
                   lp_dtype_name(p->high_dtype));
  if ((unsigned)p->precision > LPATTN_PREC_FP8_STATIC || !valid_format(p->thrift_low))
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.precision = %d, thrift_low = %d: expected a "
                   "precision 0-5 and a format 0-2", (int)p->precision, (int)p->thrift_low);
  if (p->precision == LPATTN_PREC_FP8_STATIC && p->pasa)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.pasa with precision FP8_STATIC: static FP8 "
                   "pages have no shifted form");
  if (p->pasa_beta != 0.0f && !(p->pasa_beta > 0.0f && p->pasa_beta < 1.0f))
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.pasa_beta = %g, expected 0 (default) or in (0, 1)",
                   (double)p->pasa_beta);
  if (p->pasa_beta == 0.0f) p->pasa_beta = (float)lpattn_pasa_beta(LPATTN_F16, p->page_size, 0.0);
  return LPATTN_OK;
}

lpattn_status lpattn_kv_pool_size(const lpattn_kv_pool_params *params, size_t *page_bytes,
                                  size_t *slot_bytes, size_t *pool_bytes) {
  lp_err_clear();
  lpattn_kv_pool_params p;
  LP_TRY(take_pool_params(params, &p));
  lp_kv_layout L;
  LP_TRY_ARG("params", lp_kv_layout_init(&L, &p));
  size_t total;
  LP_TRY_ARG("params (num_pages, num_slots)", lp_kv_pool_bytes(&L, p.num_slots, p.num_pages, &total));
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
  lp_err_clear();
  if (out) *out = NULL; /* on every failure (lpattn.h "Conventions") */
  if (!ctx || !params || !out)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !params ? "params" : "out");
  lpattn_kv_pool_params p;
  LP_TRY(take_pool_params(params, &p));
  if (p.num_pages < 1 || p.num_slots < 1)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "params.num_pages = %d, num_slots = %d: a pool needs at least one of each",
                   (int)p.num_pages, (int)p.num_slots);
  if (p.high_dtype == LPATTN_F32 && !host(ctx))
    return lp_fail(LPATTN_ERR_BAD_DTYPE, "params.high_dtype = F32: GPU pools store F16 or BF16");
  if (p.check_finite && !host(ctx))
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.check_finite: only host backends scan inputs");
  /* GPU pools store rows at head_dim (no padding): head_dim_v may be smaller
   * only as MLA's 576/512, which the backend's decode variants decide */
  if (!host(ctx) && (p.head_dim_v > p.head_dim || lp_kv_store_dim(&p) != p.head_dim ||
                     (p.head_dim_v != p.head_dim && (p.head_dim != 576 || p.head_dim_v != 512))))
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.head_dim = %d, head_dim_v = %d: %s pools take one head "
                   "dim for K and V, a multiple of 16 (MXFP4: 32) that a decode variant is built for, or "
                   "MLA's 576/512 (CUDA); other padded and MLA pools run on the ref and cpu backends "
                   "(SEMANTICS \"Head dimensions\")",
                   p.head_dim, p.head_dim_v, lpattn_backend_name(ctx->kind));
  lp_kv_layout L;
  LP_TRY_ARG("params", lp_kv_layout_init(&L, &p));
  size_t need;
  LP_TRY_ARG("params (num_pages, num_slots)", lp_kv_pool_bytes(&L, p.num_slots, p.num_pages, &need));
  if (mem && bytes < need)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "bytes = %zu, the pool needs %zu", bytes, need);
  if (mem && (uintptr_t)mem % LP_KV_ALIGN)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "mem = %p is not %d-byte aligned", mem, (int)LP_KV_ALIGN);
  if (!ctx->vt->pool_init)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the %s backend has no paged pool", lpattn_backend_name(ctx->kind));
  lpattn_kv_pool *pool = calloc(1, sizeof *pool);
  if (!pool) return lp_fail(LPATTN_ERR_OUT_OF_MEMORY, "out of host memory for the pool header");
  pool->ctx = ctx, pool->p = p, pool->mem = mem, pool->bytes = need;
  lpattn_status st = lp_err_backend(ctx->vt->pool_init(ctx, pool), ctx, "kv_pool_create");
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

static lpattn_status check_ids(const char *name, const lpattn_tensor *t, int64_t a, int64_t b, int64_t c,
                               int64_t d) {
  LP_TRY_ARG(name, lp_check_view(t, 0));
  if (t->dtype != LPATTN_I32)
    return lp_fail(LPATTN_ERR_BAD_DTYPE, "%s.dtype = %s, expected I32", name, lp_dtype_name(t->dtype));
  if (shape_is(t, a, b, c, d)) return LPATTN_OK;
  return lp_fail(LPATTN_ERR_BAD_SHAPE, "%s.shape = {%lld, %lld, %lld, %lld}, expected {%lld, %lld, %lld, %lld}",
                 name, (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2],
                 (long long)t->shape[3], (long long)a, (long long)b, (long long)c, (long long)d);
}

/* Tokens sequence i appends: cu[i + 1] - cu[i] of a checked cu_seqlens, else n. */
static int64_t count_of(const lpattn_tensor *cu, int64_t n, int64_t i) {
  return cu ? lp_cu_at(cu, i + 1) - lp_cu_at(cu, i) : n;
}

/* Host checks of ids and lengths. n: tokens appended to every sequence (0
 * for decode), or with cu (a ragged append) each sequence's count. */
static lpattn_status check_host_batch(const lpattn_kv_pool *pool, const lpattn_kv_batch *b,
                                      int append, int64_t n, const lpattn_tensor *cu, int64_t Sq) {
  const int64_t S = b->num_seqs, T = pool->p.page_size, width = b->page_table.shape[3];
  const int32_t npages = pool->p.num_pages;
  lp_kv_layout L;
  lp_kv_layout_init(&L, &pool->p);
  /* owner[page]: the sequence that writes it in this append, or -1. */
  int32_t *mark = malloc(sizeof(int32_t) * (size_t)(npages > pool->p.num_slots ? npages : pool->p.num_slots));
  int32_t *owner = append ? malloc(sizeof(int32_t) * (size_t)npages) : NULL;
  if (!mark || (append && !owner)) {
    free(mark), free(owner);
    return lp_fail(LPATTN_ERR_OUT_OF_MEMORY, "out of host memory checking the batch");
  }
  lpattn_status st = LPATTN_OK;
  for (int32_t i = 0; i < pool->p.num_slots; i++) mark[i] = -1;
  for (int64_t i = 0; i < S && st == LPATTN_OK; i++) {
    const int32_t slot = id_at(&b->slots, i), len = id_at(&b->lengths, i);
    const int64_t ni = count_of(cu, n, i);
    if (slot < 0 || slot >= pool->p.num_slots) {
      st = lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "batch.slots[%lld] = %d, expected 0..%d",
                   (long long)i, (int)slot, (int)pool->p.num_slots - 1);
    } else if (mark[slot] >= 0) {
      st = lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "batch.slots[%lld] = %d repeats batch.slots[%d]",
                   (long long)i, (int)slot, (int)mark[slot]);
    } else if (len < 0 || len > b->max_length) {
      st = lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "batch.lengths[%lld] = %d, expected 0..max_length = %lld",
                   (long long)i, (int)len, (long long)b->max_length);
    } else if (!append && len < Sq) {
      st = lp_fail(LPATTN_ERR_BAD_SHAPE, "batch.lengths[%lld] = %d is less than q.shape[2] = %lld",
                   (long long)i, (int)len, (long long)Sq);
    } else {
      const int64_t have = lp_slot_len(pool->mem + lp_kv_slot_off(&L, slot));
      if (append ? (len != 0 && len != have) : len != have)
        st = lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "batch.lengths[%lld] = %d but slot %d holds %lld tokens%s",
                     (long long)i, (int)len, (int)slot, (long long)have, append ? " (or 0 to restart it)" : "");
      else if (lp_tile_count(len, T) > width)
        st = lp_fail(LPATTN_ERR_BAD_PAGE, "batch.page_table has %lld columns, sequence %lld needs %lld pages",
                     (long long)width, (long long)i, (long long)lp_tile_count(len, T));
      else if (append && lp_tile_count(len + ni, T) > width)
        st = lp_fail(LPATTN_ERR_CACHE_FULL, "sequence %lld: %d + %lld tokens need %lld pages, page_table has %lld columns",
                     (long long)i, (int)len, (long long)ni, (long long)lp_tile_count(len + ni, T), (long long)width);
    }
    if (st == LPATTN_OK && L.fp8s) st = lp_kv_check_descales(pool, &L, i, slot);
    mark[slot < 0 || slot >= pool->p.num_slots ? 0 : slot] = (int32_t)i;
  }
  /* Page ids of each table: in range, no id twice. */
  for (int32_t p = 0; p < npages; p++) mark[p] = -1;
  for (int64_t i = 0; i < S && st == LPATTN_OK; i++) {
    const int32_t *row = (const int32_t *)b->page_table.data + i * b->page_table.stride[2];
    const int64_t need = lp_tile_count(id_at(&b->lengths, i) + count_of(cu, n, i), T);
    for (int64_t j = 0; j < need && st == LPATTN_OK; j++) {
      const int32_t p = row[j * b->page_table.stride[3]];
      if (p < 0 || p >= npages)
        st = lp_fail(LPATTN_ERR_BAD_PAGE, "batch.page_table[%lld][%lld] = %d, expected 0..%d",
                     (long long)i, (long long)j, (int)p, (int)npages - 1);
      else if (mark[p] == (int32_t)i)
        st = lp_fail(LPATTN_ERR_BAD_PAGE, "batch.page_table[%lld][%lld] = %d appears twice in the row",
                     (long long)i, (long long)j, (int)p);
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
      const int64_t len = id_at(&b->lengths, i), end = len + count_of(cu, n, i);
      if (end == len) continue; /* a ragged count of 0: nothing written */
      const int64_t j0 = len / T; /* the tile of the first new token */
      const int64_t j1 = L.has_high_pages || L.fp8s ? (end - 1) / T : end / T - 1; /* per token */
      for (int64_t j = j0; j <= j1 && st == LPATTN_OK; j++) {
        const int32_t p = row[j * b->page_table.stride[3]];
        if (owner[p] >= 0 && owner[p] != (int32_t)i)
          st = lp_fail(LPATTN_ERR_BAD_PAGE, "page %d is written by sequences %d and %lld of one append",
                       (int)p, (int)owner[p], (long long)i);
        owner[p] = (int32_t)i;
      }
    }
    for (int64_t i = 0; i < S && st == LPATTN_OK; i++) {
      const int32_t *row = (const int32_t *)b->page_table.data + i * b->page_table.stride[2];
      const int64_t need = lp_tile_count(id_at(&b->lengths, i) + count_of(cu, n, i), T);
      for (int64_t j = 0; j < need && st == LPATTN_OK; j++) {
        const int32_t p = row[j * b->page_table.stride[3]];
        if (owner[p] >= 0 && owner[p] != (int32_t)i)
          st = lp_fail(LPATTN_ERR_BAD_PAGE, "page %d is written by sequence %d and read by sequence %lld",
                       (int)p, (int)owner[p], (long long)i);
      }
    }
  }
  free(mark), free(owner);
  return st;
}

static lpattn_status take_batch(const lpattn_kv_batch *in, lpattn_kv_batch *b) {
  if (!in) return lp_fail(LPATTN_ERR_NULL_POINTER, "batch is NULL");
  lpattn_kv_batch_init(b);
  LP_TRY_ARG("batch", lp_take_params(b, sizeof *b, in));
  if (b->num_seqs < 1) return lp_fail(LPATTN_ERR_BAD_SHAPE, "batch.num_seqs = %d, expected >= 1", b->num_seqs);
  LP_TRY(check_ids("batch.slots", &b->slots, 1, 1, 1, b->num_seqs));
  LP_TRY(check_ids("batch.lengths", &b->lengths, 1, 1, 1, b->num_seqs));
  const lpattn_tensor *pt = &b->page_table;
  LP_TRY(check_ids("batch.page_table", pt, 1, 1, b->num_seqs, pt->shape[3]));
  if (b->max_length < 0 || b->max_length > INT32_MAX)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "batch.max_length = %lld, expected 0..2^31 - 1",
                   (long long)b->max_length);
  return LPATTN_OK;
}

static lpattn_status check_pool(const lpattn_ctx *ctx, const lpattn_kv_pool *pool) {
  if (pool->ctx != ctx)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "pool belongs to another context%s",
                   pool->ctx ? "" : " (its context was freed)");
  return LPATTN_OK;
}

lpattn_status lpattn_kv_append(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                               const lpattn_tensor *k, const lpattn_tensor *v,
                               const lpattn_tensor *q) {
  lp_err_clear();
  lpattn_kv_batch b;
  int64_t n;
  LP_TRY(lp_kv_append_check(ctx, pool, batch, k, v, q, NULL, &b, &n));
  const lpattn_kv_append_call call = {&b, n, k, v, q, 0};
  return lp_err_backend(ctx->vt->kv_append(ctx, pool, &call), ctx, "kv_append");
}

lpattn_status lp_kv_append_check(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                                 const lpattn_tensor *k, const lpattn_tensor *v,
                                 const lpattn_tensor *q, const lpattn_tensor *cu,
                                 lpattn_kv_batch *bp, int64_t *np) {
  if (!ctx || !pool || !batch || !k || !v)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !pool ? "pool" : !batch ? "batch" : !k ? "k" : "v");
  LP_TRY(check_pool(ctx, pool));
  lpattn_kv_batch b;
  LP_TRY(take_batch(batch, &b));
  b.kv_start.data = b.q_start.data = NULL; /* decode only: the readers never see them here */
  LP_TRY_ARG("k", lp_check_view(k, 0));
  LP_TRY_ARG("v", lp_check_view(v, 0));
  if (q) LP_TRY_ARG("q", lp_check_view(q, 0));
  if (!is_float_io(k->dtype) || !is_float_io(v->dtype) || (q && !is_float_io(q->dtype)))
    return lp_fail(LPATTN_ERR_BAD_DTYPE, "k, v, q dtypes %s, %s, %s: expected F32, F16 or BF16",
                   lp_dtype_name(k->dtype), lp_dtype_name(v->dtype), q ? lp_dtype_name(q->dtype) : "(none)");
  const lpattn_kv_pool_params *pp = &pool->p;
  const int64_t n = k->shape[2], B = cu ? 1 : b.num_seqs; /* ragged: packed rows, B = 1 */
  if (cu) LP_TRY(lp_check_cu_seqlens("cu_seqlens", cu, (int64_t)b.num_seqs + 1, n));
  const lpattn_tensor *bad = !shape_is(k, B, pp->num_kv_heads, n, pp->head_dim) ? k
                             : !shape_is(v, B, pp->num_kv_heads, n, pp->head_dim_v) ? v
                             : (q && !shape_is(q, B, pp->num_q_heads, n, pp->head_dim)) ? q : NULL;
  if (bad)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "%s.shape = {%lld, %lld, %lld, %lld}, expected {%s = %lld, "
                   "%s = %d, %s = %lld, %s = %d}", bad == k ? "k" : bad == v ? "v" : "q",
                   (long long)bad->shape[0], (long long)bad->shape[1], (long long)bad->shape[2],
                   (long long)bad->shape[3], cu ? "packed" : "num_seqs", (long long)B,
                   bad == q ? "num_q_heads" : "num_kv_heads",
                   bad == q ? pp->num_q_heads : pp->num_kv_heads, cu ? "total" : "n", (long long)n,
                   bad != k && bad == v ? "head_dim_v" : "head_dim",
                   bad != k && bad == v ? pp->head_dim_v : pp->head_dim);
  if (n > INT32_MAX) return lp_fail(LPATTN_ERR_SIZE_OVERFLOW, "k.shape[2] = %lld, at most 2^31 - 1", (long long)n);
  if (host(ctx)) LP_TRY(check_host_batch(pool, &b, 1, n, cu, 0));
  if (pp->check_finite) {
    LP_TRY_ARG("k", lp_scan_finite(k));
    LP_TRY_ARG("v", lp_scan_finite(v));
    if (q) LP_TRY_ARG("q", lp_scan_finite(q));
  }
  if (!ctx->vt->kv_append)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the %s backend has no paged append", lpattn_backend_name(ctx->kind));
  *bp = b, *np = n;
  return LPATTN_OK;
}

lpattn_status lpattn_kv_slot_copy(lpattn_ctx *ctx, lpattn_kv_pool *pool, int32_t src,
                                  int32_t dst) {
  lp_err_clear();
  if (!ctx || !pool) return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : "pool");
  LP_TRY(check_pool(ctx, pool));
  if (src < 0 || src >= pool->p.num_slots || dst < 0 || dst >= pool->p.num_slots)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "src = %d, dst = %d, expected slots 0..%d", (int)src,
                   (int)dst, (int)pool->p.num_slots - 1);
  if (!ctx->vt->slot_copy)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the %s backend has no slot copy", lpattn_backend_name(ctx->kind));
  return lp_err_backend(ctx->vt->slot_copy(ctx, pool, src, dst), ctx, "kv_slot_copy");
}

/* Sharded decode (lpattn.h lpattn_kv_batch kv_start/q_start): the tensors,
 * what the pool and backend support, and on host backends each sequence's
 * place (after check_host_batch: lengths are the slots'). */
static lpattn_status check_positions(const lpattn_ctx *ctx, const lpattn_kv_pool *pool,
                                     const lpattn_kv_batch *b, int64_t Sq) {
  const int have_kv = b->kv_start.data != NULL, have_q = b->q_start.data != NULL;
  if (!have_kv && !have_q) return LPATTN_OK;
  if (!have_kv || !have_q)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "batch.%s is given but batch.%s is not: both or neither",
                   have_kv ? "kv_start" : "q_start", have_kv ? "q_start" : "kv_start");
  LP_TRY(check_ids("batch.kv_start", &b->kv_start, 1, 1, 1, b->num_seqs));
  LP_TRY(check_ids("batch.q_start", &b->q_start, 1, 1, 1, b->num_seqs));
  const lpattn_kv_pool_params *pp = &pool->p;
  if (pp->precision == LPATTN_PREC_THRIFT || pp->pasa)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "batch.kv_start/q_start: sharded decode of a %s pool (its "
                   "%s needs the whole sequence's tiles)", pp->pasa ? "PASA" : "THRIFT",
                   pp->pasa ? "diagonal shift" : "top-k");
  if (!host(ctx)) return LPATTN_OK; /* device arrays: the kernel reads them (lpattn.h) */
  const int64_t T = pp->page_size;
  for (int64_t i = 0; i < b->num_seqs; i++) {
    const int64_t kv = id_at(&b->kv_start, i), qs = id_at(&b->q_start, i);
    const int64_t len = id_at(&b->lengths, i), end = kv + len;
    if (kv < 0 || qs < 0)
      return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "batch.kv_start[%lld] = %lld, q_start[%lld] = %lld: "
                     "expected >= 0", (long long)i, (long long)kv, (long long)i, (long long)qs);
    if (kv % T)
      return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "batch.kv_start[%lld] = %lld is not a multiple of "
                     "page_size = %lld", (long long)i, (long long)kv, (long long)T);
    if (end == qs + Sq) continue; /* the sequence's last shard */
    if (end > qs + Sq)
      return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "sequence %lld holds tokens [%lld, %lld) but its last "
                     "query is at %lld: a shard holds no key after the last query", (long long)i,
                     (long long)kv, (long long)end, (long long)(qs + Sq - 1));
    if (len % T || end > qs / T * T)
      return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "sequence %lld holds tokens [%lld, %lld), queries "
                     "[%lld, %lld): a shard other than the sequence's last (which ends at the last "
                     "query) holds whole pages that end at or before the first query's tile (%lld)",
                     (long long)i, (long long)kv, (long long)end, (long long)qs,
                     (long long)(qs + Sq), (long long)(qs / T * T));
  }
  return LPATTN_OK;
}

lpattn_status lpattn_paged_decode(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                  const lpattn_kv_batch *batch, const lpattn_tensor *q,
                                  const lpattn_tensor *out, const lpattn_attn_params *params,
                                  const lpattn_attn_aux *aux_in) {
  lp_err_clear();
  lpattn_kv_batch b;
  lpattn_attn_aux aux;
  lpattn_attn_problem pr;
  LP_TRY(lp_paged_decode_check(ctx, pool, batch, q, out, params, aux_in, 1, &b, &aux, &pr));
  return lp_err_backend(ctx->vt->paged_decode(ctx, pool, &b, &pr), ctx, "paged_decode");
}

lpattn_status lp_paged_decode_check(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                                    const lpattn_tensor *q, const lpattn_tensor *out,
                                    const lpattn_attn_params *params, const lpattn_attn_aux *aux_in,
                                    int values, lpattn_kv_batch *bp, lpattn_attn_aux *auxp,
                                    lpattn_attn_problem *prp) {
  if (!ctx || !pool || !batch || !q || !out)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !pool ? "pool" : !batch ? "batch" : !q ? "q" : "out");
  LP_TRY(check_pool(ctx, pool));
  lpattn_kv_batch b;
  LP_TRY(take_batch(batch, &b));
  *bp = b;
  LP_TRY_ARG("q", lp_check_view(q, 0));
  LP_TRY_ARG("out", lp_check_view(out, 1));
  if (!is_float_io(q->dtype) || !is_float_io(out->dtype))
    return lp_fail(LPATTN_ERR_BAD_DTYPE, "q.dtype = %s, out.dtype = %s: expected F32, F16 or BF16",
                   lp_dtype_name(q->dtype), lp_dtype_name(out->dtype));
  const lpattn_kv_pool_params *pp = &pool->p;
  const int64_t Sq = q->shape[2];
  const lpattn_tensor *bad = !shape_is(q, b.num_seqs, pp->num_q_heads, Sq, pp->head_dim) ? q
                             : !shape_is(out, b.num_seqs, pp->num_q_heads, Sq, pp->head_dim_v) ? out : NULL;
  if (bad)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "%s.shape = {%lld, %lld, %lld, %lld}, expected {num_seqs = %d, "
                   "num_q_heads = %d, Sq = %lld, %s = %d}", bad == q ? "q" : "out",
                   (long long)bad->shape[0], (long long)bad->shape[1], (long long)bad->shape[2],
                   (long long)bad->shape[3], b.num_seqs, pp->num_q_heads, (long long)Sq,
                   bad == q ? "head_dim" : "head_dim_v", bad == q ? pp->head_dim : pp->head_dim_v);
  if (Sq > pp->page_size)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "q.shape[2] = %lld, expected at most page_size = %d (more new "
                   "tokens: lpattn_paged_prefill appends and attends them)", (long long)Sq, pp->page_size);
  if (b.max_length < Sq)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "batch.max_length = %lld is less than q.shape[2] = %lld",
                   (long long)b.max_length, (long long)Sq);
  lpattn_attn_problem *pr = prp;
  int check_finite;
  LP_TRY(lp_resolve_decode(host(ctx), params, aux_in, pp, b.num_seqs, Sq, b.max_length, auxp, pr,
                           &check_finite));
  LP_TRY(lp_window_backend(ctx, pr, LP_WINDOW_DECODE));
  pr->q = q, pr->out = out;
  if (host(ctx) && values) LP_TRY(check_host_batch(pool, &b, 0, 0, NULL, Sq));
  if (values || !host(ctx)) LP_TRY(check_positions(ctx, pool, &b, Sq));
  if (check_finite && !host(ctx))
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.check_finite: only host backends scan inputs");
  if (check_finite && values) {
    LP_TRY_ARG("q", lp_scan_finite(q));
    lp_kv_layout L;
    lp_kv_layout_init(&L, pp);
    for (int64_t i = 0; i < b.num_seqs; i++)
      if (lp_slot_flags(pool->mem + lp_kv_slot_off(&L, id_at(&b.slots, i))) & LP_SLOT_NONFINITE)
        return lp_fail(LPATTN_ERR_NONFINITE, "sequence %lld (slot %d) holds a non-finite K/V/Q "
                       "(check_finite)", (long long)i, (int)id_at(&b.slots, i));
  }
  if (!ctx->vt->paged_decode)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the %s backend has no paged decode", lpattn_backend_name(ctx->kind));
  return LPATTN_OK;
}
