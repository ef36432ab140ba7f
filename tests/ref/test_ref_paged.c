/* The paged KV pool on a host backend (argv[1]: "ref" or "cpu"; SPEC 9,
 * lpattn.h "paged KV storage"): decode through page tables is bitwise
 * independent of where pages sit and of the batch; forks share prefix pages;
 * append in any token grouping gives the same cache; rows never depend on
 * later tokens; decode equals prefill rows; cpu equals ref within tolerance.
 * Bad input (test_api covers the statuses) is in tests/api/test_kv_pool.c. */
#include <string.h>

#include "refutil.h"

enum { T = 32, H = 4, HKV = 2, D = 64, N = 21 * T + 5, NS = 3 };

typedef struct {
  const char *name;
  lpattn_precision prec;
  lpattn_format low;
  int pasa;
} variant;

static const variant variants[] = {
    {"high", LPATTN_PREC_HIGH, LPATTN_FMT_NVFP4, 0},
    {"fp8", LPATTN_PREC_FP8, LPATTN_FMT_NVFP4, 0},
    {"nvfp4", LPATTN_PREC_NVFP4, LPATTN_FMT_NVFP4, 0},
    {"mxfp4", LPATTN_PREC_MXFP4, LPATTN_FMT_NVFP4, 0},
    {"thrift nvfp4", LPATTN_PREC_THRIFT, LPATTN_FMT_NVFP4, 0},
    {"pasa nvfp4", LPATTN_PREC_NVFP4, LPATTN_FMT_NVFP4, 1},
    {"pasa high", LPATTN_PREC_HIGH, LPATTN_FMT_NVFP4, 1},
};

/* Token streams: K, V [NS][HKV][N][D], Q [NS][H][N][D] (f16-representable). */
static float K[NS][HKV * N * D], V[NS][HKV * N * D], Q[NS][H * N * D];

static void make_streams(void) {
  rng_t r = {7};
  for (int s = 0; s < NS; s++) {
    fill_normal(&r, K[s], HKV * N * D, 0.5, 1.0);
    fill_normal(&r, V[s], HKV * N * D, 0.0, 1.0);
    fill_normal(&r, Q[s], H * N * D, 0.2, 1.0);
    for (int64_t i = 0; i < HKV * N * D; i++)
      K[s][i] = lpattn_f16_to_f32(lpattn_f32_to_f16(K[s][i])),
      V[s][i] = lpattn_f16_to_f32(lpattn_f32_to_f16(V[s][i]));
  }
}

static int q_heads = H;

#ifdef LPATTN_TEST_CPU /* the cpu_paged build: hooks of backends/cpu (cpu.h) */
int lpattn_cpu_targets(int64_t *targets, int max);
const char *lpattn_cpu_target_name(int64_t target);
void lpattn_cpu_force_target(int64_t target);
#else
static int lpattn_cpu_targets(int64_t *targets, int max) { return (void)targets, (void)max, 0; }
static const char *lpattn_cpu_target_name(int64_t target) { return (void)target, ""; }
static void lpattn_cpu_force_target(int64_t target) { (void)target; }
#endif /* H, or HKV for the one-row-per-item case */

static lpattn_kv_pool *make_pool(lpattn_ctx *ctx, const variant *va, int pages, int slots) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = HKV, pp.num_q_heads = q_heads, pp.head_dim = D, pp.page_size = T;
  pp.precision = va->prec, pp.thrift_low = va->low, pp.pasa = va->pasa;
  pp.num_pages = pages, pp.num_slots = slots;
  lpattn_kv_pool *pool = NULL;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool), LPATTN_OK);
  return pool;
}

/* A sequence of the tests: its slot, page table and length. */
typedef struct {
  int32_t slot, len, pages[N / T + 1];
} seq_t;

static lpattn_kv_batch batch_of(seq_t *s, int n, int64_t max_len) {
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = n;
  b.slots = lpattn_tensor_4d(&s[0].slot, LPATTN_I32, 1, 1, 1, n);
  b.slots.stride[3] = sizeof(seq_t) / 4;
  b.lengths = lpattn_tensor_4d(&s[0].len, LPATTN_I32, 1, 1, 1, n);
  b.lengths.stride[3] = sizeof(seq_t) / 4;
  b.page_table = lpattn_tensor_4d(s[0].pages, LPATTN_I32, 1, 1, n, N / T + 1);
  b.page_table.stride[2] = sizeof(seq_t) / 4;
  b.max_length = max_len;
  return b;
}

