/* Low-precision tiles and ThriftAttention in ref: error ordering against
 * f64, one low tile recomputed by hand from SEMANTICS with the public
 * quantizers, the Thrift budget, the selection output and its error. */
#include "refutil.h"

/* Public-API quantize/dequantize of a contiguous [1, 1, S, D] f32 block. */
static void qdq(lpattn_ctx *ctx, lpattn_format f, lpattn_axis axis, int tile, const float *x,
                int64_t S, int64_t D, float *y) {
  lpattn_quant_params qp;
  lpattn_quant_params_init(&qp);
  qp.format = f, qp.axis = axis, qp.tile = tile;
  lpattn_qtensor qt = {f, axis, tile, {1, 1, S, D}, NULL, NULL, NULL};
  size_t cb, sb, oc;
  CHECK_STATUS(lpattn_qtensor_sizes(f, axis, tile, qt.shape, &cb, &sb, &oc), LPATTN_OK);
  qt.codes = malloc(cb), qt.scales = malloc(sb ? sb : 1), qt.outer = malloc(4 * (oc ? oc : 1));
  lpattn_tensor tx = lpattn_tensor_4d((void *)x, LPATTN_F32, 1, 1, S, D);
  lpattn_tensor ty = lpattn_tensor_4d(y, LPATTN_F32, 1, 1, S, D);
  CHECK_STATUS(lpattn_quantize(ctx, &tx, &qt, &qp), LPATTN_OK);
  CHECK_STATUS(lpattn_dequantize(ctx, &qt, &ty), LPATTN_OK);
  free(qt.codes), free(qt.scales), free(qt.outer);
}

/* One non-causal low tile (Sq = 32 rows, one KV tile of 64) step by step. */
static void hand_tile(lpattn_ctx *ctx) {
  enum { SQ = 32, SK = 64, D = 64 };
  const lpattn_precision precs[3] = {LPATTN_PREC_FP8, LPATTN_PREC_NVFP4, LPATTN_PREC_MXFP4};
  const lpattn_format fmts[3] = {LPATTN_FMT_FP8, LPATTN_FMT_NVFP4, LPATTN_FMT_MXFP4};
  static float q[SQ * D], k[SK * D], v[SK * D], qd[SQ * D], kd[SK * D], vd[SK * D];
  static float out[SQ * D], lse[SQ], ent[SQ], p32[SK], pd[SK];
  rng_t r = {11};
  fill_normal(&r, q, SQ * D, 0.0, 1.5);
  fill_normal(&r, k, SK * D, 0.0, 1.5);
  fill_normal(&r, v, SK * D, 0.5, 1.0);
  shape_t sh = {1, 1, 1, SQ, SK, D};
  for (int f = 0; f < 3; f++) {
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.precision = precs[f], p.block_q = 32, p.block_k = 64;
    CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, out, lse, ent, NULL, 0), LPATTN_OK);
    /* 1. Q, K per token along D; V per channel over the tile. */
    qdq(ctx, fmts[f], LPATTN_AXIS_D, 64, q, SQ, D, qd);
    qdq(ctx, fmts[f], LPATTN_AXIS_D, 64, k, SK, D, kd);
    qdq(ctx, fmts[f], LPATTN_AXIS_S, 64, v, SK, D, vd);
    double worst = 0, worst_l = 0, worst_h = 0;
    for (int i = 0; i < SQ; i++) {
      double s[SK], m = -INFINITY, l = 0, ps = 0;
      for (int c = 0; c < SK; c++) {
        double a = 0;
        for (int d = 0; d < D; d++) a += (double)qd[i * D + d] * kd[c * D + d];
        s[c] = a * 0.125; /* 1/sqrt(64) */
        m = fmax(m, s[c]);
      }
      /* 2-3. P unquantized for l and the entropy sum. */
      for (int c = 0; c < SK; c++) {
        double pc = exp(s[c] - m);
        l += pc, ps += pc * s[c];
        p32[c] = (float)pc;
      }
      /* 4. P quantized along the keys (one domain: the row). */
      if (fmts[f] == LPATTN_FMT_FP8) {
        for (int c = 0; c < SK; c++) pd[c] = lpattn_e4m3_to_f32(lpattn_f32_to_e4m3(p32[c] * 448.0f)) / 448.0f;
      } else {
        qdq(ctx, fmts[f], LPATTN_AXIS_D, 64, p32, 1, SK, pd);
      }
      for (int d = 0; d < D; d++) {
        double o = 0;
        for (int c = 0; c < SK; c++) o += (double)pd[c] * vd[c * D + d];
        o /= l;
        worst = fmax(worst, fabs(out[i * D + d] - o) / (fabs(o) + 1e-3));
      }
      worst_l = fmax(worst_l, fabs(lse[i] - (m + log(l))));
      worst_h = fmax(worst_h, fabs(ent[i] - (m + log(l) - ps / l)));
    }
    CHECK(worst < 1e-5 && worst_l < 1e-5 && worst_h < 1e-5,
          "hand tile (format %d): O %g LSE %g H %g", f, worst, worst_l, worst_h);
  }
}

