/* Prefill against the paged pool on the GPU (lpattn.h lpattn_paged_prefill,
 * lpattn_paged_prefill_varlen; SEMANTICS "Prefill against the paged pool"),
 * every pool kind the backend takes (HIGH, FP8, NVFP4, MXFP4, THRIFT with a
 * budget and with a fixed k, PASA, FP8_STATIC where the pool exists), five
 * sequences with cached lengths 0, 1, 63, 64 and 100 in one batch (GQA 4):
 * - counts 1, 5, 64, 65 and 200 against the ref backend's prefill on a pool
 *   holding the same tokens, within test_cuda_paged.c's decode bounds (O
 *   relative RMSE TOL, LSE and H max abs 2e-3);
 * - every row bitwise the GPU's paged decode of its position, the tokens
 *   appended one at a time (all five sequences a call) into a second pool;
 * - 200 tokens in four calls (5, 64, 65, 66) bitwise equal to one call;
 * - varlen (counts 65, 1, 200, 0, 64) bitwise equal to one call per
 *   sequence, and to the rows of the one-count call at the same positions;
 * - refused calls (kv_start, n = 0, paper selection, check_finite, q in
 *   another dtype than the pool's) write nothing and leave the pool as it
 *   was. Built for D = 128 f16 and D = 64 bf16 (tests/cuda/meson.build), and
 *   for HIP (tests/hip). Exit 77 without a GPU. */
#include "cudatest.h"

#ifndef PF_D
#define PF_D 128
#endif
#ifdef PF_BF16
#define HT LPATTN_BF16
#define TOL 5e-3
#else
#define HT LPATTN_F16
#define TOL 2e-3
#endif
enum { HQ = 8, HKV = 2, D = PF_D, T = 64, NS = 5, MAXN = 200, LM = 100 + MAXN, MAXP = 6, NC = 5 };
static const int CACHED[NS] = {0, 1, 63, 64, 100};
static const int COUNTS[NC] = {1, 5, 64, 65, 200};
static const int CHUNKS[4] = {5, 64, 65, 66};
static const int VCOUNT[NS] = {65, 1, 200, 0, 64};

typedef struct {
  lpattn_precision prec;
  int pasa;
  float budget; /* THRIFT: thrift_budget (0: thrift_k) */
  int k;
  const char *name;
} kind;

static ct_pair tk[NS], tv[NS], tq[NS]; /* sequence s's tokens [1, H, LM, D] */
static ct_pair nk, nv, nq;             /* the 200 new tokens of every sequence [NS, H, MAXN, D] */
static ct_pair desc;                   /* FP8_STATIC: k, v, q descales, {1, 1, NS, HKV} each */
static const kind *g_kind;

static lpattn_tensor i32(void *d, int64_t a, int64_t b) { return lpattn_tensor_4d(d, LPATTN_I32, 1, 1, a, b); }
static lpattn_tensor pick(const ct_pair *p, int dev) { return dev ? p->d : p->h; }
/* rows [r0, r0 + n) of entries [s0, s0 + ns) of t */
static lpattn_tensor sub(lpattn_tensor t, int s0, int ns, int r0, int n) {
  t.data = (char *)t.data + (size_t)(s0 * t.stride[0] + r0 * t.stride[2]) * ct_esize(t.dtype);
  t.shape[0] = ns, t.shape[2] = n;
  return t;
}
static lpattn_tensor descale(int dev, int which, int s0, int ns) {
  lpattn_tensor t = pick(&desc, dev);
  t.data = (float *)t.data + which * NS * HKV + s0 * HKV;
  t.shape[2] = ns;
  return t;
}

/* One backend's pool: slots and (shuffled) page tables, on the device for
 * the GPU, where lengths are uploaded before each call. */
typedef struct {
  lpattn_ctx *ctx;
  int dev;
  lpattn_kv_pool *pool;
  int32_t slot[NS], table[NS][MAXP], hl[NS];
  int32_t *ds, *dl, *dt;
} side;

