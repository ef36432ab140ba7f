/* Static-scale FP8 (SPEC 11) on the CUDA backend: the sm_90a E4M3 kernel
 * against an f64 model of SPEC 11 (P^ = E4M3(448 P) per 64-key tile), E4M3
 * inputs (BHSD and BSHD) bitwise equal to 16-bit inputs cast by the same
 * descales (the device cast is core's encoder), and the causal leak test
 * of SPEC 4 bitwise (every tile, the diagonal too, runs in FP8). Devices
 * other than sm_90a answer UNSUPPORTED (the test then skips). */
#include "cudatest.h"

enum { D = 128 };

typedef struct {
  int B, Hq, Hkv, Sq, Skv, causal, bshd;
} shape;

/* The f64 model: value = code * descale; online softmax over tiles of 64
 * keys with P^ = E4M3(448 P) in P V (SPEC 3's FP8 P) and l from P. */
static void model(const shape *s, const uint8_t *q8, const uint8_t *k8, const uint8_t *v8,
                  const float *dq, const float *dk, const float *dv, double *out) {
  const int G = s->Hq / s->Hkv, off = s->Skv - s->Sq;
  const double sc = 1.0 / sqrt((double)D);
  double *sr = malloc(sizeof(double) * (size_t)s->Skv), acc[D];
  for (int b = 0; b < s->B; b++)
    for (int h = 0; h < s->Hq; h++) {
      const int hk = h / G;
      const double qd = dq[b * s->Hkv + hk], kd = dk[b * s->Hkv + hk], vd = dv[b * s->Hkv + hk];
      for (int r = 0; r < s->Sq; r++) {
        const uint8_t *qr = q8 + (((size_t)b * s->Hq + h) * s->Sq + r) * D;
        double m = -INFINITY, l = 0;
        for (int d = 0; d < D; d++) acc[d] = 0;
        for (int j0 = 0; j0 < s->Skv; j0 += 64) {
          const int j1 = j0 + 64 < s->Skv ? j0 + 64 : s->Skv;
          double mt = -INFINITY;
          for (int c = j0; c < j1; c++) {
            sr[c] = -INFINITY;
            if (s->causal && c > r + off) continue;
            const uint8_t *kr = k8 + (((size_t)b * s->Hkv + hk) * s->Skv + c) * D;
            double dot = 0;
            for (int d = 0; d < D; d++) dot += (double)lpattn_e4m3_to_f32(qr[d]) * lpattn_e4m3_to_f32(kr[d]);
            sr[c] = dot * qd * kd * sc;
            if (sr[c] > mt) mt = sr[c];
          }
          if (mt == -INFINITY) continue;
          const double m2 = mt > m ? mt : m, a = exp(m - m2);
          l *= a;
          for (int d = 0; d < D; d++) acc[d] *= a;
          for (int c = j0; c < j1; c++) {
            if (sr[c] == -INFINITY) continue;
            const double p = exp(sr[c] - m2), ph = lpattn_e4m3_to_f32(lpattn_f32_to_e4m3((float)(448.0 * p)));
            l += p;
            const uint8_t *vr = v8 + (((size_t)b * s->Hkv + hk) * s->Skv + c) * D;
            for (int d = 0; d < D; d++) acc[d] += ph * lpattn_e4m3_to_f32(vr[d]) * vd / 448.0;
          }
          m = m2;
        }
        double *o = out + (((size_t)b * s->Hq + h) * s->Sq + r) * D;
        for (int d = 0; d < D; d++) o[d] = l > 0 ? acc[d] / l : 0;
      }
    }
  free(sr);
}

/* f16 host data x and its codes E4M3(x / descale) (f32 division, as the device cast). */
static void fill(ct_pair *x, uint8_t *codes, const float *desc, int Hkv, int G, double mean) {
  const int64_t B = x->h.shape[0], H = x->h.shape[1], S = x->h.shape[2];
  uint16_t *h = x->h.data;
  for (int64_t b = 0; b < B; b++)
    for (int64_t hh = 0; hh < H; hh++)
      for (int64_t i = 0; i < S * D; i++) {
        const size_t at = (size_t)((b * H + hh) * S * D + i);
        h[at] = lpattn_f32_to_f16((float)(mean + ct_normal()));
        codes[at] = lpattn_f32_to_e4m3(lpattn_f16_to_f32(h[at]) / desc[b * Hkv + hh / G]);
      }
  ct_up(x);
}

/* An E4M3 device tensor of codes [B, H, S, D], BSHD in memory when bshd. */
static lpattn_tensor codes_dev(const uint8_t *codes, int64_t B, int64_t H, int64_t S, int bshd, void **mem) {
  const size_t n = (size_t)(B * H * S * D);
  uint8_t *t = malloc(n);
  lpattn_tensor v = lpattn_tensor_4d(NULL, LPATTN_E4M3, B, H, S, D);
  if (bshd) v.stride[0] = S * H * D, v.stride[1] = D, v.stride[2] = H * D;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = 0; s < S; s++)
        memcpy(t + b * v.stride[0] + h * v.stride[1] + s * v.stride[2], codes + ((b * H + h) * S + s) * D, D);
  *mem = ht_dalloc(n);
  ht_up(*mem, t, n);
  free(t);
  v.data = *mem;
  return v;
}

