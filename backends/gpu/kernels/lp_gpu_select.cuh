/* THRIFT's tile selection of a prefill (SPEC 5, SEMANTICS "THRIFT" and
 * "THRIFT selection rules"), bit for bit the host's (core/thrift.c
 * lp_thrift_scores + lp_tile_modes): the same f32 sums in the same order,
 * __f*_rn so that nothing contracts into an FMA. Three launches:
 *   gpu_qbar_kernel  Qbar of every query tile: f32 sum of its Sq-clipped
 *                    rows (GQA rule: every q head of the KV group, heads
 *                    outer, rows inner), one division;
 *   gpu_kmax_kernel  KMAX rule: max over each full tile's keys of Qbar . k
 *                    (d ascending), eight query tiles per CTA so that a
 *                    staged K tile serves all eight, four K tiles at once;
 *   gpu_select_kernel the importance of every full tile (Qbar . Kbar, or
 *                    KMAX's, SINK's +inf on tile 0), then the repeated
 *                    strict arg-max (ties to the lower j, NaN last).
 * A sliding window (core/mask.h): masked tiles are never picked, edge tiles
 * are high and count among the k, as diagonal ones (SEMANTICS "Sliding
 * window and softcap"). "Sel heads" Hs: the KV heads under the GQA rule (one selection per KV head,
 * written to each q head of its group), else the q heads. Included once, by
 * lp_gpu_ops.cu, inside LP_GPU_NS. */
#ifndef LP_GPU_SELECT_CUH
#define LP_GPU_SELECT_CUH

#define GPU_KMAX_QT 8  /* query tiles per CTA of gpu_kmax_kernel */
#define GPU_KMAX_DC 64 /* channels of K staged at a time */
#ifdef LPATTN_HIP
#define GPU_KMAX_NG 2 /* K tiles a CTA of gpu_kmax_kernel takes at once (64 KB of LDS) */
#else
#define GPU_KMAX_NG 4
#endif

/* A value's share of a tile mean: non-finite values count as zero, as in
 * core/tiles.h lp_mean_rows_f32 (SEMANTICS "Non-finite inputs"). */
__device__ __forceinline__ float gpu_mean_term(float x) { return isfinite(x) ? x : 0.0f; }

__host__ __device__ __forceinline__ bool gpu_sel_gqa(const gpu_select_args &a) {
  return (a.rule & LPATTN_THRIFT_RULE_GQA) && a.Hq != a.Hkv;
}
__host__ __device__ __forceinline__ int gpu_sel_heads(const gpu_select_args &a) { return gpu_sel_gqa(a) ? a.Hkv : a.Hq; }

/* The query tile whose mean scores query tile qi: qi - 1 under causal
 * selection (-1: none, every score 0), else qi. */
__device__ __forceinline__ int gpu_sel_src(const gpu_select_args &a, int qi) {
  return (a.causal && a.sel_causal) ? qi - 1 : qi;
}

/* The mask of the call: causal and the sliding window (core/mask.h). */
__device__ __forceinline__ lp_mask gpu_sel_mask(const gpu_select_args &a) {
  const lp_mask m = {a.causal, a.off, a.win_left, a.win_right, a.T};
  return m;
}
/* Class of tile j for query tile qi (LP_TILE_*, core/mask.h lp_mask_kind:
 * full when every row sees every key, the unclipped last key, SEMANTICS;
 * non-causal without a window: every tile). */
__device__ __forceinline__ int gpu_sel_kind(const gpu_select_args &a, int qi, int j) {
  const lp_mask m = gpu_sel_mask(a);
  const int64_t r0 = (int64_t)qi * a.T, r1 = min(r0 + a.T, (int64_t)a.Sq) - 1;
  return lp_mask_kind(&m, r0, r1, (int64_t)j * a.T, (int64_t)j * a.T + a.T - 1);
}
__device__ __forceinline__ bool gpu_sel_full(const gpu_select_args &a, int qi, int j) {
  return gpu_sel_kind(a, qi, j) == LP_TILE_FULL;
}

/* qbar[(b * Hs + hs) * sel_tiles + t][d]: one block per (t, hs, b). */
__global__ void gpu_qbar_kernel(const gpu_select_args a) {
  const int t = blockIdx.x, hs = blockIdx.y, b = blockIdx.z;
  const int G = gpu_sel_gqa(a) ? a.Hq / a.Hkv : 1, h0 = hs * G;
  const int q0 = t * a.T, q1 = min(q0 + a.T, a.Sq);
  float *dst = a.qbar + (((int64_t)b * gridDim.y + hs) * a.sel_tiles + t) * a.D;
  for (int d = threadIdx.x; d < a.D; d += blockDim.x) {
    float s = 0.0f;
    for (int h = h0; h < h0 + G; h++)
      for (int r = q0; r < q1; r++)
        s = __fadd_rn(s, gpu_mean_term(gpu_load(a.q, a.qdt, lpk_off(a.sq, b, h, r, d))));
    dst[d] = s / (float)((q1 - q0) * G);
  }
}

