/* The mainloop of the sm_90a prefill kernel of the low precisions (issue
 * 16), the low formats via 16-bit operands: the CTA of the family
 * (lp_gpu_sm90_cta.cuh: copier, TMA stages, mbarriers, two computing
 * warpgroups; lp_gpu_sm90_epilogue.cuh) over bf16 operands, with SPEC 3's
 * low-tile arithmetic. CUDA only; the HIP rendering is an empty header. */

/* Prefill attention on Hopper's warpgroup MMAs for the low formats (NVFP4,
 * MXFP4, FP8) where every visited tile is low: non-causal calls and leaky
 * causal ones (causal diagonal tiles are high, SPEC 4, and THRIFT selects
 * high tiles: those calls take the mma.sync kernel). Operands are the
 * exact bf16 values code x group scale (Q, K along D; V along S) that
 * gpu_dequant_rows / gpu_dequant_kv write; the f32 outer scales stay
 * outside the products, as in the mma.sync kernel's low tiles:
 *   S = (Q^ K^T) * (qout[row] kout[key]) * sm_scale, SPEC's 64-key tiles
 *   one after the other (a stage of 128 keys is two of them: each has its
 *   own running max, P quantizer domain and V outer scales);
 *   P^ = the tile's P quantized per row (gpu_p_low, lp_gpu_attn_plow.cuh);
 *   O = O alpha + (P^ V^) * (pout[row] vout[tile][chan]), P^ V^ on the
 *   tensor cores into a temporary accumulator of N channels.
 * Warpgroup 0 copies: thread 0 issues the TMA copies, warp 1 stages each
 * tile's outer scales of K and V (its lanes arrive on the tile's "full"
 * mbarriers with the copy). */
#ifndef LP_GPU_ATTN_WGL_CUH
#define LP_GPU_ATTN_WGL_CUH
#include "lp_gpu_sm90_cta.cuh"
#include "lp_gpu_sm90_epilogue.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {

template <int D, int FMT>
__device__ __forceinline__ void gpu_attn_wgl_body(const lp_gpu_attn_args &a, const gpu_tmaps &tm) {
#if GPU_WG_ARCH
  typedef gpu_wgl_cfg<D> C;
  constexpr int BQ = C::BQ, BK = C::BK, NS = BK / 2, NO = D / 2, ST = C::ST, N = C::N, HV = C::HALVES;
  constexpr bool SC = FMT != LPATTN_FMT_MXFP4; /* outer scales (MXFP4 has none: 1) */
  constexpr float L2E = 1.4426950408889634f;
  typedef gpu_mma<gpu_bf16> LO;
  const gpu_sm90_smem<C> sm; /* Q, K stages, V stages, scalars, mbarriers */
  const uint32_t sq = sm.sq, sk = sm.sk, sv = sm.sv;
  float *const scal = sm.scal;
  const gpu_wg_bars<ST> &br = sm.br;

  const gpu_sm90_cta cta(a, BQ);
  if (cta.idle()) return;
  const int tid = cta.tid, wg = cta.wg, b = cta.b, h = cta.h, hk = cta.hk, q0 = cta.q0;
  const int Sq = cta.Sq, Skv = cta.Skv, off = cta.off;
  const int jn = gpu_sm90_tiles(a, q0, cta.r1, BK);
  if (jn <= 0) {
    gpu_sm90_empty<D>(a, q0, tid, b, h);
    return;
  }
  if (tid == 0) br.init(SC ? 33 : 1);
  __syncthreads();

  if (wg == 0) { /* ---- the copier ----------------------------------------- */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tid == 0) gpu_sm90_copy<C>(tm, sm, q0, h, hk, b, jn);
    if (SC && tid >= 32 && tid < 64) /* warp 1: the outer scales of K and V (FP8: times P's 1/448 too) */
      gpu_sm90_scales<D, BK, ST, C::SCF>(a, scal, br, jn, b, hk, tid & 31, FMT == LPATTN_FMT_FP8 ? 1.0f / 448.0f : 1.0f);
    return;
  }

  /* ---- the two computing warpgroups -------------------------------------- */
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int cw = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31, t = lane & 3;
  const int w0 = q0 + cw * 64;
  int rr[2];
  rr[0] = w0 + warp * 16 + (lane >> 2), rr[1] = rr[0] + 8;
  float qo[2]; /* Q's outer scales of the thread's rows */
#pragma unroll
  for (int hh = 0; hh < 2; hh++) qo[hh] = !SC ? 1.0f : rr[hh] < Sq ? a.qq.outer[((int64_t)b * a.Hq + h) * Sq + rr[hh]] : 0.0f;

  float oacc[NO];
