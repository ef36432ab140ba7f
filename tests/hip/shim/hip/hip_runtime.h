/* Test-only HIP-on-CUDA shim: the few HIP names lpattn's HIP backend uses,
 * as inline wrappers over the CUDA runtime, so the HIP-rendered kernels and
 * host glue build with nvcc and run on an NVIDIA GPU (wave size 32, generic
 * path: no MFMA macro is ever set here). Functions, not macros: vendor.h
 * maps the CUDA spellings to these names afterwards. */
#ifndef LPATTN_TEST_HIP_SHIM_H
#define LPATTN_TEST_HIP_SHIM_H

#define __HIP_PLATFORM_NVIDIA__ 1
#include <cuda_runtime.h>

typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
typedef cudaDeviceProp hipDeviceProp_t;
typedef cudaMemcpyKind hipMemcpyKind;
typedef cudaFuncAttributes hipFuncAttributes;
typedef cudaFuncAttribute hipFuncAttribute;
static const hipFuncAttribute hipFuncAttributeMaxDynamicSharedMemorySize =
    cudaFuncAttributeMaxDynamicSharedMemorySize;
static const hipError_t hipSuccess = cudaSuccess;
static const hipError_t hipErrorOutOfMemory = cudaErrorMemoryAllocation;
static const hipMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
static const hipMemcpyKind hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
static const hipMemcpyKind hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;

static inline hipError_t hipGetDeviceCount(int *n) { return cudaGetDeviceCount(n); }
static inline hipError_t hipSetDevice(int d) { return cudaSetDevice(d); }
static inline hipError_t hipGetDevice(int *d) { return cudaGetDevice(d); }
static inline hipError_t hipGetDeviceProperties(hipDeviceProp_t *p, int d) {
  return cudaGetDeviceProperties(p, d);
}
template <typename T> static inline hipError_t hipMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
static inline hipError_t hipFree(void *p) { return cudaFree(p); }
static inline hipError_t hipMallocAsync(void **p, size_t n, hipStream_t st) { return cudaMallocAsync(p, n, st); }
static inline hipError_t hipFreeAsync(void *p, hipStream_t st) { return cudaFreeAsync(p, st); }
typedef cudaEvent_t hipEvent_t;
static const unsigned hipEventDisableTiming = cudaEventDisableTiming;
static inline hipError_t hipEventCreateWithFlags(hipEvent_t *e, unsigned f) { return cudaEventCreateWithFlags(e, f); }
static inline hipError_t hipEventRecord(hipEvent_t e, hipStream_t st) { return cudaEventRecord(e, st); }
static inline hipError_t hipEventDestroy(hipEvent_t e) { return cudaEventDestroy(e); }
static inline hipError_t hipStreamWaitEvent(hipStream_t st, hipEvent_t e, unsigned f) {
  return cudaStreamWaitEvent(st, e, f);
}
static inline hipError_t hipMemcpyAsync(void *d, const void *s, size_t n, hipMemcpyKind k,
                                        hipStream_t st) {
  return cudaMemcpyAsync(d, s, n, k, st);
}
static inline hipError_t hipMemsetAsync(void *d, int v, size_t n, hipStream_t st) {
  return cudaMemsetAsync(d, v, n, st);
}
static inline hipError_t hipFuncGetAttributes(hipFuncAttributes *a, const void *f) {
  return cudaFuncGetAttributes(a, f);
}
static inline hipError_t hipFuncSetAttribute(const void *f, hipFuncAttribute a, int v) {
  return cudaFuncSetAttribute(f, a, v);
}
static inline hipError_t hipStreamSynchronize(hipStream_t s) { return cudaStreamSynchronize(s); }
typedef cudaStreamCaptureStatus hipStreamCaptureStatus;
static const hipStreamCaptureStatus hipStreamCaptureStatusNone = cudaStreamCaptureStatusNone;
static inline hipError_t hipStreamIsCapturing(hipStream_t s, hipStreamCaptureStatus *c) {
  return cudaStreamIsCapturing(s, c);
}
static inline hipError_t hipGetLastError(void) { return cudaGetLastError(); }
static inline const char *hipGetErrorString(hipError_t e) { return cudaGetErrorString(e); }

/* HIP's shuffles act on the whole wave: every lane of a CUDA warp. */
template <typename T>
__device__ inline T __shfl_xor(T v, int m, int w = 32) { return __shfl_xor_sync(0xffffffffu, v, m, w); }
template <typename T>
__device__ inline T __shfl_down(T v, unsigned d, int w = 32) { return __shfl_down_sync(0xffffffffu, v, d, w); }
template <typename T>
__device__ inline T __shfl(T v, int s, int w = 32) { return __shfl_sync(0xffffffffu, v, s, w); }

#endif
