// Highway paged decode (SEMANTICS "Decode"): one chunk of one (sequence, kv
// head) per call (cpu.h DecItem). Tiles are read in place from the pool:
// high tiles converted from f16/bf16/f32 with SIMD, quantized tiles decoded
// from their packed codes and scales in registers, a key (K) or channel (V)
// at a time into an L1 line, each read once for all rows of the GQA group.
// The softmax state, the P quantizer and the row primitives are the prefill
// engine's (attn-inl.h, quantp-inl.h, gen/common.h).
#if defined(LPATTN_CPU_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_CPU_DECODE_INL_H_
#undef LPATTN_CPU_DECODE_INL_H_
#else
#define LPATTN_CPU_DECODE_INL_H_
#endif

#include "attn-inl.h"
#include "kvpool.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {

// FP4 codes come two a byte; a block of 2N elements is decoded as N even
// elements then N odd ones ("FP4 order"). Operands dotted with decoded FP4
// data are put in the same order first.
HWY_INLINE void Fp4Order(const float *x, int64_t n, float *y) {
  const int64_t N = hn::Lanes(DF());
  for (int64_t b = 0; b < n; b += 2 * N)
    for (int64_t i = 0; i < N; i++) y[b + i] = x[b + 2 * i], y[b + N + i] = x[b + 2 * i + 1];
}

// E2M1 values of 4-bit codes in u32 lanes: a lane permute of the value
// table where a vector holds 8 or 16 floats, bit arithmetic otherwise.
template <class VU>
HWY_INLINE hn::Vec<DF> E2m1Decode(VU c) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const int64_t N = hn::Lanes(df);
  alignas(64) static constexpr float kTab[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  if (N == 16) return hn::TableLookupLanes(hn::Load(df, kTab), hn::IndicesFromVec(df, hn::BitCast(di, c)));
  const auto sign = hn::ShiftLeft<28>(hn::And(c, hn::Set(du, 8u)));
  const auto mag = hn::And(c, hn::Set(du, 7u));
  if (N == 8) {
    const auto m = hn::TableLookupLanes(hn::Load(df, kTab), hn::IndicesFromVec(df, hn::BitCast(di, mag)));
    return hn::BitCast(df, hn::Or(hn::BitCast(du, m), sign));
  }
  const auto half = hn::Set(du, 0x3F000000u);  // 0.5
  const auto big = hn::Add(hn::ShiftLeft<22>(mag), half);  // 1, 1.5, 2, 3, 4, 6 for 2..7
  const auto small = hn::IfThenElseZero(hn::Eq(mag, hn::Set(du, 1u)), half);
  const auto bits = hn::IfThenElse(hn::Lt(mag, hn::Set(du, 2u)), small, big);
  return hn::BitCast(df, hn::Or(bits, sign));
}

