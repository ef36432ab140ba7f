/* The API front of the backward pass (lpattn.h "backward", SPEC 10): the
 * forward's call is validated exactly as lpattn_attention does it, then the
 * gradients' tensors; backends read only the resolved lpattn_bwd_problem. */
#include <stdint.h>
#include <string.h>

#include "argcheck.h"
#include "error.h"
#include "internal.h"

void lpattn_attn_grads_init(lpattn_attn_grads *g) {
  if (!g) return;
  memset(g, 0, sizeof *g);
  g->struct_size = sizeof *g;
}

/* Bytes [first, last] an (already checked) view can touch; lp_check_view
 * bounds the span in bytes by SIZE_MAX, so only the address can wrap (then
 * the span reaches the top of the address space). */
static void byte_span(const lpattn_tensor *t, uintptr_t *lo, uintptr_t *hi) {
  uint64_t last = 0;
  for (int i = 0; i < 4; i++) last += (uint64_t)(t->shape[i] - 1) * (uint64_t)t->stride[i];
  const uint64_t es = t->dtype == LPATTN_F32 ? 4 : 2;
  *lo = (uintptr_t)t->data;
  const uintptr_t bytes = (uintptr_t)(last * es + es - 1);
  *hi = *lo + bytes < *lo ? UINTPTR_MAX : *lo + bytes;
}

/* Whether delta (elements) = sum d[i] * st[i] with |d[i]| < n[i], for dims
 * i >= at, strides sorted descending and nested (each larger than the reach
 * of all smaller ones): then only floor and ceil of delta / st[at] can work.
 * Dims of extent 1 take no step, whatever their stride (INT64_MAX, say).
 * No step overflows: |delta| < 2^62, |d| < n[at] keeps d * st[at] within
 * the view's reach (int64 for a checked view), and delta, d * st[at] share
 * their sign. */
static int reachable(int64_t delta, const int64_t *st, const int64_t *n, int at) {
  if (at == 4) return delta == 0;
  if (st[at] == 0 || n[at] == 1) return reachable(delta, st, n, at + 1);
  int64_t inner = 0;
  for (int i = at + 1; i < 4; i++) inner += (n[i] - 1) * st[i];
  const int64_t f = delta >= 0 ? delta / st[at] : -((-delta - 1) / st[at]) - 1;
  for (int64_t d = f; d <= f + 1; d++) {
    if ((d < 0 ? -d : d) >= n[at]) continue;
    const int64_t rest = delta - d * st[at]; /* d * st[at] and delta: one sign */
    if ((rest < 0 ? -rest : rest) <= inner && reachable(rest, st, n, at + 1)) return 1;
  }
  return 0;
}

/* Whether two checked views share a byte. Views of one dtype with the same
 * nested strides (dq/dk/dv interleaved in one packed buffer, say) are tested
 * element by element; others by their byte spans (conservative). */
static int spans_meet(const lpattn_tensor *a, const lpattn_tensor *b) {
  uintptr_t a0, a1, b0, b1;
  byte_span(a, &a0, &a1), byte_span(b, &b0, &b1);
  if (!(a0 <= b1 && b0 <= a1)) return 0;
  const int64_t es = a->dtype == LPATTN_F32 ? 4 : 2;
  /* b0 - a0 in elements; a distance past INT64_MAX bytes stays conservative */
  const uintptr_t dist = b0 >= a0 ? b0 - a0 : a0 - b0;
  if (a->dtype != b->dtype || dist % (uintptr_t)es || dist > (uintptr_t)INT64_MAX) return 1;
  const int64_t gap = (b0 >= a0 ? 1 : -1) * (int64_t)(dist / (uintptr_t)es);
  int64_t st[4], n[4];
  for (int i = 0; i < 4; i++) {
    if (a->stride[i] != b->stride[i] || a->shape[i] != b->shape[i]) return 1;
    st[i] = a->stride[i], n[i] = a->shape[i];
  }
  for (int i = 0; i < 4; i++) /* sort by stride, descending (4 elements) */
    for (int j = i + 1; j < 4; j++)
      if (st[j] > st[i]) {
        const int64_t t = st[i], u = n[i];
        st[i] = st[j], n[i] = n[j], st[j] = t, n[j] = u;
      }
  for (int i = 0; i < 4; i++) {
    int64_t inner = 0;
    for (int j = i + 1; j < 4; j++) inner += (n[j] - 1) * st[j];
    if (n[i] > 1 && st[i] <= inner) return 1; /* not nested: stay conservative */
  }
  return reachable(gap, st, n, 0);
}

