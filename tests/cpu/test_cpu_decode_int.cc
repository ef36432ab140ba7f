// The decode's exact-integer FP4 products (backends/cpu/decode-int-inl.h,
// decode-int-x86-inl.h) on every Highway target that has them: the scores
// of a Q row against a tile of 64 keys and P^ . V of a P row, through the
// eight-key kernels and through DotLowInt, must be the same bits on every
// such target (x86 intrinsics and Highway-op kernels alike), and within f32
// rounding of the dequantized values' products in double.
#include <math.h>
#include <string.h>

#include <random>
#include <vector>

#include "cpu.h"
#include "lpk_formats.h"
#include "lpk_quant.h"
#include "lpk_softmax.h"
#include "kvpage.h"
#include "lpattn.h"
#include "testutil.h"

extern "C" int lpattn_cpu_decode_int_probe(int fmt, int64_t D, const uint8_t *head, const float *q,
                                           const float *p, float *s8, float *o8, float *s1, float *o1);

static bool same(float a, float b) {
  uint32_t x, y;
  memcpy(&x, &a, 4), memcpy(&y, &b, 4);
  return x == y || (a != a && b != b);
}

struct Out {
  std::vector<float> s8, o8, s1, o1;
};

// Dequantized values of `n` quantized elements of x (the shared quantizer).
static void qdq(int fmt, const float *x, int n, double *y) {
  std::vector<uint8_t> c(n), s(n);
  float outer;
  lpk_quantize_domain(fmt, 0, 0, 0, NULL, x, 1, n, c.data(), s.data(), &outer);
  const int G = fmt ? 32 : 16;
  for (int i = 0; i < n; i++) y[i] = lpk_dequant(fmt, c[i], s[i / G], outer);
}

