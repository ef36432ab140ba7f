/* The static-scale FP8 page format of the paged pool (SPEC 11's last
 * bullet; lpattn.h lpattn_kv_pool_set_descales, SEMANTICS "Static FP8
 * pages") on a host backend (argv[1]: ref or cpu):
 * - size: 2048 B a token at 8 KV heads x D 128 (pages), 256 B a slot;
 * - prefill (chunks of 100, ragged per call) equals lpattn_attention
 *   FP8_STATIC (causal, block = page size) on the same tokens with the same
 *   descales: bitwise on ref, within a bound on cpu; the cpu pool equals the
 *   ref pool within a bound; the last row equals lpattn_paged_decode bitwise;
 * - descales act per (sequence, KV head): K and k_descale both doubled give
 *   the same bits;
 * - causal safety: tokens after t replaced by NaN/inf/huge values leave rows
 *   <= t bitwise unchanged (pieces of up to a page decode their own future);
 * - bad descales, a slot without descales, k/v descales in the call, PASA:
 *   specific errors with nothing written. */
#include <math.h>
#include <string.h>

#include "lpattn.h"
#include "testutil.h"

enum { T = 64, HQ = 4, HKV = 2, D = 64, NS = 2, N = 700, NP = 11, CH = 100 };

static float K[NS][HKV * N * D], V[NS][HKV * N * D], Q[NS][HQ * N * D];
static float KD[NS][HKV] = {{0.02f, 0.5f}, {0.125f, 0.01f}}, VD[NS][HKV] = {{0.01f, 0.03f}, {1.0f, 0.004f}};
static float QD[NS][HKV] = {{0.015f, 0.25f}, {0.02f, 0.0625f}};
static uint64_t rs = 11;

typedef struct {
  float o[NS][HQ * N * D], lse[NS][HQ * N];
} result;
static result R0, R1, R2;

static lpattn_kv_pool_params pool_params(int hkv, int hq, int d, int pages, int slots) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = hkv, pp.num_q_heads = hq, pp.head_dim = d, pp.page_size = T;
  pp.high_dtype = LPATTN_F32, pp.precision = LPATTN_PREC_FP8_STATIC;
  pp.num_pages = pages, pp.num_slots = slots;
  return pp;
}

typedef struct {
  lpattn_kv_pool *pool;
  int32_t slot[NS], len[NS], pages[NS][NP];
} seqs;

static lpattn_kv_batch batch_of(seqs *sq) {
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = NS;
  b.slots = lpattn_tensor_4d(sq->slot, LPATTN_I32, 1, 1, 1, NS);
  b.lengths = lpattn_tensor_4d(sq->len, LPATTN_I32, 1, 1, 1, NS);
  b.page_table = lpattn_tensor_4d(sq->pages, LPATTN_I32, 1, 1, NS, NP);
  b.max_length = N;
  return b;
}

static lpattn_status set_descales(lpattn_ctx *ctx, seqs *sq, float kd[NS][HKV], float vd[NS][HKV]) {
  lpattn_tensor sl = lpattn_tensor_4d(sq->slot, LPATTN_I32, 1, 1, 1, NS);
  lpattn_tensor tk = lpattn_tensor_4d(kd, LPATTN_F32, 1, 1, NS, HKV);
  lpattn_tensor tv = lpattn_tensor_4d(vd, LPATTN_F32, 1, 1, NS, HKV);
  return lpattn_kv_pool_set_descales(ctx, sq->pool, &sl, &tk, &tv);
}

static seqs fresh(lpattn_ctx *ctx) {
  seqs sq;
  memset(&sq, 0, sizeof sq);
  lpattn_kv_pool_params pp = pool_params(HKV, HQ, D, NS * NP, NS + 1);
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &sq.pool), LPATTN_OK);
  for (int s = 0; s < NS; s++) {
    sq.slot[s] = NS - s;
    for (int j = 0; j < NP; j++) sq.pages[s][j] = NS * NP - 1 - (j * NS + s); /* interleaved */
  }
  return sq;
}

/* Both sequences prefilled from 0 in ragged pieces (varlen: counts c and
 * c - 37 per call) of the token streams k, v, q ([NS][H][N][D]). */
