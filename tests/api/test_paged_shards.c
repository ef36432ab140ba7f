/* Sharded paged decode (lpattn.h lpattn_kv_batch kv_start/q_start, SEMANTICS
 * "Sharded paged decode") on a host backend (argv[1]: ref or cpu). Each
 * "rank" is its own pool holding a run of each sequence's pages; the ranks'
 * decodes (with positions) merged by lpattn_merge_states in key order equal
 * the single-pool decode of the whole sequences:
 * - shards cut at chunk borders (multiples of LP_DECODE_CHUNK_TILES pages):
 *   every chunk is the whole decode's, so every precision is within the
 *   merge's f32 rounding (max |dO|, |dLSE| <= 2e-6 on unit data), and
 *   bitwise equal with one chunk per shard (the decode's own merge order);
 * - shards cut inside chunks: the chunks at a cut quantize P against their
 *   own running max (bounds as SEMANTICS "Absolute positions": HIGH and
 *   NVFP4 the merge's rounding, FP8 and MXFP4 a share of their own error);
 * - the last shard alone with positions (kv_start 0) is bitwise the default;
 * - leak test: perturb every token after t (Q, K, V, all in the last shard):
 *   merged rows <= t are bitwise unchanged;
 * - bad positions get statuses with specific lpattn_last_error details. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "lpattn.h"
#include "testutil.h"

enum { T = 32, HQ = 4, HKV = 2, D = 64, NT = 41, N = NT * T, NS = 2, MAXR = 3 };
#define CH 16 /* LP_DECODE_CHUNK_TILES */

typedef struct {
  const char *name;
  lpattn_precision prec;
  /* Cut inside chunks: HIGH max |dO|; NVFP4 relative L2 of O; FP8, MXFP4
   * relative L2 of O as a share of the whole decode's own distance to HIGH. */
  double o_bound;
} variant;

/* Measured (ref, cpu), cuts inside chunks: HIGH max |dO| 7e-8, NVFP4 rel L2
 * 2.3e-7; FP8 1.7e-2 and MXFP4 9.9e-2, 0.35 and 0.41 of their own 4.8e-2 and
 * 0.24 to HIGH. At chunk borders every precision: max |dO| <= 5e-8. */
static const variant variants[] = {
    {"HIGH", LPATTN_PREC_HIGH, 2e-6},
    {"NVFP4", LPATTN_PREC_NVFP4, 2e-3},
    {"FP8", LPATTN_PREC_FP8, 0.5},
    {"MXFP4", LPATTN_PREC_MXFP4, 0.5},
};

/* Token streams [NS][H][N][D]: sequence s's K, V and Q. */
static float K[NS][HKV * N * D], V[NS][HKV * N * D], Q[NS][HQ * N * D];
static const int32_t LEN[NS] = {40 * T + 5, 37 * T + 20};

static uint64_t rs = 99;
static float rnd(void) { return tu_gauss(&rs); }

static void make_streams(void) {
  rs = 99;
  for (int s = 0; s < NS; s++) {
    for (int i = 0; i < HKV * N * D; i++) K[s][i] = rnd() + 0.5f, V[s][i] = rnd();
    for (int i = 0; i < HQ * N * D; i++) Q[s][i] = rnd();
  }
}

static lpattn_kv_pool *make_pool(lpattn_ctx *ctx, lpattn_precision prec, int pasa) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = HKV, pp.num_q_heads = HQ, pp.head_dim = D, pp.page_size = T;
  pp.precision = prec, pp.pasa = pasa;
  pp.num_pages = NS * (NT + 1), pp.num_slots = NS;
  lpattn_kv_pool *pool = NULL;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool), LPATTN_OK);
  return pool;
}

/* One rank's pool and its part of each sequence: tokens [kv0, kv0 + len). */
typedef struct {
  lpattn_kv_pool *pool;
  int32_t slot[NS], len[NS], kv0[NS], q0[NS], pages[NS][NT + 1];
} shard_t;

static lpattn_kv_batch batch_of(shard_t *r, int positions) {
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = NS;
  b.slots = lpattn_tensor_4d(r->slot, LPATTN_I32, 1, 1, 1, NS);
  b.lengths = lpattn_tensor_4d(r->len, LPATTN_I32, 1, 1, 1, NS);
  b.page_table = lpattn_tensor_4d(r->pages[0], LPATTN_I32, 1, 1, NS, NT + 1);
  b.max_length = N;
  if (positions) {
    b.kv_start = lpattn_tensor_4d(r->kv0, LPATTN_I32, 1, 1, 1, NS);
    b.q_start = lpattn_tensor_4d(r->q0, LPATTN_I32, 1, 1, 1, NS);
  }
  return b;
}

