/* Aligned text tables on stdout, the same rows as CSV under --out. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"

static char *dupn(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (!d) abort();
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

/* Split "a|b|c" into exactly n cells (missing ones empty). */
static void split(const char *s, int n, char **cells) {
  for (int i = 0; i < n; i++) {
    const char *bar = s ? strchr(s, '|') : NULL;
    size_t len = s ? (bar ? (size_t)(bar - s) : strlen(s)) : 0;
    cells[i] = dupn(s ? s : "", len);
    s = bar ? bar + 1 : NULL;
  }
}

/* The table that prints its rows as they come (at most one at a time). */
static const bench_table *streaming;

static void print_cells(char *const *cells, int n, const int *w) {
  for (int c = 0; c < n; c++) printf(c == 0 ? "%-*s" : "  %*s", w[c], cells[c]);
  putchar('\n');
}

static void print_rule(const int *w, int n) {
  int total = 0;
  for (int c = 0; c < n; c++) total += w[c] + (c ? 2 : 0);
  for (int i = 0; i < total; i++) putchar('-');
  putchar('\n');
}

static void print_legend(const bench_table *t) {
  printf("   columns:\n");
  for (int c = 0; c < t->ncol; c++) {
    const char *what = bench_column_meaning(t->head[c]);
    if (what) printf("     %-16s %s\n", t->head[c], what);
  }
}

void table_init(bench_table *t, const char *name, const char *header) {
  memset(t, 0, sizeof *t);
  t->name = name;
  t->ncol = 1;
  for (const char *c = header; *c; c++) t->ncol += *c == '|';
  t->head = malloc(sizeof(char *) * (size_t)t->ncol);
  if (!t->head) abort();
  split(header, t->ncol, t->head);
  if (streaming) return; /* another table is printing: this one prints at table_emit */
  /* Stream: widths fixed now (wide enough for numbers like 1.234e-05). */
  t->width = malloc(sizeof(int) * (size_t)t->ncol);
  if (!t->width) abort();
  for (int c = 0; c < t->ncol; c++) {
    int len = (int)strlen(t->head[c]);
    t->width[c] = c == 0 ? (len > 22 ? len : 22) : (len > 9 ? len : 9);
  }
  streaming = t;
  print_legend(t);
  print_cells(t->head, t->ncol, t->width);
  print_rule(t->width, t->ncol);
  fflush(stdout);
}

void table_row(bench_table *t, const char *fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (t->nrow == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 16;
    t->cell = realloc(t->cell, sizeof(char *) * (size_t)(t->cap * t->ncol));
    if (!t->cell) abort();
  }
  split(buf, t->ncol, t->cell + (size_t)t->nrow * t->ncol);
  t->nrow++;
  if (t->width) {
    print_cells(t->cell + (size_t)(t->nrow - 1) * t->ncol, t->ncol, t->width);
    fflush(stdout);
  }
}

static void mkdirs(const char *path) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *c = buf + 1; *c; c++)
    if (*c == '/') {
      *c = '\0';
      mkdir(buf, 0777);
      *c = '/';
    }
  mkdir(buf, 0777);
}

/* CSV cells are numbers and plain words; quote only if a comma shows up. */
static void csv_cell(FILE *f, const char *s) {
  if (strchr(s, ',') || strchr(s, '"')) {
    fputc('"', f);
    for (; *s; s++) {
      if (*s == '"') fputc('"', f);
      fputc(*s, f);
    }
    fputc('"', f);
  } else {
    fputs(s, f);
  }
}

static void write_csv(const bench_table *t, const char *dir) {
  char path[1200];
  mkdirs(dir);
  snprintf(path, sizeof path, "%s/%s.csv", dir, t->name);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "lpattn-bench: cannot write %s: %s\n", path, strerror(errno));
    return;
  }
  for (int r = -1; r < t->nrow; r++)
    for (int c = 0; c < t->ncol; c++) {
      csv_cell(f, r < 0 ? t->head[c] : t->cell[(size_t)r * t->ncol + c]);
      fputc(c + 1 < t->ncol ? ',' : '\n', f);
    }
  fclose(f);
  printf("(csv: %s)\n", path);
}

void table_emit(bench_table *t, const bench_opts *o) {
  if (!t->width) { /* buffered: print it whole, aligned to its widest cells */
    int *w = calloc((size_t)t->ncol, sizeof(int));
    if (!w) abort();
    for (int r = -1; r < t->nrow; r++)
      for (int c = 0; c < t->ncol; c++) {
        int len = (int)strlen(r < 0 ? t->head[c] : t->cell[(size_t)r * t->ncol + c]);
        if (len > w[c]) w[c] = len;
      }
    /* First column left-aligned (labels), numbers right-aligned. */
    print_legend(t);
    print_cells(t->head, t->ncol, w);
    print_rule(w, t->ncol);
    for (int r = 0; r < t->nrow; r++) print_cells(t->cell + (size_t)r * t->ncol, t->ncol, w);
    free(w);
  }
  if (streaming == t) streaming = NULL;
  write_csv(t, o->out_dir);
  putchar('\n');
  fflush(stdout);
  for (int i = 0; i < t->ncol; i++) free(t->head[i]);
  for (int i = 0; i < t->nrow * t->ncol; i++) free(t->cell[i]);
  free(t->head), free(t->cell), free(t->width);
  memset(t, 0, sizeof *t);
}