static int side_make(side *S, lpattn_ctx *ctx, int dev, unsigned seed) {
  memset(S, 0, sizeof *S);
  S->ctx = ctx, S->dev = dev;
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = HKV, pp.num_q_heads = HQ, pp.head_dim = D, pp.page_size = T, pp.high_dtype = HT;
  pp.precision = g_kind->prec, pp.pasa = g_kind->pasa, pp.thrift_low = LPATTN_FMT_NVFP4;
  pp.num_pages = NS * MAXP, pp.num_slots = NS;
  const lpattn_status st = lpattn_kv_pool_create(ctx, &pp, NULL, 0, &S->pool);
  if (st == LPATTN_ERR_UNSUPPORTED && dev) return 0;
  CHECK_STATUS(st, LPATTN_OK);
  uint64_t r = seed * 2654435761u + 1;
  int32_t perm[NS * MAXP];
  for (int i = 0; i < NS * MAXP; i++) perm[i] = i;
  for (int i = NS * MAXP - 1; i > 0; i--) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    const int j = (int)((r >> 33) % (uint64_t)(i + 1)), x = perm[i];
    perm[i] = perm[j], perm[j] = x;
  }
  for (int s = 0; s < NS; s++) {
    S->slot[s] = NS - 1 - s;
    for (int i = 0; i < MAXP; i++) S->table[s][i] = perm[s * MAXP + i];
  }
  if (dev) {
    S->ds = ht_dalloc(sizeof S->slot), S->dl = ht_dalloc(sizeof S->hl), S->dt = ht_dalloc(sizeof S->table);
    ht_up(S->ds, S->slot, sizeof S->slot), ht_up(S->dt, S->table, sizeof S->table);
  }
  if (g_kind->prec == LPATTN_PREC_FP8_STATIC) {
    lpattn_tensor k = descale(dev, 0, 0, NS), v = descale(dev, 1, 0, NS);
    lpattn_tensor sl = dev ? i32(S->ds, 1, NS) : i32(S->slot, 1, NS);
    CHECK_STATUS(lpattn_kv_pool_set_descales(ctx, S->pool, &sl, &k, &v), LPATTN_OK);
  }
  return 1;
}
static void side_drop(side *S) {
  if (S->dev) ht_dsync(), ht_dfree(S->ds), ht_dfree(S->dl), ht_dfree(S->dt);
  lpattn_kv_pool_free(S->pool);
}

/* sequences [s0, s0 + ns) with lengths lens */
static lpattn_kv_batch batch(side *S, int s0, int ns, const int32_t *lens) {
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  int32_t mx = 0;
  for (int i = 0; i < ns; i++) mx = lens[i] > mx ? lens[i] : mx;
  if (S->dev) {
    ht_dsync(); /* the previous call may still read the lengths */
    ht_up(S->dl + s0, lens, (size_t)ns * 4);
    b.slots = i32(S->ds + s0, 1, ns), b.lengths = i32(S->dl + s0, 1, ns);
    b.page_table = i32(S->dt + s0 * MAXP, ns, MAXP);
  } else {
    memcpy(S->hl + s0, lens, (size_t)ns * 4);
    b.slots = i32(S->slot + s0, 1, ns), b.lengths = i32(S->hl + s0, 1, ns);
    b.page_table = i32(S->table[s0], ns, MAXP);
  }
  b.num_seqs = ns, b.max_length = mx;
  return b;
}

static lpattn_attn_params params(int dev, int s0, int ns) {
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  if (g_kind->budget > 0) p.thrift_budget = g_kind->budget;
  if (g_kind->k > 0) p.thrift_k = g_kind->k;
  if (g_kind->prec == LPATTN_PREC_FP8_STATIC) p.q_descale = descale(dev, 2, s0, ns);
  return p;
}

