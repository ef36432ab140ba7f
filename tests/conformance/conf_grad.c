/* Conformance cases of lpattn_attention_backward and lpattn_merge_states
 * (conf.h): the backend against ref with conf_bounds.h's bounds. */
#include "conf_bounds.h"
#include "conf_cases.h"

static const char *PN[] = {"high", "fp8", "nvfp4", "mxfp4", "thrift"};

/* The backward of one case: ref's forward (O, LSE) is given to both sides,
 * so the comparison is of the backward alone (tests/ref/test_ref_backward.c
 * test_cpu_vs_ref does the same). */
static void bwd_case(const conf_bwd_case *c) {
  const int64_t nq = c->B * c->Hq * c->Sq * c->D, nk = c->B * c->Hkv * c->Skv * c->D;
  const int64_t rows = c->B * c->Hq * c->Sq;
  cbuf q = cb_make((size_t)nq * 2), k = cb_make((size_t)nk * 2), v = cb_make((size_t)nk * 2);
  cbuf dout = cb_make((size_t)nq * 2), o = cb_make((size_t)nq * 4), lse = cb_make((size_t)rows * 4);
  conf_fill(&q, LPATTN_F16, nq, 0.0, 1.0), conf_fill(&k, LPATTN_F16, nk, 0.3, 1.0);
  conf_fill(&v, LPATTN_F16, nk, 0.0, 1.0), conf_fill(&dout, LPATTN_F16, nq, 0.0, 1.0);
  cbuf g[2][3]; /* [backend, ref][dq, dk, dv], f32 */
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < 3; i++) g[s][i] = cb_make((size_t)(i ? nk : nq) * 4), cb_poison(&g[s][i]);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = c->prec, p.causal = c->causal;
  lpattn_status st[2] = {LPATTN_OK, LPATTN_OK};
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = cb_t4(&lse, 0, LPATTN_F32, c->B, c->Hq, c->Sq, 1);
  {
    lpattn_tensor tq = cb_t4(&q, 0, LPATTN_F16, c->B, c->Hq, c->Sq, c->D);
    lpattn_tensor tk = cb_t4(&k, 0, LPATTN_F16, c->B, c->Hkv, c->Skv, c->D);
    lpattn_tensor tv = cb_t4(&v, 0, LPATTN_F16, c->B, c->Hkv, c->Skv, c->D);
    lpattn_tensor to = cb_t4(&o, 0, LPATTN_F32, c->B, c->Hq, c->Sq, c->D);
    st[1] = lpattn_attention(E.ref, &tq, &tk, &tv, &to, &p, &aux);
    cb_up(&o), cb_up(&lse);
  }
  for (int s = 0; s < 2 && st[1] == LPATTN_OK; s++) {
    const int dev = s == 0; /* the backend's side */
    lpattn_tensor tq = cb_t4(&q, dev, LPATTN_F16, c->B, c->Hq, c->Sq, c->D);
    lpattn_tensor tk = cb_t4(&k, dev, LPATTN_F16, c->B, c->Hkv, c->Skv, c->D);
    lpattn_tensor tv = cb_t4(&v, dev, LPATTN_F16, c->B, c->Hkv, c->Skv, c->D);
    lpattn_tensor to = cb_t4(&o, dev, LPATTN_F32, c->B, c->Hq, c->Sq, c->D);
    lpattn_tensor tl = cb_t4(&lse, dev, LPATTN_F32, c->B, c->Hq, c->Sq, 1);
    lpattn_tensor td = cb_t4(&dout, dev, LPATTN_F16, c->B, c->Hq, c->Sq, c->D);
    lpattn_attn_grads gr;
    lpattn_attn_grads_init(&gr);
    gr.dq = cb_t4(&g[s][0], dev, LPATTN_F32, c->B, c->Hq, c->Sq, c->D);
    gr.dk = cb_t4(&g[s][1], dev, LPATTN_F32, c->B, c->Hkv, c->Skv, c->D);
    gr.dv = cb_t4(&g[s][2], dev, LPATTN_F32, c->B, c->Hkv, c->Skv, c->D);
    gr.seed = 7;
    st[s] = lpattn_attention_backward(s ? E.ref : E.be, &tq, &tk, &tv, &to, &tl, &td, &p, &gr);
  }
  for (int i = 0; i < 3; i++) cb_down(&g[0][i]);
  const double bound = conf_bound_bwd(c->prec);
  conf_q qs[3] = {{"dQ", 0, bound}, {"dK", 0, bound}, {"dV", 0, bound}};
  for (int i = 0; i < 3; i++) qs[i].err = conf_relerr(g[0][i].h, g[1][i].h, LPATTN_F32, i ? nk : nq);
  char params[128];
  snprintf(params, sizeof params, "%s%s f16 B%lld Hq%lld Hkv%lld Sq%lld Skv%lld D%lld",
           c->causal ? "causal " : "", PN[c->prec], (long long)c->B, (long long)c->Hq,
           (long long)c->Hkv, (long long)c->Sq, (long long)c->Skv, (long long)c->D);
  conf_report(OP_BWD, params, st[0], st[1], qs, 3);
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < 3; i++) cb_free(&g[s][i]);
  cb_free(&q), cb_free(&k), cb_free(&v), cb_free(&dout), cb_free(&o), cb_free(&lse);
}

