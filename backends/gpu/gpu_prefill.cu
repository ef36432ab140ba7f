/* lpattn_attention on the GPU backends: Q/K/V quantized into the workspace
 * (low precisions), key-tile means (THRIFT, PASA), the THRIFT selection,
 * then one launch of the attention kernel of the call's head dim and dtype. */
#include <stdlib.h>

#include "gpu_backend.h"

namespace GPU_NS {

/* LPATTN_NO_WGMMA=1: the sm_90a kernels are off (gpu_wg_ok), so no bf16 Q copy either */
static bool wgmma_off() {
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("LPATTN_NO_WGMMA");
    v = e && e[0] == '1';
  }
  return v == 1;
}

lpattn_status gpu_attention(lpattn_ctx *ctx, const lpattn_attn_problem *pr) {
  gpu_impl *im = impl_of(ctx);
  const lpattn_dtype dt = pr->q->dtype;
  if (pr->k->dtype != dt || (dt != LPATTN_F16 && dt != LPATTN_BF16)) return LPATTN_ERR_UNSUPPORTED;
  if (pr->Bq != 64 || pr->Bk != 64) return LPATTN_ERR_UNSUPPORTED;
  /* causal offsets (lpattn.h "Absolute positions") in the kernels' int range */
  if (pr->causal && (pr->off > GPU_OFF_MAX || pr->off < -GPU_OFF_MAX)) return LPATTN_ERR_UNSUPPORTED;
  const int off = pr->causal ? (int)pr->off : 0; /* non-causal calls ignore the starts */
  if (pr->pasa && dt != LPATTN_F16) return LPATTN_ERR_UNSUPPORTED; /* f16 scores need f16 Q */
  gpu_attn_fn fn = find_attn(pr->D, dt);
  if (!fn) return LPATTN_ERR_UNSUPPORTED;
  CK(cudaSetDevice(im->device));
  const int B = (int)pr->B, Hq = (int)pr->Hq, Hkv = (int)pr->Hkv, Sq = (int)pr->Sq,
            Skv = (int)pr->Skv, D = (int)pr->D;
  const int nkt = (Skv + 63) / 64, nqt = (Sq + 63) / 64;
  const bool low = pr->precision != LPATTN_PREC_HIGH, thrift = pr->precision == LPATTN_PREC_THRIFT;
  gpu_carve c = {0};
  /* workspace offsets: quantized Q/K/V, their bf16 copies, key means, selection */
  size_t q_low_at[3] = {0, 0, 0}, k_low_at[3] = {0, 0, 0}, v_low_at[3] = {0, 0, 0};
  size_t q_bf16_at = 0, k_bf16_at = 0, v_bf16_at = 0, kmean_at = 0, sel_at = 0;
  /* calls the sm_90a low kernel may take (every tile low: gpu_wg_ok) also
   * get Q's bf16 copy */
  const bool wgl = GPU_DEQUANT_KV && low && !thrift && !pr->pasa && !pr->score_f16 && im->cc == 90 && !wgmma_off();
  const bool wgl_part = wgl && pr->causal && !pr->leaky; /* + its state for the mma.sync kernel */
  const bool qcopy = wgl && !lp_gpu_wg8_takes(pr->low, (int)pr->D); /* the FP8 wgmma kernel reads Q's codes */
  size_t init_o_at = 0, init_st_at = 0;
  const int64_t qs[4] = {B, Hq, Sq, D}, ks[4] = {B, Hkv, Skv, D};
  if (low) {
    TRY(qview_alloc(&c, pr->low, LPATTN_AXIS_D, 64, qs, q_low_at));
    TRY(qview_alloc(&c, pr->low, LPATTN_AXIS_D, 64, ks, k_low_at));
    TRY(qview_alloc(&c, pr->low, LPATTN_AXIS_S, 64, ks, v_low_at));
    if (GPU_DEQUANT_KV) { /* exact bf16 copies that cp.async streams in */
      k_bf16_at = carve(&c, (size_t)B * Hkv * Skv * D * 2);
      v_bf16_at = carve(&c, (size_t)B * Hkv * Skv * D * 2);
      if (qcopy) q_bf16_at = carve(&c, (size_t)B * Hq * Sq * D * 2);
      if (wgl_part) {
        init_o_at = carve(&c, (size_t)B * Hq * Sq * D * 4);
        init_st_at = carve(&c, (size_t)B * Hq * Sq * 16);
      }
    }
  }
  if (thrift || pr->pasa) kmean_at = carve(&c, (size_t)B * Hkv * nkt * D * 4);
  if (thrift) sel_at = carve(&c, (size_t)B * Hq * nqt * pr->thrift_k * 4);
  TRY(ensure_ws(im, c.used));
  char *ws = (char *)im->ws;
  float *kmean = (thrift || pr->pasa) ? (float *)(ws + kmean_at) : NULL;

  if (kmean) {
    gpu_mean_args m;
    memset(&m, 0, sizeof m);
    m.k = pr->k->data, m.dtype = dt;
    strides(pr->k, m.sk);
    m.B = B, m.H = Hkv, m.D = D, m.T = 64, m.Skv = Skv, m.j0 = 0, m.j1 = nkt, m.tiles = nkt;
    m.mean = kmean;
    TRY(gpu_tile_means(&m, im->stream));
  }
  lp_gpu_attn_args a;
  memset(&a, 0, sizeof a);
  if (low) {
    a.qq = qview_at(ws, q_low_at, Sq), a.kq = qview_at(ws, k_low_at, Skv), a.vq = qview_at(ws, v_low_at, Skv);
    TRY(quant_into(im, pr->q, &a.qq, pr->low, LPATTN_AXIS_D, pr->mx_round_up, NULL, 0, 0));
    TRY(quant_into(im, pr->k, &a.kq, pr->low, LPATTN_AXIS_D, pr->mx_round_up,
                   pr->pasa ? kmean : NULL, pr->pasa_beta, nkt));
    TRY(quant_into(im, pr->v, &a.vq, pr->low, LPATTN_AXIS_S, pr->mx_round_up, NULL, 0, 0));
    if (GPU_DEQUANT_KV) {
      a.kd = ws + k_bf16_at, a.vd = ws + v_bf16_at;
      TRY(gpu_dequant_kv(&a.kq, &a.vq, pr->low, (int64_t)B * Hkv, Skv, D, ws + k_bf16_at, ws + v_bf16_at,
                         im->stream));
      if (qcopy) {
        a.qd = ws + q_bf16_at;
        TRY(gpu_dequant_rows(&a.qq, pr->low, (int64_t)B * Hq, Sq, D, ws + q_bf16_at, im->stream));
      }
      if (wgl_part) a.init_o = (float *)(ws + init_o_at), a.init_st = (float *)(ws + init_st_at);
    }
  }
  if (thrift) {
    gpu_select_args s;
    memset(&s, 0, sizeof s);
    s.q = pr->q->data, s.qdt = dt;
    strides(pr->q, s.sq);
    s.B = B, s.Hq = Hq, s.Hkv = Hkv, s.Sq = Sq, s.Skv = Skv, s.D = D, s.T = 64;
    s.off = off, s.causal = pr->causal, s.sel_causal = pr->selection_mode == LPATTN_SELECT_CAUSAL;
    s.leaky = pr->leaky, s.nkt = nkt, s.kmean = kmean, s.kmean_tiles = nkt;
    s.k = pr->thrift_k, s.sel = (int *)(ws + sel_at), s.sel_tiles = nqt, s.sel_k = pr->thrift_k;
    if (pr->selection) {
      s.out = (int *)pr->selection->data;
      strides(pr->selection, s.so);
      s.out_k = (int)pr->selection->shape[3];
    }
    TRY(gpu_select(&s, nqt, im->stream));
    a.sel = s.sel, a.sel_tiles = nqt, a.sel_k = pr->thrift_k;
  }
  a.q = pr->q->data, a.k = pr->k->data, a.v = pr->v->data, a.out = pr->out->data;
  strides(pr->q, a.sq), strides(pr->k, a.sk), strides(pr->v, a.sv), strides(pr->out, a.so);
  a.out_dtype = pr->out->dtype;
  if (pr->lse) a.lse = (float *)pr->lse->data, strides(pr->lse, a.sl);
  if (pr->entropy) a.ent = (float *)pr->entropy->data, strides(pr->entropy, a.se);
  a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.Sq = Sq, a.Skv = Skv, a.D = D;
  a.causal = pr->causal, a.off = off, a.leaky = pr->leaky, a.prec = pr->precision, a.low = pr->low;
  a.pasa = pr->pasa, a.score_f16 = pr->score_f16, a.mx_round_up = pr->mx_round_up;
  a.sm_scale = pr->sm_scale, a.pasa_beta = pr->pasa_beta;
  a.nkt = nkt, a.nqx = nqt, a.kmean = kmean, a.kmean_tiles = nkt, a.split = 1;
  a.vec16 = vec_ok(pr->q) && vec_ok(pr->k) && vec_ok(pr->v);
  a.warp = im->warp;
  a.cc = im->cc;
  return fn(&a, im->stream);
}

} // namespace GPU_NS