static void prefill_all(lpattn_ctx *ctx, float (*k)[HKV * N * D], float (*q)[HQ * N * D],
                        float kd[NS][HKV], float qds[NS][HKV], result *r) {
  seqs sq = fresh(ctx);
  if (!sq.pool) return;
  CHECK_STATUS(set_descales(ctx, &sq, kd, VD), LPATTN_OK);
  static float pk[HKV * N * D], pv[HKV * N * D], pq[HQ * N * D], po[HQ * N * D], pl[HQ * N];
  lpattn_tensor qd = lpattn_tensor_4d(qds, LPATTN_F32, 1, 1, NS, HKV);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.q_descale = qd;
  while (sq.len[0] < N || sq.len[1] < N) {
    int32_t cu[NS + 1] = {0};
    for (int s = 0; s < NS; s++) {
      const int want = s ? CH - 37 : CH, c = N - sq.len[s] < want ? N - sq.len[s] : want;
      cu[s + 1] = cu[s] + c;
    }
    const int tot = cu[NS];
    for (int s = 0; s < NS; s++) /* pack each sequence's rows [len, len + c) */
      for (int r = 0; r < cu[s + 1] - cu[s]; r++) {
        for (int h = 0; h < HKV; h++)
          for (int d = 0; d < D; d++) {
            const size_t src = ((size_t)h * N + sq.len[s] + r) * D + d, dst = ((size_t)h * tot + cu[s] + r) * D + d;
            pk[dst] = k[s][src], pv[dst] = V[s][src];
          }
        for (int h = 0; h < HQ; h++)
          memcpy(pq + ((size_t)h * tot + cu[s] + r) * D, q[s] + ((size_t)h * N + sq.len[s] + r) * D, sizeof(float) * D);
      }
    lpattn_tensor tk = lpattn_tensor_4d(pk, LPATTN_F32, 1, HKV, tot, D), tv = lpattn_tensor_4d(pv, LPATTN_F32, 1, HKV, tot, D);
    lpattn_tensor tq = lpattn_tensor_4d(pq, LPATTN_F32, 1, HQ, tot, D), to = lpattn_tensor_4d(po, LPATTN_F32, 1, HQ, tot, D);
    lpattn_tensor tcu = lpattn_tensor_4d(cu, LPATTN_I32, 1, 1, 1, NS + 1);
    lpattn_attn_aux aux;
    lpattn_attn_aux_init(&aux);
    aux.lse = lpattn_tensor_4d(pl, LPATTN_F32, 1, HQ, tot, 1);
    lpattn_kv_batch b = batch_of(&sq);
    lpattn_status st = lpattn_paged_prefill_varlen(ctx, sq.pool, &b, &tk, &tv, &tq, &to, &tcu, &p, &aux);
    CHECK_STATUS(st, LPATTN_OK);
    if (st != LPATTN_OK) fprintf(stderr, "%s\n", lpattn_last_error());
    if (st != LPATTN_OK) break;
    for (int s = 0; s < NS; s++) {
      for (int h = 0; h < HQ; h++)
        for (int i = 0; i < cu[s + 1] - cu[s]; i++) {
          memcpy(r->o[s] + ((size_t)h * N + sq.len[s] + i) * D, po + ((size_t)h * tot + cu[s] + i) * D, sizeof(float) * D);
          r->lse[s][h * N + sq.len[s] + i] = pl[h * tot + cu[s] + i];
        }
      sq.len[s] += cu[s + 1] - cu[s];
    }
  }
  /* the last row again through lpattn_paged_decode: bitwise the prefill's */
  lpattn_tensor q1 = lpattn_tensor_4d(q[0] + (size_t)(N - 1) * D, LPATTN_F32, NS, HQ, 1, D);
  q1.stride[1] = (int64_t)N * D, q1.stride[0] = (int64_t)(q[1] - q[0]);
  static float o1[NS][HQ][D];
  lpattn_tensor to1 = lpattn_tensor_4d(o1, LPATTN_F32, NS, HQ, 1, D);
  lpattn_kv_batch b = batch_of(&sq);
  CHECK_STATUS(lpattn_paged_decode(ctx, sq.pool, &b, &q1, &to1, &p, NULL), LPATTN_OK);
  for (int s = 0; s < NS; s++)
    for (int h = 0; h < HQ; h++)
      CHECK(!memcmp(o1[s][h], r->o[s] + ((size_t)h * N + N - 1) * D, sizeof(float) * D),
            "decode of the last row differs from prefill (seq %d head %d)", s, h);
  lpattn_kv_pool_free(sq.pool);
}

