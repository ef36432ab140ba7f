// The CPU backend against ref, on every Highway target this machine runs
// (SPEC/SEMANTICS via backends/ref). Tolerances (relative RMSE of O against
// ref computed in the same precision; LSE/H absolute):
//   HIGH f32 inputs        O < 1e-5, LSE/H < 1e-4 * max(1, |ref|)
//   HIGH f16/bf16 inputs   O < 1e-5 (inputs are exact in f32; only the f32 vs
//                          f64 accumulation differs)
//   FP8 / NVFP4 / MXFP4 / THRIFT / PASA: O < 0.01 * (that precision's own
//     error against ref HIGH) + 1e-5: f32 scores instead of ref's f64 can move
//     a P or PASA f16 score across a rounding boundary, which flips a few codes,
//     each costing about one quantization step of one element.
// The causal leak test is bitwise: rows <= t never change when tokens > t do.
#include <math.h>
#include <string.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "cpu.h"
#include "internal.h"
#include "lpattn.h"
#include "testutil.h"
#define TV_BACKEND_CPU 1
#include "variants.h"
#include "cpu_compare.h"

namespace {

struct Case {
  const char *name;
  lpattn_precision prec;
  int causal, pasa;
  lpattn_dtype dt;
  int64_t B, Hq, Hkv, Sq, Skv, D;
  int bq, bk;
  lpattn_format low;
  float x0;  // input offset (PASA's hard case)
  int leaky = 0, mx_up = 0, score_f16 = 0, bshd = 0;
  lpattn_selection sel = LPATTN_SELECT_CAUSAL;
};

struct Data {
  std::vector<uint16_t> q16, k16, v16;
  std::vector<float> q, k, v;
};

struct Result {
  std::vector<float> o, lse, ent;
  std::vector<int32_t> sel;
  lpattn_status st;
};

float RoundTo(lpattn_dtype dt, float x) {
  if (dt == LPATTN_F16) return lpattn_f16_to_f32(lpattn_f32_to_f16(x));
  if (dt == LPATTN_BF16) return lpattn_bf16_to_f32(lpattn_f32_to_bf16(x));
  return x;
}

void Fill(const Case &c, uint32_t seed, Data *d) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> N(0.0f, 1.0f);
  auto gen = [&](std::vector<float> &x, int64_t n, float x0) {
    x.resize(n);
    for (auto &e : x) e = RoundTo(c.dt, x0 + N(rng));
  };
  gen(d->q, c.B * c.Hq * c.Sq * c.D, c.x0);
  gen(d->k, c.B * c.Hkv * c.Skv * c.D, c.x0);
  gen(d->v, c.B * c.Hkv * c.Skv * c.D, 0.0f);
}

// Tensor view of logical [b, h, s, d] data, stored BHSD or BSHD.
lpattn_tensor View(const Case &c, void *p, int64_t h, int64_t s) {
  lpattn_tensor t = lpattn_tensor_4d(p, c.dt, c.B, h, s, c.D);
  if (c.bshd) {
    t.stride[3] = 1, t.stride[1] = c.D, t.stride[2] = h * c.D, t.stride[0] = s * h * c.D;
  }
  return t;
}

// Store f32 data in the case's dtype and layout.
void *Pack(const Case &c, const std::vector<float> &x, int64_t h, int64_t s,
           std::vector<uint8_t> *buf) {
  const int64_t es = c.dt == LPATTN_F32 ? 4 : 2;
  buf->assign(x.size() * es, 0);
  lpattn_tensor t = View(c, buf->data(), h, s);
  for (int64_t b = 0; b < c.B; b++)
    for (int64_t hh = 0; hh < h; hh++)
      for (int64_t ss = 0; ss < s; ss++)
        for (int64_t d = 0; d < c.D; d++) {
          float v = x[((b * h + hh) * s + ss) * c.D + d];
          int64_t off = b * t.stride[0] + hh * t.stride[1] + ss * t.stride[2] + d * t.stride[3];
          if (c.dt == LPATTN_F32) memcpy(buf->data() + 4 * off, &v, 4);
          else {
            uint16_t u = c.dt == LPATTN_F16 ? lpattn_f32_to_f16(v) : lpattn_f32_to_bf16(v);
            memcpy(buf->data() + 2 * off, &u, 2);
          }
        }
  return buf->data();
}

