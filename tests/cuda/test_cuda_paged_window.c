/* Sliding window and softcap on the GPU paged decode (issue 32 item 7,
 * docs/semantics/shapes.md "Sliding window and softcap"): a GPU pool and a
 * ref pool fed the same tokens (and queries: THRIFT's means) decode the same
 * rows within the bounds of the other pool tests (O relative RMSE 2e-3,
 * LSE and H max abs 2e-3), in every pool precision the CUDA decode takes
 * (HIGH, FP8, NVFP4, MXFP4, THRIFT by budget and by k with paper selection,
 * FP8_STATIC), GQA 4, sequences of 3 decode chunks (LP_DECODE_CHUNK_TILES
 * pages of 64), of 7 pages and of part of 2, Sq 1, 3 and 64 (rows of two
 * query tiles, each its own window), for windows smaller than a page, of a
 * few pages, across a chunk boundary, larger than the context, the softcap
 * alone and with a window. And the point of a window in decode, bitwise:
 * huge K and V in the pages wholly before the window of the call's first
 * row (never read) change no output. Exit 77 without a GPU. */
#include <limits.h>
#include "cudatest.h"

enum { HQ = 8, HKV = 2, D = 128, T = 64, NS = 3, MAXP = 40, NPREC = 7 };
static const int LEN[NS] = {2200, 450, 70};
static const float DS = 8.0f / 448.0f; /* FP8_STATIC k and v descales */

typedef struct {
  lpattn_kv_pool *pool;
  int32_t *table, *slots, *lens; /* device (GPU pool) or host (ref) */
  int dev;
} side;

typedef struct { /* a precision and the pool's decode params */
  lpattn_precision prec;
  int thrift_k, paper;
  float budget;
  const char *name;
} pcase;

static lpattn_tensor view(const lpattn_tensor *t, int64_t pos, int64_t n) {
  lpattn_tensor x = *t;
  x.data = (char *)t->data + (size_t)pos * t->stride[2] * 2;
  x.shape[2] = n;
  return x;
}

/* the pool of side o holding tokens k, v (q: THRIFT) of every sequence,
 * appended in pieces of 300 and the last 5 one at a time; pages of sequence
 * s: [s * MAXP, (s + 1) * MAXP), reversed when shuffle */
