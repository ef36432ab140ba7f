/* The pool formats the paged prefill tests run (test_paged_prefill.c,
 * test_paged_prefill_varlen.c): every pool precision, and NVFP4 with PASA. */
#ifndef LPATTN_TESTS_POOL_VARIANTS_H
#define LPATTN_TESTS_POOL_VARIANTS_H
#include "lpattn.h"

typedef struct {
  const char *name;
  lpattn_precision prec;
  int pasa;
} variant;

static const variant variants[] = {
    {"HIGH", LPATTN_PREC_HIGH, 0},   {"FP8", LPATTN_PREC_FP8, 0},
    {"NVFP4", LPATTN_PREC_NVFP4, 0}, {"MXFP4", LPATTN_PREC_MXFP4, 0},
    {"THRIFT", LPATTN_PREC_THRIFT, 0}, {"NVFP4+PASA", LPATTN_PREC_NVFP4, 1},
};
#endif
