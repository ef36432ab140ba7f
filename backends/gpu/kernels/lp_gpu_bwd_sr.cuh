/* The backward's stochastic rounding of P and dS in registers (SPEC 10,
 * SEMANTICS "Backward"), device functions that backends/gpu/kernels/lp_gpu_bwd.cuh
 * includes before its kernels: the random bytes of a warp's 16 x 64
 * register tile (SPEC 2: 8 bits an element, 16 elements a Philox block),
 * each block computed once and its bytes shuffled to the lanes that hold
 * its elements, and the domain step of backends/math/lpk_quant.h
 * on the tile's row domains, a row's 4 lanes together. */
#ifndef LP_GPU_BWD_SR_CUH
#define LP_GPU_BWD_SR_CUH

/* m[i] <- m[i ^ x] for a lane-dependent x < N (N a power of two): log2 N
 * stages of selects (no local memory). */
template <int N>
__device__ __forceinline__ void gpu_xor_perm(uint32_t (&m)[N], int x) {
#pragma unroll
  for (int b = 1; b < N; b <<= 1) {
    const bool sw = (x & b) != 0;
#pragma unroll
    for (int i = 0; i < N; i++)
      if (!(i & b)) {
        const uint32_t p = m[i], q = m[i | b];
        m[i] = sw ? q : p, m[i | b] = sw ? p : q;
      }
  }
}

/* All-to-all among the N lanes lane ^ (x' * LB), x' < N, of a group (x: this
 * lane's index in it): z[r] is this lane's word for member r in, the word
 * member r has for this lane out. */
template <int N, int LB>
__device__ __forceinline__ void gpu_all_to_all(uint32_t (&z)[N], int x) {
  gpu_xor_perm<N>(z, x); /* z[d]: the word for member x ^ d */
#pragma unroll
  for (int d = 1; d < N; d++) z[d] = __shfl_xor_sync(0xffffffffu, z[d], d * LB);
  gpu_xor_perm<N>(z, x); /* z[i]: the word from member i */
}

/* SR's random bytes (SPEC 2) of a warp's 16 x 64 tile (lane layout
 * gpu_lay: row (lane >> 2) + 8 hh, column key(sl)), packed in rb[8] as
 * gpu_bwd_u reads them: KEYROWS, both row slots; else row slot hh only
 * (rb[4 hh .. 4 hh + 3]: the two rows' blocks are apart, and a row's
 * bytes need not live across the other's). Element (row, col) draws index
 * base + row + col * Skv (KEYROWS, dkdv: rows are keys, columns queries) or
 * base + row * Skv + col (dq). With Skv % 16 == 0 and base % 16 == 0 (the
 * callers' bases are, when Skv is) a Philox block is 16 elements of the
 * tile: KEYROWS, the 16 rows of a column, those of slots q and q + 8 on
 * lane q of the 8 lanes that hold the column, which hand each other lane
 * its rows' bytes (7 shuffles); else 16 columns of a row, columns
 * 16 t .. 16 t + 15 of the row on lane t of its quad (3 shuffles). Otherwise
 * every element computes its own block. Layout: KEYROWS, rb[sl & 7] byte
 * 2 (sl >> 3) + hh; else rb[4 hh + (sl >> 2)] byte sl & 3 (columns
 * 16 jj + {0, 1, 8, 9} + 2 t: bytes of one word). */
