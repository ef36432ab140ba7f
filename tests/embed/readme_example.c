/* The README's usage example: causal NVFP4 attention on random data with
 * the LSE of each row, on the CPU. */
#include <lpattn.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  enum { B = 1, H = 4, S = 256, D = 128 };
  size_t n = (size_t)B * H * S * D;
  float *q = malloc(n * sizeof *q), *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v);
  float *o = malloc(n * sizeof *o), *lse = malloc((size_t)B * H * S * sizeof *lse);
  if (!q || !k || !v || !o || !lse) return 1;
  srand(1);
  for (size_t i = 0; i < n; i++) {
    q[i] = (float)rand() / RAND_MAX - 0.5f;
    k[i] = (float)rand() / RAND_MAX - 0.5f;
    v[i] = (float)rand() / RAND_MAX - 0.5f;
  }

  /* The SIMD CPU backend when it was built, else the reference one. */
  lpattn_ctx *ctx;
  lpattn_status s = lpattn_create(LPATTN_BACKEND_CPU, NULL, &ctx);
  if (s != LPATTN_OK) s = lpattn_create(LPATTN_BACKEND_REF, NULL, &ctx);
  if (s != LPATTN_OK) {
    fprintf(stderr, "lpattn_create: %s\n", lpattn_status_string(s));
    return 1;
  }
  /* Host backends take host arrays; the cuda/hip backends take device pointers. */
  lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F32, B, H, S, D);
  lpattn_tensor tk = lpattn_tensor_4d(k, LPATTN_F32, B, H, S, D);
  lpattn_tensor tv = lpattn_tensor_4d(v, LPATTN_F32, B, H, S, D);
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, B, H, S, D);

  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = LPATTN_PREC_NVFP4;
  p.causal = 1;
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lpattn_tensor_4d(lse, LPATTN_F32, B, H, S, 1);

  s = lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, &aux);
  if (s == LPATTN_OK) s = lpattn_synchronize(ctx);
  if (s != LPATTN_OK) {
    fprintf(stderr, "lpattn_attention: %s\n", lpattn_status_string(s));
    return 1;
  }
  /* Row 0 sees only key 0 under the causal mask: LSE = q0.k0 / sqrt(D). */
  printf("backend %s, LSE of row 0: %f\n", lpattn_backend_name(lpattn_context_backend(ctx)),
         lse[0]);

  lpattn_free(ctx);
  free(q), free(k), free(v), free(o), free(lse);
  return 0;
}
