/* The paged KV pool API on the ref backend: sizes, bad input (each a clear
 * status, and nothing written: the caller-owned pool memory and the outputs
 * stay byte for byte the same), non-finite input, object lifetime. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lpattn.h"
#include "testutil.h"

enum { T = 32, H = 4, HKV = 2, D = 64, W = 4 };

static lpattn_kv_pool_params pool_params(int pages, int slots) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = HKV, pp.num_q_heads = H, pp.head_dim = D, pp.page_size = T;
  pp.num_pages = pages, pp.num_slots = slots;
  return pp;
}

static void sizes(void) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  CHECK(pp.page_size == 64 && pp.high_dtype == LPATTN_F16 && pp.precision == LPATTN_PREC_NVFP4 &&
            pp.thrift_low == LPATTN_FMT_NVFP4,
        "pool defaults");
  pp.num_kv_heads = 8, pp.num_q_heads = 8, pp.head_dim = 128, pp.num_pages = 1;
  /* SPEC 9: completed tiles only quantized. Bytes per token per kv head. */
  const lpattn_precision prec[3] = {LPATTN_PREC_NVFP4, LPATTN_PREC_MXFP4, LPATTN_PREC_FP8};
  const double limit[3] = {160, 136, 268};
  for (int i = 0; i < 3; i++) {
    size_t page = 0;
    pp.precision = prec[i];
    CHECK_STATUS(lpattn_kv_pool_size(&pp, &page, NULL, NULL), LPATTN_OK);
    const double per = (double)page / (64.0 * 8);
    printf("page of precision %d: %zu bytes, %.1f per token per kv head\n", prec[i], page, per);
    CHECK(per <= limit[i], "precision %d: %.1f bytes per token per head > %.0f", prec[i], per, limit[i]);
  }
  CHECK_STATUS(lpattn_kv_pool_size(NULL, NULL, NULL, NULL), LPATTN_ERR_NULL_POINTER);
  lpattn_kv_pool_params bad = pp;
  bad.head_dim = 72; /* padded rows (SEMANTICS "Head dimensions") */
  CHECK_STATUS(lpattn_kv_pool_size(&bad, NULL, NULL, NULL), LPATTN_OK);
  bad.head_dim = 577;
  CHECK_STATUS(lpattn_kv_pool_size(&bad, NULL, NULL, NULL), LPATTN_ERR_BAD_HEAD_DIM);
  bad.head_dim = 64, bad.head_dim_v = 4;
  CHECK_STATUS(lpattn_kv_pool_size(&bad, NULL, NULL, NULL), LPATTN_ERR_BAD_HEAD_DIM);
  bad = pp, bad.num_q_heads = 16, bad.num_kv_heads = 8;
  CHECK_STATUS(lpattn_kv_pool_size(&bad, NULL, NULL, NULL), LPATTN_OK);
  bad.num_q_heads = 9;
  CHECK_STATUS(lpattn_kv_pool_size(&bad, NULL, NULL, NULL), LPATTN_ERR_BAD_GQA);
  bad = pp, bad.page_size = 48;
  CHECK_STATUS(lpattn_kv_pool_size(&bad, NULL, NULL, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  bad = pp, bad.struct_size = sizeof bad + 8;
  CHECK_STATUS(lpattn_kv_pool_size(&bad, NULL, NULL, NULL), LPATTN_ERR_PARAMS_SIZE);
  bad = pp, bad.high_dtype = LPATTN_E4M3;
  CHECK_STATUS(lpattn_kv_pool_size(&bad, NULL, NULL, NULL), LPATTN_ERR_BAD_DTYPE);
}

/* One call's sequences: slots, lengths, page tables [n][W]. */
typedef struct {
  int32_t slot[2], len[2], table[2][W];
  lpattn_kv_batch b;
} batch_t;

static void set_batch(batch_t *bt, int n, int64_t max_len) {
  lpattn_kv_batch_init(&bt->b);
  bt->b.num_seqs = n;
  bt->b.slots = lpattn_tensor_4d(bt->slot, LPATTN_I32, 1, 1, 1, n);
  bt->b.lengths = lpattn_tensor_4d(bt->len, LPATTN_I32, 1, 1, 1, n);
  bt->b.page_table = lpattn_tensor_4d(bt->table, LPATTN_I32, 1, 1, n, W);
  bt->b.max_length = max_len;
}

static float kbuf[2 * HKV * 64 * D], vbuf[2 * HKV * 64 * D], qbuf[2 * H * 64 * D];
static float obuf[2 * H * T * D];

static void bad_input(lpattn_ctx *ctx) {
  lpattn_kv_pool_params pp = pool_params(8, 2);
  size_t bytes = 0;
  CHECK_STATUS(lpattn_kv_pool_size(&pp, NULL, NULL, &bytes), LPATTN_OK);
  uint8_t *mem = aligned_alloc(256, bytes + 256), *snap = malloc(bytes);
  lpattn_kv_pool *pool = NULL;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, mem, bytes - 1, &pool), LPATTN_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, mem + 16, bytes, &pool), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_kv_pool_params zero = pp;
  zero.num_pages = 0;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &zero, mem, bytes, &pool), LPATTN_ERR_BAD_SHAPE);
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, mem, bytes, &pool), LPATTN_OK);
  if (!pool) return;
  CHECK(lpattn_kv_pool_bytes(pool) == bytes, "pool bytes %zu, want %zu", lpattn_kv_pool_bytes(pool), bytes);
  memset(mem, 0, bytes); /* caller memory: the first append (length 0) resets its slot */
  for (int i = 0; i < 2 * HKV * 64 * D; i++) kbuf[i] = sinf((float)i), vbuf[i] = cosf((float)i);
  for (int i = 0; i < 2 * H * 64 * D; i++) qbuf[i] = sinf(0.5f * (float)i);

  /* Sequence 0: slot 0, pages {0, 1, 2, 3}, 40 tokens (one page completed). */
  batch_t bt = {{0, 1}, {0, 0}, {{0, 1, 2, 3}, {4, 5, 6, 7}}, {0}};
  set_batch(&bt, 1, 64);
  lpattn_tensor k = lpattn_tensor_4d(kbuf, LPATTN_F32, 1, HKV, 40, D);
  lpattn_tensor v = lpattn_tensor_4d(vbuf, LPATTN_F32, 1, HKV, 40, D);
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &bt.b, &k, &v, NULL), LPATTN_OK);
  memcpy(snap, mem, bytes);