void conf_backward(void) {
  for (size_t i = 0; i < sizeof conf_bwd_cases / sizeof conf_bwd_cases[0]; i++)
    bwd_case(&conf_bwd_cases[i]);
}

/* SPEC 7 merge of two f32 states with entropy, empty partials (LSE -inf)
 * among them, and the output aliasing input a (tests/cpu Merge()). */
void conf_merge(void) {
  const int64_t H = 3, S = 40, D = 32, n = H * S * D, m = H * S;
  cbuf oa = cb_make((size_t)n * 4), ob = cb_make((size_t)n * 4);
  cbuf la = cb_make((size_t)m * 4), lb = cb_make((size_t)m * 4), ha = cb_make((size_t)m * 4),
       hb = cb_make((size_t)m * 4);
  conf_fill(&oa, LPATTN_F32, n, 0.0, 2.0), conf_fill(&ob, LPATTN_F32, n, 0.0, 2.0);
  for (int64_t i = 0; i < m; i++) {
    ((float *)la.h)[i] = i % 7 == 0 ? -INFINITY : (float)(5.0 + 2.0 * conf_normal());
    ((float *)lb.h)[i] = i % 5 == 0 ? -INFINITY : (float)(5.0 + 2.0 * conf_normal());
    ((float *)ha.h)[i] = (float)fabs(2.0 * conf_normal()), ((float *)hb.h)[i] = (float)fabs(2.0 * conf_normal());
  }
  cb_up(&la), cb_up(&lb), cb_up(&ha), cb_up(&hb);
  cbuf o[2] = {cb_make((size_t)n * 4), cb_make((size_t)n * 4)};
  cbuf l[2] = {cb_make((size_t)m * 4), cb_make((size_t)m * 4)}, h[2] = {cb_make((size_t)m * 4), cb_make((size_t)m * 4)};
  lpattn_status st[2];
  for (int s = 0; s < 2; s++) {
    const int dev = s == 0; /* the backend's side */
    memcpy(o[s].h, oa.h, (size_t)n * 4), cb_up(&o[s]); /* o aliases o_a */
    if (s == 0) cb_poison(&l[s]), cb_poison(&h[s]);
    else memset(l[s].h, 0xFF, l[s].bytes), memset(h[s].h, 0xFF, h[s].bytes);
    lpattn_tensor ta = cb_t4(&o[s], dev, LPATTN_F32, 1, H, S, D), tb = cb_t4(&ob, dev, LPATTN_F32, 1, H, S, D);
    lpattn_tensor tla = cb_t4(&la, dev, LPATTN_F32, 1, H, S, 1), tlb = cb_t4(&lb, dev, LPATTN_F32, 1, H, S, 1);
    lpattn_tensor tha = cb_t4(&ha, dev, LPATTN_F32, 1, H, S, 1), thb = cb_t4(&hb, dev, LPATTN_F32, 1, H, S, 1);
    lpattn_tensor tl = cb_t4(&l[s], dev, LPATTN_F32, 1, H, S, 1), th = cb_t4(&h[s], dev, LPATTN_F32, 1, H, S, 1);
    st[s] = lpattn_merge_states(s ? E.ref : E.be, &ta, &tla, &tha, &tb, &tlb, &thb, &ta, &tl, &th);
    if (s == 0) cb_down(&o[0]), cb_down(&l[0]), cb_down(&h[0]);
  }
  const float *ro = o[1].h, *rl = l[1].h, *rh = h[1].h; /* ref wrote the host side */
  const conf_attn_bound b = conf_bound_merge();
  double (*mm)(const float *, const float *, int64_t) = b.lse_rel ? conf_maxrel : conf_maxabs;
  const conf_q qs[3] = {{"O", conf_relerr(o[0].h, ro, LPATTN_F32, n), b.o},
                        {"LSE", mm(l[0].h, rl, m), b.lse},
                        {"H", mm(h[0].h, rh, m), b.ent}};
  conf_report(OP_MERGE, "f32 H3 S40 D32 entropy, out aliases o_a", st[0], st[1], qs, 3);
  for (int s = 0; s < 2; s++) cb_free(&o[s]), cb_free(&l[s]), cb_free(&h[s]);
  cb_free(&oa), cb_free(&ob), cb_free(&la), cb_free(&lb), cb_free(&ha), cb_free(&hb);
}
