/* The public entry points of quantization, attention and merge, and the
 * resolution of attention and decode params that the other fronts share
 * (api_bwd.c, api_kv.c, api_cache.c): validate every argument, resolve
 * defaults, then dispatch to the context's backend. Nothing is written
 * before validation has passed. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "argcheck.h"
#include "error.h"
#include "formats.h"
#include "fp8s.h"
#include "internal.h"
#include "window.h"

/* Byte ranges [a, a + na) and [b, b + nb) share a byte (empty ones never). */
static int overlap(const void *a, size_t na, const void *b, size_t nb) {
  const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return na && nb && x < y + nb && y < x + na;
}

/* The quantized tensor's buffers, all written by quantize, are disjoint. */
static lpattn_status check_qbuffers(const lpattn_qtensor *q, size_t cb, size_t sb, size_t oc) {
  if (overlap(q->codes, cb, q->scales, sb) || overlap(q->codes, cb, q->outer, oc * 4) ||
      overlap(q->scales, sb, q->outer, oc * 4))
    return lp_fail(LPATTN_ERR_BAD_STRIDE, "q: codes, scales and outer overlap in memory");
  return LPATTN_OK;
}

/* ---- quantization ------------------------------------------------------- */

lpattn_status lpattn_quantize(lpattn_ctx *ctx, const lpattn_tensor *x, const lpattn_qtensor *q,
                              const lpattn_quant_params *params) {
  lp_err_clear();
  if (!ctx || !x || !q) return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !x ? "x" : "q");
  lpattn_quant_params p;
  lpattn_quant_params_init(&p);
  LP_TRY_ARG("params", lp_take_params(&p, sizeof p, params));
  LP_TRY_ARG("x", lp_check_view(x, 0));
  if (!is_float_io(x->dtype)) return lp_dtype_fail("x", x->dtype, "F32, F16 or BF16");
  if (!valid_format(p.format) || (p.axis != LPATTN_AXIS_D && p.axis != LPATTN_AXIS_S) ||
      (p.rounding != LPATTN_ROUND_NEAREST_EVEN && p.rounding != LPATTN_ROUND_STOCHASTIC))
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT,
                   "params: format = %d, axis = %d, rounding = %d; expected an lpattn_format, "
                   "AXIS_D or AXIS_S, NEAREST_EVEN or STOCHASTIC",
                   (int)p.format, (int)p.axis, (int)p.rounding);
  if (p.axis == LPATTN_AXIS_S && !valid_block(p.tile))
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.tile = %d, expected a multiple of 32 in [32, 256]", p.tile);
  if (q->format != p.format || q->axis != p.axis || (p.axis == LPATTN_AXIS_S && q->tile != p.tile))
    return lp_fail(LPATTN_ERR_BAD_LAYOUT,
                   "q has format %d, axis %d, tile %d but params ask for format %d, axis %d, tile %d",
                   (int)q->format, (int)q->axis, q->tile, (int)p.format, (int)p.axis, p.tile);
  if (!same_shape(x, q->shape)) return lp_shape_fail("x", x->shape, q->shape);
  size_t cb, sb, oc;
  LP_TRY_ARG("q", lpattn_qtensor_sizes(p.format, p.axis, p.tile, q->shape, &cb, &sb, &oc));
  if (!q->codes || (sb && !q->scales) || (oc && !q->outer))
    return lp_fail(LPATTN_ERR_NULL_POINTER, "q.%s is NULL", !q->codes ? "codes" : (sb && !q->scales) ? "scales" : "outer");
  LP_TRY(check_qbuffers(q, cb, sb, oc));
  if (p.check_finite && host(ctx)) LP_TRY_ARG("x", lp_scan_finite(x)); /* device backends check in-kernel */
  return lp_err_backend(ctx->vt->quantize(ctx, x, q, &p), ctx, "quantize");
}

