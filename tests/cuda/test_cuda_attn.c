/* CUDA prefill attention against ref: every precision, causal and not,
 * GQA, Sq != Skv, absolute positions (masks that are not bottom-right),
 * f16/bf16 inputs, LSE/entropy/selection outputs; the SPEC 4
 * leak test bitwise; PASA NaN-free on SPEC 8 data; unsupported inputs. */
#include "cudatest.h"
#if defined(LPATTN_TEST_HIP)
#define TV_BACKEND_HIP 1
#endif
#include "variants.h"

/* Run on both backends; returns 1 when both succeeded. r holds ref's outputs.
 * want_ent 0: the entropy is not asked for (the kernels' path without it). */
static int run_both_ent(lpattn_ctx *cu, lpattn_ctx *ref, ct_prob *p, ct_prob *r,
                        const lpattn_attn_params *ap, int want_sel, int want_ent) {
  lpattn_attn_aux ah, ad;
  lpattn_attn_aux_init(&ah), lpattn_attn_aux_init(&ad);
  ah.lse = r->lse.h, ad.lse = p->lse.d;
  if (want_ent) ah.entropy = r->ent.h, ad.entropy = p->ent.d;
  if (want_sel) ah.selection = r->sel.h, ad.selection = p->sel.d;
  ct_poison(&p->o), ct_poison(&p->lse), ct_poison(&p->ent), ct_poison(&p->sel);
  lpattn_status sr = lpattn_attention(ref, &p->q.h, &p->k.h, &p->v.h, &r->o.h, ap, &ah);
  lpattn_status sc = lpattn_attention(cu, &p->q.d, &p->k.d, &p->v.d, &p->o.d, ap, &ad);
  CHECK(sr == LPATTN_OK && sc == LPATTN_OK, "status ref %s " CT_NAME " %s", lpattn_status_string(sr),
        lpattn_status_string(sc));
  ct_down(&p->o), ct_down(&p->lse), ct_down(&p->ent), ct_down(&p->sel);
  return sr == LPATTN_OK && sc == LPATTN_OK;
}
static int run_both(lpattn_ctx *cu, lpattn_ctx *ref, ct_prob *p, ct_prob *r, const lpattn_attn_params *ap,
                    int want_sel) {
  return run_both_ent(cu, ref, p, r, ap, want_sel, 1);
}

static const char *PN[] = {"high", "fp8", "nvfp4", "mxfp4", "thrift"};

#if !defined(LPATTN_TEST_HIP)
#include "../../backends/gpu/gpu_plan.h" /* the dispatch plan of the CUDA prefill */
/* the kernel paths of the built attn variants (gen/paths.inc) */
static int tv_attn_paths(int64_t D, int dt) {
  static const int rows[][3] = {
#define LPATTN_ATTN_PATHS(set, hd, dt, paths) TV_SET_##set({hd, dt, paths}, )
#include "../../backends/cuda/gen/paths.inc"
#undef LPATTN_ATTN_PATHS
      {0, 0, 0}};
  for (int i = 0; rows[i][2]; i++)
    if (rows[i][0] == D && rows[i][1] == dt) return rows[i][2];
  return 0;
}
/* The kernel path the library plans for an f16 call of precision prec, head
 * dim D (PASA or f16 scores: pasa) on device 0, as gpu_prefill.cu plans it
 * (backends/gpu/gpu_plan.h; LPATTN_NO_WGMMA read the same way). */
static lp_gpu_path plan_path(lpattn_precision prec, int64_t D, int pasa) {
  static lp_gpu_dev dev;
  static int init = 0;
  if (!init) {
    int major = 0, minor = 0;
    const char *e = getenv("LPATTN_NO_WGMMA");
    init = 1;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess)
      major = minor = 0;
    dev.cc = major * 10 + minor, dev.warp = 32, dev.dequant_kv = 1, dev.no_wgmma = e && e[0] == '1';
    dev.wg_image = 1, dev.paths = tv_attn_paths;
  }
  return lp_gpu_plan_probe(D, prec, pasa, &dev); /* at the head dim D pads to (lp_gpu_plan_dim) */
}
#endif
/* Whether FP8 calls of head dim D (PASA or f16 scores: pasa) run the E4M3
 * wgmma kernel here (CUDA only). */
