/* ref HIGH against an independent naive f64 attention: shapes, masks, GQA/
 * MQA, strides, input dtypes, LSE/entropy; and the merge identity (SPEC 7). */
#include "refutil.h"

typedef struct {
  shape_t sh;
  int causal, Bq, Bk;
  float sm_scale;
} high_case;

/* Compares out/lse/ent of one call with the naive reference. */
static void check_against_naive(const char *name, shape_t sh, const float *q, const float *k,
                                const float *v, double scale, int causal, const float *out,
                                const float *lse, const float *ent) {
  const int64_t no = nq(sh), nr = nrows(sh);
  double *o = malloc(sizeof(double) * (size_t)no), *l = malloc(sizeof(double) * (size_t)nr);
  double *h = malloc(sizeof(double) * (size_t)nr);
  naive_attention(sh, q, k, v, scale, causal, o, l, h);
  double worst_o = 0, worst_l = 0, worst_h = 0;
  int masked_ok = 1;
  for (int64_t r = 0; r < nr; r++) {
    if (isinf(l[r])) { /* fully masked row: exactly 0, -inf, 0 */
      masked_ok &= isinf(lse[r]) && lse[r] < 0 && ent[r] == 0.0f;
      for (int64_t d = 0; d < sh.D; d++) masked_ok &= out[r * sh.D + d] == 0.0f;
      continue;
    }
    for (int64_t d = 0; d < sh.D; d++) {
      double e = fabs(out[r * sh.D + d] - o[r * sh.D + d]) / (fabs(o[r * sh.D + d]) + 1e-3);
      if (e > worst_o) worst_o = e;
    }
    if (fabs(lse[r] - l[r]) > worst_l) worst_l = fabs(lse[r] - l[r]);
    if (fabs(ent[r] - h[r]) > worst_h) worst_h = fabs(ent[r] - h[r]);
  }
  CHECK(worst_o < 1e-5, "%s: O error %g", name, worst_o);
  CHECK(worst_l < 1e-5, "%s: LSE error %g", name, worst_l);
  CHECK(worst_h < 1e-5, "%s: entropy error %g", name, worst_h);
  CHECK(masked_ok, "%s: fully masked rows are not (0, -inf, 0)", name);
  free(o), free(l), free(h);
}

static void shapes(lpattn_ctx *ctx) {
  const high_case cases[] = {
      {{1, 2, 2, 100, 100, 64}, 1, 64, 64, 0},    /* odd length, not a tile multiple */
      {{2, 4, 2, 70, 130, 64}, 1, 32, 64, 0},     /* GQA, Skv > Sq */
      {{2, 4, 2, 70, 130, 64}, 0, 64, 32, 0},     /* non-causal */
      {{1, 4, 1, 130, 70, 128}, 1, 64, 64, 0},    /* MQA, Sq > Skv: masked rows */
      {{1, 3, 1, 33, 257, 32}, 1, 96, 160, 0.3f}, /* odd tiles, explicit scale */
      {{1, 1, 1, 1, 5, 16}, 1, 32, 32, 0},        /* one query row */
  };
  rng_t r = {1};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const high_case *hc = &cases[c];
    shape_t sh = hc->sh;
    float *q = malloc(4 * (size_t)nq(sh)), *k = malloc(4 * (size_t)nkv(sh));
    float *v = malloc(4 * (size_t)nkv(sh)), *out = malloc(4 * (size_t)nq(sh));
    float *lse = malloc(4 * (size_t)nrows(sh)), *ent = malloc(4 * (size_t)nrows(sh));
    fill_normal(&r, q, nq(sh), 0.0, 1.0);
    fill_normal(&r, k, nkv(sh), 0.0, 1.0);
    fill_normal(&r, v, nkv(sh), 0.0, 1.0);
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.causal = hc->causal, p.block_q = hc->Bq, p.block_k = hc->Bk, p.sm_scale = hc->sm_scale;
    CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, out, lse, ent, NULL, 0), LPATTN_OK);
    double scale = hc->sm_scale ? hc->sm_scale : 1.0 / sqrt((double)sh.D);
    char name[64];
    snprintf(name, sizeof name, "case %zu", c);
    check_against_naive(name, sh, q, k, v, scale, hc->causal, out, lse, ent);
    free(q), free(k), free(v), free(out), free(lse), free(ent);
  }
}