template <bool KEYROWS>
__device__ __forceinline__ void gpu_bwd_randoms(uint32_t (&rb)[8], int hh, int lane, uint64_t key, int64_t base,
                                                int Skv) {
  const gpu_lay<32> lay{lane};
  const int t = lane & 3, q = lane >> 2;
  if ((Skv | (int)(base & 15)) & 15) { /* the shared blocks need base and Skv multiples of 16 */
#pragma unroll
    for (int h = 0; h < 2; h++) {
      if (!KEYROWS && h != hh) continue;
#pragma unroll
      for (int i = 0; i < 4; i++) rb[4 * h + i] = 0;
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
      if (!KEYROWS && h != hh) continue;
#pragma unroll
      for (int sl = 0; sl < 16; sl++) {
        const int row = lay.row(h), col = lay.key(sl);
        const int64_t n = KEYROWS ? base + row + (int64_t)col * Skv : base + (int64_t)row * Skv + col;
        const uint32_t r = lpk_sr_byte(key, (uint64_t)n);
        if (KEYROWS) rb[sl & 7] |= r << (8 * (2 * (sl >> 3) + h));
        else rb[4 * h + (sl >> 2)] |= r << (8 * (sl & 3));
      }
    }
    return;
  }
  if (KEYROWS) {
    uint32_t w[2][4]; /* the 2 blocks first (independent Philox chains the scheduler can interleave) */
#pragma unroll
    for (int b = 0; b < 2; b++) lpk_philox4(key, (uint64_t)(base + (int64_t)lay.key(q + 8 * b) * Skv) >> 4, w[b]);
    /* row rho of a block: byte rho & 3 of word rho >> 2. Member r's word:
     * [row r, row r + 8] of block 0, then of block 1 (rows of hh = 0, 1) */
    uint32_t z[8];
#pragma unroll
    for (int r = 0; r < 8; r++) {
      const uint32_t sel = (uint32_t)(r & 3) * 0x11u + 0x40u; /* byte r & 3 of lo, then of hi */
      const uint32_t p0 = __byte_perm(w[0][r >> 2], w[0][2 + (r >> 2)], sel);
      const uint32_t p1 = __byte_perm(w[1][r >> 2], w[1][2 + (r >> 2)], sel);
      z[r] = __byte_perm(p0, p1, 0x5410);
    }
    gpu_all_to_all<8, 4>(z, q); /* z[i]: slots i and i + 8 */
#pragma unroll
    for (int i = 0; i < 8; i++) rb[i] = z[i];
  } else {
    uint32_t w[4];
    lpk_philox4(key, (uint64_t)(base + (int64_t)lay.row(hh) * Skv + 16 * t) >> 4, w);
    /* columns 2 r + {0, 1} of a block: half r & 1 of word r >> 1; + {8, 9}: of word 2 + (r >> 1) */
    uint32_t z[4];
#pragma unroll
    for (int r = 0; r < 4; r++) z[r] = __byte_perm(w[r >> 1], w[2 + (r >> 1)], (r & 1) ? 0x7632 : 0x5410);
    gpu_all_to_all<4, 1>(z, t); /* z[jj]: the block of columns 16 jj .. 16 jj + 15 */
#pragma unroll
    for (int jj = 0; jj < 4; jj++) rb[4 * hh + jj] = z[jj];
  }
}

/* The uniform of slot sl of row slot hh from gpu_bwd_randoms' bytes. */
template <bool KEYROWS>
__device__ __forceinline__ float gpu_bwd_u(const uint32_t (&rb)[8], int hh, int sl) {
  return KEYROWS ? lpk_sr_byte_u(rb[sl & 7] >> (8 * (2 * (sl >> 3) + hh)))
                 : lpk_sr_byte_u(rb[4 * hh + (sl >> 2)] >> (8 * (sl & 3)));
}

/* SPEC 10's P or dS of a low tile pair with stochastic rounding, in
 * registers: each row of the warp's 16 x 64 tile x is one domain of 64
 * values (16 on each of the row's 4 lanes; group m of 16 columns = slots
 * 4m .. 4m + 3), quantized by backends/math/lpk_quant.h's steps (outer_scale,
 * group_scale, e2m1_sr / e4m3_sr: those of quantize_domain with sr = 1),
 * the element step on y = x * fl(1 / divisor) as the forward's P quantizer
 * takes it (both scaled by 2^64 where 1 / divisor would overflow: the same
 * value). x gets code x group
 * scale (exact in bf16), rout[hh] its row's outer scale (MXFP4: 1; FP8 with
 * a non-finite value: NaN, as the quantizer's). NONNEG (P >= 0): the value
 * forms get |y|, which lets the compiler drop their sign path (a +0 where
 * the quantizer would keep -0: the same value). */
