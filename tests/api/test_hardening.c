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

static void fill(float *x, size_t n, unsigned seed) {
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

/* ---- F ------------------------------------------------------------------ */

enum { FH = 2, FS = 256, FD = 64, FBAD = 150 }; /* row FBAD (query tile 2) of head 0 goes bad */

typedef struct {
  float o[FH * FS * FD], lse[FH * FS];
  int32_t sel[FH * 4 * 2];
} f_out;

static lpattn_status thrift_prefill(lpattn_ctx *ctx, const float *q, const float *kv,
                                    lpattn_selection mode, f_out *r) {
  lpattn_tensor tq = lpattn_tensor_4d((void *)q, LPATTN_F32, 1, FH, FS, FD);
  lpattn_tensor tk = lpattn_tensor_4d((void *)kv, LPATTN_F32, 1, 1, FS, FD);
  lpattn_tensor to = lpattn_tensor_4d(r->o, LPATTN_F32, 1, FH, FS, FD);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = LPATTN_PREC_THRIFT, p.causal = 1, p.thrift_k = 2, p.selection = mode;
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lpattn_tensor_4d(r->lse, LPATTN_F32, 1, FH, FS, 1);
  aux.selection = lpattn_tensor_4d(r->sel, LPATTN_I32, 1, FH, 4, 2);
  return lpattn_attention(ctx, &tq, &tk, &tk, &to, &p, &aux);
}

/* Rows other than (head 0, row FBAD) bitwise equal; returns how many differ. */
static int other_rows_differ(const f_out *a, const f_out *b) {
  int n = 0;
  for (int h = 0; h < FH; h++)
    for (int r = 0; r < FS; r++) {
      if (h == 0 && r == FBAD) continue;
      n += memcmp(a->o + (h * FS + r) * FD, b->o + (h * FS + r) * FD, FD * 4) != 0 ||
           memcmp(&a->lse[h * FS + r], &b->lse[h * FS + r], 4) != 0;
    }
  return n;
}

/* One NaN or Inf in Q under THRIFT used to re-rank its query tile's
 * selection (and the next one's under causal selection): 63-64 other rows
 * changed. Baseline: the same element 0, which the tile means now count. */
static void test_nonfinite_q(lpattn_backend be) {
  static float q[FH * FS * FD], kv[FS * FD];
  static f_out base, bad;
  lpattn_ctx *ctx = NULL;
  CHECK_STATUS(lpattn_create(be, NULL, &ctx), LPATTN_OK);
  if (!ctx) return;
  fill(q, sizeof q / 4, 11);
  fill(kv, sizeof kv / 4, 12);
  /* Query means lean positive and KV tile 1 scores best, so a NaN score
   * (ranked last) changes which full tile is picked. */
  for (int i = 0; i < FH * FS * FD; i++) q[i] += 0.25f;
  for (int i = 64 * FD; i < 128 * FD; i++) kv[i] += 1.0f;
  const float poison[] = {NAN, INFINITY, -INFINITY};
  float *x = &q[FBAD * FD + 5];
  for (int mode = 0; mode < 2; mode++)
    for (int i = 0; i < 3; i++) {
      *x = 0.0f;
      CHECK_STATUS(thrift_prefill(ctx, q, kv, (lpattn_selection)mode, &base), LPATTN_OK);
      *x = poison[i];
      CHECK_STATUS(thrift_prefill(ctx, q, kv, (lpattn_selection)mode, &bad), LPATTN_OK);
      const int n = other_rows_differ(&base, &bad);
      CHECK(n == 0, "%s, selection %d, Q = %g: %d other rows changed", lpattn_backend_name(be),
            mode, poison[i], n);
      CHECK(memcmp(base.sel, bad.sel, sizeof base.sel) == 0, "%s: selection changed",
            lpattn_backend_name(be));
      CHECK(!isfinite(bad.o[FBAD * FD]) || !isfinite(bad.lse[FBAD]), "the bad row is not finite");
    }
  *x = 0.0f;
  /* Decode: a bad query recorded in the cache (the mean of its tile) does not
   * move the selection of later tokens either. */
  float o[2][FH * FD];
  for (int i = 0; i < 2; i++) {
    lpattn_kv_cache_params cp;
    lpattn_kv_cache_params_init(&cp);
    cp.num_kv_heads = 1, cp.num_q_heads = FH, cp.head_dim = FD, cp.max_tokens = FS;
    cp.precision = LPATTN_PREC_THRIFT, cp.high_dtype = LPATTN_F32;
    lpattn_kv_cache *c = NULL;
    CHECK_STATUS(lpattn_kv_cache_create(ctx, &cp, &c), LPATTN_OK);
    if (!c) break;
    *x = i ? NAN : 0.0f;
    lpattn_tensor tk = lpattn_tensor_4d(kv, LPATTN_F32, 1, 1, FS - 1, FD);
    lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F32, 1, FH, FS - 1, FD);
    tq.stride[1] = FS * FD;
    CHECK_STATUS(lpattn_kv_cache_append(ctx, c, 0, &tk, &tk, &tq), LPATTN_OK);
    tk = lpattn_tensor_4d(kv + (FS - 1) * FD, LPATTN_F32, 1, 1, 1, FD);
    CHECK_STATUS(lpattn_kv_cache_append(ctx, c, 0, &tk, &tk, NULL), LPATTN_OK);
    lpattn_tensor q1 = lpattn_tensor_4d(q + (FS - 1) * FD, LPATTN_F32, 1, FH, 1, FD);
    q1.stride[1] = FS * FD;
    lpattn_tensor o1 = lpattn_tensor_4d(o[i], LPATTN_F32, 1, FH, 1, FD);
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.thrift_k = 2;
    CHECK_STATUS(lpattn_decode(ctx, c, &q1, &o1, &p, NULL), LPATTN_OK);
    lpattn_kv_cache_free(c);
  }
  *x = 0.0f;
  CHECK(memcmp(o[0], o[1], sizeof o[0]) == 0, "%s decode: a bad recorded query moved the output",
        lpattn_backend_name(be));
  lpattn_free(ctx);
}

