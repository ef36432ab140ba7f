// SIMD stochastic rounding of the backward (SEMANTICS "Backward"): the
// Philox4x32-10 uniforms of many element indices at once (a lane a block;
// SPEC 2's 8 random bits an element, 16 elements a block),
// and the SR quantize-dequantize of one domain, bit-identical to the scalar
// lpk_quantize_domain (sr = 1) + lpk_dequant of backends/math/lpk_*.h. The outer and
// group-scale steps are the shared scalar ones; only the Philox rounds and
// the element step are vectorized (tests/cpu checks both against core's
// Philox and the scalar quantizer on every Highway target).
#if defined(LPATTN_CPU_SR_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_CPU_SR_INL_H_
#undef LPATTN_CPU_SR_INL_H_
#else
#define LPATTN_CPU_SR_INL_H_
#endif

#include <stdint.h>

#include <hwy/highway.h>

#include "cpu.h"
#include "quantp-inl.h"  // MaxAbs, AllFinite

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {
namespace hs = hwy::HWY_NAMESPACE;
using DS = hs::CappedTag<float, 16>;
using DSU = hs::RebindToUnsigned<DS>;

#if HWY_TARGET != HWY_SCALAR
// hi:lo = a * m per u32 lane (m the same in every lane).
template <class V>
HWY_INLINE void MulWide(V a, V m, V *hi, V *lo) {
  const DSU du;
  const hs::Repartition<uint64_t, DSU> d64;
  *lo = hs::Mul(a, m);
  const auto pe = hs::MulEven(a, m);  // even lanes' products
  const auto po = hs::MulEven(hs::BitCast(du, hs::ShiftRight<32>(hs::BitCast(d64, a))), m);
  *hi = hs::OddEven(hs::BitCast(du, po), hs::BitCast(du, hs::ShiftRight<32>(pe)));
}

// Philox4x32-10 (SPEC 2) of one counter block per lane: c0..c3 in, the
// block's four output words out.
template <class V>
HWY_INLINE void Philox10(uint64_t key, V *c0, V *c1, V *c2, V *c3) {
  const DSU du;
  const auto M0 = hs::Set(du, 0xD2511F53u), M1 = hs::Set(du, 0xCD9E8D57u);
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; r++) {
    if (r) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    V h0, l0, h1, l1;
    MulWide(*c0, M0, &h0, &l0);
    MulWide(*c2, M1, &h1, &l1);
    const V n0 = hs::Xor(hs::Xor(h1, *c1), hs::Set(du, k0));
    const V n2 = hs::Xor(hs::Xor(h0, *c3), hs::Set(du, k1));
    *c1 = l1, *c3 = l0, *c0 = n0, *c2 = n2;
  }
}
#endif

// The uniforms (2r + 1) * 2^-9 of the random bytes r = (w >> sh) & 0xff
// (lpk_sr_byte_u): 1 + (2r + 1) * 2^-9 built from bits, minus 1.
template <class V>
HWY_INLINE hs::Vec<DS> ByteUniforms(V w) {
  const DS df;
  const DSU du;
  const auto one = hs::Or(hs::ShiftLeft<15>(hs::And(w, hs::Set(du, 0xffu))), hs::Set(du, 0x3f804000u));
  return hs::Sub(hs::BitCast(df, one), hs::Set(df, 1.0f));
}

// The uniforms of a word's bytes 0..3 to rows w[0..3] (a row of 16 lanes).
template <class V>
HWY_INLINE void StoreByteUniforms(V c, float (*w)[16]) {
  const DS df;
  hs::Store(ByteUniforms(c), df, w[0]);
  hs::Store(ByteUniforms(hs::ShiftRight<8>(c)), df, w[1]);
  hs::Store(ByteUniforms(hs::ShiftRight<16>(c)), df, w[2]);
  hs::Store(ByteUniforms(hs::ShiftRight<24>(c)), df, w[3]);
}

