/* Paged decode (SPEC 9, SEMANTICS "Decode"): one CTA of 4 warps per
 * (sequence, kv head, chunk of LP_DECODE_CHUNK_TILES tiles, block of 8
 * query rows), the rows being the GQA group's q heads x Sq positions (padded
 * to 8, the n of mma.sync m16n8k16; 16, the m, in high tiles). Each KV page
 * of the chunk is streamed once into a per-warp ring in shared memory and
 * dequantized in registers:
 * - low tiles (FP8/NVFP4/MXFP4 pages, keys the rows see in full): warp w
 *   takes tiles w, w+4, ... of the chunk, a whole 64-key tile each; its K
 *   and V halves arrive by one cp.async.bulk each (mbarrier per ring slot).
 *   E2M1 codes become f16 by bit moves alone (lpd_fp4x8: value x 2^-14,
 *   10 instructions per 8 codes), times the E4M3 group scale in f16
 *   (exact), the 2^14 folded into the f32 outer factor; MXFP4 scales are
 *   powers of two relative to the key's (channel's) largest, times 2^8,
 *   the largest applied in f32 after the product; FP8 codes convert exactly
 *   (cvt.rn.f16x2.e4m3x2).
 *   Q (quantized by each CTA for its rows with the backend quantizer's own
 *   domain function, lp_gpu_quant.cuh: no separate launch) and K are read in
 *   a d order that gives each lane one contiguous run of codes (a dot
 *   product does not depend on the order of d); keys are permuted so that a
 *   lane's 16 keys are contiguous, which makes a 16-key P/V group lane-local.
 *   P is quantized per row in registers (SEMANTICS low tile step 4) against
 *   the chunk's running max: the warps exchange their tiles' row maxima once
 *   per round of 4 tiles, so tile t's P uses max over tiles <= t of the chunk.
 *   Outer scales (K per token, V per channel, P per row) multiply the f32
 *   products of the tile.
 * - high tiles (HIGH pages, the diagonal tile(s) of the slot ring or, THRIFT,
 *   of the pages, and THRIFT's selected tiles from their pages: bit masks of
 *   lp_gpu_decode_thrift, read once per CTA): warp w
 *   takes keys [16w, 16w+16) of every high tile (no quantization: the order
 *   of the online softmax does not matter), cp.async 16-byte copies,
 *   ldmatrix + mma in f16/bf16.
 * The 4 warps' states are merged at the end into the chunk's partial state
 * (O, LSE, H), merged over chunks by the SPEC 7 merge kernel (gpu_merge_kernel).
 * A chunk depends only on its sequence: results are batch-invariant.
 * Files: lp_gpu_decode_prim.cuh (register primitives, CTA context),
 * lp_gpu_decode_low.cuh (low-tile step), lp_gpu_decode_high.cuh
 * (high-tile step), this one (Q, tile selection, the warps' merge, launch). */
#ifndef LP_GPU_DECODE_CUH
#define LP_GPU_DECODE_CUH
#include "lp_gpu_decode_low.cuh"
#include "lp_gpu_decode_high.cuh"
#include "lp_gpu_quant.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
#ifndef LPATTN_HIP /* CUDA */

/* Tile selection of the paged pool (SEMANTICS "Decode"): a row at query
 * position p sees the tiles below its own tile low (in a low pool) and its
 * own tile high, from the sequence's slot ring; a HIGH pool reads every
 * tile high from its page. A step takes tile j for row p where low(j, p)
 * or high(j, p); another selection (THRIFT: some tiles high per row) is
 * another struct with the same three members. */
struct lpd_sel_ring {
  __device__ __forceinline__ bool low(int j, int p) const { return j < p / LPD_T; }
  __device__ __forceinline__ bool high(int j, int p) const { return j == p / LPD_T; }
  template <int D> __device__ __forceinline__ const uint8_t *src(const lpd_ctx<D> &C, int j, bool v) const {
    const lp_gpu_pool &P = C.P;
    if (!P.has_ring) { /* THRIFT: every tile keeps its high copy in its page */
      const uint8_t *pg = C.page_ptr(j);
      return pg ? pg + (v ? P.hv : P.hk) + (int64_t)C.h * LPD_T * D * 2 : nullptr;
    }
    const uint8_t *sl = P.mem + (int64_t)C.slot * P.slot_bytes + (v ? P.rv : P.rk);
    return sl + (int64_t)(j & 1) * P.Hkv * LPD_T * D * 2 + (int64_t)C.h * LPD_T * D * 2;
  }
};
/* FP8_STATIC pools (SPEC 11): every tile a row sees is read low from its
 * page, its own tile too (masked per key: lpd_low_tiles<S8>); no ring. */
