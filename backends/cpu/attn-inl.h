// Highway SIMD attention engine (SPEC 3-6, SEMANTICS), one query tile of one
// (batch, q head) per call. Included once per target by the generated kernels
// (gen/lpattn_cpu_attn*.cc); the scalar per-row softmax state and the
// quantizers come from backends/math/lpk_*.h, shared with the GPU templates.
#if defined(LPATTN_CPU_ATTN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_CPU_ATTN_INL_H_
#undef LPATTN_CPU_ATTN_INL_H_
#else
#define LPATTN_CPU_ATTN_INL_H_
#endif

#include <math.h>

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "cpu.h"
#include "quantp-inl.h"
#include "formats.h"
#include "fp8s.h"
#include "tiles.h"
#include "window.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
// At most 16 lanes, so every vector divides Bk and D (multiples of 16/32).
using DF = hn::CappedTag<float, 16>;

// R (1 or 4) rows of S[r][c] = sum_d A[r][d] * Bt[d][c] over all Bk columns.
// Named accumulators, not arrays: SVE vectors cannot be array elements.
template <int kD, int R>
HWY_INLINE void ScoreRows(const float *A, const float *Bt, int64_t D_rt, int64_t Bk, float *S,
                          int64_t c_begin) {
  static_assert(R == 1 || R == 4, "R is 1 or 4");
  const DF df;
  const int64_t N = hn::Lanes(df), D = kD ? kD : D_rt;
  for (int64_t c = c_begin; c < Bk; c += 2 * N) {
    auto s00 = hn::Zero(df), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00,
         s31 = s00;
    const float *b = Bt + c;
    for (int64_t d = 0; d < D; d++, b += Bk) {
      const auto b0 = hn::LoadU(df, b), b1 = hn::LoadU(df, b + N);
      const auto x0 = hn::Set(df, A[d]);
      s00 = hn::MulAdd(x0, b0, s00), s01 = hn::MulAdd(x0, b1, s01);
      if (R == 4) {
        const auto x1 = hn::Set(df, A[D + d]), x2 = hn::Set(df, A[2 * D + d]),
                   x3 = hn::Set(df, A[3 * D + d]);
        s10 = hn::MulAdd(x1, b0, s10), s11 = hn::MulAdd(x1, b1, s11);
        s20 = hn::MulAdd(x2, b0, s20), s21 = hn::MulAdd(x2, b1, s21);
        s30 = hn::MulAdd(x3, b0, s30), s31 = hn::MulAdd(x3, b1, s31);
      }
    }
    hn::StoreU(s00, df, S + c), hn::StoreU(s01, df, S + c + N);
    if (R == 4) {
      hn::StoreU(s10, df, S + Bk + c), hn::StoreU(s11, df, S + Bk + c + N);
      hn::StoreU(s20, df, S + 2 * Bk + c), hn::StoreU(s21, df, S + 2 * Bk + c + N);
      hn::StoreU(s30, df, S + 3 * Bk + c), hn::StoreU(s31, df, S + 3 * Bk + c + N);
    }
  }
}

// Targets with 32 vector registers take 4 rows x 4 vectors (16 accumulators:
// enough independent FMAs to cover their latency on two pipes); x86 below
// AVX3 has 16 and keeps 4 x 2.
constexpr bool kWide = !(HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3);

