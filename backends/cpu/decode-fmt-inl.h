// Paged decode building blocks (decode-inl.h): the pool's tile formats read
// in registers (FP4 and FP8 codes with their scales, f16/bf16/f32 high rows)
// and the row operations the kernel applies to them.
#if defined(LPATTN_CPU_DECODE_FMT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_CPU_DECODE_FMT_INL_H_
#undef LPATTN_CPU_DECODE_FMT_INL_H_
#else
#define LPATTN_CPU_DECODE_FMT_INL_H_
#endif

#include "attn-inl.h"
#include "kvpool.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {

// FP4 codes come two a byte; a block of 2N elements is decoded as N even
// elements then N odd ones ("FP4 order"). Operands dotted with decoded FP4
// data are put in the same order first. n is even; a last block of m < 2N
// elements (head_dim 16 mod 32 where N = 16, as on AVX-512) is m / 2 even
// then m / 2 odd, decoded with scalar code (Fp4Tail*).
HWY_INLINE int64_t Fp4Whole(int64_t n) { return n - n % (2 * (int64_t)hn::Lanes(DF())); }

HWY_INLINE void Fp4Order(const float *x, int64_t n, float *y) {
  const int64_t N = hn::Lanes(DF()), nw = Fp4Whole(n);
  for (int64_t b = 0; b < nw; b += 2 * N)
    for (int64_t i = 0; i < N; i++) y[b + i] = x[b + 2 * i], y[b + N + i] = x[b + 2 * i + 1];
  const int64_t m = (n - nw) / 2;
  for (int64_t i = 0; i < m; i++) y[nw + i] = x[nw + 2 * i], y[nw + m + i] = x[nw + 2 * i + 1];
}

// The last block [nw, n) of FP4 elements in FP4 order: sum of x * value, or
// the values into out; element e's scale is sc[e >> gshift].
HWY_INLINE float Fp4TailDot(const uint8_t *codes, const float *sc, int gshift, int64_t nw, int64_t n,
                            const float *x) {
  const int64_t m = (n - nw) / 2;
  float s = 0.0f;
  for (int64_t i = 0; i < m; i++) {
    const uint8_t c = codes[nw / 2 + i];
    const float lo = lpk_e2m1_decode((uint8_t)(c & 15)), hi = lpk_e2m1_decode((uint8_t)(c >> 4));
    s += (x[nw + i] * lo + x[nw + m + i] * hi) * sc[(nw + 2 * i) >> gshift];
  }
  return s;
}
HWY_INLINE void Fp4TailDecode(const uint8_t *codes, const float *sc, int gshift, int64_t nw, int64_t n,
                              float *out) {
  const int64_t m = (n - nw) / 2;
  for (int64_t i = 0; i < m; i++) {
    const uint8_t c = codes[nw / 2 + i];
    const float s = sc[(nw + 2 * i) >> gshift];
    out[nw + i] = lpk_e2m1_decode((uint8_t)(c & 15)) * s;
    out[nw + m + i] = lpk_e2m1_decode((uint8_t)(c >> 4)) * s;
  }
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
  const int64_t nw = Fp4Whole(n);
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < nw; b += 2 * N) {
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
  const float s = hn::GetLane(hn::SumOfLanes(df, acc));
  return nw == n ? s : s + Fp4TailDot(codes, sc, gshift, nw, n, x);
}

// n FP4 elements (n / 2 bytes of codes) with one decoded scale per group of
// 2^gshift elements, sc[g] (outer included), in FP4 order.
HWY_INLINE void DecodeFp4(const uint8_t *codes, const float *sc, int gshift, int64_t n, float *out) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint8_t, DF> d8;
  const int64_t N = hn::Lanes(df);
  const auto first = hn::FirstN(df, (size_t)(N / 2));
  const int64_t nw = Fp4Whole(n);
  for (int64_t b = 0; b < nw; b += 2 * N) {
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
  if (nw != n) Fp4TailDecode(codes, sc, gshift, nw, n, out);
}

