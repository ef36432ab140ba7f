/* Predicates the API fronts share (core/api.c, api_cache.c, api_kv.c,
 * api_bwd.c): written once here. Not installed. */
#ifndef LPATTN_ARGCHECK_H
#define LPATTN_ARGCHECK_H

#include "internal.h"

/* f32, f16 or bf16: the float inputs and outputs of the API. */
static inline int is_float_io(lpattn_dtype t) {
  return t == LPATTN_F32 || t == LPATTN_F16 || t == LPATTN_BF16;
}

static inline int same_shape(const lpattn_tensor *a, const int64_t s[4]) {
  return a->shape[0] == s[0] && a->shape[1] == s[1] && a->shape[2] == s[2] && a->shape[3] == s[3];
}

/* A low format of THRIFT or a KV store: NVFP4, MXFP4 or FP8. */
static inline int valid_format(lpattn_format f) {
  return f == LPATTN_FMT_NVFP4 || f == LPATTN_FMT_MXFP4 || f == LPATTN_FMT_FP8;
}

/* A tile or block size: a multiple of 32 in [32, 256]. */
static inline int valid_block(int b) { return b >= 32 && b <= 256 && b % 32 == 0; }

/* The context's backend takes host pointers (validation may read them). */
static inline int host(const lpattn_ctx *ctx) {
  return ctx->vt->host_memory && ctx->vt->host_memory();
}

#endif
