/* The mainloop of the sm_90a FP8 prefill kernel on E4M3 warpgroup MMAs
 * (issue 16), the E4M3 operand class: the CTA of lp_gpu_sm90_cta.cuh over
 * the quantized codes themselves (no bf16 copy). CUDA only; the HIP
 * rendering is an empty header. */

/* Prefill attention for precision FP8 at D = 128 on Hopper's E4M3 wgmma:
 * TMA brings the E4M3 codes of Q and K ([rows][D], one byte each) and of V
 * in its AXIS_S layout ([D][keys]: V^T, K-major for the P V product) into
 * 128-byte-swizzled shared memory; the f32 scales of SPEC 2 stay outside
 * the products (per-token Q and K scales on the score tile, per-channel V
 * scales of each 64-key tile on that tile's product, P at the fixed 448):
 *   S  = (Q^ K^^T) qout[row] kout[key] sm_scale     wgmma m64n128k32 e4m3;
 *   P^ = E4M3(448 P), from the S accumulators to the A fragments of the
 *        next product (gpu_wg8_pfrag: cvt, byte permutes, 4 shuffles per
 *        32 keys);
 *   O  = O alpha + (P^ V^) vout[tile][chan] / 448   wgmma m64n128k32 e4m3,
 *        one product per SPEC tile of 64 keys (each has its own V scales).
 * The CTA is the low-format one (lp_gpu_sm90_cta.cuh): a copier warpgroup (thread 0: TMA; warp 1:
 * the K and V outer scales of each stage) and two computing warpgroups of
 * 64 query rows that take turns on the tensor cores. Causal (not leaky)
 * calls stop at gpu_wgl_kw and leave the rows' state to the mma.sync
 * kernel, as the wgl kernel does. */
#ifndef LP_GPU_ATTN_WG8_CUH
#define LP_GPU_ATTN_WG8_CUH
#include "lp_gpu_sm90_cta.cuh"
#include "lp_gpu_sm90_epilogue.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {

/* The A fragments of the P V product for 32 keys (k-chunk kc of the S
 * tile, slots 16 kc .. 16 kc + 15 of the m64n128 accumulator: row hh =
 * (i >> 1) & 1, key 8 (i >> 2) + 2t + (i & 1)), P already times 448:
 * codes pairs c[hh][m] of keys 8m + 2t, +1 (m = 0..3 within the chunk);
 * thread t needs keys 4t .. 4t + 3 (a0, a1) and 16 + 4t .. (a2, a3),
 * which lanes 2(t % 2) and 2(t % 2) + 1 of its quad hold. Two rounds of
 * one shuffle per row: in round 1 lane t reads quad lane 2(t % 2) + t / 2,
 * which sends its pairs m = its t & 1 and m + 2; round 2 the other one. */
__device__ __forceinline__ void gpu_wg8_pfrag(const float *s, uint32_t (&f)[4], int t) {
  const int lane = threadIdx.x & 31, qb = lane & ~3;
  const int src1 = qb | (2 * (t & 1) + (t >> 1)), src2 = qb | (2 * (t & 1) + 1 - (t >> 1));
  const uint32_t sel1 = (t & 1) ? 0x7632u : 0x5410u, sel2 = (t & 1) ? 0x5410u : 0x7632u;
  const uint32_t slo = t < 2 ? 0x5410u : 0x1054u, shi = t < 2 ? 0x7632u : 0x3276u;
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    uint32_t c[4];
#pragma unroll
    for (int m = 0; m < 4; m++) {
      unsigned short e2 = 0;
#if GPU_WG_ARCH
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(e2) : "f"(s[4 * m + 2 * hh + 1]), "f"(s[4 * m + 2 * hh]));
#endif
      c[m] = e2;
    }
    const uint32_t A = c[0] | c[1] << 16, B = c[2] | c[3] << 16;
    const uint32_t r1 = __shfl_sync(0xffffffffu, __byte_perm(A, B, sel1), src1);
    const uint32_t r2 = __shfl_sync(0xffffffffu, __byte_perm(A, B, sel2), src2);
    f[hh] = __byte_perm(r1, r2, slo);     /* a0 / a1: keys 4t .. 4t + 3 of row hh */
    f[2 + hh] = __byte_perm(r1, r2, shi); /* a2 / a3: keys 16 + 4t .. */
  }
}

