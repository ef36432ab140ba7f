/* Non-finite operand elements of a masked tile (SPEC 2, docs/SEMANTICS.md
 * "Non-finite inputs"), written once for every GPU kernel (lp_gpu.cuh
 * includes this in place; both dialects). */

/* ---- Non-finite elements at masked pairs (SPEC 2) --------------------------
 * A masked pair enters a tensor-core product as an exact 0 in P (dS, P^T,
 * dS^T), and 0 x NaN = NaN: a NaN/Inf operand element would reach rows that
 * do not attend it. A kernel whose tile has masked pairs therefore checks the
 * operand tile that the masked factor multiplies, in shared memory, before
 * the product:
 *   1. gpu_nf_scan: whether this thread's share of the tile holds a
 *      non-finite element; the block (or the kernel's computing threads)
 *      combines the answers (__syncthreads_or, gpu_nf_vote_nb). Finite
 *      (the usual case): the product runs as before.
 *   2. otherwise (rare), between two barriers, gpu_nf_fix turns each
 *      non-finite element into 0 (the product then sees exactly the tile of
 *      an input with that element replaced by 0) and records per column c
 *      the first (or the last) operand row holding one;
 *   3. after the product the kernel makes non-finite the accumulators of the
 *      rows that attend such an element (gpu_nf_nan; rounding of that
 *      contribution is not kept, only that it is non-finite, as in ref).
 * Rows that attend no bad element are bitwise those of the zero-replaced
 * input. */
#ifndef LPATTN_HIP /* CUDA */

/* LPATTN_NF_OFF=1 in the environment turns the checks off (the same-run
 * A/B of bench/cuda/nan_masked.py only; rows then see 0 x NaN again): a
 * flag per translation unit, set by gpu_nf_env() before its launches. */
static __device__ int gpu_nf_off = 0;
#define GPU_NF (!gpu_nf_off)
static inline void gpu_nf_env() {
  static int done = 0;
  if (done) return;
  done = 1;
  const char *e = getenv("LPATTN_NF_OFF");
  const int one = 1;
  if (e && e[0] == '1') (void)cudaMemcpyToSymbol(gpu_nf_off, &one, sizeof one);
}
#else

#define GPU_NF 1
static inline void gpu_nf_env() {}
#endif

template <typename T> struct gpu_nf_bf { static constexpr bool v = false; };
template <> struct gpu_nf_bf<gpu_bf16> { static constexpr bool v = true; };
__device__ __forceinline__ float gpu_nf_nan() { return lpk_from_bits(0x7fc00000u); }
/* exponent field of two packed f16 (bf: bf16) patterns all ones: Inf or NaN */
__device__ __forceinline__ bool gpu_nf2(uint32_t w, bool bf) {
  const uint32_t m = bf ? 0x7f80u : 0x7c00u;
  return (w & m) == m || ((w >> 16) & m) == m;
}
/* Whether thread tid (of nt) finds a non-finite element in its share of an
 * R x C tile of 16-bit patterns, row r at base + r * ld (C a multiple of 8,
 * rows 16-byte aligned; padding columns past C are not read). */
__device__ __forceinline__ bool gpu_nf_scan(const unsigned short *base, int R, int C, int ld, bool bf, int tid,
                                            int nt) {
  const int cpr = C / 8;
  bool any = false;
  for (int i = tid; i < R * cpr; i += nt) {
    const uint4 w = *(const uint4 *)(base + (i / cpr) * ld + (i % cpr) * 8);
    any |= gpu_nf2(w.x, bf) | gpu_nf2(w.y, bf) | gpu_nf2(w.z, bf) | gpu_nf2(w.w, bf);
  }
  return any;
}
/* The rare path: every non-finite element (r, c), r < R, c < C, of the tile
 * at base[ix(r, c)] becomes 0; mk[c] receives the first row r that held one
 * (LAST: the last), 0x7fff (LAST: -1) where none did. Thread tid of nt takes
 * whole columns; the caller synchronizes before (the vote) and after. */
template <bool LAST, typename IX>
__device__ __forceinline__ void gpu_nf_fix(unsigned short *base, int R, int C, IX ix, bool bf, short *mk, int tid, int nt) {
  const unsigned short m = bf ? 0x7f80u : 0x7c00u;
  for (int c = tid; c < C; c += nt) {
    int f = LAST ? -1 : 0x7fff;
    for (int r = 0; r < R; r++) {
      unsigned short *p = base + ix(r, c);
      if ((*p & m) == m) {
        *p = 0;
        if (LAST || f == 0x7fff) f = r;
      }
    }
    mk[c] = (short)f;
  }
}
/* The same for an operand tile whose rows (R <= 64: a tile's keys) are
 * seen in runs that need not start at row 0 (a sliding window's edge tile,
 * SEMANTICS "Sliding window and softcap"): mk[c] receives the bits of the
 * rows r that held a non-finite element (bit r), so that a reader of rows
 * f .. f + n - 1 tests mk[c] against those n bits. */
