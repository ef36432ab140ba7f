// Error measures shared by the cpu tests (f32 results against a reference).
#ifndef LPATTN_TESTS_CPU_COMPARE_H
#define LPATTN_TESTS_CPU_COMPARE_H
#include <math.h>

#include <vector>

// ||a - b|| / ||b|| (||a - b|| when b is all zero).
inline double RelRmse(const std::vector<float> &a, const std::vector<float> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    const double e = (double)a[i] - b[i];
    num += e * e, den += (double)b[i] * b[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

// Largest difference relative to max(1, |b|) (LSE grows with the scores);
// equal values, infinities included, count as 0, a NaN difference wins.
inline double MaxRel(const std::vector<float> &a, const std::vector<float> &b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); i++) {
    if (a[i] == b[i]) continue;
    const double e = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
    m = e > m || e != e ? e : m;
  }
  return m;
}
#endif
