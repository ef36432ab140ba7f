/* Ragged batches (lpattn_attention_varlen, lpattn.h "ragged batches") on a
 * host backend (argv[1]: ref or cpu):
 * - every precision, causal or not, GQA, packed BSHD f32 and bf16: out, lse
 *   and entropy equal per-sequence lpattn_attention calls bitwise, both on
 *   the same slices and on contiguous BHSD copies of each sequence; every
 *   row is written; FP8_STATIC takes one descale row per sequence;
 * - no leak between sequences: perturbing one sequence's tokens leaves the
 *   other sequences' rows bitwise unchanged;
 * - bad cu_seqlens, shapes and params get specific errors, nothing written
 *   (also when only a later sequence's call is bad). */
#include <math.h>
#include <string.h>

#include "lpattn.h"
#include "testutil.h"

enum { HQ = 4, HKV = 2, D = 64, NS = 6, TQ = 296, TK = 372 };
/* seq 1: no queries (skipped); seq 3: a decode row; seq 4: Sq > Skv (causal:
 * its first rows see nothing); seq 5: longer than two tiles */
static const int32_t lq[NS] = {5, 0, 70, 1, 90, 130}, lk[NS] = {5, 33, 100, 64, 40, 130};
static int32_t cq[NS + 1], ck[NS + 1];

static float q[TQ * HQ * D], k[TK * HKV * D], v[TK * HKV * D];
static float o[TQ * HQ * D], lse[HQ * TQ], ent[HQ * TQ];
static float o1[TQ * HQ * D], lse1[HQ * TQ], ent1[HQ * TQ];
static uint16_t qb[TQ * HQ * D], kb[TK * HKV * D], vb[TK * HKV * D], ob[TQ * HQ * D],
    ob1[TQ * HQ * D];
static float dsc[3][NS * HKV];

