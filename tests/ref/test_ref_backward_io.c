/* The backward's inputs and modes beyond test_ref_backward's f32 causal
 * problems, on ref (or with argument "cpu" on cpu):
 * - layouts: the same values in a strided [B, S, H, D] view give the same
 *   gradient bits as the contiguous [B, H, S, D] ones;
 * - dtypes: f16 / bf16 inputs give the same bits as f32 inputs holding the
 *   same (rounded) values, and f16 / bf16 gradient outputs are the f32 ones
 *   rounded once;
 * - non-causal low precision: deterministic for a seed, close to the
 *   unquantized-operand gradient;
 * - leaky mode (research only, SEMANTICS "Backward"): it runs, and the
 *   gradient leak it exists to show is there (with dO zero after row t, Q/K/V
 *   after t reach dQ rows <= t), while the default mode stays leak-free. */
#include "internal.h"
#include "refutil.h"

/* Float problem in [B, H, S, D] f32, copied into views of other dtypes and
 * layouts by put(). */
typedef struct {
  shape_t sh;
  float *q, *k, *v, *dout;
} inputs;

static inputs make(shape_t sh, uint64_t seed) {
  inputs p = {sh, 0, 0, 0, 0};
  rng_t r = {seed};
  p.q = malloc(sizeof(float) * (size_t)nq(sh)), p.dout = malloc(sizeof(float) * (size_t)nq(sh));
  p.k = malloc(sizeof(float) * (size_t)nkv(sh)), p.v = malloc(sizeof(float) * (size_t)nkv(sh));
  fill_normal(&r, p.q, nq(sh), 0.0, 1.0), fill_normal(&r, p.k, nkv(sh), 0.0, 1.0);
  fill_normal(&r, p.v, nkv(sh), 0.0, 1.0), fill_normal(&r, p.dout, nq(sh), 0.0, 1.0);
  return p;
}

static void drop(inputs *p) { free(p->q), free(p->k), free(p->v), free(p->dout); }

static float round_to(lpattn_dtype dt, float x) {
  if (dt == LPATTN_F16) return lpattn_f16_to_f32(lpattn_f32_to_f16(x));
  if (dt == LPATTN_BF16) return lpattn_bf16_to_f32(lpattn_f32_to_bf16(x));
  return x;
}

/* A [B, H, S, D] tensor of dtype dt holding x (NULL: zeros), contiguous in
 * [B, H, S, D] (bshd 0) or in [B, S, H, D] (bshd 1). */
static lpattn_tensor put(const float *x, lpattn_dtype dt, int64_t B, int64_t H, int64_t S, int64_t D, int bshd) {
  const int64_t n = B * H * S * D, es = dt == LPATTN_F32 ? 4 : 2;
  void *mem = calloc((size_t)n, (size_t)es);
  lpattn_tensor t = lpattn_tensor_4d(mem, dt, B, H, S, D);
  if (bshd) t.stride[0] = S * H * D, t.stride[1] = D, t.stride[2] = H * D, t.stride[3] = 1;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = 0; s < S; s++)
        for (int64_t d = 0; d < D; d++) {
          const float v = x ? x[((b * H + h) * S + s) * D + d] : 0.0f;
          const int64_t o = b * t.stride[0] + h * t.stride[1] + s * t.stride[2] + d;
          if (dt == LPATTN_F32) ((float *)mem)[o] = v;
          else ((uint16_t *)mem)[o] = dt == LPATTN_F16 ? lpattn_f32_to_f16(v) : lpattn_f32_to_bf16(v);
        }
  return t;
}

/* Back to [B, H, S, D] f32. */
static void get(const lpattn_tensor *t, float *x) {
  for (int64_t b = 0; b < t->shape[0]; b++)
    for (int64_t h = 0; h < t->shape[1]; h++)
      for (int64_t s = 0; s < t->shape[2]; s++)
        for (int64_t d = 0; d < t->shape[3]; d++) {
          const int64_t o = b * t->stride[0] + h * t->stride[1] + s * t->stride[2] + d * t->stride[3];
          const int64_t i = ((b * t->shape[1] + h) * t->shape[2] + s) * t->shape[3] + d;
          if (t->dtype == LPATTN_F32) x[i] = ((const float *)t->data)[o];
          else {
            const uint16_t u = ((const uint16_t *)t->data)[o];
            x[i] = t->dtype == LPATTN_F16 ? lpattn_f16_to_f32(u) : lpattn_bf16_to_f32(u);
          }
        }
}

typedef struct {
  float *dq, *dk, *dv;
} grads;

static void free_grads(grads *g) { free(g->dq), free(g->dk), free(g->dv); }

/* Forward + backward with inputs of dtype in_dt, gradients of dtype g_dt,
 * all in one layout; the gradients come back as [B, H, S, D] f32. */
