/* Paged KV pool on the GPU (SPEC 9): decode through page tables against the
 * ref backend's rows with the decode's chunking (chunks of
 * LP_DECODE_CHUNK_TILES tiles: every chunk but the last is a non-causal
 * attention over its keys, the last a causal prefill of its rows, merged by
 * SPEC 7 in chunk order); shuffled pages give bitwise the same outputs; a
 * batch of mixed lengths equals each sequence decoded alone (bitwise);
 * appending one token at a time equals appending many; a sequence forked
 * from another (shared completed pages, slot copied) equals the same tokens
 * appended to a pool of their own (bitwise); a CUDA graph of
 * append + decode replays to the same bits (CUDA only); THRIFT (budget and
 * fixed k, causal and paper selection) and PASA pools against the ref
 * backend's pool holding the same tokens and queries. Built for HIP too
 * (tests/hip). Exit 77 without a GPU, or when the backend has no paged
 * decode (or, on HIP, no THRIFT/PASA pool yet). */
#include "cudatest.h"
#include "kvpage.h"
#include "../../backends/gpu/gpu_decode_plan.h" /* the paged decode's plan: its chunks */
#if !defined(LPATTN_TEST_HIP)
#include <cuda_runtime_api.h>
#endif

/* built twice (tests/cuda/meson.build): D = 128 f16, and D = 64 bf16 */
#ifndef PAGED_D
#define PAGED_D 128
#endif
#ifdef PAGED_BF16
#define HT LPATTN_BF16
#define TOL 5e-3
#else
#define HT LPATTN_F16
#define TOL 2e-3
#endif
enum { HQ = 8, HKV = 2, D = PAGED_D, T = 64, NS = 3, MAXP = 48 };
static int LEN[NS] = {2200, 450, 70}; /* the prefix case changes them for a while */

typedef struct { /* one sequence's tokens: host + device, [1, H, L, D] f16 */
  ct_pair k, v, q;
  int L;
} seqdata;

typedef struct {
  lpattn_kv_pool *pool;
  int32_t table[NS][MAXP];
  int32_t *d_table, *d_slot, *d_len; /* per sequence: MAXP ids, 1 slot, 1 length */
} pooled;

static lpattn_tensor i32(void *d, int64_t a, int64_t b) { return lpattn_tensor_4d(d, LPATTN_I32, 1, 1, a, b); }
static lpattn_tensor view(const lpattn_tensor *t, int64_t pos, int64_t n) {
  lpattn_tensor x = *t;
  x.data = (char *)t->data + (size_t)pos * t->stride[2] * 2;
  x.shape[2] = n;
  return x;
}

static int g_pasa; /* pools made with PASA (vs_ref_pool) */
static void pool_params(lpattn_kv_pool_params *pp, lpattn_precision prec) {
  lpattn_kv_pool_params_init(pp);
  pp->num_kv_heads = HKV, pp->num_q_heads = HQ, pp->head_dim = D, pp->page_size = T, pp->pasa = g_pasa;
  pp->precision = prec, pp->num_pages = NS * MAXP, pp->num_slots = NS + 1, pp->high_dtype = HT;
}
static int pool_make(lpattn_ctx *cu, pooled *P, lpattn_precision prec, unsigned seed) {
  lpattn_kv_pool_params pp;
  pool_params(&pp, prec);
  lpattn_status st = lpattn_kv_pool_create(cu, &pp, NULL, 0, &P->pool);
  if (st == LPATTN_ERR_UNSUPPORTED) return 0;
  CHECK_STATUS(st, LPATTN_OK);
  /* pages: a permutation of the pool by `seed` */
  int32_t perm[NS * MAXP];
  for (int i = 0; i < NS * MAXP; i++) perm[i] = i;
  uint64_t r = seed * 2654435761u + 1;
  for (int i = NS * MAXP - 1; i > 0 && seed; i--) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    int j = (int)((r >> 33) % (uint64_t)(i + 1)), x = perm[i];
    perm[i] = perm[j], perm[j] = x;
  }
  P->d_table = ht_dalloc(sizeof P->table), P->d_slot = ht_dalloc(NS * 4), P->d_len = ht_dalloc(NS * 4);
  int32_t slots[NS];
  for (int s = 0; s < NS; s++) {
    slots[s] = NS - s; /* slot order differs from sequence order */
    for (int i = 0; i < MAXP; i++) P->table[s][i] = perm[s * MAXP + i];
  }
  ht_up(P->d_table, P->table, sizeof P->table), ht_up(P->d_slot, slots, sizeof slots);
  return 1;
}
static void pool_drop(pooled *P) {
  lpattn_kv_pool_free(P->pool);
  ht_dfree(P->d_table), ht_dfree(P->d_slot), ht_dfree(P->d_len);
}

