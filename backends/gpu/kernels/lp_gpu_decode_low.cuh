/* Paged decode, the low-tile step (backends/gpu/kernels/lp_gpu_decode.cuh):
 * FP8/NVFP4/MXFP4 tiles of the chunk in rounds of 4 (one per warp), read
 * from the pages and dequantized in registers. */
#ifndef LP_GPU_DECODE_LOW_CUH
#define LP_GPU_DECODE_LOW_CUH
#include "lp_gpu_decode_prim.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
#ifndef LPATTN_HIP /* CUDA */

/* Tiles [C.j0, min(C.j1, last tile)) of the chunk, in rounds of 4 (one per
 * warp): S^T = K Q^T (m16 keys, n8 rows) and O^T += V^T P^T (m16
 * channels), so the 8 query rows fill n. Key order: lane (g, t) holds keys
 * 16(g/2) + 4mt + (g&1) (+2) of m-tile mt, and after the transpose of P the
 * keys 16t..16t+15: one 16-key group. Row p (its query position) takes tile
 * j here where sel.low(j, p) (Sel: lp_gpu_decode.cuh); a round whose
 * tile no row of the warp takes costs only its copy and the max exchange.
 * Every warp of the CTA must call it (it synchronizes the CTA per round).
 * S8 (FP8_STATIC pools, FMT FP8): the rows' own tiles too, masked per key
 * (key position <= the row's), the V codes of keys past the sequence's
 * length zeroed (a page's unwritten bytes); K and V factors are the slot's
 * descales, Q's q_descale (lpd_load_q). */
