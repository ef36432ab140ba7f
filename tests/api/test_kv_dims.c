/* Paged pools at head dims no multiple of the group size, and MLA decode
 * (head_dim_v < head_dim), on a host backend (argv[1]: ref or cpu; the
 * other host backend's results are compared where it says). SEMANTICS
 * "Head dimensions":
 * - a pool at D stores its rows zero-padded to lp_kv_store_dim (16, MXFP4
 *   32): its decode is bitwise (out's D channels, LSE, entropy) the decode of
 *   a pool at that width fed the same rows zero-padded, with the same
 *   sm_scale, in every precision (HIGH, FP8, NVFP4, MXFP4, THRIFT, PASA);
 * - an MLA pool (head_dim 576 for Q and K, head_dim_v 512 for V and out, one
 *   kv head; append's v a view of k's first 512 channels) is bitwise the
 *   square pool at 576 whose V is K with channels 512.. zeroed (out's first
 *   512 channels), and within bounds of an f64 model of
 *   softmax(q k^T / sqrt(576)) v (HIGH: 2e-6; low precisions: relative L2
 *   as measured, with margin) and of the other host backend;
 * - bad shapes (v or out at head_dim instead of head_dim_v) are BAD_SHAPE;
 * - lpattn_kv_cache at D = 40 is bitwise the cache at 48 on padded rows. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "lpattn.h"
#include "testutil.h"

enum { T = 64, NS = 2, NT = 5, N = NT * T, WMAX = 576, HQMAX = 8 };
static const int32_t LEN[NS] = {4 * T + 17, 2 * T + 40};

typedef struct {
  int dk, dv, hkv, hq;
  lpattn_precision prec;
  int pasa;
  lpattn_dtype hdt;
} pool_cfg;

/* Streams [NS][H][N][W]: K, V and Q of each sequence (W channels a row). */
static float K[NS * N * WMAX], V[NS * N * WMAX], Q[NS * HQMAX * N * WMAX];

static uint64_t rs;
static float rnd(void) {
  uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (float)((double)((z ^ (z >> 31)) >> 11) * 0x1.0p-52 - 1.0);
}

/* Random streams of width W, zero past channel d (K, Q) and dv (V). */
static void fill(int W, int d, int dv, int hkv, int hq, float qscale) {
  rs = 1234u + (uint64_t)W * 7u + (uint64_t)d;
  for (int i = 0; i < NS * hkv * N * W; i++) {
    K[i] = i % W < d ? rnd() + 0.25f : 0.0f;
    V[i] = i % W < dv ? rnd() : 0.0f;
  }
  for (int i = 0; i < NS * hq * N * W; i++) Q[i] = i % W < d ? qscale * rnd() : 0.0f;
}

/* A view of n rows of width w (of streams of width W) from row p, for one
 * sequence of a stream with h heads. */
static lpattn_tensor view(float *base, int h, int64_t p, int64_t n, int w, int W) {
  lpattn_tensor t = lpattn_tensor_4d(base + p * W, LPATTN_F32, 1, h, n, w);
  t.stride[0] = (int64_t)h * N * W, t.stride[1] = (int64_t)N * W, t.stride[2] = W;
  return t;
}

/* Appends both sequences (13 tokens a call), decodes their last Sq rows:
 * out [NS][hq][Sq][dv], lse, ent [NS][hq][Sq]. vsrc: V's stream (K itself
 * for MLA). Returns the decode's status. */