/* acc[u] += qbar_u[d] * k[d] over one staged chunk of channels, d ascending;
 * NF (a non-finite key element in the chunk): such an element adds 0, as
 * core/thrift.c's dot_finite. */
template <bool NF>
__device__ __forceinline__ void gpu_kmax_chunk(const float *krow, const float *qs, int n, float acc[GPU_KMAX_QT]) {
  for (int d = 0; d < n; d++) {
    const float kv = krow[d];
    const float *qd = qs + d * GPU_KMAX_QT;
#pragma unroll
    for (int u = 0; u < GPU_KMAX_QT; u++)
      acc[u] = __fadd_rn(acc[u], NF && !isfinite(kv) ? 0.0f : __fmul_rn(qd[u], kv));
  }
}

/* kmax[(b * Hs + hs) * sel_tiles + qi][j] for the full tiles j of query tiles
 * qi in [8 x, 8 x + 8): one block per (x, key tiles [NG y, NG y + NG), hs, b)
 * (blockIdx.x = x * ny + y, ny = ceil(nkt / NG)): GPU_KMAX_NG groups of T (64)
 * threads, each on its own K tile (j = NG y + group), a thread per key. A
 * block whose key tiles no query tile of it sees in full exits at once.
 * (One block per x that looped over every key tile took 2.6 ms at 8k, causal,
 * 32 heads on the H200, ~10x its CUDA-core bound: one block's serial chain
 * of staging latencies was the limit; each (qi, j) is still written by one
 * thread with the same sums, so the values are unchanged.) Shared: per group a K chunk
 * [T][DC + 1], per-key maxima [8][T] and their 8-key parts [8][8]; Qbar [D][8]. A thread stages one
 * channel of the tile's keys, 16 loads in flight (one at a time, or with
 * the 64-bit offset of every element, the staging cost more than the dots). */
