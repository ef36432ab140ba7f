/* THRIFT's tile selection of a prefill (SPEC 5, SEMANTICS "THRIFT" and
 * "THRIFT selection rules"), bit for bit the host's (core/thrift.c
 * lp_thrift_scores + lp_tile_modes): the same f32 sums in the same order,
 * __f*_rn so that nothing contracts into an FMA. Three launches:
 *   gpu_qbar_kernel  Qbar of every query tile: f32 sum of its Sq-clipped
 *                    rows (GQA rule: every q head of the KV group, heads
 *                    outer, rows inner), one division;
 *   gpu_kmax_kernel  KMAX rule: max over each full tile's keys of Qbar . k
 *                    (d ascending), one block per key tile, staged once,
 *                    looping over the query tiles that read its score;
 *   gpu_select_kernel the importance of every full tile (Qbar . Kbar, or
 *                    KMAX's, SINK's +inf on tile 0), then the repeated
 *                    strict arg-max (ties to the lower j, NaN last) over
 *                    one warp's lanes.
 * A sliding window (core/mask.h): masked tiles are never picked, edge tiles
 * are high and count among the k, as diagonal ones (SEMANTICS "Sliding
 * window and softcap"). "Sel heads" Hs: the KV heads under the GQA rule (one selection per KV head,
 * written to each q head of its group), else the q heads. Included once, by
 * lp_gpu_ops.cu, inside LP_GPU_NS. */
#ifndef LP_GPU_SELECT_CUH
#define LP_GPU_SELECT_CUH

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
      for (int r0 = q0; r0 < q1; r0 += 8) { /* 8 loads in flight, summed in row order */
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = r0 + u < q1 ? gpu_load(a.q, a.qdt, lpk_off(a.sq, b, h, r0 + u, d)) : 0.0f;
#pragma unroll
        for (int u = 0; u < 8; u++)
          if (r0 + u < q1) s = __fadd_rn(s, gpu_mean_term(v[u]));
      }
    dst[d] = s / (float)((q1 - q0) * G);
  }
}

/* KMAX (SEMANTICS "THRIFT selection rules"): one block per (key tile j, sel
 * head, b), so K is read once; GPU_KMAX_W 32-lane groups (warps) share the
 * tile's keys, staged once as f32 in shared ([key][ldk], ldk = D rounded up to
 * 8, + 4: the float4 rows of 8 lanes fall in distinct banks), and each group
 * takes GPU_KMAX_R query tiles at a time of those that read the tile's score
 * (full, with a Qbar) till none is left: lane l owns keys l and l + 32 (C = 2)
 * for all R, acc[R][C] in registers, so a float4 of Qbar (shared, broadcast)
 * feeds 2 keys x 4 channels and a float4 of K feeds R query tiles: 8 R C
 * unfused f32 mul/add per R + C 16-byte shared loads. The group stages its
 * Qbar GPU_KMAX_DC channels at a time, the next chunk's loads in flight
 * during the dots; the max over the tile's keys is a 32-lane fmaxf butterfly
 * (as the host's strict > from -inf: NaN never taken, only a zero's sign can
 * differ, which no comparison sees). A non-finite key element anywhere in the
 * tile puts the block on the exact slow path (the element adds +0, as
 * core/thrift.c's dot_finite). Where 64 keys do not fit in shared (HIP's 64 KB
 * at D 256), C = 1: two passes of 32 keys, the second taking the max with the
 * first's. (Before, one block per 8 query tiles x 4 key tiles took 1.3-1.8 ms
 * at 8k, causal, 32 heads on the H200: 3 barriers and a K staging per 1k
 * multiply-adds a thread, half the blocks empty.) */
#define GPU_KMAX_W 8   /* 32-lane groups per block */
#define GPU_KMAX_R 8   /* query tiles a group takes at a time */
#define GPU_KMAX_DC 32 /* Qbar channels a group stages at a time */
#ifdef LPATTN_HIP
#define GPU_KMAX_LDS 65536 /* shared bytes a block may take */
#else
#define GPU_KMAX_LDS (227 * 1024)
#endif