template <bool KEYROWS, bool NONNEG = false>
__device__ __forceinline__ void gpu_bwd_sr_tile(float (&x)[2][16], float (&rout)[2], int lane, int fmt, int mx_up,
                                             uint64_t key, int64_t base, int Skv) {
  const bool fp8 = fmt == LPATTN_FMT_FP8, mx = fmt == LPATTN_FMT_MXFP4;
  uint32_t rb[8];
  if (KEYROWS) gpu_bwd_randoms<KEYROWS>(rb, 0, lane, key, base, Skv); /* both row slots */
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    if (!KEYROWS) gpu_bwd_randoms<KEYROWS>(rb, hh, lane, key, base, Skv);
    float ga[4], gb[4], amax = 0.0f, bad = 0.0f;
#pragma unroll
    for (int m = 0; m < 4; m++) {
      float a = 0.0f, b = 0.0f;
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const float v = x[hh][4 * m + k];
        if (lpk_finite(v)) a = fmaxf(a, fabsf(v));
        else b = 1.0f;
      }
      ga[m] = gpu_rmax<32>(a), gb[m] = gpu_rmax<32>(b);
      amax = fmaxf(amax, ga[m]), bad = fmaxf(bad, gb[m]);
    }
    const float out = lpk_outer_scale(fmt, amax);
    if (fp8) {
      rout[hh] = bad != 0.0f ? lpk_from_bits(0x7fc00000u) : out;
      const bool ok = bad == 0.0f && out != 0.0f;
      const bool tiny = out < 1e-30f; /* 1 / out would overflow: both scaled by 2^64 */
      const float k = tiny ? 1.8446744e19f : 1.0f, rd = ok ? 1.0f / (out * k) : 0.0f;
      if (gpu_warp_any(tiny))
#pragma unroll
        for (int sl = 0; sl < 16; sl++) x[hh][sl] *= k;
#pragma unroll
      for (int sl = 0; sl < 16; sl++) {
        const float y = x[hh][sl] * rd;
        x[hh][sl] = ok ? lpk_e4m3_sr(NONNEG ? fabsf(y) : y, gpu_bwd_u<KEYROWS>(rb, hh, sl)) : 0.0f;
      }
      continue;
    }
    rout[hh] = mx ? 1.0f : out;
    /* lane i of the row's quad takes group i's scale step (MXFP4: its pair's) */
    float denom;
    const float svi = gpu_quad_group_scale(ga, gb, fmt, out, mx_up, &denom);
    const bool tiny = denom < 1e-30f; /* 1 / denom would overflow: both scaled by 2^64 */
    const float ki = tiny ? 1.8446744e19f : 1.0f;
    const float rdi = denom == 0.0f ? 0.0f : 1.0f / (denom * ki); /* 0: the group's codes are 0 */
    const bool any_tiny = gpu_warp_any(tiny);
#pragma unroll
    for (int m = 0; m < 4; m++) {
      const float sv = gpu_rlane(svi, m), rd = gpu_rlane(rdi, m);
      if (any_tiny) {
        const float k = gpu_rlane(ki, m);
#pragma unroll
        for (int e = 0; e < 4; e++) x[hh][4 * m + e] *= k;
      }
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float y = x[hh][4 * m + e] * rd;
        const float u = gpu_bwd_u<KEYROWS>(rb, hh, 4 * m + e);
        x[hh][4 * m + e] = (rd == 0.0f ? 0.0f : lpk_e2m1_sr(NONNEG ? fabsf(y) : y, u)) * sv;
      }
    }
  }
}
#endif /* LP_GPU_BWD_SR_CUH */
