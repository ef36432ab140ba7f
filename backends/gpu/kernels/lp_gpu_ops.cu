/* Small CUDA kernels around attention: KV-tile means (Thrift importance and
 * PASA shift), Thrift tile selection (SPEC 5 and its rules: lp_gpu_select.cuh), and
 * the prefill's dequantized low K/V. */
#include "lp_gpu.cuh"
#include "lp_gpu_ops.h"
#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {

#include "lp_gpu_select.cuh" /* THRIFT's selection: Qbar, the KMAX scores, the top-k */

/* mean[(bh*tiles + j)*D + d] for j in [j0, j1): f32 sum of the tile's keys
 * (clipped to the sequence length) in order, one division (SEMANTICS). */
__global__ void gpu_mean_kernel(const void *k, int dt, int64_t s0, int64_t s1, int64_t s2,
                                int64_t s3, int B, int H, int D, int T, int Skv,
                                int j0, int j1, int tiles, float *mean) {
  int64_t total = (int64_t)B * H * (j1 - j0) * D;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int d = (int)(i % D), j = j0 + (int)(i / D % (j1 - j0));
    int64_t bh = i / D / (j1 - j0), b = bh / H, h = bh % H;
    int c0 = j * T, c1 = min(c0 + T, Skv);
    float s = 0.0f;
    for (int c = c0; c < c1; c++)
      s = __fadd_rn(s, gpu_mean_term(gpu_load(k, dt, b * s0 + h * s1 + c * s2 + d * s3)));
    mean[((b * H + h) * tiles + j) * D + d] = c1 > c0 ? s / (float)(c1 - c0) : 0.0f;
  }
}

lpattn_status gpu_tile_means(const gpu_mean_args *m, cudaStream_t st) {
  int64_t total = (int64_t)m->B * m->H * (m->j1 - m->j0) * m->D;
  if (total <= 0) return LPATTN_OK;
  unsigned blocks = (unsigned)(total / 256 + 1 > 4096 ? 4096 : total / 256 + 1);
  gpu_mean_kernel<<<blocks, 256, 0, st>>>(m->k, m->dtype, m->sk[0], m->sk[1], m->sk[2], m->sk[3],
                                          m->B, m->H, m->D, m->T, m->Skv, m->j0, m->j1,
                                          m->tiles, m->mean);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

/* A tensor quantized along S (tiles of 64; V of a prefill, the backward's
 * SR operands along S): codes * group scale as bf16 [BH][S][D] (exact), so
 * a kernel stages it like a high tile; the outer scales stay in the qview. */
__global__ void gpu_dequant_cols_kernel(const lp_gpu_qview vq, int fmt, int64_t BH, int S, int D, uint4 *vd) {
  const int64_t total = BH * S * (D / 8), Sp = (vq.rows + 63) / 64 * 64;
  const int G = fmt == LPATTN_FMT_MXFP4 ? 32 : 16;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t key = i % S, c = i / S % (D / 8) * 8, bh = i / S / (D / 8);
    const int64_t o = ((bh * S + key) * D + c) / 8;
    float v[8];
    for (int u = 0; u < 8; u++) {
      int64_t e = (bh * D + c + u) * Sp + key;
      uint8_t code = fmt == LPATTN_FMT_FP8 ? vq.codes[e] : (uint8_t)((vq.codes[e >> 1] >> ((e & 1) * 4)) & 15);
      v[u] = gpu_deq_inner(fmt, code, fmt == LPATTN_FMT_FP8 ? 0 : vq.scales[e / G]);
    }
    typedef gpu_mma<gpu_bf16> LO;
    vd[o] = make_uint4(LO::pack(v[0], v[1]), LO::pack(v[2], v[3]), LO::pack(v[4], v[5]), LO::pack(v[6], v[7]));
  }
}

/* A tensor quantized along D (Q and K of a low prefill or backward): codes *
 * group scale as bf16 [BH][S][D] (exact). */
__global__ void gpu_dequant_rows_kernel(const lp_gpu_qview q, int fmt, int64_t BH, int S, int D, uint4 *out) {
  const int64_t total = BH * S * (D / 8);
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = i / (D / 8), c = i % (D / 8) * 8, bh = row / S, s = row % S;
    out[i] = gpu_low8(q.codes, q.scales, fmt, (bh * q.rows + s) * D + c);
  }
}

/* Blocks of 256 threads for a grid-stride loop over n items (at most 8192). */
static unsigned gpu_blocks(int64_t n) { return (unsigned)(n / 256 + 1 > 8192 ? 8192 : n / 256 + 1); }

