/* Appending tokens to the paged pool (SPEC 9, core/kvpage.h layout), for
 * CUDA and HIP: lengths, slots and page tables are read on the device, so
 * nothing waits for the host. Three launches per append:
 *   put (phase 1): HIGH pages: every new token into its page; FP8/NVFP4/
 *     MXFP4: the new tokens of the sequence's current tile into its slot ring;
 *   quant: every tile the append completes is quantized into its page by the
 *     reference quantizer (backends/math/lpk_quant.h quantize_domain, bit-exact with
 *     core/quant.c): K per token along D, V per channel along the tile's
 *     tokens; its tokens come from the ring (the tile that was current) or
 *     from the input;
 *   put (phase 2): the tokens of the two newest tiles into the ring.
 * FP8_STATIC pages take each token's E4M3 codes in phase 1 (no ring, no quant
 * launch), cast by the slot's descales (gpu_descales_kernel writes them).
 * HIGH and THRIFT pages keep every token's high copy (phase 1 only); the
 * quant step then reads the page's copy. A completed tile's key mean goes to
 * its page first (PASA, THRIFT), and PASA quantizes K - beta * Kbar_j.
 * THRIFT's query rows: lp_gpu_decode_thrift.
 * And the decode's merge of its chunk partials (gpu_pool_merge).
 * High copies are in the pool's high dtype; quantization reads them rounded
 * to it, as the ring holds them. */
#include "lp_gpu.cuh"
#include "kvpage.h" /* LP_KV_DIM_MAX */
#include "lp_gpu_kv_args.h"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {

__device__ __forceinline__ float gpu_round_hi(int hdt, float x) {
  return hdt == LPATTN_F16 ? gpu_f16_tof(gpu_f16_bits(x)) : gpu_bf16_tof(gpu_bf16_bits(x));
}
__device__ __forceinline__ bool gpu_seq(const lp_gpu_append_args &a, int s, int64_t *len, uint8_t **slot) {
  const int32_t sl = a.seqs.slots[s];
  *len = (int64_t)a.seqs.lens[s] + a.seqs.len_add;
  if (sl < 0 || sl >= a.pool.num_slots || *len < 0) return false;
  *slot = a.pool.mem + (int64_t)sl * a.pool.slot_bytes;
  return true;
}
__device__ __forceinline__ uint8_t *gpu_page(const lp_gpu_append_args &a, int s, int64_t tile) {
  if (tile >= a.seqs.max_pages) return nullptr;
  const int32_t pg = a.seqs.table[(int64_t)s * a.seqs.table_stride + tile];
  if (pg < 0 || pg >= a.pool.num_pages) return nullptr;
  return a.pool.mem + a.pool.num_slots * a.pool.slot_bytes + (int64_t)pg * a.pool.page_bytes;
}

/* channel d of token i of head h of sequence s in K, V: zero past the
 * row's true width (MLA: V's 512 of the pool's 576, core/kvpage.h) */
__device__ __forceinline__ float gpu_in_k(const lp_gpu_append_args &a, int s, int h, int64_t i, int d) {
  return d < a.pool.Dk ? gpu_load(a.k, a.kdt, lpk_off(a.sk, s, h, i, d)) : 0.0f;
}
__device__ __forceinline__ float gpu_in_v(const lp_gpu_append_args &a, int s, int h, int64_t i, int d) {
  return d < a.pool.Dv ? gpu_load(a.v, a.vdt, lpk_off(a.sv, s, h, i, d)) : 0.0f;
}

