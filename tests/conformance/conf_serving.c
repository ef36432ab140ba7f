/* Conformance cases of the serving ops (conf.h): lpattn_kv_cache (append,
 * lpattn_decode), the paged pool (append, then lpattn_paged_decode or
 * lpattn_paged_prefill) and ragged batches (lpattn_attention_varlen), the
 * backend against ref with conf_bounds.h's bounds. */
#include "conf_bounds.h"
#include "conf_cases.h"

static const char *PN[] = {"high", "fp8", "nvfp4", "mxfp4", "thrift", "fp8_static"};

enum { PHQ = 8, PHKV = 2, PD = 128, PT = 64, PNS = 3, PMAXP = 8, PNEW = 40 };
static const int32_t plen[PNS] = {300, 70, 129};
#define PL (300 + PNEW) /* stream length */

/* Token streams of the sequences, f16 [1, H, PL, D] in host memory. */
static cbuf pk[PNS], pv[PNS], pq[PNS];

static void streams(void) {
  for (int s = 0; s < PNS; s++) {
    pk[s] = cb_make((size_t)PHKV * PL * PD * 2), pv[s] = cb_make((size_t)PHKV * PL * PD * 2);
    pq[s] = cb_make((size_t)PHQ * PL * PD * 2);
    conf_fill(&pk[s], LPATTN_F16, PHKV * PL * PD, 0.5, 1.0);
    conf_fill(&pv[s], LPATTN_F16, PHKV * PL * PD, 0.0, 1.0);
    conf_fill(&pq[s], LPATTN_F16, PHQ * PL * PD, 0.2, 1.0);
  }
}

/* tokens [t0, t0 + n) of a stream as a [1, H, n, D] view on one side */
static lpattn_tensor tok(const cbuf *b, int side, int64_t H, int64_t t0, int64_t n) {
  lpattn_tensor t = lpattn_tensor_4d((char *)(side ? b->d : b->h) + (size_t)(t0 * PD) * 2, LPATTN_F16, 1, H, n, PD);
  t.stride[1] = PL * PD, t.stride[0] = H * PL * PD;
  return t;
}

/* I32 ids of a batch on one side: slots, lengths [n], page table [n, PMAXP]. */
typedef struct {
  cbuf slot, len, tab;
  int n;
} ids;

static ids ids_make(int n, const int32_t *slot, const int32_t *len, const int32_t *seq) {
  ids b;
  b.n = n;
  b.slot = cb_make((size_t)n * 4), b.len = cb_make((size_t)n * 4), b.tab = cb_make((size_t)n * PMAXP * 4);
  for (int i = 0; i < n; i++) {
    ((int32_t *)b.slot.h)[i] = slot[i], ((int32_t *)b.len.h)[i] = len[i];
    for (int j = 0; j < PMAXP; j++) ((int32_t *)b.tab.h)[i * PMAXP + j] = seq[i] + PNS * j; /* interleaved */
  }
  cb_up(&b.slot), cb_up(&b.len), cb_up(&b.tab);
  return b;
}
static void ids_free(ids *b) { cb_free(&b->slot), cb_free(&b->len), cb_free(&b->tab); }

static lpattn_kv_batch batch_of(const ids *b, int side, int64_t max_len) {
  lpattn_kv_batch kb;
  lpattn_kv_batch_init(&kb);
  kb.num_seqs = b->n;
  kb.slots = cb_t4(&b->slot, side, LPATTN_I32, 1, 1, 1, b->n);
  kb.lengths = cb_t4(&b->len, side, LPATTN_I32, 1, 1, 1, b->n);
  kb.page_table = cb_t4(&b->tab, side, LPATTN_I32, 1, 1, b->n, PMAXP);
  kb.max_length = max_len;
  return kb;
}

/* Outputs of one side: out, lse, entropy [n, PHQ, Sq, *]. */
typedef struct {
  cbuf o, l, h;
} pout;

