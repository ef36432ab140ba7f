/* The CTA of the sm_90a forward kernels (issue 30; FlashAttention-3's
 * split of hopper/ into tile scheduler, mainloop and epilogue): what the
 * 16-bit (lp_gpu_attn_wg.cuh), low-format (lp_gpu_attn_wgl.cuh) and E4M3
 * (lp_gpu_attn_wg8.cuh) mainloops share before their loop: the CTA's rows
 * (gpu_sm90_cta, in the order of lp_gpu_tile_order.cuh) and key tiles
 * (gpu_sm90_tiles), the shared-memory layout (gpu_sm90_smem), and the
 * copier warpgroup's loops (gpu_sm90_copy: TMA; gpu_sm90_scales: the
 * outer scales of the low formats). Configurations: lp_gpu_sm90_cfg.cuh.
 * CUDA only. */
#ifndef LP_GPU_SM90_CTA_CUH
#define LP_GPU_SM90_CTA_CUH
#include "lp_gpu_attn.cuh"
#include "lp_gpu_sm90_prim.cuh"
#include "lp_gpu_sm90_cfg.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
/* The prologue: thread tid of warpgroup wg (0: the copier), (batch b, q head
 * h, kv head hk), the call's Sq, Skv, off, rows [q0, r1] (row tile
 * gpu_tile_order of blockIdx.x). (The reads are in the order the kernels
 * had before the split: another order schedules their loops differently.) */
struct gpu_sm90_cta {
  int tid, wg, b, h, hk, Sq, Skv, off, q0, r1;
  __device__ __forceinline__ gpu_sm90_cta(const lp_gpu_attn_args &a, int BQ) {
    tid = threadIdx.x, wg = tid >> 7;
    const int G = a.Hq / a.Hkv;
    b = blockIdx.z, h = blockIdx.y, hk = h / G;
    Sq = a.Sq, Skv = a.Skv, off = a.off;
    const int x = blockIdx.x;
    q0 = gpu_tile_order(a.causal, a.nqx, x) * BQ, r1 = min(q0 + BQ, Sq) - 1;
  }
  /* no rows or no keys: the CTA has nothing to do */
  __device__ __forceinline__ bool idle() const { return q0 > r1 || Skv <= 0; }
};
/* Tiles of BK keys a CTA of rows [q0, r1] visits: all, causal: those up to
 * the last row's key (a.init_o: up to gpu_wgl_kw, whose state the
 * mma.sync kernel continues; the low-format kernels). */
__device__ __forceinline__ int gpu_sm90_visible(const lp_gpu_attn_args &a, int nkt, int r1, int off, int BK) {
  return a.causal ? min(nkt, gpu_floordiv(r1 + off, BK) + 1) : nkt;
}
__device__ __forceinline__ int gpu_sm90_tiles(const lp_gpu_attn_args &a, int q0, int r1, int BK) {
  const int nkt = (a.Skv + BK - 1) / BK;
  if (a.init_o) return gpu_wgl_kw(q0, a.off, a.Skv) / BK;
  return gpu_sm90_visible(a, nkt, r1, a.off, BK);
}
/* The dynamic shared memory (every sm_90a forward kernel's window) */
__device__ __forceinline__ unsigned char *gpu_sm90_raw() {
  extern __shared__ __attribute__((aligned(16))) unsigned char gpu_smem_raw[];
  return gpu_smem_raw;
}
/* a generic pointer to shared address s */
__device__ __forceinline__ unsigned char *gpu_sm90_at(uint32_t s) {
  return gpu_sm90_raw() + (s - (uint32_t)__cvta_generic_to_shared(gpu_sm90_raw()));
}
/* Shared memory of configuration C, from the first 1024-aligned byte: Q
 * (sq), ST stages of K (sk) and of V (sv), ST x SCF floats of scalars
 * (ssc, scal), the mbarriers (br). */
