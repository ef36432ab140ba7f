/* The backward kernels' tile loaders and shared-memory sizes (SPEC 10,
 * backends/gpu/kernels/lp_gpu_bwd.cuh includes this in place): 16-bit and
 * low-operand tiles into shared memory, the outer scales of a low tile's
 * rows and channels, and the SR stream key of an operand. */
#ifndef LP_GPU_BWD_TILES_CUH
#define LP_GPU_BWD_TILES_CUH

/* Rows [row0, row0 + 64) of head h of a 16-bit [B, H, S, D] tensor into a
 * [64][LD] tile, zeros past nrows: cp.async when vec16, else in step. */
template <int D>
__device__ __forceinline__ void gpu_bwd_tile(unsigned short *dst, const void *src, const int64_t *s, int b, int h,
                                             int row0, int nrows, bool vec16) {
  /* the kernels run 128 threads: a thread copies column c of rows r0, r0 + RS, ...,
   * its source address computed once and stepped (no 4-D offset per chunk) */
  constexpr int LD = gpu_smem<D>::LD, CPR = D / 8, RS = 128 / CPR;
  const int c = (threadIdx.x % CPR) * 8, r0 = threadIdx.x / CPR;
  const unsigned short *base = (const unsigned short *)src;
  const unsigned short *p = base + lpk_off(s, b, h, row0 + r0, c);
  const int64_t step = RS * s[2];
#pragma unroll
  for (int r = r0; r < 64; r += RS, p += step) {
    const bool ok = row0 + r < nrows;
    if (vec16) {
      gpu_cp16(&dst[r * LD + c], ok ? p : base, ok ? 16 : 0);
    } else {
      unsigned short e[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (ok)
        for (int u = 0; u < 8; u++) e[u] = p[u * s[3]];
      uint4 w;
      memcpy(&w, e, 16);
      *(uint4 *)&dst[r * LD + c] = w;
    }
  }
}

/* Shared memory of either kernel: two resident tiles and two double-buffered
 * ones of [64][LD], then 4 x 64 f32 row scalars. The LOW instances: two
 * resident low tiles and four step tiles (a low step's four quantized
 * operands, or a high step's four tiles), the row scalars and the outer
 * scales of the tiles' rows and channels: six tiles, so that two CTAs fit
 * an SM as the HIGH instances do. */
template <int D> struct gpu_bwd_smem {
  static constexpr int T64 = 64 * gpu_smem<D>::LD;
  static constexpr size_t NF = (size_t)16 * D; /* at the end: two per-channel bit marks (gpu_nf_fix_bits) */
  static constexpr size_t bytes = (size_t)6 * T64 * 2 + 4 * 64 * 4 + NF;
  static constexpr size_t low_bytes = (size_t)6 * T64 * 2 + (size_t)(6 * 64 + 2 * D) * 4 + NF;
};

/* Rows [row0, row0 + 64) of head h of a bf16 copy [B][H][S][D] (a low
 * operand) into a [64][LD] tile, zeros past S; and its outer scales: per
 * row (AXIS_D copies) into o[64], or per channel of the 64-row tile
 * (AXIS_S) into o[D]; MXFP4 has none (1). */
template <int D>
__device__ __forceinline__ void gpu_bwd_low_tile(unsigned short *dst, const void *src, int H, int S, int b, int h,
                                                 int row0) {
  const int64_t st[4] = {(int64_t)H * S * D, (int64_t)S * D, D, 1};
  gpu_bwd_tile<D>(dst, src, st, b, h, row0, S, true);
}
__device__ __forceinline__ void gpu_bwd_row_outer(float *o, const float *src, int fmt, int H, int S, int b, int h,
                                                  int row0) {
  for (int r = threadIdx.x; r < 64; r += blockDim.x)
    o[r] = row0 + r >= S ? 0.0f : fmt == LPATTN_FMT_MXFP4 ? 1.0f : src[((int64_t)b * H + h) * S + row0 + r];
}
template <int D>
__device__ __forceinline__ void gpu_bwd_chan_outer(float *o, const float *src, int fmt, int H, int S, int b, int h,
                                                   int tile) {
  const int nt = (S + 63) / 64;
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    o[d] = fmt == LPATTN_FMT_MXFP4 ? 1.0f : src[(((int64_t)b * H + h) * nt + tile) * D + d];
}
/* SR stream of operand o (SEMANTICS "Backward"): seed + (o + 1) * golden ratio */
__device__ __forceinline__ uint64_t gpu_bwd_key(uint64_t seed, int o) {
  return seed + (uint64_t)(o + 1) * 0x9E3779B97F4A7C15ull;
}
#endif /* LP_GPU_BWD_TILES_CUH */