/* lpattn.h: causal THRIFT with thrift_k is prefix-stable, a prefill's rows
 * equal those of a longer prefill (with a budget, k follows Skv). */
static void test_prefix_stable(lpattn_backend be) {
  static float q[FH * FS * FD], kv[FS * FD], o_long[FH * FS * FD], o_short[FH * FS * FD];
  lpattn_ctx *ctx = NULL;
  CHECK_STATUS(lpattn_create(be, NULL, &ctx), LPATTN_OK);
  if (!ctx) return;
  fill(q, sizeof q / 4, 21);
  fill(kv, sizeof kv / 4, 22);
  enum { SHORT = 160 };
  for (int run = 0; run < 2; run++) {
    const int64_t n = run ? SHORT : FS;
    lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F32, 1, FH, n, FD);
    lpattn_tensor tk = lpattn_tensor_4d(kv, LPATTN_F32, 1, 1, n, FD);
    lpattn_tensor to = lpattn_tensor_4d(run ? o_short : o_long, LPATTN_F32, 1, FH, n, FD);
    tq.stride[1] = to.stride[1] = FS * FD;
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.precision = LPATTN_PREC_THRIFT, p.causal = 1, p.thrift_k = 2;
    CHECK_STATUS(lpattn_attention(ctx, &tq, &tk, &tk, &to, &p, NULL), LPATTN_OK);
  }
  int same = 1;
  for (int h = 0; h < FH; h++)
    same &= memcmp(o_long + h * FS * FD, o_short + h * FS * FD, SHORT * FD * 4) == 0;
  CHECK(same, "%s: thrift_k prefill rows depend on later tokens", lpattn_backend_name(be));
  lpattn_free(ctx);
}

/* ---- G ------------------------------------------------------------------ */

enum { GH = 2, GD = 64, GT = 100 };

static lpattn_kv_cache *cache_with_tokens(lpattn_ctx *ctx, lpattn_precision prec, float *kv) {
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_kv_heads = GH, cp.num_q_heads = GH, cp.head_dim = GD, cp.max_tokens = 2 * GT;
  cp.precision = prec;
  lpattn_kv_cache *c = NULL;
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &cp, &c), LPATTN_OK);
  lpattn_tensor t = lpattn_tensor_4d(kv, LPATTN_F32, 1, GH, GT, GD);
  if (c) CHECK_STATUS(lpattn_kv_cache_append(ctx, c, 0, &t, &t, NULL), LPATTN_OK);
  return c;
}

/* A context freed before its caches (it used to leave them dangling: a
 * use-after-free in lpattn_kv_cache_free that ASan reports). */
static void test_free_order(lpattn_backend be) {
  static float kv[GH * GT * GD], q[GH * GD], o[GH * GD];
  fill(kv, sizeof kv / 4, 7);
  fill(q, sizeof q / 4, 8);
  lpattn_ctx *ctx = NULL, *other = NULL;
  CHECK_STATUS(lpattn_create(be, NULL, &ctx), LPATTN_OK);
  CHECK_STATUS(lpattn_create(be, NULL, &other), LPATTN_OK);
  if (!ctx || !other) return;
  lpattn_kv_cache *a = cache_with_tokens(ctx, LPATTN_PREC_NVFP4, kv);
  lpattn_kv_cache *b = cache_with_tokens(ctx, LPATTN_PREC_THRIFT, kv);
  lpattn_kv_cache *c = cache_with_tokens(ctx, LPATTN_PREC_HIGH, kv);
  lpattn_kv_cache_free(b); /* the usual order for one of them */
  lpattn_free(ctx);        /* a and c detached */
  int64_t len = 0;
  CHECK_STATUS(lpattn_kv_cache_length(a, 0, &len), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_tensor t = lpattn_tensor_4d(kv, LPATTN_F32, 1, GH, 1, GD);
  lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F32, 1, GH, 1, GD);
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, 1, GH, 1, GD);
  CHECK_STATUS(lpattn_kv_cache_append(other, a, 0, &t, &t, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(lpattn_decode(other, c, &tq, &to, NULL, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_kv_cache_free(a);
  lpattn_kv_cache_free(c);
  /* The other context still works, its own cache freed after it too. */
  lpattn_kv_cache *d = cache_with_tokens(other, LPATTN_PREC_FP8, kv);
  CHECK_STATUS(lpattn_decode(other, d, &tq, &to, NULL, NULL), LPATTN_OK);
  lpattn_free(other);
  lpattn_kv_cache_free(d);
}

int main(void) {
  test_threads();
  for (int b = 0; b < 2; b++)
    if (lpattn_backend_available(host_backends[b])) {
      test_nonfinite_q(host_backends[b]);
      test_prefix_stable(host_backends[b]);
      test_free_order(host_backends[b]);
    }
  return test_finish();
}
