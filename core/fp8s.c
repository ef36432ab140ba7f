/* Static-scale FP8 (SPEC 11) in core: see fp8s.h. */
#include <math.h>
#include <stdio.h>

#include "error.h"
#include "formats.h"
#include "fp8s.h"

static int float_io(lpattn_dtype t) { return t == LPATTN_F32 || t == LPATTN_F16 || t == LPATTN_BF16; }

lpattn_status lp_check_qkv_dtypes(const lpattn_attn_params *p, const lpattn_tensor *q,
                                  const lpattn_tensor *k, const lpattn_tensor *v) {
  const lpattn_tensor *t[3] = {q, k, v};
  static const char *const name[3] = {"q", "k", "v"};
  int n8 = 0;
  for (int i = 0; i < 3; i++) n8 += t[i]->dtype == LPATTN_E4M3;
  if (n8 && p->precision != LPATTN_PREC_FP8_STATIC)
    for (int i = 0; i < 3; i++)
      if (t[i]->dtype == LPATTN_E4M3)
        return lp_fail(LPATTN_ERR_BAD_DTYPE, "%s.dtype = E4M3, expected F32, F16 or BF16 (E4M3 "
                       "inputs need precision FP8_STATIC; params.precision = %d)", name[i],
                       (int)p->precision);
  if (n8 == 3) return LPATTN_OK;
  if (n8) /* some but not all */
    for (int i = 0; i < 3; i++)
      if (t[i]->dtype != LPATTN_E4M3)
        return lp_fail(LPATTN_ERR_BAD_DTYPE, "%s.dtype = %s: under FP8_STATIC q, k and v are all "
                       "E4M3 or all F32/F16/BF16", name[i], lp_dtype_name(t[i]->dtype));
  if (!float_io(q->dtype)) return lp_dtype_fail("q", q->dtype, "F32, F16 or BF16");
  if (!float_io(k->dtype)) return lp_dtype_fail("k", k->dtype, "F32, F16 or BF16");
  if (v->dtype != k->dtype) return lp_dtype_fail("v", v->dtype, lp_dtype_name(k->dtype));
  return LPATTN_OK;
}

float lp_fp8s_descale(const lpattn_tensor *t, int64_t b, int64_t h) {
  return t ? lp_load_f32(t->data, LPATTN_F32, lp_off4(t, 0, 0, b, h)) : 1.0f;
}

static lpattn_status check_descale(int host, const char *name, const lpattn_tensor *t,
                                   const lpattn_attn_problem *pr) {
  char arg[32];
  snprintf(arg, sizeof arg, "params.%s", name);
  LP_TRY_ARG(arg, lp_check_view(t, 0));
  if (t->dtype != LPATTN_F32) return lp_dtype_fail(arg, t->dtype, "F32");
  const int64_t want[4] = {1, 1, pr->B, pr->Hkv};
  for (int i = 0; i < 4; i++)
    if (t->shape[i] != want[i]) return lp_shape_fail(arg, t->shape, want);
  if (!host) return LPATTN_OK; /* device memory: the kernel reads the values */
  for (int64_t b = 0; b < pr->B; b++)
    for (int64_t h = 0; h < pr->Hkv; h++) {
      const float d = lp_fp8s_descale(t, b, h);
      if (!(isfinite(d) && d > 0.0f))
        return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "%s[%lld, %lld] = %g: descales must be finite "
                       "and > 0", arg, (long long)b, (long long)h, (double)d);
    }
  return LPATTN_OK;
}

lpattn_status lp_resolve_fp8s(int host, const lpattn_attn_params *caller,
                              const lpattn_attn_params *p, lpattn_attn_problem *pr) {
  const lpattn_tensor *given[3] = {&p->q_descale, &p->k_descale, &p->v_descale};
  const lpattn_tensor *theirs[3] = {caller ? &caller->q_descale : NULL,
                                    caller ? &caller->k_descale : NULL,
                                    caller ? &caller->v_descale : NULL};
  static const char *const name[3] = {"q_descale", "k_descale", "v_descale"};
  const lpattn_tensor **out[3] = {&pr->q_descale, &pr->k_descale, &pr->v_descale};
  const int fp8s = pr->precision == LPATTN_PREC_FP8_STATIC;
  for (int i = 0; i < 3; i++) {
    *out[i] = NULL;
    if (!given[i]->data) continue;
    if (!fp8s)
      return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.%s is set but precision is not FP8_STATIC",
                     name[i]);
    lpattn_status st = check_descale(host, name[i], given[i], pr);
    if (st != LPATTN_OK) return st;
    *out[i] = theirs[i]; /* data set, so the caller's struct holds the field */
  }
  if (fp8s && (p->leaky || p->pasa || p->score_f16))
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.%s with precision FP8_STATIC: static FP8 "
                   "has no such form", p->leaky ? "leaky" : p->pasa ? "pasa" : "score_f16");
  return LPATTN_OK;
}

uint8_t lp_fp8s_code(float x, float d) { return lpattn_f32_to_e4m3(x / d); }

void lp_fp8s_row(const lpattn_tensor *t, int64_t off, int64_t step, int64_t n, float d,
                 float *values) {
  if (t->dtype == LPATTN_E4M3) {
    const uint8_t *c = (const uint8_t *)t->data + off;
    for (int64_t i = 0; i < n; i++) values[i] = lpattn_e4m3_to_f32(c[i * step]);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    values[i] = lpattn_e4m3_to_f32(lp_fp8s_code(lp_load_f32(t->data, t->dtype, off + i * step), d));
}
