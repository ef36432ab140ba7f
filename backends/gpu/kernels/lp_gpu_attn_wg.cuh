/* The sm_90a prefill kernel of precision HIGH (issue 16): warpgroup MMAs
 * (wgmma) on operands in 128-byte-swizzled shared memory. Rendered for
 * CUDA only; the HIP rendering is an empty header. The wgmma wrappers are
 * lp_gpu_wgmma.cuh, included in place. */

/* Prefill attention on Hopper's warpgroup MMAs, precision HIGH (f16/bf16
 * inputs, f32 accumulation), the case gpu_attn_spec() calls 0: no PASA, no
 * f16 scores, one split. A CTA of two warpgroups owns 128 query rows of one
 * (b, q head), each warpgroup 64 of them; it walks the visible KV tiles of
 * BK keys, double-buffered by cp.async into the swizzled layout that wgmma
 * reads through shared-memory descriptors:
 *   S = Q K^T   wgmma m64 n BK k16, A = Q and B = K from shared memory (K-major);
 *   O += P V    wgmma m64 n D k16, A = P from registers (the S accumulator
 *               layout is the A fragment layout), B = V (MN-major, transposed).
 * The online softmax is the one of backends/math/lpk_softmax.h (lpk_row_*), with the
 * plain kernel's P = 2^(v log2 e + bias log2 e); the masks and the LSE /
 * entropy outputs are the plain kernel's. Built for sm_90a only (the body
 * is empty elsewhere; the host takes this path only on a 9.0 device whose
 * image has it, gpu_wg_ok). */
#ifndef LP_GPU_ATTN_WG_CUH
#define LP_GPU_ATTN_WG_CUH
#include <cuda.h> /* CUtensorMap (the encoder is reached through the runtime: no libcuda link) */
#include "lp_gpu_attn.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GPU_WG_ARCH 1
#else
#define GPU_WG_ARCH 0
#endif
/* 1 in an sm_90a image (where the kernel has a body), 0 in any other (plain
 * sm_90 too, whose binaryVersion is also 90): gpu_wg_ok reads it. */
static __device__ int gpu_wg_built = GPU_WG_ARCH;
template <typename T> __device__ __forceinline__ constexpr bool gpu_is_f16() { return false; }
template <> __device__ __forceinline__ constexpr bool gpu_is_f16<gpu_f16>() { return true; }

#include "lp_gpu_wgmma.cuh"

template <typename T, int N, int TB> struct gpu_wg;
template <typename T, int TB> struct gpu_wg<T, 64, TB> : gpu_wg64<T, TB> {};
template <typename T, int TB> struct gpu_wg<T, 128, TB> : gpu_wg128<T, TB> {};
template <typename T, int TB> struct gpu_wg<T, 256, TB> : gpu_wg256<T, TB> {};

__device__ __forceinline__ void gpu_wg_fence() {
#if GPU_WG_ARCH
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
/* The compiler sees an accumulator written when the wgmma is issued, not
 * when the wait retires it: this ties every register to the wait. */
template <int N> __device__ __forceinline__ void gpu_wg_hold(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* Shared-memory matrix descriptor, 128-byte swizzle: start address, leading
 * and stride byte offsets (PTX ISA, "Matrix Descriptor Format"). */
__device__ __forceinline__ uint64_t gpu_wg_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((saddr & 0x3ffffu) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 |
         1ull << 62;
}

/* mbarriers (shared::cta): init, arrive, arrive with the bytes a TMA copy
 * will complete (expect), and the wait for the phase of a parity. */
__device__ __forceinline__ void gpu_mb_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void gpu_mb_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
/* TMA descriptors of Q, K and V (kernel parameter, __grid_constant__) */
struct gpu_tmaps { /* CUtensorMap carries its 128-byte alignment */
  CUtensorMap q, k, v;
};
__device__ __forceinline__ void gpu_mb_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
/* box (c0 = channel, c1 = row, head, batch) of map m into dst; completes on bar */
__device__ __forceinline__ void gpu_tma4(uint32_t dst, const CUtensorMap *m, int c0, int c1, int c2, int c3,
                                         uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
               ::"r"(dst), "l"((uint64_t)m), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar) : "memory");
}
/* named barriers of n threads (bar.sync waits, bar.arrive does not) */
__device__ __forceinline__ void gpu_nb_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void gpu_nb_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void gpu_mb_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
/* The copier's wait for an empty stage: try_wait with a suspend-time hint
 * (1 ms), so that the waiting thread sleeps until the phase completes
 * instead of spinning on the issue slots of the scheduler it shares with
 * computing warps (ncu, the static FP8 kernel at 16k: the copier's spin
 * was 9% of all issued instructions). */
