/* lpattn_last_error(): the detail of each kind of validation failure names
 * the argument, what was expected and what was given; a success clears it.
 * (Every CHECK_STATUS of the other tests also asserts a failure's detail is
 * there.) */
#include <string.h>

#include "lpattn.h"
#include "testutil.h"

enum { B = 1, HQ = 4, HKV = 2, S = 64, D = 128 };
static float q[B * HQ * S * D], k[B * HKV * S * D], v[B * HKV * S * D], o[B * HQ * S * D];
static float lse[B * HQ * S];

#define EXPECT(expr, want, text)                                                        \
  do {                                                                                  \
    lpattn_status got_ = (expr);                                                        \
    CHECK(got_ == (want), "%s -> %s", #expr, lpattn_status_string(got_));              \
    CHECK(strstr(lpattn_last_error(), (text)) != NULL, "%s: detail \"%s\" lacks \"%s\"", \
          #expr, lpattn_last_error(), (text));                                          \
  } while (0)

static void attention(lpattn_ctx *ctx) {
  lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F32, B, HQ, S, D);
  lpattn_tensor tk = lpattn_tensor_4d(k, LPATTN_F32, B, HKV, S, D);
  lpattn_tensor tv = lpattn_tensor_4d(v, LPATTN_F32, B, HKV, S, D);
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, B, HQ, S, D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  lpattn_tensor k64 = lpattn_tensor_4d(k, LPATTN_F32, B, HKV, S, 64);
  EXPECT(lpattn_attention(ctx, &tq, &k64, &tv, &to, &p, NULL), LPATTN_ERR_BAD_SHAPE,
         "k.shape[3] = 64 but q.shape[3] = 128");
  EXPECT(lpattn_attention(ctx, NULL, &tk, &tv, &to, &p, NULL), LPATTN_ERR_NULL_POINTER, "q is NULL");
  lpattn_tensor bad = tk;
  bad.data = NULL;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &bad, &to, &p, NULL), LPATTN_ERR_NULL_POINTER,
         "v.data is NULL");
  bad = tq, bad.shape[2] = 0;
  EXPECT(lpattn_attention(ctx, &bad, &tk, &tv, &to, &p, NULL), LPATTN_ERR_BAD_SHAPE,
         "q.shape[2] = 0, expected > 0");
  bad = to, bad.stride[2] = 0;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &bad, &p, NULL), LPATTN_ERR_BAD_STRIDE,
         "out.stride[2] = 0 with shape[2] = 64: an output cannot broadcast");
  bad = to, bad.stride[2] = D / 2;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &bad, &p, NULL), LPATTN_ERR_BAD_STRIDE,
         "out.stride = {32768, 8192, 64, 1}");
  bad = tv, bad.dtype = LPATTN_F16;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &bad, &to, &p, NULL), LPATTN_ERR_BAD_DTYPE,
         "v.dtype = F16, expected F32");
  bad = tq, bad.dtype = LPATTN_E4M3;
  EXPECT(lpattn_attention(ctx, &bad, &tk, &tv, &to, &p, NULL), LPATTN_ERR_BAD_DTYPE,
         "q.dtype = E4M3, expected F32, F16 or BF16");
  lpattn_tensor q3 = lpattn_tensor_4d(q, LPATTN_F32, B, 3, S, D), o3 = lpattn_tensor_4d(o, LPATTN_F32, B, 3, S, D);
  EXPECT(lpattn_attention(ctx, &q3, &tk, &tv, &o3, &p, NULL), LPATTN_ERR_BAD_GQA,
         "q.shape[1] = 3 query heads is not a multiple of k.shape[1] = 2 KV heads");
  lpattn_tensor q4 = lpattn_tensor_4d(q, LPATTN_F32, B, HQ, S, 4);
  lpattn_tensor k4 = lpattn_tensor_4d(k, LPATTN_F32, B, HKV, S, 4);
  lpattn_tensor o4 = lpattn_tensor_4d(o, LPATTN_F32, B, HQ, S, 4);
  EXPECT(lpattn_attention(ctx, &q4, &k4, &k4, &o4, &p, NULL), LPATTN_ERR_BAD_HEAD_DIM,
         "q: head_dim = 4, expected an integer in [8, 256]");
  p.sm_scale = -1.0f;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_ERR_INVALID_ARGUMENT,
         "params.sm_scale = -1, expected 0 (1/sqrt(D)) or in (0, 16]");
  lpattn_attn_params_init(&p);
  p.block_k = 48;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_ERR_INVALID_ARGUMENT,
         "block_k = 48");
  lpattn_attn_params_init(&p);
  p.struct_size = sizeof p + 8;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_ERR_PARAMS_SIZE,
         "params: struct_size = ");
  lpattn_attn_params_init(&p);
  aux.lse = lpattn_tensor_4d(lse, LPATTN_F32, B, HQ, S, 2);
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, &aux), LPATTN_ERR_BAD_SHAPE,
         "aux.lse.shape = {1, 4, 64, 2}, expected {1, 4, 64, 1}");
  aux.lse = lpattn_tensor_4d(lse, LPATTN_F32, B, HQ, S, 1);
  aux.selection = lpattn_tensor_4d(lse, LPATTN_I32, B, HQ, 1, 1);
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, &aux), LPATTN_ERR_INVALID_ARGUMENT,
         "aux.selection is set but precision is not THRIFT");
  lpattn_tensor k2 = lpattn_tensor_4d(k, LPATTN_F32, 2, HKV, S / 2, D);
  EXPECT(lpattn_attention(ctx, &tq, &k2, &k2, &to, &p, NULL), LPATTN_ERR_BAD_SHAPE,
         "k.shape[0] = 2 but q.shape[0] = 1");
  bad = tq, bad.shape[0] = bad.shape[1] = (int64_t)1 << 40, bad.stride[0] = bad.stride[1] = 0;
  EXPECT(lpattn_attention(ctx, &bad, &tk, &tv, &to, &p, NULL), LPATTN_ERR_SIZE_OVERFLOW,
         "q.shape: element count overflows int64");
  /* 2^31 query rows: q broadcast, out never written (rejected first). */
  lpattn_tensor qbig = tq, obig = lpattn_tensor_4d(o, LPATTN_F32, 1, 1, (int64_t)1 << 31, D);
  qbig.shape[1] = 1, qbig.shape[2] = (int64_t)1 << 31, qbig.stride[2] = 0;
  lpattn_tensor k1 = lpattn_tensor_4d(k, LPATTN_F32, B, 1, S, D);
  EXPECT(lpattn_attention(ctx, &qbig, &k1, &k1, &obig, &p, NULL), LPATTN_ERR_SIZE_OVERFLOW,
         "q.shape[2] = 2147483648, k.shape[2] = 64: at most 2^31 - 1");
  q[5] = 1.0f / 0.0f;
  p.check_finite = 1;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_ERR_NONFINITE,
         "q[0, 0, 0, 5] is not finite");
  q[5] = 0.0f;
  CHECK_STATUS(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_OK);
  CHECK(lpattn_last_error()[0] == '\0', "a success clears the detail: \"%s\"", lpattn_last_error());
}

