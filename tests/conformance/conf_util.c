/* The conformance program's plumbing (conf.h): backend-side buffers, random
 * data, error measures, the per-case line and the per-op summary. Built
 * with CONF_CUDA (the CUDA runtime) or CONF_HIP (tests/hip/devmem.hip) for
 * the GPU backends' device memory; without either, buffers are host memory
 * and a GPU backend is "not available" here (exit 77). */
#include "conf.h"

#include "formats.h"

#if defined(CONF_CUDA)
#include <cuda_runtime_api.h>
static void *dev_alloc(size_t n) {
  void *p = NULL;
  if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc(%zu) failed\n", n);
    exit(1);
  }
  return p;
}
static void dev_free(void *p) { cudaFree(p); }
static void dev_up(void *d, const void *h, size_t n) { cudaMemcpy(d, h, n, cudaMemcpyHostToDevice); }
static void dev_down(void *h, const void *d, size_t n) {
  cudaDeviceSynchronize();
  cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);
}
static void dev_set(void *d, int byte, size_t n) { cudaMemset(d, byte, n); }
#elif defined(CONF_HIP)
void *ht_dalloc(size_t n); /* tests/hip/devmem.hip */
void ht_dfree(void *p);
void ht_up(void *d, const void *h, size_t n);
void ht_down(void *h, const void *d, size_t n);
void ht_dset(void *d, int byte, size_t n);
#define dev_alloc ht_dalloc
#define dev_free ht_dfree
#define dev_up ht_up
#define dev_down ht_down
#define dev_set ht_dset
#endif

int conf_dev_init(void) {
#if defined(CONF_CUDA)
  /* tests/cuda/test_cuda_attn.c wg8_device(): FP8 at D = 128 runs on E4M3 wgmma */
  int major = 0, minor = 0;
  const char *e = getenv("LPATTN_NO_WGMMA");
  E.wg8 = E.backend == LPATTN_BACKEND_CUDA &&
          cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess &&
          cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) == cudaSuccess &&
          major == 9 && minor == 0 && !(e && e[0] == '1');
  return 1;
#elif defined(CONF_HIP)
  return 1;
#else
  return !E.dev;
#endif
}

cbuf cb_make(size_t bytes) {
  cbuf b;
  b.bytes = bytes;
  b.h = calloc(1, bytes ? bytes : 1);
#if defined(CONF_CUDA) || defined(CONF_HIP)
  if (E.dev) {
    b.d = dev_alloc(bytes);
    dev_set(b.d, 0, bytes);
    return b;
  }
#endif
  b.d = calloc(1, bytes ? bytes : 1);
  return b;
}

void cb_up(cbuf *b) {
#if defined(CONF_CUDA) || defined(CONF_HIP)
  if (E.dev) {
    dev_up(b->d, b->h, b->bytes);
    return;
  }
#endif
  memcpy(b->d, b->h, b->bytes);
}

void cb_down(cbuf *b) {
#if defined(CONF_CUDA) || defined(CONF_HIP)
  if (E.dev) {
    dev_down(b->h, b->d, b->bytes);
    return;
  }
#endif
  memcpy(b->h, b->d, b->bytes);
}

void cb_poison(cbuf *b) {
#if defined(CONF_CUDA) || defined(CONF_HIP)
  if (E.dev) {
    dev_set(b->d, 0xFF, b->bytes);
    return;
  }
#endif
  memset(b->d, 0xFF, b->bytes);
}

void cb_free(cbuf *b) {
  free(b->h);
#if defined(CONF_CUDA) || defined(CONF_HIP)
  if (E.dev) {
    dev_free(b->d);
    return;
  }
#endif
  free(b->d);
}

size_t conf_esize(lpattn_dtype t) {
  return t == LPATTN_F32 || t == LPATTN_I32 ? 4 : t <= LPATTN_BF16 ? 2 : 1;
}