/* A descale of SPEC 11 ([b][kv head], element strides sd; NULL: 1). */
__device__ __forceinline__ float gpu_desc(const float *p, const int64_t (&sd)[2], int b, int hk) {
  return p ? p[b * sd[0] + hk * sd[1]] : 1.0f;
}

/* STAT = false: precision FP8 (SPEC 3's domains, the scales above);
 * STAT = true: static-scale FP8 (SPEC 11): one descale per (batch, KV head)
 * for each of Q, K, V, folded into the exponent's factor and O's fold, and
 * every tile (the diagonal ones too) runs here, masked in soft(). */
template <int D, bool STAT>
__device__ __forceinline__ void gpu_attn_wg8_body(const lp_gpu_attn_args &a, const gpu_tmaps &tm) {
#if GPU_WG_ARCH
  typedef gpu_wg8_cfg<D> C;
  constexpr int BQ = C::BQ, BK = C::BK, NO = D / 2, ST = C::ST;
  constexpr float L2E = 1.4426950408889634f, L2_448 = 8.807354922057604f; /* log2(448) */
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
  if (tid == 0) br.init(STAT ? 1 : 33);
  __syncthreads();

  if (wg == 0) { /* ---- the copier ----------------------------------------- */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tid == 0) gpu_sm90_copy<C>(tm, sm, q0, h, hk, b, jn);
    if (!STAT && tid >= 32 && tid < 64) /* warp 1: the outer scales of K and V (times P's 1/448) */
      gpu_sm90_scales<D, BK, ST, C::SCF>(a, scal, br, jn, b, hk, tid & 31, 1.0f / 448.0f);
    return;
  }

  /* ---- the two computing warpgroups -------------------------------------- */
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int cw = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31, t = lane & 3;
  const int w0 = q0 + cw * 64;
  int rr[2];
  rr[0] = w0 + warp * 16 + (lane >> 2), rr[1] = rr[0] + 8;
  /* Q's outer scale per row (0, an all-zero row whose codes and scores are
   * 0 anyway: 1), and the exponent's factor, kept >= FLT_MIN so that a
   * masked -inf times it stays -inf (a NaN stays NaN) */
  float qo[2], qs2[2];
  /* static: y = S^ k_descale, qo = q_descale (the score is y qo sm_scale); O times vd / 448 at the end */
  const float sqk = STAT ? gpu_desc(a.q_desc, a.sdesc[0], b, hk) : 1.0f, kdsc = STAT ? gpu_desc(a.k_desc, a.sdesc[1], b, hk) : 1.0f;
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    const float v = STAT ? sqk : rr[hh] < Sq ? a.qq.outer[((int64_t)b * a.Hq + h) * Sq + rr[hh]] : 0.0f;
    qo[hh] = v == 0.0f ? 1.0f : v;
    const float f = __fmul_rn(qo[hh], a.sm_scale) * L2E;
    qs2[hh] = f < 1.17549435e-38f ? 1.17549435e-38f : f;
  }

  float oacc[NO];
