/* Paged decode, register primitives (backends/gpu/kernels/lp_gpu_decode.cuh
 * says how they are used): code -> f16 conversions, f16x2 products, the
 * lane shuffles of the mma fragment layouts, the shared-memory layout of a
 * CTA and the per-CTA context the tile steps share (lpd_ctx, lpd_acc). */
#ifndef LP_GPU_DECODE_PRIM_CUH
#define LP_GPU_DECODE_PRIM_CUH
#include "lp_gpu.cuh"
#include "lp_gpu_kv_args.h"
#include "mask.h" /* the sliding window's tiles, the softcap */

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
#ifndef LPATTN_HIP /* CUDA */

#define LPD_T 64 /* keys per page (the kernels' lane mapping needs 64) */

/* low 16 bits: two E4M3 codes -> f16x2 (exact) */
__device__ __forceinline__ uint32_t lpd_e4m3x2(uint32_t two) {
  uint32_t d;
  const unsigned short a = (unsigned short)two;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"(a));
  return d;
}
/* 8 E2M1 codes (code j in bits 4j..4j+3) -> 4 f16 pairs, each value times
 * 2^-14 exactly: the magnitude bits (exponent, mantissa) go to f16 bits 9..11
 * (code 1, 0.5, becomes the subnormal 2^-15), the sign to bit 15. Even codes
 * 2k go to byte k of ze (magnitude at bits 1..3, sign at 7), odd ones to zo;
 * the pairs are o[0] = codes (0, 2), o[1] = (4, 6), o[2] = (1, 3), o[3] = (5, 7).
 * 10 instructions (the sign bits outside the mask land on masked bits). */
__device__ __forceinline__ void lpd_fp4x8(uint32_t w, uint32_t o[4]) {
  const uint32_t m = 0x0e0e0e0eu, s = w & 0x88888888u;
  const uint32_t ze = ((w << 1) & m) | ((s << 4) & ~m), zo = ((w >> 3) & m) | (s & ~m);
  o[0] = __byte_perm(ze, 0u, 0x1404), o[1] = __byte_perm(ze, 0u, 0x3424);
  o[2] = __byte_perm(zo, 0u, 0x1404), o[3] = __byte_perm(zo, 0u, 0x3424);
}
__device__ __forceinline__ uint32_t lpd_hmul2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
/* f16x2 (2^rel, 2^rel) for rel <= 15 (0 below the f16 range) */
__device__ __forceinline__ uint32_t lpd_pow2h2(int rel) {
  const uint32_t h = rel >= -14 ? (uint32_t)(rel + 15) << 10 : rel >= -24 ? 1u << (rel + 24) : 0u;
  return h | h << 16;
}
__device__ __forceinline__ uint32_t lpd_max4(uint32_t x) {
  const uint32_t a = max(x & 0xffu, (x >> 8) & 0xffu), b = max((x >> 16) & 0xffu, x >> 24);
  return max(a, b);
}
__device__ __forceinline__ float lpd_qmax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float lpd_qsum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
/* transpose of an 8x8 block of 16-bit values held in the mma fragment layout */
__device__ __forceinline__ uint32_t lpd_trans(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
/* max / sum over the 8 lanes of a quad position (the lanes that share t) */
__device__ __forceinline__ float lpd_gmax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
}
__device__ __forceinline__ float lpd_gsum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 4);
  x += __shfl_xor_sync(0xffffffffu, x, 8);
  return x + __shfl_xor_sync(0xffffffffu, x, 16);
}
__device__ __forceinline__ void lpd_mma16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  gpu_mma<__half>::run(c[0], c[1], c[2], c[3], a, b0, b1);
}

/* Bulk copies (cp.async.bulk: one instruction moves a half tile) that
 * complete on an mbarrier of one arrival; a use q of a barrier completes its
 * phase q & 1. */
__device__ __forceinline__ uint32_t lpd_sa(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void lpd_bar_init(uint64_t *bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(lpd_sa(bar)) : "memory");
}
__device__ __forceinline__ void lpd_bulk(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(lpd_sa(bar)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(lpd_sa(dst)), "l"(src), "r"(bytes), "r"(lpd_sa(bar)) : "memory");
}
__device__ __forceinline__ void lpd_bar_arrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(lpd_sa(bar)) : "memory");
}
__device__ __forceinline__ void lpd_bar_wait(uint64_t *bar, uint32_t phase) {
  asm volatile("{\n .reg .pred p;\n LPD_WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
               " @!p bra LPD_WAIT;\n}" ::"r"(lpd_sa(bar)), "r"(phase) : "memory");
}