__global__ void gpu_kmax_kernel(const gpu_select_args a) {
  extern __shared__ float gpu_kmax_smem[];
  const int T = a.T, D = a.D, hs = blockIdx.y, b = blockIdx.z;
  const int g = threadIdx.x / T, c = threadIdx.x % T;
  const int hk = gpu_sel_gqa(a) ? hs : hs / (a.Hq / a.Hkv);
  const int nkt = (a.Skv + T - 1) / T, ny = (nkt + GPU_KMAX_NG - 1) / GPU_KMAX_NG;
  const int qa = (int)(blockIdx.x / ny) * GPU_KMAX_QT, qb = min(qa + GPU_KMAX_QT, a.sel_tiles);
  const int jfirst = (int)(blockIdx.x % ny) * GPU_KMAX_NG;
  /* the last tile any of the block's query tiles sees in full */
  int jlast = nkt - 1;
  if (a.causal) {
    const int64_t e = (int64_t)(qb - 1) * T + a.off - (T - 1); /* first key of the last full tile */
    jlast = e < 0 ? -1 : (int)min((int64_t)nkt - 1, e / T);
  }
  if (jfirst > jlast) return; /* block-uniform, before any barrier */
  float *ks = gpu_kmax_smem + g * T * (GPU_KMAX_DC + 1);
  float *qs = gpu_kmax_smem + GPU_KMAX_NG * T * (GPU_KMAX_DC + 1);
  float *red = qs + D * GPU_KMAX_QT + g * GPU_KMAX_QT * T;
  float *red2 = qs + D * GPU_KMAX_QT + GPU_KMAX_NG * GPU_KMAX_QT * T + g * T; /* 8 parts x 8 tiles */
  const int64_t hrow = ((int64_t)b * gridDim.y + hs) * a.sel_tiles;
  for (int i = threadIdx.x; i < D * GPU_KMAX_QT; i += blockDim.x) {
    const int d = i / GPU_KMAX_QT, qi = qa + i % GPU_KMAX_QT;
    const int t = qi < qb ? gpu_sel_src(a, qi) : -1;
    qs[i] = t >= 0 ? a.qbar[(hrow + t) * D + d] : 0.0f;
  }
  { /* one round: every group meets every barrier */
    const int j0 = jfirst;
    const int j = j0 + g, nk = j <= jlast ? min(T, a.Skv - j * T) : 0;
    float acc[GPU_KMAX_QT];
#pragma unroll
    for (int u = 0; u < GPU_KMAX_QT; u++) acc[u] = 0.0f;
    for (int d0 = 0; d0 < D; d0 += GPU_KMAX_DC) {
      const int n = min(GPU_KMAX_DC, D - d0);
      __syncthreads(); /* the previous chunk (and maxima) are read */
      bool nf = false;
      if (c < n) { /* thread c stages channel d0 + c of every key: coalesced, 16 loads in flight */
        const int64_t o = lpk_off(a.sk, b, hk, (int64_t)j * T, d0 + c), ks2 = a.sk[2];
        for (int key0 = 0; key0 < T; key0 += 16) {
          float v[16];
#pragma unroll
          for (int u = 0; u < 16; u++) v[u] = key0 + u < nk ? gpu_load(a.k_in, a.kdt, o + (key0 + u) * ks2) : 0.0f;
#pragma unroll
          for (int u = 0; u < 16; u++) nf |= !isfinite(v[u]), ks[(key0 + u) * (GPU_KMAX_DC + 1) + c] = v[u];
        }
      }
      /* a non-finite element anywhere in the block: every group on the exact slow path */
      if (__syncthreads_or(nf)) gpu_kmax_chunk<true>(ks + c * (GPU_KMAX_DC + 1), qs + d0 * GPU_KMAX_QT, n, acc);
      else gpu_kmax_chunk<false>(ks + c * (GPU_KMAX_DC + 1), qs + d0 * GPU_KMAX_QT, n, acc);
    }
#pragma unroll
    for (int u = 0; u < GPU_KMAX_QT; u++) red[u * T + c] = c < nk ? acc[u] : gpu_ninf();
    __syncthreads();
    { /* thread c: the max over keys 8 p .. 8 p + 7 of query tile u (c = 8 u + p), then
       * thread u over the 8 parts; as the host's strict > from -inf: the same maximum
       * (NaN never taken; only a zero's sign can differ, which no comparison sees) */
      const int u = c / 8, p0 = c % 8 * 8;
      float m = gpu_ninf();
      for (int key = p0; key < min(p0 + 8, nk); key++) m = red[u * T + key] > m ? red[u * T + key] : m;
      red2[c] = m;
    }
    __syncthreads();
    if (nk > 0 && c < qb - qa && gpu_sel_full(a, qa + c, j)) {
      float m = gpu_ninf();
      for (int p = 0; p < 8; p++) m = red2[c * 8 + p] > m ? red2[c * 8 + p] : m;
      a.kmax[(hrow + qa + c) * a.kmax_tiles + j] = m;
    }
  }
}

/* One block per (query tile, sel head, b): importance of every full tile,
 * then the repeated strict arg-max of lp_tile_modes (ties to the lower j,
 * NaN last). Writes the ascending high list (diagonal tiles included) of
 * each q head the sel head stands for. */