#define UNCHANGED(what) CHECK(!memcmp(snap, mem, bytes), "%s wrote into the pool", what)

  /* Append 30 more tokens to sequence 0 (reaches page 2), in bad variants. */
  lpattn_tensor k30 = lpattn_tensor_4d(kbuf, LPATTN_F32, 1, HKV, 30, D);
  lpattn_tensor v30 = lpattn_tensor_4d(vbuf, LPATTN_F32, 1, HKV, 30, D);
  bt.len[0] = 40;
  batch_t b2;
#define APPEND_CASE(name, edit, want)                                                  \
  do {                                                                                 \
    b2 = bt;                                                                           \
    edit;                                                                              \
    set_batch(&b2, b2.b.num_seqs ? b2.b.num_seqs : 1, b2.b.max_length ? b2.b.max_length : 128); \
    CHECK_STATUS(lpattn_kv_append(ctx, pool, &b2.b, &k30, &v30, NULL), want);        \
    UNCHANGED(name);                                                                   \
  } while (0)
  bt.b.num_seqs = 1, bt.b.max_length = 128;
  APPEND_CASE("page out of range", b2.table[0][2] = 8, LPATTN_ERR_BAD_PAGE);
  APPEND_CASE("negative page", b2.table[0][1] = -1, LPATTN_ERR_BAD_PAGE);
  APPEND_CASE("page twice in a table", b2.table[0][2] = 0, LPATTN_ERR_BAD_PAGE);
  APPEND_CASE("slot out of range", b2.slot[0] = 2, LPATTN_ERR_INVALID_ARGUMENT);
  APPEND_CASE("length above max_length", b2.b.max_length = 39, LPATTN_ERR_INVALID_ARGUMENT);
  APPEND_CASE("length not the slot's", b2.len[0] = 39, LPATTN_ERR_INVALID_ARGUMENT);
  /* Table of width 1 holds less than the 40 tokens present. */
  b2 = bt;
  set_batch(&b2, 1, 128);
  b2.b.page_table.shape[3] = 1;
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b2.b, &k30, &v30, NULL), LPATTN_ERR_BAD_PAGE);
  UNCHANGED("table shorter than the length");
  b2.b.page_table.shape[3] = 2; /* 64 tokens: 40 + 30 do not fit */
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b2.b, &k30, &v30, NULL), LPATTN_ERR_CACHE_FULL);
  UNCHANGED("append past the table's capacity");
  b2.b.page_table.shape[3] = W;
  b2.b.slots.dtype = LPATTN_F32;
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b2.b, &k30, &v30, NULL), LPATTN_ERR_BAD_DTYPE);
  b2.b.slots.dtype = LPATTN_I32;
  lpattn_tensor kw = lpattn_tensor_4d(kbuf, LPATTN_F32, 1, HKV, 30, D / 2);
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b2.b, &kw, &v30, NULL), LPATTN_ERR_BAD_SHAPE);
  CHECK_STATUS(lpattn_kv_append(ctx, pool, NULL, &k30, &v30, NULL), LPATTN_ERR_NULL_POINTER);
  UNCHANGED("bad dtype or shape");

  /* Two sequences in one append: sequence 1 new (length 0). */
  lpattn_tensor k2 = lpattn_tensor_4d(kbuf, LPATTN_F32, 2, HKV, 30, D);
  lpattn_tensor v2 = lpattn_tensor_4d(vbuf, LPATTN_F32, 2, HKV, 30, D);
  b2 = bt;
  b2.len[1] = 0;
  set_batch(&b2, 2, 128);
  b2.slot[1] = 0;
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b2.b, &k2, &v2, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  b2.slot[1] = 1;
  b2.table[1][0] = 1; /* sequence 0 completes page 1 with this append: sequence 1 writes it too */
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b2.b, &k2, &v2, NULL), LPATTN_ERR_BAD_PAGE);
  b2.table[1][0] = 0; /* sequence 0's completed page 0: sequence 1 would overwrite it */
  b2.len[1] = 0;
  lpattn_tensor k40 = lpattn_tensor_4d(kbuf, LPATTN_F32, 2, HKV, 40, D);
  lpattn_tensor v40 = lpattn_tensor_4d(vbuf, LPATTN_F32, 2, HKV, 40, D);
  b2.table[0][2] = 2;
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b2.b, &k40, &v40, NULL), LPATTN_ERR_BAD_PAGE);
  UNCHANGED("pages shared where they must not be");

  /* Decode sequence 0 (40 tokens). */
  float sentinel[H * T * D];
  for (int i = 0; i < H * T * D; i++) sentinel[i] = obuf[i] = 12345.0f;
  lpattn_tensor q1 = lpattn_tensor_4d(qbuf, LPATTN_F32, 1, H, 1, D);
  lpattn_tensor o1 = lpattn_tensor_4d(obuf, LPATTN_F32, 1, H, 1, D);
