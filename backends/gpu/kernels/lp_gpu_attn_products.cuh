/* The matrix products of the mma.sync/HIP attention kernel (lp_gpu_attn.cuh): CUDA: ldmatrix + mma.sync; HIP: MFMA on CDNA, FMAs elsewhere. */
#ifndef LP_GPU_ATTN_PRODUCTS_CUH
#define LP_GPU_ATTN_PRODUCTS_CUH
#ifndef LPATTN_HIP /* CUDA */

/* ldmatrix fragments of Q (Qw: the warp's 16 rows) and K from shared memory
 * into m16n8k16; slots 4np.. of the lane layout are n-blocks 2np, 2np+1. */
template <typename MM, int D>
__device__ __forceinline__ void gpu_mm_scores(float (&s)[2][16], const unsigned short *Qw,
                                              const unsigned short *Ks, int lane) {
  constexpr int LD = gpu_smem<D>::LD;
  const int arow = (lane & 7) + 8 * ((lane >> 3) & 1), acol = 8 * (lane >> 4);
  const int brow = (lane & 7) + 8 * (lane >> 4), bcol = 8 * ((lane >> 3) & 1);
#pragma unroll
  for (int kd = 0; kd < D / 16; kd++) {
    uint32_t qa[4];
    gpu_ldsm_x4(qa, &Qw[arow * LD + kd * 16 + acol]);
#pragma unroll
    for (int np = 0; np < GPU_BK / 16; np++) {
      uint32_t kb[4];
      gpu_ldsm_x4(kb, &Ks[(np * 16 + brow) * LD + kd * 16 + bcol]);
      MM::run(s[0][4 * np], s[0][4 * np + 1], s[1][4 * np], s[1][4 * np + 1], qa, kb[0], kb[1]);
      MM::run(s[0][4 * np + 2], s[0][4 * np + 3], s[1][4 * np + 2], s[1][4 * np + 3], qa, kb[2], kb[3]);
    }
  }
}
/* acc += P V: P (rounded to MM's type) from registers, V [key][LD]. */
template <typename MM, int D>
__device__ __forceinline__ void gpu_mm_pv(float (&acc)[2][D / 4], const float (&s)[2][16],
                                          const unsigned short *Vs, int lane) {
  constexpr int LD = gpu_smem<D>::LD;
  const int vrow = (lane & 7) + 8 * ((lane >> 3) & 1), vcol = 8 * (lane >> 4);
#pragma unroll
  for (int kk = 0; kk < GPU_BK / 16; kk++) {
    const uint32_t pa[4] = {MM::pack(s[0][4 * kk], s[0][4 * kk + 1]), MM::pack(s[1][4 * kk], s[1][4 * kk + 1]),
                            MM::pack(s[0][4 * kk + 2], s[0][4 * kk + 3]),
                            MM::pack(s[1][4 * kk + 2], s[1][4 * kk + 3])};
#pragma unroll
    for (int np = 0; np < D / 16; np++) {
      uint32_t vb[4];
      gpu_ldsm_x4_t(vb, &Vs[(kk * 16 + vrow) * LD + np * 16 + vcol]);
      MM::run(acc[0][4 * np], acc[0][4 * np + 1], acc[1][4 * np], acc[1][4 * np + 1], pa, vb[0], vb[1]);
      MM::run(acc[0][4 * np + 2], acc[0][4 * np + 3], acc[1][4 * np + 2], acc[1][4 * np + 3], pa, vb[2], vb[3]);
    }
  }
}
/* Low tile: acc += (P^ . V^) * (pout[row] * vout[chan]), bf16 operands; V
 * [key][LD] (vt = 0) or transposed [d][LDV] (vt = 1). */
