// lpattn_attention's small-Sq path on the CPU (issue 12 item 4: HIGH, Sq <=
// Bq, K/V read in place) against the general path (lpattn_cpu_set_small_q(0))
// and ref, on every Highway target this machine runs. The two CPU paths fold
// the same tiles in the same order and differ only in the f32 order of each
// q . k sum: O within 1e-5 relative RMSE of each other and of ref, LSE/H
// within 1e-5 * max(1, |x|). Bitwise: the causal leak test, 1 thread vs 2,
// and a NaN key reaching exactly the rows that see it.
#include <math.h>
#include <string.h>

#include <random>
#include <vector>

#include "cpu.h"
#include "lpattn.h"
#include "testutil.h"
#include "cpu_compare.h"

namespace {

struct Case {
  lpattn_dtype dt;
  int causal;
  int64_t B, Hq, Hkv, Sq, Skv, D;
  int bq, bk, bshd;
};

struct Out {
  std::vector<float> o, lse, ent;
  lpattn_status st;
};

// Inputs as f32 values exact in the case's dtype, [b][h][s][d].
struct In {
  std::vector<float> q, k, v;
};

float Round(lpattn_dtype dt, float x) {
  if (dt == LPATTN_F16) return lpattn_f16_to_f32(lpattn_f32_to_f16(x));
  if (dt == LPATTN_BF16) return lpattn_bf16_to_f32(lpattn_f32_to_bf16(x));
  return x;
}

In Fill(const Case &c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> N(0.0f, 1.0f);
  In in;
  in.q.resize(c.B * c.Hq * c.Sq * c.D), in.k.resize(c.B * c.Hkv * c.Skv * c.D), in.v.resize(in.k.size());
  for (float &x : in.q) x = Round(c.dt, 2.0f * N(rng));
  for (float &x : in.k) x = Round(c.dt, N(rng));
  for (float &x : in.v) x = Round(c.dt, N(rng));
  return in;
}

// A tensor of the case's dtype and layout (BHSD, or BSHD) holding x.
lpattn_tensor Pack(const Case &c, const std::vector<float> &x, int64_t H, int64_t S,
                   std::vector<uint8_t> *buf) {
  const int64_t es = c.dt == LPATTN_F32 ? 4 : 2;
  lpattn_tensor t = lpattn_tensor_4d(nullptr, c.dt, c.B, H, S, c.D);
  if (c.bshd) t.stride[3] = 1, t.stride[1] = c.D, t.stride[2] = H * c.D, t.stride[0] = S * H * c.D;
  buf->assign(x.size() * es, 0);
  t.data = buf->data();
  for (int64_t b = 0; b < c.B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = 0; s < S; s++)
        for (int64_t d = 0; d < c.D; d++) {
          const float v = x[((b * H + h) * S + s) * c.D + d];
          const int64_t off = b * t.stride[0] + h * t.stride[1] + s * t.stride[2] + d;
          if (c.dt == LPATTN_F32) {
            memcpy(buf->data() + 4 * off, &v, 4);
          } else {
            const uint16_t u = c.dt == LPATTN_F16 ? lpattn_f32_to_f16(v) : lpattn_f32_to_bf16(v);
            memcpy(buf->data() + 2 * off, &u, 2);
          }
        }
  return t;
}

Out Run(lpattn_ctx *ctx, const Case &c, const In &in) {
  std::vector<uint8_t> qb, kb, vb;
  const lpattn_tensor q = Pack(c, in.q, c.Hq, c.Sq, &qb), k = Pack(c, in.k, c.Hkv, c.Skv, &kb),
                      v = Pack(c, in.v, c.Hkv, c.Skv, &vb);
  Out r;
  r.o.assign(c.B * c.Hq * c.Sq * c.D, -7.0f), r.lse.assign(c.B * c.Hq * c.Sq, -7.0f);
  r.ent.assign(r.lse.size(), -7.0f);
  const lpattn_tensor o = lpattn_tensor_4d(r.o.data(), LPATTN_F32, c.B, c.Hq, c.Sq, c.D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = LPATTN_PREC_HIGH, p.causal = c.causal, p.block_q = c.bq, p.block_k = c.bk;
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lpattn_tensor_4d(r.lse.data(), LPATTN_F32, c.B, c.Hq, c.Sq, 1);
  aux.entropy = lpattn_tensor_4d(r.ent.data(), LPATTN_F32, c.B, c.Hq, c.Sq, 1);
  r.st = lpattn_attention(ctx, &q, &k, &v, &o, &p, &aux);
  return r;
}

lpattn_ctx *cpu, *ref;

void Near(const char *what, const char *tn, const Case &c, const Out &a, const Out &b) {
  CHECK(a.st == LPATTN_OK && b.st == LPATTN_OK, "%s/%s: status %d %d", tn, what, a.st, b.st);
  const double e = RelRmse(a.o, b.o), el = MaxRel(a.lse, b.lse), eh = MaxRel(a.ent, b.ent);
  CHECK(e < 1e-5 && el < 1e-5 && eh < 1e-5,
        "%s/%s dt=%d causal=%d G=%lld Sq=%lld Skv=%lld D=%lld: O %.3g LSE %.3g H %.3g", tn, what,
        (int)c.dt, c.causal, (long long)(c.Hq / c.Hkv), (long long)c.Sq, (long long)c.Skv,
        (long long)c.D, e, el, eh);
}

void Compare(const Case &c, const char *tn) {
  const In in = Fill(c, 17);
  const Out fast = Run(cpu, c, in);
  lpattn_cpu_set_small_q(0);
  const Out gen = Run(cpu, c, in);
  lpattn_cpu_set_small_q(1);
  Near("small-Sq vs general", tn, c, fast, gen);
  Near("small-Sq vs ref", tn, c, fast, Run(ref, c, in));
}

// Rows <= t never change when keys past their horizon (t + Skv - Sq) do.
void Leak(const Case &c, const char *tn) {
  In a = Fill(c, 3), b = a;
  const int64_t t = c.Sq / 2, off = c.Skv - c.Sq;
  std::mt19937 rng(9);
  std::normal_distribution<float> N(0.0f, 30.0f);
  for (int64_t bh = 0; bh < c.B * c.Hkv; bh++)
    for (int64_t s = t + off + 1; s < c.Skv; s++)
      for (int64_t d = 0; d < c.D; d++) {
        b.k[(bh * c.Skv + s) * c.D + d] = Round(c.dt, N(rng));
        b.v[(bh * c.Skv + s) * c.D + d] = Round(c.dt, N(rng));
      }
  b.k[(c.Skv - 1) * c.D] = NAN;  // even a NaN key
  const Out ra = Run(cpu, c, a), rb = Run(cpu, c, b);
  bool same = true, moved = false;
  for (int64_t bh = 0; bh < c.B * c.Hq; bh++)
    for (int64_t r = 0; r < c.Sq; r++) {
      const int64_t i = bh * c.Sq + r;
      const bool eq = !memcmp(&ra.o[i * c.D], &rb.o[i * c.D], sizeof(float) * c.D) &&
                      ra.lse[i] == rb.lse[i] && ra.ent[i] == rb.ent[i];
      if (r <= t) same &= eq;
      else moved |= !eq;
    }
  CHECK(same && moved, "%s: small-Sq causal leak test (unchanged %d, later rows moved %d)", tn, same, moved);
}

// A NaN key reaches the rows that see it, in both paths alike.
void NanKey(const char *tn) {
  const Case c = {LPATTN_F16, 1, 1, 2, 1, 4, 300, 64, 64, 64, 0};
  In in = Fill(c, 5);
  in.k[298 * c.D + 3] = NAN;  // seen by the last two rows only
  const Out fast = Run(cpu, c, in);
  lpattn_cpu_set_small_q(0);
  const Out gen = Run(cpu, c, in);
  lpattn_cpu_set_small_q(1);
  for (int64_t h = 0; h < c.Hq; h++)
    for (int64_t r = 0; r < c.Sq; r++) {
      const int64_t i = h * c.Sq + r;
      const bool want = r >= 2;
      CHECK(isnan(fast.o[i * c.D]) == want && isnan(gen.o[i * c.D]) == want,
            "%s: NaN key, row %lld: small-Sq %g general %g", tn, (long long)r, fast.o[i * c.D],
            gen.o[i * c.D]);
    }
}

}  // namespace

int main() {
  setvbuf(stdout, NULL, _IOLBF, 0);
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.num_threads = getenv("LPATTN_CPU_TEST_THREADS") ? atoi(getenv("LPATTN_CPU_TEST_THREADS")) : 2;
  if (lpattn_create(LPATTN_BACKEND_CPU, &cp, &cpu) != LPATTN_OK) return test_skip("no cpu backend");
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, &ref), LPATTN_OK);
  const lpattn_dtype F16 = LPATTN_F16, BF16 = LPATTN_BF16, F32 = LPATTN_F32;
  const Case cases[] = {
      // dt, causal, B, Hq, Hkv, Sq, Skv, D, bq, bk, bshd
      {F16, 1, 1, 8, 8, 1, 1100, 128, 64, 64, 0},  // decode shape, more than 16 tiles
      {F16, 0, 2, 8, 2, 1, 257, 64, 64, 64, 0},    // GQA, partial last tile
      {BF16, 1, 1, 4, 1, 3, 70, 128, 64, 32, 0},
      {BF16, 0, 1, 2, 2, 64, 200, 64, 64, 64, 1},  // a whole query tile, BSHD
      {F32, 1, 2, 4, 2, 17, 130, 48, 32, 32, 0},
      {F16, 1, 1, 2, 1, 64, 64, 64, 64, 64, 0},    // Skv == Sq: the diagonal
      {F16, 1, 1, 2, 1, 10, 6, 64, 64, 64, 0},     // Skv < Sq: early rows see nothing
      {F16, 1, 1, 2, 2, 1, 1, 80, 64, 64, 0},
  };
  int64_t targets[16];
  const int nt = lpattn_cpu_targets(targets, 16);
  for (int i = 0; i < nt; i++) {
    const char *tn = lpattn_cpu_target_name(targets[i]);
    lpattn_cpu_force_target(targets[i]);
    for (const Case &c : cases) Compare(c, tn);
    Leak({F16, 1, 1, 4, 2, 9, 333, 64, 64, 64, 0}, tn);
    Leak({BF16, 1, 1, 2, 1, 64, 1200, 128, 64, 64, 0}, tn);
    NanKey(tn);
    printf("target %s done\n", tn);
  }
  lpattn_cpu_force_target(0);
  // The thread count changes the schedule, never the bits.
  lpattn_ctx *one = NULL;
  cp.num_threads = 1;
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_CPU, &cp, &one), LPATTN_OK);
  if (one) {
    const Case c = {F16, 1, 2, 8, 2, 3, 900, 128, 64, 64, 0};
    const In in = Fill(c, 11);
    const Out a = Run(cpu, c, in), b = Run(one, c, in);
    CHECK(a.o == b.o && a.lse == b.lse && a.ent == b.ent, "small-Sq: 1 thread and 2 differ");
    lpattn_free(one);
  }
  lpattn_free(cpu);
  lpattn_free(ref);
  return test_finish();
}
