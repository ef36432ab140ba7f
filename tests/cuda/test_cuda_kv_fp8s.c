/* FP8_STATIC pool pages on the GPU (SPEC 11, docs/SEMANTICS.md "Static FP8
 * pages"): a CUDA pool and a ref pool fed the same tokens and descales
 * decode the same rows within the bounds of the other pool tests (O
 * relative RMSE 2e-3, LSE and H max abs 2e-3), for sequences of several
 * decode chunks and of part of a tile, Sq 1 and 5; shuffled pages in
 * library memory give the same bits as pages in caller memory full of NaN
 * codes where nothing was written (no code past a length is read); and the
 * leak rule, bitwise: a call's later rows (K, V huge but
 * finite, Q too) change none of its earlier rows. Exit 77 without a GPU. */
#include "cudatest.h"

enum { HQ = 8, HKV = 2, D = 128, T = 64, NS = 3, MAXP = 40, SQ = 5 };
static const int LEN[NS] = {1500, 200, 65}; /* 2 chunks; part tiles */

typedef struct {
  lpattn_kv_pool *pool;
  int32_t *table, *slots, *lens; /* device (GPU pool) or host (ref) */
  int dev;
  void *mem; /* the pool's caller memory (device), or NULL */
} side;


/* pages of sequence s: [s * MAXP, (s + 1) * MAXP), reversed when shuffle;
 * garbage: the pool in caller memory whose bytes are all 0xFF, so every
 * page byte not yet written is a NaN code (a decode must not read codes
 * past a sequence's length) */
static int side_make(lpattn_ctx *ctx, int dev, int shuffle, int garbage, const float *ds, side *o) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = HKV, pp.num_q_heads = HQ, pp.head_dim = D, pp.page_size = T;
  pp.precision = LPATTN_PREC_FP8_STATIC, pp.high_dtype = LPATTN_F16;
  pp.num_pages = NS * MAXP, pp.num_slots = NS;
  o->dev = dev, o->pool = NULL, o->mem = NULL;
  size_t page_bytes, slot_bytes, bytes = 0;
  if (garbage) {
    if (lpattn_kv_pool_size(&pp, &page_bytes, &slot_bytes, &bytes) != LPATTN_OK) return 0;
    o->mem = ht_dalloc(bytes);
    ht_dset(o->mem, 0xFF, bytes);
  }
  if (lpattn_kv_pool_create(ctx, &pp, o->mem, bytes, &o->pool) != LPATTN_OK) return 0;
  int32_t tab[NS * MAXP], sl[NS] = {0, 1, 2};
  for (int s = 0; s < NS; s++)
    for (int j = 0; j < MAXP; j++) tab[s * MAXP + j] = s * MAXP + (shuffle ? MAXP - 1 - j : j);
  o->table = ct_put(dev, tab, sizeof tab), o->slots = ct_put(dev, sl, sizeof sl);
  o->lens = ct_put(dev, sl, sizeof sl);
  float *d = ct_put(dev, ds, sizeof(float) * 2 * NS * HKV);
  lpattn_tensor tk = lpattn_tensor_4d(d, LPATTN_F32, 1, 1, NS, HKV), tv = tk;
  tv.data = d + NS * HKV;
  lpattn_tensor ts = ct_i32(o->slots, 1, NS);
  CHECK_STATUS(lpattn_kv_pool_set_descales(ctx, o->pool, &ts, &tk, &tv), LPATTN_OK);
  lpattn_synchronize(ctx);
  ct_drop(dev, d);
  return 1;
}
static void side_free(side *o) {
  lpattn_kv_pool_free(o->pool);
  if (o->mem) ht_dfree(o->mem);
  ct_drop(o->dev, o->table), ct_drop(o->dev, o->slots), ct_drop(o->dev, o->lens);
}

/* sequence s's tokens [a, a + n) of x ([1, H, L, D] host f16) as a device or host view */
static lpattn_tensor rows(const ct_pair *x, int dev, int64_t a, int64_t n) {
  lpattn_tensor t = dev ? x->d : x->h;
  t.data = (uint16_t *)t.data + a * D;
  t.shape[2] = n;
  return t;
}

/* append every sequence's tokens (256 a call), then decode the last Sq
 * rows of all three: out [NS, HQ, Sq, D] f32, lse, ent [NS, HQ, Sq] */
