/* Device helpers shared by every GPU kernel, rendered for CUDA and for HIP
 * from one template: the bit-exact formats and the online-softmax state of
 * backends/math (lpk_*.h: formats, the quantizer steps with Philox stochastic
 * rounding, the 4-D offset, softmax), tensor loads/stores of any
 * float dtype, and the matrix layer whose spelling is the dialect's
 * (mma.sync/ldmatrix/cp.async on CUDA; MFMA on CDNA, plain FMAs elsewhere
 * on HIP), together with the lane layout of a warp's score and output tiles
 * that the attention kernel is written against. Built without fast-math;
 * exactness-critical f32 steps use __f*_rn so no FMA contraction happens. */
#ifndef LP_GPU_CUH
#define LP_GPU_CUH
#ifndef LPATTN_HIP /* CUDA */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#else
#include "vendor.h"
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "lp_gpu_args.h"
#include "mask.h" /* core/mask.h: the sliding window's tiles and row ranges, the softcap */

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
#include "lpk_formats.h" /* backends/math: the math every backend shares */
#include "lpk_quant.h"
#include "lpk_softmax.h"
#ifndef LPATTN_HIP /* CUDA */

/* ---- 16-bit operands, matrix core, lane layout: CUDA ----------------------- */
#define GPU_ASYNC 1              /* cp.async double-buffers the KV tiles */
#define GPU_QSMEM 1              /* Q tiles live in shared memory (ldmatrix) */
#define GPU_KCODES 0             /* no raw FP8 K codes in shared memory */
#define GPU_SMEM_MAX (227 * 1024)
#define GPU_MAX_THREADS 128
__host__ __device__ constexpr int gpu_warp_size() { return 32; }

typedef __half gpu_f16;
typedef __nv_bfloat16 gpu_bf16;
__device__ __forceinline__ float gpu_f16_tof(unsigned short u) { return __half2float(__ushort_as_half(u)); }
__device__ __forceinline__ float gpu_bf16_tof(unsigned short u) { return __bfloat162float(__ushort_as_bfloat16(u)); }
__device__ __forceinline__ unsigned short gpu_f16_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }
__device__ __forceinline__ unsigned short gpu_bf16_bits(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

/* Tensor-core wrappers (m16n8k16, f32 accumulate). */
template <typename T> struct gpu_mma;
template <> struct gpu_mma<__half> {
  static __device__ __forceinline__ void run(float &c0, float &c1, float &c2, float &c3, const uint32_t a[4],
                                             uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&h;
  }
  static __device__ __forceinline__ unsigned short bits(float x) { return gpu_f16_bits(x); }
  static __device__ __forceinline__ float tof(unsigned short u) { return gpu_f16_tof(u); }
};
template <> struct gpu_mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float &c0, float &c1, float &c2, float &c3, const uint32_t a[4],
                                             uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&h;
  }
  static __device__ __forceinline__ unsigned short bits(float x) { return gpu_bf16_bits(x); }
  static __device__ __forceinline__ float tof(unsigned short u) { return gpu_bf16_tof(u); }
};

__device__ __forceinline__ void gpu_ldsm_x4(uint32_t r[4], const void *p) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void gpu_ldsm_x4_t(uint32_t r[4], const void *p) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* A warp owns 16 query rows x 64 keys of S and 16 rows x D of O, in the
 * m16n8 accumulator layout: lane l holds rows l/4 and l/4 + 8 (FR = 2), and
 * in each 8-column block the columns 2(l%4), 2(l%4)+1. Slot sl of a row is
 * block sl/2, column 2(l%4) + sl%2; a row's lanes are a quad. */
template <int W> struct gpu_lay {
  static constexpr int FR = 2, NS = 16, LPR = 4; /* rows, score slots per row, lanes per row */
  int lane;
  __device__ __forceinline__ int row(int hh) const { return (lane >> 2) + 8 * hh; }
  __device__ __forceinline__ int key(int sl) const { return (sl >> 1) * 8 + 2 * (lane & 3) + (sl & 1); }
  __device__ __forceinline__ int chan(int o) const { return key(o); }
  __device__ __forceinline__ bool lead() const { return (lane & 3) == 0; }
};
/* Reductions over the lanes of a row. */
template <int W> __device__ __forceinline__ float gpu_rmax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
template <int W> __device__ __forceinline__ float gpu_rsum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
/* whether p holds on any lane of the warp (a warp-uniform branch) */
__device__ __forceinline__ bool gpu_warp_any(bool p) { return __any_sync(0xffffffffu, p); }
/* A row's lanes are the 4 lanes of a quad: this lane's index among them,
 * and x as lane i of the quad holds it. The P quantizer computes a row's 4
 * group scales once each, on lane i for group i (GPU_P_SPLIT_SCALES). */
