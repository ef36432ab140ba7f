// The CPU backend's vtable: prepares K/V once per (batch, kv head), then runs
// the generated Highway kernel over (batch, q head, query tile) on the pool.
#include <math.h>

#include <algorithm>
#include <new>
#include <thread>
#include <vector>

#include "cpu.h"
#include "formats.h"
#include "fp8s.h"
#include "kvcache.h"
#include "tiles.h"

namespace lpattn_cpu {
namespace {

Ctx *CtxOf(lpattn_ctx *ctx) { return static_cast<Ctx *>(ctx->impl); }

// Quantize n values (x[i * stride]) and write their dequantized values to
// y[i * ystride], through the SIMD quantizer of the dispatched target.
void QuantDeq(const lpattn_attn_problem &pr, const float *x, int64_t stride, int64_t n,
              Scratch *sc, float *y, int64_t ystride) {
  float *in = sc->tmp.data(), *out = sc->tmp2.data();
  for (int64_t i = 0; i < n; i++) in[i] = x[i * stride];
  lpattn_cpu_quantize_p_row(QpFormat(pr.low), pr.mx_round_up, in, n, out);
  for (int64_t i = 0; i < n; i++) y[i * ystride] = out[i];
}

struct Run {
  AttnJob job;
  Ctx *c;
};

// K/V of one (b, kv head): f32 rows, tile means, transposed (and for PASA
// shifted) K tiles, and the dequantized low copies (SEMANTICS "A low tile").
void PrepKv(void *arg, int64_t idx, int tid) {
  Run &run = *static_cast<Run *>(arg);
  const AttnJob &job = run.job;
  const lpattn_attn_problem &pr = *job.pr;
  Scratch *sc = &run.c->scratch[tid];
  const KvPrep &e = job.kv[idx];
  const int64_t b = idx / pr.Hkv, h = idx % pr.Hkv, D = job.D, Bk = pr.Bk, nkt = job.nkt;
  // FP8_STATIC (SPEC 11): rows as E4M3 code values (channels past pr.D stay the store's zeros)
  const bool fp8s = pr.precision == LPATTN_PREC_FP8_STATIC;
  const float kd = lp_fp8s_descale(pr.k_descale, b, h), vd = lp_fp8s_descale(pr.v_descale, b, h);
  for (int64_t s = 0; fp8s && s < pr.Skv; s++) {
    lp_fp8s_row(pr.k, lp_off4(pr.k, b, h, s, 0), pr.k->stride[3], pr.D, kd, e.k + s * D);
    lp_fp8s_row(pr.v, lp_off4(pr.v, b, h, s, 0), pr.v->stride[3], pr.D, vd, e.v + s * D);
  }
  for (int64_t s = 0; !fp8s && s < pr.Skv; s++) {
    LoadRowPad(pr.k, lp_off4(pr.k, b, h, s, 0), pr.k->stride[3], job.Dt, D, e.k + s * D);
    LoadRowPad(pr.v, lp_off4(pr.v, b, h, s, 0), pr.v->stride[3], job.Dt, D, e.v + s * D);
  }
  for (int64_t j = 0; j < nkt; j++) {
    const int64_t nk = pr.Skv - j * Bk < Bk ? pr.Skv - j * Bk : Bk;
    const float *kj = e.k + j * Bk * D;
    if (e.kbar) lp_mean_rows_f32(e.k, LPATTN_F32, j * Bk * D, D, 1, nk, D, (float)nk, e.kbar + j * D);
    if (e.kshift)
      for (int64_t d = 0; d < D; d++) e.kshift[j * D + d] = pr.pasa_beta * e.kbar[j * D + d];
    float *kt = e.kt + j * D * Bk;
    for (int64_t c = 0; c < nk; c++)
      for (int64_t d = 0; d < D; d++) {
        const float x = kj[c * D + d];
        kt[d * Bk + c] =
            pr.pasa ? lpk_round_f16((x - e.kshift[j * D + d]) * pr.sm_scale) : x;
      }
    if (!job.low_any) continue;
    float *row = sc->ktmp.data(), *ktq = e.ktq + j * D * Bk;
    if (fp8s) {  // the low tiles are K^ and V^ as they are
      for (int64_t c = 0; c < nk; c++)
        for (int64_t d = 0; d < D; d++) ktq[d * Bk + c] = kj[c * D + d];
      std::copy(e.v + j * Bk * D, e.v + (j * Bk + nk) * D, e.vq + j * Bk * D);
      continue;
    }
    for (int64_t c = 0; c < nk; c++) {
      for (int64_t d = 0; d < D; d++) row[d] = kj[c * D + d] - (pr.pasa ? e.kshift[j * D + d] : 0.0f);
      QuantDeq(pr, row, 1, D, sc, ktq + c, Bk);
    }
    // V per channel over the whole (zero-padded) tile.
    for (int64_t d = 0; d < D; d++)
      QuantDeq(pr, e.v + j * Bk * D + d, D, Bk, sc, e.vq + j * Bk * D + d, D);
  }
}

struct Items {
  const AttnJob *job;
  AttnKernel kernel;
  Ctx *c;
};

void RunItem(void *arg, int64_t item, int tid) {
  const Items &it = *static_cast<Items *>(arg);
  it.kernel(*it.job, item, &it.c->scratch[tid]);
}

// num_threads is at most LPATTN_MAX_THREADS (core checks); 0 takes the
// online cores, capped the same way. No exception leaves: threads that
// cannot start or memory that runs out is OUT_OF_MEMORY.
lpattn_status Init(lpattn_ctx *ctx, const lpattn_context_params *p) {
  int n = p && p->num_threads > 0 ? p->num_threads : (int)std::thread::hardware_concurrency();
  n = n < 1 ? 1 : n > LPATTN_MAX_THREADS ? LPATTN_MAX_THREADS : n;
  Ctx *c = new (std::nothrow) Ctx;
  if (!c) return LPATTN_ERR_OUT_OF_MEMORY;
  c->pool = PoolCreate(n);
  try {
    if (c->pool) c->scratch.resize(PoolThreads(c->pool));
  } catch (...) {
    PoolFree(c->pool);
    c->pool = nullptr;
  }
  if (!c->pool) {
    delete c;
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  ctx->impl = c;
  return LPATTN_OK;
}

void Fini(lpattn_ctx *ctx) {
  Ctx *c = CtxOf(ctx);
  if (!c) return;
  PoolFree(c->pool);
  delete c;
  ctx->impl = nullptr;
}

lpattn_status Quantize(lpattn_ctx *, const lpattn_tensor *x, const lpattn_qtensor *q,
                       const lpattn_quant_params *p) {
  return lp_host_quantize(x, q, p);
}

lpattn_status Dequantize(lpattn_ctx *, const lpattn_qtensor *q, const lpattn_tensor *y) {
  return lp_host_dequantize(q, y);
}

}  // namespace

void Scratch::Size(const AttnJob &job) {
  const lpattn_attn_problem &pr = *job.pr;
  const size_t D = job.D, Bq = pr.Bq, Bk = pr.Bk, nkt = job.nkt, w = D > Bk ? D : Bk;
  q.resize(Bq * D), ql.resize(Bq * D), acc.resize(Bq * D), s.resize(Bq * Bk), p.resize(Bq * Bk);
  alpha.resize(Bq), nv.resize(Bq), nf.resize(Bq);
  ktmp.resize(D * Bk), qbar.resize(D), score.resize(nkt), tmp.resize(w), tmp2.resize(w);
  shift0.resize(D);
  kind.resize(nkt), mode.resize(nkt), codes.resize(w), scales.resize(w), rows.resize(Bq);
}

lpattn_status Attention(lpattn_ctx *ctx, const lpattn_attn_problem *pr) {
  if (SmallQTakes(*pr)) return SmallQAttention(CtxOf(ctx), pr);  // decode shapes, K/V in place
  Run run;
  run.c = CtxOf(ctx);
  AttnJob &job = run.job;
  job.pr = pr;
  job.low_any = pr->precision != LPATTN_PREC_HIGH;
  job.Dt = pr->D;
  job.D = CpuPaddedDim(pr->D, pr->low, job.low_any);
  job.nkt = lp_tile_count(pr->Skv, pr->Bk);
  job.nqt = lp_tile_count(pr->Sq, pr->Bq);
  job.kv_group = pr->Hq / pr->Hkv;
  job.need_mean = pr->precision == LPATTN_PREC_THRIFT || pr->pasa;
  return RunJob(run.c, job, PrepKv, &run);
}

namespace {

// Items of the kv heads [k0, k0 + n): local index -> global item (cpu.h).
struct ChunkItems {
  const Items *it;
  int64_t k0;
};

void RunChunkItem(void *arg, int64_t i, int tid) {
  const ChunkItems &ci = *static_cast<ChunkItems *>(arg);
  const AttnJob &job = *ci.it->job;
  const int64_t slots = job.nqt, per_kv = job.kv_group * slots;
  const int64_t kvi = ci.k0 + i / per_kv, rem = i % per_kv;
  const int64_t b = kvi / job.pr->Hkv, hq = kvi % job.pr->Hkv * job.kv_group + rem / slots;
  RunItem(const_cast<Items *>(ci.it), (b * job.pr->Hq + hq) * slots + rem % slots, tid);
}

struct ChunkPrep {
  void (*prep)(void *, int64_t, int);
  void *arg;
  int64_t k0;
};

void RunChunkPrep(void *arg, int64_t i, int tid) {
  const ChunkPrep &cp = *static_cast<ChunkPrep *>(arg);
  cp.prep(cp.arg, cp.k0 + i, tid);
}

}  // namespace

// K/V copies live only for one chunk of kv heads at a time (as many as pool
// threads), so memory stays O(threads * Skv * D) whatever B * Hkv is; the
// chunk's items follow its prep, which also keeps its tiles in cache.
lpattn_status RunJob(Ctx *c, AttnJob &job, void (*prep)(void *, int64_t, int), void *arg) {
  Items it = {&job, FindAttnKernel(job.D), c};
  if (!it.kernel) return LPATTN_ERR_UNSUPPORTED;
  const lpattn_attn_problem &pr = *job.pr;
  const int64_t nkv = pr.B * pr.Hkv, tile = job.nkt * pr.Bk * job.D, means = job.nkt * job.D;
  const int64_t per = tile * (job.low_any ? 5 : 3) + 2 * means;
  const int64_t chunk = nkv < PoolThreads(c->pool) ? nkv : PoolThreads(c->pool);
  std::vector<float> store;
  try {
    for (Scratch &s : c->scratch) s.Size(job);
    store.resize((size_t)(chunk * per));
    job.kv.resize(nkv);
  } catch (const std::bad_alloc &) {
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  for (int64_t k0 = 0; k0 < nkv; k0 += chunk) {
    const int64_t n = nkv - k0 < chunk ? nkv - k0 : chunk;
    std::fill(store.begin(), store.end(), 0.0f);  // tiles are zero-padded
    for (int64_t i = 0; i < n; i++) {
      float *base = store.data() + i * per, *m = base + tile * (job.low_any ? 5 : 3);
      KvPrep &e = job.kv[k0 + i];
      e.k = base, e.kt = base + tile, e.v = base + 2 * tile;
      e.ktq = job.low_any ? base + 3 * tile : nullptr;
      e.vq = job.low_any ? base + 4 * tile : nullptr;
      e.kbar = job.need_mean ? m : nullptr;
      e.kshift = pr.pasa ? m + means : nullptr;
    }
    ChunkPrep cp = {prep, arg, k0};
    ChunkItems ci = {&it, k0};
    if (!PoolRun(c->pool, n, RunChunkPrep, &cp) ||
        !PoolRun(c->pool, n * job.kv_group * job.nqt, RunChunkItem, &ci))
      return LPATTN_ERR_OUT_OF_MEMORY;  // an item threw (bad_alloc)
  }
  return LPATTN_OK;
}

lpattn_status Merge(lpattn_ctx *, const lpattn_tensor *o_a, const lpattn_tensor *lse_a,
                    const lpattn_tensor *h_a, const lpattn_tensor *o_b, const lpattn_tensor *lse_b,
                    const lpattn_tensor *h_b, const lpattn_tensor *o, const lpattn_tensor *lse,
                    const lpattn_tensor *h) {
  const int64_t B = o_a->shape[0], H = o_a->shape[1], S = o_a->shape[2], D = o_a->shape[3];
  for (int64_t b = 0; b < B; b++)
    for (int64_t hh = 0; hh < H; hh++)
      for (int64_t s = 0; s < S; s++) {
        const float la = lp_load_f32(lse_a->data, LPATTN_F32, lp_off4(lse_a, b, hh, s, 0));
        const float lb = lp_load_f32(lse_b->data, LPATTN_F32, lp_off4(lse_b, b, hh, s, 0));
        const float ha = h ? lp_load_f32(h_a->data, LPATTN_F32, lp_off4(h_a, b, hh, s, 0)) : 0.0f;
        const float hb = h ? lp_load_f32(h_b->data, LPATTN_F32, lp_off4(h_b, b, hh, s, 0)) : 0.0f;
        float wa, wb, l, ent;
        lpk_merge(la, ha, lb, hb, &wa, &wb, &l, &ent);
        for (int64_t d = 0; d < D; d++) {  // each element read before written: outputs may alias
          const float xa = lp_load_f32(o_a->data, o_a->dtype, lp_off4(o_a, b, hh, s, d));
          const float xb = lp_load_f32(o_b->data, o_b->dtype, lp_off4(o_b, b, hh, s, d));
          const float y = (wa > 0.0f ? wa * xa : 0.0f) + (wb > 0.0f ? wb * xb : 0.0f);
          lp_store_f32(o->data, o->dtype, lp_off4(o, b, hh, s, d), y);
        }
        lp_store_f32(lse->data, LPATTN_F32, lp_off4(lse, b, hh, s, 0), l);
        if (h) lp_store_f32(h->data, LPATTN_F32, lp_off4(h, b, hh, s, 0), ent);
      }
  return LPATTN_OK;
}

int HostMemory(void) { return 1; }

}  // namespace lpattn_cpu

namespace {
const lpattn_backend_vtable kCpuVtable = {
    "cpu",
    lpattn_cpu::Init,
    lpattn_cpu::Fini,
    lpattn_cpu::Quantize,
    lpattn_cpu::Dequantize,
    lpattn_cpu::Attention,
    lpattn_cpu::Merge,
    lp_kv_create,
    lp_kv_free,
    lp_kv_append,
    lp_kv_decode,
    lpattn_cpu::HostMemory,
    nullptr,  // synchronize: host calls complete before returning
    lp_host_pool_init,
    lp_host_pool_fini,
    lp_host_kv_append,
    lp_host_slot_copy,
    lpattn_cpu::PagedDecode,
    nullptr,  // set_stream: host backend
    lpattn_cpu::Backward,
    nullptr,  // ids_alloc: host backend (core/kvcache.c keeps its ids in host memory)
    nullptr,  // ids_free
    nullptr,  // ids_add
    nullptr,  // decode_plan: a plan's run takes lpattn_paged_decode's path (core/api_plan.c)
    nullptr,  // decode_run
    nullptr,  // decode_plan_free
    nullptr,  // host_readable: every pointer is
    lp_host_set_descales,
    nullptr,  // prefill_step: host backends cut at tile borders (core/api_prefill.c)
};
}  // namespace

extern "C" const lpattn_backend_vtable *lpattn_cpu_backend(void) { return &kCpuVtable; }
