/* HIP backend against ref: prefill attention in every precision, mask,
 * PASA and dtype (O, LSE, entropy, THRIFT selection), what it rejects, the
 * state merge, and lpattn_quantize/dequantize (bit-exact). The low precisions must
 * also differ from HIGH by much more than from ref, so a path that silently
 * computed in high precision would fail. */
#include "hiptest.h"
#define TV_BACKEND_HIP 1
#include "variants.h"

typedef struct {
  const char *name;
  lpattn_precision prec;
  lpattn_format low;
  int pasa, score_f16, mx_up;
} variant;

static const variant variants[] = {
    {"high", LPATTN_PREC_HIGH, LPATTN_FMT_NVFP4, 0, 0, 0},
    {"fp8", LPATTN_PREC_FP8, LPATTN_FMT_FP8, 0, 0, 0},
    {"nvfp4", LPATTN_PREC_NVFP4, LPATTN_FMT_NVFP4, 0, 0, 0},
    {"mxfp4", LPATTN_PREC_MXFP4, LPATTN_FMT_MXFP4, 0, 0, 0},
    {"mxfp4-up", LPATTN_PREC_MXFP4, LPATTN_FMT_MXFP4, 0, 0, 1},
    {"thrift", LPATTN_PREC_THRIFT, LPATTN_FMT_NVFP4, 0, 0, 0},
    {"thrift-fp8", LPATTN_PREC_THRIFT, LPATTN_FMT_FP8, 0, 0, 0},
    {"high-pasa", LPATTN_PREC_HIGH, LPATTN_FMT_NVFP4, 1, 0, 0},
    {"nvfp4-pasa", LPATTN_PREC_NVFP4, LPATTN_FMT_NVFP4, 1, 0, 0},
    {"high-score16", LPATTN_PREC_HIGH, LPATTN_FMT_NVFP4, 0, 1, 0},
};

typedef struct {
  float *o, *l, *h;
  int32_t *sel;
} result;

static void res_alloc(result *r, ht_shape sh, int64_t nsel) {
  r->o = malloc(4 * (size_t)ht_nq(sh));
  r->l = malloc(4 * (size_t)ht_rows(sh)), r->h = malloc(4 * (size_t)ht_rows(sh));
  r->sel = malloc(4 * (size_t)(nsel ? nsel : 1));
}
static void res_free(result *r) { free(r->o), free(r->l), free(r->h), free(r->sel); }

static double relerr(const float *a, const float *b, int64_t n) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)a[i] - b[i];
    num += d * d, den += (double)b[i] * b[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Largest |a - b| over rows; -inf must meet -inf, NaN counts as infinite. */
static double row_diff(const float *a, const float *b, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; i++) {
    if (a[i] == b[i]) continue;
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= m)) m = isnan(d) ? INFINITY : d;
  }
  return m;
}