/* Shared memory: per warp two stages (a low tile's head section of its page,
 * or 16 high keys of K and V, rows padded), Q (high), Q (low, f16 inner
 * values), per-row Q factors and the round's row maxima. */
template <int D> struct lpd_smem {
  static constexpr int LDH = D + 8; /* 16-bit elements per padded high row */
  static constexpr int HSUB = 2 * 16 * LDH * 2;
  /* bytes of one warp's region: low pools, a ring of 3 half-tiles (K part
   * [0, vc) or V part [vc, head_bytes) of a page's head section), at least
   * one high sub-block; high pools, two high sub-blocks (one past D = 256:
   * MLA's 576, where two would take 292 KB; lpd_high_tiles then waits for
   * each sub-block). The final merge reuses the 4 regions. */
  static __host__ __device__ int region(int64_t head_bytes, int64_t vc, bool low, int ring) {
    int64_t r = (D <= 256 ? 2 : 1) * HSUB;
    if (low) {
      const int64_t half = vc > head_bytes - vc ? vc : head_bytes - vc;
      r = ring * ((half + 127) / 128 * 128);
      if (r < HSUB) r = HSUB;
    }
    const int64_t merge = (int64_t)8 * 8 * (D + 4) * 4 / 4;
    if (r < merge) r = merge;
    return (int)((r + 127) / 128 * 128);
  }
  static __host__ __device__ size_t bytes(int wr, bool low) { /* low: Q's inner values too */
    return (size_t)4 * wr + 16 * LDH * 2 + (low ? 8 * D * 2 : 0) + 8 * 4 + 2 * 4 * 8 * 4 + 4 * 4 * 8 + 8 * 4;
  }
};

/* Low tiles hold the 8 block rows as the n columns ("slots") of S^T = K Q^T,
 * a lane's slots being 2t and 2t + 1. Rows 0..3 go to the even slots and rows
 * 4..7 to the odd ones, so that a block of at most 4 live rows (GQA 4, Sq = 1)
 * leaves every lane's odd slot empty and the per-element softmax and P
 * quantization of that slot are skipped (lpd_ctx::two). */
__device__ __forceinline__ int lpd_lrow(int slot) { return (slot & 1) ? 4 + (slot >> 1) : slot >> 1; }
__device__ __forceinline__ int lpd_lslot(int row) { return row < 4 ? 2 * row : 2 * (row - 4) + 1; }

struct lpd_rows { /* the two rows of a lane (g, g + 8) */
  int live[2], p[2];
  uint32_t sel[2]; /* THRIFT: the row's tiles of the chunk selected high, bit j - j0 */
};

/* THRIFT: bits j - j0 of a row's mask m (lp_gpu_kv_args.h) for tiles [j0, j1), j1 - j0 <= 32 */
__device__ __forceinline__ uint32_t lpd_sel_bits(const uint32_t *m, int j0, int j1) {
  if (!m || j1 <= j0) return 0u;
  const int w0 = j0 >> 5, w1 = (j1 - 1) >> 5, o = j0 & 31;
  const uint64_t w = (uint64_t)m[w0] | (w1 != w0 ? (uint64_t)m[w1] << 32 : 0ull);
  return (uint32_t)(w >> o) & (j1 - j0 == 32 ? 0xffffffffu : (1u << (j1 - j0)) - 1u);
}
/* PASA: c = sm_scale * (q . kshift) as the f64 sum of the lane's part, summed
 * over the lanes at xor offsets o0, 2 o0, ..., o1, rounded to f32 */
__device__ __forceinline__ float lpd_pasa_c(double part, int o0, int o1, float sm) {
  for (int o = o0; o <= o1; o <<= 1) part = __dadd_rn(part, __shfl_xor_sync(0xffffffffu, part, o));
  return (float)__dmul_rn((double)sm, part);
}

/* What every step of one CTA needs: its sequence, kv head, chunk and rows,
 * its warp's shared-memory region and the page table. */
