/* Sliding window and logit softcap (docs/SEMANTICS.md "Sliding window and
 * softcap") on a host backend (argv[1]: ref, default, or cpu):
 * - HIGH against a dense f64 model with the window's mask and the softcap;
 * - the leak tests, bitwise, in every precision: keys before a row's window
 *   and tokens after its horizon never change the row;
 * - the backward (HIGH) against the f64 gradient of the same function;
 * - decode through a KV cache equals the prefill rows with the same window;
 * - cpu: every precision against ref within the cpu/ref bounds;
 * - bad values and unsupported combinations. */
#include "refutil.h"

enum { H = 4, HKV = 2, D = 64, B32 = 32 };

typedef struct {
  int causal, left, right;
  float cap;
} mask_cfg;

/* Row i (of Sq, bottom-right: off = Skv - Sq) sees key j? */
static int sees(const mask_cfg *m, int64_t off, int64_t i, int64_t j) {
  if (m->causal && j > i + off) return 0;
  if (m->left >= 0 && j < i + off - m->left) return 0;
  if (!m->causal && m->right >= 0 && j > i + off + m->right) return 0;
  return 1;
}

static double cap_of(double u, double cap) { return cap > 0 ? cap * tanh(u / cap) : u; }

/* Dense f64 model: O, LSE, H and (when dout) dQ, dK, dV of one [1, H, S, D]
 * problem; the gradient of the softcap is 1 - tanh^2. */
static void model(shape_t sh, const mask_cfg *m, const float *q, const float *k, const float *v,
                  const float *dout, double *o, double *lse, double *ent, double *dq, double *dk,
                  double *dv) {
  const int64_t off = sh.Skv - sh.Sq, G = sh.Hq / sh.Hkv;
  const double sc = 1.0 / sqrt((double)D);
  double *p = malloc(sizeof(double) * (size_t)sh.Skv), *u = malloc(sizeof(double) * (size_t)sh.Skv);
  if (dout) {
    memset(dq, 0, sizeof(double) * (size_t)nq(sh));
    memset(dk, 0, sizeof(double) * (size_t)nkv(sh)), memset(dv, 0, sizeof(double) * (size_t)nkv(sh));
  }
  for (int64_t h = 0; h < sh.Hq; h++)
    for (int64_t i = 0; i < sh.Sq; i++) {
      const float *qi = q + (h * sh.Sq + i) * D;
      const int64_t row = h * sh.Sq + i, hk = h / G;
      double mx = -INFINITY;
      for (int64_t j = 0; j < sh.Skv; j++) {
        p[j] = -INFINITY;
        if (!sees(m, off, i, j)) continue;
        double s = 0;
        for (int d = 0; d < D; d++) s += (double)qi[d] * k[(hk * sh.Skv + j) * D + d];
        u[j] = s * sc, p[j] = cap_of(u[j], m->cap);
        mx = fmax(mx, p[j]);
      }
      for (int d = 0; d < D; d++) o[row * D + d] = 0;
      if (mx == -INFINITY) {
        lse[row] = -INFINITY, ent[row] = 0;
        continue;
      }
      double z = 0, zs = 0;
      for (int64_t j = 0; j < sh.Skv; j++)
        if (p[j] > -INFINITY) z += exp(p[j] - mx), zs += exp(p[j] - mx) * p[j];
      lse[row] = mx + log(z), ent[row] = lse[row] - zs / z;
      for (int64_t j = 0; j < sh.Skv; j++) {
        p[j] = p[j] > -INFINITY ? exp(p[j] - lse[row]) : 0.0;
        for (int d = 0; d < D; d++) o[row * D + d] += p[j] * v[(hk * sh.Skv + j) * D + d];
      }
      if (!dout) continue;
      double delta = 0;
      for (int d = 0; d < D; d++) delta += (double)dout[row * D + d] * o[row * D + d];
      for (int64_t j = 0; j < sh.Skv; j++) {
        if (p[j] == 0.0) continue;
        double dp = 0;
        for (int d = 0; d < D; d++) dp += (double)dout[row * D + d] * v[(hk * sh.Skv + j) * D + d];
        const double t = m->cap > 0 ? tanh(u[j] / m->cap) : 0.0;
        const double ds = p[j] * (dp - delta) * (1 - t * t) * sc;
        for (int d = 0; d < D; d++) {
          dq[row * D + d] += ds * k[(hk * sh.Skv + j) * D + d];
          dk[(hk * sh.Skv + j) * D + d] += ds * qi[d];
          dv[(hk * sh.Skv + j) * D + d] += p[j] * dout[row * D + d];
        }
      }
    }
  free(p), free(u);
}

