/* The backward (SPEC 10, SEMANTICS "Backward") of the ref backend, or with
 * argument "cpu" of the cpu backend (then also against ref, and bitwise the
 * same for any thread count):
 * - HIGH against gradients written from the definition in f64 (GQA, causal
 *   with Sq < Skv, partial tiles) and against central finite differences of
 *   the forward;
 * - low precisions: deterministic for a seed, within a stated distance of the
 *   gradient with unquantized backward operands, and unbiased (the mean over
 *   seeds converges to it);
 * - the causal leak test for gradients: with dO zero after row t, changing
 *   Q/K/V after t changes no dQ row <= t (bitwise);
 * - argument checks. */
#include "internal.h"
#include "refutil.h"

lpattn_status ref_backward_opts(const lpattn_bwd_problem *pr, int quantize);

typedef struct {
  shape_t sh;
  float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
} prob;

static prob make(shape_t sh, uint64_t seed) {
  prob p = {sh, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  rng_t r = {seed};
  const size_t fq = sizeof(float) * (size_t)nq(sh), fk = sizeof(float) * (size_t)nkv(sh);
  p.q = malloc(fq), p.k = malloc(fk), p.v = malloc(fk), p.o = malloc(fq), p.dout = malloc(fq);
  p.lse = malloc(sizeof(float) * (size_t)nrows(sh));
  p.dq = malloc(fq), p.dk = malloc(fk), p.dv = malloc(fk);
  fill_normal(&r, p.q, nq(sh), 0.0, 1.0), fill_normal(&r, p.k, nkv(sh), 0.0, 1.0);
  fill_normal(&r, p.v, nkv(sh), 0.0, 1.0), fill_normal(&r, p.dout, nq(sh), 0.0, 1.0);
  return p;
}

static void drop(prob *p) {
  free(p->q), free(p->k), free(p->v), free(p->o), free(p->lse), free(p->dout);
  free(p->dq), free(p->dk), free(p->dv);
}

typedef struct {
  lpattn_tensor q, k, v, o, lse, dout;
  lpattn_attn_grads g;
} views;

static views views_of(prob *p) {
  const shape_t s = p->sh;
  views w;
  w.q = lpattn_tensor_4d(p->q, LPATTN_F32, s.B, s.Hq, s.Sq, s.D);
  w.k = lpattn_tensor_4d(p->k, LPATTN_F32, s.B, s.Hkv, s.Skv, s.D);
  w.v = lpattn_tensor_4d(p->v, LPATTN_F32, s.B, s.Hkv, s.Skv, s.D);
  w.o = lpattn_tensor_4d(p->o, LPATTN_F32, s.B, s.Hq, s.Sq, s.D);
  w.lse = lpattn_tensor_4d(p->lse, LPATTN_F32, s.B, s.Hq, s.Sq, 1);
  w.dout = lpattn_tensor_4d(p->dout, LPATTN_F32, s.B, s.Hq, s.Sq, s.D);
  lpattn_attn_grads_init(&w.g);
  w.g.dq = lpattn_tensor_4d(p->dq, LPATTN_F32, s.B, s.Hq, s.Sq, s.D);
  w.g.dk = lpattn_tensor_4d(p->dk, LPATTN_F32, s.B, s.Hkv, s.Skv, s.D);
  w.g.dv = lpattn_tensor_4d(p->dv, LPATTN_F32, s.B, s.Hkv, s.Skv, s.D);
  return w;
}

/* Forward (o, lse) then backward into dq/dk/dv. quantize < 0: through the
 * API; 0/1: ref_backward_opts on the resolved problem. */
static lpattn_status fwd_bwd(lpattn_ctx *ctx, prob *p, const lpattn_attn_params *ap,
                             uint64_t seed, int quantize) {
  lpattn_status st = run_attention(ctx, p->sh, p->q, p->k, p->v, ap, p->o, p->lse, NULL, NULL, 0);
  if (st != LPATTN_OK) return st;
  views w = views_of(p);
  w.g.seed = seed;
  if (quantize < 0) return lpattn_attention_backward(ctx, &w.q, &w.k, &w.v, &w.o, &w.lse, &w.dout, ap, &w.g);
  lpattn_attn_aux in, aux;
  lpattn_attn_aux_init(&in);
  in.lse = w.lse;
  lpattn_bwd_problem bp;
  st = lp_resolve_attention(ctx, &w.q, &w.k, &w.v, &w.o, ap, &in, &bp.f, &aux, 0);
  if (st != LPATTN_OK) return st;
  bp.dout = &w.dout, bp.dq = &w.g.dq, bp.dk = &w.g.dk, bp.dv = &w.g.dv, bp.seed = seed;
  return ref_backward_opts(&bp, quantize);
}

/* Gradients from the definition, f64: P = softmax, dV = P^T dO,
 * dS = P (dO V^T - rowsum(dO O)), dQ = s dS K, dK = s dS^T Q. */
static void naive_grads(const prob *p, double scale, int causal, double *dq, double *dk, double *dv) {
  const shape_t sh = p->sh;
  const int64_t D = sh.D, off = sh.Skv - sh.Sq, G = sh.Hq / sh.Hkv;
  double *P = malloc(sizeof(double) * (size_t)sh.Skv), *o = malloc(sizeof(double) * (size_t)D);
  for (int64_t i = 0; i < nq(sh); i++) dq[i] = 0;
  for (int64_t i = 0; i < nkv(sh); i++) dk[i] = dv[i] = 0;
  for (int64_t b = 0; b < sh.B; b++)
    for (int64_t h = 0; h < sh.Hq; h++)
      for (int64_t i = 0; i < sh.Sq; i++) {
        const int64_t hk = h / G, row = (b * sh.Hq + h) * sh.Sq + i;
        const float *qi = p->q + row * D, *gi = p->dout + row * D;
        const float *K = p->k + (b * sh.Hkv + hk) * sh.Skv * D, *V = p->v + (b * sh.Hkv + hk) * sh.Skv * D;
        int64_t n = causal ? i + off + 1 : sh.Skv;
        if (n > sh.Skv) n = sh.Skv;
        if (n <= 0) continue;
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < n; j++) {
          double s = 0;
          for (int64_t d = 0; d < D; d++) s += (double)qi[d] * K[j * D + d];
          P[j] = s * scale;
          if (P[j] > mx) mx = P[j];
        }
        for (int64_t j = 0; j < n; j++) z += (P[j] = exp(P[j] - mx));
        for (int64_t j = 0; j < n; j++) P[j] /= z;
        for (int64_t d = 0; d < D; d++) o[d] = 0;
        for (int64_t j = 0; j < n; j++)
          for (int64_t d = 0; d < D; d++) o[d] += P[j] * V[j * D + d];
        double delta = 0;
        for (int64_t d = 0; d < D; d++) delta += gi[d] * o[d];
        for (int64_t j = 0; j < n; j++) {
          double dp = 0;
          for (int64_t d = 0; d < D; d++) dp += (double)gi[d] * V[j * D + d];
          const double ds = P[j] * (dp - delta);
          double *dkj = dk + ((b * sh.Hkv + hk) * sh.Skv + j) * D, *dvj = dv + ((b * sh.Hkv + hk) * sh.Skv + j) * D;
          for (int64_t d = 0; d < D; d++) {
            dq[row * D + d] += scale * ds * K[j * D + d];
            dkj[d] += scale * ds * qi[d];
            dvj[d] += P[j] * gi[d];
          }
        }
      }
  free(P), free(o);
}