__device__ __forceinline__ void gpu_mb_wait_idle(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity), "r"(1000000u) : "memory");
  } while (!done);
}

/* The CTA: warpgroup 0 copies (one thread issues TMA copies, each tile
 * announced on an mbarrier when it has landed), warpgroups 1 .. NW compute
 * 64 query rows each (NW = 2; D = 64: 3, whose registers allow it and whose
 * tiles are short on work per barrier); the copier gives its registers to
 * them (setmaxnreg: 24 for the copier, REGS for the others).
 * Tiles of R rows x D 16-bit elements in shared memory: [D/64][R][64], each
 * 128-byte row's 16-byte chunks permuted by chunk ^ (row % 8): the TMA
 * boxes of 64 channels x R rows with the 128-byte swizzle (a tile starts
 * 1024-aligned), the layout wgmma's descriptors read. */
template <int D_> struct gpu_wg_cfg {
  static constexpr int D = D_;
  static constexpr int NW = D == 64 ? 3 : 2, REGS = NW == 3 ? 160 : 240; /* 24 x 128 + REGS x 128 NW <= 64K */
  static constexpr int BQ = 64 * NW, BK = D <= 128 ? 128 : 64, STAGES = D == 64 ? 4 : D <= 128 ? 3 : 2;
  static constexpr int NT = 128 * (NW + 1);
  static constexpr int QB = BQ * D * 2, KB = BK * D * 2; /* bytes of the Q tile, of one K or V tile */
  static constexpr int NBAR = 1 + 4 * STAGES; /* Q; K full, K empty, V full, V empty per stage */
  static constexpr size_t NF = (size_t)D * 2; /* after the mbarriers: V's marks of gpu_nf_wg_tile */
  static constexpr size_t bytes = (size_t)QB + 2 * STAGES * KB + 8 * NBAR + NF + 1024; /* + alignment */
};

/* The mbarriers of a CTA of ST stages, 8 bytes each from bq: Q; then K
 * full, K empty, V full, V empty of each stage. */
template <int ST> struct gpu_wg_bars {
  uint32_t bq;
  __device__ __forceinline__ uint32_t q() const { return bq; }
  __device__ __forceinline__ uint32_t kfull(int s) const { return bq + 8 * (1 + s); }
  __device__ __forceinline__ uint32_t kempty(int s) const { return bq + 8 * (1 + ST + s); }
  __device__ __forceinline__ uint32_t vfull(int s) const { return bq + 8 * (1 + 2 * ST + s); }
  __device__ __forceinline__ uint32_t vempty(int s) const { return bq + 8 * (1 + 3 * ST + s); }
  /* full barriers count nf arrivals (the copier's, and the scalar loader's
   * lanes where a kernel has one), empty ones the ne computing threads */
  __device__ __forceinline__ void init(int nf, int ne = 256) const {
    gpu_mb_init(q(), 1);
    for (int s = 0; s < ST; s++) {
      gpu_mb_init(kfull(s), nf), gpu_mb_init(vfull(s), nf);
      gpu_mb_init(kempty(s), ne), gpu_mb_init(vempty(s), ne);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); /* visible to the TMA unit */
  }
};
/* The copier (one thread): the CTA's Q tile once, then tile j's K and V
 * (tiles of BK rows) into stage j % ST, each once its stage is empty. */