/* sequence s's batch of one, its length on the device set to len */
static lpattn_kv_batch one(pooled *P, int s, int len) {
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  ht_dsync(); /* the previous call may still read the length (contexts on other streams) */
  ht_up(P->d_len + s, &len, 4);
  b.num_seqs = 1, b.slots = i32(P->d_slot + s, 1, 1), b.lengths = i32(P->d_len + s, 1, 1);
  b.page_table = i32(P->d_table + s * MAXP, 1, MAXP), b.max_length = len;
  return b;
}

/* tokens [0, upto) of sequence s in appends of `step` tokens */
static void fill(lpattn_ctx *cu, pooled *P, const seqdata *sd, int s, int from, int upto, int step) {
  for (int at = from; at < upto; at += step) {
    const int n = upto - at < step ? upto - at : step;
    lpattn_kv_batch b = one(P, s, at);
    lpattn_tensor k = view(&sd[s].k.d, at, n), v = view(&sd[s].v.d, at, n);
    CHECK_STATUS(lpattn_kv_append(cu, P->pool, &b, &k, &v, NULL), LPATTN_OK);
  }
}

typedef struct { ct_pair o, l, h; } outs;
static outs outs_make(int ns, int sq) {
  outs o = {ct_make(LPATTN_F32, ns, HQ, sq, D), ct_make(LPATTN_F32, ns, HQ, sq, 1), ct_make(LPATTN_F32, ns, HQ, sq, 1)};
  ct_poison(&o.o), ct_poison(&o.l), ct_poison(&o.h);
  return o;
}
static void outs_free(outs *o) { ct_free(&o->o), ct_free(&o->l), ct_free(&o->h); }

/* decode sequences idx[0..n) (lengths LEN) with their last sq queries */
static const lpattn_attn_params *g_ap; /* decode params (NULL: defaults) */
static lpattn_status decode(lpattn_ctx *cu, pooled *P, const seqdata *sd, const int *idx, int n, int sq, outs *o) {
  int32_t slots[NS], lens[NS], tab[NS][MAXP], maxlen = 0;
  ct_pair q = ct_make(HT, n, HQ, sq, D);
  for (int i = 0; i < n; i++) {
    const int s = idx[i], L = LEN[s];
    slots[i] = NS - s, lens[i] = L, maxlen = L > maxlen ? L : maxlen;
    memcpy(tab[i], P->table[s], sizeof tab[i]);
    for (int h = 0; h < HQ; h++)
      memcpy((uint16_t *)q.h.data + ((size_t)(i * HQ + h) * sq) * D,
             (uint16_t *)sd[s].q.h.data + ((size_t)h * sd[s].L + L - sq) * D, (size_t)sq * D * 2);
  }
  ct_up(&q);
  int32_t *ds = ht_dalloc(sizeof slots), *dl = ht_dalloc(sizeof lens), *dt = ht_dalloc(sizeof tab);
  ht_up(ds, slots, sizeof slots), ht_up(dl, lens, sizeof lens), ht_up(dt, tab, sizeof tab);
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = n, b.slots = i32(ds, 1, n), b.lengths = i32(dl, 1, n), b.page_table = i32(dt, n, MAXP);
  b.max_length = maxlen;
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  if (g_ap) ap = *g_ap;
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = o->l.d, aux.entropy = o->h.d;
  lpattn_status st = lpattn_paged_decode(cu, P->pool, &b, &q.d, &o->o.d, &ap, &aux);
  ct_down(&o->o), ct_down(&o->l), ct_down(&o->h);
  ht_dfree(ds), ht_dfree(dl), ht_dfree(dt);
  ct_free(&q);
  return st;
}

