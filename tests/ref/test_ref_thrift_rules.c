/* THRIFT selection rules (lpattn_attn_params.thrift_rule, docs/SEMANTICS.md
 * "THRIFT selection rules") on ref and cpu: SPEC 4's leak test of record
 * (perturb every token after t; rows <= t bitwise identical) for every rule
 * set, the selection output of cpu equal to ref's, and what each rule
 * promises: SINK puts full tile 0 in every selection, KMAX finds a tile whose
 * mean hides one strong key, GQA gives the q heads of a KV head one
 * selection. Bad flags are INVALID_ARGUMENT; decode is UNSUPPORTED. */
#include "refutil.h"

enum { SINK = LPATTN_THRIFT_RULE_SINK, KMAX = LPATTN_THRIFT_RULE_KMAX, GQA = LPATTN_THRIFT_RULE_GQA };

static lpattn_attn_params params(int rule, int k, int Bq, int Bk) {
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = LPATTN_PREC_THRIFT, p.causal = 1, p.thrift_k = k, p.thrift_rule = rule;
  p.block_q = Bq, p.block_k = Bk;
  return p;
}

static lpattn_ctx *make(lpattn_backend be) {
  lpattn_ctx *ctx = NULL;
  return lpattn_create(be, NULL, &ctx) == LPATTN_OK ? ctx : NULL;
}

/* Leak test of record for one rule set (THRIFT k = 3). */
static void leak_test(lpattn_ctx *ctx, const char *be, int rule, shape_t sh, int Bq, int Bk) {
  const size_t fq = (size_t)nq(sh), fk = (size_t)nkv(sh), fr = (size_t)nrows(sh);
  float *q = malloc(4 * fq), *k = malloc(4 * fk), *v = malloc(4 * fk), *q2 = malloc(4 * fq);
  float *k2 = malloc(4 * fk), *v2 = malloc(4 * fk), *o1 = malloc(4 * fq), *o2 = malloc(4 * fq);
  float *l1 = malloc(4 * fr), *l2 = malloc(4 * fr);
  rng_t r = {33};
  fill_normal(&r, q, nq(sh), 0.3, 1.0), fill_normal(&r, k, nkv(sh), 0.3, 1.0);
  fill_normal(&r, v, nkv(sh), 0.0, 1.0);
  lpattn_attn_params p = params(rule, 3, Bq, Bk);
  CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o1, l1, NULL, NULL, 0), LPATTN_OK);
  const int64_t ts[] = {0, 31, 32, 63, 64, 100, 150, 190}, off = sh.Skv - sh.Sq, D = sh.D;
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
    const int64_t t = ts[i];
    if (t >= sh.Sq) continue;
    memcpy(q2, q, 4 * fq), memcpy(k2, k, 4 * fk), memcpy(v2, v, 4 * fk);
    for (int64_t e = 0; e < nq(sh); e++)
      if ((e / D) % sh.Sq > t) q2[e] = (float)(3.0 * rng_normal(&r) + 1.0);
    for (int64_t e = 0; e < nkv(sh); e++)
      if ((e / D) % sh.Skv > t + off)
        k2[e] = (float)(4.0 * rng_normal(&r) - 1.0), v2[e] = (float)(5.0 * rng_normal(&r) + 2.0);
    CHECK_STATUS(run_attention(ctx, sh, q2, k2, v2, &p, o2, l2, NULL, NULL, 0), LPATTN_OK);
    int d = 0;
    for (int64_t bh = 0; bh < sh.B * sh.Hq; bh++)
      d |= memcmp(o1 + bh * sh.Sq * D, o2 + bh * sh.Sq * D, 4 * (size_t)((t + 1) * D)) != 0 ||
           memcmp(l1 + bh * sh.Sq, l2 + bh * sh.Sq, 4 * (size_t)(t + 1)) != 0;
    CHECK(!d, "%s rule %d leaks at t=%lld (Sq %lld Skv %lld Bq %d Bk %d)", be, rule, (long long)t,
          (long long)sh.Sq, (long long)sh.Skv, Bq, Bk);
  }
  free(q), free(k), free(v), free(q2), free(k2), free(v2), free(o1), free(o2), free(l1), free(l2);
}

/* Selection output of a call (nqt x k per q head), k = 4. */
static void select_tiles(lpattn_ctx *ctx, shape_t sh, const float *q, const float *k, const float *v,
                   int rule, int32_t *sel, float *o) {
  lpattn_attn_params p = params(rule, 4, 32, 32);
  CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o, NULL, NULL, sel, 4), LPATTN_OK);
}