template <int D, int BQ, int BK, int ST>
__device__ __forceinline__ void gpu_wg_copy(const gpu_tmaps &tm, uint32_t sq, uint32_t sk, uint32_t sv,
                                            const gpu_wg_bars<ST> &br, int q0, int h, int hk, int b, int jn) {
  constexpr int QB = BQ * D * 2, KB = BK * D * 2;
  gpu_mb_expect(br.q(), QB);
#pragma unroll
  for (int c = 0; c < D / 64; c++) gpu_tma4(sq + c * BQ * 128, &tm.q, 64 * c, q0, h, b, br.q());
#pragma unroll 1
  for (int j = 0, s = 0, n = 0; j < jn; j++) {
    if (n > 0) gpu_mb_wait_idle(br.kempty(s), (n - 1) & 1);
    gpu_mb_expect(br.kfull(s), KB);
#pragma unroll
    for (int c = 0; c < D / 64; c++) gpu_tma4(sk + s * KB + c * BK * 128, &tm.k, 64 * c, j * BK, hk, b, br.kfull(s));
    if (n > 0) gpu_mb_wait_idle(br.vempty(s), (n - 1) & 1);
    gpu_mb_expect(br.vfull(s), KB);
#pragma unroll
    for (int c = 0; c < D / 64; c++) gpu_tma4(sv + s * KB + c * BK * 128, &tm.v, 64 * c, j * BK, hk, b, br.vfull(s));
    if (++s == ST) s = 0, n++;
  }
}
/* Issues S = Q K^T of computing warpgroup cw's 64 rows (Q at sq, BQ rows;
 * K at ks0, BK rows; K-major operands, 16 elements = 32 bytes along a row)
 * and commits the group. */
