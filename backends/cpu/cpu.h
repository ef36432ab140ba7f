// Internal interfaces of the Highway CPU backend (not installed).
#ifndef LPATTN_CPU_H
#define LPATTN_CPU_H

#include <stdint.h>

#include <vector>

#include "internal.h"
#include "gen/common.h"

namespace lpattn_cpu {

// Contiguous f32 copies of one (batch, kv head)'s keys and values, built once
// per call and shared by every query tile and GQA head that reads them.
// Tiles are padded with zeros to Bk keys. "Transposed" tiles are [D][Bk] so
// the score loop is a broadcast-FMA over keys (no horizontal sums).
struct KvPrep {
  float *kt;     // [nkt][D][Bk] high K (PASA: fl16((k - kshift_j) * sm_scale))
  float *v;      // [nkt*Bk][D] high V
  float *ktq;    // [nkt][D][Bk] dequantized low K (PASA: of k - kshift_j), or NULL
  float *vq;     // [nkt*Bk][D] dequantized low V, or NULL
  float *kbar;   // [nkt][D] key means (THRIFT), or NULL
  float *kshift; // [nkt][D] beta * key mean (PASA), or NULL
  float *k;      // [nkt*Bk][D] raw K rows (for on-the-fly diagonal PASA tiles)
};

struct AttnJob {
  const lpattn_attn_problem *pr;
  int64_t D, nkt, nqt, kv_group;  // kv_group = Hq / Hkv; nkt: most KV tiles of a row
  int low_any;                    // some tile may be low: kq/vq/qlow exist
  int need_mean;                  // THRIFT or PASA: tile key means
  std::vector<KvPrep> kv;         // [B * Hkv]
  // Decode (SEMANTICS "Decode"): row r of sequence b sits at position
  // len[b] - Sq + r; its tile is diagonal, earlier ones full; THRIFT k per
  // sequence. cache is NULL for prefill.
  const lpattn_kv_cache *cache = nullptr;
  std::vector<int64_t> len;
  std::vector<int> seq_k;
};

// Per-thread scratch, sized for one (query tile, KV tile) pair.
struct Scratch {
  std::vector<float> q, ql, s, p, acc, ktmp, qbar, score, tmp, tmp2, shift0, alpha;
  std::vector<int64_t> nv;
  std::vector<uint8_t> kind, mode, codes, scales;
  std::vector<lpk_row> rows;
  void Size(const AttnJob &job);
};

// n values of a float tensor (f32/f16/bf16) starting at element offset
// `off`, `step` elements apart, as f32 (exact, with the dtype switch hoisted).
inline void LoadRow(const lpattn_tensor *t, int64_t off, int64_t step, int64_t n, float *out) {
  if (t->dtype == LPATTN_F32) {
    const float *p = static_cast<const float *>(t->data) + off;
    for (int64_t i = 0; i < n; i++) out[i] = p[i * step];
    return;
  }
  const uint16_t *p = static_cast<const uint16_t *>(t->data) + off;
  if (t->dtype == LPATTN_BF16) {
    for (int64_t i = 0; i < n; i++) out[i] = lpk_bf16_decode(p[i * step]);
    return;
  }
  for (int64_t i = 0; i < n; i++) out[i] = lpk_f16_decode(p[i * step]);
}

// Work item: prefill (b, hq, query tile) in that nesting; decode (b, hq, w)
// with w = 0/1 the first/second query tile the call's rows touch.
typedef void (*AttnKernel)(const AttnJob &job, int64_t item, Scratch *sc);

struct Pool;
// Backend state of a context: the pool and one scratch per pool thread.
struct Ctx {
  Pool *pool = nullptr;
  std::vector<Scratch> scratch;
};
// Sizes the scratch and, chunk by chunk of (b, kv head)s, lays out their
// KvPrep storage, runs prep(arg, i) for each, then the kernel over their items.
lpattn_status RunJob(Ctx *c, AttnJob &job, void (*prep)(void *arg, int64_t i, int thread),
                     void *arg);

// Formats of the SIMD domain quantizer (quantp-inl.h). The first three match
// the scalar lpk_quantize_domain codes; QP_FP8_P is P's fixed-scale FP8.
enum { QP_NVFP4 = 0, QP_MXFP4 = 1, QP_FP8 = 2, QP_FP8_P = 3 };
inline int QpFormat(lpattn_format f) {
  return f == LPATTN_FMT_FP8 ? QP_FP8 : f == LPATTN_FMT_MXFP4 ? QP_MXFP4 : QP_NVFP4;
}

// Kernel lookup in the generated registry (gen/registry.inc).
AttnKernel FindAttnKernel(int64_t head_dim);

lpattn_status Decode(lpattn_ctx *ctx, lpattn_kv_cache *c, const lpattn_tensor *q,
                     const lpattn_tensor *out, const lpattn_attn_problem *pr);

// Runs fn(i, thread) for i in [0, n) on the context's pool; false when an
// item threw (the remaining items are skipped). PoolCreate: NULL when the
// threads cannot be started. Nothing here throws.
Pool *PoolCreate(int threads);
void PoolFree(Pool *p);
int PoolThreads(const Pool *p);
bool PoolRun(Pool *p, int64_t n, void (*fn)(void *arg, int64_t i, int thread), void *arg);

}  // namespace lpattn_cpu

// For tests and the bench: targets compiled in and supported here, and a way
// to restrict dispatch to one of them (0 restores the normal choice).
extern "C" {
int lpattn_cpu_targets(int64_t *targets, int max);
const char *lpattn_cpu_target_name(int64_t target);
void lpattn_cpu_force_target(int64_t target);
double lpattn_cpu_fma_peak_gflops(int threads);  // f32 FMA peak (CPU-time based)
// The kernels' SIMD domain quantizer (fmt QP_*): dequantized values.
void lpattn_cpu_quantize_p_row(int fmt, int mx_up, const float *p, int64_t n, float *out);
}

#endif
