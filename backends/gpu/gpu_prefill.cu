/* lpattn_attention on the GPU backends: Q/K/V quantized into the workspace
 * (low precisions), key-tile means (THRIFT, PASA), the THRIFT selection,
 * then one launch of the attention kernel of the call's head dim and dtype. */
#include <stdlib.h>

#include "error.h"
#include "gpu_backend.h"
#include "gpu_plan.h"

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

static int attn_paths(int64_t D, int dt) { return find_attn_paths(D, (lpattn_dtype)dt); }

/* The device a call is planned for (gpu_plan.h); the sm_90a image check
 * stays with the entry (gpu_wg_ok), so the plan assumes one. */
static lp_gpu_dev dev_of(const gpu_impl *im) {
  lp_gpu_dev d;
  d.cc = im->cc, d.warp = im->warp, d.dequant_kv = GPU_DEQUANT_KV, d.no_wgmma = wgmma_off();
  d.wg_image = 1, d.paths = attn_paths;
  return d;
}

/* A descale view (f32 {1, 1, B, Hkv}) as pointer + element strides of (b, kv head). */
static const float *desc_of(const lpattn_tensor *t, int64_t sd[2]) {
  if (!t || !t->data) return sd[0] = sd[1] = 0, nullptr;
  sd[0] = t->stride[2], sd[1] = t->stride[3];
  return (const float *)t->data;
}

/* Static-scale FP8 (SPEC 11) on the sm_90a E4M3 kernel (D = 128): E4M3
 * inputs go to the kernel as they are (Q and K; V transposed into the
 * workspace), 16-bit or f32 inputs are cast by their descales first. */
