/* The HIP half of the paged decode (kernel_decode.cu.j2 includes it for
 * dialect 'hip'; the CUDA half is lp_gpu_decode.cuh). Portable code: FMAs
 * over dequantized values, no matrix cores, no asynchronous copies, so the
 * same text runs on wave64 (CDNA), wave32 (RDNA) and the HIP-on-CUDA shim.
 */
#ifndef LP_GPU_DECODE_HIP_CUH
#define LP_GPU_DECODE_HIP_CUH
#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
/* Paged decode (SPEC 9, SEMANTICS "Decode") on HIP: one block of 256
 * threads per (chunk of LP_DECODE_CHUNK_TILES tiles, kv head x block of 8
 * query rows, sequence), the rows being the GQA group's q heads x Sq
 * positions. The chunk's tiles are folded in key order from pages read in
 * place (no workspace copy), 3 phases per 64-key tile:
 * - scores: thread (key k, quarter q) dots its key's channels
 *   [q D/4, (q+1) D/4) with the 8 rows' Q (LDS), codes dequantized in
 *   registers (gpu_deq_inner: code x group scale, exact in f32);
 * - softmax: 32 threads per row, 2 keys each: quarters added in a fixed
 *   order, outer scales, masks, the online softmax step, and on low tiles
 *   P^ (SEMANTICS low tile step 4: per row of the tile, against the chunk's
 *   running max; the quantizer steps of backends/math/lpk_quant.h);
 * - O += P V: thread (channel d, group of rows) reads its channel's codes.
 * Tile modes as on CUDA: low tiles (FP8/NVFP4/MXFP4 pages) for the keys a
 * row sees in full, then the high tiles (the slot ring's diagonal tiles, or
 * every page of a HIGH pool) with the causal mask. Every reduction has a
 * fixed order and a chunk reads only its own sequence, so a row's bits do
 * not depend on the batch or on where its pages sit. */
#define LPH_T 64   /* keys per page */
#define LPH_R 8    /* query rows per block */
#define LPH_NT 256 /* threads per block */

template <int D> struct lph_smem {
  float qh[LPH_R][D];           /* the rows' queries (high tiles) */
  float ql[LPH_R][D];           /* their quantized inner values (low tiles) */
  float sp[4][LPH_R][LPH_T];    /* partial scores by channel quarter */
  float p[LPH_R][LPH_T];        /* P of the tile (P^ on low tiles) */
  float kf[LPH_T];              /* keys' outer scales (low tiles) */
  float qf[LPH_R], alpha[LPH_R], pw[LPH_R], fin[LPH_R];
  int vis[LPH_R];
};

/* N bytes at p (16-byte aligned when N is a multiple of 16) into words */
template <int N> __device__ inline void lph_ld(uint32_t (&w)[N / 4], const uint8_t *p) {
  if constexpr (N % 16 == 0) {
#pragma unroll
    for (int u = 0; u < N / 16; u++) {
      const uint4 x = ((const uint4 *)p)[u];
      w[4 * u] = x.x, w[4 * u + 1] = x.y, w[4 * u + 2] = x.z, w[4 * u + 3] = x.w;
    }
  } else {
#pragma unroll
    for (int u = 0; u < N / 8; u++) {
      const uint2 x = ((const uint2 *)p)[u];
      w[2 * u] = x.x, w[2 * u + 1] = x.y;
    }
  }
}

/* reductions over the 32 threads of a row (xor butterflies: every lane gets
 * the same bits) or over the first `lanes` of them */
__device__ inline float lph_max(float x, int lanes) {
  for (int m = 1; m < lanes; m *= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, m, 32));
  return x;
}
__device__ inline float lph_sum(float x) {
#pragma unroll
  for (int m = 1; m < 32; m *= 2) x += __shfl_xor_sync(0xffffffffu, x, m, 32);
  return x;
}

