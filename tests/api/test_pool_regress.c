/* Regressions of the paged KV pool found by the fuzz target (tests/fuzz,
 * fuzz_pool.c), on the ref and cpu backends. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "lpattn.h"
#include "testutil.h"

enum { T = 32, H = 4, HKV = 2, D = 64, LEN = 40, DMAX = 80 };

static float kbuf[HKV * LEN * DMAX], vbuf[HKV * LEN * DMAX], qbuf[H * DMAX], o1[H * D], o2[H * D];

static lpattn_kv_pool *make_pool_d(lpattn_ctx *ctx, lpattn_precision prec, int dh) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = HKV, pp.num_q_heads = H, pp.head_dim = dh, pp.page_size = T;
  pp.precision = prec, pp.num_pages = 4, pp.num_slots = 1;
  lpattn_kv_pool *pool = NULL;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool), LPATTN_OK);
  return pool;
}
static lpattn_kv_pool *make_pool(lpattn_ctx *ctx, lpattn_precision prec) { return make_pool_d(ctx, prec, D); }

static long max_rss_kb(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

/* max_length sizes the launch, but a host decode's scratch followed it: a
 * one-token decode with max_length = INT32_MAX took about 600 MB per thread
 * on cpu (score, kind and mode arrays for 67 M tiles, zero-filled), and on
 * ref and cpu THRIFT wrote its query rows into the slot before that
 * allocation, so a decode failing with OUT_OF_MEMORY had written the pool.
 * Now scratch follows the batch's own lengths; the result never depended on
 * max_length and still does not. */
static void max_length_scratch(lpattn_backend be, lpattn_precision prec) {
  lpattn_ctx *ctx = NULL;
  CHECK_STATUS(lpattn_create(be, NULL, &ctx), LPATTN_OK);
  if (!ctx) return;
  lpattn_kv_pool *pool = make_pool(ctx, prec);
  int32_t slot = 0, len = 0, table[2] = {3, 1};
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = 1;
  b.slots = lpattn_tensor_4d(&slot, LPATTN_I32, 1, 1, 1, 1);
  b.lengths = lpattn_tensor_4d(&len, LPATTN_I32, 1, 1, 1, 1);
  b.page_table = lpattn_tensor_4d(table, LPATTN_I32, 1, 1, 1, 2);
  b.max_length = 64;
  lpattn_tensor k = lpattn_tensor_4d(kbuf, LPATTN_F32, 1, HKV, LEN, D);
  lpattn_tensor v = lpattn_tensor_4d(vbuf, LPATTN_F32, 1, HKV, LEN, D);
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b, &k, &v, NULL), LPATTN_OK);
  len = LEN;
  lpattn_tensor q = lpattn_tensor_4d(qbuf, LPATTN_F32, 1, H, 1, D);
  lpattn_tensor out1 = lpattn_tensor_4d(o1, LPATTN_F32, 1, H, 1, D);
  lpattn_tensor out2 = lpattn_tensor_4d(o2, LPATTN_F32, 1, H, 1, D);
  b.max_length = LEN;
  CHECK_STATUS(lpattn_paged_decode(ctx, pool, &b, &q, &out1, NULL, NULL), LPATTN_OK);
  const long rss0 = max_rss_kb();
  b.max_length = INT32_MAX;
  CHECK_STATUS(lpattn_paged_decode(ctx, pool, &b, &q, &out2, NULL, NULL), LPATTN_OK);
  const long grew = max_rss_kb() - rss0;
  CHECK(grew < 128 * 1024, "backend %d precision %d: decode with max_length INT32_MAX took %ld KB",
        be, prec, grew);
  CHECK(!memcmp(o1, o2, sizeof o1), "backend %d: the result depends on max_length", be);
  lpattn_kv_pool_free(pool);
  lpattn_free(ctx);
}

/* A page table may be as wide as a view allows (one id broadcast with
 * stride 0): the capacity check computed width * page_size, a signed
 * overflow (UBSan) that wrapped to 0 for width 2^60, so a one-token append
 * into a new sequence failed with CACHE_FULL. */