static void one_l(lpattn_ctx *hip, lpattn_ctx *ref, ht_shape sh, lpattn_dtype dt, int Bq, int Bk,
                  int causal, const variant *va, int bshd, int nan_at) {
  ht_rng r = {(uint64_t)(sh.D * 131 + sh.Sq * 7 + causal)};
  float *q = malloc(4 * (size_t)ht_nq(sh)), *k = malloc(4 * (size_t)ht_nkv(sh));
  float *v = malloc(4 * (size_t)ht_nkv(sh));
  /* a mean offset on q and k, so PASA's shift and the THRIFT means matter */
  ht_fill(&r, q, ht_nq(sh), 0.4, 1.0), ht_fill(&r, k, ht_nkv(sh), 0.6, 1.0);
  ht_fill(&r, v, ht_nkv(sh), 0.0, 1.0);
  if (nan_at >= 0) k[nan_at] = NAN; /* one key's group: only rows that see it turn NaN */
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = va->prec, p.thrift_low = va->low, p.pasa = va->pasa, p.score_f16 = va->score_f16;
  p.mx_scale_round_up = va->mx_up, p.causal = causal, p.block_q = Bq, p.block_k = Bk;
  p.thrift_budget = 0.3f;
  const int nkt = (int)((sh.Skv + Bk - 1) / Bk), nqt = (int)((sh.Sq + Bq - 1) / Bq);
  const int ksel = va->prec == LPATTN_PREC_THRIFT ? lpattn_thrift_k(nkt, 0.3f, causal) : 0;
  const int64_t nsel = sh.B * sh.Hq * nqt * ksel;
  result a, b, hi;
  res_alloc(&a, sh, nsel), res_alloc(&b, sh, nsel), res_alloc(&hi, sh, 0);
  lpattn_status sa = ht_attention_l(hip, sh, dt, q, k, v, &p, a.o, a.l, a.h, ksel ? a.sel : NULL,
                                    ksel, bshd);
  lpattn_status sb = ht_attention_l(ref, sh, dt, q, k, v, &p, b.o, b.l, b.h, ksel ? b.sel : NULL,
                                    ksel, bshd);
  if (sa == LPATTN_ERR_UNSUPPORTED && sh.D == 256) { /* only with -Dvariants=all */
    printf("D=256: not built in this variant set\n");
    res_free(&a), res_free(&b), res_free(&hi);
    free(q), free(k), free(v);
    return;
  }
  CHECK(sa == LPATTN_OK && sb == LPATTN_OK, "%s: status hip %s ref %s", va->name,
        lpattn_status_string(sa), lpattn_status_string(sb));
  /* NaN where ref has NaN, and nowhere else; then compare the rest */
  int64_t nan_a = 0, nan_b = 0, nan_mismatch = 0;
  for (int64_t i = 0; i < ht_nq(sh); i++) {
    nan_a += isnan(a.o[i]), nan_b += isnan(b.o[i]);
    nan_mismatch += isnan(a.o[i]) != isnan(b.o[i]);
    if (isnan(a.o[i]) && isnan(b.o[i])) a.o[i] = b.o[i] = 0.0f;
  }
  CHECK(!nan_mismatch, "%s: NaN pattern differs (%lld hip, %lld ref)", va->name, (long long)nan_a,
        (long long)nan_b);
  if (nan_at >= 0) CHECK(nan_b > 0 && nan_b < ht_nq(sh), "%s: ref NaN count %lld", va->name, (long long)nan_b);
  for (int64_t i = 0; i < ht_rows(sh); i++)
    if (isnan(a.l[i]) && isnan(b.l[i])) a.l[i] = b.l[i] = a.h[i] = b.h[i] = 0.0f;
  const double e = relerr(a.o, b.o, ht_nq(sh));
  const double el = row_diff(a.l, b.l, ht_rows(sh)), eh = row_diff(a.h, b.h, ht_rows(sh));
  /* f32 accumulation against ref's f64; PASA/score_f16 round to f16 (one
   * f16 ulp may flip); FP4/FP8 re-round P, where a flip moves one code. */
  const int f16ish = va->pasa || va->score_f16 || dt != LPATTN_F32;
  /* bf16 inputs: P enters the P V product in bf16 (2^-9), as on CUDA
   * (tests/cuda/test_cuda_attn.c takes 5e-3 there too) */
  const double tol = va->prec != LPATTN_PREC_HIGH || dt == LPATTN_BF16 ? 5e-3 : f16ish ? 2e-3 : 2e-5;
  const double tol_row = va->prec != LPATTN_PREC_HIGH || f16ish ? 2e-2 : 1e-4;
  printf("D=%3lld %-4s Bq=%3d Bk=%3d Sq=%3lld Skv=%3lld causal=%d%s%s %-12s O relerr %.2e  lse %.1e  "
         "ent %.1e\n", (long long)sh.D, dt == LPATTN_F32 ? "f32" : dt == LPATTN_F16 ? "f16" : "bf16",
         Bq, Bk, (long long)sh.Sq, (long long)sh.Skv, causal, bshd ? " bshd" : "",
         nan_at >= 0 ? " nan" : "", va->name, e, el, eh);
  CHECK(e < tol, "%s D=%lld: O relerr %.3e >= %.1e", va->name, (long long)sh.D, e, tol);
  CHECK(el < tol_row && eh < tol_row, "%s: lse diff %.3e entropy diff %.3e", va->name, el, eh);
  if (ksel)
    CHECK(!memcmp(a.sel, b.sel, 4 * (size_t)nsel), "%s: THRIFT selection differs", va->name);
  if (va->prec != LPATTN_PREC_HIGH && va->prec != LPATTN_PREC_THRIFT && nan_at < 0) {
    lpattn_attn_params ph = p;
    ph.precision = LPATTN_PREC_HIGH;
    ht_attention(ref, sh, dt, q, k, v, &ph, hi.o, NULL, NULL, NULL, 0);
    const double eq = relerr(b.o, hi.o, ht_nq(sh));
    /* with bf16 inputs the kernel's own floor (bf16 P, ~2e-3) is part of e */
    const double floor = dt == LPATTN_BF16 ? 2.5e-3 : 0.0;
    CHECK(e < 0.1 * eq + floor, "%s: hip-ref %.2e not far below the quantization error %.2e", va->name, e, eq);
  }
  res_free(&a), res_free(&b), res_free(&hi);
  free(q), free(k), free(v);
}
static void one(lpattn_ctx *hip, lpattn_ctx *ref, ht_shape sh, lpattn_dtype dt, int Bq, int Bk,
                int causal, const variant *va) {
  one_l(hip, ref, sh, dt, Bq, Bk, causal, va, 0, -1);
}

