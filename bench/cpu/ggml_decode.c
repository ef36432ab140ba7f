/* ggml_decode (issue 34 item 5): lpattn's CPU paged decode next to ggml's CPU
 * ggml_flash_attn_ext on the same shapes, in one process, calls alternating.
 * Hq = Hkv = 8, D = 128, one sequence, one query row, 2 threads (both
 * libraries), contexts 16k and 32k. Pairs: lpattn f16 pool (HIGH) vs ggml
 * f16 K/V, NVFP4 and MXFP4 pools vs ggml q4_0, FP8 pool vs ggml q8_0. Each
 * round runs the pair's two calls back to back, the order swapped every
 * round (ABBA...); printed: median wall ms per token of each, the ratio of
 * the medians and the median and range of the per-round ratios lpattn/ggml
 * (the machine is shared: the per-round ratio cancels slow phases), the
 * median process CPU ms of each call (ggml's pool sleeps while lpattn runs,
 * and lpattn's while ggml runs) and their ratio, and each side's bytes per
 * token and effective GB/s (wall).
 * Built outside meson by bench/cpu/ggml_bench.sh (ggml at a pinned commit).
 * Usage: ggml_decode [--ctx N]... [--reps N] [--threads N] [--only f16|nvfp4|mxfp4|fp8] */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "lpattn.h"

