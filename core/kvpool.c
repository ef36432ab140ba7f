/* Host paged KV pool (kvpool.h): storage, append and the decode readers. */
#define _DEFAULT_SOURCE /* madvise */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "error.h"
#include "formats.h"
#include "fp8s.h"
#include "kvpool.h"
#include "tiles.h"

static size_t code_bytes(lpattn_format f, int64_t n) {
  return f == LPATTN_FMT_FP8 ? (size_t)n : (size_t)(n / 2);
}

/* E2M1 codes travel unpacked (one per byte) between the helpers; storage
 * packs them two a byte, element 2k in the low nibble (as lpattn.h). */
static void store_codes(lpattn_format f, const uint8_t *c, int64_t n, uint8_t *dst) {
  if (f == LPATTN_FMT_FP8) {
    memcpy(dst, c, (size_t)n);
    return;
  }
  for (int64_t i = 0; i < n; i += 2) dst[i / 2] = (uint8_t)((c[i] & 0xF) | (c[i + 1] << 4));
}

static void load_codes(lpattn_format f, const uint8_t *src, int64_t n, uint8_t *c) {
  if (f == LPATTN_FMT_FP8) {
    memcpy(c, src, (size_t)n);
    return;
  }
  for (int64_t i = 0; i < n; i += 2) c[i] = src[i / 2] & 0xF, c[i + 1] = src[i / 2] >> 4;
}

static int32_t id_at(const lpattn_tensor *t, int64_t i) {
  return ((const int32_t *)t->data)[i * t->stride[3]];
}

void lp_kv_seq_of(const lpattn_kv_pool *pool, const lpattn_kv_batch *b, int64_t i, lp_kv_seq *s) {
  lp_kv_layout_init(&s->L, &pool->p);
  s->pool = pool;
  s->slot = pool->mem + lp_kv_slot_off(&s->L, id_at(&b->slots, i));
  s->pages = (const int32_t *)b->page_table.data + i * b->page_table.stride[2];
  s->page_stride = b->page_table.stride[3];
  s->len = id_at(&b->lengths, i);
  s->tile0 = 0, s->qpos = -1;
  if (b->kv_start.data && b->q_start.data) {
    const int32_t kv = id_at(&b->kv_start, i);
    s->tile0 = kv / s->L.T, s->qpos = (int64_t)id_at(&b->q_start, i) - kv;
  }
}

/* ---- readers ------------------------------------------------------------- */

const uint8_t *lp_kv_high_ptr(const lp_kv_seq *s, int v, int h, int64_t j, int64_t *n) {
  const lp_kv_layout *L = &s->L;
  const int64_t T = L->T, cur = (s->len - 1) / T, td = T * L->D * L->esz;
  if (j < 0 || j > cur) return NULL;
  *n = s->len - j * T < T ? s->len - j * T : T;
  if (L->has_high_pages) return lp_kv_page_ptr(s, j) + (v ? L->hv : L->hk) + (size_t)(h * td);
  if (!L->has_ring || j < cur - 1) return NULL; /* the ring holds the two newest tiles */
  return s->slot + (v ? L->rv : L->rk) + (size_t)(((j % 2) * L->Hkv + h) * td);
}

int64_t lp_kv_seq_read_high(const lp_kv_seq *s, int h, int64_t j, float *k, float *v) {
  int64_t n = 0;
  const uint8_t *pk = lp_kv_high_ptr(s, 0, h, j, &n), *pv = lp_kv_high_ptr(s, 1, h, j, &n);
  if (!pk) return -1;
  const lpattn_dtype dt = s->pool->p.high_dtype;
  for (int64_t i = 0; i < n * s->L.D; i++) k[i] = lp_load_f32(pk, dt, i), v[i] = lp_load_f32(pv, dt, i);
  return n;
}

