/* KV cache on the paged pool (kvcache.h), for every backend: host backends
 * keep the page tables, slots and lengths in host memory, device backends
 * (vtable ids_alloc) in theirs, and advance a length on the device after
 * each append (ids_add), so append and decode never wait for the host. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kvcache.h"
#include "tiles.h"

typedef struct {
  lpattn_kv_pool *pool;
  int32_t *table;  /* [num_seqs][ntile]: fixed page ids */
  int32_t *slots;  /* [num_seqs]: 0 .. num_seqs - 1 */
  int32_t *len32;  /* [num_seqs]: lengths for the batches */
  int64_t ntile;
  lpattn_ctx *dev; /* the arrays are in this device backend's memory */
} kv_impl;

static kv_impl *impl_of(const lpattn_kv_cache *c) { return (kv_impl *)c->impl; }

static void ids_free(kv_impl *m, int32_t *p) {
  if (m->dev && p) m->dev->vt->ids_free(m->dev, p);
  else free(p);
}

lpattn_kv_pool *lp_kv_cache_pool(const lpattn_kv_cache *c) { return impl_of(c)->pool; }

void lp_kv_free(lpattn_kv_cache *c) {
  if (!c) return;
  kv_impl *m = impl_of(c);
  if (m) {
    lpattn_kv_pool_free(m->pool);
    ids_free(m, m->table), ids_free(m, m->slots), ids_free(m, m->len32);
    free(m);
  }
  free(c->lengths);
  free(c);
}

