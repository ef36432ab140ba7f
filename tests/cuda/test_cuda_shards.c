/* CUDA (and HIP, tests/hip) sharded paged decode (lpattn.h lpattn_kv_batch kv_start/q_start,
 * SEMANTICS "Sharded paged decode"): each "rank" is a device pool holding a
 * run of each sequence's pages; the ranks' decodes with positions, merged by
 * SPEC 7 (in f64 here, key order), equal the single-pool decode:
 * - cut at a chunk border (LP_DECODE_CHUNK_TILES pages): every precision
 *   within f32 merge rounding (the chunks are the whole decode's);
 * - cut inside a chunk: HIGH within f32 rounding, NVFP4 within SEMANTICS'
 *   bound (the chunks at the cut quantize P against their own running max);
 * - the last shard alone with kv_start = 0 is bitwise the default decode.
 * Sq = 1 and 3. Exit 77 without a GPU. */
#include "cudatest.h"
#include "kvpage.h"

enum { T = 64, HQ = 4, HKV = 2, D = 64, NS = 2, MAXP = 48 };
static const int LEN[NS] = {40 * T + 5, 37 * T + 20};
static ct_pair K[NS], V[NS];

typedef struct {
  lpattn_kv_pool *pool;
  int32_t *d_tab, *d_slot, *d_len, *d_kv, *d_q;
  int32_t a[NS], b[NS]; /* tokens [a, b) of each sequence */
} shard_t;

static lpattn_tensor i32(void *d, int64_t n) { return lpattn_tensor_4d(d, LPATTN_I32, 1, 1, 1, n); }
static lpattn_tensor rows(const lpattn_tensor *t, int64_t pos, int64_t n) {
  lpattn_tensor x = *t;
  x.data = (char *)t->data + (size_t)pos * t->stride[2] * 2, x.shape[2] = n;
  return x;
}

static int shard_make(lpattn_ctx *cu, shard_t *r, lpattn_precision prec, const int32_t *a, const int32_t *b) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = HKV, pp.num_q_heads = HQ, pp.head_dim = D, pp.page_size = T, pp.precision = prec;
  pp.num_pages = NS * MAXP, pp.num_slots = NS, pp.high_dtype = LPATTN_F16;
  memset(r, 0, sizeof *r);
  if (lpattn_kv_pool_create(cu, &pp, NULL, 0, &r->pool) != LPATTN_OK) return 0;
  int32_t tab[NS * MAXP], slots[NS] = {0, 1};
  for (int i = 0; i < NS * MAXP; i++) tab[i] = i;
  r->d_tab = ht_dalloc(sizeof tab), r->d_slot = ht_dalloc(NS * 4), r->d_len = ht_dalloc(NS * 4);
  r->d_kv = ht_dalloc(NS * 4), r->d_q = ht_dalloc(NS * 4);
  ht_up(r->d_tab, tab, sizeof tab), ht_up(r->d_slot, slots, sizeof slots);
  for (int s = 0; s < NS; s++) {
    r->a[s] = a[s], r->b[s] = b[s];
    for (int at = a[s]; at < b[s]; at += 300) { /* appends of 300 tokens: across page borders */
      const int n = b[s] - at < 300 ? b[s] - at : 300, have = at - a[s];
      ht_dsync();
      ht_up(r->d_len + s, &have, 4);
      lpattn_kv_batch bt;
      lpattn_kv_batch_init(&bt);
      bt.num_seqs = 1, bt.slots = i32(r->d_slot + s, 1), bt.lengths = i32(r->d_len + s, 1);
      bt.page_table = lpattn_tensor_4d(r->d_tab + s * MAXP, LPATTN_I32, 1, 1, 1, MAXP), bt.max_length = have;
      lpattn_tensor k = rows(&K[s].d, at, n), v = rows(&V[s].d, at, n);
      CHECK_STATUS(lpattn_kv_append(cu, r->pool, &bt, &k, &v, NULL), LPATTN_OK);
    }
  }
  return 1;
}
static void shard_free(shard_t *r) {
  lpattn_kv_pool_free(r->pool);
  ht_dfree(r->d_tab), ht_dfree(r->d_slot), ht_dfree(r->d_len), ht_dfree(r->d_kv), ht_dfree(r->d_q);
}

/* both sequences' last sq rows (q [NS, HQ, sq, D]) against the shard: o, lse on the host */
static void decode(lpattn_ctx *cu, shard_t *r, const ct_pair *q, int sq, int positions, ct_pair *o, ct_pair *l) {
  int32_t lens[NS], kv[NS], qs[NS], maxlen = 0;
  for (int s = 0; s < NS; s++) {
    lens[s] = r->b[s] - r->a[s], kv[s] = r->a[s], qs[s] = LEN[s] - sq;
    maxlen = lens[s] > maxlen ? lens[s] : maxlen;
  }
  ht_dsync();
  ht_up(r->d_len, lens, sizeof lens), ht_up(r->d_kv, kv, sizeof kv), ht_up(r->d_q, qs, sizeof qs);
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = NS, b.slots = i32(r->d_slot, NS), b.lengths = i32(r->d_len, NS), b.max_length = maxlen;
  b.page_table = lpattn_tensor_4d(r->d_tab, LPATTN_I32, 1, 1, NS, MAXP);
  if (positions) b.kv_start = i32(r->d_kv, NS), b.q_start = i32(r->d_q, NS);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = l->d;
  CHECK_STATUS(lpattn_paged_decode(cu, r->pool, &b, &q->d, &o->d, &ap, &aux), LPATTN_OK);
  ct_down(o), ct_down(l);
}

