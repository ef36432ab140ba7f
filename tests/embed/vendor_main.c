/* The program vendor_check.sh links against lpattn compiled without meson:
 * HIGH attention on ref must match a direct f64 computation, and with
 * `cpu` as argument the cpu backend must be present and agree with ref in
 * HIGH and NVFP4. Exit 0 on success. */
#include <lpattn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

enum { H = 2, S = 160, D = 128, N = H * S * D };

static float q[N], k[N], v[N], o_ref[N], o_cpu[N];

static lpattn_status run(lpattn_backend b, lpattn_precision prec, float *o) {
  lpattn_ctx *ctx;
  lpattn_status st = lpattn_create(b, NULL, &ctx);
  if (st != LPATTN_OK) return st;
  lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F32, 1, H, S, D);
  lpattn_tensor tk = lpattn_tensor_4d(k, LPATTN_F32, 1, H, S, D);
  lpattn_tensor tv = lpattn_tensor_4d(v, LPATTN_F32, 1, H, S, D);
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, 1, H, S, D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.causal = 1;
  p.precision = prec;
  st = lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL);
  lpattn_free(ctx);
  return st;
}

static double max_diff(const float *a, const float *b) {
  double m = 0.0;
  for (int i = 0; i < N; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= m)) m = d; /* NaN counts as a failure */
  }
  return m;
}

/* Largest error of o against causal softmax attention computed here. */
static double check_naive(const float *o) {
  double worst = 0.0, s[S];
  for (int h = 0; h < H; h++)
    for (int i = 0; i < S; i++) {
      double m = -INFINITY, l = 0.0;
      for (int j = 0; j <= i; j++) {
        double a = 0.0;
        for (int d = 0; d < D; d++) a += (double)q[(h * S + i) * D + d] * k[(h * S + j) * D + d];
        s[j] = a / sqrt((double)D);
        m = s[j] > m ? s[j] : m;
      }
      for (int j = 0; j <= i; j++) l += s[j] = exp(s[j] - m);
      for (int d = 0; d < D; d++) {
        double want = 0.0;
        for (int j = 0; j <= i; j++) want += s[j] * v[(h * S + j) * D + d];
        double err = fabs(want / l - o[(h * S + i) * D + d]);
        if (!(err <= worst)) worst = err;
      }
    }
  return worst;
}

int main(int argc, char **argv) {
  int want_cpu = argc > 1 && !strcmp(argv[1], "cpu");
  for (unsigned i = 0; i < N; i++) {
    q[i] = (float)((i * 2654435761u) % 997u) / 997.0f - 0.5f;
    k[i] = (float)((i * 40503u + 7u) % 991u) / 991.0f - 0.5f;
    v[i] = (float)((i * 69069u + 3u) % 983u) / 983.0f - 0.5f;
  }
  lpattn_status st = run(LPATTN_BACKEND_REF, LPATTN_PREC_HIGH, o_ref);
  if (st != LPATTN_OK) return fprintf(stderr, "ref: %s\n", lpattn_status_string(st)), 1;
  double e = check_naive(o_ref);
  printf("ref HIGH vs naive f64: %.2e\n", e);
  if (!(e < 1e-5)) return 1;
  if (!want_cpu) return 0;
  static const lpattn_precision precs[] = {LPATTN_PREC_HIGH, LPATTN_PREC_NVFP4};
  for (int i = 0; i < 2; i++) {
    if ((st = run(LPATTN_BACKEND_REF, precs[i], o_ref)) != LPATTN_OK ||
        (st = run(LPATTN_BACKEND_CPU, precs[i], o_cpu)) != LPATTN_OK)
      return fprintf(stderr, "cpu: %s\n", lpattn_status_string(st)), 1;
    double d = max_diff(o_cpu, o_ref);
    /* f32 vs f64 accumulation; NVFP4 codes may flip at rounding ties. */
    double tol = i == 0 ? 1e-4 : 5e-2;
    printf("cpu %s vs ref: max |diff| %.2e (tolerance %.0e)\n", i ? "NVFP4" : "HIGH", d, tol);
    if (!(d <= tol)) return 1;
  }
  return 0;
}