// Columns [c, c + 4N) of 4 rows.
template <int kD>
HWY_INLINE void ScoreRowsWide(const float *A, const float *Bt, int64_t D_rt, int64_t Bk, float *S,
                              int64_t c) {
  const DF df;
  const int64_t N = hn::Lanes(df), D = kD ? kD : D_rt;
  auto s00 = hn::Zero(df), s01 = s00, s02 = s00, s03 = s00, s10 = s00, s11 = s00, s12 = s00,
       s13 = s00, s20 = s00, s21 = s00, s22 = s00, s23 = s00, s30 = s00, s31 = s00, s32 = s00,
       s33 = s00;
  const float *b = Bt + c;
  for (int64_t d = 0; d < D; d++, b += Bk) {
    const auto b0 = hn::LoadU(df, b), b1 = hn::LoadU(df, b + N), b2 = hn::LoadU(df, b + 2 * N),
               b3 = hn::LoadU(df, b + 3 * N);
    const auto x0 = hn::Set(df, A[d]), x1 = hn::Set(df, A[D + d]), x2 = hn::Set(df, A[2 * D + d]),
               x3 = hn::Set(df, A[3 * D + d]);
    s00 = hn::MulAdd(x0, b0, s00), s01 = hn::MulAdd(x0, b1, s01);
    s02 = hn::MulAdd(x0, b2, s02), s03 = hn::MulAdd(x0, b3, s03);
    s10 = hn::MulAdd(x1, b0, s10), s11 = hn::MulAdd(x1, b1, s11);
    s12 = hn::MulAdd(x1, b2, s12), s13 = hn::MulAdd(x1, b3, s13);
    s20 = hn::MulAdd(x2, b0, s20), s21 = hn::MulAdd(x2, b1, s21);
    s22 = hn::MulAdd(x2, b2, s22), s23 = hn::MulAdd(x2, b3, s23);
    s30 = hn::MulAdd(x3, b0, s30), s31 = hn::MulAdd(x3, b1, s31);
    s32 = hn::MulAdd(x3, b2, s32), s33 = hn::MulAdd(x3, b3, s33);
  }
  float *o = S + c;
  hn::StoreU(s00, df, o), hn::StoreU(s01, df, o + N), hn::StoreU(s02, df, o + 2 * N);
  hn::StoreU(s03, df, o + 3 * N);
  o += Bk;
  hn::StoreU(s10, df, o), hn::StoreU(s11, df, o + N), hn::StoreU(s12, df, o + 2 * N);
  hn::StoreU(s13, df, o + 3 * N);
  o += Bk;
  hn::StoreU(s20, df, o), hn::StoreU(s21, df, o + N), hn::StoreU(s22, df, o + 2 * N);
  hn::StoreU(s23, df, o + 3 * N);
  o += Bk;
  hn::StoreU(s30, df, o), hn::StoreU(s31, df, o + N), hn::StoreU(s32, df, o + 2 * N);
  hn::StoreU(s33, df, o + 3 * N);
}

template <int kD>
HWY_INLINE void Scores(const float *A, const float *Bt, int64_t D_rt, int64_t Bk, int64_t nr,
                       float *S) {
  const int64_t D = kD ? kD : D_rt, N = hn::Lanes(DF());
  int64_t r = 0;
  for (; r + 4 <= nr; r += 4) {
    int64_t c = 0;
    if (kWide)
      for (; c + 4 * N <= Bk; c += 4 * N) ScoreRowsWide<kD>(A + r * D, Bt, D, Bk, S + r * Bk, c);
    if (c < Bk) ScoreRows<kD, 4>(A + r * D, Bt, D, Bk, S + r * Bk, c);
  }
  for (; r < nr; r++) ScoreRows<kD, 1>(A + r * D, Bt, D, Bk, S + r * Bk, 0);
}

// acc[d] = alpha * acc[d] + sum_{c < n} p[c] * V[c][d]. Zero weights are
// skipped (FP4 P has many), which never changes a finite result.
template <int kD>
HWY_INLINE void AccumPV(const float *p, const float *V, int64_t D_rt, int64_t n, float alpha,
                        float *acc) {
  const DF df;
  const int64_t N = hn::Lanes(df), D = kD ? kD : D_rt;
  const auto va = hn::Set(df, alpha);
  int64_t d = 0;
  for (; d + 2 * N <= D; d += 2 * N) {
    auto a0 = hn::Mul(hn::LoadU(df, acc + d), va), a1 = hn::Mul(hn::LoadU(df, acc + d + N), va);
    for (int64_t c = 0; c < n; c++) {
      if (p[c] == 0.0f) continue;
      const auto x = hn::Set(df, p[c]);
      a0 = hn::MulAdd(x, hn::LoadU(df, V + c * D + d), a0);
      a1 = hn::MulAdd(x, hn::LoadU(df, V + c * D + d + N), a1);
    }
    hn::StoreU(a0, df, acc + d);
    hn::StoreU(a1, df, acc + d + N);
  }
  for (; d < D; d += N) {  // D is a multiple of 16, N divides 16
    auto a0 = hn::Mul(hn::LoadU(df, acc + d), va);
    for (int64_t c = 0; c < n; c++)
      if (p[c] != 0.0f) a0 = hn::MulAdd(hn::Set(df, p[c]), hn::LoadU(df, V + c * D + d), a0);
    hn::StoreU(a0, df, acc + d);
  }
}