#define GPU_P_SPLIT_SCALES 1
__device__ __forceinline__ int gpu_rindex() { return threadIdx.x & 3; }
__device__ __forceinline__ float gpu_rlane(float x, int i) { return __shfl_sync(0xffffffffu, x, i, 4); }
/* 2^x, one MUFU (results below 2^-126 flush to 0): the plain prefill's P */
__device__ __forceinline__ float gpu_exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* cp.async of 16 bytes; bytes = 0 zero-fills the destination. */
__device__ __forceinline__ void gpu_cp16(void *dst, const void *src, int bytes) {
  uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void gpu_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void gpu_cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#else

/* ---- 16-bit operands, matrix core, lane layout: HIP ------------------------ */
#define GPU_ASYNC 0              /* KV tiles are loaded in step (one buffer) */
#define GPU_QSMEM 0              /* each lane keeps its Q fragment in registers */
#define GPU_KCODES 1             /* raw FP8 K codes of a low tile too (CDNA3's FP8 MFMA) */
#define GPU_SMEM_MAX (64 * 1024) /* LDS of one workgroup on CDNA and RDNA */
#define GPU_MAX_THREADS 256
__device__ constexpr int gpu_warp_size() { return lpattn_wave_size(); }

/* Operand tags: values are handled as raw 16-bit patterns, converted with
 * exact bit arithmetic (RNE), so nothing depends on the vendor half types. */
struct gpu_f16 {};
struct gpu_bf16 {};
__device__ inline float gpu_f16_tof(unsigned short h) { return lpk_f16_decode(h); }
__device__ inline float gpu_bf16_tof(unsigned short h) { return lpk_bf16_decode(h); }
__device__ inline unsigned short gpu_f16_bits(float x) {
  uint32_t s = (lpk_bits(x) >> 16) & 0x8000u;
  if (x != x) return 0x7e00u;
  float r = lpk_round_f16(x); /* the f16 value (or inf), exact in f32 */
  uint32_t a = lpk_bits(r) & 0x7fffffffu;
  if (a >= 0x7f800000u) return (unsigned short)(s | 0x7c00u);
  if (a < 0x38800000u) /* below 2^-14: subnormal, m * 2^-24 */
    return (unsigned short)(s | (uint32_t)(lpk_from_bits(a) * 16777216.0f));
  return (unsigned short)(s | (((a >> 23) - 112) << 10) | ((a >> 13) & 0x3ffu));
}
__device__ inline unsigned short gpu_bf16_bits(float x) {
  uint32_t u = lpk_bits(x);
  if (x != x) return 0x7fc0u;
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/* f16 or bf16 operands as raw patterns: F16 picks the format. */
template <bool F16> struct gpu_mma16 {
  static constexpr bool f16 = F16;
  static __device__ inline unsigned short bits(float x) { return F16 ? gpu_f16_bits(x) : gpu_bf16_bits(x); }
  static __device__ inline float tof(unsigned short u) { return F16 ? gpu_f16_tof(u) : gpu_bf16_tof(u); }
  static __device__ inline uint32_t pack(float lo, float hi) { return bits(lo) | (uint32_t)bits(hi) << 16; }
};
template <typename T> struct gpu_mma;
template <> struct gpu_mma<gpu_f16> : gpu_mma16<true> {};
template <> struct gpu_mma<gpu_bf16> : gpu_mma16<false> {};

#if defined(LPATTN_HIP_MFMA)
typedef float gpu_f4 __attribute__((ext_vector_type(4)));
typedef short gpu_s4 __attribute__((ext_vector_type(4)));
typedef _Float16 gpu_h4 __attribute__((ext_vector_type(4)));
/* c += a b on one 16x16x16 tile of raw f16 or bf16 patterns (wave64);
 * MM is gpu_mma of the operand type. */
template <typename MM> __device__ inline gpu_f4 gpu_mfma16(gpu_s4 a, gpu_s4 b, gpu_f4 c) {
  if constexpr (MM::f16)
    return __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(gpu_h4, a), __builtin_bit_cast(gpu_h4, b),
                                                 c, 0, 0, 0);
  else
    return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
}
#endif
#if defined(LPATTN_HIP_FP8_MFMA)
/* Weight of an FP8 MFMA sum: 4 where both operands are read as FNUZ. */
#if defined(LPATTN_HIP_FP8_OCP)
#define GPU_FP8_MFMA_SCALE 1.0f
#else
#define GPU_FP8_MFMA_SCALE 4.0f
#endif
/* 8 OCP E4M3 codes as an operand of CDNA3's FP8 MFMA, whose E4M3 is FNUZ
 * (bias 8): the same bits are worth half, except -0 (0x80), which FNUZ reads
 * as NaN: it becomes +0. A NaN input's code (0x7F) reads as finite here, but
 * its outer scale is NaN too and still poisons the score. */
__device__ inline long gpu_fnuz8(uint64_t c) {
#if defined(LPATTN_HIP_FP8_OCP)
  return (long)c; /* the matrix cores read OCP E4M3 as stored */
#else
  uint64_t x = 0;
#pragma unroll
  for (int u = 0; u < 8; u++) {
    const uint64_t b = (c >> (8 * u)) & 0xffu;
    x |= (b == 0x80u ? 0u : b) << (8 * u);
  }
  return (long)x;
#endif
}
#endif

/* A wave of W lanes owns 16 query rows x 64 keys of S and 16 rows x D of O
 * in the layout of the MFMA 16x16x16 result of S^T = K Q^T and O^T = V^T P^T:
 * lane l holds row l % 16 (FR = 1); its LPR = W / 16 lanes split each
 * 16-wide block of keys (or channels) in runs of KPL = 16 / LPR, lane l
 * taking the run l / 16. For W = 64 that is exactly the MFMA operand and
 * accumulator layout; W = 32 (RDNA, the HIP-on-CUDA shim) runs the same
 * index math on plain FMAs. */
template <int W> struct gpu_lay {
  static constexpr int FR = 1, LPR = W / 16, KPL = 16 / LPR, NS = 64 / LPR;
  int lane;
  __device__ inline int row(int) const { return lane & 15; }
  __device__ inline int key(int sl) const { return (sl / KPL) * 16 + KPL * (lane >> 4) + sl % KPL; }
  __device__ inline int chan(int o) const { return key(o); }
  __device__ inline bool lead() const { return lane < 16; }
};
template <int W> __device__ inline float gpu_rmax(float x) {
#pragma unroll
  for (int m = 16; m < W; m *= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, m, W));
  return x;
}
template <int W> __device__ inline float gpu_rsum(float x) {
#pragma unroll
  for (int m = 16; m < W; m *= 2) x += __shfl_xor_sync(0xffffffffu, x, m, W);
  return x;
}
__device__ inline float gpu_exp2_fast(float x) { return exp2f(x); } /* the plain prefill's P */
__device__ inline bool gpu_warp_any(bool p) { return __any_sync(0xffffffffu, p); } /* vendor.h: __any on AMD */

