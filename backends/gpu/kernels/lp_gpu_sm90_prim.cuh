/* The sm_90a primitives (issue 30) that the forward kernels
 * (lp_gpu_attn_wg.cuh, lp_gpu_attn_wgl.cuh, lp_gpu_attn_wg8.cuh) and the
 * backward (lp_gpu_bwd_wg.cuh) share: the arch switch, warpgroup MMAs
 * (lp_gpu_wgmma.cuh, included in place) and their fences, shared-memory
 * descriptors, mbarriers, TMA copies, named barriers. CUDA only. */
#ifndef LP_GPU_SM90_PRIM_CUH
#define LP_GPU_SM90_PRIM_CUH
#include <cuda.h> /* CUtensorMap (the encoder is reached through the runtime: no libcuda link) */
#include "lp_gpu.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GPU_WG_ARCH 1
#else
#define GPU_WG_ARCH 0
#endif
/* 1 in an sm_90a image (where the kernel has a body), 0 in any other (plain
 * sm_90 too, whose binaryVersion is also 90): gpu_wg_ok reads it. */
static __device__ int gpu_wg_built = GPU_WG_ARCH;
template <typename T> __device__ __forceinline__ constexpr bool gpu_is_f16() { return false; }
template <> __device__ __forceinline__ constexpr bool gpu_is_f16<gpu_f16>() { return true; }

#include "lp_gpu_wgmma.cuh"

template <typename T, int N, int TB> struct gpu_wg;
template <typename T, int TB> struct gpu_wg<T, 64, TB> : gpu_wg64<T, TB> {};
template <typename T, int TB> struct gpu_wg<T, 96, TB> : gpu_wg96<T, TB> {};
template <typename T, int TB> struct gpu_wg<T, 128, TB> : gpu_wg128<T, TB> {};
template <typename T, int TB> struct gpu_wg<T, 256, TB> : gpu_wg256<T, TB> {};

__device__ __forceinline__ void gpu_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void gpu_wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void gpu_wg_fence() {
#if GPU_WG_ARCH
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
/* The compiler sees an accumulator written when the wgmma is issued, not
 * when the wait retires it: this ties every register to the wait. */
template <int N> __device__ __forceinline__ void gpu_wg_hold(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* Shared-memory matrix descriptor: start address, leading and stride byte
 * offsets (PTX ISA, "Matrix Descriptor Format"), swizzle sw: 1 = 128-byte
 * (rows of 128 bytes, atoms of 8 rows), 2 = 64-byte (rows of 64 bytes: the
 * 32-channel boxes of D = 96, gpu_wg_cfg). */
__device__ __forceinline__ uint64_t gpu_wg_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo, int sw = 1) {
  return (uint64_t)((saddr & 0x3ffffu) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 |
         (uint64_t)sw << 62;
}

/* mbarriers (shared::cta): init, arrive, arrive with the bytes a TMA copy
 * will complete (expect), and the wait for the phase of a parity. */
__device__ __forceinline__ void gpu_mb_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void gpu_mb_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
/* TMA descriptors of Q, K and V (kernel parameter, __grid_constant__) */
struct gpu_tmaps { /* CUtensorMap carries its 128-byte alignment */
  CUtensorMap q, k, v;
};
__device__ __forceinline__ void gpu_mb_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
/* box (c0 = channel, c1 = row, head, batch) of map m into dst; completes on bar */
__device__ __forceinline__ void gpu_tma4(uint32_t dst, const CUtensorMap *m, int c0, int c1, int c2, int c3,
                                         uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
               ::"r"(dst), "l"((uint64_t)m), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar) : "memory");
}
/* named barriers of n threads (bar.sync waits, bar.arrive does not) */
__device__ __forceinline__ void gpu_nb_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void gpu_nb_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void gpu_mb_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
/* The copier's wait for an empty stage: try_wait with a suspend-time hint
 * (1 ms), so that the waiting thread sleeps until the phase completes
 * instead of spinning on the issue slots of the scheduler it shares with
 * computing warps (ncu, the static FP8 kernel at 16k: the copier's spin
 * was 9% of all issued instructions). */
__device__ __forceinline__ void gpu_mb_wait_idle(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity), "r"(1000000u) : "memory");
  } while (!done);
}

/* The mbarriers of a CTA of ST stages, 8 bytes each from bq: Q; then K
 * full, K empty, V full, V empty of each stage. */
template <int ST> struct gpu_wg_bars {
  uint32_t bq;
  __device__ __forceinline__ uint32_t q() const { return bq; }
  __device__ __forceinline__ uint32_t kfull(int s) const { return bq + 8 * (1 + s); }
  __device__ __forceinline__ uint32_t kempty(int s) const { return bq + 8 * (1 + ST + s); }
  __device__ __forceinline__ uint32_t vfull(int s) const { return bq + 8 * (1 + 2 * ST + s); }
  __device__ __forceinline__ uint32_t vempty(int s) const { return bq + 8 * (1 + 3 * ST + s); }
  /* full barriers count nf arrivals (the copier's, and the scalar loader's
   * lanes where a kernel has one), empty ones the ne computing threads */
  __device__ __forceinline__ void init(int nf, int ne = 256) const {
    gpu_mb_init(q(), 1);
    for (int s = 0; s < ST; s++) {
      gpu_mb_init(kfull(s), nf), gpu_mb_init(vfull(s), nf);
      gpu_mb_init(kempty(s), ne), gpu_mb_init(vempty(s), ne);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); /* visible to the TMA unit */
  }
};
/* Issues S = Q K^T of computing warpgroup cw's 64 rows (Q at sq, BQ rows;
 * K at ks0, BK rows; K-major operands, 16 elements = 32 bytes along a row,
 * in boxes of RB-byte rows: 128, 128-byte swizzle; 64, 64-byte) and commits
 * the group. */
template <typename T, int D, int BQ, int BK, int RB = 128>
__device__ __forceinline__ void gpu_wg_qk(float (&sacc)[BK / 2], uint32_t sq, uint32_t ks0, int cw) {
  constexpr int KB = RB / 32, SW = RB == 128 ? 1 : 2; /* k-steps a box row; descriptor swizzle */
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    const uint32_t ko = (uint32_t)((kk % KB) * 32);
    const uint64_t dq = gpu_wg_desc(sq + (kk / KB) * BQ * RB + cw * 64 * RB + ko, 16, 8 * RB, SW);
    const uint64_t dk = gpu_wg_desc(ks0 + (kk / KB) * BK * RB + ko, 16, 8 * RB, SW);
    gpu_wg<T, BK, 0>::ss(sacc, dq, dk, kk > 0);
  }
  gpu_wg_commit();
}
} // namespace LP_GPU_NS
#endif
