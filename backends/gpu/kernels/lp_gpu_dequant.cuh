/* lpattn_dequantize on the GPU: one thread per element, value
 * (code * group scale) * outer exactly as backends/math/lpk_formats.h's dequant. */
#ifndef LP_GPU_DEQUANT_CUH
#define LP_GPU_DEQUANT_CUH
#include "lp_gpu.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {

__device__ __forceinline__ void gpu_dequant_body(const lp_gpu_dequant_args &a, int64_t total) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t d = i % a.D, s = i / a.D % a.S, bh = i / a.D / a.S, b = bh / a.H, h = bh % a.H;
    int G = a.format == LPATTN_FMT_NVFP4 ? 16 : a.format == LPATTN_FMT_MXFP4 ? 32 : 1;
    int64_t at, oat;
    if (a.axis == LPATTN_AXIS_D) {
      at = (bh * a.S + s) * a.D + d, oat = bh * a.S + s;
    } else {
      int64_t nt = (a.S + a.tile - 1) / a.tile;
      at = (bh * a.D + d) * (nt * a.tile) + s, oat = (bh * nt + s / a.tile) * a.D + d;
    }
    uint8_t code = a.format == LPATTN_FMT_FP8 ? a.codes[at] : (uint8_t)((a.codes[at >> 1] >> ((at & 1) * 4)) & 15);
    uint8_t sc = a.format == LPATTN_FMT_FP8 ? 0 : a.scales[at / G];
    float o = a.format == LPATTN_FMT_MXFP4 ? 1.0f : a.outer[oat];
    gpu_store(a.y, a.dtype, lpk_off(a.sy, b, h, s, d), lpk_dequant(a.format, code, sc, o));
  }
}

} // namespace LP_GPU_NS
#endif
