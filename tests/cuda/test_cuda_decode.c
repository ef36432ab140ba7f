/* CUDA decode against the device KV cache matches ref decode against the
 * host cache: every precision, PASA, sequences of different lengths, Sq = 1
 * and Sq = 3 rows that straddle a tile boundary, LSE/entropy too. */
#include "cudatest.h"

static void decode_case(lpattn_ctx *cu, lpattn_ctx *ref, lpattn_precision prec, int pasa,
                        lpattn_dtype dt) {
  const int S = 2, Hq = 4, Hkv = 2, D = 64;
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_seqs = S, cp.num_q_heads = Hq, cp.num_kv_heads = Hkv, cp.head_dim = D;
  cp.max_tokens = 700, cp.high_dtype = dt, cp.precision = prec, cp.pasa = pasa;
  lpattn_kv_cache *cc = NULL, *rc = NULL;
  if (ct_cache_unsupported(prec, pasa)) {
    CHECK_STATUS(lpattn_kv_cache_create(cu, &cp, &cc), LPATTN_ERR_UNSUPPORTED);
    printf("%s: no cache of precision %d pasa %d\n", CT_NAME, (int)(prec), pasa);
    return;
  }
  CHECK_STATUS(lpattn_kv_cache_create(cu, &cp, &cc), LPATTN_OK);
  CHECK_STATUS(lpattn_kv_cache_create(ref, &cp, &rc), LPATTN_OK);
  if (!cc || !rc) return;
  const int prompt[2] = {190, 317};
  for (int s = 0; s < S; s++) {
    for (int done = 0; done < prompt[s];) {
      int n = prompt[s] - done < 100 ? prompt[s] - done : 100;
      ct_pair k = ct_make(dt, 1, Hkv, n, D), v = ct_make(dt, 1, Hkv, n, D), q = ct_make(dt, 1, Hq, n, D);
      ct_fill(&k, 0.4, 1), ct_fill(&v, 0, 1), ct_fill(&q, 0, 1);
      CHECK_STATUS(lpattn_kv_cache_append(cu, cc, s, &k.d, &v.d, &q.d), LPATTN_OK);
      CHECK_STATUS(lpattn_kv_cache_append(ref, rc, s, &k.h, &v.h, &q.h), LPATTN_OK);
      ct_free(&k), ct_free(&v), ct_free(&q);
      done += n;
    }
  }
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.thrift_budget = 0.25f;
  double worst = 0, worst_l = 0, worst_h = 0;
  for (int step = 0; step < 6; step++) {
    const int Sq = step == 3 ? 3 : 1;
    for (int s = 0; s < S; s++) { /* Sq new tokens per sequence, then decode them */
      ct_pair k = ct_make(dt, 1, Hkv, Sq, D), v = ct_make(dt, 1, Hkv, Sq, D);
      ct_fill(&k, 0.4, 1), ct_fill(&v, 0, 1);
      CHECK_STATUS(lpattn_kv_cache_append(cu, cc, s, &k.d, &v.d, NULL), LPATTN_OK);
      CHECK_STATUS(lpattn_kv_cache_append(ref, rc, s, &k.h, &v.h, NULL), LPATTN_OK);
      ct_free(&k), ct_free(&v);
    }
    ct_pair q = ct_make(dt, S, Hq, Sq, D), o = ct_make(LPATTN_F32, S, Hq, Sq, D);
    ct_pair l = ct_make(LPATTN_F32, S, Hq, Sq, 1), h = ct_make(LPATTN_F32, S, Hq, Sq, 1);
    ct_pair ro = ct_make(LPATTN_F32, S, Hq, Sq, D), rl = ct_make(LPATTN_F32, S, Hq, Sq, 1),
            rh = ct_make(LPATTN_F32, S, Hq, Sq, 1);
    ct_fill(&q, 0, 1);
    ct_poison(&o), ct_poison(&l), ct_poison(&h);
    lpattn_attn_aux ad, ah;
    lpattn_attn_aux_init(&ad), lpattn_attn_aux_init(&ah);
    ad.lse = l.d, ad.entropy = h.d, ah.lse = rl.h, ah.entropy = rh.h;
    CHECK_STATUS(lpattn_decode(cu, cc, &q.d, &o.d, &ap, &ad), LPATTN_OK);
    CHECK_STATUS(lpattn_decode(ref, rc, &q.h, &ro.h, &ap, &ah), LPATTN_OK);
    ct_down(&o), ct_down(&l), ct_down(&h);
    double e = ct_relerr(&o.h, &ro.h), el = ct_maxabs(&l.h, &rl.h), eh = ct_maxabs(&h.h, &rh.h);
    worst = e > worst ? e : worst, worst_l = el > worst_l ? el : worst_l, worst_h = eh > worst_h ? eh : worst_h;
    ct_free(&q), ct_free(&o), ct_free(&l), ct_free(&h), ct_free(&ro), ct_free(&rl), ct_free(&rh);
  }
  double tol = dt == LPATTN_BF16 ? 5e-3 : 2e-3;
  printf("decode prec=%d pasa=%d %s: O %.2e LSE %.2e H %.2e\n", prec, pasa,
         dt == LPATTN_F16 ? "f16" : "bf16", worst, worst_l, worst_h);
  CHECK(worst < tol, "decode prec %d pasa %d: O rel err %g", prec, pasa, worst);
  CHECK(worst_l < 1e-3, "decode prec %d: LSE err %g", prec, worst_l);
  CHECK(worst_h < 1e-3, "decode prec %d: entropy err %g", prec, worst_h);
  lpattn_kv_cache_free(cc);
  lpattn_kv_cache_free(rc);
}

