/* lpattn_quantize on the GPU: one warp per quantization domain (a token's D
 * values for AXIS_D, one channel of one tile for AXIS_S). The domain's amax
 * is a warp reduction; groups of 16/32 elements are lane segments. The
 * outer, group-scale and element steps are backends/math/lpk_quant.h's, the ones its
 * quantize_domain runs (bit-exact with core/quant.c). */
#ifndef LP_GPU_QUANT_KERNELS_CUH
#define LP_GPU_QUANT_KERNELS_CUH
#include "lp_gpu_quant.cuh"
#include "lp_gpu_ns.cuh"

namespace LP_GPU_NS {

/* x(s, d) as quantized: minus beta * the key-tile mean under PASA. */
__device__ __forceinline__ float gpu_quant_shift(const lp_gpu_quant_args &a, float v, int64_t bhd, int64_t s, int64_t d) {
  if (!a.shift_mean) return v;
  return __fsub_rn(v, __fmul_rn(a.beta, a.shift_mean[(bhd * a.shift_tiles + (s + a.dst_s0) / a.shift_tile) * a.D + d]));
}

/* The head dim of SR indices: a zero-padded copy keeps its true D's (sr_d). */
__device__ __forceinline__ int64_t gpu_sr_d(const lp_gpu_quant_args &a) { return a.sr_d ? a.sr_d : a.D; }

/* Any layout: one warp per domain, elements read from the tensor. */
__device__ __forceinline__ void gpu_quant_body(const lp_gpu_quant_args &a) {
  const int lane = threadIdx.x & 31;
  const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const bool along_d = a.axis == LPATTN_AXIS_D;
  const int64_t nt = (a.rows + a.tile - 1) / a.tile, Sp = nt * a.tile; /* destination */
  const int64_t ns = (a.S + a.tile - 1) / a.tile;                      /* source tiles */
  const int64_t ndom = along_d ? (int64_t)a.B * a.H * a.S : (int64_t)a.B * a.H * ns * a.D;
  if (w >= ndom) return;
  int64_t bh, s0, d0;
  int n, ds, ss; /* element i is (s0 + i*ss, d0 + i*ds) */
  if (along_d) {
    bh = w / a.S, s0 = w % a.S, d0 = 0, n = a.D, ds = 1, ss = 0;
  } else {
    d0 = w % a.D;
    int64_t t = (w / a.D) % ns;
    bh = w / a.D / ns, s0 = t * a.tile, n = a.tile, ds = 0, ss = 1;
  }
  const int64_t b = bh / a.H, h = bh % a.H;
  const int64_t bhd = (b + a.dst_b0) * a.H + h, sd0 = s0 + a.dst_s0; /* destination */
  auto load = [&](int i) -> float {
    int64_t s = s0 + (int64_t)i * ss, d = d0 + (int64_t)i * ds;
    if (s >= a.S) return 0.0f; /* zero padding of the last tile */
    return gpu_quant_shift(a, gpu_load(a.x, a.dtype, lpk_off(a.sx, b, h, s, d)), bhd, s, d);
  };
  auto sr_index = [&](int i) -> uint64_t {
    int64_t s = s0 + (int64_t)i * ss, d = d0 + (int64_t)i * ds;
    return (uint64_t)((bh * a.S + s) * gpu_sr_d(a) + d);
  };
  /* where element i's code, its group's scale and the domain's outer go */
  const int64_t ebase = along_d ? (bhd * a.rows + sd0) * a.D : (bhd * a.D + d0) * Sp + sd0;
  const int64_t obase = along_d ? bhd * a.rows + sd0 : (bhd * nt + sd0 / a.tile) * a.D + d0;
  gpu_quant_domain(a, lane, n, load, sr_index, ebase, obase);
}

#define GPU_QT_ROWS 64
/* One thread per group of E elements (16: FP8 and NVFP4, 32: MXFP4; FP8's
 * "group" is only a unit of work), the DG groups of a domain in adjacent
 * lanes (its amax: a shuffle among them). v: the group's values (shifted);
 * dst: element index of its first code; obase: the domain's outer index;
 * sri: Philox index of element u. Every call the same steps as
 * gpu_quant_domain (backends/math/lpk_quant.h), so the codes are the same bits. */
template <int E, int DG, bool SR, typename SRI>
__device__ __forceinline__ void gpu_quant_group(const lp_gpu_quant_args &a, const float (&v)[E], int gi,
                                                int64_t dst, int64_t obase, SRI sri, bool live = true) {
  float ga = 0.0f, gb = 0.0f;
#pragma unroll
  for (int u = 0; u < E; u++) {
    if (!lpk_finite(v[u])) gb = 1.0f;
    else ga = fmaxf(ga, fabsf(v[u]));
  }
  float amax = ga, bad = gb;
#pragma unroll
  for (int o = DG / 2; o > 0; o >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o, 32));
    bad = fmaxf(bad, __shfl_xor_sync(0xffffffffu, bad, o, 32));
  }
  const float out = lpk_outer_scale(a.format, amax);
  if (!live) return; /* a lane past the last row: in the shuffles only */
  auto code_of = [&](bool fp8, float y, int u) -> uint32_t {
    return lpk_elem_code(fp8, y, SR, SR ? lpk_sr_uniform(a.seed, sri(u)) : 0.0f);
  };
  uint32_t w[E / 4 > 1 ? E / 4 : 1]; /* the codes, packed little-endian */
  if (a.format == LPATTN_FMT_FP8) {
    if (gi == 0) a.outer[obase] = bad != 0.0f ? __int_as_float(0x7fc00000) : out;
    const bool ok = bad == 0.0f && out != 0.0f;
#pragma unroll
    for (int u = 0; u < E; u += 4) {
      uint32_t x = 0;
#pragma unroll
      for (int k = 0; k < 4; k++) x |= (ok ? code_of(true, v[u + k] / out, u + k) : 0u) << (8 * k);
      w[u / 4] = x;
    }
#pragma unroll
    for (int q = 0; q < E / 16; q++)
      *(uint4 *)(a.codes + dst + 16 * q) = make_uint4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]);
    return;
  }
  uint8_t sc;
  float denom;
  lpk_group_scale(a.format, ga, gb != 0.0f, out, a.mx_round_up, &sc, &denom);
  if (gi == 0 && a.format == LPATTN_FMT_NVFP4) a.outer[obase] = out;
  a.scales[dst / E] = sc;