/* One side's run: a pool, sequences seq[0..n) appended (50 tokens a call)
 * into slots 0..n-1, then decode of the last Sq positions (prefill = 0) or
 * prefill of PNEW new tokens. */
static lpattn_status paged_side(lpattn_ctx *ctx, int side, const conf_paged_case *c, const int *seq, int n,
                                int64_t Sq, pout *r) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = PHKV, pp.num_q_heads = PHQ, pp.head_dim = PD, pp.page_size = PT;
  pp.precision = c->prec, pp.pasa = c->pasa, pp.thrift_low = LPATTN_FMT_NVFP4, pp.high_dtype = LPATTN_F16;
  pp.num_pages = PNS * PMAXP, pp.num_slots = PNS;
  lpattn_kv_pool *pool = NULL;
  lpattn_status st = lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool);
  if (st != LPATTN_OK) return st;
  int32_t slot[PNS], len[PNS], sq[PNS];
  /* FP8_STATIC: descales [n, PHKV] per slot (k, v) and per call (q) */
  cbuf ds = cb_make((size_t)3 * PNS * PHKV * 4), dsl = cb_make((size_t)PNS * 4);
  for (int i = 0; i < PNS * PHKV; i++)
    for (int w = 0; w < 3; w++) ((float *)ds.h)[w * PNS * PHKV + i] = (w == 0 ? 0.01f : w == 1 ? 0.008f : 0.006f) * (1 + i % 3);
  for (int i = 0; i < PNS; i++) ((int32_t *)dsl.h)[i] = i;
  cb_up(&ds), cb_up(&dsl);
  lpattn_tensor dk = cb_t4(&ds, side, LPATTN_F32, 1, 1, n, PHKV), dv = dk, dq = dk;
  dv.data = (float *)dv.data + PNS * PHKV, dq.data = (float *)dq.data + 2 * PNS * PHKV;
  if (c->prec == LPATTN_PREC_FP8_STATIC) {
    lpattn_tensor ts = cb_t4(&dsl, side, LPATTN_I32, 1, 1, 1, n);
    st = lpattn_kv_pool_set_descales(ctx, pool, &ts, &dk, &dv);
  }
  int64_t max_len = 0;
  for (int i = 0; i < n; i++) {
    slot[i] = i, sq[i] = seq[i];
    for (int32_t a = 0; a < plen[seq[i]] && st == LPATTN_OK; a += 50) {
      const int32_t m = plen[seq[i]] - a < 50 ? plen[seq[i]] - a : 50;
      ids b = ids_make(1, &slot[i], &a, &sq[i]);
      lpattn_kv_batch kb = batch_of(&b, side, PL);
      lpattn_tensor k = tok(&pk[seq[i]], side, PHKV, a, m), v = tok(&pv[seq[i]], side, PHKV, a, m);
      lpattn_tensor q = tok(&pq[seq[i]], side, PHQ, a, m);
      st = lpattn_kv_append(ctx, pool, &kb, &k, &v, &q);
      lpattn_synchronize(ctx); /* GPU: the call is queued; its ids are freed next */
      ids_free(&b);
    }
    len[i] = plen[seq[i]], max_len = len[i] > max_len ? len[i] : max_len;
  }
  if (st == LPATTN_OK) {
    ids b = ids_make(n, slot, len, sq);
    lpattn_kv_batch kb = batch_of(&b, side, c->prefill ? max_len + PNEW : max_len);
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.thrift_k = 3; /* tests/ref/test_ref_paged.c */
    if (c->win) p.window_left = c->wl, p.softcap = c->cap;
    if (c->prec == LPATTN_PREC_FP8_STATIC) p.q_descale = dq;
    lpattn_attn_aux aux;
    lpattn_attn_aux_init(&aux);
    aux.lse = cb_t4(&r->l, side, LPATTN_F32, n, PHQ, Sq, 1);
    aux.entropy = cb_t4(&r->h, side, LPATTN_F32, n, PHQ, Sq, 1);
    lpattn_tensor o = cb_t4(&r->o, side, LPATTN_F32, n, PHQ, Sq, PD);
    /* new tokens (prefill) or decode queries: [n, H, Sq, D] copies */
    cbuf nk = cb_make((size_t)n * PHKV * Sq * PD * 2), nv = cb_make(nk.bytes), nq = cb_make((size_t)n * PHQ * Sq * PD * 2);
    for (int i = 0; i < n; i++) {
      const int64_t t0 = c->prefill ? len[i] : len[i] - Sq;
      for (int h = 0; h < PHQ; h++) {
        const size_t row = (size_t)Sq * PD * 2;
        memcpy((char *)nq.h + ((size_t)i * PHQ + h) * row, (char *)pq[seq[i]].h + ((size_t)h * PL + t0) * PD * 2, row);
        if (h < PHKV) {
          memcpy((char *)nk.h + ((size_t)i * PHKV + h) * row, (char *)pk[seq[i]].h + ((size_t)h * PL + t0) * PD * 2, row);
          memcpy((char *)nv.h + ((size_t)i * PHKV + h) * row, (char *)pv[seq[i]].h + ((size_t)h * PL + t0) * PD * 2, row);
        }
      }
    }
    cb_up(&nk), cb_up(&nv), cb_up(&nq);
    lpattn_tensor tq = cb_t4(&nq, side, LPATTN_F16, n, PHQ, Sq, PD);
    lpattn_tensor tk = cb_t4(&nk, side, LPATTN_F16, n, PHKV, Sq, PD), tv = cb_t4(&nv, side, LPATTN_F16, n, PHKV, Sq, PD);
    st = c->prefill ? lpattn_paged_prefill(ctx, pool, &kb, &tk, &tv, &tq, &o, &p, &aux)
                    : lpattn_paged_decode(ctx, pool, &kb, &tq, &o, &p, &aux);
    lpattn_synchronize(ctx);
    cb_free(&nk), cb_free(&nv), cb_free(&nq);
    ids_free(&b);
  }
  lpattn_synchronize(ctx);
  lpattn_kv_pool_free(pool);
  cb_free(&ds), cb_free(&dsl);
  return st;
}