/* lpattn_attention FP8_STATIC of sequence s, causal, block = T. */
static void attention(lpattn_ctx *ctx, int s, float *o, float *lse) {
  lpattn_tensor q = lpattn_tensor_4d(Q[s], LPATTN_F32, 1, HQ, N, D), out = lpattn_tensor_4d(o, LPATTN_F32, 1, HQ, N, D);
  lpattn_tensor k = lpattn_tensor_4d(K[s], LPATTN_F32, 1, HKV, N, D), v = lpattn_tensor_4d(V[s], LPATTN_F32, 1, HKV, N, D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = LPATTN_PREC_FP8_STATIC, p.causal = 1, p.block_q = p.block_k = T;
  p.q_descale = lpattn_tensor_4d(QD[s], LPATTN_F32, 1, 1, 1, HKV);
  p.k_descale = lpattn_tensor_4d(KD[s], LPATTN_F32, 1, 1, 1, HKV);
  p.v_descale = lpattn_tensor_4d(VD[s], LPATTN_F32, 1, 1, 1, HKV);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lpattn_tensor_4d(lse, LPATTN_F32, 1, HQ, N, 1);
  CHECK_STATUS(lpattn_attention(ctx, &q, &k, &v, &out, &p, &aux), LPATTN_OK);
}

static double rel_l2(const float *a, const float *b, size_t n, double *maxd) {
  double num = 0.0, den = 0.0;
  *maxd = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)a[i] - b[i];
    num += d * d, den += (double)b[i] * b[i];
    if (fabs(d) > *maxd || d != d) *maxd = d != d ? INFINITY : fabs(d);
  }
  return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static void sizes(void) {
  lpattn_kv_pool_params pp = pool_params(8, 32, 128, 1000, 10);
  size_t page, slot, pool;
  CHECK_STATUS(lpattn_kv_pool_size(&pp, &page, &slot, &pool), LPATTN_OK);
  CHECK(page == 2048u * T, "page_bytes = %zu, want %u (2048 B a token)", page, 2048u * T);
  CHECK(slot == 256, "slot_bytes = %zu, want 256 (header + 2 x 8 descales)", slot);
  CHECK(pool == 1000 * page + 10 * slot, "pool_bytes = %zu", pool);
  printf("FP8_STATIC 8 x 128: %zu B a page of %d tokens (%zu a token), %zu a slot\n", page, T, page / T, slot);
}