/* No asynchronous copies: a 16-byte copy in step (the kernel never
 * prefetches when GPU_ASYNC is 0; these keep its one code path). */
__device__ inline void gpu_cp16(void *dst, const void *src, int bytes) {
  *(uint4 *)dst = bytes ? *(const uint4 *)src : make_uint4(0, 0, 0, 0);
}
__device__ inline void gpu_cp_commit() {}
template <int N> __device__ inline void gpu_cp_wait() {}
#endif

__device__ __forceinline__ float gpu_ninf() { return lpk_from_bits(0xff800000u); }

/* Element `off` of a float tensor of dtype dt as f32. */
__device__ __forceinline__ float gpu_load(const void *p, int dt, int64_t off) {
  if (dt == LPATTN_F32) return ((const float *)p)[off];
  unsigned short h = ((const unsigned short *)p)[off];
  return dt == LPATTN_F16 ? gpu_f16_tof(h) : gpu_bf16_tof(h);
}

/* Store f32 as f32/f16/bf16, rounding to nearest even. */
__device__ __forceinline__ void gpu_store(void *p, int dt, int64_t off, float v) {
  if (dt == LPATTN_F32) ((float *)p)[off] = v;
  else ((unsigned short *)p)[off] = dt == LPATTN_F16 ? gpu_f16_bits(v) : gpu_bf16_bits(v);
}