static void paged_case(const conf_paged_case *c, int64_t Sq) {
  static const int all[PNS] = {0, 1, 2}, two[2] = {1, 2};
  const int *seq = c->prefill ? two : all, n = c->prefill ? 2 : PNS;
  const int64_t rows = (int64_t)n * PHQ * Sq;
  pout r[2]; /* backend, ref */
  for (int s = 0; s < 2; s++) {
    r[s].o = cb_make((size_t)(rows * PD) * 4), r[s].l = cb_make((size_t)rows * 4), r[s].h = cb_make((size_t)rows * 4);
    cb_poison(&r[s].o), cb_poison(&r[s].l), cb_poison(&r[s].h);
  }
  const lpattn_status sr = paged_side(E.ref, 0, c, seq, n, Sq, &r[1]);
  const lpattn_status sb = paged_side(E.be, 1, c, seq, n, Sq, &r[0]);
  cb_down(&r[0].o), cb_down(&r[0].l), cb_down(&r[0].h);
  const conf_attn_bound b = conf_bound_paged(c->prec);
  const conf_q qs[3] = {{"O", conf_relerr(r[0].o.h, r[1].o.h, LPATTN_F32, rows * PD), b.o},
                        {"LSE", conf_maxabs(r[0].l.h, r[1].l.h, rows), b.lse},
                        {"H", conf_maxabs(r[0].h.h, r[1].h.h, rows), b.ent}};
  char params[128], win[40] = "";
  if (c->win) snprintf(win, sizeof win, " win%d cap%g", c->wl, (double)c->cap);
  if (c->prefill)
    snprintf(params, sizeof params, "%s%s +%d tokens onto 70,129 Hq8 Hkv2 D128 page64%s", c->pasa ? "pasa " : "",
             PN[c->prec], PNEW, win);
  else
    snprintf(params, sizeof params, "%s%s Sq%lld lens 300,70,129 Hq8 Hkv2 D128 page64%s", c->pasa ? "pasa " : "",
             PN[c->prec], (long long)Sq, win);
  conf_report(c->prefill ? OP_PREFILL : OP_PAGED, params, sb, sr, qs, 3);
  for (int s = 0; s < 2; s++) cb_free(&r[s].o), cb_free(&r[s].l), cb_free(&r[s].h);
}

