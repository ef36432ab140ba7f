/* The conformance suite (issue 30 item 5; llama.cpp's test-backend-ops is
 * the model): one case list (conf_cases.h) run on the backend named by
 * argv[1] (ref, cpu, cuda, hip) and compared with the ref backend, with the
 * bounds the per-backend tests use (conf_bounds.h). One line per case (op,
 * params, each error / its bound, verdict), then per-op counts of pass,
 * FAIL and unsupported (LPATTN_ERR_UNSUPPORTED is a gap, not a failure).
 * Exit 77 when the backend is not built or has no device. This file: the
 * driver, lpattn_attention (with lse/entropy/selection) and
 * lpattn_quantize/dequantize; conf_serving.c: KV cache, paged pool and
 * varlen; conf_mla.c: MLA paged decode; conf_grad.c: backward and merge. */
#include "conf_bounds.h"
#include "conf_cases.h"

conf_env E;

static const char *PN[] = {"high", "fp8", "nvfp4", "mxfp4", "thrift", "fp8s"};
static const char *FN[] = {"nvfp4", "mxfp4", "fp8"};
static const char *DN[] = {"f32", "f16", "bf16"};

/* One side's attention outputs. */
typedef struct {
  cbuf o, lse, ent, sel;
} attn_out;

static attn_out attn_out_make(const conf_attn_case *c, int64_t ksel) {
  attn_out r;
  const int64_t rows = c->B * c->Hq * c->Sq;
  r.o = cb_make((size_t)(rows * c->D) * conf_esize(c->out));
  r.lse = cb_make((size_t)rows * 4), r.ent = cb_make((size_t)rows * 4);
  r.sel = cb_make((size_t)(c->B * c->Hq * ((c->Sq + 63) / 64) * (ksel ? ksel : 1)) * 4);
  cb_poison(&r.o), cb_poison(&r.lse), cb_poison(&r.ent), cb_poison(&r.sel);
  return r;
}
static void attn_out_free(attn_out *r) { cb_free(&r->o), cb_free(&r->lse), cb_free(&r->ent), cb_free(&r->sel); }

static lpattn_status attn_run(lpattn_ctx *ctx, int dev, const conf_attn_case *c, lpattn_precision prec,
                              int pasa, const cbuf *q, const cbuf *k, const cbuf *v, attn_out *r,
                              int64_t ksel) {
  lpattn_tensor tq = cb_t4(q, dev, c->in, c->B, c->Hq, c->Sq, c->D);
  lpattn_tensor tk = cb_t4(k, dev, c->in, c->B, c->Hkv, c->Skv, c->D);
  lpattn_tensor tv = cb_t4(v, dev, c->in, c->B, c->Hkv, c->Skv, c->D);
  lpattn_tensor to = cb_t4(&r->o, dev, c->out, c->B, c->Hq, c->Sq, c->D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = prec, p.causal = c->causal, p.pasa = pasa, p.thrift_low = c->low;
  p.thrift_budget = 0.3f, p.softcap = c->softcap;
  if (prec == LPATTN_PREC_THRIFT) /* its rules and selection (HIGH and the rest: none) */
    p.thrift_rule = c->rule, p.selection = c->paper ? LPATTN_SELECT_PAPER : LPATTN_SELECT_CAUSAL;
  if (c->win) p.window_left = c->wl, p.window_right = c->wr;
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = cb_t4(&r->lse, dev, LPATTN_F32, c->B, c->Hq, c->Sq, 1);
  if (c->aux > 1) aux.entropy = cb_t4(&r->ent, dev, LPATTN_F32, c->B, c->Hq, c->Sq, 1);
  if (c->aux > 1 && prec == LPATTN_PREC_THRIFT)
    aux.selection = cb_t4(&r->sel, dev, LPATTN_I32, c->B, c->Hq, (c->Sq + 63) / 64, ksel);
  return lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, &aux);
}

/* Elements of a 16-bit output o16 that are not o32 (f32) rounded once to
 * nearest even (SEMANTICS: a 16-bit output is the f32 result rounded once;
 * tests/ref/test_ref_backward_io.c checks it for the gradients). */
static double not_rounded_once(const void *o16, const float *o32, lpattn_dtype dt, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    const uint16_t want = dt == LPATTN_F16 ? lpattn_f32_to_f16(o32[i]) : lpattn_f32_to_bf16(o32[i]);
    bad += ((const uint16_t *)o16)[i] != want && !(isnan(o32[i]) && isnan(conf_get(o16, dt, i)));
  }
  return (double)bad;
}

