// Internal interfaces of the Highway CPU backend (not installed).
#ifndef LPATTN_CPU_H
#define LPATTN_CPU_H

#include <stdint.h>

#include <vector>

#include "internal.h"
#include "kvpool.h"
#include "lpk_formats.h"  // backends/math: the kernel math every backend shares
#include "lpk_quant.h"
#include "lpk_softmax.h"

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
  int64_t Dt;                     // the call's head dim; D = CpuPaddedDim(Dt): channels past Dt are 0
  int low_any;                    // some tile may be low: kq/vq/qlow exist
  int need_mean;                  // THRIFT or PASA: tile key means
  std::vector<KvPrep> kv;         // [B * Hkv]
};

// Per-thread scratch, sized for one (query tile, KV tile) pair.
struct Scratch {
  std::vector<float> q, ql, s, p, acc, ktmp, qbar, score, tmp, tmp2, shift0, alpha;
  std::vector<int64_t> nv, nf;  // per row: end and start of its keys in a tile
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

// The same row zero-padded to np >= n values (head dims no multiple of 16).
inline void LoadRowPad(const lpattn_tensor *t, int64_t off, int64_t step, int64_t n, int64_t np,
                       float *out) {
  LoadRow(t, off, step, n, out);
  for (int64_t i = n; i < np; i++) out[i] = 0.0f;
}

// The head dim the SIMD kernels run at (SEMANTICS "Head dimensions"): D itself
// when the vectors divide it and low groups along D are whole, else D rounded
// up with zero channels (exact: they add nothing to q.k, and a quantization
// group zero-padded is the group quantized as SPEC says).
inline int64_t CpuPaddedDim(int64_t D, lpattn_format low, int low_any) {
  const int64_t a = low_any && low == LPATTN_FMT_MXFP4 ? 32 : 16;
  return (D + a - 1) / a * a;
}

// Work item: (b, hq, query tile) in that nesting.
typedef void (*AttnKernel)(const AttnJob &job, int64_t item, Scratch *sc);

// Paged decode (decode-inl.h, cpu_decode.cc). One work item is one chunk
// (LP_DECODE_CHUNK_TILES tiles) of one (sequence, kv head): it folds those
// tiles into the rows of every q head of the GQA group and every query row,
// reading each tile once, and leaves (O, LSE, H) per row for the merge.
struct DecSeq {
  lp_kv_seq s;
  int64_t b;    // batch index
  int k;        // THRIFT k of this sequence
  int64_t i1;   // query tile of its last row
  int64_t row0; // slot position of its first row (lp_kv_seq_row0)
  int64_t nt;   // tiles the slot holds (nt <= i1 in an earlier shard)
};
struct DecItem {
  int32_t seq, h, chunk;
};
struct DecJob {
  const lpattn_attn_problem *pr;
  int64_t D, T, Sq, G, R;  // R = G * Sq rows per item
  int low;                 // some tile may be low
  int qfmt, pfmt, fp4;     // QP_* formats of Q/K/V and of P; FP4 codes
  int gshift;              // log2 of the FP4 group size
  int thrift, pasa;
  int fp8s;                    // FP8_STATIC pool: codes without scales, the slot's descales
  float beta;                  // PASA: the pool's resolved beta
  float e4m3[256], e8m0[256];  // decoded scale codes
  std::vector<DecSeq> seqs;
  std::vector<DecItem> items;
  float *part;             // [items][R][D + 2]: O, LSE, H of each row
};
struct SmallJob;
struct DecScratch {
  std::vector<float> q, ql, s, p, pp, acc, kd, vd, qbar, score, alpha, sh;
  std::vector<int64_t> nvis, pos, nfirst;  // per row: a tile's keys [nfirst, nvis)
  std::vector<int32_t> list;
  std::vector<uint8_t> kind, mode;  // [G][2][tiles]
  std::vector<uint32_t> ib;         // AVX2 int rows of Q and P (decode-inl.h IntRow)
  std::vector<lpk_row> rows;
  Scratch sc;                       // QuantizePRow's non-finite path
  void Size(const DecJob &job, int64_t ntile);
  void Size(const SmallJob &job);
};
typedef void (*DecodeKernel)(const DecJob &job, int64_t item, DecScratch *w);
DecodeKernel FindDecodeKernel();

// lpattn_attention with few query rows (smallq.cc, smallq-inl.h): HIGH,
// Sq <= Bq, K/V rows read in place. One work item is one (batch, kv head):
// all G * Sq rows of its q heads, every KV tile in order (the prefill's
// single online-softmax pass), written straight to the outputs.
struct SmallJob {
  const lpattn_attn_problem *pr;
  int64_t D, Bk, G, Sq, R, off;  // R = G * Sq rows per item; off = pr.off
};
typedef void (*SmallQKernel)(const SmallJob &job, int64_t item, DecScratch *w);
SmallQKernel FindSmallQKernel();

struct Pool;
// Backend state of a context: the pool and one scratch per pool thread.
struct Ctx {
  Pool *pool = nullptr;
  std::vector<Scratch> scratch;
  std::vector<DecScratch> dec;
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

// Kernel lookup in the generated registry (gen/registry_attn.inc).
AttnKernel FindAttnKernel(int64_t head_dim);

// The small-Sq path (smallq.cc): whether it takes this call, and the call.
bool SmallQTakes(const lpattn_attn_problem &pr);
lpattn_status SmallQAttention(Ctx *c, const lpattn_attn_problem *pr);

// Batched decode through a paged pool (decode.cc).
lpattn_status PagedDecode(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                          const lpattn_attn_problem *pr);

// The backward (backward.cc, SPEC 10): work items (batch, kv head).
lpattn_status Backward(lpattn_ctx *ctx, const lpattn_bwd_problem *bp);

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
// 0: every lpattn_attention call takes the general path (tests compare the
// small-Sq path with it); 1 (the default): calls that fit take the small-Sq path.
void lpattn_cpu_set_small_q(int on);
double lpattn_cpu_fma_peak_gflops(int threads);  // f32 FMA peak (CPU-time based)
// The kernels' SIMD domain quantizer (fmt QP_*): dequantized values.
void lpattn_cpu_quantize_p_row(int fmt, int mx_up, const float *p, int64_t n, float *out);
// The backward's SIMD stochastic rounding (sr-inl.h): u[e] = the SR uniform of
// element index idx[e] under key; out = the SR-quantized (with the uniforms u,
// fmt QP_NVFP4/MXFP4/FP8) and dequantized n values x of one domain.
void lpattn_cpu_sr_uniforms(uint64_t key, const int64_t *idx, int64_t n, float *u);
void lpattn_cpu_sr_qdq(int fmt, int mx_up, const float *x, const float *u, int64_t n, float *out);
// The same: the uniforms of the consecutive indices i0 .. i0 + n - 1; every column of a
// finite [R x C] matrix one domain (returns 0, nothing written, when not taken).
void lpattn_cpu_sr_uniforms_run(uint64_t key, uint64_t i0, int64_t n, float *u);
int lpattn_cpu_sr_qdq_columns(int fmt, int mx_up, const float *src, const float *U, int64_t R, int64_t C,
                              float *dst);
}

#endif