int lp_kv_seq_read_low(const lp_kv_seq *s, int h, int64_t j, float *k, float *v) {
  const lp_kv_layout *L = &s->L;
  const int64_t T = L->T, D = L->D, G = L->G;
  /* FP8_STATIC pages hold the codes of every token appended so far */
  if (!L->has_low || j < 0 || (L->fp8s ? j * T >= s->len : (j + 1) * T > s->len)) return 0;
  const int64_t n = s->len - j * T < T ? s->len - j * T : T;
  const uint8_t *p = lp_kv_page_ptr(s, j) + (size_t)h * L->head_bytes;
  const float *ko = (const float *)(p + L->ko), *vo = (const float *)(p + L->vo);
  const int outer = L->fmt != LPATTN_FMT_MXFP4 && !L->fp8s;
  /* Stack scratch (T <= 256, D <= LP_KV_DIM_MAX): readers may run on several threads. */
  uint8_t codes[LP_KV_DIM_MAX];
  float col[256];
  for (int64_t r = 0; r < T; r++) {
    load_codes(L->fmt, p + L->kc + code_bytes(L->fmt, r * D), D, codes);
    lp_dequantize_domain(L->fmt, codes, G ? p + L->ks + r * D / G : NULL, outer ? ko[r] : 1.0f,
                         (int)D, k + r * D);
  }
  for (int64_t d = 0; d < D; d++) {
    load_codes(L->fmt, p + L->vc + code_bytes(L->fmt, d * T), T, codes);
    lp_dequantize_domain(L->fmt, codes, G ? p + L->vs + d * T / G : NULL, outer ? vo[d] : 1.0f,
                         (int)T, col);
    for (int64_t r = 0; r < T; r++) v[r * D + d] = col[r];
  }
  /* rows past the tokens present are zero: a page's bytes past them are not this sequence's */
  for (int64_t e = n * D; e < T * D; e++) k[e] = v[e] = 0.0f;
  return (int)n;
}

const float *lp_kv_seq_kmean(const lp_kv_seq *s, int h, int64_t j) {
  const lp_kv_layout *L = &s->L;
  if (!L->has_kmean || j < 0 || (j + 1) * L->T > s->len) return NULL;
  return (const float *)(lp_kv_page_ptr(s, j) + L->kmean) + h * L->D;
}

static float *qrow(const lp_kv_layout *L, uint8_t *slot, int64_t hq, int64_t p) {
  float *rows = (float *)(slot + L->qrows);
  return rows + ((((p / L->T) % 2) * L->Hq + hq) * L->T + p % L->T) * L->D;
}

void lp_kv_seq_qmean(const lp_kv_seq *s, int hq, int64_t j, float *mean) {
  const lp_kv_layout *L = &s->L;
  const int64_t cur = (s->len - 1) / L->T;
  if (j <= cur - 2) {
    memcpy(mean, (const float *)(lp_kv_page_ptr(s, j) + L->qmean) + hq * L->D,
           sizeof(float) * (size_t)L->D);
    return;
  }
  lp_mean_rows_f32(qrow(L, s->slot, hq, j * L->T), LPATTN_F32, 0, L->D, 1, L->T, L->D,
                   (float)L->T, mean);
}

/* ---- pool memory ---------------------------------------------------------- */

/* FP8_STATIC in caller memory: every slot starts without descales (zeros),
 * so an append before lpattn_kv_pool_set_descales is refused whatever the
 * memory held (the library's own memory is zeroed whole below). */
static void clear_descales(lpattn_kv_pool *pool) {
  lp_kv_layout L;
  lp_kv_layout_init(&L, &pool->p);
  if (!L.fp8s) return;
  for (int32_t s = 0; s < pool->p.num_slots; s++)
    memset(pool->mem + lp_kv_slot_off(&L, s) + L.ds, 0, 2 * (size_t)L.Hkv * sizeof(float));
}

lpattn_status lp_host_pool_init(lpattn_ctx *ctx, lpattn_kv_pool *pool) {
  (void)ctx;
  if (pool->mem) {
    clear_descales(pool);
    return LPATTN_OK;
  }
  const size_t n = pool->bytes ? pool->bytes : LP_KV_ALIGN;
  /* A large pool in 2 MiB pages where the kernel allows them (Linux THP on
   * madvise): decode streams it with fewer TLB misses and page-boundary stalls. */
  const size_t huge = (size_t)2 << 20, align = n >= 2 * huge ? huge : LP_KV_ALIGN;
  void *m = aligned_alloc(align, (n + align - 1) / align * align);
  if (!m) return LPATTN_ERR_OUT_OF_MEMORY;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == huge) (void)madvise(m, (n + align - 1) / align * align, MADV_HUGEPAGE);
