/* lpattn_attention_backward on the GPU backends (SPEC 10, SEMANTICS
 * "Backward"): precision HIGH and the low formats, causal or not, GQA, the
 * head dims and 16-bit input types of the bwd variants (CUDA: D = 64, 128, 256;
 * HIP has none yet). One call = three asynchronous launches
 * (kernels/lp_gpu_bwd.cuh) after two workspace rows per query row (Delta, LSE).
 *
 * Validated on an H100 (tests/cuda/test_cuda_backward.c against the f64 ref).
 *
 * Low tiles (FP8/NVFP4/MXFP4, block_q = block_k = 64; THRIFT: UNSUPPORTED):
 * five of the eight SR operands do not depend on the tile pair (dO_r, dO_d,
 * V_d, K_c, Q_r: their domains are a row along D or a column of one 64-row
 * tile), so they, and the forward's Q and K along D (RNE), are quantized
 * whole into the workspace by the quantize kernel (stochastic, seed + (o + 1)
 * * 0x9E3779B97F4A7C15; its SR index is already the logical one) and expanded
 * to exact bf16 codes * group scale (as gpu_dequant_kv does), outer scales
 * kept apart; P_r and dS_r (dkdv) and dS_c (dq) are quantized in the kernel,
 * in registers (lp_gpu_bwd_sr.cuh: a row's 4 lanes per 64-value domain, each
 * Philox block, 16 elements' random bytes, computed once and its bytes
 * shuffled to the lanes that need them, index ((b Hq + h) Sq + r) Skv + c).
 * The low products are then gpu_mm_scores<LO> and gpu_mm_pv_low with the
 * two outer scales applied per row and column of the pair's partial
 * product, as the forward's low tiles do. The LOW kernels keep six tiles
 * in shared memory (two resident low tiles, four step tiles that a
 * diagonal step fills with its high tiles), so two CTAs share an SM.
 *
 * A head dim without a bwd variant runs on the next larger one (gpu_pad.cu):
 * q, k, v, out, dout zero-padded, dq, dk, dv written padded and copied back;
 * the SR operands keep the indices of the true D (quant_into's sr_d). */
#include "error.h"
#include "gpu_backend.h"

