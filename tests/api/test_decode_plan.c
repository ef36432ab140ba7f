/* Plans (lpattn.h "plans") on a host backend (argv[1]: ref or cpu): a decode
 * plan's run equals lpattn_paged_decode bitwise for every precision, follows
 * lengths written in place between runs, and refuses bad input with nothing
 * written; an attention plan's run equals lpattn_attention bitwise; plans
 * outlive their context safely. */
#include <stdint.h>
#include <string.h>

#include "lpattn.h"
#include "testutil.h"

enum { T = 64, H = 4, HKV = 2, D = 64, W = 4, NS = 2, N0 = 100, SQ = 2 };

static float kbuf[NS * HKV * N0 * D], vbuf[NS * HKV * N0 * D], qin[NS * H * N0 * D];
static float q[2][NS * H * SQ * D], o_plan[NS * H * SQ * D], o_ref[NS * H * SQ * D];
static float lse_plan[NS * H * SQ], lse_ref[NS * H * SQ];

static void fill(float *x, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((int32_t)(seed >> 8) - (1 << 23)) / (float)(1 << 23);
  }
}

typedef struct {
  int32_t slot[NS], len[NS], table[NS][W];
  lpattn_kv_batch b;
} batch_t;

static void set_batch(batch_t *bt, int64_t max_len) {
  lpattn_kv_batch_init(&bt->b);
  bt->b.num_seqs = NS;
  bt->b.slots = lpattn_tensor_4d(bt->slot, LPATTN_I32, 1, 1, 1, NS);
  bt->b.lengths = lpattn_tensor_4d(bt->len, LPATTN_I32, 1, 1, 1, NS);
  bt->b.page_table = lpattn_tensor_4d(bt->table, LPATTN_I32, 1, 1, NS, W);
  bt->b.max_length = max_len;
  for (int i = 0; i < NS; i++) {
    bt->slot[i] = i;
    for (int j = 0; j < W; j++) bt->table[i][j] = i * W + j;
  }
}

static lpattn_kv_pool *make_pool(lpattn_ctx *ctx, lpattn_precision prec, batch_t *bt) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = HKV, pp.num_q_heads = H, pp.head_dim = D, pp.page_size = T;
  pp.num_pages = NS * W, pp.num_slots = NS, pp.precision = prec, pp.high_dtype = LPATTN_F32;
  lpattn_kv_pool *pool = NULL;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool), LPATTN_OK);
  if (!pool) return NULL;
  set_batch(bt, N0);
  bt->len[0] = bt->len[1] = 0;
  lpattn_tensor k = lpattn_tensor_4d(kbuf, LPATTN_F32, NS, HKV, N0 - 3, D);
  lpattn_tensor v = lpattn_tensor_4d(vbuf, LPATTN_F32, NS, HKV, N0 - 3, D);
  lpattn_tensor qq = lpattn_tensor_4d(qin, LPATTN_F32, NS, H, N0 - 3, D);
  k.stride[1] = v.stride[1] = qq.stride[1] = (int64_t)N0 * D; /* rows of [NS][heads][N0][D] */
  k.stride[0] = v.stride[0] = (int64_t)HKV * N0 * D, qq.stride[0] = (int64_t)H * N0 * D;
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &bt->b, &k, &v, &qq), LPATTN_OK);
  bt->len[0] = bt->len[1] = N0 - 3;
  return pool;
}

/* Append one token per sequence (positions len[i]), lengths after it. */
static void step(lpattn_ctx *ctx, lpattn_kv_pool *pool, batch_t *bt, int t) {
  lpattn_tensor k = lpattn_tensor_4d(kbuf + t * D, LPATTN_F32, NS, HKV, 1, D);
  lpattn_tensor v = lpattn_tensor_4d(vbuf + t * D, LPATTN_F32, NS, HKV, 1, D);
  lpattn_tensor qq = lpattn_tensor_4d(qin + t * D, LPATTN_F32, NS, H, 1, D);
  k.stride[1] = v.stride[1] = (int64_t)N0 * D, k.stride[0] = v.stride[0] = (int64_t)HKV * N0 * D;
  qq.stride[1] = (int64_t)N0 * D, qq.stride[0] = (int64_t)H * N0 * D;
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &bt->b, &k, &v, &qq), LPATTN_OK);
  bt->len[0]++, bt->len[1]++;
}

