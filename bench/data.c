/* Random numbers and the benchmark distributions (SPEC 8). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void rng_seed(bench_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_u64(bench_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
  return out;
}

double rng_uniform(bench_rng *r) { return (double)(rng_u64(r) >> 11) * 0x1p-53; }

/* Box-Muller; one of the pair is dropped to keep the generator stateless. */
double rng_normal(bench_rng *r) {
  double u = 1.0 - rng_uniform(r), v = rng_uniform(r);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

int problem_alloc(bench_problem *p, int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Skv,
                  int64_t D) {
  memset(p, 0, sizeof *p);
  p->B = B, p->Hq = Hq, p->Hkv = Hkv, p->Sq = Sq, p->Skv = Skv, p->D = D;
  p->q = malloc(sizeof(float) * (size_t)(B * Hq * Sq * D));
  p->k = malloc(sizeof(float) * (size_t)(B * Hkv * Skv * D));
  p->v = malloc(sizeof(float) * (size_t)(B * Hkv * Skv * D));
  if (p->q && p->k && p->v) return 0;
  problem_free(p);
  return -1;
}

void problem_free(bench_problem *p) {
  free(p->q), free(p->k), free(p->v);
  p->q = p->k = p->v = NULL;
}

static void round_f16(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = lpattn_f16_to_f32(lpattn_f32_to_f16(x[i]));
}

void problem_round_f16(bench_problem *p) {
  round_f16(p->q, p->B * p->Hq * p->Sq * p->D);
  round_f16(p->k, p->B * p->Hkv * p->Skv * p->D);
  round_f16(p->v, p->B * p->Hkv * p->Skv * p->D);
}

void gen_uniform(bench_problem *p, bench_rng *r, double x0, double am) {
  float *t[3] = {p->q, p->k, p->v};
  int64_t n[3] = {p->B * p->Hq * p->Sq * p->D, p->B * p->Hkv * p->Skv * p->D,
                  p->B * p->Hkv * p->Skv * p->D};
  for (int a = 0; a < 3; a++)
    for (int64_t i = 0; i < n[a]; i++) t[a][i] = (float)(x0 + am * (2.0 * rng_uniform(r) - 1.0));
}

/* N(x0, 1) + N(0, am^2) * Bernoulli(0.001): rare large outliers. */
void gen_hybrid(bench_problem *p, bench_rng *r, double x0, double am) {
  float *t[3] = {p->q, p->k, p->v};
  int64_t n[3] = {p->B * p->Hq * p->Sq * p->D, p->B * p->Hkv * p->Skv * p->D,
                  p->B * p->Hkv * p->Skv * p->D};
  for (int a = 0; a < 3; a++)
    for (int64_t i = 0; i < n[a]; i++) {
      double x = x0 + rng_normal(r);
      if (rng_uniform(r) < 0.001) x += am * rng_normal(r);
      t[a][i] = (float)x;
    }
}

/* Attention-like heads. Scores are sm_scale * q.k with sm_scale = 1/sqrt(D)
 * and unit-variance noise in every channel, so noise logits are ~N(0, 1).
 * Structure is added in dedicated channels (real heads have such outlier
 * channels too):
 *   channel 0: attention sink: key 0 and every query share a large value
 *              (logit ~ +8 for every row);
 *   channels 1..8: a local band: 4 rotary-like frequencies, q.k ~ sum of
 *              cos(w (i - j)), logit ~ +5 at i = j fading over ~50 tokens;
 *   a few planted retrieval pairs: a random unit direction added to one key
 *              and to 8 later queries (logit ~ +10).
 * V is N(0, 1). */
enum { SINK_CH = 0, BAND_CH = 1, BAND_FREQS = 4, RETR_PER_HEAD = 6, RETR_QUERIES = 8 };

void gen_attnlike(bench_problem *p, bench_rng *r) { gen_attnlike_parts(p, r, ATTN_ALL); }

void gen_attnlike_f16(bench_problem *p, uint64_t seed, unsigned parts) {
  bench_rng rng;
  rng_seed(&rng, seed);
  gen_attnlike_parts(p, &rng, parts);
  problem_round_f16(p);
}

void gen_attnlike_parts(bench_problem *p, bench_rng *r, unsigned parts) {
  const int64_t D = p->D, Sq = p->Sq, Skv = p->Skv, off = Skv - Sq;
  const double rt = sqrt((double)D);
  const double a_sink = sqrt(8.0 * rt), a_band = sqrt(5.0 * rt / BAND_FREQS),
               a_retr = sqrt(10.0 * rt);
  const double period[BAND_FREQS] = {48, 96, 192, 384};
  const int64_t G = p->Hq / p->Hkv;
  float *dir = malloc(sizeof(float) * (size_t)D);
  for (int64_t i = 0; i < p->B * p->Hq * Sq * D; i++) p->q[i] = (float)rng_normal(r);
  for (int64_t i = 0; i < p->B * p->Hkv * Skv * D; i++) {
    p->k[i] = (float)rng_normal(r);
    p->v[i] = (float)rng_normal(r);
  }
  for (int64_t b = 0; b < p->B; b++)
    for (int64_t hk = 0; hk < p->Hkv; hk++) {
      float *K = p->k + (b * p->Hkv + hk) * Skv * D;
      if (parts & ATTN_SINK) K[SINK_CH] = (float)a_sink;
      for (int64_t j = 0; j < Skv && (parts & ATTN_BAND); j++)
        for (int f = 0; f < BAND_FREQS; f++) {
          double w = 6.283185307179586 / period[f];
          K[j * D + BAND_CH + 2 * f] = (float)(a_band * cos(w * j));
          K[j * D + BAND_CH + 2 * f + 1] = (float)(a_band * sin(w * j));
        }
      for (int64_t g = 0; g < G; g++) {
        float *Q = p->q + (b * p->Hq + hk * G + g) * Sq * D;
        for (int64_t i = 0; i < Sq; i++) {
          int64_t pos = i + off;
          if (parts & ATTN_SINK) Q[i * D + SINK_CH] = (float)a_sink;
          for (int f = 0; f < BAND_FREQS && (parts & ATTN_BAND); f++) {
            double w = 6.283185307179586 / period[f];
            Q[i * D + BAND_CH + 2 * f] = (float)(a_band * cos(w * pos));
            Q[i * D + BAND_CH + 2 * f + 1] = (float)(a_band * sin(w * pos));
          }
        }
      }
      /* Retrieval: key position j, later queries of every head in the group. */
      for (int n = 0; n < RETR_PER_HEAD && Skv > 2 && (parts & ATTN_RETRIEVAL); n++) {
        int64_t j = 1 + (int64_t)(rng_uniform(r) * (double)(Skv - 1));
        double norm = 0.0;
        for (int64_t d = 0; d < D; d++) {
          dir[d] = d <= BAND_CH + 2 * BAND_FREQS ? 0.0f : (float)rng_normal(r);
          norm += (double)dir[d] * dir[d];
        }
        for (int64_t d = 0; d < D; d++) K[j * D + d] += (float)(a_retr * dir[d] / sqrt(norm));
        for (int m = 0; m < RETR_QUERIES; m++) {
          int64_t lo = j - off > 0 ? j - off : 0; /* first row that sees key j */
          if (lo >= Sq) break;
          int64_t i = lo + (int64_t)(rng_uniform(r) * (double)(Sq - lo));
          for (int64_t g = 0; g < G; g++) {
            float *Q = p->q + (b * p->Hq + hk * G + g) * Sq * D;
            for (int64_t d = 0; d < D; d++) Q[i * D + d] += (float)(a_retr * dir[d] / sqrt(norm));
          }
        }
      }
    }
  free(dir);
}
