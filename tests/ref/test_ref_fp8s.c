/* Static-scale FP8 (SPEC 11, precision FP8_STATIC) on a host backend
 * (argv[1]: "ref" or "cpu"):
 *   ref: equals an independent f64 model of SPEC 11 written here (codes by
 *        core's encoder, exact code products, tile-wise online softmax with
 *        P^ = E4M3(448 P)) within 1e-6, and is near exact attention on the
 *        codes' values (< 5%, the P quantization);
 *   cpu: within the FP8 bound of tests/cpu (0.01 x the precision's own error
 *        against HIGH + 1e-5) of ref, on every Highway target;
 *   both: E4M3 inputs made with lpattn_f32_to_e4m3(x / descale) give bitwise
 *        the outputs of f32/f16/bf16 inputs cast by the call (the cast is
 *        core's encoder), strided descales and BSHD E4M3 views equal
 *        contiguous ones, SPEC 4's leak test is bitwise (causal, every tile
 *        FP8, diagonal included), a NaN code past a row's horizon stays out
 *        of it, and bad descales and dtypes are rejected. */
#include <stddef.h>
#include <string.h>

#include "refutil.h"

#if LPATTN_TEST_CPU /* the cpu build of this file (tests/cpu/meson.build) */
int lpattn_cpu_targets(int64_t *targets, int max); /* backends/cpu (cpu.h) */
void lpattn_cpu_force_target(int64_t target);
const char *lpattn_cpu_target_name(int64_t target);
#else
static int lpattn_cpu_targets(int64_t *targets, int max) { return (void)targets, (void)max, 1; }
static void lpattn_cpu_force_target(int64_t target) { (void)target; }
static const char *lpattn_cpu_target_name(int64_t target) { return (void)target, "ref"; }
#endif

typedef struct {
  const char *name;
  shape_t sh;
  int causal, bq, bk;
} fcase;

static const fcase cases[] = {
    {"causal gqa d64", {2, 4, 2, 100, 130, 64}, 1, 64, 64},
    {"nocausal d128 bk32", {1, 2, 1, 70, 96, 128}, 0, 32, 32},
    {"causal Sq<Skv d128", {1, 2, 2, 64, 192, 128}, 1, 64, 64},
    {"causal Skv<Sq d64", {1, 2, 1, 96, 60, 64}, 1, 32, 64},
};

/* Inputs of one case: f32 x and per-(b, kv head) descales (quasi-amax/448). */
typedef struct {
  float *q, *k, *v, qd[8], kd[8], vd[8];
} inputs;

static void make_inputs(shape_t sh, uint64_t seed, inputs *in) {
  rng_t r = {seed};
  in->q = malloc(4 * (size_t)nq(sh)), in->k = malloc(4 * (size_t)nkv(sh));
  in->v = malloc(4 * (size_t)nkv(sh));
  fill_normal(&r, in->q, nq(sh), 0.2, 1.0);
  fill_normal(&r, in->k, nkv(sh), 0.3, 1.2);
  fill_normal(&r, in->v, nkv(sh), 0.0, 0.8);
  for (int i = 0; i < sh.B * sh.Hkv; i++) /* some values saturate at 448 */
    in->qd[i] = (float)(4.0 + rng_u(&r)) / 448.0f, in->kd[i] = (float)(3.0 + 2.0 * rng_u(&r)) / 448.0f,
    in->vd[i] = (float)(2.0 + rng_u(&r)) / 448.0f;
}

static void free_inputs(inputs *in) { free(in->q), free(in->k), free(in->v); }

/* The E4M3 codes of x [B, H, S, D] under descales d[b * Hkv + h * Hkv / H]. */
static uint8_t *codes_of(const float *x, shape_t sh, int64_t H, int64_t S, const float *d) {
  uint8_t *c = malloc((size_t)(sh.B * H * S * sh.D));
  for (int64_t i = 0; i < sh.B * H * S * sh.D; i++) {
    const int64_t bh = i / (S * sh.D), b = bh / H, h = bh % H;
    c[i] = lpattn_f32_to_e4m3(x[i] / d[b * sh.Hkv + h * sh.Hkv / H]);
  }
  return c;
}

static const char *lp_dtype_name_test(lpattn_dtype t) {
  return t == LPATTN_F32 ? "f32" : t == LPATTN_F16 ? "f16" : t == LPATTN_BF16 ? "bf16" : "e4m3";
}

