// Paged decode, AVX2: FP4 tiles against FP4-quantized rows in exact int16
// arithmetic (decode-inl.h uses it for tiles of 64 keys).
#if defined(LPATTN_CPU_DECODE_INT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_CPU_DECODE_INT_INL_H_
#undef LPATTN_CPU_DECODE_INT_INL_H_
#else
#define LPATTN_CPU_DECODE_INT_INL_H_
#endif

#include "decode-fmt-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {

// AVX2: FP4 x FP4 dot products in exact int16 arithmetic. Q (and P) are
// FP4-quantized by the shared quantizer (cpu_quantize_domain, the same codes
// as the f32 path), both operands' codes become 2 * E2M1 (integers in
// [-12, 12]) by a byte shuffle, _mm256_madd_epi16 sums pairs exactly, and the
// group scales and outers are applied in f32 per group. Elements of a block
// of 64 are in "int order": even 0..30, even 32..62, odd 1..31, odd 33..63.
#if HWY_TARGET == HWY_AVX2
using D16 = hn::Full256<int16_t>;
using V16 = hn::Vec<D16>;

HWY_INLINE void Fp4Int16(const uint8_t *codes, V16 *v) {
  const hn::Full256<uint8_t> d8;
  const hn::Full256<uint16_t> du16;
  const hn::Full256<int8_t> di8;
  const hn::Full128<int8_t> h8;
  const D16 d16;
  alignas(32) static constexpr int8_t kX2[32] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                                 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const auto b = hn::LoadU(d8, codes);
  const auto m = hn::Set(d8, 15);
  const auto lo = hn::And(b, m), hi = hn::And(hn::BitCast(d8, hn::ShiftRight<4>(hn::BitCast(du16, b))), m);
  const auto tab = hn::Load(di8, kX2);
  const auto vl = hn::TableLookupBytes(tab, hn::BitCast(di8, lo));
  const auto vh = hn::TableLookupBytes(tab, hn::BitCast(di8, hi));
  v[0] = hn::PromoteTo(d16, hn::LowerHalf(vl)), v[1] = hn::PromoteTo(d16, hn::UpperHalf(h8, vl));
  v[2] = hn::PromoteTo(d16, hn::LowerHalf(vh)), v[3] = hn::PromoteTo(d16, hn::UpperHalf(h8, vh));
}

// Unpacked codes (one a byte, as cpu_quantize_domain writes them) -> 2 * E2M1
// as int16 in int order.
HWY_INLINE void CodesToInt16(const uint8_t *c, int64_t n, int16_t *out) {
  static constexpr int16_t kX2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int64_t b = 0; b < n; b += 64)
    for (int64_t i = 0; i < 16; i++) {
      out[b + i] = kX2[c[b + 2 * i]], out[b + 16 + i] = kX2[c[b + 32 + 2 * i]];
      out[b + 32 + i] = kX2[c[b + 2 * i + 1]], out[b + 48 + i] = kX2[c[b + 33 + 2 * i]];
    }
}