/* A gradient output: a float view of the given shape. */
static lpattn_status check_grad(const char *name, const lpattn_tensor *t, const int64_t shape[4]) {
  LP_TRY_ARG(name, lp_check_view(t, 1));
  if (!is_float_io(t->dtype)) return lp_dtype_fail(name, t->dtype, "F32, F16 or BF16");
  return same_shape(t, shape) ? LPATTN_OK : lp_shape_fail(name, t->shape, shape);
}

lpattn_status lpattn_attention_backward(lpattn_ctx *ctx, const lpattn_tensor *q,
                                        const lpattn_tensor *k, const lpattn_tensor *v,
                                        const lpattn_tensor *out, const lpattn_tensor *lse,
                                        const lpattn_tensor *dout, const lpattn_attn_params *params,
                                        const lpattn_attn_grads *grads_in) {
  lp_err_clear();
  if (!lse || !dout || !grads_in)
    return lp_fail(LPATTN_ERR_NULL_POINTER, "%s is NULL", !lse ? "lse" : !dout ? "dout" : "grads");
  lpattn_attn_grads g;
  lpattn_attn_grads_init(&g);
  LP_TRY_ARG("grads", lp_take_params(&g, sizeof g, grads_in));
  /* The forward's call, with lse as its optional output (its checks: f32,
   * [B, Hq, Sq, 1]); out is read here, never written. */
  lpattn_attn_aux aux_in, aux;
  lpattn_attn_aux_init(&aux_in);
  aux_in.lse = *lse;
  lpattn_bwd_problem pr;
  memset(&pr, 0, sizeof pr);
  LP_TRY(lp_resolve_attention(ctx, q, k, v, out, params, &aux_in, &pr.f, &aux, 0));
  if (!pr.f.lse) return lp_fail(LPATTN_ERR_NULL_POINTER, "lse.data is NULL (the forward's LSE is required)");
  if (pr.f.precision == LPATTN_PREC_FP8_STATIC)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.precision = FP8_STATIC: the backward has no static FP8 yet");
  if (pr.f.pasa || pr.f.score_f16)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "params.%s: the backward has no PASA / f16-score form yet",
                   pr.f.pasa ? "pasa" : "score_f16");
  LP_TRY_ARG("dout", lp_check_view(dout, 0));
  if (!is_float_io(dout->dtype)) return lp_dtype_fail("dout", dout->dtype, "F32, F16 or BF16");
  if (!same_shape(dout, q->shape)) return lp_shape_fail("dout", dout->shape, q->shape);
  lpattn_attn_params fp; /* already taken once by the resolution: cannot fail */
  lpattn_attn_params_init(&fp);
  if (params) (void)lp_take_params(&fp, sizeof fp, params);
  if (fp.check_finite) LP_TRY_ARG("dout", lp_scan_finite(dout)); /* q, k, v: by the resolution */
  LP_TRY(check_grad("grads.dq", &g.dq, q->shape));
  LP_TRY(check_grad("grads.dk", &g.dk, k->shape));
  LP_TRY(check_grad("grads.dv", &g.dv, k->shape));
  /* The gradients are accumulated in place by some backends: no output may
   * share a byte with another output or with an input. */
  const lpattn_tensor *outs[3] = {&g.dq, &g.dk, &g.dv};
  const lpattn_tensor *ins[6] = {q, k, v, out, dout, &aux.lse};
  static const char *const on[3] = {"grads.dq", "grads.dk", "grads.dv"};
  static const char *const in[6] = {"q", "k", "v", "out", "dout", "lse"};
  for (int i = 0; i < 3; i++) {
    for (int j = i + 1; j < 3; j++)
      if (spans_meet(outs[i], outs[j]))
        return lp_fail(LPATTN_ERR_BAD_STRIDE, "%s and %s share memory", on[i], on[j]);
    for (int j = 0; j < 6; j++)
      if (spans_meet(outs[i], ins[j]))
        return lp_fail(LPATTN_ERR_BAD_STRIDE, "%s shares memory with the input %s", on[i], in[j]);
  }
  if (!ctx->vt->backward)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the %s backend has no backward yet", ctx->vt->name);
  /* f.lse, set by the resolution above, is the forward's LSE: an input here. */
  pr.f.entropy = pr.f.selection = NULL;
  pr.dout = dout, pr.dq = &g.dq, pr.dk = &g.dk, pr.dv = &g.dv;
  pr.seed = g.seed;
  return lp_err_backend(ctx->vt->backward(ctx, &pr), ctx, "attention_backward");
}