/* BSHD views of the same data give bitwise the same result as BHSD. */
static void strides(lpattn_ctx *ctx) {
  shape_t sh = {2, 4, 2, 75, 90, 64};
  rng_t r = {2};
  const int64_t D = sh.D;
  float *q = malloc(4 * (size_t)nq(sh)), *k = malloc(4 * (size_t)nkv(sh)), *v = malloc(4 * (size_t)nkv(sh));
  float *qs = malloc(4 * (size_t)nq(sh)), *ks = malloc(4 * (size_t)nkv(sh)), *vs = malloc(4 * (size_t)nkv(sh));
  float *o1 = malloc(4 * (size_t)nq(sh)), *o2 = malloc(4 * (size_t)nq(sh)), *o2b = malloc(4 * (size_t)nq(sh));
  fill_normal(&r, q, nq(sh), 0.0, 1.0);
  fill_normal(&r, k, nkv(sh), 0.0, 1.0);
  fill_normal(&r, v, nkv(sh), 0.0, 1.0);
  /* Copy into [B, S, H, D]. */
  for (int64_t b = 0; b < sh.B; b++)
    for (int64_t h = 0; h < sh.Hq; h++)
      for (int64_t s = 0; s < sh.Sq; s++)
        memcpy(qs + ((b * sh.Sq + s) * sh.Hq + h) * D, q + ((b * sh.Hq + h) * sh.Sq + s) * D, 4 * (size_t)D);
  for (int64_t b = 0; b < sh.B; b++)
    for (int64_t h = 0; h < sh.Hkv; h++)
      for (int64_t s = 0; s < sh.Skv; s++) {
        memcpy(ks + ((b * sh.Skv + s) * sh.Hkv + h) * D, k + ((b * sh.Hkv + h) * sh.Skv + s) * D, 4 * (size_t)D);
        memcpy(vs + ((b * sh.Skv + s) * sh.Hkv + h) * D, v + ((b * sh.Hkv + h) * sh.Skv + s) * D, 4 * (size_t)D);
      }
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.causal = 1;
  for (int prec = LPATTN_PREC_HIGH; prec <= LPATTN_PREC_NVFP4; prec += 2) {
    p.precision = (lpattn_precision)prec;
    CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o1, NULL, NULL, NULL, 0), LPATTN_OK);
    lpattn_tensor tq = {qs, LPATTN_F32, {sh.B, sh.Hq, sh.Sq, D}, {sh.Sq * sh.Hq * D, D, sh.Hq * D, 1}};
    lpattn_tensor tk = {ks, LPATTN_F32, {sh.B, sh.Hkv, sh.Skv, D}, {sh.Skv * sh.Hkv * D, D, sh.Hkv * D, 1}};
    lpattn_tensor tv = {vs, LPATTN_F32, {sh.B, sh.Hkv, sh.Skv, D}, {sh.Skv * sh.Hkv * D, D, sh.Hkv * D, 1}};
    lpattn_tensor to = {o2, LPATTN_F32, {sh.B, sh.Hq, sh.Sq, D}, {sh.Sq * sh.Hq * D, D, sh.Hq * D, 1}};
    CHECK_STATUS(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_OK);
    for (int64_t b = 0; b < sh.B; b++)
      for (int64_t h = 0; h < sh.Hq; h++)
        for (int64_t s = 0; s < sh.Sq; s++)
          memcpy(o2b + ((b * sh.Hq + h) * sh.Sq + s) * D, o2 + ((b * sh.Sq + s) * sh.Hq + h) * D, 4 * (size_t)D);
    CHECK(memcmp(o1, o2b, 4 * (size_t)nq(sh)) == 0, "BSHD differs from BHSD (precision %d)", prec);
  }
  free(q), free(k), free(v), free(qs), free(ks), free(vs), free(o1), free(o2), free(o2b);
}