/* Causal PASA on seed 003's data (x0 = 30): a diagonal tile with no full
 * tile before it (query tile 0) shifts by beta * its first key, so its f16
 * scores stay small; with no shift the entropy there is off by ~1.5 nats.
 * LSE ~ 7e3 here (f32 ulp ~5e-4). */
static void pasa_causal_x0(lpattn_ctx *hip, lpattn_ctx *ref) {
  const ht_shape sh = {1, 4, 2, 150, 150, 64};
  ht_rng r = {12345};
  float *q = malloc(4 * (size_t)ht_nq(sh)), *k = malloc(4 * (size_t)ht_nkv(sh));
  float *v = malloc(4 * (size_t)ht_nkv(sh));
  ht_fill(&r, q, ht_nq(sh), 30.0, 0.3), ht_fill(&r, k, ht_nkv(sh), 30.0, 0.3);
  ht_fill(&r, v, ht_nkv(sh), 30.0, 0.3);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.causal = 1, p.pasa = 1;
  result a, b;
  res_alloc(&a, sh, 0), res_alloc(&b, sh, 0);
  lpattn_status sa = ht_attention(hip, sh, LPATTN_F16, q, k, v, &p, a.o, a.l, a.h, NULL, 0);
  lpattn_status sb = ht_attention(ref, sh, LPATTN_F16, q, k, v, &p, b.o, b.l, b.h, NULL, 0);
  CHECK(sa == LPATTN_OK && sb == LPATTN_OK, "pasa x0: status hip %s ref %s", lpattn_status_string(sa),
        lpattn_status_string(sb));
  const double e = relerr(a.o, b.o, ht_nq(sh));
  const double el = row_diff(a.l, b.l, ht_rows(sh)), eh = row_diff(a.h, b.h, ht_rows(sh));
  printf("causal pasa x0=30: O relerr %.2e  lse %.1e  ent %.1e\n", e, el, eh);
  CHECK(e < 1e-3 && el < 1e-2 && eh < 2e-2, "causal pasa x0=30: O %.3e lse %.3e ent %.3e", e, el, eh);
  res_free(&a), res_free(&b);
  free(q), free(k), free(v);
}

