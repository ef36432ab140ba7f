/* The current device KV cache of the GPU backends and its split-KV decode
 * (to be replaced by the paged KV pool). Moved unchanged from the former
 * backends/cuda/cuda_backend.cu. */
#include "gpu_backend.h"

namespace GPU_NS {

/* ---- device KV cache ------------------------------------------------------ */
typedef struct {
  int64_t maxt, maxtiles;
  void *khi, *vhi;
  void *blob; /* quantized K/V, key means, query ring, lengths */
  lp_gpu_qview kq, vq;
  float *kmean, *qring;
  int *lens;
  int64_t *ring_top;
} gpu_cache;

static lpattn_format cache_low(const lpattn_kv_cache_params *p) {
  return lp_low_format(p->precision, p->thrift_low);
}

void gpu_cache_free(lpattn_kv_cache *c) {
  if (!c) return;
  gpu_cache *k = (gpu_cache *)c->impl;
  if (k) {
    (void)cudaSetDevice(impl_of(c->ctx)->device);
    (void)cudaStreamSynchronize(impl_of(c->ctx)->stream);
    (void)cudaFree(k->khi), (void)cudaFree(k->vhi), (void)cudaFree(k->blob);
    free(k->ring_top);
    free(k);
  }
  free(c->lengths);
  free(c);
}

lpattn_status gpu_cache_create(lpattn_ctx *ctx, const lpattn_kv_cache_params *p,
                               lpattn_kv_cache **out) {
  gpu_impl *im = impl_of(ctx);
  if (p->tile != 64 || (p->high_dtype != LPATTN_F16 && p->high_dtype != LPATTN_BF16))
    return LPATTN_ERR_UNSUPPORTED;
  if (p->pasa && p->high_dtype != LPATTN_F16) return LPATTN_ERR_UNSUPPORTED;
  if (!find_attn(p->head_dim, p->high_dtype)) return LPATTN_ERR_UNSUPPORTED;
  if (p->max_tokens > INT32_MAX - 64) return LPATTN_ERR_SIZE_OVERFLOW;
  CK(cudaSetDevice(im->device));
  lpattn_kv_cache *c = (lpattn_kv_cache *)calloc(1, sizeof *c);
  gpu_cache *k = (gpu_cache *)calloc(1, sizeof *k);
  if (c) c->lengths = (int64_t *)calloc((size_t)p->num_seqs, sizeof(int64_t));
  if (k) k->ring_top = (int64_t *)malloc(sizeof(int64_t) * (size_t)p->num_seqs);
  if (!c || !k || !c->lengths || !k->ring_top) {
    if (c) free(c->lengths);
    if (k) free(k->ring_top);
    free(c), free(k);
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  c->ctx = ctx, c->p = *p, c->impl = k;
  for (int i = 0; i < p->num_seqs; i++) k->ring_top[i] = -1;
  const int64_t S = p->num_seqs, Hkv = p->num_kv_heads, D = p->head_dim, T = p->tile;
  k->maxt = p->max_tokens, k->maxtiles = (p->max_tokens + T - 1) / T;
  const size_t hi = (size_t)S * Hkv * k->maxt * D * 2;
  gpu_carve cv = {0};
  size_t k_low_at[3] = {0, 0, 0}, v_low_at[3] = {0, 0, 0};
  const int64_t shape[4] = {S, Hkv, k->maxt, D};
  lpattn_status st = LPATTN_OK;
  if (p->precision != LPATTN_PREC_HIGH) {
    st = qview_alloc(&cv, cache_low(p), LPATTN_AXIS_D, 64, shape, k_low_at);
    if (st == LPATTN_OK) st = qview_alloc(&cv, cache_low(p), LPATTN_AXIS_S, 64, shape, v_low_at);
  }
  size_t kmean_at = carve(&cv, (size_t)S * Hkv * k->maxtiles * D * 4);
  size_t qring_at = carve(&cv, (size_t)S * p->num_q_heads * 3 * T * D * 4);
  size_t lens_at = carve(&cv, (size_t)S * 4);
  if (st == LPATTN_OK && (cudaMalloc(&k->khi, hi) != cudaSuccess || cudaMalloc(&k->vhi, hi) != cudaSuccess ||
                          cudaMalloc(&k->blob, cv.used) != cudaSuccess)) {
    (void)cudaGetLastError();
    st = LPATTN_ERR_OUT_OF_MEMORY;
  }
  if (st == LPATTN_OK && cudaMemsetAsync(k->blob, 0, cv.used, im->stream) != cudaSuccess)
    st = LPATTN_ERR_BACKEND;
  if (st != LPATTN_OK) {
    gpu_cache_free(c);
    return st;
  }
  k->kq = qview_at(k->blob, k_low_at, k->maxt), k->vq = qview_at(k->blob, v_low_at, k->maxt);
  k->kmean = (float *)((char *)k->blob + kmean_at);
  k->qring = (float *)((char *)k->blob + qring_at);
  k->lens = (int *)((char *)k->blob + lens_at);
  *out = c;
  return LPATTN_OK;
}

/* A view of sequence `seq`'s high buffer: [1, Hkv, n, D] from position pos. */
static lpattn_tensor hi_view(const lpattn_kv_cache *c, void *buf, int seq, int64_t pos, int64_t n) {
  const gpu_cache *k = (const gpu_cache *)c->impl;
  const int64_t Hkv = c->p.num_kv_heads, D = c->p.head_dim;
  lpattn_tensor t;
  t.data = (char *)buf + (((int64_t)seq * Hkv * k->maxt + pos) * D) * 2;
  t.dtype = c->p.high_dtype;
  t.shape[0] = 1, t.shape[1] = Hkv, t.shape[2] = n, t.shape[3] = D;
  t.stride[0] = Hkv * k->maxt * D, t.stride[1] = k->maxt * D, t.stride[2] = D, t.stride[3] = 1;
  return t;
}

static void ring_advance(gpu_impl *im, lpattn_kv_cache *c, int seq, int64_t last_tile) {
  gpu_cache *k = (gpu_cache *)c->impl;
  int64_t from = k->ring_top[seq] + 1 > last_tile - 2 ? k->ring_top[seq] + 1 : last_tile - 2;
  for (int64_t t = from; t <= last_tile; t++)
    gpu_ring_zero(k->qring, seq, c->p.num_q_heads, c->p.tile, c->p.head_dim, t, im->stream);
  if (last_tile > k->ring_top[seq]) k->ring_top[seq] = last_tile;
}

lpattn_status gpu_cache_append(lpattn_ctx *ctx, lpattn_kv_cache *c, int seq,
                               const lpattn_tensor *kt, const lpattn_tensor *vt,
                               const lpattn_tensor *qt) {
  gpu_impl *im = impl_of(ctx);
  gpu_cache *k = (gpu_cache *)c->impl;
  CK(cudaSetDevice(im->device));
  const int64_t len = c->lengths[seq], n = kt->shape[2], T = c->p.tile;
  ring_advance(im, c, seq, (len + n - 1) / T);
  gpu_cache_put_args pa;
  memset(&pa, 0, sizeof pa);
  pa.k = kt->data, pa.v = vt->data, pa.q = qt ? qt->data : NULL;
  pa.kdt = kt->dtype, pa.vdt = vt->dtype, pa.qdt = qt ? qt->dtype : 0, pa.hdt = c->p.high_dtype;
  strides(kt, pa.sk), strides(vt, pa.sv);
  if (qt) strides(qt, pa.sq);
  pa.seq = seq, pa.Hkv = c->p.num_kv_heads, pa.Hq = c->p.num_q_heads, pa.D = c->p.head_dim;
  pa.T = (int)T, pa.n = (int)n, pa.pos = len, pa.max_tokens = k->maxt, pa.ring_lo = k->ring_top[seq] - 2;
  pa.khi = k->khi, pa.vhi = k->vhi, pa.qring = k->qring;
  TRY(gpu_cache_put(&pa, im->stream));
  /* tiles completed by this append: key means, then (low precisions) quantized once */
  const int64_t j0 = len / T, j1 = (len + n) / T;
  if (j1 > j0) {
    lpattn_tensor kv = hi_view(c, k->khi, seq, 0, j1 * T);
    gpu_mean_args m;
    memset(&m, 0, sizeof m);
    m.k = kv.data, m.dtype = kv.dtype;
    strides(&kv, m.sk);
    m.B = 1, m.H = c->p.num_kv_heads, m.D = c->p.head_dim, m.T = (int)T, m.Skv = (int)(j1 * T);
    m.j0 = (int)j0, m.j1 = (int)j1, m.tiles = (int)k->maxtiles, m.dst_b0 = seq, m.mean = k->kmean;
    TRY(gpu_tile_means(&m, im->stream));
    if (c->p.precision != LPATTN_PREC_HIGH) {
      const lpattn_format f = cache_low(&c->p);
      for (int which = 0; which < 2; which++) {
        lpattn_tensor x = hi_view(c, which ? k->vhi : k->khi, seq, j0 * T, (j1 - j0) * T);
        const lp_gpu_qview *v = which ? &k->vq : &k->kq;
        lp_gpu_quant_args a;
        memset(&a, 0, sizeof a);
        a.x = x.data, a.dtype = x.dtype;
        strides(&x, a.sx);
        a.B = 1, a.H = (int)x.shape[1], a.S = (int)x.shape[2], a.D = (int)x.shape[3];
        a.format = f, a.axis = which ? LPATTN_AXIS_S : LPATTN_AXIS_D, a.tile = (int)T;
        a.mx_round_up = c->p.mx_scale_round_up;
        a.codes = (uint8_t *)v->codes, a.scales = (uint8_t *)v->scales, a.outer = (float *)v->outer;
        a.rows = k->maxt, a.dst_b0 = seq, a.dst_s0 = (int)(j0 * T);
        if (!which && c->p.pasa) {
          a.shift_mean = k->kmean, a.beta = c->p.pasa_beta, a.shift_tile = (int)T;
          a.shift_tiles = (int)k->maxtiles;
        }
        TRY(run_quant(&a, im->stream));
      }
    }
  }
  TRY(gpu_set_len(k->lens, seq, (int)(len + n), im->stream));
  c->lengths[seq] = len + n;
  return LPATTN_OK;
}

lpattn_status gpu_decode(lpattn_ctx *ctx, lpattn_kv_cache *c, const lpattn_attn_problem *pr) {
  const lpattn_tensor *q = pr->q, *out = pr->out;
  gpu_impl *im = impl_of(ctx);
  gpu_cache *k = (gpu_cache *)c->impl;
  const lpattn_kv_cache_params *cp = &c->p;
  if (q->dtype != cp->high_dtype) return LPATTN_ERR_UNSUPPORTED;
  gpu_attn_fn fn = find_attn(cp->head_dim, cp->high_dtype);
  if (!fn) return LPATTN_ERR_UNSUPPORTED;
  CK(cudaSetDevice(im->device));
  const int B = cp->num_seqs, Hq = cp->num_q_heads, Hkv = cp->num_kv_heads, D = cp->head_dim;
  const int T = cp->tile, Sq = (int)q->shape[2], maxlen = (int)pr->Skv;
  /* record this call's queries (selection inputs of later rows) */
  int nqx = 1, kmax = 1;
  for (int s = 0; s < B; s++) {
    const int64_t len = c->lengths[s];
    gpu_cache_put_args pa;
    memset(&pa, 0, sizeof pa);
    pa.q = q->data, pa.qdt = q->dtype, pa.qb = s;
    strides(q, pa.sq);
    pa.seq = s, pa.Hkv = Hkv, pa.Hq = Hq, pa.D = D, pa.T = T, pa.n = Sq, pa.pos = len - Sq;
    pa.max_tokens = k->maxt, pa.ring_lo = k->ring_top[s] - 2, pa.qring = k->qring;
    TRY(gpu_cache_put(&pa, im->stream));
    int span = (int)((len - 1) / T - (len - Sq) / T + 1);
    if (span > nqx) nqx = span;
  }
  const bool thrift = cp->precision == LPATTN_PREC_THRIFT;
  /* K/V tiles shared by the q heads of a kv head; THRIFT selects per q head */
  const int pack = !thrift && Hq / Hkv <= 4 && Sq <= 16;
  const int maxtiles = (int)k->maxtiles, ntiles = (maxlen + T - 1) / T;
  int total = B * (pack ? Hkv : Hq) * nqx;
  int split = (4 * im->nsm + total - 1) / total;
  if (split > ntiles / 2) split = ntiles / 2;
  /* P of an FP8 or MXFP4 tile is quantized relative to the running max: a
   * split then needs the max of the splits before it (a max pass first);
   * under PASA the running max also moves with the frame, so no split. */
  const lpattn_format lowf = cache_low(cp);
  const int need_m = cp->precision != LPATTN_PREC_HIGH && lowf != LPATTN_FMT_NVFP4;
  if (need_m && cp->pasa) split = 1;
  if (split < 1) split = 1;
  gpu_carve cv = {0};
  size_t q_low_at[3] = {0, 0, 0};
  const int64_t qshape[4] = {B, Hq, Sq, D};
  if (cp->precision != LPATTN_PREC_HIGH)
    TRY(qview_alloc(&cv, cache_low(cp), LPATTN_AXIS_D, 64, qshape, q_low_at));
  size_t kseq_at = thrift ? carve(&cv, (size_t)B * 4) : 0;
  size_t sel_at = 0;
  int *kseq_h = NULL;
  if (thrift) {
    kseq_h = (int *)malloc(sizeof(int) * (size_t)B);
    if (!kseq_h) return LPATTN_ERR_OUT_OF_MEMORY;
    for (int s = 0; s < B; s++) {
      int n = (int)((c->lengths[s] + T - 1) / T);
      int kk = lp_thrift_k_seq(pr, n);
      kseq_h[s] = kk;
      if (kk > kmax) kmax = kk;
    }
    sel_at = carve(&cv, (size_t)B * Hq * maxtiles * kmax * 4);
  }
  size_t part_o_at = 0, part_lse_at = 0, part_ent_at = 0, part_max_at = 0;
  if (split > 1) {
    if (need_m) part_max_at = carve(&cv, (size_t)split * B * Hq * Sq * 4);
    part_o_at = carve(&cv, (size_t)split * B * Hq * Sq * D * 4);
    part_lse_at = carve(&cv, (size_t)split * B * Hq * Sq * 4);
    part_ent_at = carve(&cv, (size_t)split * B * Hq * Sq * 4);
  }
  lpattn_status st = ensure_ws(im, cv.used ? cv.used : 256);
  if (st == LPATTN_OK && thrift &&
      cudaMemcpyAsync((char *)im->ws + kseq_at, kseq_h, sizeof(int) * (size_t)B, cudaMemcpyHostToDevice,
                      im->stream) != cudaSuccess)
    st = LPATTN_ERR_BACKEND;
  if (st == LPATTN_OK && thrift && cudaStreamSynchronize(im->stream) != cudaSuccess) /* kseq_h is freed next */
    st = LPATTN_ERR_BACKEND;
  free(kseq_h);
  TRY(st);
  char *ws = (char *)im->ws;
  lp_gpu_attn_args a;
  memset(&a, 0, sizeof a);
  if (thrift) {
    gpu_select_args s;
    memset(&s, 0, sizeof s);
    s.qring = k->qring;
    s.B = B, s.Hq = Hq, s.Hkv = Hkv, s.Sq = Sq, s.Skv = maxlen, s.D = D, s.T = T;
    s.lens = k->lens, s.abs_tiles = 1, s.causal = 1;
    s.sel_causal = pr->selection_mode == LPATTN_SELECT_CAUSAL, s.nkt = maxtiles;
    s.kmean = k->kmean, s.kmean_tiles = maxtiles, s.kseq = (const int *)(ws + kseq_at);
    s.sel = (int *)(ws + sel_at), s.sel_tiles = maxtiles, s.sel_k = kmax;
    TRY(gpu_select(&s, nqx, im->stream));
    a.sel = s.sel, a.sel_tiles = maxtiles, a.sel_k = kmax;
  }
  if (cp->precision != LPATTN_PREC_HIGH) {
    a.qq = qview_at(ws, q_low_at, Sq);
    TRY(quant_into(im, q, &a.qq, cache_low(cp), LPATTN_AXIS_D, cp->mx_scale_round_up, NULL, 0, 0));
  }
  lpattn_tensor kv = hi_view(c, k->khi, 0, 0, k->maxt), vv = hi_view(c, k->vhi, 0, 0, k->maxt);
  a.q = q->data, a.k = kv.data, a.v = vv.data, a.out = out->data;
  strides(q, a.sq), strides(&kv, a.sk), strides(&vv, a.sv), strides(out, a.so);
  a.out_dtype = out->dtype;
  if (pr->lse) a.lse = (float *)pr->lse->data, strides(pr->lse, a.sl);
  if (pr->entropy) a.ent = (float *)pr->entropy->data, strides(pr->entropy, a.se);
  a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.Sq = Sq, a.Skv = maxlen, a.D = D;
  a.lens = k->lens, a.abs_tiles = 1;
  a.causal = 1, a.prec = cp->precision, a.low = cache_low(cp), a.pasa = cp->pasa;
  a.mx_round_up = cp->mx_scale_round_up, a.sm_scale = pr->sm_scale, a.pasa_beta = cp->pasa_beta;
  a.nkt = maxtiles, a.nqx = nqx, a.kq = k->kq, a.vq = k->vq;
  a.kmean = k->kmean, a.kmean_tiles = maxtiles, a.split = split, a.gqa_pack = pack;
  a.vec16 = vec_ok(q);
  a.warp = im->warp;
  if (split > 1) {
    a.part_o = (float *)(ws + part_o_at), a.part_l = (float *)(ws + part_lse_at);
    a.part_h = (float *)(ws + part_ent_at);
  }
  if (split > 1 && need_m) {
    a.part_m = (float *)(ws + part_max_at);
    a.maxpass = 1;
    TRY(fn(&a, im->stream));
    a.maxpass = 0;
  }
  TRY(fn(&a, im->stream));
  if (split == 1) return LPATTN_OK;
  lp_gpu_merge_args m;
  memset(&m, 0, sizeof m);
  m.n = split, m.part_o = a.part_o, m.part_l = a.part_l, m.part_h = a.part_h;
  m.B = B, m.H = Hq, m.S = Sq, m.D = D;
  m.out = out->data, m.out_dtype = out->dtype;
  strides(out, m.sout);
  if (pr->lse) m.lse = a.lse, strides(pr->lse, m.slse);
  if (pr->entropy) m.ent = a.ent, strides(pr->entropy, m.sent);
  return run_merge(&m, im->stream);
}

} // namespace GPU_NS