/* the chunks the decode plan (backends/gpu/gpu_decode_plan.h) splits one
 * unsharded sequence of length L into: the ref's chunking below */
static int any_variant(int64_t d, int dt) { return (void)d, (void)dt, 1; }
static int plan_chunks(int L, int sq) {
  lp_gpu_decode_problem pr;
  memset(&pr, 0, sizeof pr);
  pr.D = D, pr.Hq = HQ, pr.Hkv = HKV, pr.T = T, pr.hdt = pr.qdt = HT, pr.unit_strides = 1;
  pr.num_seqs = 1, pr.Sq = sq, pr.max_length = L;
  const lp_gpu_decode_dev dev = {0, 128, 8, any_variant};
  lp_gpu_decode_plan p;
  CHECK(lp_gpu_decode_plan_make(&pr, &dev, &p), "decode plan of L = %d, sq = %d", L, sq);
  return p.nchunk;
}

/* ref rows of sequence s's last sq positions with the decode's chunking */
static void reference(lpattn_ctx *ref, const seqdata *sd, int s, int sq, lpattn_precision prec, outs *r) {
  const int L = LEN[s], span = T * LP_DECODE_CHUNK_TILES, nc = plan_chunks(L, sq);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.precision = prec;
  ct_pair o = ct_make(LPATTN_F32, 1, HQ, sq, D), l = ct_make(LPATTN_F32, 1, HQ, sq, 1), h = ct_make(LPATTN_F32, 1, HQ, sq, 1);
  lpattn_tensor q = view(&sd[s].q.h, L - sq, sq);
  for (int c = 0; c < nc; c++) {
    const int c0 = c * span, c1 = c0 + span < L ? c0 + span : L;
    lpattn_tensor k = view(&sd[s].k.h, c0, c1 - c0), v = view(&sd[s].v.h, c0, c1 - c0);
    lpattn_attn_aux aux;
    lpattn_attn_aux_init(&aux);
    ct_pair *dst = c == 0 ? &r->o : &o, *dl = c == 0 ? &r->l : &l, *dh = c == 0 ? &r->h : &h;
    if (c < nc - 1) {
      ap.causal = 0;
      aux.lse = dl->h, aux.entropy = dh->h;
      CHECK_STATUS(lpattn_attention(ref, &q, &k, &v, &dst->h, &ap, &aux), LPATTN_OK);
    } else { /* causal prefill of the chunk's rows, keep the last sq */
      ap.causal = 1;
      lpattn_tensor qa = view(&sd[s].q.h, c0, c1 - c0);
      ct_pair oa = ct_make(LPATTN_F32, 1, HQ, c1 - c0, D), la = ct_make(LPATTN_F32, 1, HQ, c1 - c0, 1),
              ha = ct_make(LPATTN_F32, 1, HQ, c1 - c0, 1);
      aux.lse = la.h, aux.entropy = ha.h;
      CHECK_STATUS(lpattn_attention(ref, &qa, &k, &v, &oa.h, &ap, &aux), LPATTN_OK);
      for (int hh = 0; hh < HQ; hh++)
        for (int i = 0; i < sq; i++) {
          const int row = c1 - c0 - sq + i;
          memcpy((float *)dst->h.data + ((size_t)hh * sq + i) * D, (float *)oa.h.data + ((size_t)hh * (c1 - c0) + row) * D, D * 4);
          ((float *)dl->h.data)[hh * sq + i] = ((float *)la.h.data)[hh * (c1 - c0) + row];
          ((float *)dh->h.data)[hh * sq + i] = ((float *)ha.h.data)[hh * (c1 - c0) + row];
        }
      ct_free(&oa), ct_free(&la), ct_free(&ha);
    }
    if (c > 0)
      CHECK_STATUS(lpattn_merge_states(ref, &r->o.h, &r->l.h, &r->h.h, &o.h, &l.h, &h.h, &r->o.h, &r->l.h, &r->h.h),
                   LPATTN_OK);
  }
  ct_free(&o), ct_free(&l), ct_free(&h);
}

