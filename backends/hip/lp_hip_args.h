/* Arguments of the HIP kernels, shared by the host glue (hip_backend.hip)
 * and the generated kernels (gen/). Plain C, passed by value. */
#ifndef LP_HIP_ARGS_H
#define LP_HIP_ARGS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Device workspace of one attention call (hip_backend.hip sizes it). */
typedef struct {
  float *kmean;  /* [B][Hkv][nkt][D] key mean of every KV tile */
  float *qmean;  /* [B][Hq][nqt][D] query tile means (THRIFT) */
  float *score;  /* [B][Hq][nqt][nkt] THRIFT importance */
  uint8_t *mode; /* [B][Hq][nqt][nkt] LP_MODE_* of every (query, KV) tile */
  float *qd;     /* [B][Hq][Sq][D] dequantized low Q (NULL under HIGH) */
  float *kd;     /* [B][Hkv][nkt*Bk][D] dequantized low K (minus PASA shift) */
  float *vd;     /* [B][Hkv][nkt*Bk][D] dequantized low V, per (channel, tile) */
  /* FP8 low tiles: E4M3 codes and per-token scales of the same Q/K rows,
   * for CDNA3's FP8 matrix cores (NULL for other formats) */
  uint8_t *qc, *kc; /* like qd, kd */
  float *qo, *ko;   /* [B][Hq][Sq], [B][Hkv][nkt*Bk] */
} lp_hip_work;

/* One attention call: strided views (elements), dtypes as lpattn_dtype. */
typedef struct {
  const void *q, *k, *v;
  void *out;
  int64_t sq[4], sk[4], sv[4], so[4];
  int qt, kt, ot;
  float *lse, *ent;
  int64_t sl[4], se[4];
  int32_t *sel; /* THRIFT selection output [B][Hq][nqt][sel_k] or NULL */
  int64_t ss[4];
  int sel_k;
  int B, Hq, Hkv, Sq, Skv, D, Bq, Bk, nqt, nkt;
  int causal, leaky, prec, low, pasa, score_f16, mx_round_up, selection_mode;
  float sm_scale, pasa_beta;
  int r16; /* 16 rows per wave (MFMA tile shape), set when D <= 128 and Bk <= 128 */
  lp_hip_work w;
} lp_hip_attn_args;

/* lpattn_quantize / lpattn_dequantize: x (or y) strided, q in lpattn's
 * qtensor layout (lpattn.h). */
typedef struct {
  const void *x;
  void *y;
  int xt;
  int64_t sx[4];
  uint8_t *codes, *scales;
  float *outer;
  int B, H, S, D, fmt, axis, tile, stochastic, mx_round_up;
  uint64_t seed;
  int *nonfinite; /* check_finite: set when x holds a non-finite value */
} lp_hip_quant_args;

/* One merge call (SPEC 7): rows of B*H*S, any strides. */
typedef struct {
  const void *oa, *ob;
  void *o;
  const float *la, *lb, *ha, *hb;
  float *l, *h; /* h NULL: entropy not merged */
  int64_t soa[4], sob[4], so[4], sla[4], slb[4], sha[4], shb[4], sl[4], sh[4];
  int ta, tb, to;
  int B, H, S, D;
} lp_hip_merge_args;

#ifdef __cplusplus
}
#endif
#endif