static void rule_checks(lpattn_ctx *ref, lpattn_ctx *cpu) {
  const shape_t sh = {1, 4, 2, 256, 256, 64}; /* GQA: 2 q heads per KV head */
  const int64_t nqt = 8, K = 4, n = sh.Hq * nqt * K;
  float *q = malloc(4 * (size_t)nq(sh)), *k = malloc(4 * (size_t)nkv(sh));
  float *v = malloc(4 * (size_t)nkv(sh)), *o = malloc(4 * (size_t)nq(sh));
  int32_t *s1 = malloc(4 * (size_t)n), *s2 = malloc(4 * (size_t)n);
  rng_t r = {5};
  fill_normal(&r, q, nq(sh), 0.2, 1.0), fill_normal(&r, k, nkv(sh), 0.0, 1.0);
  fill_normal(&r, v, nkv(sh), 0.0, 1.0);
  const int rules[] = {0, SINK, KMAX, GQA, SINK | KMAX, SINK | KMAX | GQA};
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    select_tiles(ref, sh, q, k, v, rules[i], s1, o);
    if (cpu) {
      select_tiles(cpu, sh, q, k, v, rules[i], s2, o);
      CHECK(!memcmp(s1, s2, 4 * (size_t)n), "rule %d: cpu's selection differs from ref's", rules[i]);
    }
    for (int64_t h = 0; h < sh.Hq; h++)
      for (int64_t t = 2; t < nqt; t++) { /* tile 0 is full from query tile 1 on, scored from 2 */
        const int32_t *row = s1 + (h * nqt + t) * K;
        if (rules[i] & SINK) CHECK(row[0] == 0, "SINK: head %lld tile %lld starts at %d", (long long)h,
                                   (long long)t, row[0]);
        if (rules[i] & GQA)
          CHECK(!memcmp(row, s1 + ((h ^ 1) * nqt + t) * K, 4 * K), "GQA: heads %lld, %lld differ",
                (long long)h, (long long)(h ^ 1));
      }
  }
  /* KMAX: every key 0 but two opposite keys of tile 3, so every tile mean is
   * 0 (SPEC 5 ties pick tiles 0, 1), while tile 3 holds the largest q . k. */
  memset(k, 0, 4 * (size_t)nkv(sh));
  for (int64_t i = 0; i < nq(sh); i++) q[i] = (float)(1.0 + rng_u(&r));
  for (int64_t hk = 0; hk < sh.Hkv; hk++)
    for (int64_t d = 0; d < sh.D; d++)
      k[(hk * sh.Skv + 3 * 32 + 5) * sh.D + d] = 2.0f, k[(hk * sh.Skv + 3 * 32 + 9) * sh.D + d] = -2.0f;
  select_tiles(ref, sh, q, k, v, 0, s1, o);
  select_tiles(ref, sh, q, k, v, KMAX, s2, o);
  const int32_t *a = s1 + 7 * K, *b = s2 + 7 * K; /* head 0, query tile 7: full tiles 0..6 */
  CHECK(a[0] == 0 && a[1] == 1 && a[2] == 2, "mean rule picked %d %d %d, want the ties 0 1 2", a[0], a[1], a[2]);
  CHECK(b[0] == 0 && b[1] == 1 && b[2] == 3, "KMAX picked %d %d %d, want 0 1 3", b[0], b[1], b[2]);
  free(q), free(k), free(v), free(o), free(s1), free(s2);
}

int main(void) {
  lpattn_ctx *ref = make(LPATTN_BACKEND_REF), *cpu = make(LPATTN_BACKEND_CPU);
  if (!ref) return test_skip("no ref context");
  const int rules[] = {SINK, KMAX, GQA, SINK | KMAX | GQA};
  const struct {
    shape_t sh;
    int Bq, Bk;
  } geos[] = {{{1, 2, 1, 256, 256, 64}, 32, 32},
              {{1, 4, 2, 200, 330, 40}, 32, 32},
              {{1, 2, 2, 250, 314, 64}, 64, 32}};
  for (size_t g = 0; g < sizeof geos / sizeof geos[0]; g++)
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
      leak_test(ref, "ref", rules[i], geos[g].sh, geos[g].Bq, geos[g].Bk);
      if (cpu) leak_test(cpu, "cpu", rules[i], geos[g].sh, geos[g].Bq, geos[g].Bk);
    }
  rule_checks(ref, cpu);
  /* Flags outside the three: INVALID_ARGUMENT. */
  const shape_t sh = {1, 1, 1, 64, 64, 32};
  float *x = calloc((size_t)nq(sh), 4), *o = calloc((size_t)nq(sh), 4);
  lpattn_attn_params p = params(8, 0, 32, 32);
  CHECK_STATUS(run_attention(ref, sh, x, x, x, &p, o, NULL, NULL, NULL, 0), LPATTN_ERR_INVALID_ARGUMENT);
  free(x), free(o);
  lpattn_free(ref);
  if (cpu) lpattn_free(cpu);
  return test_finish();
}