// Four rows at once: acc_r = alpha_r * acc_r + sum_{c < n} P[r][c] * V[c]
// (P rows Bk apart, acc rows D apart): each V load feeds four FMAs.
template <int kD>
HWY_INLINE void AccumPV4(const float *P, int64_t Bk, const float *V, int64_t D_rt, int64_t n,
                         const float *alpha, float *acc) {
  const DF df;
  const int64_t N = hn::Lanes(df), D = kD ? kD : D_rt;
  const float *p0 = P, *p1 = P + Bk, *p2 = P + 2 * Bk, *p3 = P + 3 * Bk;
  float *c0 = acc, *c1 = acc + D, *c2 = acc + 2 * D, *c3 = acc + 3 * D;
  const auto w0 = hn::Set(df, alpha[0]), w1 = hn::Set(df, alpha[1]), w2 = hn::Set(df, alpha[2]),
             w3 = hn::Set(df, alpha[3]);
  int64_t d = 0;
  if (kWide)
    for (; d + 4 * N <= D; d += 4 * N) {
      auto a00 = hn::Mul(hn::LoadU(df, c0 + d), w0), a01 = hn::Mul(hn::LoadU(df, c0 + d + N), w0);
      auto a02 = hn::Mul(hn::LoadU(df, c0 + d + 2 * N), w0);
      auto a03 = hn::Mul(hn::LoadU(df, c0 + d + 3 * N), w0);
      auto a10 = hn::Mul(hn::LoadU(df, c1 + d), w1), a11 = hn::Mul(hn::LoadU(df, c1 + d + N), w1);
      auto a12 = hn::Mul(hn::LoadU(df, c1 + d + 2 * N), w1);
      auto a13 = hn::Mul(hn::LoadU(df, c1 + d + 3 * N), w1);
      auto a20 = hn::Mul(hn::LoadU(df, c2 + d), w2), a21 = hn::Mul(hn::LoadU(df, c2 + d + N), w2);
      auto a22 = hn::Mul(hn::LoadU(df, c2 + d + 2 * N), w2);
      auto a23 = hn::Mul(hn::LoadU(df, c2 + d + 3 * N), w2);
      auto a30 = hn::Mul(hn::LoadU(df, c3 + d), w3), a31 = hn::Mul(hn::LoadU(df, c3 + d + N), w3);
      auto a32 = hn::Mul(hn::LoadU(df, c3 + d + 2 * N), w3);
      auto a33 = hn::Mul(hn::LoadU(df, c3 + d + 3 * N), w3);
      const float *v = V + d;
      for (int64_t c = 0; c < n; c++, v += D) {
        const auto v0 = hn::LoadU(df, v), v1 = hn::LoadU(df, v + N), v2 = hn::LoadU(df, v + 2 * N),
                   v3 = hn::LoadU(df, v + 3 * N);
        const auto x0 = hn::Set(df, p0[c]), x1 = hn::Set(df, p1[c]), x2 = hn::Set(df, p2[c]),
                   x3 = hn::Set(df, p3[c]);
        a00 = hn::MulAdd(x0, v0, a00), a01 = hn::MulAdd(x0, v1, a01);
        a02 = hn::MulAdd(x0, v2, a02), a03 = hn::MulAdd(x0, v3, a03);
        a10 = hn::MulAdd(x1, v0, a10), a11 = hn::MulAdd(x1, v1, a11);
        a12 = hn::MulAdd(x1, v2, a12), a13 = hn::MulAdd(x1, v3, a13);
        a20 = hn::MulAdd(x2, v0, a20), a21 = hn::MulAdd(x2, v1, a21);
        a22 = hn::MulAdd(x2, v2, a22), a23 = hn::MulAdd(x2, v3, a23);
        a30 = hn::MulAdd(x3, v0, a30), a31 = hn::MulAdd(x3, v1, a31);
        a32 = hn::MulAdd(x3, v2, a32), a33 = hn::MulAdd(x3, v3, a33);
      }
      hn::StoreU(a00, df, c0 + d), hn::StoreU(a01, df, c0 + d + N);
      hn::StoreU(a02, df, c0 + d + 2 * N), hn::StoreU(a03, df, c0 + d + 3 * N);
      hn::StoreU(a10, df, c1 + d), hn::StoreU(a11, df, c1 + d + N);
      hn::StoreU(a12, df, c1 + d + 2 * N), hn::StoreU(a13, df, c1 + d + 3 * N);
      hn::StoreU(a20, df, c2 + d), hn::StoreU(a21, df, c2 + d + N);
      hn::StoreU(a22, df, c2 + d + 2 * N), hn::StoreU(a23, df, c2 + d + 3 * N);
      hn::StoreU(a30, df, c3 + d), hn::StoreU(a31, df, c3 + d + N);
      hn::StoreU(a32, df, c3 + d + 2 * N), hn::StoreU(a33, df, c3 + d + 3 * N);
    }
  for (; d + 2 * N <= D; d += 2 * N) {
    auto a00 = hn::Mul(hn::LoadU(df, c0 + d), w0), a01 = hn::Mul(hn::LoadU(df, c0 + d + N), w0);
    auto a10 = hn::Mul(hn::LoadU(df, c1 + d), w1), a11 = hn::Mul(hn::LoadU(df, c1 + d + N), w1);
    auto a20 = hn::Mul(hn::LoadU(df, c2 + d), w2), a21 = hn::Mul(hn::LoadU(df, c2 + d + N), w2);
    auto a30 = hn::Mul(hn::LoadU(df, c3 + d), w3), a31 = hn::Mul(hn::LoadU(df, c3 + d + N), w3);
    const float *v = V + d;
    for (int64_t c = 0; c < n; c++, v += D) {
      const auto v0 = hn::LoadU(df, v), v1 = hn::LoadU(df, v + N);
      const auto x0 = hn::Set(df, p0[c]), x1 = hn::Set(df, p1[c]), x2 = hn::Set(df, p2[c]),
                 x3 = hn::Set(df, p3[c]);
      a00 = hn::MulAdd(x0, v0, a00), a01 = hn::MulAdd(x0, v1, a01);
      a10 = hn::MulAdd(x1, v0, a10), a11 = hn::MulAdd(x1, v1, a11);
      a20 = hn::MulAdd(x2, v0, a20), a21 = hn::MulAdd(x2, v1, a21);
      a30 = hn::MulAdd(x3, v0, a30), a31 = hn::MulAdd(x3, v1, a31);
    }
    hn::StoreU(a00, df, c0 + d), hn::StoreU(a01, df, c0 + d + N);
    hn::StoreU(a10, df, c1 + d), hn::StoreU(a11, df, c1 + d + N);
    hn::StoreU(a20, df, c2 + d), hn::StoreU(a21, df, c2 + d + N);
    hn::StoreU(a30, df, c3 + d), hn::StoreU(a31, df, c3 + d + N);
  }
  for (; d < D; d += N) {  // D is a multiple of 16, N divides 16
    auto a0 = hn::Mul(hn::LoadU(df, c0 + d), w0), a1 = hn::Mul(hn::LoadU(df, c1 + d), w1);
    auto a2 = hn::Mul(hn::LoadU(df, c2 + d), w2), a3 = hn::Mul(hn::LoadU(df, c3 + d), w3);
    for (int64_t c = 0; c < n; c++) {
      const auto v0 = hn::LoadU(df, V + c * D + d);
      a0 = hn::MulAdd(hn::Set(df, p0[c]), v0, a0), a1 = hn::MulAdd(hn::Set(df, p1[c]), v0, a1);
      a2 = hn::MulAdd(hn::Set(df, p2[c]), v0, a2), a3 = hn::MulAdd(hn::Set(df, p3[c]), v0, a3);
    }
    hn::StoreU(a0, df, c0 + d), hn::StoreU(a1, df, c1 + d);
    hn::StoreU(a2, df, c2 + d), hn::StoreU(a3, df, c3 + d);
  }
}