/* Decode in query tile 0 under PASA (seed 003's x0 = 30): the diagonal tile
 * has no full tile before it and shifts by beta * its first key (SEMANTICS);
 * CUDA against ref, the last 16 rows of a 40-token context decoded at once. */
static void decode_pasa_tile0(lpattn_ctx *cu, lpattn_ctx *ref) {
  const int Hq = 4, Hkv = 2, D = 64, n = 40, nq = 16;
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_q_heads = Hq, cp.num_kv_heads = Hkv, cp.head_dim = D, cp.max_tokens = 128, cp.pasa = 1;
  lpattn_kv_cache *cc = NULL, *rc = NULL;
  if (ct_cache_unsupported(LPATTN_PREC_HIGH, 1)) {
    CHECK_STATUS(lpattn_kv_cache_create(cu, &cp, &cc), LPATTN_ERR_UNSUPPORTED);
    printf("%s: no cache of precision %d pasa %d\n", CT_NAME, (int)(LPATTN_PREC_HIGH), 1);
    return;
  }
  CHECK_STATUS(lpattn_kv_cache_create(cu, &cp, &cc), LPATTN_OK);
  CHECK_STATUS(lpattn_kv_cache_create(ref, &cp, &rc), LPATTN_OK);
  if (!cc || !rc) return;
  ct_pair k = ct_make(LPATTN_F16, 1, Hkv, n, D), v = ct_make(LPATTN_F16, 1, Hkv, n, D),
          q = ct_make(LPATTN_F16, 1, Hq, nq, D);
  ct_fill_unif(&k, 30, 0.5), ct_fill_unif(&v, 30, 0.5), ct_fill_unif(&q, 30, 0.5);
  CHECK_STATUS(lpattn_kv_cache_append(cu, cc, 0, &k.d, &v.d, NULL), LPATTN_OK);
  CHECK_STATUS(lpattn_kv_cache_append(ref, rc, 0, &k.h, &v.h, NULL), LPATTN_OK);
  ct_pair o = ct_make(LPATTN_F32, 1, Hq, nq, D), ro = ct_make(LPATTN_F32, 1, Hq, nq, D);
  ct_pair l = ct_make(LPATTN_F32, 1, Hq, nq, 1), h = ct_make(LPATTN_F32, 1, Hq, nq, 1);
  ct_pair rl = ct_make(LPATTN_F32, 1, Hq, nq, 1), rh = ct_make(LPATTN_F32, 1, Hq, nq, 1);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  lpattn_attn_aux ad, ah;
  lpattn_attn_aux_init(&ad), lpattn_attn_aux_init(&ah);
  ad.lse = l.d, ad.entropy = h.d, ah.lse = rl.h, ah.entropy = rh.h;
  CHECK_STATUS(lpattn_decode(cu, cc, &q.d, &o.d, &ap, &ad), LPATTN_OK);
  CHECK_STATUS(lpattn_decode(ref, rc, &q.h, &ro.h, &ap, &ah), LPATTN_OK);
  ct_down(&o), ct_down(&l), ct_down(&h);
  double e = ct_relerr(&o.h, &ro.h), el = ct_maxabs(&l.h, &rl.h), eh = ct_maxabs(&h.h, &rh.h);
  printf("decode pasa tile 0 x0=30: O %.2e LSE %.2e H %.2e\n", e, el, eh);
  /* LSE ~ 7e3: its f32 ulp is ~5e-4 */
  CHECK(e < 1e-3 && el < 1e-2 && eh < 1e-2, "decode PASA tile 0: O %g LSE %g H %g", e, el, eh);
  ct_free(&k), ct_free(&v), ct_free(&q), ct_free(&o), ct_free(&ro);
  ct_free(&l), ct_free(&h), ct_free(&rl), ct_free(&rh);
  lpattn_kv_cache_free(cc);
  lpattn_kv_cache_free(rc);
}

/* Decode of position len-1 equals the last row of a causal prefill over the
 * same len tokens (SPEC 4: a decoded token sees the tiles and selection
 * inputs of its prefill row), on each backend separately. */
