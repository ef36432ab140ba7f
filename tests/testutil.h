/* Minimal test harness: CHECK records a failure and goes on; main returns
 * test_finish(), which prints "N passed, N failed" and gives the exit code
 * (77 = skipped, for meson). */
#ifndef LPATTN_TESTUTIL_H
#define LPATTN_TESTUTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tu_pass, tu_fail;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (cond) {                                                       \
      tu_pass++;                                                      \
    } else {                                                          \
      tu_fail++;                                                      \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fputc('\n', stderr);                                            \
    }                                                                 \
  } while (0)

/* 1 when the detail is only "<argument>: <status string>" (no specifics). */
static inline int tu_generic_detail(const char *detail, const char *status) {
  size_t n = strlen(detail), m = strlen(status);
  return n >= m && strcmp(detail + n - m, status) == 0;
}

/* Also: a failure leaves a specific detail in lpattn_last_error(). */
#define CHECK_STATUS(expr, want)                                                   \
  do {                                                                             \
    lpattn_status got_ = (expr);                                                   \
    CHECK(got_ == (want), "%s -> %s, want %s", #expr, lpattn_status_string(got_), \
          lpattn_status_string(want));                                             \
    CHECK(got_ == LPATTN_OK || (lpattn_last_error()[0] != '\0' &&                  \
                                !tu_generic_detail(lpattn_last_error(),            \
                                                   lpattn_status_string(got_))),   \
          "%s -> %s with last_error \"%s\"", #expr, lpattn_status_string(got_),    \
          lpattn_last_error());                                                    \
  } while (0)

/* splitmix64 from *state, then roughly N(0, 1) as a scaled sum of four
 * uniforms: the test data of the API tests (each keeps its own seed). */
static inline float tu_gauss(uint64_t *state) {
  double s = 0.0;
  for (int i = 0; i < 4; i++) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    s += (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53 - 0.5;
  }
  return (float)(s * 1.7320508);
}

static inline int test_skip(const char *why) {
  printf("SKIP: %s\n", why);
  return 77;
}

static inline int test_finish(void) {
  printf("%d passed, %d failed\n", tu_pass, tu_fail);
  return tu_fail ? 1 : 0;
}
#endif