template <int D, int FMT, int RING, class Sel, bool S8 = false>
__device__ __forceinline__ void lpd_low_tiles(const lpd_ctx<D> &C, lpd_acc<D> &A, const Sel &sel) {
  constexpr int T = LPD_T, NB = D / 8, KS = D / 16, CW = D / 4;
  const lp_gpu_pdecode_args &a = C.a;
  const lp_gpu_pool &P = C.P;
  const int warp = C.warp, lane = C.lane, g = C.g, t = C.t, h = C.h, len = C.len, j0 = C.j0, j1 = C.j1, wr = C.wr;
  uint8_t *mybuf = C.mybuf;
  const unsigned short *Ql = C.Ql;
  const float *qf = C.qf;
  float *xm = C.xm;
  /* layout offsets within a head section, as 32-bit ints (cheap address math) */
  const int kc_ = (int)P.kc, ks_ = (int)P.ks, ko_ = (int)P.ko, vc_ = (int)P.vc, vs_ = (int)P.vs,
            vo_ = (int)P.vo, hb_ = (int)P.head_bytes;
  uint32_t qb[KS][2];
#pragma unroll
  for (int s = 0; s < KS; s++) {
    const int d = CW * t + 4 * s;
    const unsigned short *q = Ql + g * D + d;
    if (FMT == LPATTN_FMT_FP8) /* d pairs (0, 1), (2, 3) */
      qb[s][0] = *(const uint32_t *)q, qb[s][1] = *(const uint32_t *)(q + 2);
    else /* (0, 2), (1, 3): the pair order of lpd_fp4x8 */
      qb[s][0] = q[0] | (uint32_t)q[2] << 16, qb[s][1] = q[1] | (uint32_t)q[3] << 16;
  }
  const float qs0 = qf[2 * t] * a.sm_scale, qs1 = qf[2 * t + 1] * a.sm_scale;
  const bool pasa = C.pasa; /* scores in one absolute frame: f16(shifted score) + c */
  const bool two = C.two;   /* odd slots hold rows (lpd_lrow) */
  const bool pmask = S8 || C.win; /* tiles seen in part: masked keys' v = -inf */
  /* below the last row's tile (the slot's last tile, or all of an earlier shard's);
   * FP8_STATIC: up to it */
  const int jl1 = min(j1, (C.q0 + C.Sq - 1) / T + (S8 ? 1 : 0));
  const float *ds8 = S8 ? (const float *)(P.mem + (int64_t)C.slot * P.slot_bytes + P.ds) : nullptr;
  const float kd8 = S8 ? ds8[h] : 0.0f, vd8 = S8 ? ds8[P.Hkv + h] : 0.0f;
  const int rounds = jl1 > j0 ? (jl1 - j0 + 3) / 4 : 0;
  float mrun[2] = {gpu_ninf(), gpu_ninf()};
  const int sl = wr / RING / 16 * 16; /* ring slot of a half tile */
  auto slot = [&](int q) { return mybuf + (q % RING) * sl; };
  /* half tile q: K part (q even) or V part (q odd) of round q / 2's tile,
   * one bulk copy into ring slot q % RING (its barrier's use q / RING). The
   * warp's tiles are a prefix of the rounds, so are the half tiles issued. */
  uint64_t *bars = C.bars;
  if (lane == 0)
    for (int k = 0; k < RING; k++) lpd_bar_init(bars + k);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncwarp();
  /* issue(q) is called for q = 0, 1, 2, ... in order, so the V half (q odd)
   * reuses the page its K half (q - 1) looked up: one page-table read per tile */
  const uint8_t *src = nullptr;
  auto issue = [&](int q) {
    const int r = q >> 1, j = j0 + 4 * r + warp;
    if (r < rounds && j < jl1) {
      if (!(q & 1)) src = C.page_ptr(j);
      uint8_t *dst = slot(q);
      const int o0 = (q & 1) ? vc_ : 0, o1 = (q & 1) ? hb_ : vc_;
      if (src) {
        if (lane == 0) lpd_bulk(dst, src + (int64_t)hb_ * h + o0, (uint32_t)(o1 - o0), bars + q % RING);
      } else { /* no page: zeros */
        for (int c = lane; c < (o1 - o0) / 16; c += 32) *(uint4 *)(dst + 16 * c) = make_uint4(0u, 0u, 0u, 0u);
        __syncwarp();
        if (lane == 0) lpd_bar_arrive(bars + q % RING);
      }
    }
  };
  auto wait = [&](int q) { lpd_bar_wait(bars + q % RING, (uint32_t)(q / RING) & 1u); };
  if (rounds)
    for (int q = 0; q < RING; q++) issue(q);
  for (int r = 0; r < rounds; r++) {
    const int j = j0 + 4 * r + warp;
    const bool has = j < jl1;
    if (has) wait(2 * r); /* K part of this round's tile */
    __syncwarp();
    const uint8_t *sb = slot(2 * r);
    bool vis[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
      vis[i] = has && C.RL.live[i] && sel.low(j, C.RL.p[i]) && !((C.RL.sel[i] >> (j - j0)) & 1u) &&
               (!C.win || j * T + T - 1 + C.wl >= C.RL.p[i]); /* the tile meets the row's window */
    float s[4][4]; /* m-tile mt: (key A, row 2t), (A, 2t+1), (B, 2t), (B, 2t+1) */
    float tm[2] = {gpu_ninf(), gpu_ninf()};
    const bool any = __any_sync(0xffffffffu, vis[0] || vis[1]); /* warp-uniform */
    float cl[2] = {0.0f, 0.0f}; /* PASA: rows 2t, 2t + 1 (K is stored shifted); lanes g split d */
    if (pasa && any) {
      constexpr int LDH = lpd_smem<D>::LDH;
      double part[2] = {0.0, 0.0};
      for (int d = g * (D / 8); d < (g + 1) * (D / 8); d++) {
        const double ks = C.kshift(j, d, true);
        part[0] = __dadd_rn(part[0], __dmul_rn((double)gpu_f16_tof(C.Qh[lpd_lrow(2 * t) * LDH + d]), ks));
        part[1] = __dadd_rn(part[1], __dmul_rn((double)gpu_f16_tof(C.Qh[lpd_lrow(2 * t + 1) * LDH + d]), ks));
      }
      cl[0] = lpd_pasa_c(part[0], 4, 16, a.sm_scale), cl[1] = lpd_pasa_c(part[1], 4, 16, a.sm_scale);
    }
    if (any) {
#pragma unroll
      for (int mt = 0; mt < 4; mt++) {
        /* FP8: keys (0, 1) and (2, 3) of a 4-key step pair up in P^T; E2M1: (0, 2), (1, 3) */
        const int kA = 16 * (g >> 1) + 4 * mt + (FMT == LPATTN_FMT_FP8 ? (g & 1) : 2 * (g & 1));
        const int kB = kA + (FMT == LPATTN_FMT_FP8 ? 2 : 1);
        /* two accumulators (even / odd k-steps): shorter mma dependency chains */
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c2[4] = {0.0f, 0.0f, 0.0f, 0.0f}, kf[2];
        if (FMT == LPATTN_FMT_FP8) {
          const uint8_t *pa = sb + kc_ + kA * D + CW * t, *pb = sb + kc_ + kB * D + CW * t;
#pragma unroll
          for (int u = 0; u < CW / 16; u++) {
            const uint4 wa = *(const uint4 *)(pa + 16 * u), wb = *(const uint4 *)(pb + 16 * u);
            const uint32_t xa[4] = {wa.x, wa.y, wa.z, wa.w}, xb[4] = {wb.x, wb.y, wb.z, wb.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
              const uint32_t af[4] = {lpd_e4m3x2(xa[k]), lpd_e4m3x2(xb[k]), lpd_e4m3x2(xa[k] >> 16), lpd_e4m3x2(xb[k] >> 16)};
              lpd_mma16(k & 1 ? c2 : c, af, qb[4 * u + k][0], qb[4 * u + k][1]);
            }
          }
          if (S8) kf[0] = kf[1] = kd8;
          else kf[0] = ((const float *)(sb + ko_))[kA], kf[1] = ((const float *)(sb + ko_))[kB];
        } else {
          constexpr int GS = FMT == LPATTN_FMT_MXFP4 ? 32 : 16, NGL = CW / GS > 0 ? CW / GS : 1;
          uint32_t w[2][CW / 8], ksc[2][NGL];
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int key = e ? kB : kA;
            const uint8_t *kp = sb + kc_ + key * (D / 2) + (CW / 2) * t;
            if ((CW / 2) % 16) { /* a lane's run of 8 (D 64) or 72 (D 576) bytes: 8-byte loads */
#pragma unroll
              for (int u = 0; u < CW / 16; u++) {
                const uint2 x = *(const uint2 *)(kp + 8 * u);
                w[e][2 * u] = x.x, w[e][2 * u + 1] = x.y;
              }
            } else {
#pragma unroll
              for (int u = 0; u < CW / 32; u++) {
                const uint4 x = *(const uint4 *)(kp + 16 * u);
                w[e][4 * u] = x.x, w[e][4 * u + 1] = x.y, w[e][4 * u + 2] = x.z, w[e][4 * u + 3] = x.w;
              }
            }
            const uint8_t *ksr = sb + ks_ + key * (D / GS);
            const int g0 = CW * t / GS;
            int kmax = 0;
            if (FMT == LPATTN_FMT_MXFP4) {
              if (D == 128) /* the key's 4 scales in one load (ks is 16-byte aligned) */
                kmax = (int)lpd_max4(*(const uint32_t *)ksr);
              else
                for (int k = 0; k < D / 32; k++) kmax = max(kmax, (int)ksr[k]);
            }
#pragma unroll
            for (int k = 0; k < NGL; k++) {
              const uint32_t sbyte = ksr[g0 + k];
              ksc[e][k] = FMT == LPATTN_FMT_MXFP4 ? lpd_pow2h2((int)sbyte - kmax + 8) : lpd_e4m3x2(sbyte | sbyte << 8);
            }
            kf[e] = FMT == LPATTN_FMT_MXFP4 ? lpk_e8m0_decode((uint8_t)kmax) * 64.0f
                                           : ((const float *)(sb + ko_))[key] * 16384.0f;
          }
#pragma unroll
          for (int u = 0; u < CW / 8; u++) {
            uint32_t ha[4], hb[4];
            lpd_fp4x8(w[0][u], ha), lpd_fp4x8(w[1][u], hb);
#pragma unroll
            for (int k = 0; k < 2; k++) {
              /* group of step s2 among this lane's: a constant (CW t is a multiple of GS, or one group) */
              const int s2 = 2 * u + k, gi = CW >= GS ? 4 * s2 / GS : 0;
              /* d (0, 2) and (1, 3) of step s2 (lpd_fp4x8's pairs, Q's qb) */
              const uint32_t af[4] = {lpd_hmul2(ha[k], ksc[0][gi]), lpd_hmul2(hb[k], ksc[1][gi]),
                                      lpd_hmul2(ha[k + 2], ksc[0][gi]), lpd_hmul2(hb[k + 2], ksc[1][gi])};
              lpd_mma16(k & 1 ? c2 : c, af, qb[s2][0], qb[s2][1]);
            }
          }
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
          if (i && !two) { /* odd slots empty: their P is 0 (the exp pass skips them) */
            s[mt][1] = s[mt][3] = 0.0f;
            break;
          }
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const int e = 2 * h + i;
            const float v = ((c[e] + c2[e]) * kf[h]) * (i ? qs1 : qs0);
            /* S8: the row's own tile; a window's left edge tile: keys p - wl on */
            const int kp = j * T + (h ? kB : kA);
            const bool seen = (!S8 || kp <= C.RL.p[i]) && (!C.win || kp + C.wl >= C.RL.p[i]);
            s[mt][e] = vis[i] && seen ? (pasa ? lpk_round_f16(v) + cl[i] : lp_softcap_f32(v, C.cap)) : gpu_ninf();
            tm[i] = fmaxf(tm[i], s[mt][e]);
          }
        }
      }
    }
    tm[0] = lpd_gmax(tm[0]), tm[1] = lpd_gmax(tm[1]);
    float *x = xm + (r & 1) * 32;
    if (g == 0) x[warp * 8 + 2 * t] = tm[0], x[warp * 8 + 2 * t + 1] = tm[1];
    __syncthreads();
    float pm[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
      float m = mrun[i], all = mrun[i];
      for (int w = 0; w < 4; w++) {
        const float v = x[w * 8 + 2 * t + i];
        all = fmaxf(all, v);
        if (w <= warp) m = fmaxf(m, v);
      }
      pm[i] = m, mrun[i] = all;
    }
    issue(2 * r + RING); /* the K slot is free (every warp passed the exchange) */
    if (has) wait(2 * r + 1); /* V part of this round's tile */
    __syncwarp();
    sb = slot(2 * r + 1) - vc_; /* V offsets are from the head section's start */
    if (any) {
      /* online softmax against the chunk's running max, then P^ */
      lpk_step sp[2];
      float ps[2] = {0.0f, 0.0f}, pss[2] = {0.0f, 0.0f}, ga[2] = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < 2; i++) {
        sp[i] = lpk_row_begin(&A.stl[i], pm[i], 0.0f);
        if (!vis[i]) sp[i].alpha = 1.0f, sp[i].bias = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 2; i++) {
        if (i && !two) break; /* warp-uniform: empty odd slots keep P = 0 */
#pragma unroll
        for (int mt = 0; mt < 4; mt++)
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const int e = 2 * h + i;
            const float v = s[mt][e];
            /* a row sees a low tile in full (v finite), in part (S8's own
             * tile, a window's left edge: the masked keys' v = -inf, p = 0)
             * or not at all (v = -inf, bias 0: p = 0; its sums are not used) */
            const float p = __expf(v + sp[i].bias);
            ps[i] += p;
            pss[i] += pmask && p == 0.0f ? 0.0f : p * v; /* a masked key (v = -inf) of a seen tile */
            ga[i] = fmaxf(ga[i], p);
            s[mt][e] = p;
          }
      }
      float prw[2];