static double rel_l2(const float *a, const double *b, int64_t n) { return rel_rmse(a, b, n); }

static void test_high_vs_naive(lpattn_ctx *ctx, shape_t sh, int causal) {
  prob p = make(sh, 11 + (uint64_t)causal);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.causal = causal, ap.block_q = 32, ap.block_k = 32;
  CHECK_STATUS(fwd_bwd(ctx, &p, &ap, 1, -1), LPATTN_OK);
  double *dq = malloc(sizeof(double) * (size_t)nq(sh)), *dk = malloc(sizeof(double) * (size_t)nkv(sh));
  double *dv = malloc(sizeof(double) * (size_t)nkv(sh));
  naive_grads(&p, 1.0 / sqrt((double)sh.D), causal, dq, dk, dv);
  const double eq = rel_l2(p.dq, dq, nq(sh)), ek = rel_l2(p.dk, dk, nkv(sh)), ev = rel_l2(p.dv, dv, nkv(sh));
  CHECK(eq < 1e-5 && ek < 1e-5 && ev < 1e-5, "HIGH causal %d Sq %lld Skv %lld: rel L2 dq %.2e dk %.2e dv %.2e",
        causal, (long long)sh.Sq, (long long)sh.Skv, eq, ek, ev);
  free(dq), free(dk), free(dv);
  drop(&p);
}