/* the cached tokens, sequence by sequence (queries recorded) */
static void prefix(side *S) {
  for (int s = 0; s < NS; s++) {
    if (!CACHED[s]) continue;
    const int32_t zero = 0;
    lpattn_kv_batch b = batch(S, s, 1, &zero);
    lpattn_tensor k = sub(pick(&tk[s], S->dev), 0, 1, 0, CACHED[s]), v = sub(pick(&tv[s], S->dev), 0, 1, 0, CACHED[s]);
    lpattn_tensor q = sub(pick(&tq[s], S->dev), 0, 1, 0, CACHED[s]);
    CHECK_STATUS(lpattn_kv_append(S->ctx, S->pool, &b, &k, &v, &q), LPATTN_OK);
  }
}

typedef struct { ct_pair o, l, h; } res; /* [NS, HQ, MAXN, D | 1] f32, or packed [1, HQ, total, .] */
static res res_make(int b, int rows) {
  res r = {ct_make(LPATTN_F32, b, HQ, rows, D), ct_make(LPATTN_F32, b, HQ, rows, 1), ct_make(LPATTN_F32, b, HQ, rows, 1)};
  ct_poison(&r.o), ct_poison(&r.l), ct_poison(&r.h);
  return r;
}
static void res_down(res *r) { ct_down(&r->o), ct_down(&r->l), ct_down(&r->h); }
static void res_free(res *r) { ct_free(&r->o), ct_free(&r->l), ct_free(&r->h); }

/* new tokens [a, e) of sequences [s0, s0 + ns) (cached lengths + a before),
 * rows [a, e) of r */
static lpattn_status prefill(side *S, int s0, int ns, int a, int e, res *r) {
  int32_t lens[NS];
  for (int i = 0; i < ns; i++) lens[i] = CACHED[s0 + i] + a;
  lpattn_kv_batch b = batch(S, s0, ns, lens);
  lpattn_tensor k = sub(pick(&nk, S->dev), s0, ns, a, e - a), v = sub(pick(&nv, S->dev), s0, ns, a, e - a);
  lpattn_tensor q = sub(pick(&nq, S->dev), s0, ns, a, e - a), o = sub(pick(&r->o, S->dev), s0, ns, a, e - a);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = sub(pick(&r->l, S->dev), s0, ns, a, e - a), aux.entropy = sub(pick(&r->h, S->dev), s0, ns, a, e - a);
  const lpattn_attn_params p = params(S->dev, s0, ns);
  return lpattn_paged_prefill(S->ctx, S->pool, &b, &k, &v, &q, &o, &p, &aux);
}

/* n rows of entry sa from row ra of a (RA rows a head) and of entry sb from
 * row rb of b (RB): bitwise (host copies) */
static int same_at(const res *a, int sa, int ra, int RA, const res *b, int sb, int rb, int RB, int n) {
  const ct_pair *x[3] = {&a->o, &a->l, &a->h}, *y[3] = {&b->o, &b->l, &b->h};
  for (int i = 0; i < 3; i++) {
    const int w = i ? 1 : D;
    for (int h = 0; h < HQ; h++) {
      const float *p = (const float *)x[i]->h.data + ((size_t)(sa * HQ + h) * RA + ra) * w;
      const float *q = (const float *)y[i]->h.data + ((size_t)(sb * HQ + h) * RB + rb) * w;
      if (memcmp(p, q, (size_t)n * w * 4)) return 0;
    }
  }
  return 1;
}
static int same_rows(const res *a, const res *b, int s, int n) { return same_at(a, s, 0, MAXN, b, s, 0, MAXN, n); }

