/* SPEC 4's test of record on ref: perturb every token after position t (Q,
 * K, V); rows <= t must stay bitwise identical in every precision, Thrift
 * selection and PASA setting. And the two documented leaks do leak: `leaky`
 * and `selection = paper`. */
#include "refutil.h"

typedef struct {
  const char *name;
  lpattn_precision prec;
  lpattn_format low;
  lpattn_selection sel;
  int leaky, pasa, score_f16, mx_up;
} variant;

typedef struct {
  shape_t sh;
  int Bq, Bk;
} geometry;

typedef struct {
  float *q, *k, *v, *q2, *k2, *v2, *o1, *o2, *l1, *l2, *h1, *h2;
} bufs;

static void bufs_alloc(bufs *b, shape_t sh) {
  const size_t fq = 4 * (size_t)nq(sh), fk = 4 * (size_t)nkv(sh), fr = 4 * (size_t)nrows(sh);
  b->q = malloc(fq), b->q2 = malloc(fq), b->o1 = malloc(fq), b->o2 = malloc(fq);
  b->k = malloc(fk), b->k2 = malloc(fk), b->v = malloc(fk), b->v2 = malloc(fk);
  b->l1 = malloc(fr), b->l2 = malloc(fr), b->h1 = malloc(fr), b->h2 = malloc(fr);
}

static void bufs_free(bufs *b) {
  free(b->q), free(b->q2), free(b->o1), free(b->o2), free(b->k), free(b->k2), free(b->v);
  free(b->v2), free(b->l1), free(b->l2), free(b->h1), free(b->h2);
}

static lpattn_attn_params params_of(const variant *va, const geometry *g) {
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = va->prec, p.thrift_low = va->low, p.selection = va->sel, p.leaky = va->leaky;
  p.pasa = va->pasa, p.score_f16 = va->score_f16, p.mx_scale_round_up = va->mx_up;
  p.causal = 1, p.block_q = g->Bq, p.block_k = g->Bk, p.thrift_k = 3;
  return p;
}

/* Replace query rows > t and keys/values > t + off by different, larger
 * values (they also move every amax and tile mean they touch). */
static void perturb(rng_t *r, shape_t sh, int64_t t, bufs *b) {
  const int64_t off = sh.Skv - sh.Sq, D = sh.D;
  memcpy(b->q2, b->q, 4 * (size_t)nq(sh));
  memcpy(b->k2, b->k, 4 * (size_t)nkv(sh));
  memcpy(b->v2, b->v, 4 * (size_t)nkv(sh));
  for (int64_t i = 0; i < nq(sh); i++)
    if ((i / D) % sh.Sq > t) b->q2[i] = (float)(3.0 * rng_normal(r) + 1.0);
  for (int64_t i = 0; i < nkv(sh); i++)
    if ((i / D) % sh.Skv > t + off)
      b->k2[i] = (float)(4.0 * rng_normal(r) - 1.0), b->v2[i] = (float)(5.0 * rng_normal(r) + 2.0);
}

/* 1 when some output of a row <= t differs between the two runs. */
static int rows_differ(shape_t sh, int64_t t, const bufs *b) {
  for (int64_t bh = 0; bh < sh.B * sh.Hq; bh++) {
    const int64_t r0 = bh * sh.Sq, n = t + 1;
    if (memcmp(b->o1 + r0 * sh.D, b->o2 + r0 * sh.D, 4 * (size_t)(n * sh.D)) ||
        memcmp(b->l1 + r0, b->l2 + r0, 4 * (size_t)n) || memcmp(b->h1 + r0, b->h2 + r0, 4 * (size_t)n))
      return 1;
  }
  return 0;
}