Result Run(lpattn_ctx *ctx, const Case &c, const Data &d, lpattn_precision prec) {
  std::vector<uint8_t> qb, kb, vb;
  lpattn_tensor q = View(c, Pack(c, d.q, c.Hq, c.Sq, &qb), c.Hq, c.Sq);
  lpattn_tensor k = View(c, Pack(c, d.k, c.Hkv, c.Skv, &kb), c.Hkv, c.Skv);
  lpattn_tensor v = View(c, Pack(c, d.v, c.Hkv, c.Skv, &vb), c.Hkv, c.Skv);
  Result r;
  r.o.assign(c.B * c.Hq * c.Sq * c.D, 0.0f);
  r.lse.assign(c.B * c.Hq * c.Sq, 0.0f);
  r.ent.assign(c.B * c.Hq * c.Sq, 0.0f);
  lpattn_tensor o = lpattn_tensor_4d(r.o.data(), LPATTN_F32, c.B, c.Hq, c.Sq, c.D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = prec, p.causal = c.causal, p.block_q = c.bq, p.block_k = c.bk;
  p.thrift_low = c.low, p.pasa = c.pasa, p.leaky = c.leaky, p.mx_scale_round_up = c.mx_up;
  p.score_f16 = c.score_f16, p.selection = c.sel, p.thrift_budget = 0.3f;
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lpattn_tensor_4d(r.lse.data(), LPATTN_F32, c.B, c.Hq, c.Sq, 1);
  aux.entropy = lpattn_tensor_4d(r.ent.data(), LPATTN_F32, c.B, c.Hq, c.Sq, 1);
  if (prec == LPATTN_PREC_THRIFT) {
    const int64_t nqt = (c.Sq + c.bq - 1) / c.bq, n = (c.Skv + c.bk - 1) / c.bk;
    const int kk = lpattn_thrift_k((int)n, p.thrift_budget, c.causal);
    r.sel.assign(c.B * c.Hq * nqt * kk, -7);
    aux.selection = lpattn_tensor_4d(r.sel.data(), LPATTN_I32, c.B, c.Hq, nqt, kk);
  }
  r.st = lpattn_attention(ctx, &q, &k, &v, &o, &p, &aux);
  return r;
}

lpattn_ctx *cpu, *ref;

// ref's answer for a case and its precision's own error (against ref HIGH),
// computed once and reused for every target.
struct RefAnswer {
  Result r;
  double own;
};
std::map<std::string, RefAnswer> ref_cache;

const RefAnswer &RefFor(const Case &c, const Data &d) {
  auto it = ref_cache.find(c.name);
  if (it != ref_cache.end()) return it->second;
  RefAnswer a{Run(ref, c, d, c.prec), 0.0};
  if (c.prec != LPATTN_PREC_HIGH || c.pasa) {
    Case h = c;
    h.pasa = 0;
    a.own = RelRmse(a.r.o, Run(ref, h, d, LPATTN_PREC_HIGH).o);
  }
  return ref_cache[c.name] = a;
}

// CPU vs ref in the same precision, with ref HIGH giving the precision's scale.
void Compare(const Case &c, const char *target) {
  Data d;
  Fill(c, 1234, &d);
  Result rc = Run(cpu, c, d, c.prec);
  const RefAnswer &ra = RefFor(c, d);
  const Result &rr = ra.r;
  CHECK(rc.st == LPATTN_OK && rr.st == LPATTN_OK, "%s/%s: status %d %d", target, c.name, rc.st,
        rr.st);
  if (rc.st || rr.st) return;
  const double own = ra.own, tol = own > 0 ? 0.01 * own + 1e-5 : 1e-5;
  const double e = RelRmse(rc.o, rr.o), el = MaxRel(rc.lse, rr.lse), eh = MaxRel(rc.ent, rr.ent);
  const double lt = c.prec == LPATTN_PREC_HIGH && !c.pasa ? 1e-4 : 2e-3;
  CHECK(e < tol, "%s/%s: O rel-RMSE %.3g >= %.3g (precision's own error %.3g)", target, c.name, e,
        tol, own);
  CHECK(el < lt && eh < lt, "%s/%s: LSE diff %.3g, H diff %.3g", target, c.name, el, eh);
  CHECK(rc.sel == rr.sel, "%s/%s: THRIFT selection differs from ref", target, c.name);
  if (getenv("LPATTN_TEST_VERBOSE"))
    printf("%-8s %-28s O %.2e (tol %.2e, own %.2e) LSE %.2e H %.2e\n", target, c.name, e, tol,
           own, el, eh);
}

// SPEC 4's test of record, bitwise: perturb every token after t.
void Leak(const Case &c, const char *target, bool expect_leak) {
  Data d, p;
  Fill(c, 99, &d);
  p = d;
  const int64_t t = c.Sq / 2 + 3, off = c.Skv - c.Sq;
  std::mt19937 rng(5);
  std::normal_distribution<float> N(0.0f, 4.0f);
  for (int64_t b = 0; b < c.B; b++) {
    for (int64_t h = 0; h < c.Hq; h++)
      for (int64_t s = t + 1; s < c.Sq; s++)
        for (int64_t x = 0; x < c.D; x++) p.q[((b * c.Hq + h) * c.Sq + s) * c.D + x] += RoundTo(c.dt, N(rng));
    for (int64_t h = 0; h < c.Hkv; h++)
      for (int64_t s = t + off + 1; s < c.Skv; s++)
        for (int64_t x = 0; x < c.D; x++) {
          const int64_t i = ((b * c.Hkv + h) * c.Skv + s) * c.D + x;
          p.k[i] = RoundTo(c.dt, p.k[i] + N(rng) + 3.0f);
          p.v[i] = RoundTo(c.dt, p.v[i] * 5.0f + N(rng));
        }
  }
  Result a = Run(cpu, c, d, c.prec), b = Run(cpu, c, p, c.prec);
  int64_t changed = 0;
  for (int64_t bh = 0; bh < c.B * c.Hq; bh++)
    for (int64_t s = 0; s <= t; s++) {
      const int64_t row = bh * c.Sq + s;
      changed += memcmp(&a.o[row * c.D], &b.o[row * c.D], 4 * c.D) != 0 ||
                 memcmp(&a.lse[row], &b.lse[row], 4) || memcmp(&a.ent[row], &b.ent[row], 4);
    }
  if (expect_leak)
    CHECK(changed > 0, "%s/%s: leaky mode should leak but no past row changed", target, c.name);
  else
    CHECK(changed == 0, "%s/%s: %lld past rows changed (causal leak)", target, c.name,
          (long long)changed);
}

// Decode against the shared KV cache: cpu vs ref caches fed the same tokens,
// sequences of different lengths, 3 rows in tile 0, single-row steps and a
// 3-row step that crosses a tile boundary. Tolerance as for prefill, the
// precision's own error taken from a ref HIGH cache.
struct DecodeCase {
  const char *name;
  lpattn_precision prec;
  int pasa;
  lpattn_format low;
  float x0;
};

void Decode(const DecodeCase &dc, const char *target, int T = 32, int Hq = 4) {
  const int S = 2, Hkv = 2, D = 64;
  lpattn_ctx *ctxs[3] = {cpu, ref, ref};
  lpattn_kv_cache *cache[3] = {};
  for (int i = 0; i < 3; i++) {
    lpattn_kv_cache_params kp;
    lpattn_kv_cache_params_init(&kp);
    kp.num_seqs = S, kp.num_kv_heads = Hkv, kp.num_q_heads = Hq, kp.head_dim = D;
    kp.max_tokens = 256, kp.tile = T, kp.high_dtype = LPATTN_F32;
    kp.precision = i == 2 ? LPATTN_PREC_HIGH : dc.prec, kp.thrift_low = dc.low;
    kp.pasa = i == 2 ? 0 : dc.pasa;
    CHECK_STATUS(lpattn_kv_cache_create(ctxs[i], &kp, &cache[i]), LPATTN_OK);
    if (!cache[i]) return;
  }
  std::mt19937 rng(11);
  std::normal_distribution<float> N(0.0f, 1.0f);
  auto rnd = [&](std::vector<float> &x, size_t n, float x0) {
    x.resize(n);
    for (auto &e : x) e = x0 + N(rng);
  };
  std::vector<float> k, v, q, o[3], lse[3];
  auto append = [&](int seq, int n) {
    rnd(k, (size_t)Hkv * n * D, dc.x0), rnd(v, (size_t)Hkv * n * D, 0.0f), rnd(q, (size_t)Hq * n * D, dc.x0);
    lpattn_tensor kt = lpattn_tensor_4d(k.data(), LPATTN_F32, 1, Hkv, n, D);
    lpattn_tensor vt = lpattn_tensor_4d(v.data(), LPATTN_F32, 1, Hkv, n, D);
    lpattn_tensor qt = lpattn_tensor_4d(q.data(), LPATTN_F32, 1, Hq, n, D);
    for (int i = 0; i < 3; i++) CHECK_STATUS(lpattn_kv_cache_append(ctxs[i], cache[i], seq, &kt, &vt, &qt), LPATTN_OK);
  };
  auto step = [&](int sq, const char *what) {
    for (int s = 0; s < S; s++) append(s, sq);
    rnd(q, (size_t)S * Hq * sq * D, dc.x0);
    lpattn_tensor qt = lpattn_tensor_4d(q.data(), LPATTN_F32, S, Hq, sq, D);
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.thrift_budget = 0.3f;
    for (int i = 0; i < 3; i++) {
      o[i].assign((size_t)S * Hq * sq * D, 0.0f), lse[i].assign((size_t)S * Hq * sq, 0.0f);
      lpattn_tensor ot = lpattn_tensor_4d(o[i].data(), LPATTN_F32, S, Hq, sq, D);
      lpattn_attn_aux aux;
      lpattn_attn_aux_init(&aux);
      aux.lse = lpattn_tensor_4d(lse[i].data(), LPATTN_F32, S, Hq, sq, 1);
      CHECK_STATUS(lpattn_decode(ctxs[i], cache[i], &qt, &ot, &p, &aux), LPATTN_OK);
    }
    const double own = dc.prec == LPATTN_PREC_HIGH && !dc.pasa ? 0 : RelRmse(o[1], o[2]);
    const double e = RelRmse(o[0], o[1]), tol = 0.01 * own + 1e-5, el = MaxRel(lse[0], lse[1]);
    CHECK(e < tol && el < 2e-3, "%s/decode %s %s: O %.3g (tol %.3g) LSE %.3g", target, dc.name,
          what, e, tol, el);
    if (getenv("LPATTN_TEST_VERBOSE"))
      printf("%-8s decode T=%d Hq=%d %-14s %-10s O %.2e (tol %.2e) LSE %.2e\n", target, T, Hq,
             dc.name, what, e, tol, el);
  };
  step(3, "tile 0");  // the diagonal tile 0 has no full tile before it (PASA: first-key shift)
  for (int s = 0; s < S; s++)
    for (int n = 0; n < 90 + 37 * s;) {
      const int m = 90 + 37 * s - n < 40 ? 90 + 37 * s - n : 40;
      append(s, m);
      n += m;
    }
  step(1, "1 row");
  step(1, "1 row");
  step(3, "3 rows");
  for (int i = 0; i < 3; i++) lpattn_kv_cache_free(cache[i]);
}

// Non-finite inputs poison exactly the rows ref poisons (NaN pattern of O
// and LSE identical), and the other rows still match.
void NonFinite(const char *target) {
  for (lpattn_precision prec : {LPATTN_PREC_HIGH, LPATTN_PREC_NVFP4}) {
    Case c = {"nonfinite", prec, 1, 0, LPATTN_F32, 1, 2, 1, 128, 128, 64, 32, 32, LPATTN_FMT_NVFP4, 0};
    Data d;
    Fill(c, 77, &d);
    d.k[70 * c.D + 3] = NAN;       // key 70 of kv head 0
    d.v[20 * c.D + 9] = INFINITY;  // value 20
    Result a = Run(cpu, c, d, prec), b = Run(ref, c, d, prec);
    int64_t diff = 0, nan_rows = 0;
    for (size_t i = 0; i < a.o.size(); i++) diff += std::isnan(a.o[i]) != std::isnan(b.o[i]);
    for (size_t i = 0; i < a.lse.size(); i++) {
      diff += std::isnan(a.lse[i]) != std::isnan(b.lse[i]);
      nan_rows += std::isnan(b.lse[i]);
    }
    CHECK(diff == 0 && nan_rows > 0, "%s/nonfinite prec %d: %lld NaN positions differ (%lld NaN rows)",
          target, (int)prec, (long long)diff, (long long)nan_rows);
    std::vector<float> fa, fb;
    for (size_t i = 0; i < a.o.size(); i++)
      if (std::isfinite(b.o[i]) && std::isfinite(a.o[i])) fa.push_back(a.o[i]), fb.push_back(b.o[i]);
    CHECK(!fa.empty() && RelRmse(fa, fb) < (prec == LPATTN_PREC_HIGH ? 1e-5 : 2e-3),
          "%s/nonfinite prec %d: finite rows differ", target, (int)prec);
  }
}

// num_threads changes the schedule, never the bits.
void ThreadCounts() {
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.num_threads = 1;
  lpattn_ctx *one = NULL;
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_CPU, &cp, &one), LPATTN_OK);
  if (!one) return;
  Case c = {"threads", LPATTN_PREC_THRIFT, 1, 1, LPATTN_F16, 2, 4, 2, 160, 200, 64, 32, 32,
            LPATTN_FMT_NVFP4, 3.0f};
  Data d;
  Fill(c, 5, &d);
  Result a = Run(cpu, c, d, c.prec), b = Run(one, c, d, c.prec);
  CHECK(a.st == LPATTN_OK && a.o == b.o && a.lse == b.lse && a.ent == b.ent && a.sel == b.sel,
        "1 thread and the pool's threads differ");
  lpattn_free(one);
}