static lpattn_status run(lpattn_ctx *ctx, pool_cfg c, int W, const float *vsrc, float sm_scale,
                         int64_t Sq, float *out, float *lse, float *ent) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = c.hkv, pp.num_q_heads = c.hq, pp.head_dim = c.dk, pp.head_dim_v = c.dv;
  pp.page_size = T, pp.precision = c.prec, pp.pasa = c.pasa, pp.high_dtype = c.hdt;
  pp.num_pages = NS * NT, pp.num_slots = NS;
  lpattn_kv_pool *pool = NULL;
  lpattn_status st = lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool);
  if (st != LPATTN_OK) return st;
  int32_t slot[NS], len[NS], pages[NS][NT];
  for (int s = 0; s < NS; s++) {
    slot[s] = NS - 1 - s;
    for (int j = 0; j < NT; j++) pages[s][j] = NS * NT - 1 - (s * NT + j);
  }
  for (int s = 0; s < NS && st == LPATTN_OK; s++) {
    for (int64_t p = 0; p < LEN[s] && st == LPATTN_OK; p += 13) {
      const int64_t m = LEN[s] - p < 13 ? LEN[s] - p : 13;
      int32_t l = (int32_t)p;
      lpattn_kv_batch b;
      lpattn_kv_batch_init(&b);
      b.num_seqs = 1, b.max_length = N;
      b.slots = lpattn_tensor_4d(&slot[s], LPATTN_I32, 1, 1, 1, 1);
      b.lengths = lpattn_tensor_4d(&l, LPATTN_I32, 1, 1, 1, 1);
      b.page_table = lpattn_tensor_4d(pages[s], LPATTN_I32, 1, 1, 1, NT);
      const size_t so = (size_t)s * N * W;
      lpattn_tensor k = view(K + so * c.hkv, c.hkv, p, m, c.dk, W);
      lpattn_tensor v = view((float *)vsrc + so * c.hkv, c.hkv, p, m, c.dv, W);
      lpattn_tensor q = view(Q + so * c.hq, c.hq, p, m, c.dk, W);
      st = lpattn_kv_append(ctx, pool, &b, &k, &v, &q);
    }
  }
  static float qd[NS * HQMAX * T * WMAX];
  for (int s = 0; s < NS; s++) len[s] = LEN[s];
  for (int s = 0; s < NS; s++)
    for (int h = 0; h < c.hq; h++)
      for (int64_t r = 0; r < Sq; r++)
        memcpy(qd + (((size_t)s * c.hq + h) * Sq + r) * c.dk,
               Q + (((size_t)s * c.hq + h) * N + LEN[s] - Sq + r) * W, sizeof(float) * (size_t)c.dk);
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = NS, b.max_length = N;
  b.slots = lpattn_tensor_4d(slot, LPATTN_I32, 1, 1, 1, NS);
  b.lengths = lpattn_tensor_4d(len, LPATTN_I32, 1, 1, 1, NS);
  b.page_table = lpattn_tensor_4d(pages[0], LPATTN_I32, 1, 1, NS, NT);
  lpattn_tensor q = lpattn_tensor_4d(qd, LPATTN_F32, NS, c.hq, Sq, c.dk);
  lpattn_tensor o = lpattn_tensor_4d(out, LPATTN_F32, NS, c.hq, Sq, c.dv);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.sm_scale = sm_scale;
  ap.thrift_budget = 0.5f;
  lpattn_attn_aux aux;
  memset(&aux, 0, sizeof aux);
  aux.struct_size = sizeof aux;
  aux.lse = lpattn_tensor_4d(lse, LPATTN_F32, NS, c.hq, Sq, 1);
  aux.entropy = lpattn_tensor_4d(ent, LPATTN_F32, NS, c.hq, Sq, 1);
  if (st == LPATTN_OK) st = lpattn_paged_decode(ctx, pool, &b, &q, &o, &ap, &aux);
  if (st == LPATTN_OK && c.dv != c.dk) { /* v and out at head_dim: BAD_SHAPE */
    lpattn_tensor bad = lpattn_tensor_4d(out, LPATTN_F32, NS, c.hq, Sq, c.dk);
    CHECK_STATUS(lpattn_paged_decode(ctx, pool, &b, &q, &bad, &ap, NULL), LPATTN_ERR_BAD_SHAPE);
  }
  lpattn_kv_pool_free(pool);
  return st;
}

static const lpattn_precision PRECS[] = {LPATTN_PREC_HIGH, LPATTN_PREC_FP8, LPATTN_PREC_NVFP4,
                                         LPATTN_PREC_MXFP4, LPATTN_PREC_THRIFT};