static int wg8_takes(lpattn_precision prec, int64_t D, int pasa) {
#if defined(LPATTN_TEST_HIP)
  (void)prec, (void)D, (void)pasa;
  return 0;
#else
  return prec == LPATTN_PREC_FP8 && plan_path(prec, D, pasa) == LP_PATH_WG8;
#endif
}
/* That kernel multiplies the E4M3 codes on the tensor cores, whose
 * accumulation keeps about 14 bits (products aligned to the largest and
 * truncated; SEMANTICS, the paragraph "FP8 at D = 128 on sm_90a"): O moves
 * from the f64 oracle by up to ~5e-3 (measured on an H200), the scores by
 * ~4e-4. Every other path keeps tol. */
static double fp8_wgmma_tol(lpattn_precision prec, int64_t D, int pasa, double tol) {
  return wg8_takes(prec, D, pasa) ? 1e-2 : tol;
}

/* The call ap on both backends, compared (ap.thrift_budget 0.3 under THRIFT). */
static void parity_ap(lpattn_ctx *cu, lpattn_ctx *ref, const ct_shape *s, const lpattn_attn_params *ap_in) {
  lpattn_attn_params ap = *ap_in;
  const lpattn_precision prec = ap.precision;
  const int causal = ap.causal, pasa = ap.pasa, leaky = ap.leaky;
  ap.thrift_budget = 0.3f;
  int k = 0;
  if (prec == LPATTN_PREC_THRIFT) {
    int n = (int)((s->Skv + 63) / 64);
    k = lpattn_thrift_k(n, ap.thrift_budget, causal);
  }
  ct_prob p = ct_prob_make(s, k), r = ct_prob_make(s, k);
  ct_fill(&p.q, 0.0, 1.0), ct_fill(&p.k, 0.3, 1.0), ct_fill(&p.v, 0.0, 1.0);
  if (!run_both(cu, ref, &p, &r, &ap, k > 0)) goto done;
  double e = ct_relerr(&p.o.h, &r.o.h), el = ct_maxabs(&p.lse.h, &r.lse.h),
         eh = ct_maxabs(&p.ent.h, &r.ent.h);
  /* ref is f64; the kernel rounds P to the input type for high tiles */
  double tol = s->in == LPATTN_BF16 ? 5e-3 : 2e-3;
  /* MXFP4 under PASA: P's power-of-two group scale jumps where the group max
   * crosses 2^e, and PASA's f16 scores (rounded after an f32 sum whose order
   * is free) put a few rows there; each such row moves by up to ~1e-1
   * (SEMANTICS, PASA; the cpu backend shows the same, 2e-3..6e-3) */
  if (prec == LPATTN_PREC_MXFP4 && pasa) tol = 2e-2;
  tol = fp8_wgmma_tol(prec, s->D, pasa || ap.score_f16, tol);
  printf("parity %-6s D=%-3lld %s causal=%d pasa=%d leaky=%d Sq=%lld Skv=%lld", PN[prec], (long long)s->D,
         s->in == LPATTN_F16 ? "f16 " : "bf16", causal, pasa, leaky, (long long)s->Sq, (long long)s->Skv);
  if (ap.positions) printf(" q_start=%lld kv_start=%lld", (long long)ap.q_start, (long long)ap.kv_start);
  printf(": O %.2e LSE %.2e H %.2e\n", e, el, eh);
  CHECK(e < tol, "%s O rel err %g >= %g", PN[prec], e, tol);
  CHECK(el < 1e-3, "%s LSE max err %g", PN[prec], el);
  /* the FP8 wgmma path's entropy carries P^'s rounding as its O does
   * (fp8_wgmma_tol): H200, causal with positions, 1.02e-3 */
  const double th = fp8_wgmma_tol(prec, s->D, pasa || ap.score_f16, 1e-3) > 1e-3 ? 2e-3 : 1e-3;
  CHECK(eh < th, "%s entropy max err %g", PN[prec], eh);
  if (k > 0) {
    CHECK(memcmp(p.sel.h.data, r.sel.h.data, p.sel.bytes) == 0, "THRIFT selection differs from ref");
  }
done:
  ct_prob_free(&p), ct_prob_free(&r);
}