static uint64_t rs = 777;
static float rnd(void) {
  uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (float)((double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53 * 4.0 - 2.0);
}

/* Packed [total, H, D] (BSHD) as {1, H, total, D}; rows [s, s + n). */
static lpattn_tensor packed(void *base, lpattn_dtype dt, int64_t h, int64_t total, int64_t s,
                            int64_t n) {
  lpattn_tensor t = lpattn_tensor_4d(base, dt, 1, h, total, D);
  t.stride[0] = total * h * D, t.stride[1] = D, t.stride[2] = h * D;
  t.data = (char *)base + (size_t)(s * h * D) * (dt == LPATTN_F32 ? 4 : 2);
  t.shape[2] = n;
  return t;
}

/* [1, H, total, 1] f32 rows [s, s + n). */
static lpattn_tensor lrows(float *base, int64_t h, int64_t total, int64_t s, int64_t n) {
  lpattn_tensor t = lpattn_tensor_4d(base + s, LPATTN_F32, 1, h, n, 1);
  t.stride[0] = h * total, t.stride[1] = total;
  return t;
}

static lpattn_tensor cu(int32_t *c, int64_t n) {
  return lpattn_tensor_4d(c, LPATTN_I32, 1, 1, 1, n);
}

typedef struct {
  const char *name;
  lpattn_precision prec;
  int pasa;
} variant;

static const variant variants[] = {
    {"HIGH", LPATTN_PREC_HIGH, 0},     {"FP8", LPATTN_PREC_FP8, 0},
    {"NVFP4", LPATTN_PREC_NVFP4, 0},   {"MXFP4", LPATTN_PREC_MXFP4, 0},
    {"THRIFT", LPATTN_PREC_THRIFT, 0}, {"PASA", LPATTN_PREC_HIGH, 1},
    {"FP8_STATIC", LPATTN_PREC_FP8_STATIC, 0},
};

static lpattn_attn_params params_of(const variant *va, int causal) {
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = va->prec, p.pasa = va->pasa, p.causal = causal;
  p.thrift_budget = 0.3f;
  return p;
}

/* Descale row b of dsc[i] as {1, 1, 1, HKV} (FP8_STATIC), or all rows. */
static void set_descales(lpattn_attn_params *p, int64_t b, int64_t n) {
  lpattn_tensor *d[3] = {&p->q_descale, &p->k_descale, &p->v_descale};
  for (int i = 0; i < 3; i++) *d[i] = lpattn_tensor_4d(dsc[i] + b * HKV, LPATTN_F32, 1, 1, n, HKV);
}

static lpattn_status varlen(lpattn_ctx *ctx, const variant *va, int causal, lpattn_dtype dt,
                            float *out, float *l, float *e) {
  void *Q = dt == LPATTN_F32 ? (void *)q : qb, *K = dt == LPATTN_F32 ? (void *)k : kb;
  void *V = dt == LPATTN_F32 ? (void *)v : vb, *O = dt == LPATTN_F32 ? (void *)out : ob;
  lpattn_tensor tq = packed(Q, dt, HQ, TQ, 0, TQ), tk = packed(K, dt, HKV, TK, 0, TK);
  lpattn_tensor tv = packed(V, dt, HKV, TK, 0, TK), to = packed(O, dt, HQ, TQ, 0, TQ);
  lpattn_tensor a = cu(cq, NS + 1), b = cu(ck, NS + 1);
  lpattn_attn_params p = params_of(va, causal);
  if (va->prec == LPATTN_PREC_FP8_STATIC) set_descales(&p, 0, NS);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lrows(l, HQ, TQ, 0, TQ), aux.entropy = lrows(e, HQ, TQ, 0, TQ);
  return lpattn_attention_varlen(ctx, &tq, &tk, &tv, &to, &a, &b, &p, &aux);
}

/* Sequence s by lpattn_attention: on the packed slices (copy = 0) or on
 * contiguous BHSD copies (copy = 1), into the same rows of out/l/e. */
static lpattn_status one(lpattn_ctx *ctx, const variant *va, int causal, lpattn_dtype dt, int s,
                         int copy, float *out, float *l, float *e) {
  static float cq_[TQ * HQ * D], ck_[TK * HKV * D], cv_[TK * HKV * D], co_[TQ * HQ * D];
  static float cl_[HQ * TQ], ce_[HQ * TQ];
  const int64_t qs = cq[s], nq = lq[s], ks = ck[s], nk = lk[s];
  void *Q = dt == LPATTN_F32 ? (void *)q : qb, *K = dt == LPATTN_F32 ? (void *)k : kb;
  void *V = dt == LPATTN_F32 ? (void *)v : vb, *O = dt == LPATTN_F32 ? (void *)out : ob1;
  lpattn_tensor tq = packed(Q, dt, HQ, TQ, qs, nq), tk = packed(K, dt, HKV, TK, ks, nk);
  lpattn_tensor tv = packed(V, dt, HKV, TK, ks, nk), to = packed(O, dt, HQ, TQ, qs, nq);
  lpattn_attn_params p = params_of(va, causal);
  if (va->prec == LPATTN_PREC_FP8_STATIC) set_descales(&p, s, 1);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lrows(l, HQ, TQ, qs, nq), aux.entropy = lrows(e, HQ, TQ, qs, nq);
  if (!copy || dt != LPATTN_F32) return lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, &aux);
  /* contiguous [1, H, n, D] copies */
  for (int64_t h = 0; h < HQ; h++)
    for (int64_t r = 0; r < nq; r++)
      memcpy(cq_ + (h * nq + r) * D, q + ((qs + r) * HQ + h) * D, 4 * D);
  for (int64_t h = 0; h < HKV; h++)
    for (int64_t r = 0; r < nk; r++) {
      memcpy(ck_ + (h * nk + r) * D, k + ((ks + r) * HKV + h) * D, 4 * D);
      memcpy(cv_ + (h * nk + r) * D, v + ((ks + r) * HKV + h) * D, 4 * D);
    }
  lpattn_tensor xq = lpattn_tensor_4d(cq_, LPATTN_F32, 1, HQ, nq, D);
  lpattn_tensor xk = lpattn_tensor_4d(ck_, LPATTN_F32, 1, HKV, nk, D);
  lpattn_tensor xv = lpattn_tensor_4d(cv_, LPATTN_F32, 1, HKV, nk, D);
  lpattn_tensor xo = lpattn_tensor_4d(co_, LPATTN_F32, 1, HQ, nq, D);
  aux.lse = lpattn_tensor_4d(cl_, LPATTN_F32, 1, HQ, nq, 1);
  aux.entropy = lpattn_tensor_4d(ce_, LPATTN_F32, 1, HQ, nq, 1);
  lpattn_status st = lpattn_attention(ctx, &xq, &xk, &xv, &xo, &p, &aux);
  for (int64_t h = 0; h < HQ; h++) {
    for (int64_t r = 0; r < nq; r++)
      memcpy(out + ((qs + r) * HQ + h) * D, co_ + (h * nq + r) * D, 4 * D);
    memcpy(l + h * TQ + qs, cl_ + h * nq, 4 * nq), memcpy(e + h * TQ + qs, ce_ + h * nq, 4 * nq);
  }
  return st;
}

