/* SPEC 7 merge of two partials on the GPU (lpattn_merge_states), one warp
 * per row. Lane 0 reads a row's LSE/H before any lane writes, so outputs
 * may alias inputs. (A decode's chunk partials: gpu_merge_kernel.) */
#ifndef LP_GPU_MERGE_CUH
#define LP_GPU_MERGE_CUH
#include "lp_gpu.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {

__device__ __forceinline__ void gpu_merge_body(const lp_gpu_merge_args &a) {
  const int lane = threadIdx.x & 31;
  const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if (row >= (int64_t)a.B * a.H * a.S) return;
  const int64_t s = row % a.S, h = row / a.S % a.H, b = row / a.S / a.H;
  float L = gpu_ninf(), H = 0.0f;
  float w[2] = {0.0f, 0.0f};
  float la = a.l[0][lpk_off(a.sl[0], b, h, s, 0)], lb = a.l[1][lpk_off(a.sl[1], b, h, s, 0)];
  float ha = a.hh[0] ? a.hh[0][lpk_off(a.sh[0], b, h, s, 0)] : 0.0f;
  float hb = a.hh[1] ? a.hh[1][lpk_off(a.sh[1], b, h, s, 0)] : 0.0f;
  lpk_merge(la, ha, lb, hb, &w[0], &w[1], &L, &H);
  for (int d = lane; d < a.D; d += 32) {
    float xa = gpu_load(a.o[0], a.odt[0], lpk_off(a.so[0], b, h, s, d));
    float xb = gpu_load(a.o[1], a.odt[1], lpk_off(a.so[1], b, h, s, d));
    float y = (w[0] > 0.0f ? w[0] * xa : 0.0f) + (w[1] > 0.0f ? w[1] * xb : 0.0f);
    gpu_store(a.out, a.out_dtype, lpk_off(a.sout, b, h, s, d), y);
  }
  __syncwarp();
  if (lane == 0) {
    if (a.lse) a.lse[lpk_off(a.slse, b, h, s, 0)] = L;
    if (a.ent) a.ent[lpk_off(a.sent, b, h, s, 0)] = H;
  }
}

} // namespace LP_GPU_NS
#endif