/* Dequantized element without the outer scale (code * group scale): exact
 * in bf16 for every format, so tensor cores see the exact operand. */
__device__ __forceinline__ float gpu_deq_inner(int fmt, uint8_t code, uint8_t scale) {
  if (fmt == LPATTN_FMT_FP8) return lpk_e4m3_decode(code);
  if (fmt == LPATTN_FMT_MXFP4) return lpk_e2m1_decode(code) * lpk_e8m0_decode(scale);
  return lpk_e2m1_decode(code) * lpk_e4m3_decode(scale);
}

/* 8 consecutive elements (one 16-byte smem chunk) of a quantized row in
 * AXIS_D or AXIS_S layout, without the outer scale: element index e of the
 * flattened codes (e % 8 == 0, so the 8 share one group scale). raw8 loads
 * the codes, dec8 turns them into 8 exact bf16 values; low8 does both. */
__device__ __forceinline__ uint2 gpu_raw8(const uint8_t *codes, int fmt, int64_t e) {
  if (fmt == LPATTN_FMT_FP8) return *(const uint2 *)(codes + e);
  return make_uint2(*(const uint32_t *)(codes + (e >> 1)), 0u);
}
__device__ __forceinline__ uint4 gpu_dec8(int fmt, uint2 w, uint8_t sc) {
  float v[8];
  if (fmt == LPATTN_FMT_FP8) {
#pragma unroll
    for (int u = 0; u < 8; u++) v[u] = lpk_e4m3_decode((uint8_t)((u < 4 ? w.x : w.y) >> (8 * (u & 3))));
  } else {
    float sv = fmt == LPATTN_FMT_MXFP4 ? lpk_e8m0_decode(sc) : lpk_e4m3_decode(sc);
#pragma unroll
    for (int u = 0; u < 8; u++) { /* E2M1 straight to f32 bits: 2^((c>>1)-1) * (1 + (c&1)/2) */
      uint32_t c = (w.x >> (4 * u)) & 15u, m = c & 7u;
      uint32_t b = m >= 2u ? ((m >> 1) + 126u) << 23 | (m & 1u) << 22 : (m ? 0x3f000000u : 0u);
      v[u] = lpk_from_bits(b | (c & 8u) << 28) * sv;
    }
  }
  uint4 r;
  r.x = gpu_mma<gpu_bf16>::pack(v[0], v[1]), r.y = gpu_mma<gpu_bf16>::pack(v[2], v[3]);
  r.z = gpu_mma<gpu_bf16>::pack(v[4], v[5]), r.w = gpu_mma<gpu_bf16>::pack(v[6], v[7]);
  return r;
}
__device__ __forceinline__ uint4 gpu_low8(const uint8_t *codes, const uint8_t *scales, int fmt,
                                          int64_t e) {
  uint8_t sc = fmt == LPATTN_FMT_FP8 ? 0 : scales[e >> (fmt == LPATTN_FMT_MXFP4 ? 5 : 4)];
  return gpu_dec8(fmt, gpu_raw8(codes, fmt, e), sc);
}

/* One element of the same, as bf16 bits (HIP's register Q fragment). */
__device__ __forceinline__ unsigned short gpu_low1(const uint8_t *codes, const uint8_t *scales, int fmt,
                                                   int64_t e) {
  const uint8_t c = fmt == LPATTN_FMT_FP8 ? codes[e] : (uint8_t)((codes[e >> 1] >> (4 * (e & 1))) & 15);
  const uint8_t sc = fmt == LPATTN_FMT_FP8 ? 0 : scales[e >> (fmt == LPATTN_FMT_MXFP4 ? 5 : 4)];
  return gpu_mma<gpu_bf16>::bits(gpu_deq_inner(fmt, c, sc));
}
#include "lp_gpu_nonfinite.cuh"
} // namespace LP_GPU_NS
#endif
