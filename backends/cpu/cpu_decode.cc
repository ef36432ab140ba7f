// Batched decode through a paged pool. For now the ref backend's decode
// (SEMANTICS "Decode"), so cpu decode equals ref bitwise.
#include "cpu.h"

extern "C" lpattn_status ref_paged_decode(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                          const lpattn_kv_batch *batch,
                                          const lpattn_attn_problem *pr);

namespace lpattn_cpu {

lpattn_status PagedDecode(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                          const lpattn_attn_problem *pr) {
  return ref_paged_decode(ctx, pool, batch, pr);
}

}  // namespace lpattn_cpu
