/* THRIFT on the paged pool (SEMANTICS "Decode", core/kvpage.h layout), for
 * CUDA and HIP, all on the device (no host round trip, graph-capturable):
 *   append (gpu_pool_thrift_append): the query rows of the appended tokens
 *     go to the slot's ring of the two newest query tiles; a query tile
 *     that leaves the ring (tile j when tile j + 2 starts) leaves its mean
 *     in page j (f32 sum of its T rows in row order, non-finite values as
 *     zero, missing rows zero, divided by T: core/kvpool.c);
 *   decode (gpu_pool_thrift_select): the call's query rows are recorded in
 *     the ring, then one block per (query tile of the call's rows, q head,
 *     sequence) scores every full tile j < i against the recorded mean of
 *     query tile i - 1 (selection = causal; i with selection = paper),
 *     k from the sequence's length by core/thrift_k.h, and marks the k - 1
 *     best full tiles (the diagonal tile i is always high) in a bit mask:
 *     larger score first, ties to the lower j, NaN last (lp_tile_modes),
 *     through a radix select of the k - 1 largest keys; the q heads of one
 *     kv head share a block (and the key means it reads). A sliding window
 *     (a.win_left >= 0; SEMANTICS "Sliding window and softcap") classes the
 *     tiles j < i for query tile i as ref_decode.c does (lp_mask_kind):
 *     masked ones are never scored nor selected, edge ones are always
 *     selected and count among the k as the diagonal one does, k comes from
 *     the tiles a window spans (lp_thrift_k_span), the k - edges - 1 best
 *     full tiles are marked. */
#include "lp_gpu.cuh"
#include "lp_gpu_kv_args.h"
#include "mask.h"
#include "thrift_k.h"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
/* One count into a shared-memory histogram from every lane where `act`,
 * for a whole warp (every lane calls it): CUDA adds once per distinct bin
 * (the keys of a pass mostly share a few bins, and lanes hitting one
 * address would be serialized); HIP adds per lane. */
__device__ __forceinline__ void lpt_hist_add(uint32_t *hist, bool act, uint32_t bin) {
#ifndef LPATTN_HIP /* CUDA */
  const unsigned peers = __match_any_sync(0xffffffffu, act ? bin : 0xffffffffu);
  if (act && (int)(__ffs(peers) - 1) == (int)(threadIdx.x & 31)) atomicAdd(&hist[bin], (uint32_t)__popc(peers));
#else
  if (act) atomicAdd(&hist[bin], 1u);
#endif
}

__device__ __forceinline__ float lpt_term(float x) { return isfinite(x) ? x : 0.0f; }

__device__ __forceinline__ uint8_t *lpt_slot(const lp_gpu_pool &P, const lp_gpu_seqs &S, int s, int64_t *len) {
  const int32_t sl = S.slots[s];
  *len = (int64_t)S.lens[s] + S.len_add;
  if (sl < 0 || sl >= P.num_slots || *len < 0) return nullptr;
  return P.mem + (int64_t)sl * P.slot_bytes;
}
__device__ __forceinline__ uint8_t *lpt_page(const lp_gpu_pool &P, const lp_gpu_seqs &S, int s, int64_t tile) {
  if (tile < 0 || tile >= S.max_pages) return nullptr;
  const int32_t pg = S.table[(int64_t)s * S.table_stride + tile];
  if (pg < 0 || pg >= P.num_pages) return nullptr;
  return P.mem + P.num_slots * P.slot_bytes + (int64_t)pg * P.page_bytes;
}
/* the ring row of position p of q head hq (ring index tile % 2) */
__device__ __forceinline__ float *lpt_qrow(const lp_gpu_pool &P, uint8_t *slot, int hq, int64_t p) {
  const int64_t t = p / P.T;
  return (float *)(slot + P.qrows) + (((t & 1) * P.Hq + hq) * P.T + p % P.T) * (int64_t)P.D;
}

/* grid (num_seqs, n / T + 2, Hq): query tile t = max(cur0 - 1, 0) + y
 * leaves the ring with this append (t <= cur1 - 2): its mean to page t. */
