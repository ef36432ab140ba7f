/* Bit-exact number formats and block quantizers (SPEC 2), shared by the
 * host backends. The GPU/SIMD templates expand the same arithmetic; every
 * operation here is IEEE f32 in the order written, so results are bitwise
 * reproducible anywhere (no fast-math, no FMA contraction). */
#ifndef LPATTN_FORMATS_H
#define LPATTN_FORMATS_H

#include <stdint.h>
#include "lpattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element encoders with stochastic rounding: u in [0, 1). */
uint8_t lp_e2m1_encode_sr(float x, float u);
uint8_t lp_e4m3_encode_sr(float x, float u);

/* Philox4x32-10: the 4 words for `counter` under `key` (SPEC 2). */
void lp_philox4x32_10(uint64_t key, uint64_t counter, uint32_t out[4]);
/* The full Philox4x32-10 block: 128-bit counter, 64-bit key (for the
 * published known-answer vectors; lp_philox4x32_10 is ctr[2] = ctr[3] = 0). */
void lp_philox4x32_10_block(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* SR's random byte r of logical element index n (SPEC 2): byte n % 4 of
 * word (n / 4) % 4 of the block at counter n / 16. */
uint32_t lp_sr_byte(uint64_t seed, uint64_t n);
/* u for logical element index n: (2r + 1) * 2^-9 (x rounds to b iff u < t). */
float lp_sr_uniform(uint64_t seed, uint64_t n);

/* Group size of a format (16, 32, or 0 for FP8: no groups). */
int lp_group_size(lpattn_format f);

/* One quantization domain of `n` values at x[i * stride] (n a multiple of the
 * group size, except FP8). Writes n codes (E2M1 codes are NOT packed here:
 * one per byte, low nibble), n / G group-scale codes and the outer scale
 * (NVFP4: amax/(6*448); FP8: amax/448; MXFP4: 1). sr_index, when not NULL,
 * gives each element's logical index for stochastic rounding (seed used).
 * Returns 1 if a non-finite input was seen (its group scale becomes NaN). */
typedef struct {
  lpattn_format format;
  int stochastic;
  uint64_t seed;
  int mx_round_up;
} lp_quant_cfg;

int lp_quantize_domain(const lp_quant_cfg *cfg, const float *x, int64_t stride, int n,
                       const int64_t *sr_index, uint8_t *codes, uint8_t *scales, float *outer);

/* Inverse of lp_quantize_domain: y[i] = dequantized value (f32, exact). */
void lp_dequantize_domain(lpattn_format format, const uint8_t *codes, const uint8_t *scales,
                          float outer, int n, float *y);

/* Value of one element: code * group scale * outer, exactly as the kernels
 * multiply it: (e * s) * outer in f32. */
float lp_dequant_elem(lpattn_format format, uint8_t code, uint8_t scale_code, float outer);

/* Element offset of (a, b, c, d) in a 4-D tensor (its element strides). */
static inline int64_t lp_off4(const lpattn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3];
}

/* Load one element of any input dtype as f32. */
float lp_load_f32(const void *base, lpattn_dtype dt, int64_t offset);
/* Store f32 into f32/f16/bf16 (round to nearest even). */
void lp_store_f32(void *base, lpattn_dtype dt, int64_t offset, float v);

/* Host tensor quantizer of the ref and cpu backends: the qtensor layouts of
 * lpattn.h, arguments already validated by core. q's format/axis/tile rule;
 * p gives rounding, seed, the MXFP4 scale rule and check_finite (then
 * LPATTN_ERR_NONFINITE is returned before anything is written). */
lpattn_status lp_host_quantize(const lpattn_tensor *x, const lpattn_qtensor *q,
                               const lpattn_quant_params *p);
lpattn_status lp_host_dequantize(const lpattn_qtensor *q, const lpattn_tensor *y);

#ifdef __cplusplus
}
#endif
#endif