/* rows of sequence i of a batch output */
static lpattn_tensor rows_of(const ct_pair *p, int i) {
  lpattn_tensor x = p->h;
  x.data = (char *)x.data + (size_t)i * x.stride[0] * 4;
  x.shape[0] = 1;
  return x;
}
static int same_bits(const ct_pair *a, int ia, const ct_pair *b, int ib) {
  const size_t n = (size_t)a->h.stride[0] * 4;
  return memcmp((char *)a->h.data + ia * n, (char *)b->h.data + ib * n, n) == 0;
}

static int run_prec(lpattn_ctx *cu, lpattn_ctx *ref, seqdata *sd, lpattn_precision prec) {
  pooled A, B, C;
  if (!pool_make(cu, &A, prec, 0)) return 0;
  CHECK(pool_make(cu, &B, prec, 7) && pool_make(cu, &C, prec, 3), "pools");
  for (int s = 0; s < NS; s++) {
    fill(cu, &A, sd, s, 0, LEN[s], 100);
    fill(cu, &B, sd, s, 0, LEN[s], 333);
    /* C: bulk, then the last 70 tokens one at a time */
    fill(cu, &C, sd, s, 0, LEN[s] - 70, 256);
    fill(cu, &C, sd, s, LEN[s] - 70, LEN[s], 1);
  }
  const int all[NS] = {0, 1, 2};
  for (int sq = 1; sq <= 3; sq += 2) {
    outs a = outs_make(NS, sq), b = outs_make(NS, sq), c = outs_make(NS, sq);
    lpattn_status st = decode(cu, &A, sd, all, NS, sq, &a);
    if (st == LPATTN_ERR_UNSUPPORTED) {
      outs_free(&a), outs_free(&b), outs_free(&c);
      pool_drop(&A), pool_drop(&B), pool_drop(&C);
      return 0;
    }
    CHECK_STATUS(st, LPATTN_OK);
    CHECK_STATUS(decode(cu, &B, sd, all, NS, sq, &b), LPATTN_OK);
    CHECK_STATUS(decode(cu, &C, sd, all, NS, sq, &c), LPATTN_OK);
    for (int s = 0; s < NS; s++) {
      CHECK(same_bits(&a.o, s, &b.o, s) && same_bits(&a.l, s, &b.l, s), "prec %d sq %d seq %d: shuffled pages differ", prec, sq, s);
      CHECK(same_bits(&a.o, s, &c.o, s) && same_bits(&a.h, s, &c.h, s), "prec %d sq %d seq %d: one-token appends differ", prec, sq, s);
      outs alone = outs_make(1, sq), r = outs_make(1, sq);
      CHECK_STATUS(decode(cu, &A, sd, &s, 1, sq, &alone), LPATTN_OK);
      CHECK(same_bits(&a.o, s, &alone.o, 0) && same_bits(&a.l, s, &alone.l, 0) && same_bits(&a.h, s, &alone.h, 0),
            "prec %d sq %d seq %d: batch != alone", prec, sq, s);
      reference(ref, sd, s, sq, prec, &r);
      lpattn_tensor ao = rows_of(&a.o, s), al = rows_of(&a.l, s), ah = rows_of(&a.h, s);
      const double e = ct_relerr(&ao, &r.o.h), el = ct_maxabs(&al, &r.l.h), eh = ct_maxabs(&ah, &r.h.h);
      printf("paged D=%d %s prec=%d sq=%d len=%d: O %.2e LSE %.2e H %.2e\n", D, HT == LPATTN_F16 ? "f16" : "bf16",
             prec, sq, LEN[s], e, el, eh);
      CHECK(e < TOL && el < 2e-3 && eh < 2e-3, "prec %d sq %d seq %d: O %g LSE %g H %g", prec, sq, s, e, el, eh);
      outs_free(&alone), outs_free(&r);
    }
    outs_free(&a), outs_free(&b), outs_free(&c);
  }
  pool_drop(&A), pool_drop(&B), pool_drop(&C);
  return 1;
}


