// Paged decode: FP4 tiles against FP4-quantized rows in exact integer
// arithmetic (decode-inl.h uses it for head dims and tiles that are
// multiples of 64), on every Highway target but HWY_SCALAR. The products
// are exact, so every target gets the same integer sums; the f32 steps after
// them (scales, the sum of a key's or a channel's 16-element parts) are done
// in one fixed order on all targets, without FMA (SSE4 has none), so the
// scores and P.V sums are the same bits everywhere (tests/cpu/test_cpu_decode_int). x86 AVX2 and AVX-512 run
// the eight-key kernels with 256-bit intrinsics (decode-int-x86-inl.h);
// every other target (SSE4/SSSE3, NEON, SVE, SVE2, EMU128) the Highway-op
// kernels below on 128-bit vectors.
#if defined(LPATTN_CPU_DECODE_INT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_CPU_DECODE_INT_INL_H_
#undef LPATTN_CPU_DECODE_INT_INL_H_
#else
#define LPATTN_CPU_DECODE_INT_INL_H_
#endif

#include "decode-fmt-inl.h"

// Per target: the integer path, and its x86 intrinsic kernels.
#undef LP_DEC_INT
#undef LP_DEC_INT_X86
#define LP_DEC_INT (HWY_TARGET != HWY_SCALAR)
#define LP_DEC_INT_X86 (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2)

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {

#if LP_DEC_INT
// Q (and P) are FP4-quantized by the shared quantizer (the same codes as
// lpk_quantize_domain), both operands' codes become 2 * E2M1 (integers in
// [-12, 12]); products are summed exactly in int32 over runs of 16
// elements, then the group scales and outers are applied in f32. A row's
// elements of a block of 64 are kept in "int order": even 0..30, even
// 32..62, odd 1..31, odd 33..63.
using D4 = hn::Full128<float>;
using V4 = hn::Vec<D4>;
using DI4 = hn::Full128<int32_t>;
using VI4 = hn::Vec<DI4>;

// An FP4-quantized operand row (Q row, or P row of a tile) in int form.
struct IntRow {
  int16_t x[256];
  float sc[16];  // decoded group scales (no outer)
  float outer;
  int8_t x8[256];     // x86: x as int8 (the same int order)
  int32_t csum[32];   // x86: per block of 64, per lane of 8 elements: 12 * their sum of x
  // Lane constants of Scores8Int (a Q row, n = D) and PV8Int (a P row, n =
  // 64): scale-code index of each lane's 16 elements, (x86) 12 * sum(x) to
  // take off, this row's scale (x 256 for E4M3, whose lane decode leaves
  // the value / 256). x86: lanes of the horizontal adds (kHaddStart,
  // kPvKey); elsewhere the runs of 16 in element order.
  int32_t idx[8], corr[8];
  float sc8[8];
};
static_assert(sizeof(IntRow) <= 1152, "DecScratch::ib holds 288 u32 per IntRow");

// The four 16-element parts of a key: 0..15, 16..31 and so on. The
// eight-key kernels sum them as ((0 + 1) + (4 + 5)) + ((2 + 3) + (6 + 7))
// (D = 128; parts 4..7 are zero when D = 64), the channels of P.V as
// (0 + 1) + (2 + 3).

// (v0, v1, v2, v3) transposed: o_j lane k = v_k lane j (exact). Vectors
// one by one, not in arrays (SVE vectors are sizeless).
template <class D, class V>
HWY_INLINE void Transpose4(D d, V v0, V v1, V v2, V v3, V &o0, V &o1, V &o2, V &o3) {
  const hn::Repartition<uint64_t, D> d64;
  const V r0 = hn::InterleaveLower(d, v0, v1), r1 = hn::InterleaveUpper(d, v0, v1);
  const V r2 = hn::InterleaveLower(d, v2, v3), r3 = hn::InterleaveUpper(d, v2, v3);
  o0 = hn::BitCast(d, hn::InterleaveLower(d64, hn::BitCast(d64, r0), hn::BitCast(d64, r2)));
  o1 = hn::BitCast(d, hn::InterleaveUpper(d64, hn::BitCast(d64, r0), hn::BitCast(d64, r2)));
  o2 = hn::BitCast(d, hn::InterleaveLower(d64, hn::BitCast(d64, r1), hn::BitCast(d64, r3)));
  o3 = hn::BitCast(d, hn::InterleaveUpper(d64, hn::BitCast(d64, r1), hn::BitCast(d64, r3)));
}

using VB = hn::Vec<hn::Full128<int8_t>>;
// One 16-element part: 8 even elements (lanes 8r.. of ev, x at xe) and 8
// odd ones (lanes 8r.. of od, x at xo); exact int32 lanes whose sum is the part's.
HWY_INLINE VI4 Part16(VB ev, VB od, int r, const int16_t *xe, const int16_t *xo) {
  const hn::Full64<int8_t> h8;
  const hn::Full128<int16_t> d16;
  const DI4 d32;
  const auto e = hn::PromoteTo(d16, r ? hn::UpperHalf(h8, ev) : hn::LowerHalf(ev));
  const auto o = hn::PromoteTo(d16, r ? hn::UpperHalf(h8, od) : hn::LowerHalf(od));
  auto s1 = hn::Zero(d32);
  auto s0 = hn::ReorderWidenMulAccumulate(d32, e, hn::LoadU(d16, xe), hn::Zero(d32), s1);
  s0 = hn::ReorderWidenMulAccumulate(d32, o, hn::LoadU(d16, xo), s0, s1);
  return hn::Add(s0, s1);
}

// Exact sums of 2 * E2M1(code) * x over the four 16-element parts of a
// block of 64 packed codes (x: int16, int order), one a lane.
HWY_INLINE VI4 Parts64(const uint8_t *codes, const int16_t *x) {
  const hn::Full128<uint8_t> d8;
  const hn::Full128<uint16_t> du16;
  const hn::Full128<int8_t> di8;
  const DI4 d32;
  alignas(16) static constexpr int8_t kX2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const auto tab = hn::Load(di8, kX2);
  const auto m = hn::Set(d8, 15);
  // bytes 16h.. hold elements 32h..32h+31: even ones in the low nibbles
  const auto b0 = hn::LoadU(d8, codes), b1 = hn::LoadU(d8, codes + 16);
  const auto ev0 = hn::TableLookupBytes(tab, hn::BitCast(di8, hn::And(b0, m)));
  const auto ev1 = hn::TableLookupBytes(tab, hn::BitCast(di8, hn::And(b1, m)));
  const auto od0 = hn::TableLookupBytes(tab, hn::BitCast(di8, hn::And(hn::BitCast(d8, hn::ShiftRight<4>(hn::BitCast(du16, b0))), m)));
  const auto od1 = hn::TableLookupBytes(tab, hn::BitCast(di8, hn::And(hn::BitCast(d8, hn::ShiftRight<4>(hn::BitCast(du16, b1))), m)));
  // part 2h + r: evens at x[16h + 8r..], odds at x[32 + 16h + 8r..]
  const VI4 p0 = Part16(ev0, od0, 0, x, x + 32), p1 = Part16(ev0, od0, 1, x + 8, x + 40);
  const VI4 p2 = Part16(ev1, od1, 0, x + 16, x + 48), p3 = Part16(ev1, od1, 1, x + 24, x + 56);
  VI4 t0 = hn::Zero(d32), t1 = t0, t2 = t0, t3 = t0;
  Transpose4(d32, p0, p1, p2, p3, t0, t1, t2, t3);
  return hn::Add(hn::Add(t0, t1), hn::Add(t2, t3));
}

// sum_g sc[g] * (sum over group g of x2[i] * code2[i]) for n elements (n a
// multiple of 64) of packed codes; sc[g] = both operands' group scales.
// Per part of 16: an f32 lane a part of a block, then (0 + 1) + (2 + 3).
HWY_INLINE float DotInt16(const uint8_t *codes, const int16_t *x, const float *sc, int gshift,
                          int64_t n) {
  const D4 df;
  auto acc = hn::Zero(df);
  alignas(16) float s[4];
  for (int64_t b = 0; b < n; b += 64) {
    for (int j = 0; j < 4; j++) s[j] = sc[(b + 16 * j) >> gshift];
    acc = hn::Add(hn::Mul(hn::ConvertTo(df, Parts64(codes + b / 2, x + b)), hn::Load(df, s)), acc);
  }
  hn::Store(acc, df, s);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// Unpacked codes (one a byte, as lpk_quantize_domain writes them) -> 2 * E2M1
// as int16 in int order.
HWY_INLINE void CodesToInt16(const uint8_t *c, int64_t n, int16_t *out) {
  static constexpr int16_t kX2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int64_t b = 0; b < n; b += 64)
    for (int64_t i = 0; i < 16; i++) {
      out[b + i] = kX2[c[b + 2 * i]], out[b + 16 + i] = kX2[c[b + 32 + 2 * i]];
      out[b + 32 + i] = kX2[c[b + 2 * i + 1]], out[b + 48 + i] = kX2[c[b + 33 + 2 * i]];
    }
}

#if LP_DEC_INT_X86
// Lanes of _mm256_hadd_epi32(u, v) for two blocks' Block64U lanes u and v:
// first element of the 16 each lane sums (u's block at 0, v's at 64).
static constexpr int kHaddStart[8] = {0, 16, 64, 80, 32, 48, 96, 112};
// PV8Int, channels d and d + 1: lanes (channel, first key of 16).
static constexpr int kPvKey[8] = {0, 16, 0, 16, 32, 48, 32, 48}, kPvCh[8] = {0, 0, 1, 1, 0, 0, 1, 1};
#endif

// The lane constants from x (x86: x8 and csum too; int order: lane l of a
// block holds elements 8l..8l+7, i.e. x[4l..4l+3] and x[32+4l..32+4l+3]).
HWY_INLINE void FinishIntRow(const DecJob &job, int64_t n, bool pv, IntRow *out) {
  const float f = job.qfmt == QP_MXFP4 ? 1.0f : 256.0f;
#if LP_DEC_INT_X86
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
#else
  // Parts of 16 in order; a Q row's parts past D (D = 64) take part 0's
  // scale, as the x86 lanes do.
  for (int l = 0; l < 8; l++) {
    out->idx[l] = 16 * l < n ? (16 * l) >> job.gshift : 0;
    out->sc8[l] = out->sc[out->idx[l]] * f;
    out->corr[l] = 0;
  }
  (void)pv;
#endif
}

// A finite row: the shared outer and group-scale steps (backends/math/lpk_*.h), the
// element step vectorized as QuantizePRow's (E2m1Value), so the same codes as
// lpk_quantize_domain; 2 * E2M1 values go to int order. False if a value of
// the row is not finite (the caller takes the scalar path).
HWY_INLINE bool ToIntRowSimd(const DecJob &job, const float *v, int64_t n, bool pv, IntRow *out) {
  const DQ d;
  if (!AllFinite(d, v, n)) return false;
  const int fmt = job.qfmt, N = (int)hq::Lanes(d);
  const int64_t G = fmt == QP_MXFP4 ? 32 : 16;
  const float outer = fmt == QP_MXFP4 ? 1.0f : lpk_outer_scale(QP_NVFP4, MaxAbs(d, v, n));
  const float *tab = fmt == QP_MXFP4 ? job.e8m0 : job.e4m3;
  alignas(64) float q2[256];
  for (int64_t g = 0; g < n; g += G) {
    uint8_t code;
    float denom;
    lpk_group_scale(fmt, MaxAbs(d, v + g, G), 0, outer, job.pr->mx_round_up, &code, &denom);
    out->sc[g / G] = tab[code];
    const auto vd = hq::Set(d, denom == 0.0f ? 1.0f : denom), two = hq::Set(d, denom == 0.0f ? 0.0f : 2.0f);
    for (int64_t c = g; c < g + G; c += N)
      hq::Store(hq::Mul(E2m1Value(d, hq::Div(hq::LoadU(d, v + c), vd)), two), d, q2 + c);
  }
  // int order: a block's even elements, then its odd ones (small integers:
  // exact conversions)
#if LP_DEC_INT_X86
  const hn::Full256<float> d8;
  const hn::Full256<int32_t> d32;
  const hn::Full128<int16_t> d16;
  for (int64_t b = 0; b < n; b += 64)
    for (int64_t q = 0; q < 4; q++) {
      const auto lo = hn::Load(d8, q2 + b + 16 * q), hi = hn::Load(d8, q2 + b + 16 * q + 8);
      hn::StoreU(hn::DemoteTo(d16, hn::ConvertTo(d32, hn::ConcatEven(d8, hi, lo))), d16, out->x + b + 8 * q);
      hn::StoreU(hn::DemoteTo(d16, hn::ConvertTo(d32, hn::ConcatOdd(d8, hi, lo))), d16, out->x + b + 32 + 8 * q);
    }
#else
  for (int64_t b = 0; b < n; b += 64)
    for (int64_t i = 0; i < 32; i++)
      out->x[b + i] = (int16_t)q2[b + 2 * i], out->x[b + 32 + i] = (int16_t)q2[b + 2 * i + 1];
#endif
  out->outer = outer;
  FinishIntRow(job, n, pv, out);
  return true;
}

HWY_INLINE void ToIntRow(const DecJob &job, const float *v, int64_t n, bool pv, Scratch *sc,
                         IntRow *out) {
  if (ToIntRowSimd(job, v, n, pv, out)) return;
  float outer;
  lpk_quantize_domain(job.qfmt, job.pr->mx_round_up, 0, 0, NULL, v, 1, (int)n, sc->codes.data(),
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

#if !LP_DEC_INT_X86
// Eight keys or channels a call (tiles of 64 keys, D = 64 or 128), Highway
// ops: Parts64 per key / channel, scaled per part, then four keys'
// (channels') parts transposed so the sums run across lanes, in the order
// of the x86 kernels' horizontal adds.

// The decoded group scales of every key (v = 0: T keys, 8 parts) or channel
// (v = 1: D channels, 4 parts of 16 keys) of a quantized tile, idx[] of the
// row's IntRow picking each part's group; E4M3 as its value / 256 (exact;
// IntRow sc8 holds the 256), E8M0 as is.
HWY_INLINE void ScaleLanes(const DecJob &job, const LowTile &t, int v, const int32_t *idx, float *out) {
  const lp_kv_layout &L = *t.L;
  const bool mx = L.fmt == LPATTN_FMT_MXFP4;
  const float *tab = mx ? job.e8m0 : job.e4m3, f = mx ? 1.0f : 1.0f / 256.0f;
  const int64_t per = v ? 64 >> job.gshift : job.D >> job.gshift, n = v ? job.D : job.T, np = v ? 4 : 8;
  const uint8_t *codes = t.p + (v ? L.vs : L.ks);
  for (int64_t k = 0; k < n; k++)
    for (int64_t l = 0; l < np; l++) out[np * k + l] = tab[codes[k * per + idx[l]]] * f;
}

// Key c's parts against row x, scaled: a = parts 0..3, b = parts 4..7.
HWY_INLINE void KeyParts(const LowTile &t, int64_t D, int64_t c, const IntRow &x, const float *ksc, V4 xa,
                         V4 xb, V4 &a, V4 &b) {
  const D4 df;
  const uint8_t *codes = t.p + t.L->kc + c * (D / 2);
  const VI4 u = Parts64(codes, x.x), w = D > 64 ? Parts64(codes + 32, x.x + 64) : hn::Zero(DI4());
  a = hn::Mul(hn::ConvertTo(df, u), hn::Mul(hn::Load(df, ksc + 8 * c), xa));
  b = hn::Mul(hn::ConvertTo(df, w), hn::Mul(hn::Load(df, ksc + 8 * c + 4), xb));
}

// Scores S[c0 .. c0 + 8) of keys of a quantized tile for int row x; ksc:
// the tile's ScaleLanes (v = 0).
HWY_INLINE void Scores8Int(const DecJob &job, const LowTile &t, int64_t c0, const IntRow &x, const float *ksc,
                           float *S) {
  const D4 df;
  const lp_kv_layout &L = *t.L;
  const int64_t D = job.D;
  const bool mx = L.fmt == LPATTN_FMT_MXFP4;
  const V4 xa = hn::LoadU(df, x.sc8), xb = hn::LoadU(df, x.sc8 + 4);
  const V4 f = hn::Set(df, 0.25f * x.outer);
  for (int64_t c4 = c0; c4 < c0 + 8; c4 += 4) {
    V4 a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    KeyParts(t, D, c4, x, ksc, xa, xb, a0, b0);
    KeyParts(t, D, c4 + 1, x, ksc, xa, xb, a1, b1);
    KeyParts(t, D, c4 + 2, x, ksc, xa, xb, a2, b2);
    KeyParts(t, D, c4 + 3, x, ksc, xa, xb, a3, b3);
    // lanes: keys; ta_j = part j, tb_j = part 4 + j
    V4 ta0 = a0, ta1 = a0, ta2 = a0, ta3 = a0, tb0 = a0, tb1 = a0, tb2 = a0, tb3 = a0;
    Transpose4(df, a0, a1, a2, a3, ta0, ta1, ta2, ta3);
    Transpose4(df, b0, b1, b2, b3, tb0, tb1, tb2, tb3);
    const V4 sum = hn::Add(hn::Add(hn::Add(ta0, ta1), hn::Add(tb0, tb1)),
                           hn::Add(hn::Add(ta2, ta3), hn::Add(tb2, tb3)));
    const V4 o = mx ? f : hn::Mul(hn::LoadU(df, (const float *)(t.p + L.ko) + c4), f);
    hn::StoreU(hn::Mul(sum, o), df, S + c4);
  }
}

// Channel d's parts (16 keys each) against P row p, scaled.
HWY_INLINE V4 ChannelParts(const LowTile &t, int64_t d, const IntRow &p, const float *vsc, V4 ps) {
  const D4 df;
  return hn::Mul(hn::ConvertTo(df, Parts64(t.p + t.L->vc + d * 32, p.x)), hn::Mul(hn::Load(df, vsc + 4 * d), ps));
}

// acc[d0 .. d0 + 8) += P^ . V[:, d] for int row p of a tile of 64 keys;
// vsc: the tile's ScaleLanes (v = 1).
HWY_INLINE void PV8Int(const DecJob &job, const LowTile &t, int64_t d0, const IntRow &p, const float *vsc,
                       float *acc) {
  const D4 df;
  const lp_kv_layout &L = *t.L;
  const bool mx = L.fmt == LPATTN_FMT_MXFP4;
  const V4 ps = hn::LoadU(df, p.sc8), f = hn::Set(df, 0.25f * p.outer);
  (void)job;
  for (int64_t d4 = d0; d4 < d0 + 8; d4 += 4) {
    const V4 w0 = ChannelParts(t, d4, p, vsc, ps), w1 = ChannelParts(t, d4 + 1, p, vsc, ps);
    const V4 w2 = ChannelParts(t, d4 + 2, p, vsc, ps), w3 = ChannelParts(t, d4 + 3, p, vsc, ps);
    V4 t0 = w0, t1 = w0, t2 = w0, t3 = w0;  // lanes: channels; t_j = part j
    Transpose4(df, w0, w1, w2, w3, t0, t1, t2, t3);
    const V4 sum = hn::Add(hn::Add(t0, t1), hn::Add(t2, t3));
    const V4 o = mx ? f : hn::Mul(hn::LoadU(df, (const float *)(t.p + L.vo) + d4), f);
    hn::StoreU(hn::Add(hn::Mul(sum, o), hn::LoadU(df, acc + d4)), df, acc + d4);  // (no FMA: SSE4 has none)
  }
}
#endif  // !LP_DEC_INT_X86
#endif  // LP_DEC_INT

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