/* Fills rank r's pool with tokens [t0[s], t1[s]) of each sequence (pages in
 * reverse order, appends of 13 tokens). */
static shard_t make_shard(lpattn_ctx *ctx, lpattn_precision prec, const int32_t *t0,
                          const int32_t *t1, int64_t Sq) {
  shard_t r;
  memset(&r, 0, sizeof r);
  r.pool = make_pool(ctx, prec, 0);
  for (int s = 0; s < NS; s++) {
    r.slot[s] = NS - 1 - s, r.kv0[s] = t0[s], r.q0[s] = LEN[s] - (int32_t)Sq;
    for (int j = 0; j <= NT; j++) r.pages[s][j] = NS * (NT + 1) - 1 - (s * (NT + 1) + j);
  }
  for (int64_t a = 0;; a += 13) {
    int more = 0;
    for (int s = 0; s < NS; s++) more |= t0[s] + a < t1[s];
    if (!more || !r.pool) break;
    for (int s = 0; s < NS; s++) { /* one sequence at a time: lengths differ */
      if (t0[s] + a >= t1[s]) continue;
      const int64_t m = t1[s] - (t0[s] + a) < 13 ? t1[s] - (t0[s] + a) : 13, p = t0[s] + a;
      lpattn_tensor k = lpattn_tensor_4d(K[s] + p * D, LPATTN_F32, 1, HKV, m, D);
      lpattn_tensor v = lpattn_tensor_4d(V[s] + p * D, LPATTN_F32, 1, HKV, m, D);
      k.stride[1] = v.stride[1] = N * D;
      lpattn_kv_batch b;
      lpattn_kv_batch_init(&b);
      b.num_seqs = 1;
      b.slots = lpattn_tensor_4d(&r.slot[s], LPATTN_I32, 1, 1, 1, 1);
      b.lengths = lpattn_tensor_4d(&r.len[s], LPATTN_I32, 1, 1, 1, 1);
      b.page_table = lpattn_tensor_4d(r.pages[s], LPATTN_I32, 1, 1, 1, NT + 1);
      b.max_length = N;
      CHECK_STATUS(lpattn_kv_append(ctx, r.pool, &b, &k, &v, NULL), LPATTN_OK);
      r.len[s] += (int32_t)m;
    }
  }
  return r;
}

typedef struct {
  float o[NS * HQ * T * D], lse[NS * HQ * T];
} result;

/* Decodes the last Sq positions of every sequence from rank r's pool, with
 * batch b (NULL: batch_of(r, positions)). */
static lpattn_status decode_b(lpattn_ctx *ctx, shard_t *r, const lpattn_kv_batch *bin,
                              int positions, int64_t Sq, result *res) {
  static float qb[NS * HQ * T * D];
  for (int s = 0; s < NS; s++)
    for (int h = 0; h < HQ; h++)
      memcpy(qb + ((s * HQ + h) * Sq) * D, Q[s] + ((int64_t)h * N + LEN[s] - Sq) * D,
             sizeof(float) * (size_t)(Sq * D));
  lpattn_tensor q = lpattn_tensor_4d(qb, LPATTN_F32, NS, HQ, Sq, D);
  lpattn_tensor o = lpattn_tensor_4d(res->o, LPATTN_F32, NS, HQ, Sq, D);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lpattn_tensor_4d(res->lse, LPATTN_F32, NS, HQ, Sq, 1);
  lpattn_kv_batch b = bin ? *bin : batch_of(r, positions);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  return lpattn_paged_decode(ctx, r->pool, &b, &q, &o, &p, &aux);
}

static lpattn_status decode(lpattn_ctx *ctx, shard_t *r, int positions, int64_t Sq, result *res) {
  return decode_b(ctx, r, NULL, positions, Sq, res);
}

/* The ranks' decodes merged in key order into m. */
static void sharded(lpattn_ctx *ctx, shard_t *rk, int nr, int64_t Sq, result *m) {
  static result part;
  const int64_t rows = NS * HQ * Sq;
  for (int r = 0; r < nr; r++) {
    CHECK_STATUS(decode(ctx, &rk[r], 1, Sq, r ? &part : m), LPATTN_OK);
    if (r == 0) continue;
    lpattn_tensor oa = lpattn_tensor_4d(m->o, LPATTN_F32, 1, 1, rows, D);
    lpattn_tensor la = lpattn_tensor_4d(m->lse, LPATTN_F32, 1, 1, rows, 1);
    lpattn_tensor ob = lpattn_tensor_4d(part.o, LPATTN_F32, 1, 1, rows, D);
    lpattn_tensor lb = lpattn_tensor_4d(part.lse, LPATTN_F32, 1, 1, rows, 1);
    CHECK_STATUS(lpattn_merge_states(ctx, &oa, &la, NULL, &ob, &lb, NULL, &oa, &la, NULL), LPATTN_OK);
  }
}

