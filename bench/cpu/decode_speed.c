/* decode_speed (issue 12): per-token decode time of the CPU backend through a
 * paged pool, Hq = Hkv = 8, D = 128, Sq = 1, page 64, f16 high copies, for an
 * f16 cache (HIGH) and NVFP4 / MXFP4 / FP8 caches, at several contexts; plus
 * a plain memcpy measured in the same run. Reports the median wall time of
 * several decode calls (and of the process CPU time of a call, all threads:
 * a check on a loaded machine), the bytes the call streams (pages of the
 * context and the slot) per second, NVFP4 / f16 time and f16 bandwidth /
 * memcpy. Then lpattn_attention with Sq = 1 on the same shapes (f16 K/V
 * tensors, HIGH, causal: the row at the end), through the small-Sq path and
 * through the general path (issue 12 item 4), and the bytes of K and V read.
 * Usage: decode_speed [--quick] [--threads N] [--reps N]
 *                     [--only f16|nvfp4|mxfp4|fp8|attn]
 *                     [--ctx N]   (--quick: 8k context only; --ctx: that context only)
 *                     [--target NAME]  (a Highway target of this machine, e.g. AVX2:
 *                                       dispatch restricted to it; default the best)
 *                     [--gqa G]  (paged decode with Hq = 8 G query heads, G <= 8) */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lpattn.h"

/* backends/cpu/cpu.h (internal): 0 sends lpattn_attention to the general path. */
void lpattn_cpu_set_small_q(int on);
/* backends/cpu/targets.cc (internal): Highway targets, and dispatch restricted to one. */
int lpattn_cpu_targets(int64_t *targets, int max);
const char *lpattn_cpu_target_name(int64_t target);
void lpattn_cpu_force_target(int64_t target);

enum { H = 8, D = 128, PAGE = 64, CHUNK = 1024 };
static int gqa = 1;  /* q heads per kv head of the paged decode */

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static uint64_t rng = 88172645463325252ull;
static float u01(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((rng >> 40) * 0x1p-24);
}

/* Bytes copied per second by memcpy of a buffer far larger than the caches
 * (counting the bytes read plus the bytes written, as STREAM's Copy does). */
static double memcpy_gbs(size_t bytes, int reps) {
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b) return 0;
  memset(a, 1, bytes), memset(b, 2, bytes);
  double t[32];
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    memcpy(b, a, bytes);
    t[r] = now() - t0;
    a[r] = b[bytes - 1 - r];
  }
  free(a), free(b);
  return 2.0 * bytes / median(t, reps) / 1e9;
}

typedef struct {
  double ms, cpu_ms, gbs;
  size_t bytes;
} result;

