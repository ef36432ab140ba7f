/* The tile scheduler of the prefill and backward kernels (issue 30), the one
 * place that says in which order CTAs take their row tiles: the mma.sync
 * kernel (lp_gpu_attn.cuh), the sm_90a ones (lp_gpu_attn_wg*.cuh) and both
 * backwards' dQ kernels (lp_gpu_bwd.cuh, lp_gpu_bwd_wg.cuh). CUDA and HIP. */
#ifndef LP_GPU_TILE_ORDER_CUH
#define LP_GPU_TILE_ORDER_CUH
#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
/* The row tile that CTA x of n takes. Causal: the long tiles first (the last
 * rows see the most keys; launched first, they do not trail the grid's end).
 * The backward's dQ kernels (lp_gpu_bwd.cuh, lp_gpu_bwd_wg.cuh) still write
 * the rule out: through this function their SASS changes (registers, spills;
 * scripts/sass_compare.py), which wants a GPU A/B first. */
__device__ __forceinline__ int gpu_tile_order(int causal, int n, int x) { return causal ? n - 1 - x : x; }
} // namespace LP_GPU_NS
#endif