// sum_i x[i] * value[i] over n FP4 elements (x in FP4 order), with one
// decoded scale per group of G, sc[g]: the decode never leaves registers.
HWY_INLINE float DotFp4(const uint8_t *codes, const float *sc, int gshift, int64_t n, const float *x) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint8_t, DF> d8;
  const int64_t N = hn::Lanes(df);
  const auto first = hn::FirstN(df, (size_t)(N / 2));
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < n; b += 2 * N) {
    const auto bytes = hn::PromoteTo(du, hn::LoadU(d8, codes + b / 2));
    const auto lo = E2m1Decode(hn::And(bytes, hn::Set(du, 15u)));
    const auto hi = E2m1Decode(hn::ShiftRight<4>(bytes));
    const auto t = hn::MulAdd(hn::LoadU(df, x + b), lo, hn::Mul(hn::LoadU(df, x + b + N), hi));
    const int64_t g = b >> gshift;
    const auto sv = 2 * N > (1 << gshift)
                        ? hn::IfThenElse(first, hn::Set(df, sc[g]), hn::Set(df, sc[g + 1]))
                        : hn::Set(df, sc[g]);
    acc = hn::MulAdd(t, sv, acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

// n FP4 elements (n / 2 bytes of codes) with one decoded scale per group of
// 2^gshift elements, sc[g] (outer included), in FP4 order.
HWY_INLINE void DecodeFp4(const uint8_t *codes, const float *sc, int gshift, int64_t n, float *out) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint8_t, DF> d8;
  const int64_t N = hn::Lanes(df);
  const auto first = hn::FirstN(df, (size_t)(N / 2));
  for (int64_t b = 0; b < n; b += 2 * N) {
    const auto bytes = hn::PromoteTo(du, hn::LoadU(d8, codes + b / 2));
    const auto lo = E2m1Decode(hn::And(bytes, hn::Set(du, 15u)));
    const auto hi = E2m1Decode(hn::ShiftRight<4>(bytes));
    const int64_t g = b >> gshift;
    const auto sv = 2 * N > (1 << gshift)
                        ? hn::IfThenElse(first, hn::Set(df, sc[g]), hn::Set(df, sc[g + 1]))
                        : hn::Set(df, sc[g]);
    hn::StoreU(hn::Mul(lo, sv), df, out + b);
    hn::StoreU(hn::Mul(hi, sv), df, out + b + N);
  }
}

// n E4M3 elements times `scale`, in natural order (E4M3 -> f16 bits -> f32,
// then * 2^8 folded into the scale; exact).
HWY_INLINE void DecodeFp8(const uint8_t *codes, float scale, int64_t n, float *out) {
  const DF df;
  const hn::Rebind<uint8_t, DF> d8;
  const hn::Rebind<uint16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t N = hn::Lanes(df);
  const auto s = hn::Set(df, scale * 256.0f);
  for (int64_t i = 0; i < n; i += N) {
    const auto c = hn::PromoteTo(d16, hn::LoadU(d8, codes + i));
    const auto h = hn::Or(hn::ShiftLeft<8>(hn::And(c, hn::Set(d16, 0x80))),
                          hn::ShiftLeft<7>(hn::And(c, hn::Set(d16, 0x7F))));
    hn::StoreU(hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, h)), s), df, out + i);
  }
}

// One row of n high elements (f32/f16/bf16) as f32.
HWY_INLINE void ConvertHigh(const uint8_t *src, lpattn_dtype dt, int64_t n, float *out) {
  const DF df;
  const int64_t N = hn::Lanes(df);
  if (dt == LPATTN_F32) {
    memcpy(out, src, sizeof(float) * (size_t)n);
  } else if (dt == LPATTN_F16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    const hwy::float16_t *p = reinterpret_cast<const hwy::float16_t *>(src);
    for (int64_t i = 0; i < n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, p + i)), df, out + i);
  } else {
    const hn::Rebind<hwy::bfloat16_t, DF> db;
    const hwy::bfloat16_t *p = reinterpret_cast<const hwy::bfloat16_t *>(src);
    for (int64_t i = 0; i < n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(db, p + i)), df, out + i);
  }
}

HWY_INLINE float Dot(const float *a, const float *b, int64_t n) {
  const DF df;
  const int64_t N = hn::Lanes(df);
  auto s0 = hn::Zero(df), s1 = s0;
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(df, a + i + N), hn::LoadU(df, b + i + N), s1);
  }
  for (; i < n; i += N) s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1)));
}

// N high elements (f32 = 0, f16 = 1, bf16 = 2) at element i, as f32.
template <int kDt>
HWY_INLINE hn::Vec<DF> LoadHigh(const uint8_t *src, int64_t i) {
  const DF df;
  if (kDt == 0) return hn::LoadU(df, reinterpret_cast<const float *>(src) + i);
  if (kDt == 1) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t *>(src) + i));
  }
  const hn::Rebind<hwy::bfloat16_t, DF> db;
  return hn::PromoteTo(df, hn::LoadU(db, reinterpret_cast<const hwy::bfloat16_t *>(src) + i));
}

// One row: S[c] = x . k_c for the keys c < nk of a high tile ([nk][D] rows).
template <int kDt>
HWY_INLINE void ScoresHigh1(const float *x, const uint8_t *k, int64_t D, int64_t nk, float *S) {
  const DF df;
  const int64_t N = hn::Lanes(df), rb = D * (kDt ? 2 : 4);
  for (int64_t c = 0; c < nk; c++) {
    const uint8_t *row = k + c * rb;
    auto s0 = hn::Zero(df), s1 = s0;
    int64_t d = 0;
    for (; d + 2 * N <= D; d += 2 * N) {
      s0 = hn::MulAdd(hn::LoadU(df, x + d), LoadHigh<kDt>(row, d), s0);
      s1 = hn::MulAdd(hn::LoadU(df, x + d + N), LoadHigh<kDt>(row, d + N), s1);
    }
    for (; d < D; d += N) s0 = hn::MulAdd(hn::LoadU(df, x + d), LoadHigh<kDt>(row, d), s0);
    S[c] = hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1)));
  }
}