#define DECODE_CASE(name, edit, q, want)                                     \
  do {                                                                       \
    b2 = bt;                                                                 \
    set_batch(&b2, 1, 40);                                                   \
    edit;                                                                    \
    CHECK_STATUS(lpattn_paged_decode(ctx, pool, &b2.b, q, &o1, NULL, NULL), want); \
    UNCHANGED(name);                                                         \
    CHECK(!memcmp(obuf, sentinel, sizeof sentinel), "%s wrote the output", name); \
  } while (0)
  DECODE_CASE("decode: page out of range", b2.table[0][1] = 99, &q1, LPATTN_ERR_BAD_PAGE);
  DECODE_CASE("decode: page twice", b2.table[0][1] = 0, &q1, LPATTN_ERR_BAD_PAGE);
  DECODE_CASE("decode: table short", b2.b.page_table.shape[3] = 1, &q1, LPATTN_ERR_BAD_PAGE);
  DECODE_CASE("decode: length > max", b2.b.max_length = 39, &q1, LPATTN_ERR_INVALID_ARGUMENT);
  DECODE_CASE("decode: length not the slot's", b2.len[0] = 39, &q1, LPATTN_ERR_INVALID_ARGUMENT);
  DECODE_CASE("decode: slot out of range", b2.slot[0] = -1, &q1, LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_tensor q33 = lpattn_tensor_4d(qbuf, LPATTN_F32, 1, H, T + 1, D);
  DECODE_CASE("decode: Sq > page_size", (void)0, &q33, LPATTN_ERR_BAD_SHAPE);
  lpattn_tensor qd = lpattn_tensor_4d(qbuf, LPATTN_F32, 1, H, 1, D / 2);
  DECODE_CASE("decode: wrong head dim", (void)0, &qd, LPATTN_ERR_BAD_SHAPE);
  lpattn_tensor qi = q1;
  qi.dtype = LPATTN_I32;
  DECODE_CASE("decode: q dtype", (void)0, &qi, LPATTN_ERR_BAD_DTYPE);
  CHECK_STATUS(lpattn_kv_slot_copy(ctx, pool, 0, 2), LPATTN_ERR_INVALID_ARGUMENT);
  UNCHANGED("slot copy out of range");
  b2 = bt;
  set_batch(&b2, 1, 40);
  CHECK_STATUS(lpattn_paged_decode(ctx, pool, &b2.b, &q1, &o1, NULL, NULL), LPATTN_OK);
  lpattn_ctx *other = NULL;
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, &other), LPATTN_OK);
  CHECK_STATUS(lpattn_paged_decode(other, pool, &b2.b, &q1, &o1, NULL, NULL),
               LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_free(other);
  lpattn_kv_pool_free(pool);
  free(mem), free(snap);
}