// SPEC 7 merge: cpu (f32, backends/math/lpk_softmax.h) vs ref (f64), with
// empty partials (LSE = -inf) and the output aliasing input a.
void Merge() {
  const int64_t H = 3, S = 40, D = 32, n = H * S * D, m = H * S;
  std::mt19937 rng(21);
  std::normal_distribution<float> N(0.0f, 2.0f);
  std::vector<float> oa(n), ob(n), la(m), lb(m), ha(m), hb(m);
  for (auto &x : oa) x = N(rng);
  for (auto &x : ob) x = N(rng);
  for (int64_t i = 0; i < m; i++) {
    la[i] = i % 7 == 0 ? -INFINITY : 5.0f + N(rng), lb[i] = i % 5 == 0 ? -INFINITY : 5.0f + N(rng);
    ha[i] = fabsf(N(rng)), hb[i] = fabsf(N(rng));
  }
  std::vector<float> o[2], l[2], h[2];
  for (int i = 0; i < 2; i++) {
    o[i] = oa, l[i].assign(m, 0.0f), h[i].assign(m, 0.0f);  // o aliases o_a
    lpattn_tensor ta = lpattn_tensor_4d(o[i].data(), LPATTN_F32, 1, H, S, D);
    lpattn_tensor tb = lpattn_tensor_4d(ob.data(), LPATTN_F32, 1, H, S, D);
    lpattn_tensor tla = lpattn_tensor_4d(la.data(), LPATTN_F32, 1, H, S, 1);
    lpattn_tensor tlb = lpattn_tensor_4d(lb.data(), LPATTN_F32, 1, H, S, 1);
    lpattn_tensor tha = lpattn_tensor_4d(ha.data(), LPATTN_F32, 1, H, S, 1);
    lpattn_tensor thb = lpattn_tensor_4d(hb.data(), LPATTN_F32, 1, H, S, 1);
    lpattn_tensor tl = lpattn_tensor_4d(l[i].data(), LPATTN_F32, 1, H, S, 1);
    lpattn_tensor th = lpattn_tensor_4d(h[i].data(), LPATTN_F32, 1, H, S, 1);
    CHECK_STATUS(lpattn_merge_states(i ? ref : cpu, &ta, &tla, &tha, &tb, &tlb, &thb, &ta, &tl, &th),
                 LPATTN_OK);
  }
  const double eo = RelRmse(o[0], o[1]), el = MaxRel(l[0], l[1]), eh = MaxRel(h[0], h[1]);
  CHECK(eo < 1e-6 && el < 1e-6 && eh < 1e-5, "merge: O %.3g LSE %.3g H %.3g", eo, el, eh);
}