template <int D>
__device__ __forceinline__ void gpu_mm_pv_low(float (&acc)[2][D / 4], const float (&s)[2][16],
                                              const unsigned short *Vs, bool vt, const float pout[2],
                                              const float *vout, int lane) {
  typedef gpu_mma<gpu_bf16> LO;
  constexpr int LD = gpu_smem<D>::LD, LDV = gpu_smem<D>::LDV;
  const int vrow = (lane & 7) + 8 * ((lane >> 3) & 1), vcol = 8 * (lane >> 4);
  const int brow = (lane & 7) + 8 * (lane >> 4), bcol = 8 * ((lane >> 3) & 1), t4 = lane & 3;
  uint32_t pa[GPU_BK / 16][4];
#pragma unroll
  for (int kk = 0; kk < GPU_BK / 16; kk++) {
    pa[kk][0] = LO::pack(s[0][4 * kk], s[0][4 * kk + 1]);
    pa[kk][1] = LO::pack(s[1][4 * kk], s[1][4 * kk + 1]);
    pa[kk][2] = LO::pack(s[0][4 * kk + 2], s[0][4 * kk + 3]);
    pa[kk][3] = LO::pack(s[1][4 * kk + 2], s[1][4 * kk + 3]);
  }
#pragma unroll
  for (int np = 0; np < D / 16; np++) {
    float t0[4] = {0, 0, 0, 0}, t1[4] = {0, 0, 0, 0};
#pragma unroll
    for (int kk = 0; kk < GPU_BK / 16; kk++) {
      uint32_t vb[4];
      if (!vt) gpu_ldsm_x4_t(vb, &Vs[(kk * 16 + vrow) * LD + np * 16 + vcol]);
      else gpu_ldsm_x4(vb, &Vs[(np * 16 + brow) * LDV + kk * 16 + bcol]);
      LO::run(t0[0], t0[1], t0[2], t0[3], pa[kk], vb[0], vb[1]);
      LO::run(t1[0], t1[1], t1[2], t1[3], pa[kk], vb[2], vb[3]);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int c = np * 16 + 2 * t4 + (e & 1);
      acc[e >> 1][4 * np + (e & 1)] += t0[e] * (pout[e >> 1] * vout[c]);
      acc[e >> 1][4 * np + 2 + (e & 1)] += t1[e] * (pout[e >> 1] * vout[c + 8]);
    }
  }
}

#else /* HIP */

/* Q lives in registers: lane l holds row l % 16 at the channels of its
 * layout runs, d = 16 dk + KPL (l / 16) + u (the MFMA B operand of Q^T). */
template <int W, int D> struct gpu_qfrag {
  unsigned short v[D / gpu_lay<W>::LPR];
};

/* S^T = K Q^T: on wave64 CDNA one MFMA 16x16x16 per 16 keys and 16
 * channels (A = K rows from LDS, B = the Q fragment), its accumulator
 * already in the lane layout; elsewhere each lane sums its channel runs for
 * all 64 keys and the row's lanes add their partial sums. */
template <typename MM, int W, int D>
__device__ inline void gpu_mm_scores(float (&s)[1][64 / (W / 16)], const gpu_qfrag<W, D> &q,
                                     const unsigned short *Ks, int lane) {
  typedef gpu_lay<W> L;
  constexpr int LD = gpu_smem<D>::LD, KPL = L::KPL;
  const int p = lane >> 4;
#if defined(LPATTN_HIP_MFMA)
  const int r = lane & 15;
  if constexpr (W == 64) {
#pragma unroll
    for (int kb = 0; kb < GPU_BK / 16; kb++) {
      gpu_f4 c = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int dk = 0; dk < D / 16; dk++) {
        gpu_s4 A, B;
#pragma unroll
        for (int u = 0; u < 4; u++) {
          A[u] = (short)Ks[(kb * 16 + r) * LD + dk * 16 + 4 * p + u];
          B[u] = (short)q.v[dk * 4 + u];
        }
        c = gpu_mfma16<MM>(A, B, c);
      }
#pragma unroll
      for (int i = 0; i < 4; i++) s[0][kb * 4 + i] = c[i];
    }
    return;
  }
#endif
  /* (the channel loop stays rolled: the fallback favours compile time) */
#pragma unroll
  for (int kb = 0; kb < GPU_BK / 16; kb++) {
    float part[16];
#pragma unroll
    for (int kk = 0; kk < 16; kk++) part[kk] = 0.0f;
#pragma unroll 1
    for (int dk = 0; dk < D / 16; dk++)
#pragma unroll
      for (int u = 0; u < KPL; u++) {
        const int d = dk * 16 + KPL * p + u;
        const float qv = MM::tof(q.v[dk * KPL + u]);
#pragma unroll
        for (int kk = 0; kk < 16; kk++) part[kk] += qv * MM::tof(Ks[(kb * 16 + kk) * LD + d]);
      }
#pragma unroll
    for (int kk = 0; kk < 16; kk++) {
      const float t = gpu_rsum<W>(part[kk]);
      if (kk / KPL == p) s[0][kb * KPL + kk % KPL] = t;
    }
  }
}

#if defined(LPATTN_HIP_FP8_MFMA)
/* S^T = K Q^T of an FP8 low tile on CDNA3's FP8 matrix cores from the raw
 * codes (Kc: [key][D] in LDS, qc: this lane's Q codes at d = 32 dk + 8 (l / 16)
 * + u): both operands read as FNUZ are worth half, so the sum is worth 4x
 * (gfx950 reads OCP E4M3 as stored). */