static void parity(lpattn_ctx *ctx, const variant *va, int causal, lpattn_dtype dt) {
  const char *dn = dt == LPATTN_F32 ? "f32" : "bf16";
  for (int copy = 0; copy < 2; copy++) {
    if (copy && dt != LPATTN_F32) break;
    memset(o, 0xff, sizeof o), memset(ob, 0xff, sizeof ob); /* NaN: rows left unwritten */
    memset(lse, 0xff, sizeof lse), memset(ent, 0xff, sizeof ent);
    memset(o1, 0, sizeof o1), memset(ob1, 0, sizeof ob1);
    memset(lse1, 0, sizeof lse1), memset(ent1, 0, sizeof ent1);
    lpattn_status st = varlen(ctx, va, causal, dt, o, lse, ent);
    CHECK(st == LPATTN_OK, "%s causal %d %s: %s", va->name, causal, dn, lpattn_last_error());
    if (st != LPATTN_OK) return;
    for (int s = 0; s < NS; s++) {
      if (!lq[s]) continue;
      st = one(ctx, va, causal, dt, s, copy, o1, lse1, ent1);
      CHECK(st == LPATTN_OK, "%s seq %d: %s", va->name, s, lpattn_last_error());
    }
    const int same = dt == LPATTN_F32 ? !memcmp(o, o1, sizeof o) : !memcmp(ob, ob1, sizeof ob);
    CHECK(same && !memcmp(lse, lse1, sizeof lse) && !memcmp(ent, ent1, sizeof ent),
          "%s causal %d %s: varlen differs from per-sequence calls on %s", va->name, causal, dn,
          copy ? "contiguous copies" : "the same slices");
    int nan = 0;
    for (size_t i = 0; i < sizeof lse / sizeof lse[0]; i++) nan |= isnan(lse[i]) || isnan(ent[i]);
    CHECK(!nan, "%s causal %d: a row of lse/entropy was left unwritten", va->name, causal);
  }
}

