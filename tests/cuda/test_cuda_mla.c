/* MLA decode through the paged pool (issue 27 item 3): pools of head_dim 576
 * (Q, K) and head_dim_v 512 (V, out) with one kv head, V appended as a view
 * of K's first 512 channels (as MLA's latent cache is), in HIGH, FP8 and
 * NVFP4 with f16 and bf16 pages and queries, GQA groups of 16 and 128 q
 * heads, Sq 1 and 2: the GPU pool's decode against the ref backend's pool
 * holding the same tokens, under test_cuda_paged.c's bounds; shuffled pages
 * give bitwise the same rows. MXFP4, THRIFT, FP8_STATIC and PASA MLA pools
 * answer UNSUPPORTED. Exit 77 without a GPU or without the MLA variant. */
#include "cudatest.h"

enum { DK = 576, DV = 512, T = 64, NS = 3, MAXP = 24 };
static const int LEN[NS] = {1500, 200, 65};

static lpattn_tensor i32(void *d, int64_t a, int64_t b) { return lpattn_tensor_4d(d, LPATTN_I32, 1, 1, a, b); }
/* tokens [pos, pos + n) of a [1, H, L, w] tensor (w <= its row: V's view of K) */
static lpattn_tensor rows(const lpattn_tensor *t, int64_t pos, int64_t n, int64_t w) {
  lpattn_tensor x = *t;
  x.data = (char *)t->data + (size_t)pos * t->stride[2] * 2;
  x.shape[2] = n, x.shape[3] = w;
  return x;
}

static void params(lpattn_kv_pool_params *pp, lpattn_precision prec, lpattn_dtype ht, int hq) {
  lpattn_kv_pool_params_init(pp);
  pp->num_kv_heads = 1, pp->num_q_heads = hq, pp->head_dim = DK, pp->head_dim_v = DV, pp->page_size = T;
  pp->precision = prec, pp->num_pages = NS * MAXP, pp->num_slots = NS + 1, pp->high_dtype = ht;
}

/* the page ids of sequence s: a permutation of the pool by seed (0: in order) */
static void table_of(int32_t tab[NS][MAXP], unsigned seed) {
  int32_t perm[NS * MAXP];
  for (int i = 0; i < NS * MAXP; i++) perm[i] = i;
  uint64_t r = seed * 2654435761u + 1;
  for (int i = NS * MAXP - 1; i > 0 && seed; i--) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    const int j = (int)((r >> 33) % (uint64_t)(i + 1)), x = perm[i];
    perm[i] = perm[j], perm[j] = x;
  }
  for (int s = 0; s < NS; s++) memcpy(tab[s], perm + s * MAXP, MAXP * 4);
}

/* a batch over host (dev = 0) or device copies of slots, lengths, tables */
typedef struct { int32_t slots[NS], lens[NS], tab[NS][MAXP]; int32_t *d; } batchbuf;
static lpattn_kv_batch batch(batchbuf *bb, int dev, int n, int32_t maxlen) {
  int32_t *s = bb->slots, *l = bb->lens, *t = &bb->tab[0][0];
  if (dev) {
    if (!bb->d) bb->d = ht_dalloc(sizeof bb->slots + sizeof bb->lens + sizeof bb->tab);
    s = bb->d, l = s + NS, t = l + NS;
    ht_dsync();
    ht_up(s, bb->slots, sizeof bb->slots), ht_up(l, bb->lens, sizeof bb->lens), ht_up(t, bb->tab, sizeof bb->tab);
  }
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = n, b.slots = i32(s, 1, n), b.lengths = i32(l, 1, n), b.page_table = i32(t, n, MAXP);
  b.max_length = maxlen;
  return b;
}

