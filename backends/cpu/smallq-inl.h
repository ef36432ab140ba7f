// lpattn_attention with few query rows (issue 12 item 4): the decode path's
// row kernels on K/V read in place from the caller's tensors, one (batch, kv
// head) per call (cpu.h SmallJob), every q head of the GQA group and every
// query row at once, each key read once for all of them. HIGH precision
// only; the tiles, masks and online softmax are the prefill kernel's
// (attn-inl.h), so the result equals the general path up to the f32 order of
// each q . k sum.
#if defined(LPATTN_CPU_SMALLQ_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_CPU_SMALLQ_INL_H_
#undef LPATTN_CPU_SMALLQ_INL_H_
#else
#define LPATTN_CPU_SMALLQ_INL_H_
#endif

#include "decode-fmt-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {

// Rows c0 .. c0 + n of a K or V tensor (b, h) into L2 ahead of their use.
HWY_INLINE void PrefetchRows(const uint8_t *base, int64_t rb, int64_t bytes, int64_t n) {
  for (int64_t c = 0; c < n; c++)
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(base + c * rb + o, 0, 2);
}

HWY_INLINE void SmallQItem(const SmallJob &job, int64_t item, DecScratch *w) {
  const lpattn_attn_problem &pr = *job.pr;
  const int64_t D = job.D, Bk = job.Bk, Sq = job.Sq, G = job.G, R = job.R;
  const int64_t b = item / pr.Hkv, h = item % pr.Hkv, nkt = lp_tile_count(pr.Skv, Bk);
  const lpattn_tensor *K = pr.k, *V = pr.v;
  const int64_t ek = K->dtype == LPATTN_F32 ? 4 : 2, ev = V->dtype == LPATTN_F32 ? 4 : 2;
  const int64_t rbk = K->stride[2] * ek, rbv = V->stride[2] * ev;
  const uint8_t *kb = static_cast<const uint8_t *>(K->data) + lp_off4(K, b, h, 0, 0) * ek;
  const uint8_t *vb = static_cast<const uint8_t *>(V->data) + lp_off4(V, b, h, 0, 0) * ev;
  float *q = w->q.data(), *S = w->s.data(), *P = w->p.data(), *acc = w->acc.data();
  float *kd = w->kd.data(), *vd = w->vd.data();
  int64_t *nvis = w->nvis.data();
  int32_t *list = w->list.data();
  lpk_row *rows = w->rows.data();
  for (int64_t r = 0; r < R; r++) {
    const int64_t hq = h * G + r / Sq, qr = r % Sq;
    LoadRow(pr.q, lp_off4(pr.q, b, hq, qr, 0), pr.q->stride[3], D, q + r * D);
    lpk_row_init(&rows[r]);
    for (int64_t d = 0; d < D; d++) acc[r * D + d] = 0.0f;
  }
  const float ss = pr.sm_scale;
  for (int64_t j = 0; j < nkt; j++) {
    const int64_t c0 = j * Bk, nk = pr.Skv - c0 < Bk ? pr.Skv - c0 : Bk;
    int64_t n = 0, maxvis = 0;
    for (int64_t r = 0; r < R; r++) {
      const int64_t v = lp_tile_visible(pr.causal, job.off, r % Sq, c0, nk);
      if (v <= 0) continue;
      list[n++] = (int32_t)r, nvis[r] = v;
      maxvis = v > maxvis ? v : maxvis;
    }
    if (!n) continue;
    const uint8_t *kp = kb + c0 * rbk, *vp = vb + c0 * rbv;
    const int64_t nn = j + 1 < nkt ? (pr.Skv - c0 - Bk < Bk ? pr.Skv - c0 - Bk : Bk) : 0;
    // Scores, each key read once for every row; the next tile's rows are
    // fetched a few at a time meanwhile.
    for (int64_t c = 0; c < maxvis; c += 4) {
      const int64_t m = maxvis - c < 4 ? maxvis - c : 4;
      const int64_t p0 = c * nn / maxvis, p1 = (c + m) * nn / maxvis;
      PrefetchRows(kp + (Bk + p0) * rbk, rbk, D * ek, p1 - p0);
      PrefetchRows(vp + (Bk + p0) * rbv, rbv, D * ev, p1 - p0);
      if (n == 1) {
        ScoresHigh(K->dtype, q + list[0] * D, kp + c * rbk, D, m, S + list[0] * Bk + c, rbk);
        continue;
      }
      for (int64_t i = c; i < c + m; i++) {
        ConvertHigh(kp + i * rbk, K->dtype, D, kd);
        for (int64_t l = 0; l < n; l++) S[list[l] * Bk + i] = Dot(q + list[l] * D, kd, D);
      }
    }
    for (int64_t l = 0; l < n; l++) {
      const int64_t r = list[l];
      float *s = S + r * Bk, *p = P + r * Bk;
      ScaleMask(s, Bk, nvis[r], ss);
      const lpk_step st = lpk_row_begin(&rows[r], RowMax(s, Bk), 0.0f);
      float sum_p, sum_ps;
      ExpRow(s, Bk, st.bias, p, &sum_p, &sum_ps);
      lpk_row_end(&rows[r], &st, sum_p, sum_ps);
      if (st.alpha != 1.0f) ScaleRow(acc + r * D, st.alpha, D);
    }
    if (n == 1) {
      AccumHigh(V->dtype, P + list[0] * Bk, vp, D, nvis[list[0]], acc + list[0] * D, rbv);
      continue;
    }
    for (int64_t c = 0; c < maxvis; c++) {  // acc += sum_c P[c] V[c], a key at a time
      ConvertHigh(vp + c * rbv, V->dtype, D, vd);
      for (int64_t l = 0; l < n; l++) {
        const int64_t r = list[l];
        if (c < nvis[r] && P[r * Bk + c] != 0.0f) Axpy(acc + r * D, P[r * Bk + c], vd, D);
      }
    }
  }
  const lpattn_tensor *out = pr.out;
  for (int64_t r = 0; r < R; r++) {
    const int64_t hq = h * G + r / Sq, qr = r % Sq;
    float inv_l, lse, ent;
    lpk_row_finish(&rows[r], &inv_l, &lse, &ent);
    for (int64_t d = 0; d < D; d++)
      lp_store_f32(out->data, out->dtype, lp_off4(out, b, hq, qr, d), acc[r * D + d] * inv_l);
    if (pr.lse) lp_store_f32(pr.lse->data, LPATTN_F32, lp_off4(pr.lse, b, hq, qr, 0), lse);
    if (pr.entropy) lp_store_f32(pr.entropy->data, LPATTN_F32, lp_off4(pr.entropy, b, hq, qr, 0), ent);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
