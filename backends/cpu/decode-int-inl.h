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
  int8_t x8[256];     // x as int8 (the same int order)
  int32_t csum[32];   // per block of 64, per lane of 8 elements: 12 * their sum of x
  // Lane constants of Scores8Int (a Q row, n = D) and PV8Int (a P row, n =
  // 64): scale-code index, 12 * sum(x) to take off, this row's scale (x 256
  // for E4M3, whose decode leaves the value / 256).
  int32_t idx[8], corr[8];
  float sc8[8];
};
static_assert(sizeof(IntRow) <= 1152, "DecScratch::ib holds 288 u32 per IntRow");

// Lanes of _mm256_hadd_epi32(u, v) for two blocks' Block64U lanes u and v:
// first element of the 16 each lane sums (u's block at 0, v's at 64).
static constexpr int kHaddStart[8] = {0, 16, 64, 80, 32, 48, 96, 112};
// PV8Int, channels d and d + 1: lanes (channel, first key of 16).
static constexpr int kPvKey[8] = {0, 16, 0, 16, 32, 48, 32, 48}, kPvCh[8] = {0, 0, 1, 1, 0, 0, 1, 1};

// x8, csum and the lane constants from x (int order: lane l of a block holds
// elements 8l..8l+7, i.e. x[4l..4l+3] and x[32+4l..32+4l+3]).
HWY_INLINE void FinishIntRow(const DecJob &job, int64_t n, bool pv, IntRow *out) {
  {
    const hn::Full256<int16_t> d16;
    const hn::Full128<int8_t> d8;
    for (int64_t i = 0; i < n; i += 16) hn::StoreU(hn::DemoteTo(d8, hn::LoadU(d16, out->x + i)), d8, out->x8 + i);
  }
  for (int64_t b = 0; b < n; b += 64)
    for (int l = 0; l < 8; l++) {
      int32_t s = 0;
      for (int i = 0; i < 4; i++) s += out->x[b + 4 * l + i] + out->x[b + 32 + 4 * l + i];
      out->csum[b / 8 + l] = 12 * s;
    }
  const float f = job.qfmt == QP_MXFP4 ? 1.0f : 256.0f;
  if (!pv) {  // a Q row: lanes of the second block are zero when D = 64
    for (int l = 0; l < 8; l++) {
      const int st = kHaddStart[l], live = st < n, b = st / 64, l8 = st % 64 / 8;
      out->idx[l] = live ? st >> job.gshift : 0;
      out->sc8[l] = out->sc[out->idx[l]] * f;
      out->corr[l] = live ? out->csum[b * 8 + l8] + out->csum[b * 8 + l8 + 1] : 0;
    }
  } else if (n == 64) {  // a P row of a tile of 64 keys
    const int gpc = 64 >> job.gshift;
    for (int l = 0; l < 8; l++) {
      const int g = kPvKey[l] >> job.gshift;
      out->idx[l] = kPvCh[l] * gpc + g;
      out->sc8[l] = out->sc[g] * f;
      out->corr[l] = out->csum[kPvKey[l] / 8] + out->csum[kPvKey[l] / 8 + 1];
    }
  }
}

// A finite row: the shared outer and group-scale steps (gen/common.h), the
// element step vectorized as QuantizePRow's (E2m1Value), so the same codes as
// cpu_quantize_domain; 2 * E2M1 values go to int order. False if a value of
// the row is not finite (the caller takes the scalar path).
HWY_INLINE bool ToIntRowSimd(const DecJob &job, const float *v, int64_t n, bool pv, IntRow *out) {
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
  const hn::Full256<float> d8;  // int order: a block's even elements, then its odd ones
  const hn::Full256<int32_t> d32;
  const hn::Full128<int16_t> d16;
  for (int64_t b = 0; b < n; b += 64)
    for (int64_t q = 0; q < 4; q++) {  // (small integers: exact conversions)
      const auto lo = hn::Load(d8, q2 + b + 16 * q), hi = hn::Load(d8, q2 + b + 16 * q + 8);
      hn::StoreU(hn::DemoteTo(d16, hn::ConvertTo(d32, hn::ConcatEven(d8, hi, lo))), d16, out->x + b + 8 * q);
      hn::StoreU(hn::DemoteTo(d16, hn::ConvertTo(d32, hn::ConcatOdd(d8, hi, lo))), d16, out->x + b + 32 + 8 * q);
    }
  out->outer = outer;
  FinishIntRow(job, n, pv, out);
  return true;
}