/* every sequence's tokens into pool p (ctx c), in appends of 300 and the last 5 one at a time */
static void fill(lpattn_ctx *c, lpattn_kv_pool *p, batchbuf *bb, ct_pair *k, int dev) {
  for (int s = 0; s < NS; s++)
    for (int at = 0, step = 300; at < LEN[s]; at += step) {
      if (at >= LEN[s] - 5) step = 1;
      const int n = LEN[s] - at < step ? LEN[s] - at : step;
      batchbuf one = *bb;
      one.d = NULL;
      one.slots[0] = bb->slots[s], one.lens[0] = at;
      memcpy(one.tab[0], bb->tab[s], sizeof one.tab[0]);
      lpattn_kv_batch b = batch(&one, dev, 1, at);
      const lpattn_tensor *src = dev ? &k[s].d : &k[s].h;
      lpattn_tensor kk = rows(src, at, n, DK), vv = rows(src, at, n, DV);
      CHECK_STATUS(lpattn_kv_append(c, p, &b, &kk, &vv, NULL), LPATTN_OK);
      if (one.d) ht_dfree(one.d);
    }
}

static int run(lpattn_ctx *cu, lpattn_ctx *ref, lpattn_precision prec, lpattn_dtype ht, int hq) {
  const char *pn = prec == LPATTN_PREC_HIGH ? "high" : prec == LPATTN_PREC_FP8 ? "fp8" : "nvfp4";
  const char *dn = ht == LPATTN_F16 ? "f16" : "bf16";
  const double tol = ht == LPATTN_F16 ? 2e-3 : 5e-3; /* test_cuda_paged.c's */
  lpattn_kv_pool_params pp;
  params(&pp, prec, ht, hq);
  lpattn_kv_pool *A = NULL, *B = NULL, *R = NULL;
  const lpattn_status st = lpattn_kv_pool_create(cu, &pp, NULL, 0, &A);
  if (st == LPATTN_ERR_UNSUPPORTED) {
    printf("mla %s %s: unsupported (%s)\n", pn, dn, lpattn_last_error());
    return 0;
  }
  CHECK_STATUS(st, LPATTN_OK);
  CHECK_STATUS(lpattn_kv_pool_create(cu, &pp, NULL, 0, &B), LPATTN_OK);
  CHECK_STATUS(lpattn_kv_pool_create(ref, &pp, NULL, 0, &R), LPATTN_OK);
  ct_pair k[NS];
  for (int s = 0; s < NS; s++) k[s] = ct_make(ht, 1, 1, LEN[s], DK), ct_fill(&k[s], 0.2, 1);
  batchbuf ba, bs;
  memset(&ba, 0, sizeof ba), memset(&bs, 0, sizeof bs);
  int32_t maxlen = 0;
  for (int s = 0; s < NS; s++) {
    ba.slots[s] = bs.slots[s] = NS - s, ba.lens[s] = bs.lens[s] = LEN[s];
    maxlen = LEN[s] > maxlen ? LEN[s] : maxlen;
  }
  table_of(ba.tab, 0), table_of(bs.tab, 11);
  fill(cu, A, &ba, k, 1), fill(cu, B, &bs, k, 1), fill(ref, R, &ba, k, 0);
  for (int sq = 1; sq <= 2; sq++) {
    ct_pair q = ct_make(ht, NS, hq, sq, DK);
    ct_fill(&q, 0, 1);
    ct_pair o[3], l[3], h[3]; /* A, B, ref */
    for (int i = 0; i < 3; i++) {
      o[i] = ct_make(LPATTN_F32, NS, hq, sq, DV), l[i] = ct_make(LPATTN_F32, NS, hq, sq, 1);
      h[i] = ct_make(LPATTN_F32, NS, hq, sq, 1);
      ct_poison(&o[i]), ct_poison(&l[i]), ct_poison(&h[i]);
    }
    lpattn_attn_params ap;
    lpattn_attn_params_init(&ap);
    for (int i = 0; i < 3; i++) {
      lpattn_attn_aux aux;
      lpattn_attn_aux_init(&aux);
      const int dev = i < 2;
      aux.lse = dev ? l[i].d : l[i].h, aux.entropy = dev ? h[i].d : h[i].h;
      lpattn_kv_batch b = batch(i == 1 ? &bs : &ba, dev, NS, maxlen);
      CHECK_STATUS(lpattn_paged_decode(i == 0 ? cu : i == 1 ? cu : ref, i == 0 ? A : i == 1 ? B : R, &b,
                                       dev ? &q.d : &q.h, dev ? &o[i].d : &o[i].h, &ap, &aux), LPATTN_OK);
      if (dev) ct_down(&o[i]), ct_down(&l[i]), ct_down(&h[i]);
    }
    { /* no _win kernels for d576: a window or a softcap is refused, nothing written */
      lpattn_attn_params wp = ap;
      wp.window_left = 100;
      lpattn_kv_batch b = batch(&ba, 1, NS, maxlen);
      CHECK_STATUS(lpattn_paged_decode(cu, A, &b, &q.d, &o[1].d, &wp, NULL), LPATTN_ERR_UNSUPPORTED);
      wp.window_left = -1, wp.softcap = 30.0f;
      CHECK_STATUS(lpattn_paged_decode(cu, A, &b, &q.d, &o[1].d, &wp, NULL), LPATTN_ERR_UNSUPPORTED);
    }
    CHECK(memcmp(o[0].h.data, o[1].h.data, o[0].bytes) == 0 && memcmp(l[0].h.data, l[1].h.data, l[0].bytes) == 0,
          "mla %s %s hq %d sq %d: shuffled pages differ", pn, dn, hq, sq);
    const double e = ct_relerr(&o[0].h, &o[2].h), el = ct_maxabs(&l[0].h, &l[2].h), eh = ct_maxabs(&h[0].h, &h[2].h);
    printf("mla vs ref pool %s %s hq=%d sq=%d lens 1500/200/65: O %.2e LSE %.2e H %.2e\n", pn, dn, hq, sq, e, el, eh);
    CHECK(e < tol && el < 2e-3 && eh < 2e-3, "mla %s %s hq %d sq %d: O %g LSE %g H %g", pn, dn, hq, sq, e, el, eh);
    ct_free(&q);
    for (int i = 0; i < 3; i++) ct_free(&o[i]), ct_free(&l[i]), ct_free(&h[i]);
  }
  for (int s = 0; s < NS; s++) ct_free(&k[s]);
  if (ba.d) ht_dfree(ba.d);
  if (bs.d) ht_dfree(bs.d);
  lpattn_kv_pool_free(A), lpattn_kv_pool_free(B), lpattn_kv_pool_free(R);
  return 1;
}

