/* Paged KV pool layout (kvpage.h). */
#include "kvpage.h"

#include "formats.h"
#include "internal.h"

static size_t up(size_t n, size_t a) { return (n + a - 1) / a * a; }

int lp_kv_store_dim(const lpattn_kv_pool_params *p) {
  const int dv = p->head_dim_v > 0 ? p->head_dim_v : p->head_dim;
  const int d = p->head_dim > dv ? p->head_dim : dv;
  const int g = p->precision != LPATTN_PREC_HIGH &&
                lp_low_format(p->precision, p->thrift_low) == LPATTN_FMT_MXFP4 ? 32 : 16;
  return d > 0 ? (d + g - 1) / g * g : 0;
}

lpattn_status lp_kv_layout_init(lp_kv_layout *L, const lpattn_kv_pool_params *p) {
  *L = (lp_kv_layout){0};
  const size_t T = (size_t)p->page_size, D = (size_t)lp_kv_store_dim(p);
  const size_t Hkv = (size_t)p->num_kv_heads, Hq = (size_t)p->num_q_heads;
  if (T == 0 || D == 0 || Hkv == 0 || Hq == 0 || T % 32 || D > LP_KV_DIM_MAX) return LPATTN_ERR_INVALID_ARGUMENT;
  L->T = p->page_size, L->D = (int)D, L->Hkv = p->num_kv_heads, L->Hq = p->num_q_heads;
  L->Dk = p->head_dim, L->Dv = p->head_dim_v > 0 ? p->head_dim_v : p->head_dim;
  L->prec = p->precision;
  L->fmt = lp_low_format(p->precision, p->thrift_low);
  L->G = lp_group_size(L->fmt);
  L->esz = p->high_dtype == LPATTN_F32 ? 4 : 2;
  L->has_low = p->precision != LPATTN_PREC_HIGH;
  L->has_high_pages = p->precision == LPATTN_PREC_HIGH || p->precision == LPATTN_PREC_THRIFT;
  L->fp8s = p->precision == LPATTN_PREC_FP8_STATIC;
  L->has_ring = L->has_low && !L->has_high_pages && !L->fp8s;
  L->has_kmean = p->pasa || p->precision == LPATTN_PREC_THRIFT;
  L->has_qmean = p->precision == LPATTN_PREC_THRIFT;
  size_t o = 0;
  if (L->has_low) {
    const int fp8 = L->fmt == LPATTN_FMT_FP8;
    const size_t codes = fp8 ? T * D : T * D / 2;
    const size_t ks = fp8 ? 0 : T * (D / (size_t)L->G), vs = fp8 ? 0 : D * (T / (size_t)L->G);
    const int outer = L->fmt != LPATTN_FMT_MXFP4 && !L->fp8s;
    L->kc = o, o = up(o + codes, 16);
    L->ks = o, o = up(o + ks, 16);
    L->ko = o, o = up(o + (outer ? T * 4 : 0), 16);
    L->vc = o, o = up(o + codes, 16);
    L->vs = o, o = up(o + vs, 16);
    L->vo = o, o = up(o + (outer ? D * 4 : 0), 16);
    L->head_bytes = o;
    o *= Hkv;
  }
  L->kmean = o, o = up(o + (L->has_kmean ? Hkv * D * 4 : 0), 16);
  L->qmean = o, o = up(o + (L->has_qmean ? Hq * D * 4 : 0), 16);
  const size_t hi = L->has_high_pages ? Hkv * T * D * (size_t)L->esz : 0;
  L->hk = o, o = up(o + hi, 16);
  L->hv = o, o = up(o + hi, 16);
  L->page_bytes = up(o, LP_KV_ALIGN);
  size_t s = 64;
  const size_t ring = L->has_ring ? 2 * Hkv * T * D * (size_t)L->esz : 0;
  L->rk = s, s = up(s + ring, 16);
  L->rv = s, s = up(s + ring, 16);
  L->qrows = s, s = up(s + (L->has_qmean ? 2 * Hq * T * D * 4 : 0), 16);
  L->ds = s, s = up(s + (L->fp8s ? 2 * Hkv * 4 : 0), 16);
  L->slot_bytes = up(s, LP_KV_ALIGN);
  return LPATTN_OK;
}

lpattn_status lp_kv_pool_bytes(const lp_kv_layout *L, int64_t num_slots, int64_t num_pages,
                               size_t *bytes) {
  if (num_slots < 0 || num_pages < 0) return LPATTN_ERR_INVALID_ARGUMENT;
  const size_t lim = (size_t)-1;
  if ((size_t)num_slots > lim / L->slot_bytes || (size_t)num_pages > lim / L->page_bytes)
    return LPATTN_ERR_SIZE_OVERFLOW;
  const size_t a = (size_t)num_slots * L->slot_bytes, b = (size_t)num_pages * L->page_bytes;
  if (a > lim - b) return LPATTN_ERR_SIZE_OVERFLOW;
  *bytes = a + b;
  return LPATTN_OK;
}
