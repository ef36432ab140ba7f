/* Issue 28, the C items (ref backend; run under UBSan by the sanitizer build):
 *   7: the backward's overlap check with a size-1 dimension of stride
 *      INT64_MAX: dq and dk that share memory are BAD_STRIDE (the check's
 *      arithmetic overflowed int64 and let them through); disjoint ones pass.
 *   8: a failed lpattn_*_create sets *out to NULL (lpattn.h "Conventions"),
 *      whichever argument failed.
 * and: the backward's out is an input, so a broadcast (stride 0) view of it is
 *      taken, as for q, k, v (it was checked as an output: BAD_STRIDE). */
#include <stdint.h>
#include <string.h>

#include "lpattn.h"
#include "testutil.h"

enum { S = 16, D = 16, N = S * D };

static lpattn_tensor view(float *p, int64_t b, int64_t h, int64_t s, int64_t d) {
  return lpattn_tensor_4d(p, LPATTN_F32, b, h, s, d);
}

/* dq on buf + at_q, dk on buf + at_k, both [1, 1, S, D] contiguous but for
 * dimension big (extent 1) whose stride is INT64_MAX. */
static lpattn_status bwd_big(lpattn_ctx *ctx, float *buf, int64_t at_q, int64_t at_k, int big) {
  static float q[N], k[N], v[N], o[N], lse[S], dout[N], dv[N];
  for (int i = 0; i < N; i++) q[i] = k[i] = v[i] = dout[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
  lpattn_tensor tq = view(q, 1, 1, S, D), tk = view(k, 1, 1, S, D), tv = view(v, 1, 1, S, D);
  lpattn_tensor to = view(o, 1, 1, S, D), tl = view(lse, 1, 1, S, 1), td = view(dout, 1, 1, S, D);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = tl;
  lpattn_status st = lpattn_attention(ctx, &tq, &tk, &tv, &to, NULL, &aux);
  if (st != LPATTN_OK) return st;
  lpattn_attn_grads g;
  lpattn_attn_grads_init(&g);
  g.dq = view(buf + at_q, 1, 1, S, D), g.dk = view(buf + at_k, 1, 1, S, D), g.dv = view(dv, 1, 1, S, D);
  g.dq.stride[big] = g.dk.stride[big] = INT64_MAX;
  return lpattn_attention_backward(ctx, &tq, &tk, &tv, &to, &tl, &td, NULL, &g);
}

static void test_overlap_overflow(lpattn_ctx *ctx) {
  static float buf[3 * N];
  for (int big = 0; big < 2; big++) { /* B or H is the extent-1 dimension */
    /* dk two elements before dq, after it, on it: one shared element at least */
    CHECK_STATUS(bwd_big(ctx, buf, N, N - 2, big), LPATTN_ERR_BAD_STRIDE);
    CHECK_STATUS(bwd_big(ctx, buf, N, N + 2, big), LPATTN_ERR_BAD_STRIDE);
    CHECK_STATUS(bwd_big(ctx, buf, N, N, big), LPATTN_ERR_BAD_STRIDE);
    CHECK_STATUS(bwd_big(ctx, buf, N, N + N - 1, big), LPATTN_ERR_BAD_STRIDE);
    /* back to back, either order: disjoint, accepted */
    CHECK_STATUS(bwd_big(ctx, buf, N, 0, big), LPATTN_OK);
    CHECK_STATUS(bwd_big(ctx, buf, N, 2 * N, big), LPATTN_OK);
  }
}

static void test_broadcast_out(lpattn_ctx *ctx) {
  static float q[N], k[N], v[N], o[N], lse[S], dout[N], dq[N], dk[N], dv[N];
  for (int i = 0; i < N; i++) q[i] = k[i] = v[i] = dout[i] = (float)((i * 5) % 13) / 13.0f - 0.5f;
  lpattn_tensor tq = view(q, 1, 1, S, D), tk = view(k, 1, 1, S, D), tv = view(v, 1, 1, S, D);
  lpattn_tensor to = view(o, 1, 1, S, D), tl = view(lse, 1, 1, S, 1), td = view(dout, 1, 1, S, D);
  to.stride[2] = 0; /* every row of out is row 0 */
  lpattn_attn_grads g;
  lpattn_attn_grads_init(&g);
  g.dq = view(dq, 1, 1, S, D), g.dk = view(dk, 1, 1, S, D), g.dv = view(dv, 1, 1, S, D);
  CHECK_STATUS(lpattn_attention_backward(ctx, &tq, &tk, &tv, &to, &tl, &td, NULL, &g), LPATTN_OK);
}

static void test_create_out(void) {
  lpattn_ctx *ctx = NULL, *keep = NULL;
  void *const junk = (void *)&junk;
  /* lpattn_create */
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.num_threads = LPATTN_MAX_THREADS + 1;
  ctx = junk;
  CHECK(lpattn_create(LPATTN_BACKEND_REF, &cp, &ctx) != LPATTN_OK, "create with too many threads");
  CHECK(ctx == NULL, "lpattn_create failed but *out = %p", (void *)ctx);
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, &keep), LPATTN_OK);
  /* lpattn_kv_cache_create: a bad argument, a NULL context */
  lpattn_kv_cache_params kp;
  lpattn_kv_cache_params_init(&kp);
  kp.num_seqs = 0, kp.num_kv_heads = kp.num_q_heads = 1, kp.head_dim = 64, kp.max_tokens = 64;
  lpattn_kv_cache *cache = junk;
  CHECK_STATUS(lpattn_kv_cache_create(keep, &kp, &cache), LPATTN_ERR_BAD_SHAPE);
  CHECK(cache == NULL, "kv_cache_create (bad shape) failed but *out = %p", (void *)cache);
  cache = junk;
  CHECK_STATUS(lpattn_kv_cache_create(NULL, &kp, &cache), LPATTN_ERR_NULL_POINTER);
  CHECK(cache == NULL, "kv_cache_create (NULL ctx) failed but *out = %p", (void *)cache);
  cache = junk;
  CHECK_STATUS(lpattn_kv_cache_create(keep, NULL, &cache), LPATTN_ERR_NULL_POINTER);
  CHECK(cache == NULL, "kv_cache_create (NULL params) failed but *out = %p", (void *)cache);
  /* lpattn_kv_pool_create */
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = pp.num_q_heads = 1, pp.head_dim = 64, pp.num_pages = 0, pp.num_slots = 1;
  lpattn_kv_pool *pool = junk;
  CHECK_STATUS(lpattn_kv_pool_create(keep, &pp, NULL, 0, &pool), LPATTN_ERR_BAD_SHAPE);
  CHECK(pool == NULL, "kv_pool_create (bad shape) failed but *out = %p", (void *)pool);
  pool = junk;
  CHECK_STATUS(lpattn_kv_pool_create(NULL, &pp, NULL, 0, &pool), LPATTN_ERR_NULL_POINTER);
  CHECK(pool == NULL, "kv_pool_create (NULL ctx) failed but *out = %p", (void *)pool);
  pool = junk;
  CHECK_STATUS(lpattn_kv_pool_create(keep, NULL, NULL, 0, &pool), LPATTN_ERR_NULL_POINTER);
  CHECK(pool == NULL, "kv_pool_create (NULL params) failed but *out = %p", (void *)pool);
  /* and success still gives an object */
  pp.num_pages = 2;
  CHECK_STATUS(lpattn_kv_pool_create(keep, &pp, NULL, 0, &pool), LPATTN_OK);
  CHECK(pool != NULL && pool != junk, "kv_pool_create succeeded without an object");
  lpattn_kv_pool_free(pool);
  lpattn_free(keep);
}

int main(void) {
  lpattn_ctx *ctx = NULL;
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, &ctx), LPATTN_OK);
  if (ctx) test_overlap_overflow(ctx), test_broadcast_out(ctx);
  lpattn_free(ctx);
  test_create_out();
  return test_finish();
}