/* Non-causal N(0,1): 0 < HIGH << FP8 < NVFP4 ~ MXFP4, all modest. */
static void error_order(lpattn_ctx *ctx) {
  shape_t sh = {1, 2, 2, 256, 256, 128};
  rng_t r = {12};
  float *q = malloc(4 * (size_t)nq(sh)), *k = malloc(4 * (size_t)nkv(sh)), *v = malloc(4 * (size_t)nkv(sh));
  float *out = malloc(4 * (size_t)nq(sh));
  double *o = malloc(8 * (size_t)nq(sh)), *l = malloc(8 * (size_t)nrows(sh)), *h = malloc(8 * (size_t)nrows(sh));
  fill_normal(&r, q, nq(sh), 0.0, 1.0);
  fill_normal(&r, k, nkv(sh), 0.0, 1.0);
  fill_normal(&r, v, nkv(sh), 0.0, 1.0);
  naive_attention(sh, q, k, v, 1.0 / sqrt(128.0), 0, o, l, h);
  double err[4];
  for (int prec = 0; prec < 4; prec++) {
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.precision = (lpattn_precision)prec;
    CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, out, NULL, NULL, NULL, 0), LPATTN_OK);
    err[prec] = rel_rmse(out, o, nq(sh));
  }
  printf("rel RMSE: high %.3g fp8 %.3g nvfp4 %.3g mxfp4 %.3g\n", err[0], err[1], err[2], err[3]);
  CHECK(err[0] < 1e-6, "HIGH error %g", err[0]);
  CHECK(err[1] > 1e-4 && err[1] < err[2], "FP8 %g vs NVFP4 %g", err[1], err[2]);
  CHECK(err[2] > 1e-3 && err[2] < 0.3 && err[3] < 0.3, "NVFP4 %g MXFP4 %g", err[2], err[3]);
  CHECK(err[3] / err[2] > 0.5 && err[3] / err[2] < 3.0, "NVFP4 %g and MXFP4 %g far apart", err[2], err[3]);
  free(q), free(k), free(v), free(out), free(o), free(l), free(h);
}

static void thrift_budget(void) {
  /* Non-causal: k / n closest to f. */
  CHECK(lpattn_thrift_k(20, 0.05f, 0) == 1, "k(20, 5%%)");
  CHECK(lpattn_thrift_k(20, 0.25f, 0) == 5, "k(20, 25%%)");
  CHECK(lpattn_thrift_k(10, 0.5f, 0) == 5, "k(10, 50%%)");
  CHECK(lpattn_thrift_k(3, 0.01f, 0) == 1, "clamped to 1");
  CHECK(lpattn_thrift_k(7, 1.0f, 0) == 7, "k(7, 100%%)");
  /* Causal: (k n - k(k-1)/2) / (n(n+1)/2) closest to f. */
  CHECK(lpattn_thrift_k(4, 0.5f, 1) == 1, "causal k(4, 50%%): 0.4 beats 0.7");
  CHECK(lpattn_thrift_k(10, 0.25f, 1) == 1, "causal k(10, 25%%): 10/55 beats 19/55");
  CHECK(lpattn_thrift_k(20, 0.25f, 1) == 3, "causal k(20, 25%%): 57/210");
  CHECK(lpattn_thrift_k(20, 0.05f, 1) == 1, "causal k(20, 5%%)");
  CHECK(lpattn_thrift_k(7, 1.0f, 1) == 7, "causal k(7, 100%%)");
  CHECK(lpattn_thrift_k(0, 0.5f, 1) == 0 && lpattn_thrift_k(-3, 0.5f, 0) == 0, "n < 1 gives 0");
}

/* Queries share a direction u; the keys of tile `hot` carry it too (a
 * retrieval tile), the other keys are noise. */
static void planted(rng_t *r, shape_t sh, int Bk, int hot, float *q, float *k, float *v) {
  const int64_t D = sh.D;
  float *u = malloc(4 * (size_t)D);
  fill_normal(r, u, D, 0.0, 1.0);
  fill_normal(r, v, nkv(sh), 0.0, 1.0);
  for (int64_t i = 0; i < nq(sh); i++) q[i] = u[i % D] + (float)(0.5 * rng_normal(r));
  for (int64_t i = 0; i < nkv(sh); i++) {
    int64_t s = (i / D) % sh.Skv;
    k[i] = (s / Bk == hot ? u[i % D] : 0.0f) + (float)rng_normal(r);
  }
  free(u);
}

