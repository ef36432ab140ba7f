/* The plain kernel headers of backends/gpu/kernels are compiled twice, by
 * nvcc for the CUDA backend and by hipcc (or nvcc through tests/hip/shim) for
 * the HIP backend, which passes -DLPATTN_HIP=1. Their code lives in
 * namespace LP_GPU_NS, so both backends can join one library; a branch that
 * only one of them takes is `#ifdef LPATTN_HIP` / `#ifndef LPATTN_HIP`. */
#ifndef LP_GPU_NS_CUH
#define LP_GPU_NS_CUH
#ifdef LPATTN_HIP
#define LP_GPU_NS lpattn_hip
#else
#define LP_GPU_NS lpattn_cuda
#endif
#endif