/* One side's lpattn_kv_cache run: the three sequences appended, then one
 * lpattn_decode of their last Sq positions into o, l, h. */
static lpattn_status cache_side(lpattn_ctx *ctx, int side, lpattn_precision prec, int pasa, int64_t Sq,
                                pout *r) {
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_seqs = PNS, cp.num_kv_heads = PHKV, cp.num_q_heads = PHQ, cp.head_dim = PD;
  cp.max_tokens = PL, cp.tile = PT, cp.high_dtype = LPATTN_F16, cp.precision = prec, cp.pasa = pasa;
  cp.thrift_low = LPATTN_FMT_NVFP4;
  lpattn_kv_cache *cache = NULL;
  lpattn_status st = lpattn_kv_cache_create(ctx, &cp, &cache);
  if (st != LPATTN_OK) return st;
  for (int s = 0; s < PNS; s++)
    for (int32_t a = 0; a < plen[s] && st == LPATTN_OK; a += 50) {
      const int32_t m = plen[s] - a < 50 ? plen[s] - a : 50;
      lpattn_tensor k = tok(&pk[s], side, PHKV, a, m), v = tok(&pv[s], side, PHKV, a, m);
      lpattn_tensor q = tok(&pq[s], side, PHQ, a, m);
      st = lpattn_kv_cache_append(ctx, cache, s, &k, &v, &q);
    }
  if (st == LPATTN_OK) {
    const size_t row = (size_t)Sq * PD * 2;
    cbuf nq = cb_make((size_t)PNS * PHQ * row);
    for (int s = 0; s < PNS; s++)
      for (int h = 0; h < PHQ; h++)
        memcpy((char *)nq.h + ((size_t)s * PHQ + h) * row, (char *)pq[s].h + ((size_t)h * PL + plen[s] - Sq) * PD * 2, row);
    cb_up(&nq);
    lpattn_tensor tq = cb_t4(&nq, side, LPATTN_F16, PNS, PHQ, Sq, PD);
    lpattn_tensor o = cb_t4(&r->o, side, LPATTN_F32, PNS, PHQ, Sq, PD);
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.thrift_budget = 0.3f; /* tests/cpu Decode() */
    lpattn_attn_aux aux;
    lpattn_attn_aux_init(&aux);
    aux.lse = cb_t4(&r->l, side, LPATTN_F32, PNS, PHQ, Sq, 1);
    aux.entropy = cb_t4(&r->h, side, LPATTN_F32, PNS, PHQ, Sq, 1);
    st = lpattn_decode(ctx, cache, &tq, &o, &p, &aux);
    lpattn_synchronize(ctx);
    cb_free(&nq);
  }
  lpattn_kv_cache_free(cache);
  return st;
}

