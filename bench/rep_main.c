/* `main`: every precision on one causal problem against the f64 reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

typedef struct {
  const char *label;
  lpattn_precision prec;
  float budget; /* THRIFT */
  int pasa;
  int mx_round_up;
} variant;

static const variant variants[] = {
    {"HIGH", LPATTN_PREC_HIGH, 0, 0, 0},
    {"FP8", LPATTN_PREC_FP8, 0, 0, 0},
    {"NVFP4", LPATTN_PREC_NVFP4, 0, 0, 0},
    {"MXFP4", LPATTN_PREC_MXFP4, 0, 0, 0},
    {"MXFP4 scale round-up", LPATTN_PREC_MXFP4, 0, 0, 1},
    {"THRIFT 5%", LPATTN_PREC_THRIFT, 0.05f, 0, 0},
    {"THRIFT 25%", LPATTN_PREC_THRIFT, 0.25f, 0, 0},
    {"PASA (HIGH)", LPATTN_PREC_HIGH, 0, 1, 0},
};

static double max_lse_dev(const float *lse, const double *ref, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(lse[i] - ref[i]);
    if (!(d <= m)) m = d;
  }
  return m;
}

int report_main(const bench_opts *o) {
  const int64_t H = o->quick ? 2 : 8, S = o->quick ? 256 : 1024, D = 128;
  const lpattn_backend be = bench_default_backend(o);
  const int causal = 1;
  bench_problem p;
  if (problem_alloc(&p, 1, H, H, S, S, D)) return 1;
  gen_attnlike_f16(&p, o->seed, ATTN_ALL);

  const int64_t rows = p.B * p.Hq * p.Sq;
  double *oref = malloc(sizeof(double) * (size_t)(rows * D));
  double *lref = malloc(sizeof(double) * (size_t)rows),
         *href = malloc(sizeof(double) * (size_t)rows);
  float *out = malloc(sizeof(float) * (size_t)(rows * D));
  float *lse = malloc(sizeof(float) * (size_t)rows), *ent = malloc(sizeof(float) * (size_t)rows);
  double t0 = now_seconds();
  ref64_attention(&p, causal, 1.0 / sqrt((double)D), 0, bench_threads(o), oref, lref, href);
  double tref = now_seconds() - t0;

  printf("== main: B=1 H=%lld S=%lld D=%lld causal, attention-like data (f16 inputs), backend %s\n",
         (long long)H, (long long)S, (long long)D, lpattn_backend_name(be));
  printf("   errors against exact softmax attention in f64 (%.2f s); H = row entropy (nats)\n",
         tref);
  lpattn_ctx *ctx = NULL;
  lpattn_status st = bench_open(o, be, &ctx);
  if (st != LPATTN_OK) {
    fprintf(stderr, "main: cannot open backend %s: %s\n", lpattn_backend_name(be),
            lpattn_status_string(st));
    return 1;
  }
  bench_views w;
  views_make(&w, &p, LPATTN_F16);
  /* GPU backends: inputs uploaded once, outputs copied back after each call. */
  const int gpu = be == LPATTN_BACKEND_CUDA || be == LPATTN_BACKEND_HIP;
  void *dev[6] = {NULL};
  float *dout = out, *dlse = lse, *dent = ent;
  const size_t nbytes = sizeof(uint16_t) * (size_t)(rows * D);
  if (gpu) {
    lpattn_tensor *in[3] = {&w.q, &w.k, &w.v};
    if (devmem_open(be)) {
      fprintf(stderr, "main: no %s runtime library\n", lpattn_backend_name(be));
      return 1;
    }
    for (int i = 0; i < 3; i++) in[i]->data = dev[i] = devmem_upload(in[i]->data, nbytes);
    dout = dev[3] = devmem_alloc(2 * nbytes);
    dlse = dev[4] = devmem_alloc(sizeof(float) * (size_t)rows);
    dent = dev[5] = devmem_alloc(sizeof(float) * (size_t)rows);
    for (int i = 0; i < 6; i++)
      if (!dev[i]) return fprintf(stderr, "main: device allocation failed\n"), 1;
  }
  bench_table t;
  table_init(&t, "main",
             "precision|k|rel_rmse|max_abs|nan_inf|time_ms|H_mean|H_min|H_max|"
             "max_dH|max_dLSE");
  {
    double mean = 0, mn = INFINITY, mx = -INFINITY;
    for (int64_t i = 0; i < rows; i++) {
      mean += href[i];
      if (href[i] < mn) mn = href[i];
      if (href[i] > mx) mx = href[i];
    }
    table_row(&t, "f64 reference|-|0|0|0|%.1f|%.4f|%.4f|%.4f|0|0", 1e3 * tref, mean / rows, mn, mx);
  }
  int rc = 0;
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    const variant *v = &variants[i];
    lpattn_attn_params ap;
    lpattn_attn_params_init(&ap);
    ap.precision = v->prec;
    ap.causal = causal;
    ap.pasa = v->pasa;
    ap.mx_scale_round_up = v->mx_round_up;
    if (v->prec == LPATTN_PREC_THRIFT) ap.thrift_budget = v->budget;
    int k = v->prec == LPATTN_PREC_THRIFT
                ? lpattn_thrift_k((int)((S + ap.block_k - 1) / ap.block_k), v->budget, causal)
                : 0;
    double secs = 0;
    st = bench_attention(ctx, &w, &p, &ap, dout, dlse, dent, NULL, &secs);
    const size_t rbytes = sizeof(float) * (size_t)rows;
    if (st == LPATTN_OK && gpu &&
        (devmem_download(out, dout, 2 * nbytes) || devmem_download(lse, dlse, rbytes) ||
         devmem_download(ent, dent, rbytes)))
      st = LPATTN_ERR_BACKEND;
    if (st != LPATTN_OK) {
      table_row(&t, "%s|%s", v->label, lpattn_status_string(st));
      if (st != LPATTN_ERR_UNSUPPORTED) rc = 1;
      continue;
    }
    err_stats e = compare_rows(&p, out, oref, 0);
    ent_stats h = entropy_stats(ent, href, rows);
    char kbuf[16];
    snprintf(kbuf, sizeof kbuf, k ? "%d" : "-", k);
    table_row(&t, "%s|%s|%.3e|%.3e|%lld|%.1f|%.4f|%.4f|%.4f|%.2e|%.2e", v->label, kbuf, e.rel_rmse,
              e.max_abs, (long long)e.nonfinite, 1e3 * secs, h.mean, h.min, h.max, h.max_dev,
              max_lse_dev(lse, lref, rows));
  }
  table_emit(&t, o);
  for (int i = 0; i < 6; i++) devmem_free(dev[i]);
  views_free(&w);
  lpattn_free(ctx);
  problem_free(&p);
  free(oref), free(lref), free(href), free(out), free(lse), free(ent);
  return rc;
}
