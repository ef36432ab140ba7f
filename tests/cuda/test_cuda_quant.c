/* CUDA quantize/dequantize are bit-exact with ref (every format, axis,
 * rounding and scale rule, with zero groups, non-finite values, padding and
 * a BSHD view), and lpattn_merge_states matches ref. */
#include "cudatest.h"

static int same_f32_bits(const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (isnan(a[i]) && isnan(b[i])) continue;
    if (memcmp(&a[i], &b[i], 4)) return 0;
  }
  return 1;
}

static void quant_case(lpattn_ctx *cu, lpattn_ctx *ref, lpattn_format f, lpattn_axis ax,
                       lpattn_dtype dt, int sr, int mx_up, int bshd, int64_t D) {
  const int64_t B = 2, H = 3, S = 70;
  const int64_t shape[4] = {B, H, S, D};
  /* host x: either BHSD or BSHD storage described as [B, H, S, D] */
  ct_pair x = ct_make(dt, B, H, S, D);
  if (bshd) {
    x.h.stride[3] = 1, x.h.stride[1] = D, x.h.stride[2] = H * D, x.h.stride[0] = S * H * D;
    memcpy(x.d.stride, x.h.stride, sizeof x.h.stride);
  }
  for (int64_t i = 0; i < B * H * S * D; i++) {
    double v = ct_normal() * (i % 7 == 0 ? 8.0 : 1.0);
    if (i / D % 11 == 3 && i % D < 32) v = 0.0;          /* zero groups */
    if (i % 997 == 5) v = 1e-9;                            /* tiny */
    lp_store_f32(x.h.data, dt, i, (float)v);
  }
  lp_store_f32(x.h.data, dt, 5 * D + 3, NAN);
  lp_store_f32(x.h.data, dt, 40 * D + 17, -INFINITY);
  ct_up(&x);
  ct_qpair q;
  ct_qpair_make(&q, f, ax, shape);
  lpattn_quant_params p;
  lpattn_quant_params_init(&p);
  p.format = f, p.axis = ax, p.tile = 64, p.mx_scale_round_up = mx_up;
  p.rounding = sr ? LPATTN_ROUND_STOCHASTIC : LPATTN_ROUND_NEAREST_EVEN, p.seed = 0x1234567890ull;
  ct_qpair_quantize(&q, cu, ref, &x, &p);
  const size_t cb = q.cb, sb = q.sb, oc = q.oc;
  size_t bad = 0;
  for (size_t i = 0; i < cb; i++) bad += q.h.codes[i] != q.back.codes[i];
  CHECK(bad == 0, "codes differ in %zu of %zu bytes (fmt %d axis %d dt %d sr %d mx_up %d bshd %d)", bad,
        cb, f, ax, dt, sr, mx_up, bshd);
  CHECK(sb == 0 || memcmp(q.h.scales, q.back.scales, sb) == 0, "scales differ (fmt %d axis %d sr %d)", f, ax, sr);
  CHECK(oc == 0 || same_f32_bits(q.h.outer, q.back.outer, oc), "outer differs (fmt %d axis %d)", f, ax);
  /* dequantize the same (host) codes on both backends */
  ht_up(q.d.codes, q.h.codes, cb);
  if (sb) ht_up(q.d.scales, q.h.scales, sb);
  if (oc) ht_up(q.d.outer, q.h.outer, oc * 4);
  for (int odt = 0; odt < 3; odt++) {
    ct_pair y = ct_make((lpattn_dtype)odt, B, H, S, D);
    ct_poison(&y);
    float *yr = malloc(y.bytes);
    lpattn_tensor tr = y.h;
    tr.data = yr;
    CHECK_STATUS(lpattn_dequantize(ref, &q.h, &tr), LPATTN_OK);
    CHECK_STATUS(lpattn_dequantize(cu, &q.d, &y.d), LPATTN_OK);
    ct_down(&y);
    size_t n = (size_t)ct_count(&y.h), diff = 0;
    for (size_t i = 0; i < n; i++) {
      float a = ct_get(&y.h, (int64_t)i), b = ct_get(&tr, (int64_t)i);
      diff += !(isnan(a) && isnan(b)) && memcmp(&a, &b, 4) != 0;
    }
    CHECK(diff == 0, "dequantize differs in %zu elements (fmt %d axis %d out dt %d)", diff, f, ax, odt);
    free(yr);
    ct_free(&y);
  }
  ct_qpair_free(&q);
  ct_free(&x);
}