static void others(lpattn_ctx *ctx) {
  lpattn_ctx *c2 = NULL;
  EXPECT(lpattn_create((lpattn_backend)42, NULL, &c2), LPATTN_ERR_INVALID_ARGUMENT, "backend = 42");
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.num_threads = 5000;
  EXPECT(lpattn_create(LPATTN_BACKEND_REF, &cp, &c2), LPATTN_ERR_INVALID_ARGUMENT,
         "params.num_threads = 5000, expected 0..1024");
  if (!lpattn_backend_available(LPATTN_BACKEND_HIP))
    EXPECT(lpattn_create(LPATTN_BACKEND_HIP, NULL, &c2), LPATTN_ERR_UNSUPPORTED_HARDWARE, "hip");
  /* quantize / dequantize */
  const int64_t shp[4] = {1, 1, 4, 64};
  uint8_t codes[512], scales[64];
  float outer[16];
  lpattn_qtensor qt = {LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, {1, 1, 4, 64}, codes, scales, outer};
  lpattn_tensor x = lpattn_tensor_4d(q, LPATTN_F32, 1, 1, 4, 32);
  EXPECT(lpattn_quantize(ctx, &x, &qt, NULL), LPATTN_ERR_BAD_SHAPE,
         "x.shape = {1, 1, 4, 32}, expected {1, 1, 4, 64}");
  lpattn_quant_params qp;
  lpattn_quant_params_init(&qp);
  qp.format = LPATTN_FMT_MXFP4;
  x = lpattn_tensor_4d(q, LPATTN_F32, 1, 1, 4, 64);
  EXPECT(lpattn_quantize(ctx, &x, &qt, &qp), LPATTN_ERR_BAD_LAYOUT, "q has format 0");
  qt.scales = NULL;
  EXPECT(lpattn_dequantize(ctx, &qt, &x), LPATTN_ERR_NULL_POINTER, "q.scales is NULL");
  size_t cb;
  const int64_t odd[4] = {1, 1, 4, 24};
  EXPECT(lpattn_qtensor_sizes(LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, odd, &cb, NULL, NULL),
         LPATTN_ERR_BAD_HEAD_DIM, "shape[3] = 24 is not a multiple of the group size 16");
  (void)shp;
  /* merge */
  lpattn_tensor oa = lpattn_tensor_4d(o, LPATTN_F32, 1, 2, 8, 64);
  lpattn_tensor la = lpattn_tensor_4d(lse, LPATTN_F32, 1, 2, 8, 1);
  lpattn_tensor lb = lpattn_tensor_4d(lse, LPATTN_F32, 1, 2, 7, 1);
  EXPECT(lpattn_merge_states(ctx, &oa, &la, NULL, &oa, &lb, NULL, &oa, &la, NULL),
         LPATTN_ERR_BAD_SHAPE, "lse_b.shape = {1, 2, 7, 1}, expected {1, 2, 8, 1}");
  EXPECT(lpattn_merge_states(ctx, &oa, &la, &la, &oa, &la, NULL, &oa, &la, NULL),
         LPATTN_ERR_INVALID_ARGUMENT, "h_a, h_b, h: 1 of 3 given");
  /* KV cache */
  lpattn_kv_cache_params kp;
  lpattn_kv_cache_params_init(&kp);
  kp.num_kv_heads = 2, kp.num_q_heads = 3, kp.head_dim = 64, kp.max_tokens = 64;
  lpattn_kv_cache *cache = NULL;
  EXPECT(lpattn_kv_cache_create(ctx, &kp, &cache), LPATTN_ERR_BAD_GQA,
         "params.num_q_heads = 3 is not a multiple of num_kv_heads = 2");
  kp.num_q_heads = 2, kp.num_seqs = 0;
  EXPECT(lpattn_kv_cache_create(ctx, &kp, &cache), LPATTN_ERR_BAD_SHAPE, "num_seqs = 0");
  kp.num_seqs = 1, kp.precision = (lpattn_precision)7;
  EXPECT(lpattn_kv_cache_create(ctx, &kp, &cache), LPATTN_ERR_INVALID_ARGUMENT, "params.precision = 7");
  kp.precision = LPATTN_PREC_NVFP4, kp.pasa_beta = 2.0f;
  EXPECT(lpattn_kv_cache_create(ctx, &kp, &cache), LPATTN_ERR_INVALID_ARGUMENT, "params.pasa_beta = 2");
  kp.pasa_beta = 0.0f;
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &kp, &cache), LPATTN_OK);
  lpattn_tensor kc = lpattn_tensor_4d(k, LPATTN_F32, 1, 2, 4, 64);
  EXPECT(lpattn_kv_cache_append(ctx, cache, 0, &kc, NULL, NULL), LPATTN_ERR_NULL_POINTER, "v is NULL");
  CHECK_STATUS(lpattn_kv_cache_append(ctx, cache, 0, &kc, &kc, NULL), LPATTN_OK);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.selection = lpattn_tensor_4d(lse, LPATTN_I32, 1, 2, 1, 1);
  lpattn_tensor qd = lpattn_tensor_4d(q, LPATTN_F32, 1, 2, 1, 64), od = lpattn_tensor_4d(o, LPATTN_F32, 1, 2, 1, 64);
  EXPECT(lpattn_decode(ctx, cache, &qd, &od, NULL, &aux), LPATTN_ERR_INVALID_ARGUMENT,
         "aux.selection is set but precision is not THRIFT");
  lpattn_kv_cache_free(cache);
  /* streams */
  EXPECT(lpattn_set_stream(NULL, NULL), LPATTN_ERR_NULL_POINTER, "ctx is NULL");
  CHECK_STATUS(lpattn_set_stream(ctx, NULL), LPATTN_OK);
  CHECK(lpattn_context_stream(ctx) == NULL, "host context stream");
  /* quantized sizes that overflow */
  const int64_t huge[4] = {(int64_t)1 << 31, (int64_t)1 << 31, (int64_t)1 << 10, 64};
  EXPECT(lpattn_qtensor_sizes(LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, huge, &cb, NULL, NULL),
         LPATTN_ERR_SIZE_OVERFLOW, "shape: the element count overflows int64");
}

