// The CPU backend's quantizers (backends/math/lpk_formats.h and lpk_quant.h,
// the math every backend compiles) against core's scalar formats and domain
// quantizer: every code, scale and outer scale must be bit-identical.
#include <math.h>
#include <string.h>

#include <random>
#include <vector>

#include "cpu.h"
#include "formats.h"
#include "lpk_formats.h"
#include "lpk_quant.h"
#include "lpk_softmax.h"
#include "lpattn.h"
#include "testutil.h"

static float from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

static uint32_t bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

// Scalar encoders over a dense sweep of f32 bit patterns (every 2^-11 of the
// mantissa, both signs, all exponents, plus specials).
static void test_scalar(void) {
  int bad_e2m1 = 0, bad_e4m3 = 0, bad_f16 = 0, bad_dec = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += 4093) {
    const float x = from_bits((uint32_t)u);
    bad_e2m1 += lpk_e2m1_encode(x) != lpattn_f32_to_e2m1(x);
    bad_e4m3 += lpk_e4m3_encode(x) != lpattn_f32_to_e4m3(x);
    if (x == x) bad_f16 += bits(lpk_round_f16(x)) != bits(lpattn_f16_to_f32(lpattn_f32_to_f16(x)));
  }
  const float specials[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 7.0f, 448.0f,
                            464.0f, 480.0f, 0.0f, -0.0f, 1.0f / 1024, 65504.0f, 65520.0f, INFINITY,
                            -INFINITY, NAN};
  for (float s : specials) {
    for (float x : {s, -s}) {
      bad_e2m1 += lpk_e2m1_encode(x) != lpattn_f32_to_e2m1(x);
      bad_e4m3 += lpk_e4m3_encode(x) != lpattn_f32_to_e4m3(x);
    }
  }
  for (int c = 0; c < 256; c++) {
    const float a = lpk_e4m3_decode((uint8_t)c), b = lpattn_e4m3_to_f32((uint8_t)c);
    bad_dec += !(a == b || (a != a && b != b));
    bad_dec += c < 255 && lpk_e8m0_decode((uint8_t)c) != lpattn_e8m0_to_f32((uint8_t)c);
    bad_dec += c < 16 && lpk_e2m1_decode((uint8_t)c) != lpattn_e2m1_to_f32((uint8_t)c);
  }
  // The value forms of the element step (P's quantizers) on their domains.
  for (uint32_t u = 0; u <= 0x43e00000u; u += 511) {  // [0, 448]
    const float x = from_bits(u);
    bad_e4m3 += bits(lpk_e4m3_round(x)) != bits(lpattn_e4m3_to_f32(lpattn_f32_to_e4m3(x)));
    if (x < 1e30f) bad_e2m1 += bits(lpk_e2m1_round(x)) != bits(lpattn_e2m1_to_f32(lpattn_f32_to_e2m1(x)));
  }
  CHECK(bad_e2m1 == 0, "%d e2m1 encodings differ", bad_e2m1);
  CHECK(bad_e4m3 == 0, "%d e4m3 encodings differ", bad_e4m3);
  CHECK(bad_f16 == 0, "%d f16 roundings differ", bad_f16);
  CHECK(bad_dec == 0, "%d decodings differ", bad_dec);
}

// Whole domains: random data at many scales, zero groups, subnormals and
// non-finite values, every format and both MXFP4 scale rules.
static void test_domains(void) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f);
  const int n = 128;
  std::vector<float> x(n);
  std::vector<uint8_t> c1(n), c2(n), s1(n), s2(n);
  int bad = 0, cases = 0;
  for (int trial = 0; trial < 3000; trial++) {
    const float scale = ldexpf(1.0f, (int)(rng() % 280) - 150);
    for (int i = 0; i < n; i++) x[i] = U(rng) * scale;
    if (trial % 7 == 1)
      for (int i = 16; i < 48; i++) x[i] = 0.0f;  // zero groups
    if (trial % 11 == 2) x[rng() % n] = trial % 2 ? NAN : INFINITY;
    if (trial % 13 == 3) x[rng() % n] = 1e30f;  // one huge value: others underflow
    for (int fmt = 0; fmt < 3; fmt++)
      for (int up = 0; up < (fmt == 1 ? 4 : 2); up++) {  // bit 0: MXFP4 round-up, bit 1: SR
        const lpattn_format f = fmt == 0 ? LPATTN_FMT_NVFP4 : fmt == 1 ? LPATTN_FMT_MXFP4 : LPATTN_FMT_FP8;
        const int sr = fmt == 1 ? up >> 1 : up, mx = fmt == 1 ? up & 1 : 0;
        const lp_quant_cfg cfg = {f, sr, 1234u + (uint64_t)trial, mx};
        float o1, o2;
        const int G = fmt == 0 ? 16 : fmt == 1 ? 32 : n;
        int r1 = lpk_quantize_domain(fmt, mx, sr, cfg.seed, NULL, x.data(), 1, n, c1.data(), s1.data(), &o1);
        int r2 = lp_quantize_domain(&cfg, x.data(), 1, n, NULL, c2.data(), s2.data(), &o2);
        bool same = r1 == r2 && memcmp(c1.data(), c2.data(), n) == 0 &&
                    (fmt == 2 || memcmp(s1.data(), s2.data(), n / G) == 0) &&
                    (bits(o1) == bits(o2) || (o1 != o1 && o2 != o2));
        for (int i = 0; same && i < n; i++) {
          const float a = lpk_dequant(fmt, c1[i], s1[i / G], o1);
          const float b = lp_dequant_elem(f, c2[i], s2[i / G], o2);
          same = bits(a) == bits(b) || (a != a && b != b);
        }
        if (!same && bad < 5)
          fprintf(stderr, "domain trial %d fmt %d up %d scale %g differs\n", trial, fmt, up, scale);
        bad += !same;
        cases++;
      }
  }
  CHECK(bad == 0, "%d of %d domains differ", bad, cases);
}