/* Appends tokens [t0, t0 + n) of stream st to sequence s, `step` at a time. */
static void append(lpattn_ctx *ctx, lpattn_kv_pool *pool, seq_t *s, int st, int64_t t0,
                   int64_t n, int64_t step) {
  for (int64_t a = t0; a < t0 + n; a += step) {
    const int64_t m = t0 + n - a < step ? t0 + n - a : step;
    lpattn_tensor k = lpattn_tensor_4d(K[st] + a * D, LPATTN_F32, 1, HKV, m, D);
    lpattn_tensor v = lpattn_tensor_4d(V[st] + a * D, LPATTN_F32, 1, HKV, m, D);
    lpattn_tensor q = lpattn_tensor_4d(Q[st] + a * D, LPATTN_F32, 1, q_heads, m, D);
    k.stride[1] = v.stride[1] = q.stride[1] = N * D;
    lpattn_kv_batch b = batch_of(s, 1, N);
    CHECK_STATUS(lpattn_kv_append(ctx, pool, &b, &k, &v, &q), LPATTN_OK);
    s->len += (int32_t)m;
  }
}

typedef struct {
  float o[NS * H * T * D], lse[NS * H * T], ent[NS * H * T];
} result;

static lpattn_attn_params params(const variant *va) {
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.thrift_k = 3;
  (void)va;
  return p;
}

/* Decodes the last Sq positions of n sequences (their queries from stream
 * st[i]) in one call. */
static void decode(lpattn_ctx *ctx, lpattn_kv_pool *pool, const variant *va, seq_t *s,
                   const int *st, int n, int64_t Sq, result *res) {
  static float qb[NS * H * T * D];
  int64_t max_len = 0;
  const int Hq = q_heads;
  for (int i = 0; i < n; i++) {
    max_len = s[i].len > max_len ? s[i].len : max_len;
    for (int h = 0; h < Hq; h++)
      memcpy(qb + ((i * Hq + h) * Sq) * D, Q[st[i]] + ((int64_t)h * N + s[i].len - Sq) * D,
             sizeof(float) * (size_t)(Sq * D));
  }
  lpattn_tensor q = lpattn_tensor_4d(qb, LPATTN_F32, n, Hq, Sq, D);
  lpattn_tensor o = lpattn_tensor_4d(res->o, LPATTN_F32, n, Hq, Sq, D);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lpattn_tensor_4d(res->lse, LPATTN_F32, n, Hq, Sq, 1);
  aux.entropy = lpattn_tensor_4d(res->ent, LPATTN_F32, n, Hq, Sq, 1);
  lpattn_kv_batch b = batch_of(s, n, max_len);
  lpattn_attn_params p = params(va);
  CHECK_STATUS(lpattn_paged_decode(ctx, pool, &b, &q, &o, &p, &aux), LPATTN_OK);
}

static int same(const result *a, const result *b, int64_t rows) {
  return !memcmp(a->o, b->o, sizeof(float) * (size_t)(rows * D)) &&
         !memcmp(a->lse, b->lse, sizeof(float) * (size_t)rows) &&
         !memcmp(a->ent, b->ent, sizeof(float) * (size_t)rows);
}

static const int64_t lens[NS] = {5 * T + 3, T + 1, 20 * T + 5};

/* Contiguous pages vs shuffled pages; a batch of three vs each alone;
 * appends of 1, 7 and all tokens at a time. */