template <typename T, int D, int BQ, int BK>
__device__ __forceinline__ void gpu_wg_qk(float (&sacc)[BK / 2], uint32_t sq, uint32_t ks0, int cw) {
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    const uint32_t ko = (uint32_t)((kk & 3) * 32);
    const uint64_t dq = gpu_wg_desc(sq + (kk >> 2) * BQ * 128 + cw * 64 * 128 + ko, 16, 1024);
    const uint64_t dk = gpu_wg_desc(ks0 + (kk >> 2) * BK * 128 + ko, 16, 1024);
    gpu_wg<T, BK, 0>::ss(sacc, dq, dk, kk > 0);
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/* The end of a computing thread: O = acc / l, LSE and H of its rows rr[0],
 * rr[1] (accumulator slot o: row rr[(o >> 1) & 1], channel 8 (o >> 2) + 2t + (o & 1)). */
template <int D>
__device__ __forceinline__ void gpu_wg_finish(const lp_gpu_attn_args &a, const lpk_row (&st)[2],
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

template <typename T, int D>
__device__ __forceinline__ void gpu_attn_wg_body(const lp_gpu_attn_args &a, const gpu_tmaps &tm) {
#if GPU_WG_ARCH
  typedef gpu_wg_cfg<D> C;
  constexpr int BQ = C::BQ, BK = C::BK, NS = BK / 2, NO = D / 2, ST = C::STAGES;
  constexpr float L2E = 1.4426950408889634f;
  typedef gpu_mma<T> HI;
  extern __shared__ __attribute__((aligned(16))) unsigned char gpu_smem_raw[];
  const uint32_t s0 = ((uint32_t)__cvta_generic_to_shared(gpu_smem_raw) + 1023u) & ~1023u;
  const uint32_t sq = s0, sk = s0 + C::QB, sv = sk + ST * C::KB; /* Q, K stages, V stages */
  const gpu_wg_bars<ST> br{sv + ST * C::KB}; /* mbarriers */
  const int tid = threadIdx.x, wg = tid >> 7;
  const int G = a.Hq / a.Hkv, b = blockIdx.z, h = blockIdx.y, hk = h / G;
  const int Sq = a.Sq, Skv = a.Skv, off = a.off;
  const int x = blockIdx.x, xi = a.causal ? a.nqx - 1 - x : x; /* long tiles first */
  const int q0 = xi * BQ, r1 = min(q0 + BQ, Sq) - 1;
  if (q0 > r1 || Skv <= 0) return;
  const int nkt = (Skv + BK - 1) / BK;
  const int jn = a.causal ? min(nkt, gpu_floordiv(r1 + off, BK) + 1) : nkt;
  if (tid == 0) br.init(1, 128 * C::NW);
  __syncthreads();

  if (wg == 0) { /* ---- the copier: one thread issues the TMA copies -------- */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (tid == 0 && jn > 0) gpu_wg_copy<D, BQ, BK, ST>(tm, sq, sk, sv, br, q0, h, hk, b, jn);
    return;
  }

  /* ---- the computing warpgroups ------------------------------------------ */
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::REGS) : "memory");
  const int cw = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
  /* this warpgroup's rows, and the rows (hh = 0, 1) of this thread */
  const int w0 = q0 + cw * 64;
  int rr[2];
  rr[0] = w0 + warp * 16 + g, rr[1] = rr[0] + 8;

  float oacc[NO];
#pragma unroll
  for (int o = 0; o < NO; o++) oacc[o] = 0.0f;
  lpk_row st[2];
  lpk_row_init(&st[0]), lpk_row_init(&st[1]);
  const bool ent = a.ent != nullptr;
  uint32_t pf[BK / 16][4]; /* P of the previous tile: A fragments of k-steps of 16 keys */
  /* O += P V_jv (MN-major V: LBO steps 64 channels, SBO 8 keys) */
  auto pv = [&](int jv) {
    const uint32_t vs = sv + (jv % ST) * C::KB;
#pragma unroll
    for (int ks = 0; ks < BK / 16; ks++) gpu_wg<T, D, 1>::rs(oacc, pf[ks], gpu_wg_desc(vs + ks * 16 * 128, BK * 128, 1024));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  };
  auto qk = [&](float (&sacc)[NS], int j) { gpu_wg_qk<T, D, BQ, BK>(sacc, sq, sk + (j % ST) * C::KB, cw); };
  /* tile j's K (V) is in: its mbarrier's phase j / ST */
  auto kin = [&](int j) { gpu_mb_wait(br.kfull(j % ST), (uint32_t)(j / ST) & 1); };
  auto vin = [&](int j) { gpu_mb_wait(br.vfull(j % ST), (uint32_t)(j / ST) & 1); };
  /* SPEC 2 (lp_gpu_nonfinite.cuh): a tile that some row of the CTA does not see
   * in full has its V checked once it is in (all computing threads, named
   * barrier 1 + NW); non-finite elements are zeroed before P V and given
   * back after it to the rows that see them (nfm: per channel the first
   * such key). */
  short *nfm = (short *)(gpu_smem_raw + (br.bq + 8 * C::NBAR - (uint32_t)__cvta_generic_to_shared(gpu_smem_raw)));
  auto vcheck = [&](int jv) -> bool {
    if (!(a.causal && jv * BK + BK - 1 > q0 + off) || !GPU_NF) return false;
    unsigned short *vt = (unsigned short *)(gpu_smem_raw + (sv + (jv % ST) * C::KB - (uint32_t)__cvta_generic_to_shared(gpu_smem_raw)));
    return gpu_nf_wg_tile<false>(vt, BK, D, gpu_nf_bf<T>::v, nfm, tid - 128, 128 * C::NW, 1 + C::NW);
  };
  auto vpoison = [&](int jv) { /* slot o: row rr[(o >> 1) & 1], channel 8 (o >> 2) + 2t + (o & 1) */
    const int lim0 = rr[0] + off - jv * BK, lim1 = rr[1] + off - jv * BK;
#pragma unroll
    for (int o = 0; o < NO; o++)
      if (nfm[8 * (o >> 2) + 2 * t + (o & 1)] <= ((o >> 1) & 1 ? lim1 : lim0)) oacc[o] += gpu_nf_nan();
  };
  /* The softmax of tile j: scores (slot i of the accumulator is row
   * rr[(i >> 1) & 1], key c0 + 8 (i >> 2) + 2t + (i & 1)) -> P in place;
   * the row states advanced, O's rescale in alpha. */
  float alpha[2]; /* O's rescale of the tile */
  const float sl2 = a.sm_scale * L2E;
  auto softmax = [&](float (&sacc)[NS], int j) {
    const int c0 = j * BK;
    const bool masked = c0 + BK > Skv || (a.causal && c0 + BK - 1 > w0 + off);
    /* row maxima of the raw scores (sm_scale > 0: max(s) sm_scale is the max
     * of the scaled scores); masked keys are -inf */
    float smax[2] = {gpu_ninf(), gpu_ninf()};
    lpk_step stp[2];
    bool vis[2];
    if (masked) { /* keys past Skv, or after the row (causal) */
      const int kl0 = (a.causal ? min(Skv - 1, rr[0] + off) : Skv - 1) - c0 - 2 * t;
      const int kl1 = (a.causal ? min(Skv - 1, rr[1] + off) : Skv - 1) - c0 - 2 * t;
#pragma unroll
      for (int i = 0; i < NS; i++)
        if (8 * (i >> 2) + (i & 1) > ((i >> 1) & 1 ? kl1 : kl0)) sacc[i] = gpu_ninf();
    }
    { /* four partial maxima per row: short dependency chains */
      float mx[2][4];
#pragma unroll
      for (int u = 0; u < 8; u++) mx[u & 1][u >> 1] = gpu_ninf();
#pragma unroll
      for (int i = 0; i < NS; i++) mx[(i >> 1) & 1][(i >> 2) & 3] = fmaxf(mx[(i >> 1) & 1][(i >> 2) & 3], sacc[i]);
#pragma unroll
      for (int hh = 0; hh < 2; hh++) smax[hh] = fmaxf(fmaxf(mx[hh][0], mx[hh][1]), fmaxf(mx[hh][2], mx[hh][3]));
    }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      vis[hh] = !(a.causal && c0 > rr[hh] + off);
      stp[hh] = lpk_row0_begin(&st[hh], __fmul_rn(gpu_rmax<32>(smax[hh]), a.sm_scale));
      if (!vis[hh]) stp[hh].alpha = 1.0f, stp[hh].bias = 0.0f; /* P = exp(-inf) = 0 */
    }
    /* P = 2^(s sm_scale log2 e + bias log2 e): one FFMA and one MUFU */
    const float b2[2] = {stp[0].bias * L2E, stp[1].bias * L2E};
    float ps[2][4], pss[2][4]; /* four partial sums per row */
#pragma unroll
    for (int u = 0; u < 8; u++) ps[u & 1][u >> 1] = pss[u & 1][u >> 1] = 0.0f;
    if (ent) { /* sum P s, scaled by sm_scale per row in fold */
#pragma unroll
      for (int i = 0; i < NS; i++) {
        const int hh = (i >> 1) & 1, q = (i >> 2) & 3;
        const float v = sacc[i], p = gpu_exp2_fast(fmaf(v, sl2, b2[hh]));
        ps[hh][q] += p;
        if (p != 0.0f) pss[hh][q] += p * v;
        sacc[i] = p;
      }
    } else {
#pragma unroll
      for (int i = 0; i < NS; i++) {
        const float p = gpu_exp2_fast(fmaf(sacc[i], sl2, b2[(i >> 1) & 1]));
        ps[(i >> 1) & 1][(i >> 2) & 3] += p;
        sacc[i] = p;
      }
    }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) { /* the row states (O is rescaled in fold) */
      const float sp = gpu_rsum<32>((ps[hh][0] + ps[hh][1]) + (ps[hh][2] + ps[hh][3]));
      const float sps = ent ? __fmul_rn(gpu_rsum<32>((pss[hh][0] + pss[hh][1]) + (pss[hh][2] + pss[hh][3])), a.sm_scale) : 0.0f;
      if (vis[hh]) lpk_row0_end(&st[hh], &stp[hh], sp, sps);
      alpha[hh] = stp[hh].alpha;
    }
    gpu_wg_hold(sacc); /* P is computed before the caller's wait */
  };
  /* After O holds every earlier tile: the row states, O *= alpha, P -> pf. */
  auto fold = [&](float (&sacc)[NS]) {
#pragma unroll
    for (int hh = 0; hh < 2; hh++)
      if (gpu_warp_any(alpha[hh] != 1.0f)) /* alpha 1 (the max held): acc is unchanged */
#pragma unroll
        for (int o = 0; o < NO; o++)
          if (((o >> 1) & 1) == hh) oacc[o] *= alpha[hh];
#pragma unroll
    for (int ks = 0; ks < BK / 16; ks++) /* slots 8ks .. 8ks + 7 */
#pragma unroll
      for (int u = 0; u < 4; u++) pf[ks][u] = HI::pack(sacc[8 * ks + 2 * u], sacc[8 * ks + 2 * u + 1]);
  };

  /* Tile 0 alone; then tile j issues S_j = Q K_j^T and O += P_(j-1) V_(j-1)
   * together, and the softmax of S_j runs while the second is on the tensor
   * cores. No branch inside a wgmma pipeline stage (ptxas would serialize).
   * A stage is given back (empty) once this warpgroup's MMAs that read it
   * have completed. */
  /* The computing warpgroups take turns to issue their MMAs (named barriers
   * 1 .. NW: warpgroup cw waits on 1 + cw, then lets the next one go), so
   * that one's softmax runs under the others' MMAs. */
  auto my_turn = [&]() { gpu_nb_sync(1 + cw, 256); };
  auto your_turn = [&]() { gpu_nb_arrive(1 + (cw + 1) % C::NW, 256); };
  if (cw == C::NW - 1) gpu_nb_arrive(1, 256); /* warpgroup 0 starts */
  if (jn > 0) {
    float sacc[NS];
    gpu_mb_wait(br.q(), 0);
    kin(0);
    my_turn();
    gpu_wg_fence();
    qk(sacc, 0);
    your_turn();
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    gpu_mb_arrive(br.kempty(0));
    gpu_wg_hold(sacc);
    softmax(sacc, 0);
    fold(sacc);
  }
  for (int j = 1; j < jn; j++) {
    float sacc[NS];
    kin(j);
    vin(j - 1);
    const bool vnf = vcheck(j - 1);
    gpu_wg_hold(oacc);
    my_turn();
    gpu_wg_fence();
    qk(sacc, j);
    pv(j - 1);
    your_turn();
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    gpu_mb_arrive(br.kempty(j % ST));
    gpu_wg_hold(sacc);
    softmax(sacc, j);
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); /* P_(j-1) V_(j-1) is in */
    gpu_mb_arrive(br.vempty((j - 1) % ST));
    gpu_wg_hold(oacc);
    if (vnf) vpoison(j - 1);
    fold(sacc);
  }
  if (jn > 0) { /* the last tile's P V */
    vin(jn - 1);
    const bool vnf = vcheck(jn - 1);
    gpu_wg_hold(oacc);
    my_turn();
    gpu_wg_fence();
    pv(jn - 1);
    your_turn();
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    gpu_wg_hold(oacc);
    if (vnf) vpoison(jn - 1);
  }

  if (cw == 0) my_turn(); /* takes the last warpgroup's last arrival */

  gpu_wg_finish<D>(a, st, oacc, rr, b, h, t);
#elif defined(__CUDA_ARCH__)
  __trap(); /* never launched here (gpu_wg_ok reads gpu_wg_built) */
#endif
}

#include "lp_gpu_wg_host.cuh"

} // namespace LP_GPU_NS
#endif