static void thrift_selection(lpattn_ctx *ctx) {
  enum { KSEL = 3, NT = 8, BK = 64, HOT = 2 };
  shape_t sh = {1, 2, 1, NT * BK, NT * BK, 64};
  rng_t r = {13};
  float *q = malloc(4 * (size_t)nq(sh)), *k = malloc(4 * (size_t)nkv(sh)), *v = malloc(4 * (size_t)nkv(sh));
  float *out = malloc(4 * (size_t)nq(sh));
  int32_t sel[2 * NT * KSEL];
  planted(&r, sh, BK, HOT, q, k, v);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = LPATTN_PREC_THRIFT, p.thrift_k = KSEL, p.causal = 1;
  CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, out, NULL, NULL, sel, KSEL), LPATTN_OK);
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < NT; i++) {
      const int32_t *s = sel + (h * NT + i) * KSEL;
      int n = 0, has_diag = 0, has_hot = 0, ascending = 1, padded = 1;
      for (int e = 0; e < KSEL; e++) {
        if (s[e] < 0) {
          for (int f = e; f < KSEL; f++) padded &= s[f] == -1;
          break;
        }
        n++;
        has_diag |= s[e] == i, has_hot |= s[e] == HOT;
        if (e && s[e] <= s[e - 1]) ascending = 0;
        if (s[e] > i) ascending = 0; /* never a masked tile */
      }
      const int want = i + 1 < KSEL ? i + 1 : KSEL;
      CHECK(n == want && padded && ascending && has_diag, "causal tile %d: %d %d %d", i, s[0], s[1], s[2]);
      CHECK(i < HOT || has_hot, "causal tile %d misses the retrieval tile: %d %d %d", i, s[0], s[1], s[2]);
    }
  /* Non-causal (own tile's mean), budget-derived k = 2 of 8 at f = 25%. */
  p.causal = 0, p.thrift_k = 0, p.thrift_budget = 0.25f;
  CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, out, NULL, NULL, sel, 2), LPATTN_OK);
  int all_hot = 1;
  for (int t = 0; t < 2 * NT; t++) all_hot &= sel[2 * t] == HOT || sel[2 * t + 1] == HOT;
  CHECK(all_hot, "non-causal selection misses the retrieval tile");
  free(q), free(k), free(v), free(out);
}

/* THRIFT's error lies between all-high and all-low, and top-k helps. */
static void thrift_error(lpattn_ctx *ctx) {
  shape_t sh = {1, 2, 1, 512, 512, 64};
  rng_t r = {14};
  float *q = malloc(4 * (size_t)nq(sh)), *k = malloc(4 * (size_t)nkv(sh)), *v = malloc(4 * (size_t)nkv(sh));
  float *out = malloc(4 * (size_t)nq(sh));
  double *o = malloc(8 * (size_t)nq(sh)), *l = malloc(8 * (size_t)nrows(sh)), *h = malloc(8 * (size_t)nrows(sh));
  planted(&r, sh, 64, 2, q, k, v);
  naive_attention(sh, q, k, v, 1.0 / 8.0, 1, o, l, h);
  const lpattn_precision precs[3] = {LPATTN_PREC_HIGH, LPATTN_PREC_THRIFT, LPATTN_PREC_NVFP4};
  double err[3];
  for (int i = 0; i < 3; i++) {
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.precision = precs[i], p.causal = 1, p.thrift_k = 2;
    CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, out, NULL, NULL, NULL, 0), LPATTN_OK);
    err[i] = rel_rmse(out, o, nq(sh));
  }
  printf("causal planted: high %.3g thrift(k=2) %.3g nvfp4 %.3g\n", err[0], err[1], err[2]);
  CHECK(err[0] < err[1] && err[1] < 0.8 * err[2], "THRIFT %g not between %g and %g", err[1],
        err[0], err[2]);
  free(q), free(k), free(v), free(out), free(o), free(l), free(h);
}

/* A NaN in one query row poisons that row only, in every precision. */
static void nonfinite_row(lpattn_ctx *ctx) {
  shape_t sh = {1, 1, 1, 200, 200, 64};
  enum { BAD = 70 };
  rng_t r = {15};
  float *q = malloc(4 * (size_t)nq(sh)), *k = malloc(4 * (size_t)nkv(sh)), *v = malloc(4 * (size_t)nkv(sh));
  float *out = malloc(4 * (size_t)nq(sh));
  fill_normal(&r, q, nq(sh), 0.0, 1.0);
  fill_normal(&r, k, nkv(sh), 0.0, 1.0);
  fill_normal(&r, v, nkv(sh), 0.0, 1.0);
  q[BAD * 64 + 3] = NAN;
  for (int prec = 0; prec <= LPATTN_PREC_THRIFT; prec++)
    for (int pasa = 0; pasa < 2; pasa++) {
      lpattn_attn_params p;
      lpattn_attn_params_init(&p);
      p.precision = (lpattn_precision)prec, p.pasa = pasa, p.causal = 1, p.block_q = p.block_k = 32;
      p.thrift_k = 2;
      CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, out, NULL, NULL, NULL, 0), LPATTN_OK);
      int others = 1;
      for (int64_t i = 0; i < nq(sh); i++)
        if (i / 64 != BAD) others &= isfinite(out[i]) != 0;
      CHECK(others && isnan(out[BAD * 64]), "NaN row: precision %d pasa %d", prec, pasa);
    }
  free(q), free(k), free(v), free(out);
}

int main(void) {
  lpattn_ctx *ctx = ref_ctx();
  hand_tile(ctx);
  nonfinite_row(ctx);
  error_order(ctx);
  thrift_budget();
  thrift_selection(ctx);
  thrift_error(ctx);
  lpattn_free(ctx);
  return test_finish();
}
