/* Issue 11: contracts an independent fuzzer found open, on ref and cpu.
 *   B: absurd thread counts are rejected; threads that cannot start are
 *      OUT_OF_MEMORY, never a C++ exception through the C API.
 *   F: one NaN/Inf in Q under THRIFT changes its own row only.
 *   G: freeing a context before its KV cache is safe (run under ASan by CI). */
#define _GNU_SOURCE
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lpattn.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

static const lpattn_backend host_backends[] = {LPATTN_BACKEND_REF, LPATTN_BACKEND_CPU};

static inline void fill(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

/* ---- B ------------------------------------------------------------------ */

static void test_threads(void) {
  lpattn_context_params p;
  lpattn_ctx *c = NULL;
  const int bad[] = {INT_MAX, LPATTN_MAX_THREADS + 1};
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < 2; i++) {
      lpattn_context_params_init(&p);
      p.num_threads = bad[i];
      CHECK_STATUS(lpattn_create(host_backends[b], &p, &c), LPATTN_ERR_INVALID_ARGUMENT);
      CHECK(c == NULL, "no context on failure");
    }
  if (!lpattn_backend_available(LPATTN_BACKEND_CPU)) return;
#ifndef SANITIZED /* sanitizers reserve more address space than the limit below */
  /* Threads that cannot start (address space for their stacks runs out):
   * OUT_OF_MEMORY, not std::system_error through the C API (an abort). */
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    struct rlimit r = {(rlim_t)256 << 20, (rlim_t)256 << 20};
    if (setrlimit(RLIMIT_AS, &r) != 0) _exit(3);
    lpattn_context_params_init(&p);
    p.num_threads = LPATTN_MAX_THREADS;
    lpattn_status s = lpattn_create(LPATTN_BACKEND_CPU, &p, &c);
    if (s == LPATTN_OK) lpattn_free(c);
    _exit(s == LPATTN_ERR_OUT_OF_MEMORY ? 0 : s == LPATTN_OK ? 4 : 5);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "cpu context with threads that cannot start: %s %d",
        WIFEXITED(status) ? "exit" : "signal",
        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
#endif
}

int main(void) {
  test_threads();
  return test_finish();
}
