/* lpattn-bench: accuracy, safety and speed reports for lpattn.
 * Usage: lpattn-bench [main|pasa|thrift|leak|entropy|speed|all] [options] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const struct {
  const char *name;
  int (*run)(const bench_opts *);
  int gpu; /* 1: also runs on GPU backends (device buffers) */
  const char *what;
} reports[] = {
    {"main", report_main, 1, "every precision vs an f64 reference: error, NaN/Inf, time, entropy"},
    {"pasa", report_pasa, 0, "PASA paper's random benchmarks (Cheng et al., Online Pseudo-average Shifting Attention): f32 vs f16 scores vs PASA"},
    {"thrift", report_thrift, 0, "Thrift recovery, selection ablation, recovery vs length"},
    {"leak", report_leak, 0, "causal leak (safe vs leaky) and prefill-vs-decode agreement"},
    {"entropy", report_entropy, 1, "cost of the entropy output per backend"},
    {"speed", report_speed, 1, "GFLOP/s per backend and precision"},
};
enum { NREPORTS = sizeof reports / sizeof reports[0] };

static void usage(FILE *f) {
  fprintf(f,
          "usage: lpattn-bench [REPORT] [options]\n"
          "reports (default: main):\n");
  for (int i = 0; i < NREPORTS; i++) fprintf(f, "  %-8s %s\n", reports[i].name, reports[i].what);
  fprintf(f,
          "  all      every report in turn\n"
          "options:\n"
          "  --out DIR        CSV directory (default bench/out)\n"
          "  --backend NAME   ref, cpu, cuda or hip (default: cpu if available, else ref)\n"
          "  --quick          small shapes (CI)\n"
          "  --threads N      threads of the cpu backend and the f64 reference (0 = all)\n"
          "  --seed N         random seed (default 1)\n"
          "  --max-len N      thrift: longest sequence of the length sweep\n");
}

static int parse_backend(const char *s, lpattn_backend *b) {
  static const lpattn_backend all[] = {LPATTN_BACKEND_REF, LPATTN_BACKEND_CPU, LPATTN_BACKEND_CUDA,
                                       LPATTN_BACKEND_HIP};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!strcmp(s, lpattn_backend_name(all[i]))) return *b = all[i], 0;
  return -1;
}

int main(int argc, char **argv) {
  bench_opts o = {"bench/out", LPATTN_BACKEND_AUTO, 0, 0, 1, 0};
  const char *report = "main";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    int takes = !strcmp(a, "--out") || !strcmp(a, "--backend") || !strcmp(a, "--threads") ||
                !strcmp(a, "--seed") || !strcmp(a, "--max-len");
    if (takes && !val) {
      fprintf(stderr, "lpattn-bench: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--quick")) {
      o.quick = 1;
    } else if (!strcmp(a, "--out")) {
      o.out_dir = val, i++;
    } else if (!strcmp(a, "--backend")) {
      if (parse_backend(val, &o.backend)) {
        fprintf(stderr, "lpattn-bench: unknown backend '%s'\n", val);
        return 2;
      }
      i++;
    } else if (!strcmp(a, "--threads")) {
      o.threads = atoi(val), i++;
    } else if (!strcmp(a, "--seed")) {
      o.seed = strtoull(val, NULL, 10), i++;
    } else if (!strcmp(a, "--max-len")) {
      o.max_len = atoi(val), i++;
    } else if (a[0] != '-') {
      report = a;
    } else {
      fprintf(stderr, "lpattn-bench: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (o.backend != LPATTN_BACKEND_AUTO && !lpattn_backend_available(o.backend)) {
    fprintf(stderr, "lpattn-bench: backend '%s' is not available here\n",
            lpattn_backend_name(o.backend));
    return 2;
  }
  printf("lpattn-bench %s (library %s)\n\n", LPATTN_VERSION_STRING, lpattn_version_string());
  int all = !strcmp(report, "all"), rc = 0, found = all;
  for (int i = 0; i < NREPORTS; i++)
    if (all || !strcmp(report, reports[i].name)) {
      found = 1;
      int gpu = o.backend == LPATTN_BACKEND_CUDA || o.backend == LPATTN_BACKEND_HIP;
      if (gpu && !reports[i].gpu) {
        fprintf(stderr, "lpattn-bench: '%s' runs on host backends only (ref, cpu)\n",
                reports[i].name);
        if (!all) rc = 2;
        continue;
      }
      if (reports[i].run(&o)) rc = 1;
    }
  if (!found) {
    fprintf(stderr, "lpattn-bench: unknown report '%s'\n", report);
    usage(stderr);
    return 2;
  }
  return rc;
}