static void layout_and_batch(lpattn_ctx *ctx, const variant *va, int64_t Sq) {
  const int P = 32;
  lpattn_kv_pool *a = make_pool(ctx, va, P, NS), *b = make_pool(ctx, va, P, NS);
  if (!a || !b) return;
  seq_t sa[NS], sb[NS];
  memset(sa, 0, sizeof sa), memset(sb, 0, sizeof sb);
  int next = 0;
  for (int i = 0; i < NS; i++) {
    sa[i].slot = i, sb[i].slot = NS - 1 - i;
    for (int j = 0; j <= lens[i] / T; j++) sa[i].pages[j] = next++;
  }
  for (int i = 0; i < NS; i++) /* shuffled: page ids reversed and interleaved */
    for (int j = 0; j <= lens[i] / T; j++) sb[i].pages[j] = (P - 1 - sa[i].pages[j] * 7 % P + P) % P;
  const int64_t steps[NS] = {1, 7, N};
  for (int i = 0; i < NS; i++) {
    append(ctx, a, &sa[i], i, 0, lens[i], 5);
    append(ctx, b, &sb[i], i, 0, lens[i], steps[i]);
  }
  static result ra, rb, alone;
  const int st[NS] = {0, 1, 2};
  decode(ctx, a, va, sa, st, NS, Sq, &ra);
  decode(ctx, b, va, sb, st, NS, Sq, &rb);
  CHECK(same(&ra, &rb, NS * H * Sq), "%s Sq=%lld: shuffled pages / appends differ", va->name,
        (long long)Sq);
  for (int i = 0; i < NS; i++) {
    decode(ctx, b, va, &sb[i], &st[i], 1, Sq, &alone);
    CHECK(!memcmp(alone.o, ra.o + i * H * Sq * D, sizeof(float) * (size_t)(H * Sq * D)) &&
              !memcmp(alone.lse, ra.lse + i * H * Sq, sizeof(float) * (size_t)(H * Sq)),
          "%s: sequence %d alone differs from the batch", va->name, i);
  }
  lpattn_kv_pool_free(a), lpattn_kv_pool_free(b);
}

/* Fork: sequence 1 continues from sequence 0's first F tokens with other
 * tokens, sharing its completed pages; it equals a sequence built alone. */
static void fork_prefix(lpattn_ctx *ctx, const variant *va) {
  const int hp = va->prec == LPATTN_PREC_HIGH || va->prec == LPATTN_PREC_THRIFT;
  const int64_t F = hp ? 3 * T : 3 * T + 5, M = 2 * T + 3; /* HIGH keeps the tile in its page */
  lpattn_kv_pool *pool = make_pool(ctx, va, 24, 3);
  if (!pool) return;
  seq_t s[3];
  memset(s, 0, sizeof s);
  for (int j = 0; j < 8; j++) s[0].pages[j] = j, s[2].pages[j] = 16 + j;
  append(ctx, pool, &s[0], 0, 0, F, 7);
  s[1] = s[0];
  s[1].slot = 1;
  for (int j = (int)(F / T); j < 8; j++) s[1].pages[j] = 8 + j;
  CHECK_STATUS(lpattn_kv_slot_copy(ctx, pool, 0, 1), LPATTN_OK);
  /* Stream 2 = stream 0's prefix, then stream 1's tokens (positions F..). */
  memcpy(K[2], K[0], sizeof K[2]), memcpy(V[2], V[0], sizeof V[2]), memcpy(Q[2], Q[0], sizeof Q[2]);
  for (int h = 0; h < HKV; h++)
    memcpy(K[2] + (h * N + F) * D, K[1] + (h * N + F) * D, sizeof(float) * (size_t)(M * D)),
        memcpy(V[2] + (h * N + F) * D, V[1] + (h * N + F) * D, sizeof(float) * (size_t)(M * D));
  for (int h = 0; h < H; h++)
    memcpy(Q[2] + (h * N + F) * D, Q[1] + (h * N + F) * D, sizeof(float) * (size_t)(M * D));
  append(ctx, pool, &s[1], 2, F, M, 3);
  append(ctx, pool, &s[0], 0, F, M, 3); /* the source goes on too */
  append(ctx, pool, &s[2], 2, 0, F + M, 11);
  static result fork, scratch;
  const int st2 = 2;
  decode(ctx, pool, va, &s[1], &st2, 1, 1, &fork);
  decode(ctx, pool, va, &s[2], &st2, 1, 1, &scratch);
  CHECK(same(&fork, &scratch, H), "%s: fork differs from the sequence built alone", va->name);
  lpattn_kv_pool_free(pool);
  make_streams();
}

