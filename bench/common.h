/* lpattn-bench: shared declarations. Each report lives in its own rep_*.c;
 * data generators, the f64 reference, metrics and table output are shared. */
#ifndef LPATTN_BENCH_COMMON_H
#define LPATTN_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "lpattn.h"

/* ---- options ------------------------------------------------------------ */
typedef struct {
  const char *out_dir;    /* CSV directory */
  lpattn_backend backend; /* AUTO = the report's own choice */
  int quick;              /* smaller shapes (CI) */
  int threads;            /* cpu backend threads and f64 reference threads; 0 = all */
  uint64_t seed;
  int max_len; /* thrift length sweep upper bound (0 = report default) */
} bench_opts;

/* ---- random numbers (xoshiro256**, seeded by splitmix64) ----------------- */
typedef struct {
  uint64_t s[4];
} bench_rng;
void rng_seed(bench_rng *r, uint64_t seed);
uint64_t rng_u64(bench_rng *r);
double rng_uniform(bench_rng *r); /* [0, 1) */
double rng_normal(bench_rng *r);  /* N(0, 1) */

/* ---- problems ----------------------------------------------------------- */
/* Contiguous [B, H, S, D] f32 tensors; Q has Sq rows, K and V Skv. */
typedef struct {
  int64_t B, Hq, Hkv, Sq, Skv, D;
  float *q, *k, *v;
} bench_problem;

int problem_alloc(bench_problem *p, int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Skv,
                  int64_t D);
void problem_free(bench_problem *p);
/* Round every element to the nearest f16 so f16 and f32 calls see equal values. */
void problem_round_f16(bench_problem *p);

/* SPEC 8 distributions. */
void gen_uniform(bench_problem *p, bench_rng *r, double x0, double am);
void gen_hybrid(bench_problem *p, bench_rng *r, double x0, double am);
/* Attention-like heads (sinks, a local band, planted retrieval pairs);
 * Q rows are the last Sq of Skv positions. */
void gen_attnlike(bench_problem *p, bench_rng *r);
/* The same with only some of the structure (noise is always there). */
enum { ATTN_SINK = 1, ATTN_BAND = 2, ATTN_RETRIEVAL = 4, ATTN_ALL = 7 };
void gen_attnlike_parts(bench_problem *p, bench_rng *r, unsigned parts);
/* Seed, generate those parts and round the inputs to f16: every report's data. */
void gen_attnlike_f16(bench_problem *p, uint64_t seed, unsigned parts);

/* ---- library calls ------------------------------------------------------ */
/* Host views of a problem in f32 or f16 (f16 copies are owned by the view;
 * exits on out-of-memory). */
typedef struct {
  lpattn_tensor q, k, v;
  void *buf; /* f16 storage, NULL for f32 */
} bench_views;

void views_make(bench_views *w, const bench_problem *p, lpattn_dtype dt);
void views_free(bench_views *w);

/* One attention call; lse/ent may be NULL. Returns the status; *secs the
 * wall time of the call. */
lpattn_status bench_attention(lpattn_ctx *ctx, const bench_views *w, const bench_problem *p,
                              const lpattn_attn_params *ap, float *out, float *lse, float *ent,
                              int32_t *sel, double *secs);

/* Opens the backend (AUTO -> fallback) with the thread count from opts. */
lpattn_status bench_open(const bench_opts *o, lpattn_backend b, lpattn_ctx **ctx);
/* The report's default backend: opts->backend if set, else cpu, else ref. */
lpattn_backend bench_default_backend(const bench_opts *o);

/* Device memory of a GPU backend through its runtime, opened with dlopen
 * (no link-time GPU dependency). devmem_open: 0 when usable. */
int devmem_open(lpattn_backend b);
void *devmem_alloc(size_t bytes);
void *devmem_upload(const void *host, size_t bytes);
int devmem_download(void *host, const void *dev, size_t bytes);
void devmem_free(void *p);

double now_seconds(void);
int bench_threads(const bench_opts *o);

/* ---- f64 reference and metrics ------------------------------------------ */
/* sum_d a[d] * b[d] in f64 with four running sums (the compiler may not
 * reorder a single f64 reduction; four chains keep the FPU busy). */
static inline double dot_f64(const float *a, const float *b, int64_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += (double)a[d] * b[d];
    s1 += (double)a[d + 1] * b[d + 1];
    s2 += (double)a[d + 2] * b[d + 2];
    s3 += (double)a[d + 3] * b[d + 3];
  }
  for (; d < n; d++) s0 += (double)a[d] * b[d];
  return (s0 + s1) + (s2 + s3);
}

/* Exact softmax attention in f64 of rows [r0, Sq) of every (b, h).
 * o: [B, Hq, Sq - r0, D]; lse/ent: [B, Hq, Sq - r0] (may be NULL). */
void ref64_attention(const bench_problem *p, int causal, double sm_scale, int64_t r0, int threads,
                     double *o, double *lse, double *ent);

typedef struct {
  double rel_rmse;   /* ||o - ref|| / ||ref|| over finite entries; NaN if none */
  double max_abs;    /* over finite entries */
  int64_t nonfinite; /* NaN/Inf outputs */
  int64_t n;
} err_stats;

/* Compare rows [r0, Sq) of out ([B, Hq, Sq, D] f32) with ref ([.., Sq - r0, D]). */
err_stats compare_rows(const bench_problem *p, const float *out, const double *ref, int64_t r0);

typedef struct {
  double mean, min, max; /* of the computed entropies */
  double max_dev;        /* max |H - H_ref| */
} ent_stats;
ent_stats entropy_stats(const float *h, const double *href, int64_t n);

/* ---- tables ------------------------------------------------------------- */
typedef struct {
  const char *name; /* CSV file stem */
  int ncol;
  char **head;
  char **cell; /* row-major, nrow * ncol */
  int nrow, cap;
  int *width;    /* streaming: the printed column widths; NULL when buffered */
} bench_table;

void table_init(bench_table *t, const char *name, const char *header /* "a|b|c" */);
/* Adds one row: fmt expands to cells separated by '|'. */
void table_row(bench_table *t, const char *fmt, ...);
/* Prints aligned to stdout and writes <out_dir>/<name>.csv; frees the table.
 * A table built while no other is open prints its legend, header and each
 * row as it is added (progress); table_emit then only writes the CSV. */
void table_emit(bench_table *t, const bench_opts *o);
/* The meaning of a column name of the reports (bench/legend.c), or NULL. */
const char *bench_column_meaning(const char *col);
/* A horizontal bar chart of positive values on a log10 axis as an SVG file
 * (bench/svg.c); note[i] is printed right of bar i (note may be NULL). */
int svg_log_bars(const char *path, const char *title, const char *xlabel, int n,
                 const char *const *label, const double *value, const char *const *note);

/* ---- reports ------------------------------------------------------------ */
int report_main(const bench_opts *o);
int report_pasa(const bench_opts *o);
int report_thrift(const bench_opts *o);
int report_leak(const bench_opts *o);
int report_entropy(const bench_opts *o);
int report_speed(const bench_opts *o);

const char *precision_name(lpattn_precision p);

#endif
