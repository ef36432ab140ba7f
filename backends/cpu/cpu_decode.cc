// Decode against the host KV cache shared with ref (core/kvcache.c): the
// cache's tiles are copied into the same per-(sequence, kv head) layout the
// prefill uses, then the generated kernel runs in decode geometry
// (attn-inl.h Geometry: the row's own tile diagonal, earlier tiles full).
#include <new>
#include <vector>

#include "cpu.h"
#include "kvcache.h"
#include "tiles.h"

namespace lpattn_cpu {
namespace {

struct DecodeRun {
  AttnJob job;
  Ctx *c;
};

void PrepCache(void *arg, int64_t idx, int tid) {
  DecodeRun &run = *static_cast<DecodeRun *>(arg);
  const AttnJob &job = run.job;
  const lpattn_attn_problem &pr = *job.pr;
  const KvPrep &e = job.kv[idx];
  const int s = (int)(idx / pr.Hkv), h = (int)(idx % pr.Hkv);
  const int64_t D = job.D, T = pr.Bk, n = lp_tile_count(job.len[s], T);
  float *rows = run.c->scratch[tid].ktmp.data();  // [T][D]
  for (int64_t j = 0; j < n; j++) {
    float *k = e.k + j * T * D, *v = e.v + j * T * D, *kt = e.kt + j * D * T;
    const float *mean = lp_kv_kmean(job.cache, s, h, j);
    if (mean && e.kbar)
      for (int64_t d = 0; d < D; d++) e.kbar[j * D + d] = mean[d];
    if (e.kshift)
      for (int64_t d = 0; d < D; d++) e.kshift[j * D + d] = pr.pasa_beta * e.kbar[j * D + d];
    const int64_t nk = lp_kv_read_high(job.cache, s, h, j, k, v);
    for (int64_t c = 0; c < nk; c++)  // a full tile under PASA is used shifted, as in prefill
      for (int64_t d = 0; d < D; d++)
        kt[d * T + c] = pr.pasa ? lpk_round_f16((k[c * D + d] - e.kshift[j * D + d]) * pr.sm_scale)
                                : k[c * D + d];
    if (e.ktq && lp_kv_read_low(job.cache, s, h, j, rows, e.vq + j * T * D))
      for (int64_t c = 0; c < T; c++)
        for (int64_t d = 0; d < D; d++) e.ktq[j * D * T + d * T + c] = rows[c * D + d];
  }
}

}  // namespace

lpattn_status Decode(lpattn_ctx *ctx, lpattn_kv_cache *c, const lpattn_tensor *q,
                     const lpattn_tensor *, const lpattn_attn_problem *pr) {
  const lpattn_kv_cache_params &cp = c->p;
  for (int s = 0; s < cp.num_seqs; s++) lp_kv_record_q(c, s, q);
  DecodeRun run;
  run.c = static_cast<Ctx *>(ctx->impl);
  AttnJob &job = run.job;
  job.pr = pr;
  job.cache = c;
  job.D = cp.head_dim;
  job.kv_group = cp.num_q_heads / cp.num_kv_heads;
  job.low_any = cp.precision != LPATTN_PREC_HIGH;
  job.nqt = 0;
  job.nkt = lp_tile_count(pr->Skv, cp.tile);  // Skv = the longest sequence
  job.need_mean = cp.pasa || cp.precision == LPATTN_PREC_THRIFT;
  try {
    job.len.assign(c->lengths, c->lengths + cp.num_seqs);
    for (int64_t len : job.len) {
      const int n = (int)lp_tile_count(len, cp.tile);
      job.seq_k.push_back(lp_thrift_k_seq(pr, n));
    }
  } catch (const std::bad_alloc &) {
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  return RunJob(run.c, job, PrepCache, &run);
}

}  // namespace lpattn_cpu
