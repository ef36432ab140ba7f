/* Context of the GPU backends: the device and stream a context runs on, the
 * workspace it owns (grown on demand: the only allocation a call may make),
 * and the backend's vtable. */
#include "gpu_backend.h"
#include "error.h"   /* lp_fail: gpu_no_capture's detail */
#include "kv_pool.h" /* paged pool entries (kv_pool.cu) */
#include "kvcache.h" /* lpattn_kv_cache on the pool (core/kvcache.c) */

namespace GPU_NS {

__global__ void gpu_probe_kernel(void) {}

static lpattn_status gpu_init(lpattn_ctx *ctx, const lpattn_context_params *p) {
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
  if (cudaFuncGetAttributes(&fa, gpu_probe_kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return LPATTN_ERR_UNSUPPORTED_HARDWARE;
  }
  gpu_impl *im = (gpu_impl *)calloc(1, sizeof *im);
  if (!im) return LPATTN_ERR_OUT_OF_MEMORY;
  im->device = p->device;
  im->nsm = prop.multiProcessorCount;
  im->cc = prop.major * 10 + prop.minor;
  im->warp = prop.warpSize; /* 64 on CDNA, 32 on NVIDIA and RDNA: the kernels ask the compiler */
  im->stream = (cudaStream_t)p->stream;
  if (cudaMalloc(&im->flag, sizeof(int)) != cudaSuccess) {
    free(im);
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  ctx->impl = im;
  return LPATTN_OK;
}

static void gpu_fini(lpattn_ctx *ctx) {
  gpu_impl *im = impl_of(ctx);
  if (!im) return;
  (void)cudaSetDevice(im->device);
  if (im->ws) (void)cudaFreeAsync(im->ws, im->stream);
  if (im->pad) (void)cudaFreeAsync(im->pad, im->stream);
  (void)cudaStreamSynchronize(im->stream);
  (void)cudaFree(im->flag);
  free(im);
  ctx->impl = NULL;
}

static lpattn_status gpu_sync(lpattn_ctx *ctx) {
  CK(cudaSetDevice(impl_of(ctx)->device));
  CK(cudaStreamSynchronize(impl_of(ctx)->stream));
  return LPATTN_OK;
}

/* Grows only, stream-ordered (no host synchronization): the old buffer is
 * released after the work already queued on the stream that uses it. Not
 * inside a graph capture: warm a shape up before capturing it. */
lpattn_status ensure_ws(gpu_impl *im, size_t bytes) {
  if (bytes <= im->ws_size) return LPATTN_OK;
  TRY(gpu_no_capture(im->stream, "the context's workspace"));
  if (im->ws) CK(cudaFreeAsync(im->ws, im->stream));
  im->ws = NULL;
  im->ws_size = 0;
  size_t want = bytes + bytes / 4;
  if (cudaMallocAsync((void **)&im->ws, want, im->stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  im->ws_size = want;
  return LPATTN_OK;
}

/* A workspace that must grow inside a graph capture would become the
 * graph's memory (cudaMallocAsync there is an allocation node): refused,
 * with what to do instead. */
lpattn_status gpu_no_capture(cudaStream_t st, const char *what) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(st, &cap) != cudaSuccess || cap == cudaStreamCaptureStatusNone) return LPATTN_OK;
  return lp_fail(LPATTN_ERR_UNSUPPORTED, "%s must grow inside a CUDA graph capture: make the same call "
                 "once before capturing (a warm-up), or capture a decode plan (lpattn_paged_decode_plan)",
                 what);
}

static int gpu_host_memory(void) { return 0; }

#ifndef LPATTN_HIP
/* Plain host memory (unregistered, pinned) and managed memory read fine on
 * the host; a device allocation does not. */
static int gpu_host_readable(const void *p) {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  return a.type != cudaMemoryTypeDevice;
}
#endif

/* lpattn_set_stream: later work on the new stream waits (on the device, not
 * the host) for the work queued on the old one, which may still use the
 * workspace and the pools. Not across a graph capture's edge: a capturing
 * stream may not wait on an event recorded outside its capture (that
 * invalidates the capture, cudaErrorStreamCaptureInvalidated), nor may an
 * outside stream wait on a captured event. Whoever begins a capture orders
 * it after earlier work (torch.cuda.graph synchronizes the device first);
 * a replay is ordered by the stream it is launched on. */
static lpattn_status gpu_set_stream(lpattn_ctx *ctx, void *stream) {
  gpu_impl *im = impl_of(ctx);
  if ((cudaStream_t)stream == im->stream) return LPATTN_OK;
  CK(cudaSetDevice(im->device));
  cudaStreamCaptureStatus cap_old = cudaStreamCaptureStatusNone, cap_new = cudaStreamCaptureStatusNone;
  CK(cudaStreamIsCapturing(im->stream, &cap_old));
  CK(cudaStreamIsCapturing((cudaStream_t)stream, &cap_new));
  if (cap_old != cudaStreamCaptureStatusNone || cap_new != cudaStreamCaptureStatusNone) {
    im->stream = (cudaStream_t)stream;
    return LPATTN_OK;
  }
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const int ok = cudaEventRecord(ev, im->stream) == cudaSuccess &&
                 cudaStreamWaitEvent((cudaStream_t)stream, ev, 0) == cudaSuccess;
  (void)cudaEventDestroy(ev); /* released once it has completed */
  if (!ok) return LPATTN_ERR_BACKEND;
  im->stream = (cudaStream_t)stream;
  return LPATTN_OK;
}

static lpattn_backend_vtable gpu_vtable;
} // namespace GPU_NS

extern "C" const lpattn_backend_vtable *GPU_VTABLE_FN(void) {
  using namespace GPU_NS;
  gpu_vtable.name = GPU_NAME;
  gpu_vtable.init = gpu_init;
  gpu_vtable.fini = gpu_fini;
  gpu_vtable.quantize = gpu_quantize;
  gpu_vtable.dequantize = gpu_dequantize;
  gpu_vtable.attention = gpu_attention;
  gpu_vtable.backward = gpu_backward;
  gpu_vtable.merge = gpu_merge;
  gpu_vtable.cache_create = lp_kv_create;
  gpu_vtable.cache_free = lp_kv_free;
  gpu_vtable.cache_append = lp_kv_append;
  gpu_vtable.decode = lp_kv_decode;
  gpu_vtable.host_memory = gpu_host_memory;
#ifndef LPATTN_HIP
  gpu_vtable.host_readable = gpu_host_readable;
#endif
  gpu_vtable.synchronize = gpu_sync;
  gpu_vtable.set_stream = gpu_set_stream;
  gpu_vtable.pool_init = gpu_pool_init;
  gpu_vtable.pool_fini = gpu_pool_fini;
  gpu_vtable.kv_append = gpu_kv_append;
  gpu_vtable.slot_copy = gpu_slot_copy;
#ifndef LPATTN_HIP /* HIP pools refuse FP8_STATIC (kv_pool.cu) */
  gpu_vtable.kv_set_descales = gpu_kv_set_descales;
#endif
  gpu_vtable.paged_decode = gpu_paged_decode;
  gpu_vtable.prefill_step = gpu_prefill_step;
  gpu_vtable.decode_plan = gpu_decode_plan;
  gpu_vtable.decode_run = gpu_decode_run;
  gpu_vtable.decode_plan_free = gpu_decode_plan_free;
  gpu_vtable.ids_alloc = gpu_ids_alloc;
  gpu_vtable.ids_free = gpu_ids_free;
  gpu_vtable.ids_add = gpu_ids_add;
  return &gpu_vtable;
}