static int run(lpattn_ctx *ctx, lpattn_precision prec, int64_t ctxlen, int reps, result *res) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = H, pp.num_q_heads = H * gqa, pp.head_dim = D, pp.page_size = PAGE;
  pp.precision = prec, pp.num_slots = 1, pp.num_pages = (int32_t)(ctxlen / PAGE + 1);
  size_t page_bytes, slot_bytes;
  lpattn_kv_pool *pool = NULL;
  if (lpattn_kv_pool_size(&pp, &page_bytes, &slot_bytes, NULL) != LPATTN_OK ||
      lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool) != LPATTN_OK)
    return 1;
  int32_t *table = malloc(sizeof(int32_t) * (size_t)pp.num_pages), slot = 0, len = 0;
  for (int32_t i = 0; i < pp.num_pages; i++) table[i] = pp.num_pages - 1 - i; /* any order */
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = 1;
  b.slots = lpattn_tensor_4d(&slot, LPATTN_I32, 1, 1, 1, 1);
  b.lengths = lpattn_tensor_4d(&len, LPATTN_I32, 1, 1, 1, 1);
  b.page_table = lpattn_tensor_4d(table, LPATTN_I32, 1, 1, 1, pp.num_pages);
  b.max_length = ctxlen;
  uint16_t *k = malloc(2 * (size_t)(H * CHUNK * D)), *v = malloc(2 * (size_t)(H * CHUNK * D));
  uint16_t q[8 * H * D];
  float o[8 * H * D];
  for (int64_t t0 = 0; t0 < ctxlen; t0 += CHUNK) {
    const int64_t n = ctxlen - t0 < CHUNK ? ctxlen - t0 : CHUNK;
    for (int64_t i = 0; i < H * n * D; i++)
      k[i] = lpattn_f32_to_f16(2 * u01() - 1), v[i] = lpattn_f32_to_f16(2 * u01() - 1);
    lpattn_tensor tk = lpattn_tensor_4d(k, LPATTN_F16, 1, H, n, D);
    lpattn_tensor tv = lpattn_tensor_4d(v, LPATTN_F16, 1, H, n, D);
    if (lpattn_kv_append(ctx, pool, &b, &tk, &tv, NULL) != LPATTN_OK) return 1;
    len += (int32_t)n;
  }
  for (int i = 0; i < H * gqa * D; i++) q[i] = lpattn_f32_to_f16(2 * u01() - 1);
  lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F16, 1, H * gqa, 1, D);
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, 1, H * gqa, 1, D);
  double t[64], tc[64];
  for (int r = -2; r < reps; r++) {
    const double t0 = now(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (lpattn_paged_decode(ctx, pool, &b, &tq, &to, NULL, NULL) != LPATTN_OK) return 1;
    if (r >= 0) t[r] = now() - t0, tc[r] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
  }
  res->ms = 1e3 * median(t, reps);
  res->cpu_ms = 1e3 * median(tc, reps);
  res->bytes = (size_t)((ctxlen + PAGE - 1) / PAGE) * page_bytes + slot_bytes;
  res->gbs = res->bytes / (res->ms * 1e-3) / 1e9;
  free(table), free(k), free(v);
  lpattn_kv_pool_free(pool);
  return 0;
}

/* lpattn_attention, Sq = 1 against ctxlen f16 keys and values ([1][H][ctxlen][D]). */
static int run_attn(lpattn_ctx *ctx, int64_t ctxlen, int reps, int small, result *res) {
  const size_t n = (size_t)(H * ctxlen * D);
  uint16_t *k = malloc(2 * n), *v = malloc(2 * n), q[H * D];
  float o[H * D];
  if (!k || !v) return 1;
  for (size_t i = 0; i < n; i++) k[i] = lpattn_f32_to_f16(2 * u01() - 1), v[i] = lpattn_f32_to_f16(2 * u01() - 1);
  for (int i = 0; i < H * D; i++) q[i] = lpattn_f32_to_f16(2 * u01() - 1);
  lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F16, 1, H, 1, D);
  lpattn_tensor tk = lpattn_tensor_4d(k, LPATTN_F16, 1, H, ctxlen, D);
  lpattn_tensor tv = lpattn_tensor_4d(v, LPATTN_F16, 1, H, ctxlen, D);
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, 1, H, 1, D);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = LPATTN_PREC_HIGH, p.causal = 1;
  lpattn_cpu_set_small_q(small);
  double t[64], tc[64];
  int rc = 0;
  for (int r = -1; r < reps && !rc; r++) {
    const double t0 = now(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    rc = lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL) != LPATTN_OK;
    if (r >= 0) t[r] = now() - t0, tc[r] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
  }
  lpattn_cpu_set_small_q(1);
  free(k), free(v);
  if (rc) return 1;
  res->ms = 1e3 * median(t, reps);
  res->cpu_ms = 1e3 * median(tc, reps);
  res->bytes = 4 * n;
  res->gbs = res->bytes / (res->ms * 1e-3) / 1e9;
  return 0;
}