// sum_g sc[g] * (sum over group g of x2[i] * code2[i]) for n elements (n a
// multiple of 64) of packed codes; sc[g] = both operands' group scales.
HWY_INLINE float DotInt16(const uint8_t *codes, const int16_t *x, const float *sc, int gshift,
                          int64_t n) {
  const DF df;
  const hn::Full256<int32_t> d32;
  const D16 d16;
  const auto first = hn::FirstN(df, 4);
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < n; b += 64) {
    V16 v[4];
    Fp4Int16(codes + b / 2, v);
    auto s1 = hn::Zero(d32);
    auto a = hn::ReorderWidenMulAccumulate(d32, v[0], hn::LoadU(d16, x + b), hn::Zero(d32), s1);
    a = hn::ReorderWidenMulAccumulate(d32, v[2], hn::LoadU(d16, x + b + 32), a, s1);
    auto c = hn::ReorderWidenMulAccumulate(d32, v[1], hn::LoadU(d16, x + b + 16), hn::Zero(d32), s1);
    c = hn::ReorderWidenMulAccumulate(d32, v[3], hn::LoadU(d16, x + b + 48), c, s1);
    const int64_t g = b >> gshift;
    hn::Vec<DF> sa, sc2;
    if (gshift == 4) {
      sa = hn::IfThenElse(first, hn::Set(df, sc[g]), hn::Set(df, sc[g + 1]));
      sc2 = hn::IfThenElse(first, hn::Set(df, sc[g + 2]), hn::Set(df, sc[g + 3]));
    } else {
      sa = hn::Set(df, sc[g]), sc2 = hn::Set(df, sc[g + 1]);
    }
    acc = hn::MulAdd(hn::ConvertTo(df, a), sa, acc);
    acc = hn::MulAdd(hn::ConvertTo(df, c), sc2, acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

// An FP4-quantized operand row (Q row, or P row of a tile) in int form.
struct IntRow {
  int16_t x[256];
  float sc[16];  // decoded group scales (no outer)
  float outer;
};

// A finite row: the shared outer and group-scale steps (gen/common.h), the
// element step vectorized as QuantizePRow's (E2m1Value), so the same codes as
// cpu_quantize_domain; 2 * E2M1 values go to int order. False if a value of
// the row is not finite (the caller takes the scalar path).
HWY_INLINE bool ToIntRowSimd(const DecJob &job, const float *v, int64_t n, IntRow *out) {
  const DQ d;
  if (!AllFinite(d, v, n)) return false;
  const int fmt = job.qfmt, N = (int)hq::Lanes(d);
  const int64_t G = fmt == QP_MXFP4 ? 32 : 16;
  const float outer = fmt == QP_MXFP4 ? 1.0f : cpu_outer_scale(QP_NVFP4, MaxAbs(d, v, n));
  const float *tab = fmt == QP_MXFP4 ? job.e8m0 : job.e4m3;
  alignas(64) float q2[256];
  for (int64_t g = 0; g < n; g += G) {
    uint8_t code;
    float denom;
    cpu_group_scale(fmt, MaxAbs(d, v + g, G), 0, outer, job.pr->mx_round_up, &code, &denom);
    out->sc[g / G] = tab[code];
    const auto vd = hq::Set(d, denom == 0.0f ? 1.0f : denom), two = hq::Set(d, denom == 0.0f ? 0.0f : 2.0f);
    for (int64_t c = g; c < g + G; c += N)
      hq::Store(hq::Mul(E2m1Value(d, hq::Div(hq::LoadU(d, v + c), vd)), two), d, q2 + c);
  }
  for (int64_t b = 0; b < n; b += 64)
    for (int64_t i = 0; i < 16; i++) {
      out->x[b + i] = (int16_t)q2[b + 2 * i], out->x[b + 16 + i] = (int16_t)q2[b + 32 + 2 * i];
      out->x[b + 32 + i] = (int16_t)q2[b + 2 * i + 1], out->x[b + 48 + i] = (int16_t)q2[b + 33 + 2 * i];
    }
  out->outer = outer;
  return true;
}

HWY_INLINE void ToIntRow(const DecJob &job, const float *v, int64_t n, Scratch *sc, IntRow *out) {
  if (ToIntRowSimd(job, v, n, out)) return;
  float outer;
  cpu_quantize_domain(job.qfmt, job.pr->mx_round_up, 0, 0, NULL, v, 1, (int)n, sc->codes.data(),
                      sc->scales.data(), &outer);
  CodesToInt16(sc->codes.data(), n, out->x);
  const float *tab = job.qfmt == QP_MXFP4 ? job.e8m0 : job.e4m3;
  for (int64_t g = 0; g < n >> job.gshift; g++) out->sc[g] = tab[sc->scales[g]];
  out->outer = job.qfmt == QP_MXFP4 ? 1.0f : outer;
}

// x . (key or channel i of a quantized tile), both FP4: exact int sums.
HWY_INLINE float DotLowInt(const DecJob &job, const LowTile &t, int v, int64_t i, const IntRow &x) {
  const lp_kv_layout &L = *t.L;
  const int64_t n = v ? job.T : job.D, ng = n >> job.gshift;
  const uint8_t *codes = t.p + (v ? L.vc : L.kc) + i * (n >> 1);
  const uint8_t *scales = t.p + (v ? L.vs : L.ks) + i * ng;
  const float outer = L.fmt == LPATTN_FMT_MXFP4 ? 1.0f : ((const float *)(t.p + (v ? L.vo : L.ko)))[i];
  const float *tab = L.fmt == LPATTN_FMT_MXFP4 ? job.e8m0 : job.e4m3;
  float sc[16];
  for (int64_t g = 0; g < ng; g++) sc[g] = tab[scales[g]] * x.sc[g];
  return DotInt16(codes, x.x, sc, job.gshift, n) * (0.25f * x.outer * outer);
}

// Eight keys or channels at once (AVX2): group scales gathered from the
// decode tables, spread over lanes by permutes; eight dot products reduced
// together by horizontal adds.
using VF = hn::Vec<DF>;

HWY_INLINE VF Reduce8(const VF *v) {
  __m256 a = _mm256_hadd_ps(v[0].raw, v[1].raw), b = _mm256_hadd_ps(v[2].raw, v[3].raw);
  __m256 c = _mm256_hadd_ps(v[4].raw, v[5].raw), d = _mm256_hadd_ps(v[6].raw, v[7].raw);
  a = _mm256_hadd_ps(a, b), c = _mm256_hadd_ps(c, d);
  return VF{_mm256_add_ps(_mm256_permute2f128_ps(a, c, 0x20), _mm256_permute2f128_ps(a, c, 0x31))};
}

// Decoded scale codes p[0..8) (E4M3 or E8M0 table) times m.
HWY_INLINE VF Scales8(const float *tab, const uint8_t *p, VF m) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint8_t, DF> d8;
  return hn::Mul(hn::GatherIndex(df, tab, hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(d8, p)))), m);
}