static void cache_case(const conf_cache_case *c, int64_t Sq) {
  const int64_t rows = (int64_t)PNS * PHQ * Sq;
  pout r[3]; /* backend, ref, ref HIGH */
  for (int s = 0; s < 3; s++) {
    r[s].o = cb_make((size_t)(rows * PD) * 4), r[s].l = cb_make((size_t)rows * 4), r[s].h = cb_make((size_t)rows * 4);
    cb_poison(&r[s].o), cb_poison(&r[s].l), cb_poison(&r[s].h);
  }
  const lpattn_status sr = cache_side(E.ref, 0, c->prec, c->pasa, Sq, &r[1]);
  const lpattn_status sb = cache_side(E.be, 1, c->prec, c->pasa, Sq, &r[0]);
  cb_down(&r[0].o), cb_down(&r[0].l), cb_down(&r[0].h);
  double own = 0;
  if (E.kind == CONF_CPU && sr == LPATTN_OK && (c->prec != LPATTN_PREC_HIGH || c->pasa) &&
      cache_side(E.ref, 0, LPATTN_PREC_HIGH, 0, Sq, &r[2]) == LPATTN_OK)
    own = conf_relerr(r[1].o.h, r[2].o.h, LPATTN_F32, rows * PD);
  const conf_attn_bound b = conf_bound_cache(own);
  double (*m)(const float *, const float *, int64_t) = b.lse_rel ? conf_maxrel : conf_maxabs;
  const conf_q qs[3] = {{"O", conf_relerr(r[0].o.h, r[1].o.h, LPATTN_F32, rows * PD), b.o},
                        {"LSE", m(r[0].l.h, r[1].l.h, rows), b.lse},
                        {"H", m(r[0].h.h, r[1].h.h, rows), b.ent}};
  char params[128];
  snprintf(params, sizeof params, "%s%s Sq%lld lens 300,70,129 Hq8 Hkv2 D128 tile64", c->pasa ? "pasa " : "",
           PN[c->prec], (long long)Sq);
  conf_report(OP_CACHE, params, sb, sr, qs, E.kind == CONF_CPU ? 2 : 3);
  for (int s = 0; s < 3; s++) cb_free(&r[s].o), cb_free(&r[s].l), cb_free(&r[s].h);
}

void conf_paged(void) {
  streams();
  for (size_t i = 0; i < sizeof conf_cache_cases / sizeof conf_cache_cases[0]; i++) {
    cache_case(&conf_cache_cases[i], 1);
    cache_case(&conf_cache_cases[i], 3);
  }
  for (size_t i = 0; i < sizeof conf_paged_cases / sizeof conf_paged_cases[0]; i++) {
    const conf_paged_case *c = &conf_paged_cases[i];
    if (c->prefill) {
      paged_case(c, PNEW);
    } else {
      paged_case(c, 1);
      paged_case(c, 5);
    }
  }
  for (int s = 0; s < PNS; s++) cb_free(&pk[s]), cb_free(&pv[s]), cb_free(&pq[s]);
}

/* Ragged batches: sequence 1 has no queries, 3 is a decode row, 4 has
 * Sq > Skv, 5 several tiles (tests/api/test_varlen.c's layout). */
enum { VHQ = 4, VHKV = 2, VD = 64, VNS = 6, VTQ = 296, VTK = 372 };
static const int32_t vlq[VNS] = {5, 0, 70, 1, 90, 130}, vlk[VNS] = {5, 33, 100, 64, 40, 130};

/* packed [total, H, D] as {1, H, total, D} */
static lpattn_tensor vpacked(const cbuf *b, int side, lpattn_dtype dt, int64_t H, int64_t T) {
  lpattn_tensor t = lpattn_tensor_4d(side ? b->d : b->h, dt, 1, H, T, VD);
  t.stride[0] = T * H * VD, t.stride[1] = VD, t.stride[2] = H * VD;
  return t;
}

static lpattn_status varlen_run(lpattn_ctx *ctx, int side, const conf_varlen_case *c, lpattn_precision prec,
                                int pasa, const cbuf *q, const cbuf *k, const cbuf *v, cbuf *o, cbuf *l) {
  static int32_t cq[VNS + 1], ck[VNS + 1];
  for (int s = 0; s < VNS; s++) cq[s + 1] = cq[s] + vlq[s], ck[s + 1] = ck[s] + vlk[s];
  lpattn_tensor tq = vpacked(q, side, c->in, VHQ, VTQ), tk = vpacked(k, side, c->in, VHKV, VTK);
  lpattn_tensor tv = vpacked(v, side, c->in, VHKV, VTK), to = vpacked(o, side, LPATTN_F32, VHQ, VTQ);
  lpattn_tensor a = lpattn_tensor_4d(cq, LPATTN_I32, 1, 1, 1, VNS + 1); /* host memory on every backend */
  lpattn_tensor b = lpattn_tensor_4d(ck, LPATTN_I32, 1, 1, 1, VNS + 1);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = prec, p.causal = c->causal, p.pasa = pasa, p.thrift_budget = 0.3f;
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = cb_t4(l, side, LPATTN_F32, 1, VHQ, VTQ, 1);
  return lpattn_attention_varlen(ctx, &tq, &tk, &tv, &to, &a, &b, &p, &aux);
}