#pragma unroll
  for (int u = 0; u < E; u += 8) {
    uint32_t x = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) x |= ((denom != 0.0f ? code_of(false, v[u + k] / denom, u + k) : 0u) & 15u) << (4 * k);
    w[u / 8] = x;
  }
  if (E == 16) *(uint2 *)(a.codes + dst / 2) = make_uint2(w[0], w[1]);
  else *(uint4 *)(a.codes + dst / 2) = make_uint4(w[0], w[1], w[2], w[3]);
}

/* AXIS_D from 16-bit rows (unit D stride, 16-byte aligned, D a power of two
 * >= 64): one thread per group of a row, read with 16-byte loads. (Every
 * lane of a launched warp reaches the shuffles: the grid is whole blocks.) */
template <int E, bool SR>
__device__ __forceinline__ void gpu_quant_rows_body(const lp_gpu_quant_args &a, int DG) {
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, nrows = (int64_t)a.B * a.H * a.S;
  const int g = (int)(t % DG);
  const bool live = t / DG < nrows; /* lanes past the end stay for the warp's shuffles */
  const int64_t row = live ? t / DG : nrows - 1;
  const int64_t bh = row / a.S, s = row % a.S, b = bh / a.H, h = bh % a.H;
  const int64_t bhd = (b + a.dst_b0) * a.H + h, sd = s + a.dst_s0;
  const uint4 *src = (const uint4 *)((const unsigned short *)a.x + lpk_off(a.sx, b, h, s, (int64_t)g * E));
  float v[E];
#pragma unroll
  for (int q = 0; q < E / 8; q++) {
    const uint4 r = src[q];
    const uint32_t wd[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const unsigned short u16 = (unsigned short)(wd[k >> 1] >> (16 * (k & 1)));
      const float x = a.dtype == LPATTN_F16 ? gpu_f16_tof(u16) : gpu_bf16_tof(u16);
      v[8 * q + k] = gpu_quant_shift(a, x, bhd, s, (int64_t)g * E + 8 * q + k);
    }
  }
  auto sri = [&](int u) -> uint64_t { return (uint64_t)((bh * a.S + s) * gpu_sr_d(a) + (int64_t)g * E + u); };
  const int64_t dst = (bhd * a.rows + sd) * a.D + (int64_t)g * E;
  if (DG == 16) gpu_quant_group<E, 16, SR>(a, v, g, dst, bhd * a.rows + sd, sri, live);
  else if (DG == 8) gpu_quant_group<E, 8, SR>(a, v, g, dst, bhd * a.rows + sd, sri, live);
  else if (DG == 4) gpu_quant_group<E, 4, SR>(a, v, g, dst, bhd * a.rows + sd, sri, live);
  else gpu_quant_group<E, 2, SR>(a, v, g, dst, bhd * a.rows + sd, sri, live);
}