static grads run(lpattn_ctx *ctx, const inputs *p, lpattn_dtype in_dt, lpattn_dtype g_dt, int bshd,
                 const lpattn_attn_params *ap, uint64_t seed) {
  const shape_t s = p->sh;
  lpattn_tensor q = put(p->q, in_dt, s.B, s.Hq, s.Sq, s.D, bshd);
  lpattn_tensor k = put(p->k, in_dt, s.B, s.Hkv, s.Skv, s.D, bshd);
  lpattn_tensor v = put(p->v, in_dt, s.B, s.Hkv, s.Skv, s.D, bshd);
  lpattn_tensor dout = put(p->dout, in_dt, s.B, s.Hq, s.Sq, s.D, bshd);
  lpattn_tensor o = put(NULL, LPATTN_F32, s.B, s.Hq, s.Sq, s.D, bshd);
  lpattn_tensor lse = put(NULL, LPATTN_F32, s.B, s.Hq, s.Sq, 1, 0);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lse;
  CHECK_STATUS(lpattn_attention(ctx, &q, &k, &v, &o, ap, &aux), LPATTN_OK);
  lpattn_attn_grads g;
  lpattn_attn_grads_init(&g);
  g.seed = seed;
  g.dq = put(NULL, g_dt, s.B, s.Hq, s.Sq, s.D, bshd);
  g.dk = put(NULL, g_dt, s.B, s.Hkv, s.Skv, s.D, bshd);
  g.dv = put(NULL, g_dt, s.B, s.Hkv, s.Skv, s.D, bshd);
  CHECK_STATUS(lpattn_attention_backward(ctx, &q, &k, &v, &o, &lse, &dout, ap, &g), LPATTN_OK);
  grads r = {malloc(sizeof(float) * (size_t)nq(s)), malloc(sizeof(float) * (size_t)nkv(s)),
             malloc(sizeof(float) * (size_t)nkv(s))};
  get(&g.dq, r.dq), get(&g.dk, r.dk), get(&g.dv, r.dv);
  free(q.data), free(k.data), free(v.data), free(dout.data), free(o.data), free(lse.data);
  free(g.dq.data), free(g.dk.data), free(g.dv.data);
  return r;
}

/* The same bits (round: a's values rounded to dtype rd first). */
static int64_t differ(const grads *a, const grads *b, shape_t s, lpattn_dtype rd) {
  int64_t bad = 0;
  for (int64_t i = 0; i < nq(s); i++) bad += round_to(rd, a->dq[i]) != b->dq[i];
  for (int64_t i = 0; i < nkv(s); i++)
    bad += (round_to(rd, a->dk[i]) != b->dk[i]) + (round_to(rd, a->dv[i]) != b->dv[i]);
  return bad;
}

static void test_layouts_dtypes(lpattn_ctx *ctx, lpattn_precision prec) {
  const shape_t sh = {2, 4, 2, 70, 90, 32};
  inputs p = make(sh, 41);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.causal = 1, ap.block_q = 32, ap.block_k = 32, ap.precision = prec;
  grads base = run(ctx, &p, LPATTN_F32, LPATTN_F32, 0, &ap, 3);
  grads strided = run(ctx, &p, LPATTN_F32, LPATTN_F32, 1, &ap, 3);
  CHECK(differ(&base, &strided, sh, LPATTN_F32) == 0, "precision %d: [B, S, H, D] views give other gradient bits",
        prec);
  free_grads(&strided);
  static const lpattn_dtype dts[2] = {LPATTN_F16, LPATTN_BF16};
  for (int i = 0; i < 2; i++) {
    inputs r = make(sh, 41); /* the same values, rounded to the dtype */
    for (int64_t j = 0; j < nq(sh); j++) r.q[j] = round_to(dts[i], r.q[j]), r.dout[j] = round_to(dts[i], r.dout[j]);
    for (int64_t j = 0; j < nkv(sh); j++) r.k[j] = round_to(dts[i], r.k[j]), r.v[j] = round_to(dts[i], r.v[j]);
    grads f32in = run(ctx, &r, LPATTN_F32, LPATTN_F32, 0, &ap, 3);
    grads lowin = run(ctx, &r, dts[i], LPATTN_F32, 1, &ap, 3);
    CHECK(differ(&f32in, &lowin, sh, LPATTN_F32) == 0, "precision %d: %s inputs give other bits than f32 ones",
          prec, dts[i] == LPATTN_F16 ? "f16" : "bf16");
    grads lowout = run(ctx, &r, LPATTN_F32, dts[i], 0, &ap, 3);
    CHECK(differ(&f32in, &lowout, sh, dts[i]) == 0, "precision %d: %s gradients are not the f32 ones rounded once",
          prec, dts[i] == LPATTN_F16 ? "f16" : "bf16");
    free_grads(&f32in), free_grads(&lowin), free_grads(&lowout), drop(&r);
  }
  free_grads(&base), drop(&p);
}