static double rel_l2(const float *a, const double *b, int64_t n) {
  double e = 0, r = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(b[i])) e += (a[i] - b[i]) * (a[i] - b[i]), r += b[i] * b[i];
    else if (a[i] != b[i]) return INFINITY;
  return sqrt(e / fmax(r, 1e-300));
}

/* Gradients: relative to the reference, with a floor of 1e-3 on its RMS.
 * A row that sees one key (mask 2) has dQ = dK = 0 exactly, and then the
 * f32 rounding of delta = dO . O is all that is left on both sides. */
static double grad_err(const float *a, const double *b, int64_t n) {
  double e = 0, r = 0;
  for (int64_t i = 0; i < n; i++) e += (a[i] - b[i]) * (a[i] - b[i]), r += b[i] * b[i];
  return sqrt(e / fmax(r, 1e-6 * (double)n));
}

static lpattn_attn_params params_of(const mask_cfg *m, lpattn_precision prec) {
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = prec, p.causal = m->causal, p.block_q = p.block_k = B32;
  p.window_left = m->left, p.window_right = m->right, p.softcap = m->cap;
  if (prec == LPATTN_PREC_THRIFT) p.thrift_k = 3;
  return p;
}

static const mask_cfg masks[] = {
    {1, 16, -1, 0}, {1, 70, 0, 5.0f}, {1, 0, 0, 0}, {0, -1, 20, 0},
    {0, 45, 33, 2.0f}, {0, -1, -1, 3.0f}, {1, -1, -1, 1.5f}, {0, 100, 0, 0},
};
enum { NMASK = sizeof masks / sizeof masks[0] };

/* HIGH against the model (and the backward on ref). */
static void dense(lpattn_ctx *ctx, int is_ref) {
  enum { SQ = 150, SKV = 200 };
  shape_t sh = {1, H, HKV, SQ, SKV, D};
  static float q[H * SQ * D], k[HKV * SKV * D], v[HKV * SKV * D], o[H * SQ * D], l[H * SQ],
      e[H * SQ], dO[H * SQ * D], gq[H * SQ * D], gk[HKV * SKV * D], gv[HKV * SKV * D];
  static double mo[H * SQ * D], ml[H * SQ], me[H * SQ], mq[H * SQ * D], mk[HKV * SKV * D],
      mv[HKV * SKV * D];
  rng_t r = {7};
  fill_normal(&r, q, H * SQ * D, 0.0, 1.0), fill_normal(&r, k, HKV * SKV * D, 0.0, 1.0);
  fill_normal(&r, v, HKV * SKV * D, 0.0, 1.0), fill_normal(&r, dO, H * SQ * D, 0.0, 1.0);
  for (int c = 0; c < NMASK; c++) {
    const mask_cfg *m = &masks[c];
    lpattn_attn_params p = params_of(m, LPATTN_PREC_HIGH);
    CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o, l, e, NULL, 0), LPATTN_OK);
    model(sh, m, q, k, v, dO, mo, ml, me, mq, mk, mv);
    const double eo = rel_l2(o, mo, nq(sh)), el = rel_l2(l, ml, H * SQ), eh = rel_l2(e, me, H * SQ);
    const double tol = is_ref ? 1e-6 : 2e-5;
    CHECK(eo < tol && el < tol && eh < 10 * tol, "mask %d: O %.3g LSE %.3g H %.3g (tol %.3g)", c, eo,
          el, eh, tol);
    printf("dense mask %d (causal %d, window %d/%d, softcap %g): O %.2e LSE %.2e H %.2e\n", c,
           m->causal, m->left, m->right, (double)m->cap, eo, el, eh);
    lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F32, 1, H, SQ, D);
    lpattn_tensor tk = lpattn_tensor_4d(k, LPATTN_F32, 1, HKV, SKV, D);
    lpattn_tensor tv = lpattn_tensor_4d(v, LPATTN_F32, 1, HKV, SKV, D);
    lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, 1, H, SQ, D);
    lpattn_tensor tl = lpattn_tensor_4d(l, LPATTN_F32, 1, H, SQ, 1);
    lpattn_tensor tdo = lpattn_tensor_4d(dO, LPATTN_F32, 1, H, SQ, D);
    lpattn_attn_grads g;
    lpattn_attn_grads_init(&g);
    g.dq = lpattn_tensor_4d(gq, LPATTN_F32, 1, H, SQ, D);
    g.dk = lpattn_tensor_4d(gk, LPATTN_F32, 1, HKV, SKV, D);
    g.dv = lpattn_tensor_4d(gv, LPATTN_F32, 1, HKV, SKV, D);
    CHECK_STATUS(lpattn_attention_backward(ctx, &tq, &tk, &tv, &to, &tl, &tdo, &p, &g), LPATTN_OK);
    const double gtol = is_ref ? 1e-5 : 2e-3; /* SPEC 10: HIGH within 2e-3 */
    const double a = grad_err(gq, mq, nq(sh)), b = grad_err(gk, mk, nkv(sh));
    const double d = grad_err(gv, mv, nkv(sh));
    CHECK(a < gtol && b < gtol && d < gtol, "mask %d backward: dQ %.3g dK %.3g dV %.3g", c, a, b, d);
    printf("  backward: dQ %.2e dK %.2e dV %.2e\n", a, b, d);
  }
}

