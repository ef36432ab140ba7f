/* The dialect's prelude of the mma.sync/HIP attention kernel (lp_gpu_attn.cuh): CUDA: the block-scaled FP4 MMA of sm_120a and the FP8 P rounding; HIP: its counterparts. */
#ifndef LP_GPU_ATTN_PRELUDE_CUH
#define LP_GPU_ATTN_PRELUDE_CUH
#ifndef LPATTN_HIP /* CUDA */

/* sm_120a: S = Q K^T of an NVFP4/MXFP4 low tile on the native block-scaled
 * FP4 tensor cores (mma.sync m16n8k64 kind::mxf4nvf4, OMMA in SASS): the
 * E2M1 codes and their group scales go to the MMA as stored, the outer
 * scales are applied by the caller exactly as on the dequantizing path.
 * Fragments are read straight from the quantized Q/K in global memory.
 * Compiled only where the arch-specific feature macro says the
 * instruction exists; other targets never reference it. */
#if defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL)
__device__ __forceinline__ void gpu_omma_nvfp4(float &c0, float &c1, float &c2, float &c3,
                                               const uint32_t a[4], uint32_t b0, uint32_t b1,
                                               uint32_t sfa, uint32_t sfb) {
  asm volatile(
      "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1."
      "f32.ue4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, %10, {0, 0}, %11, {0, 0};\n"
      : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(sfa), "r"(sfb));
}
__device__ __forceinline__ void gpu_omma_mxfp4(float &c0, float &c1, float &c2, float &c3,
                                               const uint32_t a[4], uint32_t b0, uint32_t b1,
                                               uint32_t sfa, uint32_t sfb) {
  asm volatile(
      "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::2X.f32.e2m1.e2m1."
      "f32.ue8m0 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, %10, {0, 0}, %11, {0, 0};\n"
      : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(sfa), "r"(sfb));
}

/* 8 codes (4 bytes) of row `row` from element k, or 0 outside the tile. */
__device__ __forceinline__ uint32_t gpu_codes8(const uint8_t *codes, int64_t row, int D, int k,
                                               bool ok) {
  return ok ? *(const uint32_t *)(codes + ((row * D + k) >> 1)) : 0u;
}

/* Scale bytes of one k64 step: 4 E4M3 (groups of 16) or 2 E8M0 (of 32). */
__device__ __forceinline__ uint32_t gpu_scales_k64(const uint8_t *scales, int64_t row, int D,
                                                   int kd, bool mx, bool ok) {
  if (!ok) return 0u;
  if (mx) {
    const uint8_t *p = scales + row * (D / 32) + kd * 2;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
  }
  return *(const uint32_t *)(scales + row * (D / 16) + kd * 4);
}

/* Scale selectors (thread-id 0): A row m comes from lane 4*(m%8) + m/8, B
 * column n from lane 4n; the other lanes' scale registers are ignored. */
template <int D>
__device__ __forceinline__ void gpu_fp4_scores(const lp_gpu_attn_args &a, float (&s)[2][16],
                                               int64_t kvbh, int64_t qrow0, int base, int c0,
                                               int Skv, int r0, int r1) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const bool mx = a.low == LPATTN_FMT_MXFP4;
  const int ra = base + warp * 16 + g, rb = ra + 8;
  const bool oka = ra >= r0 && ra <= r1, okb = rb >= r0 && rb <= r1;
  const int sm = g + 8 * (lane & 1); /* row whose scales this lane supplies */
  const int rs = base + warp * 16 + sm;
  const bool oks = (lane & 3) < 2 && rs >= r0 && rs <= r1;
#pragma unroll
  for (int kd = 0; kd < D / 64; kd++) {
    const int k = kd * 64 + 8 * t4;
    uint32_t qa[4] = {gpu_codes8(a.qq.codes, qrow0 + ra, D, k, oka),
                      gpu_codes8(a.qq.codes, qrow0 + rb, D, k, okb),
                      gpu_codes8(a.qq.codes, qrow0 + ra, D, k + 32, oka),
                      gpu_codes8(a.qq.codes, qrow0 + rb, D, k + 32, okb)};
    const uint32_t sfa = gpu_scales_k64(a.qq.scales, qrow0 + rs, D, kd, mx, oks);
#pragma unroll
    for (int n = 0; n < 8; n++) { /* 8-key block n: slots 2n, 2n+1 of both rows */
      const int key = c0 + n * 8 + g;
      const bool okk = key < Skv;
      const int64_t krow = kvbh * a.kq.rows + key;
      const uint32_t b0 = gpu_codes8(a.kq.codes, krow, D, k, okk);
      const uint32_t b1 = gpu_codes8(a.kq.codes, krow, D, k + 32, okk);
      const uint32_t sfb = gpu_scales_k64(a.kq.scales, krow, D, kd, mx, okk && t4 == 0);
      if (mx) gpu_omma_mxfp4(s[0][2 * n], s[0][2 * n + 1], s[1][2 * n], s[1][2 * n + 1], qa, b0, b1, sfa, sfb);
      else gpu_omma_nvfp4(s[0][2 * n], s[0][2 * n + 1], s[1][2 * n], s[1][2 * n + 1], qa, b0, b1, sfa, sfb);
    }
  }
}
#endif

/* FP8 P^ of two values: x <- E4M3(448 x), RNE. sm_89+: cvt with
 * satfinite (the reference's saturating encoder; 448 x <= 448 anyway), back
 * to f32 through f16; earlier archs: lpk_e4m3_round. */
__device__ __forceinline__ void gpu_p_fp8x2(float &x0, float &x1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short e2;
  uint32_t h2;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(e2) : "f"(__fmul_rn(x1, 448.0f)), "f"(__fmul_rn(x0, 448.0f)));
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(e2));
  x0 = gpu_f16_tof((unsigned short)(h2 & 0xffffu));
  x1 = gpu_f16_tof((unsigned short)(h2 >> 16));
#else
  x0 = lpk_e4m3_round(__fmul_rn(x0, 448.0f));
  x1 = lpk_e4m3_round(__fmul_rn(x1, 448.0f));
#endif
}

#else /* HIP */

/* FP8 P^ of two values: x <- E4M3(448 x) (RNE; 448 x <= 448). */
__device__ __forceinline__ void gpu_p_fp8x2(float &x0, float &x1) {
  x0 = lpk_e4m3_round(__fmul_rn(x0, 448.0f));
  x1 = lpk_e4m3_round(__fmul_rn(x1, 448.0f));
}

#endif
#endif