namespace GPU_NS {

/* Dt: the call's head dim (pr->D, or less when bp is a zero-padded copy) */
static lpattn_status gpu_backward_at(lpattn_ctx *ctx, const lpattn_bwd_problem *bp, int64_t Dt) {
  const lpattn_attn_problem *pr = &bp->f;
  gpu_impl *im = impl_of(ctx);
  const bool low = pr->precision != LPATTN_PREC_HIGH;
  if (pr->precision == LPATTN_PREC_THRIFT)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the " GPU_NAME " backward has no THRIFT tiles yet (the forward's selection)");
  if (low && (pr->Bq != 64 || pr->Bk != 64))
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the " GPU_NAME " backward's low tiles are 64 x 64 (block_q = block_k = 64)");
  /* a sliding window's bounds (win: lp_gpu_win_any without the softcap) */
  const int win = lp_gpu_win_any(pr->causal, (int)pr->window_left, (int)pr->window_right, 0.0f);
  if ((pr->causal || win) && (pr->off > GPU_OFF_MAX || pr->off < -GPU_OFF_MAX))
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the " GPU_NAME " backward takes q_start - kv_start within +-2^30");
  const lpattn_dtype dt = pr->q->dtype;
  if (pr->k->dtype != dt || pr->v->dtype != dt || bp->dout->dtype != dt)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the " GPU_NAME " backward needs q, k, v and dout of one dtype");
  gpu_bwd_fn fn = find_bwd(pr->D, dt);
  if (!fn)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the " GPU_NAME " backward has no kernel for D = %lld, %s",
                   (long long)pr->D, lp_dtype_name(dt));
  CK(cudaSetDevice(im->device));
  const int64_t rows = pr->B * pr->Hq * pr->Sq;
  gpu_carve c = {0};
  const size_t lse_at = carve(&c, (size_t)rows * 4), delta_at = carve(&c, (size_t)rows * 4);
  /* low tiles: seven quantized operands (lq, lk, dod, vd, dor, qr, kc) and their bf16 copies */
  const int64_t qs[4] = {pr->B, pr->Hq, pr->Sq, pr->D}, ks[4] = {pr->B, pr->Hkv, pr->Skv, pr->D};
  const lpattn_tensor *src[7] = {pr->q, pr->k, bp->dout, pr->v, bp->dout, pr->q, pr->k};
  const bool isq[7] = {true, false, true, false, true, true, false}; /* [B, Hq, Sq, D] (else K's shape) */
  const lpattn_axis ax[7] = {LPATTN_AXIS_D, LPATTN_AXIS_D, LPATTN_AXIS_D, LPATTN_AXIS_D,
                             LPATTN_AXIS_S, LPATTN_AXIS_S, LPATTN_AXIS_S};
  const int op[7] = {-1, -1, 2, 3, 1, 7, 5}; /* SR stream (SEMANTICS "Backward"); -1: the forward's RNE */
  size_t q_at[7][3], d_at[7];
  if (low)
    for (int i = 0; i < 7; i++) {
      TRY(qview_alloc(&c, pr->low, ax[i], 64, isq[i] ? qs : ks, q_at[i]));
      d_at[i] = carve(&c, (size_t)(isq[i] ? rows : pr->B * pr->Hkv * pr->Skv) * (size_t)pr->D * 2);
    }
  TRY(ensure_ws(im, c.used));
  lp_gpu_bwd_args a;
  memset(&a, 0, sizeof a);
  a.q = pr->q->data, a.k = pr->k->data, a.v = pr->v->data, a.out = pr->out->data, a.dout = bp->dout->data;
  strides(pr->q, a.sq), strides(pr->k, a.sk), strides(pr->v, a.sv), strides(pr->out, a.so);
  strides(bp->dout, a.sdo);
  a.out_dtype = pr->out->dtype;
  a.lse = (const float *)pr->lse->data, strides(pr->lse, a.sl);
  a.dq = bp->dq->data, a.dk = bp->dk->data, a.dv = bp->dv->data;
  strides(bp->dq, a.sdq), strides(bp->dk, a.sdk), strides(bp->dv, a.sdv);
  a.dq_dtype = bp->dq->dtype, a.dk_dtype = bp->dk->dtype, a.dv_dtype = bp->dv->dtype;
  a.rowlse = (float *)((char *)im->ws + lse_at), a.delta = (float *)((char *)im->ws + delta_at);
  a.B = (int)pr->B, a.Hq = (int)pr->Hq, a.Hkv = (int)pr->Hkv, a.Sq = (int)pr->Sq, a.Skv = (int)pr->Skv;
  a.D = (int)pr->D, a.causal = pr->causal, a.off = pr->causal || win ? (int)pr->off : 0, a.sm_scale = pr->sm_scale;
  a.win_left = (int)pr->window_left, a.win_right = pr->causal ? -1 : (int)pr->window_right, a.softcap = pr->softcap;
  a.vec16 = vec_ok(pr->q) && vec_ok(pr->k) && vec_ok(pr->v) && vec_ok(bp->dout);
  a.low = low ? (int)pr->low : -1, a.leaky = pr->leaky, a.mx_round_up = pr->mx_round_up, a.seed = bp->seed;
  if (low) {
    char *ws = (char *)im->ws;
    const void **dst[7] = {&a.lq, &a.lk, &a.dod, &a.vd, &a.dor, &a.qr, &a.kc};
    const float **out[7] = {&a.lq_out, &a.lk_out, &a.dod_out, &a.vd_out, &a.dor_out, &a.qr_out, &a.kc_out};
    for (int i = 0; i < 7; i++) {
      const int S = (int)(isq[i] ? pr->Sq : pr->Skv);
      const int64_t BH = pr->B * (isq[i] ? pr->Hq : pr->Hkv);
      const lp_gpu_qview v = qview_at(ws, q_at[i], S);
      /* SR key of operand o: seed + (o + 1) * 0x9E3779B97F4A7C15 (mod 2^64) */
      const uint64_t key = bp->seed + (uint64_t)(op[i] + 1) * 0x9E3779B97F4A7C15ull;
      TRY(quant_into(im, src[i], &v, pr->low, ax[i], pr->mx_round_up, NULL, 0, 0, op[i] >= 0, key, (int)Dt));
      if (ax[i] == LPATTN_AXIS_D) TRY(gpu_dequant_rows(&v, pr->low, BH, S, (int)pr->D, ws + d_at[i], im->stream));
      else TRY(gpu_dequant_cols(&v, pr->low, BH, S, (int)pr->D, ws + d_at[i], im->stream));
      *dst[i] = ws + d_at[i], *out[i] = v.outer;
    }
  }
  return fn(&a, im->stream);
}

lpattn_status gpu_backward(lpattn_ctx *ctx, const lpattn_bwd_problem *bp) {
  const lpattn_attn_problem *pr = &bp->f;
  const lpattn_dtype dt = pr->q->dtype;
  if (pr->precision == LPATTN_PREC_THRIFT || (dt != LPATTN_F16 && dt != LPATTN_BF16) || find_bwd(pr->D, dt))
    return gpu_backward_at(ctx, bp, pr->D);
  int64_t Dp;
  TRY(gpu_padded_dim(pr->D, dt, 1, 0, &Dp));
  gpu_impl *im = impl_of(ctx);
  CK(cudaSetDevice(im->device));
  const lpattn_tensor *t[8] = {pr->q, pr->k, pr->v, pr->out, bp->dout, bp->dq, bp->dk, bp->dv};
  lpattn_tensor p[8];
  size_t at[8];
  TRY(gpu_pad_begin(im, t, 8, Dp, at));
  for (int i = 0; i < 8; i++) TRY(gpu_pad_copy(im, t[i], Dp, at[i], i < 5 ? 1 : 2, &p[i]));
  lpattn_bwd_problem b = *bp;
  b.f.D = Dp, b.f.q = &p[0], b.f.k = &p[1], b.f.v = &p[2], b.f.out = &p[3];
  b.dout = &p[4], b.dq = &p[5], b.dk = &p[6], b.dv = &p[7];
  TRY(gpu_backward_at(ctx, &b, pr->D));
  for (int i = 5; i < 8; i++) TRY(gpu_pad_copy(im, t[i], Dp, at[i], 0, NULL));
  return LPATTN_OK;
}

} // namespace GPU_NS
