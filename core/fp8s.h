/* Static-scale FP8 (SPEC 11, lpattn.h FP8_STATIC) in core: the argument
 * checks of the API front and the one cast rule every host backend reads
 * (code = E4M3_RNE_saturating(x / descale), value = code exactly). */
#ifndef LPATTN_FP8S_H
#define LPATTN_FP8S_H

#include <stdint.h>
#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* q, k, v dtypes: f32/f16/bf16 (v as k), or under FP8_STATIC all E4M3
 * (E4M3 with another precision: BAD_DTYPE saying so). */
lpattn_status lp_check_qkv_dtypes(const lpattn_attn_params *p, const lpattn_tensor *q,
                                  const lpattn_tensor *k, const lpattn_tensor *v);
/* The descales of p (resolved copy of `caller`, the caller's struct, which
 * the problem's pointers then reference) into pr: other precisions must
 * leave them NULL; FP8_STATIC takes no leaky/pasa/score_f16, each given
 * descale is an f32 {1, 1, B, Hkv} view, and on host backends (host != 0)
 * every value is finite and > 0. pr's shapes and precision are resolved. */
lpattn_status lp_resolve_fp8s(int host, const lpattn_attn_params *caller,
                              const lpattn_attn_params *p, lpattn_attn_problem *pr);

/* Descale of (batch b, kv head h): 1 when t is NULL. */
float lp_fp8s_descale(const lpattn_tensor *t, int64_t b, int64_t h);
/* The E4M3 code of input x under descale d (SPEC 11's cast). */
uint8_t lp_fp8s_code(float x, float d);
/* n elements of t from element offset off, step apart, as the exact values
 * of their E4M3 codes (E4M3 inputs as given; f32/f16/bf16 cast by d). */
void lp_fp8s_row(const lpattn_tensor *t, int64_t off, int64_t step, int64_t n, float d,
                 float *values);

#ifdef __cplusplus
}
#endif
#endif