// Rows r < nr: acc_r = alpha_r acc_r + sum_{f_r <= c < nv_r} P[r][c] V[c]. A
// row never reads V outside [f_r, nv_r) (future keys of a diagonal tile,
// keys before its sliding window). f = NULL: every f_r is 0.
template <int kD>
HWY_INLINE void AccumPVRows(const float *P, int64_t Bk, const float *V, int64_t D_rt, int64_t nr,
                            const int64_t *nv, const float *alpha, float *acc,
                            const int64_t *f = nullptr) {
  const int64_t D = kD ? kD : D_rt;
  int64_t r = 0;
  if (f) {  // a window's runs: one row at a time
    for (; r < nr; r++) {
      const int64_t a = f[r] < nv[r] ? f[r] : nv[r];
      AccumPV<kD>(P + r * Bk + a, V + a * D, D, nv[r] - a, alpha[r], acc + r * D);
    }
    return;
  }
  for (; r + 4 <= nr; r += 4) {
    int64_t n = nv[r];
    for (int i = 1; i < 4; i++) n = nv[r + i] < n ? nv[r + i] : n;
    AccumPV4<kD>(P + r * Bk, Bk, V, D, n, alpha + r, acc + r * D);
    for (int i = 0; i < 4; i++)
      if (nv[r + i] > n)
        AccumPV<kD>(P + (r + i) * Bk + n, V + n * D, D, nv[r + i] - n, 1.0f, acc + (r + i) * D);
  }
  for (; r < nr; r++) AccumPV<kD>(P + r * Bk, V, D, nv[r], alpha[r], acc + r * D);
}