static void run(lpattn_ctx *ctx, side *o, ct_pair *k, ct_pair *v, ct_pair *q, const float *qd, int sq,
                ct_pair *out, ct_pair *lse, ct_pair *ent) {
  for (int s = 0; s < NS; s++)
    for (int a = 0; a < LEN[s]; a += 256) {
      const int n = LEN[s] - a < 256 ? LEN[s] - a : 256;
      int32_t len = a, slot = s;
      int32_t *dl = ct_put(o->dev, &len, 4), *dsl = ct_put(o->dev, &slot, 4);
      lpattn_kv_batch b;
      lpattn_kv_batch_init(&b);
      b.num_seqs = 1, b.slots = ct_i32(dsl, 1, 1), b.lengths = ct_i32(dl, 1, 1);
      b.page_table = ct_i32((int32_t *)o->table + s * MAXP, 1, MAXP), b.max_length = a;
      lpattn_tensor tk = rows(&k[s], o->dev, a, n), tv = rows(&v[s], o->dev, a, n);
      CHECK_STATUS(lpattn_kv_append(ctx, o->pool, &b, &tk, &tv, NULL), LPATTN_OK);
      lpattn_synchronize(ctx);
      ct_drop(o->dev, dl), ct_drop(o->dev, dsl);
    }
  int32_t lens[NS];
  for (int s = 0; s < NS; s++) lens[s] = LEN[s];
  if (o->dev) ht_up(o->lens, lens, sizeof lens);
  else memcpy(o->lens, lens, sizeof lens);
  /* the queries: rows LEN - sq .. LEN - 1 of each sequence */
  ct_pair qq = ct_make(LPATTN_F16, NS, HQ, sq, D);
  for (int s = 0; s < NS; s++)
    for (int h = 0; h < HQ; h++)
      memcpy((uint16_t *)qq.h.data + ((size_t)(s * HQ + h) * sq) * D,
             (uint16_t *)q[s].h.data + ((size_t)h * LEN[s] + LEN[s] - sq) * D, (size_t)sq * D * 2);
  ct_up(&qq);
  float *dq = ct_put(o->dev, qd, sizeof(float) * NS * HKV);
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = NS, b.slots = ct_i32(o->slots, 1, NS), b.lengths = ct_i32(o->lens, 1, NS);
  b.page_table = ct_i32(o->table, NS, MAXP), b.max_length = LEN[0];
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.q_descale = lpattn_tensor_4d(dq, LPATTN_F32, 1, 1, NS, HKV);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = o->dev ? lse->d : lse->h, aux.entropy = o->dev ? ent->d : ent->h;
  lpattn_tensor tq = o->dev ? qq.d : qq.h, to = o->dev ? out->d : out->h;
  CHECK_STATUS(lpattn_paged_decode(ctx, o->pool, &b, &tq, &to, &p, &aux), LPATTN_OK);
  lpattn_synchronize(ctx);
  if (o->dev) ct_down(out), ct_down(lse), ct_down(ent);
  ct_drop(o->dev, dq), ct_free(&qq);
}

typedef struct {
  ct_pair o, l, h;
} outs;
static outs outs_make(int sq) {
  outs r = {ct_make(LPATTN_F32, NS, HQ, sq, D), ct_make(LPATTN_F32, NS, HQ, sq, 1), ct_make(LPATTN_F32, NS, HQ, sq, 1)};
  ct_poison(&r.o), ct_poison(&r.l), ct_poison(&r.h);
  return r;
}
static void outs_free(outs *r) { ct_free(&r->o), ct_free(&r->l), ct_free(&r->h); }

