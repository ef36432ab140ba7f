/* The block-quantizer primitives of SPEC 2 / SEMANTICS "Quantization details",
 * written once for every backend (cpu, cuda, hip; lpk_fn.h): the outer scale step, the group scale step (NVFP4: E4M3 of amax/6/outer;
 * MXFP4: E8M0 by the floor or the round-up rule), the element encoders with RNE
 * and with stochastic rounding (Philox4x32-10, the stream core/quant.c defines),
 * and the domain quantizer built from them. The CPU SIMD quantizer, the GPU
 * quantize kernel and the attention kernels' in-kernel P quantizer all call these
 * steps; core/quant.c is the independent reference they are tested against bit for
 * bit (tests/cpu/test_cpu_quant_sweep.cc, tests/cuda/test_cuda_quant_sweep.c).
 * Uses lpk_formats.h's encoders and decoders. */
#ifndef LPK_QUANT_H
#define LPK_QUANT_H
#include "lpk_fn.h"
#include "lpk_formats.h"
/* ---- scale steps ------------------------------------------------------------ */
/* Outer scale of a domain whose finite values have amax (format 0 NVFP4,
 * 1 MXFP4, 2 FP8): amax / (6 * 448), 1, amax / 448. */
LPK_FN float lpk_outer_scale(int format, float amax) {
  /* amax 0 is not divided: a GPU's 0 / x fails its range check (slow path) */
  const float a = amax == 0.0f ? 1.0f : amax;
  return format == 1 ? 1.0f : amax == 0.0f ? amax : format == 2 ? a / 448.0f : a / 2688.0f;
}

/* E8M0 code of an MXFP4 group of finite amax >= 0, from the exponent bits:
 * floor rule clamp(floor(log2 amax) - 2 + 127, 0, 254); round-up rule
 * ceil(log2(amax / 6)) + 127, where a subnormal quotient r = frac * 2^-149
 * reaches code 1 only above 2^-127. amax = 0 gives code 0. */
LPK_FN uint8_t lpk_mx_scale_code(float amax, int round_up) {
  uint32_t code;
  if (round_up) {
    uint32_t b = lpk_bits(amax / 6.0f), e = b >> 23, frac = b & 0x7fffffu;
    code = e ? e + (frac != 0) : (frac > 0x400000u);
  } else {
    uint32_t e = lpk_bits(amax) >> 23;
    code = e > 2 ? e - 2 : 0;
  }
  return (uint8_t)(code > 254 ? 254 : code);
}

/* Group scale step of NVFP4 (format 0) or MXFP4 (1): the scale code of a group
 * whose finite values have amax ga (bad: one value is not) goes to *code; returns
 * the decoded scale and sets *denom, the divisor of the group's elements (0: the
 * group's codes are all 0; NaN scale codes 0x7F / 0xFF for a bad group). */
LPK_FN float lpk_group_scale(int format, float ga, int bad, float outer, int round_up,
                                    uint8_t *code, float *denom) {
  uint8_t c;
  float s;
  if (format == 1) {
    c = bad ? 0xff : lpk_mx_scale_code(ga, round_up);
    s = lpk_e8m0_decode(c);
    *denom = bad || !(ga > 0.0f) ? 0.0f : s;
  } else {
    /* (the divisor is kept nonzero: a GPU's x / 0 takes a slow path) */
    c = bad ? 0x7f : outer == 0.0f ? 0 : lpk_e4m3_encode((ga / 6.0f) / (outer == 0.0f ? 1.0f : outer));
    s = lpk_e4m3_decode(c);
    *denom = bad ? 0.0f : s * outer;
  }
  *code = c;
  return s;
}

/* ---- stochastic rounding ------------------------------------------------------ */
/* Philox4x32-10(key = seed, counter = (ctr lo, ctr hi, 0, 0)): its four
 * words, w[0..3]; element n of a stream takes byte n % 4 of word (n / 4) % 4
 * of block n / 16 (SPEC 2: 8 random bits per element). */
/* The high word of a * b. CUDA's device code spells it __umulhi: with the
 * 64-bit product nvcc 13 adds a zero register to each high word (2 of a
 * Philox round's 6 instructions); this way a round is 2 IMAD.WIDE + 2 LOP3. */
