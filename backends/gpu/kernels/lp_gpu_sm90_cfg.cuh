/* The tile shapes of the sm_90a forward kernels (issue 30; as
 * FlashAttention-3's tile_size.h): rows BQ a CTA, keys BK a stage, ST
 * stages, NT threads, shared memory, and how the copier
 * (lp_gpu_sm90_cta.cuh, gpu_sm90_copy) brings a tile: CH TMA boxes of 64
 * channels (16-bit) or one of 128 codes (E4M3) a row, V as rows or as V^T
 * (VT), and whether it sleeps (IDLE) or spins on an empty stage. The host
 * (lp_gpu_wg_host.cuh, backends/gpu/gpu_plan.h) sizes the launch from them. */
#ifndef LP_GPU_SM90_CFG_CUH
#define LP_GPU_SM90_CFG_CUH
#include <stddef.h>

#include "lp_gpu_args.h" /* LP_WG_NW */
#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
/* The CTA: warpgroup 0 copies (one thread issues TMA copies, each tile
 * announced on an mbarrier when it has landed), warpgroups 1 .. NW compute
 * 64 query rows each (NW = LP_WG_NW(D): 2; D = 64: 3, whose registers allow
 * it and whose tiles are short on work per barrier); the copier gives its registers to
 * them (setmaxnreg: 24 for the copier, REGS for the others).
 * Tiles of R rows x D 16-bit elements in shared memory: [D/64][R][64], each
 * 128-byte row's 16-byte chunks permuted by chunk ^ (row % 8): the TMA
 * boxes of 64 channels x R rows with the 128-byte swizzle (a tile starts
 * 1024-aligned), the layout wgmma's descriptors read. D = 96 (192-byte
 * rows, no whole 64-channel boxes): [3][R][32], boxes of 32 channels with
 * the 64-byte swizzle (chunk ^ ((row / 2) % 4)), as FlashAttention-3's
 * smem selector picks for hdim 96; P V is one wgmma of N = 96. */
template <int D_> struct gpu_wg_cfg {
  static constexpr int D = D_;
  static constexpr int NW = LP_WG_NW(D), REGS = NW == 3 ? 160 : 240; /* 24 x 128 + REGS x 128 NW <= 64K */
  static constexpr int BQ = 64 * NW, BK = D <= 128 ? 128 : 64, ST = D == 64 ? 4 : D == 96 ? LP_WG_ST96 : D <= 128 ? 3 : 2;
  static constexpr int NT = 128 * (NW + 1);
  static constexpr int QB = BQ * D * 2, KB = BK * D * 2; /* bytes of the Q tile, of one K or V tile */
  static constexpr int NBAR = 1 + 4 * ST; /* Q; K full, K empty, V full, V empty per stage */
  static constexpr size_t NF = (size_t)D * 2; /* after the mbarriers: V's marks of gpu_nf_wg_tile */
  static constexpr int W = D % 64 ? 32 : 64, RB = 2 * W; /* channels, bytes of a box row */
  static constexpr int SCF = 0, CH = D / W; /* no scalars a stage; TMA boxes of W channels a row */
  static constexpr bool VT = false, IDLE = true;
  static constexpr size_t bytes = (size_t)QB + 2 * ST * KB + 8 * NBAR + NF + 1024; /* + alignment */
};

/* The low formats over their bf16 copies (lp_gpu_attn_wgl.cuh) */
template <int D_> struct gpu_wgl_cfg {
  static constexpr int D = D_;
  static constexpr int BQ = 128, BK = D <= 128 ? 128 : 64, ST = 2, NT = 384;
  static constexpr int HALVES = BK / 64;         /* SPEC tiles of 64 keys in a stage */
  static constexpr int N = 64;                   /* channels of one P V product */
  static constexpr int QB = BQ * D * 2, KB = BK * D * 2;
  static constexpr int SCF = BK + HALVES * D;    /* a stage's scalars: kout[BK], vout[HALVES][D] */
  static constexpr int NBAR = 1 + 4 * ST;
  static_assert(D % 64 == 0, "the low-format kernel's P V products are of 64 channels");
  static constexpr int W = 64, RB = 128, CH = D / 64;
  static constexpr bool VT = false, IDLE = true;
  static constexpr size_t bytes = (size_t)QB + 2 * ST * KB + (size_t)ST * SCF * 4 + 8 * NBAR + 1024;
};

/* FP8 on E4M3 wgmma (lp_gpu_attn_wg8.cuh) */
template <int D_> struct gpu_wg8_cfg {
  static constexpr int D = D_;
  static_assert(D == 128, "the FP8 wgmma kernel has rows of 128 codes");
  static constexpr int BQ = 128, BK = 128, ST = 3, NT = 384;
  static constexpr int QB = BQ * D, KB = BK * D; /* bytes: Q tile; one K (or V^T) stage */
  static constexpr int SCF = BK + 2 * D;         /* a stage's scalars: kout[BK], vout[2][D] / 448 */
  static constexpr int NBAR = 1 + 4 * ST;
  static constexpr int W = 128, RB = 128, CH = 1; /* one TMA box a row of 128 codes */
  static constexpr bool VT = true, IDLE = false; /* V^T boxes; the copier spins on empty stages */
  static constexpr size_t bytes = (size_t)QB + 2 * ST * KB + (size_t)ST * SCF * 4 + 8 * NBAR + 1024;
};

} // namespace LP_GPU_NS
#endif
