/* The attention backward (SPEC 10, SEMANTICS "Backward"), FlashAttention-2
 * style in three launches, each sum in a fixed order (no atomics), so the
 * gradients are bitwise the same on every run (low tiles: the LOW instances
 * of the kernels, below):
 *  1. gpu_bwd_prep, a warp per row: Delta = rowsum(dO * O) and the row's
 *     LSE (+inf where it is -inf, so P = exp(S - LSE) is 0 there).
 *  2. gpu_bwd_dkdv, a CTA per key tile (64 keys) of a KV head: warp w holds
 *     keys 16w..16w+15 and walks the query tiles that see the tile, head by
 *     head of the GQA group in head order, i increasing, with
 *     S^T = K Q^T, P^T = exp(s S^T - LSE), dV += P^T dO, dP^T = V dO^T,
 *     dS^T = P^T (dP^T - Delta), dK += dS^T Q; dK is scaled by s at the end.
 *  3. gpu_bwd_dq, a CTA per query tile: warp w holds rows 16w..16w+15 and
 *     walks the visible key tiles, j increasing, with S = Q K^T, P, dP =
 *     dO V^T, dS and dQ += dS K (scaled by s at the end).
 * The matrix products are the forward's (gpu_mm_scores, gpu_mm_pv of
 * lp_gpu_attn_prelude.cuh / lp_gpu_attn_products.cuh: ldmatrix + mma.sync m16n8k16, f32 accumulation), read
 * with the roles of their operands exchanged; P and dS enter a product in
 * the input type, as the forward's P does (bf16: as two terms, gpu_bwd_pv). Q/dO
 * (dkdv) and K/V (dq) tiles are double-buffered with cp.async in the HIGH
 * instances; the LOW ones load each step's tiles in turn (gpu_bwd_smem). */
#ifndef LP_GPU_BWD_CUH
#define LP_GPU_BWD_CUH
#ifdef LPATTN_HIP
/* The attention backward has no HIP form yet: the kernels below are
 * written against the mma.sync products of the CUDA half
 * (lp_gpu_attn_prelude.cuh / lp_gpu_attn_products.cuh); the HIP backend
 * answers UNSUPPORTED. */
#else
#include "lp_gpu_attn.cuh"
#include "lp_gpu_bwd_args.h"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
#include "lp_gpu_bwd_tiles.cuh"
#include "lp_gpu_bwd_sr.cuh"
#include "lp_gpu_bwd_mask.cuh"

/* acc += P V for the backward's products with a rounded factor (dV += P^T
 * dO, dK += dS^T Q, dQ += dS K). bf16 keeps 8 bits of P/dS, which alone
 * costs ~2e-3 relative (SPEC 10 allows 2e-3 for HIGH): there the factor is
 * split exactly into two bf16 terms, hi = bf16(x) and lo = x - hi (f32,
 * exact), and both products are accumulated (2^-16 relative left); f16
 * keeps 11 bits and takes one product. Fixed order: still deterministic. */
template <typename T> struct gpu_bwd_split { static constexpr bool on = false; };
template <> struct gpu_bwd_split<gpu_bf16> { static constexpr bool on = true; };
template <typename T, int D>
__device__ __forceinline__ void gpu_bwd_pv(float (&acc)[2][D / 4], const float (&x)[2][16], const unsigned short *Bs,
                                           int lane) {
  typedef gpu_mma<T> HI;
  gpu_mm_pv<HI, D>(acc, x, Bs, lane);
  if (gpu_bwd_split<T>::on) {
    float lo[2][16];
#pragma unroll
    for (int hh = 0; hh < 2; hh++)
#pragma unroll
      for (int sl = 0; sl < 16; sl++) lo[hh][sl] = x[hh][sl] - HI::tof(HI::bits(x[hh][sl]));
    gpu_mm_pv<HI, D>(acc, lo, Bs, lane);
  }
}

