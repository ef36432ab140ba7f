// Paged decode, x86 AVX2 and AVX-512 (decode-inl.h): FP8 tiles against a
// row (or, for GQA groups, the tile decoded once to f32 against each row), 8
// (AVX2) or 16 (AVX-512) keys or channels at once. Each line's dot product
// is DotFp8's or Dot's (decode-fmt-inl.h): the same lanes, decoded values,
// FMAs and accumulators (Fp8Acc, DotAcc); only the last step, the sum of the
// lanes of s0 + s1, is done for all lines together, by shuffles and vector
// adds in the tree of the one-line reduction (Highway's SumOfLanes, which is
// _mm512_reduce_add_ps on AVX-512 and two shuffles on AVX2; both halve:
// lane i + lane i + N/2, then i + N/4, ...). So every line gets the bits of
// a DotFp8 or Dot call (checked on every x86 target, and the trees against
// SumOfLanes with GCC 12 and Clang 14: bench/RESULTS_cpu.md).
#if defined(LPATTN_CPU_DECODE_FP8_X86_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_CPU_DECODE_FP8_X86_INL_H_
#undef LPATTN_CPU_DECODE_FP8_X86_INL_H_
#else
#define LPATTN_CPU_DECODE_FP8_X86_INL_H_
#endif

#include "decode-fmt-inl.h"

// Lines a call of SumLines takes on this target (0: no such kernel).
#undef LP_FP8_LINES
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define LP_FP8_LINES 16
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
#define LP_FP8_LINES 8
#else
#define LP_FP8_LINES 0
#endif

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {

#if LP_FP8_LINES == 16
// The tree of _mm512_reduce_add_ps (GCC's avx512fintrin.h): a = hi256 +
// lo256, b = hi128 + lo128 of a, c = (b0 + b2, b1 + b3), sum = c0 + c1.
// Two lines' a (8 lanes each) in one vector:
HWY_INLINE __m512 LinesHalf(__m512 u, __m512 v) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(u, v, 0xEE), _mm512_shuffle_f32x4(u, v, 0x44));
}
// Lines k..k+3's b, 4 lanes each (block t: line k + t).
template <class Acc>
HWY_INLINE __m512 LinesFour(const Acc &acc, int k) {
  const __m512 h0 = LinesHalf(acc(k).raw, acc(k + 1).raw), h1 = LinesHalf(acc(k + 2).raw, acc(k + 3).raw);
  return _mm512_add_ps(_mm512_shuffle_f32x4(h0, h1, 0xDD), _mm512_shuffle_f32x4(h0, h1, 0x88));
}
// out[k] (+)= the lane sum of acc(k) (a vector s0 + s1), k < 16.
template <class Acc>
HWY_INLINE void SumLines(const Acc &acc, float *out, bool add) {
  const __m512 q0 = LinesFour(acc, 0), q1 = LinesFour(acc, 4);
  const __m512 q2 = LinesFour(acc, 8), q3 = LinesFour(acc, 12);
  // c of lines 0..7 (block t: lines t, 4 + t) and 8..15 (8 + t, 12 + t).
  const __m512 c0 = _mm512_add_ps(_mm512_shuffle_ps(q0, q1, 0x44), _mm512_shuffle_ps(q0, q1, 0xEE));
  const __m512 c1 = _mm512_add_ps(_mm512_shuffle_ps(q2, q3, 0x44), _mm512_shuffle_ps(q2, q3, 0xEE));
  // sum = c0 + c1: lane 4t + s holds line 4s + t.
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(c0, c1, 0x88), _mm512_shuffle_ps(c0, c1, 0xDD));
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512 o = _mm512_permutexvar_ps(idx, r);
  if (add) o = _mm512_add_ps(_mm512_loadu_ps(out), o);
  _mm512_storeu_ps(out, o);
}
#elif LP_FP8_LINES == 8
// The tree of Highway's 256-bit SumOfLanes: a = hi128 + lo128,
// c = (a0 + a2, a1 + a3), sum = c1 + c0. Two lines' a in one vector:
HWY_INLINE __m256 LinesHalf(__m256 u, __m256 v) {
  return _mm256_add_ps(_mm256_permute2f128_ps(u, v, 0x31), _mm256_permute2f128_ps(u, v, 0x20));
}
template <class Acc>
HWY_INLINE void SumLines(const Acc &acc, float *out, bool add) {
  const __m256 h0 = LinesHalf(acc(0).raw, acc(1).raw), h1 = LinesHalf(acc(2).raw, acc(3).raw);
  const __m256 h2 = LinesHalf(acc(4).raw, acc(5).raw), h3 = LinesHalf(acc(6).raw, acc(7).raw);
  // c of lines 0..3 (block t: lines t, 2 + t) and 4..7 (4 + t, 6 + t).
  const __m256 c0 = _mm256_add_ps(_mm256_shuffle_ps(h0, h1, 0x44), _mm256_shuffle_ps(h0, h1, 0xEE));
  const __m256 c1 = _mm256_add_ps(_mm256_shuffle_ps(h2, h3, 0x44), _mm256_shuffle_ps(h2, h3, 0xEE));
  // sum = c1 + c0: lane 4t + s holds line 2s + t.
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(c0, c1, 0xDD), _mm256_shuffle_ps(c0, c1, 0x88));
  __m256 o = _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  if (add) o = _mm256_add_ps(_mm256_loadu_ps(out), o);
  _mm256_storeu_ps(out, o);
}
#endif

// Lines i..i + LP_FP8_LINES - 1 of an FP8 tile (v = 0: keys, 1: channels)
// against x: out[k] (+)= DotLow(job, t, v, i + k, x) with the same bits.
HWY_INLINE void Fp8LinesLow(const DecJob &job, const LowTile &t, int v, int64_t i, const float *x,
                            float *out, bool add) {
#if LP_FP8_LINES
  const lp_kv_layout &L = *t.L;
  const int64_t n = v ? job.T : job.D;
  const uint8_t *codes = t.p + (v ? L.vc : L.kc) + i * n;
  const float *outer = (const float *)(t.p + (v ? L.vo : L.ko)) + i;  // FP8_STATIC: none, 1
  SumLines([&](int k) { return Fp8Acc(codes + k * n, L.fp8s ? 1.0f : outer[k], n, x); }, out, add);
#else
  (void)job, (void)t, (void)v, (void)i, (void)x, (void)out, (void)add;
#endif
}

// out[k] (+)= Dot(x, b + k * n, n) for k < LP_FP8_LINES, the same bits.
HWY_INLINE void DotLines(const float *x, const float *b, int64_t n, float *out, bool add) {
#if LP_FP8_LINES
  SumLines([&](int k) { return DotAcc(x, b + k * n, n); }, out, add);
#else
  (void)x, (void)b, (void)n, (void)out, (void)add;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