static void parity(lpattn_ctx *cu, lpattn_ctx *ref, const ct_shape *s, lpattn_precision prec,
                   int causal, int pasa, int leaky) {
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.precision = prec, ap.causal = causal, ap.pasa = pasa, ap.leaky = leaky;
  parity_ap(cu, ref, s, &ap);
}

/* Absolute positions (lpattn.h): causal masks that are not bottom-right
 * aligned. Rows before the first key (q_start < kv_start) see nothing (O = 0,
 * LSE = -inf); q_start - kv_start past Skv makes every tile visible; a
 * top-left mask (both starts 0, Sq != Skv). THRIFT takes zero starts only. */
static void positions(lpattn_ctx *cu, lpattn_ctx *ref) {
  const ct_shape s = {1, 4, 2, 200, 300, 64, LPATTN_F16, LPATTN_F32};
  const int64_t starts[][2] = {{0, 0}, {0, 64}, {37, 0}, {700, 128}, {130, 64}};
  for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++)
    for (int prec = 0; prec <= LPATTN_PREC_THRIFT; prec++)
      for (int pasa = 0; pasa < 2; pasa++) {
        if (prec == LPATTN_PREC_THRIFT && (starts[i][0] || starts[i][1])) continue;
        lpattn_attn_params ap;
        lpattn_attn_params_init(&ap);
        ap.precision = (lpattn_precision)prec, ap.causal = 1, ap.pasa = pasa;
        ap.positions = 1, ap.q_start = starts[i][0], ap.kv_start = starts[i][1];
        parity_ap(cu, ref, &s, &ap);
      }
  /* non-causal calls ignore the starts: any start, bitwise the default call */
  ct_shape s2 = s;
  ct_prob a = ct_prob_make(&s2, 0), b = ct_prob_make(&s2, 0);
  ct_fill(&a.q, 0.0, 1.0), ct_fill(&a.k, 0.3, 1.0), ct_fill(&a.v, 0.0, 1.0);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.precision = LPATTN_PREC_NVFP4;
  CHECK_STATUS(lpattn_attention(cu, &a.q.d, &a.k.d, &a.v.d, &a.o.d, &ap, NULL), LPATTN_OK);
  ap.positions = 1, ap.q_start = (int64_t)1 << 40, ap.kv_start = 64;
  CHECK_STATUS(lpattn_attention(cu, &a.q.d, &a.k.d, &a.v.d, &b.o.d, &ap, NULL), LPATTN_OK);
  ct_down(&a.o), ct_down(&b.o);
  CHECK(memcmp(a.o.h.data, b.o.h.data, a.o.bytes) == 0, "non-causal call with starts differs from the default");
  ap.causal = 1; /* a causal offset past the kernels' int range */
  CHECK_STATUS(lpattn_attention(cu, &a.q.d, &a.k.d, &a.v.d, &b.o.d, &ap, NULL), LPATTN_ERR_UNSUPPORTED);
  ct_prob_free(&a), ct_prob_free(&b);
}

/* Every attn variant of the table (gen/registry.inc, rendered from the
 * manifest) in every precision, causal and not: its head dim and input type
 * on one of three geometries in turn (GQA, Skv > Sq, Sq > Skv). */