#pragma unroll
  for (int o = 0; o < NO; o++) oacc[o] = 0.0f;
  lpk_row st[2];
  lpk_row_init(&st[0]), lpk_row_init(&st[1]);
  const bool ent = a.ent != nullptr;
  auto my_turn = [&]() { gpu_nb_sync(1 + cw, 256); };
  auto your_turn = [&]() { gpu_nb_arrive(2 - cw, 256); };
  if (cw == 1) gpu_nb_arrive(1, 256); /* warpgroup 0 starts */
  uint32_t pf[BK / 32][4]; /* P^ codes of the tile: A fragments of k-chunks of 32 keys */
  float alph[2][2];        /* O's rescale per SPEC tile and row */
  /* S_j = Q^ K_j^T (codes), issued in this warpgroup's turn */
  auto issue_s = [&](float (&sacc)[BK / 2], int j) {
    const int s = j % ST;
    gpu_mb_wait(br.kfull(s), (uint32_t)(j / ST) & 1);
    my_turn();
    gpu_wg_fence();
#pragma unroll
    for (int kk = 0; kk < D / 32; kk++)
      gpu_wg8_128::ss(sacc, gpu_wg_desc(sq + cw * 64 * 128 + kk * 32, 16, 1024),
                      gpu_wg_desc(sk + s * C::KB + kk * 32, 16, 1024), kk > 0);
    gpu_wg_commit();
    your_turn();
  };
  /* Tile j's SPEC tiles in order (S_j complete in sacc: slot i is row
   * (i >> 1) & 1, key 8 (i >> 2) + 2t + (i & 1)): scores, softmax step, P^
   * codes -> pf; gives K_j's stage back. */
  auto soft = [&](float (&sacc)[BK / 2], int j, bool frag) {
    const int s = j % ST;
    /* y = S^ kout[key]; the score is y qout sm_scale (qout > 0) */
    const float *ks = scal + s * C::SCF;
    if (STAT) /* y = S^ k_descale (also moves S out of the accumulator registers: without it ptxas serializes the wgmmas) */
#pragma unroll
      for (int u = 0; u < BK / 2; u++) sacc[u] = __fmul_rn(sacc[u], kdsc);
    else
#pragma unroll
      for (int u = 0; u < BK / 2; u += 2) {
        const float2 k2 = *(const float2 *)&ks[8 * (u >> 2) + 2 * t];
        sacc[u] = __fmul_rn(sacc[u], k2.x), sacc[u + 1] = __fmul_rn(sacc[u + 1], k2.y);
      }
    gpu_mb_arrive(br.kempty(s)); /* K and its scales are read */
#pragma unroll
    for (int hv = 0; hv < 2; hv++) { /* SPEC's 64-key tiles in order */
      const int c0 = j * BK + 64 * hv;
      if (c0 + 64 > Skv || (a.causal && c0 + 63 > w0 + off)) /* keys past Skv, or after the row (causal) */
#pragma unroll
        for (int u = 0; u < 32; u++) {
          const int hh = (u >> 1) & 1, key = c0 + 8 * (u >> 2) + 2 * t + (u & 1);
          if (key >= Skv || (a.causal && key > rr[hh] + off)) sacc[32 * hv + u] = gpu_ninf();
        }
      float mx[2][2] = {{gpu_ninf(), gpu_ninf()}, {gpu_ninf(), gpu_ninf()}};
#pragma unroll
      for (int u = 0; u < 32; u++) mx[(u >> 1) & 1][u >> 4] = fmaxf(mx[(u >> 1) & 1][u >> 4], sacc[32 * hv + u]);
      lpk_step stp[2];
      bool vis[2];
      float b2[2];
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        vis[hh] = !(a.causal && c0 > rr[hh] + off);
        const float ym = gpu_rmax<32>(fmaxf(mx[hh][0], mx[hh][1]));
        stp[hh] = lpk_row0_begin(&st[hh], __fmul_rn(__fmul_rn(ym, qo[hh]), a.sm_scale));
        if (!vis[hh]) stp[hh].alpha = 1.0f, stp[hh].bias = 0.0f; /* P = exp(-inf) = 0 */
        b2[hh] = fmaf(stp[hh].bias, L2E, L2_448);
      }
      /* 448 P = 2^(y qout sm_scale log2 e + bias log2 e + log2 448) */
      float ps[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}}, pss[2] = {0.0f, 0.0f};
      if (ent) { /* and the sum of 448 P y */
#pragma unroll
        for (int u = 0; u < 32; u++) {
          const int i = 32 * hv + u, hh = (u >> 1) & 1;
          const float y = sacc[i], p = gpu_exp2_fast(fmaf(y, qs2[hh], b2[hh]));
          ps[hh][u >> 4] += p;
          if (p != 0.0f) pss[hh] += p * y;
          sacc[i] = p;
        }
      } else {
#pragma unroll
        for (int u = 0; u < 32; u++) {
          const int i = 32 * hv + u, hh = (u >> 1) & 1;
          const float p = gpu_exp2_fast(fmaf(sacc[i], qs2[hh], b2[hh]));
          ps[hh][u >> 4] += p;
          sacc[i] = p;
        }
      }
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const float sp = __fmul_rn(gpu_rsum<32>(ps[hh][0] + ps[hh][1]), 1.0f / 448.0f);
        const float sps = ent ? __fmul_rn(__fmul_rn(gpu_rsum<32>(pss[hh]), qo[hh]), a.sm_scale * (1.0f / 448.0f)) : 0.0f;
        if (vis[hh]) lpk_row0_end(&st[hh], &stp[hh], sp, sps);
        alph[hv][hh] = stp[hh].alpha;
      }
    }
    if (frag)