static const lpattn_precision precs[] = {LPATTN_PREC_HIGH, LPATTN_PREC_FP8, LPATTN_PREC_NVFP4,
                                         LPATTN_PREC_MXFP4, LPATTN_PREC_THRIFT, LPATTN_PREC_FP8_STATIC};
static const char *const prec_names[] = {"high", "fp8", "nvfp4", "mxfp4", "thrift", "fp8_static"};
enum { NPREC = 6 };

static int same_row(const float *a, const float *b, int64_t n) { return !memcmp(a, b, 4 * (size_t)n); }

/* Leak tests: keys (K, V) before t never reach rows whose window starts at
 * or after t; tokens (Q, K, V) after t never reach rows at or before t. */
static void leaks(lpattn_ctx *ctx) {
  enum { S = 200, L = 100 }; /* tiles i-1, i-2 full, i-3 the left edge */
  shape_t sh = {1, H, HKV, S, S, D};
  static float q[H * S * D], k[HKV * S * D], v[HKV * S * D], q2[H * S * D], k2[HKV * S * D],
      v2[HKV * S * D], o[H * S * D], l[H * S], e[H * S], o2[H * S * D], l2[H * S], e2[H * S];
  const mask_cfg m = {1, L, -1, 4.0f};
  for (int pi = 0; pi < NPREC; pi++) {
    lpattn_attn_params p = params_of(&m, precs[pi]);
    const int64_t ts[] = {20, 37, 64, 90};
    int bad_past = 0, bad_future = 0, rows = 0;
    for (int ti = 0; ti < 4; ti++) {
      const int64_t t = ts[ti];
      rng_t r = {11 + (uint64_t)ti};
      fill_normal(&r, q, H * S * D, 0.2, 1.0), fill_normal(&r, k, HKV * S * D, 0.5, 1.0);
      fill_normal(&r, v, HKV * S * D, 0.0, 1.0);
      CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o, l, e, NULL, 0), LPATTN_OK);
      /* keys before t, perturbed (large, to move any scale they could reach) */
      memcpy(k2, k, sizeof k), memcpy(v2, v, sizeof v);
      for (int h = 0; h < HKV; h++)
        for (int64_t c = 0; c < t; c++)
          for (int d = 0; d < D; d++)
            k2[(h * S + c) * D + d] *= -7.0f, v2[(h * S + c) * D + d] = 50.0f * (float)((c + d) % 5);
      CHECK_STATUS(run_attention(ctx, sh, q, k2, v2, &p, o2, l2, e2, NULL, 0), LPATTN_OK);
      for (int h = 0; h < H; h++)
        for (int64_t i = t + L; i < S; i++, rows++)
          bad_past += !same_row(o + (h * S + i) * D, o2 + (h * S + i) * D, D) ||
                      l[h * S + i] != l2[h * S + i] || e[h * S + i] != e2[h * S + i];
      /* tokens after t, perturbed */
      memcpy(q2, q, sizeof q), memcpy(k2, k, sizeof k), memcpy(v2, v, sizeof v);
      for (int64_t c = t + 1; c < S; c++)
        for (int d = 0; d < D; d++) {
          for (int h = 0; h < HKV; h++) k2[(h * S + c) * D + d] += 30.0f, v2[(h * S + c) * D + d] *= 100.0f;
          for (int h = 0; h < H; h++) q2[(h * S + c) * D + d] -= 20.0f;
        }
      CHECK_STATUS(run_attention(ctx, sh, q2, k2, v2, &p, o2, l2, e2, NULL, 0), LPATTN_OK);
      for (int h = 0; h < H; h++)
        for (int64_t i = 0; i <= t; i++, rows++)
          bad_future += !same_row(o + (h * S + i) * D, o2 + (h * S + i) * D, D) ||
                        l[h * S + i] != l2[h * S + i] || e[h * S + i] != e2[h * S + i];
    }
    CHECK(bad_past == 0 && bad_future == 0, "%s: %d rows changed by keys before their window, %d by "
          "later tokens", prec_names[pi], bad_past, bad_future);
    printf("leak %-10s window %d: %d rows compared, bitwise equal\n", prec_names[pi], L, rows);
  }
}