#pragma unroll
  for (int o = 0; o < NO; o++) oacc[o] = 0.0f;
  lpk_row st[2];
  lpk_row_init(&st[0]), lpk_row_init(&st[1]);
  const bool ent = a.ent != nullptr;
  auto my_turn = [&]() { gpu_nb_sync(1 + cw, 256); };
  auto your_turn = [&]() { gpu_nb_arrive(2 - cw, 256); };
  if (cw == 1) gpu_nb_arrive(1, 256); /* warpgroup 0 starts */
  /* S_j = Q K_j^T into sacc */
  auto issue_s = [&](float (&sacc)[NS], int j) {
    gpu_mb_wait(br.kfull(j % ST), (uint32_t)(j / ST) & 1);
    my_turn();
    gpu_wg_fence();
    gpu_wg_qk<gpu_bf16, D, BQ, BK>(sacc, sq, sk + (j % ST) * C::KB, cw);
    your_turn();
  };
  const float sl2 = a.sm_scale * L2E;
  uint32_t pf[BK / 16][4]; /* P^ of the last softmaxed tile: bf16 A fragments of k-steps of 16 keys */
  float pout[HV][2], alph[HV][2]; /* its P outer scales and O rescales, per SPEC tile and row */
  /* Tile j's SPEC tiles in order (S_j complete in sacc): scores, softmax
   * step, P^ (slot i of the accumulator: row rr[(i >> 1) & 1], key
   * 8 (i >> 2) + 2t + (i & 1)); gives K_j's stage back; P^ -> pf. */
  auto soft = [&](float (&sacc)[NS], int j) {
    const float *ks = scal + (j % ST) * C::SCF;
#pragma unroll
    for (int hv = 0; hv < HV; hv++) {
      const int c0 = j * BK + 64 * hv;
      const bool masked = c0 + 64 > Skv || (a.causal && c0 + 63 > w0 + off);
      /* x = S^ qout kout; the score is x sm_scale (sm_scale > 0: the row max
       * of x scaled is the scores' max) */
      if (SC)
#pragma unroll
        for (int u = 0; u < 32; u++) {
          const int i = 32 * hv + u, kl = 8 * (u >> 2) + 2 * t + (u & 1);
          sacc[i] = __fmul_rn(sacc[i], __fmul_rn(qo[(u >> 1) & 1], ks[64 * hv + kl]));
        }
      if (masked) /* keys past Skv, or after the row (causal) */
#pragma unroll
        for (int u = 0; u < 32; u++) {
          const int hh = (u >> 1) & 1, key = c0 + 8 * (u >> 2) + 2 * t + (u & 1);
          if (key >= Skv || (a.causal && key > rr[hh] + off)) sacc[32 * hv + u] = gpu_ninf();
        }
      float smax[2] = {gpu_ninf(), gpu_ninf()};
#pragma unroll
      for (int u = 0; u < 32; u++) smax[(u >> 1) & 1] = fmaxf(smax[(u >> 1) & 1], sacc[32 * hv + u]);
      lpk_step stp[2];
      bool vis[2];
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        vis[hh] = !(a.causal && c0 > rr[hh] + off);
        stp[hh] = lpk_row0_begin(&st[hh], __fmul_rn(gpu_rmax<32>(smax[hh]), a.sm_scale));
        if (!vis[hh]) stp[hh].alpha = 1.0f, stp[hh].bias = 0.0f; /* P = exp(-inf) = 0 */
      }
      /* P = 2^(x sm_scale log2 e + bias log2 e), one FFMA; MXFP4:
       * 2^((x sm_scale + bias) log2 e), so that the row's max gives P = 1
       * exactly (its power-of-two P scale jumps at amax = 1) */
      const float b2[2] = {stp[0].bias * L2E, stp[1].bias * L2E};
      float ps[2] = {0.0f, 0.0f}, pss[2] = {0.0f, 0.0f};
#pragma unroll
      for (int u = 0; u < 32; u++) {
        const int i = 32 * hv + u, hh = (u >> 1) & 1;
        const float x = sacc[i];
        const float p = FMT == LPATTN_FMT_MXFP4 ? gpu_exp2_fast((__fmul_rn(x, a.sm_scale) + stp[hh].bias) * L2E)
                                                : gpu_exp2_fast(fmaf(x, sl2, b2[hh]));
        ps[hh] += p;
        if (ent && p != 0.0f) pss[hh] += p * x;
        sacc[i] = p;
      }
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const float sp = gpu_rsum<32>(ps[hh]), sps = ent ? __fmul_rn(gpu_rsum<32>(pss[hh]), a.sm_scale) : 0.0f;
        if (vis[hh]) lpk_row0_end(&st[hh], &stp[hh], sp, sps);
        alph[hv][hh] = stp[hh].alpha;
      }
      /* P^: the quantizer's slots are 16-key groups m of a row (4 per lane) */
      float pq[2][16];
