/* The GPU quantizer of one domain (backends/math/lpk_quant.h's steps over a
 * warp): lpattn_quantize's kernel (kernel_quant.cu.j2) and the paged decode's
 * in-kernel quantization of its query rows (lp_gpu_decode.cuh) run this
 * one function, so they give the same codes bit for bit. */
#ifndef LP_GPU_QUANT_CUH
#define LP_GPU_QUANT_CUH
#include "lp_gpu.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {

__device__ __forceinline__ float gpu_warp_max(float x, int width) {
  for (int o = width / 2; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o, 32));
  return x;
}

/* One domain of n elements, element i read by load(i): its amax, outer and
 * group scales and codes, written at element ebase and outer index obase of
 * the destination (AXIS_D: a token's D values; AXIS_S: one channel of a tile). */
template <typename LOAD, typename SRI>
__device__ __forceinline__ void gpu_quant_domain(const lp_gpu_quant_args &a, int lane, int n, LOAD load,
                                                 SRI sr_index, int64_t ebase, int64_t obase) {
  float amax = 0.0f, bad = 0.0f;
  for (int i = lane; i < n; i += 32) {
    float v = load(i);
    if (!lpk_finite(v)) bad = 1.0f;
    else amax = fmaxf(amax, fabsf(v));
  }
  amax = gpu_warp_max(amax, 32);
  bad = gpu_warp_max(bad, 32);

  auto code_of = [&](bool fp8, float y, int i) -> uint8_t {
    return lpk_elem_code(fp8, y, a.stochastic, a.stochastic ? lpk_sr_uniform(a.seed, sr_index(i)) : 0.0f);
  };
  const float out = lpk_outer_scale(a.format, amax);
  if (a.format == LPATTN_FMT_FP8) {
    if (lane == 0) a.outer[obase] = bad != 0.0f ? __int_as_float(0x7fc00000) : out;
    for (int i = lane; i < n; i += 32) {
      float v = load(i);
      a.codes[ebase + i] = bad == 0.0f && out != 0.0f ? code_of(true, v / out, i) : 0;
    }
    return;
  }
  const int G = a.format == LPATTN_FMT_MXFP4 ? 32 : 16;
  if (lane == 0 && a.format == LPATTN_FMT_NVFP4) a.outer[obase] = out;
  for (int c0 = 0; c0 < n; c0 += 32) {
    const int i = c0 + lane;
    const bool act = i < n;
    float v = act ? load(i) : 0.0f;
    float ga = act && lpk_finite(v) ? fabsf(v) : 0.0f, gb = act && !lpk_finite(v) ? 1.0f : 0.0f;
    ga = gpu_warp_max(ga, G);
    gb = gpu_warp_max(gb, G);
    uint8_t sc;
    float denom;
    lpk_group_scale(a.format, ga, gb != 0.0f, out, a.mx_round_up, &sc, &denom);
    const uint8_t code = act && denom != 0.0f ? code_of(false, v / denom, i) : 0;
    uint32_t hi = __shfl_down_sync(0xffffffffu, (uint32_t)code, 1, 32);
    if (act && (i % G) == 0) a.scales[(ebase + i) / G] = sc;
    if (act && (i & 1) == 0) a.codes[(ebase + i) >> 1] = (uint8_t)((code & 15) | (hi & 15) << 4);
  }
}

} // namespace LP_GPU_NS
#endif
