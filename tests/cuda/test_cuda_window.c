/* Sliding window and logit softcap on a GPU backend's prefill (docs/SEMANTICS.md
 * "Sliding window and softcap"; the mma.sync kernels, core/mask.h):
 * - parity with ref in every precision the prefill takes (HIGH, FP8, NVFP4,
 *   MXFP4, THRIFT over each low format, leaky low tiles): windows left only,
 *   left + right (non-causal), right only, causal + left, shorter than a
 *   tile, spanning several tiles, Sq != Skv (offsets, rows that see no key),
 *   absolute positions (causal and not), a padded head dim, f16 and bf16;
 *   softcap with and without a window; THRIFT's selection bitwise; the
 *   bounds of test_cuda_attn.c's parity;
 * - the leak rule, bitwise: K/V of keys before a row's window (large values,
 *   NaN and Inf in V) never change its O, LSE, H; tokens after its horizon
 *   neither (non-causal: keys after its right edge);
 * - still refused, UNSUPPORTED with an error naming the field and nothing
 *   written: static FP8's prefill, PASA, HIP's decode (CUDA's decode takes
 *   them: a cache decode runs, tests/cuda/test_cuda_paged_window.c). */
#include "cudatest.h"

typedef ct_win win_t;


static const char *PN[] = {"high", "fp8", "nvfp4", "mxfp4", "thrift", "fp8s"};

static lpattn_attn_params params_of(const win_t *w, lpattn_precision prec) {
  lpattn_attn_params ap = ct_win_params(w, prec);
  ap.thrift_budget = 0.3f;
  return ap;
}

/* THRIFT's k of the call (SEMANTICS "Sliding window and softcap"; written
 * from the text, not from core/window.c, so that it checks it): with a
 * window bounded on both sides, the non-causal rule over the tiles one
 * query tile's window spans. Sizes the selection output. */
static int thrift_k_of(const ct_shape *s, const win_t *w, float budget) {
  const int nkt = (int)((s->Skv + 63) / 64);
  const int64_t right = w->causal ? 0 : w->right;
  if (w->left < 0 || right < 0) return lpattn_thrift_k(nkt, budget, w->causal);
  const int64_t span = w->left + right + 64; /* left + R + Bq keys */
  int64_t n = (span - 1 + 63) / 64 + 1;
  if (n > nkt) n = nkt;
  return lpattn_thrift_k((int)n, budget, 0);
}

/* The call on both backends, compared; low: THRIFT's low format. */
static void parity(lpattn_ctx *cu, lpattn_ctx *ref, const ct_shape *s, const win_t *w,
                   lpattn_precision prec, lpattn_format low, int leaky) {
  lpattn_attn_params ap = params_of(w, prec);
  ap.thrift_low = low, ap.leaky = leaky;
  const int k = prec == LPATTN_PREC_THRIFT ? thrift_k_of(s, w, ap.thrift_budget) : 0;
  ct_prob p = ct_prob_make(s, k), r = ct_prob_make(s, k);
  ct_fill(&p.q, 0.0, 1.0), ct_fill(&p.k, 0.3, 1.0), ct_fill(&p.v, 0.0, 1.0);
  lpattn_attn_aux ah, ad;
  lpattn_attn_aux_init(&ah), lpattn_attn_aux_init(&ad);
  ah.lse = r.lse.h, ad.lse = p.lse.d, ah.entropy = r.ent.h, ad.entropy = p.ent.d;
  if (k > 0) ah.selection = r.sel.h, ad.selection = p.sel.d;
  ct_poison(&p.o), ct_poison(&p.lse), ct_poison(&p.ent), ct_poison(&p.sel);
  const lpattn_status sr = lpattn_attention(ref, &p.q.h, &p.k.h, &p.v.h, &r.o.h, &ap, &ah);
  const lpattn_status sc = lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, &ad);
  printf("parity %-6s%s%s D=%-3lld %s Sq=%lld Skv=%lld causal=%d window %d,%d softcap %g", PN[prec],
         prec == LPATTN_PREC_THRIFT ? (low == LPATTN_FMT_FP8 ? "/fp8" : low == LPATTN_FMT_MXFP4 ? "/mx" : "/nv") : "",
         leaky ? " leaky" : "", (long long)s->D, s->in == LPATTN_F16 ? "f16 " : "bf16", (long long)s->Sq,
         (long long)s->Skv, w->causal, w->left, w->right, (double)w->cap);
  if (w->pos) printf(" q_start=%lld kv_start=%lld", (long long)w->q_start, (long long)w->kv_start);
  CHECK(sr == LPATTN_OK && sc == LPATTN_OK, "status ref %s " CT_NAME " %s (%s)", lpattn_status_string(sr),
        lpattn_status_string(sc), lpattn_last_error());
  if (sr != LPATTN_OK || sc != LPATTN_OK) {
    printf(": not run\n");
    ct_prob_free(&p), ct_prob_free(&r);
    return;
  }
  ct_down(&p.o), ct_down(&p.lse), ct_down(&p.ent), ct_down(&p.sel);
  const double e = ct_relerr(&p.o.h, &r.o.h), el = ct_maxabs(&p.lse.h, &r.lse.h),
               eh = ct_maxabs(&p.ent.h, &r.ent.h);
  printf(": O %.2e LSE %.2e H %.2e\n", e, el, eh);
  /* test_cuda_attn.c's bounds (ref is f64; high tiles round P to the input type) */
  const double tol = s->in == LPATTN_BF16 ? 5e-3 : 2e-3;
  CHECK(e < tol, "%s O rel err %g >= %g", PN[prec], e, tol);
  CHECK(el < 1e-3, "%s LSE max err %g", PN[prec], el);
  CHECK(eh < 1e-3, "%s entropy max err %g", PN[prec], eh);
  if (k > 0) CHECK(memcmp(p.sel.h.data, r.sel.h.data, p.sel.bytes) == 0, "THRIFT selection differs from ref");
  ct_prob_free(&p), ct_prob_free(&r);
}

