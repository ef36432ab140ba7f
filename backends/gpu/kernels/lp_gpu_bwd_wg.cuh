/* The sm_90a attention backward of precision HIGH (issue 14): the dK/dV and
 * dQ kernels of backends/gpu/kernels/lp_gpu_bwd.cuh on warpgroup MMAs. CUDA
 * only: templates/gpu/kernel_bwd.cu.j2 includes it for the cuda dialect. */

/* The attention backward of precision HIGH on Hopper's warpgroup MMAs
 * (wgmma), the sm_90a form of lp_gpu_bwd.cuh's gpu_bwd_dkdv / gpu_bwd_dq
 * (same products, same fixed summation order per output row, no atomics:
 * bitwise the same on every run). The preprocess (Delta, row LSE) is
 * lp_gpu_bwd.cuh's gpu_bwd_prep. A CTA is three warpgroups: warpgroup 0
 * copies (one thread issues TMA copies of 64-row boxes into the 128-byte
 * swizzled layout of lp_gpu_sm90_prim.cuh; in dK/dV a second warp stages the
 * query rows' LSE and Delta), warpgroups 1 and 2 compute 64 rows each.
 *  dK/dV, a CTA per 128 keys of a KV head: each computing warpgroup holds
 *    dK, dV of its 64 keys in registers and walks the query tiles of 64
 *    rows (head by head of the GQA group, i increasing), double-buffered:
 *      S^T = K Q^T, dP^T = V dO^T   wgmma m64n64k16, both operands in smem;
 *      P^T, dS^T in registers (the accumulator layout is the A fragment's);
 *      dV += P^T dO, dK += dS^T Q   wgmma m64nDk16, A from registers, B
 *                                   MN-major (transposed) in smem.
 *  dQ, a CTA per 128 query rows: each computing warpgroup holds dQ of its
 *    64 rows and walks the key tiles of 64 (j increasing): S = Q K^T,
 *    dP = dO V^T, dS, dQ += dS K.
 * bf16 inputs take P and dS as two bf16 terms (hi + lo), as gpu_bwd_pv. */
#ifndef LP_GPU_BWD_WG_CUH
#define LP_GPU_BWD_WG_CUH
#include "lp_gpu_bwd.cuh"
#include "lp_gpu_sm90_prim.cuh"
#include "lp_gpu_sm90_tma.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {

template <int D_> struct gpu_bwd_wg_cfg {
  static constexpr int D = D_, ST = 2, NT = 384, REGS = 240;
  static constexpr int T64 = 64 * D * 2;      /* bytes of a 64-row tile */
  static constexpr int NBAR = 1 + 2 * ST;     /* resident tiles; full, empty per stage */
  /* dK/dV: K, V (128 rows), per stage Q, dO (64 rows) and LSE, Delta (64 f32) */
  /* after the mbarriers: a step's marks of gpu_nf_wg_tile (short [2][D]),
   * the running marks of the CTA (int [2][D]) */
  static constexpr size_t NF = (size_t)12 * D;
  static constexpr size_t kv_bytes = (size_t)4 * T64 + (size_t)ST * (2 * T64 + 512) + 8 * NBAR + NF + 1024;
  /* dQ: Q, dO (128 rows), per stage K, V (64 rows) */
  static constexpr size_t q_bytes = (size_t)4 * T64 + (size_t)ST * 2 * T64 + 8 * NBAR + NF + 1024;
};
/* TMA maps of Q, K, V and dO (boxes of 64 rows) */
struct gpu_bwd_tmaps {
  CUtensorMap q, k, v, o;
};
struct gpu_bwd_bars {
  uint32_t b0;
  __device__ __forceinline__ uint32_t res() const { return b0; }
  __device__ __forceinline__ uint32_t full(int s) const { return b0 + 8 * (1 + s); }
  __device__ __forceinline__ uint32_t empty(int s) const { return b0 + 8 * (1 + gpu_bwd_wg_cfg<64>::ST + s); }
  __device__ __forceinline__ void init(int nf) const {
    gpu_mb_init(res(), 1);
    for (int s = 0; s < gpu_bwd_wg_cfg<64>::ST; s++) gpu_mb_init(full(s), nf), gpu_mb_init(empty(s), 256);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
};
/* rows [r0, r0 + 64 nb) of map m (head h, batch b) into the tile at dst ([D/64][R][64], R rows) */
template <int D, int R>
__device__ __forceinline__ void gpu_bwd_tma(uint32_t dst, const CUtensorMap *m, int r0, int nb, int h, int b,
                                            uint32_t bar) {
#pragma unroll
  for (int c = 0; c < D / 64; c++)
    for (int x = 0; x < nb; x++) gpu_tma4(dst + c * R * 128 + x * 64 * 128, m, 64 * c, r0 + 64 * x, h, b, bar);
}
/* Two 16-bit values of type T in one register (RNE, the low half first). */
template <typename T> __device__ __forceinline__ uint32_t gpu_bwd_wg_pack(float lo, float hi) {
  uint32_t r;
  if (gpu_is_f16<T>()) asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
/* x (32 f32 accumulator slots of a m64n64 tile) as the A fragments of four
 * k-steps of 16; bf16: lo holds x - bf16(x) the same way. */
template <typename T>
__device__ __forceinline__ void gpu_bwd_wg_frag(const float (&x)[32], uint32_t (&hi)[4][4], uint32_t (&lo)[4][4]) {
#pragma unroll
  for (int ks = 0; ks < 4; ks++)
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const float x0 = x[8 * ks + 2 * u], x1 = x[8 * ks + 2 * u + 1];
      hi[ks][u] = gpu_bwd_wg_pack<T>(x0, x1);
      if (!gpu_is_f16<T>())
        lo[ks][u] = gpu_bwd_wg_pack<T>(x0 - __uint_as_float(hi[ks][u] << 16),
                                       x1 - __uint_as_float(hi[ks][u] & 0xffff0000u));
    }
}
/* acc += X B for the fragments of gpu_bwd_wg_frag (both terms for bf16);
 * B: 64 rows x D at bs, MN-major. */
template <typename T, int D>
__device__ __forceinline__ void gpu_bwd_wg_rs(float (&acc)[D / 2], const uint32_t (&hi)[4][4], const uint32_t (&lo)[4][4],
                                              uint32_t bs) {
#pragma unroll
  for (int ks = 0; ks < 4; ks++) gpu_wg<T, D, 1>::rs(acc, hi[ks], gpu_wg_desc(bs + ks * 16 * 128, 64 * 128, 1024));
  if (!gpu_is_f16<T>())
#pragma unroll
    for (int ks = 0; ks < 4; ks++) gpu_wg<T, D, 1>::rs(acc, lo[ks], gpu_wg_desc(bs + ks * 16 * 128, 64 * 128, 1024));
}
/* acc = A B^T of warpgroup rows at as (tile of RA rows, the warpgroup's at
 * row ra) and the 64 rows at bs, both K-major over D; then commits. */
template <typename T, int D, int RA>
__device__ __forceinline__ void gpu_bwd_wg_ss(float (&acc)[32], uint32_t as, int ra, uint32_t bs) {
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    const uint32_t ko = (uint32_t)((kk & 3) * 32);
    gpu_wg<T, 64, 0>::ss(acc, gpu_wg_desc(as + (kk >> 2) * RA * 128 + ra * 128 + ko, 16, 1024),
                         gpu_wg_desc(bs + (kk >> 2) * 64 * 128 + ko, 16, 1024), kk > 0);
  }
  gpu_wg_commit();
}
/* Rows of a warpgroup's m64nN accumulator: slot i of thread (warp w, lane
 * 4g + t) is row 16w + g + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2t + (i & 1).
 * Stores rows [r0, r0 + 64) of out (those < S) times sc. */
template <int D>
__device__ __forceinline__ void gpu_bwd_wg_store(void *out, int dt, const int64_t (&so)[4], const float (&acc)[D / 2],
                                                 float sc, int b, int h, int r0, int S, int warp, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    const int r = r0 + warp * 16 + g + 8 * hh;
    if (r >= S) continue;
#pragma unroll
    for (int nb = 0; nb < D / 8; nb++) {
      const int d = 8 * nb + 2 * t;
      gpu_store(out, dt, lpk_off(so, b, h, r, d), acc[4 * nb + 2 * hh] * sc);
      gpu_store(out, dt, lpk_off(so, b, h, r, d + 1), acc[4 * nb + 2 * hh + 1] * sc);
    }
  }
}