struct lpd_sel_fp8s {
  __device__ __forceinline__ bool low(int j, int p) const { return j <= p / LPD_T; }
  __device__ __forceinline__ bool high(int, int) const { return false; }
};
struct lpd_sel_pages {
  __device__ __forceinline__ bool low(int, int) const { return false; }
  __device__ __forceinline__ bool high(int, int) const { return true; }
  template <int D> __device__ __forceinline__ const uint8_t *src(const lpd_ctx<D> &C, int j, bool v) const {
    const uint8_t *pg = C.page_ptr(j);
    return pg ? pg + (v ? C.P.hv : C.P.hk) + (int64_t)C.h * LPD_T * D * 2 : nullptr;
  }
};

/* Q of the CTA's rows into shared memory: high rows (Qh, zero-padded to
 * 16), and for low pools the inner values (codes x group scale, MXFP4
 * relative to the row's largest scale) of the quantized rows (Ql) with
 * each row's outer factor (qf). Low pools quantize the rows here, warp w
 * rows w and w + 4, with lpattn_quantize's own domain quantizer
 * (lp_gpu_quant.cuh: the same codes as the backend's quantize kernel, so no
 * separate launch), into the warps' regions of shared memory (free until
 * the tile steps start). */
template <int D, int FMT, bool S8> __device__ __forceinline__ void lpd_load_q(const lpd_ctx<D> &C) {
  constexpr int LDH = lpd_smem<D>::LDH;
  constexpr bool LOW = FMT >= 0;
  const lp_gpu_pdecode_args &a = C.a;
  const lp_gpu_pool &P = C.P;
  const int G = C.G, Sq = C.Sq, h = C.h, rb = C.rb, b = C.b;
  unsigned short *Qh = C.Qh, *Ql = C.Ql;
  float *qf = C.qf;
  /* scratch: codes [8][D] (FP4: D / 2 bytes a row), scales [8][D / 16], outer [8] */
  uint8_t *qcodes = C.sm, *qscales = qcodes + 8 * D;
  float *qouter = (float *)(qscales + 8 * (D / 16));
  /* FP8_STATIC: Q^ = E4M3(q / q_descale) (SPEC 11, core/fp8s.c), factor q_descale */
  const float qd8 = S8 && a.q_desc ? a.q_desc[b * a.sqd[0] + h * a.sqd[1]] : 1.0f;
  if (LOW && !S8) {
    lp_gpu_quant_args qa;
    memset(&qa, 0, sizeof qa);
    qa.format = FMT, qa.mx_round_up = P.mx_round_up;
    qa.codes = qcodes, qa.scales = qscales, qa.outer = qouter;
    for (int r = C.warp; r < 8; r += 4) {
      if (!C.live(r)) continue;
      const int rr = 8 * rb + r, qh = h * G + rr / Sq, s = rr % Sq;
      auto load = [&](int i) -> float { return gpu_load(a.q, P.hdt, lpk_off(a.sq, b, qh, s, i)); };
      auto sr_index = [&](int) -> uint64_t { return 0; }; /* RNE: no uniforms */
      gpu_quant_domain(qa, C.lane, D, load, sr_index, (int64_t)r * D, r);
    }
    __syncthreads();
  }
  /* a thread takes d, d + 1 of a row (one code byte of E2M1); rows 8..15
   * of Qh (the m16 padding of the high tiles) are zero */
  for (int e = threadIdx.x; e < 8 * D / 2; e += blockDim.x) {
    const int r = e / (D / 2), d = 2 * (e % (D / 2)), rr = 8 * rb + r;
    const int qh = h * G + rr / Sq, s = rr % Sq;
    uint32_t v = 0;
    float x[2] = {0.0f, 0.0f}, f = 0.0f;
    if (C.live(r)) {
      const unsigned short *q = (const unsigned short *)a.q;
      const int64_t o = lpk_off(a.sq, b, qh, s, d);
      v = q[o] | (uint32_t)q[o + a.sq[3]] << 16;
      if (S8) {
        x[0] = lpk_e4m3_decode(lpk_e4m3_encode(gpu_load(a.q, P.hdt, o) / qd8));
        x[1] = lpk_e4m3_decode(lpk_e4m3_encode(gpu_load(a.q, P.hdt, o + a.sq[3]) / qd8));
        f = qd8;
      } else if (LOW) {
        const int row = r; /* the scratch rows of gpu_quant_domain above */
        if (FMT == LPATTN_FMT_FP8) {
          x[0] = lpk_e4m3_decode(qcodes[row * D + d]), x[1] = lpk_e4m3_decode(qcodes[row * D + d + 1]);
          f = qouter[row];
        } else {
          const uint8_t c = qcodes[row * (D / 2) + d / 2]; /* codes d (low nibble), d + 1 */
          float sc;
          if (FMT == LPATTN_FMT_NVFP4) {
            sc = lpk_e4m3_decode(qscales[row * (D / 16) + d / 16]), f = qouter[row];
          } else {
            const uint8_t *sr = qscales + row * (D / 32);
            int emax = 0;
            for (int k = 0; k < D / 32; k++) emax = max(emax, (int)sr[k]);
            sc = lpk_pow2(max((int)sr[d / 32] - emax, -140));
            f = lpk_e8m0_decode((uint8_t)emax);
          }
          x[0] = lpk_e2m1_decode(c & 15) * sc, x[1] = lpk_e2m1_decode(c >> 4) * sc;
        }
      }
    }
    *(uint32_t *)&Qh[r * LDH + d] = v, *(uint32_t *)&Qh[(r + 8) * LDH + d] = 0u;
    if (LOW) { /* by low slot (lpd_lslot) */
      const int sl = lpd_lslot(r);
      Ql[sl * D + d] = __half_as_ushort(__float2half_rn(x[0]));
      Ql[sl * D + d + 1] = __half_as_ushort(__float2half_rn(x[1]));
      if (d == 0) qf[sl] = f;
    }
  }
}