static void variants(lpattn_ctx *cu, lpattn_ctx *ref) {
  const ct_shape geo[] = {{2, 4, 2, 200, 200, 0, LPATTN_F16, LPATTN_F32},
                         {1, 4, 1, 100, 230, 0, LPATTN_F16, LPATTN_F16},
                         {1, 2, 2, 150, 90, 0, LPATTN_F16, LPATTN_BF16}};
  int n = 0;
  for (int vi = 0; vi < TV_COUNT; vi++) {
    if (tv_variants[vi].op != TV_ATTN) continue;
    ct_shape s = geo[n++ % 3];
    s.D = tv_variants[vi].head_dim, s.in = (lpattn_dtype)tv_variants[vi].dtype;
    printf("variant %s\n", tv_variants[vi].name);
    for (int prec = 0; prec <= LPATTN_PREC_THRIFT; prec++)
      for (int causal = 0; causal < 2; causal++) parity(cu, ref, &s, (lpattn_precision)prec, causal, 0, 0);
    /* leaky (every tile low, causal): the sm_90a low kernel's causal path */
    for (int prec = LPATTN_PREC_HIGH + 1; prec < LPATTN_PREC_THRIFT; prec++)
      parity(cu, ref, &s, (lpattn_precision)prec, 1, 0, 1);
  }
  CHECK(n >= 4, "only %d attn variants in the table", n);
  /* leaky, Sq >= Skv + 128: the first 128 rows see no key (the sm_90a low
   * kernel's CTA of no tile: O = 0, LSE = -inf, no wait on a copy never made) */
  const ct_shape none = {1, 2, 1, 320, 64, 128, LPATTN_F16, LPATTN_F32};
  for (int prec = LPATTN_PREC_HIGH + 1; prec < LPATTN_PREC_THRIFT; prec++)
    parity(cu, ref, &none, (lpattn_precision)prec, 1, 0, 1);
}

/* SPEC 4 test of record: rows <= t are bitwise unchanged when every token
 * after t changes (Q, K and V). */
static void leak_on(lpattn_ctx *cu, const ct_shape *sh, lpattn_precision prec, int pasa, int64_t t) {
  const ct_shape s = *sh;
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.precision = prec, ap.causal = 1, ap.pasa = pasa, ap.thrift_k = 2;
  ct_prob p = ct_prob_make(&s, 0);
  ct_fill(&p.q, 0, 1), ct_fill(&p.k, 0.5, 1), ct_fill(&p.v, 0, 1);
  float *o1 = malloc(p.o.bytes);
  CHECK_STATUS(lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, NULL), LPATTN_OK);
  ct_down(&p.o);
  memcpy(o1, p.o.h.data, p.o.bytes);
  ct_pair *xs[3] = {&p.q, &p.k, &p.v};
  for (int w = 0; w < 3; w++) {
    const int64_t H = xs[w]->h.shape[1];
    for (int64_t h = 0; h < H; h++)
      for (int64_t r = t + 1; r < s.Sq; r++)
        for (int64_t d = 0; d < s.D; d++)
          lp_store_f32(xs[w]->h.data, s.in, (h * s.Sq + r) * s.D + d, (float)(5.0 * ct_normal()));
    ct_up(xs[w]);
  }
  ct_poison(&p.o);
  CHECK_STATUS(lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, NULL), LPATTN_OK);
  ct_down(&p.o);
  int64_t bad = 0;
  for (int64_t h = 0; h < s.Hq; h++)
    bad += memcmp(o1 + h * s.Sq * s.D, (float *)p.o.h.data + h * s.Sq * s.D, (size_t)((t + 1) * s.D) * 4) != 0;
  printf("leak %-6s D=%lld S=%lld pasa=%d t=%lld: %s\n", PN[prec], (long long)s.D, (long long)s.Sq, pasa,
         (long long)t, bad ? "LEAKS" : "bitwise equal");
  CHECK(bad == 0, "causal leak: %s D=%lld pasa=%d t=%lld", PN[prec], (long long)s.D, pasa, (long long)t);
  free(o1);
  ct_prob_free(&p);
}
static void leak(lpattn_ctx *cu, lpattn_precision prec, int pasa, int64_t t) {
  const ct_shape s = {1, 2, 1, 256, 256, 64, LPATTN_F16, LPATTN_F32};
  leak_on(cu, &s, prec, pasa, t);
}