/* dK, dV of keys [128 blockIdx.x, + 128) of KV head blockIdx.y, batch blockIdx.z. */
template <typename T, int D> __device__ __forceinline__ void gpu_bwd_wg_dkdv(const lp_gpu_bwd_args &a, const gpu_bwd_tmaps &tm) {
#if GPU_WG_ARCH
  typedef gpu_bwd_wg_cfg<D> C;
  constexpr int ST = C::ST, T64 = C::T64;
  constexpr float L2E = 1.4426950408889634f;
  extern __shared__ __attribute__((aligned(16))) unsigned char gpu_smem_raw[];
  const uint32_t s0 = ((uint32_t)__cvta_generic_to_shared(gpu_smem_raw) + 1023u) & ~1023u;
  const uint32_t sk = s0, sv = sk + 2 * T64, sq = sv + 2 * T64, so = sq + ST * T64; /* Q, dO: stage s at + s T64 */
  const uint32_t sl = so + ST * T64; /* per stage: LSE log2 e [64], Delta [64] */
  unsigned char *gen = gpu_smem_raw + (sl - (uint32_t)__cvta_generic_to_shared(gpu_smem_raw));
  float *lsd = (float *)gen;
  const gpu_bwd_bars br{sl + ST * 512};
  const int tid = threadIdx.x, wg = tid >> 7;
  const int hk = blockIdx.y, b = blockIdx.z, G = a.Hq / a.Hkv, Sq = a.Sq, Skv = a.Skv, off = a.off;
  const int c0 = blockIdx.x * 128, nqt = (Sq + 63) / 64;
  const int i0 = a.causal ? max(0, gpu_floordiv(c0 - off, 64)) : 0;
  const int nq = max(nqt - i0, 0), n = G * nq;
  if (tid == 0) br.init(1 + 32);
  __syncthreads();

  if (wg == 0) { /* ---- the copier ------------------------------------------ */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    const int warp = tid >> 5, lane = tid & 31;
    if (n > 0 && tid == 0) {
      gpu_mb_expect(br.res(), 4 * T64);
      gpu_bwd_tma<D, 128>(sk, &tm.k, c0, 2, hk, b, br.res());
      gpu_bwd_tma<D, 128>(sv, &tm.v, c0, 2, hk, b, br.res());
    }
    if (n > 0 && warp <= 1) {
#pragma unroll 1
      for (int t = 0; t < n; t++) {
        const int s = t % ST, h = hk * G + t / nq, r0 = (i0 + t % nq) * 64;
        if (t >= ST) gpu_mb_wait(br.empty(s), (uint32_t)(t / ST - 1) & 1);
        if (warp == 0) {
          if (lane == 0) {
            gpu_mb_expect(br.full(s), 2 * T64);
            gpu_bwd_tma<D, 64>(sq + s * T64, &tm.q, r0, 1, h, b, br.full(s));
            gpu_bwd_tma<D, 64>(so + s * T64, &tm.o, r0, 1, h, b, br.full(s));
          }
        } else { /* warp 1: the rows' LSE (times log2 e) and Delta */
#pragma unroll
          for (int u = 0; u < 2; u++) {
            const int r = r0 + lane + 32 * u;
            const int64_t row = ((int64_t)b * a.Hq + h) * Sq + r;
            lsd[s * 128 + lane + 32 * u] = r < Sq ? a.rowlse[row] * L2E : -gpu_ninf();
            lsd[s * 128 + 64 + lane + 32 * u] = r < Sq ? a.delta[row] : 0.0f;
          }
          gpu_mb_arrive(br.full(s));
        }
      }
    }
    return;
  }

  /* ---- the computing warpgroups ------------------------------------------ */
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::REGS) : "memory");
  const int cw = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int kb = c0 + 64 * cw; /* this warpgroup's keys */
  constexpr int NO = D / 2;
  /* bf16 at D = 128: dK and dV, the next step's S^T and dP^T and the hi + lo
   * fragments of dK's product do not fit 240 registers at once (ptxas would
   * serialize every wgmma, C7512): each step waits for its dK product. */
  constexpr bool WAIT_DK = !gpu_is_f16<T>() && D == 128;
  float dk[NO], dv[NO];