/* 1. Delta and the row LSE, a warp per row of [B, Hq, Sq]. */
template <typename T, int D> __global__ void __launch_bounds__(128) gpu_bwd_prep(const lp_gpu_bwd_args a) {
  const int lane = threadIdx.x & 31;
  const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if (row >= (int64_t)a.B * a.Hq * a.Sq) return;
  const int s = (int)(row % a.Sq), h = (int)(row / a.Sq % a.Hq), b = (int)(row / a.Sq / a.Hq);
  float acc = 0.0f;
  for (int d = lane; d < D; d += 32)
    acc += gpu_mma<T>::tof(((const unsigned short *)a.dout)[lpk_off(a.sdo, b, h, s, d)]) *
           gpu_load(a.out, a.out_dtype, lpk_off(a.so, b, h, s, d));
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
  if (lane == 0) {
    const float l = a.lse[lpk_off(a.sl, b, h, s, 0)];
    a.delta[row] = acc;
    a.rowlse[row] = l == gpu_ninf() ? -gpu_ninf() : l;
  }
}

/* 2. dK and dV of key tile blockIdx.x of KV head blockIdx.y, batch blockIdx.z. */
template <typename T, int D, int FMT> __global__ void __launch_bounds__(128) gpu_bwd_dkdv(const lp_gpu_bwd_args a) {
  constexpr bool LOW = FMT >= 0;
  typedef gpu_mma<T> HI;
  constexpr int LD = gpu_smem<D>::LD, T64 = gpu_bwd_smem<D>::T64, NO = D / 4;
  extern __shared__ __attribute__((aligned(16))) unsigned char gpu_bwd_raw[];
  /* LOW: [Kl][Vl][four step tiles], lse_s and del_s after them */
  unsigned short *Ks = (unsigned short *)gpu_bwd_raw, *Vs = Ks + T64, *Qb = Vs + T64, *Ob = Qb + 2 * T64;
  float *lse_s = (float *)(Ob + 2 * T64), *del_s = lse_s + (LOW ? 64 : 128);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const gpu_lay<32> lay{lane};
  const int hk = blockIdx.y, b = blockIdx.z, G = a.Hq / a.Hkv, Sq = a.Sq, Skv = a.Skv;
  const int c0 = blockIdx.x * 64;
  /* the query tiles i0 .. i0 + nq - 1 with a row that sees one of the keys */
  const lp_mask msk = gpu_bwd_mask(a);
  int64_t x0, x1;
  lp_mask_qtiles(&msk, c0, min(c0 + 63, Skv - 1), 64, Sq, &x0, &x1);
  const int i0 = (int)x0, nq = (int)max(x1 - x0, (int64_t)0), n = G * nq;
  const bool edge_k = c0 + 64 > Skv;

  if (!LOW) {
    gpu_bwd_tile<D>(Ks, a.k, a.sk, b, hk, c0, Skv, a.vec16);
    gpu_bwd_tile<D>(Vs, a.v, a.sv, b, hk, c0, Skv, a.vec16);
  }
  /* step t: q head hk*G + t / nq, query tile i0 + t % nq */
  auto issue = [&](int t, int buf) {
    const int h = hk * G + t / nq, r0 = (i0 + t % nq) * 64;
    gpu_bwd_tile<D>(Qb + buf * T64, a.q, a.sq, b, h, r0, Sq, a.vec16);
    gpu_bwd_tile<D>(Ob + buf * T64, a.dout, a.sdo, b, h, r0, Sq, a.vec16);
    for (int r = tid; r < 64; r += blockDim.x) {
      const bool ok = r0 + r < Sq;
      const int64_t row = ((int64_t)b * a.Hq + h) * Sq + r0 + r;
      lse_s[buf * 64 + r] = ok ? a.rowlse[row] : -gpu_ninf();
      del_s[buf * 64 + r] = ok ? a.delta[row] : 0.0f;
    }
    gpu_cp_commit();
  };
  if (!LOW && n > 0) issue(0, 0);
  else gpu_cp_commit();

  float dk[2][NO], dv[2][NO];
#pragma unroll
  for (int hh = 0; hh < 2; hh++)
#pragma unroll
    for (int o = 0; o < NO; o++) dk[hh][o] = dv[hh][o] = 0.0f;
  /* a high step: query rows [r0, r0 + 64) with Q, dO in Qs, Os, this key tile's K, V in Kt, Vt */
  auto hstep = [&](const unsigned short *Kt, const unsigned short *Vt, const unsigned short *Qs,
                   const unsigned short *Os, const float *ls, const float *dl, int r0) {
    const unsigned short *Kw = Kt + warp * 16 * LD, *Vw = Vt + warp * 16 * LD;
    float s[2][16], dp[2][16];
#pragma unroll
    for (int hh = 0; hh < 2; hh++)
#pragma unroll
      for (int sl = 0; sl < 16; sl++) s[hh][sl] = dp[hh][sl] = 0.0f;
    const bool edge = edge_k || r0 + 64 > Sq || gpu_bwd_diag(msk, r0, c0, Sq);
    gpu_mm_scores<HI, D>(s, Kw, Qs, lane); /* S^T = K Q^T */
    gpu_bwd_probs<true>(s, lay, r0, c0 + warp * 16, ls, edge, a);
    gpu_bwd_pv<T, D>(dv, s, Os, lane);      /* dV += P^T dO */
    gpu_mm_scores<HI, D>(dp, Vw, Os, lane); /* dP^T = V dO^T */
    gpu_bwd_ds<true>(s, lay, r0, c0 + warp * 16, edge, ls, a,
                     [&](int hh, int sl) { return dp[hh][sl] - dl[lay.key(sl)]; }); /* dS^T */
    gpu_bwd_pv<T, D>(dk, s, Qs, lane); /* dK += dS^T Q */
  };
  /* SPEC 2 on a step with masked pairs (lp_gpu_nonfinite.cuh): non-finite Q
   * and dO elements (the B operands of dK += dS^T Q, dV += P^T dO) are
   * zeroed in the step's tiles before it, nfq/nfo receive per channel the
   * bits of the query rows holding one, and after the step the keys those
   * rows see (each key's run of rows, lp_mask_rows) get them back. The rows'
   * own P^T and dS^T carry them through LSE and Delta, as they do in ref. */
  uint64_t *nfq = (uint64_t *)(gpu_bwd_raw + (LOW ? gpu_bwd_smem<D>::low_bytes : gpu_bwd_smem<D>::bytes) -
                               gpu_bwd_smem<D>::NF),
           *nfo = nfq + D;
  auto nf_pre = [&](unsigned short *Qt, unsigned short *Ot, int r0) -> bool {
    if (!gpu_bwd_diag(msk, r0, c0, Sq) || !GPU_NF) return false;
    const bool bf = gpu_nf_bf<T>::v;
    if (!__syncthreads_or(gpu_nf_scan(Qt, 64, D, LD, bf, tid, 128) || gpu_nf_scan(Ot, 64, D, LD, bf, tid, 128)))
      return false;
    gpu_nf_fix_bits(Qt, 64, D, [&](int r, int d) { return r * LD + d; }, bf, nfq, tid, 128);
    gpu_nf_fix_bits(Ot, 64, D, [&](int r, int d) { return r * LD + d; }, bf, nfo, tid, 128);
    __syncthreads();
    return true;
  };
  auto nf_post = [&](int r0) {
#pragma unroll
    for (int hh = 0; hh < 2; hh++) { /* the query rows of the tile that see the key, as bits */
      int64_t f;
      const int64_t nr = lp_mask_rows(&msk, c0 + warp * 16 + lay.row(hh), r0, 64, &f);
      const uint64_t seen = nr <= 0 ? 0 : (nr >= 64 ? ~0ull : (1ull << nr) - 1) << f;
#pragma unroll
      for (int o = 0; o < NO; o++) {
        if (nfq[lay.chan(o)] & seen) dk[hh][o] += gpu_nf_nan();
        if (nfo[lay.chan(o)] & seen) dv[hh][o] += gpu_nf_nan();
      }
    }
  };
  if constexpr (!LOW) { /* every tile high (the kernel of precision HIGH) */
    for (int t = 0; t < n; t++) {
      const int buf = t & 1, r0 = (i0 + t % nq) * 64;
      if (t + 1 < n) {
        issue(t + 1, buf ^ 1);
        gpu_cp_wait<1>();
      } else {
        gpu_cp_wait<0>();
      }
      __syncthreads();
      const bool nf = nf_pre(Qb + buf * T64, Ob + buf * T64, r0);
      hstep(Ks, Vs, Qb + buf * T64, Ob + buf * T64, lse_s + buf * 64, del_s + buf * 64, r0);
      if (nf) nf_post(r0);
      __syncthreads(); /* buffer buf is refilled by step t + 2 */
    }
    gpu_cp_wait<0>();
  } else {
    /* Low tiles (SEMANTICS "Backward"), every step loaded in turn (two CTAs
     * an SM overlap one's loads with the other's products). Low
     * operands: Kl, Vl (the forward's K along D, V along D with SR; this
     * key tile), Ql, Dd (the forward's Q, dO along D), Dr, Qr (dO, Q along
     * the query rows) of the step's query tile. */
    typedef gpu_mma<gpu_bf16> LO;
    unsigned short *Kl = (unsigned short *)gpu_bwd_raw, *Vl = Kl + T64, *Ql = Vl + T64, *Dd = Ql + T64,
                   *Dr = Dd + T64, *Qr = Dr + T64; /* the step tiles: Ql, Dd, Dr, Qr (a high step: Q, dO, K, V) */
    float *kso = del_s + 64, *vso = kso + 64, *qso = vso + 64, *dso = qso + 64, *dro = dso + 64, *qro = dro + D;
    constexpr int fmt = LOW ? FMT : 0; /* a.low, fixed per instance */
    gpu_cp_wait<0>();
    gpu_bwd_low_tile<D>(Kl, a.lk, a.Hkv, Skv, b, hk, c0);
    gpu_bwd_low_tile<D>(Vl, a.vd, a.Hkv, Skv, b, hk, c0);
    gpu_bwd_row_outer(kso, a.lk_out, fmt, a.Hkv, Skv, b, hk, c0);
    gpu_bwd_row_outer(vso, a.vd_out, fmt, a.Hkv, Skv, b, hk, c0);
    gpu_cp_commit();
    const unsigned short *Klw = Kl + warp * 16 * LD, *Vlw = Vl + warp * 16 * LD;
    for (int t = 0; t < n; t++) {
      const int h = hk * G + t / nq, qt = i0 + t % nq, r0 = qt * 64;
      const bool lowt = a.leaky || !gpu_bwd_diag(msk, r0, c0, Sq);
      __syncthreads(); /* the previous step's tiles are read */
      if (lowt) {
        gpu_bwd_low_tile<D>(Ql, a.lq, a.Hq, Sq, b, h, r0);
        gpu_bwd_low_tile<D>(Dd, a.dod, a.Hq, Sq, b, h, r0);
        gpu_bwd_low_tile<D>(Dr, a.dor, a.Hq, Sq, b, h, r0);
        gpu_bwd_low_tile<D>(Qr, a.qr, a.Hq, Sq, b, h, r0);
        gpu_bwd_row_outer(qso, a.lq_out, fmt, a.Hq, Sq, b, h, r0);
        gpu_bwd_row_outer(dso, a.dod_out, fmt, a.Hq, Sq, b, h, r0);
        gpu_bwd_chan_outer<D>(dro, a.dor_out, fmt, a.Hq, Sq, b, h, qt);
        gpu_bwd_chan_outer<D>(qro, a.qr_out, fmt, a.Hq, Sq, b, h, qt);
      } else { /* a diagonal tile pair (SPEC 4): Q, dO and this key tile's K, V, high */
        gpu_bwd_tile<D>(Ql, a.q, a.sq, b, h, r0, Sq, a.vec16);
        gpu_bwd_tile<D>(Dd, a.dout, a.sdo, b, h, r0, Sq, a.vec16);
        gpu_bwd_tile<D>(Dr, a.k, a.sk, b, hk, c0, Skv, a.vec16);
        gpu_bwd_tile<D>(Qr, a.v, a.sv, b, hk, c0, Skv, a.vec16);
      }
      for (int r = tid; r < 64; r += blockDim.x) {
        const bool ok = r0 + r < Sq;
        const int64_t row = ((int64_t)b * a.Hq + h) * Sq + r0 + r;
        lse_s[r] = ok ? a.rowlse[row] : -gpu_ninf();
        del_s[r] = ok ? a.delta[row] : 0.0f;
      }
      gpu_cp_commit();
      gpu_cp_wait<0>();
      __syncthreads();
      if (!lowt) {
        const bool nf = nf_pre(Ql, Dd, r0);
        hstep(Dr, Qr, Ql, Dd, lse_s, del_s, r0);
        if (nf) nf_post(r0);
        continue;
      }
      const int64_t pbase = ((int64_t)b * a.Hq + h) * Sq * (int64_t)Skv + (int64_t)r0 * Skv + c0 + warp * 16;
      float s[2][16], dp[2][16], pq[2][16], pout[2], dout[2];
#pragma unroll
      for (int hh = 0; hh < 2; hh++)
#pragma unroll
        for (int sl = 0; sl < 16; sl++) s[hh][sl] = dp[hh][sl] = 0.0f;
      gpu_mm_scores<LO, D>(s, Klw, Ql, lane); /* S^T = K^ Q^T, then the outer scales */
#pragma unroll
      for (int hh = 0; hh < 2; hh++)
#pragma unroll
        for (int sl = 0; sl < 16; sl++)
          s[hh][sl] = __fmul_rn(s[hh][sl], __fmul_rn(qso[lay.key(sl)], kso[warp * 16 + lay.row(hh)]));
      gpu_bwd_probs<true>(s, lay, r0, c0 + warp * 16, lse_s, edge_k || gpu_bwd_diag(msk, r0, c0, Sq), a);
#pragma unroll
      for (int hh = 0; hh < 2; hh++)
#pragma unroll
        for (int sl = 0; sl < 16; sl++) pq[hh][sl] = s[hh][sl];
      /* dV += P_r^T dO_r (both along the query rows) */
      gpu_bwd_sr_tile<true, true>(pq, pout, lane, fmt, a.mx_round_up, gpu_bwd_key(a.seed, 0), pbase, Skv);
      gpu_mm_pv_low<D>(dv, pq, Dr, false, pout, dro, lane);
      /* dP^T = V_d dO_d^T (both along D) */
      gpu_mm_scores<LO, D>(dp, Vlw, Dd, lane);
      gpu_bwd_ds<true>(s, lay, r0, c0 + warp * 16, edge_k || r0 + 64 > Sq || gpu_bwd_diag(msk, r0, c0, Sq), lse_s, a,
                       [&](int hh, int sl) {
        const float d = __fmul_rn(dp[hh][sl], __fmul_rn(dso[lay.key(sl)], vso[warp * 16 + lay.row(hh)]));
        return d - del_s[lay.key(sl)]; /* dS^T = P^T (dP^T - Delta) */
      });
      /* dK += dS_r^T Q_r (both along the query rows) */
      gpu_bwd_sr_tile<true>(s, dout, lane, fmt, a.mx_round_up, gpu_bwd_key(a.seed, 6), pbase, Skv);
      gpu_mm_pv_low<D>(dk, s, Qr, false, dout, qro, lane);
    }
    gpu_cp_wait<0>();
  }

#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    const int key = c0 + warp * 16 + lay.row(hh);
    if (key >= Skv) continue;
#pragma unroll
    for (int o = 0; o < NO; o++) {
      const int d = lay.chan(o);
      gpu_store(a.dk, a.dk_dtype, lpk_off(a.sdk, b, hk, key, d), dk[hh][o] * a.sm_scale);
      gpu_store(a.dv, a.dv_dtype, lpk_off(a.sdv, b, hk, key, d), dv[hh][o]);
    }
  }
}