/* ---- the independent model of SPEC 11 ---------------------------------- */
static void model(const fcase *fc, const inputs *in, double *o, double *lse, double *ent) {
  const shape_t sh = fc->sh;
  const int64_t D = sh.D, off = sh.Skv - sh.Sq, G = sh.Hq / sh.Hkv;
  uint8_t *cq = codes_of(in->q, sh, sh.Hq, sh.Sq, in->qd);
  uint8_t *ck = codes_of(in->k, sh, sh.Hkv, sh.Skv, in->kd);
  uint8_t *cv = codes_of(in->v, sh, sh.Hkv, sh.Skv, in->vd);
  double *s = malloc(sizeof(double) * (size_t)sh.Skv);
  for (int64_t b = 0; b < sh.B; b++)
    for (int64_t h = 0; h < sh.Hq; h++)
      for (int64_t i = 0; i < sh.Sq; i++) {
        const int64_t hk = h / G, row = (b * sh.Hq + h) * sh.Sq + i, sd = b * sh.Hkv + hk;
        const uint8_t *qi = cq + row * D;
        int64_t n = fc->causal ? i + off + 1 : sh.Skv;
        n = n > sh.Skv ? sh.Skv : n;
        double m = -INFINITY, l = 0.0, rr = 0.0, acc[256] = {0};
        for (int64_t j = 0; j < n; j++) { /* S = (Q^ . K^T) * qd * kd * sm_scale */
          const uint8_t *kj = ck + ((b * sh.Hkv + hk) * sh.Skv + j) * D;
          double dot = 0.0;
          for (int64_t d = 0; d < D; d++) dot += (double)lpattn_e4m3_to_f32(qi[d]) * lpattn_e4m3_to_f32(kj[d]);
          s[j] = dot * in->qd[sd] * in->kd[sd] * (float)(1.0 / sqrt((double)D)); /* f32 sm_scale */
        }
        for (int64_t j0 = 0; j0 < n; j0 += fc->bk) { /* KV tiles in order */
          const int64_t j1 = j0 + fc->bk < n ? j0 + fc->bk : n;
          double mx = m;
          for (int64_t j = j0; j < j1; j++) mx = s[j] > mx ? s[j] : mx;
          const double a = exp(m - mx);
          l *= a, rr *= a;
          for (int64_t d = 0; d < D; d++) acc[d] *= a;
          for (int64_t j = j0; j < j1; j++) {
            const double p = exp(s[j] - mx);
            const double ph = lpattn_e4m3_to_f32(lpattn_f32_to_e4m3((float)p * 448.0f));
            const uint8_t *vj = cv + ((b * sh.Hkv + hk) * sh.Skv + j) * D;
            l += p, rr += p * s[j];
            for (int64_t d = 0; d < D; d++) acc[d] += ph * lpattn_e4m3_to_f32(vj[d]);
          }
          m = mx;
        }
        for (int64_t d = 0; d < D; d++)
          o[row * D + d] = n > 0 ? acc[d] * in->vd[sd] / 448.0 / l : 0.0;
        lse[row] = n > 0 ? m + log(l) : -INFINITY;
        ent[row] = n > 0 ? m + log(l) - rr / l : 0.0;
      }
  free(s), free(cq), free(ck), free(cv);
}

/* ---- calls ----------------------------------------------------------------- */
static lpattn_attn_params fparams(const fcase *fc, float *qd, float *kd, float *vd) {
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = LPATTN_PREC_FP8_STATIC, p.causal = fc->causal, p.block_q = fc->bq, p.block_k = fc->bk;
  const int64_t B = fc->sh.B, H = fc->sh.Hkv;
  if (qd) p.q_descale = lpattn_tensor_4d(qd, LPATTN_F32, 1, 1, B, H);
  if (kd) p.k_descale = lpattn_tensor_4d(kd, LPATTN_F32, 1, 1, B, H);
  if (vd) p.v_descale = lpattn_tensor_4d(vd, LPATTN_F32, 1, 1, B, H);
  return p;
}