static void varlen_case(const conf_varlen_case *c) {
  const int64_t nq = VTQ * VHQ * VD, nk = VTK * VHKV * VD, es = (int64_t)conf_esize(c->in);
  cbuf q = cb_make((size_t)(nq * es)), k = cb_make((size_t)(nk * es)), v = cb_make((size_t)(nk * es));
  conf_fill(&q, c->in, nq, 0.0, 1.0), conf_fill(&k, c->in, nk, 0.3, 1.0), conf_fill(&v, c->in, nk, 0.0, 1.0);
  cbuf o[3], l[3]; /* backend, ref, ref HIGH */
  for (int s = 0; s < 3; s++) o[s] = cb_make((size_t)nq * 4), l[s] = cb_make((size_t)VHQ * VTQ * 4), cb_poison(&o[s]), cb_poison(&l[s]);
  const lpattn_status sr = varlen_run(E.ref, 0, c, c->prec, c->pasa, &q, &k, &v, &o[1], &l[1]);
  const lpattn_status sb = varlen_run(E.be, 1, c, c->prec, c->pasa, &q, &k, &v, &o[0], &l[0]);
  cb_down(&o[0]), cb_down(&l[0]);
  double own = 0;
  if (sr == LPATTN_OK && (c->prec != LPATTN_PREC_HIGH || c->pasa) && E.kind == CONF_CPU &&
      varlen_run(E.ref, 0, c, LPATTN_PREC_HIGH, 0, &q, &k, &v, &o[2], &l[2]) == LPATTN_OK)
    own = conf_relerr(o[1].h, o[2].h, LPATTN_F32, nq);
  const conf_attn_bound b = conf_bound_attn(c->prec, c->pasa, c->in, VD, own);
  double (*m)(const float *, const float *, int64_t) = b.lse_rel ? conf_maxrel : conf_maxabs;
  const double el = m(l[0].h, l[1].h, VHQ * VTQ);
  const int64_t wl = conf_argmax; /* the worst LSE row: [head][token] */
  const conf_q qs[2] = {{"O", conf_relerr(o[0].h, o[1].h, LPATTN_F32, nq), b.o}, {"LSE", el, b.lse}};
  char params[128];
  snprintf(params, sizeof params, "%s%s%s %s 6 seqs Hq4 Hkv2 D64 packed", c->causal ? "causal " : "",
           c->pasa ? "pasa " : "", PN[c->prec], c->in == LPATTN_BF16 ? "bf16" : "f16");
  /* the worst LSE row, on a failure and for PASA (whose bound is one f16 ulp
   * of a score: conf_bound_attn) */
  if ((!conf_report(OP_VARLEN, params, sb, sr, qs, 2) || c->pasa) && wl >= 0) {
    int s = 0, t = (int)(wl % VTQ);
    for (int c = 0; s < VNS - 1 && c + vlq[s] <= t; s++) c += vlq[s];
    printf("  worst LSE: head %d token %d (sequence %d, Sq %d, Skv %d): %s %.7g, ref %.7g\n", (int)(wl / VTQ), t, s,
           vlq[s], vlk[s], E.name, ((const float *)l[0].h)[wl], ((const float *)l[1].h)[wl]);
  }
  for (int s = 0; s < 3; s++) cb_free(&o[s]), cb_free(&l[s]);
  cb_free(&q), cb_free(&k), cb_free(&v);
}

void conf_varlen(void) {
  for (size_t i = 0; i < sizeof conf_varlen_cases / sizeof conf_varlen_cases[0]; i++)
    varlen_case(&conf_varlen_cases[i]);
}