// u[e] = lpk_sr_uniform(key, idx[e]) for e < n: byte idx % 4 of word
// (idx / 4) % 4 of the block of counter idx / 16, as (2r + 1) * 2^-9.
HWY_INLINE void SrUniforms(uint64_t key, const int64_t *idx, int64_t n, float *u) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t e = 0; e < n; e++) u[e] = lpk_sr_uniform(key, (uint64_t)idx[e]);
#else
  const DS df;
  const DSU du;
  const int64_t N = (int64_t)hs::Lanes(du);
  alignas(64) uint32_t lo[16], hi[16], sel[16], sh[16];
  alignas(64) float tmp[16];
  for (int64_t e0 = 0; e0 < n; e0 += N) {
    for (int64_t l = 0; l < N; l++) {
      const uint64_t x = e0 + l < n ? (uint64_t)idx[e0 + l] : 0, c = x >> 4;
      lo[l] = (uint32_t)c, hi[l] = (uint32_t)(c >> 32), sel[l] = (uint32_t)(x >> 2) & 3u;
      sh[l] = 8u * ((uint32_t)x & 3u);
    }
    auto c0 = hs::Load(du, lo), c1 = hs::Load(du, hi), c2 = hs::Zero(du), c3 = hs::Zero(du);
    Philox10(key, &c0, &c1, &c2, &c3);
    const auto s = hs::Load(du, sel);
    const auto w = hs::IfThenElse(hs::Eq(s, hs::Zero(du)), c0,
                                  hs::IfThenElse(hs::Eq(s, hs::Set(du, 1u)), c1,
                                                 hs::IfThenElse(hs::Eq(s, hs::Set(du, 2u)), c2, c3)));
    const auto f = ByteUniforms(hs::Shr(w, hs::Load(du, sh)));
    if (e0 + N <= n) {
      hs::StoreU(f, df, u + e0);
    } else {
      hs::Store(f, df, tmp);
      for (int64_t l = 0; e0 + l < n; l++) u[e0 + l] = tmp[l];
    }
  }
#endif
}

// u[e] = lpk_sr_uniform(key, i0 + e) for e < n (consecutive indices): a
// lane a block, whose four words serve sixteen elements.
HWY_INLINE void SrUniformsRun(uint64_t key, uint64_t i0, int64_t n, float *u) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t e = 0; e < n; e++) u[e] = lpk_sr_uniform(key, i0 + (uint64_t)e);
#else
  const DSU du;  // at most 16 lanes (a capped tag): the buffers below
  const int64_t N = (int64_t)hs::Lanes(du);
  if (n <= 0) return;  // (i0 + n - 1 below)
  alignas(64) uint32_t lo[16], hi[16];
  alignas(64) float w[16][16];  // w[k][l]: element k of lane l's block
  const uint64_t first = i0 >> 4, last = (i0 + (uint64_t)n - 1) >> 4;  // counters
  const int64_t skip = (int64_t)(i0 & 15);  // elements of the first block before i0
  for (uint64_t b0 = first; b0 <= last; b0 += (uint64_t)N) {
    for (int64_t l = 0; l < N; l++) lo[l] = (uint32_t)(b0 + l), hi[l] = (uint32_t)((b0 + l) >> 32);
    auto c0 = hs::Load(du, lo), c1 = hs::Load(du, hi), c2 = hs::Zero(du), c3 = hs::Zero(du);
    Philox10(key, &c0, &c1, &c2, &c3);
    StoreByteUniforms(c0, w + 0), StoreByteUniforms(c1, w + 4);  // element 4 j + b: byte b of word j
    StoreByteUniforms(c2, w + 8), StoreByteUniforms(c3, w + 12);
    // element k of lane l is element 16 * (b0 + l - first) + k - skip
    const int64_t e0 = (int64_t)(b0 - first) * 16 - skip;
    if (e0 >= 0 && e0 + 16 * N <= n) {
      for (int64_t l = 0; l < N; l++)
        for (int k = 0; k < 16; k++) u[e0 + 16 * l + k] = w[k][l];
    } else {
      for (int64_t l = 0; l < N; l++)
        for (int k = 0; k < 16; k++) {
          const int64_t e = e0 + 16 * l + k;
          if (e >= 0 && e < n) u[e] = w[k][l];
        }
    }
  }
#endif
}

// SR between the grid neighbours vlo <= |y| < vhi (lpk_sr_pick): the
// magnitude, vhi iff (u < (y - A) / (B - A)) == (y > 0), where A, B are the
// signed neighbours; pick: lanes that are not on the grid nor saturated.
template <class V, class M>
HWY_INLINE V SrPick(V y, V u, V vlo, V vhi, M pick) {
  const auto neg = hs::Lt(y, hs::Zero(DS()));
  const auto A = hs::IfThenElse(neg, hs::Neg(vhi), vlo), B = hs::IfThenElse(neg, hs::Neg(vlo), vhi);
  const auto to_b = hs::Lt(u, hs::Div(hs::Sub(y, A), hs::Sub(B, A)));
  const auto take_hi = hs::Not(hs::Xor(to_b, hs::Gt(y, hs::Zero(DS()))));
  return hs::CopySign(hs::IfThenElse(hs::And(pick, take_hi), vhi, vlo), y);
}