// One row: acc += sum_{c < nv} p[c] v_c over a high tile, acc held in
// registers 4 vectors at a time (zero weights skipped).
template <int kDt>
HWY_INLINE void AccumHigh1(const float *p, const uint8_t *v, int64_t D, int64_t nv, float *acc) {
  const DF df;
  const int64_t N = hn::Lanes(df), rb = D * (kDt ? 2 : 4);
  int64_t d = 0;
  for (; d + 4 * N <= D; d += 4 * N) {
    auto a0 = hn::LoadU(df, acc + d), a1 = hn::LoadU(df, acc + d + N);
    auto a2 = hn::LoadU(df, acc + d + 2 * N), a3 = hn::LoadU(df, acc + d + 3 * N);
    for (int64_t c = 0; c < nv; c++) {
      if (p[c] == 0.0f) continue;
      const auto w = hn::Set(df, p[c]);
      const uint8_t *row = v + c * rb;
      a0 = hn::MulAdd(w, LoadHigh<kDt>(row, d), a0);
      a1 = hn::MulAdd(w, LoadHigh<kDt>(row, d + N), a1);
      a2 = hn::MulAdd(w, LoadHigh<kDt>(row, d + 2 * N), a2);
      a3 = hn::MulAdd(w, LoadHigh<kDt>(row, d + 3 * N), a3);
    }
    hn::StoreU(a0, df, acc + d), hn::StoreU(a1, df, acc + d + N);
    hn::StoreU(a2, df, acc + d + 2 * N), hn::StoreU(a3, df, acc + d + 3 * N);
  }
  for (; d < D; d += N) {
    auto a0 = hn::LoadU(df, acc + d);
    for (int64_t c = 0; c < nv; c++)
      if (p[c] != 0.0f) a0 = hn::MulAdd(hn::Set(df, p[c]), LoadHigh<kDt>(v + c * rb, d), a0);
    hn::StoreU(a0, df, acc + d);
  }
}

HWY_INLINE void ScoresHigh(lpattn_dtype dt, const float *x, const uint8_t *k, int64_t D, int64_t nk,
                           float *S) {
  if (dt == LPATTN_F16) ScoresHigh1<1>(x, k, D, nk, S);
  else if (dt == LPATTN_BF16) ScoresHigh1<2>(x, k, D, nk, S);
  else ScoresHigh1<0>(x, k, D, nk, S);
}

HWY_INLINE void AccumHigh(lpattn_dtype dt, const float *p, const uint8_t *v, int64_t D, int64_t nv,
                          float *acc) {
  if (dt == LPATTN_F16) AccumHigh1<1>(p, v, D, nv, acc);
  else if (dt == LPATTN_BF16) AccumHigh1<2>(p, v, D, nv, acc);
  else AccumHigh1<0>(p, v, D, nv, acc);
}

// acc[0, n) *= alpha.
HWY_INLINE void ScaleRow(float *acc, float alpha, int64_t n) {
  const DF df;
  const int64_t N = hn::Lanes(df);
  const auto va = hn::Set(df, alpha);
  for (int64_t i = 0; i < n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, acc + i), va), df, acc + i);
}

// acc[0, n) += p * x.
HWY_INLINE void Axpy(float *acc, float p, const float *x, int64_t n) {
  const DF df;
  const int64_t N = hn::Lanes(df);
  const auto vp = hn::Set(df, p);
  for (int64_t i = 0; i < n; i += N)
    hn::StoreU(hn::MulAdd(vp, hn::LoadU(df, x + i), hn::LoadU(df, acc + i)), df, acc + i);
}

// Quantized tile of one kv head: key c or channel d decoded with its scales.
struct LowTile {
  const uint8_t *p;  // the head's part of the page
  const lp_kv_layout *L;
};