/* Every precision of the prefill on one shape and mask. */
static void all_precs(lpattn_ctx *cu, lpattn_ctx *ref, const ct_shape *s, const win_t *w) {
  for (int prec = 0; prec < LPATTN_PREC_THRIFT; prec++)
    parity(cu, ref, s, w, (lpattn_precision)prec, LPATTN_FMT_NVFP4, 0);
  if (!w->pos || (w->q_start == 0 && w->kv_start == 0)) /* THRIFT takes zero starts only */
    for (int f = 0; f < 3; f++) parity(cu, ref, s, w, LPATTN_PREC_THRIFT, (lpattn_format)f, 0);
}

static void parities(lpattn_ctx *cu, lpattn_ctx *ref) {
  /* masks: {causal, left, right, softcap} */
  const win_t m[] = {
      {1, 100, -1, 0, 0, 0, 0},   /* causal + left: a full tile and edges */
      {1, 16, -1, 0, 0, 0, 0},    /* shorter than a tile: no full tile, no low tile */
      {1, 0, -1, 0, 0, 0, 0},     /* the diagonal key alone */
      {1, 200, -1, 0, 0, 0, 0},   /* several tiles */
      {0, 64, 32, 0, 0, 0, 0},    /* left + right */
      {0, -1, 20, 0, 0, 0, 0},    /* right only */
      {0, 45, -1, 0, 0, 0, 0},    /* left only, not causal */
      {1, -1, -1, 20.0f, 0, 0, 0}, /* softcap alone */
      {0, -1, -1, 5.0f, 0, 0, 0},
      {1, 100, -1, 30.0f, 0, 0, 0}, /* softcap + window */
      {0, 64, 32, 10.0f, 0, 0, 0},
      {1, 150, 7, 2.0f, 0, 0, 0}, /* causal: window_right is moot */
  };
  const int nm = (int)(sizeof m / sizeof m[0]);
  const ct_shape sq = {1, 4, 2, 300, 300, 128, LPATTN_F16, LPATTN_F32};
  for (int i = 0; i < nm; i++) all_precs(cu, ref, &sq, &m[i]);
  /* leaky: every tile in the window low, edge tiles masked per element */
  for (int prec = LPATTN_PREC_FP8; prec < LPATTN_PREC_THRIFT; prec++) {
    parity(cu, ref, &sq, &m[0], (lpattn_precision)prec, LPATTN_FMT_NVFP4, 1);
    parity(cu, ref, &sq, &m[10], (lpattn_precision)prec, LPATTN_FMT_NVFP4, 1);
  }
  /* Sq < Skv (off 80), GQA, bf16, D 64 */
  const ct_shape lo = {1, 4, 1, 150, 230, 64, LPATTN_BF16, LPATTN_F32};
  for (int i = 0; i < nm; i += 2) all_precs(cu, ref, &lo, &m[i]);
  /* Sq > Skv (off -110: rows that see no key) */
  const ct_shape hi = {1, 2, 2, 200, 90, 64, LPATTN_F16, LPATTN_F32};
  for (int i = 1; i < nm; i += 2) all_precs(cu, ref, &hi, &m[i]);
  /* longer: THRIFT picks among several full tiles of the window; B = 2 */
  const ct_shape lg = {2, 2, 1, 700, 700, 64, LPATTN_F16, LPATTN_F32};
  const win_t ml[] = {{1, 300, -1, 0, 0, 0, 0}, {1, 130, -1, 15.0f, 0, 0, 0}, {0, 200, 100, 0, 0, 0, 0}};
  for (int i = 0; i < 3; i++) all_precs(cu, ref, &lg, &ml[i]);
  /* a head dim without its own variant (zero-padded onto the next one) */
  const ct_shape pd = {1, 2, 1, 130, 130, 80, LPATTN_F16, LPATTN_F32};
  all_precs(cu, ref, &pd, &m[9]);
  /* absolute positions: the window is placed by q_start - kv_start, causal or not */
  const win_t mp[] = {{1, 70, -1, 0, 1, 37, 0},
                      {1, 64, -1, 8.0f, 1, 130, 64},
                      {0, 30, 10, 0, 1, 100, 0},
                      {0, 50, 0, 0, 1, 0, 128},  /* rows before the keys: some see none */
                      {1, 40, -1, 0, 1, 0, 320}}; /* q before kv: every row sees none */
  const ct_shape ps = {1, 4, 2, 200, 300, 64, LPATTN_F16, LPATTN_F32};
  for (int i = 0; i < 5; i++) all_precs(cu, ref, &ps, &mp[i]);
}