/* SPEC 7 merge: hip against core's host merge, entropy merged and not. */
static void merge(lpattn_ctx *hip, lpattn_ctx *ref) {
  const int64_t B = 2, H = 3, S = 37, D = 64, n = B * H * S * D, m = B * H * S;
  ht_rng r = {5};
  float *x[6], *res[2][3];
  for (int i = 0; i < 6; i++) x[i] = malloc(4 * (size_t)n);
  ht_fill(&r, x[0], n, 0, 1), ht_fill(&r, x[1], n, 0, 1);
  ht_fill(&r, x[2], m, 3, 2), ht_fill(&r, x[3], m, 3, 2), ht_fill(&r, x[4], m, 2, 1);
  ht_fill(&r, x[5], m, 2, 1);
  x[2][0] = -INFINITY, x[2][1] = x[3][1] = -INFINITY; /* empty partials */
  for (int with_h = 0; with_h < 2; with_h++) {
    for (int c = 0; c < 2; c++) {
      lpattn_ctx *ctx = c ? ref : hip;
      const int dev = !c;
      void *oa = ht_put(x[0], n, LPATTN_F16, dev), *ob = ht_put(x[1], n, LPATTN_F32, dev);
      void *la = ht_put(x[2], m, LPATTN_F32, dev), *lb = ht_put(x[3], m, LPATTN_F32, dev);
      void *ha = ht_put(x[4], m, LPATTN_F32, dev), *hb = ht_put(x[5], m, LPATTN_F32, dev);
      void *o = ht_out(4 * (size_t)n, dev), *l = ht_out(4 * (size_t)m, dev);
      void *h = ht_out(4 * (size_t)m, dev);
      lpattn_tensor to_a = lpattn_tensor_4d(oa, LPATTN_F16, B, H, S, D);
      lpattn_tensor to_b = lpattn_tensor_4d(ob, LPATTN_F32, B, H, S, D);
      lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, B, H, S, D);
      lpattn_tensor tla = lpattn_tensor_4d(la, LPATTN_F32, B, H, S, 1);
      lpattn_tensor tlb = lpattn_tensor_4d(lb, LPATTN_F32, B, H, S, 1);
      lpattn_tensor tha = lpattn_tensor_4d(ha, LPATTN_F32, B, H, S, 1);
      lpattn_tensor thb = lpattn_tensor_4d(hb, LPATTN_F32, B, H, S, 1);
      lpattn_tensor tl = lpattn_tensor_4d(l, LPATTN_F32, B, H, S, 1);
      lpattn_tensor th = lpattn_tensor_4d(h, LPATTN_F32, B, H, S, 1);
      CHECK_STATUS(lpattn_merge_states(ctx, &to_a, &tla, with_h ? &tha : NULL, &to_b, &tlb,
                                       with_h ? &thb : NULL, &to, &tl, with_h ? &th : NULL),
                   LPATTN_OK);
      lpattn_synchronize(ctx);
      res[c][0] = malloc(4 * (size_t)n), res[c][1] = malloc(4 * (size_t)m);
      res[c][2] = malloc(4 * (size_t)m);
      ht_take(o, n, LPATTN_F32, dev, res[c][0]), ht_take(l, m, LPATTN_F32, dev, res[c][1]);
      ht_take(h, m, LPATTN_F32, dev, res[c][2]);
      void *in[6] = {oa, ob, la, lb, ha, hb};
      for (int i = 0; i < 6; i++) dev ? ht_dfree(in[i]) : free(in[i]);
    }
    const double eo = relerr(res[0][0], res[1][0], n), el = row_diff(res[0][1], res[1][1], m);
    const double eh = with_h ? row_diff(res[0][2], res[1][2], m) : 0.0;
    printf("merge (entropy %d): O relerr %.2e  lse %.1e  ent %.1e\n", with_h, eo, el, eh);
    CHECK(eo < 1e-5 && el < 1e-4 && eh < 1e-4, "merge: %.2e %.2e %.2e", eo, el, eh);
    for (int c = 0; c < 2; c++)
      for (int i = 0; i < 3; i++) free(res[c][i]);
  }
  for (int i = 0; i < 6; i++) free(x[i]);
}

/* lpattn_quantize/dequantize on hip give ref's bytes: every format, both
 * axes, both roundings, the MXFP4 round-up rule, all-zero groups holding a
 * -0, a NaN (only its own group's scale turns NaN); check_finite writes
 * nothing and says NONFINITE. */