/* Inputs in dtype dt (F32/F16/BF16 from x, E4M3: the codes), out/lse/ent f32. */
static lpattn_status call(lpattn_ctx *ctx, const fcase *fc, inputs *in, lpattn_dtype dt,
                          const lpattn_attn_params *p, float *o, float *lse, float *ent) {
  const shape_t sh = fc->sh;
  const float *x[3] = {in->q, in->k, in->v}, *d[3] = {in->qd, in->kd, in->vd};
  const int64_t H[3] = {sh.Hq, sh.Hkv, sh.Hkv}, S[3] = {sh.Sq, sh.Skv, sh.Skv};
  void *buf[3];
  lpattn_tensor t[3];
  for (int i = 0; i < 3; i++) {
    const int64_t n = sh.B * H[i] * S[i] * sh.D;
    if (dt == LPATTN_E4M3) buf[i] = codes_of(x[i], sh, H[i], S[i], d[i]);
    else buf[i] = malloc((size_t)n * (dt == LPATTN_F32 ? 4 : 2));
    for (int64_t e = 0; dt != LPATTN_E4M3 && e < n; e++) {
      if (dt == LPATTN_F32) ((float *)buf[i])[e] = x[i][e];
      else ((uint16_t *)buf[i])[e] = dt == LPATTN_F16 ? lpattn_f32_to_f16(x[i][e]) : lpattn_f32_to_bf16(x[i][e]);
    }
    t[i] = lpattn_tensor_4d(buf[i], dt, sh.B, H[i], S[i], sh.D);
  }
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, sh.B, sh.Hq, sh.Sq, sh.D);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lpattn_tensor_4d(lse, LPATTN_F32, sh.B, sh.Hq, sh.Sq, 1);
  aux.entropy = lpattn_tensor_4d(ent, LPATTN_F32, sh.B, sh.Hq, sh.Sq, 1);
  lpattn_status st = lpattn_attention(ctx, &t[0], &t[1], &t[2], &to, p, &aux);
  for (int i = 0; i < 3; i++) free(buf[i]);
  return st;
}

typedef struct {
  float *o, *lse, *ent;
} outs;

static outs outs_new(shape_t sh) {
  outs r = {malloc(4 * (size_t)nq(sh)), malloc(4 * (size_t)nrows(sh)), malloc(4 * (size_t)nrows(sh))};
  return r;
}

static void outs_free(outs *r) { free(r->o), free(r->lse), free(r->ent); }

static int same_outs(shape_t sh, const outs *a, const outs *b) {
  return !memcmp(a->o, b->o, 4 * (size_t)nq(sh)) && !memcmp(a->lse, b->lse, 4 * (size_t)nrows(sh)) &&
         !memcmp(a->ent, b->ent, 4 * (size_t)nrows(sh));
}

static double max_abs_diff(const float *a, const double *b, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double e = isinf(b[i]) && a[i] == b[i] ? 0.0 : fabs(a[i] - b[i]);
    m = e > m || e != e ? e : m;
  }
  return m;
}

/* ---- ref: the model, and exact attention on the codes' values ------------- */
static void check_model(lpattn_ctx *ctx, const fcase *fc) {
  const shape_t sh = fc->sh;
  inputs in;
  make_inputs(sh, 11, &in);
  outs r = outs_new(sh);
  lpattn_attn_params p = fparams(fc, in.qd, in.kd, in.vd);
  CHECK_STATUS(call(ctx, fc, &in, LPATTN_F32, &p, r.o, r.lse, r.ent), LPATTN_OK);
  double *o = malloc(sizeof(double) * (size_t)nq(sh)), *l = malloc(sizeof(double) * (size_t)nrows(sh));
  double *h = malloc(sizeof(double) * (size_t)nrows(sh));
  model(fc, &in, o, l, h);
  const double eo = rel_rmse(r.o, o, nq(sh)), el = max_abs_diff(r.lse, l, nrows(sh));
  const double eh = max_abs_diff(r.ent, h, nrows(sh));
  CHECK(eo < 1e-6 && el < 1e-5 && eh < 1e-5, "%s: ref vs SPEC 11 model: O %.3g LSE %.3g H %.3g",
        fc->name, eo, el, eh);
  /* exact attention on the values code * descale: only P^ differs */
  float *x[3] = {in.q, in.k, in.v}, *d[3] = {in.qd, in.kd, in.vd};
  const int64_t H[3] = {sh.Hq, sh.Hkv, sh.Hkv}, S[3] = {sh.Sq, sh.Skv, sh.Skv};
  for (int i = 0; i < 3; i++) {
    uint8_t *c = codes_of(x[i], sh, H[i], S[i], d[i]);
    for (int64_t e = 0; e < sh.B * H[i] * S[i] * sh.D; e++) {
      const int64_t bh = e / (S[i] * sh.D);
      x[i][e] = lpattn_e4m3_to_f32(c[e]) * d[i][bh / H[i] * sh.Hkv + bh % H[i] * sh.Hkv / H[i]];
    }
    free(c);
  }
  naive_attention(sh, in.q, in.k, in.v, 1.0 / sqrt((double)sh.D), fc->causal, o, l, h);
  const double ex = rel_rmse(r.o, o, nq(sh));
  CHECK(ex < 0.05 && ex > 0.0, "%s: FP8_STATIC vs exact attention on its values: %.3g", fc->name, ex);
  if (getenv("LPATTN_TEST_VERBOSE"))
    printf("ref %-22s model O %.2e LSE %.2e H %.2e, vs exact %.2e\n", fc->name, eo, el, eh, ex);
  free(o), free(l), free(h);
  outs_free(&r);
  free_inputs(&in);
}