/* Perturbs K, V of keys [c0, c1) of every kv head (V: large values, and
 * NaN/Inf in a few channels when nf); Q of rows [q0, q1) too. */
static void perturb(ct_prob *p, const ct_shape *s, int64_t c0, int64_t c1, int64_t q0, int64_t q1, int nf) {
  for (int64_t b = 0; b < s->B; b++) {
    for (int64_t h = 0; h < s->Hkv; h++)
      for (int64_t c = c0; c < c1; c++)
        for (int64_t d = 0; d < s->D; d++) {
          const int64_t i = ((b * s->Hkv + h) * s->Skv + c) * s->D + d;
          lp_store_f32(p->k.h.data, s->in, i, -7.0f * ct_get(&p->k.h, i) + 3.0f);
          float v = 50.0f * (float)((c + d) % 5);
          if (nf && d % 7 == 3) v = (c % 2) ? NAN : INFINITY;
          lp_store_f32(p->v.h.data, s->in, i, v);
        }
    for (int64_t h = 0; h < s->Hq; h++)
      for (int64_t r = q0; r < q1; r++)
        for (int64_t d = 0; d < s->D; d++) {
          const int64_t i = ((b * s->Hq + h) * s->Sq + r) * s->D + d;
          lp_store_f32(p->q.h.data, s->in, i, ct_get(&p->q.h, i) - 20.0f);
        }
  }
  ct_up(&p->q), ct_up(&p->k), ct_up(&p->v);
}

/* Rows [r0, r1) of O, LSE, H bitwise equal in a and b (host copies)? */
static int64_t rows_differ(const ct_prob *a, const float *o, const float *l, const float *e, const ct_shape *s,
                           int64_t r0, int64_t r1) {
  int64_t bad = 0;
  for (int64_t bh = 0; bh < s->B * s->Hq; bh++)
    for (int64_t r = r0; r < r1; r++) {
      const int64_t row = bh * s->Sq + r;
      bad += memcmp((const float *)a->o.h.data + row * s->D, o + row * s->D, (size_t)s->D * 4) != 0 ||
             memcmp((const float *)a->lse.h.data + row, l + row, 4) != 0 ||
             memcmp((const float *)a->ent.h.data + row, e + row, 4) != 0;
    }
  return bad;
}

static lpattn_status run(lpattn_ctx *cu, ct_prob *p, const lpattn_attn_params *ap) {
  lpattn_attn_aux ad;
  lpattn_attn_aux_init(&ad);
  ad.lse = p->lse.d, ad.entropy = p->ent.d;
  ct_poison(&p->o), ct_poison(&p->lse), ct_poison(&p->ent);
  const lpattn_status st = lpattn_attention(cu, &p->q.d, &p->k.d, &p->v.d, &p->o.d, ap, &ad);
  ct_down(&p->o), ct_down(&p->lse), ct_down(&p->ent);
  return st;
}

