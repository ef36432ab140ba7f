/* The epilogue of the sm_90a forward kernels (issue 30): a computing
 * thread's rows written out, O = acc / l with LSE and H (gpu_sm90_finish),
 * or the unnormalized state the mma.sync kernel continues (gpu_sm90_end,
 * init_o), and the rows of a CTA with no tile (gpu_sm90_empty). CUDA only. */
#ifndef LP_GPU_SM90_EPILOGUE_CUH
#define LP_GPU_SM90_EPILOGUE_CUH
#include "lp_gpu_attn.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
/* The end of a computing thread: O = acc / l, LSE and H of its rows rr[0],
 * rr[1] (accumulator slot o: row rr[(o >> 1) & 1], channel 8 (o >> 2) + 2t + (o & 1)). */
template <int D>
__device__ __forceinline__ void gpu_sm90_finish(const lp_gpu_attn_args &a, const lpk_row (&st)[2],
                                                const float (&oacc)[D / 2], const int (&rr)[2], int b, int h, int t) {
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    const int r = rr[hh];
    if (r >= a.Sq) continue;
    float inv_l, lse, en;
    lpk_row_finish(&st[hh], &inv_l, &lse, &en);
    const bool pair = a.out_dtype != LPATTN_F32 && a.so[3] == 1 && ((uintptr_t)a.out & 3) == 0;
#pragma unroll
    for (int nb = 0; nb < D / 8; nb++) {
      const int d = 8 * nb + 2 * t;
      const float o0 = oacc[4 * nb + 2 * hh] * inv_l, o1 = oacc[4 * nb + 2 * hh + 1] * inv_l;
      const int64_t at = lpk_off(a.so, b, h, r, d);
      if (pair) {
        const uint32_t w = a.out_dtype == LPATTN_F16 ? gpu_mma<gpu_f16>::pack(o0, o1) : gpu_mma<gpu_bf16>::pack(o0, o1);
        if ((at & 1) == 0) {
          *(uint32_t *)((unsigned short *)a.out + at) = w;
          continue;
        }
      }
      gpu_store(a.out, a.out_dtype, at, o0);
      gpu_store(a.out, a.out_dtype, lpk_off(a.so, b, h, r, d + 1), o1);
    }
    if (t == 0) {
      if (a.lse) a.lse[lpk_off(a.sl, b, h, r, 0)] = lse;
      if (a.ent) a.ent[lpk_off(a.se, b, h, r, 0)] = en;
    }
  }
}

/* A CTA with no tile (rows far before the keys, causal): O = 0, LSE = -inf,
 * H = 0 of the rows of computing warpgroup wg - 1 (none with init_o). */
template <int D>
__device__ __forceinline__ void gpu_sm90_empty(const lp_gpu_attn_args &a, int q0, int tid, int b, int h) {
  const int wg = tid >> 7;
  if (a.init_o || wg == 0) return;
  const int lane = tid & 31, rw = q0 + (wg - 1) * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2);
  const int rr[2] = {rw, rw + 8};
  float oacc[D / 2];
#pragma unroll
  for (int o = 0; o < D / 2; o++) oacc[o] = 0.0f;
  lpk_row st[2];
  lpk_row_init(&st[0]), lpk_row_init(&st[1]);
  gpu_sm90_finish<D>(a, st, oacc, rr, b, h, lane & 3);
}
/* The end of a computing thread: O, LSE and H of its rows, or (init_o)
 * their unnormalized O and (m, l, r, n) for the mma.sync kernel. */
template <int D>
__device__ __forceinline__ void gpu_sm90_end(const lp_gpu_attn_args &a, const lpk_row (&st)[2],
                                             const float (&oacc)[D / 2], const int (&rr)[2], int b, int h, int t) {
  if (!a.init_o) {
    gpu_sm90_finish<D>(a, st, oacc, rr, b, h, t);
    return;
  }
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    if (rr[hh] >= a.Sq) continue;
    const int64_t row = ((int64_t)b * a.Hq + h) * a.Sq + rr[hh];
#pragma unroll
    for (int nb = 0; nb < D / 8; nb++)
      *(float2 *)&a.init_o[row * D + 8 * nb + 2 * t] = make_float2(oacc[4 * nb + 2 * hh], oacc[4 * nb + 2 * hh + 1]);
    if (t == 0) *(float4 *)&a.init_st[row * 4] = make_float4(st[hh].m, st[hh].l, st[hh].r, (float)st[hh].n);
  }
}

} // namespace LP_GPU_NS
#endif