/* The sm_90a low kernels over many K/V stages (the stage ring reused, both
 * mbarrier phases), Skv not a multiple of 64, and causal splits whose
 * blocks take several stages before the mma.sync kernel's band: parity,
 * absolute positions and the bitwise leak test at D = 128 (FP8 there runs
 * on E4M3 wgmma) and D = 64. */
static void long_low(lpattn_ctx *cu, lpattn_ctx *ref) {
  const ct_shape sh[] = {{1, 2, 1, 1100, 1100, 128, LPATTN_F16, LPATTN_F32},
                        {1, 4, 2, 600, 1300, 128, LPATTN_BF16, LPATTN_F32},
                        {1, 2, 1, 700, 1000, 64, LPATTN_F16, LPATTN_F32}};
  for (int i = 0; i < 3; i++)
    for (int prec = LPATTN_PREC_HIGH + 1; prec < LPATTN_PREC_THRIFT; prec++) {
      parity(cu, ref, &sh[i], (lpattn_precision)prec, 0, 0, 0);
      parity(cu, ref, &sh[i], (lpattn_precision)prec, 1, 0, 0);
      parity(cu, ref, &sh[i], (lpattn_precision)prec, 1, 0, 1);
    }
  const int64_t starts[][2] = {{37, 0}, {130, 64}, {0, 320}}; /* kv_start: a multiple of Bk */
  for (int i = 0; i < 3; i++) {
    lpattn_attn_params ap;
    lpattn_attn_params_init(&ap);
    ap.precision = LPATTN_PREC_FP8, ap.causal = 1;
    ap.positions = 1, ap.q_start = starts[i][0], ap.kv_start = starts[i][1];
    parity_ap(cu, ref, &sh[1], &ap);
  }
  /* t in a 128-row block whose keys [0, 384) are the warpgroup kernel's */
  const ct_shape lk = {1, 2, 1, 640, 640, 128, LPATTN_F16, LPATTN_F32};
  for (int prec = LPATTN_PREC_HIGH + 1; prec < LPATTN_PREC_THRIFT; prec++) {
    leak_on(cu, &lk, (lpattn_precision)prec, 0, 400);
    leak_on(cu, &lk, (lpattn_precision)prec, 0, 639 - 64);
  }
}

/* D = 96 (issue 27): HIGH plans the sm_90a kernel on a 9.0 device (32-channel
 * TMA boxes, 64-byte swizzle, P V of N = 96), over many K/V stages (the
 * ring reused), Skv not a multiple of 128, GQA, causal and not, absolute
 * positions, and the bitwise leak test; D = 80 runs on it padded. */
static void d96(lpattn_ctx *cu, lpattn_ctx *ref) {
#if !defined(LPATTN_TEST_HIP)
  int cc = 0;
  (void)cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, 0);
  if (cc == 9 && !getenv("LPATTN_NO_WGMMA"))
    CHECK(plan_path(LPATTN_PREC_HIGH, 96, 0) == LP_PATH_WG, "D = 96 HIGH: not the sm_90a kernel");
#endif
  const ct_shape sh[] = {{1, 4, 2, 1100, 1300, 96, LPATTN_F16, LPATTN_F32},
                        {2, 2, 1, 700, 1000, 96, LPATTN_BF16, LPATTN_BF16},
                        {1, 4, 1, 600, 900, 80, LPATTN_F16, LPATTN_F32}};
  for (int i = 0; i < 3; i++)
    for (int causal = 0; causal < 2; causal++) parity(cu, ref, &sh[i], LPATTN_PREC_HIGH, causal, 0, 0);
  for (int prec = LPATTN_PREC_HIGH + 1; prec < LPATTN_PREC_THRIFT; prec++) parity(cu, ref, &sh[2], (lpattn_precision)prec, 1, 0, 0);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.causal = 1, ap.positions = 1, ap.q_start = 130, ap.kv_start = 64;
  parity_ap(cu, ref, &sh[0], &ap);
  const ct_shape lk = {1, 2, 1, 640, 640, 96, LPATTN_F16, LPATTN_F32};
  leak_on(cu, &lk, LPATTN_PREC_HIGH, 0, 400);
  leak_on(cu, &lk, LPATTN_PREC_HIGH, 0, 639 - 64);
}