static void merge_case(lpattn_ctx *cu, lpattn_ctx *ref, int with_h) {
  const int64_t B = 2, H = 4, S = 33, D = 64;
  ct_pair o[3], l[3], h[3];
  for (int i = 0; i < 3; i++) {
    o[i] = ct_make(i == 2 ? LPATTN_BF16 : LPATTN_F32, B, H, S, D);
    l[i] = ct_make(LPATTN_F32, B, H, S, 1);
    h[i] = ct_make(LPATTN_F32, B, H, S, 1);
  }
  for (int i = 0; i < 2; i++) {
    ct_fill(&o[i], 0, 1);
    for (int64_t r = 0; r < B * H * S; r++) {
      ((float *)l[i].h.data)[r] = (r % 9 == i) ? -INFINITY : (float)(3 * ct_normal());
      ((float *)h[i].h.data)[r] = (float)(2 * ct_unif());
    }
    ct_up(&l[i]), ct_up(&h[i]);
  }
  ct_pair ro = ct_make(LPATTN_BF16, B, H, S, D), rl = ct_make(LPATTN_F32, B, H, S, 1),
          rh = ct_make(LPATTN_F32, B, H, S, 1);
  CHECK_STATUS(lpattn_merge_states(ref, &o[0].h, &l[0].h, with_h ? &h[0].h : NULL, &o[1].h, &l[1].h,
                                   with_h ? &h[1].h : NULL, &ro.h, &rl.h, with_h ? &rh.h : NULL),
               LPATTN_OK);
  ct_poison(&o[2]), ct_poison(&l[2]), ct_poison(&h[2]);
  CHECK_STATUS(lpattn_merge_states(cu, &o[0].d, &l[0].d, with_h ? &h[0].d : NULL, &o[1].d, &l[1].d,
                                   with_h ? &h[1].d : NULL, &o[2].d, &l[2].d, with_h ? &h[2].d : NULL),
               LPATTN_OK);
  ct_down(&o[2]), ct_down(&l[2]), ct_down(&h[2]);
  CHECK(ct_relerr(&o[2].h, &ro.h) < 1e-2, "merge O err %g", ct_relerr(&o[2].h, &ro.h));
  CHECK(ct_maxabs(&l[2].h, &rl.h) < 1e-5, "merge LSE err %g", ct_maxabs(&l[2].h, &rl.h));
  if (with_h) CHECK(ct_maxabs(&h[2].h, &rh.h) < 1e-5, "merge H err %g", ct_maxabs(&h[2].h, &rh.h));
  /* in place: output aliases input a */
  CHECK_STATUS(lpattn_merge_states(cu, &o[0].d, &l[0].d, NULL, &o[1].d, &l[1].d, NULL, &o[0].d,
                                   &l[0].d, NULL),
               LPATTN_OK);
  ct_down(&l[0]);
  CHECK(ct_maxabs(&l[0].h, &rl.h) < 1e-5, "in-place merge LSE err %g", ct_maxabs(&l[0].h, &rl.h));
  for (int i = 0; i < 3; i++) ct_free(&o[i]), ct_free(&l[i]), ct_free(&h[i]);
  ct_free(&ro), ct_free(&rl), ct_free(&rh);
}

int main(void) {
  lpattn_ctx *cu = NULL, *ref = NULL;
  if (!ct_setup(&cu, &ref)) return test_skip("no usable GPU device");
  const lpattn_format fmts[3] = {LPATTN_FMT_NVFP4, LPATTN_FMT_MXFP4, LPATTN_FMT_FP8};
  for (int fi = 0; fi < 3; fi++)
    for (int ax = 0; ax < 2; ax++)
      for (int sr = 0; sr < 2; sr++) {
        quant_case(cu, ref, fmts[fi], (lpattn_axis)ax, LPATTN_F32, sr, 0, 0, 64);
        quant_case(cu, ref, fmts[fi], (lpattn_axis)ax, LPATTN_BF16, sr, 0, sr, 64);
        if (fmts[fi] == LPATTN_FMT_MXFP4) quant_case(cu, ref, fmts[fi], (lpattn_axis)ax, LPATTN_F16, sr, 1, 0, 64);
        /* 16-bit rows of D = 128 and 256: the one-thread-per-group kernels with 8 and 16
         * (or 4 and 8) groups per domain along D */
        quant_case(cu, ref, fmts[fi], (lpattn_axis)ax, LPATTN_F16, sr, 0, sr, 128);
        quant_case(cu, ref, fmts[fi], (lpattn_axis)ax, LPATTN_BF16, sr, 0, 0, 256);
      }
  /* check_finite: the call fails before writing */
  {
    ct_pair x = ct_make(LPATTN_F32, 1, 1, 4, 64);
    ct_fill(&x, 0, 1);
    ((float *)x.h.data)[7] = NAN;
    ct_up(&x);
    const int64_t shape[4] = {1, 1, 4, 64};
    size_t cb, sb, oc;
    lpattn_qtensor_sizes(LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, shape, &cb, &sb, &oc);
    lpattn_qtensor q = {LPATTN_FMT_NVFP4, LPATTN_AXIS_D, 64, {1, 1, 4, 64}, ht_dalloc(cb), ht_dalloc(sb), ht_dalloc(oc * 4)};
    lpattn_quant_params p;
    lpattn_quant_params_init(&p);
    p.check_finite = 1;
    CHECK_STATUS(lpattn_quantize(cu, &x.d, &q, &p), LPATTN_ERR_NONFINITE);
    ht_dfree(q.codes), ht_dfree(q.scales), ht_dfree(q.outer);
    ct_free(&x);
  }
  merge_case(cu, ref, 1);
  merge_case(cu, ref, 0);
  CHECK(ht_dsync(), "device error");
  lpattn_free(cu);
  lpattn_free(ref);
  return test_finish();
}