template <typename IX>
__device__ __forceinline__ void gpu_nf_fix_bits(unsigned short *base, int R, int C, IX ix, bool bf, uint64_t *mk,
                                                int tid, int nt) {
  const unsigned short m = bf ? 0x7f80u : 0x7c00u;
  for (int c = tid; c < C; c += nt) {
    uint64_t f = 0;
    for (int r = 0; r < R; r++) {
      unsigned short *p = base + ix(r, c);
      if ((*p & m) == m) *p = 0, f |= 1ull << r;
    }
    mk[c] = f;
  }
}
#ifndef LPATTN_HIP /* CUDA */

/* The vote of nt threads (a multiple of 32) on named barrier id (the
 * warpgroup kernels, whose copier does not take part): whether any of them
 * found one. */
__device__ __forceinline__ bool gpu_nf_vote_nb(bool x, int id, int nt) {
  uint32_t r;
  asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
               : "=r"(r) : "r"((uint32_t)x), "r"(id), "r"(nt) : "memory");
  return r != 0;
}
/* after gpu_nf_fix's stores, before a wgmma (async proxy) reads the tile or
 * a TMA copy overwrites it */
__device__ __forceinline__ void gpu_nf_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* The warpgroup kernels' whole step (sm_90a): the vote and the rare fix of
 * an operand tile in the 128-byte-swizzled layout of their TMA boxes
 * ([C/64][R][64] 16-bit elements, each 128-byte row's 16-byte chunks
 * permuted by chunk ^ (row % 8)), by the nt computing threads (ctid in
 * [0, nt)) on named barrier id (not 0, not one the kernel uses otherwise;
 * every one of the nt threads calls it, the copier does not). Returns
 * whether the tile held a non-finite element; then they are 0 and mk[c],
 * c < C, holds the first (LAST: the last) row r holding one, and the tile
 * is ready for the next wgmma. bf: bf16 patterns, else f16. */
template <bool LAST, int W = 64>
__device__ __forceinline__ bool gpu_nf_wg_tile(unsigned short *t, int R, int C, bool bf, short *mk, int ctid, int nt, int id) {
  if (!gpu_nf_vote_nb(gpu_nf_scan(t, R * (C / W), W, W, bf, ctid, nt), id, nt)) return false;
  gpu_nf_fix<LAST>(
      t, R, C,
      [&](int r, int c) {
        const int x = W == 64 ? r & 7 : (r >> 1) & 3; /* W = 32: [C/32][R][32], 64-byte swizzle */
        return ((c / W) * R + r) * W + ((((c % W) >> 3) ^ x) << 3) + (c & 7);
      },
      bf, mk, ctid, nt);
  gpu_nf_proxy_fence();
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(nt) : "memory");
  return true;
}
/* The same for a tile of E4M3 codes (NaN: S.1111.111; E4M3 has no Inf)
 * laid out as the E4M3 wgmma kernel's V^T ([K/128][R][128] bytes: R rows
 * of channels, K columns of keys, 16-byte chunks permuted by chunk ^
 * (row % 8)): mk[r], r < R, receives the first (LAST: the last) key of
 * channel r holding a NaN code, which becomes 0. */
__device__ __forceinline__ bool gpu_nf8w(uint32_t w) {
  const uint32_t x = (w & 0x7f7f7f7fu) ^ 0x7f7f7f7fu; /* a zero byte where the code is a NaN */
  return ((x - 0x01010101u) & ~x & 0x80808080u) != 0;
}
template <bool LAST>
__device__ __forceinline__ bool gpu_nf_wg_tile8t(uint8_t *t, int K, int R, short *mk, int ctid, int nt, int id) {
  bool any = false;
  for (int i = ctid; i < K * R / 16; i += nt) {
    const uint4 w = *(const uint4 *)(t + 16 * i);
    any |= gpu_nf8w(w.x) | gpu_nf8w(w.y) | gpu_nf8w(w.z) | gpu_nf8w(w.w);
  }
  if (!gpu_nf_vote_nb(any, id, nt)) return false;
  for (int r = ctid; r < R; r += nt) {
    int f = LAST ? -1 : 0x7fff;
    for (int k = 0; k < K; k++) {
      uint8_t *p = t + ((k >> 7) * R + r) * 128 + ((((k & 127) >> 4) ^ (r & 7)) << 4) + (k & 15);
      if ((*p & 0x7f) == 0x7f) {
        *p = 0;
        if (LAST || f == 0x7fff) f = k;
      }
    }
    mk[r] = (short)f;
  }
  gpu_nf_proxy_fence();
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(nt) : "memory");
  return true;
}
#endif