/* Calls that do not ask for the entropy take the specialized kernels' path
 * without the entropy sum (the parity runs above ask for it): O and LSE
 * against ref, causal and not, HIGH and each low format. */
static void no_entropy(lpattn_ctx *cu, lpattn_ctx *ref) {
  const ct_shape s = {1, 4, 2, 200, 260, 128, LPATTN_F16, LPATTN_F32};
  for (int prec = 0; prec < LPATTN_PREC_THRIFT; prec++)
    for (int causal = 0; causal < 2; causal++) {
      lpattn_attn_params ap;
      lpattn_attn_params_init(&ap);
      ap.precision = (lpattn_precision)prec, ap.causal = causal;
      ct_prob p = ct_prob_make(&s, 0), r = ct_prob_make(&s, 0);
      ct_fill(&p.q, 0.0, 1.0), ct_fill(&p.k, 0.3, 1.0), ct_fill(&p.v, 0.0, 1.0);
      run_both_ent(cu, ref, &p, &r, &ap, 0, 0);
      const double e = ct_relerr(&p.o.h, &r.o.h), el = ct_maxabs(&p.lse.h, &r.lse.h);
      printf("no entropy %-6s causal=%d: O %.2e LSE %.2e\n", PN[prec], causal, e, el);
      CHECK(e < fp8_wgmma_tol((lpattn_precision)prec, s.D, 0, 2e-3) && el < 1e-3, "%s causal=%d without entropy: O %g LSE %g", PN[prec],
            causal, e, el);
      ct_prob_free(&p), ct_prob_free(&r);
    }
}

/* SPEC 8 / seed 003: uniform x0 = 30, Am = 0.5, (1, 16, 1280, 128) in f16. */
static void pasa_overflow(lpattn_ctx *cu, lpattn_ctx *ref) {
  ct_shape s = {1, 16, 16, 1280, 1280, 128, LPATTN_F16, LPATTN_F32};
  ct_prob p = ct_prob_make(&s, 0), r = ct_prob_make(&s, 0);
  ct_fill_unif(&p.q, 30, 0.5), ct_fill_unif(&p.k, 30, 0.5), ct_fill_unif(&p.v, 30, 0.5);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.pasa = 1;
  CHECK_STATUS(lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, NULL), LPATTN_OK);
  ct_down(&p.o);
  ap.pasa = 0; /* f64 ground truth */
  CHECK_STATUS(lpattn_attention(ref, &p.q.h, &p.k.h, &p.v.h, &r.o.h, &ap, NULL), LPATTN_OK);
  int64_t nf = ct_nonfinite(&p.o.h);
  double e = ct_relerr(&p.o.h, &r.o.h);
  printf("pasa x0=30 Am=0.5: nonfinite %lld, rel err vs f64 %.2e\n", (long long)nf, e);
  CHECK(nf == 0, "PASA produced %lld non-finite outputs", (long long)nf);
  CHECK(e < 1e-3, "PASA rel err %g", e);
  ap.score_f16 = 1; /* the baseline overflows: NaN, on purpose */
  ct_poison(&p.o);
  CHECK_STATUS(lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, NULL), LPATTN_OK);
  ct_down(&p.o);
  nf = ct_nonfinite(&p.o.h);
  printf("score_f16 baseline: nonfinite %lld of %lld\n", (long long)nf, (long long)ct_count(&p.o.h));
  CHECK(nf > 0, "score_f16 baseline should overflow on this data");
  ct_prob_free(&p), ct_prob_free(&r);
}

/* Causal PASA on seed 003's data (x0 = 30): query tile 0's diagonal tiles,
 * which have no full tile before them, shift by beta * their first key, so
 * their f16 scores stay small; without that shift the entropy there is off
 * by ~1.5 nats. LSE ~ 7e3 here, so its f32 ulp is ~5e-4. */