/* L = sum(dout * O): dL/dx by central differences of the f32 forward. */
static void test_finite_differences(lpattn_ctx *ctx) {
  const shape_t sh = {1, 2, 1, 40, 40, 16};
  prob p = make(sh, 5);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.causal = 1, ap.block_q = 32, ap.block_k = 32;
  CHECK_STATUS(fwd_bwd(ctx, &p, &ap, 1, -1), LPATTN_OK);
  float *x[3] = {p.q, p.k, p.v}, *g[3] = {p.dq, p.dk, p.dv};
  const int64_t n[3] = {nq(sh), nkv(sh), nkv(sh)};
  double worst = 0;
  for (int t = 0; t < 3; t++)
    for (int64_t e = 3; e < n[t]; e += 37) {
      double L[2];
      const float keep = x[t][e], h = 1e-2f;
      for (int s = 0; s < 2; s++) {
        x[t][e] = keep + (s ? -h : h);
        run_attention(ctx, sh, p.q, p.k, p.v, &ap, p.o, p.lse, NULL, NULL, 0);
        L[s] = 0;
        for (int64_t i = 0; i < nq(sh); i++) L[s] += (double)p.dout[i] * p.o[i];
      }
      x[t][e] = keep;
      const double fd = (L[0] - L[1]) / (2.0 * h), err = fabs(fd - g[t][e]) / (fabs(fd) + 0.05);
      if (err > worst) worst = err;
    }
  CHECK(worst < 2e-2, "finite differences: worst relative error %.3g", worst);
  drop(&p);
}

static int same_bits(const float *a, const float *b, int64_t n) { return memcmp(a, b, sizeof(float) * (size_t)n) == 0; }

/* Low precision: determinism, distance to the unquantized-operand gradient,
 * and the mean over seeds. */
static void test_low(lpattn_ctx *ctx, lpattn_precision prec, int mx_up, double tol1, double bias) {
  const shape_t sh = {1, 2, 1, 128, 128, 64};
  prob p = make(sh, 21), u = make(sh, 21);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.causal = 1, ap.block_q = 32, ap.block_k = 32, ap.precision = prec, ap.mx_scale_round_up = mx_up;
  CHECK_STATUS(fwd_bwd(ctx, &u, &ap, 0, 0), LPATTN_OK); /* unquantized backward operands */
  const int64_t n[3] = {nq(sh), nkv(sh), nkv(sh)};
  const float *ug[3] = {u.dq, u.dk, u.dv};
  float *g[3] = {p.dq, p.dk, p.dv};
  double *ref[3], *mean[3];
  for (int t = 0; t < 3; t++) {
    ref[t] = malloc(sizeof(double) * (size_t)n[t]), mean[t] = calloc((size_t)n[t], sizeof(double));
    for (int64_t i = 0; i < n[t]; i++) ref[t][i] = ug[t][i];
  }
  const int seeds = 24;
  double e1 = 0;
  for (int s = 0; s < seeds; s++) {
    CHECK_STATUS(fwd_bwd(ctx, &p, &ap, 1000 + (uint64_t)s, -1), LPATTN_OK);
    for (int t = 0; t < 3; t++) {
      for (int64_t i = 0; i < n[t]; i++) mean[t][i] += g[t][i] / seeds;
      if (s == 0) {
        const double e = rel_l2(g[t], ref[t], n[t]);
        e1 = e > e1 ? e : e1;
      }
    }
  }
  /* the same seed again: bitwise; another seed: different */
  float *keep = malloc(sizeof(float) * (size_t)n[0]);
  memcpy(keep, p.dq, sizeof(float) * (size_t)n[0]);
  CHECK_STATUS(fwd_bwd(ctx, &p, &ap, 1000 + seeds - 1, -1), LPATTN_OK);
  CHECK(same_bits(keep, p.dq, n[0]), "precision %d: the same seed gives other bits", prec);
  CHECK_STATUS(fwd_bwd(ctx, &p, &ap, 7, -1), LPATTN_OK);
  CHECK(!same_bits(keep, p.dq, n[0]), "precision %d: another seed gives the same bits", prec);
  double em = 0;
  for (int t = 0; t < 3; t++) {
    float *mf = malloc(sizeof(float) * (size_t)n[t]);
    for (int64_t i = 0; i < n[t]; i++) mf[i] = (float)mean[t][i];
    const double e = rel_l2(mf, ref[t], n[t]);
    em = e > em ? e : em;
    free(mf), free(ref[t]), free(mean[t]);
  }
  /* One seed within tol1. Unbiased rounding: the mean of 24 seeds is about
   * 1/sqrt(24) = 0.2 of one seed's distance (bound: 0.3); MXFP4's default
   * (OCP floor) scale rule clips values above 6 * 2^e, a bias SR cannot
   * remove, so it gets a looser bound (SEMANTICS "Backward"). */
  CHECK(e1 < tol1, "precision %d: one seed's rel L2 to the unquantized-operand gradient %.3g >= %.3g", prec, e1, tol1);
  CHECK(em < bias * e1, "precision %d mx_up %d: mean over %d seeds %.3g, one seed %.3g (biased?)", prec, mx_up,
        seeds, em, e1);
  printf("backward precision %d mx_up %d: rel L2 to unquantized operands: one seed %.4f, mean of %d seeds %.4f\n",
         prec, mx_up, e1, seeds, em);
  free(keep);
  drop(&p), drop(&u);
}