#endif
  memset(m, 0, n);
  pool->mem = m;
  pool->owned = 1;
  return LPATTN_OK;
}

void lp_host_pool_fini(lpattn_kv_pool *pool) {
  if (pool->owned) free(pool->mem);
  pool->mem = NULL, pool->owned = 0;
}

/* ---- append ----------------------------------------------------------------- */

typedef struct {
  const lp_kv_layout *L;
  const lpattn_kv_pool_params *p;
  float *tmp; /* T * D */
} writer;

/* Tile j of s just completed: its key mean, then its quantized copy. */
static void complete_tile(const writer *w, const lp_kv_seq *s, int64_t j) {
  const lp_kv_layout *L = w->L;
  const int64_t T = L->T, D = L->D, G = L->G;
  const lpattn_dtype dt = w->p->high_dtype;
  uint8_t *page = lp_kv_page_ptr(s, j);
  const lp_quant_cfg cfg = {L->fmt, 0, 0, w->p->mx_scale_round_up != 0};
  uint8_t codes[LP_KV_DIM_MAX], scales[LP_KV_DIM_MAX];
  if (L->fp8s) return; /* its codes were written token by token */
  for (int h = 0; h < L->Hkv; h++) {
    int64_t n;
    const uint8_t *hk = lp_kv_high_ptr(s, 0, h, j, &n), *hv = lp_kv_high_ptr(s, 1, h, j, &n);
    float kbar_buf[LP_KV_DIM_MAX], *kbar = L->has_kmean ? (float *)(page + L->kmean) + h * D : kbar_buf;
    if (L->has_kmean || w->p->pasa) lp_mean_rows_f32(hk, dt, 0, D, 1, T, D, (float)T, kbar);
    if (!L->has_low) continue;
    uint8_t *q = page + (size_t)h * L->head_bytes;
    float *ko = (float *)(q + L->ko), *vo = (float *)(q + L->vo), outer;
    for (int64_t r = 0; r < T; r++) {
      float *x = w->tmp + r * D;
      for (int64_t d = 0; d < D; d++) {
        x[d] = lp_load_f32(hk, dt, r * D + d);
        if (w->p->pasa) x[d] = x[d] - w->p->pasa_beta * kbar[d];
      }
      lp_quantize_domain(&cfg, x, 1, (int)D, NULL, codes, scales, &outer);
      if (L->fmt != LPATTN_FMT_MXFP4) ko[r] = outer;
      store_codes(L->fmt, codes, D, q + L->kc + code_bytes(L->fmt, r * D));
      if (G) memcpy(q + L->ks + r * D / G, scales, (size_t)(D / G));
    }
    for (int64_t i = 0; i < T * D; i++) w->tmp[i] = lp_load_f32(hv, dt, i);
    for (int64_t d = 0; d < D; d++) {
      lp_quantize_domain(&cfg, w->tmp + d, D, (int)T, NULL, codes, scales, &outer);
      if (L->fmt != LPATTN_FMT_MXFP4) vo[d] = outer;
      store_codes(L->fmt, codes, T, q + L->vc + code_bytes(L->fmt, d * T));
      if (G) memcpy(q + L->vs + d * T / G, scales, (size_t)(T / G));
    }
  }
}

/* Query tile j leaves the slot: its mean goes to its page, its rows are
 * cleared for tile j + 2. */
static void freeze_qtile(const lp_kv_layout *L, const lp_kv_seq *s, int64_t j) {
  float *mean = (float *)(lp_kv_page_ptr(s, j) + L->qmean);
  for (int64_t hq = 0; hq < L->Hq; hq++) {
    float *rows = qrow(L, s->slot, hq, j * L->T);
    lp_mean_rows_f32(rows, LPATTN_F32, 0, L->D, 1, L->T, L->D, (float)L->T, mean + hq * L->D);
    memset(rows, 0, sizeof(float) * (size_t)(L->T * L->D));
  }
}

static int64_t off4(const lpattn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3];
}

