/* The mainloop of the sm_90a prefill kernel of precision HIGH (issue 16),
 * the 16-bit operand class: warpgroup MMAs (wgmma) on operands in
 * 128-byte-swizzled shared memory. Its CTA (prologue, copier), epilogue and
 * primitives are the family's (lp_gpu_sm90_cta.cuh, lp_gpu_sm90_epilogue.cuh,
 * lp_gpu_sm90_prim.cuh, issue 30); its host side lp_gpu_wg_host.cuh. CUDA
 * only; the HIP rendering is an empty header. */

/* Prefill attention on Hopper's warpgroup MMAs, precision HIGH (f16/bf16
 * inputs, f32 accumulation), the case gpu_attn_spec() calls 0: no PASA, no
 * f16 scores, one split. A CTA of two warpgroups owns 128 query rows of one
 * (b, q head), each warpgroup 64 of them; it walks the visible KV tiles of
 * BK keys, double-buffered by cp.async into the swizzled layout that wgmma
 * reads through shared-memory descriptors:
 *   S = Q K^T   wgmma m64 n BK k16, A = Q and B = K from shared memory (K-major);
 *   O += P V    wgmma m64 n D k16, A = P from registers (the S accumulator
 *               layout is the A fragment layout), B = V (MN-major, transposed).
 * D = 96 reads its tiles in boxes of 32 channels, 64-byte swizzle (gpu_wg_cfg).
 * The online softmax is the one of backends/math/lpk_softmax.h (lpk_row_*), with the
 * plain kernel's P = 2^(v log2 e + bias log2 e); the masks and the LSE /
 * entropy outputs are the plain kernel's. Built for sm_90a only (the body
 * is empty elsewhere; the host takes this path only on a 9.0 device whose
 * image has it, gpu_wg_ok). */
#ifndef LP_GPU_ATTN_WG_CUH
#define LP_GPU_ATTN_WG_CUH
#include "lp_gpu_sm90_cta.cuh"
#include "lp_gpu_sm90_epilogue.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
template <typename T, int D>
__device__ __forceinline__ void gpu_attn_wg_body(const lp_gpu_attn_args &a, const gpu_tmaps &tm) {
#if GPU_WG_ARCH
  typedef gpu_wg_cfg<D> C;
  constexpr int BQ = C::BQ, BK = C::BK, NS = BK / 2, NO = D / 2, ST = C::ST;
  constexpr float L2E = 1.4426950408889634f;
  typedef gpu_mma<T> HI;
  const gpu_sm90_smem<C> sm; /* Q, K stages, V stages, mbarriers */
  const uint32_t sq = sm.sq, sk = sm.sk, sv = sm.sv;
  const gpu_wg_bars<ST> &br = sm.br;
  const gpu_sm90_cta cta(a, BQ);
  if (cta.idle()) return;
  const int tid = cta.tid, wg = cta.wg, b = cta.b, h = cta.h, hk = cta.hk, q0 = cta.q0;
  const int Skv = cta.Skv, off = cta.off;
  const int jn = gpu_sm90_visible(a, (Skv + BK - 1) / BK, cta.r1, off, BK);
  if (tid == 0) br.init(1, 128 * C::NW);
  __syncthreads();

  if (wg == 0) { /* ---- the copier: one thread issues the TMA copies -------- */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (tid == 0 && jn > 0) gpu_sm90_copy<C>(tm, sm, q0, h, hk, b, jn);
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
  /* O += P V_jv (MN-major V: LBO steps a box of C::W channels, SBO 8 keys) */
  constexpr int RB = C::RB, SW = RB == 128 ? 1 : 2;
  auto pv = [&](int jv) {
    const uint32_t vs = sv + (jv % ST) * C::KB;
#pragma unroll
    for (int ks = 0; ks < BK / 16; ks++)
      gpu_wg<T, D, 1>::rs(oacc, pf[ks], gpu_wg_desc(vs + ks * 16 * RB, BK * RB, 8 * RB, SW));
    gpu_wg_commit();
  };
  auto qk = [&](float (&sacc)[NS], int j) { gpu_wg_qk<T, D, BQ, BK, RB>(sacc, sq, sk + (j % ST) * C::KB, cw); };
  /* tile j's K (V) is in: its mbarrier's phase j / ST */
  auto kin = [&](int j) { gpu_mb_wait(br.kfull(j % ST), (uint32_t)(j / ST) & 1); };
  auto vin = [&](int j) { gpu_mb_wait(br.vfull(j % ST), (uint32_t)(j / ST) & 1); };
  /* SPEC 2 (lp_gpu_nonfinite.cuh): a tile that some row of the CTA does not see
   * in full has its V checked once it is in (all computing threads, named
   * barrier 1 + NW); non-finite elements are zeroed before P V and given
   * back after it to the rows that see them (nfm: per channel the first
   * such key). */
  short *nfm = (short *)gpu_sm90_at(br.bq + 8 * C::NBAR);
  auto vcheck = [&](int jv) -> bool {
    if (!(a.causal && jv * BK + BK - 1 > q0 + off) || !GPU_NF) return false;
    unsigned short *vt = (unsigned short *)gpu_sm90_at(sv + (jv % ST) * C::KB);
    return gpu_nf_wg_tile<false, C::W>(vt, BK, D, gpu_nf_bf<T>::v, nfm, tid - 128, 128 * C::NW, 1 + C::NW);
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
    gpu_wg_wait<0>();
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
    gpu_wg_wait<1>();
    gpu_mb_arrive(br.kempty(j % ST));
    gpu_wg_hold(sacc);
    softmax(sacc, j);
    gpu_wg_wait<0>(); /* P_(j-1) V_(j-1) is in */
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
    gpu_wg_wait<0>();
    gpu_wg_hold(oacc);
    if (vnf) vpoison(jn - 1);
  }

  if (cw == 0) my_turn(); /* takes the last warpgroup's last arrival */

  gpu_sm90_finish<D>(a, st, oacc, rr, b, h, t);
#elif defined(__CUDA_ARCH__)
  __trap(); /* never launched here (gpu_wg_ok reads gpu_wg_built) */
#endif
}

} // namespace LP_GPU_NS
#endif
