/* Absolute positions (lpattn.h, SEMANTICS "Absolute positions") on a host
 * backend (argv[1]: ref or cpu):
 * - a default call equals the same call with positions = 1 whose starts give
 *   the same offset (bitwise);
 * - shards of keys and of queries, each with return_lse, merged by
 *   lpattn_merge_states (SPEC 7), equal the single call within the bounds of
 *   SEMANTICS (HIGH and NVFP4: the merge's f32 rounding; FP8, MXFP4 and PASA:
 *   some of their own rounding, below their error, which is printed);
 * - the causal leak test across shard borders: perturb every token after t
 *   (Q, K, V), recompute every shard and merge: rows <= t bitwise unchanged;
 * - backward (HIGH): the shards' gradients add up to the whole call's;
 * - bad positions get statuses with specific lpattn_last_error details. */
#include <math.h>
#include <string.h>

#include "lpattn.h"
#include "testutil.h"

enum { HQ = 2, HKV = 1, N = 320, D = 64, T = 64 };
#define NQ (HQ * N * D)
#define NK (HKV * N * D)

static float q[NQ], k[NK], v[NK], q2[NQ], k2[NK], v2[NK];
static float o_whole[NQ], l_whole[HQ * N], o_sh[NQ], l_sh[HQ * N], o_high[NQ];

typedef struct {
  const char *name;
  lpattn_precision prec;
  int pasa, leaky;
  double o_bound;   /* HIGH: max |O_sharded - O_whole|; else their relative L2 distance */
  double lse_bound; /* max |LSE_sharded - LSE_whole| */
} variant;

/* Measured (ref and cpu): HIGH max 4e-7 / LSE 1e-6; rel L2 of NVFP4 2e-7 (its P
 * is scale-free up to rare one-code flips), FP8 6.5e-3, MXFP4 3.5e-2, PASA 1.7e-4
 * (against their own 0.10, 0.026, 0.13 and 3.8e-4 to HIGH). */
static const variant variants[] = {
    {"HIGH", LPATTN_PREC_HIGH, 0, 0, 2e-6, 2e-6},  {"NVFP4", LPATTN_PREC_NVFP4, 0, 0, 2e-3, 2e-6},
    {"FP8", LPATTN_PREC_FP8, 0, 0, 1.5e-2, 2e-6},  {"MXFP4", LPATTN_PREC_MXFP4, 0, 0, 7e-2, 2e-6},
    {"PASA", LPATTN_PREC_HIGH, 1, 0, 1e-3, 1e-3},  {"NVFP4+PASA", LPATTN_PREC_NVFP4, 1, 0, 1e-3, 1e-3},
};

static uint64_t rs = 12345;
static float rnd(void) { return tu_gauss(&rs); } /* splitmix64 -> roughly N(0, 1) */

/* Rows [s, s + n) of a contiguous [1, H, N, D] f32 array. */
static lpattn_tensor rows(float *base, int64_t h, int64_t s, int64_t n, int64_t d) {
  lpattn_tensor t = lpattn_tensor_4d(base + s * d, LPATTN_F32, 1, h, n, d);
  t.stride[0] = h * N * d, t.stride[1] = N * d;
  return t;
}

static lpattn_attn_params params_of(const variant *va) {
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = va->prec, p.pasa = va->pasa, p.leaky = va->leaky, p.causal = 1;
  p.block_q = p.block_k = T;
  return p;
}

/* One call: query rows [qs, qs + nq), keys [ks, ks + nk), out and lse into
 * the same rows of o/l (positions = -1: the default bottom-right call). */
static lpattn_status call(lpattn_ctx *ctx, const variant *va, const float *Q, const float *K,
                          const float *V, int64_t qs, int64_t nq, int64_t ks, int64_t nk, int pos,
                          float *o, float *l) {
  lpattn_tensor tq = rows((float *)Q, HQ, qs, nq, D), tk = rows((float *)K, HKV, ks, nk, D);
  lpattn_tensor tv = rows((float *)V, HKV, ks, nk, D), to = rows(o, HQ, qs, nq, D);
  lpattn_attn_params p = params_of(va);
  if (pos) p.positions = 1, p.q_start = qs, p.kv_start = ks;
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = rows(l, HQ, qs, nq, 1);
  return lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, &aux);
}