template <int D>
__device__ inline void gpu_mm_scores_fp8(float (&s)[1][16], const uint64_t (&qc)[D / 32], const uint8_t *Kc,
                                         int lane) {
  const int r = lane & 15, p = lane >> 4;
#pragma unroll
  for (int kb = 0; kb < GPU_BK / 16; kb++) {
    gpu_f4 c = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int dk = 0; dk < D / 32; dk++)
      c = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(
          gpu_fnuz8(*(const uint64_t *)&Kc[(kb * 16 + r) * D + dk * 32 + 8 * p]), gpu_fnuz8(qc[dk]), c, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < 4; i++) s[0][kb * 4 + i] = c[i] * GPU_FP8_MFMA_SCALE;
  }
}
#endif

/* P value of this lane's row at key c (c a constant after unrolling),
 * fetched from the lane of the row that holds it, rounded to MM's type. */
template <typename MM, int W>
__device__ inline float gpu_p_at(const float (&s)[1][64 / (W / 16)], int c, int lane) {
  typedef gpu_lay<W> L;
  const float x = __shfl_sync(0xffffffffu, s[0][(c / 16) * L::KPL + c % L::KPL],
                              (lane & 15) + 16 * ((c % 16) / L::KPL), W);
  return MM::tof(MM::bits(x));
}
/* V at (key, channel): [key][LD], or transposed [d][LDV] (vt). */
template <int D>
__device__ inline unsigned short gpu_v_at(const unsigned short *Vs, bool vt, int key, int d) {
  return vt ? Vs[d * gpu_smem<D>::LDV + key] : Vs[key * gpu_smem<D>::LD + d];
}

/* acc (+)= P V for 16 channels at a time: O^T = V^T P^T on MFMA (A = V^T
 * from LDS, B = this lane's P slots), else key by key with P gathered over
 * the row's lanes. scale != NULL: low tile, acc += (P V) * pout * scale[chan]. */
template <typename MM, int W, int D>
__device__ inline void gpu_mm_pv_any(float (&acc)[1][D / (W / 16)], const float (&s)[1][64 / (W / 16)],
                                     const unsigned short *Vs, bool vt, float pout, const float *scale,
                                     int lane) {
  typedef gpu_lay<W> L;
  constexpr int KPL = L::KPL;
  const int p = lane >> 4;
#if defined(LPATTN_HIP_MFMA)
  const int r = lane & 15;
  if constexpr (W == 64) {
#pragma unroll
    for (int n = 0; n < D / 16; n++) {
      gpu_f4 c = {0.0f, 0.0f, 0.0f, 0.0f};
      if (!scale) c = gpu_f4{acc[0][4 * n], acc[0][4 * n + 1], acc[0][4 * n + 2], acc[0][4 * n + 3]};
#pragma unroll
      for (int kb = 0; kb < GPU_BK / 16; kb++) {
        gpu_s4 A, B;
#pragma unroll
        for (int u = 0; u < 4; u++) {
          A[u] = (short)gpu_v_at<D>(Vs, vt, kb * 16 + 4 * p + u, n * 16 + r);
          B[u] = (short)MM::bits(s[0][kb * 4 + u]);
        }
        c = gpu_mfma16<MM>(A, B, c);
      }
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int o = 4 * n + i;
        acc[0][o] = scale ? acc[0][o] + c[i] * (pout * scale[n * 16 + 4 * p + i]) : c[i];
      }
    }
    return;
  }
#endif
  float pr[GPU_BK]; /* the row's P at every key, gathered once */
#pragma unroll
  for (int c = 0; c < GPU_BK; c++) pr[c] = gpu_p_at<MM, W>(s, c, lane);
#pragma unroll
  for (int n = 0; n < D / 16; n++) {
    float t[KPL];
#pragma unroll
    for (int i = 0; i < KPL; i++) t[i] = scale ? 0.0f : acc[0][n * KPL + i];
#pragma unroll 4
    for (int c = 0; c < GPU_BK; c++)
#pragma unroll
      for (int i = 0; i < KPL; i++) t[i] += pr[c] * MM::tof(gpu_v_at<D>(Vs, vt, c, n * 16 + KPL * p + i));
#pragma unroll
    for (int i = 0; i < KPL; i++) {
      const int o = n * KPL + i;
      acc[0][o] = scale ? acc[0][o] + t[i] * (pout * scale[n * 16 + KPL * p + i]) : t[i];
    }
  }
}

#endif
#endif