int main(int argc, char **argv) {
  int quick = 0, threads = 0, reps = 11;
  const char *only = NULL, *target = NULL;
  int64_t ctxs[3] = {8192, 16384, 32768};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) ctxs[0] = atoll(argv[++i]), quick = 1;
    else if (!strcmp(argv[i], "--target") && i + 1 < argc) target = argv[++i];
    else if (!strcmp(argv[i], "--gqa") && i + 1 < argc) gqa = atoi(argv[++i]);
    else return fprintf(stderr, "usage: decode_speed [--quick] [--threads N] [--reps N] [--only P] [--ctx N] "
                                "[--target NAME] [--gqa G]\n"), 2;
  }
  if (reps < 1 || reps > 64) reps = 11;
  if (gqa < 1 || gqa > 8) gqa = 1;
  (void)threads;
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.num_threads = threads;
  lpattn_ctx *ctx = NULL;
  if (lpattn_create(LPATTN_BACKEND_CPU, &cp, &ctx) != LPATTN_OK) {
    printf("cpu backend not available\n");
    return 77;
  }
  int64_t targets[16];
  const int nt = lpattn_cpu_targets(targets, 16);
  const char *tname = nt > 0 ? lpattn_cpu_target_name(targets[0]) : "?";
  if (target) {
    int t = 0;
    while (t < nt && strcmp(lpattn_cpu_target_name(targets[t]), target)) t++;
    if (t == nt) {
      fprintf(stderr, "target %s not available; this machine's:", target);
      for (t = 0; t < nt; t++) fprintf(stderr, " %s", lpattn_cpu_target_name(targets[t]));
      return fprintf(stderr, "\n"), 2;
    }
    lpattn_cpu_force_target(targets[t]);
    tname = lpattn_cpu_target_name(targets[t]);
  }
  const double mc = memcpy_gbs((size_t)256 << 20, quick ? 3 : 7);
  printf("decode_speed: Hq = %d (paged; attention %d), Hkv = %d, D = %d, Sq = 1, page %d, f16 queries, threads %d "
         "(0 = all), Highway target %s\n", H * gqa, H, H, D, PAGE, threads, tname);
  printf("memcpy 256 MiB: %.1f GB/s (read + write)\n\n", mc);
  printf("| context | cache | ms/token (wall) | CPU ms/token | bytes streamed | GB/s | vs memcpy |\n");
  printf("|---|---|---|---|---|---|---|\n");
  const lpattn_precision precs[4] = {LPATTN_PREC_HIGH, LPATTN_PREC_NVFP4, LPATTN_PREC_MXFP4,
                                     LPATTN_PREC_FP8};
  const char *names[4] = {"f16", "nvfp4", "mxfp4", "fp8"};
  for (int c = 0; c < (quick ? 1 : 3); c++) {
    result r[4] = {{0}};
    for (int p = 0; p < 4; p++) {
      if (only && strcmp(only, names[p])) continue;
      if (run(ctx, precs[p], ctxs[c], reps, &r[p])) return fprintf(stderr, "run failed\n"), 1;
      printf("| %lld | %s | %.3f | %.3f | %zu | %.1f | %.0f%% |\n", (long long)ctxs[c], names[p],
             r[p].ms, r[p].cpu_ms, r[p].bytes, r[p].gbs, 100.0 * r[p].gbs / mc);
      fflush(stdout);
    }
    if (!only)
      printf("| %lld | nvfp4 / f16 time | %.2f | %.2f | | | |\n", (long long)ctxs[c], r[1].ms / r[0].ms,
             r[1].cpu_ms / r[0].cpu_ms);
    if (only && strcmp(only, "attn")) continue;
    result a[2];
    for (int small = 1; small >= 0; small--) {
      /* the general path copies the whole context per call: fewer repetitions */
      if (run_attn(ctx, ctxs[c], small ? reps : (reps < 3 ? reps : 3), small, &a[small]))
        return fprintf(stderr, "attention failed\n"), 1;
      printf("| %lld | attention Sq=1 f16, %s | %.3f | %.3f | %zu | %.1f | %.0f%% |\n", (long long)ctxs[c],
             small ? "small-Sq path" : "general path", a[small].ms, a[small].cpu_ms, a[small].bytes,
             a[small].gbs, 100.0 * a[small].gbs / mc);
      fflush(stdout);
    }
    printf("| %lld | attention general / small-Sq time | %.1f | %.1f | | | |\n", (long long)ctxs[c],
           a[0].ms / a[1].ms, a[0].cpu_ms / a[1].cpu_ms);
  }
  lpattn_free(ctx);
  return 0;
}