static lpattn_status gpu_attention_fp8s(gpu_impl *im, const lpattn_attn_problem *pr) {
  const int B = (int)pr->B, Hq = (int)pr->Hq, Hkv = (int)pr->Hkv, Sq = (int)pr->Sq,
            Skv = (int)pr->Skv, D = (int)pr->D;
  const lp_gpu_dev dev = dev_of(im);
  lp_gpu_attn_plan p;
  if (!lp_gpu_attn_plan_make(pr, &dev, &p) && p.why == LP_PLAN_FP8S_DEV) {
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "static FP8 (precision FP8_STATIC) needs the sm_90a kernels at "
                   "D = 128 on CUDA (this call: D = %d, compute capability %d.%d)", D, im->cc / 10, im->cc % 10);
  }
  if (p.why == LP_PLAN_FP8S_BK)
    return lp_fail(LPATTN_ERR_UNSUPPORTED, "static FP8 on " GPU_NAME " takes block_k = 64 (this call: %d)", pr->Bk);
  gpu_attn_fn fn = find_attn(pr->D, p.dtype); /* the kernel reads codes: the f16 variant has it */
  /* E4M3 Q and K go to the kernel's TMA as they are when each row's codes
   * are contiguous (p.codes_in); other strides (and 16-bit inputs) through the cast */
  const bool codes_in = p.codes_in;
  const int64_t Sp = ((int64_t)Skv + 63) / 64 * 64;
  const size_t v_at = p.at[LP_WS_V8], jmin_at = p.at[LP_WS_JMIN], q_at = p.at[LP_WS_Q8], k_at = p.at[LP_WS_K8];
  TRY(ensure_ws(im, p.ws));
  char *ws = (char *)im->ws;
  lp_gpu_attn_args a;
  memset(&a, 0, sizeof a);
  a.q_desc = desc_of(pr->q_descale, a.sdesc[0]);
  a.k_desc = desc_of(pr->k_descale, a.sdesc[1]);
  a.v_desc = desc_of(pr->v_descale, a.sdesc[2]);
  /* cast (or copy, transposing V) into the kernel's layouts */
  const lpattn_tensor *src[3] = {pr->q, pr->k, pr->v};
  const float *dsc[3] = {a.q_desc, a.k_desc, a.v_desc};
  const size_t at[3] = {q_at, k_at, v_at};
  for (int i = codes_in ? 2 : 0; i < 3; i++) {
    gpu_cast8_args g;
    memset(&g, 0, sizeof g);
    g.x = src[i]->data, g.dtype = src[i]->dtype;
    strides(src[i], g.sx);
    g.B = B, g.H = i == 0 ? Hq : Hkv, g.S = i == 0 ? Sq : Skv, g.D = D, g.G = i == 0 ? Hq / Hkv : 1;
    g.desc = dsc[i], g.sd[0] = a.sdesc[i][0], g.sd[1] = a.sdesc[i][1];
    g.codes = (uint8_t *)ws + at[i], g.transpose = i == 2, g.rows = i == 2 ? Sp : g.S;
    if (i == 2) { /* V's NaN codes (SPEC 2: a NaN reaches only the rows that attend it) */
      g.jmin = (int *)(ws + jmin_at);
      CK(cudaMemsetAsync(g.jmin, 0x7f, (size_t)B * Hkv * D * 4, im->stream));
    }
    TRY(gpu_cast_e4m3(&g, im->stream));
  }
  if (codes_in) {
    a.qq.codes = (const uint8_t *)pr->q->data, a.kq.codes = (const uint8_t *)pr->k->data;
    for (int i = 0; i < 3; i++) a.q8s[i] = pr->q->stride[i], a.k8s[i] = pr->k->stride[i];
  } else {
    a.qq.codes = (const uint8_t *)ws + q_at, a.kq.codes = (const uint8_t *)ws + k_at;
    const int64_t q8s[3] = {(int64_t)Hq * Sq * D, (int64_t)Sq * D, D}, k8s[3] = {(int64_t)Hkv * Skv * D, (int64_t)Skv * D, D};
    memcpy(a.q8s, q8s, sizeof q8s), memcpy(a.k8s, k8s, sizeof k8s);
  }
  a.qq.rows = Sq, a.kq.rows = Skv;
  a.vq.codes = (const uint8_t *)ws + v_at, a.vq.rows = Skv;
  a.out = pr->out->data;
  strides(pr->out, a.so);
  a.out_dtype = pr->out->dtype;
  if (pr->lse) a.lse = (float *)pr->lse->data, strides(pr->lse, a.sl);
  if (pr->entropy) a.ent = (float *)pr->entropy->data, strides(pr->entropy, a.se);
  a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.Sq = Sq, a.Skv = Skv, a.D = D;
  a.causal = pr->causal, a.off = pr->causal ? (int)pr->off : 0, a.prec = pr->precision, a.low = LPATTN_FMT_FP8;
  a.win_left = a.win_right = -1; /* no window, no softcap (lp_window_backend refuses them here) */
  a.sm_scale = pr->sm_scale, a.nkt = (Skv + 63) / 64, a.nqx = (Sq + 63) / 64;
  a.warp = im->warp, a.cc = im->cc;
  const lpattn_status st = fn(&a, im->stream);
  if (st == LPATTN_ERR_UNSUPPORTED)
    return lp_fail(st, "static FP8 (precision FP8_STATIC): the sm_90a kernel could not take this call "
                   "(no sm_90a image of it, or E4M3 row strides that are not multiples of 16 bytes)");
  if (st != LPATTN_OK) return st;
  gpu_nan_cols_args n;
  memset(&n, 0, sizeof n);
  n.out = a.out, n.dtype = a.out_dtype, n.jmin = (const int *)(ws + jmin_at);
  memcpy(n.so, a.so, sizeof n.so);
  n.B = B, n.Hq = Hq, n.Hkv = Hkv, n.Sq = Sq, n.Skv = Skv, n.D = D, n.causal = a.causal, n.off = a.off;
  return gpu_nan_cols(&n, im->stream);
}