/* ---- cpu against ref ---------------------------------------------------- */
static void check_vs_ref(lpattn_ctx *ctx, lpattn_ctx *ref, const fcase *fc, const char *tn) {
  const shape_t sh = fc->sh;
  inputs in;
  make_inputs(sh, 12, &in);
  outs a = outs_new(sh), b = outs_new(sh), hi = outs_new(sh);
  lpattn_attn_params p = fparams(fc, in.qd, in.kd, in.vd);
  CHECK_STATUS(call(ctx, fc, &in, LPATTN_BF16, &p, a.o, a.lse, a.ent), LPATTN_OK);
  CHECK_STATUS(call(ref, fc, &in, LPATTN_BF16, &p, b.o, b.lse, b.ent), LPATTN_OK);
  lpattn_attn_params ph = p;
  ph.precision = LPATTN_PREC_HIGH;
  memset(&ph.q_descale, 0, 3 * sizeof(lpattn_tensor));
  CHECK_STATUS(call(ref, fc, &in, LPATTN_BF16, &ph, hi.o, hi.lse, hi.ent), LPATTN_OK);
  double *bo = malloc(sizeof(double) * (size_t)nq(sh)), *bl = malloc(sizeof(double) * (size_t)nrows(sh));
  for (int64_t i = 0; i < nq(sh); i++) bo[i] = b.o[i];
  const double own = rel_rmse(hi.o, bo, nq(sh)), tol = 0.01 * own + 1e-5, e = rel_rmse(a.o, bo, nq(sh));
  for (int64_t i = 0; i < nrows(sh); i++) bl[i] = b.lse[i];
  const double el = max_abs_diff(a.lse, bl, nrows(sh));
  for (int64_t i = 0; i < nrows(sh); i++) bl[i] = b.ent[i];
  const double eh = max_abs_diff(a.ent, bl, nrows(sh));
  CHECK(e < tol && el < 2e-3 && eh < 2e-3, "%s/%s: cpu vs ref O %.3g (tol %.3g, own %.3g) LSE %.3g H %.3g",
        tn, fc->name, e, tol, own, el, eh);
  if (getenv("LPATTN_TEST_VERBOSE"))
    printf("%-8s %-22s O %.2e (tol %.2e, own %.2e) LSE %.2e H %.2e\n", tn, fc->name, e, tol, own, el, eh);
  free(bo), free(bl);
  outs_free(&a), outs_free(&b), outs_free(&hi);
  free_inputs(&in);
}