static int side_make(lpattn_ctx *ctx, int dev, int shuffle, lpattn_precision prec, ct_pair *k, ct_pair *v,
                     ct_pair *q, side *o) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = HKV, pp.num_q_heads = HQ, pp.head_dim = D, pp.page_size = T;
  pp.precision = prec, pp.high_dtype = LPATTN_F16;
  pp.num_pages = NS * MAXP, pp.num_slots = NS;
  o->dev = dev, o->pool = NULL;
  if (lpattn_kv_pool_create(ctx, &pp, NULL, 0, &o->pool) != LPATTN_OK) return 0;
  int32_t tab[NS * MAXP], sl[NS] = {2, 0, 1}, zero[NS] = {0, 0, 0};
  for (int s = 0; s < NS; s++)
    for (int j = 0; j < MAXP; j++) tab[s * MAXP + j] = s * MAXP + (shuffle ? MAXP - 1 - j : j);
  o->table = ct_put(dev, tab, sizeof tab), o->slots = ct_put(dev, sl, sizeof sl), o->lens = ct_put(dev, zero, sizeof zero);
  if (prec == LPATTN_PREC_FP8_STATIC) {
    const float ds[2 * NS * HKV] = {DS, DS, DS, DS, DS, DS, DS, DS, DS, DS, DS, DS};
    float *d = ct_put(dev, ds, sizeof ds);
    lpattn_tensor tk = lpattn_tensor_4d(d, LPATTN_F32, 1, 1, NS, HKV), tv = tk;
    tv.data = d + NS * HKV;
    lpattn_tensor ts = ct_i32(o->slots, 1, NS);
    CHECK_STATUS(lpattn_kv_pool_set_descales(ctx, o->pool, &ts, &tk, &tv), LPATTN_OK);
    lpattn_synchronize(ctx);
    ct_drop(dev, d);
  }
  for (int s = 0; s < NS; s++)
    for (int at = 0, step = 300; at < LEN[s]; at += step) {
      if (at >= LEN[s] - 5) step = 1;
      const int n = LEN[s] - at < step ? LEN[s] - at : step;
      int32_t len = at;
      if (dev) ht_dsync(), ht_up(o->lens + s, &len, 4);
      else o->lens[s] = len;
      lpattn_kv_batch b;
      lpattn_kv_batch_init(&b);
      b.num_seqs = 1, b.slots = ct_i32(o->slots + s, 1, 1), b.lengths = ct_i32(o->lens + s, 1, 1);
      b.page_table = ct_i32(o->table + s * MAXP, 1, MAXP), b.max_length = at;
      lpattn_tensor tk = view(dev ? &k[s].d : &k[s].h, at, n), tv = view(dev ? &v[s].d : &v[s].h, at, n);
      lpattn_tensor tq = view(dev ? &q[s].d : &q[s].h, at, n);
      CHECK_STATUS(lpattn_kv_append(ctx, o->pool, &b, &tk, &tv, prec == LPATTN_PREC_THRIFT ? &tq : NULL),
                   LPATTN_OK);
    }
  if (dev) ht_dsync(), ht_up(o->lens, LEN, sizeof LEN);
  else memcpy(o->lens, LEN, sizeof LEN);
  return 1;
}
static void side_free(side *o) {
  lpattn_kv_pool_free(o->pool);
  ct_drop(o->dev, o->table), ct_drop(o->dev, o->slots), ct_drop(o->dev, o->lens);
}

typedef struct { ct_pair o, l, h; } outs;
static outs outs_make(int sq) {
  outs o = {ct_make(LPATTN_F32, NS, HQ, sq, D), ct_make(LPATTN_F32, NS, HQ, sq, 1), ct_make(LPATTN_F32, NS, HQ, sq, 1)};
  ct_poison(&o.o), ct_poison(&o.l), ct_poison(&o.h);
  return o;
}
static void outs_free(outs *o) { ct_free(&o->o), ct_free(&o->l), ct_free(&o->h); }

/* every sequence's last sq queries decoded from side o */
static lpattn_status decode(lpattn_ctx *ctx, const side *o, const ct_pair *q, int sq, const lpattn_attn_params *ap,
                            outs *r) {
  ct_pair x = ct_make(LPATTN_F16, NS, HQ, sq, D);
  for (int s = 0; s < NS; s++)
    for (int h = 0; h < HQ; h++)
      memcpy((uint16_t *)x.h.data + ((size_t)(s * HQ + h) * sq) * D,
             (uint16_t *)q[s].h.data + ((size_t)h * LEN[s] + LEN[s] - sq) * D, (size_t)sq * D * 2);
  ct_up(&x);
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = NS, b.slots = ct_i32(o->slots, 1, NS), b.lengths = ct_i32(o->lens, 1, NS);
  b.page_table = ct_i32(o->table, NS, MAXP), b.max_length = LEN[0];
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = o->dev ? r->l.d : r->l.h, aux.entropy = o->dev ? r->h.d : r->h.h;
  const lpattn_status st = lpattn_paged_decode(ctx, o->pool, &b, o->dev ? &x.d : &x.h, o->dev ? &r->o.d : &r->o.h,
                                               ap, &aux);
  if (o->dev) ct_down(&r->o), ct_down(&r->l), ct_down(&r->h);
  ct_free(&x);
  return st;
}

static lpattn_tensor rows_of(const ct_pair *p, int i) {
  lpattn_tensor t = p->h;
  t.data = (char *)t.data + (size_t)i * t.stride[0] * 4;
  t.shape[0] = 1;
  return t;
}
static int same_bits(const ct_pair *a, const ct_pair *b) { return memcmp(a->h.data, b->h.data, a->bytes) == 0; }