// Value of lpk_e2m1_encode_sr(y, u) (finite or infinite y).
template <class V>
HWY_INLINE V E2m1SrValue(V y, V u) {
  const DS d;
  const DSU du;
  const auto a = hs::Abs(y), one = hs::Set(d, 1.0f), half = hs::Set(d, 0.5f), six = hs::Set(d, 6.0f);
  const auto bits = hs::BitCast(du, a);
  // The grid value below: 0, 0.5, else a's mantissa cut to one bit (<= 6);
  // the one above: half a binade higher.
  const auto cut = hs::Min(hs::BitCast(d, hs::And(bits, hs::Set(du, 0xffc00000u))), six);
  const auto small = hs::Lt(a, one);
  const auto vlo = hs::IfThenElse(small, hs::IfThenElse(hs::Lt(a, half), hs::Zero(d), half), cut);
  const auto step =
      hs::IfThenElse(small, half, hs::Mul(hs::BitCast(d, hs::And(bits, hs::Set(du, 0x7f800000u))), half));
  return SrPick(y, u, vlo, hs::Add(vlo, step), hs::And(hs::Lt(vlo, a), hs::Lt(vlo, six)));
}

// Value of lpk_e4m3_encode_sr(y, u) (finite or infinite y).
template <class V>
HWY_INLINE V E4m3SrValue(V y, V u) {
  const DS d;
  const DSU du;
  const auto a = hs::Abs(y), top = hs::Set(d, 448.0f), ulp_sub = hs::Set(d, 1.0f / 512.0f);
  const auto bits = hs::BitCast(du, a);
  const auto sub = hs::Lt(a, hs::Set(d, 0.015625f));  // steps of 2^-9
  const auto vsub = hs::Mul(hs::Floor(hs::Mul(a, hs::Set(d, 512.0f))), ulp_sub);
  const auto vnorm = hs::Min(hs::BitCast(d, hs::And(bits, hs::Set(du, 0xfff00000u))), top);
  const auto vlo = hs::IfThenElse(sub, vsub, vnorm);
  const auto step = hs::IfThenElse(
      sub, ulp_sub, hs::Mul(hs::BitCast(d, hs::And(bits, hs::Set(du, 0x7f800000u))), hs::Set(d, 0.125f)));
  return SrPick(y, u, vlo, hs::Add(vlo, step), hs::And(hs::Lt(vlo, a), hs::Lt(vlo, top)));
}

// The dequantized SR element of y = x / divisor, (code * scale) * outer as
// lpk_dequant forms it: NVFP4 (v * m1) * m2 with m1 = scale, m2 = outer;
// MXFP4 v * m1 (scale); FP8 v * m1 (outer).
template <class V>
HWY_INLINE V SrElem(int fmt, V y, V u, V m1, V m2) {
  const V v = hs::Mul(fmt == QP_FP8 ? E4m3SrValue(y, u) : E2m1SrValue(y, u), m1);
  return fmt == QP_NVFP4 ? hs::Mul(v, m2) : v;
}