/* Runs base and perturbed calls; returns how many t's leaked. */
static int leaks(lpattn_ctx *ctx, const variant *va, const geometry *g, const int64_t *ts,
                 int nt, int expect_safe) {
  shape_t sh = g->sh;
  bufs b;
  bufs_alloc(&b, sh);
  rng_t r = {21};
  fill_normal(&r, b.q, nq(sh), 0.3, 1.0);
  fill_normal(&r, b.k, nkv(sh), 0.3, 1.0);
  fill_normal(&r, b.v, nkv(sh), 0.0, 1.0);
  lpattn_attn_params p = params_of(va, g);
  CHECK_STATUS(run_attention(ctx, sh, b.q, b.k, b.v, &p, b.o1, b.l1, b.h1, NULL, 0), LPATTN_OK);
  int n = 0;
  for (int i = 0; i < nt; i++) {
    const int64_t t = ts[i];
    if (t >= sh.Sq) continue;
    perturb(&r, sh, t, &b);
    CHECK_STATUS(run_attention(ctx, sh, b.q2, b.k2, b.v2, &p, b.o2, b.l2, b.h2, NULL, 0), LPATTN_OK);
    int d = rows_differ(sh, t, &b);
    n += d;
    if (expect_safe)
      CHECK(!d, "%s leaks at t=%lld (Sq %lld Skv %lld Bq %d Bk %d)", va->name, (long long)t,
            (long long)sh.Sq, (long long)sh.Skv, g->Bq, g->Bk);
  }
  bufs_free(&b);
  return n;
}

int main(void) {
  lpattn_ctx *ctx = ref_ctx();
  const variant safe[] = {
      {"high", LPATTN_PREC_HIGH, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 0, 0, 0},
      {"high score_f16", LPATTN_PREC_HIGH, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 0, 1, 0},
      {"fp8", LPATTN_PREC_FP8, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 0, 0, 0},
      {"fp8 static", LPATTN_PREC_FP8_STATIC, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 0, 0, 0}, /* descales 1 */
      {"nvfp4", LPATTN_PREC_NVFP4, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 0, 0, 0},
      {"mxfp4", LPATTN_PREC_MXFP4, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 0, 0, 0},
      {"mxfp4 round-up", LPATTN_PREC_MXFP4, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 0, 0, 1},
      {"thrift nvfp4", LPATTN_PREC_THRIFT, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 0, 0, 0},
      {"thrift fp8", LPATTN_PREC_THRIFT, LPATTN_FMT_FP8, LPATTN_SELECT_CAUSAL, 0, 0, 0, 0},
      {"thrift mxfp4", LPATTN_PREC_THRIFT, LPATTN_FMT_MXFP4, LPATTN_SELECT_CAUSAL, 0, 0, 0, 0},
      {"pasa high", LPATTN_PREC_HIGH, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 1, 0, 0},
      {"pasa fp8", LPATTN_PREC_FP8, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 1, 0, 0},
      {"pasa nvfp4", LPATTN_PREC_NVFP4, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 1, 0, 0},
      {"pasa mxfp4", LPATTN_PREC_MXFP4, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 1, 0, 0},
      {"pasa thrift", LPATTN_PREC_THRIFT, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 0, 1, 0, 0},
  };
  const geometry geos[] = {
      {{1, 2, 1, 320, 320, 64}, 32, 32},  /* Sq == Skv */
      {{1, 2, 2, 200, 330, 64}, 32, 32},  /* Skv > Sq, offset not a tile multiple */
      {{1, 2, 1, 250, 314, 64}, 64, 32},  /* Bq != Bk, partial last tiles */
      {{1, 2, 1, 200, 230, 40}, 32, 32},  /* head dims no multiple of 16 (groups past D) */
      {{1, 1, 1, 200, 200, 111}, 64, 64},
  };
  const int64_t ts[] = {0, 31, 32, 63, 64, 100, 190};
  const int nt = sizeof ts / sizeof ts[0];
  for (size_t v = 0; v < sizeof safe / sizeof safe[0]; v++)
    for (size_t g = 0; g < sizeof geos / sizeof geos[0]; g++) leaks(ctx, &safe[v], &geos[g], ts, nt, 1);

  /* The documented leaks must be observable. */
  const variant leaky = {"leaky nvfp4", LPATTN_PREC_NVFP4, LPATTN_FMT_NVFP4, LPATTN_SELECT_CAUSAL, 1, 0, 0, 0};
  const variant paper = {"thrift paper", LPATTN_PREC_THRIFT, LPATTN_FMT_NVFP4, LPATTN_SELECT_PAPER, 0, 0, 0, 0};
  const int64_t mid[] = {5, 40, 70, 100, 150, 201};
  int nl = leaks(ctx, &leaky, &geos[0], mid, 6, 0);
  int np = leaks(ctx, &paper, &geos[0], mid, 6, 0);
  printf("leaky leaked at %d of 6 t's, paper selection at %d of 6\n", nl, np);
  CHECK(nl > 0, "leaky mode does not leak");
  CHECK(np > 0, "selection=paper does not leak");
  lpattn_free(ctx);
  return test_finish();
}