template <int D> struct lpd_ctx {
  const lp_gpu_pdecode_args &a;
  const lp_gpu_pool &P;
  int warp, lane, g, t;   /* warp, lane, mma fragment row g and column pair t */
  int chunk, b, h, rb;    /* chunk, sequence, kv head, block of 8 query rows */
  int G, len, Sq, wr;     /* GQA group, sequence length, query positions, region bytes */
  int j0, j1;             /* the chunk's tiles [j0, j1) */
  int32_t slot;           /* the sequence's slot (high ring) */
  uint8_t *sm, *mybuf;    /* the CTA's shared memory, this warp's region */
  unsigned short *Qh, *Ql; /* Q rows (high, padded LDH) and low inner values */
  float *qf, *xm;         /* per-row Q factors, the round's row maxima */
  uint64_t *bars;         /* this warp's 4 mbarriers (low-tile ring) */
  uint32_t *rsel;         /* THRIFT: block row r's selected tiles of the chunk, bit j - j0 */
  int q0;                 /* slot position of q's first row: len - Sq, or q_start - kv_start (shards) */
  int jdiag;              /* the tile of the call's first query position */
  bool win;               /* a sliding window (the _win kernels only: a constant elsewhere) */
  int wl;                 /* win: row p sees keys p - wl .. p (lp_mask_sees, causal, off 0) */
  float cap;              /* softcap (0: off; the _win kernels only) */
  bool thrift, pasa;
  bool two;               /* the block has rows in odd low slots (more than 4 live rows) */
  const int32_t *table;
  int64_t pages0;         /* byte offset of page 0 in the pool */
  lpd_rows R, RL;         /* rows g, g + 8 (high tiles) and 2t, 2t + 1 (low tiles) */

  __device__ __forceinline__ lpd_ctx(const lp_gpu_pdecode_args &a_) : a(a_), P(a_.pool) {}
  __device__ __forceinline__ const uint8_t *page_ptr(int j) const {
    const int32_t pg = j < a.seqs.max_pages ? table[j] : -1;
    return pg >= 0 && pg < P.num_pages ? P.mem + pages0 + (int64_t)pg * P.page_bytes : nullptr;
  }
  __device__ __forceinline__ int64_t prow(int r) const { /* partial-state row of block row r */
    const int rr = 8 * rb + r, qh = h * G + rr / Sq, s = rr % Sq;
    return (((int64_t)chunk * a.seqs.num_seqs + b) * P.Hq + qh) * Sq + s;
  }
  __device__ __forceinline__ bool live(int r) const { return r < 8 && 8 * rb + r < G * Sq; }
  /* THRIFT: block row r's selection mask (lp_gpu_kv_args.h), or nullptr */
  __device__ __forceinline__ const uint32_t *selmask(int r) const {
    if (!thrift || !live(r)) return nullptr;
    const int rr = 8 * rb + r, qh = h * G + rr / Sq, x = (len - Sq + rr % Sq) / LPD_T - (len - Sq) / LPD_T;
    return a.sel + (((int64_t)b * P.Hq + qh) * 2 + x) * a.sel_words;
  }
  /* PASA (SEMANTICS): element d of tile j's shift beta * Kbar_j (a full tile);
   * a diagonal tile i borrows Kbar_{i-1}, tile 0 its first key. High tiles
   * from the call's first diagonal tile on take the diagonal rule (a full
   * tile of a later row then differs in rounding only). */
  __device__ __forceinline__ float kshift(int j, int d, bool full) const {
    const int src = full || j < jdiag ? j : j - 1;
    if (src >= 0) {
      const uint8_t *pg = page_ptr(src);
      return pg ? __fmul_rn(P.pasa_beta, ((const float *)(pg + P.kmean))[(int64_t)h * D + d]) : 0.0f;
    }
    const uint8_t *k0 = P.has_ring ? P.mem + (int64_t)slot * P.slot_bytes + P.rk : page_ptr(0);
    if (!k0) return 0.0f;
    if (!P.has_ring) k0 += P.hk;
    return __fmul_rn(P.pasa_beta, gpu_load(k0 + (int64_t)h * LPD_T * D * 2, P.hdt, d));
  }
};

/* A warp's running state: high-tile rows (g, g + 8) with O in the m16 A/C
 * layout, low-tile rows (2t, 2t + 1) with O^T (channels in m). */
template <int D> struct lpd_acc {
  lpk_row st[2], stl[2];
  float acc[D / 8][4];  /* high: O [rows g, g+8][channels 8nb + 2t, +1] */
  float accl[D / 16][4]; /* low: O^T [channels 16ct + g, +8][rows 2t, 2t+1] */
};
#endif
} // namespace LP_GPU_NS
#endif