/* dO = 0 after row t; Q/K/V rows after t perturbed: dQ rows <= t unchanged. */
static void test_leak(lpattn_ctx *ctx, lpattn_precision prec) {
  const shape_t sh = {1, 2, 1, 128, 128, 32};
  const int64_t t = 70, D = sh.D;
  prob a = make(sh, 31), b = make(sh, 31);
  for (int64_t h = 0; h < sh.Hq; h++)
    for (int64_t r = t + 1; r < sh.Sq; r++)
      for (int64_t d = 0; d < D; d++) a.dout[(h * sh.Sq + r) * D + d] = b.dout[(h * sh.Sq + r) * D + d] = 0.0f;
  rng_t rr = {99};
  for (int64_t h = 0; h < sh.Hq; h++)
    for (int64_t r = t + 1; r < sh.Sq; r++)
      for (int64_t d = 0; d < D; d++) {
        const int64_t i = (h * sh.Sq + r) * D + d;
        b.q[i] += (float)(3.0 * rng_normal(&rr));
        if (h < sh.Hkv) b.k[i] += (float)(3.0 * rng_normal(&rr)), b.v[i] += (float)(3.0 * rng_normal(&rr));
      }
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.causal = 1, ap.block_q = 32, ap.block_k = 32, ap.precision = prec;
  CHECK_STATUS(fwd_bwd(ctx, &a, &ap, 5, -1), LPATTN_OK);
  CHECK_STATUS(fwd_bwd(ctx, &b, &ap, 5, -1), LPATTN_OK);
  int64_t bad = 0;
  for (int64_t h = 0; h < sh.Hq; h++)
    for (int64_t r = 0; r <= t; r++) bad += !same_bits(a.dq + (h * sh.Sq + r) * D, b.dq + (h * sh.Sq + r) * D, D);
  CHECK(bad == 0, "precision %d: %lld dQ rows <= t changed with Q/K/V after t", prec, (long long)bad);
  drop(&a), drop(&b);
}

/* cpu: close to ref for the same seed (f32 vs f64 sums move a few SR
 * decisions), and bitwise the same with 1 and 2 threads. */
static void test_cpu_vs_ref(lpattn_ctx *cpu, lpattn_precision prec, double tol, int64_t D) {
  const shape_t sh = {2, 4, 2, 100, 100, D};
  prob a = make(sh, 41), r = make(sh, 41);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.causal = 1, ap.precision = prec, ap.block_q = 32, ap.block_k = 64;
  lpattn_ctx *ref = ref_ctx();
  CHECK_STATUS(fwd_bwd(ref, &r, &ap, 9, -1), LPATTN_OK);
  memcpy(a.o, r.o, sizeof(float) * (size_t)nq(sh)), memcpy(a.lse, r.lse, sizeof(float) * (size_t)nrows(sh));
  views w = views_of(&a);
  w.g.seed = 9;
  CHECK_STATUS(lpattn_attention_backward(cpu, &w.q, &w.k, &w.v, &w.o, &w.lse, &w.dout, &ap, &w.g), LPATTN_OK);
  const float *x[3] = {a.dq, a.dk, a.dv}, *y[3] = {r.dq, r.dk, r.dv};
  const int64_t n[3] = {nq(sh), nkv(sh), nkv(sh)};
  double worst = 0;
  for (int t = 0; t < 3; t++) {
    double *yd = malloc(sizeof(double) * (size_t)n[t]);
    for (int64_t i = 0; i < n[t]; i++) yd[i] = y[t][i];
    const double e = rel_l2(x[t], yd, n[t]);
    worst = e > worst ? e : worst;
    free(yd);
  }
  CHECK(worst < tol, "cpu vs ref, precision %d D %lld: rel L2 %.3g >= %.3g", prec, (long long)D, worst, tol);
  printf("cpu vs ref, precision %d D %lld: rel L2 %.3g\n", prec, (long long)D, worst);
  /* one thread: the same bits */
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.num_threads = 1;
  lpattn_ctx *one = NULL;
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_CPU, &cp, &one), LPATTN_OK);
  float *keep = malloc(sizeof(float) * (size_t)n[0]);
  memcpy(keep, a.dq, sizeof(float) * (size_t)n[0]);
  CHECK_STATUS(lpattn_attention_backward(one, &w.q, &w.k, &w.v, &w.o, &w.lse, &w.dout, &ap, &w.g), LPATTN_OK);
  CHECK(same_bits(keep, a.dq, n[0]), "cpu precision %d: 1 thread gives other bits", prec);
  free(keep);
  lpattn_free(one), lpattn_free(ref);
  drop(&a), drop(&r);
}