/* Ranks cut at the page borders cut[0..nr-2] (in pages, same for every
 * sequence; the last rank holds the rest). */
static int make_ranks(lpattn_ctx *ctx, lpattn_precision prec, const int *cut, int nr, int64_t Sq,
                      shard_t *rk) {
  for (int r = 0; r < nr; r++) {
    int32_t t0[NS], t1[NS];
    for (int s = 0; s < NS; s++)
      t0[s] = r ? cut[r - 1] * T : 0, t1[s] = r < nr - 1 ? cut[r] * T : LEN[s];
    rk[r] = make_shard(ctx, prec, t0, t1, Sq);
    if (!rk[r].pool) return 0;
  }
  return 1;
}

static void free_ranks(shard_t *rk, int nr) {
  for (int r = 0; r < nr; r++) lpattn_kv_pool_free(rk[r].pool);
}

static void diffs(const result *a, const result *b, int64_t Sq, double *maxo, double *rel,
                  double *maxl) {
  double num = 0, den = 0;
  *maxo = *maxl = 0;
  for (int64_t i = 0; i < NS * HQ * Sq * D; i++) {
    const double x = a->o[i], y = b->o[i];
    num += (x - y) * (x - y), den += y * y, *maxo = fmax(*maxo, fabs(x - y));
  }
  for (int64_t i = 0; i < NS * HQ * Sq; i++) *maxl = fmax(*maxl, fabs((double)a->lse[i] - b->lse[i]));
  *rel = sqrt(num / den);
}

static int same(const result *a, const result *b, int64_t Sq) {
  return !memcmp(a->o, b->o, sizeof(float) * (size_t)(NS * HQ * Sq * D)) &&
         !memcmp(a->lse, b->lse, sizeof(float) * (size_t)(NS * HQ * Sq));
}

static void vs_whole(lpattn_ctx *ctx, const variant *va, int64_t Sq) {
  static const int cuts[3][2] = {{CH, 0}, {CH, 2 * CH}, {7, 23}};
  static const int nrs[3] = {2, 3, 3};
  static result whole, got, alone;
  shard_t one[1], rk[MAXR];
  const int all[1] = {0};
  if (!make_ranks(ctx, va->prec, all, 1, Sq, one)) return;
  CHECK_STATUS(decode(ctx, &one[0], 0, Sq, &whole), LPATTN_OK);
  static result high[2]; /* HIGH's whole decode (variants[0] runs first): the error scale */
  if (va->prec == LPATTN_PREC_HIGH) high[Sq > 1] = whole;
  double own, unused;
  diffs(&whole, &high[Sq > 1], Sq, &unused, &own, &unused);
  /* The whole sequence as the "last shard" (kv_start 0): bitwise the default. */
  CHECK_STATUS(decode(ctx, &one[0], 1, Sq, &alone), LPATTN_OK);
  CHECK(same(&alone, &whole, Sq), "%s Sq=%lld: positions with kv_start 0 differ",
        va->name, (long long)Sq);
  for (int c = 0; c < 3; c++) {
    if (!make_ranks(ctx, va->prec, cuts[c], nrs[c], Sq, rk)) return;
    sharded(ctx, rk, nrs[c], Sq, &got);
    double mo, rel, ml;
    diffs(&got, &whole, Sq, &mo, &rel, &ml);
    const int aligned = c < 2;
    const int share = va->prec == LPATTN_PREC_FP8 || va->prec == LPATTN_PREC_MXFP4;
    const double bo = aligned ? 2e-6 : va->o_bound * (share ? own : 1.0);
    const double m = aligned || va->prec == LPATTN_PREC_HIGH ? mo : rel;
    CHECK(m <= bo && ml <= 2e-6, "%s Sq=%lld cuts %d,%d: O %.3g (bound %.3g), LSE %.3g", va->name,
          (long long)Sq, cuts[c][0], cuts[c][1], m, bo, ml);
    /* One chunk per run, merged left to right: the decode's own fold, bitwise. */
    if (c == 1)
      CHECK(same(&got, &whole, Sq), "%s Sq=%lld: one chunk per rank is not bitwise",
            va->name, (long long)Sq);
    printf("%-5s Sq=%-2lld %d ranks, cuts at pages %2d,%2d (%s): max |dO| %.2e, rel L2 %.2e "
           "(%.2f of its own %.2e to HIGH), max |dLSE| %.2e\n", va->name, (long long)Sq, nrs[c],
           cuts[c][0], nrs[c] > 2 ? cuts[c][1] : 0, aligned ? "chunk borders" : "inside chunks", mo,
           rel, own > 0 ? rel / own : 0.0, own, ml);
    free_ranks(rk, nrs[c]);
  }
  free_ranks(one, 1);
}