// s[c] *= scale for c < nvis, -inf (masked) for the rest of the Bk columns.
HWY_INLINE void ScaleMask(float *s, int64_t Bk, int64_t nvis, float scale) {
  const DF df;
  const int64_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale), ninf = hn::Set(df, -INFINITY), lim = hn::Set(df, (float)nvis);
  for (int64_t c = 0; c < Bk; c += N) {
    const auto live = hn::Lt(hn::Iota(df, (float)c), lim);  // small integers: exact in f32
    hn::StoreU(hn::IfThenElse(live, hn::Mul(hn::LoadU(df, s + c), vs), ninf), df, s + c);
  }
}

// s[c] *= scale for c in [lo, hi), -inf (masked) for the rest of the Bk
// columns (a sliding window's run of keys), then the softcap on the run.
HWY_INLINE void ScaleMaskRange(float *s, int64_t Bk, int64_t lo, int64_t hi, float scale,
                               float softcap) {
  const DF df;
  const int64_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale), ninf = hn::Set(df, -INFINITY);
  const auto vlo = hn::Set(df, (float)lo), vhi = hn::Set(df, (float)hi);
  for (int64_t c = 0; c < Bk; c += N) {
    const auto i = hn::Iota(df, (float)c);  // small integers: exact in f32
    const auto live = hn::And(hn::Ge(i, vlo), hn::Lt(i, vhi));
    hn::StoreU(hn::IfThenElse(live, hn::Mul(hn::LoadU(df, s + c), vs), ninf), df, s + c);
  }
  for (int64_t c = lo; softcap > 0.0f && c < hi; c++) s[c] = lp_softcap_f32(s[c], softcap);
}

// Row maximum; NaN if any score is NaN (a non-finite input poisons the rows
// that see it, as in ref, instead of being dropped by Max).
HWY_INLINE float RowMax(const float *s, int64_t n) {
  const DF df;
  const int64_t N = hn::Lanes(df);
  auto m = hn::Set(df, -INFINITY), nan = hn::Zero(df);
  for (int64_t c = 0; c < n; c += N) {
    const auto x = hn::LoadU(df, s + c);
    m = hn::Max(m, x);
    nan = hn::Add(nan, hn::IfThenElseZero(hn::IsNaN(x), x));
  }
  const float mx = hn::GetLane(hn::MaxOfLanes(df, m));
  return hn::AllFalse(df, hn::IsNaN(nan)) ? mx : NAN;
}