__global__ void lpt_freeze_kernel(const lp_gpu_append_args a) {
  const lp_gpu_pool &P = a.pool;
  const int s = blockIdx.x, hq = blockIdx.z, T = P.T, D = P.D;
  int64_t len;
  uint8_t *slot = lpt_slot(P, a.seqs, s, &len);
  if (!slot) return;
  const int64_t cur0 = len > 0 ? (len - 1) / T : -1, cur1 = (len + a.n - 1) / T;
  const int64_t t = (cur0 - 1 > 0 ? cur0 - 1 : 0) + blockIdx.y;
  if (t > cur1 - 2) return;
  uint8_t *pg = lpt_page(P, a.seqs, s, t);
  if (!pg) return;
  float *mean = (float *)(pg + P.qmean) + (int64_t)hq * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.0f;
    for (int r = 0; r < T; r++) {
      const int64_t p = t * T + r;
      float x = 0.0f;
      if (p < len) x = lpt_qrow(P, slot, hq, p)[d];
      else if (a.q) x = gpu_load(a.q, a.qdt, lpk_off(a.sq, s, hq, p - len, d));
      sum = __fadd_rn(sum, lpt_term(x));
    }
    mean[d] = __fdiv_rn(sum, (float)T);
  }
}

/* grid (num_seqs, 2, Hq): ring tile t = cur1 - 1 + y after the append: rows
 * of earlier calls stay, the appended ones are written (zero without q),
 * later positions are zero (a ring index reused by a new tile, or a slot
 * whose sequence restarts at length 0, holds nothing stale). */
__global__ void lpt_qput_kernel(const lp_gpu_append_args a) {
  const lp_gpu_pool &P = a.pool;
  const int s = blockIdx.x, hq = blockIdx.z, T = P.T, D = P.D;
  int64_t len;
  uint8_t *slot = lpt_slot(P, a.seqs, s, &len);
  if (!slot) return;
  const int64_t len1 = len + a.n, t = (len1 - 1) / T - 1 + blockIdx.y;
  float *base = (float *)(slot + P.qrows) + (((t & 1) * P.Hq + hq) * (int64_t)T) * D;
  for (int e = threadIdx.x; e < T * D; e += blockDim.x) {
    const int r = e / D, d = e % D;
    const int64_t p = t * T + r;
    if (t >= 0 && p < len) continue;
    float x = 0.0f;
    if (t >= 0 && p < len1 && a.q) x = gpu_load(a.q, a.qdt, lpk_off(a.sq, s, hq, p - len, d));
    base[e] = x;
  }
}

/* grid (num_seqs, Hq, Sq): decode's query rows (positions len - Sq + r) */
__global__ void lpt_record_kernel(const lp_gpu_pdecode_args a) {
  const lp_gpu_pool &P = a.pool;
  const int s = blockIdx.x, hq = blockIdx.y, r = blockIdx.z;
  int64_t len;
  uint8_t *slot = lpt_slot(P, a.seqs, s, &len);
  if (!slot || len < a.Sq) return;
  float *row = lpt_qrow(P, slot, hq, len - a.Sq + r);
  for (int d = threadIdx.x; d < P.D; d += blockDim.x)
    row[d] = gpu_load(a.q, a.pool.hdt, lpk_off(a.sq, s, hq, r, d));
}

