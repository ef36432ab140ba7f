// SIMD quantize-dequantize of one tile row of P (SEMANTICS "A low tile",
// step 4), bit-identical to the scalar lpk_quantize_domain + lpk_dequant of
// backends/math/lpk_*.h: its outer and group-scale steps (backends/math/lpk_quant.h)
// are called as they are; only the element step is vectorized, as the value
// forms of lpk_e2m1_round / lpk_e4m3_round (tests/cpu checks this quantizer
// against the scalar one and core on every Highway target). Rows holding a
// non-finite value take the scalar path.
#if defined(LPATTN_CPU_QUANTP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_CPU_QUANTP_INL_H_
#undef LPATTN_CPU_QUANTP_INL_H_
#else
#define LPATTN_CPU_QUANTP_INL_H_
#endif

#include <math.h>

#include <hwy/highway.h>

#include "cpu.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {
namespace hq = hwy::HWY_NAMESPACE;
using DQ = hq::CappedTag<float, 16>;

// Value of RNE_e2m1(y) (saturating at 6, sign kept), per lane.
template <class V>
HWY_INLINE V E2m1Value(DQ d, V y) {
  const auto v = hq::Abs(y);
  auto q = hq::Zero(d);
  q = hq::IfThenElse(hq::Gt(v, hq::Set(d, 0.25f)), hq::Set(d, 0.5f), q);
  q = hq::IfThenElse(hq::Ge(v, hq::Set(d, 0.75f)), hq::Set(d, 1.0f), q);
  q = hq::IfThenElse(hq::Gt(v, hq::Set(d, 1.25f)), hq::Set(d, 1.5f), q);
  q = hq::IfThenElse(hq::Ge(v, hq::Set(d, 1.75f)), hq::Set(d, 2.0f), q);
  q = hq::IfThenElse(hq::Gt(v, hq::Set(d, 2.5f)), hq::Set(d, 3.0f), q);
  q = hq::IfThenElse(hq::Ge(v, hq::Set(d, 3.5f)), hq::Set(d, 4.0f), q);
  q = hq::IfThenElse(hq::Gt(v, hq::Set(d, 5.0f)), hq::Set(d, 6.0f), q);
  return hq::CopySign(q, y);
}

// Value of RNE_e4m3(x) (finite x, saturating at 448), per lane.
template <class V>
HWY_INLINE V E4m3Value(DQ d, V x) {
  const hq::RebindToUnsigned<DQ> du;
  const auto a = hq::Abs(x);
  // Subnormals: steps of 2^-9 (exact scaling, then nearest-even).
  const auto sub = hq::Mul(hq::Round(hq::Mul(a, hq::Set(d, 512.0f))), hq::Set(d, 1.0f / 512.0f));
  // Normals: round the f32 mantissa to 3 bits, ties to even; a carry moves
  // into the exponent as it should.
  auto u = hq::BitCast(du, a);
  const auto lsb = hq::And(hq::ShiftRight<20>(u), hq::Set(du, 1u));
  u = hq::And(hq::Add(u, hq::Add(hq::Set(du, 0x7ffffu), lsb)), hq::Set(du, 0xfff00000u));
  auto r = hq::IfThenElse(hq::Lt(a, hq::Set(d, 0.015625f)), sub, hq::BitCast(d, u));
  r = hq::IfThenElse(hq::Ge(a, hq::Set(d, 448.0f)), hq::Set(d, 448.0f), r);
  return hq::CopySign(r, x);
}

HWY_INLINE float MaxAbs(DQ d, const float *x, int64_t n) {
  const int64_t N = hq::Lanes(d);
  auto m = hq::Zero(d);
  for (int64_t i = 0; i < n; i += N) m = hq::Max(m, hq::Abs(hq::LoadU(d, x + i)));
  return hq::GetLane(hq::MaxOfLanes(d, m));
}

HWY_INLINE bool AllFinite(DQ d, const float *x, int64_t n) {
  const int64_t N = hq::Lanes(d);
  auto ok = hq::Set(d, 0.0f);
  // x - x is 0 for finite x and NaN otherwise.
  for (int64_t i = 0; i < n; i += N) {
    const auto v = hq::LoadU(d, x + i);
    ok = hq::Add(ok, hq::Sub(v, v));
  }
  return hq::AllTrue(d, hq::Eq(ok, hq::Zero(d)));
}

// One domain of n values (n a multiple of 16; of 32 for MXFP4), written as
// dequantized values. fmt: QP_NVFP4, QP_MXFP4, QP_FP8 (scale amax/448, Q/K/V)
// or QP_FP8_P (P's fixed scale 448).
HWY_INLINE void QuantizePRow(int fmt, int mx_up, const float *p, int64_t n, Scratch *sc,
                             float *out) {
  const DQ d;
  const int64_t N = hq::Lanes(d);
  if (!AllFinite(d, p, n)) {
    if (fmt == QP_FP8_P) {
      for (int64_t c = 0; c < n; c++)
        out[c] = lpk_e4m3_decode(lpk_e4m3_encode(p[c] * 448.0f)) * (1.0f / 448.0f);
      return;
    }
    float outer;
    lpk_quantize_domain(fmt, mx_up, 0, 0, nullptr, p, 1, (int)n, sc->codes.data(), sc->scales.data(),
                        &outer);
    for (int64_t c = 0; c < n; c++)
      out[c] = lpk_dequant(fmt, sc->codes[c], sc->scales[c / (fmt ? 32 : 16)], outer);
    return;
  }
  if (fmt == QP_FP8_P) {
    const auto k = hq::Set(d, 448.0f), s1 = hq::Set(d, 1.0f / 448.0f);
    for (int64_t c = 0; c < n; c += N)
      hq::StoreU(hq::Mul(E4m3Value(d, hq::Mul(hq::LoadU(d, p + c), k)), s1), d, out + c);
    return;
  }
  if (fmt == QP_FP8) {  // element = e4m3(x / s) * s, s = amax / 448; s = 0 -> zeros
    const float sc1 = lpk_outer_scale(QP_FP8, MaxAbs(d, p, n));
    const auto vs = hq::Set(d, sc1);
    for (int64_t c = 0; c < n; c += N)
      hq::StoreU(sc1 == 0.0f ? hq::Zero(d) : hq::Mul(E4m3Value(d, hq::Div(hq::LoadU(d, p + c), vs)), vs),
                 d, out + c);
    return;
  }
  const int64_t G = fmt ? 32 : 16;
  const float outer = fmt ? 1.0f : lpk_outer_scale(QP_NVFP4, MaxAbs(d, p, n));
  for (int64_t g = 0; g < n; g += G) {
    const float ga = MaxAbs(d, p + g, G);
    uint8_t code;
    float denom;  // divisor of the elements; scale: the decoded group scale
    const float scale = lpk_group_scale(fmt, ga, 0, outer, mx_up, &code, &denom);
    if (denom == 0.0f) {
      for (int64_t c = g; c < g + G; c++) out[c] = 0.0f;
      continue;
    }
    const auto vd = hq::Set(d, denom), vs = hq::Set(d, scale), vo = hq::Set(d, outer);
    for (int64_t c = g; c < g + G; c += N) {
      const auto q = E2m1Value(d, hq::Div(hq::LoadU(d, p + c), vd));
      hq::StoreU(fmt ? hq::Mul(q, vs) : hq::Mul(hq::Mul(q, vs), vo), d, out + c);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
