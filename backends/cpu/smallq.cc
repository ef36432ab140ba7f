// lpattn_attention with few query rows (issue 12 item 4): which calls take
// the small-Sq path (smallq-inl.h, K/V read in place, no per-call copy) and
// the call on the thread pool, one item per (batch, kv head).
#include <atomic>
#include <new>

#include "cpu.h"
#include "tiles.h"

namespace lpattn_cpu {
namespace {

std::atomic<int> g_small_q{1};

struct SmallRun {
  const SmallJob *job;
  SmallQKernel kernel;
  Ctx *c;
};

void RunSmallItem(void *arg, int64_t i, int tid) {
  const SmallRun &r = *static_cast<SmallRun *>(arg);
  r.kernel(*r.job, i, &r.c->dec[tid]);
}

// Rows the kernel can read in place: unit element stride, a float dtype.
bool InPlace(const lpattn_tensor *t) {
  return t->stride[3] == 1 &&
         (t->dtype == LPATTN_F16 || t->dtype == LPATTN_BF16 || t->dtype == LPATTN_F32);
}

}  // namespace

void DecScratch::Size(const SmallJob &job) {
  const size_t R = job.R, D = job.D, Bk = job.Bk;
  q.resize(R * D), s.resize(R * Bk), p.resize(R * Bk), acc.resize(R * D), kd.resize(D), vd.resize(D);
  nvis.resize(R), list.resize(R), rows.resize(R);
}

// HIGH without PASA or f16 scores (whose rounding the general path owns), one
// query tile of rows (the decode shapes: Sq = 1 up to a tile, causal rows at
// the end of the keys or not causal), D a multiple of 16 (every target's
// vector divides it).
bool SmallQTakes(const lpattn_attn_problem &pr) {
  return g_small_q.load(std::memory_order_relaxed) && pr.precision == LPATTN_PREC_HIGH &&
         !pr.pasa && !pr.score_f16 && pr.window_left < 0 && pr.window_right < 0 &&
         pr.softcap == 0.0f && pr.Sq <= pr.Bq && pr.D % 16 == 0 && InPlace(pr.k) &&
         InPlace(pr.v);
}

lpattn_status SmallQAttention(Ctx *c, const lpattn_attn_problem *pr) {
  SmallJob job;
  job.pr = pr;
  job.D = pr->D, job.Bk = pr->Bk, job.G = pr->Hq / pr->Hkv, job.Sq = pr->Sq;
  job.R = job.G * job.Sq, job.off = pr->off;
  try {
    c->dec.resize(c->scratch.size());
    for (DecScratch &w : c->dec) w.Size(job);
  } catch (const std::bad_alloc &) {
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  SmallRun run = {&job, FindSmallQKernel(), c};
  return PoolRun(c->pool, pr->B * pr->Hkv, RunSmallItem, &run) ? LPATTN_OK : LPATTN_ERR_OUT_OF_MEMORY;
}

}  // namespace lpattn_cpu

extern "C" void lpattn_cpu_set_small_q(int on) { lpattn_cpu::g_small_q.store(on ? 1 : 0); }