#pragma unroll
  for (int o = 0; o < NO; o++) dk[o] = dv[o] = 0.0f;
  const float sl2 = a.sm_scale * L2E;
  /* SPEC 2 (lp_gpu_nonfinite.cuh): a step with masked pairs has its dO tile
   * (before the products) and its Q tile (after S^T has read it, before dK)
   * checked by all computing threads (named barrier 1); non-finite elements
   * are zeroed, and the last query row holding one per channel is kept as
   * a running maximum (gq, go: absolute rows); after the loop, the keys
   * that such a row sees get them back (no accumulator is touched between
   * the wgmmas). */
  short *nfm = (short *)(gen + (br.b0 + 8 * C::NBAR - sl)); /* the step's marks: Q [D], dO [D] */
  int *gq = (int *)(nfm + 2 * D), *go = gq + D;
  for (int d = tid - 128; d < D; d += 256) gq[d] = go[d] = -1;
  bool nfany = false;
  /* after gpu_nf_wg_tile<true> found some: the running maximum of marks mk into g (columns of this thread) */
  auto nf_keep = [&](const short *mk, int *g, int r0) {
    for (int d = tid - 128; d < D; d += 256)
      if (mk[d] >= 0) g[d] = max(g[d], r0 + mk[d]);
  };
  if (n > 0) gpu_mb_wait(br.res(), 0);
#pragma unroll 1
  for (int t = 0; t < n; t++) {
    const int s = t % ST, r0 = (i0 + t % nq) * 64;
    float sc[32], dp[32];
    uint32_t fh[4][4], fl[4][4];
    gpu_mb_wait(br.full(s), (uint32_t)(t / ST) & 1);
    const bool nfc = a.causal && c0 + 127 > r0 + off && GPU_NF; /* the step has masked pairs */
    if (nfc && gpu_nf_wg_tile<true>((unsigned short *)(gen + (int)(so + s * T64 - sl)), 64, D, gpu_nf_bf<T>::v,
                                    nfm + D, tid - 128, 256, 1))
      nf_keep(nfm + D, go, r0), nfany = true;
    gpu_wg_fence();
    gpu_bwd_wg_ss<T, D, 128>(sc, sk, 64 * cw, sq + s * T64); /* S^T = K Q^T */
    gpu_bwd_wg_ss<T, D, 128>(dp, sv, 64 * cw, so + s * T64); /* dP^T = V dO^T */
    gpu_wg_wait<1>(); /* S^T, and the previous step's dV, dK */
    if (t > 0 && !WAIT_DK) gpu_mb_arrive(br.empty((t - 1) % ST));
    gpu_wg_hold(dk), gpu_wg_hold(dv), gpu_wg_hold(sc);
    const float *ls = lsd + s * 128, *dl = ls + 64;
    const bool msk = a.causal && kb + 63 > r0 + off;
#pragma unroll
    for (int i = 0; i < 32; i++) { /* P^T = 2^(S^T s log2 e - LSE log2 e) */
      const int q = 8 * (i >> 2) + 2 * t4 + (i & 1);
      float p = gpu_exp2_fast(fmaf(sc[i], sl2, -ls[q]));
      if (msk && kb + warp * 16 + g + 8 * ((i >> 1) & 1) > r0 + q + off) p = 0.0f;
      sc[i] = p;
    }
    const bool mskd = (msk || r0 + 64 > Sq) && GPU_NF; /* masked pairs of dS^T: causal, or rows past Sq */
    gpu_bwd_wg_frag<T>(sc, fh, fl);
    gpu_wg_fence();
    gpu_bwd_wg_rs<T, D>(dv, fh, fl, so + s * T64); /* dV += P^T dO */
    gpu_wg_commit();
    gpu_wg_wait<0>(); /* dP^T, and dV's reads of the fragments */
    gpu_wg_hold(dp);
    if (nfc && gpu_nf_wg_tile<true>((unsigned short *)(gen + (int)(sq + s * T64 - sl)), 64, D, gpu_nf_bf<T>::v,
                                    nfm, tid - 128, 256, 1)) /* Q, which S^T has read */
      nf_keep(nfm, gq, r0), nfany = true;
#pragma unroll
    for (int i = 0; i < 32; i++) { /* dS^T; a masked pair's is 0, not 0 x a non-finite dP^T or Delta */
      const int q = 8 * (i >> 2) + 2 * t4 + (i & 1), key = kb + warp * 16 + g + 8 * ((i >> 1) & 1);
      const float ds = sc[i] * (dp[i] - dl[q]);
      sc[i] = mskd && (r0 + q >= Sq || (a.causal && key > r0 + q + off)) ? 0.0f : ds;
    }
    gpu_bwd_wg_frag<T>(sc, fh, fl);
    gpu_wg_fence();
    gpu_bwd_wg_rs<T, D>(dk, fh, fl, sq + s * T64); /* dK += dS^T Q */
    gpu_wg_commit();
    if (WAIT_DK) { /* dK's fragments are not held into the next step's MMAs */
      gpu_wg_wait<0>();
      gpu_mb_arrive(br.empty(s));
    }
  }
  gpu_wg_wait<0>();
  if (n > 0 && !WAIT_DK) gpu_mb_arrive(br.empty((n - 1) % ST));
  gpu_wg_hold(dk), gpu_wg_hold(dv);
  if (nfany) { /* every thread's running marks are in; the keys that their rows see */
    gpu_nb_sync(1, 256);
#pragma unroll
    for (int o = 0; o < NO; o++) {
      const int d = 8 * (o >> 2) + 2 * t4 + (o & 1), key = kb + warp * 16 + g + 8 * ((o >> 1) & 1);
      if (gq[d] >= 0 && gq[d] + off >= key) dk[o] += gpu_nf_nan();
      if (go[d] >= 0 && go[d] + off >= key) dv[o] += gpu_nf_nan();
    }
  }
  gpu_bwd_wg_store<D>(a.dk, a.dk_dtype, a.sdk, dk, a.sm_scale, b, hk, kb, Skv, warp, lane);
  gpu_bwd_wg_store<D>(a.dv, a.dv_dtype, a.sdv, dv, 1.0f, b, hk, kb, Skv, warp, lane);