/* SPEC 4 through the pool: perturb K, V, Q after position t; decoded rows
 * <= t are bitwise unchanged. */
static void causal_leak(lpattn_ctx *ctx, const variant *va) {
  const int64_t L = 4 * T + 9, Sq = T, t = L - T / 2;
  lpattn_kv_pool *pool = make_pool(ctx, va, 16, 2);
  if (!pool) return;
  seq_t s[2];
  memset(s, 0, sizeof s);
  s[1].slot = 1;
  for (int j = 0; j < 8; j++) s[0].pages[j] = j, s[1].pages[j] = 8 + j;
  memcpy(K[2], K[0], sizeof K[2]), memcpy(V[2], V[0], sizeof V[2]), memcpy(Q[2], Q[0], sizeof Q[2]);
  for (int h = 0; h < H; h++)
    for (int64_t p = t + 1; p < L; p++)
      for (int d = 0; d < D; d++) {
        if (h < HKV) K[2][(h * N + p) * D + d] *= -3.0f, V[2][(h * N + p) * D + d] += 5.0f;
        Q[2][(h * N + p) * D + d] *= 4.0f;
      }
  append(ctx, pool, &s[0], 0, 0, L, 13);
  append(ctx, pool, &s[1], 2, 0, L, 13);
  static result a, b;
  const int st[2] = {0, 2};
  decode(ctx, pool, va, s, st, 2, Sq, &a);
  int leak = 0;
  for (int h = 0; h < H; h++)
    for (int64_t r = 0; r < Sq; r++) {
      if (L - Sq + r > t) continue;
      const int64_t ra = h * Sq + r, rb = (H + h) * Sq + r;
      leak |= memcmp(a.o + ra * D, a.o + rb * D, sizeof(float) * D) != 0 || a.lse[ra] != a.lse[rb];
    }
  CHECK(!leak, "%s: a row depends on a later token", va->name);
  (void)b;
  lpattn_kv_pool_free(pool);
  make_streams();
}

/* Decode rows equal prefill rows: past one chunk within tolerance (chunks
 * merged by SPEC 7), bitwise-close within one chunk. */
static void vs_prefill(lpattn_ctx *ctx, const variant *va, int64_t L, double tol) {
  lpattn_kv_pool *pool = make_pool(ctx, va, 24, 1);
  if (!pool) return;
  seq_t s;
  memset(&s, 0, sizeof s);
  for (int j = 0; j <= N / T; j++) s.pages[j] = j;
  append(ctx, pool, &s, 0, 0, L, 64);
  static result r;
  const int st = 0;
  decode(ctx, pool, va, &s, &st, 1, 1, &r);
  /* Prefill of the same tokens: the last row. */
  static float o[H * N * D], lse[H * N], ent[H * N];
  shape_t sh = {1, H, HKV, L, L, D};
  static float qc[H * N * D], kc[HKV * N * D], vc[HKV * N * D];
  for (int h = 0; h < H; h++) memcpy(qc + h * L * D, Q[0] + h * N * D, sizeof(float) * (size_t)(L * D));
  for (int h = 0; h < HKV; h++)
    memcpy(kc + h * L * D, K[0] + h * N * D, sizeof(float) * (size_t)(L * D)),
        memcpy(vc + h * L * D, V[0] + h * N * D, sizeof(float) * (size_t)(L * D));
  lpattn_attn_params p = params(va);
  p.precision = va->prec, p.thrift_low = va->low, p.pasa = va->pasa, p.causal = 1;
  p.block_q = p.block_k = T;
  CHECK_STATUS(run_attention(ctx, sh, qc, kc, vc, &p, o, lse, ent, NULL, 0), LPATTN_OK);
  double num = 0, den = 0, dl = 0;
  for (int h = 0; h < H; h++) {
    for (int d = 0; d < D; d++) {
      const double x = r.o[h * D + d], y = o[(h * L + L - 1) * D + d];
      num += (x - y) * (x - y), den += y * y;
    }
    dl = fmax(dl, fabs((double)r.lse[h] - lse[h * L + L - 1]));
  }
  const double e = sqrt(num / den);
  CHECK(e <= tol && dl <= 1e-4, "%s L=%lld: decode vs prefill O %.3g (tol %.3g), LSE %.3g",
        va->name, (long long)L, e, tol, dl);
  lpattn_kv_pool_free(pool);
}