/* Perturb sequence 2's tokens: the other sequences' rows stay bitwise. */
static void no_leak(lpattn_ctx *ctx, const variant *va) {
  static float o0[TQ * HQ * D], l0[HQ * TQ];
  static float sq[TQ * HQ * D], sk[TK * HKV * D], sv[TK * HKV * D];
  CHECK(varlen(ctx, va, 1, LPATTN_F32, o0, l0, ent) == LPATTN_OK, "%s", va->name);
  memcpy(sq, q, sizeof q), memcpy(sk, k, sizeof k), memcpy(sv, v, sizeof v);
  for (int64_t i = cq[2] * HQ * D; i < cq[3] * HQ * D; i++) q[i] = 5.0f * rnd();
  for (int64_t i = ck[2] * HKV * D; i < ck[3] * HKV * D; i++) k[i] = 7.0f * rnd(), v[i] = 9.0f * rnd();
  CHECK(varlen(ctx, va, 1, LPATTN_F32, o, lse, ent) == LPATTN_OK, "%s", va->name);
  int bad = 0;
  for (int64_t r = 0; r < TQ; r++) {
    if (r >= cq[2] && r < cq[3]) continue;
    bad |= memcmp(o0 + r * HQ * D, o + r * HQ * D, 4 * HQ * D) != 0;
    for (int64_t h = 0; h < HQ; h++) bad |= memcmp(l0 + h * TQ + r, lse + h * TQ + r, 4) != 0;
  }
  CHECK(!bad, "%s: another sequence's rows changed with sequence 2's tokens", va->name);
  memcpy(q, sq, sizeof q), memcpy(k, sk, sizeof k), memcpy(v, sv, sizeof v);
}

/* Each call must fail with `want` and leave out and lse untouched. */
static void bad_calls(lpattn_ctx *ctx) {
  static const variant high = {"HIGH", LPATTN_PREC_HIGH, 0};
  lpattn_tensor tq = packed(q, LPATTN_F32, HQ, TQ, 0, TQ), tk = packed(k, LPATTN_F32, HKV, TK, 0, TK);
  lpattn_tensor tv = packed(v, LPATTN_F32, HKV, TK, 0, TK), to = packed(o, LPATTN_F32, HQ, TQ, 0, TQ);
  int32_t c[NS + 1];
  lpattn_tensor a = cu(c, NS + 1), b = cu(ck, NS + 1);
  lpattn_attn_params p = params_of(&high, 1);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lrows(lse, HQ, TQ, 0, TQ);
  memset(o, 0x5a, sizeof o), memset(lse, 0x5a, sizeof lse);
  memcpy(o1, o, sizeof o), memcpy(lse1, lse, sizeof lse);
#define BAD(want, what)                                                               \
  do {                                                                                \
    CHECK_STATUS(lpattn_attention_varlen(ctx, &tq, &tk, &tv, &to, &a, &b, &p, &aux), want); \
    CHECK(strstr(lpattn_last_error(), what) != NULL, "detail \"%s\" lacks \"%s\"",   \
          lpattn_last_error(), what);                                                 \
    CHECK(!memcmp(o, o1, sizeof o) && !memcmp(lse, lse1, sizeof lse),                \
          "a failed call (%s) wrote its output", what);                               \
  } while (0)
  memcpy(c, cq, sizeof c), c[0] = 1;
  BAD(LPATTN_ERR_INVALID_ARGUMENT, "cu_seqlens_q[0] = 1");
  memcpy(c, cq, sizeof c), c[3] = c[2] - 1;
  BAD(LPATTN_ERR_INVALID_ARGUMENT, "never decrease");
  memcpy(c, cq, sizeof c), c[NS] = TQ - 1;
  BAD(LPATTN_ERR_BAD_SHAPE, "holds 296 rows");
  memcpy(c, cq, sizeof c);
  a.dtype = LPATTN_F32;
  BAD(LPATTN_ERR_BAD_DTYPE, "cu_seqlens_q");
  a.dtype = LPATTN_I32, a.shape[3] = NS;
  c[NS - 1] = TQ;
  BAD(LPATTN_ERR_BAD_SHAPE, "entries");
  a.shape[3] = NS + 1, a.shape[2] = 2;
  BAD(LPATTN_ERR_BAD_SHAPE, "{1, 1, 1, n + 1}");
  a.shape[2] = 1, memcpy(c, cq, sizeof c);
  b.data = NULL;
  BAD(LPATTN_ERR_NULL_POINTER, "cu_seqlens_k");
  b.data = ck;
  /* sequence 1 takes one query from sequence 2 but keeps no keys */
  int32_t ck2[NS + 1];
  memcpy(ck2, ck, sizeof ck2), ck2[2] = ck2[1];
  c[2] = c[1] + 1, b.data = ck2;
  BAD(LPATTN_ERR_INVALID_ARGUMENT, "sequence 1 has 1 queries");
  b.data = ck, memcpy(c, cq, sizeof c);
  p.positions = 1;
  BAD(LPATTN_ERR_INVALID_ARGUMENT, "bottom-right");
  p.positions = 0, p.precision = LPATTN_PREC_THRIFT;
  int32_t sel[64];
  aux.selection = lpattn_tensor_4d(sel, LPATTN_I32, 1, 1, 1, 64);
  BAD(LPATTN_ERR_INVALID_ARGUMENT, "aux.selection");
  aux.selection.data = NULL, p.precision = LPATTN_PREC_HIGH;
  tq.shape[0] = 2;
  BAD(LPATTN_ERR_BAD_SHAPE, "q.shape[0] = 2");
  tq.shape[0] = 1;
  aux.lse.shape[2] = TQ - 1;
  BAD(LPATTN_ERR_BAD_SHAPE, "aux.lse");
  aux.lse.shape[2] = TQ;
  p.precision = LPATTN_PREC_FP8_STATIC;
  set_descales(&p, 0, NS - 1);
  BAD(LPATTN_ERR_BAD_SHAPE, "params.q_descale");
  set_descales(&p, 0, NS);
  dsc[1][4 * HKV + 1] = -1.0f; /* sequence 4's k descale, KV head 1 */
  BAD(LPATTN_ERR_INVALID_ARGUMENT, "sequence 4: params.k_descale");
  dsc[1][4 * HKV + 1] = 0.5f;
  p = params_of(&high, 1);
  p.block_q = 48;
  BAD(LPATTN_ERR_INVALID_ARGUMENT, "params.block_q = 48");
  p.block_q = 64;
  /* a NaN in the last sequence: found before the first sequence runs, at
   * its packed index */
  p.check_finite = 1;
  const float keep = k[(TK - 1) * HKV * D];
  k[(TK - 1) * HKV * D] = NAN;
  BAD(LPATTN_ERR_NONFINITE, "k[0, 0, 371, 0]");
  k[(TK - 1) * HKV * D] = keep;
  CHECK_STATUS(lpattn_attention_varlen(ctx, &tq, &tk, &tv, &to, &a, &b, &p, &aux), LPATTN_OK);
#undef BAD
}