/* cpu against ref in every precision (cpu/ref bounds of test_cpu_attention). */
static void against_ref(lpattn_ctx *ctx, lpattn_ctx *rctx) {
  enum { SQ = 150, SKV = 200 };
  shape_t sh = {1, H, HKV, SQ, SKV, D};
  static float q[H * SQ * D], k[HKV * SKV * D], v[HKV * SKV * D], o[2][H * SQ * D], l[2][H * SQ],
      e[2][H * SQ];
  static double hi[H * SQ * D], ml[H * SQ], me[H * SQ];
  rng_t r = {5};
  fill_normal(&r, q, H * SQ * D, 0.0, 1.0), fill_normal(&r, k, HKV * SKV * D, 0.0, 1.0);
  fill_normal(&r, v, HKV * SKV * D, 0.0, 1.0);
  for (int c = 0; c < NMASK; c++)
    for (int pi = 0; pi < NPREC; pi++) {
      lpattn_attn_params p = params_of(&masks[c], precs[pi]);
      model(sh, &masks[c], q, k, v, NULL, hi, ml, me, NULL, NULL, NULL);
      CHECK_STATUS(run_attention(rctx, sh, q, k, v, &p, o[0], l[0], e[0], NULL, 0), LPATTN_OK);
      CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o[1], l[1], e[1], NULL, 0), LPATTN_OK);
      const double own = rel_l2(o[0], hi, nq(sh)), tol = 0.01 * own + 1e-5;
      double eo = 0, er = 0, el = 0;
      for (int64_t i = 0; i < nq(sh); i++) eo += (o[1][i] - o[0][i]) * (double)(o[1][i] - o[0][i]), er += (double)o[0][i] * o[0][i];
      eo = sqrt(eo / fmax(er, 1e-300));
      for (int64_t i = 0; i < H * SQ; i++)
        if (l[0][i] != l[1][i]) el = fmax(el, fabs((double)l[0][i] - l[1][i]) / fmax(1.0, fabs((double)l[0][i])));
      const double lt = precs[pi] == LPATTN_PREC_HIGH ? 1e-4 : 2e-3;
      CHECK(eo < tol && el < lt, "mask %d %s: cpu vs ref O %.3g (tol %.3g) LSE %.3g", c, prec_names[pi],
            eo, tol, el);
      if (c == 3 || c == 5 || c == 7) /* windows with full (low) tiles */
        printf("cpu/ref mask %d %-10s O %.2e (tol %.2e, own %.2e) LSE %.2e\n", c, prec_names[pi], eo,
               tol, own, el);
    }
}