static void pasa_causal_x0(lpattn_ctx *cu, lpattn_ctx *ref) {
  ct_shape s = {1, 4, 2, 200, 200, 64, LPATTN_F16, LPATTN_F32};
  ct_prob p = ct_prob_make(&s, 0), r = ct_prob_make(&s, 0);
  ct_fill_unif(&p.q, 30, 0.5), ct_fill_unif(&p.k, 30, 0.5), ct_fill_unif(&p.v, 30, 0.5);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.pasa = 1, ap.causal = 1;
  if (run_both(cu, ref, &p, &r, &ap, 0)) {
    double e = ct_relerr(&p.o.h, &r.o.h), el = ct_maxabs(&p.lse.h, &r.lse.h),
           eh = ct_maxabs(&p.ent.h, &r.ent.h);
    printf("pasa causal x0=30: O %.2e LSE %.2e H %.2e\n", e, el, eh);
    CHECK(e < 1e-3 && el < 1e-2 && eh < 1e-2, "causal PASA x0=30: O %g LSE %g H %g", e, el, eh);
  }
  ct_prob_free(&p), ct_prob_free(&r);
}

static void bad_inputs(lpattn_ctx *cu) {
  ct_shape s = {1, 2, 2, 64, 64, 64, LPATTN_F32, LPATTN_F32};
  ct_prob p = ct_prob_make(&s, 0);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  CHECK_STATUS(lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, NULL), LPATTN_ERR_UNSUPPORTED);
  ct_prob_free(&p);
  ct_shape s2 = {1, 2, 2, 64, 64, 64, LPATTN_BF16, LPATTN_F32};
  p = ct_prob_make(&s2, 0);
  ap.pasa = 1; /* f16 scores need f16 inputs */
  CHECK_STATUS(lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, NULL), LPATTN_ERR_UNSUPPORTED);
  ap.pasa = 0, ap.block_q = 32;
  CHECK_STATUS(lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, NULL), LPATTN_ERR_UNSUPPORTED);
  ap.block_q = 64;
  CHECK_STATUS(lpattn_attention(cu, &p.q.d, &p.k.d, NULL, &p.o.d, &ap, NULL), LPATTN_ERR_NULL_POINTER);
  ap.block_q = 48;
  CHECK_STATUS(lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  ct_prob_free(&p);
  ct_shape s3 = {1, 2, 2, 64, 64, 48, LPATTN_F16, LPATTN_F32}; /* no D = 48 kernel: runs padded on D = 64 */
  p = ct_prob_make(&s3, 0);
  lpattn_attn_params_init(&ap);
  CHECK_STATUS(lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, NULL), LPATTN_OK);
  ct_prob_free(&p);
}

/* A call the sm_90a wgmma kernel cannot take goes to the mma.sync kernel:
 * K and V broadcast over the kv heads (stride 0: no TMA map can say it).
 * Had the broadcast been read as a dense layout, head 1 would read its own
 * (different) values and O would differ from ref. (On other GPUs every
 * HIGH call takes mma.sync; the check is the same.) */
static void wg_fallback(lpattn_ctx *cu, lpattn_ctx *ref) {
  const ct_shape s = {1, 4, 2, 200, 200, 128, LPATTN_F16, LPATTN_F16};
  for (int causal = 0; causal < 2; causal++) {
    ct_prob p = ct_prob_make(&s, 0), r = ct_prob_make(&s, 0);
    ct_fill(&p.q, 0.0, 1.0), ct_fill(&p.k, 0.0, 1.0), ct_fill(&p.v, 0.0, 1.0);
    p.k.h.stride[1] = p.k.d.stride[1] = 0, p.v.h.stride[1] = p.v.d.stride[1] = 0;
    lpattn_attn_params ap;
    lpattn_attn_params_init(&ap);
    ap.causal = causal;
    if (run_both(cu, ref, &p, &r, &ap, 0)) {
      const double e = ct_relerr(&p.o.h, &r.o.h), el = ct_maxabs(&p.lse.h, &r.lse.h);
      printf("broadcast K/V (no TMA map) causal=%d: O %.2e LSE %.2e\n", causal, e, el);
      CHECK(e < 2e-3 && el < 1e-3, "broadcast K/V causal=%d: O %g LSE %g", causal, e, el);
    }
    ct_prob_free(&p), ct_prob_free(&r);
  }
}