std::vector<Case> Cases(bool full) {
  const lpattn_format NV = LPATTN_FMT_NVFP4, MX = LPATTN_FMT_MXFP4, F8 = LPATTN_FMT_FP8;
  std::vector<Case> v = {
      {"high f32 causal gqa d128", LPATTN_PREC_HIGH, 1, 0, LPATTN_F32, 1, 4, 2, 160, 224, 128, 64, 64, NV, 0},
      {"nvfp4 f16 causal d128", LPATTN_PREC_NVFP4, 1, 0, LPATTN_F16, 1, 2, 1, 192, 192, 128, 64, 64, NV, 0},
      {"thrift nvfp4 causal d64", LPATTN_PREC_THRIFT, 1, 0, LPATTN_F32, 1, 2, 2, 256, 256, 64, 32, 32, NV, 0},
      {"pasa f16 x0=20 causal d128", LPATTN_PREC_HIGH, 1, 1, LPATTN_F16, 1, 2, 1, 192, 192, 128, 64, 64, NV, 20.0f},
      // Last query tile of one row: the partial last KV tile is diagonal, not full.
      {"nvfp4 S=129 tail row", LPATTN_PREC_NVFP4, 1, 0, LPATTN_F32, 1, 2, 1, 129, 129, 64, 64, 64, NV, 0},
      {"thrift S=65 tail row", LPATTN_PREC_THRIFT, 1, 0, LPATTN_F32, 1, 2, 1, 65, 65, 64, 64, 64, NV, 0},
      // Query tile 0 shifted by its diagonal tile's first key (SPEC 8 offset).
      {"pasa f16 x0=30 causal", LPATTN_PREC_HIGH, 1, 1, LPATTN_F16, 1, 2, 1, 129, 129, 64, 64, 64, NV, 30.0f},
      // Head dims no multiple of 16: zero-padded channels, groups past D (SEMANTICS "Head dimensions").
      {"high bf16 causal d40", LPATTN_PREC_HIGH, 1, 0, LPATTN_BF16, 1, 2, 1, 113, 203, 40, 64, 64, NV, 0},
      {"nvfp4 f16 causal d111", LPATTN_PREC_NVFP4, 1, 0, LPATTN_F16, 1, 2, 1, 129, 129, 111, 64, 64, NV, 0},
      {"mxfp4 f32 nocausal d40", LPATTN_PREC_MXFP4, 0, 0, LPATTN_F32, 1, 2, 1, 96, 130, 40, 32, 32, MX, 0},
  };
  if (!full) return v;
  std::vector<Case> more = {
      {"high bf16 nocausal d64 bshd", LPATTN_PREC_HIGH, 0, 0, LPATTN_BF16, 2, 2, 1, 100, 150, 64, 32, 64, NV, 0},
      {"high f16 Skv<Sq causal d48", LPATTN_PREC_HIGH, 1, 0, LPATTN_F16, 1, 2, 2, 96, 70, 48, 32, 32, NV, 0},
      {"fp8 f32 causal d128", LPATTN_PREC_FP8, 1, 0, LPATTN_F32, 1, 2, 1, 192, 256, 128, 64, 64, F8, 0},
      {"mxfp4 f32 nocausal d64", LPATTN_PREC_MXFP4, 0, 0, LPATTN_F32, 1, 2, 1, 128, 200, 64, 64, 64, MX, 0},
      {"mxfp4 roundup causal d64", LPATTN_PREC_MXFP4, 1, 0, LPATTN_F32, 1, 2, 1, 128, 200, 64, 64, 64, MX, 0},
      {"nvfp4 f32 nocausal d256", LPATTN_PREC_NVFP4, 0, 0, LPATTN_F32, 1, 1, 1, 96, 160, 256, 32, 32, NV, 0},
      {"thrift fp8 paper causal", LPATTN_PREC_THRIFT, 1, 0, LPATTN_F16, 1, 2, 1, 256, 256, 64, 32, 32, F8, 0},
      {"thrift mxfp4 nocausal", LPATTN_PREC_THRIFT, 0, 0, LPATTN_F32, 1, 2, 1, 128, 320, 64, 32, 32, MX, 0},
      {"pasa nvfp4 x0=10 causal", LPATTN_PREC_NVFP4, 1, 1, LPATTN_F16, 1, 2, 1, 192, 256, 128, 64, 64, NV, 10.0f},
      {"pasa thrift causal", LPATTN_PREC_THRIFT, 1, 1, LPATTN_F16, 1, 2, 1, 256, 256, 64, 32, 32, NV, 5.0f},
      {"leaky nvfp4 causal", LPATTN_PREC_NVFP4, 1, 0, LPATTN_F32, 1, 2, 1, 128, 128, 64, 32, 32, NV, 0},
      {"score_f16 high", LPATTN_PREC_HIGH, 1, 0, LPATTN_F16, 1, 1, 1, 96, 96, 64, 32, 32, NV, 0},
      {"fp8 f16 causal d80", LPATTN_PREC_FP8, 1, 0, LPATTN_F16, 1, 2, 1, 100, 160, 80, 64, 64, F8, 0},
      {"thrift nvfp4 causal d59", LPATTN_PREC_THRIFT, 1, 0, LPATTN_F32, 1, 2, 1, 200, 200, 59, 32, 32, NV, 0},
      {"pasa nvfp4 causal d96", LPATTN_PREC_NVFP4, 1, 1, LPATTN_F16, 1, 2, 1, 128, 192, 96, 64, 64, NV, 5.0f},
      {"mxfp4 f32 causal d48", LPATTN_PREC_MXFP4, 1, 0, LPATTN_F32, 1, 2, 1, 100, 100, 48, 32, 32, MX, 0},
      {"high f16 causal d8", LPATTN_PREC_HIGH, 1, 0, LPATTN_F16, 1, 2, 1, 70, 70, 8, 32, 32, NV, 0},
  };
  more[0].bshd = 1;
  more[4].mx_up = 1;
  more[6].sel = LPATTN_SELECT_PAPER;
  more[10].leaky = 1;
  more[11].score_f16 = 1;
  v.insert(v.end(), more.begin(), more.end());
  return v;
}

}  // namespace