static void attn_case(const conf_attn_case *c) {
  const int64_t nq = c->B * c->Hq * c->Sq * c->D, nk = c->B * c->Hkv * c->Skv * c->D;
  const int64_t rows = c->B * c->Hq * c->Sq, es = (int64_t)conf_esize(c->in);
  const int64_t ksel = c->prec == LPATTN_PREC_THRIFT
                           ? lpattn_thrift_k((int)((c->Skv + 63) / 64), 0.3f, c->causal) : 0;
  cbuf q = cb_make((size_t)(nq * es)), k = cb_make((size_t)(nk * es)), v = cb_make((size_t)(nk * es));
  conf_fill(&q, c->in, nq, 0.0, 1.0), conf_fill(&k, c->in, nk, 0.3, 1.0), conf_fill(&v, c->in, nk, 0.0, 1.0);
  /* cpu's bounds are those of f32 outputs (tests/cpu/test_cpu_attention.cc):
   * a 16-bit output there is compared as the backend's f32 result against
   * ref's (the bounds), and as that f32 result rounded once (bitwise) */
  const int via32 = E.kind == CONF_CPU && c->out != LPATTN_F32;
  conf_attn_case cc = *c;
  if (via32) cc.out = LPATTN_F32;
  attn_out rb = attn_out_make(&cc, ksel), rr = attn_out_make(&cc, ksel);
  const lpattn_status sr = attn_run(E.ref, 0, &cc, c->prec, c->pasa, &q, &k, &v, &rr, ksel);
  lpattn_status sb = attn_run(E.be, 1, &cc, c->prec, c->pasa, &q, &k, &v, &rb, ksel);
  cb_down(&rb.o), cb_down(&rb.lse), cb_down(&rb.ent), cb_down(&rb.sel);
  double r16 = 0;
  if (via32 && sb == LPATTN_OK) {
    attn_out r = attn_out_make(c, ksel);
    sb = attn_run(E.be, 1, c, c->prec, c->pasa, &q, &k, &v, &r, ksel);
    cb_down(&r.o);
    r16 = not_rounded_once(r.o.h, rb.o.h, c->out, nq);
    attn_out_free(&r);
  }
  double own = 0; /* the precision's own error: ref against ref HIGH */
  if (sr == LPATTN_OK && (c->prec != LPATTN_PREC_HIGH || c->pasa) && E.kind == CONF_CPU) {
    attn_out rh = attn_out_make(&cc, 0);
    if (attn_run(E.ref, 0, &cc, LPATTN_PREC_HIGH, 0, &q, &k, &v, &rh, 0) == LPATTN_OK)
      own = conf_relerr(rr.o.h, rh.o.h, cc.out, nq);
    attn_out_free(&rh);
  }
  const conf_attn_bound b = conf_bound_attn(c->prec, c->pasa, c->in, c->D, own);
  double (*m)(const float *, const float *, int64_t) = b.lse_rel ? conf_maxrel : conf_maxabs;
  conf_q qs[5] = {{"O", conf_relerr(rb.o.h, rr.o.h, cc.out, nq), b.o},
                  {"LSE", m(rb.lse.h, rr.lse.h, rows), b.lse},
                  {"H", c->aux > 1 ? m(rb.ent.h, rr.ent.h, rows) : 0.0, b.ent}};
  int n = c->aux > 1 ? 3 : 2;
  if (ksel) { /* THRIFT's selection: the same tile indices (both tests: exact) */
    qs[n].what = "sel!=", qs[n].bound = 0, qs[n++].err = memcmp(rb.sel.h, rr.sel.h, rb.sel.bytes) ? 1.0 : 0.0;
  }
  if (via32) qs[n].what = "O16!=", qs[n].bound = 0, qs[n++].err = r16;
  char params[200];
  snprintf(params, sizeof params, "%s%s%s%s %s%s->%s B%lld Hq%lld Hkv%lld Sq%lld Skv%lld D%lld",
           c->causal ? "causal " : "", PN[c->prec], c->prec == LPATTN_PREC_THRIFT ? "/" : "",
           c->prec == LPATTN_PREC_THRIFT ? FN[c->low] : "", c->pasa ? "pasa " : "",
           DN[c->in], DN[c->out], (long long)c->B, (long long)c->Hq, (long long)c->Hkv,
           (long long)c->Sq, (long long)c->Skv, (long long)c->D);
  char full[260];
  int at = snprintf(full, sizeof full, "%s", params);
  if (c->win) at += snprintf(full + at, sizeof full - (size_t)at, " win %d,%d", c->wl, c->wr);
  if (c->softcap > 0) at += snprintf(full + at, sizeof full - (size_t)at, " softcap %g", c->softcap);
  if (c->rule || c->paper)
    snprintf(full + at, sizeof full - (size_t)at, " rule %d%s", c->rule, c->paper ? " paper" : "");
  conf_report(OP_ATTN, full, sb, sr, qs, n);
  attn_out_free(&rb), attn_out_free(&rr);
  cb_free(&q), cb_free(&k), cb_free(&v);
}

