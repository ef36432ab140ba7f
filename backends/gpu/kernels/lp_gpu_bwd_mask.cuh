/* The backward's masked pairs (backends/gpu/kernels/lp_gpu_bwd.cuh includes
 * this in place): P of a tile with its masks, dS with the same masks. */
#ifndef LP_GPU_BWD_MASK_CUH
#define LP_GPU_BWD_MASK_CUH

/* whether slot (hh, sl) is a masked pair: a key past Skv, a query past Sq,
 * a causal pair (KEYROWS (dkdv): the tile's rows are keys, its columns
 * queries) */
template <bool KEYROWS>
__device__ __forceinline__ bool gpu_bwd_masked(const gpu_lay<32> &lay, int hh, int sl, int rbase, int cbase,
                                               const lp_gpu_bwd_args &a) {
  const int r = KEYROWS ? rbase + lay.key(sl) : rbase + lay.row(hh);
  const int c = KEYROWS ? cbase + lay.row(hh) : cbase + lay.key(sl);
  return c >= a.Skv || r >= a.Sq || (a.causal && c > r + a.off);
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
      /* one FFMA + MUFU: 2^(S s log2 e - LSE log2 e), results below 2^-126 flush to 0 */
      s[hh][sl] = m ? 0.0f : gpu_exp2_fast(fmaf(s[hh][sl], a.sm_scale * L2E, -l * L2E));
    }
}

/* dS = P (dP - Delta) of a warp's tile in place, dP - Delta given per slot
 * by dd(hh, sl); a masked pair's dS is 0 (not 0 x a non-finite dP or Delta:
 * SPEC 2), edge as for gpu_bwd_probs. */
template <bool KEYROWS, typename DD>
__device__ __forceinline__ void gpu_bwd_ds(float (&s)[2][16], const gpu_lay<32> &lay, int rbase, int cbase, bool edge,
                                           const lp_gpu_bwd_args &a, DD dd) {
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
