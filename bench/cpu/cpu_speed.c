/* cpu_speed: attention GFLOP/s of the Highway CPU backend per precision and
 * head dim, against the same backend restricted to Highway's scalar target
 * and against ref, plus the share of this machine's f32 FMA peak (measured
 * in the same run with an FMA loop on the dispatched target, all threads).
 * FLOPs are the nominal 4 * B * H * Sq * Skv * D of non-causal attention.
 * Usage: cpu_speed [--quick] [--threads N]   (default: all online cores) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lpattn.h"

/* Internal hooks of backends/cpu (cpu.h). */
int lpattn_cpu_targets(int64_t *targets, int max);
const char *lpattn_cpu_target_name(int64_t target);
void lpattn_cpu_force_target(int64_t target);
double lpattn_cpu_fma_peak_gflops(int threads);

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Best-of-n GFLOP/s of one attention shape (f16 inputs, random normal), by
 * wall time; *per_cpu_s gets GFLOP per CPU-second of the process times
 * `threads` (insensitive to other load on the machine, comparable with the
 * FMA peak, which is measured the same way). */
static double gflops(lpattn_ctx *ctx, lpattn_precision prec, int64_t H, int64_t S, int64_t D,
                     double budget_s, int threads, double *per_cpu_s) {
  const int64_t n = H * S * D;
  uint16_t *q = malloc(2 * n), *k = malloc(2 * n), *v = malloc(2 * n);
  float *o = malloc(4 * n);
  uint64_t x = 88172645463325252ull;
  for (int64_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    float u = (float)((x >> 40) * 0x1p-24) * 2.0f - 1.0f;
    q[i] = lpattn_f32_to_f16(u), k[i] = lpattn_f32_to_f16(u * 0.7f), v[i] = lpattn_f32_to_f16(-u);
  }
  lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F16, 1, H, S, D);
  lpattn_tensor tk = lpattn_tensor_4d(k, LPATTN_F16, 1, H, S, D);
  lpattn_tensor tv = lpattn_tensor_4d(v, LPATTN_F16, 1, H, S, D);
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, 1, H, S, D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = prec;
  p.thrift_budget = 0.25f;
  double best = 1e30, best_cpu = 1e30, spent = 0;
  for (int rep = 0; rep < 50 && (rep < 2 || spent < budget_s); rep++) {
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL) != LPATTN_OK) {
      best = best_cpu = 1e30;
      break;
    }
    double dt = clock_s(CLOCK_MONOTONIC) - t0, dc = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    spent += dt;
    if (dt < best) best = dt;
    if (dc < best_cpu) best_cpu = dc;
  }
  free(q), free(k), free(v), free(o);
  const double flop = 4.0 * H * S * S * D;
  if (per_cpu_s) *per_cpu_s = flop / best_cpu * threads * 1e-9;
  return flop / best * 1e-9;
}

int main(int argc, char **argv) {
  int quick = 0, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
  }
  if (threads < 1) threads = 1;
  lpattn_ctx *cpu = NULL, *ref = NULL;
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.num_threads = threads;
  if (lpattn_create(LPATTN_BACKEND_CPU, &cp, &cpu) != LPATTN_OK ||
      lpattn_create(LPATTN_BACKEND_REF, NULL, &ref) != LPATTN_OK) {
    fprintf(stderr, "cpu_speed: cpu or ref backend unavailable\n");
    return 77;
  }
  int64_t targets[16], scalar;
  const int nt = lpattn_cpu_targets(targets, 16);
  scalar = targets[nt - 1]; /* the lowest target: SCALAR or EMU128 */
  const double peak = lpattn_cpu_fma_peak_gflops(threads);
  printf("cpu_speed: %d threads, best target %s, f32 FMA peak %.1f GFLOP/s (%.1f per thread)\n",
         threads, lpattn_cpu_target_name(targets[0]), peak, peak / threads);
  printf("shape [1, 8, S, D] f16 non-causal; cpu/scalar at S=1024, ref at S=256;\n"
         "GFLOP/s by wall time; %%peak by CPU time (cpu kernel vs FMA loop, same threads)\n");
  printf("%-5s %-7s %10s %10s %10s %9s %8s\n", "D", "prec", "cpu", "scalar", "ref", "cpu/ref",
         "%peak");
  static const char *names[] = {"high", "fp8", "nvfp4", "mxfp4", "thrift"};
  const lpattn_precision precs[] = {LPATTN_PREC_HIGH, LPATTN_PREC_FP8, LPATTN_PREC_NVFP4,
                                    LPATTN_PREC_MXFP4, LPATTN_PREC_THRIFT};
  const int64_t dims[] = {64, 128, 256};
  for (int di = quick ? 1 : 0; di < (quick ? 2 : 3); di++)
    for (int pi = 0; pi < 5; pi++) {
      const int64_t D = dims[di];
      double c_cpu;
      const double c = gflops(cpu, precs[pi], 8, 1024, D, 0.5, threads, &c_cpu);
      lpattn_cpu_force_target(scalar);
      const double s = gflops(cpu, precs[pi], 8, quick ? 512 : 1024, D, 0.3, threads, NULL);
      lpattn_cpu_force_target(0);
      const double r = gflops(ref, precs[pi], 8, 256, D, 0.3, 1, NULL);
      printf("%-5lld %-7s %10.2f %10.2f %10.3f %8.1fx %7.1f%%\n", (long long)D, names[pi], c, s,
             r, c / r, 100.0 * c_cpu / peak);
      fflush(stdout);
    }
  lpattn_free(cpu);
  lpattn_free(ref);
  return 0;
}
