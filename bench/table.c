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

void table_init(bench_table *t, const char *name, const char *header) {
  memset(t, 0, sizeof *t);
  t->name = name;
  t->ncol = 1;
  for (const char *c = header; *c; c++) t->ncol += *c == '|';
  t->head = malloc(sizeof(char *) * (size_t)t->ncol);
  if (!t->head) abort();
  split(header, t->ncol, t->head);
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
  int *w = calloc((size_t)t->ncol, sizeof(int));
  if (!w) abort();
  for (int r = -1; r < t->nrow; r++)
    for (int c = 0; c < t->ncol; c++) {
      int len = (int)strlen(r < 0 ? t->head[c] : t->cell[(size_t)r * t->ncol + c]);
      if (len > w[c]) w[c] = len;
    }
  /* First column left-aligned (labels), numbers right-aligned. */
  for (int r = -1; r < t->nrow; r++) {
    for (int c = 0; c < t->ncol; c++) {
      const char *s = r < 0 ? t->head[c] : t->cell[(size_t)r * t->ncol + c];
      printf(c == 0 ? "%-*s" : "  %*s", w[c], s);
    }
    putchar('\n');
    if (r < 0) {
      int total = 0;
      for (int c = 0; c < t->ncol; c++) total += w[c] + (c ? 2 : 0);
      for (int i = 0; i < total; i++) putchar('-');
      putchar('\n');
    }
  }
  write_csv(t, o->out_dir);
  putchar('\n');
  fflush(stdout);
  for (int i = 0; i < t->ncol; i++) free(t->head[i]);
  for (int i = 0; i < t->nrow * t->ncol; i++) free(t->cell[i]);
  free(t->head), free(t->cell), free(w);
  memset(t, 0, sizeof *t);
}