/* rows [0, n) of entry s as [1, HQ, n, .] views of the host copies */
static void errs(const res *g, const res *r, int s, int n, double *eo, double *el, double *eh) {
  lpattn_tensor go = sub(g->o.h, s, 1, 0, n), ro = sub(r->o.h, s, 1, 0, n);
  lpattn_tensor gl = sub(g->l.h, s, 1, 0, n), rl = sub(r->l.h, s, 1, 0, n);
  lpattn_tensor gh = sub(g->h.h, s, 1, 0, n), rh = sub(r->h.h, s, 1, 0, n);
  /* views of contiguous buffers: copy to dense tensors for the helpers */
  ct_pair a = ct_make(LPATTN_F32, 1, HQ, n, D), b = ct_make(LPATTN_F32, 1, HQ, n, D);
  ct_pair c = ct_make(LPATTN_F32, 1, HQ, n, 1), d = ct_make(LPATTN_F32, 1, HQ, n, 1);
  ct_pair e = ct_make(LPATTN_F32, 1, HQ, n, 1), f = ct_make(LPATTN_F32, 1, HQ, n, 1);
  for (int h = 0; h < HQ; h++) {
    memcpy((float *)a.h.data + (size_t)h * n * D, (float *)go.data + h * go.stride[1], (size_t)n * D * 4);
    memcpy((float *)b.h.data + (size_t)h * n * D, (float *)ro.data + h * ro.stride[1], (size_t)n * D * 4);
    memcpy((float *)c.h.data + (size_t)h * n, (float *)gl.data + h * gl.stride[1], (size_t)n * 4);
    memcpy((float *)d.h.data + (size_t)h * n, (float *)rl.data + h * rl.stride[1], (size_t)n * 4);
    memcpy((float *)e.h.data + (size_t)h * n, (float *)gh.data + h * gh.stride[1], (size_t)n * 4);
    memcpy((float *)f.h.data + (size_t)h * n, (float *)rh.data + h * rh.stride[1], (size_t)n * 4);
  }
  *eo = ct_relerr(&a.h, &b.h), *el = ct_maxabs(&c.h, &d.h), *eh = ct_maxabs(&e.h, &f.h);
  ct_free(&a), ct_free(&b), ct_free(&c), ct_free(&d), ct_free(&e), ct_free(&f);
}


/* every row bitwise the decode of its position: a second pool, the n new
 * tokens appended one at a time (all sequences a call), each decoded */
static void vs_decode(lpattn_ctx *cu, const res *g, int n) {
  side S;
  CHECK(side_make(&S, cu, 1, 9), "pool");
  prefix(&S);
  res d = res_make(NS, MAXN);
  for (int t = 0; t < n; t++) {
    int32_t lens[NS];
    for (int s = 0; s < NS; s++) lens[s] = CACHED[s] + t;
    lpattn_kv_batch b = batch(&S, 0, NS, lens);
    lpattn_tensor k = sub(nk.d, 0, NS, t, 1), v = sub(nv.d, 0, NS, t, 1), q = sub(nq.d, 0, NS, t, 1);
    CHECK_STATUS(lpattn_kv_append(cu, S.pool, &b, &k, &v, &q), LPATTN_OK);
    for (int s = 0; s < NS; s++) lens[s]++;
    b = batch(&S, 0, NS, lens);
    lpattn_tensor o = sub(d.o.d, 0, NS, t, 1);
    lpattn_attn_aux aux;
    lpattn_attn_aux_init(&aux);
    aux.lse = sub(d.l.d, 0, NS, t, 1), aux.entropy = sub(d.h.d, 0, NS, t, 1);
    const lpattn_attn_params p = params(1, 0, NS);
    CHECK_STATUS(lpattn_paged_decode(cu, S.pool, &b, &q, &o, &p, &aux), LPATTN_OK);
  }
  res_down(&d);
  for (int s = 0; s < NS; s++)
    CHECK(same_rows(g, &d, s, n), "%s n %d seq %d (cached %d): prefill rows differ from decode rows", g_kind->name,
          n, s, CACHED[s]);
  side_drop(&S), res_free(&d);
}