static lpattn_status gpu_attention_at(lpattn_ctx *ctx, const lpattn_attn_problem *pr) {
  gpu_impl *im = impl_of(ctx);
  if (pr->precision == LPATTN_PREC_FP8_STATIC) {
    CK(cudaSetDevice(im->device));
    return gpu_attention_fp8s(im, pr);
  }
  const lp_gpu_dev dev = dev_of(im);
  lp_gpu_attn_plan p; /* kernel path, grid, every workspace buffer (gpu_plan.h) */
  if (!lp_gpu_attn_plan_make(pr, &dev, &p)) {
    if (p.st != LPATTN_ERR_UNSUPPORTED) CK(cudaSetDevice(im->device)); /* as before: a sizes error after it */
    return p.st;
  }
  const lpattn_dtype dt = pr->q->dtype;
  /* non-causal calls ignore the starts, unless a window is placed by them (SEMANTICS) */
  const int win = pr->window_left >= 0 || pr->window_right >= 0;
  const int off = pr->causal || win ? (int)pr->off : 0;
  gpu_attn_fn fn = find_attn(pr->D, dt);
  CK(cudaSetDevice(im->device));
  const int B = (int)pr->B, Hq = (int)pr->Hq, Hkv = (int)pr->Hkv, Sq = (int)pr->Sq,
            Skv = (int)pr->Skv, D = (int)pr->D;
  const int nkt = (Skv + 63) / 64, nqt = (Sq + 63) / 64;
  const bool low = p.low, thrift = p.sel;
  /* workspace offsets: quantized Q/K/V, their bf16 copies, key means, selection */
  const size_t *q_low_at = &p.at[LP_WS_QLOW], *k_low_at = &p.at[LP_WS_KLOW], *v_low_at = &p.at[LP_WS_VLOW];
  const size_t q_bf16_at = p.at[LP_WS_QBF16], k_bf16_at = p.at[LP_WS_KBF16], v_bf16_at = p.at[LP_WS_VBF16];
  const size_t kmean_at = p.at[LP_WS_KMEAN], sel_at = p.at[LP_WS_SEL];
  const size_t init_o_at = p.at[LP_WS_INIT_O], init_st_at = p.at[LP_WS_INIT_ST];
  /* calls the sm_90a low kernel may take (every tile low: gpu_wg_ok) also
   * get Q's bf16 copy (not the FP8 wgmma kernel: it reads Q's codes), causal
   * ones its state for the mma.sync kernel */
  const bool qcopy = p.q_bf16, wgl_part = p.split;
  TRY(ensure_ws(im, p.ws));
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
    s.win_left = (int)pr->window_left, s.win_right = (int)pr->window_right;
    s.k = pr->thrift_k, s.sel = (int *)(ws + sel_at), s.sel_tiles = nqt, s.sel_k = pr->thrift_k;
    s.rule = pr->thrift_rule, s.qbar = (float *)(ws + p.at[LP_WS_QBAR]);
    s.k_in = pr->k->data, s.kdt = pr->k->dtype, s.kmax_tiles = nkt;
    strides(pr->k, s.sk);
    if (p.has[LP_WS_KMAX]) s.kmax = (float *)(ws + p.at[LP_WS_KMAX]);
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
  a.win_left = (int)pr->window_left, a.win_right = (int)pr->window_right, a.softcap = pr->softcap;
  a.pasa = pr->pasa, a.score_f16 = pr->score_f16, a.mx_round_up = pr->mx_round_up;
  a.sm_scale = pr->sm_scale, a.pasa_beta = pr->pasa_beta;
  a.nkt = nkt, a.nqx = (int)p.mma_grid[0], a.kmean = kmean, a.kmean_tiles = nkt; /* the mma.sync grid: the plan's */
  a.vec16 = vec_ok(pr->q) && vec_ok(pr->k) && vec_ok(pr->v);
  a.warp = im->warp;
  a.cc = im->cc;
  return fn(&a, im->stream);
}

/* A head dim without its own variant runs on the next compiled Dp with
 * zero-padded Q/K/V and output (gpu_pad.cu, SEMANTICS "Head dimensions"). */
static lpattn_status gpu_attention_padded(lpattn_ctx *ctx, const lpattn_attn_problem *pr, int64_t Dp) {
  gpu_impl *im = impl_of(ctx);
  CK(cudaSetDevice(im->device));
  const lpattn_tensor *t[4] = {pr->q, pr->k, pr->v, pr->out};
  lpattn_tensor p[4];
  size_t at[4];
  TRY(gpu_pad_begin(im, t, 4, Dp, at));
  for (int i = 0; i < 3; i++) TRY(gpu_pad_copy(im, t[i], Dp, at[i], 1, &p[i]));
  TRY(gpu_pad_copy(im, t[3], Dp, at[3], 2, &p[3])); /* the view only: every channel is written */
  lpattn_attn_problem pp = *pr;
  pp.D = Dp, pp.q = &p[0], pp.k = &p[1], pp.v = &p[2], pp.out = &p[3]; /* sm_scale: of the true D */
  TRY(gpu_attention_at(ctx, &pp));
  return gpu_pad_copy(im, pr->out, Dp, at[3], 0, NULL);
}

lpattn_status gpu_attention(lpattn_ctx *ctx, const lpattn_attn_problem *pr) {
  const lpattn_dtype dt = pr->q->dtype;
  if (pr->precision != LPATTN_PREC_FP8_STATIC && (dt == LPATTN_F16 || dt == LPATTN_BF16)) {
    /* a low-format call the sm_90a low kernels take runs on a variant that has
     * them: CUDA's D = 96 has not (issue 27), so such calls pad on to 128 */
    const lp_gpu_dev dev = dev_of(impl_of(ctx));
    const int64_t Dp = lp_gpu_plan_dim(pr, &dev);
    if (!Dp) { /* UNSUPPORTED, naming the built dims */
      int64_t none;
      return gpu_padded_dim(pr->D, dt, 0, lp_gpu_plan_wgl(pr, &dev) ? LP_PATHS_WGL : 0, &none);
    }
    if (Dp != pr->D) return gpu_attention_padded(ctx, pr, Dp);
  }
  return gpu_attention_at(ctx, pr);
}

} // namespace GPU_NS