static void test_args(lpattn_ctx *ctx) {
  const shape_t sh = {1, 2, 1, 64, 64, 32};
  prob p = make(sh, 3);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  views w = views_of(&p);
  CHECK_STATUS(lpattn_attention_backward(ctx, &w.q, &w.k, &w.v, &w.o, &w.lse, &w.dout, &ap, NULL),
               LPATTN_ERR_NULL_POINTER);
  lpattn_attn_grads g = w.g;
  g.dk.shape[2] = 32;
  CHECK_STATUS(lpattn_attention_backward(ctx, &w.q, &w.k, &w.v, &w.o, &w.lse, &w.dout, &ap, &g),
               LPATTN_ERR_BAD_SHAPE);
  g = w.g, g.dv = g.dk; /* two outputs on the same bytes */
  CHECK_STATUS(lpattn_attention_backward(ctx, &w.q, &w.k, &w.v, &w.o, &w.lse, &w.dout, &ap, &g),
               LPATTN_ERR_BAD_STRIDE);
  g = w.g, g.dq.data = p.dout; /* an output on an input */
  CHECK_STATUS(lpattn_attention_backward(ctx, &w.q, &w.k, &w.v, &w.o, &w.lse, &w.dout, &ap, &g),
               LPATTN_ERR_BAD_STRIDE);
  lpattn_tensor lse2 = w.lse;
  lse2.data = NULL;
  CHECK_STATUS(lpattn_attention_backward(ctx, &w.q, &w.k, &w.v, &w.o, &lse2, &w.dout, &ap, &w.g),
               LPATTN_ERR_NULL_POINTER);
  lse2 = w.lse;
  lse2.dtype = LPATTN_F16;
  CHECK_STATUS(lpattn_attention_backward(ctx, &w.q, &w.k, &w.v, &w.o, &lse2, &w.dout, &ap, &w.g),
               LPATTN_ERR_BAD_DTYPE);
  ap.pasa = 1;
  CHECK_STATUS(lpattn_attention_backward(ctx, &w.q, &w.k, &w.v, &w.o, &w.lse, &w.dout, &ap, &w.g),
               LPATTN_ERR_UNSUPPORTED);
  ap.pasa = 0, ap.check_finite = 1;
  p.dout[77] = NAN;
  CHECK_STATUS(lpattn_attention_backward(ctx, &w.q, &w.k, &w.v, &w.o, &w.lse, &w.dout, &ap, &w.g),
               LPATTN_ERR_NONFINITE);
  CHECK(strstr(lpattn_last_error(), "dout") != NULL, "NaN in dout: detail '%s'", lpattn_last_error());
  drop(&p);
}

/* dq, dk, dv interleaved in one packed [B, S, 3, H, D] buffer (a fused QKV
 * projection's gradient): accepted, and the same bits as separate buffers;
 * shifted by one element, dk meets dv and is refused. */
