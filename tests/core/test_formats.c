/* Scalar formats (SPEC 2), exhaustively: every code is decoded against an
 * independent ldexp formula, and the encoders are compared with a
 * brute-force nearest-even search over that decoded table. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "formats.h"
#include "testutil.h"

typedef struct {
  const char *name;
  int mbits, bias;
  uint32_t last;  /* largest finite magnitude code */
  uint32_t sign;  /* sign bit */
  int saturates;  /* 1: clamp to the maximum; 0: round past it to inf (code last + 1) */
  uint32_t nan_out; /* what NaN encodes to */
  float (*dec)(uint32_t);
  uint32_t (*enc)(float);
} fmt;

static float dec_e2m1(uint32_t c) { return lpattn_e2m1_to_f32((uint8_t)c); }
static float dec_e4m3(uint32_t c) { return lpattn_e4m3_to_f32((uint8_t)c); }
static float dec_e5m2(uint32_t c) { return lpattn_e5m2_to_f32((uint8_t)c); }
static float dec_f16(uint32_t c) { return lpattn_f16_to_f32((uint16_t)c); }
static float dec_bf16(uint32_t c) { return lpattn_bf16_to_f32((uint16_t)c); }
static uint32_t enc_e2m1(float x) { return lpattn_f32_to_e2m1(x); }
static uint32_t enc_e4m3(float x) { return lpattn_f32_to_e4m3(x); }
static uint32_t enc_e5m2(float x) { return lpattn_f32_to_e5m2(x); }
static uint32_t enc_f16(float x) { return lpattn_f32_to_f16(x); }
static uint32_t enc_bf16(float x) { return lpattn_f32_to_bf16(x); }

static const fmt FMTS[] = {
    {"e2m1", 1, 1, 0x7, 0x8, 1, 0x0, dec_e2m1, enc_e2m1},
    {"e4m3", 3, 7, 0x7E, 0x80, 1, 0x7F, dec_e4m3, enc_e4m3},
    {"e5m2", 2, 15, 0x7B, 0x80, 0, 0x7E, dec_e5m2, enc_e5m2},
    {"f16", 10, 15, 0x7BFF, 0x8000, 0, 0x7E00, dec_f16, enc_f16},
    {"bf16", 7, 127, 0x7F7F, 0x8000, 0, 0x7FC0, dec_bf16, enc_bf16},
};
#define NFMT (int)(sizeof FMTS / sizeof FMTS[0])

/* Independent value of a magnitude code; last + 1 of an inf format is the
 * first power of two past the maximum, where IEEE rounding puts inf. */
static double ref_value(const fmt *f, uint32_t c) {
  uint32_t e = c >> f->mbits, m = c & ((1u << f->mbits) - 1);
  return e ? ldexp((double)((1u << f->mbits) + m), (int)e - f->bias - f->mbits)
           : ldexp((double)m, 1 - f->bias - f->mbits);
}

/* Nearest code to |x| (finite or inf), ties to the even code. */
static uint32_t ref_encode_mag(const fmt *f, double x) {
  uint32_t top = f->saturates ? f->last : f->last + 1;
  if (x >= ref_value(f, top)) return top;
  uint32_t lo = 0, hi = top; /* ref(lo) <= x < ref(hi) */
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (ref_value(f, mid) <= x) lo = mid; else hi = mid;
  }
  double d1 = x - ref_value(f, lo), d2 = ref_value(f, hi) - x;
  if (d1 != d2) return d1 < d2 ? lo : hi;
  return lo % 2 ? hi : lo;
}

static uint32_t ref_encode(const fmt *f, float x) {
  uint32_t c = ref_encode_mag(f, fabs((double)x));
  return signbit(x) ? c | f->sign : c;
}

static int same_value(float a, double b) { return (double)a == b && !signbit(a) == !signbit(b); }