static void quant(lpattn_ctx *hip, lpattn_ctx *ref) {
  const int64_t shape[4] = {2, 3, 100, 64}, n = 2 * 3 * 100 * 64;
  const struct {
    lpattn_format f;
    lpattn_axis axis;
    lpattn_rounding rnd;
    int mx_up;
  } cases[] = {{LPATTN_FMT_NVFP4, LPATTN_AXIS_D, LPATTN_ROUND_NEAREST_EVEN, 0},
               {LPATTN_FMT_NVFP4, LPATTN_AXIS_S, LPATTN_ROUND_STOCHASTIC, 0},
               {LPATTN_FMT_MXFP4, LPATTN_AXIS_S, LPATTN_ROUND_NEAREST_EVEN, 0},
               {LPATTN_FMT_MXFP4, LPATTN_AXIS_D, LPATTN_ROUND_STOCHASTIC, 1},
               {LPATTN_FMT_FP8, LPATTN_AXIS_D, LPATTN_ROUND_STOCHASTIC, 0},
               {LPATTN_FMT_FP8, LPATTN_AXIS_S, LPATTN_ROUND_NEAREST_EVEN, 0}};
  ht_rng r = {17};
  float *x = malloc(4 * (size_t)n), *y[2];
  ht_fill(&r, x, n, 0.5, 2.0);
  for (int d = 0; d < 64; d++) x[5 * 64 + d] = d == 7 ? -0.0f : 0.0f; /* a zero token */
  for (int64_t s = 0; s < 100; s++) x[(200 + s) * 64 + 3] = s == 40 ? -0.0f : 0.0f; /* a zero channel */
  x[7 * 64 + 9] = NAN;
  for (int chk = 0; chk < 2; chk++)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      lpattn_quant_params p;
      lpattn_quant_params_init(&p);
      p.format = cases[c].f, p.axis = cases[c].axis, p.rounding = cases[c].rnd, p.seed = 7;
      p.mx_scale_round_up = cases[c].mx_up, p.check_finite = chk;
      size_t cb, sb, oc;
      CHECK_STATUS(lpattn_qtensor_sizes(p.format, p.axis, p.tile, shape, &cb, &sb, &oc), LPATTN_OK);
      uint8_t *bytes[2];
      for (int k = 0; k < 2; k++) {
        const int dev = !k;
        lpattn_ctx *ctx = k ? ref : hip;
        void *dx = ht_put(x, n, LPATTN_F32, dev);
        lpattn_qtensor q = {p.format, p.axis, p.tile, {2, 3, 100, 64}, ht_out(cb, dev),
                            ht_out(sb, dev), ht_out(4 * oc, dev)};
        if (!dev) memset(q.codes, 0xFF, cb), memset(q.scales, 0xFF, sb), memset(q.outer, 0xFF, 4 * oc);
        lpattn_tensor tx = lpattn_tensor_4d(dx, LPATTN_F32, 2, 3, 100, 64);
        void *dy = ht_out(4 * (size_t)n, dev);
        lpattn_tensor ty = lpattn_tensor_4d(dy, LPATTN_BF16, 2, 3, 100, 64);
        CHECK_STATUS(lpattn_quantize(ctx, &tx, &q, &p), chk ? LPATTN_ERR_NONFINITE : LPATTN_OK);
        if (!chk) CHECK_STATUS(lpattn_dequantize(ctx, &q, &ty), LPATTN_OK);
        lpattn_synchronize(ctx);
        bytes[k] = malloc(cb + sb + 4 * oc);
        y[k] = malloc(4 * (size_t)n);
        void *parts[3] = {q.codes, q.scales, q.outer};
        const size_t len[3] = {cb, sb, 4 * oc};
        size_t at = 0;
        for (int i = 0; i < 3; i++) {
          if (dev) ht_down(bytes[k] + at, parts[i], len[i]), ht_dfree(parts[i]);
          else memcpy(bytes[k] + at, parts[i], len[i]), free(parts[i]);
          at += len[i];
        }
        ht_take(dy, n, LPATTN_BF16, dev, y[k]);
        dev ? ht_dfree(dx) : free(dx);
      }
      size_t untouched = 0;
      for (size_t i = 0; i < cb + sb + 4 * oc; i++) untouched += bytes[0][i] == 0xFF;
      if (chk)
        CHECK(untouched == cb + sb + 4 * oc, "check_finite case %zu: quantize wrote output", c);
      else
        CHECK(!memcmp(bytes[0], bytes[1], cb + sb + 4 * oc), "quantize case %zu: bytes differ", c);
      CHECK(chk || !memcmp(y[0], y[1], 4 * (size_t)n), "dequantize case %zu differs", c);
      free(bytes[0]), free(bytes[1]), free(y[0]), free(y[1]);
    }
  free(x);
}

/* What the GPU backends reject (as CUDA does): f32 inputs, tiles other than
 * 64 x 64, PASA without f16 inputs; nothing is written. */
