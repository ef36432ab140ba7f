// Batched decode through a paged pool (SEMANTICS "Decode"): work items are
// (sequence, kv head, chunk of LP_DECODE_CHUNK_TILES tiles) over the thread
// pool (decode-inl.h reads the pool in place), then each row's chunks are
// merged by SPEC 7 in chunk order.
#include <algorithm>
#include <new>
#include <vector>

#include "cpu.h"
#include "formats.h"
#include "tiles.h"

extern "C" lpattn_status ref_paged_decode(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                         const lpattn_kv_batch *batch,
                                         const lpattn_attn_problem *pr);  // backends/ref

namespace lpattn_cpu {

void DecScratch::Size(const DecJob &job, int64_t ntile) {
  const size_t R = job.R, D = job.D, T = job.T, w = D > T ? D : T;
  q.resize(R * D), ql.resize(R * D), s.resize(R * T), p.resize(R * T), pp.resize(R * T);
  // kd, vd: 16 keys or channels for GQA groups (decode-inl.h's lines), else one
  acc.resize(R * D), kd.resize(R > 1 ? 16 * w : w), vd.resize(R > 1 ? 16 * w : w);
  qbar.resize(D), score.resize(ntile);
  alpha.resize(R), sh.resize(R * D), nvis.resize(R), pos.resize(R), nfirst.resize(R), list.resize(R), rows.resize(R);
  kind.resize(ntile), mode.resize(job.G * 2 * ntile);
  ib.resize(R * 2 * 288);  // 2R rows of IntRow (1060 bytes)
  sc.codes.resize(w), sc.scales.resize(w), sc.tmp.resize(w), sc.tmp2.resize(w);
}

namespace {

struct DecRun {
  const DecJob *job;
  DecodeKernel kernel;
  Ctx *c;
};

void RunDecItem(void *arg, int64_t i, int tid) {
  const DecRun &r = *static_cast<DecRun *>(arg);
  r.kernel(*r.job, i, &r.c->dec[tid]);
}

}  // namespace

lpattn_status PagedDecode(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                          const lpattn_attn_problem *pr) {
  // The research-only f16 raw-score mode (score_f16) is the reference's.
  if (pr->score_f16) return ref_paged_decode(ctx, pool, batch, pr);
  const lpattn_kv_pool_params &pp = pool->p;
  Ctx *c = static_cast<Ctx *>(ctx->impl);
  DecJob job;
  job.pr = pr;
  // D: the pool's storage width (q zero past head_dim; out its first
  // head_dim_v channels; SEMANTICS "Head dimensions")
  job.D = lp_kv_store_dim(&pp), job.T = pp.page_size, job.Sq = pr->Sq;
  job.G = pp.num_q_heads / pp.num_kv_heads, job.R = job.G * job.Sq;
  job.low = pp.precision != LPATTN_PREC_HIGH;
  job.thrift = pp.precision == LPATTN_PREC_THRIFT;
  job.pasa = pp.pasa != 0, job.beta = pp.pasa_beta;
  job.fp8s = pp.precision == LPATTN_PREC_FP8_STATIC;
  job.qfmt = QpFormat(pr->low);
  job.pfmt = job.qfmt == QP_FP8 ? QP_FP8_P : job.qfmt;
  job.fp4 = pr->low != LPATTN_FMT_FP8;
  job.gshift = pr->low == LPATTN_FMT_MXFP4 ? 5 : 4;
  for (int i = 0; i < 256; i++)
    job.e4m3[i] = lpk_e4m3_decode((uint8_t)i), job.e8m0[i] = lpk_e8m0_decode((uint8_t)i);
  int64_t ntile = 0;  // scratch for the batch's tiles, not max_length's
  std::vector<float> part;
  try {
    job.seqs.resize(batch->num_seqs);
    for (int64_t s = 0; s < batch->num_seqs; s++) {
      DecSeq &d = job.seqs[s];
      lp_kv_seq_of(pool, batch, s, &d.s);
      ntile = std::max(ntile, lp_tile_count(d.s.len, job.T));
      d.b = s;
      const int n = (int)lp_tile_count(d.s.len, job.T);
      d.k = lp_thrift_k_seq(pr, n);
      d.row0 = lp_kv_seq_row0(&d.s, job.Sq);
      d.i1 = (d.row0 + job.Sq - 1) / job.T;
      d.nt = n;
      const int64_t nch = lp_decode_chunk_of(n - 1, d.s.tile0) + 1;  // global-tile chunks
      for (int32_t h = 0; h < pp.num_kv_heads; h++)
        for (int64_t ch = 0; ch < nch; ch++)
          job.items.push_back(DecItem{(int32_t)s, h, (int32_t)ch});
    }
    part.resize(job.items.size() * (size_t)(job.R * (job.D + 2)));
    c->dec.resize(c->scratch.size());
    for (DecScratch &w : c->dec) w.Size(job, ntile);
  } catch (const std::bad_alloc &) {
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  lp_host_record_q(pool, batch, pr->q);  // after the allocations: a failed call writes nothing
  job.part = part.data();
  DecRun run = {&job, FindDecodeKernel(), c};
  PoolRun(c->pool, (int64_t)job.items.size(), RunDecItem, &run);

  // SPEC 7 over each row's chunks, in chunk order (items of one (sequence,
  // kv head) are consecutive).
  const lpattn_tensor *out = pr->out;
  const int64_t D = job.D, R = job.R, stride = D + 2;
  std::vector<float> o(D);
  for (size_t i0 = 0; i0 < job.items.size();) {
    size_t i1 = i0;
    while (i1 < job.items.size() && job.items[i1].seq == job.items[i0].seq &&
           job.items[i1].h == job.items[i0].h)
      i1++;
    const int64_t b = job.items[i0].seq, h = job.items[i0].h;
    for (int64_t r = 0; r < R; r++) {
      const float *a = job.part + (i0 * R + r) * stride;
      for (int64_t d = 0; d < D; d++) o[d] = a[d];
      float lse = a[D], ent = a[D + 1];
      for (size_t it = i0 + 1; it < i1; it++) {
        const float *x = job.part + (it * R + r) * stride;
        float wa, wb, l, e;
        lpk_merge(lse, ent, x[D], x[D + 1], &wa, &wb, &l, &e);
        for (int64_t d = 0; d < D; d++)
          o[d] = (wa > 0.0f ? wa * o[d] : 0.0f) + (wb > 0.0f ? wb * x[d] : 0.0f);
        lse = l, ent = e;
      }
      const int64_t hq = h * job.G + r / job.Sq, qr = r % job.Sq;
      for (int64_t d = 0; d < out->shape[3]; d++)
        lp_store_f32(out->data, out->dtype, lp_off4(out, b, hq, qr, d), o[d]);
      if (pr->lse) lp_store_f32(pr->lse->data, LPATTN_F32, lp_off4(pr->lse, b, hq, qr, 0), lse);
      if (pr->entropy) lp_store_f32(pr->entropy->data, LPATTN_F32, lp_off4(pr->entropy, b, hq, qr, 0), ent);
    }
    i0 = i1;
  }
  return LPATTN_OK;
}

}  // namespace lpattn_cpu