/* float -> unsigned key of the same order; NaN ranks last, -0 == +0 */
__device__ __forceinline__ uint32_t lpt_key(float x) {
  if (x != x) x = gpu_ninf();
  if (x == 0.0f) x = 0.0f;
  const uint32_t b = lpk_bits(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

#define LPT_THREADS 512
#define LPT_GB 4 /* q heads of one kv head per block (they share the key means) */

/* Bins [255 - 8l - 7, 255 - 8l] summed by lane l of warp 0, then thread 0
 * finds the bin where the count from the top reaches `need`. */
__device__ __forceinline__ void lpt_pick_bin(const uint32_t *hist, uint32_t *part, int need, int *bin, int *above) {
  const int tid = threadIdx.x;
  if (tid < 32) {
    uint32_t s = 0;
    for (int k = 0; k < 8; k++) s += hist[255 - 8 * tid - k];
    part[tid] = s;
  }
  __syncthreads();
  if (tid == 0) {
    int c = 0, b = 0;
    for (int l = 0; l < 32; l++) {
      if (c + (int)part[l] < need) {
        c += (int)part[l];
        continue;
      }
      for (b = 255 - 8 * l; b > 255 - 8 * l - 7; b--) {
        if (c + (int)hist[b] >= need) break;
        c += (int)hist[b];
      }
      break;
    }
    *bin = b, *above = c;
  }
}

/* grid (2, Hq / gb, num_seqs), gb q heads of one kv head per block; dynamic
 * smem: the gb query means [gb][D], then their keys [gb][sel_words * 32]. */
__global__ void __launch_bounds__(LPT_THREADS) lpt_select_kernel(const lp_gpu_pdecode_args a, int gb) {
  extern __shared__ float lpt_sm[];
  __shared__ uint32_t hist[LPT_THREADS], part[32];
  __shared__ int sh_bin, sh_above;
  const lp_gpu_pool &P = a.pool;
  const int x = blockIdx.x, s = blockIdx.z, T = P.T, D = P.D, tid = threadIdx.x;
  const int hq0 = blockIdx.y * gb, nmax = a.sel_words * 32;
  for (int e = tid; e < gb * a.sel_words; e += blockDim.x)
    a.sel[(((int64_t)s * P.Hq + hq0 + e / a.sel_words) * 2 + x) * a.sel_words + e % a.sel_words] = 0u;
  __syncthreads();
  int64_t len;
  uint8_t *slot = lpt_slot(P, a.seqs, s, &len);
  if (!slot || len < a.Sq || len < 1) return;
  const int64_t cur = (len - 1) / T, i = (len - a.Sq) / T + x;
  if (i > cur || i < 1 || i > (int64_t)nmax) return;
  const int ni = (int)i;
  auto dst = [&](int g) { return a.sel + (((int64_t)s * P.Hq + hq0 + g) * 2 + x) * a.sel_words; };
  /* tiles j < i for query tile i: masked [0, jm), edge [jm, jf), full [jf, i) */
  int jm = 0, jf = 0;
  if (a.win_left >= 0) {
    const lp_mask m = {1, 0, a.win_left, -1, T};
    int64_t w0, w1;
    lp_mask_tiles(&m, i * T, i * T, T, i, &w0, &w1);
    jm = jf = (int)w0;
    while (jf < ni && lp_mask_kind(&m, i * T, i * T, (int64_t)jf * T, (int64_t)jf * T + T - 1) != LP_TILE_FULL) jf++;
    for (int e = tid; e < gb * (jf - jm); e += blockDim.x) { /* edge tiles: high */
      const int j = jm + e % (jf - jm);
      atomicOr(&dst(e / (jf - jm))[j >> 5], 1u << (j & 31));
    }
  }
  const int k = lp_thrift_k_span(a.thrift_k, a.thrift_budget, 1, (len + T - 1) / T, a.win_left, 0, T, T);
  const int need0 = k - 1 - (jf - jm), nf = ni - jf;
  if (need0 <= 0) return;
  if (need0 >= nf) { /* every full tile */
    for (int e = tid; e < gb * nf; e += blockDim.x) {
      const int j = jf + e % nf;
      atomicOr(&dst(e / nf)[j >> 5], 1u << (j & 31));
    }
    return;
  }
  float *qbar = lpt_sm;
  uint32_t *key = (uint32_t *)(lpt_sm + gb * D);
  const int64_t qt = a.sel_causal ? i - 1 : i;
  for (int e = tid; e < gb * D; e += blockDim.x) {
    const int g = e / D, d = e % D;
    float m = 0.0f;
    if (qt >= 0 && qt <= cur - 2) {
      const uint8_t *pg = lpt_page(P, a.seqs, s, qt);
      m = pg ? ((const float *)(pg + P.qmean))[(int64_t)(hq0 + g) * D + d] : 0.0f;
    } else if (qt >= 0) {
      const float *rows = lpt_qrow(P, slot, hq0 + g, qt * T) + d;
      float sum = 0.0f;
#pragma unroll 8
      for (int r = 0; r < T; r++) sum = __fadd_rn(sum, lpt_term(rows[(int64_t)r * D]));
      m = __fdiv_rn(sum, (float)T);
    }
    qbar[e] = m;
  }
  __syncthreads();
  /* scores: f32 dot in d order (lp_dot_f32), the gb heads' chains side by side */
  const int hk = hq0 / (P.Hq / P.Hkv);
  for (int j = tid; j < ni; j += blockDim.x) {
    if (j < jf) { /* masked and edge tiles are no candidates: key 0, below every score's
                   * (lpt_key's least is -inf's, 0x007fffff), so never at or above the
                   * threshold, which lies among the nf > need0 candidates */
      for (int g = 0; g < gb; g++) key[g * nmax + j] = 0u;
      continue;
    }
    float sc[LPT_GB] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint8_t *pg = qt >= 0 ? lpt_page(P, a.seqs, s, j) : nullptr;
    if (pg) {
      const float4 *km = (const float4 *)(pg + P.kmean + (int64_t)hk * D * 4);
#pragma unroll 4
      for (int d4 = 0; d4 < D / 4; d4++) {
        const float4 k4 = km[d4];
#pragma unroll
        for (int g = 0; g < LPT_GB; g++) {
          if (g >= gb) break;
          const float *q = qbar + g * D + 4 * d4;
          float v = sc[g];
          v = __fadd_rn(v, __fmul_rn(q[0], k4.x)), v = __fadd_rn(v, __fmul_rn(q[1], k4.y));
          v = __fadd_rn(v, __fmul_rn(q[2], k4.z)), v = __fadd_rn(v, __fmul_rn(q[3], k4.w));
          sc[g] = v;
        }
      }
    }
    for (int g = 0; g < gb; g++) key[g * nmax + j] = lpt_key(sc[g]);
  }
  __syncthreads();
  for (int g = 0; g < gb; g++) {
    const uint32_t *kg = key + g * nmax;
    /* radix select: the need0-th largest key, 8 bits a pass */
    uint32_t prefix = 0u, mask = 0u;
    int need = need0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      if (tid < 256) hist[tid] = 0u;
      __syncthreads();
      for (int j0w = 0; j0w < ni; j0w += blockDim.x) { /* whole warps (lpt_hist_add) */
        const int j = j0w + tid;
        const uint32_t kj = j < ni ? kg[j] : 0u;
        lpt_hist_add(hist, j < ni && (kj & mask) == prefix, (kj >> shift) & 255u);
      }
      __syncthreads();
      lpt_pick_bin(hist, part, need, &sh_bin, &sh_above);
      __syncthreads();
      prefix |= (uint32_t)sh_bin << shift, need -= sh_above, mask |= 255u << shift;
      __syncthreads();
    }
    /* keys above the threshold, and the `need` lowest j of those equal to it */
    const int per = (ni + LPT_THREADS - 1) / LPT_THREADS, j0 = tid * per, j1 = min(j0 + per, ni);
    int eq = 0;
    for (int j = j0; j < j1; j++) eq += kg[j] == prefix;
    hist[tid] = (uint32_t)eq;
    __syncthreads();
    if (tid < 32) { /* exclusive prefix of the 512 counts: 32 runs of 16, then the runs */
      uint32_t c = 0;
      for (int k = 0; k < 16; k++) c += hist[16 * tid + k];
      part[tid] = c;
    }
    __syncthreads();
    if (tid == 0)
      for (int l = 0, c = 0; l < 32; l++) {
        const int e = (int)part[l];
        part[l] = (uint32_t)c, c += e;
      }
    __syncthreads();
    if (tid < 32)
      for (int k = 0, c = (int)part[tid]; k < 16; k++) {
        const int e = (int)hist[16 * tid + k];
        hist[16 * tid + k] = (uint32_t)c, c += e;
      }
    __syncthreads();
    int before = (int)hist[tid];
    uint32_t *dg = dst(g);
    for (int j = j0; j < j1; j++) {
      const bool take = kg[j] > prefix || (kg[j] == prefix && before++ < need);
      if (take) atomicOr(&dg[j >> 5], 1u << (j & 31));
    }
    __syncthreads();
  }
}

lpattn_status gpu_pool_thrift_append(const lp_gpu_append_args *a, cudaStream_t st) {
  if (!a->pool.has_qmean || a->n <= 0 || a->seqs.num_seqs <= 0) return LPATTN_OK;
  const unsigned ns = (unsigned)a->seqs.num_seqs, hq = (unsigned)a->pool.Hq;
  lpt_freeze_kernel<<<dim3(ns, (unsigned)(a->n / a->pool.T + 2), hq), 128, 0, st>>>(*a);
  lpt_qput_kernel<<<dim3(ns, 2, hq), 256, 0, st>>>(*a);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

static size_t lpt_smem(int gb, int D, int sel_words) { return (size_t)gb * ((size_t)D + (size_t)sel_words * 32) * 4; }

lpattn_status gpu_pool_thrift_select(const lp_gpu_pdecode_args *a, cudaStream_t st) {
  const unsigned ns = (unsigned)a->seqs.num_seqs, hq = (unsigned)a->pool.Hq;
  lpt_record_kernel<<<dim3(ns, hq, (unsigned)a->Sq), 128, 0, st>>>(*a);
  const int G = a->pool.Hq / a->pool.Hkv;
  /* heads per block: 4 share the key means' reads; 1 when the grid would
   * not fill the device otherwise (few sequences) */
  int gb = G % 4 == 0 ? 4 : G % 2 == 0 ? 2 : 1;
  while (gb > 1 && (int64_t)ns * hq / gb < 256) gb /= 2;
  while (gb > 1 && lpt_smem(gb, a->pool.D, a->sel_words) > GPU_SMEM_MAX - 4096) gb /= 2;
  const size_t smem = lpt_smem(gb, a->pool.D, a->sel_words);
  if (smem > GPU_SMEM_MAX - 4096) return LPATTN_ERR_UNSUPPORTED;
  if (cudaFuncSetAttribute(lpt_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
    return LPATTN_ERR_BACKEND;
  lpt_select_kernel<<<dim3(2, hq / (unsigned)gb, ns), LPT_THREADS, smem, st>>>(*a, gb);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}
} // namespace LP_GPU_NS
