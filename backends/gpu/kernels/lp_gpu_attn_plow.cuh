/* The P quantizer of a low tile (SEMANTICS low tile step 4), a device function that
 * backends/gpu/kernels/lp_gpu_attn.cuh includes before the kernel body. */

#if defined(GPU_P_SPLIT_SCALES)
/* Lane i of a row's quad: the scale step (backends/math/lpk_quant.h group_scale) of
 * the row's 16-column group i (MXFP4: of its pair of groups), from the
 * groups' amaxes ga and non-finite flags gb; returns the decoded scale and
 * sets *denom, the group's divisor. The row's lanes read group m's from lane
 * m (gpu_rlane). Used by this P quantizer and the backward's SR tile. */
__device__ __forceinline__ float gpu_quad_group_scale(const float (&ga)[4], const float (&gb)[4], int fmt, float outer,
                                                      int mx_round_up, float *denom) {
  const bool mx = fmt == LPATTN_FMT_MXFP4;
  const int q = gpu_rindex();
  float g = 0.0f, bad = 0.0f;
#pragma unroll
  for (int m = 0; m < 4; m++) {
    const int mm = m & ~1;
    if (m == q) g = mx ? fmaxf(ga[mm], ga[mm + 1]) : ga[m], bad = mx ? fmaxf(gb[mm], gb[mm + 1]) : gb[m];
  }
  uint8_t sc;
  return lpk_group_scale(fmt, g, bad != 0.0f, outer, mx_round_up, &sc, denom);
}
#endif

/* P^ of a low tile, per row of the tile, in registers: a row's 16-key groups
 * are SPG slots on each of its lanes; pout[hh] is row hh's outer scale.
 * CHECK = false (the sm_90a kernel, whose row sums already carry a NaN P to
 * the row's O, LSE and H) skips the non-finite group flags. */
template <int W, int FR, int NS, bool CHECK = true>
__device__ __forceinline__ void gpu_p_low(float (&s)[FR][NS], float (&pout)[FR], int fmt, int mx_round_up) {
  constexpr int BK = GPU_BK, SPG = NS / 4;
#pragma unroll
  for (int hh = 0; hh < FR; hh++) {
    if (fmt == LPATTN_FMT_FP8) { /* E4M3(448 P), two values at a time (dialect's gpu_p_fp8x2) */
#pragma unroll
      for (int sl = 0; sl < NS; sl += 2) gpu_p_fp8x2(s[hh][sl], s[hh][sl + 1]);
      pout[hh] = 1.0f / 448.0f;
      continue;
    }
    float ga16[BK / 16], bd16[BK / 16], rmax = 0.0f;
#pragma unroll
    for (int m = 0; m < BK / 16; m++) {
      float ga = 0.0f, bad = 0.0f;
#pragma unroll
      for (int sl = m * SPG; sl < m * SPG + SPG; sl++) {
        const float x = s[hh][sl];
        if (!CHECK) ga = fmaxf(ga, x); /* P >= 0; fmaxf passes over a NaN */
        else if (lpk_finite(x)) ga = fmaxf(ga, fabsf(x));
        else bad = 1.0f;
      }
      ga16[m] = gpu_rmax<W>(ga);
      bd16[m] = CHECK ? gpu_rmax<W>(bad) : 0.0f;
      rmax = fmaxf(rmax, ga16[m]);
    }
    const bool mx = fmt == LPATTN_FMT_MXFP4; /* MXFP4 groups are pairs of 16 */
    const float outer = lpk_outer_scale(fmt, rmax);
    pout[hh] = outer;
#if defined(GPU_P_SPLIT_SCALES)
    if constexpr (BK / 16 == 4) { /* lane i of the row's quad computes group i's scale, the quad shares them */
      const float nobad[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* the flags are applied below */
      float denom;
      const float svq = gpu_quad_group_scale(ga16, nobad, fmt, outer, mx_round_up, &denom);
      const float rdq = denom == 0.0f ? 0.0f : 1.0f / denom; /* 0: the group's codes are 0 */
#pragma unroll
      for (int m = 0; m < BK / 16; m++) {
        const int mm = m & ~1;
        const float bad = mx ? fmaxf(bd16[mm], bd16[mm + 1]) : bd16[m];
        const float sval = gpu_rlane(svq, m), rden = gpu_rlane(rdq, m);
#pragma unroll
        for (int sl = m * SPG; sl < m * SPG + SPG; sl++) {
          const float qv = rden == 0.0f ? 0.0f : lpk_e2m1_round(s[hh][sl] * rden);
          s[hh][sl] = bad != 0.0f ? lpk_from_bits(0x7fc00000u) : qv * sval;
        }
      }
    } else
#endif
    {
#pragma unroll
    for (int m = 0; m < BK / 16; m++) {
      const int mm = m & ~1;
      const float ga = mx ? fmaxf(ga16[mm], ga16[mm + 1]) : ga16[m];
      const float bad = mx ? fmaxf(bd16[mm], bd16[mm + 1]) : bd16[m];
      uint8_t sc;
      float denom;
      const float sval = lpk_group_scale(fmt, ga, 0, outer, mx_round_up, &sc, &denom);
      /* x * (1/denom): P is an f32 approximation already (SEMANTICS step 2) */
      const float rden = denom == 0.0f ? 0.0f : 1.0f / denom;
#pragma unroll
      for (int sl = m * SPG; sl < m * SPG + SPG; sl++) {
        const float q = denom == 0.0f ? 0.0f : lpk_e2m1_round(s[hh][sl] * rden);
        s[hh][sl] = bad != 0.0f ? lpk_from_bits(0x7fc00000u) : q * sval;
      }
    }
    }
  }
}