/* Token by token through a KV cache on ctx: every row's O and LSE. */
static void decode_rows(lpattn_ctx *ctx, const lpattn_attn_params *p, lpattn_precision prec,
                        const float *q, const float *k, const float *v, int64_t N, float *od,
                        float *ld) {
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_kv_heads = HKV, cp.num_q_heads = H, cp.head_dim = D, cp.max_tokens = N, cp.tile = B32;
  cp.precision = prec, cp.high_dtype = LPATTN_F32;
  lpattn_kv_cache *c = NULL;
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &cp, &c), LPATTN_OK);
  if (!c) return;
  for (int64_t t = 0; t < N; t++) {
    float o1[H * D], l1[H];
    lpattn_tensor tk = lpattn_tensor_4d((float *)k + t * D, LPATTN_F32, 1, HKV, 1, D);
    lpattn_tensor tv = lpattn_tensor_4d((float *)v + t * D, LPATTN_F32, 1, HKV, 1, D);
    lpattn_tensor tq = lpattn_tensor_4d((float *)q + t * D, LPATTN_F32, 1, H, 1, D);
    tk.stride[1] = tv.stride[1] = tq.stride[1] = N * D;
    CHECK_STATUS(lpattn_kv_cache_append(ctx, c, 0, &tk, &tv, &tq), LPATTN_OK);
    lpattn_tensor to = lpattn_tensor_4d(o1, LPATTN_F32, 1, H, 1, D);
    lpattn_attn_aux aux;
    lpattn_attn_aux_init(&aux);
    aux.lse = lpattn_tensor_4d(l1, LPATTN_F32, 1, H, 1, 1);
    CHECK_STATUS(lpattn_decode(ctx, c, &tq, &to, p, &aux), LPATTN_OK);
    for (int h = 0; h < H; h++) {
      memcpy(od + (h * N + t) * D, o1 + h * D, sizeof(float) * D);
      ld[h * N + t] = l1[h];
    }
  }
  lpattn_kv_cache_free(c);
}

/* Largest row rel L2 between a and b ([H, N, D]) and largest |dLSE|. */
static void row_diffs(const float *a, const float *b, const float *la, const float *lb, int64_t N,
                      double *worst, double *wl) {
  *worst = *wl = 0;
  for (int64_t r = 0; r < H * N; r++) {
    double e = 0, n2 = 0;
    for (int d = 0; d < D; d++)
      e += (a[r * D + d] - (double)b[r * D + d]) * (a[r * D + d] - (double)b[r * D + d]),
          n2 += (double)b[r * D + d] * b[r * D + d];
    *worst = fmax(*worst, sqrt(e / fmax(n2, 1e-300)));
    *wl = fmax(*wl, fabs((double)la[r] - lb[r]));
  }
}

/* Decode through a KV cache, token by token: HIGH and THRIFT rows equal the
 * prefill's (ref: bitwise up to the f64 fold, one chunk); an NVFP4 pool
 * reads the window's left-edge tile low (it keeps no high copy): its error
 * to the f64 model stays that of the prefill's precision; cpu decode equals
 * ref decode within the cpu/ref bounds. */
