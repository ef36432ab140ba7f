/* The host side of the sm_90a prefill kernels (included in place by
 * backends/gpu/kernels/lp_gpu_attn_wg.cuh): TMA maps, the image check, the launch. */

/* cuTensorMapEncodeTiled through the runtime's driver entry point (no
 * libcuda link), or NULL. */
typedef CUresult (*gpu_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                  const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static gpu_encode_fn gpu_encoder() {
  static gpu_encode_fn fn = nullptr;
  static bool tried = false;
  if (!tried) {
    tried = true;
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
#else
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q);
#endif
    if (e == cudaSuccess && q == cudaDriverEntryPointSuccess) fn = (gpu_encode_fn)p;
    else if (e != cudaSuccess) (void)cudaGetLastError(); /* clear only our own error */
  }
  return fn;
}
/* TMA map of a [B][H][S][D] 16-bit tensor (element strides s, channels
 * contiguous): boxes of 64 channels x rows, 128-byte swizzle; rows past S
 * read as zeros. */
static bool gpu_tmap(CUtensorMap *m, const void *x, const int64_t s[4], int B, int H, int S, int D, int rows) {
  gpu_encode_fn enc = gpu_encoder();
  const int n[3] = {S, H, B};
  cuuint64_t str[3];
  for (int i = 0; i < 3; i++) { /* a stride of an extent-1 axis is never used: any multiple of 16 bytes */
    const int64_t e = s[2 - i];
    if (e <= 0 && n[i] > 1) return false; /* broadcast or negative strides: the mma.sync kernel */
    str[i] = (cuuint64_t)(e > 0 ? e : 8) * 2;
  }
  if (!enc) return false;
  const cuuint64_t dim[4] = {(cuuint64_t)D, (cuuint64_t)S, (cuuint64_t)H, (cuuint64_t)B};
  const cuuint32_t box[4] = {64, (cuuint32_t)rows, 1, 1}, es[4] = {1, 1, 1, 1};
  return enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, (void *)x, dim, str, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* 1 where kernel k's image on the current device is sm_90a (the wgmma
 * bodies are there) and it was given at least min_regs registers (a kernel
 * that moves registers by setmaxnreg needs its launch allocation); 0 where
 * not, or where LPATTN_NO_WGMMA=1 turns the wgmma paths off (same-run
 * comparisons with the mma.sync kernels). Errors of its own queries are cleared. */
static int gpu_wg_image(const void *k, int min_regs) {
  cudaFuncAttributes fa;
  int built = 0;
  const char *e = getenv("LPATTN_NO_WGMMA");
  if (e && e[0] == '1') return 0;
  if (cudaFuncGetAttributes(&fa, k) != cudaSuccess ||
      cudaMemcpyFromSymbol(&built, gpu_wg_built, sizeof built) != cudaSuccess) {
    (void)cudaGetLastError(); /* clear only our own error */
    return 0;
  }
  return fa.binaryVersion == 90 && built == 1 && fa.numRegs >= min_regs;
}
/* Whether kernel K (a _wg or _wgl entry) may take call a, whose
 * gpu_attn_spec is spec: a 9.0 device whose image of K is sm_90a, 32-lane
 * warps; spec 0 (HIGH without PASA) with 16-byte rows; a low format's spec
 * (lp_gpu_attn_wgl.cuh) with the bf16 copies (FP8 at D = 128: of K and V
 * only, lp_gpu_attn_wg8.cuh) and every tile low (no THRIFT
 * selection; causal when leaky, or with init_o: the first part of the rows'
 * tiles, the mma.sync kernel doing the rest). LPATTN_NO_WGMMA=1 turns these paths
 * off (for same-run comparisons with the mma.sync kernel). */
template <void (*K)(lp_gpu_attn_args, gpu_tmaps)>
static bool gpu_wg_ok(const lp_gpu_attn_args *a, int spec) {
  static int have = -1; /* per kernel (the first 9.0 device asked): its image is sm_90a */
  if (have < 0 && a->cc == 90) have = gpu_wg_image((const void *)K, 0);
  if (have <= 0 || a->cc != 90 || a->warp != 32 || gpu_attn_spec(*a) != spec) return false;
  if (spec == 0) return a->vec16;
  return (a->qd || lp_gpu_wg8_takes(a->low, a->D)) && a->kd && a->vd && !a->sel && (!a->causal || a->leaky || (a->init_o && a->init_st));
}
/* Whether the static-scale FP8 kernel K may take call a: a 9.0 device whose
 * image of K is sm_90a, 32-lane warps (LPATTN_NO_WGMMA=1: no). */
template <void (*K)(lp_gpu_attn_args, gpu_tmaps)>
static bool gpu_wg8s_ok(const lp_gpu_attn_args *a) {
  static int have = -1;
  if (have < 0 && a->cc == 90) have = gpu_wg_image((const void *)K, 0);
  return have > 0 && a->cc == 90 && a->warp == 32;
}
/* Launches K (configuration C: BQ rows a CTA, NT threads, bytes of shared
 * memory) for call a with the TMA maps tm (false: too little shared memory). */
template <void (*K)(lp_gpu_attn_args, gpu_tmaps), typename C>
static bool gpu_wg_go(const lp_gpu_attn_args *a, const gpu_tmaps &tm, cudaStream_t stream, lpattn_status *st) {
  gpu_nf_env();
  if (cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::bytes) != cudaSuccess) {
    (void)cudaGetLastError(); /* too little shared memory: the mma.sync kernel */
    return false;
  }
  dim3 grid((unsigned)((a->Sq + C::BQ - 1) / C::BQ), (unsigned)a->Hq, (unsigned)a->B);
  lp_gpu_attn_args b = *a;
  b.nqx = (int)grid.x;
  K<<<grid, C::NT, C::bytes, stream>>>(b, tm);
  *st = cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
  return true;
}
/* Launches K (configuration C) for call a over the 16-bit [B][H][S][D]
 * tensors q, k, v (element strides sq, sk, sv) if their TMA maps can be made
 * (else false: the caller takes the mma.sync kernel); *st is the launch's
 * status. */
template <void (*K)(lp_gpu_attn_args, gpu_tmaps), typename C>
static bool gpu_wg_start(const lp_gpu_attn_args *a, const void *q, const int64_t sq[4], const void *k,
                         const int64_t sk[4], const void *v, const int64_t sv[4], cudaStream_t stream,
                         lpattn_status *st) {
  constexpr int D = C::D;
  gpu_tmaps tm;
  if (!gpu_tmap(&tm.q, q, sq, a->B, a->Hq, a->Sq, D, C::BQ) || !gpu_tmap(&tm.k, k, sk, a->B, a->Hkv, a->Skv, D, C::BK) ||
      !gpu_tmap(&tm.v, v, sv, a->B, a->Hkv, a->Skv, D, C::BK))
    return false;
  return gpu_wg_go<K, C>(a, tm, stream, st);
}
/* The HIGH kernel over the call's own Q, K, V. */
template <void (*K)(lp_gpu_attn_args, gpu_tmaps), int D>
static bool gpu_wg_launch(const lp_gpu_attn_args *a, cudaStream_t stream, lpattn_status *st) {
  return gpu_wg_start<K, gpu_wg_cfg<D>>(a, a->q, a->sq, a->k, a->sk, a->v, a->sv, stream, st);
}
