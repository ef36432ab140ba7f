/* Arguments of the paged-pool kernels (templates/gpu/lp_gpu_decode*.j2),
 * shared by their host glue (backends/gpu/kv_pool.cu) and the generated
 * kernels. Plain C, passed by value. Byte offsets are those of
 * core/kvpage.h's lp_kv_layout. */
#ifndef LP_GPU_KV_ARGS_H
#define LP_GPU_KV_ARGS_H

#include <stdint.h>
#include "lpattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where things are in the pool: slots then pages (kvpage.h). */
typedef struct {
  uint8_t *mem;
  int64_t num_slots, num_pages;
  int64_t slot_bytes, page_bytes;
  /* page sections; head h adds h * head_bytes to the low ones */
  int64_t kc, ks, ko, vc, vs, vo, head_bytes, kmean, qmean, hk, hv;
  /* slot sections */
  int64_t rk, rv, qrows;
  int T, D, Hkv, Hq;
  int Dk, Dv; /* true widths of K and V rows (MLA 576, 512; else D): append reads
               * channels below them, zeros the rest of D (core/kvpage.h) */
  int prec, fmt, hdt; /* lpattn_precision, low lpattn_format, high dtype */
  int has_low, has_high_pages, has_ring, mx_round_up;
  int has_kmean, has_qmean, pasa; /* key means (PASA/THRIFT), query means (THRIFT) */
  float pasa_beta;
  /* FP8_STATIC (SPEC 11): E4M3 codes of every token (kc, vc; no ring, no
   * scales), the slot's descales at ds: f32 k [Hkv] then v [Hkv] */
  int fp8s;
  int64_t ds;
} lp_gpu_pool;

/* The sequences of a call (device tensors). */
typedef struct {
  int num_seqs;
  const int32_t *slots, *lens, *table;
  int64_t table_stride; /* elements between two sequences' rows */
  int64_t max_pages;    /* columns of the table */
  const int32_t *kv_start, *q_start; /* sharded decode (lpattn_kv_batch), or NULL */
  /* added to every lens[i] where a kernel reads it: a paged prefill's piece
   * (core/api_prefill.c) appends at lens[i] + a and decodes lens[i] + e
   * without a host read of the lengths; 0 otherwise */
  int32_t len_add;
} lp_gpu_seqs;

/* Append n tokens to each sequence: k, v [num_seqs, Hkv, n, D]; q
 * [num_seqs, Hq, n, D] or NULL (THRIFT pools record its rows). */
typedef struct {
  lp_gpu_pool pool;
  lp_gpu_seqs seqs;
  const void *k, *v, *q;
  int kdt, vdt, qdt;
  int64_t sk[4], sv[4], sq[4];
  int n;
  int phase; /* put kernel: 1 = the first tile's tokens (to the ring), 2 = the rest */
} lp_gpu_append_args;

/* FP8_STATIC slots (lpattn_kv_pool_set_descales): slot slots[i] takes k
 * descales k[i * sk[0] + h * sk[1]] and v's likewise (device memory) and is
 * emptied. */
typedef struct {
  lp_gpu_pool pool;
  const int32_t *slots;
  int64_t sslot; /* element stride of slots */
  int n;
  const float *k, *v;
  int64_t sk[2], sv[2];
} lp_gpu_descales_args;

/* Paged decode: q [num_seqs, Hq, Sq, D]; partial states per chunk of
 * LP_DECODE_CHUNK_TILES tiles, merged afterwards (SPEC 7, gpu_merge_kernel). */
typedef struct {
  lp_gpu_pool pool;
  lp_gpu_seqs seqs;
  const void *q;
  int64_t sq[4];
  int Sq, nchunk, chunk_tiles;
  float sm_scale;
  /* low pools: q quantized per token (lpattn_qtensor AXIS_D layout, [num_seqs][Hq][Sq]) */
  const uint8_t *qcodes, *qscales;
  const float *qouter;
  float *part_o, *part_l, *part_h; /* [nchunk][num_seqs][Hq][Sq](.D) */
  /* THRIFT: k per sequence from its length (core/thrift_k.h: thrift_k > 0
   * fixed, else thrift_budget); tiles selected high for the rows of query
   * tile (len - Sq) / T + x of q head hq: bit j of
   * sel[((seq * Hq + hq) * 2 + x) * sel_words + j / 32] */
  int thrift_k, sel_causal;
  float thrift_budget;
  uint32_t *sel;
  int sel_words;
  /* FP8_STATIC pools: q_descale of (sequence, kv head) at q_desc[b * sqd[0]
   * + h * sqd[1]] (element strides), or NULL (1) */
  const float *q_desc;
  int64_t sqd[2];
  /* sliding window and softcap (core/mask.h; SEMANTICS "Sliding window and
   * softcap"): row p sees keys p - win_left .. p (-1: unbounded), scores
   * capped by softcap (0: off) */
  int win_left;
  float softcap;
} lp_gpu_pdecode_args;

/* The kernel of a decode variant a call runs and its launch, as
 * lp_gpu_decode_plan_make (backends/gpu/gpu_decode_plan.h) decides them. */
enum { LP_DEC_HIGH, LP_DEC_NVFP4, LP_DEC_MXFP4, LP_DEC_FP8, LP_DEC_FP8S, LP_DEC_N };
typedef struct {
  int kernel, pasa;          /* LP_DEC_*; the PASA kernel (f16 variants) */
  int win;                   /* the _win kernel: a sliding window or a softcap (not PASA) */
  unsigned grid[3], block;
} lp_gpu_dec_launch;

#ifdef __cplusplus
}
#endif
#endif