static float round_dt(lpattn_dtype dt, float x) {
  return dt == LPATTN_F16 ? lpattn_f16_to_f32(lpattn_f32_to_f16(x))
                          : lpattn_bf16_to_f32(lpattn_f32_to_bf16(x));
}

/* f16/bf16 inputs and outputs: the naive reference sees the rounded inputs. */
static void dtypes(lpattn_ctx *ctx) {
  shape_t sh = {1, 2, 1, 80, 96, 64};
  rng_t r = {3};
  const lpattn_dtype dts[2] = {LPATTN_F16, LPATTN_BF16};
  for (int t = 0; t < 2; t++) {
    lpattn_dtype dt = dts[t];
    float *q = malloc(4 * (size_t)nq(sh)), *k = malloc(4 * (size_t)nkv(sh)), *v = malloc(4 * (size_t)nkv(sh));
    uint16_t *q16 = malloc(2 * (size_t)nq(sh)), *k16 = malloc(2 * (size_t)nkv(sh));
    uint16_t *v16 = malloc(2 * (size_t)nkv(sh)), *o16 = malloc(2 * (size_t)nq(sh));
    float *out = malloc(4 * (size_t)nq(sh)), *lse = malloc(4 * (size_t)nrows(sh)), *ent = malloc(4 * (size_t)nrows(sh));
    fill_normal(&r, q, nq(sh), 0.0, 1.0);
    fill_normal(&r, k, nkv(sh), 0.0, 1.0);
    fill_normal(&r, v, nkv(sh), 0.0, 1.0);
    for (int64_t i = 0; i < nq(sh); i++) q[i] = round_dt(dt, q[i]);
    for (int64_t i = 0; i < nkv(sh); i++) k[i] = round_dt(dt, k[i]), v[i] = round_dt(dt, v[i]);
    for (int64_t i = 0; i < nq(sh); i++)
      q16[i] = dt == LPATTN_F16 ? lpattn_f32_to_f16(q[i]) : lpattn_f32_to_bf16(q[i]);
    for (int64_t i = 0; i < nkv(sh); i++) {
      k16[i] = dt == LPATTN_F16 ? lpattn_f32_to_f16(k[i]) : lpattn_f32_to_bf16(k[i]);
      v16[i] = dt == LPATTN_F16 ? lpattn_f32_to_f16(v[i]) : lpattn_f32_to_bf16(v[i]);
    }
    lpattn_tensor tq = lpattn_tensor_4d(q16, dt, sh.B, sh.Hq, sh.Sq, sh.D);
    lpattn_tensor tk = lpattn_tensor_4d(k16, dt, sh.B, sh.Hkv, sh.Skv, sh.D);
    lpattn_tensor tv = lpattn_tensor_4d(v16, dt, sh.B, sh.Hkv, sh.Skv, sh.D);
    lpattn_tensor to = lpattn_tensor_4d(out, LPATTN_F32, sh.B, sh.Hq, sh.Sq, sh.D);
    lpattn_attn_aux aux;
    lpattn_attn_aux_init(&aux);
    aux.lse = lpattn_tensor_4d(lse, LPATTN_F32, sh.B, sh.Hq, sh.Sq, 1);
    aux.entropy = lpattn_tensor_4d(ent, LPATTN_F32, sh.B, sh.Hq, sh.Sq, 1);
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.causal = 1;
    CHECK_STATUS(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, &aux), LPATTN_OK);
    check_against_naive(dt == LPATTN_F16 ? "f16 in" : "bf16 in", sh, q, k, v,
                        1.0 / sqrt((double)sh.D), 1, out, lse, ent);
    /* A 16-bit output is the f32 output rounded once. */
    lpattn_tensor to16 = lpattn_tensor_4d(o16, dt, sh.B, sh.Hq, sh.Sq, sh.D);
    CHECK_STATUS(lpattn_attention(ctx, &tq, &tk, &tv, &to16, &p, NULL), LPATTN_OK);
    int same = 1;
    for (int64_t i = 0; i < nq(sh); i++)
      same &= o16[i] == (dt == LPATTN_F16 ? lpattn_f32_to_f16(out[i]) : lpattn_f32_to_bf16(out[i]));
    CHECK(same, "16-bit output is not the rounded f32 output (dtype %d)", (int)dt);
    free(q), free(k), free(v), free(q16), free(k16), free(v16), free(o16), free(out), free(lse), free(ent);
  }
}