/* The q shards x kv shards grid, each q shard's kv partials merged in order. */
static const int64_t qcut[] = {0, 128, 256, N}, kcut[] = {0, 64, 192, N};

static int sharded(lpattn_ctx *ctx, const variant *va, const float *Q, const float *K,
                   const float *V) {
  static float o_p[NQ], l_p[HQ * N];
  for (int a = 0; a < 3; a++) {
    const int64_t qs = qcut[a], nq = qcut[a + 1] - qs;
    for (int c = 0; c < 3; c++) {
      const int64_t ks = kcut[c], nk = kcut[c + 1] - ks;
      float *o = c == 0 ? o_sh : o_p, *l = c == 0 ? l_sh : l_p;
      if (call(ctx, va, Q, K, V, qs, nq, ks, nk, 1, o, l) != LPATTN_OK) return 0;
      if (c == 0) continue;
      lpattn_tensor oa = rows(o_sh, HQ, qs, nq, D), la = rows(l_sh, HQ, qs, nq, 1);
      lpattn_tensor ob = rows(o_p, HQ, qs, nq, D), lb = rows(l_p, HQ, qs, nq, 1);
      if (lpattn_merge_states(ctx, &oa, &la, NULL, &ob, &lb, NULL, &oa, &la, NULL) != LPATTN_OK)
        return 0;
    }
  }
  return 1;
}

static void equivalence(lpattn_ctx *ctx, const variant *va) {
  static float o1[NQ], l1[HQ * N];
  /* positions = 1 with zero starts and Sq == Skv: the default call, bitwise. */
  CHECK(call(ctx, va, q, k, v, 0, N, 0, N, 0, o_whole, l_whole) == LPATTN_OK, "%s", va->name);
  CHECK(call(ctx, va, q, k, v, 0, N, 0, N, 1, o1, l1) == LPATTN_OK, "%s", va->name);
  CHECK(!memcmp(o1, o_whole, sizeof o1) && !memcmp(l1, l_whole, sizeof l1),
        "%s: positions = 1 at 0/0 differs from the default", va->name);
  /* A query shard whose starts give off = Skv - Sq: the default call, bitwise. */
  memset(o1, 0, sizeof o1);
  lpattn_tensor tq = rows(q, HQ, 128, N - 128, D), tk = rows(k, HKV, 0, N, D);
  lpattn_tensor tv = rows(v, HKV, 0, N, D), to = rows(o1, HQ, 128, N - 128, D);
  lpattn_attn_params p = params_of(va);
  CHECK(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL) == LPATTN_OK, "%s", va->name);
  static float o3[NQ];
  memset(o3, 0, sizeof o3);
  to = rows(o3, HQ, 128, N - 128, D);
  p.positions = 1, p.q_start = 128;
  CHECK(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL) == LPATTN_OK, "%s", va->name);
  CHECK(!memcmp(o1, o3, sizeof o3), "%s: q_start = Skv - Sq differs from the default", va->name);
}

static void shards_vs_whole(lpattn_ctx *ctx, const variant *va) {
  CHECK(sharded(ctx, va, q, k, v), "%s: a sharded call failed: %s", va->name, lpattn_last_error());
  double worst = 0.0, wl = 0.0, d2 = 0.0, n2 = 0.0, e2 = 0.0;
  if (va->prec == LPATTN_PREC_HIGH && !va->pasa) memcpy(o_high, o_whole, sizeof o_high);
  for (int64_t i = 0; i < NQ; i++) {
    const double d = (double)o_sh[i] - o_whole[i], e = (double)o_whole[i] - o_high[i];
    worst = fmax(worst, fabs(d)), d2 += d * d, n2 += (double)o_whole[i] * o_whole[i], e2 += e * e;
  }
  for (int64_t i = 0; i < HQ * N; i++) wl = fmax(wl, fabs((double)l_sh[i] - l_whole[i]));
  const double rel = sqrt(d2 / n2), err = sqrt(e2 / n2);
  /* err: the precision's own distance to HIGH, for scale */
  printf("%-11s shards vs whole: max |dO| %.3g, rel L2 %.3g, max |dLSE| %.3g; whole vs HIGH: "
         "rel L2 %.3g\n", va->name, worst, rel, wl, err);
  const int high = va->prec == LPATTN_PREC_HIGH && !va->pasa;
  CHECK((high ? worst : rel) <= va->o_bound && wl <= va->lse_bound,
        "%s: max |dO| %g, rel %g, |dLSE| %g: bounds %g, %g", va->name, worst, rel, wl,
        va->o_bound, va->lse_bound);
}

