/* Bad input at every entry point gets its exact status and writes nothing. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lpattn.h"
#include "testutil.h"

enum { B = 1, HQ = 4, HKV = 2, SQ = 40, SKV = 72, D = 64 };

static float qbuf[B * HQ * SQ * D], kbuf[B * HKV * SKV * D], vbuf[B * HKV * SKV * D];
static float obuf[B * HQ * SQ * D], lbuf[B * HQ * SQ];

static void fill(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

/* Output buffers start as a sentinel; a rejected call must leave it. */
static int untouched(void) {
  for (size_t i = 0; i < sizeof obuf / sizeof obuf[0]; i++)
    if (obuf[i] != 123.0f) return 0;
  for (size_t i = 0; i < sizeof lbuf / sizeof lbuf[0]; i++)
    if (lbuf[i] != 123.0f) return 0;
  return 1;
}
static void poison(void) {
  for (size_t i = 0; i < sizeof obuf / sizeof obuf[0]; i++) obuf[i] = 123.0f;
  for (size_t i = 0; i < sizeof lbuf / sizeof lbuf[0]; i++) lbuf[i] = 123.0f;
}

static void test_version_and_status(void) {
  CHECK(lpattn_version_number() == LPATTN_VERSION_NUMBER, "runtime version");
  CHECK(strcmp(lpattn_version_string(), LPATTN_VERSION_STRING) == 0, "version string");
  for (int s = 0; s <= LPATTN_ERR_BAD_LAYOUT; s++)
    CHECK(strcmp(lpattn_status_string((lpattn_status)s), "unknown status") != 0, "status %d", s);
  CHECK(strcmp(lpattn_status_string((lpattn_status)999), "unknown status") == 0, "unknown");
  /* Stable numeric values are part of the ABI. */
  CHECK(LPATTN_ERR_NONFINITE == 12 && LPATTN_ERR_BAD_GQA == 7, "stable codes");
}

static void test_context(void) {
  lpattn_ctx *c = (lpattn_ctx *)1;
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, NULL), LPATTN_ERR_NULL_POINTER);
  CHECK_STATUS(lpattn_create((lpattn_backend)42, NULL, &c), LPATTN_ERR_INVALID_ARGUMENT);
  CHECK(c == NULL, "out cleared on failure");
  lpattn_context_params p;
  lpattn_context_params_init(&p);
  p.struct_size = sizeof p + 8;
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, &p, &c), LPATTN_ERR_PARAMS_SIZE);
  lpattn_context_params_init(&p);
  p.num_threads = -1;
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, &p, &c), LPATTN_ERR_INVALID_ARGUMENT);
  /* An older, smaller params struct is accepted. */
  lpattn_context_params_init(&p);
  p.struct_size = sizeof(size_t) + sizeof(int);
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, &p, &c), LPATTN_OK);
  CHECK(lpattn_context_backend(c) == LPATTN_BACKEND_REF, "backend kind");
  lpattn_free(c);
  lpattn_free(NULL);
  CHECK(lpattn_backend_available(LPATTN_BACKEND_REF) == 1, "ref always available");
  CHECK_STATUS(lpattn_synchronize(NULL), LPATTN_ERR_NULL_POINTER);
  CHECK(strcmp(lpattn_backend_name(LPATTN_BACKEND_CUDA), "cuda") == 0, "name");
}

typedef struct {
  lpattn_tensor q, k, v, o;
  lpattn_attn_params p;
  lpattn_attn_aux aux;
} call;

static call good(void) {
  call c;
  c.q = lpattn_tensor_4d(qbuf, LPATTN_F32, B, HQ, SQ, D);
  c.k = lpattn_tensor_4d(kbuf, LPATTN_F32, B, HKV, SKV, D);
  c.v = lpattn_tensor_4d(vbuf, LPATTN_F32, B, HKV, SKV, D);
  c.o = lpattn_tensor_4d(obuf, LPATTN_F32, B, HQ, SQ, D);
  lpattn_attn_params_init(&c.p);
  c.p.causal = 1;
  lpattn_attn_aux_init(&c.aux);
  c.aux.lse = lpattn_tensor_4d(lbuf, LPATTN_F32, B, HQ, SQ, 1);
  return c;
}