/* Attention over keys [0, a) and [a, Skv) merged equals attention over all. */
static void merge_identity(lpattn_ctx *ctx) {
  shape_t sh = {1, 2, 2, 40, 150, 64}, sa = sh, sb = sh;
  const int64_t a = 70, D = sh.D;
  sa.Skv = a, sb.Skv = sh.Skv - a;
  rng_t r = {4};
  const int64_t no = nq(sh), nr = nrows(sh);
  float *q = malloc(4 * (size_t)no), *k = malloc(4 * (size_t)nkv(sh)), *v = malloc(4 * (size_t)nkv(sh));
  float *ka = malloc(4 * (size_t)nkv(sa)), *va = malloc(4 * (size_t)nkv(sa));
  float *kb = malloc(4 * (size_t)nkv(sb)), *vb = malloc(4 * (size_t)nkv(sb));
  float *o[4], *l[4], *h[4];
  for (int i = 0; i < 4; i++)
    o[i] = malloc(4 * (size_t)no), l[i] = malloc(4 * (size_t)nr), h[i] = malloc(4 * (size_t)nr);
  fill_normal(&r, q, no, 0.0, 1.0);
  fill_normal(&r, k, nkv(sh), 0.0, 1.0);
  fill_normal(&r, v, nkv(sh), 0.0, 1.0);
  for (int64_t hh = 0; hh < sh.Hkv; hh++) {
    memcpy(ka + hh * a * D, k + hh * sh.Skv * D, 4 * (size_t)(a * D));
    memcpy(va + hh * a * D, v + hh * sh.Skv * D, 4 * (size_t)(a * D));
    memcpy(kb + hh * sb.Skv * D, k + (hh * sh.Skv + a) * D, 4 * (size_t)(sb.Skv * D));
    memcpy(vb + hh * sb.Skv * D, v + (hh * sh.Skv + a) * D, 4 * (size_t)(sb.Skv * D));
  }
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o[0], l[0], h[0], NULL, 0), LPATTN_OK);
  CHECK_STATUS(run_attention(ctx, sa, q, ka, va, &p, o[1], l[1], h[1], NULL, 0), LPATTN_OK);
  CHECK_STATUS(run_attention(ctx, sb, q, kb, vb, &p, o[2], l[2], h[2], NULL, 0), LPATTN_OK);
  lpattn_tensor to[4], tl[4], th[4];
  for (int i = 0; i < 4; i++) {
    to[i] = lpattn_tensor_4d(o[i], LPATTN_F32, sh.B, sh.Hq, sh.Sq, D);
    tl[i] = lpattn_tensor_4d(l[i], LPATTN_F32, sh.B, sh.Hq, sh.Sq, 1);
    th[i] = lpattn_tensor_4d(h[i], LPATTN_F32, sh.B, sh.Hq, sh.Sq, 1);
  }
  CHECK_STATUS(lpattn_merge_states(ctx, &to[1], &tl[1], &th[1], &to[2], &tl[2], &th[2], &to[3],
                                   &tl[3], &th[3]),
               LPATTN_OK);
  double eo = 0, el = 0, eh = 0;
  for (int64_t i = 0; i < no; i++) eo = fmax(eo, fabs(o[3][i] - o[0][i]));
  for (int64_t i = 0; i < nr; i++) el = fmax(el, fabs(l[3][i] - l[0][i])), eh = fmax(eh, fabs(h[3][i] - h[0][i]));
  CHECK(eo < 1e-5 && el < 1e-5 && eh < 1e-5, "merge: O %g LSE %g H %g", eo, el, eh);

  /* An empty partial (0, -inf, 0) is the identity, on either side. */
  for (int64_t i = 0; i < no; i++) o[1][i] = 0.0f;
  for (int64_t i = 0; i < nr; i++) l[1][i] = -INFINITY, h[1][i] = 0.0f;
  for (int side = 0; side < 2; side++) {
    int x = side ? 1 : 0, y = side ? 0 : 1;
    CHECK_STATUS(lpattn_merge_states(ctx, &to[x], &tl[x], &th[x], &to[y], &tl[y], &th[y], &to[3],
                                     &tl[3], &th[3]),
                 LPATTN_OK);
    CHECK(memcmp(o[3], o[0], 4 * (size_t)no) == 0 && memcmp(l[3], l[0], 4 * (size_t)nr) == 0 &&
              memcmp(h[3], h[0], 4 * (size_t)nr) == 0,
          "empty partial is not the identity (side %d)", side);
  }
  free(q), free(k), free(v), free(ka), free(va), free(kb), free(vb);
  for (int i = 0; i < 4; i++) free(o[i]), free(l[i]), free(h[i]);
}