/* varlen (VCOUNT) against one call per sequence and the one-count rows `all` */
static void varlen(lpattn_ctx *cu, const res *all) {
  int32_t cuh[NS + 1] = {0};
  for (int s = 0; s < NS; s++) cuh[s + 1] = cuh[s] + VCOUNT[s];
  const int total = cuh[NS];
  ct_pair pk = ct_make(HT, 1, HKV, total, D), pv = ct_make(HT, 1, HKV, total, D), pq = ct_make(HT, 1, HQ, total, D);
  const ct_pair *src[3] = {&nk, &nv, &nq};
  ct_pair *dst[3] = {&pk, &pv, &pq};
  for (int w = 0; w < 3; w++) {
    const int H = w == 2 ? HQ : HKV;
    for (int s = 0; s < NS; s++)
      for (int h = 0; h < H; h++)
        memcpy((uint16_t *)dst[w]->h.data + ((size_t)h * total + cuh[s]) * D,
               (uint16_t *)src[w]->h.data + ((size_t)(s * H + h) * MAXN) * D, (size_t)VCOUNT[s] * D * 2);
    ct_up(dst[w]);
  }
  side S;
  CHECK(side_make(&S, cu, 1, 31), "pool");
  prefix(&S);
  res r = res_make(1, total);
  int32_t lens[NS];
  for (int s = 0; s < NS; s++) lens[s] = CACHED[s];
  lpattn_kv_batch b = batch(&S, 0, NS, lens);
  const lpattn_tensor cut = lpattn_tensor_4d(cuh, LPATTN_I32, 1, 1, 1, NS + 1);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = r.l.d, aux.entropy = r.h.d;
  const lpattn_attn_params p = params(1, 0, NS);
  CHECK_STATUS(lpattn_paged_prefill_varlen(cu, S.pool, &b, &pk.d, &pv.d, &pq.d, &r.o.d, &cut, &p, &aux), LPATTN_OK);
  res_down(&r);
  side_drop(&S);
  CHECK(side_make(&S, cu, 1, 41), "pool");
  prefix(&S);
  res one = res_make(NS, MAXN);
  for (int s = 0; s < NS; s++)
    if (VCOUNT[s]) CHECK_STATUS(prefill(&S, s, 1, 0, VCOUNT[s], &one), LPATTN_OK);
  res_down(&one);
  for (int s = 0; s < NS; s++) {
    CHECK(same_at(&r, 0, cuh[s], total, &one, s, 0, MAXN, VCOUNT[s]), "%s varlen seq %d: differs from its own call",
          g_kind->name, s);
    CHECK(same_rows(&one, all, s, VCOUNT[s]), "%s varlen seq %d: differs from the 200-token call's rows",
          g_kind->name, s);
  }
  side_drop(&S), res_free(&r), res_free(&one);
  ct_free(&pk), ct_free(&pv), ct_free(&pq);
}

static int run_kind(lpattn_ctx *cu, lpattn_ctx *ref, const kind *kd) {
  g_kind = kd;
  side G, R;
  if (!side_make(&G, cu, 1, 3)) {
    printf("%s: no such pool on " CT_NAME "\n", kd->name);
    return 0;
  }
  side_drop(&G);
  res all = res_make(NS, MAXN); /* the 200-token call's rows */
  for (int c = 0; c < NC; c++) {
    const int n = COUNTS[c];
    res g = res_make(NS, MAXN), r = res_make(NS, MAXN);
    CHECK(side_make(&G, cu, 1, 3 + c) && side_make(&R, ref, 0, 5), "pools");
    prefix(&G), prefix(&R);
    CHECK_STATUS(prefill(&G, 0, NS, 0, n, &g), LPATTN_OK);
    CHECK_STATUS(prefill(&R, 0, NS, 0, n, &r), LPATTN_OK);
    res_down(&g);
    for (int s = 0; s < NS; s++) {
      double eo, el, eh;
      errs(&g, &r, s, n, &eo, &el, &eh);
      printf("prefill vs ref D=%d %s %s n=%d cached=%d: O %.2e LSE %.2e H %.2e\n", D,
             HT == LPATTN_F16 ? "f16" : "bf16", kd->name, n, CACHED[s], eo, el, eh);
      CHECK(eo < TOL && el < 2e-3 && eh < 2e-3, "%s n %d seq %d: O %g LSE %g H %g", kd->name, n, s, eo, el, eh);
    }
    if (n >= T) vs_decode(cu, &g, n);
    if (n == MAXN) {
      memcpy(all.o.h.data, g.o.h.data, g.o.bytes), memcpy(all.l.h.data, g.l.h.data, g.l.bytes);
      memcpy(all.h.h.data, g.h.h.data, g.h.bytes);
    }
    side_drop(&G), side_drop(&R), res_free(&g), res_free(&r);
  }
  { /* chunked: four calls equal one */
    res ch = res_make(NS, MAXN);
    CHECK(side_make(&G, cu, 1, 21), "pool");
    prefix(&G);
    for (int i = 0, a = 0; i < 4; a += CHUNKS[i++]) CHECK_STATUS(prefill(&G, 0, NS, a, a + CHUNKS[i], &ch), LPATTN_OK);
    res_down(&ch);
    for (int s = 0; s < NS; s++) CHECK(same_rows(&ch, &all, s, MAXN), "%s seq %d: chunked differs from one call", kd->name, s);
    side_drop(&G), res_free(&ch);
  }
  varlen(cu, &all);
  res_free(&all);
  printf("%s: prefill rows = decode rows, chunked = one call, varlen = per sequence (bitwise)\n", kd->name);
  return 1;
}

