/* The backward's three launches on one stream (SPEC 10; the kernels of
 * backends/gpu/kernels/lp_gpu_bwd.cuh, which includes this in place): the
 * shared memory check, the LOW instance of the call's format. */
#ifndef LP_GPU_BWD_LAUNCH_CUH
#define LP_GPU_BWD_LAUNCH_CUH

/* The three launches on one stream; calls with low tiles take the kernels'
 * LOW instance of their format (FMT = a->low: each format's own code, the
 * others' branches compiled out; their shared memory and registers are not
 * the HIGH ones'). */
template <typename T, int D, int FMT> static lpattn_status gpu_bwd_launch_k(const lp_gpu_bwd_args *a, cudaStream_t st) {
  constexpr bool LOW = FMT >= 0;
  const size_t smem = LOW ? gpu_bwd_smem<D>::low_bytes : gpu_bwd_smem<D>::bytes;
  int dev = 0, optin = 0; /* a device with less shared memory per block: UNSUPPORTED, not a launch failure */
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return LPATTN_ERR_BACKEND;
  if (smem > (size_t)optin) return LPATTN_ERR_UNSUPPORTED;
  gpu_nf_env();
  if (cudaFuncSetAttribute(gpu_bwd_dkdv<T, D, FMT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
          cudaSuccess ||
      cudaFuncSetAttribute(gpu_bwd_dq<T, D, FMT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
          cudaSuccess) {
    (void)cudaGetLastError(); /* clear our own error */
    return LPATTN_ERR_BACKEND;
  }
  const int64_t rows = (int64_t)a->B * a->Hq * a->Sq;
  gpu_bwd_prep<T, D><<<(unsigned)((rows + 3) / 4), 128, 0, st>>>(*a);
  const unsigned nkt = (unsigned)((a->Skv + 63) / 64), nqt = (unsigned)((a->Sq + 63) / 64);
  gpu_bwd_dkdv<T, D, FMT><<<dim3(nkt, (unsigned)a->Hkv, (unsigned)a->B), 128, smem, st>>>(*a);
  gpu_bwd_dq<T, D, FMT><<<dim3(nqt, (unsigned)a->Hq, (unsigned)a->B), 128, smem, st>>>(*a);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}
template <typename T, int D> static lpattn_status gpu_bwd_launch(const lp_gpu_bwd_args *a, cudaStream_t st) {
  switch (a->low) {
  case LPATTN_FMT_NVFP4: return gpu_bwd_launch_k<T, D, LPATTN_FMT_NVFP4>(a, st);
  case LPATTN_FMT_MXFP4: return gpu_bwd_launch_k<T, D, LPATTN_FMT_MXFP4>(a, st);
  case LPATTN_FMT_FP8: return gpu_bwd_launch_k<T, D, LPATTN_FMT_FP8>(a, st);
  default: return a->low < 0 ? gpu_bwd_launch_k<T, D, -1>(a, st) : LPATTN_ERR_UNSUPPORTED;
  }
}
#endif /* LP_GPU_BWD_LAUNCH_CUH */