static int run_shape(lpattn_ctx *ctx, const shape *s) {
  const int G = s->Hq / s->Hkv;
  ct_pair q = ct_make(LPATTN_F16, s->B, s->Hq, s->Sq, D), k = ct_make(LPATTN_F16, s->B, s->Hkv, s->Skv, D),
          v = ct_make(LPATTN_F16, s->B, s->Hkv, s->Skv, D), o = ct_make(LPATTN_F32, s->B, s->Hq, s->Sq, D),
          o8 = ct_make(LPATTN_F32, s->B, s->Hq, s->Sq, D), ds = ct_make(LPATTN_F32, 1, 3, s->B, s->Hkv);
  float *desc = ds.h.data; /* [3][B][Hkv]: q, k, v */
  const int nd = s->B * s->Hkv;
  for (int i = 0; i < 3 * nd; i++) desc[i] = (float)(0.004 + 0.01 * ct_unif());
  ct_up(&ds);
  uint8_t *q8 = malloc(q.bytes / 2), *k8 = malloc(k.bytes / 2), *v8 = malloc(v.bytes / 2);
  fill(&q, q8, desc, s->Hkv, G, 0.0), fill(&k, k8, desc + nd, s->Hkv, 1, 0.3), fill(&v, v8, desc + 2 * nd, s->Hkv, 1, 0.0);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = LPATTN_PREC_FP8_STATIC, p.causal = s->causal;
  for (int i = 0; i < 3; i++) {
    lpattn_tensor *t = i == 0 ? &p.q_descale : i == 1 ? &p.k_descale : &p.v_descale;
    *t = lpattn_tensor_4d((float *)ds.d.data + i * nd, LPATTN_F32, 1, 1, s->B, s->Hkv);
  }
  ct_poison(&o);
  lpattn_status st = lpattn_attention(ctx, &q.d, &k.d, &v.d, &o.d, &p, NULL);
  if (st == LPATTN_ERR_UNSUPPORTED) {
    printf("skip: %s\n", lpattn_last_error());
    return 77;
  }
  CHECK(st == LPATTN_OK, "%s", "");
  ct_down(&o);
  /* against the f64 model */
  const size_t n = (size_t)s->B * s->Hq * s->Sq * D;
  double *ref = malloc(n * sizeof(double)), e2 = 0, r2 = 0, emax = 0;
  model(s, q8, k8, v8, desc, desc + nd, desc + 2 * nd, ref);
  const float *got = o.h.data;
  for (size_t i = 0; i < n; i++) {
    const double e = fabs(got[i] - ref[i]);
    e2 += e * e, r2 += ref[i] * ref[i];
    if (!(e <= emax)) emax = e;
  }
  const double rel = sqrt(e2 / (r2 > 0 ? r2 : 1));
  printf("B%d Hq%d Hkv%d Sq%d Skv%d causal%d: rel_rmse %.2e max_abs %.2e\n", s->B, s->Hq, s->Hkv, s->Sq, s->Skv,
         s->causal, rel, emax);
  CHECK(rel < 1e-2, "%s", "");
  /* E4M3 inputs: bitwise the cast's result */
  void *mq, *mk, *mv;
  lpattn_tensor tq = codes_dev(q8, s->B, s->Hq, s->Sq, s->bshd, &mq), tk = codes_dev(k8, s->B, s->Hkv, s->Skv, s->bshd, &mk),
                tv = codes_dev(v8, s->B, s->Hkv, s->Skv, s->bshd, &mv);
  ct_poison(&o8);
  CHECK(lpattn_attention(ctx, &tq, &tk, &tv, &o8.d, &p, NULL) == LPATTN_OK, "%s", "");
  ct_down(&o8);
  CHECK(memcmp(o.h.data, o8.h.data, o.bytes) == 0, "%s", "");
  /* Q codes every other byte (stride[3] = 2: not a TMA row): the same bits */
  {
    const size_t nq = (size_t)s->B * s->Hq * s->Sq * D;
    uint8_t *t2 = calloc(2 * nq, 1);
    for (size_t i = 0; i < nq; i++) t2[2 * i] = q8[i];
    void *m2 = ht_dalloc(2 * nq);
    ht_up(m2, t2, 2 * nq);
    lpattn_tensor tq2 = lpattn_tensor_4d(m2, LPATTN_E4M3, s->B, s->Hq, s->Sq, D);
    for (int i = 0; i < 4; i++) tq2.stride[i] *= 2;
    ct_poison(&o8);
    CHECK(lpattn_attention(ctx, &tq2, &tk, &tv, &o8.d, &p, NULL) == LPATTN_OK, "%s", "");
    ct_down(&o8);
    CHECK(memcmp(o.h.data, o8.h.data, o.bytes) == 0, "%s", "strided E4M3 q differs");
    free(t2), ht_dfree(m2);
  }
  /* the kernel's SPEC tiles are 64 keys: another block_k is refused, not ignored */
  p.block_k = 128;
  CHECK_STATUS(lpattn_attention(ctx, &tq, &tk, &tv, &o8.d, &p, NULL), LPATTN_ERR_UNSUPPORTED);
  p.block_k = 64;
  /* causal: keys after row t changed -> rows < t - off bitwise the same */
  if (s->causal) {
    const int t = s->Skv / 2, off = s->Skv - s->Sq;
    uint8_t *k2 = malloc(k.bytes / 2), *v2 = malloc(v.bytes / 2);
    memcpy(k2, k8, k.bytes / 2), memcpy(v2, v8, v.bytes / 2);
    for (size_t i = 0; i < k.bytes / 2; i++)
      if ((int)(i / D % s->Skv) >= t) { /* finite codes (0x7f / 0xff are NaN) */
        k2[i] ^= 0x15, v2[i] ^= 0x2a;
        if ((k2[i] & 0x7f) == 0x7f) k2[i] ^= 1;
        if ((v2[i] & 0x7f) == 0x7f) v2[i] ^= 1;
      }
    void *mk2, *mv2;
    lpattn_tensor tk2 = codes_dev(k2, s->B, s->Hkv, s->Skv, s->bshd, &mk2), tv2 = codes_dev(v2, s->B, s->Hkv, s->Skv, s->bshd, &mv2);
    ct_poison(&o8);
    CHECK(lpattn_attention(ctx, &tq, &tk2, &tv2, &o8.d, &p, NULL) == LPATTN_OK, "%s", "");
    ct_down(&o8);
    const float *a = o.h.data, *b = o8.h.data;
    int leaks = 0, changed = 0;
    for (size_t i = 0; i < n; i++) {
      const int r = (int)(i / D % s->Sq);
      if (r + off < t) leaks += memcmp(&a[i], &b[i], 4) != 0;
      else changed += a[i] != b[i];
    }
    printf("  leak test: %d changed elements before row %d, %d after\n", leaks, t - off, changed);
    CHECK(leaks == 0 && changed > 0, "%s", "");
    /* SPEC 2: a NaN code in V at key t (b 0, kv head 0, channel 5) reaches
     * channel 5 of the rows that attend key t only; a NaN code in K at key
     * t reaches nothing before it */
    memcpy(v2, v8, v.bytes / 2), memcpy(k2, k8, k.bytes / 2);
    v2[(size_t)t * D + 5] = 0x7f, k2[(size_t)t * D + 9] = 0xff;
    ht_dfree(mk2), ht_dfree(mv2);
    tk2 = codes_dev(k2, s->B, s->Hkv, s->Skv, s->bshd, &mk2), tv2 = codes_dev(v2, s->B, s->Hkv, s->Skv, s->bshd, &mv2);
    ct_poison(&o8);
    CHECK(lpattn_attention(ctx, &tq, &tk, &tv2, &o8.d, &p, NULL) == LPATTN_OK, "%s", "");
    ct_down(&o8);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
      const int r = (int)(i / D % s->Sq), d = (int)(i % D), bh = (int)(i / D / s->Sq);
      const int hit = bh < G && r + off >= t && d == 5; /* b 0, q heads of kv head 0 */
      bad += hit ? !isnan(b[i]) : memcmp(&a[i], &b[i], 4) != 0 && r + off < t;
    }
    ct_poison(&o8);
    CHECK(lpattn_attention(ctx, &tq, &tk2, &tv, &o8.d, &p, NULL) == LPATTN_OK, "%s", "");
    ct_down(&o8);
    for (size_t i = 0; i < n; i++)
      if ((int)(i / D % s->Sq) + off < t) bad += memcmp(&a[i], &b[i], 4) != 0;
    printf("  NaN codes at key %d: %d wrong elements\n", t, bad);
    CHECK(bad == 0, "%s", "");
    free(k2), free(v2), ht_dfree(mk2), ht_dfree(mv2);
  }
  free(ref), free(q8), free(k8), free(v8), ht_dfree(mq), ht_dfree(mk), ht_dfree(mv);
  ct_free(&q), ct_free(&k), ct_free(&v), ct_free(&o), ct_free(&o8), ct_free(&ds);
  return 0;
}

int main(void) {
  lpattn_ctx *ctx = NULL;
  if (lpattn_create(LPATTN_BACKEND_CUDA, NULL, &ctx) != LPATTN_OK) return 77;
  const shape shapes[] = {
      {1, 2, 2, 128, 128, 0, 0},  {1, 2, 2, 128, 128, 1, 0},  {2, 4, 2, 300, 300, 1, 1},
      {1, 4, 1, 200, 517, 1, 0},  {1, 2, 2, 777, 777, 0, 1},  {1, 2, 1, 1000, 1000, 1, 0},
      {2, 2, 2, 64, 1100, 0, 0},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const int r = run_shape(ctx, &shapes[i]);
    if (r) {
      lpattn_free(ctx);
      return r;
    }
  }
  lpattn_free(ctx);
  return test_finish();
}