__host__ __device__ __forceinline__ int gpu_kmax_ldk(int D) { return (D + 7) / 8 * 8 + 4; }

/* A dot's term: q * k, or with NF (non-finite keys in the tile) 0 for a non-finite k. */
template <bool NF> __device__ __forceinline__ float gpu_kmax_term(float q, float k) {
  return NF && !isfinite(k) ? 0.0f : __fmul_rn(q, k);
}

/* acc[u][c] += qs[u][d] * k_c[d] for d in [d, d + 4), ascending. */
template <bool NF, int C>
__device__ __forceinline__ void gpu_kmax_step4(const float *kr, int ldk, const float *qs, int d,
                                               float (&acc)[GPU_KMAX_R][C]) {
  float4 k4[C];
#pragma unroll
  for (int c = 0; c < C; c++) k4[c] = *(const float4 *)(kr + c * 32 * ldk + d);
#pragma unroll
  for (int u = 0; u < GPU_KMAX_R; u++) {
    const float4 q = *(const float4 *)(qs + u * GPU_KMAX_DC + d);
#pragma unroll
    for (int c = 0; c < C; c++) {
      float s = __fadd_rn(acc[u][c], gpu_kmax_term<NF>(q.x, k4[c].x));
      s = __fadd_rn(s, gpu_kmax_term<NF>(q.y, k4[c].y));
      s = __fadd_rn(s, gpu_kmax_term<NF>(q.z, k4[c].z));
      acc[u][c] = __fadd_rn(s, gpu_kmax_term<NF>(q.w, k4[c].w));
    }
  }
}

/* acc[u][c] += sum over the chunk's n channels (d ascending) of qs[u][d] * k_c[d]. */
template <bool NF, int C>
__device__ __forceinline__ void gpu_kmax_dots(const float *kr, int ldk, const float *qs, int n,
                                              float (&acc)[GPU_KMAX_R][C]) {
  if (n == GPU_KMAX_DC) {
#pragma unroll
    for (int d = 0; d < GPU_KMAX_DC; d += 4) gpu_kmax_step4<NF, C>(kr, ldk, qs, d, acc);
    return;
  }
  int d = 0;
  for (; d + 4 <= n; d += 4) gpu_kmax_step4<NF, C>(kr, ldk, qs, d, acc);
  for (; d < n; d++)
#pragma unroll
    for (int u = 0; u < GPU_KMAX_R; u++)
#pragma unroll
      for (int c = 0; c < C; c++)
        acc[u][c] = __fadd_rn(acc[u][c], gpu_kmax_term<NF>(qs[u * GPU_KMAX_DC + d], kr[c * 32 * ldk + d]));
}

/* kmax[(b * Hs + hs) * sel_tiles + qi][j] for every qi whose score of tile j
 * is read (full, Qbar source >= 0); grid (nkt, Hs, B), GPU_KMAX_W x 32
 * threads, shared gpu_kmax_smem_bytes. */
