/* The dispatch plan of a GPU paged decode call (issue 30 item 2; the
 * prefill's is gpu_plan.h): from the pool's layout, the batch, the queries
 * and the device, one function decides whether the call is taken, which
 * kernel of the decode variant runs it (page format, PASA), the split into
 * chunks, the grid and block, and every workspace buffer (partial states,
 * HIP's quantized queries, THRIFT's selection masks). backends/gpu/kv_pool.cu
 * sizes and carves the workspace and launches from it; the variant's entry
 * (templates/gpu/kernel_decode.cu.j2) launches the kernel it names with its
 * grid and does not choose. The entry still answers UNSUPPORTED where the
 * kernel's shared memory does not fit (lpd_smem: a fact of the kernel image,
 * as the prefill's fallbacks are). Plain C (host only), so that C tests and
 * scripts/decode_plan_equiv.cc include it. */
#ifndef LP_GPU_DECODE_PLAN_H
#define LP_GPU_DECODE_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvpage.h"
#include "lp_gpu_kv_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the decode call as the plan needs it (kv_pool.cu fills it from the pool,
 * the batch and the problem) */
typedef struct {
  int D, Hq, Hkv, T;          /* the pool's head dim, heads, page size (lp_kv_layout) */
  int has_low, fmt, has_qmean, pasa; /* low pages and their format, THRIFT, PASA pools */
  int fp8s;                   /* FP8_STATIC pages (E4M3 codes, slot descales) */
  lpattn_dtype hdt, qdt;      /* the pool's high dtype, the queries' */
  int unit_strides, score_f16;/* slots, lengths, table rows contiguous; f16 scores asked */
  int num_seqs, sharded, Sq;  /* sequences, kv_start given, query rows per sequence */
  int win;                    /* a sliding window or a softcap (core refuses them with PASA) */
  int64_t max_length;         /* the batch's longest sequence */
} lp_gpu_decode_problem;

/* the device a decode is planned for */
typedef struct {
  int quant_q;  /* low pools: queries quantized by a launch first (HIP) */
  int block;    /* threads of a CTA (128 CUDA, LPH_NT HIP) */
  int rows;     /* query rows of a CTA (8: lpd_body, LPH_R) */
  int (*decode)(int64_t D, int dtype); /* 1 where a decode variant (D, dtype) is built */
} lp_gpu_decode_dev;

typedef struct {
  lpattn_status st;      /* not LPATTN_OK: the call's status, nothing else is set */
  lp_gpu_dec_launch k;   /* kernel (LP_DEC_*), PASA kernel, grid, block */
  int nchunk;            /* chunks per sequence (SPEC 7): grid x */
  int words;             /* THRIFT: selection words per (sequence, head, query tile) */
  int quant_q, select;   /* launches before the kernel: the queries' quantizer, THRIFT's selection */
  size_t rows, qrows;    /* partial-state rows (nchunk * ns * Hq * Sq), query rows */
  /* workspace byte offsets: partial O [rows][D] f32, l [rows], h [rows];
   * quantized queries (codes, scales, outer); selection masks */
  size_t at_o, at_l, at_h, at_qc, at_qs, at_qo, at_sel;
  size_t ws;             /* workspace bytes */
} lp_gpu_decode_plan;

/* the kernel a pool's pages take: HIGH, static FP8, or the low format's */
static inline int lp_decode_kernel(int has_low, int fmt, int fp8s) {
  if (!has_low) return LP_DEC_HIGH;
  if (fp8s) return LP_DEC_FP8S;
  return fmt == LPATTN_FMT_NVFP4 ? LP_DEC_NVFP4 : fmt == LPATTN_FMT_MXFP4 ? LP_DEC_MXFP4 : LP_DEC_FP8;
}

/* Fills *p for the call; returns p->st == LPATTN_OK. */
static inline int lp_gpu_decode_plan_make(const lp_gpu_decode_problem *pr, const lp_gpu_decode_dev *dev,
                                          lp_gpu_decode_plan *p) {
  memset(p, 0, sizeof *p);
  p->st = LPATTN_ERR_UNSUPPORTED;
  if (pr->qdt != pr->hdt || !pr->unit_strides || pr->score_f16) return 0;
  if (!dev->decode(pr->D, pr->hdt)) return 0;
  if (pr->Sq < 1 || pr->Sq > pr->T) return p->st = LPATTN_ERR_INVALID_ARGUMENT, 0;
  if (pr->pasa && pr->hdt != LPATTN_F16) return 0; /* PASA kernels are f16 (SEMANTICS PASA) */
  if (pr->pasa && pr->win) return 0;               /* no PASA _win kernels (core refuses them first) */
  const int ns = pr->num_seqs, Hq = pr->Hq, D = pr->D, Sq = pr->Sq;
  /* chunks of LP_DECODE_CHUNK_TILES pages; a shard's chunks lie in its
   * sequence's tiles (core/kvpage.h), which may take one more */
  const int64_t span = (int64_t)pr->T * LP_DECODE_CHUNK_TILES;
  const int64_t nc = (pr->max_length + span - 1) / span;
  p->nchunk = (int)(nc > 0 ? nc : 1) + (pr->sharded ? 1 : 0);
  p->rows = (size_t)p->nchunk * ns * Hq * Sq, p->qrows = (size_t)ns * Hq * Sq;
  p->at_o = 0, p->at_l = p->rows * D * 4, p->at_h = p->at_l + p->rows * 4;
  size_t at = p->at_h + p->rows * 4, qbytes = 0;
  if (pr->has_low && !pr->fp8s && dev->quant_q) { /* codes [qrows][D], scales, outer (16-aligned) */
    const int G = pr->fmt == LPATTN_FMT_MXFP4 ? 32 : 16;
    qbytes = (p->qrows * (D + D / 16 + 4) + 16 + 255) / 256 * 256;
    p->at_qc = at, p->at_qs = at + p->qrows * D;
    p->at_qo = at + (p->qrows * (D + D / G) + 15) / 16 * 16;
    p->quant_q = 1;
  }
  at += qbytes;
  const int64_t maxtiles = (pr->max_length + pr->T - 1) / pr->T;
  p->words = pr->has_qmean ? (int)((maxtiles + 31) / 32 > 0 ? (maxtiles + 31) / 32 : 1) : 0;
  p->select = pr->has_qmean;
  p->at_sel = at; /* [ns][Hq][2 query tiles][words] */
  p->ws = at + ((size_t)ns * Hq * 2 * p->words * 4 + 255) / 256 * 256;
  p->k.kernel = lp_decode_kernel(pr->has_low, pr->fmt, pr->fp8s), p->k.pasa = pr->pasa, p->k.win = pr->win;
  /* a CTA: one chunk, `rows` query rows of one kv head's group, one sequence */
  const int G = Hq / pr->Hkv, nrb = (G * Sq + dev->rows - 1) / dev->rows;
  p->k.grid[0] = (unsigned)p->nchunk, p->k.grid[1] = (unsigned)(pr->Hkv * nrb), p->k.grid[2] = (unsigned)ns;
  p->k.block = (unsigned)dev->block;
  p->st = LPATTN_OK;
  return 1;
}

#ifdef __cplusplus
}
#endif
#endif