static void wide_table(lpattn_backend be) {
  lpattn_ctx *ctx = NULL;
  CHECK_STATUS(lpattn_create(be, NULL, &ctx), LPATTN_OK);
  if (!ctx) return;
  lpattn_kv_pool *pool = make_pool(ctx, LPATTN_PREC_HIGH);
  int32_t slot = 0, len = 0, page = 2;
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = 1;
  b.slots = lpattn_tensor_4d(&slot, LPATTN_I32, 1, 1, 1, 1);
  b.lengths = lpattn_tensor_4d(&len, LPATTN_I32, 1, 1, 1, 1);
  b.page_table = lpattn_tensor_4d(&page, LPATTN_I32, 1, 1, 1, 1);
  b.page_table.shape[3] = (int64_t)1 << 60, b.page_table.stride[3] = 0;
  b.max_length = 1;
  lpattn_tensor k = lpattn_tensor_4d(kbuf, LPATTN_F32, 1, HKV, 1, D);
  lpattn_tensor v = lpattn_tensor_4d(vbuf, LPATTN_F32, 1, HKV, 1, D);
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b, &k, &v, NULL), LPATTN_OK);
  /* Page 2 in every column: a second page is the first one again. */
  len = 1;
  lpattn_tensor kt = lpattn_tensor_4d(kbuf, LPATTN_F32, 1, HKV, T, D);
  lpattn_tensor vt = lpattn_tensor_4d(vbuf, LPATTN_F32, 1, HKV, T, D);
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b, &kt, &vt, NULL), LPATTN_ERR_BAD_PAGE);
  lpattn_tensor q = lpattn_tensor_4d(qbuf, LPATTN_F32, 1, H, 1, D);
  lpattn_tensor out = lpattn_tensor_4d(o1, LPATTN_F32, 1, H, 1, D);
  CHECK_STATUS(lpattn_paged_decode(ctx, pool, &b, &q, &out, NULL, NULL), LPATTN_OK);
  lpattn_kv_pool_free(pool);
  lpattn_free(ctx);
}

/* FP4 pages with head_dim 16 mod 32 (48 here): the cpu decode works in
 * blocks of 2N elements (N floats a vector: 32 on AVX-512), and its FP4
 * order and dot products ran a whole block past such a row (heap overflow
 * under ASan, found by the fuzz corpus on an AVX-512 machine). Now the last
 * part block is decoded in scalar code; the result is ref's within P's
 * quantization. */
static void odd_head_dim(lpattn_precision prec, int dh) {
  float out[2][H * DMAX];
  for (int bi = 0; bi < 2; bi++) {
    lpattn_ctx *ctx = NULL;
    CHECK_STATUS(lpattn_create(bi ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, NULL, &ctx), LPATTN_OK);
    if (!ctx) return;
    lpattn_kv_pool *pool = make_pool_d(ctx, prec, dh);
    int32_t slot = 0, len = 0, table[2] = {2, 0};
    lpattn_kv_batch b;
    lpattn_kv_batch_init(&b);
    b.num_seqs = 1, b.max_length = LEN;
    b.slots = lpattn_tensor_4d(&slot, LPATTN_I32, 1, 1, 1, 1);
    b.lengths = lpattn_tensor_4d(&len, LPATTN_I32, 1, 1, 1, 1);
    b.page_table = lpattn_tensor_4d(table, LPATTN_I32, 1, 1, 1, 2);
    lpattn_tensor k = lpattn_tensor_4d(kbuf, LPATTN_F32, 1, HKV, LEN, dh);
    lpattn_tensor v = lpattn_tensor_4d(vbuf, LPATTN_F32, 1, HKV, LEN, dh);
    CHECK_STATUS(lpattn_kv_append(ctx, pool, &b, &k, &v, NULL), LPATTN_OK);
    len = LEN;
    lpattn_tensor q = lpattn_tensor_4d(qbuf, LPATTN_F32, 1, H, 1, dh);
    lpattn_tensor o = lpattn_tensor_4d(out[bi], LPATTN_F32, 1, H, 1, dh);
    CHECK_STATUS(lpattn_paged_decode(ctx, pool, &b, &q, &o, NULL, NULL), LPATTN_OK);
    lpattn_kv_pool_free(pool);
    lpattn_free(ctx);
  }
  double num = 0, den = 0;
  for (int i = 0; i < H * dh; i++) num += (out[1][i] - out[0][i]) * (out[1][i] - out[0][i]), den += out[0][i] * out[0][i];
  const double err = sqrt(num / den);
  CHECK(err < 2e-2, "head_dim %d precision %d: cpu decode vs ref rel L2 %g", dh, prec, err);
}

int main(void) {
  for (int i = 0; i < HKV * LEN * DMAX; i++) kbuf[i] = sinf((float)i), vbuf[i] = cosf(0.7f * (float)i);
  for (int i = 0; i < H * DMAX; i++) qbuf[i] = sinf(0.3f * (float)i);
  const lpattn_backend be[2] = {LPATTN_BACKEND_REF, LPATTN_BACKEND_CPU};
  for (int i = 0; i < 2; i++) {
    max_length_scratch(be[i], LPATTN_PREC_NVFP4);
    max_length_scratch(be[i], LPATTN_PREC_THRIFT);
    wide_table(be[i]);
  }
  const int dims[3] = {16, 48, 80};
  for (int i = 0; i < 3; i++) {
    odd_head_dim(LPATTN_PREC_NVFP4, dims[i]);
    odd_head_dim(LPATTN_PREC_THRIFT, dims[i]);
    odd_head_dim(LPATTN_PREC_FP8, dims[i]);
  }
  return test_finish();
}