static void decode(lpattn_ctx *ctx, lpattn_ctx *rctx) {
  enum { N = 6 * B32 + 9, L = 100 };
  shape_t sh = {1, H, HKV, N, N, D};
  static float q[H * N * D], k[HKV * N * D], v[HKV * N * D], o[H * N * D], l[H * N],
      od[H * N * D], ld[H * N], rd[H * N * D], rl[H * N];
  static double mo[H * N * D], ml[H * N], me[H * N];
  const lpattn_precision dp[] = {LPATTN_PREC_HIGH, LPATTN_PREC_NVFP4, LPATTN_PREC_THRIFT};
  const char *const names[] = {"high", "nvfp4", "thrift"};
  const mask_cfg m = {1, L, -1, 3.0f};
  rng_t r = {3};
  fill_normal(&r, q, H * N * D, 0.2, 1.0), fill_normal(&r, k, HKV * N * D, 0.5, 1.0);
  fill_normal(&r, v, HKV * N * D, 0.0, 1.0);
  model(sh, &m, q, k, v, NULL, mo, ml, me, NULL, NULL, NULL);
  for (int pi = 0; pi < 3; pi++) {
    lpattn_attn_params p = params_of(&m, dp[pi]);
    CHECK_STATUS(run_attention(rctx, sh, q, k, v, &p, o, l, NULL, NULL, 0), LPATTN_OK);
    decode_rows(ctx, &p, dp[pi], q, k, v, N, od, ld);
    double worst, wl;
    row_diffs(od, o, ld, l, N, &worst, &wl);
    const double ep = rel_l2(o, mo, nq(sh)), ed = rel_l2(od, mo, nq(sh));
    if (dp[pi] == LPATTN_PREC_NVFP4) {
      CHECK(ed <= 1.25 * ep + 1e-4, "decode nvfp4: error to the model %g, prefill's %g", ed, ep);
    } else {
      const double tol = ctx == rctx ? 1e-12 : dp[pi] == LPATTN_PREC_HIGH ? 1e-5 : 2e-3;
      CHECK(worst <= tol && wl <= (ctx == rctx ? 1e-12 : 2e-3), "decode %s: rows differ from "
            "prefill by %g (LSE %g)", names[pi], worst, wl);
    }
    printf("decode %-6s window %d: rows vs prefill: worst rel L2 %.2e, |dLSE| %.2e; to the f64 model: "
           "decode %.2e, prefill %.2e\n", names[pi], L, worst, wl, ed, ep);
    if (ctx == rctx) continue;
    decode_rows(rctx, &p, dp[pi], q, k, v, N, rd, rl);
    double e = 0, n2 = 0, el = 0;
    for (int64_t i = 0; i < nq(sh); i++) e += (od[i] - (double)rd[i]) * (od[i] - (double)rd[i]), n2 += (double)rd[i] * rd[i];
    for (int64_t i = 0; i < H * N; i++) el = fmax(el, fabs((double)ld[i] - rl[i]));
    const double ec = sqrt(e / n2), tol = 0.01 * rel_l2(rd, mo, nq(sh)) + 1e-5;
    CHECK(ec < tol && el < 2e-3, "decode %s: cpu vs ref decode O %.3g (tol %.3g) LSE %.3g", names[pi],
          ec, tol, el);
    printf("  cpu vs ref decode: O %.2e (tol %.2e) LSE %.2e\n", ec, tol, el);
  }
}

static void errors(lpattn_ctx *ctx) {
  enum { S = 40 };
  shape_t sh = {1, H, HKV, S, S, D};
  static float q[H * S * D], k[HKV * S * D], v[HKV * S * D], o[H * S * D];
  const mask_cfg m = {1, -1, -1, 0};
  lpattn_attn_params p = params_of(&m, LPATTN_PREC_HIGH);
  p.window_left = -2;
  CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o, NULL, NULL, NULL, 0), LPATTN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(lpattn_last_error(), "params.window_left") != NULL, "%s", lpattn_last_error());
  p.window_left = -1, p.window_right = -5;
  CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o, NULL, NULL, NULL, 0), LPATTN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(lpattn_last_error(), "params.window_right") != NULL, "%s", lpattn_last_error());
  const float caps[] = {-1.0f, NAN, INFINITY};
  for (int i = 0; i < 3; i++) {
    p.window_right = -1, p.softcap = caps[i];
    CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o, NULL, NULL, NULL, 0), LPATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(lpattn_last_error(), "params.softcap") != NULL, "%s", lpattn_last_error());
  }
  p.softcap = 0, p.pasa = 1, p.window_left = 8;
  CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o, NULL, NULL, NULL, 0), LPATTN_ERR_UNSUPPORTED);
  p.window_left = -1, p.softcap = 1.0f;
  CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o, NULL, NULL, NULL, 0), LPATTN_ERR_UNSUPPORTED);
  lpattn_attn_params d;
  lpattn_attn_params_init(&d);
  CHECK(d.window_left == -1 && d.window_right == -1 && d.softcap == 0.0f, "defaults %d %d %g",
        d.window_left, d.window_right, (double)d.softcap);
}

int main(int argc, char **argv) {
  const int cpu = argc > 1 && !strcmp(argv[1], "cpu");
  lpattn_ctx *rctx = ref_ctx(), *ctx = rctx;
  if (cpu && lpattn_create(LPATTN_BACKEND_CPU, NULL, &ctx) != LPATTN_OK) {
    lpattn_free(rctx);
    return test_skip("no cpu backend");
  }
  errors(ctx);
  dense(ctx, !cpu);
  leaks(ctx);
  if (cpu) against_ref(ctx, rctx);
  decode(ctx, rctx);
  if (ctx != rctx) lpattn_free(ctx);
  lpattn_free(rctx);
  return test_finish();
}