void conf_attention(void) {
  for (size_t i = 0; i < sizeof conf_attn_cases / sizeof conf_attn_cases[0]; i++)
    attn_case(&conf_attn_cases[i]);
}
static void conf_attention_late(void) { /* conf_cases.h: after the others, their inputs unchanged */
  for (size_t i = 0; i < sizeof conf_attn_late_cases / sizeof conf_attn_late_cases[0]; i++)
    attn_case(&conf_attn_late_cases[i]);
}

/* A quantized tensor's three arrays on one side. */
typedef struct {
  cbuf codes, scales, outer;
} qbufs;

static int same_outer(const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(isnan(a[i]) && isnan(b[i])) && memcmp(&a[i], &b[i], 4)) return 0;
  return 1;
}

static void quant_case(const conf_quant_case *c) {
  const int64_t B = 2, H = 3, S = 70, D = c->D, n = B * H * S * D;
  const int64_t shape[4] = {B, H, S, D};
  cbuf x = cb_make((size_t)n * conf_esize(c->in));
  for (int64_t i = 0; i < n; i++) {
    double v = conf_normal() * (i % 7 == 0 ? 8.0 : 1.0);
    if (i / D % 11 == 3 && i % D < 32) v = 0.0; /* zero groups */
    if (i % 997 == 5) v = 1e-9;                  /* tiny */
    float f = (float)v;
    if (i == 5 * D + 3) f = NAN;
    if (i == 40 * D + 17) f = -INFINITY;
    if (c->in == LPATTN_F32) ((float *)x.h)[i] = f;
    else ((uint16_t *)x.h)[i] = c->in == LPATTN_F16 ? lpattn_f32_to_f16(f) : lpattn_f32_to_bf16(f);
  }
  cb_up(&x);
  size_t cbytes = 0, sbytes = 0, oc = 0;
  lpattn_qtensor_sizes(c->fmt, c->axis, 64, shape, &cbytes, &sbytes, &oc);
  qbufs s[2]; /* 0: the backend, 1: ref */
  lpattn_qtensor qt[2];
  for (int i = 0; i < 2; i++) {
    s[i].codes = cb_make(cbytes), s[i].scales = cb_make(sbytes + 1), s[i].outer = cb_make(oc * 4 + 4);
    const int dev = i == 0; /* the backend's side */
    lpattn_qtensor t = {c->fmt, c->axis, 64, {B, H, S, D}, dev ? s[i].codes.d : s[i].codes.h,
                        dev ? s[i].scales.d : s[i].scales.h, dev ? s[i].outer.d : s[i].outer.h};
    qt[i] = t;
  }
  lpattn_quant_params p;
  lpattn_quant_params_init(&p);
  p.format = c->fmt, p.axis = c->axis, p.tile = 64, p.mx_scale_round_up = c->mx_up;
  p.rounding = c->sr ? LPATTN_ROUND_STOCHASTIC : LPATTN_ROUND_NEAREST_EVEN, p.seed = 0x1234567890ull;
  lpattn_tensor xh = cb_t4(&x, 0, c->in, B, H, S, D), xd = cb_t4(&x, 1, c->in, B, H, S, D);
  const lpattn_status sr = lpattn_quantize(E.ref, &xh, &qt[1], &p);
  lpattn_status sb = lpattn_quantize(E.be, &xd, &qt[0], &p);
  cb_down(&s[0].codes), cb_down(&s[0].scales), cb_down(&s[0].outer);
  size_t bad = 0;
  for (size_t i = 0; i < cbytes; i++) bad += ((uint8_t *)s[0].codes.h)[i] != ((uint8_t *)s[1].codes.h)[i];
  bad += sbytes && memcmp(s[0].scales.h, s[1].scales.h, sbytes) != 0;
  bad += oc && !same_outer(s[0].outer.h, s[1].outer.h, oc);
  /* dequantize ref's codes on both sides, f32 out */
  cbuf y[2] = {cb_make((size_t)n * 4), cb_make((size_t)n * 4)};
  size_t ybad = 0;
  lpattn_status sd = LPATTN_OK;
  if (sb == LPATTN_OK && sr == LPATTN_OK) {
    for (int a = 0; a < 3; a++) {
      cbuf *cb = a == 0 ? &s[0].codes : a == 1 ? &s[0].scales : &s[0].outer;
      const cbuf *from = a == 0 ? &s[1].codes : a == 1 ? &s[1].scales : &s[1].outer;
      memcpy(cb->h, from->h, cb->bytes), cb_up(cb);
    }
    lpattn_tensor yh = cb_t4(&y[1], 0, LPATTN_F32, B, H, S, D), yd = cb_t4(&y[0], 1, LPATTN_F32, B, H, S, D);
    cb_poison(&y[0]);
    sd = lpattn_dequantize(E.be, &qt[0], &yd);
    if (lpattn_dequantize(E.ref, &qt[1], &yh) != LPATTN_OK) sd = LPATTN_ERR_BACKEND;
    cb_down(&y[0]);
    for (int64_t i = 0; i < n; i++) {
      const float a = ((float *)y[0].h)[i], b = ((float *)y[1].h)[i];
      ybad += !(isnan(a) && isnan(b)) && memcmp(&a, &b, 4) != 0;
    }
    if (sd != LPATTN_OK) sb = sd;
  }
  char params[128];
  snprintf(params, sizeof params, "%s axis %s %s%s %s D%lld", FN[c->fmt], c->axis ? "S" : "D",
           c->sr ? "SR" : "RNE", c->mx_up ? " mx_up" : "", DN[c->in], (long long)D);
  const conf_q qs[2] = {{"bytes!=", (double)bad, 0.0}, {"dequant!=", (double)ybad, 0.0}};
  conf_report(OP_QUANT, params, sb, sr, qs, 2);
  for (int i = 0; i < 2; i++) cb_free(&s[i].codes), cb_free(&s[i].scales), cb_free(&s[i].outer), cb_free(&y[i]);
  cb_free(&x);
}

