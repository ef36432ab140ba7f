/* Scalar number formats (SPEC 2), bit-exact: every conversion works on the
 * integer bits of the f32, so results do not depend on the FPU rounding mode,
 * flush-to-zero or compiler flags. Only the stochastic-rounding threshold is
 * f32 arithmetic, because SPEC 2 defines it that way. */
#include <string.h>
#include "formats.h"

static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* A small IEEE-like format: `mbits` fraction bits, exponent bias `bias`;
 * exponent field 0 holds the subnormals. */
typedef struct {
  int mbits, bias;
} minifmt;

static const minifmt FMT_E2M1 = {1, 1}, FMT_E4M3 = {3, 7}, FMT_E5M2 = {2, 15},
                     FMT_F16 = {10, 15}, FMT_BF16 = {7, 127};

/* Magnitude code of the finite, non-negative f32 with bits `a`, rounded to
 * nearest even (trunc = 0) or toward zero (trunc = 1). Codes past the format's
 * largest finite value are returned as is (the carry of a rounded-up maximum
 * lands on the next exponent); callers saturate or map them to inf. */
static uint32_t encode_mag(uint32_t a, minifmt f, int trunc) {
  if (a == 0) return 0;
  int field = (int)(a >> 23);
  uint32_t sig = (a & 0x7FFFFFu) | (field ? 0x800000u : 0); /* value = sig * 2^(e-23) */
  int e = field ? field - 127 : -126;
  int emin = 1 - f.bias;
  int shift = 23 - f.mbits + (e < emin ? emin - e : 0);
  if (shift > 25) return 0; /* below half the smallest subnormal */
  uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (!trunc && (rem > half || (rem == half && (q & 1)))) q++;
  /* q carries the implicit bit for normals, so adding it to the exponent
   * field minus one gives the code; a carry out of the fraction bumps it. */
  int biased = (e < emin ? emin : e) + f.bias - 1;
  return ((uint32_t)biased << f.mbits) + q;
}

/* f32 value of a finite magnitude code (normal in f32 for every format used). */
static float decode_mag(uint32_t c, minifmt f) {
  uint32_t frac = c & ((1u << f.mbits) - 1);
  int e = (int)(c >> f.mbits);
  if (e == 0) {
    if (frac == 0) return 0.0f;
    e = 1 - f.bias;
    while (!(frac & (1u << f.mbits))) { /* normalise the subnormal */
      frac <<= 1;
      e--;
    }
    frac &= (1u << f.mbits) - 1;
  } else {
    e -= f.bias;
  }
  return bits_f32((uint32_t)(e + 127) << 23 | frac << (23 - f.mbits));
}

static float with_sign(float v, int neg) { return neg ? -v : v; }

static int is_nan_bits(uint32_t a) { return a > 0x7F800000u; }

/* ---- E2M1 ---------------------------------------------------------------- */
float lpattn_e2m1_to_f32(uint8_t code) {
  return with_sign(decode_mag(code & 7u, FMT_E2M1), code & 8u);
}

/* NaN has no E2M1 code: it encodes as +0 (quantizers never send one here;
 * they poison the group scale instead). */
uint8_t lpattn_f32_to_e2m1(float x) {
  uint32_t u = f32_bits(x), a = u & 0x7FFFFFFFu;
  if (is_nan_bits(a)) return 0;
  uint32_t c = a >= 0x7F800000u ? 7u : encode_mag(a, FMT_E2M1, 0);
  if (c > 7u) c = 7u;
  return (uint8_t)(c | (u >> 28 & 8u));
}

/* ---- E4M3 (fn: no inf, 0x7F/0xFF NaN, saturating) ------------------------ */
float lpattn_e4m3_to_f32(uint8_t code) {
  uint32_t m = code & 0x7Fu;
  if (m == 0x7Fu) return bits_f32((code & 0x80u ? 0x80000000u : 0) | 0x7FC00000u);
  return with_sign(decode_mag(m, FMT_E4M3), code & 0x80u);
}

uint8_t lpattn_f32_to_e4m3(float x) {
  uint32_t u = f32_bits(x), a = u & 0x7FFFFFFFu;
  if (is_nan_bits(a)) return 0x7F;
  uint32_t c = a >= 0x7F800000u ? 0x7Eu : encode_mag(a, FMT_E4M3, 0);
  if (c > 0x7Eu) c = 0x7Eu;
  return (uint8_t)(c | (u >> 24 & 0x80u));
}

/* ---- E5M2 (IEEE-like: inf exists, overflow rounds to inf) --------------- */
float lpattn_e5m2_to_f32(uint8_t code) {
  uint32_t m = code & 0x7Fu, neg = code & 0x80u ? 0x80000000u : 0;
  if (m >= 0x7Cu) return bits_f32(neg | (m == 0x7Cu ? 0x7F800000u : 0x7FC00000u));
  return with_sign(decode_mag(m, FMT_E5M2), neg != 0);
}

uint8_t lpattn_f32_to_e5m2(float x) {
  uint32_t u = f32_bits(x), a = u & 0x7FFFFFFFu;
  if (is_nan_bits(a)) return 0x7E; /* canonical quiet NaN */
  uint32_t c = a >= 0x7F800000u ? 0x7Cu : encode_mag(a, FMT_E5M2, 0);
  if (c > 0x7Cu) c = 0x7Cu;
  return (uint8_t)(c | (u >> 24 & 0x80u));
}