static const char *PNAME[] = {"HIGH", "FP8", "NVFP4", "MXFP4", "THRIFT"};

static float oa[NS * HQMAX * 2 * WMAX], ob[NS * HQMAX * 2 * WMAX];
static float la[NS * HQMAX * 2], lb[NS * HQMAX * 2], ea[NS * HQMAX * 2], eb[NS * HQMAX * 2];

/* Rows of out a (width wa) and b (width wb) bitwise equal in their first w
 * channels, and lse/ent equal. */
static int same(int64_t rows, int w, int wa, int wb) {
  for (int64_t r = 0; r < rows; r++) {
    if (memcmp(oa + r * wa, ob + r * wb, sizeof(float) * (size_t)w)) return 0;
    if (memcmp(&la[r], &lb[r], sizeof(float)) || memcmp(&ea[r], &eb[r], sizeof(float))) return 0;
  }
  return 1;
}

static void test_padded(lpattn_ctx *ctx) {
  static const int dims[] = {24, 40, 59, 80, 111, 200};
  for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
    for (int pi = 0; pi < 6; pi++) {
      const int d = dims[di], pasa = pi == 5;
      const lpattn_precision prec = pasa ? LPATTN_PREC_NVFP4 : PRECS[pi];
      const int g = prec == LPATTN_PREC_MXFP4 ? 32 : 16, W = (d + g - 1) / g * g;
      const int64_t Sq = 2;
      fill(W, d, d, 2, 4, 1.0f);
      pool_cfg a = {d, d, 2, 4, prec, pasa, LPATTN_F16}, b = a;
      b.dk = b.dv = W;
      const float sc = 1.0f / sqrtf((float)d);
      lpattn_status sa = run(ctx, a, W, V, sc, Sq, oa, la, ea);
      lpattn_status sb = run(ctx, b, W, V, sc, Sq, ob, lb, eb);
      CHECK(sa == LPATTN_OK && sb == LPATTN_OK, "D = %d %s%s: %s / %s (%s)", d, PNAME[pi % 5],
            pasa ? "+PASA" : "", lpattn_status_string(sa), lpattn_status_string(sb), lpattn_last_error());
      if (sa == LPATTN_OK && sb == LPATTN_OK)
        CHECK(same(NS * 4 * Sq, d, d, W), "D = %d %s%s: not bitwise the pool at %d with zero channels", d,
              PNAME[pi % 5], pasa ? "+PASA" : "", W);
    }
  }
}

/* f64 model of the MLA decode: rows [NS][hq][Sq] of softmax(q k^T s) v over
 * each sequence's first LEN - Sq + r + 1 keys (one kv head). */
static void mla_model(int hq, int64_t Sq, int dk, int dv, double *out) {
  static double sc[N];
  for (int s = 0; s < NS; s++)
    for (int h = 0; h < hq; h++)
      for (int64_t r = 0; r < Sq; r++) {
        const float *q = Q + (((size_t)s * hq + h) * N + LEN[s] - Sq + r) * WMAX;
        const int64_t nk = LEN[s] - Sq + r + 1;
        double mx = -INFINITY, l = 0.0;
        for (int64_t c = 0; c < nk; c++) {
          const float *k = K + ((size_t)s * N + c) * WMAX;
          double x = 0.0;
          for (int d = 0; d < dk; d++) x += (double)q[d] * k[d];
          sc[c] = x / sqrt((double)dk);
          if (sc[c] > mx) mx = sc[c];
        }
        double *o = out + (((size_t)s * hq + h) * Sq + r) * dv;
        for (int d = 0; d < dv; d++) o[d] = 0.0;
        for (int64_t c = 0; c < nk; c++) {
          const double p = exp(sc[c] - mx);
          const float *v = K + ((size_t)s * N + c) * WMAX;
          l += p;
          for (int d = 0; d < dv; d++) o[d] += p * v[d];
        }
        for (int d = 0; d < dv; d++) o[d] /= l;
      }
}