enum { H = 8, D = 128, PAGE = 64, CHUNK = 1024, MAXR = 201 };

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
/* Process CPU time (all threads): the other library's threads sleep meanwhile. */
static double cpu(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(const double *x0, int n) {
  double x[MAXR];
  memcpy(x, x0, sizeof(double) * (size_t)n);
  qsort(x, (size_t)n, sizeof *x, cmp);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static uint64_t rng = 88172645463325252ull;
static float u11(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((rng >> 40) * 0x1p-24) * 2.0f - 1.0f;
}

/* lpattn: a paged pool of one sequence of ctxlen tokens, U(-1, 1) K/V. */
typedef struct {
  lpattn_kv_pool *pool;
  lpattn_kv_batch b;
  int32_t *table, slot, len;
  float q[H * D], o[H * D];
  size_t bytes;
} lp_side;

static int lp_setup(lpattn_ctx *ctx, lpattn_precision prec, int64_t ctxlen, lp_side *s) {
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = H, pp.num_q_heads = H, pp.head_dim = D, pp.page_size = PAGE;
  pp.precision = prec, pp.num_slots = 1, pp.num_pages = (int32_t)(ctxlen / PAGE + 1);
  size_t page_bytes, slot_bytes;
  if (lpattn_kv_pool_size(&pp, &page_bytes, &slot_bytes, NULL) != LPATTN_OK ||
      lpattn_kv_pool_create(ctx, &pp, NULL, 0, &s->pool) != LPATTN_OK)
    return 1;
  s->table = malloc(sizeof(int32_t) * (size_t)pp.num_pages), s->slot = 0, s->len = 0;
  for (int32_t i = 0; i < pp.num_pages; i++) s->table[i] = pp.num_pages - 1 - i;
  lpattn_kv_batch_init(&s->b);
  s->b.num_seqs = 1;
  s->b.slots = lpattn_tensor_4d(&s->slot, LPATTN_I32, 1, 1, 1, 1);
  s->b.lengths = lpattn_tensor_4d(&s->len, LPATTN_I32, 1, 1, 1, 1);
  s->b.page_table = lpattn_tensor_4d(s->table, LPATTN_I32, 1, 1, 1, pp.num_pages);
  s->b.max_length = ctxlen;
  float *k = malloc(sizeof(float) * H * CHUNK * D), *v = malloc(sizeof(float) * H * CHUNK * D);
  for (int64_t t0 = 0; t0 < ctxlen; t0 += CHUNK) {
    const int64_t n = ctxlen - t0 < CHUNK ? ctxlen - t0 : CHUNK;
    for (int64_t i = 0; i < H * n * D; i++) k[i] = u11(), v[i] = u11();
    lpattn_tensor tk = lpattn_tensor_4d(k, LPATTN_F32, 1, H, n, D);
    lpattn_tensor tv = lpattn_tensor_4d(v, LPATTN_F32, 1, H, n, D);
    if (lpattn_kv_append(ctx, s->pool, &s->b, &tk, &tv, NULL) != LPATTN_OK) return 1;
    s->len += (int32_t)n;
  }
  free(k), free(v);
  for (int i = 0; i < H * D; i++) s->q[i] = u11();
  s->bytes = (size_t)((ctxlen + PAGE - 1) / PAGE) * page_bytes + slot_bytes;
  return 0;
}

static int lp_call(lpattn_ctx *ctx, lp_side *s) {
  lpattn_tensor tq = lpattn_tensor_4d(s->q, LPATTN_F32, 1, H, 1, D);
  lpattn_tensor to = lpattn_tensor_4d(s->o, LPATTN_F32, 1, H, 1, D);
  return lpattn_paged_decode(ctx, s->pool, &s->b, &tq, &to, NULL, NULL) != LPATTN_OK;
}

/* ggml: K/V [D][ctxlen][Hkv] of `type`, Q f32 [D][1][Hq], no mask. */
typedef struct {
  struct ggml_context *g;
  struct ggml_cgraph *gf;
  struct ggml_cplan plan;
  void *work;
  size_t bytes;
} gg_side;

static int gg_setup(enum ggml_type type, int64_t ctxlen, struct ggml_threadpool *tp, int threads,
                    gg_side *s) {
  const size_t row = ggml_row_size(type, D), kv = (size_t)(H * ctxlen) * row;
  struct ggml_init_params ip = {2 * kv + ((size_t)64 << 20), NULL, false};
  s->g = ggml_init(ip);
  if (!s->g) return 1;
  struct ggml_tensor *q = ggml_new_tensor_4d(s->g, GGML_TYPE_F32, D, 1, H, 1);
  struct ggml_tensor *k = ggml_new_tensor_4d(s->g, type, D, ctxlen, H, 1);
  struct ggml_tensor *v = ggml_new_tensor_4d(s->g, type, D, ctxlen, H, 1);
  float *f = malloc(sizeof(float) * CHUNK * D);
  for (int t = 0; t < 2; t++) {
    char *dst = (char *)(t ? v : k)->data;
    for (int64_t r0 = 0; r0 < H * ctxlen; r0 += CHUNK) {
      for (int64_t i = 0; i < CHUNK * D; i++) f[i] = u11();
      if (type == GGML_TYPE_F16) ggml_fp32_to_fp16_row(f, (ggml_fp16_t *)(dst + r0 * row), CHUNK * D);
      else ggml_quantize_chunk(type, f, dst + r0 * row, 0, CHUNK, D, NULL);
    }
  }
  free(f);
  for (int i = 0; i < H * D; i++) ((float *)q->data)[i] = u11();
  struct ggml_tensor *o = ggml_flash_attn_ext(s->g, q, k, v, NULL, 1.0f / sqrtf((float)D), 0.0f, 0.0f);
  ggml_flash_attn_ext_set_prec(o, GGML_PREC_DEFAULT);
  s->gf = ggml_new_graph(s->g);
  ggml_build_forward_expand(s->gf, o);
  s->plan = ggml_graph_plan(s->gf, threads, tp);
  s->work = malloc(s->plan.work_size + 1);
  s->plan.work_data = s->work;
  s->bytes = 2 * kv;
  return 0;
}

static int gg_call(gg_side *s) { return ggml_graph_compute(s->gf, &s->plan) != GGML_STATUS_SUCCESS; }

int main(int argc, char **argv) {
  int64_t ctxs[8];
  int nc = 0, reps = 21, threads = 2;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ctx") && i + 1 < argc && nc < 8) ctxs[nc++] = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else return fprintf(stderr, "usage: ggml_decode [--ctx N]... [--reps N] [--threads N] [--only P]\n"), 2;
  }
  if (!nc) ctxs[nc++] = 16384, ctxs[nc++] = 32768;
  if (reps < 1 || reps > MAXR) reps = 21;
  ggml_cpu_init();
  struct ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
  tpp.poll = 0;  // sleep between graphs: no spinning worker during lpattn's calls
  struct ggml_threadpool *tp = ggml_threadpool_new(&tpp);
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.num_threads = threads;
  lpattn_ctx *ctx = NULL;
  if (!tp || lpattn_create(LPATTN_BACKEND_CPU, &cp, &ctx) != LPATTN_OK) return fprintf(stderr, "setup failed\n"), 1;
  const char *names[4] = {"f16", "nvfp4", "mxfp4", "fp8"}, *gnames[4] = {"f16", "q4_0", "q4_0", "q8_0"};
  const lpattn_precision precs[4] = {LPATTN_PREC_HIGH, LPATTN_PREC_NVFP4, LPATTN_PREC_MXFP4, LPATTN_PREC_FP8};
  const enum ggml_type types[4] = {GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0};
  printf("ggml_decode: Hq = Hkv = %d, D = %d, Sq = 1, page %d, f32 queries, %d threads, %d rounds "
         "(ABBA), wall ms per token\n\n", H, D, PAGE, threads, reps);
  printf("| context | lpattn | ggml | lpattn ms | ggml ms | ratio of medians | per-round ratio median "
         "(min-max) | CPU ms lpattn, ggml, ratio | lpattn MB, GB/s | ggml MB, GB/s |\n"
         "|---|---|---|---|---|---|---|---|---|---|\n");
  for (int c = 0; c < nc; c++)
    for (int p = 0; p < 4; p++) {
      if (only && strcmp(only, names[p])) continue;
      lp_side a;
      gg_side b;
      if (lp_setup(ctx, precs[p], ctxs[c], &a) || gg_setup(types[p], ctxs[c], tp, threads, &b))
        return fprintf(stderr, "setup %s failed\n", names[p]), 1;
      double ta[MAXR], tb[MAXR], ca[MAXR], cb[MAXR], ratio[MAXR];
      for (int r = -2; r < reps; r++) {
        double t0, t1, t2, c0, c1, c2;
        if (r & 1) {
          t0 = now(), c0 = cpu();
          if (gg_call(&b)) return 1;
          t1 = now(), c1 = cpu();
          if (lp_call(ctx, &a)) return 1;
          t2 = now(), c2 = cpu();
          if (r >= 0) tb[r] = t1 - t0, ta[r] = t2 - t1, cb[r] = c1 - c0, ca[r] = c2 - c1;
        } else {
          t0 = now(), c0 = cpu();
          if (lp_call(ctx, &a)) return 1;
          t1 = now(), c1 = cpu();
          if (gg_call(&b)) return 1;
          t2 = now(), c2 = cpu();
          if (r >= 0) ta[r] = t1 - t0, tb[r] = t2 - t1, ca[r] = c1 - c0, cb[r] = c2 - c1;
        }
        if (r >= 0) ratio[r] = ta[r] / tb[r];
      }
      const double ma = 1e3 * median(ta, reps), mb = 1e3 * median(tb, reps);
      const double mca = 1e3 * median(ca, reps), mcb = 1e3 * median(cb, reps);
      double lo = ratio[0], hi = ratio[0];
      for (int r = 1; r < reps; r++) lo = ratio[r] < lo ? ratio[r] : lo, hi = ratio[r] > hi ? ratio[r] : hi;
      printf("| %lld | %s | %s | %.3f | %.3f | %.2f | %.2f (%.2f-%.2f) | %.2f, %.2f, %.2f "
             "| %.1f, %.1f | %.1f, %.1f |\n",
             (long long)ctxs[c], names[p], gnames[p], ma, mb, ma / mb, median(ratio, reps), lo, hi, mca,
             mcb, mca / mcb, a.bytes / 1e6, a.bytes / (ma * 1e6), b.bytes / 1e6, b.bytes / (mb * 1e6));
      fflush(stdout);
      lpattn_kv_pool_free(a.pool), free(a.table);
      ggml_free(b.g), free(b.work);
    }
  lpattn_free(ctx);
  ggml_threadpool_free(tp);
  return 0;
}