/* The leak rule (SEMANTICS): for each t, keys before t never reach the rows
 * whose window starts at or after t (K, V perturbed, V with NaN/Inf), and
 * tokens after t never reach rows at or before t (causal: Q, K, V; not
 * causal, window_right R: K, V of keys after t reach no row <= t - R). */
static void leaks(lpattn_ctx *cu) {
  const ct_shape s = {1, 4, 2, 320, 320, 128, LPATTN_F16, LPATTN_F32};
  const win_t ws[] = {{1, 100, -1, 4.0f, 0, 0, 0}, {1, 40, -1, 0, 0, 0, 0}, {0, 70, 30, 0, 0, 0, 0}};
  const int64_t ts[] = {20, 64, 90, 130, 200};
  for (int wi = 0; wi < 3; wi++) {
    const win_t *w = &ws[wi];
    for (int prec = 0; prec <= LPATTN_PREC_THRIFT; prec++) {
      lpattn_attn_params ap = params_of(w, (lpattn_precision)prec);
      ap.thrift_k = 2;
      int64_t bad_past = 0, bad_future = 0, rows = 0;
      for (int ti = 0; ti < 5; ti++) {
        const int64_t t = ts[ti];
        ct_prob p = ct_prob_make(&s, 0);
        ct_fill(&p.q, 0.2, 1.0), ct_fill(&p.k, 0.5, 1.0), ct_fill(&p.v, 0.0, 1.0);
        CHECK_STATUS(run(cu, &p, &ap), LPATTN_OK);
        const size_t no = p.o.bytes, nl = p.lse.bytes;
        float *o = malloc(no), *l = malloc(nl), *e = malloc(nl);
        memcpy(o, p.o.h.data, no), memcpy(l, p.lse.h.data, nl), memcpy(e, p.ent.h.data, nl);
        void *k0 = malloc(p.k.bytes), *v0 = malloc(p.v.bytes), *q0 = malloc(p.q.bytes);
        memcpy(k0, p.k.h.data, p.k.bytes), memcpy(v0, p.v.h.data, p.v.bytes), memcpy(q0, p.q.h.data, p.q.bytes);
        /* keys before t: rows i with lo(i) = i - left >= t */
        perturb(&p, &s, 0, t, 0, 0, 1);
        CHECK_STATUS(run(cu, &p, &ap), LPATTN_OK);
        if (t + w->left < s.Sq) bad_past += rows_differ(&p, o, l, e, &s, t + w->left, s.Sq);
        rows += s.Sq - (t + w->left) > 0 ? s.Sq - (t + w->left) : 0;
        /* tokens after t */
        memcpy(p.k.h.data, k0, p.k.bytes), memcpy(p.v.h.data, v0, p.v.bytes), memcpy(p.q.h.data, q0, p.q.bytes);
        const int64_t last = w->causal ? t : t - w->right - 1; /* rows <= last see no key > t */
        perturb(&p, &s, t + 1, s.Skv, w->causal ? t + 1 : s.Sq, s.Sq, 0);
        CHECK_STATUS(run(cu, &p, &ap), LPATTN_OK);
        if (last >= 0) bad_future += rows_differ(&p, o, l, e, &s, 0, last + 1), rows += last + 1;
        free(o), free(l), free(e), free(k0), free(v0), free(q0);
        ct_prob_free(&p);
      }
      printf("leak %-6s causal=%d window %d,%d softcap %g: %lld rows, %s\n", PN[prec], w->causal, w->left,
             w->right, (double)w->cap, (long long)rows * s.Hq, bad_past || bad_future ? "LEAKS" : "bitwise equal");
      CHECK(bad_past == 0 && bad_future == 0, "%s window %d,%d: %lld rows changed by keys before their window, "
            "%lld by later tokens", PN[prec], w->left, w->right, (long long)bad_past, (long long)bad_future);
    }
  }
}

/* UNSUPPORTED with an error containing want, and out untouched. */
static void expect(lpattn_status st, const char *want, const char *what) {
  CHECK(st == LPATTN_ERR_UNSUPPORTED, "%s: %s", what, lpattn_status_string(st));
  CHECK(strstr(lpattn_last_error(), want) != NULL, "%s: \"%s\" lacks \"%s\"", what, lpattn_last_error(), want);
}