// The kernels' SIMD domain quantizer (quantp-inl.h; P rows, Q/K rows, V
// columns) against the scalar one, bit for bit, on every Highway target; rows built to hit rounding
// ties (small multiples of powers of two), tiny and negative values too.
static void test_simd_p(void) {
  int64_t targets[16];
  const int nt = lpattn_cpu_targets(targets, 16);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  const int n = 64;
  std::vector<float> p(n), got(n), want(n);
  std::vector<uint8_t> codes(n), scales(n);
  for (int t = 0; t < nt; t++) {
    lpattn_cpu_force_target(targets[t]);
    int bad = 0;
    for (int trial = 0; trial < 4000; trial++) {
      const int kind = trial % 5;
      for (int i = 0; i < n; i++) {
        float x = U(rng);
        if (kind == 1) x = (float)(rng() % 97) / 16.0f;               // ties
        if (kind == 2) x = ldexpf(x, -(int)(rng() % 140));             // tiny
        if (kind == 3) x = (float)(rng() % 33) / 32.0f * (rng() % 2 ? 1.0f : -1.0f);
        if (kind == 4) x = i == 5 ? 1.0f : ldexpf((float)(rng() % 64), -(int)(rng() % 12));
        p[i] = x;
      }
      if (trial % 97 == 0) p[rng() % n] = NAN;
      for (int fmt = 0; fmt < 4; fmt++)
        for (int up = 0; up < (fmt == 1 ? 2 : 1); up++) {
          lpattn_cpu_quantize_p_row(fmt, up, p.data(), n, got.data());
          if (fmt == lpattn_cpu::QP_FP8_P) {
            for (int i = 0; i < n; i++)
              want[i] = lpk_e4m3_decode(lpk_e4m3_encode(p[i] * 448.0f)) * (1.0f / 448.0f);
          } else {  // QP_NVFP4/MXFP4/FP8 are the scalar quantizer's format codes
            float outer;
            lpk_quantize_domain(fmt, up, 0, 0, NULL, p.data(), 1, n, codes.data(), scales.data(), &outer);
            for (int i = 0; i < n; i++)
              want[i] = lpk_dequant(fmt, codes[i], scales[i / (fmt ? 32 : 16)], outer);
          }
          for (int i = 0; i < n; i++)
            if (bits(got[i]) != bits(want[i]) && !(got[i] != got[i] && want[i] != want[i])) {
              if (bad++ < 5)
                fprintf(stderr, "%s fmt %d up %d kind %d: p %a -> %a, want %a\n",
                        lpattn_cpu_target_name(targets[t]), fmt, up, kind, p[i], got[i], want[i]);
            }
        }
    }
    CHECK(bad == 0, "%s: %d SIMD P values differ", lpattn_cpu_target_name(targets[t]), bad);
  }
  lpattn_cpu_force_target(0);
}