lpattn_status lpattn_dequantize(lpattn_ctx *ctx, const lpattn_qtensor *q, const lpattn_tensor *y) {
  lp_err_clear();
  if (!ctx || !q || !y) return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !q ? "q" : "y");
  LP_TRY_ARG("y", lp_check_view(y, 1));
  if (!is_float_io(y->dtype)) return lp_dtype_fail("y", y->dtype, "F32, F16 or BF16");
  if (!valid_format(q->format) || (q->axis != LPATTN_AXIS_D && q->axis != LPATTN_AXIS_S))
    return lp_fail(LPATTN_ERR_BAD_LAYOUT, "q.format = %d, q.axis = %d: not an lpattn format and axis",
                   (int)q->format, (int)q->axis);
  if (q->axis == LPATTN_AXIS_S && !valid_block(q->tile))
    return lp_fail(LPATTN_ERR_BAD_LAYOUT, "q.tile = %d, expected a multiple of 32 in [32, 256]", q->tile);
  if (!same_shape(y, q->shape)) return lp_shape_fail("y", y->shape, q->shape);
  size_t cb, sb, oc;
  LP_TRY_ARG("q", lpattn_qtensor_sizes(q->format, q->axis, q->tile, q->shape, &cb, &sb, &oc));
  if (!q->codes || (sb && !q->scales) || (oc && !q->outer))
    return lp_fail(LPATTN_ERR_NULL_POINTER, "q.%s is NULL", !q->codes ? "codes" : (sb && !q->scales) ? "scales" : "outer");
  return lp_err_backend(ctx->vt->dequantize(ctx, q, y), ctx, "dequantize");
}

/* ---- attention ---------------------------------------------------------- */

static lpattn_status check_aux_row_tensor(const char *name, const lpattn_tensor *t,
                                          const int64_t want[4], lpattn_dtype dt) {
  LP_TRY_ARG(name, lp_check_view(t, 1));
  if (t->dtype != dt) return lp_dtype_fail(name, t->dtype, lp_dtype_name(dt));
  return same_shape(t, want) ? LPATTN_OK : lp_shape_fail(name, t->shape, want);
}

/* Params shared by prefill and decode: fills every default into pr. */
static lpattn_status resolve_params(const lpattn_attn_params *p, int64_t D, int64_t Skv,
                                    lpattn_attn_problem *pr) {
  const lpattn_status bad = LPATTN_ERR_INVALID_ARGUMENT;
  if ((unsigned)p->precision > LPATTN_PREC_FP8_STATIC)
    return lp_fail(bad, "params.precision = %d, expected HIGH, FP8, NVFP4, MXFP4, THRIFT or FP8_STATIC (0-5)", (int)p->precision);
  if (!valid_format(p->thrift_low))
    return lp_fail(bad, "params.thrift_low = %d, expected NVFP4, MXFP4 or FP8 (0-2)", (int)p->thrift_low);
  if (p->selection != LPATTN_SELECT_CAUSAL && p->selection != LPATTN_SELECT_PAPER)
    return lp_fail(bad, "params.selection = %d, expected CAUSAL (0) or PAPER (1)", (int)p->selection);
  if (!valid_block(p->block_q) || !valid_block(p->block_k))
    return lp_fail(bad, "params.block_q = %d, block_k = %d: expected multiples of 32 in [32, 256]",
                   p->block_q, p->block_k);
  if (p->sm_scale != 0.0f && !(p->sm_scale > 0.0f && p->sm_scale <= LPATTN_SM_SCALE_MAX))
    return lp_fail(bad, "params.sm_scale = %g, expected 0 (1/sqrt(D)) or in (0, %g]",
                   (double)p->sm_scale, (double)LPATTN_SM_SCALE_MAX);
  if (p->precision == LPATTN_PREC_THRIFT &&
      (!(p->thrift_budget > 0.0f && p->thrift_budget <= 1.0f) || p->thrift_k < 0))
    return lp_fail(bad, "params.thrift_budget = %g, thrift_k = %d: expected a budget in (0, 1] and k >= 0",
                   (double)p->thrift_budget, p->thrift_k);
  if (p->thrift_rule & ~(LPATTN_THRIFT_RULE_SINK | LPATTN_THRIFT_RULE_KMAX | LPATTN_THRIFT_RULE_GQA))
    return lp_fail(bad, "params.thrift_rule = %d, expected an OR of SINK (1), KMAX (2) and GQA (4)",
                   p->thrift_rule);
  if (p->pasa_beta != 0.0f && !(p->pasa_beta > 0.0f && p->pasa_beta < 1.0f))
    return lp_fail(bad, "params.pasa_beta = %g, expected 0 (default) or in (0, 1)", (double)p->pasa_beta);
  pr->precision = p->precision;
  pr->low = lp_low_format(p->precision, p->thrift_low);
  pr->causal = p->causal != 0;
  pr->leaky = p->leaky != 0;
  pr->sm_scale = p->sm_scale != 0.0f ? p->sm_scale : (float)(1.0 / sqrt((double)D));
  pr->Bq = p->block_q;
  pr->Bk = p->block_k;
  pr->selection_mode = p->selection;
  pr->thrift_rule = p->precision == LPATTN_PREC_THRIFT ? p->thrift_rule : 0;
  pr->thrift_budget = p->thrift_budget;
  pr->thrift_k = 0;
  if (p->precision == LPATTN_PREC_THRIFT)
    pr->thrift_k = lp_thrift_k_for(p->thrift_k, p->thrift_budget, pr->causal, (Skv + pr->Bk - 1) / pr->Bk);
  pr->pasa = p->pasa != 0;
  pr->pasa_beta = p->pasa_beta != 0.0f ? p->pasa_beta
                                        : (float)lpattn_pasa_beta(LPATTN_F16, pr->Bk, 0.0);
  pr->score_f16 = p->score_f16 != 0;
  pr->mx_round_up = p->mx_scale_round_up != 0;
  return lp_resolve_window(p, pr); /* window and softcap: core/window.c */
}