static lpattn_attn_params params_of(const pcase *c, int left, float cap) {
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.window_left = left, ap.softcap = cap;
  if (c->prec == LPATTN_PREC_THRIFT) {
    ap.thrift_k = c->thrift_k, ap.thrift_budget = c->budget;
    ap.selection = c->paper ? LPATTN_SELECT_PAPER : LPATTN_SELECT_CAUSAL;
  }
  return ap;
}

/* The windows and softcaps: smaller than a page, a few pages, across a
 * chunk boundary (the first sequence's rows at 2195.. see back to ~1195:
 * chunks 1 and 2), larger than the context, INT_MAX (key + window must not
 * overflow: every key seen), the softcap alone and with a window. */
static const struct { int left; float cap; } WIN[] = {{20, 0.0f}, {150, 0.0f}, {1000, 0.0f}, {5000, 0.0f},
                                                        {INT_MAX, 0.0f}, {-1, 10.0f}, {300, 5.0f}};
enum { NWIN = sizeof WIN / sizeof WIN[0] };

static int run_prec(lpattn_ctx *cu, lpattn_ctx *ref, ct_pair *k, ct_pair *v, ct_pair *q, const pcase *c) {
  side G, R;
  if (!side_make(cu, 1, 1, c->prec, k, v, q, &G)) {
    printf("%s: no pool of this precision on " CT_NAME "\n", c->name);
    return 0;
  }
  CHECK(side_make(ref, 0, 0, c->prec, k, v, q, &R), "%s: ref pool", c->name);
  const int sqs[3] = {1, 3, 64};
  for (int w = 0; w < NWIN; w++)
    for (int i = 0; i < 3; i++) {
      const int sq = sqs[i];
      const lpattn_attn_params ap = params_of(c, WIN[w].left, WIN[w].cap);
      outs a = outs_make(sq), r = outs_make(sq);
      CHECK_STATUS(decode(cu, &G, q, sq, &ap, &a), LPATTN_OK);
      CHECK_STATUS(decode(ref, &R, q, sq, &ap, &r), LPATTN_OK);
      for (int s = 0; s < NS; s++) {
        lpattn_tensor ao = rows_of(&a.o, s), al = rows_of(&a.l, s), ah = rows_of(&a.h, s);
        lpattn_tensor ro = rows_of(&r.o, s), rl = rows_of(&r.l, s), rh = rows_of(&r.h, s);
        const double e = ct_relerr(&ao, &ro), el = ct_maxabs(&al, &rl), eh = ct_maxabs(&ah, &rh);
        printf("paged window %s left %d cap %g sq %d len %d: O %.2e LSE %.2e H %.2e\n", c->name, WIN[w].left,
               (double)WIN[w].cap, sq, LEN[s], e, el, eh);
        CHECK(e < 2e-3 && el < 2e-3 && eh < 2e-3, "%s left %d cap %g sq %d seq %d: O %g LSE %g H %g", c->name,
              WIN[w].left, (double)WIN[w].cap, sq, s, e, el, eh);
      }
      outs_free(&a), outs_free(&r);
    }
  side_free(&G), side_free(&R);
  return 1;
}

/* huge K and V in the tiles wholly before the window of every row of a
 * call with Sq <= 5: the GPU pool's outputs keep their bits */