/* grid (n, Hkv, num_seqs): token i of head h of sequence s */
__global__ void gpu_put_kernel(const lp_gpu_append_args a) {
  const lp_gpu_pool &P = a.pool;
  const int i = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
  int64_t len;
  uint8_t *slot;
  if (!gpu_seq(a, s, &len, &slot)) return;
  const int64_t pos = len + i, tile = pos / P.T, t0 = len / P.T, last = (len + a.n - 1) / P.T;
  uint8_t *dk, *dv;
  if (P.fp8s) { /* FP8_STATIC: the token's codes into its page, E4M3(x / descale) (SPEC 11) */
    uint8_t *pg = a.phase == 1 ? gpu_page(a, s, tile) : nullptr;
    if (!pg) return;
    const float kd = ((const float *)(slot + P.ds))[h], vd = ((const float *)(slot + P.ds))[P.Hkv + h];
    uint8_t *c = pg + (int64_t)h * P.head_bytes;
    const int64_t r = pos % P.T;
    for (int d = threadIdx.x; d < P.D; d += blockDim.x) {
      c[P.kc + r * P.D + d] = lpk_e4m3_encode(gpu_in_k(a, s, h, i, d) / kd);
      c[P.vc + (int64_t)d * P.T + r] = lpk_e4m3_encode(gpu_in_v(a, s, h, i, d) / vd);
    }
    return;
  }
  if (P.has_high_pages) {
    uint8_t *pg = a.phase == 1 ? gpu_page(a, s, tile) : nullptr;
    if (!pg) return;
    const int64_t off = ((int64_t)h * P.T + pos % P.T) * P.D * 2;
    dk = pg + P.hk + off, dv = pg + P.hv + off;
  } else {
    const bool put = a.phase == 1 ? tile == t0 : tile > t0 && tile >= last - 1;
    if (!put) return;
    const int64_t off = (((tile & 1) * P.Hkv + h) * P.T + pos % P.T) * P.D * 2;
    dk = slot + P.rk + off, dv = slot + P.rv + off;
  }
  for (int d = threadIdx.x; d < P.D; d += blockDim.x) {
    gpu_store(dk, P.hdt, d, gpu_in_k(a, s, h, i, d));
    gpu_store(dv, P.hdt, d, gpu_in_v(a, s, h, i, d));
  }
  if (a.phase == 2 && i == 0 && h == 0 && threadIdx.x == 0) *(int64_t *)slot = len + a.n;
}

/* grid (num_seqs, tiles, Hkv): tile len / T + y, if this append completes it.
 * Shared memory: K [T][D] and V [T][D + 1] together, or in turn in one
 * [T][D] buffer where both do not fit (HIP's 64 KB of LDS); then the key
 * mean [D]. */