/* Row s of q (batch b) becomes the query row of position p, zero past its
 * q->shape[3] channels (a padded pool); 1 if non-finite. */
static int put_q(const lp_kv_layout *L, uint8_t *slot, int64_t p, const lpattn_tensor *q,
                 int64_t b, int64_t s) {
  int bad = 0;
  for (int64_t hq = 0; hq < L->Hq; hq++) {
    float *dst = qrow(L, slot, hq, p);
    for (int64_t d = 0; d < L->D; d++) {
      dst[d] = d < q->shape[3] ? lp_load_f32(q->data, q->dtype, off4(q, b, hq, s, d)) : 0.0f;
      bad |= !isfinite(dst[d]);
    }
  }
  return bad;
}

/* FP8_STATIC: token t of sequence i (position s->len - 1), KV head h, cast
 * into its page by the slot's descales (SPEC 11: E4M3(x / descale), RNE,
 * saturating); channels past the true widths are code 0. 1 if non-finite. */
static int put_fp8s(const lp_kv_seq *s, const lpattn_tensor *k, const lpattn_tensor *v, int64_t i,
                    int64_t t, int h) {
  const lp_kv_layout *L = &s->L;
  const int64_t T = L->T, D = L->D, p = s->len - 1, r = p % T;
  const float *ds = lp_kv_seq_descales(s);
  uint8_t *c = lp_kv_page_ptr(s, p / T) + (size_t)h * L->head_bytes;
  int bad = 0;
  for (int64_t d = 0; d < D; d++) {
    const float kx = d < L->Dk ? lp_load_f32(k->data, k->dtype, off4(k, i, h, t, d)) : 0.0f;
    const float vx = d < L->Dv ? lp_load_f32(v->data, v->dtype, off4(v, i, h, t, d)) : 0.0f;
    c[L->kc + r * D + d] = lp_fp8s_code(kx, ds[h]);
    c[L->vc + d * T + r] = lp_fp8s_code(vx, ds[L->Hkv + h]);
    bad |= !isfinite(kx) || !isfinite(vx);
  }
  return bad;
}

static void reset_slot(const lp_kv_layout *L, uint8_t *slot) {
  *(int64_t *)slot = 0;
  *(int32_t *)(slot + 8) = 0;
  if (L->has_qmean) memset(slot + L->qrows, 0, sizeof(float) * (size_t)(2 * L->Hq * L->T * L->D));
}

lpattn_status lp_host_kv_append(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                const lpattn_kv_append_call *call) {
  (void)ctx;
  const lpattn_kv_batch *b = call->batch;
  const lpattn_tensor *k = call->k, *v = call->v, *q = call->q;
  writer w = {NULL, &pool->p, NULL};
  lp_kv_seq s;
  lp_kv_seq_of(pool, b, 0, &s);
  const lp_kv_layout *L = &s.L;
  w.L = L;
  w.tmp = malloc(sizeof(float) * (size_t)(L->T * L->D));
  if (!w.tmp) return LPATTN_ERR_OUT_OF_MEMORY;
  const lpattn_dtype dt = pool->p.high_dtype;
  const int64_t T = L->T, D = L->D, Dk = L->Dk, Dv = L->Dv;
  for (int64_t i = 0; i < b->num_seqs; i++) {
    lp_kv_seq_of(pool, b, i, &s);
    if (s.len == 0) reset_slot(L, s.slot);
    int bad = 0;
    for (int64_t t = 0; t < call->n; t++) {
      const int64_t p = s.len, j = p / T, r = p % T;
      if (r == 0 && j >= 2 && L->has_qmean) freeze_qtile(L, &s, j - 2);
      s.len = p + 1; /* the readers now see tile j with r + 1 tokens */
      for (int h = 0; L->fp8s && h < L->Hkv; h++) bad |= put_fp8s(&s, k, v, i, t, h);
      for (int h = 0; !L->fp8s && h < L->Hkv; h++) {
        int64_t n;
        uint8_t *hk = (uint8_t *)lp_kv_high_ptr(&s, 0, h, j, &n);
        uint8_t *hv = (uint8_t *)lp_kv_high_ptr(&s, 1, h, j, &n);
        /* channels past the true widths stay zero (SEMANTICS "Head dimensions") */
        for (int64_t d = 0; d < D; d++) {
          const float kx = d < Dk ? lp_load_f32(k->data, k->dtype, off4(k, i, h, t, d)) : 0.0f;
          const float vx = d < Dv ? lp_load_f32(v->data, v->dtype, off4(v, i, h, t, d)) : 0.0f;
          lp_store_f32(hk, dt, r * D + d, kx);
          lp_store_f32(hv, dt, r * D + d, vx);
          bad |= !isfinite(lp_load_f32(hk, dt, r * D + d)) || !isfinite(lp_load_f32(hv, dt, r * D + d));
        }
      }
      if (q) {
        if (L->has_qmean) {
          bad |= put_q(L, s.slot, p, q, i, t);
        } else {
          for (int64_t hq = 0; hq < L->Hq; hq++)
            for (int64_t d = 0; d < Dk; d++)
              bad |= !isfinite(lp_load_f32(q->data, q->dtype, off4(q, i, hq, t, d)));
        }
      }
      if (r == T - 1) complete_tile(&w, &s, j);
    }
    *(int64_t *)s.slot = s.len;
    if (bad) *(int32_t *)(s.slot + 8) |= LP_SLOT_NONFINITE;
  }
  free(w.tmp);
  return LPATTN_OK;
}