lpattn_status lp_kv_create(lpattn_ctx *ctx, const lpattn_kv_cache_params *p,
                           lpattn_kv_cache **out) {
  const int64_t ntile = lp_tile_count(p->max_tokens, p->tile), S = p->num_seqs;
  if (p->max_tokens > INT32_MAX || ntile > INT32_MAX / S) return LPATTN_ERR_SIZE_OVERFLOW;
  lpattn_kv_cache *c = calloc(1, sizeof *c);
  kv_impl *m = calloc(1, sizeof *m);
  if (!c || !m) {
    free(c), free(m);
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  c->ctx = ctx, c->p = *p, c->impl = m;
  m->ntile = ntile;
  c->lengths = calloc((size_t)S, sizeof(int64_t));
  m->table = malloc(sizeof(int32_t) * (size_t)(S * ntile));
  m->slots = malloc(sizeof(int32_t) * (size_t)S);
  m->len32 = calloc((size_t)S, sizeof(int32_t));
  if (!c->lengths || !m->table || !m->slots || !m->len32) {
    lp_kv_free(c);
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  for (int64_t i = 0; i < S * ntile; i++) m->table[i] = (int32_t)i;
  for (int64_t s = 0; s < S; s++) m->slots[s] = (int32_t)s;
  if (!ctx->vt->host_memory() && ctx->vt->ids_alloc) { /* device backend: into its memory */
    int32_t *h[3] = {m->table, m->slots, m->len32}, *d[3] = {NULL, NULL, NULL};
    const size_t n[3] = {(size_t)(S * ntile), (size_t)S, (size_t)S};
    lpattn_status st = LPATTN_OK;
    for (int i = 0; i < 3 && st == LPATTN_OK; i++) st = ctx->vt->ids_alloc(ctx, h[i], n[i], &d[i]);
    if (st != LPATTN_OK) {
      for (int i = 0; i < 3; i++)
        if (d[i]) ctx->vt->ids_free(ctx, d[i]);
      lp_kv_free(c);
      return st;
    }
    for (int i = 0; i < 3; i++) free(h[i]);
    m->table = d[0], m->slots = d[1], m->len32 = d[2], m->dev = ctx;
  }
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = p->num_kv_heads, pp.num_q_heads = p->num_q_heads, pp.head_dim = p->head_dim;
  pp.page_size = p->tile, pp.high_dtype = p->high_dtype, pp.precision = p->precision;
  pp.thrift_low = p->thrift_low, pp.pasa = p->pasa, pp.pasa_beta = p->pasa_beta;
  pp.mx_scale_round_up = p->mx_scale_round_up;
  pp.num_pages = (int32_t)(S * ntile), pp.num_slots = (int32_t)S;
  lpattn_status st = lpattn_kv_pool_create(ctx, &pp, NULL, 0, &m->pool);
  if (st == LPATTN_ERR_BAD_DTYPE) st = LPATTN_ERR_UNSUPPORTED; /* a high dtype the backend's pool cannot hold */
  if (st != LPATTN_OK) {
    lp_kv_free(c);
    return st;
  }
  *out = c;
  return LPATTN_OK;
}

/* The batch of sequences [s0, s0 + n). */
static lpattn_kv_batch batch_of(const lpattn_kv_cache *c, int s0, int n) {
  const kv_impl *m = impl_of(c);
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = n;
  b.slots = lpattn_tensor_4d(m->slots + s0, LPATTN_I32, 1, 1, 1, n);
  b.lengths = lpattn_tensor_4d(m->len32 + s0, LPATTN_I32, 1, 1, 1, n);
  b.page_table = lpattn_tensor_4d(m->table + s0 * m->ntile, LPATTN_I32, 1, 1, n, m->ntile);
  b.max_length = 0;
  for (int i = s0; i < s0 + n; i++) b.max_length = c->lengths[i] > b.max_length ? c->lengths[i] : b.max_length;
  return b;
}

lpattn_status lp_kv_append(lpattn_ctx *ctx, lpattn_kv_cache *c, int seq, const lpattn_tensor *k,
                           const lpattn_tensor *v, const lpattn_tensor *q) {
  kv_impl *m = impl_of(c);
  const int64_t n = k->shape[2];
  if (n > c->p.max_tokens - c->lengths[seq]) return LPATTN_ERR_CACHE_FULL;
  lpattn_kv_batch b = batch_of(c, seq, 1);
  lpattn_status st = lpattn_kv_append(ctx, m->pool, &b, k, v, q);
  if (st != LPATTN_OK) return st;
  c->lengths[seq] += n;
  if (m->dev) return ctx->vt->ids_add(ctx, m->len32 + seq, (int32_t)n);
  m->len32[seq] = (int32_t)c->lengths[seq];
  return LPATTN_OK;
}

lpattn_status lp_kv_decode(lpattn_ctx *ctx, lpattn_kv_cache *c, const lpattn_attn_problem *pr) {
  lpattn_kv_batch b = batch_of(c, 0, c->p.num_seqs);
  return ctx->vt->paged_decode(ctx, impl_of(c)->pool, &b, pr);
}

void lp_kv_cache_seq(const lpattn_kv_cache *c, int seq, lp_kv_seq *s) {
  lpattn_kv_batch b = batch_of(c, seq, 1);
  lp_kv_seq_of(impl_of(c)->pool, &b, 0, s);
}

int lp_kv_read_low(const lpattn_kv_cache *c, int seq, int h, int64_t j, float *k, float *v) {
  lp_kv_seq s;
  lp_kv_cache_seq(c, seq, &s);
  return lp_kv_seq_read_low(&s, h, j, k, v);
}

lpattn_status lp_kv_cache_finite(const lpattn_kv_cache *c) {
  if (c->ctx->vt->cache_create != lp_kv_create || impl_of(c)->dev) return LPATTN_OK;
  for (int s = 0; s < c->p.num_seqs; s++) {
    lp_kv_seq q;
    lp_kv_cache_seq(c, s, &q);
    if (lp_slot_flags(q.slot) & LP_SLOT_NONFINITE)
      return lp_fail(LPATTN_ERR_NONFINITE, "sequence %d holds a non-finite K, V or Q appended "
                     "earlier (check_finite)", s);
  }
  return LPATTN_OK;
}