static void unread_case(lpattn_ctx *cu, ct_pair *k, ct_pair *v, ct_pair *q, const pcase *c) {
  const int left = 150, sq = 5;
  ct_pair k2[NS], v2[NS];
  for (int s = 0; s < NS; s++) {
    k2[s] = ct_make(LPATTN_F16, 1, HKV, LEN[s], D), v2[s] = ct_make(LPATTN_F16, 1, HKV, LEN[s], D);
    memcpy(k2[s].h.data, k[s].h.data, k[s].bytes), memcpy(v2[s].h.data, v[s].h.data, v[s].bytes);
    const int lo = LEN[s] - sq - left, cut = lo > 0 ? lo / T * T : 0; /* tiles [0, cut / T) */
    for (int h = 0; h < HKV; h++)
      for (int p = 0; p < cut; p++)
        for (int d = 0; d < D; d++) {
          const size_t e = ((size_t)h * LEN[s] + p) * D + d;
          ((uint16_t *)k2[s].h.data)[e] = lpattn_f32_to_f16(d & 1 ? -3.0e4f : 3.0e4f);
          ((uint16_t *)v2[s].h.data)[e] = lpattn_f32_to_f16(2.0e4f);
        }
    ct_up(&k2[s]), ct_up(&v2[s]);
  }
  side A, B;
  if (side_make(cu, 1, 0, c->prec, k, v, q, &A)) {
    CHECK(side_make(cu, 1, 1, c->prec, k2, v2, q, &B), "%s: pool", c->name);
    const lpattn_attn_params ap = params_of(c, left, 0.0f);
    for (int n = 1; n <= sq; n += sq - 1) {
      outs a = outs_make(n), b = outs_make(n);
      CHECK_STATUS(decode(cu, &A, q, n, &ap, &a), LPATTN_OK);
      CHECK_STATUS(decode(cu, &B, q, n, &ap, &b), LPATTN_OK);
      const int ok = same_bits(&a.o, &b.o) && same_bits(&a.l, &b.l) && same_bits(&a.h, &b.h);
      printf("paged window %s sq %d: pages before the window %s\n", c->name, n, ok ? "unread" : "READ");
      CHECK(ok, "%s sq %d: K/V before the window changed the outputs", c->name, n);
      outs_free(&a), outs_free(&b);
    }
    side_free(&A), side_free(&B);
  }
  for (int s = 0; s < NS; s++) ct_free(&k2[s]), ct_free(&v2[s]);
}

int main(void) {
  lpattn_ctx *cu = NULL, *ref = NULL;
  if (!ct_setup(&cu, &ref)) return 77;
  ct_pair k[NS], v[NS], q[NS];
  for (int s = 0; s < NS; s++) {
    k[s] = ct_make(LPATTN_F16, 1, HKV, LEN[s], D), v[s] = ct_make(LPATTN_F16, 1, HKV, LEN[s], D);
    q[s] = ct_make(LPATTN_F16, 1, HQ, LEN[s], D);
    ct_fill(&k[s], 0.4, 1), ct_fill(&v[s], 0, 1), ct_fill(&q[s], 0, 1);
  }
  const pcase cases[NPREC] = {
      {LPATTN_PREC_HIGH, 0, 0, 0.0f, "high"},
      {LPATTN_PREC_FP8, 0, 0, 0.0f, "fp8"},
      {LPATTN_PREC_NVFP4, 0, 0, 0.0f, "nvfp4"},
      {LPATTN_PREC_MXFP4, 0, 0, 0.0f, "mxfp4"},
      {LPATTN_PREC_THRIFT, 0, 0, 0.25f, "thrift budget 0.25"},
      {LPATTN_PREC_THRIFT, 5, 1, 0.25f, "thrift k 5 paper"},
      {LPATTN_PREC_FP8_STATIC, 0, 0, 0.0f, "fp8_static"},
  };
  int ran = 0;
  for (int i = 0; i < NPREC; i++) ran += run_prec(cu, ref, k, v, q, &cases[i]);
  for (int i = 0; ran && i < NPREC; i++) unread_case(cu, k, v, q, &cases[i]);
  for (int s = 0; s < NS; s++) ct_free(&k[s]), ct_free(&v[s]), ct_free(&q[s]);
  lpattn_free(cu), lpattn_free(ref);
  if (!ran) return 77;
  return test_finish();
}