static lpattn_status resolve_aux(const lpattn_attn_aux *aux_in, lpattn_attn_aux *aux,
                                 lpattn_attn_problem *pr) {
  lpattn_attn_aux_init(aux);
  LP_TRY_ARG("aux", lp_take_params(aux, sizeof *aux, aux_in));
  const int64_t row[4] = {pr->B, pr->Hq, pr->Sq, 1};
  pr->lse = pr->entropy = pr->selection = NULL;
  if (aux->lse.data) {
    LP_TRY(check_aux_row_tensor("aux.lse", &aux->lse, row, LPATTN_F32));
    pr->lse = &aux->lse;
  }
  if (aux->entropy.data) {
    LP_TRY(check_aux_row_tensor("aux.entropy", &aux->entropy, row, LPATTN_F32));
    pr->entropy = &aux->entropy;
  }
  if (aux->selection.data) {
    if (pr->precision != LPATTN_PREC_THRIFT)
      return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "aux.selection is set but precision is not THRIFT");
    const int64_t sel[4] = {pr->B, pr->Hq, (pr->Sq + pr->Bq - 1) / pr->Bq, pr->thrift_k};
    LP_TRY(check_aux_row_tensor("aux.selection", &aux->selection, sel, LPATTN_I32));
    pr->selection = &aux->selection;
  }
  return LPATTN_OK;
}

/* Absolute positions (lpattn.h, SEMANTICS "Absolute positions") -> pr->off. */
static lpattn_status resolve_positions(const lpattn_attn_params *p, lpattn_attn_problem *pr) {
  const lpattn_status bad = LPATTN_ERR_INVALID_ARGUMENT;
  const int64_t lim = (int64_t)1 << 62;
  pr->off = pr->Skv - pr->Sq;
  if (p->positions != 0 && p->positions != 1)
    return lp_fail(bad, "params.positions = %d, expected 0 (bottom-right) or 1 (absolute)", p->positions);
  if (!p->positions) {
    if (p->q_start || p->kv_start)
      return lp_fail(bad, "params.q_start = %lld, kv_start = %lld need params.positions = 1",
                     (long long)p->q_start, (long long)p->kv_start);
    return LPATTN_OK;
  }
  if (p->q_start < 0 || p->kv_start < 0 || p->q_start > lim - pr->Sq || p->kv_start > lim - pr->Skv)
    return lp_fail(bad, "params.q_start = %lld, kv_start = %lld: expected >= 0 and start + length "
                   "<= 2^62", (long long)p->q_start, (long long)p->kv_start);
  if (p->kv_start % pr->Bk)
    return lp_fail(bad, "params.kv_start = %lld is not a multiple of block_k = %d: a key shard must "
                   "quantize the whole sequence's KV tiles", (long long)p->kv_start, pr->Bk);
  if (pr->precision == LPATTN_PREC_THRIFT && (p->q_start || p->kv_start))
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "THRIFT with params.q_start = %lld, kv_start = %lld: its "
                   "top-k needs the scores of the whole sequence's tiles",
                   (long long)p->q_start, (long long)p->kv_start);
  pr->off = p->q_start - p->kv_start;
  return LPATTN_OK;
}

/* Validates a prefill call and resolves it into *pr (its optional outputs
 * live in *aux). Shared by lpattn_attention and lpattn_attention_backward
 * (whose out is an input: out_written = 0, a broadcast view is fine). */
