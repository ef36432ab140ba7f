/* The host side of the sm_90a kernels (issue 30), forward and backward:
 * TMA maps of 16-bit tensors and of 8-bit codes (cuTensorMapEncodeTiled
 * through the runtime's driver entry point: no libcuda link), and whether
 * a kernel's image on the device is sm_90a. CUDA only. */
#ifndef LP_GPU_SM90_TMA_CUH
#define LP_GPU_SM90_TMA_CUH
#include "lp_gpu_sm90_prim.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
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
 * contiguous): boxes of w channels x rows, w = 64: 128-byte swizzle, 32:
 * 64-byte (D = 96, gpu_wg_cfg); rows past S read as zeros. */
static bool gpu_tmap(CUtensorMap *m, const void *x, const int64_t s[4], int B, int H, int S, int D, int rows,
                     int w = 64) {
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
  const cuuint32_t box[4] = {(cuuint32_t)w, (cuuint32_t)rows, 1, 1}, es[4] = {1, 1, 1, 1};
  return enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, (void *)x, dim, str, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
             w == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* TMA map of 8-bit codes: dims (inner first) and byte strides of the three
 * outer dims; boxes of box0 x box1, 128-byte swizzle; past the ends: zeros. */
static inline bool gpu_tmap8(CUtensorMap *m, const void *x, const int64_t dim[4], const int64_t str[3], int box0, int box1) {
  gpu_encode_fn enc = gpu_encoder();
  if (!enc || ((uintptr_t)x & 15)) return false;
  cuuint64_t d[4], s[3];
  for (int i = 0; i < 4; i++) d[i] = (cuuint64_t)dim[i];
  for (int i = 0; i < 3; i++) {
    if (str[i] % 16) return false;
    s[i] = (cuuint64_t)str[i];
  }
  const cuuint32_t box[4] = {(cuuint32_t)box0, (cuuint32_t)box1, 1, 1}, es[4] = {1, 1, 1, 1};
  return enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, (void *)x, d, s, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
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
} // namespace LP_GPU_NS
#endif