static lpattn_status run(lpattn_ctx *ctx, call *c) {
  poison();
  lpattn_status s = lpattn_attention(ctx, &c->q, &c->k, &c->v, &c->o, &c->p, &c->aux);
  if (s != LPATTN_OK) CHECK(untouched(), "rejected call wrote output (%s)", lpattn_status_string(s));
  return s;
}

static void test_attention(lpattn_ctx *ctx) {
  call c = good();
  CHECK_STATUS(lpattn_attention(NULL, &c.q, &c.k, &c.v, &c.o, NULL, NULL), LPATTN_ERR_NULL_POINTER);
  CHECK_STATUS(lpattn_attention(ctx, NULL, &c.k, &c.v, &c.o, NULL, NULL), LPATTN_ERR_NULL_POINTER);
  CHECK_STATUS(lpattn_attention(ctx, &c.q, &c.k, NULL, &c.o, NULL, NULL), LPATTN_ERR_NULL_POINTER);
#define BAD(mutation, want) \
  do {                      \
    c = good();             \
    mutation;               \
    CHECK_STATUS(run(ctx, &c), want); \
  } while (0)
  BAD(c.q.data = NULL, LPATTN_ERR_NULL_POINTER);
  BAD(c.o.data = NULL, LPATTN_ERR_NULL_POINTER);
  BAD(c.q.shape[2] = 0, LPATTN_ERR_BAD_SHAPE);
  BAD(c.k.shape[3] = 32, LPATTN_ERR_BAD_SHAPE);               /* D mismatch */
  BAD(c.v.shape[2] = SKV - 1, LPATTN_ERR_BAD_SHAPE);          /* K/V lengths differ */
  BAD(c.o.shape[1] = 2, LPATTN_ERR_BAD_SHAPE);
  BAD((c.k.shape[1] = 3, c.v.shape[1] = 3), LPATTN_ERR_BAD_GQA);
  BAD((c.q.shape[3] = 4, c.k.shape[3] = 4, c.v.shape[3] = 4, c.o.shape[3] = 4),
      LPATTN_ERR_BAD_HEAD_DIM);                               /* below 8 */
  BAD((c.q.shape[3] = 272, c.k.shape[3] = 272, c.v.shape[3] = 272,
       c.o = lpattn_tensor_4d(obuf, LPATTN_F32, B, HQ, SQ, 272)),
      LPATTN_ERR_BAD_HEAD_DIM);
  BAD((c.q.shape[3] = 48, c.k.shape[3] = 48, c.v.shape[3] = 48, c.o.shape[3] = 48,
       c.p.precision = LPATTN_PREC_MXFP4),
      LPATTN_OK);                         /* an MXFP4 group past D: quantized as if zero-padded */
  BAD(c.q.stride[2] = -D, LPATTN_ERR_BAD_STRIDE);
  BAD(c.o.stride[2] = 0, LPATTN_ERR_BAD_STRIDE);              /* rows would overlap */
  /* Issue 11 D: rows that overlap (results depended on write order). */
  BAD(c.o.stride[2] = D / 2, LPATTN_ERR_BAD_STRIDE);
  BAD((c.o.stride[1] = D, c.o.stride[2] = HQ * D), LPATTN_OK);             /* BSHD */
  BAD((c.o.stride[1] = D, c.o.stride[2] = D), LPATTN_ERR_BAD_STRIDE); /* heads on rows */
  BAD((c.o.stride[3] = 2, c.o.stride[2] = D), LPATTN_ERR_BAD_STRIDE); /* elements */
  BAD(c.aux.lse.stride[1] = SQ - 1, LPATTN_ERR_BAD_STRIDE);
  BAD((c.p.precision = LPATTN_PREC_THRIFT, c.p.thrift_k = 2,
       c.aux.selection = lpattn_tensor_4d(lbuf, LPATTN_I32, B, HQ, 1, 2),
       c.aux.selection.stride[1] = 1),
      LPATTN_ERR_BAD_STRIDE);
  BAD(c.q.stride[1] = INT64_MAX / 2, LPATTN_ERR_SIZE_OVERFLOW);
  BAD((c.k.shape[2] = INT64_MAX / 4, c.v.shape[2] = INT64_MAX / 4), LPATTN_ERR_SIZE_OVERFLOW);
  BAD(c.q.dtype = LPATTN_E4M3, LPATTN_ERR_BAD_DTYPE);
  BAD(c.v.dtype = LPATTN_F16, LPATTN_ERR_BAD_DTYPE);          /* K and V differ */
  BAD(c.o.dtype = LPATTN_I32, LPATTN_ERR_BAD_DTYPE);
  BAD(c.q.dtype = (lpattn_dtype)77, LPATTN_ERR_BAD_DTYPE);
  BAD(c.p.precision = (lpattn_precision)9, LPATTN_ERR_INVALID_ARGUMENT);
  BAD(c.p.block_k = 48, LPATTN_ERR_INVALID_ARGUMENT);
  BAD(c.p.block_q = 512, LPATTN_ERR_INVALID_ARGUMENT);
  BAD(c.p.sm_scale = NAN, LPATTN_ERR_INVALID_ARGUMENT);
  BAD(c.p.sm_scale = -1.0f, LPATTN_ERR_INVALID_ARGUMENT);
  /* Issue 11 C: finite but absurd scales turned PASA's f16 keys into inf, so
   * every output into NaN; the range is (0, LPATTN_SM_SCALE_MAX]. */
  BAD((c.p.sm_scale = 1e30f, c.p.pasa = 1), LPATTN_ERR_INVALID_ARGUMENT);
  BAD(c.p.sm_scale = LPATTN_SM_SCALE_MAX * 1.0001f, LPATTN_ERR_INVALID_ARGUMENT);
  BAD(c.p.sm_scale = INFINITY, LPATTN_ERR_INVALID_ARGUMENT);
  BAD((c.p.precision = LPATTN_PREC_THRIFT, c.p.thrift_budget = 1.5f), LPATTN_ERR_INVALID_ARGUMENT);
  BAD((c.p.precision = LPATTN_PREC_THRIFT, c.p.thrift_k = -1), LPATTN_ERR_INVALID_ARGUMENT);
  BAD(c.p.thrift_low = (lpattn_format)5, LPATTN_ERR_INVALID_ARGUMENT);
  BAD(c.p.selection = (lpattn_selection)3, LPATTN_ERR_INVALID_ARGUMENT);
  BAD(c.p.pasa_beta = 1.0f, LPATTN_ERR_INVALID_ARGUMENT);
  BAD(c.p.struct_size = sizeof c.p + 4, LPATTN_ERR_PARAMS_SIZE);
  BAD(c.p.struct_size = 2, LPATTN_ERR_PARAMS_SIZE);
  BAD(c.aux.lse.dtype = LPATTN_F16, LPATTN_ERR_BAD_DTYPE);
  BAD(c.aux.lse = lpattn_tensor_4d(lbuf, LPATTN_F32, B, HQ, SQ + 1, 1), LPATTN_ERR_BAD_SHAPE);
  BAD(c.aux.struct_size = 1 << 20, LPATTN_ERR_PARAMS_SIZE);
  BAD(c.aux.selection = lpattn_tensor_4d(lbuf, LPATTN_I32, B, HQ, 1, 1),
      LPATTN_ERR_INVALID_ARGUMENT);                           /* selection needs THRIFT */
  /* check_finite: a NaN in V is reported, not propagated. */
  c = good();
  c.p.check_finite = 1;
  vbuf[5] = NAN;
  CHECK_STATUS(run(ctx, &c), LPATTN_ERR_NONFINITE);
  vbuf[5] = 0.25f;
  /* The largest scale works, with PASA too, and stays finite. */
  c = good();
  c.p.sm_scale = LPATTN_SM_SCALE_MAX;
  c.p.pasa = 1;
  CHECK_STATUS(run(ctx, &c), LPATTN_OK);
  int finite = 1;
  for (size_t i = 0; i < sizeof obuf / sizeof obuf[0]; i++) finite &= isfinite(obuf[i]) != 0;
  CHECK(finite, "PASA at sm_scale = LPATTN_SM_SCALE_MAX gave non-finite output");
  /* And a good call passes (the ref backend must be there). */
  c = good();
  CHECK_STATUS(run(ctx, &c), LPATTN_OK);
  CHECK(!untouched(), "good call wrote its output");
#undef BAD
}

