/* The GPU backends' paged KV pool entries (backends/gpu/kv_pool.cu), in the
 * backend's namespace (CUDA, or HIP through vendor.h), for the vtable. */
#ifndef LP_GPU_KV_POOL_H
#define LP_GPU_KV_POOL_H
#include "internal.h"
#include "lp_gpu_ops.h"

namespace GPU_NS {
lpattn_status gpu_pool_init(lpattn_ctx *ctx, lpattn_kv_pool *pool);
void gpu_pool_fini(lpattn_kv_pool *pool);
lpattn_status gpu_kv_append(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_append_call *call);
lpattn_status gpu_kv_set_descales(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_tensor *slots,
                                  const lpattn_tensor *k_descale, const lpattn_tensor *v_descale);
lpattn_status gpu_slot_copy(lpattn_ctx *ctx, lpattn_kv_pool *pool, int32_t src, int32_t dst);
lpattn_status gpu_paged_decode(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                               const lpattn_attn_problem *pr);
/* paged prefill (vtable prefill_step; core/api_prefill.c) */
lpattn_status gpu_prefill_step(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                               const lpattn_attn_problem *pr, int64_t *step);
/* LPATTN_OK unless st is capturing a graph: then UNSUPPORTED with what to do
 * (a workspace `what` cannot grow there; gpu_context.cu) */
lpattn_status gpu_no_capture(cudaStream_t st, const char *what);
/* decode plans (vtable decode_plan / decode_run / decode_plan_free) */
lpattn_status gpu_decode_plan(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                              const lpattn_attn_problem *pr, void **state);
lpattn_status gpu_decode_run(lpattn_ctx *ctx, void *state, const void *q, void *out);
void gpu_decode_plan_free(lpattn_ctx *ctx, void *state);
/* core/kvcache.c's page tables, slots and lengths in device memory */
lpattn_status gpu_ids_alloc(lpattn_ctx *ctx, const int32_t *host, size_t n, int32_t **out);
void gpu_ids_free(lpattn_ctx *ctx, int32_t *p);
lpattn_status gpu_ids_add(lpattn_ctx *ctx, int32_t *p, int32_t n);
} // namespace GPU_NS
#endif
