/* The backward's masked pairs (backends/gpu/kernels/lp_gpu_bwd.cuh includes
 * this in place): P of a tile with its masks, dS with the same masks. */
#ifndef LP_GPU_BWD_MASK_CUH
#define LP_GPU_BWD_MASK_CUH

/* The call's mask (core/mask.h): causal and the sliding window. */
__device__ __forceinline__ lp_mask gpu_bwd_mask(const lp_gpu_bwd_args &a) {
  return lp_mask{a.causal, a.off, a.win_left, a.win_right, 64};
}
/* Whether the 64 x 64 pair of query rows r0.. and keys c0.. is an edge
 * pair (not LP_TILE_FULL: a diagonal tile under causal, a window's edge):
 * high (SPEC 4, unless leaky), masked per element. */
__device__ __forceinline__ bool gpu_bwd_diag(const lp_mask &m, int r0, int c0, int Sq) {
  return lp_mask_kind(&m, r0, min(r0 + 63, Sq - 1), c0, c0 + 63) != LP_TILE_FULL;
}
/* whether slot (hh, sl) is a masked pair: a key past Skv, a query past Sq,
 * a key the row does not see (KEYROWS (dkdv): the tile's rows are keys,
 * its columns queries) */
template <bool KEYROWS>
__device__ __forceinline__ bool gpu_bwd_masked(const gpu_lay<32> &lay, int hh, int sl, int rbase, int cbase,
                                               const lp_gpu_bwd_args &a) {
  const int r = KEYROWS ? rbase + lay.key(sl) : rbase + lay.row(hh);
  const int c = KEYROWS ? cbase + lay.row(hh) : cbase + lay.key(sl);
  const lp_mask m = gpu_bwd_mask(a);
  return c >= a.Skv || r >= a.Sq || !lp_mask_sees(&m, r, c);
}
/* softcap's ds/du = 1 - tanh^2(u / cap) of a pair with probability p > 0,
 * from p itself: tanh(u / cap) = softcap(u) / cap = (ln p + LSE) / cap (no
 * register holds u past P); 1 without a softcap or where p = 0 */
__device__ __forceinline__ float gpu_bwd_capj(float p, float lse, const lp_gpu_bwd_args &a) {
  if (a.softcap == 0.0f || p == 0.0f) return 1.0f;
  const float t = (__logf(p) + lse) / a.softcap;
  return fmaxf(0.0f, 1.0f - t * t); /* |t| may round past 1 where the score saturates */
}
/* P = exp(s * S - LSE) of a warp's 16 x 64 tile in place, 0 where masked
 * (edge: the tile pair holds a key past Skv or a masked causal pair; rows
 * past Sq have LSE = +inf): query r and key c of slot (hh, sl) come from the
 * lane layout. */
template <bool KEYROWS>
__device__ __forceinline__ void gpu_bwd_probs(float (&s)[2][16], const gpu_lay<32> &lay, int rbase, int cbase,
                                              const float *lse, bool edge, const lp_gpu_bwd_args &a) {
  constexpr float L2E = 1.4426950408889634f;
#pragma unroll
  for (int hh = 0; hh < 2; hh++)
#pragma unroll
    for (int sl = 0; sl < 16; sl++) {
      const float l = KEYROWS ? lse[lay.key(sl)] : lse[hh];
      const bool m = edge && gpu_bwd_masked<KEYROWS>(lay, hh, sl, rbase, cbase, a);
      /* one FFMA + MUFU: 2^(S s log2 e - LSE log2 e), results below 2^-126
       * flush to 0; a softcap: the forward's f32 softcap(S s) first */
      const float x = a.softcap != 0.0f
                          ? (lp_softcap_f32(__fmul_rn(s[hh][sl], a.sm_scale), a.softcap) - l) * L2E
                          : fmaf(s[hh][sl], a.sm_scale * L2E, -l * L2E);
      s[hh][sl] = m ? 0.0f : gpu_exp2_fast(x);
    }
}

/* dS = P (dP - Delta) of a warp's tile in place, dP - Delta given per slot
 * by dd(hh, sl) (a softcap: times gpu_bwd_capj, the row's LSE from the
 * slot's lse); a masked pair's dS is 0 (not 0 x a non-finite dP or Delta:
 * SPEC 2), edge as for gpu_bwd_probs. */
template <bool KEYROWS, typename DD>
__device__ __forceinline__ void gpu_bwd_ds(float (&s)[2][16], const gpu_lay<32> &lay, int rbase, int cbase, bool edge,
                                           const float *lse, const lp_gpu_bwd_args &a, DD dd) {
  if (a.softcap != 0.0f) {
#pragma unroll
    for (int hh = 0; hh < 2; hh++)
#pragma unroll
      for (int sl = 0; sl < 16; sl++) {
        const float j = gpu_bwd_capj(s[hh][sl], KEYROWS ? lse[lay.key(sl)] : lse[hh], a);
        s[hh][sl] = edge && gpu_bwd_masked<KEYROWS>(lay, hh, sl, rbase, cbase, a) ? 0.0f : s[hh][sl] * dd(hh, sl) * j;
      }
    return;
  }
  if (!edge || !GPU_NF) {
#pragma unroll
    for (int hh = 0; hh < 2; hh++)
#pragma unroll
      for (int sl = 0; sl < 16; sl++) s[hh][sl] = s[hh][sl] * dd(hh, sl);
    return;
  }
#pragma unroll
  for (int hh = 0; hh < 2; hh++)
#pragma unroll
    for (int sl = 0; sl < 16; sl++)
      s[hh][sl] = gpu_bwd_masked<KEYROWS>(lay, hh, sl, rbase, cbase, a) ? 0.0f : s[hh][sl] * dd(hh, sl);
}
#endif /* LP_GPU_BWD_MASK_CUH */
