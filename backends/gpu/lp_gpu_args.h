/* Arguments of the GPU kernels (CUDA and HIP render the same templates),
 * shared by the host glue (backends/gpu) and the generated kernels
 * (gen/). Plain C: passed by value to kernels. */
#ifndef LP_GPU_ARGS_H
#define LP_GPU_ARGS_H

#include <stdint.h>
#include "lpattn.h"

/* Warpgroups of 64 query rows each that compute in a CTA of the sm_90a
 * 16-bit forward kernel (gpu_wg_cfg::NW; the plan's grid and block): 3 at
 * D = 64, else 2. LP_WG_NW96 and LP_WG_ST96 (gpu_wg_cfg::ST, key stages)
 * set D = 96's CTA for experiments: NW 3 (FlashAttention-3's 192 rows for
 * head dims up to 96) ran at 0.65-0.76 of D 128's rate on an H200 where 2
 * runs at 0.82-0.91 (bench/RESULTS_cuda_h100.md, session 20). */
#ifndef LP_WG_NW96
#define LP_WG_NW96 2
#endif
#ifndef LP_WG_ST96
#define LP_WG_ST96 3
#endif
#define LP_WG_NW(D) ((D) == 64 ? 3 : (D) == 96 ? LP_WG_NW96 : 2)

#ifdef __cplusplus
extern "C" {
#endif

/* A quantized tensor in lpattn's qtensor layout. `rows` is the S extent the
 * layout was sized for (AXIS_D: codes [B][H][rows][D]; AXIS_S: codes
 * [B][H][D][Sp], Sp = rows rounded up to the tile). */
typedef struct {
  const uint8_t *codes, *scales;
  const float *outer;
  int64_t rows;
} lp_gpu_qview;

/* One prefill attention launch (the paged decode has its own arguments,
 * lp_gpu_kv_args.h). Tiles: Bq = Bk = 64 in the default variants. */
typedef struct {
  const void *q, *k, *v;
  void *out;
  int64_t sq[4], sk[4], sv[4], so[4];
  int out_dtype;
  float *lse, *ent;
  int64_t sl[4], se[4];
  int B, Hq, Hkv, Sq, Skv, D;
  int off;          /* causal row r sees key c iff c <= r + off (pr->off: Skv - Sq,
                     * or q_start - kv_start with absolute positions); also a
                     * window's offset, causal or not (core/mask.h) */
  int win_left, win_right; /* sliding window (-1: unbounded; core/mask.h lp_mask) */
  float softcap;    /* 0: off, else s = softcap * tanh(s / softcap) (SEMANTICS) */
  int causal, leaky, prec, low, pasa, score_f16, mx_round_up;
  float sm_scale, pasa_beta;
  int nkt;          /* KV tiles of the longest sequence */
  int nqx;          /* query-tile CTAs per (b, h) */
  lp_gpu_qview qq, kq, vq; /* low Q/K/V (prec != HIGH) */
  const void *kd, *vd;      /* prefill: K and V codes * group scale as bf16 [B][Hkv][Skv][D] */
  const void *qd;           /* prefill (sm_90a low kernel): Q's codes * group scale as bf16 [B][Hq][Sq][D] */
  /* causal low prefill on sm_90a: the warpgroup kernel computes each 128-row
   * block's keys [0, gpu_wgl_kw) (every tile low) and leaves its rows' state
   * here, [B][Hq][Sq][D] (O unnormalized) and [B][Hq][Sq][4] (m, l, r, n);
   * the mma.sync kernel goes on from there (NULL: not split) */
  float *init_o, *init_st;
  const float *kmean;       /* [B][Hkv][kmean_tiles][D] (THRIFT, PASA) */
  int kmean_tiles;
  const int *sel;           /* [B][Hq][sel_tiles][sel_k] high tiles, ascending */
  int sel_tiles, sel_k;
  int vec16;                /* q/k/v rows are 16-byte aligned and contiguous in D */
  int warp;                 /* lanes of a warp (wave) on the device; the CTA has 4 */
  int cc;                   /* the device's compute capability, major * 10 + minor (CUDA) */
  /* static-scale FP8 (prec FP8_STATIC, SPEC 11): E4M3 codes of Q and K in
   * qq.codes / kq.codes with byte strides q8s / k8s (b, h, s; rows of D
   * bytes), V^T codes in vq (AXIS_S layout, no scales); descales [b][kv
   * head] with element strides sdesc[q, k, v] (NULL: 1) */
  int64_t q8s[3], k8s[3];
  const float *q_desc, *k_desc, *v_desc;
  int64_t sdesc[3][2];
} lp_gpu_attn_args;

/* Whether call a has a sliding window or a softcap: only the mma.sync
 * kernels take those (the sm_90a warpgroup kernels decline: gpu_wg_ok).
 * Host and device (gpu_attn_spec). */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define LP_GPU_ARGS_HD __host__ __device__
#else
#define LP_GPU_ARGS_HD
#endif
static inline LP_GPU_ARGS_HD int lp_gpu_win_any(int causal, int left, int right, float softcap) {
  return left >= 0 || (!causal && right >= 0) || softcap != 0.0f;
}

/* The sm_90a FP8 prefill kernel on E4M3 wgmma (lp_gpu_attn_wg8.cuh) takes
 * this low format and head dim; it reads the codes, so Q needs no bf16 copy. */
static inline int lp_gpu_wg8_takes(int low, int D) { return low == LPATTN_FMT_FP8 && D == 128; }

/* Quantize x into a qtensor (one warp per domain). shift (K under PASA):
 * x - beta * mean[(b*H + h)*shift_tiles + s/shift_tile][d] is quantized. */
typedef struct {
  const void *x;
  int dtype;
  int64_t sx[4];
  int B, H, S, D;
  int format, axis, tile, stochastic, mx_round_up;
  uint64_t seed;
  uint8_t *codes, *scales;
  float *outer;
  int64_t rows; /* S extent of the destination layout (>= S) */
  const float *shift_mean;
  float beta;
  int shift_tile, shift_tiles;
  int dst_b0, dst_s0; /* destination (b, s) of source (0, 0): KV cache tiles */
  int sr_d;           /* head dim of the SR indices (0: D); a zero-padded copy's true D */
} lp_gpu_quant_args;

typedef struct {
  const uint8_t *codes, *scales;
  const float *outer;
  int format, axis, tile;
  int B, H, S, D;
  void *y;
  int dtype;
  int64_t sy[4];
} lp_gpu_dequant_args;

/* SPEC 7 over `n` partials: n = 2 (lpattn_merge_states, lp_gpu_merge.cuh):
 * partial i is o (dtype, strides), lse/h f32 with strides; or a decode's
 * n chunk partials part_o/l/h (gpu_merge_kernel). */
typedef struct {
  int n;
  const void *o[2];
  int odt[2];
  int64_t so[2][4];
  const float *l[2], *hh[2];
  int64_t sl[2][4], sh[2][4];
  /* a decode's chunk partials instead (o[] unused) */
  const float *part_o, *part_l, *part_h;
  int B, H, S, D; /* D: channels out */
  int Dp;         /* decode partials: f32 per part_o row (MLA: the pool's 576 for D 512); 0: D */
  void *out;
  int out_dtype;
  int64_t sout[4];
  float *lse, *ent;
  int64_t slse[4], sent[4];
} lp_gpu_merge_args;

#ifdef __cplusplus
}
#endif
#endif
