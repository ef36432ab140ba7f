/* lpattn_attention_varlen (lpattn.h "ragged batches") under fuzz_api.c's
 * promises (inputs never written, a failed call writes nothing, a
 * successful one only its outputs' elements, finite results for sane
 * input): up to 5 sequences of random lengths (some without queries, now
 * and then queries without keys), cu_seqlens valid or broken one way, the
 * packed views and the cu_seqlens views in any layout, and the params of
 * every attention call. */
#include "fuzz_util.h"

/* c's elements (in index order) = vals; c stays an input: its snapshot is
 * retaken. */
static void set_cu(fz_tensor *c, const int32_t *vals) {
  if (!c->valid_layout) return;
  int i = 0;
  FZ_FOR_EACH(&c->t, off) fz_store(&c->t, off, (float)vals[i++]);
  memcpy(c->before, fz_data(&c->buf), c->buf.bytes);
}

void fuzz_varlen(fz_in *r, int cpu) {
  lpattn_ctx *ctx = host_ctx(cpu);
  int sane = 1;
  const int n = 1 + fz_pick(r, 5);
  const int64_t hkv = 1 + fz_pick(r, 2), hq = fz_rare(r, 16) ? 3 : hkv * (1 + fz_pick(r, 2));
  const int64_t D = head_dim(r);
  int32_t lq[5], lk[5], cq[6] = {0}, ck[6] = {0};
  for (int b = 0; b < n; b++) {
    lq[b] = fz_pick(r, 5) == 0 ? 0 : 1 + fz_pick(r, 80);
    lk[b] = fz_rare(r, 16) ? 0 : 1 + fz_pick(r, 100);
  }
  if (lq[0] == 0 && !fz_rare(r, 8)) lq[0] = 1;
  for (int64_t tq = 0, tk = 0;; tq = tk = 0) { /* work bounded as in fuzz_attention */
    for (int b = 0; b < n; b++) tq += lq[b], tk += lk[b];
    if (tq * tk * hq * D <= ((int64_t)1 << 22)) break;
    for (int b = 0; b < n; b++) lq[b] = (lq[b] + 1) / 2, lk[b] = (lk[b] + 1) / 2;
  }
  for (int b = 0; b < n; b++) cq[b + 1] = cq[b] + lq[b], ck[b + 1] = ck[b] + lk[b];
  const int64_t tq = cq[n] > 0 ? cq[n] : 1, tk = ck[n] > 0 ? ck[n] : 1;
  int nq = n + 1, nk = n + 1; /* entries of the cu_seqlens views */
  lpattn_dtype cdt = LPATTN_I32;
  switch (fz_rare(r, 4) ? fz_pick(r, 6) : -1) { /* broken cu_seqlens */
    case 0: cq[0] = 1; break;
    case 1: if (n > 1) cq[1] = cq[2] + 1; break;
    case 2: ck[n] += 1; break;
    case 3: nk = n; break;
    case 4: cdt = fz_pick(r, 2) ? LPATTN_F32 : LPATTN_E4M3; break;
    case 5: cq[n] = -1; break;
  }
  const int nonfinite = fz_rare(r, 6);
  lpattn_attn_params p;
  attn_params(r, &p, &sane);
  if (fz_rare(r, 16)) p.positions = 1;
  const int64_t qs[4] = {1, hq, tq, D}, ks[4] = {1, hkv, tk, D}, rows[4] = {1, hq, tq, 1};
  const int64_t cqs[4] = {1, 1, 1, nq}, cks[4] = {1, 1, 1, nk};
  fz_tensor q, k, v, o, lse, ent, a, c;
  const lpattn_dtype kd = float_dtype(r);
  fz_tensor_make(&q, r, float_dtype(r), qs, 0, 2.0f, nonfinite);
  fz_tensor_make(&k, r, kd, ks, 0, 2.0f, nonfinite);
  fz_tensor_make(&v, r, kd, ks, 0, 2.0f, nonfinite);
  fz_tensor_make(&o, r, float_dtype(r), qs, 1, 0, 0);
  fz_tensor_make(&lse, r, LPATTN_F32, rows, 1, 0, 0);
  fz_tensor_make(&ent, r, LPATTN_F32, rows, 1, 0, 0);
  fz_tensor_make(&a, r, cdt, cqs, 0, 0, 0);
  fz_tensor_make(&c, r, LPATTN_I32, cks, 0, 0, 0);
  if (cdt == LPATTN_I32) set_cu(&a, cq);
  set_cu(&c, ck);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  const int want_lse = fz_pick(r, 2), want_ent = fz_pick(r, 3) == 0;
  if (want_lse) aux.lse = lse.t;
  if (want_ent) aux.entropy = ent.t;
  const lpattn_status s = lpattn_attention_varlen(ctx, &q.t, &k.t, &v.t, &o.t, &a.t, &c.t, &p, &aux);
  if (s == LPATTN_OK) {
    FZ_ASSERT(q.valid_layout && k.valid_layout && v.valid_layout && o.valid_layout &&
              a.valid_layout && c.valid_layout, "varlen accepted an invalid view");
    if (sane && !nonfinite) {
      FZ_ASSERT(fz_all_finite(&o.t), "varlen: non-finite output for finite input");
      check_rows(want_lse ? &lse : NULL, want_ent ? &ent : NULL, "varlen");
    }
  }
  check_dup(&o, s, "varlen out");
  if (want_lse) check_dup(&lse, s, "varlen lse");
  const int ok = s == LPATTN_OK;
  fz_tensor_done(&q, ok, "q"), fz_tensor_done(&k, ok, "k"), fz_tensor_done(&v, ok, "v");
  fz_tensor_done(&o, ok, "out"), fz_tensor_done(&lse, ok && want_lse, "lse");
  fz_tensor_done(&ent, ok && want_ent, "entropy");
  fz_tensor_done(&a, ok, "cu_seqlens_q"), fz_tensor_done(&c, ok, "cu_seqlens_k");
}