/* Perturb every token after t (K, V and Q: all in the last shard): merged rows
 * <= t are bitwise unchanged. */
static void leak(lpattn_ctx *ctx, const variant *va) {
  const int64_t Sq = T;
  const int cut[2] = {CH, 2 * CH};
  static result a, b;
  shard_t rk[MAXR];
  if (!make_ranks(ctx, va->prec, cut, 3, Sq, rk)) return;
  sharded(ctx, rk, 3, Sq, &a);
  free_ranks(rk, 3);
  int64_t t[NS];
  for (int s = 0; s < NS; s++) {
    t[s] = LEN[s] - Sq / 2 - 3;
    for (int h = 0; h < HQ; h++)
      for (int64_t p = t[s] + 1; p < LEN[s]; p++)
        for (int d = 0; d < D; d++) {
          if (h < HKV) K[s][(h * N + p) * D + d] *= -3.0f, V[s][(h * N + p) * D + d] += 5.0f;
          Q[s][(h * N + p) * D + d] *= 4.0f;
        }
  }
  if (!make_ranks(ctx, va->prec, cut, 3, Sq, rk)) return;
  sharded(ctx, rk, 3, Sq, &b);
  free_ranks(rk, 3);
  make_streams();
  int leaked = 0, changed = 0;
  for (int s = 0; s < NS; s++)
    for (int h = 0; h < HQ; h++)
      for (int64_t r = 0; r < Sq; r++) {
        const int64_t i = (s * HQ + h) * Sq + r;
        const int diff = memcmp(a.o + i * D, b.o + i * D, sizeof(float) * D) != 0 || a.lse[i] != b.lse[i];
        if (LEN[s] - Sq + r <= t[s]) leaked |= diff;
        else changed |= diff;
      }
  CHECK(!leaked && changed, "%s: a row <= t depends on a later token (leak %d, later rows changed %d)",
        va->name, leaked, changed);
}