template <typename C> struct gpu_sm90_smem {
  uint32_t sq, sk, sv, ssc;
  float *scal; /* [ST][SCF] */
  gpu_wg_bars<C::ST> br;
  __device__ __forceinline__ gpu_sm90_smem() {
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(gpu_sm90_raw());
    sq = (raw + 1023u) & ~1023u, sk = sq + C::QB, sv = sk + C::ST * C::KB, ssc = sv + C::ST * C::KB;
    scal = (float *)(gpu_sm90_raw() + (ssc - raw));
    br.bq = ssc + C::ST * C::SCF * 4;
  }
};
/* The copier (one thread): the CTA's Q tile once, then tile j's K and V
 * (tiles of BK rows, boxes of C::W channels) into stage j % ST, each once
 * its stage is empty. */
template <typename C>
__device__ __forceinline__ void gpu_sm90_copy(const gpu_tmaps &tm, const gpu_sm90_smem<C> &sm, int q0, int h, int hk, int b,
                                              int jn) {
  constexpr int BQ = C::BQ, BK = C::BK, ST = C::ST, KB = C::KB;
  const gpu_wg_bars<ST> &br = sm.br;
  auto wait_empty = [](uint32_t bar, uint32_t parity) {
    if constexpr (C::IDLE) gpu_mb_wait_idle(bar, parity);
    else gpu_mb_wait(bar, parity);
  };
  gpu_mb_expect(br.q(), C::QB);
#pragma unroll
  for (int c = 0; c < C::CH; c++) gpu_tma4(sm.sq + c * BQ * C::RB, &tm.q, C::W * c, q0, h, b, br.q());
#pragma unroll 1
  for (int j = 0, s = 0, n = 0; j < jn; j++) {
    if (n > 0) wait_empty(br.kempty(s), (n - 1) & 1);
    gpu_mb_expect(br.kfull(s), KB);
#pragma unroll
    for (int c = 0; c < C::CH; c++) gpu_tma4(sm.sk + s * KB + c * BK * C::RB, &tm.k, C::W * c, j * BK, hk, b, br.kfull(s));
    if (n > 0) wait_empty(br.vempty(s), (n - 1) & 1);
    gpu_mb_expect(br.vfull(s), KB);
    if constexpr (C::VT) /* V^T: boxes of BK keys x D channels */
      gpu_tma4(sm.sv + s * KB, &tm.v, j * BK, 0, hk, b, br.vfull(s));
    else
#pragma unroll
      for (int c = 0; c < C::CH; c++) gpu_tma4(sm.sv + s * KB + c * BK * C::RB, &tm.v, C::W * c, j * BK, hk, b, br.vfull(s));
    if (++s == ST) s = 0, n++;
  }
}
/* Warp 1 of the copier: tile j's K outer scales (BK keys) and V outer
 * scales (its BK / 64 SPEC tiles x D channels, times vmul) into stage
 * j % ST of scal (SCF floats a stage), arriving on the stage's full
 * mbarriers; keys and tiles past Skv get 0. */
template <int D, int BK, int ST, int SCF>
__device__ __forceinline__ void gpu_sm90_scales(const lp_gpu_attn_args &a, float *scal, const gpu_wg_bars<ST> &br,
                                                int jn, int b, int hk, int lane, float vmul) {
  constexpr int HV = BK / 64;
  const int Skv = a.Skv;
  const int64_t kvbh = (int64_t)b * a.Hkv + hk;
  const float *ko = a.kq.outer + kvbh * a.kq.rows;
  const int vt = (int)((a.vq.rows + 63) / 64); /* V's 64-key tiles */
  const float *vo = a.vq.outer + kvbh * vt * D;
#pragma unroll 1
  for (int j = 0, s = 0, n = 0; j < jn; j++) {
    float *ks = scal + s * SCF, *vs = ks + BK;
    if (n > 0) gpu_mb_wait(br.kempty(s), (n - 1) & 1);
    for (int i = lane; i < BK; i += 32) ks[i] = j * BK + i < Skv ? ko[j * BK + i] : 0.0f;
    gpu_mb_arrive(br.kfull(s));
    if (n > 0) gpu_mb_wait(br.vempty(s), (n - 1) & 1);
    for (int i = lane; i < HV * D; i += 32) {
      const int t64 = j * HV + i / D;
      vs[i] = vmul * (t64 * 64 < Skv ? vo[(int64_t)t64 * D + i % D] : 0.0f);
    }
    gpu_mb_arrive(br.vfull(s));
    if (++s == ST) s = 0, n++;
  }
}
} // namespace LP_GPU_NS
#endif