HWY_INLINE void ToIntRow(const DecJob &job, const float *v, int64_t n, bool pv, Scratch *sc,
                         IntRow *out) {
  if (ToIntRowSimd(job, v, n, pv, out)) return;
  float outer;
  cpu_quantize_domain(job.qfmt, job.pr->mx_round_up, 0, 0, NULL, v, 1, (int)n, sc->codes.data(),
                      sc->scales.data(), &outer);
  CodesToInt16(sc->codes.data(), n, out->x);
  const float *tab = job.qfmt == QP_MXFP4 ? job.e8m0 : job.e4m3;
  for (int64_t g = 0; g < n >> job.gshift; g++) out->sc[g] = tab[sc->scales[g]];
  out->outer = job.qfmt == QP_MXFP4 ? 1.0f : outer;
  FinishIntRow(job, n, pv, out);
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

// Eight keys or channels at once (AVX2). A block of 64 FP4 codes against an
// int row: the codes become 2 * E2M1 + 12 (0..24, unsigned bytes) by a byte
// shuffle, _mm256_maddubs_epi16 / _mm256_madd_epi16 sum them times the row's
// int8 values exactly into 8 lanes of 8 elements, and 12 * sum(x) (IntRow
// csum) is taken off after a horizontal add that leaves one lane per 16
// elements. Group scales are decoded from their codes in registers (no table,
// no gather; once per tile, ScaleLanes), multiplied by the row's, and one f32
// multiply per lane applies them; eight dot products are then reduced
// together by horizontal adds.
using VF = hn::Vec<DF>;

// Lane l of int(codes . x) + 12 * sum(x) over elements 8l..8l+7 of a block
// of 64 (x: 32 int8 of the even elements, then 32 of the odd ones).
HWY_INLINE __m256i Block64U(const uint8_t *codes, const int8_t *x) {
  const __m256i tab = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                       12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
  const __m256i m = _mm256_set1_epi8(15);
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(codes));
  const __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(b, m));
  const __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(b, 4), m));
  const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x)));
  const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x + 32)));
  return _mm256_madd_epi16(_mm256_add_epi16(pl, ph), _mm256_set1_epi16(1));
}

// n (2, 4 or 8) scale codes as the low bytes of a vector (nothing read past them).
HWY_INLINE __m128i LoadCodes(const uint8_t *p, int n) {
  uint64_t v = 0;
  if (n >= 8) {
    memcpy(&v, p, 8);
  } else if (n == 4) {
    uint32_t w;
    memcpy(&w, p, 4);
    v = w;
  } else {
    uint16_t w;
    memcpy(&w, p, 2);
    v = w;
  }
  return _mm_cvtsi64_si128((long long)v);
}

// Scale codes (bytes 0..7 of c) decoded exactly in f32 lanes: E8M0 (mx) as
// 2^(c-127), E4M3 as its value / 256 (through f16 bits; the caller folds the
// 256 into the other operand's scale). NaN codes give NaN, as the tables.
HWY_INLINE __m256 DecodeScaleCodes(__m128i c, bool mx) {
  if (mx) {
    const __m256i e = _mm256_cvtepu8_epi32(c);
    __m256i bits = _mm256_slli_epi32(e, 23);
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000),
                              _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000),
                              _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
    return _mm256_castsi256_ps(bits);
  }
  const __m128i w = _mm_cvtepu8_epi16(c);
  const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7F));
  __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8),
                           _mm_slli_epi16(mag, 7));
  h = _mm_blendv_epi8(h, _mm_set1_epi16(0x7E00), _mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F)));
  return _mm256_cvtph_ps(h);
}

// The decoded group scales of every key (v = 0: T keys, ng codes each) or
// channel pair (v = 1: D / 2 pairs, 2 * gpc codes each) of a quantized tile,
// permuted to the lanes of the horizontal adds (vi: IntRow idx, the same for
// every row), eight floats a key / pair: decoded once per tile, off the
// dependency chains of the dot products.
HWY_INLINE void ScaleLanes(const DecJob &job, const LowTile &t, int v, const int32_t *idx, float *out) {
  const lp_kv_layout &L = *t.L;
  const bool mx = L.fmt == LPATTN_FMT_MXFP4;
  const int64_t per = v ? 2 * (64 >> job.gshift) : job.D >> job.gshift, n = v ? job.D / 2 : job.T;
  const uint8_t *codes = t.p + (v ? L.vs : L.ks);
  // Two keys a step: their codes put in lane order by one byte shuffle
  // (byte 8j + l <- code idx[l] of key j), then decoded as DecodeScaleCodes
  // does, 16 at a time for E4M3.
  alignas(16) int8_t ctrl[16];
  for (int j = 0; j < 2; j++)
    for (int l = 0; l < 8; l++) ctrl[8 * j + l] = (int8_t)(j * per + idx[l]);
  const __m128i vctrl = _mm_load_si128(reinterpret_cast<const __m128i *>(ctrl));
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    const uint8_t *p = codes + k * per;
    __m128i c;
    if (per == 8) c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    else c = LoadCodes(p, (int)(2 * per));
    c = _mm_shuffle_epi8(c, vctrl);
    if (mx) {
      _mm256_store_ps(out + 8 * k, DecodeScaleCodes(c, true));
      _mm256_store_ps(out + 8 * k + 8, DecodeScaleCodes(_mm_srli_si128(c, 8), true));
      continue;
    }
    const __m256i w = _mm256_cvtepu8_epi16(c);
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
    __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8),
                                _mm256_slli_epi16(mag, 7));
    h = _mm256_blendv_epi8(h, _mm256_set1_epi16(0x7E00), _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F)));
    _mm256_store_ps(out + 8 * k, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
    _mm256_store_ps(out + 8 * k + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
  }
  const __m256i vi = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(idx));
  for (; k < n; k++)
    _mm256_store_ps(out + 8 * k, _mm256_permutevar8x32_ps(DecodeScaleCodes(LoadCodes(codes + k * per, (int)per), mx), vi));
}