static void test_decode(const fmt *f) {
  int bad = 0;
  for (uint32_t c = 0; c <= f->last; c++) {
    double v = ref_value(f, c);
    bad += !same_value(f->dec(c), v) || !same_value(f->dec(c | f->sign), -v);
  }
  CHECK(bad == 0, "%s: %d codes decode wrong", f->name, bad);
  int mono = 1;
  for (uint32_t c = 1; c <= f->last; c++) mono &= f->dec(c) > f->dec(c - 1);
  CHECK(mono, "%s: decode not increasing", f->name);
  int trip = 0;
  for (uint32_t c = 0; c <= f->last; c++) trip += f->enc(f->dec(c)) != c || f->enc(f->dec(c | f->sign)) != (c | f->sign);
  CHECK(trip == 0, "%s: %d codes fail decode->encode", f->name, trip);
  if (!f->saturates) {
    CHECK(isinf(f->dec(f->last + 1)) && f->dec(f->last + 1) > 0, "%s: inf code", f->name);
    CHECK(isinf(f->dec((f->last + 1) | f->sign)) && f->dec((f->last + 1) | f->sign) < 0, "%s: -inf", f->name);
    CHECK(isnan(f->dec(f->last + 2)), "%s: first NaN code", f->name);
  }
}

/* Every f16 value as input, both signs, against the brute force. */
static void test_encode_f16_inputs(const fmt *f) {
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    float x = lpattn_f16_to_f32((uint16_t)h);
    if (isnan(x)) continue;
    uint32_t got = f->enc(x), want = ref_encode(f, x);
    if (got != want && bad++ < 5) fprintf(stderr, "  %s(%a) = %#x want %#x\n", f->name, x, got, want);
  }
  CHECK(bad == 0, "%s: %d f16 inputs encode wrong", f->name, bad);
}

/* Midpoints of adjacent codes go to the even one; a hair off, to the near one. */
static void test_ties(const fmt *f) {
  int bad = 0, ties = 0;
  for (uint32_t c = 0; c < f->last + (f->saturates ? 0 : 1); c++) {
    double mid = (ref_value(f, c) + ref_value(f, c + 1)) / 2;
    float m = (float)mid;
    if ((double)m != mid) continue; /* not an f32 */
    ties++;
    uint32_t even = c % 2 ? c + 1 : c;
    bad += f->enc(m) != even || f->enc(-m) != (even | f->sign);
    bad += f->enc(nextafterf(m, 0)) != c || f->enc(nextafterf(m, INFINITY)) != c + 1;
  }
  CHECK(ties >= (int)f->last && bad == 0, "%s: %d of %d ties wrong", f->name, bad, ties);
}

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint32_t next_u32(void) { /* xorshift64* */
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (uint32_t)((rng * 0x2545F4914F6CDD1Du) >> 32);
}

static float from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static void test_random_f32(const fmt *f) {
  int bad = 0;
  for (int i = 0; i < 300000; i++) {
    uint32_t u = next_u32();
    /* bias half the draws to the format's own exponent range */
    if (i & 1) {
      int be = 127 - f->bias - f->mbits - 2 + (int)(next_u32() % 40);
      be = be < 0 ? 0 : be > 254 ? 254 : be;
      u = (u & 0x807FFFFFu) | (uint32_t)be << 23;
    }
    float x = from_bits(u);
    if (isnan(x)) continue;
    bad += f->enc(x) != ref_encode(f, x);
  }
  CHECK(bad == 0, "%s: %d random f32 encode wrong", f->name, bad);
}

static void test_specials(const fmt *f) {
  CHECK(f->enc(NAN) == f->nan_out && f->enc(-NAN) == f->nan_out, "%s: NaN -> %#x", f->name, f->enc(NAN));
  CHECK(f->enc(from_bits(0x7F800001u)) == f->nan_out, "%s: signalling NaN", f->name);
  uint32_t top = f->saturates ? f->last : f->last + 1;
  CHECK(f->enc(INFINITY) == top && f->enc(-INFINITY) == (top | f->sign), "%s: inf", f->name);
  CHECK(f->enc(FLT_MAX) == top, "%s: FLT_MAX", f->name);
  CHECK(f->enc(0.0f) == 0 && f->enc(-0.0f) == f->sign, "%s: signed zero", f->name);
  /* f32 subnormals: zero in every format but bf16, which keeps them */
  float sub = from_bits(0x00012345u);
  CHECK(f->enc(sub) == ref_encode(f, sub), "%s: f32 subnormal", f->name);
  if (f->sign != 0x8000) CHECK(f->enc(FLT_MIN) == 0, "%s: FLT_MIN", f->name);
}