template <int C>
__global__ void __launch_bounds__(GPU_KMAX_W * 32) gpu_kmax_kernel(const gpu_select_args a) {
  extern __shared__ __attribute__((aligned(16))) float gpu_kmax_smem[]; /* float4 reads */
  __shared__ int qrange[2];
  float *ks = gpu_kmax_smem;
  const int T = a.T, D = a.D, j = blockIdx.x, hs = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, ldk = gpu_kmax_ldk(D), KP = 32 * C;
  const int hk = gpu_sel_gqa(a) ? hs : hs / (a.Hq / a.Hkv);
  float *qs = ks + KP * ldk + w * (GPU_KMAX_R * GPU_KMAX_DC);
  const int64_t hrow = ((int64_t)b * gridDim.y + hs) * a.sel_tiles;
  { /* [qlo, qhi]: the query tiles that read tile j's score */
    int lo = 0x7fffffff, hi = -1;
    for (int qi = threadIdx.x; qi < a.sel_tiles; qi += blockDim.x)
      if (gpu_sel_src(a, qi) >= 0 && gpu_sel_full(a, qi, j)) lo = min(lo, qi), hi = max(hi, qi);
#pragma unroll
    for (int o = 16; o; o >>= 1)
      lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o, 32)), hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o, 32));
    if (threadIdx.x == 0) qrange[0] = 0x7fffffff, qrange[1] = -1;
    __syncthreads();
    if (lane == 0) atomicMin(&qrange[0], lo), atomicMax(&qrange[1], hi);
    __syncthreads();
  }
  const int qlo = qrange[0], qhi = qrange[1];
  if (qlo > qhi) return; /* block-uniform, before any other barrier */
  const int nk = min(T, a.Skv - j * T);
  for (int k0 = 0; k0 < T; k0 += KP) { /* C = 2: one pass */
    if (k0) __syncthreads(); /* the previous pass's keys are read */
    bool nf = false;
    for (int r = w; r < KP; r += GPU_KMAX_W) { /* a group stages key k0 + r, lane l channels l + 32 t */
      const bool ok = k0 + r < nk;
      const int64_t o = lpk_off(a.sk, b, hk, (int64_t)j * T + k0 + r, 0);
      float v[8]; /* D <= 256 */
#pragma unroll
      for (int t = 0; t < 8; t++) {
        const int d = lane + 32 * t;
        v[t] = ok && d < D ? gpu_load(a.k_in, a.kdt, o + d * a.sk[3]) : 0.0f;
      }
#pragma unroll
      for (int t = 0; t < 8; t++)
        if (lane + 32 * t < D) nf |= !isfinite(v[t]), ks[r * ldk + lane + 32 * t] = v[t];
    }
    const bool NF = __syncthreads_or(nf);
    for (int q0 = qlo + w * GPU_KMAX_R; q0 <= qhi; q0 += GPU_KMAX_W * GPU_KMAX_R) { /* group-uniform */
      float acc[GPU_KMAX_R][C], v[GPU_KMAX_R];
#pragma unroll
      for (int u = 0; u < GPU_KMAX_R; u++) {
#pragma unroll
        for (int c = 0; c < C; c++) acc[u][c] = 0.0f;
        const int qi = q0 + u;
        v[u] = qi <= qhi && lane < D ? a.qbar[(hrow + gpu_sel_src(a, qi)) * D + lane] : 0.0f;
      }
      for (int d0 = 0; d0 < D; d0 += GPU_KMAX_DC) {
        __syncwarp(); /* the previous chunk is read */
#pragma unroll
        for (int u = 0; u < GPU_KMAX_R; u++) qs[u * GPU_KMAX_DC + lane] = v[u];
        __syncwarp();
        const int n = min(GPU_KMAX_DC, D - d0), dn = d0 + GPU_KMAX_DC + lane;
#pragma unroll
        for (int u = 0; u < GPU_KMAX_R; u++) { /* the next chunk, in flight during the dots */
          const int qi = q0 + u;
          if (qi <= qhi && dn < D) v[u] = a.qbar[(hrow + gpu_sel_src(a, qi)) * D + dn];
        }
        if (NF) gpu_kmax_dots<true, C>(ks + lane * ldk + d0, ldk, qs, n, acc);
        else gpu_kmax_dots<false, C>(ks + lane * ldk + d0, ldk, qs, n, acc);
      }
      float mine = 0.0f; /* lane u: the max of query tile q0 + u */
#pragma unroll
      for (int u = 0; u < GPU_KMAX_R; u++) {
        float m = gpu_ninf();
#pragma unroll
        for (int c = 0; c < C; c++) m = k0 + lane + 32 * c < nk ? fmaxf(m, acc[u][c]) : m;
#pragma unroll
        for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o, 32));
        mine = lane == u ? m : mine;
      }
      const int qi = q0 + lane;
      if (lane < GPU_KMAX_R && qi <= qhi && gpu_sel_full(a, qi, j)) {
        float *dst = a.kmax + (hrow + qi) * a.kmax_tiles + j; /* pass 2 (C = 1): this lane wrote pass 1's */
        *dst = k0 ? fmaxf(*dst, mine) : mine;
      }
    }
  }
}

