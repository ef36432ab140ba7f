/* Argument checks of static-scale FP8 (lpattn.h FP8_STATIC), run on the
 * backend of test_ref_fp8s.c: descales that are not finite and > 0 (host
 * backends), of the wrong shape or dtype, descales with another precision,
 * E4M3 inputs with another precision or mixed with 16-bit ones, the forms
 * static FP8 lacks, the backward, caches and pools, and an older params
 * struct (without descales). Included once, by test_ref_fp8s.c. */
enum { AB = 2, AH = 2, AS = 40, AD = 16 };

static void check_args(lpattn_ctx *ctx) {
  static float x[AB * AH * AS * AD], o[AB * AH * AS * AD], lse[AB * AH * AS];
  static uint8_t c8[AB * AH * AS * AD];
  rng_t r = {3};
  fill_normal(&r, x, AB * AH * AS * AD, 0.0, 1.0);
  for (int i = 0; i < AB * AH * AS * AD; i++) c8[i] = lpattn_f32_to_e4m3(x[i] * 64.0f);
  lpattn_tensor t = lpattn_tensor_4d(x, LPATTN_F32, AB, AH, AS, AD);
  lpattn_tensor t8 = lpattn_tensor_4d(c8, LPATTN_E4M3, AB, AH, AS, AD);
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, AB, AH, AS, AD);
  float d[AB * AH] = {0.02f, 0.03f, 0.01f, 0.05f};
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = LPATTN_PREC_FP8_STATIC, p.causal = 1;
  p.q_descale = p.k_descale = p.v_descale = lpattn_tensor_4d(d, LPATTN_F32, 1, 1, AB, AH);
  CHECK_STATUS(lpattn_attention(ctx, &t, &t, &t, &to, &p, NULL), LPATTN_OK);
  CHECK_STATUS(lpattn_attention(ctx, &t8, &t8, &t8, &to, &p, NULL), LPATTN_OK);

  /* values: k_descale[1, 0] */
  const float bad[4] = {NAN, 0.0f, -0.5f, INFINITY};
  for (int i = 0; i < 4; i++) {
    float dk[AB * AH] = {0.02f, 0.03f, bad[i], 0.05f};
    lpattn_attn_params q = p;
    q.k_descale = lpattn_tensor_4d(dk, LPATTN_F32, 1, 1, AB, AH);
    CHECK_STATUS(lpattn_attention(ctx, &t, &t, &t, &to, &q, NULL), LPATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(lpattn_last_error(), "k_descale[1, 0]") != NULL, "detail \"%s\" names no k_descale[1, 0]",
          lpattn_last_error());
  }
  /* shape and dtype */
  lpattn_attn_params q = p;
  q.v_descale = lpattn_tensor_4d(d, LPATTN_F32, 1, 1, AB, 1);
  CHECK_STATUS(lpattn_attention(ctx, &t, &t, &t, &to, &q, NULL), LPATTN_ERR_BAD_SHAPE);
  CHECK(strstr(lpattn_last_error(), "v_descale") != NULL, "detail \"%s\"", lpattn_last_error());
  q = p, q.q_descale = lpattn_tensor_4d(d, LPATTN_F32, 1, AB, AH, 1);
  CHECK_STATUS(lpattn_attention(ctx, &t, &t, &t, &to, &q, NULL), LPATTN_ERR_BAD_SHAPE);
  q = p, q.k_descale = lpattn_tensor_4d(d, LPATTN_F16, 1, 1, AB, AH);
  CHECK_STATUS(lpattn_attention(ctx, &t, &t, &t, &to, &q, NULL), LPATTN_ERR_BAD_DTYPE);
  q = p, q.k_descale.stride[3] = -1;
  CHECK_STATUS(lpattn_attention(ctx, &t, &t, &t, &to, &q, NULL), LPATTN_ERR_BAD_STRIDE);
  /* descales with another precision; the forms static FP8 lacks */
  q = p, q.precision = LPATTN_PREC_FP8;
  CHECK_STATUS(lpattn_attention(ctx, &t, &t, &t, &to, &q, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  q = p, q.leaky = 1;
  CHECK_STATUS(lpattn_attention(ctx, &t, &t, &t, &to, &q, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  q = p, q.pasa = 1;
  CHECK_STATUS(lpattn_attention(ctx, &t, &t, &t, &to, &q, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  q = p, q.score_f16 = 1;
  CHECK_STATUS(lpattn_attention(ctx, &t, &t, &t, &to, &q, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  /* dtypes: E4M3 needs FP8_STATIC; all three or none; never out */
  lpattn_attn_params h;
  lpattn_attn_params_init(&h);
  for (int prec = LPATTN_PREC_HIGH; prec <= LPATTN_PREC_THRIFT; prec++) {
    h.precision = (lpattn_precision)prec;
    CHECK_STATUS(lpattn_attention(ctx, &t8, &t8, &t8, &to, &h, NULL), LPATTN_ERR_BAD_DTYPE);
    CHECK(strstr(lpattn_last_error(), "FP8_STATIC") != NULL, "detail \"%s\"", lpattn_last_error());
  }
  CHECK_STATUS(lpattn_attention(ctx, &t8, &t, &t, &to, &p, NULL), LPATTN_ERR_BAD_DTYPE);
  CHECK_STATUS(lpattn_attention(ctx, &t, &t, &t8, &to, &p, NULL), LPATTN_ERR_BAD_DTYPE);
  lpattn_tensor to8 = lpattn_tensor_4d(c8, LPATTN_E4M3, AB, AH, AS, AD);
  CHECK_STATUS(lpattn_attention(ctx, &t, &t, &t, &to8, &p, NULL), LPATTN_ERR_BAD_DTYPE);
  /* no descales: 1.0 each (E4M3 codes as values) */
  q = p;
  memset(&q.q_descale, 0, 3 * sizeof(lpattn_tensor));
  CHECK_STATUS(lpattn_attention(ctx, &t8, &t8, &t8, &to, &q, NULL), LPATTN_OK);
  /* an older struct (before the descales): accepted, FP8_STATIC with descales 1 */
  q.struct_size = offsetof(lpattn_attn_params, q_descale);
  static float o2[AB * AH * AS * AD];
  lpattn_tensor to2 = lpattn_tensor_4d(o2, LPATTN_F32, AB, AH, AS, AD);
  CHECK_STATUS(lpattn_attention(ctx, &t8, &t8, &t8, &to2, &q, NULL), LPATTN_OK);
  CHECK(!memcmp(o, o2, sizeof o), "an older params struct gives other results");
  /* the backward; caches and pools */
  lpattn_tensor tl = lpattn_tensor_4d(lse, LPATTN_F32, AB, AH, AS, 1);
  static float g[3][AB * AH * AS * AD];
  lpattn_attn_grads gr;
  lpattn_attn_grads_init(&gr);
  gr.dq = lpattn_tensor_4d(g[0], LPATTN_F32, AB, AH, AS, AD);
  gr.dk = lpattn_tensor_4d(g[1], LPATTN_F32, AB, AH, AS, AD);
  gr.dv = lpattn_tensor_4d(g[2], LPATTN_F32, AB, AH, AS, AD);
  CHECK_STATUS(lpattn_attention_backward(ctx, &t, &t, &t, &to, &tl, &t, &p, &gr), LPATTN_ERR_UNSUPPORTED);
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = pp.num_q_heads = AH, pp.head_dim = AD, pp.num_pages = 4, pp.num_slots = 1;
  pp.precision = LPATTN_PREC_FP8_STATIC;
  lpattn_kv_pool *pool = NULL;
  /* pools have the format (tests/api/test_kv_fp8s.c), without PASA; caches do not */
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool), LPATTN_OK);
  lpattn_kv_pool_free(pool);
  pp.pasa = 1;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_kv_cache_params kp;
  lpattn_kv_cache_params_init(&kp);
  kp.num_seqs = 1, kp.num_kv_heads = kp.num_q_heads = AH, kp.head_dim = AD, kp.max_tokens = 64;
  kp.precision = LPATTN_PREC_FP8_STATIC;
  lpattn_kv_cache *cache = NULL;
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &kp, &cache), LPATTN_ERR_INVALID_ARGUMENT);
}