int main(int argc, char **argv) {
  const char *name = argc > 1 ? argv[1] : "ref";
  const lpattn_backend be = strcmp(name, "cpu") == 0 ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF;
  if (!lpattn_backend_available(be)) return test_skip("backend not available");
  lpattn_ctx *ctx = NULL;
  if (lpattn_create(be, NULL, &ctx) != LPATTN_OK) return test_skip("no context");
  for (int s = 0; s < NS; s++) cq[s + 1] = cq[s] + lq[s], ck[s + 1] = ck[s] + lk[s];
  if (cq[NS] != TQ || ck[NS] != TK) return test_skip("bad test sizes");
  for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) q[i] = rnd(), qb[i] = lpattn_f32_to_bf16(q[i]);
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    k[i] = rnd() + 0.5f, v[i] = rnd();
    kb[i] = lpattn_f32_to_bf16(k[i]), vb[i] = lpattn_f32_to_bf16(v[i]);
  }
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < NS * HKV; j++) dsc[i][j] = 0.01f + 0.002f * (float)((i + j) % 5);
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
    for (int causal = 0; causal < 2; causal++) {
      parity(ctx, &variants[i], causal, LPATTN_F32);
      if (variants[i].prec == LPATTN_PREC_HIGH || variants[i].prec == LPATTN_PREC_NVFP4)
        parity(ctx, &variants[i], causal, LPATTN_BF16);
    }
  no_leak(ctx, &variants[2]);
  no_leak(ctx, &variants[4]);
  bad_calls(ctx);
  lpattn_free(ctx);
  return test_finish();
}