#elif defined(__CUDA_ARCH__)
  __trap(); /* never launched here (gpu_bwd_wg_ok) */
#endif
}

/* dQ of query rows [128 x, + 128) (x = blockIdx.x, reversed when causal) of q head blockIdx.y, batch blockIdx.z. */
template <typename T, int D> __device__ __forceinline__ void gpu_bwd_wg_dq(const lp_gpu_bwd_args &a, const gpu_bwd_tmaps &tm) {
#if GPU_WG_ARCH
  typedef gpu_bwd_wg_cfg<D> C;
  constexpr int ST = C::ST, T64 = C::T64;
  constexpr float L2E = 1.4426950408889634f;
  extern __shared__ __attribute__((aligned(16))) unsigned char gpu_smem_raw[];
  const uint32_t s0 = ((uint32_t)__cvta_generic_to_shared(gpu_smem_raw) + 1023u) & ~1023u;
  const uint32_t sq = s0, so = sq + 2 * T64, sk = so + 2 * T64, sv = sk + ST * T64;
  const gpu_bwd_bars br{sv + ST * T64};
  const int tid = threadIdx.x, wg = tid >> 7;
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (a.Hq / a.Hkv), Sq = a.Sq, Skv = a.Skv, off = a.off;
  const int q0 = (a.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * 128; /* as gpu_bwd_dq */
  const int r1 = min(q0 + 127, Sq - 1), nkt = (Skv + 63) / 64;
  const int nj = a.causal ? max(0, min(nkt, gpu_floordiv(r1 + off, 64) + 1)) : nkt;
  if (tid == 0) br.init(1);
  __syncthreads();

  if (wg == 0) { /* ---- the copier ------------------------------------------ */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (nj > 0 && tid == 0) {
      gpu_mb_expect(br.res(), 4 * T64);
      gpu_bwd_tma<D, 128>(sq, &tm.q, q0, 2, h, b, br.res());
      gpu_bwd_tma<D, 128>(so, &tm.o, q0, 2, h, b, br.res());
#pragma unroll 1
      for (int j = 0; j < nj; j++) {
        const int s = j % ST;
        if (j >= ST) gpu_mb_wait(br.empty(s), (uint32_t)(j / ST - 1) & 1);
        gpu_mb_expect(br.full(s), 2 * T64);
        gpu_bwd_tma<D, 64>(sk + s * T64, &tm.k, j * 64, 1, hk, b, br.full(s));
        gpu_bwd_tma<D, 64>(sv + s * T64, &tm.v, j * 64, 1, hk, b, br.full(s));
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::REGS) : "memory");
  const int cw = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int w0 = q0 + 64 * cw;
  constexpr int NO = D / 2;
  float l2[2], del[2];
  int rr[2];
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    rr[hh] = w0 + warp * 16 + g + 8 * hh;
    const int64_t row = ((int64_t)b * a.Hq + h) * Sq + rr[hh];
    l2[hh] = rr[hh] < Sq ? a.rowlse[row] * L2E : -gpu_ninf();
    del[hh] = rr[hh] < Sq ? a.delta[row] : 0.0f;
  }
  float dq[NO];
#pragma unroll
  for (int o = 0; o < NO; o++) dq[o] = 0.0f;
  const float sl2 = a.sm_scale * L2E;
  /* SPEC 2 (lp_gpu_nonfinite.cuh): a key tile that some row of the CTA does not
   * see in full has its K checked after S has read it, before dQ += dS K,
   * by all computing threads (named barrier 1); non-finite elements are
   * zeroed, and the first key holding one per channel is kept as a running
   * minimum (gk: absolute keys); after the loop, the rows that see such a
   * key get them back (no accumulator is touched between the wgmmas). */
  unsigned char *gen = gpu_smem_raw + (s0 - (uint32_t)__cvta_generic_to_shared(gpu_smem_raw));
  short *nfm = (short *)(gen + (br.b0 + 8 * C::NBAR - s0)); /* the step's marks [D] */
  int *gk = (int *)(nfm + 2 * D);
  for (int d = tid - 128; d < D; d += 256) gk[d] = 0x7fffffff;
  bool nfany = false;
  if (nj > 0) gpu_mb_wait(br.res(), 0);
#pragma unroll 1
  for (int j = 0; j < nj; j++) {
    const int s = j % ST, c0 = j * 64;
    float sc[32], dp[32];
    uint32_t fh[4][4], fl[4][4];
    gpu_mb_wait(br.full(s), (uint32_t)(j / ST) & 1);
    gpu_wg_fence();
    gpu_bwd_wg_ss<T, D, 128>(sc, sq, 64 * cw, sk + s * T64); /* S = Q K^T */
    gpu_bwd_wg_ss<T, D, 128>(dp, so, 64 * cw, sv + s * T64); /* dP = dO V^T */
    gpu_wg_wait<1>(); /* S, and the previous step's dQ */
    if (j > 0) gpu_mb_arrive(br.empty((j - 1) % ST));
    gpu_wg_hold(dq), gpu_wg_hold(sc);
    const bool msk = c0 + 64 > Skv || (a.causal && c0 + 63 > w0 + off);
#pragma unroll
    for (int i = 0; i < 32; i++) {
      const int hh = (i >> 1) & 1, c = c0 + 8 * (i >> 2) + 2 * t4 + (i & 1);
      float p = gpu_exp2_fast(fmaf(sc[i], sl2, -l2[hh]));
      if (msk && (c >= Skv || (a.causal && c > rr[hh] + off))) p = 0.0f;
      sc[i] = p;
    }
    gpu_wg_wait<0>();
    gpu_wg_hold(dp);
    if (a.causal && c0 + 63 > q0 + off && GPU_NF &&
        gpu_nf_wg_tile<false>((unsigned short *)(gen + (sk + s * T64 - s0)), 64, D, gpu_nf_bf<T>::v, nfm, tid - 128,
                              256, 1)) { /* K, which S has read (the rows' own scores keep theirs) */
      for (int d = tid - 128; d < D; d += 256)
        if (nfm[d] != 0x7fff) gk[d] = min(gk[d], c0 + nfm[d]);
      nfany = true;
    }
    const bool mskn = msk && GPU_NF;
#pragma unroll
    for (int i = 0; i < 32; i++) { /* dS; a masked pair's is 0, not 0 x a non-finite dP or Delta */
      const int hh = (i >> 1) & 1, c = c0 + 8 * (i >> 2) + 2 * t4 + (i & 1);
      const float ds = sc[i] * (dp[i] - del[hh]);
      sc[i] = mskn && (c >= Skv || (a.causal && c > rr[hh] + off)) ? 0.0f : ds;
    }
    gpu_bwd_wg_frag<T>(sc, fh, fl);
    gpu_wg_fence();
    gpu_bwd_wg_rs<T, D>(dq, fh, fl, sk + s * T64); /* dQ += dS K */
    gpu_wg_commit();
  }
  gpu_wg_wait<0>();
  if (nj > 0) gpu_mb_arrive(br.empty((nj - 1) % ST));
  gpu_wg_hold(dq);
  if (nfany) { /* every thread's running marks are in; the rows that see them */
    gpu_nb_sync(1, 256);
#pragma unroll
    for (int o = 0; o < NO; o++)
      if (gk[8 * (o >> 2) + 2 * t4 + (o & 1)] <= rr[(o >> 1) & 1] + off) dq[o] += gpu_nf_nan();
  }
  gpu_bwd_wg_store<D>(a.dq, a.dq_dtype, a.sdq, dq, a.sm_scale, b, h, w0, Sq, warp, lane);
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

/* Whether call a may take the kernels K1 (dK/dV) and K2 (dQ): precision
 * HIGH on a 9.0 device whose image of them is sm_90a, 16-byte rows.
 * LPATTN_NO_WGMMA=1 turns this path off (same-run comparisons). */
template <void (*K1)(lp_gpu_bwd_args, gpu_bwd_tmaps)> static bool gpu_bwd_wg_ok(const lp_gpu_bwd_args *a) {
  static int have = -1;
  int dev = 0, major = 0, minor = 0;
  if (a->low >= 0 || !a->vec16 || lp_gpu_bwd_win(a) || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (major != 9 || minor != 0) return false;
  /* setmaxnreg moves registers within the 168 x 384 the launch allocates */
  if (have < 0) have = gpu_wg_image((const void *)K1, 168);
  return have > 0;
}
/* The prep kernel, then K1 and K2 with the TMA maps of a's tensors; false
 * (nothing launched) where a map or the shared memory cannot be had. */
template <typename T, int D, void (*K1)(lp_gpu_bwd_args, gpu_bwd_tmaps), void (*K2)(lp_gpu_bwd_args, gpu_bwd_tmaps)>
static bool gpu_bwd_wg_launch(const lp_gpu_bwd_args *a, cudaStream_t st, lpattn_status *status) {
  typedef gpu_bwd_wg_cfg<D> C;
  gpu_bwd_tmaps tm;
  if (!gpu_tmap(&tm.q, a->q, a->sq, a->B, a->Hq, a->Sq, D, 64) || !gpu_tmap(&tm.k, a->k, a->sk, a->B, a->Hkv, a->Skv, D, 64) ||
      !gpu_tmap(&tm.v, a->v, a->sv, a->B, a->Hkv, a->Skv, D, 64) ||
      !gpu_tmap(&tm.o, a->dout, a->sdo, a->B, a->Hq, a->Sq, D, 64))
    return false;
  gpu_nf_env();
  if (cudaFuncSetAttribute(K1, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::kv_bytes) != cudaSuccess ||
      cudaFuncSetAttribute(K2, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::q_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const int64_t rows = (int64_t)a->B * a->Hq * a->Sq;
  gpu_bwd_prep<T, D><<<(unsigned)((rows + 3) / 4), 128, 0, st>>>(*a);
  K1<<<dim3((unsigned)((a->Skv + 127) / 128), (unsigned)a->Hkv, (unsigned)a->B), C::NT, C::kv_bytes, st>>>(*a, tm);
  K2<<<dim3((unsigned)((a->Sq + 127) / 128), (unsigned)a->Hq, (unsigned)a->B), C::NT, C::q_bytes, st>>>(*a, tm);
  *status = cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
  return true;
}
} // namespace LP_GPU_NS
#endif
