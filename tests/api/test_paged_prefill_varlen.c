/* Ragged prefill against the paged pool (lpattn.h lpattn_paged_prefill_varlen,
 * SEMANTICS "Prefill against the paged pool") on a host backend (argv[1]: ref
 * or cpu), every pool precision of tests/api/test_paged_prefill.c:
 * - four sequences, three rounds of ragged counts (0 included, counts above
 *   page_size, counts starting inside a tile and crossing tile borders), the
 *   packed rows in both layouts ([1, H, total, D] and FlashAttention's
 *   [total, H, D]): out and lse are bitwise those of one lpattn_paged_prefill
 *   per sequence with the same count, and the two pools' bytes are equal
 *   after every round;
 * - bad cu_seqlens (NULL, wrong dtype, wrong entry count, first entry not 0,
 *   decreasing, last entry not total), packed shapes, a count past the
 *   sequence's page table (CACHE_FULL, checked per sequence), a page written
 *   by one sequence and read by another, lengths, NaN with check_finite each
 *   get their own error and write nothing: out, lse and every byte of the
 *   pool (pages and slots) are as before. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "lpattn.h"
#include "pool_variants.h"
#include "testutil.h"

enum { T = 32, HQ = 4, HKV = 2, D = 64, NS = 4, NP = 5, ROUNDS = 3, MAXT = 256 };


/* New tokens of each sequence per round: 0, > page_size, from inside a tile
 * across its border (sequence lengths end at 101, 101, 97, 128). */
static const int COUNT[ROUNDS][NS] = {{37, 0, 70, 5}, {0, 100, 27, 32}, {64, 1, 0, 91}};

static uint64_t rs = 11;
static float rnd(void) { return tu_gauss(&rs); }

/* One round's packed rows: K, V [HKV][MAXT][D] storage, Q [HQ][MAXT][D]. */
static float K[HKV * MAXT * D], V[HKV * MAXT * D], Q[HQ * MAXT * D];
static float O1[HQ * MAXT * D], O2[HQ * MAXT * D], L1[HQ * MAXT], L2[HQ * MAXT];

/* rows [r0, r0 + n) of a packed array of H heads: thd = 0 as {1, H, n, W}
 * over [H][MAXT][W], thd = 1 as FlashAttention's [total, H, W] (row stride
 * H * W). */
static lpattn_tensor packed(float *x, int H, int W, int r0, int n, int thd) {
  lpattn_tensor t = lpattn_tensor_4d(x, LPATTN_F32, 1, H, n, W);
  if (thd) {
    t.data = x + (size_t)r0 * H * W;
    t.stride[0] = 0, t.stride[1] = W, t.stride[2] = (int64_t)H * W, t.stride[3] = 1;
  } else {
    t.data = x + (size_t)r0 * W;
    t.stride[0] = 0, t.stride[1] = (int64_t)MAXT * W, t.stride[2] = W, t.stride[3] = 1;
  }
  return t;
}

typedef struct {
  lpattn_kv_pool *pool;
  unsigned char *mem;
  size_t bytes;
  int32_t slot[NS], len[NS], pages[NS][NP];
} seqs;

static float pasa_beta(void) { return (float)lpattn_pasa_beta(LPATTN_F16, T, 0.0); }

/* A pool in caller memory (zeroed), so the test can compare its bytes. */
static int make(lpattn_ctx *ctx, const variant *va, seqs *sq) {
  memset(sq, 0, sizeof *sq);
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = HKV, pp.num_q_heads = HQ, pp.head_dim = D, pp.page_size = T;
  pp.high_dtype = LPATTN_F32, pp.precision = va->prec, pp.thrift_low = LPATTN_FMT_NVFP4;
  pp.pasa = va->pasa, pp.pasa_beta = pasa_beta();
  pp.num_pages = NS * NP, pp.num_slots = NS;
  CHECK_STATUS(lpattn_kv_pool_size(&pp, NULL, NULL, &sq->bytes), LPATTN_OK);
  sq->mem = aligned_alloc(256, (sq->bytes + 255) / 256 * 256);
  if (!sq->mem) return 0;
  memset(sq->mem, 0, sq->bytes);
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, sq->mem, sq->bytes, &sq->pool), LPATTN_OK);
  if (!sq->pool) return free(sq->mem), 0;
  for (int s = 0; s < NS; s++) {
    sq->slot[s] = NS - 1 - s;
    for (int j = 0; j < NP; j++) sq->pages[s][j] = NS * NP - 1 - (j * NS + s); /* interleaved */
  }
  return 1;
}