void conf_quantize(void) {
  for (size_t i = 0; i < sizeof conf_quant_cases / sizeof conf_quant_cases[0]; i++)
    quant_case(&conf_quant_cases[i]);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  static const struct {
    const char *name;
    lpattn_backend b;
    conf_kind kind;
    int dev;
  } BE[] = {{"ref", LPATTN_BACKEND_REF, CONF_REF, 0},
            {"cpu", LPATTN_BACKEND_CPU, CONF_CPU, 0},
            {"cuda", LPATTN_BACKEND_CUDA, CONF_GPU, 1},
            {"hip", LPATTN_BACKEND_HIP, CONF_GPU, 1}};
  const char *want = argc > 1 ? argv[1] : "ref";
  int found = 0;
  for (size_t i = 0; i < sizeof BE / sizeof BE[0]; i++)
    if (!strcmp(want, BE[i].name)) {
      E.name = BE[i].name, E.backend = BE[i].b, E.kind = BE[i].kind, E.dev = BE[i].dev;
      found = 1;
    }
  if (!found) {
    fprintf(stderr, "usage: %s ref|cpu|cuda|hip\n", argv[0]);
    return 2;
  }
  if (!lpattn_backend_available(E.backend)) {
    printf("SKIP: backend %s not built or no device\n", E.name);
    return 77;
  }
  if (!conf_dev_init()) {
    printf("SKIP: this binary has no device memory for %s (build tests/conformance with it)\n", E.name);
    return 77;
  }
  lpattn_context_params cp;
  lpattn_context_params_init(&cp); /* LPATTN_CPU_TEST_THREADS as tests/cpu (qemu-user: 1) */
  if (getenv("LPATTN_CPU_TEST_THREADS")) cp.num_threads = atoi(getenv("LPATTN_CPU_TEST_THREADS"));
  if (lpattn_create(E.backend, &cp, &E.be) != LPATTN_OK) {
    printf("SKIP: no %s context: %s\n", E.name, lpattn_last_error());
    return 77;
  }
  if (lpattn_create(LPATTN_BACKEND_REF, NULL, &E.ref) != LPATTN_OK) {
    fprintf(stderr, "no ref context\n");
    return 1;
  }
  printf("conformance of %s against ref%s\n", E.name,
         E.kind == CONF_REF ? " (a second ref context: bitwise)" : "");
  conf_attention();
  conf_quantize();
  conf_backward();
  conf_paged();
  conf_mla();
  conf_varlen();
  conf_merge();
  conf_attention_late();
  const int rc = conf_summary();
  lpattn_free(E.be), lpattn_free(E.ref);
  return rc;
}
