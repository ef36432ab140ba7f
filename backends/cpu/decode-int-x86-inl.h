// Paged decode, x86 AVX2 and AVX-512 (decode-int-inl.h): the exact-integer
// FP4 kernels of eight keys or channels with 256-bit intrinsics. AVX-512
// targets run them as they are (their 256-bit forms), so AVX2 and AVX3 give
// the same bits, and the same as the Highway-op kernels of the other
// targets (the same integer sums, the same f32 order).
#if defined(LPATTN_CPU_DECODE_INT_X86_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_CPU_DECODE_INT_X86_INL_H_
#undef LPATTN_CPU_DECODE_INT_X86_INL_H_
#else
#define LPATTN_CPU_DECODE_INT_X86_INL_H_
#endif

#include "decode-int-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {

#if LP_DEC_INT_X86
// Eight keys or channels at once. A block of 64 FP4 codes against an
// int row: the codes become 2 * E2M1 + 12 (0..24, unsigned bytes) by a byte
// shuffle, _mm256_maddubs_epi16 / _mm256_madd_epi16 sum them times the row's
// int8 values exactly into 8 lanes of 8 elements, and 12 * sum(x) (IntRow
// csum) is taken off after a horizontal add that leaves one lane per 16
// elements. Group scales are decoded from their codes in registers (no table,
// no gather; once per tile, ScaleLanes), multiplied by the row's, and one f32
// multiply per lane applies them; eight dot products are then reduced
// together by horizontal adds.
using D8 = hn::Full256<float>;
using VF = hn::Vec<D8>;

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
  const D8 df;
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
  const D8 df;
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
  hn::StoreU(hn::Add(hn::Mul(sum, o), hn::LoadU(df, acc + d0)), df, acc + d0);  // (as PV8Int elsewhere)
}
#endif  // LP_DEC_INT_X86

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