/* Batch entries and head groups are independent: a B = 2 call equals two
 * B = 1 calls bitwise, in every precision (selection output included). */
static void batch_independence(lpattn_ctx *ctx) {
  shape_t sh = {2, 4, 2, 96, 160, 64}, s1 = sh;
  s1.B = 1;
  rng_t r = {5};
  const int64_t no = nq(sh), nk = nkv(sh), nr = nrows(sh);
  float *q = malloc(4 * (size_t)no), *k = malloc(4 * (size_t)nk), *v = malloc(4 * (size_t)nk);
  float *o = malloc(4 * (size_t)no), *o1 = malloc(4 * (size_t)no);
  float *l = malloc(4 * (size_t)nr), *l1 = malloc(4 * (size_t)nr);
  int32_t sel[2 * 4 * 3 * 2], sel1[2 * 4 * 3 * 2];
  fill_normal(&r, q, no, 0.5, 1.0);
  fill_normal(&r, k, nk, 0.5, 1.0);
  fill_normal(&r, v, nk, 0.0, 1.0);
  for (int prec = 0; prec <= LPATTN_PREC_THRIFT; prec++) {
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.precision = (lpattn_precision)prec, p.causal = 1, p.pasa = prec % 2, p.block_q = 32;
    p.block_k = 32, p.thrift_k = 2;
    int thrift = prec == LPATTN_PREC_THRIFT;
    CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o, l, NULL, thrift ? sel : NULL, 2), LPATTN_OK);
    for (int b = 0; b < 2; b++)
      CHECK_STATUS(run_attention(ctx, s1, q + b * no / 2, k + b * nk / 2, v + b * nk / 2, &p,
                                 o1 + b * no / 2, l1 + b * nr / 2, NULL, thrift ? sel1 + b * 24 : NULL, 2),
                   LPATTN_OK);
    CHECK(!memcmp(o, o1, 4 * (size_t)no) && !memcmp(l, l1, 4 * (size_t)nr) &&
              (!thrift || !memcmp(sel, sel1, sizeof sel)),
          "precision %d: batch entries not independent", prec);
  }
  free(q), free(k), free(v), free(o), free(o1), free(l), free(l1);
}

int main(void) {
  lpattn_ctx *ctx = ref_ctx();
  shapes(ctx);
  batch_independence(ctx);
  strides(ctx);
  dtypes(ctx);
  merge_identity(ctx);
  lpattn_free(ctx);
  return test_finish();
}
