/* `speed` and `entropy`: throughput per backend and precision, and the cost
 * of the entropy output. GPU backends get device buffers through their
 * runtime (devmem.c); host backends use the host arrays. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef struct {
  const char *label;
  lpattn_precision prec;
  int pasa;
} speed_variant;

static const speed_variant sv[] = {
    {"HIGH", LPATTN_PREC_HIGH, 0},        {"FP8", LPATTN_PREC_FP8, 0},
    {"NVFP4", LPATTN_PREC_NVFP4, 0},      {"MXFP4", LPATTN_PREC_MXFP4, 0},
    {"THRIFT 5%", LPATTN_PREC_THRIFT, 0}, {"PASA HIGH", LPATTN_PREC_HIGH, 1},
};

static const lpattn_backend all_backends[] = {LPATTN_BACKEND_REF, LPATTN_BACKEND_CPU,
                                              LPATTN_BACKEND_CUDA, LPATTN_BACKEND_HIP};

/* Backends this report runs: --backend alone, else every backend built in. */
static int wanted(const bench_opts *o, lpattn_backend b) {
  if (o->backend != LPATTN_BACKEND_AUTO) return b == o->backend;
  return lpattn_backend_available(b);
}

static int is_host(lpattn_backend b) { return b == LPATTN_BACKEND_REF || b == LPATTN_BACKEND_CPU; }

/* The ref backend is an f64 oracle (~1 GFLOP/s): give it a smaller problem;
 * GPUs get a larger one so launch overheads do not dominate. */
static void shape_for(const bench_opts *o, lpattn_backend b, int64_t *H, int64_t *S) {
  int small = o->quick || b == LPATTN_BACKEND_REF;
  *H = small ? 2 : is_host(b) ? 8 : 16;
  *S = small ? 512 : is_host(b) ? 2048 : 8192;
}

/* Best of `reps` timed calls after one warm-up; -1 on failure. */
static double best_time(lpattn_ctx *ctx, const bench_views *w, const bench_problem *p,
                        const lpattn_attn_params *ap, float *out, float *lse, float *ent, int reps,
                        lpattn_status *st) {
  double best = INFINITY, secs;
  *st = bench_attention(ctx, w, p, ap, out, lse, ent, NULL, &secs);
  for (int r = 0; r < reps && *st == LPATTN_OK; r++) {
    *st = bench_attention(ctx, w, p, ap, out, lse, ent, NULL, &secs);
    if (secs < best) best = secs;
  }
  return *st == LPATTN_OK ? best : -1.0;
}

typedef struct {
  lpattn_ctx *ctx;
  bench_problem p;
  bench_views w;
  float *out, *lse, *ent;
  int device;   /* buffers below are device memory */
  void *dev[3]; /* q, k, v on the device */
} run_state;

static void run_close(run_state *rs) {
  void (*release)(void *) = rs->device ? devmem_free : free;
  for (int i = 0; i < 3; i++) devmem_free(rs->dev[i]);
  release(rs->out), release(rs->lse), release(rs->ent);
  views_free(&rs->w);
  problem_free(&rs->p);
  lpattn_free(rs->ctx);
}

/* Context, data and buffers for backend b; NULL on success, else why not. */
static const char *run_open(const bench_opts *o, lpattn_backend b, run_state *rs, int64_t *H,
                            int64_t *S) {
  memset(rs, 0, sizeof *rs);
  shape_for(o, b, H, S);
  rs->device = !is_host(b);
  if (rs->device && devmem_open(b)) return "no runtime library for device memory";
  if (bench_open(o, b, &rs->ctx) != LPATTN_OK) return "cannot open the backend";
  if (problem_alloc(&rs->p, 1, *H, *H, *S, *S, 128)) return "out of memory";
  gen_attnlike_f16(&rs->p, o->seed, ATTN_ALL);
  views_make(&rs->w, &rs->p, LPATTN_F16);
  const size_t n = (size_t)(*H * *S * 128), rows = (size_t)(*H * *S);
  if (!rs->device) {
    rs->out = malloc(sizeof(float) * n);
    rs->lse = malloc(sizeof(float) * rows);
    rs->ent = malloc(sizeof(float) * rows);
    return rs->out && rs->lse && rs->ent ? NULL : "out of memory";
  }
  lpattn_tensor *t[3] = {&rs->w.q, &rs->w.k, &rs->w.v};
  for (int i = 0; i < 3; i++) {
    rs->dev[i] = devmem_upload(t[i]->data, n * sizeof(uint16_t));
    if (!rs->dev[i]) return "device allocation failed";
    t[i]->data = rs->dev[i];
  }
  rs->out = devmem_alloc(sizeof(float) * n);
  rs->lse = devmem_alloc(sizeof(float) * rows);
  rs->ent = devmem_alloc(sizeof(float) * rows);
  return rs->out && rs->lse && rs->ent ? NULL : "device allocation failed";
}

