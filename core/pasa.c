/* PASA's beta: the fixed-point iteration of seed 003, Appendix C. The shift
 * matrix entries (1 - beta/n) and -beta/n are rounded to the storage type;
 * beta is moved until beta/(1-beta) equals the invariance those rounded
 * entries actually realise, so the correction inverts the rounded shift. */
#include <math.h>
#include "lpattn.h"

static double round_to(lpattn_dtype t, double x) {
  float f = (float)x;
  return t == LPATTN_F16 ? lpattn_f16_to_f32(lpattn_f32_to_f16(f))
                         : lpattn_bf16_to_f32(lpattn_f32_to_bf16(f));
}

static double invariance(lpattn_dtype t, int n, double beta) {
  double m0 = round_to(t, 1.0 - beta / n);
  double b = -round_to(t, -beta / n);
  double a = m0 + b;
  return b * n / (a * (a - b * n)) + (1.0 - a) / a;
}

double lpattn_pasa_beta(lpattn_dtype storage, int s2, double beta0) {
  if ((storage != LPATTN_F16 && storage != LPATTN_BF16) || s2 < 2 || s2 > 4096) return NAN;
  if (beta0 == 0.0) beta0 = 1.0 - 1.0 / 64.0;
  if (!(beta0 > 0.0 && beta0 < 1.0)) return NAN;
  /* The seed keeps beta in a float32 tensor: round each iterate the same way. */
  double beta = (float)beta0;
  for (int it = 0; it < 100; it++) {
    double inv = invariance(storage, s2, beta);
    double next = inv / (1.0 + inv);
    double err = fabs(next - beta) / fabs(beta);
    beta = next;
    if (err <= 1e-8) break;
  }
  return (float)beta;
}