lpattn_status lp_resolve_attention(lpattn_ctx *ctx, const lpattn_tensor *q, const lpattn_tensor *k,
                                   const lpattn_tensor *v, const lpattn_tensor *out,
                                   const lpattn_attn_params *params, const lpattn_attn_aux *aux_in,
                                   lpattn_attn_problem *prp, lpattn_attn_aux *auxp, int out_written) {
  if (!ctx || !q || !k || !v || !out)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !q ? "q" : !k ? "k" : !v ? "v" : "out");
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  LP_TRY_ARG("params", lp_take_params(&p, sizeof p, params));
  LP_TRY_ARG("q", lp_check_view(q, 0));
  LP_TRY_ARG("k", lp_check_view(k, 0));
  LP_TRY_ARG("v", lp_check_view(v, 0));
  LP_TRY_ARG("out", lp_check_view(out, out_written));
  LP_TRY(lp_check_qkv_dtypes(&p, q, k, v)); /* f32/f16/bf16, or E4M3 under FP8_STATIC */
  if (!is_float_io(out->dtype)) return lp_dtype_fail("out", out->dtype, "F32, F16 or BF16");
  lpattn_attn_problem pr;
  memset(&pr, 0, sizeof pr);
  pr.B = q->shape[0], pr.Hq = q->shape[1], pr.Sq = q->shape[2], pr.D = q->shape[3];
  pr.Hkv = k->shape[1], pr.Skv = k->shape[2];
  if (k->shape[0] != pr.B)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "k.shape[0] = %lld but q.shape[0] = %lld",
                   (long long)k->shape[0], (long long)pr.B);
  if (k->shape[3] != pr.D)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "k.shape[3] = %lld but q.shape[3] = %lld",
                   (long long)k->shape[3], (long long)pr.D);
  if (!same_shape(v, k->shape)) return lp_shape_fail("v", v->shape, k->shape);
  if (!same_shape(out, q->shape)) return lp_shape_fail("out", out->shape, q->shape);
  LP_TRY_ARG("q", lp_check_head_dim(pr.D));
  if (pr.Hq % pr.Hkv)
    return lp_fail(LPATTN_ERR_BAD_GQA, "q.shape[1] = %lld query heads is not a multiple of "
                   "k.shape[1] = %lld KV heads", (long long)pr.Hq, (long long)pr.Hkv);
  if (pr.Sq > INT32_MAX || pr.Skv > INT32_MAX)
    return lp_fail(LPATTN_ERR_SIZE_OVERFLOW, "q.shape[2] = %lld, k.shape[2] = %lld: at most 2^31 - 1",
                   (long long)pr.Sq, (long long)pr.Skv);
  LP_TRY(resolve_params(&p, pr.D, pr.Skv, &pr));
  LP_TRY(lp_resolve_fp8s(host(ctx), params, &p, &pr));
  LP_TRY(resolve_positions(&p, &pr));
  LP_TRY(resolve_aux(aux_in, auxp, &pr));
  LP_TRY(lp_window_backend(ctx, &pr, out_written ? LP_WINDOW_PREFILL : LP_WINDOW_BACKWARD));
  pr.q = q, pr.k = k, pr.v = v, pr.out = out;
  /* Device memory cannot be scanned from here: GPU backends do not offer it yet. */
  if (p.check_finite && !host(ctx))
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.check_finite: only host backends scan inputs");
  if (p.check_finite) {
    LP_TRY_ARG("q", lp_scan_finite(q));
    LP_TRY_ARG("k", lp_scan_finite(k));
    LP_TRY_ARG("v", lp_scan_finite(v));
  }
  *prp = pr;
  return LPATTN_OK;
}

lpattn_status lpattn_attention(lpattn_ctx *ctx, const lpattn_tensor *q, const lpattn_tensor *k,
                               const lpattn_tensor *v, const lpattn_tensor *out,
                               const lpattn_attn_params *params, const lpattn_attn_aux *aux_in) {
  lp_err_clear();
  lpattn_attn_problem pr;
  lpattn_attn_aux aux;
  LP_TRY(lp_resolve_attention(ctx, q, k, v, out, params, aux_in, &pr, &aux, 1));
  return lp_err_backend(ctx->vt->attention(ctx, &pr), ctx, "attention");
}

/* ---- decode parameters ------------------------------------------------ */

/* Decode params (lpattn_decode, lpattn_paged_decode): the storage sp fixes
 * tile, precision, PASA and the MXFP4 rule; the call fixes the rest. */
