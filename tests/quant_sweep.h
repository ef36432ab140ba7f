/* The amax sweep of the quantizer parity tests (issue 10), one input for
 * every backend: rows of QS_D = 64 values (one AXIS_D domain each) whose
 * amax A walks through zero, every f32 binade from 2^-149 to 2^127 (so the
 * MXFP4 E8M0 scales reach code 0/1 and amax/6 goes subnormal, e.g. the
 * 0x1p-124 of the issue), the round-up boundary just above 6 * 2^e, 7 * 2^e
 * (E2M1 saturation under the floor rule), 448 * 2^e (an exact FP8 scale),
 * and FLT_MAX. The four 16-value groups of a row have amax A, A/8, A*2^-16
 * and A*2^-20: the last two give NVFP4 E4M3 group scales in the subnormal
 * range and rounding to 0. Elements sit on exact E2M1 ties (x/(A/6) = j/4)
 * and on E4M3 ties (x/(A/448) = (2m+1) 2^-10, 17, 19, ...). Backends compare
 * codes, scales and outer scales with core's lp_quantize_domain / ref. */
#ifndef LPATTN_TESTS_QUANT_SWEEP_H
#define LPATTN_TESTS_QUANT_SWEEP_H
#include <float.h>
#include <math.h>
#include <stdint.h>

#define QS_D 64
#define QS_EMIN (-149)
#define QS_NE (127 - QS_EMIN + 1) /* binades */
#define QS_PER_E 5

/* Number of sweep rows. */
static inline int qs_rows(void) { return 4 + QS_NE * QS_PER_E; }

/* amax of row k. */
static inline float qs_amax(int k) {
  static const float special[4] = {0.0f, 0x1p-124f, FLT_MAX, 0x1p-149f};
  if (k < 4) return special[k];
  const int e = QS_EMIN + (k - 4) / QS_PER_E;
  float a;
  switch ((k - 4) % QS_PER_E) {
    case 0: a = ldexpf(1.0f, e); break;
    case 1: a = ldexpf(6.0f, e); break;
    case 2: a = nextafterf(ldexpf(6.0f, e), INFINITY); break;
    case 3: a = ldexpf(7.0f, e); break;
    default: a = ldexpf(448.0f, e); break;
  }
  return isfinite(a) ? a : FLT_MAX;
}

/* Row k's QS_D values. */
static inline void qs_row(int k, float *x) {
  static const float group_f[4] = {1.0f, 0.125f, 0x1p-16f, 0x1p-20f};
  static const float e4m3_ties[8] = {0x1p-10f, 3 * 0x1p-10f, 5 * 0x1p-10f, 1.0625f,
                                     1.1875f, 17.0f, 19.0f, 31.0f};
  const float A = qs_amax(k);
  for (int i = 0; i < QS_D; i++) {
    const int g = i / 16, s = i % 16;
    const float ag = A * group_f[g];
    float v;
    if (s == 0) v = ag; /* the group's amax */
    else if (s <= 8) v = (ag / 6.0f) * ((float)((s * 7 + g * 3 + k) % 25) * 0.25f);
    else v = (ag / 448.0f) * e4m3_ties[(s + k) % 8];
    if (!(fabsf(v) <= ag)) v = ag; /* rounding past the group amax (or overflow) */
    x[i] = (s + k) % 2 ? -v : v;
  }
}
#endif