LPK_FN uint32_t lpk_mulhi32(uint32_t a, uint32_t b) {
#if defined(__CUDACC__) && !defined(LPATTN_HIP) /* CUDA device code */
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return (uint32_t)(((uint64_t)a * b) >> 32);
#endif
#else
  return (uint32_t)(((uint64_t)a * b) >> 32);
#endif
}
LPK_FN void lpk_philox4(uint64_t seed, uint64_t ctr, uint32_t w[4]) {
  uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    const uint32_t h0 = lpk_mulhi32(0xD2511F53u, c0), h1 = lpk_mulhi32(0xCD9E8D57u, c2);
    const uint32_t n0 = h1 ^ c1 ^ k0, n2 = h0 ^ c3 ^ k1;
    c1 = 0xCD9E8D57u * c2, c3 = 0xD2511F53u * c0, c0 = n0, c2 = n2;
  }
  w[0] = c0, w[1] = c1, w[2] = c2, w[3] = c3;
}
/* The uniform of a random byte r, (2r + 1) * 2^-9 (x rounds up iff it is
 * below t): 1 + (2r + 1) * 2^-9 built from bits, minus 1 (exact; no
 * int-to-float conversion). */
LPK_FN float lpk_sr_byte_u(uint32_t r) { return lpk_from_bits(0x3f804000u | ((r & 0xffu) << 15)) - 1.0f; }
/* SR's random byte of element n: byte n % 4 of word (n / 4) % 4 of
 * Philox4x32-10(key = seed, counter = (n/16 lo, n/16 hi, 0, 0)). */
LPK_FN uint32_t lpk_sr_byte(uint64_t seed, uint64_t n) {
  uint32_t w[4];
  lpk_philox4(seed, n >> 4, w);
  const uint32_t j = (uint32_t)(n >> 2) & 3u;
  const uint32_t wd = j == 0 ? w[0] : j == 1 ? w[1] : j == 2 ? w[2] : w[3];
  return (wd >> (8u * ((uint32_t)n & 3u))) & 0xffu;
}
/* Element n's uniform (2r + 1) * 2^-9. */
LPK_FN float lpk_sr_uniform(uint64_t seed, uint64_t n) { return lpk_sr_byte_u(lpk_sr_byte(seed, n)); }

/* x between the signed neighbours a <= x < b goes to b iff u < (x-a)/(b-a);
 * lo is the magnitude code below |x|. Returns the magnitude code. */
LPK_FN uint32_t lpk_sr_pick(float x, float u, uint32_t lo, float vlo, float vhi) {
  float a = x < 0 ? -vhi : vlo, b = x < 0 ? -vlo : vhi;
  int to_b = u < (x - a) / (b - a);
  return (to_b == (x > 0)) ? lo + 1 : lo;
}

LPK_FN uint8_t lpk_e2m1_encode_sr(float x, float u) {
  float a = fabsf(x);
  if (a != a) return 0;
  uint32_t c = lpk_e2m1_encode(a) & 7u;
  if (lpk_e2m1_decode((uint8_t)c) > a) c--;
  if (c < 7u && lpk_e2m1_decode((uint8_t)c) != a)
    c = lpk_sr_pick(x, u, c, lpk_e2m1_decode((uint8_t)c), lpk_e2m1_decode((uint8_t)(c + 1)));
  return (uint8_t)(c | ((lpk_bits(x) >> 28) & 8u));
}

LPK_FN uint8_t lpk_e4m3_encode_sr(float x, float u) {
  float a = fabsf(x);
  if (a != a) return 0x7f;
  uint32_t c = lpk_e4m3_encode(a) & 0x7fu;
  if (lpk_e4m3_decode((uint8_t)c) > a) c--;
  if (c < 0x7eu && lpk_e4m3_decode((uint8_t)c) != a)
    c = lpk_sr_pick(x, u, c, lpk_e4m3_decode((uint8_t)c), lpk_e4m3_decode((uint8_t)(c + 1)));
  return (uint8_t)(c | ((lpk_bits(x) >> 24) & 0x80u));
}

/* ---- element step --------------------------------------------------------------- */
/* Code of the element y = x / divisor: E4M3 (fp8) or E2M1, RNE, or with sr
 * stochastic with the uniform u. */
LPK_FN uint8_t lpk_elem_code(int fp8, float y, int sr, float u) {
  if (fp8) return sr ? lpk_e4m3_encode_sr(y, u) : lpk_e4m3_encode(y);
  return sr ? lpk_e2m1_encode_sr(y, u) : lpk_e2m1_encode(y);
}

/* Values of the RNE element step, decode(encode(.)), for the quantizers that
 * keep values (P of a low tile): E2M1 for finite x >= 0 (ties to the even code,
 * saturating at 6); E4M3 for finite 0 <= y <= 448. The CPU SIMD forms
 * (backends/cpu/quantp-inl.h) are checked against these lane by lane. */
/* Both without branches: (x + m) - m rounds x to a multiple of 2^-23 m (RNE,
 * ties to the even multiple, which is the even code), m = 2^(22 or 20) times
 * the format's binade of x (E2M1: 2^max(e, 0), E4M3: 2^max(e, -6)); equal to
 * rint(x * 2^(k-e)) * 2^(e-k) for every finite x >= 0 (checked exhaustively). */
