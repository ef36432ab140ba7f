/* THRIFT's k (SPEC 5): the rule written once, for the host (core/thrift.c:
 * lpattn_thrift_k, lp_thrift_k_for) and for the GPU backends, which derive a
 * decode sequence's k on the device from its length (no host round trip).
 * Header-only, plain C; LP_HD marks the functions host + device under nvcc
 * and hipcc. */
#ifndef LPATTN_THRIFT_K_H
#define LPATTN_THRIFT_K_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define LP_HD __host__ __device__
#else
#define LP_HD
#endif

/* Fraction of the computed tiles that are high when k of n per query tile
 * are: causal counts the lower triangle (query tile i sees i + 1 tiles). */
static inline LP_HD double lp_thrift_high_fraction(int k, int n, int causal) {
  const double kd = k, nd = n; /* n + 1 overflows int at INT_MAX */
  if (!causal) return kd / nd;
  return (kd * nd - kd * (kd - 1.0) / 2.0) / (nd * (nd + 1.0) / 2.0);
}

/* The fraction grows with k (by (n - k + 1/2) / (n(n+1)/2) a step when
 * causal), so the best k sits next to the real root of high_fraction = budget;
 * the few integers around it are compared exactly as a scan over every k
 * would (ties keep the smaller k). O(1) for any n. */
static inline LP_HD int lp_thrift_k_calc(int n_tiles, float budget, int causal) {
  if (n_tiles < 1) return 0;
  if (!(budget > 0.0f)) return 1;        /* NaN, zero or negative: the fewest */
  if (budget >= 1.0f) return n_tiles;    /* every tile */
  const double n = n_tiles, f = budget;
  double root;
  if (!causal) {
    root = f * n;
  } else { /* k^2 - (2n + 1) k + f n (n + 1) = 0, the smaller root */
    const double disc = (2.0 * n + 1.0) * (2.0 * n + 1.0) - 4.0 * f * n * (n + 1.0);
    root = disc > 0.0 ? ((2.0 * n + 1.0) - sqrt(disc)) / 2.0 : n;
  }
  int64_t lo = (int64_t)floor(root) - 2, hi = lo + 5;
  if (lo < 1) lo = 1;
  if (hi > n_tiles) hi = n_tiles;
  if (lo > hi) lo = hi;
  int64_t best = lo;
  double best_err = fabs(lp_thrift_high_fraction((int)lo, n_tiles, causal) - budget);
  for (int64_t k = lo + 1; k <= hi; k++) {
    double err = fabs(lp_thrift_high_fraction((int)k, n_tiles, causal) - budget);
    if (err < best_err) best = k, best_err = err; /* ties keep the smaller k */
  }
  return (int)best;
}

/* THRIFT's k for a query that sees n_tiles KV tiles: k_fixed (> 0, clamped
 * to n_tiles), else from the budget. */
static inline LP_HD int lp_thrift_k_rule(int k_fixed, float budget, int causal, int64_t n_tiles) {
  const int n = (int)n_tiles;
  return k_fixed > 0 ? (k_fixed < n ? k_fixed : n) : lp_thrift_k_calc(n, budget, causal);
}

/* THRIFT's k under a sliding window (SEMANTICS "Sliding window and
 * softcap"; left, right < 0: unbounded on that side, right 0 under causal):
 * a query tile's rows see a run of left + right + Bq keys at most, which
 * spans at most ceil((span - 1) / Bk) + 1 KV tiles, each about as many for
 * every query tile: the non-causal k/n rule over them (core/window.c for
 * the host, the GPU decode's selection on the device). */
static inline LP_HD int lp_thrift_k_span(int k_fixed, float budget, int causal, int64_t n_tiles, int64_t left,
                                         int64_t right, int64_t Bq, int64_t Bk) {
  if (left < 0 || right < 0) return lp_thrift_k_rule(k_fixed, budget, causal, n_tiles);
  const int64_t span = left + right + Bq;
  int64_t nw = (span - 1 + Bk - 1) / Bk + 1;
  if (nw > n_tiles) nw = n_tiles;
  return lp_thrift_k_rule(k_fixed, budget, 0, nw);
}

#endif
