/* The host side of the sm_90a forward kernels (issue 30): whether a call
 * may take one (gpu_wg_ok, gpu_wg8s_ok), and each one's launch over the TMA
 * maps of its operands (lp_gpu_sm90_tma.cuh): the 16-bit kernel over the
 * call's Q, K, V (gpu_wg_launch), the low formats over their bf16 copies
 * (gpu_wgl_launch), E4M3 over the codes (gpu_wg8_launch, gpu_wg8s_launch).
 * templates/gpu/kernel_attn.cu.j2 includes it after the kernels. CUDA only. */
#ifndef LP_GPU_WG_HOST_CUH
#define LP_GPU_WG_HOST_CUH
#include "lp_gpu_attn.cuh"
#include "lp_gpu_sm90_cfg.cuh"
#include "lp_gpu_sm90_tma.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
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
  if (lp_gpu_win_any(a->causal, a->win_left, a->win_right, a->softcap)) return false; /* mma.sync's */
  if (spec == 0) return a->vec16;
  return (a->qd || lp_gpu_wg8_takes(a->low, a->D)) && a->kd && a->vd && !a->sel && (!a->causal || a->leaky || (a->init_o && a->init_st));
}
/* Whether the static-scale FP8 kernel K may take call a: a 9.0 device whose
 * image of K is sm_90a, 32-lane warps (LPATTN_NO_WGMMA=1: no). */
template <void (*K)(lp_gpu_attn_args, gpu_tmaps)>
static bool gpu_wg8s_ok(const lp_gpu_attn_args *a) {
  static int have = -1;
  if (have < 0 && a->cc == 90) have = gpu_wg_image((const void *)K, 0);
  return have > 0 && a->cc == 90 && a->warp == 32 && !lp_gpu_win_any(a->causal, a->win_left, a->win_right, a->softcap);
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
  if (!gpu_tmap(&tm.q, q, sq, a->B, a->Hq, a->Sq, D, C::BQ, C::W) ||
      !gpu_tmap(&tm.k, k, sk, a->B, a->Hkv, a->Skv, D, C::BK, C::W) ||
      !gpu_tmap(&tm.v, v, sv, a->B, a->Hkv, a->Skv, D, C::BK, C::W))
    return false;
  return gpu_wg_go<K, C>(a, tm, stream, st);
}
/* The HIGH kernel over the call's own Q, K, V. */
template <void (*K)(lp_gpu_attn_args, gpu_tmaps), int D>
static bool gpu_wg_launch(const lp_gpu_attn_args *a, cudaStream_t stream, lpattn_status *st) {
  return gpu_wg_start<K, gpu_wg_cfg<D>>(a, a->q, a->sq, a->k, a->sk, a->v, a->sv, stream, st);
}
/* Launches K (a _wgl entry) for call a over the bf16 copies a->qd, kd, vd
 * if their TMA maps can be made (else false); *st is the launch's status. */
template <void (*K)(lp_gpu_attn_args, gpu_tmaps), int D>
static bool gpu_wgl_launch(const lp_gpu_attn_args *a, cudaStream_t stream, lpattn_status *st) {
  const int64_t sq[4] = {(int64_t)a->Hq * a->Sq * D, (int64_t)a->Sq * D, D, 1};
  const int64_t sk[4] = {(int64_t)a->Hkv * a->Skv * D, (int64_t)a->Skv * D, D, 1};
  return gpu_wg_start<K, gpu_wgl_cfg<D>>(a, a->qd, sq, a->kd, sk, a->vd, sk, stream, st);
}
/* Launches K (configuration gpu_wg8_cfg<D>) for call a over its FP8 codes:
 * Q and K ([B][H][rows][D]) at byte strides sq / sk (s, h, b), V^T codes
 * in vq ([B][Hkv][D][Sp]); false where a map cannot be made (a stride that
 * is not a multiple of 16 bytes). */
template <void (*K)(lp_gpu_attn_args, gpu_tmaps), int D>
static bool gpu_wg8_go(const lp_gpu_attn_args *a, const int64_t sq[3], const int64_t sk[3], cudaStream_t stream,
                       lpattn_status *st) {
  typedef gpu_wg8_cfg<D> C;
  const int64_t sp = (a->vq.rows + 63) / 64 * 64;
  const int64_t dq[4] = {D, a->Sq, a->Hq, a->B}, dk[4] = {D, a->Skv, a->Hkv, a->B};
  const int64_t dv[4] = {sp, D, a->Hkv, a->B}, sv[3] = {sp, D * sp, a->Hkv * D * sp};
  gpu_tmaps tm;
  if (!gpu_tmap8(&tm.q, a->qq.codes, dq, sq, D, C::BQ) || !gpu_tmap8(&tm.k, a->kq.codes, dk, sk, D, C::BK) ||
      !gpu_tmap8(&tm.v, a->vq.codes, dv, sv, C::BK, D))
    return false;
  return gpu_wg_go<K, C>(a, tm, stream, st);
}
/* A D = 128 _wgl_fp8 entry over the quantize passes' contiguous codes. */
template <void (*K)(lp_gpu_attn_args, gpu_tmaps), int D>
static bool gpu_wg8_launch(const lp_gpu_attn_args *a, cudaStream_t stream, lpattn_status *st) {
  const int64_t qr = a->qq.rows, kr = a->kq.rows;
  const int64_t sq[3] = {D, qr * D, a->Hq * qr * D}, sk[3] = {D, kr * D, a->Hkv * kr * D};
  return gpu_wg8_go<K, D>(a, sq, sk, stream, st);
}
/* The D = 128 _wg8s entry (static-scale FP8): Q and K codes at byte strides
 * q8s / k8s (b, h, s: the caller's E4M3 tensors or the cast's). */
template <void (*K)(lp_gpu_attn_args, gpu_tmaps), int D>
static bool gpu_wg8s_launch(const lp_gpu_attn_args *a, cudaStream_t stream, lpattn_status *st) {
  /* an extent-1 axis's stride is never used: the contiguous one */
  auto pick = [](int64_t s, int64_t n, int64_t dense) { return n > 1 ? s : dense; };
  const int64_t sq2 = pick(a->q8s[2], a->Sq, D), sq1 = pick(a->q8s[1], a->Hq, sq2 * a->Sq);
  const int64_t sk2 = pick(a->k8s[2], a->Skv, D), sk1 = pick(a->k8s[1], a->Hkv, sk2 * a->Skv);
  const int64_t sq[3] = {sq2, sq1, pick(a->q8s[0], a->B, sq1 * a->Hq)};
  const int64_t sk[3] = {sk2, sk1, pick(a->k8s[0], a->B, sk1 * a->Hkv)};
  return gpu_wg8_go<K, D>(a, sq, sk, stream, st);
}
} // namespace LP_GPU_NS
#endif