template <typename HT, int D, int FMT>
__device__ inline void lph_body(const lp_gpu_pdecode_args &a) {
  typedef gpu_mma<HT> MM;
  constexpr int T = LPH_T, R = LPH_R, NRG = LPH_NT / D, RPT = R / NRG, DQ = D / 4;
  constexpr bool LOW = FMT >= 0;
  constexpr int G = FMT == LPATTN_FMT_MXFP4 ? 32 : 16;
  static_assert(LPH_NT % D == 0 && R % NRG == 0 && D % 32 == 0, "head dim");
  __shared__ lph_smem<D> sm;
  const lp_gpu_pool &P = a.pool;
  const int tid = threadIdx.x, chunk = blockIdx.x, b = blockIdx.z;
  const int Gq = P.Hq / P.Hkv, nrb = (Gq * a.Sq + R - 1) / R;
  const int h = blockIdx.y / nrb, rb = blockIdx.y % nrb, Sq = a.Sq;
  const int len = a.seqs.lens[b] + a.seqs.len_add;
  const int32_t slot = a.seqs.slots[b];
  const int ntile = len > 0 ? (len + T - 1) / T : 0;
  /* sharded decode (core/kvpage.h, as the CUDA kernel): the slot's tile 0 is
   * the sequence's tile t0, chunks are counted in the sequence's tiles, q's
   * rows sit at q0 = q_start - kv_start of the slot; unchecked on the device
   * (a shard that breaks lpattn.h's rules gets unspecified values, in bounds) */
  const bool shard = a.seqs.kv_start != nullptr;
  const int t0m = shard ? max(a.seqs.kv_start[b], 0) / T % a.chunk_tiles : 0;
  const int q0 = shard ? a.seqs.q_start[b] - a.seqs.kv_start[b] : len - Sq;
  const int j0 = max(chunk * a.chunk_tiles - t0m, 0), j1 = min((chunk + 1) * a.chunk_tiles - t0m, ntile);
  auto live = [&](int r) { return R * rb + r < Gq * Sq; };
  auto qhead = [&](int r) { return h * Gq + (R * rb + r) / Sq; };
  auto prow = [&](int r) -> int64_t { /* partial-state row of block row r */
    const int rr = R * rb + r;
    return (((int64_t)chunk * a.seqs.num_seqs + b) * P.Hq + qhead(r)) * Sq + rr % Sq;
  };
  auto pos = [&](int r) { return q0 + (R * rb + r) % Sq; };
  if (j0 >= j1 || slot < 0 || slot >= P.num_slots) {
    if (tid < R && live(tid)) a.part_l[prow(tid)] = gpu_ninf(), a.part_h[prow(tid)] = 0.0f;
    return;
  }

  /* ---- Q: the rows' queries, and (low pools) their quantized inner values */
  for (int e = tid; e < R * D; e += LPH_NT) {
    const int r = e / D, d = e % D, s = (R * rb + r) % Sq, qh = qhead(r);
    float x = 0.0f, xl = 0.0f, f = 0.0f;
    if (live(r)) {
      x = MM::tof(((const unsigned short *)a.q)[lpk_off(a.sq, b, qh, s, d)]);
      if (LOW) {
        const int64_t row = ((int64_t)b * P.Hq + qh) * Sq + s;
        const uint8_t c = FMT == LPATTN_FMT_FP8 ? a.qcodes[row * D + d]
                                                : (uint8_t)((a.qcodes[row * (D / 2) + d / 2] >> (4 * (d & 1))) & 15);
        xl = gpu_deq_inner(FMT, c, FMT == LPATTN_FMT_FP8 ? 0 : a.qscales[row * (D / G) + d / G]);
        f = FMT == LPATTN_FMT_MXFP4 ? 1.0f : a.qouter[row]; /* MXFP4: no outer scale */
      }
    }
    sm.qh[r][d] = x, sm.ql[r][d] = xl;
    if (d == 0) sm.qf[r] = f;
  }
  __syncthreads();

  const int32_t *table = a.seqs.table + (int64_t)b * a.seqs.table_stride;
  const int64_t pages0 = P.num_slots * P.slot_bytes;
  auto page_ptr = [&](int j) -> const uint8_t * {
    const int32_t pg = j < a.seqs.max_pages ? table[j] : -1;
    return pg >= 0 && pg < P.num_pages ? P.mem + pages0 + (int64_t)pg * P.page_bytes : nullptr;
  };
  /* high K or V rows of tile j for this head: the slot ring or the page */
  auto high_ptr = [&](int j, bool v) -> const uint8_t * {
    const int64_t hoff = (int64_t)h * T * D * 2;
    if (LOW)
      return P.mem + (int64_t)slot * P.slot_bytes + (v ? P.rv : P.rk) + (int64_t)(j & 1) * P.Hkv * T * D * 2 + hoff;
    const uint8_t *pg = page_ptr(j);
    return pg ? pg + (v ? P.hv : P.hk) + hoff : nullptr;
  };

  /* softmax-phase roles: row sr, keys 2 sl and 2 sl + 1 */
  const int sr = tid >> 5, sl = tid & 31;
  const int sp_ = pos(sr);
  lpk_row st;
  lpk_row_init(&st);
  /* O += P V roles: channel od, rows og RPT .. og RPT + RPT - 1 */
  const int od = tid % D, og = tid / D;
  float o[RPT];
#pragma unroll
  for (int i = 0; i < RPT; i++) o[i] = 0.0f;

  /* one tile: low (quantized page) or high (16-bit keys, causal) */
  auto tile = [&](int j, bool low) {
    const uint8_t *base = nullptr;
    if (low) {
      const uint8_t *pg = page_ptr(j);
      base = pg ? pg + (int64_t)P.head_bytes * h : nullptr;
    }
    /* ---- scores: key k, channels [c0, c0 + DQ) -------------------------- */
    {
      const int k = tid & (T - 1), q = tid / T, c0 = q * DQ;
      float acc[R];
#pragma unroll
      for (int r = 0; r < R; r++) acc[r] = 0.0f;
      if (LOW && low) {
        float kf = 0.0f;
        if (base) {
          if (FMT == LPATTN_FMT_FP8) {
            uint32_t w[DQ / 4];
            lph_ld<DQ>(w, base + P.kc + (int64_t)k * D + c0);
#pragma unroll
            for (int e = 0; e < DQ; e++) {
              const float kv = gpu_deq_inner(FMT, (uint8_t)(w[e >> 2] >> (8 * (e & 3))), 0);
#pragma unroll
              for (int r = 0; r < R; r++) acc[r] = fmaf(sm.ql[r][c0 + e], kv, acc[r]);
            }
          } else {
            uint32_t w[DQ / 8];
            lph_ld<DQ / 2>(w, base + P.kc + (int64_t)k * (D / 2) + c0 / 2);
            const uint8_t *ks = base + P.ks + (int64_t)k * (D / G);
#pragma unroll
            for (int e = 0; e < DQ; e++) {
              const float kv = gpu_deq_inner(FMT, (uint8_t)((w[e >> 3] >> (4 * (e & 7))) & 15), ks[(c0 + e) / G]);
#pragma unroll
              for (int r = 0; r < R; r++) acc[r] = fmaf(sm.ql[r][c0 + e], kv, acc[r]);
            }
          }
          kf = FMT == LPATTN_FMT_MXFP4 ? 1.0f : ((const float *)(base + P.ko))[k];
        }
        if (q == 0) sm.kf[k] = kf;
      } else {
        const uint8_t *kp = high_ptr(j, false);
        if (kp && j * T + k < len) {
          uint32_t w[DQ / 2];
          lph_ld<DQ * 2>(w, kp + ((int64_t)k * D + c0) * 2);
#pragma unroll
          for (int e = 0; e < DQ; e++) {
            const float kv = MM::tof((unsigned short)(w[e >> 1] >> (16 * (e & 1))));
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] = fmaf(sm.qh[r][c0 + e], kv, acc[r]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < R; r++) sm.sp[q][r][k] = acc[r];
    }
    __syncthreads();

    /* ---- softmax step of row sr, keys 2 sl, 2 sl + 1 ----------------------- */
    {
      const int pt = sp_ / T;
      const bool tv = live(sr) && (low ? j < pt : j <= pt && (!LOW || j == pt));
      float s[2], tm = gpu_ninf();
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int k = 2 * sl + e, key = j * T + k;
        float v = (sm.sp[0][sr][k] + sm.sp[1][sr][k]) + (sm.sp[2][sr][k] + sm.sp[3][sr][k]);
        if (low) v = __fmul_rn(__fmul_rn(v, __fmul_rn(sm.qf[sr], sm.kf[k])), a.sm_scale);
        else v = __fmul_rn(v, a.sm_scale);
        s[e] = tv && (low || key <= sp_) ? v : gpu_ninf();
        tm = fmaxf(tm, s[e]);
      }
      lpk_step stp = lpk_row_begin(&st, lph_max(tm, 32), 0.0f);
      if (!tv) stp.alpha = 1.0f, stp.bias = 0.0f;
      float ps = 0.0f, pss = 0.0f;
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const float p = s[e] == gpu_ninf() ? 0.0f : __expf(s[e] + stp.bias);
        ps += p;
        if (p != 0.0f) pss += p * s[e];
        s[e] = p;
      }
      ps = lph_sum(ps), pss = lph_sum(pss);
      if (tv) lpk_row_end(&st, &stp, ps, pss);
      float pw = 1.0f;
      if (LOW && low) { /* P^ of the tile's row (SEMANTICS low tile step 4) */
        if (FMT == LPATTN_FMT_FP8) {
          s[0] = lpk_e4m3_round(__fmul_rn(s[0], 448.0f)), s[1] = lpk_e4m3_round(__fmul_rn(s[1], 448.0f));
          pw = 1.0f / 448.0f;
        } else {
          float ga = 0.0f, bad = 0.0f;
#pragma unroll
          for (int e = 0; e < 2; e++) {
            if (lpk_finite(s[e])) ga = fmaxf(ga, fabsf(s[e]));
            else bad = 1.0f;
          }
          ga = lph_max(ga, G / 2), bad = lph_max(bad, G / 2); /* the group's lanes */
          const float outer = lpk_outer_scale(FMT, lph_max(ga, 32));
          uint8_t sc;
          float denom;
          const float sval = lpk_group_scale(FMT, ga, 0, outer, P.mx_round_up, &sc, &denom);
          /* x * (1/denom): P is an f32 approximation already (SEMANTICS step 2) */
          const float rden = denom == 0.0f ? 0.0f : 1.0f / denom;
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const float qv = denom == 0.0f ? 0.0f : lpk_e2m1_round(s[e] * rden);
            s[e] = bad != 0.0f ? lpk_from_bits(0x7fc00000u) : qv * sval;
          }
          pw = outer;
        }
      }
      sm.p[sr][2 * sl] = s[0], sm.p[sr][2 * sl + 1] = s[1];
      if (sl == 0) sm.alpha[sr] = stp.alpha, sm.pw[sr] = pw, sm.vis[sr] = tv;
    }
    __syncthreads();

    /* ---- O = O alpha + (P V) pw vcol, channel od ----------------------------- */
    {
      float c[RPT], vcol = 1.0f;
#pragma unroll
      for (int i = 0; i < RPT; i++) c[i] = 0.0f;
      if (LOW && low) {
        if (base) {
          if (FMT == LPATTN_FMT_FP8) {
            uint32_t w[T / 4];
            lph_ld<T>(w, base + P.vc + (int64_t)od * T);
#pragma unroll
            for (int k = 0; k < T; k++) {
              const float vv = gpu_deq_inner(FMT, (uint8_t)(w[k >> 2] >> (8 * (k & 3))), 0);
#pragma unroll
              for (int i = 0; i < RPT; i++) c[i] = fmaf(sm.p[og * RPT + i][k], vv, c[i]);
            }
          } else {
            uint32_t w[T / 8];
            lph_ld<T / 2>(w, base + P.vc + (int64_t)od * (T / 2));
            const uint8_t *vs = base + P.vs + (int64_t)od * (T / G);
#pragma unroll
            for (int k = 0; k < T; k++) {
              const float vv = gpu_deq_inner(FMT, (uint8_t)((w[k >> 3] >> (4 * (k & 7))) & 15), vs[k / G]);
#pragma unroll
              for (int i = 0; i < RPT; i++) c[i] = fmaf(sm.p[og * RPT + i][k], vv, c[i]);
            }
          }
          vcol = FMT == LPATTN_FMT_MXFP4 ? 1.0f : ((const float *)(base + P.vo))[od];
        } else {
          vcol = 0.0f;
        }
      } else {
        const uint8_t *vp = high_ptr(j, true);
        const int nk = vp ? min(T, len - j * T) : 0; /* keys past the length are not read */
        for (int k = 0; k < nk; k++) {
          const float vv = MM::tof(((const unsigned short *)vp)[(int64_t)k * D + od]);
          /* a masked key's P is 0, and 0 x NaN = NaN (SPEC 2): skipped (0 x finite adds +0: no change) */
#pragma unroll
          for (int i = 0; i < RPT; i++)
            if (sm.p[og * RPT + i][k] != 0.0f) c[i] = fmaf(sm.p[og * RPT + i][k], vv, c[i]);
        }
      }
#pragma unroll
      for (int i = 0; i < RPT; i++) {
        const int r = og * RPT + i;
        if (sm.vis[r]) o[i] = o[i] * sm.alpha[r] + (c[i] * sm.pw[r]) * vcol;
      }
    }
  };

  /* low tiles [j0, jl1): below the last row's tile (all of an earlier shard's) */
  const int jl1 = LOW ? min(j1, (q0 + Sq - 1) / T) : j0;
  const int jh0 = LOW ? max(j0, max(q0, 0) / T) : j0;
  for (int j = j0; j < jl1; j++) tile(j, true);
  for (int j = jh0; j < j1; j++) tile(j, false);

  /* ---- the chunk's partial state ----------------------------------------------- */
  if (sl == 0) {
    float inv_l, lse, ent;
    lpk_row_finish(&st, &inv_l, &lse, &ent);
    sm.fin[sr] = inv_l;
    if (live(sr)) a.part_l[prow(sr)] = lse, a.part_h[prow(sr)] = ent;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < RPT; i++) {
    const int r = og * RPT + i;
    if (live(r)) a.part_o[prow(r) * D + od] = o[i] * sm.fin[r];
  }
}

} // namespace LP_GPU_NS
#endif