/* Nothing written by a failed call: the caller-owned pool memory is unchanged. */
static void errors(lpattn_ctx *ctx) {
  lpattn_kv_pool_params pp = pool_params(HKV, HQ, D, 4, 2);
  size_t need;
  CHECK_STATUS(lpattn_kv_pool_size(&pp, NULL, NULL, &need), LPATTN_OK);
  static unsigned char mem[1 << 20] __attribute__((aligned(256))), snap[1 << 20];
  if (need > sizeof mem) return;
  /* caller memory holding finite positive garbage (0x3f3f3f3f = 0.747f): the
   * pool still starts every slot without descales (checked by the append below) */
  memset(mem, 0x3f, need);
  lpattn_kv_pool *pool = NULL;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, mem, need, &pool), LPATTN_OK);
  if (!pool) return;
  int32_t slots[2] = {0, 1}, twice[2] = {1, 1}, out_of[2] = {0, 2}, pages[2][2] = {{0, 1}, {2, 3}}, len[2] = {0, 0};
  float good[2][HKV] = {{1, 1}, {1, 1}}, bad[2][HKV];
  lpattn_tensor ts = lpattn_tensor_4d(slots, LPATTN_I32, 1, 1, 1, 2);
  lpattn_tensor tg = lpattn_tensor_4d(good, LPATTN_F32, 1, 1, 2, HKV);
  const float vals[4] = {NAN, INFINITY, 0.0f, -1.0f};
  for (int i = 0; i < 4; i++) {
    for (int a = 0; a < 2 * HKV; a++) bad[a / HKV][a % HKV] = a == 3 ? vals[i] : 1.0f;
    lpattn_tensor tb = lpattn_tensor_4d(bad, LPATTN_F32, 1, 1, 2, HKV);
    memcpy(snap, mem, need);
    CHECK_STATUS(lpattn_kv_pool_set_descales(ctx, pool, &ts, &tg, &tb), LPATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(lpattn_kv_pool_set_descales(ctx, pool, &ts, &tb, &tg), LPATTN_ERR_INVALID_ARGUMENT);
    CHECK(!memcmp(snap, mem, need), "a rejected descale %g wrote to the pool", (double)vals[i]);
  }
  lpattn_tensor shape = lpattn_tensor_4d(good, LPATTN_F32, 1, 1, 1, HKV);
  CHECK_STATUS(lpattn_kv_pool_set_descales(ctx, pool, &ts, &shape, &tg), LPATTN_ERR_BAD_SHAPE);
  lpattn_tensor dt = tg;
  dt.dtype = LPATTN_I32;
  CHECK_STATUS(lpattn_kv_pool_set_descales(ctx, pool, &ts, &dt, &tg), LPATTN_ERR_BAD_DTYPE);
  lpattn_tensor t2 = lpattn_tensor_4d(twice, LPATTN_I32, 1, 1, 1, 2), to = lpattn_tensor_4d(out_of, LPATTN_I32, 1, 1, 1, 2);
  CHECK_STATUS(lpattn_kv_pool_set_descales(ctx, pool, &t2, &tg, &tg), LPATTN_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(lpattn_kv_pool_set_descales(ctx, pool, &to, &tg, &tg), LPATTN_ERR_INVALID_ARGUMENT);
  CHECK(!memcmp(snap, mem, need), "a rejected set_descales wrote to the pool");
  /* an append before the slot's descales: rejected, nothing written */
  static float kx[2 * HKV * 3 * D], qx[2 * HQ * 3 * D], ox[2 * HQ * 3 * D];
  lpattn_tensor k = lpattn_tensor_4d(kx, LPATTN_F32, 2, HKV, 3, D);
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = 2, b.max_length = 2 * T;
  b.slots = ts, b.lengths = lpattn_tensor_4d(len, LPATTN_I32, 1, 1, 1, 2);
  b.page_table = lpattn_tensor_4d(pages, LPATTN_I32, 1, 1, 2, 2);
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b, &k, &k, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  CHECK(!memcmp(snap, mem, need), "an append to a slot without descales wrote to the pool");
  CHECK_STATUS(lpattn_kv_pool_set_descales(ctx, pool, &ts, &tg, &tg), LPATTN_OK);
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b, &k, &k, NULL), LPATTN_OK);
  /* decode: k/v descales belong to the slots; q_descale's shape is checked */
  len[0] = len[1] = 3;
  lpattn_tensor q = lpattn_tensor_4d(qx, LPATTN_F32, 2, HQ, 1, D), o = lpattn_tensor_4d(ox, LPATTN_F32, 2, HQ, 1, D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.k_descale = tg;
  memcpy(snap, mem, need);
  CHECK_STATUS(lpattn_paged_decode(ctx, pool, &b, &q, &o, &p, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_attn_params_init(&p);
  p.q_descale = shape;
  CHECK_STATUS(lpattn_paged_decode(ctx, pool, &b, &q, &o, &p, NULL), LPATTN_ERR_BAD_SHAPE);
  p.q_descale = tg;
  CHECK_STATUS(lpattn_paged_decode(ctx, pool, &b, &q, &o, &p, NULL), LPATTN_OK);
  CHECK(!memcmp(snap, mem, need), "decode wrote to the pool");
  lpattn_kv_pool_free(pool);
  /* PASA has no static FP8 form; another precision takes no descales */
  pp.pasa = 1;
  CHECK_STATUS(lpattn_kv_pool_size(&pp, NULL, NULL, &need), LPATTN_ERR_INVALID_ARGUMENT);
  pp.pasa = 0, pp.precision = LPATTN_PREC_FP8;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool), LPATTN_OK);
  CHECK_STATUS(lpattn_kv_pool_set_descales(ctx, pool, &ts, &tg, &tg), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_kv_pool_free(pool);
}

int main(int argc, char **argv) {
  const int cpu = argc > 1 && !strcmp(argv[1], "cpu");
  lpattn_ctx *ctx = NULL, *ref = NULL;
  if (lpattn_create(cpu ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, NULL, &ctx) != LPATTN_OK)
    return test_skip("backend not available");
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, &ref), LPATTN_OK);
  for (int s = 0; s < NS; s++) {
    for (int i = 0; i < HKV * N * D; i++)
      K[s][i] = (tu_gauss(&rs) + 0.5f) * KD[s][i / (N * D)] * 40.0f, V[s][i] = tu_gauss(&rs) * VD[s][i / (N * D)] * 100.0f;
    for (int i = 0; i < HQ * N * D; i++) Q[s][i] = tu_gauss(&rs) * QD[s][i / (N * D) / (HQ / HKV)] * 40.0f;
  }
  sizes();
  prefill_all(ctx, K, Q, KD, QD, &R0);
  static float ao[HQ * N * D], al[HQ * N];
  for (int s = 0; s < NS; s++) {
    attention(ctx, s, ao, al);
    double md, ml;
    const double e = rel_l2(R0.o[s], ao, sizeof ao / sizeof(float), &md);
    rel_l2(R0.lse[s], al, sizeof al / sizeof(float), &ml);
    printf("seq %d: pool vs lpattn_attention FP8_STATIC: rel L2 %.3g, max |dO| %.3g, max |dLSE| %.3g\n", s, e, md, ml);
    if (!cpu) CHECK(md == 0.0 && ml == 0.0, "ref: pool rows differ from the prefill's (max |dO| %g)", md);
    else CHECK(e <= 1e-5 && ml <= 2e-4, "cpu: pool vs attention rel L2 %g, |dLSE| %g", e, ml);
  }
  if (cpu && ref) { /* the cpu pool against the ref pool */
    prefill_all(ref, K, Q, KD, QD, &R1);
    for (int s = 0; s < NS; s++) {
      double md, ml;
      const double e = rel_l2(R0.o[s], R1.o[s], HQ * N * D, &md);
      rel_l2(R0.lse[s], R1.lse[s], HQ * N, &ml);
      printf("seq %d: cpu pool vs ref pool: rel L2 %.3g, max |dO| %.3g, max |dLSE| %.3g\n", s, e, md, ml);
      CHECK(e <= 1e-5 && ml <= 2e-4, "cpu vs ref rel L2 %g, |dLSE| %g", e, ml);
    }
  }
  /* descales per (sequence, KV head): K and k_descale doubled, Q and
   * q_descale halved: the same codes and factors, the same bits */
  static float K2[NS][HKV * N * D], Q2[NS][HQ * N * D], KD2[NS][HKV], QD2[NS][HKV];
  for (int s = 0; s < NS; s++) {
    for (int i = 0; i < HKV * N * D; i++) K2[s][i] = 2.0f * K[s][i];
    for (int i = 0; i < HQ * N * D; i++) Q2[s][i] = 0.5f * Q[s][i];
    for (int h = 0; h < HKV; h++) KD2[s][h] = 2.0f * KD[s][h], QD2[s][h] = 0.5f * QD[s][h];
  }
  prefill_all(ctx, K2, Q2, KD2, QD2, &R2);
  CHECK(!memcmp(R0.o, R2.o, sizeof R0.o), "K and k_descale doubled, Q and q_descale halved: other bits");
  /* and the descales are read: k_descale doubled alone doubles the scores */
  prefill_all(ctx, K2, Q, KD2, QD, &R2);
  CHECK(memcmp(R0.lse, R2.lse, sizeof R0.lse) != 0, "doubling k_descale changed nothing");
  /* causal safety: tokens after t get NaN/inf/huge K, V and Q */
  const int t = 300;
  static float K3[NS][HKV * N * D], Q3[NS][HQ * N * D];
  memcpy(K3, K, sizeof K), memcpy(Q3, Q, sizeof Q);
  static float Vsave[NS][HKV * N * D];
  memcpy(Vsave, V, sizeof V);
  for (int s = 0; s < NS; s++) {
    for (int h = 0; h < HKV; h++)
      for (int p = t + 1; p < N; p++)
        for (int d = 0; d < D; d++) {
          const size_t e = ((size_t)h * N + p) * D + d;
          K3[s][e] = p % 3 == 0 ? NAN : 1e30f, V[s][e] = p % 3 == 1 ? -INFINITY : NAN;
        }
    for (int i = 0; i < HQ * N * D; i++)
      if ((i / D) % N > t) Q3[s][i] = NAN;
  }
  prefill_all(ctx, K3, Q3, KD, QD, &R2);
  memcpy(V, Vsave, sizeof V);
  for (int s = 0; s < NS; s++)
    for (int h = 0; h < HQ; h++) {
      CHECK(!memcmp(R0.o[s] + (size_t)h * N * D, R2.o[s] + (size_t)h * N * D, sizeof(float) * (t + 1) * D),
            "leak: rows <= %d of seq %d head %d changed", t, s, h);
      CHECK(!memcmp(R0.lse[s] + h * N, R2.lse[s] + h * N, sizeof(float) * (t + 1)), "leak (lse) seq %d head %d", s, h);
    }
  errors(ctx);
  lpattn_free(ctx);
  lpattn_free(ref);
  return test_finish();
}