#pragma unroll
      for (int i = 0; i < 2; i++) {
        if (i && !two) break;
        const float sum = lpd_gsum(ps[i]), sums = lpd_gsum(pss[i]);
        if (vis[i]) lpk_row_end(&A.stl[i], &sp[i], sum, sums);
      }
      if (FMT == LPATTN_FMT_FP8) {
        prw[0] = prw[1] = 1.0f / 448.0f;
#pragma unroll
        for (int i = 0; i < 2; i++) {
          if (i && !two) break;
#pragma unroll
          for (int mt = 0; mt < 4; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) s[mt][2 * h + i] = lpk_e4m3_round(__fmul_rn(s[mt][2 * h + i], 448.0f));
        }
      } else {
        /* The group scale step of backends/math/lpk_quant.h, once per (row,
         * group): a 16-key group is held by lanes g, g ^ 1 (32 keys by
         * g ^ {1, 2}); lane g takes row 2t + (g & 1) of the two and the pair
         * swaps the results. A row's amax (NVFP4 outer) is over all g. */
        float gm[2], am[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
          gm[i] = fmaxf(ga[i], __shfl_xor_sync(0xffffffffu, ga[i], 4));
          if (FMT == LPATTN_FMT_MXFP4) gm[i] = fmaxf(gm[i], __shfl_xor_sync(0xffffffffu, gm[i], 8));
          else {
            am[i] = fmaxf(gm[i], __shfl_xor_sync(0xffffffffu, gm[i], 8));
            am[i] = fmaxf(am[i], __shfl_xor_sync(0xffffffffu, am[i], 16));
          }
        }
        const bool odd = g & 1;
        uint8_t sc;
        float denom, outer = 1.0f, sval;
        if (FMT == LPATTN_FMT_MXFP4) {
          sval = lpk_group_scale(1, odd ? gm[1] : gm[0], 0, 0.0f, P.mx_round_up, &sc, &denom);
        } else {
          outer = lpk_outer_scale(0, odd ? am[1] : am[0]);
          sval = lpk_group_scale(0, odd ? gm[1] : gm[0], 0, outer, P.mx_round_up, &sc, &denom);
        }
        /* denom 0: the group's codes are 0 (p * 0 rounds to 0; sval is finite) */
        const float rden = denom == 0.0f ? 0.0f : 1.0f / (denom == 0.0f ? 1.0f : denom); /* no x / 0 slow path */
        const float sv_o = __shfl_xor_sync(0xffffffffu, sval, 4), rd_o = __shfl_xor_sync(0xffffffffu, rden, 4);
        const float sv[2] = {odd ? sv_o : sval, odd ? sval : sv_o}, rd[2] = {odd ? rd_o : rden, odd ? rden : rd_o};
        if (FMT == LPATTN_FMT_MXFP4) {
          prw[0] = prw[1] = 1.0f;
        } else {
          const float ou_o = __shfl_xor_sync(0xffffffffu, outer, 4);
          prw[0] = odd ? ou_o : outer, prw[1] = odd ? outer : ou_o;
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
          if (i && !two) break;
#pragma unroll
          for (int mt = 0; mt < 4; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) s[mt][2 * h + i] = lpk_e2m1_round(s[mt][2 * h + i] * rd[i]) * sv[i];
        }
      }
      uint32_t pb[4][2]; /* P^T B fragments: (keys 2t.., row g) */
