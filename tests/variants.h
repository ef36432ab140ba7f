/* The variants table of the backend under test: its gen/registry.inc,
 * rendered from codegen/manifest.py, as an array the parity tests iterate,
 * so every compiled kernel variant gets a parity case and no test keeps its
 * own list of head dims or input types. Define TV_BACKEND_CPU, _CUDA or _HIP
 * before including; meson passes LPATTN_TEST_ALL_VARIANTS with
 * -Dvariants=all (then the ALL rows are built and tested too). */
#ifndef LPATTN_TESTS_VARIANTS_H
#define LPATTN_TESTS_VARIANTS_H
#include "lpattn.h"

enum { TV_ATTN, TV_QUANT, TV_DEQUANT, TV_MERGE, TV_DECODE, TV_BWD };
typedef struct {
  const char *name;
  int op;
  int head_dim; /* 0: any (run time) */
  int dtype;    /* -1: any (run time) */
} tv_variant;

#define TV_SET_DEFAULT(...) __VA_ARGS__
#if defined(LPATTN_TEST_ALL_VARIANTS)
#define TV_SET_ALL(...) __VA_ARGS__
#else
#define TV_SET_ALL(...)
#endif
#define LPATTN_KERNEL(set, name, op, hd, dt) TV_SET_##set({#name, TV_##op, hd, dt}, )
static const tv_variant tv_variants[] = {
#if defined(TV_BACKEND_CPU)
#include "../backends/cpu/gen/registry.inc"
#elif defined(TV_BACKEND_HIP)
#include "../backends/hip/gen/registry.inc"
#else
#include "../backends/cuda/gen/registry.inc"
#endif
    {0, 0, 0, 0}};
#undef LPATTN_KERNEL
#define TV_COUNT ((int)(sizeof tv_variants / sizeof tv_variants[0]) - 1)
#endif