/* MLA pools the GPU backend does not hold: UNSUPPORTED, naming the head dims */
static void refused(lpattn_ctx *cu, lpattn_precision prec, int pasa) {
  lpattn_kv_pool_params pp;
  params(&pp, prec, LPATTN_F16, 16);
  pp.pasa = pasa;
  lpattn_kv_pool *p = NULL;
  CHECK_STATUS(lpattn_kv_pool_create(cu, &pp, NULL, 0, &p), LPATTN_ERR_UNSUPPORTED);
  CHECK(strstr(lpattn_last_error(), "576") != NULL, "message: %s", lpattn_last_error());
}

int main(void) {
  lpattn_ctx *cu = NULL, *ref = NULL;
  if (!ct_setup(&cu, &ref)) return 77;
  const lpattn_precision precs[3] = {LPATTN_PREC_HIGH, LPATTN_PREC_FP8, LPATTN_PREC_NVFP4};
  const lpattn_dtype dts[2] = {LPATTN_F16, LPATTN_BF16};
  const int hqs[2] = {16, 128};
  /* the first case says whether this build has the d576 variants (a HIP or
   * -Dvariants build may not: skip); then every case must run */
  if (!run(cu, ref, precs[0], dts[0], hqs[0])) {
    lpattn_free(cu), lpattn_free(ref);
    return 77;
  }
  for (int d = 0; d < 2; d++)
    for (int i = 0; i < 3; i++)
      for (int g = 0; g < 2; g++)
        if (d || i || g) CHECK(run(cu, ref, precs[i], dts[d], hqs[g]), "MLA pool %d/%d/%d: unsupported", d, i, g);
  refused(cu, LPATTN_PREC_MXFP4, 0), refused(cu, LPATTN_PREC_THRIFT, 0);
  refused(cu, LPATTN_PREC_FP8_STATIC, 0), refused(cu, LPATTN_PREC_NVFP4, 1);
  lpattn_free(cu), lpattn_free(ref);
  return test_finish();
}