/* Prefix sharing: Y shares X's completed pages up to `fork` tokens (its slot
 * copied from X's; HIGH forks at a page boundary: no page to copy), then
 * appends its own tokens; decoding Y (and X) equals the same tokens in a
 * pool of their own, bitwise. */
static void prefix_case(lpattn_ctx *cu, seqdata *sd, lpattn_precision prec) {
  const int fork = prec == LPATTN_PREC_HIGH ? 1024 : 1000, total = 1300;
  seqdata mix; /* sd[0]'s first `fork` tokens, then tokens of its positions 1300.. */
  mix.L = total;
  mix.k = ct_make(HT, 1, HKV, total, D), mix.v = ct_make(HT, 1, HKV, total, D);
  mix.q = ct_make(HT, 1, HQ, total, D);
  ct_pair *dst[3] = {&mix.k, &mix.v, &mix.q}, *src[3] = {&sd[0].k, &sd[0].v, &sd[0].q};
  for (int x = 0; x < 3; x++) {
    const int H = x == 2 ? HQ : HKV;
    for (int h = 0; h < H; h++) {
      uint16_t *o = (uint16_t *)dst[x]->h.data + (size_t)h * total * D, *i = (uint16_t *)src[x]->h.data + (size_t)h * sd[0].L * D;
      memcpy(o, i, (size_t)fork * D * 2);
      memcpy(o + (size_t)fork * D, i + (size_t)1300 * D, (size_t)(total - fork) * D * 2);
    }
    ct_up(dst[x]);
  }
  seqdata tmp[NS] = {sd[0], sd[1], mix};
  pooled P, R;
  if (!pool_make(cu, &P, prec, 0)) return;
  CHECK(pool_make(cu, &R, prec, 3), "pool");
  const int save0 = LEN[0], save2 = LEN[2];
  fill(cu, &P, tmp, 0, 0, fork, 100);
  for (int i = 0; i < fork / T; i++) P.table[2][i] = P.table[0][i]; /* shared completed pages */
  ht_up(P.d_table, P.table, sizeof P.table);
  CHECK_STATUS(lpattn_kv_slot_copy(cu, P.pool, NS - 0, NS - 2), LPATTN_OK);
  fill(cu, &P, tmp, 2, fork, total, 7);
  fill(cu, &R, tmp, 2, 0, total, 128), fill(cu, &R, tmp, 0, 0, fork, 128);
  LEN[0] = fork, LEN[2] = total;
  for (int sq = 1; sq <= 3; sq += 2) {
    const int both[2] = {0, 2};
    outs a = outs_make(2, sq), b = outs_make(2, sq);
    CHECK_STATUS(decode(cu, &P, tmp, both, 2, sq, &a), LPATTN_OK);
    CHECK_STATUS(decode(cu, &R, tmp, both, 2, sq, &b), LPATTN_OK);
    CHECK(same_bits(&a.o, 0, &b.o, 0) && same_bits(&a.l, 0, &b.l, 0), "prec %d sq %d: prefix owner differs", prec, sq);
    CHECK(same_bits(&a.o, 1, &b.o, 1) && same_bits(&a.l, 1, &b.l, 1), "prec %d sq %d: forked sequence differs", prec, sq);
    outs_free(&a), outs_free(&b);
  }
  printf("prefix sharing (prec %d, fork at %d): forked and owner sequences match own pools\n", prec, fork);
  LEN[0] = save0, LEN[2] = save2;
  pool_drop(&P), pool_drop(&R);
  ct_free(&mix.k), ct_free(&mix.v), ct_free(&mix.q);
}

#if !defined(LPATTN_TEST_HIP)
/* append one token + decode captured in a graph, replayed step by step,
 * equals the same calls made directly on a second pool */