#pragma unroll
      for (int mt = 0; mt < 4; mt++) {
        pb[mt][0] = lpd_trans(gpu_mma<__half>::pack(s[mt][0], s[mt][1]));
        pb[mt][1] = lpd_trans(gpu_mma<__half>::pack(s[mt][2], s[mt][3]));
      }
      /* S8: byte masks of this lane's 16 V codes (keys 16t..16t+15), 0 past the length */
      uint32_t vm[4] = {~0u, ~0u, ~0u, ~0u};
      if (S8 && j * T + T > len) {
#pragma unroll
        for (int w = 0; w < 4; w++) {
          const int lim = len - j * T - 16 * t - 4 * w;
          vm[w] = lim >= 4 ? ~0u : lim <= 0 ? 0u : (1u << (8 * lim)) - 1u;
        }
      }
      /* O^T = O^T alpha + (V^T P^T) vcol prow, 16 channels at a time */
#pragma unroll
      for (int ct = 0; ct < NB / 2; ct++) {
        const int cA = 16 * ct + g, cB = cA + 8;
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, vcol[2];
        if (FMT == LPATTN_FMT_FP8) {
          const uint4 wa = *(const uint4 *)(sb + vc_ + cA * T + 16 * t);
          const uint4 wb = *(const uint4 *)(sb + vc_ + cB * T + 16 * t);
          const uint32_t xa[4] = {wa.x & vm[0], wa.y & vm[1], wa.z & vm[2], wa.w & vm[3]},
                         xb[4] = {wb.x & vm[0], wb.y & vm[1], wb.z & vm[2], wb.w & vm[3]};
#pragma unroll
          for (int mt = 0; mt < 4; mt++) {
            const uint32_t af[4] = {lpd_e4m3x2(xa[mt]), lpd_e4m3x2(xb[mt]), lpd_e4m3x2(xa[mt] >> 16), lpd_e4m3x2(xb[mt] >> 16)};
            lpd_mma16(c, af, pb[mt][0], pb[mt][1]);
          }
          if (S8) vcol[0] = vcol[1] = vd8;
          else vcol[0] = ((const float *)(sb + vo_))[cA], vcol[1] = ((const float *)(sb + vo_))[cB];
        } else {
          uint32_t hv[2][8], scl[2];
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int ch = e ? cB : cA;
            const uint2 w = *(const uint2 *)(sb + vc_ + ch * (T / 2) + 8 * t);
            lpd_fp4x8(w.x, hv[e]), lpd_fp4x8(w.y, hv[e] + 4);
            if (FMT == LPATTN_FMT_MXFP4) {
              const uint8_t *vsr = sb + vs_ + ch * 2;
              const int vmax = max((int)vsr[0], (int)vsr[1]);
              scl[e] = lpd_pow2h2((int)vsr[t >> 1] - vmax + 8);
              vcol[e] = lpk_e8m0_decode((uint8_t)vmax) * 64.0f;
            } else {
              const uint32_t sbyte = sb[vs_ + ch * 4 + t];
              scl[e] = lpd_e4m3x2(sbyte | sbyte << 8);
              vcol[e] = ((const float *)(sb + vo_))[ch] * 16384.0f;
            }
          }
#pragma unroll
          for (int mt = 0; mt < 4; mt++) {
            const int hx = 4 * (mt >> 1) + (mt & 1); /* keys (0, 2) and (1, 3) of step mt */
            const uint32_t af[4] = {lpd_hmul2(hv[0][hx], scl[0]), lpd_hmul2(hv[1][hx], scl[1]),
                                    lpd_hmul2(hv[0][hx + 2], scl[0]), lpd_hmul2(hv[1][hx + 2], scl[1])};
            lpd_mma16(c, af, pb[mt][0], pb[mt][1]);
          }
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
          if (i && !two) break; /* empty odd slots: their accumulators are not read */
          /* a row that does not take this tile keeps its O: its P is 0, but a
           * non-finite V scale would make 0 x NaN (another row's tile of a
           * multi-row call, SPEC 2) */
          if (!vis[i]) continue;
#pragma unroll
          for (int h = 0; h < 2; h++)
            A.accl[ct][2 * h + i] = A.accl[ct][2 * h + i] * sp[i].alpha + (c[2 * h + i] * prw[i]) * vcol[h];
        }
      }
    }
    __syncwarp();
    issue(2 * r + RING + 1);
  }
  gpu_cp_wait<0>();
}
#endif
} // namespace LP_GPU_NS
#endif