LPK_FN float lpk_e2m1_round(float x) {
  x = fminf(x, 8.0f);
  const uint32_t e = lpk_bits(x) & 0x7f800000u;
  const float m = lpk_from_bits((e > 0x3f800000u ? e : 0x3f800000u) + (22u << 23));
  return fminf((x + m) - m, 6.0f);
}
LPK_FN float lpk_e4m3_round(float y) {
  const uint32_t e = lpk_bits(y) & 0x7f800000u;
  const float m = lpk_from_bits((e > 0x3c800000u ? e : 0x3c800000u) + (20u << 23));
  return (y + m) - m;
}

/* Values of the SR element step, decode(encode_sr(x, u)), for finite x (the
 * backward's in-kernel P and dS quantizers). The grid neighbours of |x| are
 * vlo <= |x| < vlo + step with step a power of two, so sr_pick's
 * (x - A) / (B - A) is (x - A) times the exact 1 / step: the same bits. */
LPK_FN float lpk_sr_value(float x, float u, float a, float vlo, float step, float top) {
  const float vhi = vlo + step, rstep = lpk_from_bits(0x7f000000u - lpk_bits(step));
  const int neg = x < 0.0f;
  const int to_b = u < (x - (neg ? -vhi : vlo)) * rstep;
  /* vhi only between grid points below the top (no branch: selects) */
  const int up = (vlo < a) & (vlo < top) & (to_b != neg);
  return copysignf(up ? vhi : vlo, x);
}
LPK_FN float lpk_e2m1_sr(float x, float u) {
  const float a = fabsf(x);
  const uint32_t b = lpk_bits(a);
  const int sub = a < 1.0f; /* the grid's steps of 0.5 below 1 */
  const float vlo = sub ? (a < 0.5f ? 0.0f : 0.5f) : fminf(lpk_from_bits(b & 0xffc00000u), 6.0f);
  return lpk_sr_value(x, u, a, vlo, sub ? 0.5f : lpk_from_bits((b & 0x7f800000u) - (1u << 23)), 6.0f);
}
LPK_FN float lpk_e4m3_sr(float x, float u) {
  const float a = fabsf(x);
  const uint32_t b = lpk_bits(a);
  const int sub = a < 0.015625f; /* steps of 2^-9 below 2^-6 */
  const float vlo = sub ? floorf(a * 512.0f) * 0.001953125f : fminf(lpk_from_bits(b & 0xfff00000u), 448.0f);
  return lpk_sr_value(x, u, a, vlo, sub ? 0.001953125f : lpk_from_bits((b & 0x7f800000u) - (3u << 23)), 448.0f);
}

/* ---- one domain ------------------------------------------------------------------ */
/* Amax of the finite values of x[i*stride], i in [0, n); *bad = 1 if one is not. */
LPK_FN float lpk_finite_amax(const float *x, long stride, int n, int *bad) {
  float m = 0.0f;
  for (int i = 0; i < n; i++) {
    float v = x[i * stride];
    if (!lpk_finite(v)) *bad = 1;
    else if (fabsf(v) > m) m = fabsf(v);
  }
  return m;
}

/* One quantization domain of n values x[i*stride] (format 0 NVFP4, 1 MXFP4,
 * 2 FP8; n a multiple of the group size). E2M1 codes one per byte. With sr,
 * element i draws u = sr_uniform(seed, sr_index[i]) (sr_index NULL: i).
 * Returns 1 when a non-finite value was seen. */
LPK_FN int lpk_quantize_domain(int format, int mx_round_up, int sr, uint64_t seed,
                                      const int64_t *sr_index, const float *x, long stride, int n,
                                      uint8_t *codes, uint8_t *scales, float *outer) {
  int bad = 0;
  const float amax = lpk_finite_amax(x, stride, n, &bad);
  const int fp8 = format == 2, G = fp8 ? n : format == 1 ? 32 : 16;
  const float out = lpk_outer_scale(format, amax);
  *outer = fp8 && bad ? lpk_from_bits(0x7fc00000u) : out;
  for (int g = 0; G > 0 && g < n / G; g++) {
    int gbad = 0;
    float denom = out;
    if (fp8) gbad = bad;
    else {
      const float ga = lpk_finite_amax(x + (long)g * G * stride, stride, G, &gbad);
      lpk_group_scale(format, ga, gbad, out, mx_round_up, &scales[g], &denom);
    }
    for (int i = g * G; i < g * G + G; i++) {
      const float u = sr ? lpk_sr_uniform(seed, (uint64_t)(sr_index ? sr_index[i] : i)) : 0.0f;
      codes[i] = gbad || denom == 0.0f ? 0 : lpk_elem_code(fp8, x[i * stride] / denom, sr, u);
    }
  }
  return bad;
}
#endif
