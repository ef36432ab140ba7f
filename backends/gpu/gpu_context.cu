/* Context of the GPU backends: the device and stream a context runs on, the
 * workspace it owns (grown on demand: the only allocation a call may make),
 * and the backend's vtable. */
#include "gpu_backend.h"
#include "kv_pool.h" /* paged pool entries (kv_pool.cu) */

namespace LPG_NS {

__global__ void lpc_probe_kernel(void) {}

static lpattn_status lpc_init(lpattn_ctx *ctx, const lpattn_context_params *p) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= p->device) {
    (void)cudaGetLastError(); /* clear the sticky "no device" error */
    return LPATTN_ERR_UNSUPPORTED_HARDWARE;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, p->device));
  CK(cudaSetDevice(p->device));
  /* Only arch-specific cubins are built (nvidia_archs), no PTX to JIT: the
   * device is usable iff it has an image of this file's probe kernel. */
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, lpc_probe_kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return LPATTN_ERR_UNSUPPORTED_HARDWARE;
  }
  lpc_impl *im = (lpc_impl *)calloc(1, sizeof *im);
  if (!im) return LPATTN_ERR_OUT_OF_MEMORY;
  im->device = p->device;
  im->nsm = prop.multiProcessorCount;
  im->warp = prop.warpSize; /* 64 on CDNA, 32 on NVIDIA and RDNA: the kernels ask the compiler */
  im->stream = (cudaStream_t)p->stream;
  if (cudaMalloc(&im->flag, sizeof(int)) != cudaSuccess) {
    free(im);
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  ctx->impl = im;
  return LPATTN_OK;
}

static void lpc_fini(lpattn_ctx *ctx) {
  lpc_impl *im = impl_of(ctx);
  if (!im) return;
  (void)cudaSetDevice(im->device);
  (void)cudaStreamSynchronize(im->stream);
  (void)cudaFree(im->ws);
  (void)cudaFree(im->flag);
  free(im);
  ctx->impl = NULL;
}

static lpattn_status lpc_sync(lpattn_ctx *ctx) {
  CK(cudaSetDevice(impl_of(ctx)->device));
  CK(cudaStreamSynchronize(impl_of(ctx)->stream));
  return LPATTN_OK;
}

lpattn_status ensure_ws(lpc_impl *im, size_t bytes) {
  if (bytes <= im->ws_size) return LPATTN_OK;
  CK(cudaStreamSynchronize(im->stream));
  (void)cudaFree(im->ws);
  im->ws = NULL;
  im->ws_size = 0;
  size_t want = bytes + bytes / 4;
  if (cudaMalloc(&im->ws, want) != cudaSuccess) {
    (void)cudaGetLastError();
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  im->ws_size = want;
  return LPATTN_OK;
}

static int lpc_host_memory(void) { return 0; }

static lpattn_backend_vtable lpc_vtable;
} // namespace LPG_NS

extern "C" const lpattn_backend_vtable *LPG_VTABLE_FN(void) {
  using namespace LPG_NS;
  lpc_vtable.name = LPG_NAME;
  lpc_vtable.init = lpc_init;
  lpc_vtable.fini = lpc_fini;
  lpc_vtable.quantize = lpc_quantize;
  lpc_vtable.dequantize = lpc_dequantize;
  lpc_vtable.attention = lpc_attention;
  lpc_vtable.merge = lpc_merge;
  lpc_vtable.cache_create = lpc_cache_create;
  lpc_vtable.cache_free = lpc_cache_free;
  lpc_vtable.cache_append = lpc_cache_append;
  lpc_vtable.decode = lpc_decode;
  lpc_vtable.host_memory = lpc_host_memory;
  lpc_vtable.synchronize = lpc_sync;
  lpc_vtable.pool_init = lpg_pool_init;
  lpc_vtable.pool_fini = lpg_pool_fini;
  lpc_vtable.kv_append = lpg_kv_append;
  lpc_vtable.slot_copy = lpg_slot_copy;
  lpc_vtable.paged_decode = lpg_paged_decode;
  return &lpc_vtable;
}