static void graph_case(lpattn_ctx *cu, seqdata *sd, lpattn_precision prec) {
  cudaStream_t str;
  CHECK(cudaStreamCreateWithFlags(&str, cudaStreamNonBlocking) == cudaSuccess, "stream");
  lpattn_context_params cpar;
  lpattn_context_params_init(&cpar);
  cpar.stream = str;
  lpattn_ctx *cs = NULL; /* captured: a context on a stream of its own */
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_CUDA, &cpar, &cs), LPATTN_OK);
  pooled H, E;
  if (!cs || !pool_make(cs, &H, prec, 5)) return;
  CHECK(pool_make(cu, &E, prec, 9), "pool");
  const int s = 1, L0 = LEN[s] - 8;
  fill(cs, &H, sd, s, 0, L0, 128), fill(cu, &E, sd, s, 0, L0, 128);
  int32_t *dlen2 = ht_dalloc(4);
  ct_pair q = ct_make(HT, 1, HQ, 1, D), o = ct_make(LPATTN_F32, 1, HQ, 1, D), oe = ct_make(LPATTN_F32, 1, HQ, 1, D);
  ct_pair kk = ct_make(HT, 1, HKV, 1, D), vv = ct_make(HT, 1, HKV, 1, D);
  lpattn_kv_batch ha = one(&H, s, L0), hd = ha;
  hd.lengths = i32(dlen2, 1, 1), hd.max_length = LEN[s];
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  int len2 = L0;
  ht_up(dlen2, &len2, 4);
  /* warm-up: sizes the decode's partial-state buffer before capture */
  CHECK_STATUS(lpattn_paged_decode(cs, H.pool, &hd, &q.d, &o.d, &ap, NULL), LPATTN_OK);
  cudaDeviceSynchronize();
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(str, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "begin capture");
  CHECK_STATUS(lpattn_kv_append(cs, H.pool, &ha, &kk.d, &vv.d, NULL), LPATTN_OK);
  CHECK_STATUS(lpattn_paged_decode(cs, H.pool, &hd, &q.d, &o.d, &ap, NULL), LPATTN_OK);
  CHECK(cudaStreamEndCapture(str, &graph) == cudaSuccess, "end capture");
  CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
  for (int step = 0; step < 8; step++) {
    const int len = L0 + step;
    /* inputs of this step: token `len` of sequence s and its query */
    for (int h = 0; h < HKV; h++) {
      cudaMemcpy((uint16_t *)kk.d.data + h * D, (uint16_t *)sd[s].k.d.data + ((size_t)h * sd[s].L + len) * D, D * 2, cudaMemcpyDeviceToDevice);
      cudaMemcpy((uint16_t *)vv.d.data + h * D, (uint16_t *)sd[s].v.d.data + ((size_t)h * sd[s].L + len) * D, D * 2, cudaMemcpyDeviceToDevice);
    }
    for (int h = 0; h < HQ; h++)
      cudaMemcpy((uint16_t *)q.d.data + h * D, (uint16_t *)sd[s].q.d.data + ((size_t)h * sd[s].L + len) * D, D * 2, cudaMemcpyDeviceToDevice);
    int l1 = len, l2 = len + 1;
    ht_up(H.d_len + s, &l1, 4), ht_up(dlen2, &l2, 4);
    cudaDeviceSynchronize(); /* the copies ran on the legacy stream */
    CHECK(cudaGraphLaunch(exec, str) == cudaSuccess, "launch");
    cudaStreamSynchronize(str);
    ct_down(&o);
    /* the same step by direct calls on pool E */
    lpattn_kv_batch ea = one(&E, s, len), ed = ea;
    ed.lengths = i32(dlen2, 1, 1), ed.max_length = LEN[s];
    CHECK_STATUS(lpattn_kv_append(cu, E.pool, &ea, &kk.d, &vv.d, NULL), LPATTN_OK);
    CHECK_STATUS(lpattn_paged_decode(cu, E.pool, &ed, &q.d, &oe.d, &ap, NULL), LPATTN_OK);
    ct_down(&oe);
    CHECK(memcmp(o.h.data, oe.h.data, o.bytes) == 0, "graph step %d differs from direct calls", step);
  }
  printf("graph capture of append + decode: 8 replays match direct calls (prec %d)\n", prec);
  cudaGraphExecDestroy(exec), cudaGraphDestroy(graph);
  ct_free(&q), ct_free(&o), ct_free(&oe), ct_free(&kk), ct_free(&vv);
  ht_dfree(dlen2);
  pool_drop(&H), pool_drop(&E);
  lpattn_free(cs);
  cudaStreamDestroy(str);
}
#endif