// int(a . x) over one block of 64 elements: lanes of the first half (A,
// elements 0..31) and of the second (B, 32..63).
HWY_INLINE void Block64(const uint8_t *codes, const int16_t *x, hn::Vec<hn::Full256<int32_t>> *a,
                        hn::Vec<hn::Full256<int32_t>> *b) {
  const hn::Full256<int32_t> d32;
  const D16 d16;
  V16 v[4];
  Fp4Int16(codes, v);
  auto s1 = hn::Zero(d32);
  *a = hn::ReorderWidenMulAccumulate(d32, v[0], hn::LoadU(d16, x), hn::Zero(d32), s1);
  *a = hn::ReorderWidenMulAccumulate(d32, v[2], hn::LoadU(d16, x + 32), *a, s1);
  *b = hn::ReorderWidenMulAccumulate(d32, v[1], hn::LoadU(d16, x + 16), hn::Zero(d32), s1);
  *b = hn::ReorderWidenMulAccumulate(d32, v[3], hn::LoadU(d16, x + 48), *b, s1);
}

// Lane permutes giving each lane of half A / B of a block its group's scale,
// for groups starting at lane `base` of a scale vector.
HWY_INLINE void HalfIndices(int gshift, int base, hn::Indices256<float> *ia, hn::Indices256<float> *ib) {
  const hn::Full256<int32_t> di;
  const auto up = hn::IfThenElseZero(hn::Gt(hn::Iota(di, 0), hn::Set(di, 3)), hn::Set(di, 1));
  const DF df;
  if (gshift == 4) {
    *ia = hn::IndicesFromVec(df, hn::Add(hn::Set(di, base), up));
    *ib = hn::IndicesFromVec(df, hn::Add(hn::Set(di, base + 2), up));
  } else {
    *ia = hn::IndicesFromVec(df, hn::Set(di, base));
    *ib = hn::IndicesFromVec(df, hn::Set(di, base + 1));
  }
}

