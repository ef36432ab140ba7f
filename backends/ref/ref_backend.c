/* The ref backend: plain C, f64 accumulation, every SPEC feature. It is the
 * oracle the other backends are compared with, so it favours clarity over
 * speed and keeps no state. */
#include "formats.h"
#include "kvcache.h"
#include "ref_internal.h"

static lpattn_status ref_quantize(lpattn_ctx *ctx, const lpattn_tensor *x, const lpattn_qtensor *q,
                                  const lpattn_quant_params *p) {
  (void)ctx;
  return lp_host_quantize(x, q, p);
}

static lpattn_status ref_dequantize(lpattn_ctx *ctx, const lpattn_qtensor *q,
                                    const lpattn_tensor *y) {
  (void)ctx;
  return lp_host_dequantize(q, y);
}

static lpattn_status ref_merge(lpattn_ctx *ctx, const lpattn_tensor *o_a,
                               const lpattn_tensor *lse_a, const lpattn_tensor *h_a,
                               const lpattn_tensor *o_b, const lpattn_tensor *lse_b,
                               const lpattn_tensor *h_b, const lpattn_tensor *o,
                               const lpattn_tensor *lse, const lpattn_tensor *h) {
  (void)ctx;
  return lp_host_merge(o_a, lse_a, h_a, o_b, lse_b, h_b, o, lse, h);
}

static int ref_host_memory(void) { return 1; }

const lpattn_backend_vtable lpattn_ref_backend = {
    .name = "ref",
    .init = NULL,
    .fini = NULL,
    .quantize = ref_quantize,
    .dequantize = ref_dequantize,
    .attention = ref_attention,
    .merge = ref_merge,
    .cache_create = lp_kv_create,
    .cache_free = lp_kv_free,
    .cache_append = lp_kv_append,
    .decode = lp_kv_decode,
    .host_memory = ref_host_memory,
    .synchronize = NULL,
    .pool_init = lp_host_pool_init,
    .pool_fini = lp_host_pool_fini,
    .kv_append = lp_host_kv_append,
    .slot_copy = lp_host_slot_copy,
    .paged_decode = ref_paged_decode,
    .backward = ref_backward,
    .kv_set_descales = lp_host_set_descales,
};