__global__ void gpu_select_kernel(const gpu_select_args a) {
  extern __shared__ float gpu_sel_smem[];
  float *qbar = gpu_sel_smem, *score = qbar + a.D;
  unsigned char *mode = (unsigned char *)(score + a.nkt);
  const int qi = blockIdx.x, hs = blockIdx.y, b = blockIdx.z;
  const bool gqa = gpu_sel_gqa(a);
  const int G = a.Hq / a.Hkv, hk = gqa ? hs : hs / G;
  const int Skv = a.Skv, Sq = a.Sq, T = a.T;
  const int r0 = qi * T, r1 = min(r0 + T, Sq) - 1;
  if (r0 > r1) return;
  const int nkt = (Skv + T - 1) / T;
  int jmax; /* the last tile that is not masked */
  {
    const lp_mask m = gpu_sel_mask(a);
    int64_t j0, j1;
    lp_mask_tiles(&m, r0, r1, T, nkt, &j0, &j1);
    jmax = (int)j1 - 1;
  }
  const int qsrc = gpu_sel_src(a, qi);
  const int64_t hrow = ((int64_t)b * gridDim.y + hs) * a.sel_tiles;
  const bool scored = qsrc >= 0 && !a.leaky; /* leaky: no selection, no Qbar */
  for (int d = threadIdx.x; d < a.D; d += blockDim.x) qbar[d] = scored ? a.qbar[(hrow + qsrc) * a.D + d] : 0.0f;
  __syncthreads();
  for (int j = threadIdx.x; j <= jmax; j += blockDim.x) {
    const int kind = gpu_sel_kind(a, qi, j);
    const bool full = kind == LP_TILE_FULL;
    float s = 0.0f; /* no past query tile: all ties, the lowest j wins */
    if (full && scored && (a.rule & LPATTN_THRIFT_RULE_KMAX)) {
      s = a.kmax[(hrow + qi) * a.kmax_tiles + j];
    } else if (full && scored) {
      const float *km = a.kmean + (((int64_t)b * a.Hkv + hk) * a.kmean_tiles + j) * a.D;
      for (int d = 0; d < a.D; d++) s = __fadd_rn(s, __fmul_rn(qbar[d], km[d]));
    }
    if (full && j == 0 && (a.rule & LPATTN_THRIFT_RULE_SINK)) s = -gpu_ninf(); /* the sink ranks first */
    score[j] = s != s ? gpu_ninf() : s;
    mode[j] = kind == LP_TILE_MASKED ? 3 : full ? 0 : 2; /* 2 diagonal/edge (high), 1 picked (high), 0 low, 3 masked (a window's: never read) */
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int k = a.k;
  int ndiag = 0;
  for (int j = 0; j <= jmax; j++) ndiag += mode[j] == 2;
  for (int picked = ndiag; picked < k && !a.leaky; picked++) {
    int best = -1;
    for (int j = 0; j <= jmax; j++)
      if (mode[j] == 0 && (best < 0 || score[j] > score[best])) best = j;
    if (best < 0) break;
    mode[best] = 1;
  }
  for (int h = gqa ? hs * G : hs; h < (gqa ? hs * G + G : hs + 1); h++) {
    int *dst = a.sel + (((int64_t)b * a.Hq + h) * a.sel_tiles + qi) * a.sel_k;
    int n = 0;
    for (int j = 0; j <= jmax && n < a.sel_k; j++)
      if ((mode[j] == 1 || mode[j] == 2) && !a.leaky) dst[n++] = j;
    for (int i = n; i < a.sel_k; i++) dst[i] = -1;
    if (a.out)
      for (int i = 0; i < a.out_k; i++)
        a.out[b * a.so[0] + h * a.so[1] + qi * a.so[2] + i * a.so[3]] = i < a.sel_k ? dst[i] : -1;
  }
}

/* Shared bytes of gpu_kmax_kernel (GPU_KMAX_NG x T threads). */
static size_t gpu_kmax_smem_bytes(const gpu_select_args *a) {
  return (size_t)(GPU_KMAX_NG * a->T * (GPU_KMAX_DC + 1) + a->D * GPU_KMAX_QT + GPU_KMAX_NG * (GPU_KMAX_QT + 1) * a->T) * 4;
}

static lpattn_status gpu_smem_opt_in(const void *fn, size_t smem) {
  return smem <= 48 * 1024 || cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) ==
                                  cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

/* nqx query tiles: Qbar, KMAX's scores (rule KMAX, not leaky), selection. */
lpattn_status gpu_select(const gpu_select_args *a, int nqx, cudaStream_t st) {
  const unsigned Hs = (unsigned)gpu_sel_heads(*a), B = (unsigned)a->B;
  if (!a->leaky) {
    gpu_qbar_kernel<<<dim3((unsigned)nqx, Hs, B), 128, 0, st>>>(*a);
    if (a->rule & LPATTN_THRIFT_RULE_KMAX) {
      if (a->T != 64) return LPATTN_ERR_UNSUPPORTED; /* its reduction and staging assume T = 64 */
      const size_t km = gpu_kmax_smem_bytes(a);
      if (gpu_smem_opt_in((const void *)gpu_kmax_kernel, km) != LPATTN_OK) return LPATTN_ERR_BACKEND;
      const unsigned nx = (unsigned)((nqx + GPU_KMAX_QT - 1) / GPU_KMAX_QT);
      const unsigned ny = (unsigned)(((a->Skv + a->T - 1) / a->T + GPU_KMAX_NG - 1) / GPU_KMAX_NG);
      gpu_kmax_kernel<<<dim3(nx * ny, Hs, B), (unsigned)(GPU_KMAX_NG * a->T), km, st>>>(*a);
    }
  }
  const size_t smem = (size_t)(a->D + a->nkt) * 4 + (size_t)a->nkt + 16;
  if (gpu_smem_opt_in((const void *)gpu_select_kernel, smem) != LPATTN_OK) return LPATTN_ERR_BACKEND;
  gpu_select_kernel<<<dim3((unsigned)nqx, Hs, B), 128, smem, st>>>(*a);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

#endif