static void pool(lpattn_ctx *ctx) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = 2, pp.num_q_heads = 2, pp.head_dim = 64, pp.num_pages = 4, pp.num_slots = 2;
  pp.page_size = 48;
  lpattn_kv_pool *pl = NULL;
  EXPECT(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pl), LPATTN_ERR_INVALID_ARGUMENT,
         "params.page_size = 48, expected a multiple of 32 in [32, 256]");
  pp.page_size = 64;
  static float mem[1] __attribute__((aligned(256)));
  EXPECT(lpattn_kv_pool_create(ctx, &pp, mem, sizeof mem, &pl), LPATTN_ERR_INVALID_ARGUMENT,
         "bytes = 4, the pool needs");
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pl), LPATTN_OK);
  int32_t slots[2] = {0, 0}, lens[2] = {0, 0}, table[2][2] = {{0, 1}, {9, 3}};
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = 2;
  b.slots = lpattn_tensor_4d(slots, LPATTN_I32, 1, 1, 1, 2);
  b.lengths = lpattn_tensor_4d(lens, LPATTN_I32, 1, 1, 1, 2);
  b.page_table = lpattn_tensor_4d(table, LPATTN_I32, 1, 1, 2, 2);
  lpattn_tensor tk = lpattn_tensor_4d(k, LPATTN_F32, 2, 2, 8, 64);
  EXPECT(lpattn_kv_append(ctx, pl, &b, &tk, &tk, NULL), LPATTN_ERR_INVALID_ARGUMENT,
         "batch.slots[1] = 0 repeats batch.slots[0]");
  slots[1] = 1;
  EXPECT(lpattn_kv_append(ctx, pl, &b, &tk, &tk, NULL), LPATTN_ERR_BAD_PAGE,
         "batch.page_table[1][0] = 9, expected 0..3");
  table[1][0] = 2;
  b.lengths.dtype = LPATTN_F32;
  EXPECT(lpattn_kv_append(ctx, pl, &b, &tk, &tk, NULL), LPATTN_ERR_BAD_DTYPE,
         "batch.lengths.dtype = F32, expected I32");
  b.lengths.dtype = LPATTN_I32;
  lpattn_tensor k3 = lpattn_tensor_4d(k, LPATTN_F32, 2, 3, 8, 64);
  EXPECT(lpattn_kv_append(ctx, pl, &b, &k3, &k3, NULL), LPATTN_ERR_BAD_SHAPE,
         "k.shape = {2, 3, 8, 64}, expected {num_seqs = 2, num_kv_heads = 2, n = 8, head_dim = 64}");
  CHECK_STATUS(lpattn_kv_append(ctx, pl, &b, &tk, &tk, NULL), LPATTN_OK);
  lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F32, 2, 2, 1, 64), to = lpattn_tensor_4d(o, LPATTN_F32, 2, 2, 1, 64);
  b.max_length = 8;
  lens[0] = 8, lens[1] = 5;
  EXPECT(lpattn_paged_decode(ctx, pl, &b, &tq, &to, NULL, NULL), LPATTN_ERR_INVALID_ARGUMENT,
         "batch.lengths[1] = 5 but slot 1 holds 8 tokens");
  EXPECT(lpattn_kv_slot_copy(ctx, pl, 0, 7), LPATTN_ERR_INVALID_ARGUMENT,
         "src = 0, dst = 7, expected slots 0..1");
  EXPECT(lpattn_paged_decode(ctx, pl, &b, NULL, &to, NULL, NULL), LPATTN_ERR_NULL_POINTER, "q is NULL");
  b.page_table.shape[2] = 3;
  EXPECT(lpattn_paged_decode(ctx, pl, &b, &tq, &to, NULL, NULL), LPATTN_ERR_BAD_SHAPE,
         "batch.page_table.shape = {1, 1, 3, 2}, expected {1, 1, 2, 2}");
  b.page_table.shape[2] = 2;
  lpattn_kv_pool *none = NULL;
  EXPECT(lpattn_kv_pool_create(ctx, NULL, NULL, 0, &none), LPATTN_ERR_NULL_POINTER, "params is NULL");
  lpattn_kv_pool_free(pl);
}

int main(void) {
  lpattn_ctx *ctx;
  if (lpattn_create(LPATTN_BACKEND_REF, NULL, &ctx) != LPATTN_OK) return 1;
  attention(ctx);
  others(ctx);
  pool(ctx);
  lpattn_free(ctx);
  return test_finish();
}
