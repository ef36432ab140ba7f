/* What the host files of the GPU backends share: CUDA, and HIP when built
 * with LPATTN_HIP (hipcc, or nvcc through tests/hip/shim), the runtime names
 * mapped by backends/hip/vendor.h. One job per file:
 *   gpu_context.cu   context (device, stream), workspace, the vtable
 *   gpu_registry.cu  the generated kernel registries (gen/registry_<op>.inc)
 *   gpu_ops.cu       quantize / dequantize / merge, workspace q-views
 *   gpu_prefill.cu   lpattn_attention
 *   gpu_backward.cu  lpattn_attention_backward (CUDA, HIGH; gated, see there)
 *   kv_pool.cu       the paged KV pool (lpattn_kv_cache is core/kvcache.c on it)
 *   gpu_pad.cu       head dims without a compiled variant: zero-padded copies
 * Every call is asynchronous on the context's stream except lpattn_quantize
 * with check_finite (it reads a flag back) and workspace growth. */
#ifndef LP_GPU_BACKEND_H
#define LP_GPU_BACKEND_H

#include "lp_gpu_ops.h" /* the runtime (CUDA, or HIP through vendor.h) */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "internal.h"
#include "lp_gpu_args.h"
#include "lp_gpu_bwd_args.h"

#if defined(LPATTN_HIP)
#define GPU_NAME "hip"
#define GPU_VTABLE_FN lpattn_hip_backend
/* no cp.async on HIP: low tiles are decoded in-kernel from the codes */
#define GPU_DEQUANT_KV 0
#else
#define GPU_NAME "cuda"
#define GPU_VTABLE_FN lpattn_cuda_backend
#define GPU_DEQUANT_KV 1
#endif
/* the kernels hold the causal offset (pr->off) and row/key indices as int */
#define GPU_OFF_MAX (1 << 30)

#define CK(call) \
  do { if ((call) != cudaSuccess) return LPATTN_ERR_BACKEND; } while (0)
#define TRY(call) \
  do { lpattn_status st_ = (call); if (st_ != LPATTN_OK) return st_; } while (0)

namespace GPU_NS {

/* ---- kernel registry (gpu_registry.cu) ----------------------------------- */
typedef lpattn_status (*gpu_attn_fn)(const lp_gpu_attn_args *, cudaStream_t);
/* the attention kernel for head dim D and input dtype dt, or NULL */
gpu_attn_fn find_attn(int64_t D, lpattn_dtype dt);
/* its kernel paths (LP_PATHS_* of gpu_plan.h, gen/paths.inc), 0 where none */
int find_attn_paths(int64_t D, lpattn_dtype dt);
typedef lpattn_status (*gpu_bwd_fn)(const lp_gpu_bwd_args *, cudaStream_t);
/* the backward kernels for head dim D and input dtype dt, or NULL */
gpu_bwd_fn find_bwd(int64_t D, lpattn_dtype dt);
lpattn_status run_quant(const lp_gpu_quant_args *a, cudaStream_t s);
lpattn_status run_dequant(const lp_gpu_dequant_args *a, cudaStream_t s);
lpattn_status run_merge(const lp_gpu_merge_args *a, cudaStream_t s);

/* ---- context and workspace (gpu_context.cu) ------------------------------ */
typedef struct {
  int device, nsm, warp;
  int cc; /* compute capability, major * 10 + minor */
  cudaStream_t stream;
  void *ws;
  size_t ws_size;
  void *pad; /* zero-padded operands of a call on a larger head dim (gpu_pad.cu) */
  size_t pad_size;
  int *flag; /* check_finite result */
} gpu_impl;

static inline gpu_impl *impl_of(lpattn_ctx *ctx) { return (gpu_impl *)ctx->impl; }

/* Carves 256-byte-aligned pieces out of a buffer laid out ahead of time. */
typedef struct {
  size_t used;
} gpu_carve;

static inline size_t carve(gpu_carve *c, size_t bytes) {
  size_t at = c->used;
  c->used += (bytes + 255) / 256 * 256;
  return at;
}

/* Grows the context's workspace to hold `bytes` (synchronizes when it grows,
 * so a call captured into a graph must find it large enough: run it once
 * eagerly first). */
lpattn_status ensure_ws(gpu_impl *im, size_t bytes);

static inline void strides(const lpattn_tensor *t, int64_t s[4]) { memcpy(s, t->stride, sizeof t->stride); }

/* 16-byte vector loads are allowed on t */
static inline int vec_ok(const lpattn_tensor *t) {
  return t->stride[3] == 1 && t->stride[0] % 8 == 0 && t->stride[1] % 8 == 0 &&
         t->stride[2] % 8 == 0 && ((uintptr_t)t->data % 16) == 0;
}

/* ---- ops (gpu_ops.cu) ------------------------------------------------------ */
/* Lays out a quantized tensor of `shape` (codes, scales, outer) in c. */
lpattn_status qview_alloc(gpu_carve *c, lpattn_format f, lpattn_axis ax, int tile,
                          const int64_t shape[4], size_t off[3]);
lp_gpu_qview qview_at(void *ws, const size_t off[3], int64_t rows);
/* Quantizes x (tile 64) into v; shift: PASA key means (or NULL); sr_d: the
 * head dim of the SR indices (0: x's own). */
lpattn_status quant_into(gpu_impl *im, const lpattn_tensor *x, const lp_gpu_qview *v,
                         lpattn_format f, lpattn_axis ax, int mx_up, const float *shift,
                         float beta, int shift_tiles, int sr = 0, uint64_t seed = 0, int sr_d = 0);

/* ---- head dims without a variant (gpu_pad.cu) ------------------------------ */
/* The smallest compiled D >= D of the attention (bwd = 0) or backward kernels
 * for dt; none: UNSUPPORTED with a detail naming the built dims and the option. */
lpattn_status gpu_padded_dim(int64_t D, lpattn_dtype dt, int bwd, int need, int64_t *Dp);
/* Lays out n padded [B, H, S, Dp] copies of t[i] in the pad buffer (grown here):
 * offsets at[i]. */
lpattn_status gpu_pad_begin(gpu_impl *im, const lpattn_tensor *const *t, int n, int64_t Dp, size_t *at);
/* in = 1: x into its padded copy at `at` (zeros past D); in = 0: the copy's
 * first D channels back into x; in = 2: no copy. padded (if not NULL) = the
 * copy's contiguous [B, H, S, Dp] view. */
lpattn_status gpu_pad_copy(gpu_impl *im, const lpattn_tensor *x, int64_t Dp, size_t at, int in,
                           lpattn_tensor *padded);

/* ---- vtable entries --------------------------------------------------------- */
lpattn_status gpu_quantize(lpattn_ctx *ctx, const lpattn_tensor *x, const lpattn_qtensor *q,
                           const lpattn_quant_params *p);
lpattn_status gpu_dequantize(lpattn_ctx *ctx, const lpattn_qtensor *q, const lpattn_tensor *y);
lpattn_status gpu_merge(lpattn_ctx *ctx, const lpattn_tensor *o_a, const lpattn_tensor *lse_a,
                        const lpattn_tensor *h_a, const lpattn_tensor *o_b,
                        const lpattn_tensor *lse_b, const lpattn_tensor *h_b,
                        const lpattn_tensor *o, const lpattn_tensor *lse, const lpattn_tensor *h);
lpattn_status gpu_attention(lpattn_ctx *ctx, const lpattn_attn_problem *pr);
lpattn_status gpu_backward(lpattn_ctx *ctx, const lpattn_bwd_problem *pr);

} // namespace GPU_NS
#endif