int main() {
  setvbuf(stdout, NULL, _IOLBF, 0);
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  // Two threads exercise the pool; LPATTN_CPU_TEST_THREADS overrides (qemu-user
  // on the CI host cannot start threads, so the cross build uses 1).
  cp.num_threads = getenv("LPATTN_CPU_TEST_THREADS") ? atoi(getenv("LPATTN_CPU_TEST_THREADS")) : 2;
  if (lpattn_create(LPATTN_BACKEND_CPU, &cp, &cpu) != LPATTN_OK) return test_skip("no cpu backend");
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, &ref), LPATTN_OK);
  int64_t targets[16];
  const int nt = lpattn_cpu_targets(targets, 16);
  CHECK(nt >= 1, "no Highway target");
  for (int i = 0; i < nt; i++) {
    const char *tn = lpattn_cpu_target_name(targets[i]);
    lpattn_cpu_force_target(targets[i]);
    const bool best = i == 0;  // full coverage on the best target, a core set on the others
    for (const Case &c : Cases(best)) Compare(c, tn);
    // Every attn variant of the table (gen/registry.inc) at its head dim
    // (0, any: one no other row has).
    CHECK(TV_COUNT >= 2, "variants table has %d rows", TV_COUNT);
    for (int vi = 0; best && vi < TV_COUNT; vi++) {
      const tv_variant &tv = tv_variants[vi];
      if (tv.op != TV_ATTN) continue;
      const Case c = {tv.name, LPATTN_PREC_NVFP4, 1, 0, tv.dtype < 0 ? LPATTN_F32 : (lpattn_dtype)tv.dtype,
                      1, 2, 1, 100, 140, tv.head_dim ? tv.head_dim : 80, 32, 64, LPATTN_FMT_NVFP4, 0};
      Compare(c, tn);
    }
    for (const Case &c : Cases(best)) {
      // selection = paper is documented as leaky but need not leak on given data.
      if (!c.causal || c.sel == LPATTN_SELECT_PAPER) continue;
      Leak(c, tn, c.leaky != 0);
    }
    const DecodeCase dcs[] = {
        {"high", LPATTN_PREC_HIGH, 0, LPATTN_FMT_NVFP4, 0.0f},
        {"nvfp4", LPATTN_PREC_NVFP4, 0, LPATTN_FMT_NVFP4, 0.0f},
        {"thrift mxfp4", LPATTN_PREC_THRIFT, 0, LPATTN_FMT_MXFP4, 0.0f},
        {"fp8 pasa", LPATTN_PREC_FP8, 1, LPATTN_FMT_FP8, 8.0f},
        {"thrift pasa", LPATTN_PREC_THRIFT, 1, LPATTN_FMT_NVFP4, 8.0f},
    };
    NonFinite(tn);
    for (const DecodeCase &dc : dcs) {
      if (best || dc.prec == LPATTN_PREC_NVFP4) Decode(dc, tn);
      // Tile 64 (the integer FP4 path, every target but scalar: NVFP4 and
      // MXFP4 on each target), and one row per kv head.
      const bool fp4 = !dc.pasa && dc.prec != LPATTN_PREC_HIGH && dc.low != LPATTN_FMT_FP8;
      if (best || fp4) Decode(dc, tn, 64, 4);
      if (best) Decode(dc, tn, 64, 2);
    }
    printf("target %s done\n", tn);
  }
  lpattn_cpu_force_target(0);
  Merge();
  ThreadCounts();
  lpattn_free(cpu);
  lpattn_free(ref);
  return test_finish();
}