/* The 4 warps' low and high states merged into the chunk's partial state. */
template <int D> __device__ __forceinline__ void lpd_merge_warps(const lpd_ctx<D> &C, const lpd_acc<D> &A) {
  constexpr int NB = D / 8;
  const lp_gpu_pdecode_args &a = C.a;
  const int warp = C.warp, g = C.g, t = C.t;
  float *mo = (float *)C.sm;  /* [8 states][8 rows][D] */
  float *mr = mo + 8 * 8 * D;   /* [8 states][8 rows][4]: m, l, r, n */
#pragma unroll
  for (int ct = 0; ct < NB / 2; ct++)
#pragma unroll
    for (int e = 0; e < 4; e++) mo[((2 * warp) * 8 + lpd_lrow(2 * t + (e & 1))) * D + 16 * ct + g + 8 * (e >> 1)] = A.accl[ct][e];
#pragma unroll
  for (int nb = 0; nb < NB; nb++)
#pragma unroll
    for (int e = 0; e < 2; e++) mo[((2 * warp + 1) * 8 + g) * D + 8 * nb + 2 * t + e] = A.acc[nb][e];
  if (g == 0)
#pragma unroll
    for (int i = 0; i < 2; i++) {
      float *x = mr + ((2 * warp) * 8 + lpd_lrow(2 * t + i)) * 4;
      x[0] = A.stl[i].m, x[1] = A.stl[i].l, x[2] = A.stl[i].r, x[3] = (float)A.stl[i].n;
    }
  if (t == 0) {
    float *x = mr + ((2 * warp + 1) * 8 + g) * 4;
    x[0] = A.st[0].m, x[1] = A.st[0].l, x[2] = A.st[0].r, x[3] = (float)A.st[0].n;
  }
  __syncthreads();
  {
    const int r = threadIdx.x >> 4, part = threadIdx.x & 15;
    if (C.live(r)) {
      float M = gpu_ninf(), f[8];
      int n = 0;
#pragma unroll
      for (int w = 0; w < 8; w++) M = fmaxf(M, mr[(w * 8 + r) * 4]);
      lpk_row m;
      lpk_row_init(&m);
      m.m = M;
#pragma unroll
      for (int w = 0; w < 8; w++) {
        const float *x = mr + (w * 8 + r) * 4;
        f[w] = x[0] == gpu_ninf() ? 0.0f : expf(x[0] - M);
        m.l += x[1] * f[w], m.r += x[2] * f[w];
        n += (int)x[3];
      }
      m.n = n;
      float inv_l, lse, ent;
      lpk_row_finish(&m, &inv_l, &lse, &ent);
      const int64_t pr = C.prow(r);
      for (int d = part; d < D; d += 16) {
        float y = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; w++)
          if (f[w] != 0.0f) y += mo[(w * 8 + r) * D + d] * f[w];
        a.part_o[pr * D + d] = y * inv_l;
      }
      if (part == 0) a.part_l[pr] = lse, a.part_h[pr] = ent;
    }
  }
}