static void unsupported(lpattn_ctx *hip) {
  const ht_shape sh = {1, 2, 1, 70, 70, 64};
  float *x = calloc((size_t)ht_nq(sh), 4), *o = malloc(4 * (size_t)ht_nq(sh));
  struct { lpattn_dtype dt; int Bq, Bk, pasa; } c[] = {
      {LPATTN_F32, 64, 64, 0}, {LPATTN_F16, 32, 64, 0}, {LPATTN_F16, 64, 128, 0}, {LPATTN_BF16, 64, 64, 1}};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.block_q = c[i].Bq, p.block_k = c[i].Bk, p.pasa = c[i].pasa;
    CHECK_STATUS(ht_attention(hip, sh, c[i].dt, x, x, x, &p, o, NULL, NULL, NULL, 0), LPATTN_ERR_UNSUPPORTED);
  }
  free(x), free(o);
}

int main(void) {
  lpattn_ctx *hip = NULL, *ref = NULL;
  if (lpattn_create(LPATTN_BACKEND_HIP, NULL, &hip) != LPATTN_OK)
    return test_skip("no HIP device");
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, &ref), LPATTN_OK);
  /* partial tiles on both axes, Skv > Sq (causal offset), GQA */
  const ht_shape s128 = {2, 4, 2, 150, 200, 128}, s64 = {1, 4, 1, 97, 97, 64};
  const int nv = (int)(sizeof variants / sizeof variants[0]);
  for (int causal = 0; causal < 2; causal++)
    for (int i = 0; i < nv; i++) one(hip, ref, s128, LPATTN_F16, 64, 64, causal, &variants[i]);
  for (int i = 0; i < nv; i++) /* PASA needs f16 inputs */
    one(hip, ref, s64, variants[i].pasa ? LPATTN_F16 : LPATTN_BF16, 64, 64, 1, &variants[i]);
  const ht_shape s256 = {1, 2, 1, 80, 100, 256};
  one(hip, ref, s256, LPATTN_F16, 64, 64, 1, &variants[2]);
  one(hip, ref, s256, LPATTN_F16, 64, 64, 0, &variants[7]);
  one(hip, ref, s256, LPATTN_BF16, 64, 64, 1, &variants[5]);
  /* Sq > Skv: the first rows see no key (O = 0, LSE = -inf, H = 0) */
  const ht_shape wide = {1, 2, 1, 130, 70, 64};
  for (int i = 0; i < nv; i++) one(hip, ref, wide, LPATTN_F16, 64, 64, 1, &variants[i]);
  /* BSHD strides, and a NaN key that only reaches the rows that see it */
  one_l(hip, ref, s128, LPATTN_BF16, 64, 64, 1, &variants[2], 1, -1);
  one_l(hip, ref, s128, LPATTN_F16, 64, 64, 1, &variants[0], 0, 70 * 128 + 5);
  one_l(hip, ref, s128, LPATTN_F16, 64, 64, 1, &variants[2], 0, 70 * 128 + 5);
  /* the last query tile is one row and the last KV tile ends at it: that
   * tile is diagonal (high), as in decode (SEMANTICS: unclipped c1) */
  const ht_shape e65 = {1, 2, 1, 65, 65, 64}, e129 = {1, 2, 1, 129, 129, 64};
  for (int i = 0; i < nv; i++) {
    one(hip, ref, e65, LPATTN_F16, 64, 64, 1, &variants[i]);
    one(hip, ref, e129, LPATTN_F16, 64, 64, 1, &variants[i]);
  }
  pasa_causal_x0(hip, ref);
  unsupported(hip);
  merge(hip, ref);
  quant(hip, ref);
  /* every attn variant of the table (gen/registry.inc) at its head dim and
   * input type, every precision variant above, causal and not */
  int ntv = 0;
  for (int vi = 0; vi < TV_COUNT; vi++) {
    if (tv_variants[vi].op != TV_ATTN) continue;
    const ht_shape sv = {ntv % 2 ? 1 : 2, 4, ntv % 2 ? 1 : 2, 97, 150, tv_variants[vi].head_dim};
    const lpattn_dtype dt = (lpattn_dtype)tv_variants[vi].dtype;
    ntv++;
    for (int causal = 0; causal < 2; causal++)
      for (int i = 0; i < nv; i++) /* PASA needs f16 inputs */
        if (!variants[i].pasa || dt == LPATTN_F16) one(hip, ref, sv, dt, 64, 64, causal, &variants[i]);
  }
  CHECK(ntv >= 4, "only %d attn variants in the table", ntv);
  lpattn_free(hip);
  lpattn_free(ref);
  return test_finish();
}