int report_speed(const bench_opts *o) {
  printf(
      "== speed: causal, D=128, f16 inputs, attention-like data; GFLOP/s = 4*B*H*Sq*Skv*D/2\n"
      "   per second (best of 3 after a warm-up; %d threads)\n",
      bench_threads(o));
  bench_table t;
  table_init(&t, "speed", "backend|precision|B|H|S|D|ms|GFLOP/s");
  int rc = 0;
  for (size_t bi = 0; bi < sizeof all_backends / sizeof all_backends[0]; bi++) {
    lpattn_backend b = all_backends[bi];
    if (!wanted(o, b)) continue;
    run_state hr;
    int64_t H, S;
    const char *why = run_open(o, b, &hr, &H, &S);
    if (why) {
      table_row(&t, "%s|skipped: %s", lpattn_backend_name(b), why);
      run_close(&hr);
      continue;
    }
    const double flops = 4.0 * H * S * S * 128 / 2.0;
    for (size_t i = 0; i < sizeof sv / sizeof sv[0]; i++) {
      lpattn_attn_params ap;
      lpattn_attn_params_init(&ap);
      ap.causal = 1;
      ap.precision = sv[i].prec;
      ap.pasa = sv[i].pasa;
      lpattn_status st;
      double s = best_time(hr.ctx, &hr.w, &hr.p, &ap, hr.out, NULL, NULL, 3, &st);
      if (s < 0) {
        table_row(&t, "%s|%s|1|%lld|%lld|128|%s", lpattn_backend_name(b), sv[i].label, (long long)H,
                  (long long)S, lpattn_status_string(st));
        rc |= st != LPATTN_ERR_UNSUPPORTED;
        continue;
      }
      table_row(&t, "%s|%s|1|%lld|%lld|128|%.1f|%.2f", lpattn_backend_name(b), sv[i].label,
                (long long)H, (long long)S, 1e3 * s, flops / s * 1e-9);
    }
    run_close(&hr);
  }
  table_emit(&t, o);
  return rc;
}

int report_entropy(const bench_opts *o) {
  printf(
      "== entropy: time with and without the entropy output (LSE requested in both),\n"
      "   causal, D=128, f16 inputs, alternating, best of 6 (ref: 4) each after a warm-up\n");
  bench_table t;
  table_init(&t, "entropy", "backend|precision|H|S|ms_without|ms_with|overhead_pct");
  static const lpattn_precision precs[] = {LPATTN_PREC_HIGH, LPATTN_PREC_NVFP4};
  int rc = 0;
  for (size_t bi = 0; bi < sizeof all_backends / sizeof all_backends[0]; bi++) {
    lpattn_backend b = all_backends[bi];
    if (!wanted(o, b)) continue;
    run_state hr;
    int64_t H, S;
    const char *why = run_open(o, b, &hr, &H, &S);
    if (why) {
      table_row(&t, "%s|skipped: %s", lpattn_backend_name(b), why);
      run_close(&hr);
      continue;
    }
    int reps = b == LPATTN_BACKEND_REF ? 4 : 6;
    for (size_t i = 0; i < sizeof precs / sizeof precs[0]; i++) {
      lpattn_attn_params ap;
      lpattn_attn_params_init(&ap);
      ap.causal = 1;
      ap.precision = precs[i];
      /* Alternate the two variants so load changes hit both alike. */
      lpattn_status s1 = LPATTN_OK, s2 = LPATTN_OK;
      double t0 = INFINITY, t1 = INFINITY;
      for (int r = 0; r < reps && s1 == LPATTN_OK && s2 == LPATTN_OK; r++) {
        double a = best_time(hr.ctx, &hr.w, &hr.p, &ap, hr.out, hr.lse, NULL, 1, &s1);
        double b = best_time(hr.ctx, &hr.w, &hr.p, &ap, hr.out, hr.lse, hr.ent, 1, &s2);
        t0 = a < t0 ? a : t0;
        t1 = b < t1 ? b : t1;
      }
      if (s1 != LPATTN_OK) t0 = -1.0;
      if (s2 != LPATTN_OK) t1 = -1.0;
      if (t0 < 0 || t1 < 0) {
        table_row(&t, "%s|%s|%lld|%lld|%s", lpattn_backend_name(b), precision_name(precs[i]),
                  (long long)H, (long long)S, lpattn_status_string(t0 < 0 ? s1 : s2));
        rc |= (t0 < 0 && s1 != LPATTN_ERR_UNSUPPORTED) || (t1 < 0 && s2 != LPATTN_ERR_UNSUPPORTED);
        continue;
      }
      table_row(&t, "%s|%s|%lld|%lld|%.1f|%.1f|%+.1f", lpattn_backend_name(b),
                precision_name(precs[i]), (long long)H, (long long)S, 1e3 * t0, 1e3 * t1,
                100.0 * (t1 - t0) / t0);
    }
    run_close(&hr);
  }
  table_emit(&t, o);
  return rc;
}