/* Perturb every token after t; rows <= t of the merged shards stay bitwise. */
static void leak(lpattn_ctx *ctx, const variant *va, int64_t t) {
  static float o0[NQ], l0[HQ * N];
  CHECK(sharded(ctx, va, q, k, v), "%s", va->name);
  memcpy(o0, o_sh, sizeof o0), memcpy(l0, l_sh, sizeof l0);
  memcpy(q2, q, sizeof q), memcpy(k2, k, sizeof k), memcpy(v2, v, sizeof v);
  for (int64_t i = 0; i < NQ; i++)
    if ((i / D) % N > t) q2[i] = 3.0f * rnd() + 1.0f;
  for (int64_t i = 0; i < NK; i++)
    if ((i / D) % N > t) k2[i] = 4.0f * rnd() - 1.0f, v2[i] = 5.0f * rnd() + 2.0f;
  CHECK(sharded(ctx, va, q2, k2, v2), "%s", va->name);
  int bad = 0;
  for (int64_t h = 0; h < HQ; h++)
    for (int64_t r = 0; r <= t; r++) {
      bad |= memcmp(o0 + (h * N + r) * D, o_sh + (h * N + r) * D, 4 * D) != 0;
      bad |= memcmp(l0 + h * N + r, l_sh + h * N + r, 4) != 0;
    }
  CHECK(!bad, "%s: a row <= %lld changed when the tokens after it did", va->name, (long long)t);
}

/* Backward (HIGH): given the whole call's out and lse, the shards' gradients
 * add up to the whole call's: dq over the kv shards, dk/dv over the q shards. */
static void backward(lpattn_ctx *ctx) {
  static float dout[NQ], dq[NQ], dk[NK], dv[NK], sq_[NQ], sk[NK], sv[NK], gq[NQ], gk[NK], gv[NK];
  const variant *va = &variants[0];
  for (int64_t i = 0; i < NQ; i++) dout[i] = rnd();
  CHECK(call(ctx, va, q, k, v, 0, N, 0, N, 0, o_whole, l_whole) == LPATTN_OK, "forward");
  lpattn_attn_params p = params_of(va);
  lpattn_tensor tq = rows(q, HQ, 0, N, D), tk = rows(k, HKV, 0, N, D), tv = rows(v, HKV, 0, N, D);
  lpattn_tensor to = rows(o_whole, HQ, 0, N, D), tl = rows(l_whole, HQ, 0, N, 1);
  lpattn_tensor tg = rows(dout, HQ, 0, N, D);
  lpattn_attn_grads g;
  lpattn_attn_grads_init(&g);
  g.dq = rows(dq, HQ, 0, N, D), g.dk = rows(dk, HKV, 0, N, D), g.dv = rows(dv, HKV, 0, N, D);
  lpattn_status st = lpattn_attention_backward(ctx, &tq, &tk, &tv, &to, &tl, &tg, &p, &g);
  if (st == LPATTN_ERR_UNSUPPORTED) return;
  CHECK(st == LPATTN_OK, "backward: %s", lpattn_last_error());
  memset(sq_, 0, sizeof sq_), memset(sk, 0, sizeof sk), memset(sv, 0, sizeof sv);
  for (int a = 0; a < 3; a++)
    for (int c = 0; c < 3; c++) {
      const int64_t qs = qcut[a], nq = qcut[a + 1] - qs, ks = kcut[c], nk = kcut[c + 1] - ks;
      p.positions = 1, p.q_start = qs, p.kv_start = ks;
      tq = rows(q, HQ, qs, nq, D), tk = rows(k, HKV, ks, nk, D), tv = rows(v, HKV, ks, nk, D);
      to = rows(o_whole, HQ, qs, nq, D), tl = rows(l_whole, HQ, qs, nq, 1);
      tg = rows(dout, HQ, qs, nq, D);
      g.dq = rows(gq, HQ, qs, nq, D), g.dk = rows(gk, HKV, ks, nk, D), g.dv = rows(gv, HKV, ks, nk, D);
      CHECK(lpattn_attention_backward(ctx, &tq, &tk, &tv, &to, &tl, &tg, &p, &g) == LPATTN_OK,
            "shard backward: %s", lpattn_last_error());
      for (int64_t h = 0; h < HQ; h++)
        for (int64_t e = (h * N + qs) * D; e < (h * N + qs + nq) * D; e++) sq_[e] += gq[e];
      for (int64_t h = 0; h < HKV; h++)
        for (int64_t e = (h * N + ks) * D; e < (h * N + ks + nk) * D; e++)
          sk[e] += gk[e], sv[e] += gv[e];
    }
  double wq = 0.0, wk = 0.0, wv = 0.0;
  for (int64_t i = 0; i < NQ; i++) wq = fmax(wq, fabs((double)sq_[i] - dq[i]));
  for (int64_t i = 0; i < NK; i++)
    wk = fmax(wk, fabs((double)sk[i] - dk[i])), wv = fmax(wv, fabs((double)sv[i] - dv[i]));
  printf("backward    shards summed vs whole: max |d dq| %.3g, |d dk| %.3g, |d dv| %.3g\n", wq,
         wk, wv);
  CHECK(wq <= 1e-5 && wk <= 1e-5 && wv <= 1e-5, "backward shards: %g %g %g", wq, wk, wv);
}