/* refused calls write nothing; the pool goes on as if they never came */
static void errors(lpattn_ctx *cu) {
  static const kind knv = {LPATTN_PREC_NVFP4, 0, 0, 0, "nvfp4"}, kth = {LPATTN_PREC_THRIFT, 0, 0.25f, 0, "thrift"};
  g_kind = &knv;
  side G, F;
  CHECK(side_make(&G, cu, 1, 51), "pool");
  prefix(&G);
  res r = res_make(NS, MAXN), f = res_make(NS, MAXN);
  int32_t lens[NS];
  for (int s = 0; s < NS; s++) lens[s] = CACHED[s];
  lpattn_kv_batch b = batch(&G, 0, NS, lens), bad = b;
  lpattn_tensor k = sub(nk.d, 0, NS, 0, 65), v = sub(nv.d, 0, NS, 0, 65), q = sub(nq.d, 0, NS, 0, 65);
  lpattn_tensor o = sub(r.o.d, 0, NS, 0, 65);
  lpattn_attn_params p = params(1, 0, NS);
  bad = b, bad.kv_start = bad.q_start = b.lengths;
  CHECK_STATUS(lpattn_paged_prefill(cu, G.pool, &bad, &k, &v, &q, &o, &p, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_tensor k0 = k, v0 = v, q0 = q, o0 = o;
  k0.shape[2] = v0.shape[2] = q0.shape[2] = o0.shape[2] = 0;
  CHECK_STATUS(lpattn_paged_prefill(cu, G.pool, &b, &k0, &v0, &q0, &o0, &p, NULL), LPATTN_ERR_BAD_SHAPE);
  p.check_finite = 1;
  CHECK_STATUS(lpattn_paged_prefill(cu, G.pool, &b, &k, &v, &q, &o, &p, NULL), LPATTN_ERR_UNSUPPORTED);
  p.check_finite = 0;
  ct_pair q32 = ct_make(LPATTN_F32, NS, HQ, 65, D);
  ct_fill(&q32, 0, 1);
  CHECK_STATUS(lpattn_paged_prefill(cu, G.pool, &b, &k, &v, &q32.d, &o, &p, NULL), LPATTN_ERR_UNSUPPORTED);
  CHECK(strstr(lpattn_last_error(), "high dtype") != NULL, "q dtype: %s", lpattn_last_error());
  ct_free(&q32);
  g_kind = &kth;
  side Th;
  if (side_make(&Th, cu, 1, 52)) {
    lpattn_kv_batch bt = batch(&Th, 0, NS, lens);
    lpattn_attn_params pt = params(1, 0, NS);
    pt.selection = LPATTN_SELECT_PAPER;
    CHECK_STATUS(lpattn_paged_prefill(cu, Th.pool, &bt, &k, &v, &q, &o, &pt, NULL), LPATTN_ERR_UNSUPPORTED);
    CHECK(strstr(lpattn_last_error(), "paper") != NULL, "paper: %s", lpattn_last_error());
    side_drop(&Th);
  }
  g_kind = &knv;
  res_down(&r);
  int untouched = 1;
  for (size_t i = 0; i < r.o.bytes; i++) untouched &= ((const uint8_t *)r.o.h.data)[i] == 0xFF;
  CHECK(untouched, "a refused call wrote out");
  CHECK_STATUS(prefill(&G, 0, NS, 0, 65, &r), LPATTN_OK);
  CHECK(side_make(&F, cu, 1, 53), "pool");
  prefix(&F);
  CHECK_STATUS(prefill(&F, 0, NS, 0, 65, &f), LPATTN_OK);
  res_down(&r), res_down(&f);
  for (int s = 0; s < NS; s++) CHECK(same_rows(&r, &f, s, 65), "seq %d: refused calls changed the pool", s);
  side_drop(&G), side_drop(&F), res_free(&r), res_free(&f);
  printf("refused prefills (kv_start, n = 0, check_finite, q dtype, paper) wrote nothing\n");
}

int main(void) {
  lpattn_ctx *cu = NULL, *ref = NULL;
  if (!ct_setup(&cu, &ref)) return 77;
  for (int s = 0; s < NS; s++) {
    tk[s] = ct_make(HT, 1, HKV, LM, D), tv[s] = ct_make(HT, 1, HKV, LM, D), tq[s] = ct_make(HT, 1, HQ, LM, D);
    ct_fill(&tk[s], 0.4, 1), ct_fill(&tv[s], 0, 1), ct_fill(&tq[s], 0, 1);
  }
  nk = ct_make(HT, NS, HKV, MAXN, D), nv = ct_make(HT, NS, HKV, MAXN, D), nq = ct_make(HT, NS, HQ, MAXN, D);
  const ct_pair *src[3] = {tk, tv, tq};
  ct_pair *dst[3] = {&nk, &nv, &nq};
  for (int w = 0; w < 3; w++) {
    const int H = w == 2 ? HQ : HKV;
    for (int s = 0; s < NS; s++)
      for (int h = 0; h < H; h++)
        memcpy((uint16_t *)dst[w]->h.data + ((size_t)(s * H + h) * MAXN) * D,
               (uint16_t *)src[w][s].h.data + ((size_t)h * LM + CACHED[s]) * D, (size_t)MAXN * D * 2);
    ct_up(dst[w]);
  }
  desc = ct_make(LPATTN_F32, 1, 1, 3 * NS, HKV);
  for (int i = 0; i < 3 * NS * HKV; i++) ((float *)desc.h.data)[i] = (i < NS * HKV ? 0.01f : 0.008f) * (1 + i % 3);
  ct_up(&desc);
  static const kind kinds[] = {
      {LPATTN_PREC_HIGH, 0, 0, 0, "high"},        {LPATTN_PREC_FP8, 0, 0, 0, "fp8"},
      {LPATTN_PREC_NVFP4, 0, 0, 0, "nvfp4"},      {LPATTN_PREC_MXFP4, 0, 0, 0, "mxfp4"},
      {LPATTN_PREC_THRIFT, 0, 0.25f, 0, "thrift budget 0.25"},
      {LPATTN_PREC_THRIFT, 0, 0, 3, "thrift k 3"}, {LPATTN_PREC_NVFP4, 1, 0, 0, "nvfp4 pasa"},
      {LPATTN_PREC_HIGH, 1, 0, 0, "high pasa"},   {LPATTN_PREC_THRIFT, 1, 0.25f, 0, "thrift pasa"},
      {LPATTN_PREC_FP8_STATIC, 0, 0, 0, "fp8_static"},
  };
  int ran = 0;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) ran += run_kind(cu, ref, &kinds[i]);
  if (ran) errors(cu);
  for (int s = 0; s < NS; s++) ct_free(&tk[s]), ct_free(&tv[s]), ct_free(&tq[s]);
  ct_free(&nk), ct_free(&nv), ct_free(&nq), ct_free(&desc);
  lpattn_free(cu), lpattn_free(ref);
  if (!ran) return 77;
  return test_finish();
}