// Scores S[c0 .. c0 + 8) of keys of a quantized tile for int row x (D = 64
// or 128: one or two blocks a key); ksc: the tile's ScaleLanes (v = 0).
HWY_INLINE void Scores8Int(const DecJob &job, const LowTile &t, int64_t c0, const IntRow &x, const float *ksc,
                           float *S) {
  const DF df;
  const lp_kv_layout &L = *t.L;
  const int64_t D = job.D, nb = D / 64;
  const bool mx = L.fmt == LPATTN_FMT_MXFP4;
  const __m256i vc = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x.corr));
  const __m256 vx = _mm256_loadu_ps(x.sc8);
  VF acc[8];
  for (int k = 0; k < 8; k++) {
    const int64_t c = c0 + k;
    const uint8_t *codes = t.p + L.kc + c * (D / 2);
    const __m256i u = Block64U(codes, x.x8);
    const __m256i v = nb > 1 ? Block64U(codes + 32, x.x8 + 64) : _mm256_setzero_si256();
    const __m256i s = _mm256_sub_epi32(_mm256_hadd_epi32(u, v), vc);
    acc[k] = VF{_mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(_mm256_load_ps(ksc + 8 * c), vx))};
    // the first level of the horizontal adds as soon as a pair is done
    // (fewer live registers)
    if (k & 1) acc[k / 2] = VF{_mm256_hadd_ps(acc[k - 1].raw, acc[k].raw)};
  }
  const VF f = hn::Set(df, 0.25f * x.outer);
  const VF o = mx ? f : hn::Mul(hn::LoadU(df, (const float *)(t.p + L.ko) + c0), f);
  const __m256 a = _mm256_hadd_ps(acc[0].raw, acc[1].raw), b = _mm256_hadd_ps(acc[2].raw, acc[3].raw);
  const VF sum{_mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31))};
  hn::StoreU(hn::Mul(sum, o), df, S + c0);
}

// acc[d0 .. d0 + 8) += P^ . V[:, d] for int row p of a tile of 64 keys,
// channels two at a time: _mm256_hadd_epi32 of their lanes gives lanes
// (channel, 16 keys) = (0, 0) (0, 16) (1, 0) (1, 16) (0, 32) (0, 48) (1, 32) (1, 48);
// vsc: the tile's ScaleLanes (v = 1).
HWY_INLINE void PV8Int(const DecJob &job, const LowTile &t, int64_t d0, const IntRow &p, const float *vsc,
                       float *acc) {
  const DF df;
  const lp_kv_layout &L = *t.L;
  const bool mx = L.fmt == LPATTN_FMT_MXFP4;
  const __m256i vc = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p.corr));
  const __m256 vp = _mm256_loadu_ps(p.sc8);
  __m256 w[4];
  for (int k = 0; k < 4; k++) {
    const int64_t d = d0 + 2 * k;
    const uint8_t *codes = t.p + L.vc + d * 32;
    const __m256i s = _mm256_sub_epi32(_mm256_hadd_epi32(Block64U(codes, p.x8), Block64U(codes + 32, p.x8)), vc);
    w[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(_mm256_load_ps(vsc + 4 * d), vp));
  }
  // hadd(w0, w1): channels d0..d0+3 in both halves; hadd(w2, w3): d0+4..d0+7.
  const __m256 a = _mm256_hadd_ps(w[0], w[1]), b = _mm256_hadd_ps(w[2], w[3]);
  const VF sum{_mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31))};
  const VF f = hn::Set(df, 0.25f * p.outer);
  const VF o = mx ? f : hn::Mul(hn::LoadU(df, (const float *)(t.p + L.vo) + d0), f);
  hn::StoreU(hn::MulAdd(sum, o, hn::LoadU(df, acc + d0)), df, acc + d0);
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
