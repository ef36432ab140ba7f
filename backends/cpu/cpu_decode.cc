// Decode against the shared host KV cache (core/kvcache.c).
#include "cpu.h"

namespace lpattn_cpu {

// The cache's storage and tile bookkeeping are shared with ref; the row engine
// for decode is ref's for now (see the report: SIMD decode not done).
lpattn_status Decode(lpattn_ctx *ctx, lpattn_kv_cache *c, const lpattn_tensor *q,
                     const lpattn_tensor *out, const lpattn_attn_problem *pr) {
  return lpattn_ref_backend.decode(ctx, c, q, out, pr);
}

}  // namespace lpattn_cpu