/* shards cut at `cut` tokens (a multiple of T, before both last tiles) vs the whole pool */
static void vs_whole(lpattn_ctx *cu, lpattn_precision prec, int cut, int sq, double bound, int rel) {
  const int32_t z[NS] = {0, 0}, c[NS] = {cut, cut}, e[NS] = {LEN[0], LEN[1]};
  shard_t w, s0, s1;
  if (!shard_make(cu, &w, prec, z, e)) return;
  CHECK(shard_make(cu, &s0, prec, z, c) && shard_make(cu, &s1, prec, c, e), "shard pools");
  ct_pair q = ct_make(LPATTN_F16, NS, HQ, sq, D);
  ct_fill(&q, 0, 1);
  ct_pair o[3], l[3];
  for (int i = 0; i < 3; i++) o[i] = ct_make(LPATTN_F32, NS, HQ, sq, D), l[i] = ct_make(LPATTN_F32, NS, HQ, sq, 1);
  decode(cu, &w, &q, sq, 0, &o[0], &l[0]);
  decode(cu, &s0, &q, sq, 1, &o[1], &l[1]);
  decode(cu, &s1, &q, sq, 1, &o[2], &l[2]);
  double maxo = 0, maxl = 0, num = 0, den = 0;
  for (int row = 0; row < NS * HQ * sq; row++) {
    const double l0 = ((float *)l[1].h.data)[row], l1 = ((float *)l[2].h.data)[row];
    const double m = l0 > l1 ? l0 : l1, L = m + log(exp(l0 - m) + exp(l1 - m));
    const double w0 = exp(l0 - L), w1 = exp(l1 - L);
    maxl = fmax(maxl, fabs(L - ((float *)l[0].h.data)[row]));
    for (int d = 0; d < D; d++) {
      const size_t i = (size_t)row * D + d;
      const double y = w0 * ((float *)o[1].h.data)[i] + w1 * ((float *)o[2].h.data)[i], x = ((float *)o[0].h.data)[i];
      maxo = fmax(maxo, fabs(y - x)), num += (y - x) * (y - x), den += x * x;
    }
  }
  const double err = rel ? sqrt(num / den) : maxo;
  printf("shards cut %d (%s) prec %d Sq %d: %s %.2e, max |dLSE| %.2e\n", cut,
         cut % (T * LP_DECODE_CHUNK_TILES) ? "inside a chunk" : "chunk border", (int)prec, sq,
         rel ? "rel L2 O" : "max |dO|", err, maxl);
  CHECK(err <= bound && maxl <= 1e-4, "shards cut %d prec %d Sq %d: O %g LSE %g", cut, (int)prec, sq, err, maxl);
  /* the last shard alone (kv_start 0): bitwise the default decode */
  ct_pair o3 = ct_make(LPATTN_F32, NS, HQ, sq, D), l3 = ct_make(LPATTN_F32, NS, HQ, sq, 1);
  decode(cu, &w, &q, sq, 1, &o3, &l3);
  CHECK(!memcmp(o3.h.data, o[0].h.data, (size_t)NS * HQ * sq * D * 4) &&
            !memcmp(l3.h.data, l[0].h.data, (size_t)NS * HQ * sq * 4),
        "positions (0, len - Sq) differ from the default decode, prec %d", (int)prec);
  ct_free(&o3), ct_free(&l3), ct_free(&q);
  for (int i = 0; i < 3; i++) ct_free(&o[i]), ct_free(&l[i]);
  shard_free(&w), shard_free(&s0), shard_free(&s1);
}

int main(void) {
  lpattn_ctx *cu = NULL, *ref = NULL;
  if (!ct_setup(&cu, &ref)) return test_skip("no usable GPU device");
  for (int s = 0; s < NS; s++) {
    K[s] = ct_make(LPATTN_F16, 1, HKV, LEN[s], D), V[s] = ct_make(LPATTN_F16, 1, HKV, LEN[s], D);
    ct_fill(&K[s], 0.4, 1), ct_fill(&V[s], 0, 1);
  }
  const lpattn_precision precs[4] = {LPATTN_PREC_HIGH, LPATTN_PREC_NVFP4, LPATTN_PREC_FP8, LPATTN_PREC_MXFP4};
  for (int sq = 1; sq <= 3; sq += 2) {
    for (int i = 0; i < 4; i++) vs_whole(cu, precs[i], 16 * T, sq, 1e-5, 0); /* chunk border */
    /* inside a chunk: the GPU's high tiles round P = exp(s - m) to f16 after
     * the running max m, which the cut changes: f16 ulps of P (H100: 1.4e-5) */
    vs_whole(cu, LPATTN_PREC_HIGH, 20 * T, sq, 1e-4, 0);
    vs_whole(cu, LPATTN_PREC_NVFP4, 20 * T, sq, 2e-3, 1);
  }
  for (int s = 0; s < NS; s++) ct_free(&K[s]), ct_free(&V[s]);
  CHECK(ht_dsync(), "device error");
  lpattn_free(cu), lpattn_free(ref);
  return test_finish();
}
