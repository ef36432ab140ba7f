/* Conformance case of MLA decode through the paged pool (conf_cases.h
 * conf_mla_precs): the backend's pool against ref's pool fed the same
 * tokens, with conf_bound_paged's bounds. */
#include "conf_bounds.h"
#include "conf_cases.h"

enum { MHQ = 16, MDK = 576, MDV = 512, MNS = 3, MMAXP = 5 };
static const int32_t mlen[MNS] = {300, 70, 129};
static const char *MPN[] = {"high", "fp8", "nvfp4"};

/* slots, lengths [n] and page tables [n, MMAXP] (sequence s's page j: s + MNS j) */
static cbuf mla_ids(int n, const int32_t *slot, const int32_t *len, const int32_t *seq) {
  cbuf b = cb_make((size_t)n * (2 + MMAXP) * 4);
  int32_t *x = (int32_t *)b.h;
  for (int i = 0; i < n; i++) {
    x[i] = slot[i], x[n + i] = len[i];
    for (int j = 0; j < MMAXP; j++) x[2 * n + i * MMAXP + j] = seq[i] + MNS * j;
  }
  cb_up(&b);
  return b;
}
static lpattn_kv_batch mla_batch(const cbuf *b, int side, int n, int64_t max_len) {
  lpattn_kv_batch kb;
  lpattn_kv_batch_init(&kb);
  lpattn_tensor t = cb_t4(b, side, LPATTN_I32, 1, 1, 1, n);
  kb.num_seqs = n, kb.slots = t, kb.lengths = t, kb.lengths.data = (int32_t *)t.data + n;
  kb.page_table = cb_t4(b, side, LPATTN_I32, 1, 1, n, MMAXP);
  kb.page_table.data = (int32_t *)t.data + 2 * n;
  kb.max_length = max_len;
  return kb;
}

/* One side: a pool of head dims 576/512, the three sequences appended 50
 * tokens a call (v: k's first 512 channels), one decode of q into o, l, h. */
static lpattn_status mla_side(lpattn_ctx *ctx, int side, lpattn_precision prec, int64_t Sq, const cbuf *k,
                              const cbuf *q, cbuf *o, cbuf *l, cbuf *h) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = 1, pp.num_q_heads = MHQ, pp.head_dim = MDK, pp.head_dim_v = MDV, pp.page_size = 64;
  pp.precision = prec, pp.high_dtype = LPATTN_F16, pp.num_pages = MNS * MMAXP, pp.num_slots = MNS;
  lpattn_kv_pool *pool = NULL;
  lpattn_status st = lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool);
  if (st != LPATTN_OK) return st;
  const int32_t seq[MNS] = {0, 1, 2};
  for (int s = 0; s < MNS; s++)
    for (int32_t a = 0; a < mlen[s] && st == LPATTN_OK; a += 50) {
      const int32_t m = mlen[s] - a < 50 ? mlen[s] - a : 50;
      cbuf b = mla_ids(1, &seq[s], &a, &seq[s]);
      lpattn_kv_batch kb = mla_batch(&b, side, 1, a + m);
      lpattn_tensor kt = cb_t4(&k[s], side, LPATTN_F16, 1, 1, m, MDK), vt;
      kt.data = (char *)kt.data + (size_t)a * MDK * 2;
      vt = kt, vt.shape[3] = MDV;
      st = lpattn_kv_append(ctx, pool, &kb, &kt, &vt, NULL);
      lpattn_synchronize(ctx); /* GPU: the call is queued; its ids are freed next */
      cb_free(&b);
    }
  if (st == LPATTN_OK) {
    cbuf b = mla_ids(MNS, seq, mlen, seq);
    lpattn_kv_batch kb = mla_batch(&b, side, MNS, 300);
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    lpattn_attn_aux aux;
    lpattn_attn_aux_init(&aux);
    aux.lse = cb_t4(l, side, LPATTN_F32, MNS, MHQ, Sq, 1), aux.entropy = cb_t4(h, side, LPATTN_F32, MNS, MHQ, Sq, 1);
    lpattn_tensor tq = cb_t4(q, side, LPATTN_F16, MNS, MHQ, Sq, MDK), to = cb_t4(o, side, LPATTN_F32, MNS, MHQ, Sq, MDV);
    st = lpattn_paged_decode(ctx, pool, &kb, &tq, &to, &p, &aux);
    lpattn_synchronize(ctx);
    cb_free(&b);
  }
  lpattn_kv_pool_free(pool);
  return st;
}

void conf_mla(void) {
  cbuf k[MNS];
  for (int s = 0; s < MNS; s++) k[s] = cb_make((size_t)mlen[s] * MDK * 2), conf_fill(&k[s], LPATTN_F16, mlen[s] * MDK, 0.2, 1.0);
  for (size_t i = 0; i < sizeof conf_mla_precs / sizeof conf_mla_precs[0]; i++)
    for (int64_t Sq = 1; Sq <= 2; Sq++) {
      const int64_t rows = (int64_t)MNS * MHQ * Sq;
      cbuf q = cb_make((size_t)rows * MDK * 2), o[2], l[2], h[2]; /* backend, ref */
      conf_fill(&q, LPATTN_F16, rows * MDK, 0.0, 1.0);
      for (int s = 0; s < 2; s++) {
        o[s] = cb_make((size_t)rows * MDV * 4), l[s] = cb_make((size_t)rows * 4), h[s] = cb_make((size_t)rows * 4);
        cb_poison(&o[s]), cb_poison(&l[s]), cb_poison(&h[s]);
      }
      const lpattn_precision prec = conf_mla_precs[i];
      const lpattn_status sr = mla_side(E.ref, 0, prec, Sq, k, &q, &o[1], &l[1], &h[1]);
      const lpattn_status sb = mla_side(E.be, 1, prec, Sq, k, &q, &o[0], &l[0], &h[0]);
      cb_down(&o[0]), cb_down(&l[0]), cb_down(&h[0]);
      const conf_attn_bound b = conf_bound_paged(prec);
      const conf_q qs[3] = {{"O", conf_relerr(o[0].h, o[1].h, LPATTN_F32, rows * MDV), b.o},
                            {"LSE", conf_maxabs(l[0].h, l[1].h, rows), b.lse},
                            {"H", conf_maxabs(h[0].h, h[1].h, rows), b.ent}};
      char params[128];
      snprintf(params, sizeof params, "MLA %s Sq%lld lens 300,70,129 Hq16 Hkv1 D576/512 page64",
               MPN[i], (long long)Sq);
      conf_report(OP_PAGED, params, sb, sr, qs, 3);
      cb_free(&q);
      for (int s = 0; s < 2; s++) cb_free(&o[s]), cb_free(&l[s]), cb_free(&h[s]);
    }
  for (int s = 0; s < MNS; s++) cb_free(&k[s]);
}
