/* backward_speed (issue 14): wall time of lpattn_attention_backward on the
 * cpu backend next to the forward of the same call, B = 1, causal, D = 128,
 * f32 tensors; GF/s counts the useful flops of each (forward 2 matmuls,
 * backward 5, halved by the causal mask), and the process CPU time of
 * each call (all threads; best of the repeats): a check on a loaded machine.
 * Usage: backward_speed [S [heads [reps [threads]]]]   (defaults 1024 8 3 0; 0 = all) */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lpattn.h"

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
static double cpu(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static float *rnd(size_t n, unsigned *s) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) *s = *s * 1664525u + 1013904223u, x[i] = (float)(*s >> 8) * 0x1p-24f - 0.5f;
  return x;
}

int main(int argc, char **argv) {
  const int S = argc > 1 ? atoi(argv[1]) : 1024, H = argc > 2 ? atoi(argv[2]) : 8, reps = argc > 3 ? atoi(argv[3]) : 3;
  const int threads = argc > 4 ? atoi(argv[4]) : 0;
  const int D = 128;
  const size_t n = (size_t)H * S * D;
  unsigned seed = 1;
  float *q = rnd(n, &seed), *k = rnd(n, &seed), *v = rnd(n, &seed), *g = rnd(n, &seed);
  float *o = malloc(n * 4), *dq = malloc(n * 4), *dk = malloc(n * 4), *dv = malloc(n * 4);
  float *l = malloc((size_t)H * S * 4);
  lpattn_ctx *c = NULL;
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.num_threads = threads;
  if (lpattn_create(LPATTN_BACKEND_CPU, &cp, &c) != LPATTN_OK) return fprintf(stderr, "no cpu backend\n"), 1;
  const lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F32, 1, H, S, D), tk = lpattn_tensor_4d(k, LPATTN_F32, 1, H, S, D),
                      tv = lpattn_tensor_4d(v, LPATTN_F32, 1, H, S, D), to = lpattn_tensor_4d(o, LPATTN_F32, 1, H, S, D),
                      tg = lpattn_tensor_4d(g, LPATTN_F32, 1, H, S, D), tl = lpattn_tensor_4d(l, LPATTN_F32, 1, H, S, 1);
  const double flop = 2.0 * 2.0 * H * (double)S * S * D / 2.0; /* forward, causal */
  printf("backward_speed: cpu backend, B = 1, H = %d, S = %d, D = %d, causal, f32, threads %d (0 = all), best of %d\n", H, S, D,
         threads, reps);
  printf("| precision | forward ms | forward GF/s | backward ms | backward GF/s | backward / forward | forward CPU ms | "
         "backward CPU ms |\n|---|---|---|---|---|---|---|---|\n");
  const lpattn_precision precs[4] = {LPATTN_PREC_HIGH, LPATTN_PREC_FP8, LPATTN_PREC_NVFP4, LPATTN_PREC_MXFP4};
  const char *names[4] = {"high", "fp8", "nvfp4", "mxfp4"};
  for (int i = 0; i < 4; i++) {
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.causal = 1, p.precision = precs[i], p.mx_scale_round_up = 1;
    lpattn_attn_aux a;
    lpattn_attn_aux_init(&a);
    a.lse = tl;
    lpattn_attn_grads gr;
    lpattn_attn_grads_init(&gr);
    gr.dq = lpattn_tensor_4d(dq, LPATTN_F32, 1, H, S, D), gr.dk = lpattn_tensor_4d(dk, LPATTN_F32, 1, H, S, D);
    gr.dv = lpattn_tensor_4d(dv, LPATTN_F32, 1, H, S, D), gr.seed = 7;
    double tf = 1e30, tb = 1e30, cf = 1e30, cb = 1e30;
    for (int r = 0; r < reps; r++) {
      double c0 = cpu(), t0 = now();
      if (lpattn_attention(c, &tq, &tk, &tv, &to, &p, &a) != LPATTN_OK) return fprintf(stderr, "%s\n", lpattn_last_error()), 1;
      double t1 = now(), c1 = cpu();
      if (lpattn_attention_backward(c, &tq, &tk, &tv, &to, &tl, &tg, &p, &gr) != LPATTN_OK)
        return fprintf(stderr, "%s\n", lpattn_last_error()), 1;
      double t2 = now(), c2 = cpu();
      if (t1 - t0 < tf) tf = t1 - t0;
      if (t2 - t1 < tb) tb = t2 - t1;
      if (c1 - c0 < cf) cf = c1 - c0;
      if (c2 - c1 < cb) cb = c2 - c1;
    }
    printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1fx | %.1f | %.1f |\n", names[i], tf * 1e3, flop / tf * 1e-9, tb * 1e3,
           2.5 * flop / tb * 1e-9, tb / tf, cf * 1e3, cb * 1e3);
    fflush(stdout);
  }
  lpattn_free(c);
  free(q), free(k), free(v), free(g), free(o), free(dq), free(dk), free(dv), free(l);
  return 0;
}