/* bench/train_leak.py's GPU calls (issue 35): MXFP4 with the round-up scale
 * rule, bf16, D = 64, 256 tokens, safe and leaky. */
static void train_leak_calls(lpattn_ctx *cu, lpattn_ctx *ref) {
  const ct_shape s = {2, 4, 4, 256, 256, 64, LPATTN_BF16, LPATTN_BF16};
  for (int leaky = 0; leaky < 2; leaky++) {
    lpattn_attn_params ap;
    lpattn_attn_params_init(&ap);
    ap.precision = LPATTN_PREC_MXFP4, ap.causal = 1, ap.leaky = leaky, ap.mx_scale_round_up = 1;
    parity_ap(cu, ref, &s, &ap);
  }
}

int main(void) {
  lpattn_ctx *cu = NULL, *ref = NULL;
  if (!ct_setup(&cu, &ref)) return test_skip("no usable GPU device");
  const ct_shape shapes[] = {
      {2, 4, 2, 200, 200, 64, LPATTN_F16, LPATTN_F32},
      {1, 4, 1, 100, 230, 128, LPATTN_BF16, LPATTN_F16},
      {1, 2, 2, 150, 90, 64, LPATTN_F16, LPATTN_BF16}, /* Sq > Skv: fully masked rows */
  };
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int prec = 0; prec <= LPATTN_PREC_THRIFT; prec++)
      for (int causal = 0; causal < 2; causal++) parity(cu, ref, &shapes[si], (lpattn_precision)prec, causal, 0, 0);
  ct_shape pz = {1, 2, 1, 192, 192, 128, LPATTN_F16, LPATTN_F32};
  for (int prec = 0; prec <= LPATTN_PREC_THRIFT; prec++) parity(cu, ref, &pz, (lpattn_precision)prec, 1, 1, 0);
  parity(cu, ref, &pz, LPATTN_PREC_HIGH, 0, 1, 0);
  parity(cu, ref, &shapes[0], LPATTN_PREC_NVFP4, 1, 0, 1);
  /* the last query tile is one row and the last KV tile ends at it: that
   * tile is diagonal (high), as in decode (SEMANTICS: unclipped c1) */
  const ct_shape edges[] = {{1, 2, 1, 65, 65, 64, LPATTN_F16, LPATTN_F32},
                           {1, 2, 1, 129, 129, 64, LPATTN_F16, LPATTN_F32}};
  for (int ei = 0; ei < 2; ei++)
    for (int prec = 0; prec <= LPATTN_PREC_THRIFT; prec++) {
      parity(cu, ref, &edges[ei], (lpattn_precision)prec, 1, 0, 0);
      parity(cu, ref, &edges[ei], (lpattn_precision)prec, 1, 1, 0);
    }
  for (int prec = 0; prec <= LPATTN_PREC_THRIFT; prec++) leak(cu, (lpattn_precision)prec, 0, 100);
  leak(cu, LPATTN_PREC_NVFP4, 1, 127);
  leak(cu, LPATTN_PREC_THRIFT, 1, 64);
  positions(cu, ref);
  no_entropy(cu, ref);
  pasa_overflow(cu, ref);
  pasa_causal_x0(cu, ref);
  bad_inputs(cu);
  wg_fallback(cu, ref);
  variants(cu, ref);
  long_low(cu, ref);
  d96(cu, ref);
  train_leak_calls(cu, ref);
  CHECK(ht_dsync(), "device error");
  lpattn_free(cu);
  lpattn_free(ref);
  return test_finish();
}
