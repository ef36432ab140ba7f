/* Quantize, dequantize and merge entries of the GPU backends, and the
 * workspace views of quantized tensors that prefill and decode carve. */
#include "gpu_backend.h"

namespace GPU_NS {

/* ---- quantize / dequantize ----------------------------------------------- */
static lpattn_status check_finite_dev(gpu_impl *im, const lpattn_tensor *t) {
  CK(cudaMemsetAsync(im->flag, 0, sizeof(int), im->stream));
  TRY(gpu_scan_finite(t, im->flag, im->stream));
  int h = 0;
  CK(cudaMemcpyAsync(&h, im->flag, sizeof h, cudaMemcpyDeviceToHost, im->stream));
  CK(cudaStreamSynchronize(im->stream));
  return h ? LPATTN_ERR_NONFINITE : LPATTN_OK;
}

lpattn_status gpu_quantize(lpattn_ctx *ctx, const lpattn_tensor *x, const lpattn_qtensor *q,
                           const lpattn_quant_params *p) {
  gpu_impl *im = impl_of(ctx);
  CK(cudaSetDevice(im->device));
  if (p->check_finite) TRY(check_finite_dev(im, x));
  lp_gpu_quant_args a;
  memset(&a, 0, sizeof a);
  a.x = x->data, a.dtype = x->dtype;
  strides(x, a.sx);
  a.B = (int)q->shape[0], a.H = (int)q->shape[1], a.S = (int)q->shape[2], a.D = (int)q->shape[3];
  a.format = q->format, a.axis = q->axis, a.tile = q->axis == LPATTN_AXIS_S ? q->tile : 64;
  a.stochastic = p->rounding == LPATTN_ROUND_STOCHASTIC, a.seed = p->seed;
  a.mx_round_up = p->mx_scale_round_up;
  a.codes = q->codes, a.scales = q->scales, a.outer = q->outer, a.rows = q->shape[2];
  return run_quant(&a, im->stream);
}

lpattn_status gpu_dequantize(lpattn_ctx *ctx, const lpattn_qtensor *q, const lpattn_tensor *y) {
  gpu_impl *im = impl_of(ctx);
  CK(cudaSetDevice(im->device));
  lp_gpu_dequant_args a;
  memset(&a, 0, sizeof a);
  a.codes = q->codes, a.scales = q->scales, a.outer = q->outer;
  a.format = q->format, a.axis = q->axis, a.tile = q->axis == LPATTN_AXIS_S ? q->tile : 64;
  a.B = (int)q->shape[0], a.H = (int)q->shape[1], a.S = (int)q->shape[2], a.D = (int)q->shape[3];
  a.y = y->data, a.dtype = y->dtype;
  strides(y, a.sy);
  return run_dequant(&a, im->stream);
}

/* ---- merge ------------------------------------------------------------------ */
lpattn_status gpu_merge(lpattn_ctx *ctx, const lpattn_tensor *o_a, const lpattn_tensor *lse_a,
                        const lpattn_tensor *h_a, const lpattn_tensor *o_b,
                        const lpattn_tensor *lse_b, const lpattn_tensor *h_b,
                        const lpattn_tensor *o, const lpattn_tensor *lse,
                        const lpattn_tensor *h) {
  gpu_impl *im = impl_of(ctx);
  CK(cudaSetDevice(im->device));
  lp_gpu_merge_args a;
  memset(&a, 0, sizeof a);
  a.n = 2;
  const lpattn_tensor *os[2] = {o_a, o_b}, *ls[2] = {lse_a, lse_b}, *hs[2] = {h_a, h_b};
  for (int i = 0; i < 2; i++) {
    a.o[i] = os[i]->data, a.odt[i] = os[i]->dtype;
    strides(os[i], a.so[i]);
    a.l[i] = (const float *)ls[i]->data;
    strides(ls[i], a.sl[i]);
    if (hs[i]) {
      a.hh[i] = (const float *)hs[i]->data;
      strides(hs[i], a.sh[i]);
    }
  }
  a.B = (int)o->shape[0], a.H = (int)o->shape[1], a.S = (int)o->shape[2], a.D = (int)o->shape[3];
  a.out = o->data, a.out_dtype = o->dtype;
  strides(o, a.sout);
  a.lse = (float *)lse->data;
  strides(lse, a.slse);
  if (h) {
    a.ent = (float *)h->data;
    strides(h, a.sent);
  }
  return run_merge(&a, im->stream);
}

/* ---- quantized views in the workspace ---------------------------------------- */
lpattn_status qview_alloc(gpu_carve *c, lpattn_format f, lpattn_axis ax, int tile,
                          const int64_t shape[4], size_t off[3]) {
  size_t cb, sb, oc;
  TRY(lpattn_qtensor_sizes(f, ax, tile, shape, &cb, &sb, &oc));
  off[0] = carve(c, cb), off[1] = carve(c, sb ? sb : 1), off[2] = carve(c, (oc ? oc : 1) * 4);
  return LPATTN_OK;
}

lp_gpu_qview qview_at(void *ws, const size_t off[3], int64_t rows) {
  lp_gpu_qview v;
  v.codes = (const uint8_t *)ws + off[0];
  v.scales = (const uint8_t *)ws + off[1];
  v.outer = (const float *)((const uint8_t *)ws + off[2]);
  v.rows = rows;
  return v;
}

lpattn_status quant_into(gpu_impl *im, const lpattn_tensor *x, const lp_gpu_qview *v,
                         lpattn_format f, lpattn_axis ax, int mx_up, const float *shift,
                         float beta, int shift_tiles, int sr, uint64_t seed, int sr_d) {
  lp_gpu_quant_args a;
  memset(&a, 0, sizeof a);
  a.x = x->data, a.dtype = x->dtype;
  strides(x, a.sx);
  a.B = (int)x->shape[0], a.H = (int)x->shape[1], a.S = (int)x->shape[2], a.D = (int)x->shape[3];
  a.format = f, a.axis = ax, a.tile = 64, a.mx_round_up = mx_up;
  a.codes = (uint8_t *)v->codes, a.scales = (uint8_t *)v->scales, a.outer = (float *)v->outer;
  a.rows = v->rows;
  a.shift_mean = shift, a.beta = beta, a.shift_tile = 64, a.shift_tiles = shift_tiles;
  a.stochastic = sr, a.seed = seed, a.sr_d = sr_d;
  return run_quant(&a, im->stream);
}

} // namespace GPU_NS