static void test_fixed_values(void) {
  static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; c++) {
    CHECK(lpattn_e2m1_to_f32((uint8_t)c) == e2m1[c], "e2m1 %d", c);
    CHECK(lpattn_e2m1_to_f32((uint8_t)(c | 8)) == -e2m1[c], "e2m1 -%d", c);
  }
  /* ties of the FP4 grid, literally */
  static const float tie[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  static const uint8_t tie_code[7] = {0, 2, 2, 4, 4, 6, 6};
  for (int i = 0; i < 7; i++) CHECK(lpattn_f32_to_e2m1(tie[i]) == tie_code[i], "e2m1 tie %g", tie[i]);
  CHECK(lpattn_f32_to_e2m1(6.5f) == 7 && lpattn_f32_to_e2m1(-1e30f) == 0xF, "e2m1 saturation");
  CHECK(lpattn_e4m3_to_f32(0x7E) == 448.0f && lpattn_e4m3_to_f32(0x01) == 0x1p-9f, "e4m3 range");
  CHECK(isnan(lpattn_e4m3_to_f32(0x7F)) && isnan(lpattn_e4m3_to_f32(0xFF)), "e4m3 NaN codes");
  CHECK(lpattn_f32_to_e4m3(464.0f) == 0x7E && lpattn_f32_to_e4m3(-1e9f) == 0xFE, "e4m3 saturation");
  CHECK(lpattn_f32_to_e4m3(0x1p-10f) == 0x00 && lpattn_f32_to_e4m3(0x1.000002p-10f) == 0x01,
        "e4m3 subnormal tie");
  CHECK(lpattn_e5m2_to_f32(0x7B) == 57344.0f && lpattn_e5m2_to_f32(0x01) == 0x1p-16f, "e5m2 range");
  CHECK(lpattn_f32_to_e5m2(61439.996f) == 0x7B && lpattn_f32_to_e5m2(61440.0f) == 0x7C, "e5m2 overflow");
  CHECK(lpattn_f32_to_f16(65519.996f) == 0x7BFF && lpattn_f32_to_f16(65520.0f) == 0x7C00, "f16 overflow");
  CHECK(lpattn_f32_to_f16(0x1p-25f) == 0 && lpattn_f32_to_f16(0x1.000002p-25f) == 1 &&
        lpattn_f32_to_f16(0x1.8p-24f) == 2, "f16 subnormal rounding");
  CHECK(lpattn_f32_to_bf16(from_bits(0x3F808000u)) == 0x3F80 && lpattn_f32_to_bf16(from_bits(0x3F818000u)) == 0x3F82,
        "bf16 ties");
}

static void test_e8m0(void) {
  int bad = 0;
  for (int c = 0; c < 255; c++) bad += (double)lpattn_e8m0_to_f32((uint8_t)c) != ldexp(1.0, c - 127);
  CHECK(bad == 0, "e8m0: %d codes wrong", bad);
  CHECK(isnan(lpattn_e8m0_to_f32(0xFF)), "e8m0 0xFF is NaN");
}

static void test_load_store(void) {
  float f32[3] = {1.5f, -2.25f, 3.0f};
  uint16_t h[3], bf[3];
  for (int i = 0; i < 3; i++) {
    lp_store_f32(h, LPATTN_F16, i, f32[i] + 0x1p-20f);
    lp_store_f32(bf, LPATTN_BF16, i, f32[i]);
  }
  int bad = 0;
  for (int i = 0; i < 3; i++) {
    bad += lp_load_f32(h, LPATTN_F16, i) != f32[i] || lp_load_f32(bf, LPATTN_BF16, i) != f32[i];
    bad += lp_load_f32(f32, LPATTN_F32, i) != f32[i];
  }
  CHECK(bad == 0, "load/store round trip");
  float out[2];
  lp_store_f32(out, LPATTN_F32, 1, 0.1f);
  CHECK(out[1] == 0.1f, "store f32");
}