/* PASA: the pool is a PASA pool (a constant, so that the other kernels'
 * tile loops carry no PASA code; the launcher picks the kernel by the pool).
 * S8: an FP8_STATIC pool (FMT FP8; every tile low, lpd_sel_fp8s). WIN: the
 * call has a sliding window or a softcap (the plan's k.win; never PASA). */
template <typename HT, int D, int FMT, int RING, bool PASA, bool S8 = false, bool WIN = false>
__device__ __forceinline__ void lpd_body(const lp_gpu_pdecode_args &a) {
  typedef lpd_smem<D> SM;
  constexpr int T = LPD_T, LDH = SM::LDH;
  constexpr bool LOW = FMT >= 0;
  extern __shared__ __align__(128) uint8_t lpd_sm[];
  lpd_ctx<D> C(a);
  const lp_gpu_pool &P = a.pool;
  C.warp = threadIdx.x >> 5, C.lane = threadIdx.x & 31, C.g = C.lane >> 2, C.t = C.lane & 3;
  C.chunk = blockIdx.x, C.b = blockIdx.z;
  C.G = P.Hq / P.Hkv;
  const int nrb = (C.G * a.Sq + 7) / 8; /* blocks of 8 query rows */
  C.h = blockIdx.y / nrb, C.rb = blockIdx.y % nrb;
  C.len = a.seqs.lens[C.b] + a.seqs.len_add, C.Sq = a.Sq;
  C.wr = SM::region(P.head_bytes, P.vc, LOW, RING);
  C.sm = lpd_sm;
  C.Qh = (unsigned short *)(lpd_sm + 4 * C.wr);
  C.Ql = C.Qh + 16 * LDH;
  C.qf = (float *)(C.Ql + (LOW ? 8 * D : 0)), C.xm = C.qf + 8;
  C.bars = (uint64_t *)(C.xm + 2 * 4 * 8) + 4 * C.warp;
  C.rsel = (uint32_t *)((uint64_t *)(C.xm + 2 * 4 * 8) + 4 * 4);
  C.thrift = LOW && P.has_qmean, C.pasa = PASA;
  /* sharded decode (core/kvpage.h): the slot's tile 0 is the sequence's
   * tile t0, chunks are counted in the sequence's tiles, and q's rows sit at
   * q_start - kv_start of the slot (past all its tiles in an earlier shard).
   * The device does not check the shard rules of lpattn.h (no host read):
   * a shard that breaks them gets unspecified values, read in bounds. */
  const bool shard = a.seqs.kv_start != nullptr;
  const int t0m = shard ? max(a.seqs.kv_start[C.b], 0) / T % a.chunk_tiles : 0;
  C.q0 = shard ? a.seqs.q_start[C.b] - a.seqs.kv_start[C.b] : C.len - a.Sq;
  C.jdiag = max(C.q0, 0) / T;
  const int ntile = C.len > 0 ? (C.len + T - 1) / T : 0;
  C.j0 = max(C.chunk * a.chunk_tiles - t0m, 0), C.j1 = min((C.chunk + 1) * a.chunk_tiles - t0m, ntile);
  /* WIN (the _win kernels): the window and softcap at run time; the others
   * fold them away (no registers, no instructions) */
  /* a window of at least every row's position masks nothing: off, which also
   * keeps key + wl below 2^31 for any window_left up to INT_MAX */
  C.win = WIN && a.win_left >= 0 && a.win_left < C.q0 + C.Sq;
  C.wl = WIN ? a.win_left : 0, C.cap = WIN ? a.softcap : 0.0f;
  if (C.win) { /* tiles wholly before the call's first row's window: never read */
    const lp_mask m = {1, 0, a.win_left, -1, T};
    int64_t w0, w1;
    lp_mask_tiles(&m, C.q0, C.q0, T, ntile, &w0, &w1);
    C.j0 = max(C.j0, (int)w0);
  }
  C.slot = a.seqs.slots[C.b];
  if (C.j0 >= C.j1 || C.slot < 0 || C.slot >= P.num_slots) {
    if (threadIdx.x < 8 && C.live(threadIdx.x)) {
      a.part_l[C.prow(threadIdx.x)] = gpu_ninf();
      a.part_h[C.prow(threadIdx.x)] = 0.0f;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int r = C.g + 8 * i, rl = lpd_lrow(2 * C.t + i); /* low: slot 2t + i */
    C.R.live[i] = C.live(r), C.RL.live[i] = C.live(rl);
    C.R.p[i] = C.q0 + (8 * C.rb + r) % C.Sq, C.RL.p[i] = C.q0 + (8 * C.rb + rl) % C.Sq;
  }
  if (threadIdx.x < 8) C.rsel[threadIdx.x] = lpd_sel_bits(C.selmask(threadIdx.x), C.j0, C.j1);
  lpd_load_q<D, FMT, S8>(C);
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 2; i++) C.R.sel[i] = i ? 0u : C.rsel[C.g], C.RL.sel[i] = C.rsel[lpd_lrow(2 * C.t + i)];
  C.two = C.live(4);
  /* the chunk's tiles computed high (bit j - j0): every tile of HIGH pools;
   * of low pools the diagonal tile(s) of the call's rows and (THRIFT) the
   * tiles selected for any row of the block (CTA-uniform) */
  uint32_t hmask = 0;
  for (int j = max(C.j0, LOW ? C.jdiag : 0); j < C.j1; j++) hmask |= 1u << (j - C.j0);
  for (int r = 0; r < 8 && C.thrift; r++) hmask |= C.rsel[r];

  lpd_acc<D> A;
  lpk_row_init(&A.st[0]), lpk_row_init(&A.st[1]), lpk_row_init(&A.stl[0]), lpk_row_init(&A.stl[1]);
#pragma unroll
  for (int nb = 0; nb < D / 8; nb++) A.acc[nb][0] = A.acc[nb][1] = A.acc[nb][2] = A.acc[nb][3] = 0.0f;
#pragma unroll
  for (int ct = 0; ct < D / 16; ct++) A.accl[ct][0] = A.accl[ct][1] = A.accl[ct][2] = A.accl[ct][3] = 0.0f;
  C.mybuf = lpd_sm + (size_t)C.warp * C.wr;
  C.pages0 = P.num_slots * P.slot_bytes;
  C.table = a.seqs.table + (int64_t)C.b * a.seqs.table_stride;

  if (S8) {
    lpd_low_tiles<D, FMT, RING, lpd_sel_fp8s, true>(C, A, lpd_sel_fp8s());
  } else if (LOW) {
    lpd_low_tiles<D, FMT, RING>(C, A, lpd_sel_ring());
    lpd_high_tiles<HT, D>(C, A, hmask, lpd_sel_ring());
  } else {
    lpd_high_tiles<HT, D>(C, A, hmask, lpd_sel_pages());
  }
  __syncthreads();
  lpd_merge_warps<D>(C, A);
}

/* a page format the variant has no kernel for (MLA: MXFP4, FP8_STATIC) */
inline lpattn_status lpd_none(const lp_gpu_pdecode_args *, const lp_gpu_dec_launch *, cudaStream_t) {
  return LPATTN_ERR_UNSUPPORTED;
}

template <void (*K)(lp_gpu_pdecode_args), int D, bool LOW, int RING>
static lpattn_status lpd_launch(const lp_gpu_pdecode_args *a, const lp_gpu_dec_launch *l, cudaStream_t st) {
  const int wr = lpd_smem<D>::region(a->pool.head_bytes, a->pool.vc, LOW, RING);
  const size_t smem = lpd_smem<D>::bytes(wr, LOW);
  if (smem > GPU_SMEM_MAX) return LPATTN_ERR_UNSUPPORTED;
  gpu_nf_env();
  if (cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
    return LPATTN_ERR_BACKEND;
  K<<<dim3(l->grid[0], l->grid[1], l->grid[2]), l->block, smem, st>>>(*a); /* the plan's grid */
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}
#endif
} // namespace LP_GPU_NS
#endif