static double rel_l2(const float *a, const float *b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Non-causal low precision: seed-deterministic, within tol of HIGH. */
static void test_noncausal_low(lpattn_ctx *ctx, lpattn_precision prec, double tol) {
  const shape_t sh = {1, 2, 1, 96, 128, 64};
  inputs p = make(sh, 43);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.block_q = 32, ap.block_k = 32;
  grads hi = run(ctx, &p, LPATTN_F32, LPATTN_F32, 0, &ap, 1);
  ap.precision = prec;
  grads a = run(ctx, &p, LPATTN_F32, LPATTN_F32, 0, &ap, 1), b = run(ctx, &p, LPATTN_F32, LPATTN_F32, 0, &ap, 1);
  CHECK(differ(&a, &b, sh, LPATTN_F32) == 0, "non-causal precision %d: the same seed gives other bits", prec);
  const double e = fmax(rel_l2(a.dq, hi.dq, nq(sh)), fmax(rel_l2(a.dk, hi.dk, nkv(sh)), rel_l2(a.dv, hi.dv, nkv(sh))));
  CHECK(e < tol, "non-causal precision %d: rel L2 to HIGH %.3g >= %.3g", prec, e, tol);
  printf("non-causal backward precision %d: rel L2 to HIGH %.4f\n", prec, e);
  free_grads(&hi), free_grads(&a), free_grads(&b), drop(&p);
}

/* dO zero after row t, Q/K/V after t perturbed: how many dQ rows <= t move. */
static int64_t leaked_rows(lpattn_ctx *ctx, const lpattn_attn_params *ap) {
  const shape_t sh = {1, 2, 2, 128, 128, 32};
  const int64_t t = 70, D = sh.D;
  inputs a = make(sh, 47), b = make(sh, 47);
  rng_t rr = {5};
  for (int64_t h = 0; h < sh.Hq; h++)
    for (int64_t r = t + 1; r < sh.Sq; r++)
      for (int64_t d = 0; d < D; d++) {
        const int64_t i = (h * sh.Sq + r) * D + d;
        a.dout[i] = b.dout[i] = 0.0f;
        b.q[i] += (float)(3.0 * rng_normal(&rr)), b.k[i] += (float)(3.0 * rng_normal(&rr));
        b.v[i] += (float)(3.0 * rng_normal(&rr));
      }
  grads ga = run(ctx, &a, LPATTN_F32, LPATTN_F32, 0, ap, 9), gb = run(ctx, &b, LPATTN_F32, LPATTN_F32, 0, ap, 9);
  int64_t moved = 0;
  for (int64_t h = 0; h < sh.Hq; h++)
    for (int64_t r = 0; r <= t; r++)
      moved += memcmp(ga.dq + (h * sh.Sq + r) * D, gb.dq + (h * sh.Sq + r) * D, sizeof(float) * (size_t)D) != 0;
  free_grads(&ga), free_grads(&gb), drop(&a), drop(&b);
  return moved;
}

static void test_leaky(lpattn_ctx *ctx) {
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.causal = 1, ap.block_q = 32, ap.block_k = 32, ap.precision = LPATTN_PREC_MXFP4;
  const int64_t safe = leaked_rows(ctx, &ap);
  ap.leaky = 1;
  const int64_t leaky = leaked_rows(ctx, &ap);
  CHECK(safe == 0, "default MXFP4: %lld dQ rows <= t moved with the future", (long long)safe);
  CHECK(leaky > 0, "leaky MXFP4: no dQ row <= t moved with the future (the mode shows no leak)");
  printf("gradient leak, MXFP4: default %lld rows, leaky %lld rows of %d\n", (long long)safe, (long long)leaky,
         2 * 71);
}

int main(int argc, char **argv) {
  const int cpu = argc > 1 && strcmp(argv[1], "cpu") == 0;
  if (cpu && !lpattn_backend_available(LPATTN_BACKEND_CPU)) return test_skip("no cpu backend");
  lpattn_ctx *ctx = NULL;
  CHECK_STATUS(lpattn_create(cpu ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, NULL, &ctx), LPATTN_OK);
  test_layouts_dtypes(ctx, LPATTN_PREC_HIGH);
  test_layouts_dtypes(ctx, LPATTN_PREC_NVFP4);
  test_noncausal_low(ctx, LPATTN_PREC_FP8, 0.12);
  test_noncausal_low(ctx, LPATTN_PREC_NVFP4, 0.4);
  test_leaky(ctx);
  lpattn_free(ctx);
  return test_finish();
}