/* SPEC 2 stochastic rounding: a <= x < b goes to b iff u < (x-a)/(b-a). */
static void test_sr(void) {
  /* x = 0.7 lies between 0.5 and 1: up iff u < 0.4 (f32 arithmetic) */
  float frac = (0.7f - 0.5f) / (1.0f - 0.5f);
  CHECK(lp_e2m1_encode_sr(0.7f, 0.0f) == 2 && lp_e2m1_encode_sr(0.7f, nextafterf(frac, 0)) == 2 &&
        lp_e2m1_encode_sr(0.7f, frac) == 1 && lp_e2m1_encode_sr(0.7f, 0.99f) == 1, "e2m1 SR threshold");
  /* negative: a = -1, b = -0.5; to b iff u < (x - a)/(b - a) = 0.6 */
  float nf = (-0.7f + 1.0f) / (-0.5f + 1.0f);
  CHECK(lp_e2m1_encode_sr(-0.7f, nextafterf(nf, 0)) == 0x9 && lp_e2m1_encode_sr(-0.7f, nf) == 0xA,
        "e2m1 SR negative");
  CHECK(lp_e2m1_encode_sr(7.0f, 0.0f) == 7 && lp_e2m1_encode_sr(-1e30f, 0.5f) == 0xF &&
        lp_e2m1_encode_sr(INFINITY, 0.0f) == 7, "e2m1 SR saturates");
  CHECK(lp_e4m3_encode_sr(500.0f, 0.0f) == 0x7E && lp_e4m3_encode_sr(-448.5f, 0.0f) == 0xFE &&
        lp_e4m3_encode_sr(NAN, 0.0f) == 0x7F, "e4m3 SR saturates");
  /* 0x1p-11 is a quarter of the way from 0 to the smallest E4M3 subnormal */
  CHECK(lp_e4m3_encode_sr(0x1p-11f, 0.2499f) == 0x01 && lp_e4m3_encode_sr(0x1p-11f, 0.25f) == 0x00,
        "e4m3 SR subnormal");
  /* exact values never move; everything else lands on a neighbour */
  static const float us[4] = {0.0f, 0.3f, 0.5f, 0x1.fffffep-1f};
  int bad = 0;
  for (int i = 0; i < 4; i++) {
    for (uint32_t c = 0; c < 256; c++) {
      if (c < 16) bad += lp_e2m1_encode_sr(lpattn_e2m1_to_f32((uint8_t)c), us[i]) != c;
      if ((c & 0x7F) != 0x7F) bad += lp_e4m3_encode_sr(lpattn_e4m3_to_f32((uint8_t)c), us[i]) != c;
    }
  }
  CHECK(bad == 0, "SR moved %d exact values", bad);
  bad = 0;
  for (int i = 0; i < 100000; i++) {
    float x = (float)(next_u32() % 2000000) * 1e-5f - 10.0f, u = (float)(next_u32() >> 8) * 0x1p-24f;
    uint32_t a = lpattn_f32_to_e2m1(x), b = lp_e2m1_encode_sr(x, u);
    float va = lpattn_e2m1_to_f32((uint8_t)a), vb = lpattn_e2m1_to_f32((uint8_t)b);
    /* the SR result is the RNE result or its neighbour on x's other side */
    bad += vb != va && (va - x) * (vb - x) > 0;
    bad += fabsf(vb - x) > (fabsf(x) > 4 ? 2.0f : 1.0f) && fabsf(x) < 6;
    float y = x * 50.0f;
    uint32_t c = lp_e4m3_encode_sr(y, u), r = lpattn_f32_to_e4m3(y);
    float vc = lpattn_e4m3_to_f32((uint8_t)c), vr = lpattn_e4m3_to_f32((uint8_t)r);
    bad += vc != vr && (vr - y) * (vc - y) > 0;
  }
  CHECK(bad == 0, "SR left the two neighbours %d times", bad);
}

int main(void) {
  for (int i = 0; i < NFMT; i++) {
    test_decode(&FMTS[i]);
    test_encode_f16_inputs(&FMTS[i]);
    test_ties(&FMTS[i]);
    test_random_f32(&FMTS[i]);
    test_specials(&FMTS[i]);
  }
  test_fixed_values();
  test_e8m0();
  test_load_store();
  test_sr();
  return test_finish();
}