#pragma unroll
      for (int kc = 0; kc < BK / 32; kc++) gpu_wg8_pfrag(&sacc[16 * kc], pf[kc], t);
  };
  /* T = P^ V^ of SPEC tile hv of tile j (V^T codes, K-major: 32 keys = 32 bytes a k-step) */
  auto issue_pv = [&](float (&tacc)[NO], int j, int hv) { /* STAT: accumulates into tacc (O) */
    const uint32_t vst = sv + (j % ST) * C::KB;
#pragma unroll
    for (int kq = 0; kq < 2; kq++)
      gpu_wg8_128::rs(tacc, pf[2 * hv + kq], gpu_wg_desc(vst + 64 * hv + 32 * kq, 16, 1024), STAT || kq > 0);
    gpu_wg_commit();
  };
  /* O = O alpha + T vout / 448 of SPEC tile hv */
  auto fold = [&](const float (&tacc)[NO], int j, int hv) {
    const float *vs = scal + (j % ST) * C::SCF + BK + hv * D;
    if (gpu_warp_any(alph[hv][0] != 1.0f || alph[hv][1] != 1.0f)) /* else O is unchanged */
#pragma unroll
      for (int o = 0; o < NO; o++) oacc[o] *= alph[hv][(o >> 1) & 1];
#pragma unroll
    for (int o = 0; o < NO; o += 2) {
      const float2 f = *(const float2 *)&vs[8 * (o >> 2) + 2 * t];
      oacc[o] = fmaf(tacc[o], f.x, oacc[o]), oacc[o + 1] = fmaf(tacc[o + 1], f.y, oacc[o + 1]);
    }
  };

  /* Tile j: softmax of S_j; P_j V_j's first SPEC tile, then S_(j+1) on the
   * tensor cores while the first is folded; the second SPEC tile. Nothing
   * is in flight across the loop's back edge (the last tile is peeled).
   * (Measured on an H200: 64-key steps with S_i issued beside P_(i-1)
   * V_(i-1), as the HIGH kernel does, ran 10% slower: twice the
   * synchronization per key, and spills.) */
  gpu_mb_wait(br.q(), 0);
  float sacc[BK / 2];
  issue_s(sacc, 0);
  gpu_wg_wait<0>();
  if constexpr (STAT) {
    /* Static scales: P^ V^ accumulates into O itself (no per-channel fold,
     * no second accumulator), O rescaled before each SPEC tile's product.
     * Tile j's second product (P_j V_j, keys 64..127) is still in flight
     * while tile j + 1's softmax runs; its P^ fragments are written once
     * that product is done (it reads them from registers). Measured and
     * dropped (H200, session 16, bench/RESULTS_cuda_h100.md): S_(j+1)
     * issued before P_j V_j (FlashAttention-3's order inside a warpgroup)
     * with both products back to back when no row rescales O between them,
     * 2.5-5% slower; a 192-key step (three SPEC tiles, n = 64 products for
     * S) spills ~1.5 KB at 232 registers: this loop already keeps ~230
     * live (S and its scaled copy, O, P^ fragments in flight). */
    auto scale_o = [&](int hv) {
      if (gpu_warp_any(alph[hv][0] != 1.0f || alph[hv][1] != 1.0f))
#pragma unroll
        for (int o = 0; o < NO; o++) oacc[o] *= alph[hv][(o >> 1) & 1];
    };
    auto frag = [&]() {
#pragma unroll
      for (int kc = 0; kc < BK / 32; kc++) gpu_wg8_pfrag(&sacc[16 * kc], pf[kc], t);
    };
#pragma unroll 1
    for (int j = 0; j < jn - 1; j++) {
      gpu_wg_hold(sacc);
      soft(sacc, j, false);
      gpu_wg_wait<0>(); /* P_(j-1) V_(j-1), second half */
      gpu_wg_hold(oacc);
      if (j > 0) gpu_mb_arrive(br.vempty((j - 1) % ST));
      frag();
      gpu_mb_wait(br.vfull(j % ST), (uint32_t)(j / ST) & 1);
      scale_o(0);
      gpu_wg_fence();
      issue_pv(oacc, j, 0);
      issue_s(sacc, j + 1);
      gpu_wg_wait<1>();
      gpu_wg_hold(oacc);
      scale_o(1);
      gpu_wg_fence();
      issue_pv(oacc, j, 1);
      gpu_wg_wait<1>(); /* S_(j+1) */
    }
    const int j = jn - 1;
    gpu_wg_hold(sacc);
    soft(sacc, j, false);
    gpu_wg_wait<0>();
    gpu_wg_hold(oacc);
    if (j > 0) gpu_mb_arrive(br.vempty((j - 1) % ST));
    frag();
    gpu_mb_wait(br.vfull(j % ST), (uint32_t)(j / ST) & 1);
#pragma unroll
    for (int hv = 0; hv < 2; hv++) {
      scale_o(hv);
      gpu_wg_fence();
      issue_pv(oacc, j, hv);
      gpu_wg_wait<0>();
      gpu_wg_hold(oacc);
    }
    gpu_mb_arrive(br.vempty(j % ST));
  } else {
#pragma unroll 1
  for (int j = 0; j < jn - 1; j++) {
    float tacc[NO];
    gpu_wg_hold(sacc);
    soft(sacc, j, true);
    gpu_mb_wait(br.vfull(j % ST), (uint32_t)(j / ST) & 1);
    gpu_wg_fence();
    issue_pv(tacc, j, 0);
    issue_s(sacc, j + 1);
    gpu_wg_wait<1>();
    gpu_wg_hold(tacc);
    fold(tacc, j, 0);
    gpu_wg_fence();
    issue_pv(tacc, j, 1);
    gpu_wg_wait<0>();
    gpu_wg_hold(tacc);
    fold(tacc, j, 1);
    gpu_mb_arrive(br.vempty(j % ST));
  }
  {
    const int j = jn - 1;
    float tacc[NO];
    gpu_wg_hold(sacc);
    soft(sacc, j, true);
    gpu_mb_wait(br.vfull(j % ST), (uint32_t)(j / ST) & 1);
#pragma unroll
    for (int hv = 0; hv < 2; hv++) {
      gpu_wg_fence();
      issue_pv(tacc, j, hv);
      gpu_wg_wait<0>();
      gpu_wg_hold(tacc);
      fold(tacc, j, hv);
    }
    gpu_mb_arrive(br.vempty(j % ST));
  }
  }
  if (cw == 0) my_turn(); /* takes warpgroup 1's last arrival */
  if (STAT) {
    const float vst = __fmul_rn(gpu_desc(a.v_desc, a.sdesc[2], b, hk), 1.0f / 448.0f);
#pragma unroll
    for (int o = 0; o < NO; o++) oacc[o] = __fmul_rn(oacc[o], vst);
  }
  gpu_sm90_end<D>(a, st, oacc, rr, b, h, t);
#elif defined(__CUDA_ARCH__)
  __trap(); /* never launched here (gpu_wg_ok reads gpu_wg_built) */
#endif
}

} // namespace LP_GPU_NS
#endif