__host__ __device__ inline bool gpu_quant_both(int T, int D) { return ((size_t)T * (2 * D + 1) + D) * 4 <= GPU_SMEM_MAX; }
__host__ __device__ inline size_t gpu_quant_smem(int T, int D) {
  return ((size_t)T * (gpu_quant_both(T, D) ? 2 * D + 1 : D) + D) * 4;
}
__global__ void gpu_quant_kernel(const lp_gpu_append_args a) {
  extern __shared__ float gpu_sm[];
  const lp_gpu_pool &P = a.pool;
  const int s = blockIdx.x, h = blockIdx.z, T = P.T, D = P.D;
  int64_t len;
  uint8_t *slot;
  if (!gpu_seq(a, s, &len, &slot)) return;
  const int64_t t0 = len / T, tile = t0 + blockIdx.y;
  if ((tile + 1) * T > len + a.n) return;
  uint8_t *pg = gpu_page(a, s, tile);
  if (!pg) return;
  const bool both = gpu_quant_both(T, D);
  float *Kf = gpu_sm, *Vf = both ? gpu_sm + T * D : gpu_sm;
  float *kbar = gpu_sm + (size_t)T * (both ? 2 * D + 1 : D);
  const int vst = both ? D + 1 : D;
  for (int pass = 0; pass < (both ? 1 : 2); pass++) {
  const bool dk = both || pass == 0, dv = both || pass == 1;
  for (int e = threadIdx.x; e < T * D; e += blockDim.x) {
    const int tau = e / D, d = e % D;
    float kx, vx;
    if (P.has_high_pages) { /* THRIFT: the page's own high copy (phase 1 wrote it) */
      const int64_t off = ((int64_t)h * T + tau) * D + d;
      kx = gpu_load(pg + P.hk, P.hdt, off), vx = gpu_load(pg + P.hv, P.hdt, off);
    } else if (tile == t0) { /* the tile that was current: all of it is in the ring now */
      const int64_t off = (((tile & 1) * P.Hkv + h) * T + tau) * D + d;
      kx = gpu_load(slot + P.rk, P.hdt, off), vx = gpu_load(slot + P.rv, P.hdt, off);
    } else {
      const int64_t i = tile * T + tau - len;
      kx = gpu_round_hi(P.hdt, gpu_in_k(a, s, h, i, d));
      vx = gpu_round_hi(P.hdt, gpu_in_v(a, s, h, i, d));
    }
    if (dk) Kf[tau * D + d] = kx;
    if (dv) Vf[tau * vst + d] = vx;
  }
  __syncthreads();
  if (dk && P.has_kmean) { /* key mean (core/tiles.h lp_mean_rows_f32), then PASA's shift of K */
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float sum = 0.0f;
      for (int tau = 0; tau < T; tau++) {
        const float x = Kf[tau * D + d];
        sum = __fadd_rn(sum, isfinite(x) ? x : 0.0f);
      }
      kbar[d] = __fdiv_rn(sum, (float)T);
      ((float *)(pg + P.kmean))[(int64_t)h * D + d] = kbar[d];
    }
    __syncthreads();
    if (P.pasa && P.has_low)
      for (int e = threadIdx.x; e < T * D; e += blockDim.x)
        Kf[e] = __fsub_rn(Kf[e], __fmul_rn(P.pasa_beta, kbar[e % D]));
    __syncthreads();
  }
  if (!P.has_low) return;
  uint8_t *base = pg + (int64_t)h * P.head_bytes;
  const int fmt = P.fmt, G = fmt == LPATTN_FMT_MXFP4 ? 32 : 16, fp8 = fmt == LPATTN_FMT_FP8;
  uint8_t codes[LP_KV_DIM_MAX], sc[LP_KV_DIM_MAX / 16]; /* a K row: D codes, D / G scales (MLA: 576, 36) */
  float outer = 0.0f;
  for (int tau = threadIdx.x; dk && tau < T; tau += blockDim.x) { /* K: one token's D values */
    lpk_quantize_domain(fmt, P.mx_round_up, 0, 0, NULL, Kf + tau * D, 1, D, codes, sc, &outer);
    if (fp8) {
      for (int d = 0; d < D; d++) base[P.kc + (int64_t)tau * D + d] = codes[d];
    } else {
      for (int d = 0; d < D; d += 2) base[P.kc + (int64_t)tau * (D / 2) + d / 2] = (uint8_t)(codes[d] | codes[d + 1] << 4);
      for (int k = 0; k < D / G; k++) base[P.ks + (int64_t)tau * (D / G) + k] = sc[k];
    }
    if (fmt != LPATTN_FMT_MXFP4) ((float *)(base + P.ko))[tau] = outer;
  }
  for (int c = threadIdx.x; dv && c < D; c += blockDim.x) { /* V: one channel of the tile */
    lpk_quantize_domain(fmt, P.mx_round_up, 0, 0, NULL, Vf + c, vst, T, codes, sc, &outer);
    if (fp8) {
      for (int k = 0; k < T; k++) base[P.vc + (int64_t)c * T + k] = codes[k];
    } else {
      for (int k = 0; k < T; k += 2) base[P.vc + (int64_t)c * (T / 2) + k / 2] = (uint8_t)(codes[k] | codes[k + 1] << 4);
      for (int k = 0; k < T / G; k++) base[P.vs + (int64_t)c * (T / G) + k] = sc[k];
    }
    if (fmt != LPATTN_FMT_MXFP4) ((float *)(base + P.vo))[c] = outer;
  }
  __syncthreads();
  }
}