lpattn_status lp_host_slot_copy(lpattn_ctx *ctx, lpattn_kv_pool *pool, int32_t src, int32_t dst) {
  (void)ctx;
  lp_kv_layout L;
  lp_kv_layout_init(&L, &pool->p);
  if (src != dst)
    memcpy(pool->mem + lp_kv_slot_off(&L, dst), pool->mem + lp_kv_slot_off(&L, src), L.slot_bytes);
  return LPATTN_OK;
}

lpattn_status lp_kv_check_descales(const lpattn_kv_pool *pool, const lp_kv_layout *L, int64_t i,
                                   int32_t slot) {
  const float *ds = (const float *)(pool->mem + lp_kv_slot_off(L, slot) + L->ds);
  for (int h = 0; h < 2 * L->Hkv; h++)
    if (!(isfinite(ds[h]) && ds[h] > 0.0f))
      return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "batch.slots[%lld] = %d has no descales (its %s_descale"
                     "[%d] = %g): an FP8_STATIC slot is set up by lpattn_kv_pool_set_descales",
                     (long long)i, (int)slot, h < L->Hkv ? "k" : "v", h % L->Hkv, (double)ds[h]);
  return LPATTN_OK;
}

lpattn_status lp_host_set_descales(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_tensor *slots,
                                   const lpattn_tensor *k_descale, const lpattn_tensor *v_descale) {
  (void)ctx;
  lp_kv_layout L;
  lp_kv_layout_init(&L, &pool->p);
  for (int64_t i = 0; i < slots->shape[3]; i++) {
    uint8_t *slot = pool->mem + lp_kv_slot_off(&L, id_at(slots, i));
    float *ds = (float *)(slot + L.ds);
    reset_slot(&L, slot); /* a new sequence: no tokens yet */
    for (int64_t h = 0; h < L.Hkv; h++) {
      ds[h] = lp_load_f32(k_descale->data, LPATTN_F32, off4(k_descale, 0, 0, i, h));
      ds[L.Hkv + h] = lp_load_f32(v_descale->data, LPATTN_F32, off4(v_descale, 0, 0, i, h));
    }
  }
  return LPATTN_OK;
}

void lp_host_record_q(lpattn_kv_pool *pool, const lpattn_kv_batch *b, const lpattn_tensor *q) {
  lp_kv_seq s;
  for (int64_t i = 0; i < b->num_seqs; i++) {
    lp_kv_seq_of(pool, b, i, &s);
    if (!s.L.has_qmean) return;
    const int64_t Sq = q->shape[2];
    int bad = 0;
    for (int64_t r = 0; r < Sq; r++) bad |= put_q(&s.L, s.slot, s.len - Sq + r, q, i, r);
    if (bad) *(int32_t *)(s.slot + 8) |= LP_SLOT_NONFINITE;
  }
}