// N E4M3 codes as f32 lanes of value / 256 (exact): the code sign-extended
// to 16 bits and shifted left by 7 is the f16 of value / 256 but for bit
// 14, a copy of the sign, which is cleared.
HWY_INLINE hn::Vec<DF> Fp8Lanes(const uint8_t *codes) {
  const DF df;
  const hn::Rebind<int8_t, DF> d8;
  const hn::Rebind<int16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const auto c = hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const int8_t *>(codes)));
  return hn::PromoteTo(df, hn::BitCast(dh, hn::And(hn::ShiftLeft<7>(c), hn::Set(d16, int16_t(-16385)))));
}

// n E4M3 elements times `scale`, in natural order (E4M3 -> f16 bits -> f32,
// then * 2^8 folded into the scale; exact).
HWY_INLINE void DecodeFp8(const uint8_t *codes, float scale, int64_t n, float *out) {
  const DF df;
  const int64_t N = hn::Lanes(df);
  const auto s = hn::Set(df, scale * 256.0f);
  for (int64_t i = 0; i < n; i += N) hn::StoreU(hn::Mul(Fp8Lanes(codes + i), s), df, out + i);
}

// s0 + s1 of Dot(x, DecodeFp8(codes, scale, n)), decoded in registers: the
// same lanes, products and sums.
HWY_INLINE hn::Vec<DF> Fp8Acc(const uint8_t *codes, float scale, int64_t n, const float *x) {
  const DF df;
  const int64_t N = hn::Lanes(df);
  const auto s = hn::Set(df, scale * 256.0f);
  auto s0 = hn::Zero(df), s1 = s0;
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::MulAdd(hn::LoadU(df, x + i), hn::Mul(Fp8Lanes(codes + i), s), s0);
    s1 = hn::MulAdd(hn::LoadU(df, x + i + N), hn::Mul(Fp8Lanes(codes + i + N), s), s1);
  }
  for (; i < n; i += N) s0 = hn::MulAdd(hn::LoadU(df, x + i), hn::Mul(Fp8Lanes(codes + i), s), s0);
  return hn::Add(s0, s1);
}

// x . (n E4M3 elements times `scale`): the bits of DecodeFp8 then Dot.
HWY_INLINE float DotFp8(const uint8_t *codes, float scale, int64_t n, const float *x) {
  const DF df;
  return hn::GetLane(hn::SumOfLanes(df, Fp8Acc(codes, scale, n, x)));
}

// f16 lanes as f32, exactly. Highway emulates the conversion where there is
// no F16C (x86 below AVX2, scalar, emu128) and its emulation turns infinities
// and NaNs into finite values; those lanes are rebuilt from the bits here.
template <class VH>
HWY_INLINE hn::Vec<DF> PromoteF16(VH h) {
  const DF df;
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128 || (HWY_ARCH_X86 && HWY_TARGET >= HWY_SSE4)
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> d16;
  const auto bits = hn::PromoteTo(du, hn::BitCast(d16, h));
  const auto special = hn::Eq(hn::And(bits, hn::Set(du, 0x7C00u)), hn::Set(du, 0x7C00u));
  const auto inf_nan = hn::Or(hn::Or(hn::ShiftLeft<16>(hn::And(bits, hn::Set(du, 0x8000u))),
                                     hn::Set(du, 0x7F800000u)),
                              hn::ShiftLeft<13>(hn::And(bits, hn::Set(du, 0x3FFu))));
  return hn::IfThenElse(hn::RebindMask(df, special), hn::BitCast(df, inf_nan), hn::PromoteTo(df, h));
#else
  return hn::PromoteTo(df, h);
#endif
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
    for (int64_t i = 0; i < n; i += N) hn::StoreU(PromoteF16(hn::LoadU(dh, p + i)), df, out + i);
  } else {
    const hn::Rebind<hwy::bfloat16_t, DF> db;
    const hwy::bfloat16_t *p = reinterpret_cast<const hwy::bfloat16_t *>(src);
    for (int64_t i = 0; i < n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(db, p + i)), df, out + i);
  }
}

// Dot's accumulators s0 + s1, before the sum of their lanes.
HWY_INLINE hn::Vec<DF> DotAcc(const float *a, const float *b, int64_t n) {
  const DF df;
  const int64_t N = hn::Lanes(df);
  auto s0 = hn::Zero(df), s1 = s0;
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(df, a + i + N), hn::LoadU(df, b + i + N), s1);
  }
  for (; i < n; i += N) s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
  return hn::Add(s0, s1);
}