static double rel_l2(const float *x, const double *y, int64_t n) {
  double e = 0.0, m = 0.0;
  for (int64_t i = 0; i < n; i++) e += (x[i] - y[i]) * (x[i] - y[i]), m += y[i] * y[i];
  return sqrt(e / m);
}

static void test_mla(lpattn_ctx *ctx, lpattn_ctx *other) {
  enum { DK = 576, DV = 512, HQ = 8 };
  static float V0[NS * N * WMAX];
  static double model[NS * HQ * 2 * DV];
  /* Relative L2 to the f64 model; measured (ref, cpu) HIGH 5e-8 (F32
   * pages), FP8 ~2.4e-2, NVFP4 ~6e-2, MXFP4 ~1.1e-1, THRIFT (NVFP4, half
   * the tiles high) ~4e-2. */
  static const double bound[] = {1e-6, 5e-2, 1.2e-1, 2e-1, 1e-1};
  for (int64_t Sq = 1; Sq <= 2; Sq++) {
    fill(WMAX, DK, DV, 1, HQ, 3.0f);
    for (int i = 0; i < NS * N * WMAX; i++) V0[i] = i % WMAX < DV ? K[i] : 0.0f;
    mla_model(HQ, Sq, DK, DV, model);
    for (int pi = 0; pi < 5; pi++) {
      pool_cfg m = {DK, DV, 1, HQ, PRECS[pi], 0, pi == 0 ? LPATTN_F32 : LPATTN_F16}, sq = m;
      sq.dv = DK;
      lpattn_status sa = run(ctx, m, WMAX, K, 0.0f, Sq, oa, la, ea); /* v: a view of k */
      lpattn_status sb = run(ctx, sq, WMAX, V0, 0.0f, Sq, ob, lb, eb);
      CHECK(sa == LPATTN_OK && sb == LPATTN_OK, "MLA %s: %s / %s (%s)", PNAME[pi],
            lpattn_status_string(sa), lpattn_status_string(sb), lpattn_last_error());
      if (sa != LPATTN_OK || sb != LPATTN_OK) continue;
      CHECK(same(NS * HQ * Sq, DV, DV, DK), "MLA %s: not bitwise the square pool with V zero past 512",
            PNAME[pi]);
      const double e = rel_l2(oa, model, NS * HQ * Sq * DV);
      printf("MLA 576/512 %-6s Sq = %d: rel L2 to the f64 model %.3g (bound %.3g)\n", PNAME[pi], (int)Sq,
             e, bound[pi]);
      CHECK(e <= bound[pi], "MLA %s: rel L2 %.3g > %.3g", PNAME[pi], e, bound[pi]);
      if (other) { /* the other host backend: HIGH within f32 rounding, low close */
        CHECK_STATUS(run(other, m, WMAX, K, 0.0f, Sq, ob, lb, eb), LPATTN_OK);
        double d = 0.0, n = 0.0;
        for (int64_t i = 0; i < NS * HQ * Sq * DV; i++) d += (oa[i] - ob[i]) * (oa[i] - ob[i]), n += ob[i] * ob[i];
        printf("MLA 576/512 %-6s Sq = %d: rel L2 to the other host backend %.3g\n", PNAME[pi], (int)Sq,
               sqrt(d / n));
        CHECK(sqrt(d / n) <= (pi == 0 ? 1e-6 : 2e-2), "MLA %s: backends differ by %.3g", PNAME[pi], sqrt(d / n));
      }
    }
  }
  /* v at head_dim on an MLA pool: BAD_SHAPE */
  pool_cfg bad = {DK, DV, 1, HQ, LPATTN_PREC_NVFP4, 0, LPATTN_F16};
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = 1, pp.num_q_heads = HQ, pp.head_dim = bad.dk, pp.head_dim_v = bad.dv;
  pp.num_pages = 2, pp.num_slots = 1;
  lpattn_kv_pool *pool = NULL;
  CHECK_STATUS(lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool), LPATTN_OK);
  int32_t slot = 0, l = 0, page[2] = {0, 1};
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = 1, b.max_length = 2 * T;
  b.slots = lpattn_tensor_4d(&slot, LPATTN_I32, 1, 1, 1, 1);
  b.lengths = lpattn_tensor_4d(&l, LPATTN_I32, 1, 1, 1, 1);
  b.page_table = lpattn_tensor_4d(page, LPATTN_I32, 1, 1, 1, 2);
  lpattn_tensor k = view(K, 1, 0, 3, DK, WMAX), v = view(K, 1, 0, 3, DK, WMAX);
  CHECK_STATUS(lpattn_kv_append(ctx, pool, &b, &k, &v, NULL), LPATTN_ERR_BAD_SHAPE);
  lpattn_kv_pool_free(pool);
}