/* Issue 11 E: non-finite K/V/Q are rejected by append with check_finite, and
 * otherwise recorded, so decode with check_finite says NONFINITE. */
static void nonfinite(lpattn_ctx *ctx) {
  lpattn_kv_pool_params pp = pool_params(4, 1);
  pp.check_finite = 1;
  lpattn_kv_pool *pool = NULL;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool), LPATTN_OK);
  batch_t bt = {{0, 0}, {0, 0}, {{0, 1, 2, 3}, {0}}, {0}};
  set_batch(&bt, 1, 128);
  for (int i = 0; i < HKV * 64 * D; i++) kbuf[i] = 0.25f, vbuf[i] = 0.5f;
  kbuf[D + 3] = NAN;
  lpattn_tensor k = lpattn_tensor_4d(kbuf, LPATTN_F32, 1, HKV, 40, D);
  lpattn_tensor v = lpattn_tensor_4d(vbuf, LPATTN_F32, 1, HKV, 40, D);
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &bt.b, &k, &v, NULL), LPATTN_ERR_NONFINITE);
  lpattn_kv_pool_free(pool);
  pp.check_finite = 0;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool), LPATTN_OK);
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &bt.b, &k, &v, NULL), LPATTN_OK);
  bt.len[0] = 40;
  set_batch(&bt, 1, 40);
  lpattn_tensor q1 = lpattn_tensor_4d(qbuf, LPATTN_F32, 1, H, 1, D);
  lpattn_tensor o1 = lpattn_tensor_4d(obuf, LPATTN_F32, 1, H, 1, D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  CHECK_STATUS(lpattn_paged_decode(ctx, pool, &bt.b, &q1, &o1, &p, NULL), LPATTN_OK);
  p.check_finite = 1;
  CHECK_STATUS(lpattn_paged_decode(ctx, pool, &bt.b, &q1, &o1, &p, NULL), LPATTN_ERR_NONFINITE);
  lpattn_kv_pool_free(pool);

  /* The same through the KV cache: a NaN key in an NVFP4 cache. */
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_kv_heads = HKV, cp.num_q_heads = H, cp.head_dim = D, cp.max_tokens = 128, cp.tile = T;
  lpattn_kv_cache *cache = NULL;
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &cp, &cache), LPATTN_OK);
  CHECK_STATUS(lpattn_kv_cache_append(ctx, cache, 0, &k, &v, NULL), LPATTN_OK);
  p.check_finite = 0;
  CHECK_STATUS(lpattn_decode(ctx, cache, &q1, &o1, &p, NULL), LPATTN_OK);
  p.check_finite = 1;
  CHECK_STATUS(lpattn_decode(ctx, cache, &q1, &o1, &p, NULL), LPATTN_ERR_NONFINITE);
  lpattn_kv_cache_free(cache);
}

/* A pool outlives its context safely (lpattn_free detaches it). */
static void lifetime(void) {
  lpattn_ctx *ctx = NULL;
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, &ctx), LPATTN_OK);
  lpattn_kv_pool_params pp = pool_params(4, 1);
  lpattn_kv_pool *a = NULL, *b = NULL;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &a), LPATTN_OK);
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &b), LPATTN_OK);
  lpattn_kv_pool_free(a);
  lpattn_free(ctx);
  lpattn_kv_pool_free(b);
  lpattn_kv_pool_free(NULL);
}

int main(void) {
  lpattn_ctx *ctx = NULL;
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, &ctx), LPATTN_OK);
  sizes();
  bad_input(ctx);
  nonfinite(ctx);
  lifetime();
  lpattn_free(ctx);
  return test_finish();
}