/* THRIFT and PASA pools against the ref backend's pool, which holds the
 * same tokens (queries appended with them: THRIFT's recorded means) under
 * the same page tables: decode of the batch with Sq = 1 and 3, O/LSE/H;
 * the GPU pool with shuffled pages gives the same bits. */
static void vs_ref_pool(lpattn_ctx *cu, lpattn_ctx *ref, seqdata *sd, lpattn_precision prec, int pasa,
                        const lpattn_attn_params *ap, const char *what) {
  g_pasa = pasa, g_ap = ap;
  pooled A, B;
  lpattn_kv_pool_params pp;
  pool_params(&pp, prec);
  lpattn_kv_pool *R = NULL;
  if (!pool_make(cu, &A, prec, 0)) {
    printf("%s: unsupported on this pool\n", what);
    g_pasa = 0, g_ap = NULL;
    return;
  }
  CHECK(pool_make(cu, &B, prec, 11), "pool");
  CHECK_STATUS(lpattn_kv_pool_create(ref, &pp, NULL, 0, &R), LPATTN_OK);
  for (int s = 0; s < NS; s++) {
    const int32_t slot = NS - s;
    for (int at = 0, step = 300; at < LEN[s]; at += step) {
      if (at >= LEN[s] - 5) step = 1; /* the last tokens one at a time */
      const int n = LEN[s] - at < step ? LEN[s] - at : step;
      lpattn_kv_batch b = one(&A, s, at), hb;
      lpattn_tensor k = view(&sd[s].k.d, at, n), v = view(&sd[s].v.d, at, n), q = view(&sd[s].q.d, at, n);
      CHECK_STATUS(lpattn_kv_append(cu, A.pool, &b, &k, &v, &q), LPATTN_OK);
      b = one(&B, s, at);
      CHECK_STATUS(lpattn_kv_append(cu, B.pool, &b, &k, &v, &q), LPATTN_OK);
      int32_t len = at;
      lpattn_kv_batch_init(&hb);
      hb.num_seqs = 1, hb.slots = i32((void *)&slot, 1, 1), hb.lengths = i32(&len, 1, 1);
      hb.page_table = i32(A.table[s], 1, MAXP), hb.max_length = at;
      k = view(&sd[s].k.h, at, n), v = view(&sd[s].v.h, at, n), q = view(&sd[s].q.h, at, n);
      CHECK_STATUS(lpattn_kv_append(ref, R, &hb, &k, &v, &q), LPATTN_OK);
    }
  }
  const int all[NS] = {0, 1, 2};
  for (int sq = 1; sq <= 3; sq += 2) {
    outs a = outs_make(NS, sq), b = outs_make(NS, sq), r = outs_make(NS, sq);
    CHECK_STATUS(decode(cu, &A, sd, all, NS, sq, &a), LPATTN_OK);
    CHECK_STATUS(decode(cu, &B, sd, all, NS, sq, &b), LPATTN_OK);
    int32_t slots[NS], lens[NS], maxlen = 0;
    ct_pair q = ct_make(HT, NS, HQ, sq, D);
    for (int s = 0; s < NS; s++) {
      slots[s] = NS - s, lens[s] = LEN[s], maxlen = LEN[s] > maxlen ? LEN[s] : maxlen;
      for (int h = 0; h < HQ; h++)
        memcpy((uint16_t *)q.h.data + ((size_t)(s * HQ + h) * sq) * D,
               (uint16_t *)sd[s].q.h.data + ((size_t)h * sd[s].L + LEN[s] - sq) * D, (size_t)sq * D * 2);
    }
    lpattn_kv_batch hb;
    lpattn_kv_batch_init(&hb);
    hb.num_seqs = NS, hb.slots = i32(slots, 1, NS), hb.lengths = i32(lens, 1, NS);
    hb.page_table = i32(A.table, NS, MAXP), hb.max_length = maxlen;
    lpattn_attn_aux aux;
    lpattn_attn_aux_init(&aux);
    aux.lse = r.l.h, aux.entropy = r.h.h;
    CHECK_STATUS(lpattn_paged_decode(ref, R, &hb, &q.h, &r.o.h, ap, &aux), LPATTN_OK);
    for (int s = 0; s < NS; s++) {
      CHECK(same_bits(&a.o, s, &b.o, s) && same_bits(&a.l, s, &b.l, s), "%s sq %d seq %d: shuffled pages differ", what, sq, s);
      lpattn_tensor ao = rows_of(&a.o, s), al = rows_of(&a.l, s), ah = rows_of(&a.h, s);
      lpattn_tensor ro = rows_of(&r.o, s), rl = rows_of(&r.l, s), rh = rows_of(&r.h, s);
      const double e = ct_relerr(&ao, &ro), el = ct_maxabs(&al, &rl), eh = ct_maxabs(&ah, &rh);
      printf("paged vs ref pool D=%d %s %s sq=%d len=%d: O %.2e LSE %.2e H %.2e\n", D,
             HT == LPATTN_F16 ? "f16" : "bf16", what, sq, LEN[s], e, el, eh);
      CHECK(e < TOL && el < 2e-3 && eh < 2e-3, "%s sq %d seq %d: O %g LSE %g H %g", what, sq, s, e, el, eh);
    }
    ct_free(&q), outs_free(&a), outs_free(&b), outs_free(&r);
  }
  lpattn_kv_pool_free(R);
  pool_drop(&A), pool_drop(&B);
  g_pasa = 0, g_ap = NULL;
}