lpattn_tensor cb_t4(const cbuf *b, int dev, lpattn_dtype dt, int64_t n0, int64_t n1, int64_t n2,
                    int64_t n3) {
  return lpattn_tensor_4d(dev ? b->d : b->h, dt, n0, n1, n2, n3);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double unif(void) { /* xorshift64 -> [0, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1p-53;
}
double conf_normal(void) {
  const double u = unif() + 1e-12, v = unif();
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

void conf_fill(cbuf *b, lpattn_dtype dt, int64_t n, double mu, double sigma) {
  for (int64_t i = 0; i < n; i++) lp_store_f32(b->h, dt, i, (float)(mu + sigma * conf_normal()));
  cb_up(b);
}

float conf_get(const void *h, lpattn_dtype dt, int64_t i) { return lp_load_f32(h, dt, i); }

double conf_relerr(const void *a, const void *b, lpattn_dtype dt, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    const double x = lp_load_f32(a, dt, i), y = lp_load_f32(b, dt, i);
    if (isnan(x) && isnan(y)) continue;
    if (isnan(x) || isnan(y)) return INFINITY;
    num += (x - y) * (x - y), den += y * y;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

int64_t conf_argmax = -1;

double conf_maxrel(const float *a, const float *b, int64_t n) {
  double m = 0;
  conf_argmax = -1;
  for (int64_t i = 0; i < n; i++) {
    if (a[i] == b[i] || (isnan(a[i]) && isnan(b[i]))) continue;
    const double e = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
    if (e != e) {
      conf_argmax = i;
      return INFINITY;
    }
    if (e > m) m = e, conf_argmax = i;
  }
  return m;
}

double conf_maxabs(const float *a, const float *b, int64_t n) {
  double m = 0;
  conf_argmax = -1;
  for (int64_t i = 0; i < n; i++) {
    if (a[i] == b[i] || (isnan(a[i]) && isnan(b[i]))) continue;
    const double e = fabs((double)a[i] - b[i]);
    if (e != e) { /* one side NaN: the worst there is */
      conf_argmax = i;
      return INFINITY;
    }
    if (e > m) m = e, conf_argmax = i;
  }
  return m;
}

static const char *OPN[OP_N] = {"attention", "quantize",      "backward", "paged_decode",
                                "paged_prefill", "kvcache_decode", "varlen", "merge"};
static int cnt[OP_N][3]; /* pass, fail, unsupported */

int conf_report(conf_op op, const char *params, lpattn_status st, lpattn_status ref_st,
                const conf_q *q, int nq) {
  char line[512];
  int n = snprintf(line, sizeof line, "%-13s %-44s", OPN[op], params), ok = 1;
  if (ref_st != LPATTN_OK) {
    snprintf(line + n, sizeof line - (size_t)n, " ref: %s  FAIL", lpattn_status_string(ref_st));
    ok = 0;
  } else if (st == LPATTN_ERR_UNSUPPORTED) {
    printf("%s %s: unsupported\n", line, E.name);
    cnt[op][2]++;
    return 1;
  } else if (st != LPATTN_OK) {
    snprintf(line + n, sizeof line - (size_t)n, " %s: %s (%s)  FAIL", E.name,
             lpattn_status_string(st), lpattn_last_error());
    ok = 0;
  } else {
    for (int i = 0; i < nq && n < (int)sizeof line - 64; i++) {
      /* within: below the bound, or bitwise (error 0, what bound 0 asks) */
      const int in = q[i].err == 0 || q[i].err < q[i].bound;
      n += snprintf(line + n, sizeof line - (size_t)n, " %s %.2e/%.1e%s", q[i].what, q[i].err,
                    q[i].bound, in ? "" : "!");
      ok &= in;
    }
    snprintf(line + n, sizeof line - (size_t)n, "  %s", ok ? "pass" : "FAIL");
  }
  printf("%s\n", line);
  cnt[op][ok ? 0 : 1]++;
  return ok;
}

int conf_summary(void) {
  int fail = 0, all[3] = {0, 0, 0};
  printf("\nsummary (%s against ref): op: pass / FAIL / unsupported\n", E.name);
  for (int op = 0; op < OP_N; op++) {
    printf("  %-13s %3d / %d / %d\n", OPN[op], cnt[op][0], cnt[op][1], cnt[op][2]);
    for (int i = 0; i < 3; i++) all[i] += cnt[op][i];
    fail += cnt[op][1];
  }
  printf("  %-13s %3d / %d / %d\n", "total", all[0], all[1], all[2]);
  printf("%s\n", fail ? "conformance: FAILED" : "conformance: ok");
  return fail ? 1 : 0;
}