/* 3. dQ of a query tile (blockIdx.x, reversed when causal) of q head
 * blockIdx.y, batch blockIdx.z. */
template <typename T, int D, int FMT> __global__ void __launch_bounds__(128) gpu_bwd_dq(const lp_gpu_bwd_args a) {
  constexpr bool LOW = FMT >= 0;
  typedef gpu_mma<T> HI;
  constexpr int LD = gpu_smem<D>::LD, T64 = gpu_bwd_smem<D>::T64, NO = D / 4;
  extern __shared__ __attribute__((aligned(16))) unsigned char gpu_bwd_raw[];
  unsigned short *Qs = (unsigned short *)gpu_bwd_raw, *Os = Qs + T64, *Kb = Os + T64, *Vb = Kb + 2 * T64;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const gpu_lay<32> lay{lane};
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (a.Hq / a.Hkv), Sq = a.Sq, Skv = a.Skv;
  /* causal: the longest rows first (gpu_tile_order; written out here: through
   * the function this kernel's SASS changes, scripts/sass_compare.py) */
  const int r0 = (a.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * 64;
  const int r1 = min(r0 + 63, Sq - 1), nkt = (Skv + 63) / 64;
  const lp_mask msk = gpu_bwd_mask(a); /* the key tiles j0 .. nj - 1 that a row sees */
  int64_t x0, x1;
  lp_mask_tiles(&msk, r0, r1, 64, nkt, &x0, &x1);
  const int j0 = (int)x0, nj = (int)max(x0, x1);

  float lse[2], del[2];
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    const int r = r0 + warp * 16 + lay.row(hh);
    const int64_t row = ((int64_t)b * a.Hq + h) * Sq + r;
    lse[hh] = r < Sq ? a.rowlse[row] : -gpu_ninf();
    del[hh] = r < Sq ? a.delta[row] : 0.0f;
  }
  float dq[2][NO];
#pragma unroll
  for (int hh = 0; hh < 2; hh++)
#pragma unroll
    for (int o = 0; o < NO; o++) dq[hh][o] = 0.0f;
  if (!LOW && nj > j0) {
    gpu_bwd_tile<D>(Qs, a.q, a.sq, b, h, r0, Sq, a.vec16);
    gpu_bwd_tile<D>(Os, a.dout, a.sdo, b, h, r0, Sq, a.vec16);
  }
  auto issue = [&](int j, int buf) {
    gpu_bwd_tile<D>(Kb + buf * T64, a.k, a.sk, b, hk, j * 64, Skv, a.vec16);
    gpu_bwd_tile<D>(Vb + buf * T64, a.v, a.sv, b, hk, j * 64, Skv, a.vec16);
    gpu_cp_commit();
  };
  /* a high step: key tile j with K, V in Ks, Vs, this query tile's Q, dO in Qt, Ot */
  auto hstep = [&](const unsigned short *Qt, const unsigned short *Ot, const unsigned short *Ks,
                   const unsigned short *Vs, int j) {
    const unsigned short *Qw = Qt + warp * 16 * LD, *Ow = Ot + warp * 16 * LD;
    float s[2][16], dp[2][16];
#pragma unroll
    for (int hh = 0; hh < 2; hh++)
#pragma unroll
      for (int sl = 0; sl < 16; sl++) s[hh][sl] = dp[hh][sl] = 0.0f;
    gpu_mm_scores<HI, D>(s, Qw, Ks, lane); /* S = Q K^T */
    const bool edge = j * 64 + 64 > Skv || gpu_bwd_diag(msk, r0, j * 64, Sq);
    gpu_bwd_probs<false>(s, lay, r0 + warp * 16, j * 64, lse, edge, a);
    gpu_mm_scores<HI, D>(dp, Ow, Vs, lane); /* dP = dO V^T */
    gpu_bwd_ds<false>(s, lay, r0 + warp * 16, j * 64, edge, lse, a,
                      [&](int hh, int sl) { return dp[hh][sl] - del[hh]; }); /* dS */
    gpu_bwd_pv<T, D>(dq, s, Ks, lane); /* dQ += dS K */
  };
  /* SPEC 2 on a step with masked pairs (lp_gpu_nonfinite.cuh): non-finite K
   * elements (the B operand of dQ += dS K) are zeroed in the step's tile
   * before it, nfk receives per channel the bits of the keys holding one,
   * and after the step the rows that see one of them (each row's run of
   * keys, lp_mask_range) get them back (their own S carries them through
   * LSE, as in ref). */
  uint64_t *nfk = (uint64_t *)(gpu_bwd_raw + (LOW ? gpu_bwd_smem<D>::low_bytes : gpu_bwd_smem<D>::bytes) -
                               gpu_bwd_smem<D>::NF);
  auto nf_pre = [&](unsigned short *Kt, int j) -> bool {
    if (!gpu_bwd_diag(msk, r0, j * 64, Sq) || !GPU_NF) return false;
    const bool bf = gpu_nf_bf<T>::v;
    if (!__syncthreads_or(gpu_nf_scan(Kt, 64, D, LD, bf, tid, 128))) return false;
    gpu_nf_fix_bits(Kt, 64, D, [&](int r, int d) { return r * LD + d; }, bf, nfk, tid, 128);
    __syncthreads();
    return true;
  };
  auto nf_post = [&](int j) {
#pragma unroll
    for (int hh = 0; hh < 2; hh++) { /* the keys of the tile the row sees, as bits */
      int64_t f;
      const int64_t nk = lp_mask_range(&msk, r0 + warp * 16 + lay.row(hh), j * 64, min(64, Skv - j * 64), &f);
      const uint64_t seen = nk <= 0 ? 0 : (nk >= 64 ? ~0ull : (1ull << nk) - 1) << f;
#pragma unroll
      for (int o = 0; o < NO; o++)
        if (nfk[lay.chan(o)] & seen) dq[hh][o] += gpu_nf_nan();
    }
  };
  if constexpr (!LOW) { /* every tile high (the kernel of precision HIGH) */
    if (nj > j0) issue(j0, 0);
    for (int j = j0; j < nj; j++) {
      const int buf = (j - j0) & 1;
      if (j + 1 < nj) {
        issue(j + 1, buf ^ 1);
        gpu_cp_wait<1>();
      } else {
        gpu_cp_wait<0>();
      }
      __syncthreads();
      const bool nf = nf_pre(Kb + buf * T64, j);
      hstep(Qs, Os, Kb + buf * T64, Vb + buf * T64, j);
      if (nf) nf_post(j);
      __syncthreads();
    }
  } else {
    /* Low tiles (SEMANTICS "Backward"), every step loaded in turn (two CTAs
     * an SM overlap one's loads with the other's products). Low
     * operands: Ql, Dd (the forward's Q along D, dO along D with SR; this
     * query tile), Kl, Vl (the forward's K, V along D) and Kc (K along the
     * keys) of the step's key tile. */
    typedef gpu_mma<gpu_bf16> LO;
    /* [Ql][Dd] resident, then the step tiles Kl, Vl, Kc (a high step: K, V, Q, dO) */
    unsigned short *Ql = (unsigned short *)gpu_bwd_raw, *Dd = Ql + T64, *Kl = Dd + T64, *Vl = Kl + T64,
                   *Kc = Vl + T64, *S3 = Kc + T64;
    float *qso = (float *)(S3 + T64), *dso = qso + 64,
          *kso = dso + 64, *vso = kso + 64, *kco = vso + 64;
    constexpr int fmt = LOW ? FMT : 0; /* a.low, fixed per instance */
    gpu_bwd_low_tile<D>(Ql, a.lq, a.Hq, Sq, b, h, r0);
    gpu_bwd_low_tile<D>(Dd, a.dod, a.Hq, Sq, b, h, r0);
    gpu_bwd_row_outer(qso, a.lq_out, fmt, a.Hq, Sq, b, h, r0);
    gpu_bwd_row_outer(dso, a.dod_out, fmt, a.Hq, Sq, b, h, r0);
    gpu_cp_commit();
    const unsigned short *Qlw = Ql + warp * 16 * LD, *Ddw = Dd + warp * 16 * LD;
    for (int j = j0; j < nj; j++) {
      const bool lowt = a.leaky || !gpu_bwd_diag(msk, r0, j * 64, Sq);
      __syncthreads(); /* the previous step's tiles are read */
      if (lowt) {
        gpu_bwd_low_tile<D>(Kl, a.lk, a.Hkv, Skv, b, hk, j * 64);
        gpu_bwd_low_tile<D>(Vl, a.vd, a.Hkv, Skv, b, hk, j * 64);
        gpu_bwd_low_tile<D>(Kc, a.kc, a.Hkv, Skv, b, hk, j * 64);
        gpu_bwd_row_outer(kso, a.lk_out, fmt, a.Hkv, Skv, b, hk, j * 64);
        gpu_bwd_row_outer(vso, a.vd_out, fmt, a.Hkv, Skv, b, hk, j * 64);
        gpu_bwd_chan_outer<D>(kco, a.kc_out, fmt, a.Hkv, Skv, b, hk, j);
      } else { /* a diagonal tile pair (SPEC 4): K, V and this query tile's Q, dO, high */
        gpu_bwd_tile<D>(Kl, a.k, a.sk, b, hk, j * 64, Skv, a.vec16);
        gpu_bwd_tile<D>(Vl, a.v, a.sv, b, hk, j * 64, Skv, a.vec16);
        gpu_bwd_tile<D>(Kc, a.q, a.sq, b, h, r0, Sq, a.vec16);
        gpu_bwd_tile<D>(S3, a.dout, a.sdo, b, h, r0, Sq, a.vec16);
      }
      gpu_cp_commit();
      gpu_cp_wait<0>();
      __syncthreads();
      if (!lowt) {
        const bool nf = nf_pre(Kl, j);
        hstep(Kc, S3, Kl, Vl, j);
        if (nf) nf_post(j);
        continue;
      }
      float s[2][16], dp[2][16], dout[2];
#pragma unroll
      for (int hh = 0; hh < 2; hh++)
#pragma unroll
        for (int sl = 0; sl < 16; sl++) s[hh][sl] = dp[hh][sl] = 0.0f;
      gpu_mm_scores<LO, D>(s, Qlw, Kl, lane); /* S = Q^ K^T, then the outer scales */
#pragma unroll
      for (int hh = 0; hh < 2; hh++)
#pragma unroll
        for (int sl = 0; sl < 16; sl++)
          s[hh][sl] = __fmul_rn(s[hh][sl], __fmul_rn(qso[warp * 16 + lay.row(hh)], kso[lay.key(sl)]));
      const bool edge = j * 64 + 64 > Skv || gpu_bwd_diag(msk, r0, j * 64, Sq);
      gpu_bwd_probs<false>(s, lay, r0 + warp * 16, j * 64, lse, edge, a);
      gpu_mm_scores<LO, D>(dp, Ddw, Vl, lane); /* dP = dO_d V_d^T (both along D) */
      gpu_bwd_ds<false>(s, lay, r0 + warp * 16, j * 64, edge, lse, a, [&](int hh, int sl) {
        const float d = __fmul_rn(dp[hh][sl], __fmul_rn(dso[warp * 16 + lay.row(hh)], vso[lay.key(sl)]));
        return d - del[hh]; /* dS = P (dP - Delta) */
      });
      /* dQ += dS_c K_c (both along the keys) */
      const int64_t pbase = (((int64_t)b * a.Hq + h) * Sq + r0 + warp * 16) * (int64_t)Skv + j * 64;
      gpu_bwd_sr_tile<false>(s, dout, lane, fmt, a.mx_round_up, gpu_bwd_key(a.seed, 4), pbase, Skv);
      gpu_mm_pv_low<D>(dq, s, Kc, false, dout, kco, lane);
    }
    gpu_cp_wait<0>();
  }

#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    const int r = r0 + warp * 16 + lay.row(hh);
    if (r >= Sq) continue;
#pragma unroll
    for (int o = 0; o < NO; o++)
      gpu_store(a.dq, a.dq_dtype, lpk_off(a.sdq, b, h, r, lay.chan(o)), dq[hh][o] * a.sm_scale);
  }
}

#include "lp_gpu_bwd_launch.cuh"
} // namespace LP_GPU_NS
#endif /* LPATTN_HIP */
#endif /* LP_GPU_BWD_CUH */
