/* Arguments of the GPU attention backward (SPEC 10, SEMANTICS "Backward"):
 * shared by the host glue (backends/gpu/gpu_backward.cu) and the generated
 * kernels (gen/lpattn_cuda_bwd_d<D>_<dtype>.cu). Plain C: passed by value. */
#ifndef LP_GPU_BWD_ARGS_H
#define LP_GPU_BWD_ARGS_H

#include <stdint.h>
#include "lpattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One backward call (low tiles: the fields at the end): q, k, v and dout of the variant's
 * 16-bit dtype; out and lse of the forward (out any float dtype, lse f32);
 * dq, dk, dv any float dtype. rowlse and delta are workspace rows
 * [B][Hq][Sq] that the preprocess kernel fills (rowlse: the LSE, +inf where
 * it is -inf or the row is absent, so P = exp(s - rowlse) is 0 there). */
typedef struct {
  const void *q, *k, *v, *out, *dout;
  int64_t sq[4], sk[4], sv[4], so[4], sdo[4];
  int out_dtype;
  const float *lse;
  int64_t sl[4];
  void *dq, *dk, *dv;
  int64_t sdq[4], sdk[4], sdv[4];
  int dq_dtype, dk_dtype, dv_dtype;
  float *rowlse, *delta;
  int B, Hq, Hkv, Sq, Skv, D;
  int causal;
  int off; /* causal row r sees key c iff c <= r + off (Skv - Sq, or q_start - kv_start) */
  /* the sliding window (core/mask.h; -1: unbounded; win_right -1 when
   * causal) and the logit softcap (0: none), SEMANTICS "Sliding window and
   * softcap": the mma.sync kernels alone take them (gpu_bwd_wg_ok) */
  int win_left, win_right;
  float softcap;
  float sm_scale;
  int vec16; /* q, k, v, dout rows are 16-byte aligned and contiguous in D */
  /* Low tiles (SEMANTICS "Backward"): low = the format (-1: every tile
   * high). The operands' exact bf16 values code x group scale, [B][H][S][D]
   * (16-byte rows), with their f32 outer scales (MXFP4: none, 1):
   *   lq, lk: the forward's Q and K along D (RNE; outer per row / key);
   *   dod, vd: dO and V along D (SR; outer per row / key);
   *   dor, qr, kc: dO, Q and K along S in tiles of 64 (SR; outer
   *   [B][H][tiles][D]). P and dS are quantized in the kernels (SR). */
  int low, leaky, mx_round_up;
  uint64_t seed;
  const void *lq, *lk, *dod, *vd, *dor, *qr, *kc;
  const float *lq_out, *lk_out, *dod_out, *vd_out, *dor_out, *qr_out, *kc_out;
} lp_gpu_bwd_args;

/* whether a backward call has a sliding window or a softcap */
static inline int lp_gpu_bwd_win(const lp_gpu_bwd_args *a) {
  return a->win_left >= 0 || a->win_right >= 0 || a->softcap != 0.0f;
}

#ifdef __cplusplus
}
#endif
#endif