// Codes, decoded group scales (outer included) and outer of key (v = 0) or
// channel (v = 1) i of a quantized tile.
struct LowLine {
  const uint8_t *codes;
  float outer, sc[16];  // n / G <= 256 / 16
  int64_t n;
};

HWY_INLINE void LowLineOf(const DecJob &job, const LowTile &t, int v, int64_t i, LowLine *ln) {
  const lp_kv_layout &L = *t.L;
  const int64_t n = v ? job.T : job.D, ng = n >> job.gshift;
  ln->n = n;
  ln->codes = t.p + (v ? L.vc : L.kc) + (job.fp4 ? i * (n >> 1) : i * n);
  ln->outer = L.fmt == LPATTN_FMT_MXFP4 ? 1.0f : ((const float *)(t.p + (v ? L.vo : L.ko)))[i];
  if (!job.fp4) return;
  const uint8_t *scales = t.p + (v ? L.vs : L.ks) + i * ng;
  const float *tab = L.fmt == LPATTN_FMT_MXFP4 ? job.e8m0 : job.e4m3;
  for (int64_t g = 0; g < ng; g++) ln->sc[g] = tab[scales[g]] * ln->outer;
}

HWY_INLINE void DecodeLow(const DecJob &job, const LowTile &t, int v, int64_t i, float *out) {
  LowLine ln;
  LowLineOf(job, t, v, i, &ln);
  if (job.fp4) DecodeFp4(ln.codes, ln.sc, job.gshift, ln.n, out);
  else DecodeFp8(ln.codes, ln.outer, ln.n, out);
}

// x . (key or channel i), decoded in registers (FP4), x in FP4 order.
HWY_INLINE float DotLow(const DecJob &job, const LowTile &t, int v, int64_t i, const float *x,
                        float *buf) {
  LowLine ln;
  LowLineOf(job, t, v, i, &ln);
  if (job.fp4) return DotFp4(ln.codes, ln.sc, job.gshift, ln.n, x);
  DecodeFp8(ln.codes, ln.outer, ln.n, buf);
  return Dot(x, buf, ln.n);
}

// AVX2: FP4 x FP4 dot products in exact int16 arithmetic. Q (and P) are
// FP4-quantized by the shared quantizer (lpk_quantize_domain, the same codes
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

