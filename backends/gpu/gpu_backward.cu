/* lpattn_attention_backward on the GPU backends (SPEC 10, SEMANTICS
 * "Backward"): every tile high (precision HIGH), causal or not, GQA, the
 * head dims and 16-bit input types of the bwd variants (CUDA: D = 64, 128;
 * HIP has none yet). One call = three asynchronous launches
 * (gen/lp_gpu_bwd.cuh) after two workspace rows per query row (Delta, LSE).
 *
 * Validated on an H100 (tests/cuda/test_cuda_backward.c against the f64 ref).
 *
 * Not done yet: low tiles (precision != HIGH answers UNSUPPORTED). The plan:
 * five of the eight SR operands do not depend on the tile pair (dO_r, dO_d,
 * V_d, K_c, Q_r: their domains are a row along D or a column of one 64-row
 * tile), so they, and the forward's Q and K along D (RNE), can be quantized
 * whole into the workspace by the quantize kernel (stochastic, seed + (o + 1)
 * * 0x9E3779B97F4A7C15; its SR index is already the logical one) and expanded
 * to exact bf16 codes * group scale (as gpu_dequant_kv does), outer scales
 * kept apart; P_r and dS_r (dkdv) and dS_c (dq) are quantized in the kernel,
 * a warp per 64-value domain of its own rows through shared memory (the
 * quantize kernel's warp domain step, moved to lp_gpu.cuh, with the index
 * ((b Hq + h) Sq + r) Skv + c). The low products are then gpu_mm_scores<LO>
 * and gpu_mm_pv_low with the two outer scales applied per row and column of
 * the pair's partial product, as the forward's low tiles do. Shared memory
 * at D = 128 does not hold high and low tiles both double-buffered: low
 * steps would load in step. THRIFT also needs the forward's selection. */
#include "error.h"
#include "gpu_backend.h"

namespace GPU_NS {

lpattn_status gpu_backward(lpattn_ctx *ctx, const lpattn_bwd_problem *bp) {
  const lpattn_attn_problem *pr = &bp->f;
  gpu_impl *im = impl_of(ctx);
  if (pr->precision != LPATTN_PREC_HIGH)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "the " GPU_NAME " backward has no low tiles yet: precision HIGH only");
  if (pr->causal && (pr->off > GPU_OFF_MAX || pr->off < -GPU_OFF_MAX))
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
  a.D = (int)pr->D, a.causal = pr->causal, a.off = pr->causal ? (int)pr->off : 0, a.sm_scale = pr->sm_scale;
  a.vec16 = vec_ok(pr->q) && vec_ok(pr->k) && vec_ok(pr->v) && vec_ok(bp->dout);
  return fn(&a, im->stream);
}

} // namespace GPU_NS
