/* Calls lpattn from a downstream build: causal HIGH attention on the ref
 * backend must match a direct f64 computation. Exit 0 on success. */
#include <lpattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { H = 2, S = 96, D = 64 };

static float val(unsigned i, unsigned salt) {
  return (float)((i * 2654435761u + salt * 40503u) % 1000u) / 1000.0f - 0.5f;
}

int main(void) {
  static float q[H * S * D], k[H * S * D], v[H * S * D], o[H * S * D];
  for (unsigned i = 0; i < H * S * D; i++) q[i] = val(i, 1), k[i] = val(i, 2), v[i] = val(i, 3);
  lpattn_ctx *ctx;
  lpattn_status st = lpattn_create(LPATTN_BACKEND_REF, NULL, &ctx);
  if (st != LPATTN_OK) return fprintf(stderr, "create: %s\n", lpattn_status_string(st)), 1;
  lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F32, 1, H, S, D);
  lpattn_tensor tk = lpattn_tensor_4d(k, LPATTN_F32, 1, H, S, D);
  lpattn_tensor tv = lpattn_tensor_4d(v, LPATTN_F32, 1, H, S, D);
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, 1, H, S, D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.causal = 1;
  st = lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL);
  lpattn_free(ctx);
  if (st != LPATTN_OK) return fprintf(stderr, "attention: %s\n", lpattn_status_string(st)), 1;
  double worst = 0.0;
  for (int h = 0; h < H; h++)
    for (int i = 0; i < S; i++) {
      const float *qi = q + (h * S + i) * D;
      double s[S], m = -INFINITY, l = 0.0;
      for (int j = 0; j <= i; j++) {
        double a = 0.0;
        for (int d = 0; d < D; d++) a += (double)qi[d] * k[(h * S + j) * D + d];
        s[j] = a / sqrt((double)D);
        m = s[j] > m ? s[j] : m;
      }
      for (int j = 0; j <= i; j++) l += s[j] = exp(s[j] - m);
      for (int d = 0; d < D; d++) {
        double want = 0.0;
        for (int j = 0; j <= i; j++) want += s[j] * v[(h * S + j) * D + d];
        double err = fabs(want / l - o[(h * S + i) * D + d]);
        worst = err > worst ? err : worst;
      }
    }
  printf("lpattn %s as a subproject: max |error| %.2e\n", lpattn_version_string(), worst);
  return worst < 1e-5 ? 0 : 1;
}
