// The backward's SIMD stochastic rounding (backends/cpu/sr-inl.h) on every
// Highway target: its Philox uniforms against core's (lp_sr_uniform), and
// its SR quantize-dequantize of a domain against the scalar quantizer
// (lpk_quantize_domain with sr = 1, then lpk_dequant), bit for bit.
#include <math.h>
#include <string.h>

#include <random>
#include <vector>

#include "cpu.h"
#include "formats.h"
#include "lpk_formats.h"
#include "lpk_quant.h"
#include "testutil.h"

static uint32_t bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static bool same(float a, float b) { return bits(a) == bits(b) || (a != a && b != b); }

// Keys and indices: small, contiguous runs, strided, and near 2^63 (counters
// whose upper word is not zero); lengths that are not a multiple of the lanes.
static void test_uniforms(int64_t target) {
  std::mt19937_64 rng(11);
  std::vector<int64_t> idx(600);
  std::vector<float> u(600);
  int bad = 0;
  for (int trial = 0; trial < 600; trial++) {
    const uint64_t key = trial % 3 == 0 ? (uint64_t)trial : rng();
    const int n = 1 + (int)(rng() % (trial % 5 ? 129 : 600)), kind = trial % 4;
    const int64_t base = kind == 3 ? (int64_t)(rng() >> 1) : (int64_t)(rng() % 100000);
    const int64_t stride = kind == 1 ? 1 : kind == 2 ? 1 + (int64_t)(rng() % 300) : 0;
    for (int e = 0; e < n; e++) idx[e] = stride ? base + e * stride : (int64_t)(rng() >> 1);
    lpattn_cpu_sr_uniforms(key, idx.data(), n, u.data());
    for (int e = 0; e < n; e++)
      if ((bits(u[e]) != bits(lp_sr_uniform(key, (uint64_t)idx[e])) ||
           bits(lpk_sr_uniform(key, (uint64_t)idx[e])) != bits(u[e])) && bad++ < 5)
        fprintf(stderr, "%s key %llx idx %lld: %a, core %a\n", lpattn_cpu_target_name(target),
                (unsigned long long)key, (long long)idx[e], u[e], lp_sr_uniform(key, (uint64_t)idx[e]));
  }
  CHECK(bad == 0, "%s: %d SR uniforms differ from core's", lpattn_cpu_target_name(target), bad);
  bad = 0;  // runs of consecutive indices, starting at every byte of a block, past several vectors of blocks
  for (int trial = 0; trial < 400; trial++) {
    const uint64_t key = rng(), i0 = trial % 2 ? rng() >> 1 : (uint64_t)(rng() % 1000);
    const int n = 1 + (int)(rng() % (trial % 3 ? 129 : 600));
    lpattn_cpu_sr_uniforms_run(key, i0, n, u.data());
    for (int e = 0; e < n; e++)
      if (bits(u[e]) != bits(lp_sr_uniform(key, i0 + (uint64_t)e)) && bad++ < 5)
        fprintf(stderr, "%s run key %llx i0 %llu e %d: %a, core %a\n", lpattn_cpu_target_name(target),
                (unsigned long long)key, (unsigned long long)i0, e, u[e], lp_sr_uniform(key, i0 + (uint64_t)e));
  }
  CHECK(bad == 0, "%s: %d SR uniforms of runs differ from core's", lpattn_cpu_target_name(target), bad);
}