int main(void) {
  lpattn_ctx *cu = NULL, *ref = NULL;
  if (!ct_setup(&cu, &ref)) return 77;
  seqdata sd[NS];
  for (int s = 0; s < NS; s++) {
    sd[s].L = LEN[s];
    sd[s].k = ct_make(HT, 1, HKV, LEN[s], D), sd[s].v = ct_make(HT, 1, HKV, LEN[s], D);
    sd[s].q = ct_make(HT, 1, HQ, LEN[s], D);
    ct_fill(&sd[s].k, 0.4, 1), ct_fill(&sd[s].v, 0, 1), ct_fill(&sd[s].q, 0, 1);
  }
  const lpattn_precision precs[4] = {LPATTN_PREC_HIGH, LPATTN_PREC_NVFP4, LPATTN_PREC_MXFP4, LPATTN_PREC_FP8};
  int ran = 0;
  for (int i = 0; i < 4; i++) ran += run_prec(cu, ref, sd, precs[i]);
  if (ran)
    for (int i = 0; i < 4; i++) prefix_case(cu, sd, precs[i]);
#if !defined(LPATTN_TEST_HIP)
  if (ran) graph_case(cu, sd, LPATTN_PREC_NVFP4);
#endif
  if (ran) {
    lpattn_attn_params tb, tk;
    lpattn_attn_params_init(&tb), lpattn_attn_params_init(&tk);
    tb.thrift_budget = 0.25f;
    tk.thrift_k = 5, tk.selection = LPATTN_SELECT_PAPER;
    vs_ref_pool(cu, ref, sd, LPATTN_PREC_THRIFT, 0, &tb, "thrift budget 0.25");
    vs_ref_pool(cu, ref, sd, LPATTN_PREC_THRIFT, 0, &tk, "thrift k 5 paper");
    vs_ref_pool(cu, ref, sd, LPATTN_PREC_NVFP4, 1, NULL, "nvfp4 pasa");
    vs_ref_pool(cu, ref, sd, LPATTN_PREC_HIGH, 1, NULL, "high pasa");
    vs_ref_pool(cu, ref, sd, LPATTN_PREC_THRIFT, 1, &tb, "thrift pasa");
  }
  for (int s = 0; s < NS; s++) ct_free(&sd[s].k), ct_free(&sd[s].v), ct_free(&sd[s].q);
  lpattn_free(cu), lpattn_free(ref);
  if (!ran) return 77;
  return test_finish();
}