static void drop(seqs *sq) {
  lpattn_kv_pool_free(sq->pool);
  free(sq->mem);
}

static lpattn_kv_batch batch_of(seqs *sq, int s0, int ns) {
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = ns;
  b.slots = lpattn_tensor_4d(&sq->slot[s0], LPATTN_I32, 1, 1, 1, ns);
  b.lengths = lpattn_tensor_4d(&sq->len[s0], LPATTN_I32, 1, 1, 1, ns);
  b.page_table = lpattn_tensor_4d(sq->pages[s0], LPATTN_I32, 1, 1, ns, NP);
  b.max_length = NP * T;
  return b;
}

static lpattn_attn_params params_of(void) {
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  return p;
}

static lpattn_attn_aux aux_of(float *lse, int r0, int n) {
  lpattn_attn_aux a;
  lpattn_attn_aux_init(&a);
  a.lse = packed(lse, HQ, 1, r0, n, 0);
  return a;
}

/* The ragged call of counts c over the round's rows. */
static lpattn_status ragged(lpattn_ctx *ctx, seqs *sq, const int32_t *cu, int thd, float *o, float *l,
                            const lpattn_attn_params *p) {
  const int total = cu[NS];
  lpattn_tensor k = packed(K, HKV, D, 0, total, thd), v = packed(V, HKV, D, 0, total, thd);
  lpattn_tensor q = packed(Q, HQ, D, 0, total, thd), out = packed(o, HQ, D, 0, total, thd);
  lpattn_tensor tc = lpattn_tensor_4d((void *)cu, LPATTN_I32, 1, 1, 1, NS + 1);
  lpattn_attn_aux a = aux_of(l, 0, total);
  lpattn_kv_batch b = batch_of(sq, 0, NS);
  return lpattn_paged_prefill_varlen(ctx, sq->pool, &b, &k, &v, &q, &out, &tc, p, &a);
}

static void run_variant(lpattn_ctx *ctx, const variant *va) {
  seqs A, B;
  if (!make(ctx, va, &A)) return;
  if (!make(ctx, va, &B)) return drop(&A);
  const lpattn_attn_params p = params_of();
  int same_out = 1, same_pool = 1, calls = 0;
  for (int r = 0; r < ROUNDS; r++) {
    const int thd = r == 1;
    int32_t cu[NS + 1] = {0};
    for (int s = 0; s < NS; s++) cu[s + 1] = cu[s] + COUNT[r][s];
    for (size_t i = 0; i < sizeof K / sizeof(float); i++) K[i] = rnd() + 0.5f, V[i] = rnd();
    for (size_t i = 0; i < sizeof Q / sizeof(float); i++) Q[i] = rnd();
    memset(O1, 0, sizeof O1), memset(O2, 0, sizeof O2), memset(L1, 0, sizeof L1), memset(L2, 0, sizeof L2);
    CHECK_STATUS(ragged(ctx, &A, cu, thd, O1, L1, &p), LPATTN_OK);
    for (int s = 0; s < NS; s++) { /* B: one lpattn_paged_prefill per sequence */
      const int c = COUNT[r][s];
      if (c) {
        lpattn_tensor k = packed(K, HKV, D, cu[s], c, thd), v = packed(V, HKV, D, cu[s], c, thd);
        lpattn_tensor q = packed(Q, HQ, D, cu[s], c, thd), o = packed(O2, HQ, D, cu[s], c, thd);
        lpattn_attn_aux a = aux_of(L2, cu[s], c);
        lpattn_kv_batch b = batch_of(&B, s, 1);
        CHECK_STATUS(lpattn_paged_prefill(ctx, B.pool, &b, &k, &v, &q, &o, &p, &a), LPATTN_OK);
        calls++;
      }
      A.len[s] += c, B.len[s] += c;
    }
    int written = 1; /* every packed row has its LSE (> 0 here: sums of >= 1 terms of e^{s - max}) */
    for (int h = 0; h < HQ; h++)
      for (int i = 0; i < cu[NS]; i++) written &= L1[h * MAXT + i] != 0.0f;
    CHECK(written, "%s round %d: a row of the ragged call was not written", va->name, r);
    same_out &= !memcmp(O1, O2, sizeof O1) && !memcmp(L1, L2, sizeof L1);
    same_pool &= !memcmp(A.mem, B.mem, A.bytes);
  }
  CHECK(same_out, "%s: ragged rows differ from per-sequence lpattn_paged_prefill", va->name);
  CHECK(same_pool, "%s: the ragged call's pool bytes differ from per-sequence calls'", va->name);
  printf("%-10s %d rounds, %d per-sequence calls: out, lse and pool %s\n", va->name, ROUNDS, calls,
         same_out && same_pool ? "bitwise equal" : "DIFFER");
  drop(&A), drop(&B);
}

