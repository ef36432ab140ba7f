/* Host-side prototypes of the GPU backends' helper kernels (gen/lp_gpu_ops),
 * in the backend's namespace: CUDA, or HIP when LPATTN_HIP is defined (the
 * same sources serve both through backends/hip/vendor.h). */
#ifndef LP_GPU_OPS_H
#define LP_GPU_OPS_H
#if defined(LPATTN_HIP)
#include "vendor.h"
#define GPU_NS lpattn_hip
#else
#include <cuda_runtime.h>
#define GPU_NS lpattn_cuda
#endif
#include "lp_gpu_args.h"

namespace GPU_NS {

typedef struct {
  const void *k;
  int dtype;
  int64_t sk[4];
  int B, H, D, T, Skv;
  int j0, j1, tiles;
  float *mean;
} gpu_mean_args;

typedef struct {
  const void *q; /* Q (dtype qdt, strides sq) */
  int qdt;
  int64_t sq[4];
  int B, Hq, Hkv, Sq, Skv, D, T;
  int off; /* the causal (and window) offset (lp_gpu_attn_args) */
  int win_left, win_right; /* sliding window (-1: unbounded; core/mask.h) */
  int causal, sel_causal, leaky;
  int nkt;
  const float *kmean;
  int kmean_tiles;
  int k;           /* k for every row */
  int rule;        /* lpattn_thrift_rule flags (SEMANTICS "THRIFT selection rules") */
  const void *k_in; /* K (dtype kdt, strides sk): the KMAX rule's keys */
  int kdt;
  int64_t sk[4];
  float *qbar;     /* [B][Hs][sel_tiles][D] workspace (lp_gpu_select.cuh: Hs sel heads) */
  float *kmax;     /* [B][Hs][sel_tiles][kmax_tiles] workspace (rule KMAX) */
  int kmax_tiles;
  int *sel;
  int sel_tiles, sel_k;
  int *out; /* user selection tensor (i32) or NULL */
  int64_t so[4];
  int out_k;
} gpu_select_args;

/* Static-scale FP8 (SPEC 11): x [B][H][S][D] (f32/f16/bf16 cast by the
 * descale of (b, h / G); E4M3 copied) -> codes [B][H][rows][D], or with
 * transpose [B][H][D][rows] (V^T, keys past S zero). desc: [b][kv head] at
 * element strides sd, NULL = 1. */
typedef struct {
  const void *x;
  int dtype;
  int64_t sx[4];
  int B, H, S, D, G;
  const float *desc;
  int64_t sd[2];
  uint8_t *codes;
  int transpose;
  int64_t rows;
  int *jmin; /* non-NULL: NaN codes written as 0, their first key per [b][h][d] kept here */
} gpu_cast8_args;

/* Static FP8's NaN V codes (gpu_cast8_args.jmin): the rows that attend them. */
typedef struct {
  void *out;
  int dtype;
  int64_t so[4];
  const int *jmin;
  int B, Hq, Hkv, Sq, Skv, D, causal, off;
} gpu_nan_cols_args;

lpattn_status gpu_tile_means(const gpu_mean_args *m, cudaStream_t st);
lpattn_status gpu_cast_e4m3(const gpu_cast8_args *a, cudaStream_t st);
lpattn_status gpu_nan_cols(const gpu_nan_cols_args *a, cudaStream_t st);
lpattn_status gpu_select(const gpu_select_args *a, int nqx, cudaStream_t st);
lpattn_status gpu_dequant_kv(const lp_gpu_qview *kq, const lp_gpu_qview *vq, int fmt, int64_t BH,
                             int S, int D, void *kd, void *vd, cudaStream_t st);
lpattn_status gpu_dequant_cols(const lp_gpu_qview *q, int fmt, int64_t BH, int S, int D, void *out,
                               cudaStream_t st);
lpattn_status gpu_dequant_rows(const lp_gpu_qview *q, int fmt, int64_t BH, int S, int D, void *out,
                               cudaStream_t st);
lpattn_status gpu_scan_finite(const lpattn_tensor *t, int *flag, cudaStream_t s);
} // namespace GPU_NS
#endif