/* cpu only: the same decode on ref within tolerance. */
static void vs_ref(lpattn_ctx *ctx, lpattn_ctx *ref, const variant *va) {
  static result rc, rr;
  const int st[NS] = {0, 1, 2};
  lpattn_kv_pool *pc = make_pool(ctx, va, 32, NS), *pr = make_pool(ref, va, 32, NS);
  if (!pc || !pr) return;
  seq_t sc[NS], sr[NS];
  memset(sc, 0, sizeof sc);
  int next = 0;
  for (int i = 0; i < NS; i++) {
    sc[i].slot = i;
    for (int j = 0; j <= lens[i] / T; j++) sc[i].pages[j] = next++;
  }
  memcpy(sr, sc, sizeof sc);
  for (int i = 0; i < NS; i++) append(ctx, pc, &sc[i], i, 0, lens[i], 9);
  for (int i = 0; i < NS; i++) append(ref, pr, &sr[i], i, 0, lens[i], 9);
  for (int64_t Sq = 1; Sq <= T; Sq += T - 1) {
    decode(ctx, pc, va, sc, st, NS, Sq, &rc);
    decode(ref, pr, va, sr, st, NS, Sq, &rr);
    double num = 0, den = 0, dl = 0;
    for (int64_t i = 0; i < NS * q_heads * Sq * D; i++) {
      const double x = rc.o[i], y = rr.o[i];
      num += (x - y) * (x - y), den += y * y;
    }
    for (int64_t i = 0; i < NS * q_heads * Sq; i++) dl = fmax(dl, fabs((double)rc.lse[i] - rr.lse[i]));
    const double e = sqrt(num / den), tol = va->prec == LPATTN_PREC_HIGH ? 1e-5 : 1e-4;
    CHECK(e <= tol && dl <= 2e-3, "%s Sq=%lld: cpu vs ref O %.3g (tol %.3g) LSE %.3g", va->name,
          (long long)Sq, e, tol, dl);
    printf("cpu vs ref %-14s Hq=%d Sq=%-3lld O %.2e LSE %.2e\n", va->name, q_heads, (long long)Sq, e, dl);
  }
  lpattn_kv_pool_free(pc), lpattn_kv_pool_free(pr);
}

int main(int argc, char **argv) {
  const int cpu = argc > 1 && !strcmp(argv[1], "cpu");
  lpattn_ctx *ctx = NULL, *ref = NULL;
  if (lpattn_create(cpu ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, NULL, &ctx) != LPATTN_OK)
    return test_skip("backend not available");
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, &ref), LPATTN_OK);
  make_streams();
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    const variant *va = &variants[i];
    layout_and_batch(ctx, va, 1);
    layout_and_batch(ctx, va, T);
    fork_prefix(ctx, va);
    causal_leak(ctx, va);
    if (cpu) vs_ref(ctx, ref, va);
  }
  /* Hq = Hkv, Sq = 1: one row per (sequence, kv head), the kernel's
   * register-only paths. */
  q_heads = HKV;
  int64_t targets[16];
  const int nt = cpu ? lpattn_cpu_targets(targets, 16) : 0;
  for (int t = 0; t < nt; t++) { /* every Highway target of this machine */
    lpattn_cpu_force_target(targets[t]);
    printf("target %s\n", lpattn_cpu_target_name(targets[t]));
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) vs_ref(ctx, ref, &variants[i]);
  }
  if (cpu) lpattn_cpu_force_target(0);
  q_heads = H;
  /* One chunk: as close to prefill as before; past it, within tolerance. */
  vs_prefill(ctx, &variants[0], 5 * T + 3, 1e-6);
  vs_prefill(ctx, &variants[0], 20 * T + 5, 1e-5);
  vs_prefill(ctx, &variants[2], 5 * T + 3, cpu ? 2e-2 : 1e-6);
  vs_prefill(ctx, &variants[2], 20 * T + 5, 5e-2);
  lpattn_free(ref);
  lpattn_free(ctx);
  return test_finish();
}