/* AXIS_S (tile 64) from the staged tile of gpu_quant_tile_body: one thread
 * per group of E tokens of a channel, the 64 / E groups of a channel's
 * domain in adjacent lanes. */
template <int E, bool SR>
__device__ __forceinline__ void gpu_quant_cols(const lp_gpu_quant_args &a, const unsigned short *qt, int LDT,
                                               int64_t bh, int64_t s0) {
  constexpr int R = GPU_QT_ROWS, DG = R / E;
  const int64_t b = bh / a.H, h = bh % a.H, bhd = (b + a.dst_b0) * a.H + h, sd0 = s0 + a.dst_s0;
  const int64_t nt = (a.rows + a.tile - 1) / a.tile, Sp = nt * a.tile;
  for (int q = threadIdx.x; q < a.D * DG; q += blockDim.x) { /* D * DG is a multiple of 32 */
    const int d = q / DG, k = q % DG;
    float v[E];
#pragma unroll
    for (int u = 0; u < E; u++) {
      const int r = k * E + u;
      const unsigned short u16 = qt[r * LDT + d];
      const float x = a.dtype == LPATTN_F16 ? gpu_f16_tof(u16) : gpu_bf16_tof(u16);
      v[u] = s0 + r >= a.S ? 0.0f : gpu_quant_shift(a, x, bhd, s0 + r, d); /* zero padding of the last tile */
    }
    auto sri = [&](int u) -> uint64_t { return (uint64_t)((bh * a.S + s0 + k * E + u) * gpu_sr_d(a) + d); };
    gpu_quant_group<E, DG, SR>(a, v, k, (bhd * a.D + d) * Sp + sd0 + k * E, (bhd * nt + sd0 / a.tile) * a.D + d, sri);
  }
}

/* 16-bit rows with unit D stride and 16-byte aligned rows, tile 64: a CTA
 * copies 64 tokens x D into shared memory with 16-byte loads, then each warp
 * quantizes domains from there (AXIS_D: rows; AXIS_S: columns; rows padded
 * by one word so that a column read is free of bank conflicts). */