lpattn_status gpu_dequant_rows(const lp_gpu_qview *q, int fmt, int64_t BH, int S, int D, void *out, cudaStream_t st) {
  if (BH * S * D == 0) return LPATTN_OK;
  gpu_dequant_rows_kernel<<<gpu_blocks(BH * S * (D / 8)), 256, 0, st>>>(*q, fmt, BH, S, D, (uint4 *)out);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

lpattn_status gpu_dequant_cols(const lp_gpu_qview *q, int fmt, int64_t BH, int S, int D, void *out, cudaStream_t st) {
  if (BH * S * D == 0) return LPATTN_OK;
  gpu_dequant_cols_kernel<<<gpu_blocks(BH * S * (D / 8)), 256, 0, st>>>(*q, fmt, BH, S, D, (uint4 *)out);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

/* Static-scale FP8 (SPEC 11): x [B][H][S][D] -> E4M3 codes (f32/f16/bf16:
 * E4M3(x / descale), RNE with saturation as core's encoder; E4M3: the codes
 * as they are) in [B][H][rows][D], or with transpose in [B][H][D][rows]
 * (keys past S zero). A block per 64 x 64 tile of (s, d) through shared
 * memory, so that reads and writes both coalesce. */
__global__ void gpu_cast8_kernel(const gpu_cast8_args a) {
  __shared__ uint8_t tile[64][65];
  const int s0 = blockIdx.x * 64, d0 = blockIdx.y * 64;
  for (int64_t bh = blockIdx.z; bh < (int64_t)a.B * a.H; bh += gridDim.z) { /* B H may pass gridDim.z's limit */
  const int64_t b = bh / a.H, h = bh % a.H;
  const float ds = a.desc ? a.desc[b * a.sd[0] + h / a.G * a.sd[1]] : 1.0f;
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) {
    const int s = s0 + i / 64, d = d0 + i % 64;
    uint8_t c = 0;
    if (s < a.S && d < a.D) {
      const int64_t off = b * a.sx[0] + h * a.sx[1] + s * a.sx[2] + d * a.sx[3];
      c = a.dtype == LPATTN_E4M3 ? ((const uint8_t *)a.x)[off] : lpk_e4m3_encode(gpu_load(a.x, a.dtype, off) / ds);
      if (a.jmin && (c & 0x7f) == 0x7f) { /* a NaN code: 0 in the product, its first key kept */
        atomicMin(&a.jmin[bh * a.D + d], s);
        c = 0;
      }
    }
    tile[i / 64][i % 64] = c;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) {
    const int r = i / 64, c = i % 64;
    if (!a.transpose) {
      if (s0 + r < a.S && d0 + c < a.D) a.codes[(bh * a.rows + s0 + r) * a.D + d0 + c] = tile[r][c];
    } else if (d0 + r < a.D && s0 + c < a.rows) {
      a.codes[(bh * a.D + d0 + r) * a.rows + s0 + c] = tile[c][r];
    }
  }
  __syncthreads(); /* the tile is refilled for the next bh */
  }
}

/* SPEC 2 for static FP8's V: out[b, h, i, d] = NaN where row i attends
 * (causal: key <= i + off) a key at or after jmin[b, h / G, d], the first
 * key whose V code in channel d is NaN (the cast zeroed those codes, so
 * masked pairs stay 0 x 0 in the tensor-core product). A block per (b, kv
 * head); nothing to do in the usual case (no NaN: jmin = 0x7f7f7f7f). */
__global__ void gpu_nan_cols_kernel(const gpu_nan_cols_args a) {
  const int b = blockIdx.x / a.Hkv, hk = blockIdx.x % a.Hkv, G = a.Hq / a.Hkv;
  const int *jm = a.jmin + ((int64_t)b * a.Hkv + hk) * a.D;
  int any = 0;
  for (int d = threadIdx.x; d < a.D; d += blockDim.x) any |= jm[d] < a.Skv;
  if (!__syncthreads_or(any)) return;
  const int64_t n = (int64_t)G * a.Sq * a.D;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int d = (int)(i % a.D), r = (int)(i / a.D % a.Sq), h = hk * G + (int)(i / a.D / a.Sq);
    const int last = a.causal ? r + a.off : a.Skv - 1; /* the row's last key */
    if (jm[d] <= last) gpu_store(a.out, a.dtype, lpk_off(a.so, b, h, r, d), __int_as_float(0x7fffffff));
  }
}

lpattn_status gpu_nan_cols(const gpu_nan_cols_args *a, cudaStream_t st) {
  if (a->B * a->Hkv == 0) return LPATTN_OK;
  gpu_nan_cols_kernel<<<(unsigned)(a->B * a->Hkv), 256, 0, st>>>(*a);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

lpattn_status gpu_cast_e4m3(const gpu_cast8_args *a, cudaStream_t st) {
  const int64_t n = a->transpose ? a->rows : a->S;
  if ((int64_t)a->B * a->H * n * a->D == 0) return LPATTN_OK;
  const int64_t bh = (int64_t)a->B * a->H;
  const dim3 grid((unsigned)((n + 63) / 64), (unsigned)((a->D + 63) / 64), (unsigned)(bh < 65535 ? bh : 65535));
  gpu_cast8_kernel<<<grid, 256, 0, st>>>(*a);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

/* Prefill low tiles: K (along D) and V (along S) as bf16 copies. */
lpattn_status gpu_dequant_kv(const lp_gpu_qview *kq, const lp_gpu_qview *vq, int fmt, int64_t BH,
                             int S, int D, void *kd, void *vd, cudaStream_t st) {
  const lpattn_status e = gpu_dequant_rows(kq, fmt, BH, S, D, kd, st);
  return e != LPATTN_OK ? e : gpu_dequant_cols(vq, fmt, BH, S, D, vd, st);
}
} // namespace LP_GPU_NS