/* ---- both backends ------------------------------------------------------ */
/* E4M3 inputs = cast inputs, bitwise; strided descales and BSHD codes too. */
static void check_cast(lpattn_ctx *ctx, const fcase *fc) {
  const shape_t sh = fc->sh;
  inputs in;
  make_inputs(sh, 13, &in);
  outs a = outs_new(sh), b = outs_new(sh);
  lpattn_attn_params p = fparams(fc, in.qd, in.kd, in.vd);
  const lpattn_dtype dts[3] = {LPATTN_F32, LPATTN_F16, LPATTN_BF16};
  for (int i = 0; i < 3; i++) {
    /* x rounded to dt first, so the codes are those of the values the call sees */
    for (int64_t e = 0; e < nq(sh) || e < nkv(sh); e++) {
      float *x[3] = {in.q, in.k, in.v};
      for (int j = 0; j < 3; j++)
        if (e < (j ? nkv(sh) : nq(sh)) && dts[i] != LPATTN_F32)
          x[j][e] = dts[i] == LPATTN_F16 ? lpattn_f16_to_f32(lpattn_f32_to_f16(x[j][e]))
                                         : lpattn_bf16_to_f32(lpattn_f32_to_bf16(x[j][e]));
    }
    CHECK_STATUS(call(ctx, fc, &in, dts[i], &p, a.o, a.lse, a.ent), LPATTN_OK);
    CHECK_STATUS(call(ctx, fc, &in, LPATTN_E4M3, &p, b.o, b.lse, b.ent), LPATTN_OK);
    CHECK(same_outs(sh, &a, &b), "%s: %s inputs cast by the call differ from core-encoded E4M3 codes",
          fc->name, lp_dtype_name_test(dts[i]));
  }
  /* descales stored [Hkv][B] (strides {0, 0, 1, B}); q/k/v codes BSHD */
  float qt[8], kt[8], vt[8];
  for (int64_t b0 = 0; b0 < sh.B; b0++)
    for (int64_t h = 0; h < sh.Hkv; h++)
      qt[h * sh.B + b0] = in.qd[b0 * sh.Hkv + h], kt[h * sh.B + b0] = in.kd[b0 * sh.Hkv + h],
                 vt[h * sh.B + b0] = in.vd[b0 * sh.Hkv + h];
  lpattn_attn_params ps = fparams(fc, qt, kt, vt);
  lpattn_tensor *ds[3] = {&ps.q_descale, &ps.k_descale, &ps.v_descale};
  for (int i = 0; i < 3; i++) ds[i]->stride[0] = ds[i]->stride[1] = 0, ds[i]->stride[2] = 1, ds[i]->stride[3] = sh.B;
  const float *x[3] = {in.q, in.k, in.v}, *d[3] = {in.qd, in.kd, in.vd};
  const int64_t H[3] = {sh.Hq, sh.Hkv, sh.Hkv}, S[3] = {sh.Sq, sh.Skv, sh.Skv};
  uint8_t *bshd[3];
  lpattn_tensor t[3];
  for (int i = 0; i < 3; i++) {
    uint8_t *c = codes_of(x[i], sh, H[i], S[i], d[i]);
    bshd[i] = malloc((size_t)(sh.B * H[i] * S[i] * sh.D));
    t[i] = lpattn_tensor_4d(bshd[i], LPATTN_E4M3, sh.B, H[i], S[i], sh.D);
    t[i].stride[0] = S[i] * H[i] * sh.D, t[i].stride[1] = sh.D, t[i].stride[2] = H[i] * sh.D;
    for (int64_t e = 0; e < sh.B * H[i] * S[i] * sh.D; e++) {
      const int64_t dd = e % sh.D, s = e / sh.D % S[i], h = e / sh.D / S[i] % H[i], b0 = e / sh.D / S[i] / H[i];
      bshd[i][b0 * t[i].stride[0] + h * t[i].stride[1] + s * t[i].stride[2] + dd] = c[e];
    }
    free(c);
  }
  lpattn_tensor to = lpattn_tensor_4d(a.o, LPATTN_F32, sh.B, sh.Hq, sh.Sq, sh.D);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lpattn_tensor_4d(a.lse, LPATTN_F32, sh.B, sh.Hq, sh.Sq, 1);
  aux.entropy = lpattn_tensor_4d(a.ent, LPATTN_F32, sh.B, sh.Hq, sh.Sq, 1);
  CHECK_STATUS(lpattn_attention(ctx, &t[0], &t[1], &t[2], &to, &ps, &aux), LPATTN_OK);
  CHECK(same_outs(sh, &a, &b), "%s: BSHD codes with strided descales differ", fc->name);
  for (int i = 0; i < 3; i++) free(bshd[i]);
  outs_free(&a), outs_free(&b);
  free_inputs(&in);
}

