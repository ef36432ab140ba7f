/* Paged decode, the high-tile step (backends/gpu/kernels/lp_gpu_decode.cuh):
 * f16/bf16 tiles (HIGH pages, the slot ring's high tiles), no quantization. */
#ifndef LP_GPU_DECODE_HIGH_CUH
#define LP_GPU_DECODE_HIGH_CUH
#include "lp_gpu_decode_prim.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
#ifndef LPATTN_HIP /* CUDA */

/* The chunk's tiles j0 + k for the bits k of hmask: warp w takes keys
 * [16w, 16w + 16) of each (the order of the online softmax does not
 * matter), ldmatrix + mma in HT; K and V come from sel.src(C, j, v)
 * (f16/bf16 [Hkv][T][D] rows; nullptr: none) and row p (its query position)
 * takes tile j where sel.high(j, p) or (THRIFT) the row selected it, keys
 * <= p. A tile that no row of the warp takes costs only its copy. Warps
 * run independently (no CTA synchronization). PASA: K' = f16((k - kshift)
 * sm_scale) in place, scores f16(q . K') + c. */
template <typename HT, int D, class Sel>
__device__ __forceinline__ void lpd_high_tiles(const lpd_ctx<D> &C, lpd_acc<D> &A, uint32_t hmask, const Sel &sel) {
  typedef lpd_smem<D> SM;
  constexpr int T = LPD_T, LDH = SM::LDH, NB = D / 8, KS = D / 16;
  const lp_gpu_pdecode_args &a = C.a;
  const lp_gpu_pool &P = C.P;
  const int warp = C.warp, lane = C.lane, t = C.t, len = C.len, wr = C.wr;
  uint8_t *mybuf = C.mybuf;
  const unsigned short *Qh = C.Qh;
  const int nh = __popc(hmask);
  auto jat = [&](int k) { /* the k-th high tile */
    uint32_t m = hmask;
    for (int i = 0; i < k; i++) m &= m - 1;
    return C.j0 + __ffs(m) - 1;
  };
  const bool dbl = wr >= 2 * SM::HSUB;
  auto issue = [&](int k) {
    if (k < nh) {
      const int j = jat(k);
      uint8_t *dst = mybuf + (dbl ? (k & 1) * SM::HSUB : 0);
      const uint8_t *ks = sel.src(C, j, false), *vs = sel.src(C, j, true);
      for (int q = lane; q < 16 * D / 8; q += 32) {
        const int kk = q / (D / 8), part = q % (D / 8), key = j * T + 16 * warp + kk;
        const bool ok = ks && key < len;
        const int64_t so = ((int64_t)(16 * warp + kk) * D + 8 * part) * 2;
        gpu_cp16(dst + (kk * LDH + 8 * part) * 2, ok ? ks + so : (const void *)P.mem, ok ? 16 : 0);
        gpu_cp16(dst + ((16 + kk) * LDH + 8 * part) * 2, ok ? vs + so : (const void *)P.mem, ok ? 16 : 0);
      }
    }
    gpu_cp_commit();
  };
  if (dbl && nh > 0) issue(0);
  for (int k = 0; k < nh; k++) {
    const int j = jat(k), key0 = j * T + 16 * warp;
    if (!dbl) { /* one buffer (low pools: at most two high tiles) */
      issue(k);
      gpu_cp_wait<0>();
    } else {
      if (k + 1 < nh) issue(k + 1);
      else gpu_cp_commit();
      gpu_cp_wait<1>();
    }
    __syncwarp();
    if (key0 >= len) continue;
    const unsigned short *Ks = (const unsigned short *)(mybuf + (dbl ? (k & 1) * SM::HSUB : 0)), *Vs = Ks + 16 * LDH;
    bool vis[2];
#pragma unroll
    for (int i = 0; i < 2; i++) /* keys key0..key0 + 15 meet the row's window p - wl .. p */
      vis[i] = C.R.live[i] && key0 <= C.R.p[i] && (!C.win || key0 + 15 + C.wl >= C.R.p[i]) &&
               (sel.high(j, C.R.p[i]) || (j < C.R.p[i] / T && ((C.R.sel[i] >> (j - C.j0)) & 1u)));
    if (!__any_sync(0xffffffffu, vis[0] || vis[1])) {
      __syncwarp();
      continue;
    }
    float ch = 0.0f; /* PASA: row g's c; K' in place */
    if (C.pasa) {
      unsigned short *Kw = (unsigned short *)Ks;
      double part = 0.0;
      for (int d = t * (D / 4); d < (t + 1) * (D / 4); d++)
        part = __dadd_rn(part, __dmul_rn((double)gpu_f16_tof(Qh[C.g * LDH + d]), (double)C.kshift(j, d, false)));
      ch = lpd_pasa_c(part, 1, 2, a.sm_scale);
      for (int d = lane; d < D; d += 32) {
        const float ks = C.kshift(j, d, false);
        for (int kk = 0; kk < 16; kk++)
          Kw[kk * LDH + d] = gpu_f16_bits(__fmul_rn(__fsub_rn(gpu_f16_tof(Kw[kk * LDH + d]), ks), a.sm_scale));
      }
      __syncwarp();
    }
    float c[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int s = 0; s < KS; s++) {
      uint32_t qa4[4], kb[4];
      gpu_ldsm_x4(qa4, &Qh[(lane & 15) * LDH + 16 * s + (lane >> 4) * 8]);
      gpu_ldsm_x4(kb, &Ks[((lane & 7) + ((lane >> 4) << 3)) * LDH + 16 * s + ((lane >> 3) & 1) * 8]);
      gpu_mma<HT>::run(c[0][0], c[0][1], c[0][2], c[0][3], qa4, kb[0], kb[1]);
      gpu_mma<HT>::run(c[1][0], c[1][1], c[1][2], c[1][3], qa4, kb[2], kb[3]);
    }
    float tm[2] = {gpu_ninf(), gpu_ninf()};
#pragma unroll
    for (int nb = 0; nb < 2; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int i = e >> 1, key = key0 + 8 * nb + 2 * t + (e & 1);
        const float v = !(vis[i] && key <= C.R.p[i] && (!C.win || key + C.wl >= C.R.p[i])) ? gpu_ninf()
                        : C.pasa ? lpk_round_f16(c[nb][e]) + ch
                                 : lp_softcap_f32(__fmul_rn(c[nb][e], a.sm_scale), C.cap);
        c[nb][e] = v;
        tm[i] = fmaxf(tm[i], v);
      }
    lpk_step sp[2];
    float ps[2] = {0.0f, 0.0f}, pss[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 2; i++) {
      sp[i] = lpk_row_begin(&A.st[i], lpd_qmax(tm[i]), 0.0f);
      if (!vis[i]) sp[i].alpha = 1.0f, sp[i].bias = 0.0f;
    }
#pragma unroll
    for (int nb = 0; nb < 2; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int i = e >> 1;
        const float v = c[nb][e], p = v == gpu_ninf() ? 0.0f : __expf(v + sp[i].bias);
        ps[i] += p;
        if (p != 0.0f) pss[i] += p * v;
        c[nb][e] = p;
      }
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const float sum = lpd_qsum(ps[i]), sums = lpd_qsum(pss[i]);
      if (vis[i]) lpk_row_end(&A.st[i], &sp[i], sum, sums);
    }
    { /* SPEC 2 (lp_gpu_nonfinite.cuh): where a live row of the warp does not see
       * all 16 keys, non-finite V elements are given to the rows that see
       * them (before the product: NaN stays NaN) and zeroed in this warp's
       * sub-block, so that 0 x NaN does not reach the others */
      bool part = false;
#pragma unroll
      for (int i = 0; i < 2; i++)
        part |= C.R.live[i] && !(vis[i] && key0 + 15 <= C.R.p[i] && (!C.win || key0 + C.wl >= C.R.p[i]));
      const bool bf = gpu_nf_bf<HT>::v;
      if (__any_sync(0xffffffffu, part) && GPU_NF && __any_sync(0xffffffffu, gpu_nf_scan(Vs, 16, D, LDH, bf, lane, 32))) {
        const unsigned short m = bf ? 0x7f80u : 0x7c00u;
#pragma unroll
        for (int n = 0; n < NB; n++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int i = e >> 1, d = 8 * n + 2 * t + (e & 1);
            bool bad = false;
            for (int kk = 0; kk < 16 && vis[i] && key0 + kk <= C.R.p[i]; kk++)
              bad |= (!C.win || key0 + kk + C.wl >= C.R.p[i]) && (Vs[kk * LDH + d] & m) == m; /* the row's keys */
            if (bad) A.acc[n][e] += gpu_nf_nan();
          }
        __syncwarp();
        unsigned short *Vw = (unsigned short *)Vs;
        for (int q = lane; q < 16 * D; q += 32)
          if ((Vw[(q / D) * LDH + q % D] & m) == m) Vw[(q / D) * LDH + q % D] = 0;
        __syncwarp();
      }
    }
    uint32_t pa[4];
    pa[0] = gpu_mma<HT>::pack(c[0][0], c[0][1]), pa[1] = gpu_mma<HT>::pack(c[0][2], c[0][3]);
    pa[2] = gpu_mma<HT>::pack(c[1][0], c[1][1]), pa[3] = gpu_mma<HT>::pack(c[1][2], c[1][3]);
#pragma unroll
    for (int n2 = 0; n2 < NB / 2; n2++) {
      uint32_t vb[4];
      const int mi = lane >> 3;
      gpu_ldsm_x4_t(vb, &Vs[((lane & 7) + (mi & 1) * 8) * LDH + 16 * n2 + (mi >> 1) * 8]);
#pragma unroll
      for (int q2 = 0; q2 < 2; q2++) {
        float *o = A.acc[2 * n2 + q2];
        o[0] *= sp[0].alpha, o[1] *= sp[0].alpha, o[2] *= sp[1].alpha, o[3] *= sp[1].alpha;
        gpu_mma<HT>::run(o[0], o[1], o[2], o[3], pa, vb[2 * q2], vb[2 * q2 + 1]);
      }
    }
    __syncwarp();
  }
  gpu_cp_wait<0>();
}
#endif
} // namespace LP_GPU_NS
#endif