#define EXPECT(expr, want, text)                                                        \
  do {                                                                                  \
    lpattn_status got_ = (expr);                                                        \
    CHECK(got_ == (want), "%s -> %s", #expr, lpattn_status_string(got_));              \
    CHECK(strstr(lpattn_last_error(), (text)) != NULL, "%s: detail \"%s\" lacks \"%s\"", \
          #expr, lpattn_last_error(), (text));                                          \
  } while (0)

static void bad_positions(lpattn_ctx *ctx) {
  lpattn_tensor tq = rows(q, HQ, 0, T, D), tk = rows(k, HKV, 0, T, D), tv = rows(v, HKV, 0, T, D);
  lpattn_tensor to = rows(o_sh, HQ, 0, T, D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.causal = 1;
  p.q_start = 64;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_ERR_INVALID_ARGUMENT,
         "need params.positions = 1");
  p.positions = 2;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_ERR_INVALID_ARGUMENT,
         "params.positions = 2");
  p.positions = 1, p.q_start = -1;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_ERR_INVALID_ARGUMENT,
         "q_start = -1");
  p.q_start = (int64_t)1 << 62;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_ERR_INVALID_ARGUMENT,
         "start + length <= 2^62");
  p.q_start = 0, p.kv_start = 32;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_ERR_INVALID_ARGUMENT,
         "not a multiple of block_k = 64");
  p.kv_start = 64, p.precision = LPATTN_PREC_THRIFT;
  EXPECT(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL), LPATTN_ERR_UNSUPPORTED,
         "THRIFT with params.q_start = 0, kv_start = 64");
  /* Nothing visible (keys all after the queries): O = 0, LSE = -inf. */
  p.precision = LPATTN_PREC_HIGH, p.q_start = 0, p.kv_start = 128;
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = rows(l_sh, HQ, 0, T, 1);
  CHECK(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, &aux) == LPATTN_OK, "%s", lpattn_last_error());
  CHECK(isinf(l_sh[0]) && l_sh[0] < 0 && o_sh[0] == 0.0f, "masked shard: lse %g, o %g",
        (double)l_sh[0], (double)o_sh[0]);
}

int main(int argc, char **argv) {
  const char *name = argc > 1 ? argv[1] : "ref";
  const lpattn_backend be = strcmp(name, "cpu") == 0 ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF;
  if (!lpattn_backend_available(be)) return test_skip("backend not available");
  lpattn_ctx *ctx = NULL;
  if (lpattn_create(be, NULL, &ctx) != LPATTN_OK) return test_skip("no context");
  for (int64_t i = 0; i < NQ; i++) q[i] = rnd();
  for (int64_t i = 0; i < NK; i++) k[i] = rnd() + 0.5f, v[i] = rnd();
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    equivalence(ctx, &variants[i]);
    shards_vs_whole(ctx, &variants[i]);
    leak(ctx, &variants[i], 191); /* the last row before a kv and q shard border */
    leak(ctx, &variants[i], 150); /* inside a shard */
  }
  backward(ctx);
  bad_positions(ctx);
  lpattn_free(ctx);
  return test_finish();
}