#pragma unroll
      for (int u = 0; u < 32; u++) {
        const int kb = u >> 2; /* 8-key block of the tile; group kb >> 1 */
        pq[(u >> 1) & 1][4 * (kb >> 1) + 2 * (kb & 1) + (u & 1)] = sacc[32 * hv + u];
      }
      gpu_p_low<32, 2, 16, false>(pq, pout[hv], FMT, a.mx_round_up);
#pragma unroll
      for (int u = 0; u < 32; u++) {
        const int kb = u >> 2;
        sacc[32 * hv + u] = pq[(u >> 1) & 1][4 * (kb >> 1) + 2 * (kb & 1) + (u & 1)];
      }
    }
    gpu_mb_arrive(br.kempty(j % ST)); /* K and its outer scales are read */
#pragma unroll
    for (int kq = 0; kq < BK / 16; kq++)
#pragma unroll
      for (int u = 0; u < 4; u++) pf[kq][u] = LO::pack(sacc[8 * kq + 2 * u], sacc[8 * kq + 2 * u + 1]);
  };
  /* O = O alpha + (P^ V^) (pout vout) of tile j, per SPEC tile and N
   * channels (V is MN-major: LBO steps 64 channels, SBO 8 keys); the first
   * wait also retires an S issued before. */
  auto pv = [&](int j) {
    const int s = j % ST;
    const float *vs = scal + s * C::SCF + BK;
    gpu_mb_wait(br.vfull(s), (uint32_t)(j / ST) & 1);
    const uint32_t vst = sv + s * C::KB;
#pragma unroll
    for (int hv = 0; hv < HV; hv++) {
      const bool rescale = gpu_warp_any(alph[hv][0] != 1.0f || alph[hv][1] != 1.0f); /* else O is unchanged */
#pragma unroll
      for (int c = 0; c < D / N; c++) {
        float tacc[N / 2];
        gpu_wg_fence();
#pragma unroll
        for (int kq = 0; kq < 4; kq++)
          gpu_wg<gpu_bf16, N, 1>::rs(tacc, pf[4 * hv + kq],
                                     gpu_wg_desc(vst + (c * N / 64) * BK * 128 + (64 * hv + 16 * kq) * 128, BK * 128, 1024),
                                     kq > 0);
        gpu_wg_commit();
        gpu_wg_wait<0>();
        gpu_wg_hold(tacc);
        if (rescale)
#pragma unroll
          for (int o = 0; o < N / 2; o++) oacc[c * (N / 2) + o] *= alph[hv][(o >> 1) & 1];
#pragma unroll
        for (int o = 0; o < N / 2; o++) { /* FP8: the loader stored pout vout (pout = 1/448) */
          const int hh = (o >> 1) & 1, ch = c * N + 8 * (o >> 2) + 2 * t + (o & 1);
          const float f = FMT == LPATTN_FMT_FP8 ? vs[hv * D + ch] : SC ? pout[hv][hh] * vs[hv * D + ch] : pout[hv][hh];
          oacc[c * (N / 2) + o] = fmaf(tacc[o], f, oacc[c * (N / 2) + o]);
        }
      }
    }
    gpu_mb_arrive(br.vempty(s));
  };

  gpu_mb_wait(br.q(), 0);
  if constexpr (FMT == LPATTN_FMT_FP8) {
    /* FP8: S_j, its softmax, P_j V_j in turn (its P^ is cheap: overlapping
     * S_j with P_(j-1) V_(j-1) measured slower, the registers spilled) */
#pragma unroll 1
    for (int j = 0; j < jn; j++) {
      float sacc[NS];
      issue_s(sacc, j);
      gpu_wg_wait<0>();
      gpu_wg_hold(sacc);
      soft(sacc, j);
      pv(j);
    }
  } else {
    /* Tile 0 alone; then tile j issues S_j, computes P_(j-1) V_(j-1) while
     * S_j is on the tensor cores, and softmaxes S_j (no wgmma in flight
     * across the loop's back edge: ptxas would serialize them, C7515). */
    {
      float sacc[NS];
      issue_s(sacc, 0);
      gpu_wg_wait<0>();
      gpu_wg_hold(sacc);
      soft(sacc, 0);
    }
#pragma unroll 1
    for (int j = 1; j < jn; j++) {
      float sacc[NS];
      issue_s(sacc, j);
      pv(j - 1);
      gpu_wg_hold(sacc);
      soft(sacc, j);
    }
    pv(jn - 1);
  }
  if (cw == 0) my_turn(); /* takes warpgroup 1's last arrival */
  gpu_sm90_end<D>(a, st, oacc, rr, b, h, t);
#elif defined(__CUDA_ARCH__)
  __trap(); /* never launched here (gpu_wg_ok reads gpu_wg_built) */
#endif
}

} // namespace LP_GPU_NS
#endif