static void decode_vs_prefill(lpattn_ctx *ctx, int host, lpattn_precision prec, int pasa, int len) {
  const int Hq = 4, Hkv = 2, D = 64;
  ct_pair q = ct_make(LPATTN_F16, 1, Hq, len, D), k = ct_make(LPATTN_F16, 1, Hkv, len, D),
          v = ct_make(LPATTN_F16, 1, Hkv, len, D), o = ct_make(LPATTN_F32, 1, Hq, len, D);
  ct_fill(&q, 0, 1), ct_fill(&k, 0.4, 1), ct_fill(&v, 0, 1);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.precision = prec, ap.causal = 1, ap.pasa = pasa, ap.thrift_budget = 0.25f;
  CHECK_STATUS(lpattn_attention(ctx, host ? &q.h : &q.d, host ? &k.h : &k.d, host ? &v.h : &v.d,
                                host ? &o.h : &o.d, &ap, NULL), LPATTN_OK);
  if (!host) ct_down(&o);
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_q_heads = Hq, cp.num_kv_heads = Hkv, cp.head_dim = D, cp.max_tokens = 256;
  cp.precision = prec, cp.pasa = pasa;
  lpattn_kv_cache *c = NULL;
  if (!host && ct_cache_unsupported(prec, pasa)) {
    CHECK_STATUS(lpattn_kv_cache_create(ctx, &cp, &c), LPATTN_ERR_UNSUPPORTED);
    ct_free(&q), ct_free(&k), ct_free(&v), ct_free(&o);
    return;
  }
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &cp, &c), LPATTN_OK);
  CHECK_STATUS(lpattn_kv_cache_append(ctx, c, 0, host ? &k.h : &k.d, host ? &v.h : &v.d, host ? &q.h : &q.d), LPATTN_OK);
  /* the last query row as a [1, Hq, 1, D] view */
  lpattn_tensor ql = host ? q.h : q.d;
  ql.data = (char *)ql.data + (size_t)(len - 1) * D * 2, ql.shape[2] = 1;
  ct_pair od = ct_make(LPATTN_F32, 1, Hq, 1, D);
  CHECK_STATUS(lpattn_decode(ctx, c, &ql, host ? &od.h : &od.d, &ap, NULL), LPATTN_OK);
  if (!host) ct_down(&od);
  double num = 0, den = 0;
  for (int h = 0; h < Hq; h++)
    for (int d = 0; d < D; d++) {
      double a = ((float *)od.h.data)[h * D + d], b = ((float *)o.h.data)[((size_t)h * len + len - 1) * D + d];
      num += (a - b) * (a - b), den += b * b;
    }
  double e = sqrt(num / den);
  printf("decode vs prefill (%s) prec=%d pasa=%d len=%d: %.2e\n", host ? "ref" : CT_NAME, prec, pasa, len, e);
  /* ref: the same f64 arithmetic; cuda: a split KV range rounds differently */
  CHECK(e < (host ? 1e-9 : 1e-3), "%s decode differs from its prefill row: prec %d pasa %d err %g", host ? "ref" : CT_NAME, prec, pasa, e);
  lpattn_kv_cache_free(c);
  ct_free(&q), ct_free(&k), ct_free(&v), ct_free(&o), ct_free(&od);
}

int main(void) {
  lpattn_ctx *cu = NULL, *ref = NULL;
  if (!ct_setup(&cu, &ref)) return test_skip("no usable GPU device");
  for (int prec = 0; prec <= LPATTN_PREC_THRIFT; prec++) decode_case(cu, ref, (lpattn_precision)prec, 0, LPATTN_F16);
  decode_case(cu, ref, LPATTN_PREC_NVFP4, 1, LPATTN_F16);
  decode_case(cu, ref, LPATTN_PREC_THRIFT, 1, LPATTN_F16);
  decode_case(cu, ref, LPATTN_PREC_HIGH, 0, LPATTN_BF16);
  /* 65 and 129: the prefill's last KV tile ends at its one-row last query
   * tile; that tile is diagonal in both (SEMANTICS: unclipped c1) */
  const int lens[] = {200, 65, 129};
  for (int li = 0; li < 3; li++)
    for (int prec = 0; prec <= LPATTN_PREC_THRIFT; prec++)
      for (int host = 0; host < 2; host++)
        decode_vs_prefill(host ? ref : cu, host, (lpattn_precision)prec, 0, lens[li]);
  for (int li = 0; li < 3; li++)
    for (int host = 0; host < 2; host++) decode_vs_prefill(host ? ref : cu, host, LPATTN_PREC_NVFP4, 1, lens[li]);
  decode_vs_prefill(cu, 0, LPATTN_PREC_HIGH, 1, 40);
  decode_vs_prefill(ref, 1, LPATTN_PREC_HIGH, 1, 40);
  decode_pasa_tile0(cu, ref);
  /* a cache the CUDA backend cannot hold: f32 high copies */
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_q_heads = 2, cp.num_kv_heads = 2, cp.head_dim = 64, cp.max_tokens = 64, cp.high_dtype = LPATTN_F32;
  lpattn_kv_cache *c = NULL;
  CHECK_STATUS(lpattn_kv_cache_create(cu, &cp, &c), LPATTN_ERR_UNSUPPORTED);
  CHECK(ht_dsync(), "device error");
  lpattn_free(cu);
  lpattn_free(ref);
  return test_finish();
}