static void bad_positions(lpattn_ctx *ctx) {
  static result res;
  static float qb[NS * HQ * 4 * D];
  const int64_t Sq = 4;
  const int cut[1] = {CH};
  shard_t rk[2];
  if (!make_ranks(ctx, LPATTN_PREC_NVFP4, cut, 2, Sq, rk)) return;
  CHECK_STATUS(decode(ctx, &rk[0], 1, Sq, &res), LPATTN_OK);
  shard_t x = rk[0];
  lpattn_tensor q = lpattn_tensor_4d(qb, LPATTN_F32, NS, HQ, Sq, D);
  lpattn_tensor o = lpattn_tensor_4d(res.o, LPATTN_F32, NS, HQ, Sq, D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  lpattn_kv_batch b = batch_of(&x, 1);
  b.q_start.data = NULL; /* one without the other */
  CHECK_STATUS(lpattn_paged_decode(ctx, x.pool, &b, &q, &o, &p, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  b = batch_of(&x, 1);
  b.kv_start.dtype = LPATTN_F32;
  CHECK_STATUS(lpattn_paged_decode(ctx, x.pool, &b, &q, &o, &p, NULL), LPATTN_ERR_BAD_DTYPE);
  b = batch_of(&x, 1);
  b.q_start.shape[3] = 1;
  CHECK_STATUS(lpattn_paged_decode(ctx, x.pool, &b, &q, &o, &p, NULL), LPATTN_ERR_BAD_SHAPE);
  /* kv_start not a page border; negative; q_start negative */
  const int32_t bad_kv[3] = {5, -T, 0}, bad_q[3] = {LEN[0] - 4, LEN[0] - 4, -1};
  for (int i = 0; i < 3; i++) {
    x = rk[0];
    x.kv0[0] = bad_kv[i], x.q0[0] = bad_q[i];
    CHECK_STATUS(decode(ctx, &x, 1, Sq, &res), LPATTN_ERR_INVALID_ARGUMENT);
  }
  /* an earlier shard whose last page is the first query's tile */
  x = rk[0];
  x.q0[0] = CH * T - 3;
  CHECK_STATUS(decode(ctx, &x, 1, Sq, &res), LPATTN_ERR_INVALID_ARGUMENT);
  /* keys after the last query */
  x = rk[1];
  x.q0[0] -= 1;
  CHECK_STATUS(decode(ctx, &x, 1, Sq, &res), LPATTN_ERR_INVALID_ARGUMENT);
  /* the last shard placed first: neither the last nor whole pages */
  x = rk[1];
  x.kv0[0] = 0;
  CHECK_STATUS(decode(ctx, &x, 1, Sq, &res), LPATTN_ERR_INVALID_ARGUMENT);
  /* A caller built before kv_start/q_start (smaller struct_size): no positions. */
  static result plain, old;
  CHECK_STATUS(decode(ctx, &rk[0], 0, Sq, &plain), LPATTN_OK);
  b = batch_of(&rk[0], 1);
  b.struct_size = offsetof(lpattn_kv_batch, kv_start);
  CHECK_STATUS(decode_b(ctx, &rk[0], &b, 1, Sq, &old), LPATTN_OK);
  CHECK(same(&plain, &old, Sq), "an old-size batch is not the decode without positions");
  /* params.positions stays the attention's */
  b = batch_of(&rk[0], 1);
  p.positions = 1;
  CHECK_STATUS(lpattn_paged_decode(ctx, rk[0].pool, &b, &q, &o, &p, NULL), LPATTN_ERR_UNSUPPORTED);
  free_ranks(rk, 2);
  /* an earlier shard holding a partial page */
  const int32_t t0[NS] = {0, 0}, t1[NS] = {CH * T - 5, CH * T};
  x = make_shard(ctx, LPATTN_PREC_NVFP4, t0, t1, Sq);
  if (x.pool) CHECK_STATUS(decode(ctx, &x, 1, Sq, &res), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_kv_pool_free(x.pool);
}

/* THRIFT and PASA pools: UNSUPPORTED with positions (whole sequences). */
static void unsupported(lpattn_ctx *ctx) {
  static result res;
  const int64_t Sq = 1;
  for (int i = 0; i < 2; i++) {
    shard_t r;
    memset(&r, 0, sizeof r);
    r.pool = make_pool(ctx, i ? LPATTN_PREC_NVFP4 : LPATTN_PREC_THRIFT, i);
    if (!r.pool) return;
    for (int s = 0; s < NS; s++) {
      r.slot[s] = s, r.q0[s] = LEN[s] - (int32_t)Sq;
      for (int j = 0; j <= NT; j++) r.pages[s][j] = s * (NT + 1) + j;
      lpattn_tensor k = lpattn_tensor_4d(K[s], LPATTN_F32, 1, HKV, LEN[s], D);
      lpattn_tensor v = lpattn_tensor_4d(V[s], LPATTN_F32, 1, HKV, LEN[s], D);
      lpattn_tensor qq = lpattn_tensor_4d(Q[s], LPATTN_F32, 1, HQ, LEN[s], D);
      k.stride[1] = v.stride[1] = qq.stride[1] = N * D;
      lpattn_kv_batch b;
      lpattn_kv_batch_init(&b);
      b.num_seqs = 1;
      b.slots = lpattn_tensor_4d(&r.slot[s], LPATTN_I32, 1, 1, 1, 1);
      b.lengths = lpattn_tensor_4d(&r.len[s], LPATTN_I32, 1, 1, 1, 1);
      b.page_table = lpattn_tensor_4d(r.pages[s], LPATTN_I32, 1, 1, 1, NT + 1);
      b.max_length = N;
      CHECK_STATUS(lpattn_kv_append(ctx, r.pool, &b, &k, &v, &qq), LPATTN_OK);
      r.len[s] = LEN[s];
    }
    CHECK_STATUS(decode(ctx, &r, 0, Sq, &res), LPATTN_OK);
    CHECK_STATUS(decode(ctx, &r, 1, Sq, &res), LPATTN_ERR_UNSUPPORTED);
    lpattn_kv_pool_free(r.pool);
  }
}

int main(int argc, char **argv) {
  const int cpu = argc > 1 && !strcmp(argv[1], "cpu");
  lpattn_ctx *ctx = NULL;
  if (lpattn_create(cpu ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, NULL, &ctx) != LPATTN_OK)
    return test_skip("backend not available");
  make_streams();
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    vs_whole(ctx, &variants[i], 1);
    vs_whole(ctx, &variants[i], T);
    leak(ctx, &variants[i]);
  }
  bad_positions(ctx);
  unsupported(ctx);
  lpattn_free(ctx);
  return test_finish();
}