static void refused(lpattn_ctx *cu) {
  enum { H = 2, S = 64, D = 64 };
  const size_t n = (size_t)H * S * D;
  uint16_t *x = ht_dalloc(2 * n), *o = ht_dalloc(2 * n);
  ht_dset(x, 0, 2 * n), ht_dset(o, 0x7f, 2 * n);
  lpattn_tensor t = lpattn_tensor_4d(x, LPATTN_F16, 1, H, S, D);
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F16, 1, H, S, D);
  const char *fields[3] = {"window_left", "window_right", "softcap"};
  char want[128];
  for (int f = 0; f < 3; f++) {
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.causal = f != 1;
    if (f == 0) p.window_left = 16;
    if (f == 1) p.window_right = 16;
    if (f == 2) p.softcap = 30.0f;
    /* (the backward takes them: tests/cuda/test_cuda_backward.c windows()) */
    /* static FP8's prefill (its sm_90a kernel has no window, no softcap) */
    p.precision = LPATTN_PREC_FP8_STATIC;
    snprintf(want, sizeof want, "params.%s: the %s backend's static FP8", fields[f], CT_NAME);
    expect(lpattn_attention(cu, &t, &t, &t, &to, &p, NULL), want, "FP8_STATIC prefill");
    /* PASA (every backend) */
    p.precision = LPATTN_PREC_HIGH, p.pasa = 1;
    snprintf(want, sizeof want, "params.%s", f == 1 ? "window_left" : fields[f]);
    expect(lpattn_attention(cu, &t, &t, &t, &to, &p, NULL), want, "PASA prefill");
  }
  /* decode through a cache */
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_kv_heads = cp.num_q_heads = H, cp.head_dim = D, cp.max_tokens = S, cp.tile = 64;
  lpattn_kv_cache *c = NULL;
  CHECK_STATUS(lpattn_kv_cache_create(cu, &cp, &c), LPATTN_OK);
  if (c) {
    lpattn_tensor k1 = lpattn_tensor_4d(x, LPATTN_F16, 1, H, 1, D);
    k1.stride[1] = S * D;
    CHECK_STATUS(lpattn_kv_cache_append(cu, c, 0, &k1, &k1, NULL), LPATTN_OK);
    lpattn_tensor o1 = lpattn_tensor_4d(o, LPATTN_F16, 1, H, 1, D);
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.window_left = 8;
#if defined(LPATTN_TEST_HIP) /* HIP's decode kernel has no window, no softcap yet */
    snprintf(want, sizeof want, "params.window_left: the %s backend's decode", CT_NAME);
    expect(lpattn_decode(cu, c, &k1, &o1, &p, NULL), want, "decode");
    lpattn_attn_params_init(&p);
    p.softcap = 50.0f;
    snprintf(want, sizeof want, "params.softcap: the %s backend's decode", CT_NAME);
    expect(lpattn_decode(cu, c, &k1, &o1, &p, NULL), want, "decode");
#else /* CUDA's paged decode takes them (tests/cuda/test_cuda_paged_window.c): into out of its own */
    uint16_t *od = ht_dalloc(2 * (size_t)H * D);
    lpattn_tensor o2 = lpattn_tensor_4d(od, LPATTN_F16, 1, H, 1, D);
    CHECK_STATUS(lpattn_decode(cu, c, &k1, &o2, &p, NULL), LPATTN_OK);
    lpattn_attn_params_init(&p);
    p.softcap = 50.0f;
    CHECK_STATUS(lpattn_decode(cu, c, &k1, &o2, &p, NULL), LPATTN_OK);
    ht_dsync();
    ht_dfree(od);
    (void)o1;
#endif
    lpattn_kv_cache_free(c);
  }
  /* nothing was written */
  uint16_t *h = malloc(2 * n);
  ht_down(h, o, 2 * n);
  int same = 1;
  for (size_t i = 0; i < n; i++) same &= h[i] == 0x7f7f;
  CHECK(same, "out was written by a refused call");
  free(h);
  ht_dfree(x), ht_dfree(o);
}

int main(void) {
  lpattn_ctx *cu = NULL, *ref = NULL;
  if (!ct_setup(&cu, &ref)) return test_skip("no usable GPU device");
  parities(cu, ref);
  leaks(cu);
  refused(cu);
  lpattn_free(cu), lpattn_free(ref);
  return test_finish();
}