static void test_quantize(lpattn_ctx *ctx) {
  static uint8_t codes[B * HQ * SQ * D], scales[B * HQ * SQ * D / 16];
  static float outer[B * HQ * 128 * D];
  lpattn_tensor x = lpattn_tensor_4d(qbuf, LPATTN_F32, B, HQ, SQ, D);
  lpattn_qtensor q = {LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, {B, HQ, SQ, D}, codes, scales, outer};
  lpattn_quant_params p;
  lpattn_quant_params_init(&p);
  CHECK_STATUS(lpattn_quantize(NULL, &x, &q, &p), LPATTN_ERR_NULL_POINTER);
  CHECK_STATUS(lpattn_quantize(ctx, &x, NULL, &p), LPATTN_ERR_NULL_POINTER);
  lpattn_qtensor bad = q;
  bad.format = LPATTN_FMT_MXFP4;
  CHECK_STATUS(lpattn_quantize(ctx, &x, &bad, &p), LPATTN_ERR_BAD_LAYOUT);
  bad = q;
  bad.shape[2] = SQ + 1;
  CHECK_STATUS(lpattn_quantize(ctx, &x, &bad, &p), LPATTN_ERR_BAD_SHAPE);
  bad = q;
  bad.scales = NULL;
  CHECK_STATUS(lpattn_quantize(ctx, &x, &bad, &p), LPATTN_ERR_NULL_POINTER);
  p.format = (lpattn_format)7;
  CHECK_STATUS(lpattn_quantize(ctx, &x, &q, &p), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_quant_params_init(&p);
  p.axis = LPATTN_AXIS_S;
  p.tile = 40;
  CHECK_STATUS(lpattn_quantize(ctx, &x, &q, &p), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_quant_params_init(&p);
  lpattn_tensor xi = x;
  xi.dtype = LPATTN_I32;
  CHECK_STATUS(lpattn_quantize(ctx, &xi, &q, &p), LPATTN_ERR_BAD_DTYPE);
  p.check_finite = 1;
  qbuf[3] = INFINITY;
  memset(codes, 0xAB, sizeof codes);
  CHECK_STATUS(lpattn_quantize(ctx, &x, &q, &p), LPATTN_ERR_NONFINITE);
  CHECK(codes[0] == 0xAB && codes[sizeof codes - 1] == 0xAB, "rejected quantize wrote codes");
  qbuf[3] = 0.0f;
  CHECK_STATUS(lpattn_quantize(ctx, &x, &q, &p), LPATTN_OK);
  /* Issue 11 D: quantize's outputs may not share bytes, dequantize's y no element. */
  bad = q;
  bad.scales = codes + 8;
  CHECK_STATUS(lpattn_quantize(ctx, &x, &bad, &p), LPATTN_ERR_BAD_STRIDE);
  bad = q;
  bad.outer = (float *)(void *)scales;
  CHECK_STATUS(lpattn_quantize(ctx, &x, &bad, &p), LPATTN_ERR_BAD_STRIDE);
  lpattn_tensor y = lpattn_tensor_4d(obuf, LPATTN_F32, B, HQ, SQ, D);
  lpattn_tensor yo = y;
  yo.stride[1] = D;
  poison();
  CHECK_STATUS(lpattn_dequantize(ctx, &q, &yo), LPATTN_ERR_BAD_STRIDE);
  CHECK(untouched(), "rejected dequantize wrote");
  CHECK_STATUS(lpattn_dequantize(ctx, &q, &y), LPATTN_OK);
  y.dtype = LPATTN_E2M1;
  CHECK_STATUS(lpattn_dequantize(ctx, &q, &y), LPATTN_ERR_BAD_DTYPE);
  size_t cb, sb, oc;
  const int64_t huge[4] = {INT64_MAX / 2, 4, 4, 64};
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, huge, &cb, &sb, &oc),
               LPATTN_ERR_SIZE_OVERFLOW);
  const int64_t odd[4] = {1, 1, 4, 40};
  CHECK_STATUS(lpattn_qtensor_sizes(LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, odd, &cb, &sb, &oc),
               LPATTN_ERR_BAD_HEAD_DIM);
}