// out[i] = lpk_dequant of the codes lpk_quantize_domain(fmt, mx_up, sr = 1)
// gives the n contiguous values x, element i drawing the uniform u[i].
// n: a multiple of the group size (16 or 32; FP8 any); as there, the values
// of a partial last group are not written.
HWY_INLINE void SrQdqDomain(int fmt, int mx_up, const float *x, const float *u, int64_t n, float *out) {
  const DS d;
  const int64_t N = (int64_t)hs::Lanes(d);
  const bool fp8 = fmt == QP_FP8;
  const int64_t G = fp8 ? n : fmt == QP_MXFP4 ? 32 : 16;
  // All finite (the usual case): the amaxes by SIMD (a max: any order).
  const bool simd = n % N == 0 && G % N == 0 && AllFinite(d, x, n);
  int bad = 0;
  const float amax = simd ? MaxAbs(d, x, n) : lpk_finite_amax(x, 1, (int)n, &bad);
  const float outer0 = lpk_outer_scale(fmt, amax);
  const float outer = fp8 && bad ? lpk_from_bits(0x7fc00000u) : outer0;
  alignas(64) float tx[16], tu[16], to[16];
  for (int64_t g = 0; g + G <= n && G > 0; g += G) {
    int gbad = 0;
    float denom = outer0, scale = 1.0f;
    uint8_t code = 0;
    if (fp8) {
      gbad = bad;
    } else {
      const float ga = simd ? MaxAbs(d, x + g, G) : lpk_finite_amax(x + g, 1, (int)G, &gbad);
      scale = lpk_group_scale(fmt, ga, gbad, outer0, mx_up, &code, &denom);
    }
    if (gbad || denom == 0.0f) {  // all codes 0
      for (int64_t i = g; i < g + G; i++) out[i] = lpk_dequant(fmt, 0, code, outer);
      continue;
    }
    // (code * scale) * outer as lpk_dequant forms it: NVFP4 (v * s) * outer,
    // MXFP4 v * s, FP8 v * outer.
    const auto vd = hs::Set(d, denom), m1 = hs::Set(d, fp8 ? outer : scale);
    const auto m2 = hs::Set(d, fmt == QP_NVFP4 ? outer : 1.0f);
    for (int64_t i = g; i < g + G; i += N) {
      const bool full = i + N <= g + G;
      if (!full)
        for (int64_t l = 0; l < N; l++) tx[l] = i + l < g + G ? x[i + l] : 0.0f, tu[l] = i + l < g + G ? u[i + l] : 0.0f;
      const auto y = hs::Div(full ? hs::LoadU(d, x + i) : hs::Load(d, tx), vd);
      const auto uu = full ? hs::LoadU(d, u + i) : hs::Load(d, tu);
      const auto v = SrElem(fmt, y, uu, m1, m2);
      if (full) {
        hs::StoreU(v, d, out + i);
      } else {
        hs::Store(v, d, to);
        for (int64_t l = 0; i + l < g + G; l++) out[i + l] = to[l];
      }
    }
  }
}

// The same for the C columns of a row-major [R x C] matrix, each column one
// domain of R values (src[r * C + c], uniforms U[r * C + c]), N columns a
// vector: no gathers. False (nothing written) unless every value is finite
// and C is a multiple of the lanes; the caller then takes SrQdqDomain.
HWY_INLINE bool SrQdqColumns(int fmt, int mx_up, const float *src, const float *U, int64_t R, int64_t C,
                             float *dst) {
  const DS d;
  const int64_t N = (int64_t)hs::Lanes(d);
  const bool fp8 = fmt == QP_FP8;
  const int64_t G = fp8 ? R : fmt == QP_MXFP4 ? 32 : 16;
  if (C % N != 0 || R % G != 0 || N > 16 || !AllFinite(d, src, R * C)) return false;
  alignas(64) float amax[16], outer[16], ga[16], scale[16], denom[16];
  for (int64_t c0 = 0; c0 < C; c0 += N) {
    auto m = hs::Zero(d);
    for (int64_t r = 0; r < R; r++) m = hs::Max(m, hs::Abs(hs::LoadU(d, src + r * C + c0)));
    hs::Store(m, d, amax);
    for (int64_t l = 0; l < N; l++) outer[l] = lpk_outer_scale(fmt, amax[l]);
    const auto vo = hs::Load(d, outer);
    for (int64_t g = 0; g < R; g += G) {
      if (fp8) {
        for (int64_t l = 0; l < N; l++) scale[l] = 1.0f, denom[l] = outer[l];
      } else {
        auto mg = hs::Zero(d);
        for (int64_t r = g; r < g + G; r++) mg = hs::Max(mg, hs::Abs(hs::LoadU(d, src + r * C + c0)));
        hs::Store(mg, d, ga);
        for (int64_t l = 0; l < N; l++) {
          uint8_t code;
          scale[l] = lpk_group_scale(fmt, ga[l], 0, outer[l], mx_up, &code, &denom[l]);
        }
      }
      const auto vd = hs::Load(d, denom);
      const auto zero = hs::Eq(vd, hs::Zero(d));  // all codes 0: +0
      const auto m1 = fp8 ? vo : hs::Load(d, scale), m2 = fmt == QP_NVFP4 ? vo : hs::Set(d, 1.0f);
      for (int64_t r = g; r < g + G; r++) {
        const auto y = hs::Div(hs::LoadU(d, src + r * C + c0), vd);
        const auto v = SrElem(fmt, y, hs::LoadU(d, U + r * C + c0), m1, m2);
        hs::StoreU(hs::IfThenZeroElse(zero, v), d, dst + r * C + c0);
      }
    }
  }
  return true;
}

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