// Scores S[c0 .. c0 + 8) of keys of a quantized tile for int row x (D <= 128,
// D / G <= 8 groups in one scale vector).
HWY_INLINE void Scores8Int(const DecJob &job, const LowTile &t, int64_t c0, const IntRow &x,
                           float *S) {
  const DF df;
  const lp_kv_layout &L = *t.L;
  const int64_t D = job.D, ng = D >> job.gshift, nb = D / 64;
  const bool mx = L.fmt == LPATTN_FMT_MXFP4;
  const float *tab = mx ? job.e8m0 : job.e4m3;
  const VF xs = hn::LoadU(df, x.sc);
  hn::Indices256<float> ia[2], ib[2];
  for (int64_t b = 0; b < nb; b++) HalfIndices(job.gshift, (int)(b * 64 >> job.gshift), &ia[b], &ib[b]);
  VF acc[8];
  for (int k = 0; k < 8; k++) {
    const int64_t c = c0 + k;
    const VF sv = Scales8(tab, t.p + L.ks + c * ng, xs);
    auto a = hn::Zero(df);
    for (int64_t b = 0; b < nb; b++) {
      hn::Vec<hn::Full256<int32_t>> ia32, ib32;
      Block64(t.p + L.kc + c * (D / 2) + b * 32, x.x + b * 64, &ia32, &ib32);
      a = hn::MulAdd(hn::ConvertTo(df, ia32), hn::TableLookupLanes(sv, ia[b]), a);
      a = hn::MulAdd(hn::ConvertTo(df, ib32), hn::TableLookupLanes(sv, ib[b]), a);
    }
    acc[k] = a;
  }
  const VF f = hn::Set(df, 0.25f * x.outer);
  const VF o = mx ? f : hn::Mul(hn::LoadU(df, (const float *)(t.p + L.ko) + c0), f);
  hn::StoreU(hn::Mul(Reduce8(acc), o), df, S + c0);
}

// acc[d0 .. d0 + 8) += P^ . V[:, d] for int row p of a tile of 64 keys.
HWY_INLINE void PV8Int(const DecJob &job, const LowTile &t, int64_t d0, const IntRow &p, float *acc) {
  const DF df;
  const lp_kv_layout &L = *t.L;
  const int gpc = 64 >> job.gshift, per = 8 / gpc;  // groups per channel, channels per scale vector
  const bool mx = L.fmt == LPATTN_FMT_MXFP4;
  const float *tab = mx ? job.e8m0 : job.e4m3;
  const hn::Full256<int32_t> di;
  const VF ps = hn::TableLookupLanes(hn::LoadU(df, p.sc),
                                     hn::IndicesFromVec(df, hn::And(hn::Iota(di, 0), hn::Set(di, gpc - 1))));
  VF out[8], sv = hn::Zero(df);
  for (int k = 0; k < 8; k++) {
    const int64_t d = d0 + k;
    if (k % per == 0) sv = Scales8(tab, t.p + L.vs + d * gpc, ps);
    hn::Indices256<float> ia, ib;
    HalfIndices(job.gshift, (k % per) * gpc, &ia, &ib);
    hn::Vec<hn::Full256<int32_t>> a32, b32;
    Block64(t.p + L.vc + d * 32, p.x, &a32, &b32);
    out[k] = hn::MulAdd(hn::ConvertTo(df, a32), hn::TableLookupLanes(sv, ia),
                        hn::Mul(hn::ConvertTo(df, b32), hn::TableLookupLanes(sv, ib)));
  }
  const VF f = hn::Set(df, 0.25f * p.outer);
  const VF o = mx ? f : hn::Mul(hn::LoadU(df, (const float *)(t.p + L.vo) + d0), f);
  hn::StoreU(hn::MulAdd(Reduce8(out), o, hn::LoadU(df, acc + d0)), df, acc + d0);
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