/* SPEC 7 over a decode's chunk partials. Block (row, 32 channels), 8 warps:
 * the row's n LSEs staged in shared memory by all threads (one round trip),
 * weights w_i = exp(LSE_i - LSE) by warp 0 from there, then warp k sums
 * chunks k, k + 8, ... of its lane's channel (every load of a warp in
 * flight at once) and the 8 sums are added in warp order. A B = 1 decode
 * has few rows and many chunks (32 x 128 at 128k): latency, not bytes,
 * bounds this kernel, 18.7 us a call when one block of a row walked every
 * chunk. Empty chunks (LSE = -inf) add exact zeros to their warp's sum, and
 * chunk i goes to warp i % 8 whatever n is, so a row's bits do not depend
 * on the batch's chunk count. */
enum { GPU_MERGE_WARPS = 8 };
__global__ void __launch_bounds__(32 * GPU_MERGE_WARPS) gpu_merge_kernel(const lp_gpu_merge_args a) {
  extern __shared__ float gpu_w[]; /* n weights, LSE, H, then the warps' sums [8][32] */
  const int64_t rows = (int64_t)a.B * a.H * a.S, row = blockIdx.x;
  const int n = a.n, lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
  const int64_t s = row % a.S, h = row / a.S % a.H, b = row / a.S / a.H;
  for (int i = threadIdx.x; i < n; i += blockDim.x) gpu_w[i] = a.part_l[i * rows + row];
  __syncthreads();
  if (wp == 0) {
    float m = gpu_ninf();
    for (int i = lane; i < n; i += 32) m = fmaxf(m, gpu_w[i]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
    if (m != gpu_ninf())
      for (int i = lane; i < n; i += 32) sum += expf(gpu_w[i] - m);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float L = m == gpu_ninf() ? m : m + logf(sum);
    float H = 0.0f;
    for (int i = lane; i < n; i += 32) {
      const float wi = L == gpu_ninf() ? 0.0f : expf(gpu_w[i] - L);
      gpu_w[i] = wi;
      if (wi > 0.0f) H += wi * a.part_h[i * rows + row] - lpk_xlogx(wi);
    }
    for (int o = 16; o > 0; o >>= 1) H += __shfl_xor_sync(0xffffffffu, H, o);
    if (lane == 0) gpu_w[n] = L, gpu_w[n + 1] = H;
  }
  __syncthreads();
  const int d = blockIdx.y * 32 + lane;
  const int64_t dp = a.Dp ? a.Dp : a.D; /* MLA: the partials' width, out's first D */
  float y = 0.0f;
  if (d < a.D) { /* empty chunks (w = 0: past a sequence's end, before its window) are not read */
    const float *po = a.part_o + row * dp + d;
    const int64_t step = rows * dp;
    constexpr int U = 8, W = GPU_MERGE_WARPS;
    int i = wp;
    for (; i + W * (U - 1) < n; i += W * U) {
      float v[U];
#pragma unroll
      for (int u = 0; u < U; u++) v[u] = gpu_w[i + W * u] > 0.0f ? po[(int64_t)(i + W * u) * step] : 0.0f;
#pragma unroll
      for (int u = 0; u < U; u++) {
        const float wi = gpu_w[i + W * u];
        y = wi > 0.0f ? __fmaf_rn(wi, v[u], y) : y;
      }
    }
    for (; i < n; i += W) {
      const float wi = gpu_w[i];
      if (wi > 0.0f) y = __fmaf_rn(wi, po[(int64_t)i * step], y);
    }
  }
  float *part = gpu_w + n + 2;
  part[wp * 32 + lane] = y;
  __syncthreads();
  if (wp == 0 && d < a.D) {
    float t = 0.0f;
#pragma unroll
    for (int k = 0; k < GPU_MERGE_WARPS; k++) t += part[k * 32 + lane];
    gpu_store(a.out, a.out_dtype, lpk_off(a.sout, b, h, s, d), t);
  }
  if (blockIdx.y == 0 && threadIdx.x == 0) {
    if (a.lse) a.lse[lpk_off(a.slse, b, h, s, 0)] = gpu_w[n];
    if (a.ent) a.ent[lpk_off(a.sent, b, h, s, 0)] = gpu_w[n + 1];
  }
}

/* one thread per (i, kv head): lp_gpu_descales_args */
__global__ void gpu_descales_kernel(const lp_gpu_descales_args a) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= (int64_t)a.n * a.pool.Hkv) return;
  const int i = (int)(e / a.pool.Hkv), h = (int)(e % a.pool.Hkv);
  const int32_t sl = a.slots[i * a.sslot];
  if (sl < 0 || sl >= a.pool.num_slots) return;
  uint8_t *slot = a.pool.mem + (int64_t)sl * a.pool.slot_bytes;
  float *ds = (float *)(slot + a.pool.ds);
  ds[h] = a.k[i * a.sk[0] + h * a.sk[1]], ds[a.pool.Hkv + h] = a.v[i * a.sv[0] + h * a.sv[1]];
  if (h == 0) *(int64_t *)slot = 0, *(int32_t *)(slot + 8) = 0; /* emptied (core/kvpool.c reset_slot) */
}