HWY_INLINE void ToIntRow(const DecJob &job, const float *v, int64_t n, Scratch *sc, IntRow *out) {
  float outer;
  lpk_quantize_domain(job.qfmt, job.pr->mx_round_up, 0, 0, NULL, v, 1, (int)n, sc->codes.data(),
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

// Tile modes of the rows of q head g whose query tile is i (w = 0: the
// first row's tile, 1: the last row's), for tiles 0..i.
HWY_INLINE void RowModes(const DecJob &job, const DecSeq &sq, int64_t hkv, int64_t g, int64_t i,
                         DecScratch *w, uint8_t *mode) {
  const lpattn_attn_problem &pr = *job.pr;
  uint8_t *kind = w->kind.data();
  float *score = w->score.data();
  for (int64_t j = 0; j <= i; j++) kind[j] = j < i ? LP_TILE_FULL : LP_TILE_DIAG, score[j] = 0.0f;
  if (job.thrift) {
    const int64_t qt = pr.selection_mode == LPATTN_SELECT_CAUSAL ? i - 1 : i;
    if (qt >= 0) {
      lp_kv_seq_qmean(&sq.s, (int)(hkv * job.G + g), qt, w->qbar.data());
      for (int64_t j = 0; j < i; j++)
        score[j] = lp_dot_f32(w->qbar.data(), lp_kv_seq_kmean(&sq.s, (int)hkv, j), job.D);
    }
  }
  lp_tile_modes(pr.precision, 0, sq.k, i + 1, kind, score, mode);
}

HWY_INLINE void DecodeItem(const DecJob &job, int64_t item, DecScratch *w) {
  const lpattn_attn_problem &pr = *job.pr;
  const DecItem it = job.items[item];
  const DecSeq &sq = job.seqs[it.seq];
  const lp_kv_layout &L = sq.s.L;
  const int64_t T = job.T, D = job.D, R = job.R, Sq = job.Sq, G = job.G, len = sq.s.len;
  const int64_t i0 = (len - Sq) / T, i1 = sq.i1, h = it.h;
  const lpattn_dtype hdt = sq.s.pool->p.high_dtype;
  float *q = w->q.data(), *ql = w->ql.data(), *S = w->s.data(), *P = w->p.data();
  float *Pp = w->pp.data(), *acc = w->acc.data(), *kd = w->kd.data(), *vd = w->vd.data();
  int64_t *pos = w->pos.data(), *nvis = w->nvis.data();
  int32_t *list = w->list.data();
  lpk_row *rows = w->rows.data();
  uint8_t *mode = w->mode.data();  // [G][2][i1 + 1]
  const int64_t nt = i1 + 1;
  for (int64_t g = 0; g < G; g++) {
    RowModes(job, sq, h, g, i1, w, mode + (g * 2 + 1) * nt);
    if (i0 != i1) RowModes(job, sq, h, g, i0, w, mode + g * 2 * nt);
  }
#if HWY_TARGET == HWY_AVX2
  const bool use_int = job.low && job.fp4 && D % 64 == 0 && T % 64 == 0;
  const bool use_int8 = use_int && T == 64 && D <= 128;  // eight keys / channels at a time
  IntRow *qi = reinterpret_cast<IntRow *>(w->ib.data()), *pi = qi + R;
#endif
  for (int64_t r = 0; r < R; r++) {
    const int64_t g = r / Sq, qr = r % Sq, hq = h * G + g;
    pos[r] = len - Sq + qr;
    LoadRow(pr.q, lp_off4(pr.q, sq.b, hq, qr, 0), pr.q->stride[3], D, q + r * D);
#if HWY_TARGET == HWY_AVX2
    if (use_int) ToIntRow(job, q + r * D, D, &w->sc, &qi[r]);
#endif
    if (job.low) {
      QuantizePRow(job.qfmt, pr.mx_round_up, q + r * D, D, &w->sc, kd);
      if (job.fp4) Fp4Order(kd, D, ql + r * D);
      else memcpy(ql + r * D, kd, sizeof(float) * (size_t)D);
    }
    lpk_row_init(&rows[r]);
    for (int64_t d = 0; d < D; d++) acc[r * D + d] = 0.0f;
  }
  const int64_t j0 = (int64_t)it.chunk * LP_DECODE_CHUNK_TILES;
  const int64_t j1 = j0 + LP_DECODE_CHUNK_TILES - 1 < i1 ? j0 + LP_DECODE_CHUNK_TILES - 1 : i1;
  const float ss = pr.sm_scale;
  for (int64_t j = j0; j <= j1; j++) {
    for (int md = LP_MODE_HIGH; md <= LP_MODE_LOW; md++) {
      int64_t n = 0, maxvis = 0;
      for (int64_t r = 0; r < R; r++) {
        const int64_t i = pos[r] / T, g = r / Sq;
        if (j > i || mode[(g * 2 + (i == i1)) * nt + j] != md) continue;
        list[n++] = (int32_t)r;
        nvis[r] = pos[r] - j * T + 1 < T ? pos[r] - j * T + 1 : T;
        maxvis = nvis[r] > maxvis ? nvis[r] : maxvis;
      }
      if (!n) continue;
      const bool low = md == LP_MODE_LOW;
      int64_t nk = T;
      const uint8_t *hk = nullptr, *hv = nullptr;
      LowTile lt = {nullptr, &L};
      if (low) {
        lt.p = lp_kv_page_ptr(&sq.s, j) + (size_t)h * L.head_bytes;
      } else {
        hk = lp_kv_high_ptr(&sq.s, 0, (int)h, j, &nk);
        hv = lp_kv_high_ptr(&sq.s, 1, (int)h, j, &nk);
      }
      const size_t row_bytes = (size_t)(D * L.esz);
      // Scores: each key decoded once for every row of the list.
#if HWY_TARGET == HWY_AVX2
      if (low && use_int8) {
        for (int64_t l = 0; l < n; l++)
          for (int64_t c = 0; c < T; c += 8) Scores8Int(job, lt, c, qi[list[l]], S + list[l] * T);
      } else if (low && use_int) {
        for (int64_t c = 0; c < maxvis; c++)
          for (int64_t l = 0; l < n; l++) S[list[l] * T + c] = DotLowInt(job, lt, 0, c, qi[list[l]]);
      } else
#endif
      if (low && n == 1) {  // one row: decode and dot in registers
        const int64_t r = list[0];
        for (int64_t c = 0; c < maxvis; c++) S[r * T + c] = DotLow(job, lt, 0, c, ql + r * D, kd);
      } else if (n == 1) {
        ScoresHigh(hdt, q + list[0] * D, hk, D, maxvis, S + list[0] * T);
      } else for (int64_t c = 0; c < maxvis; c++) {
        if (low) DecodeLow(job, lt, 0, c, kd);
        else ConvertHigh(hk + c * row_bytes, hdt, D, kd);
        for (int64_t l = 0; l < n; l++) {
          const int64_t r = list[l];
          S[r * T + c] = Dot(low ? ql + r * D : q + r * D, kd, D);
        }
      }
      for (int64_t l = 0; l < n; l++) {
        const int64_t r = list[l];
        float *s = S + r * T, *p = P + r * T;
        ScaleMask(s, T, nvis[r], ss);
        const lpk_step st = lpk_row_begin(&rows[r], RowMax(s, T), 0.0f);
        float sum_p, sum_ps;
        ExpRow(s, T, st.bias, p, &sum_p, &sum_ps);
        lpk_row_end(&rows[r], &st, sum_p, sum_ps);
        if (st.alpha != 1.0f) ScaleRow(acc + r * D, st.alpha, D);
#if HWY_TARGET == HWY_AVX2
        if (low && use_int) {
          ToIntRow(job, p, T, &w->sc, &pi[r]);
          continue;
        }
#endif
        if (low) {
          QuantizePRow(job.pfmt, pr.mx_round_up, p, T, &w->sc, p);
          if (job.fp4) Fp4Order(p, T, Pp + r * T);
          else memcpy(Pp + r * T, p, sizeof(float) * (size_t)T);
        }
      }
      if (low) {  // acc[d] += P^ . V[:, d], a channel at a time
#if HWY_TARGET == HWY_AVX2
        if (use_int8) {
          for (int64_t l = 0; l < n; l++)
            for (int64_t d = 0; d < D; d += 8) PV8Int(job, lt, d, pi[list[l]], acc + list[l] * D);
        } else if (use_int) {
          for (int64_t d = 0; d < D; d++)
            for (int64_t l = 0; l < n; l++) acc[list[l] * D + d] += DotLowInt(job, lt, 1, d, pi[list[l]]);
        } else
#endif
        if (n == 1) {
          const int64_t r = list[0];
          for (int64_t d = 0; d < D; d++) acc[r * D + d] += DotLow(job, lt, 1, d, Pp + r * T, vd);
        } else for (int64_t d = 0; d < D; d++) {
          DecodeLow(job, lt, 1, d, vd);
          for (int64_t l = 0; l < n; l++) {
            const int64_t r = list[l];
            acc[r * D + d] += Dot(Pp + r * T, vd, T);
          }
        }
      } else if (n == 1) {
        AccumHigh(hdt, P + list[0] * T, hv, D, maxvis, acc + list[0] * D);
      } else {  // acc += sum_c P[c] V[c], a key at a time
        for (int64_t c = 0; c < maxvis; c++) {
          ConvertHigh(hv + c * row_bytes, hdt, D, vd);
          for (int64_t l = 0; l < n; l++) {
            const int64_t r = list[l];
            if (c < nvis[r] && P[r * T + c] != 0.0f) Axpy(acc + r * D, P[r * T + c], vd, D);
          }
        }
      }
    }
  }
  float *out = job.part + item * R * (D + 2);
  for (int64_t r = 0; r < R; r++) {
    float inv_l, lse, ent;
    lpk_row_finish(&rows[r], &inv_l, &lse, &ent);
    for (int64_t d = 0; d < D; d++) out[r * (D + 2) + d] = acc[r * D + d] * inv_l;
    out[r * (D + 2) + D] = lse, out[r * (D + 2) + D + 1] = ent;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