// p = exp(s + bias) where s > -inf (masked keys give exactly 0);
// *sum_p = sum p, *sum_ps = sum p * s over the unmasked keys.
HWY_INLINE void ExpRow(const float *s, int64_t n, float bias, float *p, float *sum_p,
                       float *sum_ps) {
  const DF df;
  const int64_t N = hn::Lanes(df);
  const auto vb = hn::Set(df, bias), ninf = hn::Set(df, -INFINITY);
  auto sp = hn::Zero(df), sps = hn::Zero(df);
  for (int64_t c = 0; c < n; c += N) {
    const auto x = hn::LoadU(df, s + c);
    const auto live = hn::Gt(x, ninf);
    // Masked keys give 0; a NaN score stays NaN (Exp alone would give 0).
    const auto e = hn::IfThenElse(hn::IsNaN(x), x, hn::IfThenElseZero(live, hn::Exp(df, hn::Add(x, vb))));
    sp = hn::Add(sp, e);
    sps = hn::Add(sps, hn::IfThenElseZero(live, hn::Mul(e, x)));
    hn::StoreU(e, df, p + c);
  }
  *sum_p = hn::GetLane(hn::SumOfLanes(df, sp));
  *sum_ps = hn::GetLane(hn::SumOfLanes(df, sps));
}

// Quantize n values (one token along D) and write their dequantized values.
static inline void QuantRow(const lpattn_attn_problem &pr, const float *x, int64_t n, Scratch *sc,
                            float *y) {
  QuantizePRow(QpFormat(pr.low), pr.mx_round_up, x, n, sc, y);
}

// Where an item's rows and keys are.
struct Geom {
  int64_t b, hq, qt, r0, nr, off, skv, nkt;
  int k;
};

static inline bool Geometry(const AttnJob &job, int64_t item, Geom *g) {
  const lpattn_attn_problem &pr = *job.pr;
  g->qt = item % job.nqt, g->hq = (item / job.nqt) % pr.Hq, g->b = item / job.nqt / pr.Hq;
  g->r0 = g->qt * pr.Bq, g->nr = pr.Sq - g->r0 < pr.Bq ? pr.Sq - g->r0 : pr.Bq;
  g->skv = pr.Skv, g->off = pr.off, g->nkt = job.nkt, g->k = pr.thrift_k;
  return true;
}

// Query-tile importance of every full KV tile (core: SEMANTICS "Importance",
// "THRIFT selection rules"); K and its tile means in rows of D (padded).
static inline void ThriftScores(const AttnJob &job, const KvPrep &kv, const Geom &g, Scratch *sc) {
  lp_thrift_scores(job.pr, kv.k, job.D, kv.kbar, job.D, sc->qbar.data(), sc->score.data(), g.b,
                   g.hq, g.qt, g.nkt, sc->kind.data());
}

static inline void WriteSelection(const AttnJob &job, int64_t b, int64_t hq, int64_t qt,
                                  const uint8_t *mode) {
  const lpattn_tensor *sel = job.pr->selection;
  int32_t *out = static_cast<int32_t *>(sel->data);
  int64_t w = 0;
  for (int64_t j = 0; j < job.nkt && w < job.pr->thrift_k; j++)
    if (mode[j] == LP_MODE_HIGH) out[lp_off4(sel, b, hq, qt, w++)] = (int32_t)j;
  for (; w < job.pr->thrift_k; w++) out[lp_off4(sel, b, hq, qt, w)] = -1;
}