lpattn_status lp_resolve_decode(int host, const lpattn_attn_params *params, const lpattn_attn_aux *aux_in,
                                const lpattn_kv_pool_params *sp, int64_t B, int64_t Sq,
                                int64_t max_len, lpattn_attn_aux *aux, lpattn_attn_problem *pr,
                                int *check_finite) {
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  LP_TRY_ARG("params", lp_take_params(&p, sizeof p, params));
  p.block_q = p.block_k = sp->page_size;
  p.precision = sp->precision;
  p.thrift_low = sp->thrift_low;
  p.pasa = sp->pasa;
  p.pasa_beta = sp->pasa_beta;
  p.mx_scale_round_up = sp->mx_scale_round_up;
  p.causal = 1;
  p.leaky = 0;
  memset(pr, 0, sizeof *pr);
  pr->B = B, pr->Hq = sp->num_q_heads, pr->Hkv = sp->num_kv_heads;
  pr->Sq = Sq, pr->Skv = max_len, pr->D = sp->head_dim;
  if (p.positions || p.q_start || p.kv_start) /* the cache knows its positions */
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.positions: decode takes positions from the cache; "
                   "use lpattn_attention for a shard of a sequence");
  LP_TRY(resolve_params(&p, pr->D, pr->Skv, pr));
  /* An FP8_STATIC pool's k/v descales are its slots' (lpattn_kv_pool_set_descales);
   * the call gives q_descale only */
  if (sp->precision == LPATTN_PREC_FP8_STATIC && (p.k_descale.data || p.v_descale.data))
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.%s: a pool's k and v descales are its slots' "
                   "(lpattn_kv_pool_set_descales)", p.k_descale.data ? "k_descale" : "v_descale");
  LP_TRY(lp_resolve_fp8s(host, params, &p, pr));
  pr->off = pr->Skv - pr->Sq;
  if (p.thrift_k == 0) pr->thrift_k = 0; /* derived per sequence from its own length */
  LP_TRY(resolve_aux(aux_in, aux, pr));
  if (pr->thrift_rule) /* the pools' selection is SPEC 5's (SEMANTICS "THRIFT selection rules") */
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.thrift_rule = %d: decode selects by SPEC 5's rule "
                   "only (thrift_rule = 0)", pr->thrift_rule);
  if (pr->selection) /* decode has no selection output */
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "aux.selection: decode has no selection output");
  *check_finite = p.check_finite != 0;
  return LPATTN_OK;
}

/* ---- merge -------------------------------------------------------------- */

lpattn_status lpattn_merge_states(lpattn_ctx *ctx, const lpattn_tensor *o_a,
                                  const lpattn_tensor *lse_a, const lpattn_tensor *h_a,
                                  const lpattn_tensor *o_b, const lpattn_tensor *lse_b,
                                  const lpattn_tensor *h_b, const lpattn_tensor *o,
                                  const lpattn_tensor *lse, const lpattn_tensor *h) {
  lp_err_clear();
  if (!ctx || !o_a || !lse_a || !o_b || !lse_b || !o || !lse)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !ctx ? "ctx" : !o_a ? "o_a" : !lse_a ? "lse_a"
                   : !o_b ? "o_b" : !lse_b ? "lse_b" : !o ? "o" : "lse");
  int nh = (h_a != NULL) + (h_b != NULL) + (h != NULL);
  if (nh != 0 && nh != 3)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "h_a, h_b, h: %d of 3 given, expected all or none", nh);
  LP_TRY_ARG("o_a", lp_check_view(o_a, 0));
  LP_TRY_ARG("o_b", lp_check_view(o_b, 0));
  LP_TRY_ARG("o", lp_check_view(o, 1));
  if (!is_float_io(o_a->dtype)) return lp_dtype_fail("o_a", o_a->dtype, "F32, F16 or BF16");
  if (!is_float_io(o_b->dtype)) return lp_dtype_fail("o_b", o_b->dtype, "F32, F16 or BF16");
  if (!is_float_io(o->dtype)) return lp_dtype_fail("o", o->dtype, "F32, F16 or BF16");
  if (!same_shape(o_b, o_a->shape)) return lp_shape_fail("o_b", o_b->shape, o_a->shape);
  if (!same_shape(o, o_a->shape)) return lp_shape_fail("o", o->shape, o_a->shape);
  const int64_t row[4] = {o_a->shape[0], o_a->shape[1], o_a->shape[2], 1};
  const lpattn_tensor *rows[6] = {lse_a, lse_b, lse, h_a, h_b, h};
  static const char *const names[6] = {"lse_a", "lse_b", "lse", "h_a", "h_b", "h"};
  for (int i = 0; i < 3 + nh; i++) {
    LP_TRY_ARG(names[i], lp_check_view(rows[i], i == 2 || i == 5));
    if (rows[i]->dtype != LPATTN_F32) return lp_dtype_fail(names[i], rows[i]->dtype, "F32");
    if (!same_shape(rows[i], row)) return lp_shape_fail(names[i], rows[i]->shape, row);
  }
  return lp_err_backend(ctx->vt->merge(ctx, o_a, lse_a, h_a, o_b, lse_b, h_b, o, lse, h), ctx, "merge_states");
}