static void run_case(int fmt, int D, int trial, std::mt19937 &rng, const int64_t *targets, int nt) {
  const int T = 64, G = fmt ? 32 : 16;
  lpattn_kv_pool_params pp = lpattn_kv_pool_params();
  pp.struct_size = sizeof pp, pp.num_kv_heads = pp.num_q_heads = 1, pp.head_dim = D, pp.page_size = T;
  pp.high_dtype = LPATTN_F16, pp.num_pages = pp.num_slots = 1;
  pp.precision = fmt ? LPATTN_PREC_MXFP4 : LPATTN_PREC_NVFP4;
  lp_kv_layout L;
  CHECK_STATUS(lp_kv_layout_init(&L, &pp), LPATTN_OK);
  std::vector<uint8_t> head(L.head_bytes + 64, 0);
  uint8_t *h = head.data();
  std::uniform_real_distribution<float> U(-1.0f, 1.0f);
  const bool wild = trial % 16 == 15;  // any scale code: NaN, negative, tiny
  auto scode = [&]() -> uint8_t {
    if (wild) return (uint8_t)rng();
    return fmt ? (uint8_t)(112 + rng() % 30) : (uint8_t)(0x08 + rng() % 0x6f);
  };
  for (int i = 0; i < T * D / 2; i++) h[L.kc + i] = (uint8_t)rng(), h[L.vc + i] = (uint8_t)rng();
  for (int i = 0; i < T * D / G; i++) h[L.ks + i] = scode(), h[L.vs + i] = scode();
  if (!fmt) {
    for (int i = 0; i < T; i++) ((float *)(h + L.ko))[i] = ldexpf(0.5f + 0.5f * fabsf(U(rng)), -(int)(rng() % 12));
    for (int i = 0; i < D; i++) ((float *)(h + L.vo))[i] = ldexpf(0.5f + 0.5f * fabsf(U(rng)), -(int)(rng() % 12));
  }
  std::vector<float> q(D), p(T), acc0(D);
  const float qs = ldexpf(1.0f, (int)(rng() % 16) - 8);
  for (int i = 0; i < D; i++) q[i] = U(rng) * qs * (trial % 3 == 0 && i % 7 == 0 ? 20.0f : 1.0f);
  for (int i = 0; i < T; i++) p[i] = trial % 4 == 1 && i % 5 ? 0.0f : fabsf(U(rng));
  if (trial % 5 == 2) p[rng() % T] = 1.0f;
  if (trial % 37 == 36) q[rng() % D] = INFINITY;  // the scalar quantizer's path
  for (int i = 0; i < D; i++) acc0[i] = U(rng);

  // Reference: dequantized Q, P, K and V; products in double.
  std::vector<double> qd(D), pd(T), ref_s(T), mag_s(T), ref_o(D), mag_o(D);
  qdq(fmt, q.data(), D, qd.data());
  qdq(fmt, p.data(), T, pd.data());
  auto kval = [&](int c, int e) {
    const uint8_t b = h[L.kc + c * D / 2 + e / 2], code = e % 2 ? b >> 4 : b & 15;
    return (double)lpk_dequant(fmt, code, h[L.ks + c * (D / G) + e / G], fmt ? 1.0f : ((float *)(h + L.ko))[c]);
  };
  auto vval = [&](int d, int k) {
    const uint8_t b = h[L.vc + d * T / 2 + k / 2], code = k % 2 ? b >> 4 : b & 15;
    return (double)lpk_dequant(fmt, code, h[L.vs + d * (T / G) + k / G], fmt ? 1.0f : ((float *)(h + L.vo))[d]);
  };
  for (int c = 0; c < T; c++) {
    ref_s[c] = mag_s[c] = 0;
    for (int e = 0; e < D; e++) ref_s[c] += qd[e] * kval(c, e), mag_s[c] += fabs(qd[e] * kval(c, e));
  }
  for (int d = 0; d < D; d++) {
    ref_o[d] = acc0[d], mag_o[d] = fabs(acc0[d]);
    for (int k = 0; k < T; k++) ref_o[d] += pd[k] * vval(d, k), mag_o[d] += fabs(pd[k] * vval(d, k));
  }

  Out first;
  const char *first_name = NULL;
  for (int t = 0; t < nt; t++) {
    lpattn_cpu_force_target(targets[t]);
    Out o;
    o.s8.assign(T, 0), o.s1.assign(T, 0), o.o8 = acc0, o.o1 = acc0;
    const int r = lpattn_cpu_decode_int_probe(fmt ? LPATTN_FMT_MXFP4 : LPATTN_FMT_NVFP4, D, h, q.data(), p.data(),
                                              o.s8.data(), o.o8.data(), o.s1.data(), o.o1.data());
    CHECK(r >= 0, "probe arguments");
    if (r != 1) continue;
    const char *name = lpattn_cpu_target_name(targets[t]);
    int bad = 0;
    if (!first_name) {
      first = o, first_name = name;
      for (int c = 0; c < T; c++) {
        const double tol = 1e-6 * mag_s[c] + 1e-30;
        if (!(mag_s[c] < 1e37)) continue;  // NaN scales, or past f32's range
        for (float v : {o.s8[c], o.s1[c]})
          if (!(fabs(v - ref_s[c]) <= tol) && bad++ < 3)
            fprintf(stderr, "fmt %d D %d trial %d key %d: %a, want %a\n", fmt, D, trial, c, v, ref_s[c]);
      }
      for (int d = 0; d < D; d++) {
        const double tol = 1e-6 * mag_o[d] + 1e-30;
        if (!(mag_o[d] < 1e37)) continue;
        for (float v : {o.o8[d], o.o1[d]})
          if (!(fabs(v - ref_o[d]) <= tol) && bad++ < 3)
            fprintf(stderr, "fmt %d D %d trial %d channel %d: %a, want %a\n", fmt, D, trial, d, v, ref_o[d]);
      }
      CHECK(bad == 0, "%s fmt %d D %d trial %d: int products off the double reference", name, fmt, D, trial);
      continue;
    }
    for (int c = 0; c < T; c++)
      if ((!same(o.s8[c], first.s8[c]) || !same(o.s1[c], first.s1[c])) && bad++ < 3)
        fprintf(stderr, "fmt %d D %d trial %d key %d: %s %a %a, %s %a %a\n", fmt, D, trial, c, name, o.s8[c],
                o.s1[c], first_name, first.s8[c], first.s1[c]);
    for (int d = 0; d < D; d++)
      if ((!same(o.o8[d], first.o8[d]) || !same(o.o1[d], first.o1[d])) && bad++ < 3)
        fprintf(stderr, "fmt %d D %d trial %d channel %d: %s %a %a, %s %a %a\n", fmt, D, trial, d, name,
                o.o8[d], o.o1[d], first_name, first.o8[d], first.o1[d]);
    CHECK(bad == 0, "%s vs %s fmt %d D %d trial %d: int products differ", name, first_name, fmt, D, trial);
  }
}

int main(void) {
  int64_t targets[16];
  const int nt = lpattn_cpu_targets(targets, 16);
  float s[64], o[128];
  int n_int = 0;
  static uint8_t zero[65536];
  for (int t = 0; t < nt; t++) {
    lpattn_cpu_force_target(targets[t]);
    const float q[128] = {0}, p[64] = {0};
    const int r = lpattn_cpu_decode_int_probe(LPATTN_FMT_NVFP4, 128, zero, q, p, s, o, s, o);
    printf("target %-8s integer FP4 decode: %s\n", lpattn_cpu_target_name(targets[t]), r == 1 ? "yes" : "no");
    n_int += r == 1;
  }
  std::mt19937 rng(34);
  for (int fmt = 0; fmt < 2; fmt++)
    for (int D = 64; D <= 128; D += 64)
      for (int trial = 0; trial < 120; trial++) run_case(fmt, D, trial, rng, targets, nt);
  lpattn_cpu_force_target(0);
  printf("%d targets with the integer path compared\n", n_int);
  return test_finish();
}