/* lpattn_kv_cache at D = 40 (NVFP4, THRIFT): bitwise the cache at 48 fed the
 * rows zero-padded (one sequence, 150 tokens appended 50 at a time). */
static void test_cache(lpattn_ctx *ctx) {
  enum { HKV = 2, HQ = 4, D0 = 40, DP = 48, L = 150 };
  for (int pi = 0; pi < 2; pi++) {
    fill(DP, D0, D0, HKV, HQ, 1.0f);
    for (int w = 0; w < 2; w++) {
      const int d = w ? DP : D0;
      lpattn_kv_cache_params cp;
      lpattn_kv_cache_params_init(&cp);
      cp.num_seqs = 1, cp.num_kv_heads = HKV, cp.num_q_heads = HQ, cp.head_dim = d, cp.max_tokens = L;
      cp.precision = pi ? LPATTN_PREC_THRIFT : LPATTN_PREC_NVFP4;
      lpattn_kv_cache *c = NULL;
      CHECK_STATUS(lpattn_kv_cache_create(ctx, &cp, &c), LPATTN_OK);
      for (int64_t p = 0; c && p < L - 1; p += 50) {
        const int64_t m = L - 1 - p < 50 ? L - 1 - p : 50;
        lpattn_tensor k = view(K, HKV, p, m, d, DP), v = view(V, HKV, p, m, d, DP), q = view(Q, HQ, p, m, d, DP);
        CHECK_STATUS(lpattn_kv_cache_append(ctx, c, 0, &k, &v, &q), LPATTN_OK);
      }
      lpattn_tensor k = view(K, HKV, L - 1, 1, d, DP), v = view(V, HKV, L - 1, 1, d, DP);
      if (c) CHECK_STATUS(lpattn_kv_cache_append(ctx, c, 0, &k, &v, NULL), LPATTN_OK);
      lpattn_tensor q = view(Q, HQ, L - 1, 1, d, DP);
      lpattn_tensor o = lpattn_tensor_4d(w ? ob : oa, LPATTN_F32, 1, HQ, 1, d);
      lpattn_attn_params ap;
      lpattn_attn_params_init(&ap);
      ap.sm_scale = 1.0f / sqrtf((float)D0), ap.thrift_budget = 0.5f;
      if (c) CHECK_STATUS(lpattn_decode(ctx, c, &q, &o, &ap, NULL), LPATTN_OK);
      lpattn_kv_cache_free(c);
    }
    int eq = 1;
    for (int r = 0; r < HQ; r++) eq &= !memcmp(oa + r * D0, ob + r * DP, sizeof(float) * D0);
    CHECK(eq, "kv_cache D = %d %s: not bitwise the cache at %d", D0, pi ? "THRIFT" : "NVFP4", DP);
  }
}

int main(int argc, char **argv) {
  const int cpu = argc > 1 && strcmp(argv[1], "cpu") == 0;
  lpattn_ctx *ctx = NULL, *other = NULL;
  if (lpattn_create(cpu ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, NULL, &ctx) != LPATTN_OK)
    return test_skip("backend not available");
  if (lpattn_create(cpu ? LPATTN_BACKEND_REF : LPATTN_BACKEND_CPU, NULL, &other) != LPATTN_OK) other = NULL;
  test_padded(ctx);
  test_mla(ctx, other);
  test_cache(ctx);
  lpattn_free(other);
  lpattn_free(ctx);
  return test_finish();
}