lpattn_status gpu_pool_set_descales(const lp_gpu_descales_args *a, cudaStream_t st) {
  const int64_t n = (int64_t)a->n * a->pool.Hkv;
  if (n <= 0) return LPATTN_OK;
  gpu_descales_kernel<<<(unsigned)((n + 127) / 128), 128, 0, st>>>(*a);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

__global__ void gpu_ids_add_kernel(int32_t *p, int32_t n) { *p += n; }

/* a KV cache's sequence length on the device (core/kvcache.c) */
lpattn_status gpu_pool_ids_add(int32_t *p, int32_t n, cudaStream_t st) {
  gpu_ids_add_kernel<<<1, 1, 0, st>>>(p, n);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

lpattn_status gpu_pool_merge(const lp_gpu_merge_args *a, cudaStream_t st) {
  const int64_t rows = (int64_t)a->B * a->H * a->S;
  if (rows == 0) return LPATTN_OK;
  const size_t smem = (size_t)(a->n + 2 + 32 * GPU_MERGE_WARPS) * 4;
  if (smem > 48 * 1024 || rows > 0x7fffffff) return LPATTN_ERR_UNSUPPORTED;
  gpu_merge_kernel<<<dim3((unsigned)rows, (unsigned)((a->D + 31) / 32)), 32 * GPU_MERGE_WARPS, smem, st>>>(*a);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

lpattn_status gpu_pool_append(const lp_gpu_append_args *a, cudaStream_t st) {
  if (a->n <= 0 || a->seqs.num_seqs <= 0) return LPATTN_OK;
  lp_gpu_append_args x = *a;
  x.phase = 1;
  dim3 pg((unsigned)a->n, (unsigned)a->pool.Hkv, (unsigned)a->seqs.num_seqs);
  gpu_put_kernel<<<pg, 128, 0, st>>>(x);
  if ((a->pool.has_low && !a->pool.fp8s) || a->pool.has_kmean) { /* FP8_STATIC: codes per token, above */
    const size_t smem = gpu_quant_smem(a->pool.T, a->pool.D);
    if (cudaFuncSetAttribute(gpu_quant_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
      return LPATTN_ERR_BACKEND;
    dim3 qg((unsigned)a->seqs.num_seqs, (unsigned)(a->n / a->pool.T + 2), (unsigned)a->pool.Hkv);
    gpu_quant_kernel<<<qg, 128, smem, st>>>(x);
  }
  if (a->pool.has_ring) {
    x.phase = 2;
    gpu_put_kernel<<<pg, 128, 0, st>>>(x);
  }
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}
} // namespace LP_GPU_NS