template <int E, bool SR> /* E = 0: a warp per domain; 16 / 32: one thread per group (AXIS_S) */
__device__ __forceinline__ void gpu_quant_tile_body(const lp_gpu_quant_args &a) {
  extern __shared__ __attribute__((aligned(16))) unsigned short gpu_qt[];
  const int LDT = a.D + 2, R = GPU_QT_ROWS;
  const int64_t ns = (a.S + R - 1) / R, nt = (a.rows + a.tile - 1) / a.tile, Sp = nt * a.tile;
  const int64_t t = blockIdx.x % ns, bh = blockIdx.x / ns, b = bh / a.H, h = bh % a.H, s0 = t * R;
  for (int i = threadIdx.x; i < R * (a.D / 8); i += blockDim.x) {
    const int r = i / (a.D / 8), c = (i % (a.D / 8)) * 8;
    uint4 w = make_uint4(0, 0, 0, 0);
    if (s0 + r < a.S) w = *(const uint4 *)((const unsigned short *)a.x + lpk_off(a.sx, b, h, s0 + r, c));
    uint32_t *dst = (uint32_t *)&gpu_qt[r * LDT + c];
    dst[0] = w.x, dst[1] = w.y, dst[2] = w.z, dst[3] = w.w;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int64_t bhd = (b + a.dst_b0) * a.H + h, sd0 = s0 + a.dst_s0;
  auto val = [&](int r, int d) -> float {
    const unsigned short u = gpu_qt[r * LDT + d];
    return gpu_quant_shift(a, a.dtype == LPATTN_F16 ? gpu_f16_tof(u) : gpu_bf16_tof(u), bhd, s0 + r, d);
  };
  if constexpr (E > 0) { /* one thread per group (gpu_quant_cols) */
    gpu_quant_cols<E, SR>(a, gpu_qt, LDT, bh, s0);
  } else { /* a warp per domain */
    if (a.axis == LPATTN_AXIS_D) {
      for (int r = threadIdx.x >> 5; r < R && s0 + r < a.S; r += nw) {
        auto load = [&](int i) -> float { return val(r, i); };
        auto sr_index = [&](int i) -> uint64_t { return (uint64_t)((bh * a.S + s0 + r) * gpu_sr_d(a) + i); };
        gpu_quant_domain(a, lane, a.D, load, sr_index, (bhd * a.rows + sd0 + r) * a.D, bhd * a.rows + sd0 + r);
      }
      return;
    }
    for (int d = threadIdx.x >> 5; d < a.D; d += nw) {
      auto load = [&](int i) -> float { return s0 + i >= a.S ? 0.0f : val(i, d); };
      auto sr_index = [&](int i) -> uint64_t { return (uint64_t)((bh * a.S + s0 + i) * gpu_sr_d(a) + d); };
      gpu_quant_domain(a, lane, R, load, sr_index, (bhd * a.D + d) * Sp + sd0, (bhd * nt + sd0 / a.tile) * a.D + d);
    }
  }
}

/* Any non-finite element of a float tensor sets *flag. */
struct gpu_strides {
  int64_t s[4];
};
__global__ void gpu_scan_finite_kernel(const void *x, int dt, gpu_strides st, int64_t n1, int64_t n2,
                                       int64_t n3, int64_t total, int *flag) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t d = i % n3, s = i / n3 % n2, h = i / n3 / n2 % n1, b = i / n3 / n2 / n1;
    if (!lpk_finite(gpu_load(x, dt, lpk_off(st.s, b, h, s, d)))) atomicOr(flag, 1);
  }
}

lpattn_status gpu_scan_finite(const lpattn_tensor *t, int *flag, cudaStream_t s) {
  int64_t total = t->shape[0] * t->shape[1] * t->shape[2] * t->shape[3];
  unsigned blocks = (unsigned)(total / 256 + 1 > 4096 ? 4096 : total / 256 + 1);
  gpu_strides st;
  memcpy(st.s, t->stride, sizeof st.s);
  gpu_scan_finite_kernel<<<blocks, 256, 0, s>>>(t->data, t->dtype, st, t->shape[1], t->shape[2],
                                                t->shape[3], total, flag);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

} // namespace LP_GPU_NS
#endif