// Domains built to sit on the grids (ties, exact grid values), tiny, huge,
// zero groups, mixed signs, and now and then a non-finite value.
static void test_qdq(int64_t target) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f);
  const int sizes[4] = {16, 32, 64, 128};
  std::vector<float> x(128), u(128), got(128), want(128);
  std::vector<int64_t> idx(128);
  std::vector<uint8_t> codes(128), scales(128);
  int bad = 0;
  for (int trial = 0; trial < 3000; trial++) {
    const int n = sizes[trial % 4], kind = trial / 4 % 6;
    for (int i = 0; i < n; i++) {
      float v = U(rng);
      if (kind == 1) v = (float)((int)(rng() % 97) - 48) / 16.0f;  // on / between grid points
      if (kind == 2) v = ldexpf(v, -(int)(rng() % 150));            // tiny, subnormal
      if (kind == 3) v = ldexpf(v, (int)(rng() % 100));             // large
      if (kind == 4) v = i < 16 ? 0.0f : v;                          // a zero group
      if (kind == 5) v = i == 3 ? 6.0f : ldexpf((float)(rng() % 64), -(int)(rng() % 12));
      x[i] = v;
      idx[i] = (int64_t)(trial * 131 + i * 7);
    }
    if (trial % 53 == 0) x[rng() % n] = trial % 2 ? NAN : -INFINITY;
    const uint64_t key = 0x9E3779B97F4A7C15ull * (uint64_t)(trial + 1);
    lpattn_cpu_sr_uniforms(key, idx.data(), n, u.data());
    for (int fmt = 0; fmt < 3; fmt++)
      for (int up = 0; up < (fmt == 1 ? 2 : 1) && !(fmt == 1 && n < 32); up++) {
        lpattn_cpu_sr_qdq(fmt, up, x.data(), u.data(), n, got.data());
        float outer;
        lpk_quantize_domain(fmt, up, 1, key, idx.data(), x.data(), 1, n, codes.data(), scales.data(), &outer);
        for (int i = 0; i < n; i++) want[i] = lpk_dequant(fmt, codes[i], scales[i / (fmt ? 32 : 16)], outer);
        for (int i = 0; i < n; i++)
          if (!same(got[i], want[i]) && bad++ < 5)
            fprintf(stderr, "%s fmt %d up %d kind %d n %d: x %a u %a -> %a, want %a\n",
                    lpattn_cpu_target_name(target), fmt, up, kind, n, x[i], u[i], got[i], want[i]);
      }
  }
  CHECK(bad == 0, "%s: %d SR values differ from the scalar quantizer", lpattn_cpu_target_name(target), bad);
}

// The column form (a domain per column, lanes across columns) against the
// domain form on each gathered column.
static void test_columns(int64_t target) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f), U01(0.0f, 1.0f);
  const int shapes[4][2] = {{64, 64}, {32, 16}, {128, 32}, {16, 48}};
  std::vector<float> x(128 * 64), u(128 * 64), got(128 * 64), col(128), cu(128), want(128);
  int bad = 0, taken = 0;
  for (int trial = 0; trial < 200; trial++) {
    const int R = shapes[trial % 4][0], C = shapes[trial % 4][1], kind = trial / 4 % 4;
    for (int i = 0; i < R * C; i++) {
      float v = U(rng);
      if (kind == 1) v = (float)((int)(rng() % 97) - 48) / 16.0f;
      if (kind == 2) v = ldexpf(v, -(int)(rng() % 150));
      if (kind == 3) v = i % C == 3 ? 0.0f : (i / C) % 16 == 5 && i % C == 7 ? 0.0f : v;  // a zero column
      x[i] = v, u[i] = (float)(2 * (int)(U01(rng) * 256.0f) + 1) * 0x1p-9f;  // SPEC 2's (2r + 1) * 2^-9
    }
    if (kind == 3) for (int r = 0; r < 16 && r < R; r++) x[r * C + 9] = 0.0f;  // a zero group
    for (int fmt = 0; fmt < 3; fmt++)
      for (int up = 0; up < (fmt == 1 ? 2 : 1) && !(fmt == 1 && R % 32); up++) {
        if (!lpattn_cpu_sr_qdq_columns(fmt, up, x.data(), u.data(), R, C, got.data())) continue;
        taken++;
        for (int c = 0; c < C; c++) {
          for (int r = 0; r < R; r++) col[r] = x[r * C + c], cu[r] = u[r * C + c];
          lpattn_cpu_sr_qdq(fmt, up, col.data(), cu.data(), R, want.data());
          for (int r = 0; r < R; r++)
            if (!same(got[r * C + c], want[r]) && bad++ < 5)
              fprintf(stderr, "%s columns fmt %d up %d R %d C %d (%d, %d): x %a -> %a, want %a\n",
                      lpattn_cpu_target_name(target), fmt, up, R, C, r, c, col[r], got[r * C + c], want[r]);
        }
      }
  }
  CHECK(taken > 0, "%s: the column form took no matrix", lpattn_cpu_target_name(target));
  CHECK(bad == 0, "%s: %d column-form SR values differ", lpattn_cpu_target_name(target), bad);
  x[5] = NAN;  // non-finite: not taken
  CHECK(!lpattn_cpu_sr_qdq_columns(0, 0, x.data(), u.data(), 64, 64, got.data()), "NaN matrix taken");
}

int main(void) {
  int64_t targets[16];
  const int nt = lpattn_cpu_targets(targets, 16);
  for (int t = 0; t < nt; t++) {
    lpattn_cpu_force_target(targets[t]);
    test_uniforms(targets[t]);
    test_qdq(targets[t]);
    test_columns(targets[t]);
  }
  lpattn_cpu_force_target(0);
  return test_finish();
}
