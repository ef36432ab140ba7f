/* HIP spelling of the CUDA names that CUDA-dialect code uses, so one source
 * (templates/gpu rendered with dialect 'hip', and the host glue
 * backends/gpu built with LPATTN_HIP) builds with hipcc. Only names are mapped: this header never claims CUDA identity
 * (no __CUDA_ARCH__, no __CUDACC__); HIP code tests its own feature macros
 * below. Under tests/hip/shim (HIP-on-CUDA, for running on NVIDIA GPUs) the
 * hip* names map back to CUDA and the wave size is 32. */
#ifndef LPATTN_HIP_VENDOR_H
#define LPATTN_HIP_VENDOR_H

#include <hip/hip_runtime.h>
#include <stdint.h>

/* ---- runtime API ------------------------------------------------------- */
#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaGetLastError hipGetLastError
#define cudaGetErrorString hipGetErrorString
#define cudaStream_t hipStream_t
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaDeviceProp hipDeviceProp_t
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaGetDevice hipGetDevice
#define cudaSetDevice hipSetDevice
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMallocAsync hipMallocAsync
#define cudaFreeAsync hipFreeAsync
#define cudaEvent_t hipEvent_t
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventRecord hipEventRecord
#define cudaEventDestroy hipEventDestroy
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaStreamIsCapturing hipStreamIsCapturing
#define cudaStreamCaptureStatus hipStreamCaptureStatus
#define cudaStreamCaptureStatusNone hipStreamCaptureStatusNone
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaFuncAttributes hipFuncAttributes
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cudaFuncGetAttributes(attr, f) hipFuncGetAttributes((attr), (const void *)(f))
#define cudaFuncSetAttribute(f, attr, v) hipFuncSetAttribute((const void *)(f), (attr), (v))

/* ---- wave (warp) level ---------------------------------------------------
 * CUDA's *_sync shuffles take a lane mask; a HIP wave runs its active lanes
 * together, so the mask has nothing to say and is dropped (the width, when
 * given, is kept: 32-lane logical warps inside a wave64 pass 32). */
#define __shfl_xor_sync(mask, ...) __shfl_xor(__VA_ARGS__)
#define __shfl_down_sync(mask, ...) __shfl_down(__VA_ARGS__)
#define __shfl_sync(mask, ...) __shfl(__VA_ARGS__)
#if !defined(__HIP_PLATFORM_NVIDIA__)
#define __any_sync(mask, p) __any(p)
/* a wave executes in lockstep: order its shared-memory accesses */
#define __syncwarp() (__builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "wavefront"), __builtin_amdgcn_wave_barrier())
#endif

/* Lanes of a wave, as the code being compiled sees it: 64 on CDNA (gfx9),
 * 32 on RDNA (gfx10+, HIP's default there) and under the HIP-on-CUDA shim.
 * Device code only: the host asks the device (hipDeviceProp_t::warpSize). */
__device__ constexpr int lpattn_wave_size() {
#if defined(__AMDGCN_WAVEFRONT_SIZE)
  return __AMDGCN_WAVEFRONT_SIZE;
#elif defined(__GFX9__)
  return 64;
#else
  return 32;
#endif
}

/* ---- matrix cores ----------------------------------------------------------
 * LPATTN_HIP_MFMA: f32 += f16 x f16 and bf16 x bf16 (the _1k forms) MFMA,
 *   CDNA2/CDNA3 (gfx90a, gfx940..942).
 * LPATTN_HIP_FP8_MFMA: FP8 MFMA of CDNA3 (gfx940..942). Its E4M3 is the
 *   "FNUZ" variant (bias 8, 0x80 = NaN): an OCP E4M3 code read as FNUZ is
 *   worth half, except -0 (0x80) which must become +0 first.
 * LPATTN_HIP_FP8_OCP: the FP8 MFMA reads OCP E4M3 as stored (CDNA4, gfx950):
 *   no FNUZ step. gfx942 and gfx950 need ROCm 6.x (ROCm 5.2 rejects them).
 * Neither: the wave32/FMA path (gfx1030, RDNA3+ and everything else). */
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || \
    defined(__gfx950__)
#define LPATTN_HIP_MFMA 1
#endif
#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__)
#define LPATTN_HIP_FP8_MFMA 1
#endif
#if defined(__gfx950__)
#define LPATTN_HIP_FP8_OCP 1
#endif

#endif
