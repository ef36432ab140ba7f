/* Bit-exact number formats of SPEC 2 (the block quantizers built on them are
 * lpk_quant.h), 16-bit float decoding and the 4-D tensor offset, written
 * once for every backend (lpk_fn.h). Every step is one IEEE f32
 * operation in the order SEMANTICS gives (callers build without fast-math and
 * without FMA contraction), so all backends produce the same bits as core/. */
#ifndef LPK_FORMATS_H
#define LPK_FORMATS_H
#include "lpk_fn.h"
LPK_FN uint32_t lpk_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
LPK_FN float lpk_from_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
/* 2^e for e in [-149, 127], exact. */
LPK_FN float lpk_pow2(int e) {
  return e >= -126 ? lpk_from_bits((uint32_t)(e + 127) << 23) : lpk_from_bits(1u << (e + 149));
}
LPK_FN int lpk_finite(float x) { return (lpk_bits(x) & 0x7f800000u) != 0x7f800000u; }

/* E2M1: nearest of {0, .5, 1, 1.5, 2, 3, 4, 6}, ties to the even code,
 * saturating at 6; the sign always goes to bit 3 (-0 too); NaN -> 0. */
LPK_FN uint8_t lpk_e2m1_encode(float x) {
  float a = fabsf(x);
  if (a != a) return 0;
  uint8_t c = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3
            : a <= 2.5f ? 4 : a < 3.5f ? 5 : a <= 5.0f ? 6 : 7;
  return (uint8_t)(c | ((lpk_bits(x) >> 28) & 8));
}
LPK_FN float lpk_e2m1_decode(uint8_t c) {
  float m = (c & 7) < 2 ? 0.5f * (float)(c & 7)
          : lpk_pow2(((c & 7) >> 1) - 1) * (1.0f + 0.5f * (float)(c & 1));
  return (c & 8) ? -m : m;
}

#if defined(__CUDACC__) && !defined(LPATTN_HIP) /* CUDA device code */
/* sm_89+ device code: the same bits from the hardware conversions (RNE,
 * satfinite clamps |x| > 448 and inf to 448, subnormals kept; NaN is handled
 * before them), one or two instructions instead of branches. Checked over
 * all 2^32 f32 inputs (encode, f16 rounding) and all 256 codes (decode) on an
 * H200: equal, except that a decoded NaN code carries another NaN payload and
 * the f16 rounding keeps the sign of -0 (the code below gives +0; callers
 * store the f16 bits with the input's sign, and a zero score's sign reaches
 * no output). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define LPK_HW_FP8 1
#endif
#endif
/* E4M3fn: RNE, saturating at 448, NaN -> 0x7F. */
LPK_FN uint8_t lpk_e4m3_encode(float x) {
  uint8_t s = (uint8_t)((lpk_bits(x) >> 24) & 0x80);
  float a = fabsf(x);
  if (a != a) return 0x7f;
#if defined(__CUDACC__) && !defined(LPATTN_HIP) /* CUDA device code */
#ifdef LPK_HW_FP8
  unsigned short hw;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hw) : "f"(0.0f), "f"(x));
  return (uint8_t)(hw & 0xff);
#endif
#endif
  if (a >= 448.0f) return (uint8_t)(s | 0x7e);
  if (a < 0.015625f) return (uint8_t)(s | (uint8_t)rintf(a * 512.0f)); /* subnormal, 2^-9 steps */
  int e = (int)((lpk_bits(a) >> 23) & 0xff) - 127;
  int m = (int)rintf(a * lpk_pow2(3 - e)); /* 8..16; 16 carries into the exponent */
  return (uint8_t)(s | (((e + 7) << 3) + (m - 8)));
}
LPK_FN float lpk_e4m3_decode(uint8_t c) {
#if defined(__CUDACC__) && !defined(LPATTN_HIP) /* CUDA device code */
#ifdef LPK_HW_FP8
  unsigned int h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((unsigned short)c));
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)(h2 & 0xffffu)));
  return f;
#endif
#endif
  int e = (c >> 3) & 15, m = c & 7;
  float v = (c & 0x7f) == 0x7f ? lpk_from_bits(0x7fc00000u)
          : e == 0 ? (float)m * 0.001953125f : lpk_pow2(e - 7) * (1.0f + (float)m * 0.125f);
  return (c & 0x80) ? -v : v;
}
LPK_FN float lpk_e8m0_decode(uint8_t c) {
  return c == 0xff ? lpk_from_bits(0x7fc00000u) : lpk_pow2((int)c - 127);
}

/* f32 -> nearest f16 value (RNE, overflow to inf), kept in f32. */
LPK_FN float lpk_round_f16(float x) {
  float a = fabsf(x);
  if (a != a) return x;
#if defined(__CUDACC__) && !defined(LPATTN_HIP) /* CUDA device code */
#ifdef LPK_HW_FP8
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#endif
#endif
  if (a >= 65520.0f) return x < 0 ? -lpk_from_bits(0x7f800000u) : lpk_from_bits(0x7f800000u);
  int e = a < 6.103515625e-05f ? -14 : (int)((lpk_bits(a) >> 23) & 0xff) - 127;
  float r = rintf(a * lpk_pow2(10 - e)) * lpk_pow2(e - 10);
  return x < 0 ? -r : r;
}

/* Element value exactly as kernels form it: (code * scale) * outer. */
LPK_FN float lpk_dequant(int format, uint8_t code, uint8_t scale, float outer) {
  if (format == 2) return lpk_e4m3_decode(code) * outer;            /* FP8 */
  if (format == 1) return lpk_e2m1_decode(code) * lpk_e8m0_decode(scale); /* MXFP4 */
  return (lpk_e2m1_decode(code) * lpk_e4m3_decode(scale)) * outer; /* NVFP4 */
}

/* f16 / bf16 bits -> f32, exact (f16: normals rebiased, subnormals m * 2^-24). */
LPK_FN float lpk_f16_decode(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 0x3ffu;
  if (e == 31) return lpk_from_bits(s | 0x7f800000u | (m << 13));
  if (e == 0) {
    float v = (float)m * 5.9604644775390625e-08f;
    return s ? -v : v;
  }
  return lpk_from_bits(s | ((e + 112) << 23) | (m << 13));
}
LPK_FN float lpk_bf16_decode(uint16_t h) { return lpk_from_bits((uint32_t)h << 16); }

/* Element offset of (a, b, c, e) in a 4-D tensor with element strides s. */
LPK_FN int64_t lpk_off(const int64_t *s, int64_t a, int64_t b, int64_t c, int64_t e) {
  return a * s[0] + b * s[1] + c * s[2] + e * s[3];
}
#endif