/* ---- E8M0: 2^(code-127), 0xFF NaN ---------------------------------------- */
float lpattn_e8m0_to_f32(uint8_t code) {
  if (code == 0xFF) return bits_f32(0x7FC00000u);
  if (code == 0) return bits_f32(0x00400000u); /* 2^-127, an f32 subnormal */
  return bits_f32((uint32_t)code << 23);
}

/* ---- f16 / bf16 ---------------------------------------------------------- */
float lpattn_f16_to_f32(uint16_t h) {
  uint32_t m = h & 0x7FFFu, neg = h & 0x8000u ? 0x80000000u : 0;
  if (m >= 0x7C00u) return bits_f32(neg | 0x7F800000u | (m & 0x3FFu) << 13);
  return with_sign(decode_mag(m, FMT_F16), neg != 0);
}

uint16_t lpattn_f32_to_f16(float x) {
  uint32_t u = f32_bits(x), a = u & 0x7FFFFFFFu;
  if (is_nan_bits(a)) return 0x7E00;
  uint32_t c = a >= 0x7F800000u ? 0x7C00u : encode_mag(a, FMT_F16, 0);
  if (c > 0x7C00u) c = 0x7C00u;
  return (uint16_t)(c | (u >> 16 & 0x8000u));
}

float lpattn_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t lpattn_f32_to_bf16(float x) {
  uint32_t u = f32_bits(x), a = u & 0x7FFFFFFFu;
  if (is_nan_bits(a)) return 0x7FC0;
  uint32_t c = a >= 0x7F800000u ? 0x7F80u : encode_mag(a, FMT_BF16, 0);
  if (c > 0x7F80u) c = 0x7F80u;
  return (uint16_t)(c | (u >> 16 & 0x8000u));
}

/* ---- stochastic rounding (SPEC 2) ---------------------------------------- */
/* Between the signed neighbours a <= x < b, x goes to b iff u < (x-a)/(b-a)
 * in f32. `lo`/`hi` are the magnitude codes around |x| (lo = hi when exact);
 * returns the magnitude code chosen. */
static uint32_t sr_pick(float x, float u, uint32_t lo, minifmt f) {
  float vlo = decode_mag(lo, f), vhi = decode_mag(lo + 1, f);
  float a = x < 0 ? -vhi : vlo, b = x < 0 ? -vlo : vhi;
  int to_b = u < (x - a) / (b - a);
  /* b is the larger magnitude for x > 0 and the smaller one for x < 0 */
  return (to_b == (x > 0)) ? lo + 1 : lo;
}

uint8_t lp_e2m1_encode_sr(float x, float u) {
  uint32_t s = f32_bits(x), a = s & 0x7FFFFFFFu;
  if (is_nan_bits(a)) return 0;
  uint32_t lo = a >= 0x7F800000u ? 7u : encode_mag(a, FMT_E2M1, 1);
  uint32_t c = lo >= 7u ? 7u : (decode_mag(lo, FMT_E2M1) == bits_f32(a) ? lo : sr_pick(x, u, lo, FMT_E2M1));
  return (uint8_t)(c | (s >> 28 & 8u));
}

uint8_t lp_e4m3_encode_sr(float x, float u) {
  uint32_t s = f32_bits(x), a = s & 0x7FFFFFFFu;
  if (is_nan_bits(a)) return 0x7F;
  uint32_t lo = a >= 0x7F800000u ? 0x7Eu : encode_mag(a, FMT_E4M3, 1);
  uint32_t c = lo >= 0x7Eu ? 0x7Eu
               : (decode_mag(lo, FMT_E4M3) == bits_f32(a) ? lo : sr_pick(x, u, lo, FMT_E4M3));
  return (uint8_t)(c | (s >> 24 & 0x80u));
}

/* ---- tensor element access ------------------------------------------------ */
float lp_load_f32(const void *base, lpattn_dtype dt, int64_t offset) {
  switch (dt) {
    case LPATTN_F32: return ((const float *)base)[offset];
    case LPATTN_F16: return lpattn_f16_to_f32(((const uint16_t *)base)[offset]);
    case LPATTN_BF16: return lpattn_bf16_to_f32(((const uint16_t *)base)[offset]);
    case LPATTN_E4M3: return lpattn_e4m3_to_f32(((const uint8_t *)base)[offset]);
    case LPATTN_E5M2: return lpattn_e5m2_to_f32(((const uint8_t *)base)[offset]);
    case LPATTN_E8M0: return lpattn_e8m0_to_f32(((const uint8_t *)base)[offset]);
    default: return 0.0f; /* not an element type: validation rejects it first */
  }
}

void lp_store_f32(void *base, lpattn_dtype dt, int64_t offset, float v) {
  switch (dt) {
    case LPATTN_F32: ((float *)base)[offset] = v; break;
    case LPATTN_F16: ((uint16_t *)base)[offset] = lpattn_f32_to_f16(v); break;
    case LPATTN_BF16: ((uint16_t *)base)[offset] = lpattn_f32_to_bf16(v); break;
    default: break; /* outputs are f32/f16/bf16 only: validation rejects others */
  }
}
