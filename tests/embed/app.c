/* The program of docs/vendoring.md: tests/embed/recipes.sh builds it by each
 * recipe there (pkg-config, CMake, meson subproject, plain cc) and runs it.
 * Causal HIGH attention on the ref backend where every V row is the same
 * (the output is that row), then, when the build has the cpu backend, cpu
 * against ref in HIGH and NVFP4. Needs no libm. Exit 0 on success. */
#include <lpattn.h>
#include <stdio.h>

enum { H = 2, S = 160, D = 128, N = H * S * D };

static float q[N], k[N], v[N], o_ref[N], o_cpu[N];

static double max_diff(const float *a, const float *b) {
  double m = 0.0;
  for (int i = 0; i < N; i++) {
    double d = (double)a[i] - b[i];
    d = d < 0 ? -d : d;
    if (!(d <= m)) m = d; /* NaN counts as a failure */
  }
  return m;
}

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

int main(void) {
  static float row[N];
  for (unsigned i = 0; i < N; i++) {
    q[i] = (float)((i * 2654435761u) % 997u) / 997.0f - 0.5f;
    k[i] = (float)((i * 40503u + 7u) % 991u) / 991.0f - 0.5f;
    v[i] = row[i] = (float)(i % D) / D - 0.5f; /* every row the same */
  }
  lpattn_status st = run(LPATTN_BACKEND_REF, LPATTN_PREC_HIGH, o_ref);
  if (st != LPATTN_OK) return fprintf(stderr, "ref: %s\n", lpattn_status_string(st)), 1;
  double e = max_diff(o_ref, row);
  printf("lpattn %s: ref HIGH, equal V rows: max |error| %.2e\n", lpattn_version_string(), e);
  if (!(e < 1e-5)) return 1;

  for (unsigned i = 0; i < N; i++) v[i] = (float)((i * 69069u + 3u) % 983u) / 983.0f - 0.5f;
  lpattn_ctx *probe;
  if (lpattn_create(LPATTN_BACKEND_CPU, NULL, &probe) != LPATTN_OK) {
    printf("cpu backend: no (ref only)\n");
    return 0;
  }
  lpattn_free(probe);
  static const lpattn_precision precs[] = {LPATTN_PREC_HIGH, LPATTN_PREC_NVFP4};
  for (int i = 0; i < 2; i++) {
    if ((st = run(LPATTN_BACKEND_REF, precs[i], o_ref)) != LPATTN_OK ||
        (st = run(LPATTN_BACKEND_CPU, precs[i], o_cpu)) != LPATTN_OK)
      return fprintf(stderr, "cpu: %s\n", lpattn_status_string(st)), 1;
    double d = max_diff(o_cpu, o_ref);
    /* f32 vs f64 accumulation; NVFP4 codes may flip at rounding ties. */
    double tol = i == 0 ? 1e-4 : 5e-2;
    printf("cpu backend: yes, %s vs ref max |diff| %.2e (tolerance %.0e)\n", i ? "NVFP4" : "HIGH", d,
           tol);
    if (!(d <= tol)) return 1;
  }
  return 0;
}