int main(void) {
  lpattn_ctx *cu = NULL, *ref = NULL;
  if (!ct_setup(&cu, &ref)) return 77;
  float ds[2 * NS * HKV], qd[NS * HKV];
  for (int i = 0; i < NS * HKV; i++)
    ds[i] = 0.004f * (1 + i % 3), ds[NS * HKV + i] = 0.003f * (1 + i % 2), qd[i] = 0.005f * (1 + i % 3);
  ct_pair k[NS], v[NS], q[NS], k2[NS], v2[NS], q2[NS];
  for (int s = 0; s < NS; s++) {
    k[s] = ct_make(LPATTN_F16, 1, HKV, LEN[s], D), v[s] = ct_make(LPATTN_F16, 1, HKV, LEN[s], D);
    q[s] = ct_make(LPATTN_F16, 1, HQ, LEN[s], D);
    ct_fill(&k[s], 0.2, 0.5), ct_fill(&v[s], 0, 0.5), ct_fill(&q[s], 0, 0.5);
    /* the leak side: the last 2 tokens' K, V and Q huge (finite; the casts saturate) */
    k2[s] = ct_make(LPATTN_F16, 1, HKV, LEN[s], D), v2[s] = ct_make(LPATTN_F16, 1, HKV, LEN[s], D);
    q2[s] = ct_make(LPATTN_F16, 1, HQ, LEN[s], D);
    memcpy(k2[s].h.data, k[s].h.data, k[s].bytes), memcpy(v2[s].h.data, v[s].h.data, v[s].bytes);
    memcpy(q2[s].h.data, q[s].h.data, q[s].bytes);
    for (int h = 0; h < HQ; h++)
      for (int t = LEN[s] - 2; t < LEN[s]; t++)
        for (int d = 0; d < D; d++) {
          const float big = (d & 1) ? 3e4f : -3e4f;
          const size_t e = ((size_t)h * LEN[s] + t) * D + d;
          if (h < HKV) lp_store_f32(k2[s].h.data, LPATTN_F16, e, big), lp_store_f32(v2[s].h.data, LPATTN_F16, e, -big);
          lp_store_f32(q2[s].h.data, LPATTN_F16, e, big);
        }
    ct_up(&k2[s]), ct_up(&v2[s]), ct_up(&q2[s]);
  }
  side g, gs, r;
  if (!side_make(cu, 1, 0, 1, ds, &g)) {
    printf("cuda pool: FP8_STATIC unsupported here (%s)\n", lpattn_last_error());
    return 77;
  }
  CHECK(side_make(cu, 1, 1, 0, ds, &gs) && side_make(ref, 0, 0, 0, ds, &r), "pools");
  for (int sq = 1; sq <= SQ; sq += SQ - 1) {
    outs a = outs_make(sq), b = outs_make(sq), e = outs_make(sq);
    run(cu, &g, k, v, q, qd, sq, &a.o, &a.l, &a.h);
    run(cu, &gs, k, v, q, qd, sq, &b.o, &b.l, &b.h);
    run(ref, &r, k, v, q, qd, sq, &e.o, &e.l, &e.h);
    CHECK(!memcmp(a.o.h.data, b.o.h.data, a.o.bytes) && !memcmp(a.l.h.data, b.l.h.data, a.l.bytes),
          "sq %d: shuffled pages differ", sq);
    const double eo = ct_relerr(&a.o.h, &e.o.h), el = ct_maxabs(&a.l.h, &e.l.h), eh = ct_maxabs(&a.h.h, &e.h.h);
    printf("fp8_static pool vs ref pool sq=%d lens 1500,200,65: O %.2e LSE %.2e H %.2e\n", sq, eo, el, eh);
    CHECK(eo < 2e-3 && el < 2e-3 && eh < 2e-3, "sq %d: O %g LSE %g H %g", sq, eo, el, eh);
    outs_free(&a), outs_free(&b), outs_free(&e);
  }
  { /* leak: rows 0..SQ-3 of a call equal with the last two tokens perturbed */
    side g2;
    CHECK(side_make(cu, 1, 0, 0, ds, &g2), "pool");
    outs a = outs_make(SQ), b = outs_make(SQ);
    run(cu, &g, k, v, q, qd, SQ, &a.o, &a.l, &a.h); /* g again: its slots restart at length 0 */
    run(cu, &g2, k2, v2, q2, qd, SQ, &b.o, &b.l, &b.h);
    int bad = 0;
    for (int s = 0; s < NS; s++)
      for (int h = 0; h < HQ; h++)
        for (int t = 0; t < SQ - 2; t++) {
          const size_t row = ((size_t)s * HQ + h) * SQ + t;
          bad += memcmp((float *)a.o.h.data + row * D, (float *)b.o.h.data + row * D, D * 4) != 0;
          bad += memcmp((float *)a.l.h.data + row, (float *)b.l.h.data + row, 4) != 0;
          bad += memcmp((float *)a.h.h.data + row, (float *)b.h.h.data + row, 4) != 0;
        }
    printf("fp8_static leak: %d of %d earlier rows changed\n", bad, 3 * NS * HQ * (SQ - 2));
    CHECK(bad == 0, "a later token reached %d earlier row values", bad);
    outs_free(&a), outs_free(&b), side_free(&g2);
  }
  side_free(&g), side_free(&gs), side_free(&r);
  for (int s = 0; s < NS; s++)
    ct_free(&k[s]), ct_free(&v[s]), ct_free(&q[s]), ct_free(&k2[s]), ct_free(&v2[s]), ct_free(&q2[s]);
  lpattn_free(cu), lpattn_free(ref);
  return test_finish();
}