HWY_INLINE float Dot(const float *a, const float *b, int64_t n) {
  const DF df;
  return hn::GetLane(hn::SumOfLanes(df, DotAcc(a, b, n)));
}

// N high elements (f32 = 0, f16 = 1, bf16 = 2) at element i, as f32.
template <int kDt>
HWY_INLINE hn::Vec<DF> LoadHigh(const uint8_t *src, int64_t i) {
  const DF df;
  if (kDt == 0) return hn::LoadU(df, reinterpret_cast<const float *>(src) + i);
  if (kDt == 1) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return PromoteF16(hn::LoadU(dh, reinterpret_cast<const hwy::float16_t *>(src) + i));
  }
  const hn::Rebind<hwy::bfloat16_t, DF> db;
  return hn::PromoteTo(df, hn::LoadU(db, reinterpret_cast<const hwy::bfloat16_t *>(src) + i));
}

// One row: S[c] = x . k_c for the keys c < nk of a high tile (rows rb bytes
// apart).
template <int kDt>
HWY_INLINE void ScoresHigh1(const float *x, const uint8_t *k, int64_t D, int64_t nk, float *S,
                            int64_t rb) {
  const DF df;
  const int64_t N = hn::Lanes(df);
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

// One row: acc += sum_{c < nv} p[c] v_c over a high tile (rows rb bytes
// apart), acc held in registers 4 vectors at a time (zero weights skipped).
template <int kDt>
HWY_INLINE void AccumHigh1(const float *p, const uint8_t *v, int64_t D, int64_t nv, float *acc,
                           int64_t rb) {
  const DF df;
  const int64_t N = hn::Lanes(df);
  int64_t d = 0;
  // 8 vectors at a time where they fill two f16 lines (AVX2; fewer passes over
  // the tile), else 4: per lane the same FMA sequence either way.
  for (; N == 8 && d + 8 * N <= D; d += 8 * N) {
    auto a0 = hn::LoadU(df, acc + d), a1 = hn::LoadU(df, acc + d + N);
    auto a2 = hn::LoadU(df, acc + d + 2 * N), a3 = hn::LoadU(df, acc + d + 3 * N);
    auto a4 = hn::LoadU(df, acc + d + 4 * N), a5 = hn::LoadU(df, acc + d + 5 * N);
    auto a6 = hn::LoadU(df, acc + d + 6 * N), a7 = hn::LoadU(df, acc + d + 7 * N);
    for (int64_t c = 0; c < nv; c++) {
      if (p[c] == 0.0f) continue;
      const auto w = hn::Set(df, p[c]);
      const uint8_t *row = v + c * rb;
      a0 = hn::MulAdd(w, LoadHigh<kDt>(row, d), a0);
      a1 = hn::MulAdd(w, LoadHigh<kDt>(row, d + N), a1);
      a2 = hn::MulAdd(w, LoadHigh<kDt>(row, d + 2 * N), a2);
      a3 = hn::MulAdd(w, LoadHigh<kDt>(row, d + 3 * N), a3);
      a4 = hn::MulAdd(w, LoadHigh<kDt>(row, d + 4 * N), a4);
      a5 = hn::MulAdd(w, LoadHigh<kDt>(row, d + 5 * N), a5);
      a6 = hn::MulAdd(w, LoadHigh<kDt>(row, d + 6 * N), a6);
      a7 = hn::MulAdd(w, LoadHigh<kDt>(row, d + 7 * N), a7);
    }
    hn::StoreU(a0, df, acc + d), hn::StoreU(a1, df, acc + d + N);
    hn::StoreU(a2, df, acc + d + 2 * N), hn::StoreU(a3, df, acc + d + 3 * N);
    hn::StoreU(a4, df, acc + d + 4 * N), hn::StoreU(a5, df, acc + d + 5 * N);
    hn::StoreU(a6, df, acc + d + 6 * N), hn::StoreU(a7, df, acc + d + 7 * N);
  }
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

// f32 lanes rounded to the nearest f16 value (RNE, overflow to inf): the
// hardware conversion where there is one (F16C, NEON, SVE), else the scalar
// rule of backends/math/lpk_*.h lane by lane (Highway's emulation may differ).
HWY_INLINE hn::Vec<DF> RoundF16(hn::Vec<DF> v) {
  const DF df;
#if (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX2) || HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  float x[16];
  hn::StoreU(v, df, x);
  for (size_t i = 0; i < hn::Lanes(df); i++) x[i] = lpk_round_f16(x[i]);
  return hn::LoadU(df, x);
#else
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::DemoteTo(dh, v));
#endif
}

// PASA (SEMANTICS "PASA"), one row: S'[c] = fl16(x . fl16((k_c - shift) * ss)).
template <int kDt>
HWY_INLINE void ScoresPasa1(const float *x, const uint8_t *k, const float *shift, float ss,
                            int64_t D, int64_t nk, float *S) {
  const DF df;
  const int64_t N = hn::Lanes(df), rb = D * (kDt ? 2 : 4);
  const auto vs = hn::Set(df, ss);
  for (int64_t c = 0; c < nk; c++) {
    const uint8_t *row = k + c * rb;
    auto s0 = hn::Zero(df);
    for (int64_t d = 0; d < D; d += N) {
      const auto kp = hn::Mul(hn::Sub(LoadHigh<kDt>(row, d), hn::LoadU(df, shift + d)), vs);
      s0 = hn::MulAdd(hn::LoadU(df, x + d), RoundF16(kp), s0);
    }
    S[c] = lpk_round_f16(hn::GetLane(hn::SumOfLanes(df, s0)));
  }
}

HWY_INLINE void ScoresPasa(lpattn_dtype dt, const float *x, const uint8_t *k, const float *shift,
                           float ss, int64_t D, int64_t nk, float *S) {
  if (dt == LPATTN_F16) ScoresPasa1<1>(x, k, shift, ss, D, nk, S);
  else if (dt == LPATTN_BF16) ScoresPasa1<2>(x, k, shift, ss, D, nk, S);
  else ScoresPasa1<0>(x, k, shift, ss, D, nk, S);
}

// rb: bytes from one key's row to the next (0: packed rows of D elements).
HWY_INLINE void ScoresHigh(lpattn_dtype dt, const float *x, const uint8_t *k, int64_t D, int64_t nk,
                           float *S, int64_t rb = 0) {
  if (!rb) rb = D * (dt == LPATTN_F32 ? 4 : 2);
  if (dt == LPATTN_F16) ScoresHigh1<1>(x, k, D, nk, S, rb);
  else if (dt == LPATTN_BF16) ScoresHigh1<2>(x, k, D, nk, S, rb);
  else ScoresHigh1<0>(x, k, D, nk, S, rb);
}

HWY_INLINE void AccumHigh(lpattn_dtype dt, const float *p, const uint8_t *v, int64_t D, int64_t nv,
                          float *acc, int64_t rb = 0) {
  if (!rb) rb = D * (dt == LPATTN_F32 ? 4 : 2);
  if (dt == LPATTN_F16) AccumHigh1<1>(p, v, D, nv, acc, rb);
  else if (dt == LPATTN_BF16) AccumHigh1<2>(p, v, D, nv, acc, rb);
  else AccumHigh1<0>(p, v, D, nv, acc, rb);
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
  float outer, sc[LP_KV_DIM_MAX / 16];  // n / G <= LP_KV_DIM_MAX / 16
  int64_t n;
};

HWY_INLINE void LowLineOf(const DecJob &job, const LowTile &t, int v, int64_t i, LowLine *ln) {
  const lp_kv_layout &L = *t.L;
  const int64_t n = v ? job.T : job.D, ng = n >> job.gshift;
  ln->n = n;
  ln->codes = t.p + (v ? L.vc : L.kc) + (job.fp4 ? i * (n >> 1) : i * n);
  ln->outer = L.fmt == LPATTN_FMT_MXFP4 || L.fp8s ? 1.0f : ((const float *)(t.p + (v ? L.vo : L.ko)))[i];
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
  (void)buf;
  return DotFp8(ln.codes, ln.outer, ln.n, x);
}

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