// Builds a transposed [D][Bk] K tile for a diagonal PASA tile, whose shift is
// that of the query tile's last full tile or its own first key (never a key
// past the horizon).
static inline void DiagKTile(const lpattn_attn_problem &pr, const KvPrep &kv, int64_t D,
                             int64_t j, int64_t nk, const float *shift, bool low, Scratch *sc) {
  const int64_t Bk = pr.Bk;
  float *kt = sc->ktmp.data(), *row = sc->tmp.data();
  for (int64_t i = 0; i < D * Bk; i++) kt[i] = 0.0f;
  for (int64_t c = 0; c < nk; c++) {
    const float *k = kv.k + (j * Bk + c) * D;
    for (int64_t d = 0; d < D; d++) row[d] = k[d] - shift[d];
    if (low) QuantRow(pr, row, D, sc, row);
    for (int64_t d = 0; d < D; d++)
      kt[d * Bk + c] = low ? row[d] : lpk_round_f16(row[d] * pr.sm_scale);
  }
}

template <int kD>
void AttnItem(const AttnJob &job, int64_t item, Scratch *sc) {
  const lpattn_attn_problem &pr = *job.pr;
  Geom g;
  if (!Geometry(job, item, &g)) return;
  const int64_t D = kD ? kD : job.D, Bk = pr.Bk, nkt = g.nkt, b = g.b, hq = g.hq, qt = g.qt;
  const KvPrep &kv = job.kv[b * pr.Hkv + hq / job.kv_group];
  const int64_t r0 = g.r0, nr = g.nr;
  // FP8_STATIC (SPEC 11): Q^ in ql, scores of codes scaled by qd * kd * sm_scale, O by vd.
  const bool fp8s = pr.precision == LPATTN_PREC_FP8_STATIC;
  const int64_t hk = hq / job.kv_group;
  const float qd = lp_fp8s_descale(pr.q_descale, b, hk), kd = lp_fp8s_descale(pr.k_descale, b, hk);
  const float ss = fp8s ? qd * kd * pr.sm_scale : pr.sm_scale;
  const float od = fp8s ? lp_fp8s_descale(pr.v_descale, b, hk) : 1.0f;  // x * 1 is exact

  float *q = sc->q.data();
  for (int64_t r = 0; fp8s && r < nr; r++) {  // channels past pr.D: zeros
    float *ql = sc->ql.data() + r * D;
    lp_fp8s_row(pr.q, lp_off4(pr.q, b, hq, r0 + r, 0), pr.q->stride[3], pr.D, qd, ql);
    for (int64_t d = pr.D; d < D; d++) ql[d] = 0.0f;
  }
  for (int64_t r = 0; !fp8s && r < nr; r++)
    LoadRowPad(pr.q, lp_off4(pr.q, b, hq, r0 + r, 0), pr.q->stride[3], job.Dt, D, q + r * D);

  int64_t last_full = -1;
  bool any_low = false;
  const lp_mask msk = lp_mask_of(&pr);  // causal and sliding window (core/window.c)
  const bool win = pr.window_left >= 0 || (!pr.causal && pr.window_right >= 0);
  for (int64_t j = 0; j < nkt; j++) {
    const int64_t c0 = j * Bk, c1 = c0 + Bk - 1;  // unclipped: a partial last tile is never full
    sc->kind[j] = (uint8_t)lp_mask_kind(&msk, r0, r0 + nr - 1, c0, c1);
    if (sc->kind[j] == LP_TILE_FULL) last_full = j;
  }
  if (pr.precision == LPATTN_PREC_THRIFT) ThriftScores(job, kv, g, sc);
  lp_tile_modes(pr.precision, pr.leaky, g.k, nkt, sc->kind.data(), sc->score.data(),
                sc->mode.data());
  if (pr.precision == LPATTN_PREC_THRIFT && pr.selection) WriteSelection(job, b, hq, qt, sc->mode.data());
  for (int64_t j = 0; j < nkt; j++) any_low |= sc->mode[j] == LP_MODE_LOW;
  if (any_low && !fp8s)
    for (int64_t r = 0; r < nr; r++) QuantRow(pr, q + r * D, D, sc, sc->ql.data() + r * D);

  float *acc = sc->acc.data(), *S = sc->s.data(), *P = sc->p.data(), *alpha = sc->alpha.data();
  int64_t *nv = sc->nv.data(), *nf = sc->nf.data();
  lpk_row *rows = sc->rows.data();
  for (int64_t i = 0; i < nr * D; i++) acc[i] = 0.0f;
  for (int64_t r = 0; r < nr; r++) lpk_row_init(&rows[r]);

  for (int64_t j = 0; j < nkt; j++) {
    if (sc->mode[j] == LP_MODE_SKIP) continue;
    const bool low = sc->mode[j] == LP_MODE_LOW, diag = sc->kind[j] == LP_TILE_DIAG;
    const int64_t c0 = j * Bk, nk = g.skv - c0 < Bk ? g.skv - c0 : Bk;
    const float *shift = nullptr, *Kt = (low ? kv.ktq : kv.kt) + j * D * Bk;
    if (pr.pasa) {
      if (!diag) {
        shift = kv.kshift + j * D;
      } else {
        if (last_full >= 0) {
          shift = kv.kshift + last_full * D;
        } else {  // no full tile before: its own first key, which every row seeing it sees
          float *first = sc->shift0.data();
          for (int64_t d = 0; d < D; d++) first[d] = pr.pasa_beta * kv.k[c0 * D + d];
          shift = first;
        }
        DiagKTile(pr, kv, D, j, nk, shift, low, sc);
        Kt = sc->ktmp.data();
      }
    }
    Scores<kD>(low ? sc->ql.data() : q, Kt, D, Bk, nr, S);
    for (int64_t r = 0; r < nr; r++) {
      int64_t first;
      const int64_t nvis = lp_mask_range(&msk, r0 + r, c0, nk, &first), end = first + nvis;
      nv[r] = 0, nf[r] = 0, alpha[r] = 1.0f;
      if (nvis <= 0) continue;  // the row sees none of this tile's keys
      float *s = S + r * Bk, *p = P + r * Bk;
      if (pr.pasa || (pr.score_f16 && !low)) {  // f16 score rounding (scalar; PASA: no window)
        for (int64_t c = 0; c < Bk; c++)
          s[c] = c < first || c >= end ? -INFINITY
                 : pr.pasa ? lpk_round_f16(low ? s[c] * ss : s[c])
                           : lp_softcap_f32(lpk_round_f16(s[c]) * ss, pr.softcap);
      } else if (win || pr.softcap > 0.0f) {
        ScaleMaskRange(s, Bk, first, end, ss, pr.softcap);
      } else {
        ScaleMask(s, Bk, nvis, ss);
      }
      const float corr = pr.pasa ? ss * lp_dot_f32(q + r * D, shift, D) : 0.0f;
      const lpk_step st = lpk_row_begin(&rows[r], RowMax(s, Bk), corr);
      float sum_p, sum_ps;
      ExpRow(s, Bk, st.bias, p, &sum_p, &sum_ps);
      lpk_row_end(&rows[r], &st, sum_p, sum_ps);
      alpha[r] = st.alpha;
      nv[r] = low && !fp8s ? nk : end;  // FP8_STATIC diagonal tiles: no V past the horizon
      nf[r] = low && !fp8s ? 0 : first;
      if (low) {
        const int f = QpFormat(pr.low);
        QuantizePRow(f == QP_FP8 ? QP_FP8_P : f, pr.mx_round_up, p, Bk, sc, p);
      }
    }
    AccumPVRows<kD>(P, Bk, (low ? kv.vq : kv.v) + c0 * D, D, nr, nv, alpha, acc, win ? nf : nullptr);
  }

  for (int64_t r = 0; r < nr; r++) {
    float inv_l, lse, ent;
    lpk_row_finish(&rows[r], &inv_l, &lse, &ent);
    for (int64_t d = 0; d < job.Dt; d++)
      lp_store_f32(pr.out->data, pr.out->dtype, lp_off4(pr.out, b, hq, r0 + r, d),
                   acc[r * D + d] * inv_l * od);
    if (pr.lse) lp_store_f32(pr.lse->data, LPATTN_F32, lp_off4(pr.lse, b, hq, r0 + r, 0), lse);
    if (pr.entropy)
      lp_store_f32(pr.entropy->data, LPATTN_F32, lp_off4(pr.entropy, b, hq, r0 + r, 0), ent);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