/* One block per (query tile, sel head, b): importance of every full tile,
 * then the repeated strict arg-max of lp_tile_modes on warp 0 (ties to the lower j,
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
  if (threadIdx.x >= 32) return;
  const int k = a.k, lane = threadIdx.x;
  int ndiag = 0;
  for (int j = lane; j <= jmax; j += 32) ndiag += mode[j] == 2;
#pragma unroll
  for (int o = 16; o; o >>= 1) ndiag += __shfl_xor_sync(0xffffffffu, ndiag, o, 32);
  /* the repeated arg-max over 32 lanes: each lane's best of its j (ascending,
   * strict >), then the larger score or, equal, the lower j: the serial
   * scan's lowest j of the maximum (scores are never NaN here) */
  for (int picked = ndiag; picked < k && !a.leaky; picked++) {
    int best = -1;
    float bs = 0.0f;
    for (int j = lane; j <= jmax; j += 32)
      if (mode[j] == 0 && (best < 0 || score[j] > bs)) best = j, bs = score[j];
#pragma unroll
    for (int o = 16; o; o >>= 1) {
      const int ob = __shfl_xor_sync(0xffffffffu, best, o, 32);
      const float os = __shfl_xor_sync(0xffffffffu, bs, o, 32);
      if (ob >= 0 && (best < 0 || os > bs || (!(os < bs) && ob < best))) best = ob, bs = os;
    }
    if (best < 0) break; /* warp-uniform */
    if (lane == 0) mode[best] = 1;
    __syncwarp();
  }
  if (lane != 0) return;
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

/* Shared bytes of gpu_kmax_kernel<C>: 32 C keys of K, each group's Qbar chunk. */
static size_t gpu_kmax_smem_bytes(const gpu_select_args *a, int C) {
  return (size_t)(32 * C * gpu_kmax_ldk(a->D) + GPU_KMAX_W * GPU_KMAX_R * GPU_KMAX_DC) * 4;
}

static lpattn_status gpu_smem_opt_in(const void *fn, size_t smem) {
  return smem <= 48 * 1024 || cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) ==
                                  cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

/* nqx query tiles: Qbar, KMAX's scores (rule KMAX, not leaky), selection. */
lpattn_status gpu_select(const gpu_select_args *a, int nqx, cudaStream_t st) {
  const unsigned Hs = (unsigned)gpu_sel_heads(*a), B = (unsigned)a->B;
  const bool kmax = !a->leaky && (a->rule & LPATTN_THRIFT_RULE_KMAX);
  if (kmax && a->T != 64) return LPATTN_ERR_UNSUPPORTED; /* its reduction and staging assume T = 64 */
  if (!a->leaky) {
    gpu_qbar_kernel<<<dim3((unsigned)nqx, Hs, B), 128, 0, st>>>(*a);
    if (kmax) {
      const int C = gpu_kmax_smem_bytes(a, 2) <= GPU_KMAX_LDS ? 2 : 1;
      const void *fn = C == 2 ? (const void *)gpu_kmax_kernel<2> : (const void *)gpu_kmax_kernel<1>;
      const size_t km = gpu_kmax_smem_bytes(a, C);
      if (gpu_smem_opt_in(fn, km) != LPATTN_OK) return LPATTN_ERR_BACKEND;
      const dim3 grid((unsigned)((a->Skv + a->T - 1) / a->T), Hs, B);
      if (C == 2) gpu_kmax_kernel<2><<<grid, GPU_KMAX_W * 32, km, st>>>(*a);
      else gpu_kmax_kernel<1><<<grid, GPU_KMAX_W * 32, km, st>>>(*a);
    }
  }
  const size_t smem = (size_t)(a->D + a->nkt) * 4 + (size_t)a->nkt + 16;
  if (gpu_smem_opt_in((const void *)gpu_select_kernel, smem) != LPATTN_OK) return LPATTN_ERR_BACKEND;
  gpu_select_kernel<<<dim3((unsigned)nqx, Hs, B), 128, smem, st>>>(*a);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}

#endif