/* Bad calls: a specific error each, nothing written (out and the pool's bytes). */
static void errors(lpattn_ctx *ctx, const variant *va) {
  seqs sq;
  if (!make(ctx, va, &sq)) return;
  const lpattn_attn_params p0 = params_of();
  lpattn_attn_params p = p0;
  static const int32_t first[NS + 1] = {0, 40, 40, 80, 81}; /* 40, 0, 40, 1 */
  for (size_t i = 0; i < sizeof K / sizeof(float); i++) K[i] = rnd() + 0.5f, V[i] = rnd();
  for (size_t i = 0; i < sizeof Q / sizeof(float); i++) Q[i] = rnd();
  CHECK_STATUS(ragged(ctx, &sq, first, 0, O1, L1, &p), LPATTN_OK);
  for (int s = 0; s < NS; s++) sq.len[s] += first[s + 1] - first[s];
  unsigned char *snap = malloc(sq.bytes);
  if (!snap) return drop(&sq);
  memcpy(snap, sq.mem, sq.bytes);
  for (size_t i = 0; i < sizeof O1 / sizeof(float); i++) O1[i] = -7.0f;
  for (size_t i = 0; i < sizeof L1 / sizeof(float); i++) L1[i] = -7.0f;
  memcpy(O2, O1, sizeof O1), memcpy(L2, L1, sizeof L1);

  int32_t cu[NS + 1] = {0, 30, 30, 90, 120}; /* 30, 0, 60, 30: valid (to 70, 0, 100, 31) */
  const int total = 120;
  lpattn_tensor k = packed(K, HKV, D, 0, total, 0), v = packed(V, HKV, D, 0, total, 0);
  lpattn_tensor q = packed(Q, HQ, D, 0, total, 0), o = packed(O1, HQ, D, 0, total, 0);
  lpattn_tensor tc = lpattn_tensor_4d(cu, LPATTN_I32, 1, 1, 1, NS + 1);
  lpattn_attn_aux a = aux_of(L1, 0, total);
  lpattn_kv_batch b = batch_of(&sq, 0, NS);
#define CALL(cut) lpattn_paged_prefill_varlen(ctx, sq.pool, &b, &k, &v, &q, &o, (cut), &p, &a)
#define NAMES(word) CHECK(strstr(lpattn_last_error(), word) != NULL, "error \"%s\" names no %s", \
                          lpattn_last_error(), word)
  CHECK_STATUS(CALL(NULL), LPATTN_ERR_NULL_POINTER);
  NAMES("cu_seqlens");
  lpattn_tensor bad = tc;
  bad.data = NULL;
  CHECK_STATUS(CALL(&bad), LPATTN_ERR_NULL_POINTER);
  NAMES("cu_seqlens");
  bad = tc, bad.dtype = LPATTN_F32;
  CHECK_STATUS(CALL(&bad), LPATTN_ERR_BAD_DTYPE);
  NAMES("cu_seqlens");
  bad = tc, bad.shape[3] = NS; /* one entry short */
  CHECK_STATUS(CALL(&bad), LPATTN_ERR_BAD_SHAPE);
  NAMES("num_seqs + 1");
  bad = tc, bad.shape[2] = NS + 1, bad.shape[3] = 1, bad.stride[2] = 1;
  CHECK_STATUS(CALL(&bad), LPATTN_ERR_BAD_SHAPE);
  NAMES("cu_seqlens.shape");
  cu[0] = 1;
  CHECK_STATUS(CALL(&tc), LPATTN_ERR_INVALID_ARGUMENT);
  NAMES("cu_seqlens[0]");
  cu[0] = 0, cu[2] = 20; /* 30, 20: decreasing */
  CHECK_STATUS(CALL(&tc), LPATTN_ERR_INVALID_ARGUMENT);
  NAMES("never decrease");
  cu[2] = 30, cu[4] = 119; /* last != total */
  CHECK_STATUS(CALL(&tc), LPATTN_ERR_BAD_SHAPE);
  NAMES("cu_seqlens[4]");
  cu[4] = 120;
  /* packed shapes: q with another total; out unpacked; lse of another total */
  bad = q, bad.shape[2] = 119;
  CHECK_STATUS(lpattn_paged_prefill_varlen(ctx, sq.pool, &b, &k, &v, &bad, &o, &tc, &p, &a), LPATTN_ERR_BAD_SHAPE);
  bad = o, bad.shape[0] = NS, bad.shape[2] = 30, bad.stride[0] = 30 * D;
  CHECK_STATUS(lpattn_paged_prefill_varlen(ctx, sq.pool, &b, &k, &v, &q, &bad, &tc, &p, &a), LPATTN_ERR_BAD_SHAPE);
  lpattn_attn_aux a2 = aux_of(L1, 0, total - 1);
  CHECK_STATUS(lpattn_paged_prefill_varlen(ctx, sq.pool, &b, &k, &v, &q, &o, &tc, &p, &a2), LPATTN_ERR_BAD_SHAPE);
  /* per-sequence counts: sequence 3 (1 + 160 tokens > NP * T = 160; the others fit) */
  int32_t full[NS + 1] = {0, 1, 1, 2, 162};
  lpattn_tensor tfull = lpattn_tensor_4d(full, LPATTN_I32, 1, 1, 1, NS + 1);
  lpattn_tensor kf = packed(K, HKV, D, 0, 162, 0), vf = packed(V, HKV, D, 0, 162, 0);
  lpattn_tensor qf = packed(Q, HQ, D, 0, 162, 0), of = packed(O1, HQ, D, 0, 162, 0);
  lpattn_attn_aux af = aux_of(L1, 0, 162);
  CHECK_STATUS(lpattn_paged_prefill_varlen(ctx, sq.pool, &b, &kf, &vf, &qf, &of, &tfull, &p, &af),
               LPATTN_ERR_CACHE_FULL);
  NAMES("sequence 3");
  /* sequence 2 reads a page that sequence 0 writes (its tile 1, tokens 32..63) */
  int32_t keep = sq.pages[2][0];
  sq.pages[2][0] = sq.pages[0][1];
  CHECK_STATUS(CALL(&tc), LPATTN_ERR_BAD_PAGE);
  sq.pages[2][0] = keep;
  /* a length that is not the slot's */
  sq.len[2] = 39; /* sequence 2 holds 40 */
  CHECK_STATUS(CALL(&tc), LPATTN_ERR_INVALID_ARGUMENT);
  NAMES("batch.lengths[2]");
  sq.len[2] = 40;
  /* check_finite: a NaN in sequence 2's rows */
  const size_t at = ((size_t)1 * MAXT + 75) * D + 5; /* head 1, packed row 75 */
  const float kept = K[at];
  K[at] = NAN;
  p.check_finite = 1;
  CHECK_STATUS(CALL(&tc), LPATTN_ERR_NONFINITE);
  K[at] = kept, p = p0;
  b.kv_start = b.q_start = tc;
  CHECK_STATUS(CALL(&tc), LPATTN_ERR_INVALID_ARGUMENT);
  b = batch_of(&sq, 0, NS);
  CHECK(!memcmp(O1, O2, sizeof O1) && !memcmp(L1, L2, sizeof L1), "%s: a refused call wrote out or lse",
        va->name);
  CHECK(!memcmp(snap, sq.mem, sq.bytes), "%s: a refused call wrote the pool", va->name);
  /* The valid call then goes on from the lengths as they were. Sequence 1
   * (count 0, length 0) reads no page: sequence 0's page in its table is
   * no conflict. */
  sq.pages[1][0] = sq.pages[0][1];
  CHECK_STATUS(CALL(&tc), LPATTN_OK);
  CHECK(O1[0] != -7.0f, "%s: the valid call wrote no row", va->name);
#undef CALL
#undef NAMES
  free(snap);
  drop(&sq);
}

int main(int argc, char **argv) {
  const int cpu = argc > 1 && !strcmp(argv[1], "cpu");
  lpattn_ctx *ctx = NULL;
  if (lpattn_create(cpu ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, NULL, &ctx) != LPATTN_OK)
    return test_skip("backend not available");
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) run_variant(ctx, &variants[i]);
  errors(ctx, &variants[0]); /* HIGH: pages written as touched */
  errors(ctx, &variants[2]); /* NVFP4: pages written when complete */
  lpattn_free(ctx);
  return test_finish();
}
