/* What the conformance program's files share (tests/conformance, issue 30
 * item 5): the backend under test and ref, buffers that live on the
 * backend's side (device memory for cuda/hip, host memory otherwise) with a
 * host copy, random data, error measures, and the per-case report with its
 * per-op counts. */
#ifndef LPATTN_CONF_H
#define LPATTN_CONF_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpattn.h"

/* The backend under test; ref is always LPATTN_BACKEND_REF (for "ref" a
 * second context: ref against itself, bitwise). */
typedef enum { CONF_REF, CONF_CPU, CONF_GPU } conf_kind;
typedef struct {
  lpattn_ctx *be, *ref;
  lpattn_backend backend;
  const char *name;
  conf_kind kind;
  int dev;      /* the backend takes device pointers */
  int wg8;      /* cuda on a 9.0 device without LPATTN_NO_WGMMA (conf_bounds.h) */
} conf_env;
extern conf_env E;

/* Ops, each with its own counts in the summary. */
typedef enum { OP_ATTN, OP_QUANT, OP_BWD, OP_PAGED, OP_PREFILL, OP_CACHE, OP_VARLEN, OP_MERGE, OP_N } conf_op;

/* A buffer: h in host memory (inputs are written there, results read back
 * there), d on the backend's side (device memory when E.dev). */
typedef struct {
  void *h, *d;
  size_t bytes;
} cbuf;
cbuf cb_make(size_t bytes);
void cb_up(cbuf *b);   /* h -> d */
void cb_down(cbuf *b); /* d -> h (waits for the device) */
void cb_poison(cbuf *b); /* d = 0xFF bytes (NaN), so unwritten outputs show */
void cb_free(cbuf *b);
int conf_dev_init(void); /* 0: this binary cannot reach the backend's memory */

size_t conf_esize(lpattn_dtype t);
/* Contiguous [b, h, s, d] view of the buffer's host (dev = 0) or backend side. */
lpattn_tensor cb_t4(const cbuf *b, int dev, lpattn_dtype dt, int64_t n0, int64_t n1, int64_t n2,
                    int64_t n3);
/* n values of N(mu, sigma) stored as dt in b->h (and uploaded). */
void conf_fill(cbuf *b, lpattn_dtype dt, int64_t n, double mu, double sigma);
double conf_normal(void);
float conf_get(const void *h, lpattn_dtype dt, int64_t i);

/* ||a - b|| / ||b|| (||a - b|| when b is zero; cpu_compare.h RelRmse,
 * cudatest.h ct_relerr); a NaN on one side only gives +inf, NaN on both
 * sides at the same place counts as equal. */
double conf_relerr(const void *a, const void *b, lpattn_dtype dt, int64_t n);
/* Largest |a - b| / max(1, |b|) (cpu_compare.h MaxRel) or |a - b|
 * (ct_maxabs); equal values (infinities included) count 0. */
double conf_maxrel(const float *a, const float *b, int64_t n);
double conf_maxabs(const float *a, const float *b, int64_t n);
extern int64_t conf_argmax; /* the element of the last conf_maxrel/conf_maxabs's maximum (-1: none) */

/* One reported quantity of a case. */
typedef struct {
  const char *what;
  double err, bound;
} conf_q;

/* Print the case's line and count it: st the backend's status (UNSUPPORTED:
 * "unsupported", not a failure), ref_st ref's (must be OK). Returns 1 when
 * the case passed. */
int conf_report(conf_op op, const char *params, lpattn_status st, lpattn_status ref_st,
                const conf_q *q, int nq);
int conf_summary(void); /* prints the per-op counts; the exit code */

void conf_attention(void);
void conf_quantize(void);
void conf_backward(void);
void conf_paged(void);
void conf_mla(void); /* conf_mla.c */
void conf_varlen(void);
void conf_merge(void);

#endif