// lpattn_quantize / lpattn_dequantize through the cpu context give ref's bits
// for every format, axis, rounding mode and input dtype.
static void test_api(void) {
  lpattn_ctx *cpu = NULL, *ref = NULL;
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);  // qemu-user cannot start threads: see meson.build
  cp.num_threads = getenv("LPATTN_CPU_TEST_THREADS") ? atoi(getenv("LPATTN_CPU_TEST_THREADS")) : 2;
  if (lpattn_create(LPATTN_BACKEND_CPU, &cp, &cpu) != LPATTN_OK) return;
  CHECK_STATUS(lpattn_create(LPATTN_BACKEND_REF, NULL, &ref), LPATTN_OK);
  std::mt19937 rng(9);
  std::normal_distribution<float> N(0.0f, 3.0f);
  const int64_t shape[4] = {1, 2, 96, 64};
  const int64_t n = 2 * 96 * 64;
  std::vector<float> x(n), y[2];
  for (auto &e : x) e = N(rng);
  x[77] = NAN;
  lpattn_tensor xt = lpattn_tensor_4d(x.data(), LPATTN_F32, 1, 2, 96, 64);
  int bad = 0;
  for (int f = 0; f < 3; f++)
    for (int axis = 0; axis < 2; axis++)
      for (int sr = 0; sr < 2; sr++) {
        lpattn_quant_params qp;
        lpattn_quant_params_init(&qp);
        qp.format = (lpattn_format)f, qp.axis = (lpattn_axis)axis, qp.tile = 64;
        qp.rounding = sr ? LPATTN_ROUND_STOCHASTIC : LPATTN_ROUND_NEAREST_EVEN, qp.seed = 42;
        size_t cb, sb, oc;
        CHECK_STATUS(lpattn_qtensor_sizes(qp.format, qp.axis, 64, shape, &cb, &sb, &oc), LPATTN_OK);
        std::vector<uint8_t> codes[2], scales[2];
        std::vector<float> outer[2];
        for (int i = 0; i < 2; i++) {
          codes[i].assign(cb, 0xAA), scales[i].assign(sb + 1, 0xAA), outer[i].assign(oc + 1, -1.0f);
          lpattn_qtensor q = {qp.format, qp.axis, 64, {1, 2, 96, 64}, codes[i].data(),
                              scales[i].data(), outer[i].data()};
          CHECK_STATUS(lpattn_quantize(i ? ref : cpu, &xt, &q, &qp), LPATTN_OK);
          y[i].assign(n, 0.0f);
          lpattn_tensor yt = lpattn_tensor_4d(y[i].data(), LPATTN_F32, 1, 2, 96, 64);
          CHECK_STATUS(lpattn_dequantize(i ? ref : cpu, &q, &yt), LPATTN_OK);
        }
        bad += codes[0] != codes[1] || scales[0] != scales[1] ||
               memcmp(outer[0].data(), outer[1].data(), 4 * oc) != 0 ||
               memcmp(y[0].data(), y[1].data(), 4 * n) != 0;
      }
  CHECK(bad == 0, "%d quantize/dequantize calls differ between cpu and ref", bad);
  lpattn_free(cpu);
  lpattn_free(ref);
}

// The backend's input loader: every f16 and bf16 code, exactly.
static void test_load_row(void) {
  std::vector<uint16_t> h(65536);
  std::vector<float> got(65536);
  for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  int bad = 0;
  for (lpattn_dtype dt : {LPATTN_F16, LPATTN_BF16}) {
    lpattn_tensor t = lpattn_tensor_4d(h.data(), dt, 1, 1, 1, 65536);
    lpattn_cpu::LoadRow(&t, 0, 1, 65536, got.data());
    for (int i = 0; i < 65536; i++) {
      const float want = dt == LPATTN_F16 ? lpattn_f16_to_f32(h[i]) : lpattn_bf16_to_f32(h[i]);
      bad += bits(got[i]) != bits(want) && !(got[i] != got[i] && want != want);
    }
  }
  CHECK(bad == 0, "%d f16/bf16 loads differ", bad);
}

// The SR value forms (the backward's in-kernel P and dS quantizers on the
// GPU) against core's SR encoders, decoded: finite x of both signs over a
// sweep of bit patterns, uniforms at the edges and at random.
static void test_sr_values(void) {
  std::mt19937 rng(5);
  int bad2 = 0, bad3 = 0;
  for (uint64_t b = 0; b < (1ull << 32); b += 65521) {
    const float x = from_bits((uint32_t)b);
    if (!isfinite(x)) continue;
    const float us[] = {0.0f, 5.9604644775390625e-08f, 0.5f, 0.99999994f,
                        (float)(rng() >> 8) * 5.9604644775390625e-08f, (float)(rng() >> 8) * 5.9604644775390625e-08f};
    for (float u : us) {
      bad2 += bits(lpk_e2m1_sr(x, u)) != bits(lpattn_e2m1_to_f32(lp_e2m1_encode_sr(x, u)));
      bad3 += bits(lpk_e4m3_sr(x, u)) != bits(lpattn_e4m3_to_f32(lp_e4m3_encode_sr(x, u)));
    }
  }
  // values between the grid points of every binade, to exercise the picks
  for (int i = 0; i < 200000; i++) {
    const float x = ((float)(rng() >> 8) * 5.9604644775390625e-08f - 0.5f) * ldexpf(1.0f, (int)(rng() % 30) - 16);
    const float u = (float)(rng() >> 8) * 5.9604644775390625e-08f;
    bad2 += bits(lpk_e2m1_sr(x, u)) != bits(lpattn_e2m1_to_f32(lp_e2m1_encode_sr(x, u)));
    bad3 += bits(lpk_e4m3_sr(x, u)) != bits(lpattn_e4m3_to_f32(lp_e4m3_encode_sr(x, u)));
  }
  CHECK(bad2 == 0, "%d e2m1 SR values differ", bad2);
  CHECK(bad3 == 0, "%d e4m3 SR values differ", bad3);
}

int main(void) {
  test_load_row();
  test_api();
  test_scalar();
  test_sr_values();
  test_domains();
  test_simd_p();
  return test_finish();
}