static void test_cache_and_decode(lpattn_ctx *ctx) {
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_kv_heads = HKV, cp.num_q_heads = HQ, cp.head_dim = D, cp.max_tokens = 100;
  lpattn_kv_cache *cache = NULL;
  CHECK_STATUS(lpattn_kv_cache_create(NULL, &cp, &cache), LPATTN_ERR_NULL_POINTER);
  lpattn_kv_cache_params bad = cp;
  bad.num_q_heads = 3;
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &bad, &cache), LPATTN_ERR_BAD_GQA);
  bad = cp;
  bad.head_dim = 300;
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &bad, &cache), LPATTN_ERR_BAD_HEAD_DIM);
  bad = cp;
  bad.tile = 50;
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &bad, &cache), LPATTN_ERR_INVALID_ARGUMENT);
  bad = cp;
  bad.max_tokens = INT64_MAX / 4;
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &bad, &cache), LPATTN_ERR_SIZE_OVERFLOW);
  bad = cp;
  bad.high_dtype = LPATTN_E4M3;
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &bad, &cache), LPATTN_ERR_BAD_DTYPE);
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &cp, &cache), LPATTN_OK);
  if (!cache) return;
  lpattn_tensor k = lpattn_tensor_4d(kbuf, LPATTN_F32, 1, HKV, SKV, D);
  lpattn_tensor v = lpattn_tensor_4d(vbuf, LPATTN_F32, 1, HKV, SKV, D);
  CHECK_STATUS(lpattn_kv_cache_append(ctx, cache, 1, &k, &v, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_tensor kw = k;
  kw.shape[1] = 1;
  CHECK_STATUS(lpattn_kv_cache_append(ctx, cache, 0, &kw, &v, NULL), LPATTN_ERR_BAD_SHAPE);
  CHECK_STATUS(lpattn_kv_cache_append(ctx, cache, 0, &k, &v, NULL), LPATTN_OK);
  int64_t len = -1;
  CHECK_STATUS(lpattn_kv_cache_length(cache, 0, &len), LPATTN_OK);
  CHECK(len == SKV, "length %lld", (long long)len);
  CHECK_STATUS(lpattn_kv_cache_append(ctx, cache, 0, &k, &v, NULL), LPATTN_ERR_CACHE_FULL);
  lpattn_tensor q = lpattn_tensor_4d(qbuf, LPATTN_F32, 1, HQ, 1, D);
  lpattn_tensor o = lpattn_tensor_4d(obuf, LPATTN_F32, 1, HQ, 1, D);
  lpattn_tensor qlong = lpattn_tensor_4d(qbuf, LPATTN_F32, 1, HQ, 65, D);
  CHECK_STATUS(lpattn_decode(ctx, cache, &qlong, &qlong, NULL, NULL), LPATTN_ERR_BAD_SHAPE);
  lpattn_tensor q3 = lpattn_tensor_4d(qbuf, LPATTN_F32, 1, 3, 1, D);
  CHECK_STATUS(lpattn_decode(ctx, cache, &q3, &o, NULL, NULL), LPATTN_ERR_BAD_SHAPE);
  CHECK_STATUS(lpattn_decode(ctx, NULL, &q, &o, NULL, NULL), LPATTN_ERR_NULL_POINTER);
  CHECK_STATUS(lpattn_decode(ctx, cache, &q, &o, NULL, NULL), LPATTN_OK);
  lpattn_kv_cache_free(cache);
  lpattn_kv_cache_free(NULL);
}

static void test_merge(lpattn_ctx *ctx) {
  lpattn_tensor o = lpattn_tensor_4d(obuf, LPATTN_F32, 1, HQ, SQ, D);
  lpattn_tensor l = lpattn_tensor_4d(lbuf, LPATTN_F32, 1, HQ, SQ, 1);
  lpattn_tensor l2 = lpattn_tensor_4d(lbuf, LPATTN_F32, 1, HQ, SQ, 2);
  CHECK_STATUS(lpattn_merge_states(ctx, &o, &l, NULL, &o, NULL, NULL, &o, &l, NULL),
               LPATTN_ERR_NULL_POINTER);
  CHECK_STATUS(lpattn_merge_states(ctx, &o, &l, &l, &o, &l, NULL, &o, &l, NULL),
               LPATTN_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(lpattn_merge_states(ctx, &o, &l2, NULL, &o, &l, NULL, &o, &l, NULL),
               LPATTN_ERR_BAD_SHAPE);
  /* Issue 11 D: overlapping output rows (o) or heads (lse). */
  lpattn_tensor oo = o, lo = l;
  oo.stride[2] = D / 2;
  lo.stride[1] = 1;
  static float oa[HQ * SQ * D], la[HQ * SQ];
  lpattn_tensor ta = lpattn_tensor_4d(oa, LPATTN_F32, 1, HQ, SQ, D);
  lpattn_tensor tl = lpattn_tensor_4d(la, LPATTN_F32, 1, HQ, SQ, 1);
  poison();
  CHECK_STATUS(lpattn_merge_states(ctx, &ta, &tl, NULL, &ta, &tl, NULL, &oo, &l, NULL),
               LPATTN_ERR_BAD_STRIDE);
  CHECK_STATUS(lpattn_merge_states(ctx, &ta, &tl, NULL, &ta, &tl, NULL, &o, &lo, NULL),
               LPATTN_ERR_BAD_STRIDE);
  CHECK(untouched(), "rejected merge wrote");
  CHECK_STATUS(lpattn_merge_states(ctx, &ta, &tl, NULL, &ta, &tl, NULL, &o, &l, NULL), LPATTN_OK);
}

/* |fraction of high tiles - f| for k of n (SPEC 5), in long double. */
static double thrift_err(long long k, long long n, int causal, float f) {
  long double fr = causal ? ((long double)k * n - (long double)k * (k - 1) / 2) /
                                ((long double)n * (n + 1) / 2)
                          : (long double)k / n;
  return (double)fabsl(fr - f);
}

static void test_helpers(void) {
  CHECK(lpattn_thrift_k(0, 0.05f, 1) == 0, "no tiles");
  CHECK(lpattn_thrift_k(20, 1.0f, 0) == 20, "full budget");
  CHECK(lpattn_thrift_k(20, 0.05f, 0) == 1, "5%% of 20");
  /* Issue 11 A: large n is exact and O(1) (was an int overflow and a scan of n). */
  const int big[] = {2147483647, 2147483646, 1000003, 65536};
  for (int i = 0; i < 4; i++)
    for (int causal = 0; causal < 2; causal++) {
      const int n = big[i], k = lpattn_thrift_k(n, 0.05f, causal);
      CHECK(k >= 1 && k <= n, "k %d of n %d", k, n);
      const double e = thrift_err(k, n, causal, 0.05f);
      CHECK(e <= thrift_err(k - 1, n, causal, 0.05f) && e < thrift_err(k + 1, n, causal, 0.05f),
            "n %d causal %d: k %d is not the best", n, causal, k);
    }
  CHECK(lpattn_thrift_k(2147483647, 0.05f, 1) == 54375501, "INT_MAX causal (exact)");
  CHECK(lpattn_thrift_k(2147483647, 0.05f, 0) == 107374184, "INT_MAX non-causal");
  CHECK(lpattn_thrift_k(100, NAN, 1) == 1 && lpattn_thrift_k(100, 7.0f, 1) == 100, "odd budgets");
  CHECK(lpattn_thrift_k(1, 7.9e32f, 0) == 1 && lpattn_thrift_k(5, 3e38f, 1) == 5, "huge budgets");
  CHECK(lpattn_pasa_beta(LPATTN_F16, 128, 0.0) == 0.9844970703125, "SPEC 6 s2=128");
  CHECK(lpattn_pasa_beta(LPATTN_F16, 64, 0.0) == 0.984619140625, "SPEC 6 s2=64");
  CHECK(isnan(lpattn_pasa_beta(LPATTN_F32, 64, 0.0)), "f32 storage rejected");
}

int main(void) {
  fill(qbuf, sizeof qbuf / 4, 1);
  fill(kbuf, sizeof kbuf / 4, 2);
  fill(vbuf, sizeof vbuf / 4, 3);
  test_version_and_status();
  test_context();
  test_helpers();
  lpattn_ctx *ctx = NULL;
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, &ctx), LPATTN_OK);
  if (ctx) {
    test_attention(ctx);
    test_quantize(ctx);
    test_cache_and_decode(ctx);
    test_merge(ctx);
    lpattn_free(ctx);
  }
  return test_finish();
}