static void runs(lpattn_ctx *ctx, lpattn_precision prec) {
  batch_t bt;
  lpattn_kv_pool *pool = make_pool(ctx, prec, &bt);
  if (!pool) return;
  const lpattn_tensor tq = lpattn_tensor_4d(q[0], LPATTN_F32, NS, H, SQ, D);
  lpattn_tensor to = lpattn_tensor_4d(o_plan, LPATTN_F32, NS, H, SQ, D);
  lpattn_attn_aux aux, aux_ref;
  lpattn_attn_aux_init(&aux), lpattn_attn_aux_init(&aux_ref);
  aux.lse = lpattn_tensor_4d(lse_plan, LPATTN_F32, NS, H, SQ, 1);
  aux_ref.lse = lpattn_tensor_4d(lse_ref, LPATTN_F32, NS, H, SQ, 1);
  lpattn_decode_plan *plan = NULL;
  CHECK_STATUS(lpattn_paged_decode_plan(ctx, pool, &bt.b, &tq, &to, NULL, &aux, &plan), LPATTN_OK);
  for (int t = N0 - 3; t < N0; t++) { /* a token appended, then the plan's run */
    step(ctx, pool, &bt, t);
    fill(q[t & 1], sizeof q[0] / sizeof(float), 7u + (uint32_t)t);
    CHECK_STATUS(lpattn_decode_plan_run(plan, q[t & 1], NULL), LPATTN_OK);
    lpattn_tensor tq2 = tq, tr = lpattn_tensor_4d(o_ref, LPATTN_F32, NS, H, SQ, D);
    tq2.data = q[t & 1];
    CHECK_STATUS(lpattn_paged_decode(ctx, pool, &bt.b, &tq2, &tr, NULL, &aux_ref), LPATTN_OK);
    CHECK(!memcmp(o_plan, o_ref, sizeof o_ref) && !memcmp(lse_plan, lse_ref, sizeof lse_ref),
          "precision %d, length %d: the plan's run differs from lpattn_paged_decode", prec, bt.len[0]);
  }
  /* bad input: nothing written */
  memset(o_plan, 0x5a, sizeof o_plan);
  bt.len[1] = N0 + 1; /* beyond the plan's max_length */
  CHECK_STATUS(lpattn_decode_plan_run(plan, NULL, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  bt.len[1] = N0 - 1; /* not the slot's length */
  CHECK_STATUS(lpattn_decode_plan_run(plan, NULL, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  bt.len[1] = N0;
  CHECK_STATUS(lpattn_decode_plan_run(plan, (const char *)q[0] + 2, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(lpattn_decode_plan_run(NULL, NULL, NULL), LPATTN_ERR_NULL_POINTER);
  for (size_t i = 0; i < sizeof o_plan; i++)
    if (((unsigned char *)o_plan)[i] != 0x5a) {
      CHECK(0, "precision %d: a refused run wrote out", prec);
      break;
    }
  CHECK_STATUS(lpattn_decode_plan_run(plan, NULL, NULL), LPATTN_OK);
  lpattn_decode_plan_free(plan);
  /* plan-time errors (the decode's checks), *plan NULL */
  plan = (lpattn_decode_plan *)&bt;
  lpattn_tensor bad = lpattn_tensor_4d(q[0], LPATTN_F32, NS, H, T + 1, D);
  CHECK_STATUS(lpattn_paged_decode_plan(ctx, pool, &bt.b, &bad, &to, NULL, NULL, &plan), LPATTN_ERR_BAD_SHAPE);
  CHECK(plan == NULL, "a failed plan call sets *plan to NULL");
  CHECK_STATUS(lpattn_paged_decode_plan(ctx, pool, &bt.b, &tq, &to, NULL, NULL, NULL), LPATTN_ERR_NULL_POINTER);
  CHECK_STATUS(lpattn_paged_decode_plan(NULL, pool, &bt.b, &tq, &to, NULL, NULL, &plan), LPATTN_ERR_NULL_POINTER);
  lpattn_kv_pool_free(pool);
}

/* A plan outlives its context: its run answers INVALID_ARGUMENT, free is safe. */
static void lifetime(int cpu) {
  lpattn_ctx *ctx = NULL;
  if (lpattn_create(cpu ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, NULL, &ctx) != LPATTN_OK) return;
  batch_t bt;
  lpattn_kv_pool *pool = make_pool(ctx, LPATTN_PREC_NVFP4, &bt);
  const lpattn_tensor tq = lpattn_tensor_4d(q[0], LPATTN_F32, NS, H, 1, D);
  const lpattn_tensor to = lpattn_tensor_4d(o_plan, LPATTN_F32, NS, H, 1, D);
  lpattn_decode_plan *plan = NULL;
  CHECK_STATUS(lpattn_paged_decode_plan(ctx, pool, &bt.b, &tq, &to, NULL, NULL, &plan), LPATTN_OK);
  CHECK_STATUS(lpattn_decode_plan_run(plan, NULL, NULL), LPATTN_OK);
  const lpattn_tensor kv = lpattn_tensor_4d(kbuf, LPATTN_F32, NS, HKV, 8, D);
  lpattn_attn_plan *ap = NULL;
  CHECK_STATUS(lpattn_attention_plan(ctx, &tq, &kv, &kv, &to, NULL, NULL, &ap), LPATTN_OK);
  lpattn_free(ctx);
  CHECK_STATUS(lpattn_decode_plan_run(plan, NULL, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(lpattn_attention_plan_run(ap, NULL, NULL, NULL, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_decode_plan_free(plan);
  lpattn_attention_plan_free(ap);
  lpattn_kv_pool_free(pool);
  lpattn_decode_plan_free(NULL);
}

/* lpattn_attention_plan: runs on new q/k/v contents and pointers equal
 * lpattn_attention bitwise (causal, GQA, NVFP4 and HIGH, with LSE). */
static void attention_plan(lpattn_ctx *ctx) {
  enum { S = 96 };
  static float aq[2][H * S * D], ak[HKV * S * D], av[HKV * S * D], ao[H * S * D], ar[H * S * D];
  static float al[H * S], alr[H * S];
  const lpattn_precision precs[2] = {LPATTN_PREC_HIGH, LPATTN_PREC_NVFP4};
  for (int pi = 0; pi < 2; pi++) {
    lpattn_tensor q = lpattn_tensor_4d(aq[0], LPATTN_F32, 1, H, S, D);
    const lpattn_tensor k = lpattn_tensor_4d(ak, LPATTN_F32, 1, HKV, S, D);
    const lpattn_tensor v = lpattn_tensor_4d(av, LPATTN_F32, 1, HKV, S, D);
    const lpattn_tensor o = lpattn_tensor_4d(ao, LPATTN_F32, 1, H, S, D);
    const lpattn_tensor r = lpattn_tensor_4d(ar, LPATTN_F32, 1, H, S, D);
    lpattn_attn_params ap;
    lpattn_attn_params_init(&ap);
    ap.causal = 1, ap.precision = precs[pi];
    lpattn_attn_aux aux, auxr;
    lpattn_attn_aux_init(&aux), lpattn_attn_aux_init(&auxr);
    aux.lse = lpattn_tensor_4d(al, LPATTN_F32, 1, H, S, 1);
    auxr.lse = lpattn_tensor_4d(alr, LPATTN_F32, 1, H, S, 1);
    lpattn_attn_plan *plan = NULL;
    CHECK_STATUS(lpattn_attention_plan(ctx, &q, &k, &v, &o, &ap, &aux, &plan), LPATTN_OK);
    for (int t = 0; t < 3; t++) {
      fill(aq[t & 1], H * S * D, 40u + (uint32_t)t), fill(ak, HKV * S * D, 50u + (uint32_t)t);
      fill(av, HKV * S * D, 60u + (uint32_t)t);
      CHECK_STATUS(lpattn_attention_plan_run(plan, aq[t & 1], NULL, NULL, NULL), LPATTN_OK);
      q.data = aq[t & 1];
      CHECK_STATUS(lpattn_attention(ctx, &q, &k, &v, &r, &ap, &auxr), LPATTN_OK);
      CHECK(!memcmp(ao, ar, sizeof ar) && !memcmp(al, alr, sizeof alr),
            "precision %d, run %d: the attention plan differs from lpattn_attention", precs[pi], t);
    }
    CHECK_STATUS(lpattn_attention_plan_run(plan, NULL, (const char *)ak + 4, NULL, NULL),
                 LPATTN_ERR_INVALID_ARGUMENT);
    lpattn_attention_plan_free(plan);
  }
  lpattn_attn_plan *plan = (lpattn_attn_plan *)ctx;
  lpattn_tensor q = lpattn_tensor_4d(aq[0], LPATTN_F32, 1, H + 1, S, D);
  const lpattn_tensor k = lpattn_tensor_4d(ak, LPATTN_F32, 1, HKV, S, D);
  const lpattn_tensor o = lpattn_tensor_4d(ao, LPATTN_F32, 1, H + 1, S, D);
  CHECK_STATUS(lpattn_attention_plan(ctx, &q, &k, &k, &o, NULL, NULL, &plan), LPATTN_ERR_BAD_GQA);
  CHECK(plan == NULL, "a failed plan call sets *plan to NULL");
  CHECK_STATUS(lpattn_attention_plan_run(NULL, NULL, NULL, NULL, NULL), LPATTN_ERR_NULL_POINTER);
  lpattn_attention_plan_free(NULL);
}

int main(int argc, char **argv) {
  const int cpu = argc > 1 && !strcmp(argv[1], "cpu");
  lpattn_ctx *ctx = NULL;
  if (lpattn_create(cpu ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, NULL, &ctx) != LPATTN_OK)
    return test_skip("backend not available");
  fill(kbuf, sizeof kbuf / sizeof(float), 1), fill(vbuf, sizeof vbuf / sizeof(float), 2);
  fill(qin, sizeof qin / sizeof(float), 3);
  const lpattn_precision precs[] = {LPATTN_PREC_HIGH, LPATTN_PREC_FP8, LPATTN_PREC_NVFP4,
                                    LPATTN_PREC_MXFP4, LPATTN_PREC_THRIFT};
  for (size_t i = 0; i < sizeof precs / sizeof precs[0]; i++) runs(ctx, precs[i]);
  attention_plan(ctx);
  lpattn_free(ctx);
  lifetime(cpu);
  return test_finish();
}