static void test_packed_grads(lpattn_ctx *ctx) {
  const shape_t sh = {2, 3, 3, 40, 40, 32};
  prob p = make(sh, 5);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.causal = 1;
  CHECK_STATUS(fwd_bwd(ctx, &p, &ap, 9, -1), LPATTN_OK);
  const int64_t H = sh.Hq, S = sh.Sq, D = sh.D, n = sh.B * S * 3 * H * D;
  float *buf = calloc((size_t)n + 1, sizeof(float));
  views w = views_of(&p);
  lpattn_attn_grads g = w.g;
  lpattn_tensor *t[3] = {&g.dq, &g.dk, &g.dv};
  for (int i = 0; i < 3; i++) {
    t[i]->data = buf + i * H * D;
    t[i]->stride[0] = S * 3 * H * D, t[i]->stride[1] = D, t[i]->stride[2] = 3 * H * D, t[i]->stride[3] = 1;
  }
  CHECK_STATUS(lpattn_attention_backward(ctx, &w.q, &w.k, &w.v, &w.o, &w.lse, &w.dout, &ap, &g), LPATTN_OK);
  const float *sep[3] = {p.dq, p.dk, p.dv};
  int same = 1;
  for (int64_t b = 0; b < sh.B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = 0; s < S; s++)
        for (int i = 0; i < 3; i++)
          same &= memcmp(buf + ((b * S + s) * 3 + i) * H * D + h * D, sep[i] + ((b * H + h) * S + s) * D,
                         sizeof(float) * (size_t)D) == 0;
  CHECK(same, "packed dq/dk/dv differ from separate buffers");
  g.dv.data = buf + 2 * H * D - 1; /* its first element is dk's last of row 0 */
  CHECK_STATUS(lpattn_attention_backward(ctx, &w.q, &w.k, &w.v, &w.o, &w.lse, &w.dout, &ap, &g),
               LPATTN_ERR_BAD_STRIDE);
  free(buf);
  drop(&p);
}

int main(int argc, char **argv) {
  const int cpu = argc > 1 && strcmp(argv[1], "cpu") == 0;
  lpattn_ctx *ctx = NULL;
  if (cpu && !lpattn_backend_available(LPATTN_BACKEND_CPU)) return test_skip("no cpu backend");
  CHECK_STATUS(lpattn_create(cpu ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, NULL, &ctx), LPATTN_OK);
  const shape_t gqa = {2, 4, 2, 100, 100, 32}, tail = {1, 2, 1, 50, 120, 32};
  test_high_vs_naive(ctx, gqa, 0);
  test_high_vs_naive(ctx, gqa, 1);
  test_high_vs_naive(ctx, tail, 1);
  /* head dims no multiple of 16 (SEMANTICS "Head dimensions") */
  const shape_t d40 = {1, 2, 1, 70, 90, 40}, d111 = {1, 2, 2, 50, 80, 111}, d8 = {1, 1, 1, 40, 40, 8};
  test_high_vs_naive(ctx, d40, 1);
  test_high_vs_naive(ctx, d111, 0);
  test_high_vs_naive(ctx, d8, 1);
  test_finite_differences(ctx);
  test_low(ctx, LPATTN_PREC_FP8, 0, 0.08, 0.3);
  test_low(ctx, LPATTN_PREC_NVFP4, 0, 0.3, 0.3);
  test_low(ctx, LPATTN_PREC_MXFP4, 1, 0.35, 0.3);
  test_low(ctx, LPATTN_PREC_MXFP4, 0, 0.35, 0.45);
  test_leak(ctx, LPATTN_PREC_NVFP4);
  test_leak(ctx, LPATTN_PREC_THRIFT);
  test_args(ctx);
  test_packed_grads(ctx);
  if (cpu) {
    test_cpu_vs_ref(ctx, LPATTN_PREC_HIGH, 1e-5, 64);
    test_cpu_vs_ref(ctx, LPATTN_PREC_NVFP4, 1e-3, 64);
    test_cpu_vs_ref(ctx, LPATTN_PREC_MXFP4, 1e-3, 64);
    test_cpu_vs_ref(ctx, LPATTN_PREC_FP8, 1e-3, 64);
    test_cpu_vs_ref(ctx, LPATTN_PREC_THRIFT, 1e-3, 64);
    /* padded head dims: the same SR bits (indices of the true D) */
    test_cpu_vs_ref(ctx, LPATTN_PREC_HIGH, 1e-5, 40);
    test_cpu_vs_ref(ctx, LPATTN_PREC_NVFP4, 1e-3, 111);
    test_cpu_vs_ref(ctx, LPATTN_PREC_MXFP4, 1e-3, 40);
    test_cpu_vs_ref(ctx, LPATTN_PREC_FP8, 1e-3, 80);
    test_cpu_vs_ref(ctx, LPATTN_PREC_THRIFT, 1e-3, 96);
  }
  lpattn_free(ctx);
  return test_finish();
}