/* SPEC 4's test of record: tokens after t perturbed (codes too), rows <= t bitwise. */
static void check_leak(lpattn_ctx *ctx, const fcase *fc, lpattn_dtype dt) {
  const shape_t sh = fc->sh;
  inputs in;
  make_inputs(sh, 14, &in);
  outs a = outs_new(sh), b = outs_new(sh);
  lpattn_attn_params p = fparams(fc, in.qd, in.kd, in.vd);
  CHECK_STATUS(call(ctx, fc, &in, dt, &p, a.o, a.lse, a.ent), LPATTN_OK);
  rng_t r = {15};
  const int64_t t = sh.Sq / 2 + 3, off = sh.Skv - sh.Sq, D = sh.D;
  for (int64_t i = 0; i < nq(sh); i++)
    if ((i / D) % sh.Sq > t) in.q[i] = (float)(3.0 * rng_normal(&r) + 1.0);
  for (int64_t i = 0; i < nkv(sh); i++)
    if ((i / D) % sh.Skv > t + off) in.k[i] = (float)(4.0 * rng_normal(&r) - 1.0), in.v[i] = (float)(5.0 * rng_normal(&r) + 2.0);
  CHECK_STATUS(call(ctx, fc, &in, dt, &p, b.o, b.lse, b.ent), LPATTN_OK);
  int64_t changed = 0;
  for (int64_t bh = 0; bh < sh.B * sh.Hq; bh++)
    for (int64_t s = 0; s <= t && s < sh.Sq; s++) {
      const int64_t row = bh * sh.Sq + s;
      changed += memcmp(a.o + row * D, b.o + row * D, 4 * (size_t)D) || memcmp(a.lse + row, b.lse + row, 4) ||
                 memcmp(a.ent + row, b.ent + row, 4);
    }
  CHECK(changed == 0, "%s (%s inputs): %lld rows <= t changed (causal leak)", fc->name,
        lp_dtype_name_test(dt), (long long)changed);
  /* E4M3 inputs: a NaN code (0x7F) in K and V right after t: rows <= t stay as they were */
  if (dt != LPATTN_E4M3) {
    outs_free(&a), outs_free(&b);
    free_inputs(&in);
    return;
  }
  uint8_t *ck = codes_of(in.k, sh, sh.Hkv, sh.Skv, in.kd), *cv = codes_of(in.v, sh, sh.Hkv, sh.Skv, in.vd);
  uint8_t *cq = codes_of(in.q, sh, sh.Hq, sh.Sq, in.qd);
  for (int64_t bh = 0; bh < sh.B * sh.Hkv; bh++)
    ck[(bh * sh.Skv + t + off + 1) * D] = 0x7F, cv[(bh * sh.Skv + t + off + 1) * D + 1] = 0xFF;
  lpattn_tensor tq = lpattn_tensor_4d(cq, LPATTN_E4M3, sh.B, sh.Hq, sh.Sq, D);
  lpattn_tensor tk = lpattn_tensor_4d(ck, LPATTN_E4M3, sh.B, sh.Hkv, sh.Skv, D);
  lpattn_tensor tv = lpattn_tensor_4d(cv, LPATTN_E4M3, sh.B, sh.Hkv, sh.Skv, D);
  lpattn_tensor to = lpattn_tensor_4d(b.o, LPATTN_F32, sh.B, sh.Hq, sh.Sq, D);
  CHECK_STATUS(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_OK);
  changed = 0;
  for (int64_t bh = 0; bh < sh.B * sh.Hq; bh++)
    changed += memcmp(a.o + bh * sh.Sq * D, b.o + bh * sh.Sq * D, 4 * (size_t)((t + 1) * D)) != 0;
  CHECK(changed == 0, "%s: a NaN code past t reached %lld heads' rows <= t", fc->name, (long long)changed);
  free(ck), free(cv), free(cq);
  outs_free(&a), outs_free(&b);
  free_inputs(&in);
}

#include "test_ref_fp8s_args.h"

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const int cpu = argc > 1 && !strcmp(argv[1], "cpu");
  lpattn_ctx *ref = ref_ctx(), *ctx = ref;
  if (cpu) {
    lpattn_context_params cp;
    lpattn_context_params_init(&cp);
    cp.num_threads = getenv("LPATTN_CPU_TEST_THREADS") ? atoi(getenv("LPATTN_CPU_TEST_THREADS")) : 2;
    if (lpattn_create(LPATTN_BACKEND_CPU, &cp, &ctx) != LPATTN_OK) return test_skip("no cpu backend");
  }
  const int nc = (int)(sizeof cases / sizeof cases[0]);
  int64_t targets[16] = {0};
  const int nt = cpu ? lpattn_cpu_targets(targets, 16) : 1;
  for (int ti = 0; ti < nt; ti++) {
    if (cpu) lpattn_cpu_force_target(targets[ti]);
    const char *tn = lpattn_cpu_target_name(targets[ti]);
    for (int i = 0; i < nc; i++) {
      if (cpu) check_vs_ref(ctx, ref, &cases[i], tn);
      else check_model(ctx, &cases[i]);
      if (ti > 0) continue; /* the rest on the best target only */
      check_cast(ctx, &cases[i]);
      if (cases[i].causal) check_leak(ctx, &cases[i], LPATTN_F16), check_leak(ctx, &cases[i], LPATTN_E4M3);
    }
  }
  if (cpu) lpattn_cpu_force_target(0);
  check_args(ctx);
  if (ctx != ref) lpattn_free(ctx);
  lpattn_free(ref);
  return test_finish();
}
