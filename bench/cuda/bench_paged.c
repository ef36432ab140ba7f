/* Decode through the paged KV pool on the CUDA backend (SPEC 9, issue 12):
 * 32 q heads, 8 kv heads, D = 128, f16 queries, one query token per
 * sequence. For each (B, context, precision): a pool sized for the batch,
 * filled once by batched appends, then lpattn_paged_decode timed with CUDA
 * events (median of `iters` runs). Prints one JSON line per case: time,
 * stored bytes the decode reads, device bytes per token by the library's
 * count and by cudaMemGetInfo around the pool's creation; and one line with
 * the device's measured copy bandwidth (cudaMemcpy d2d, read + write).
 * THRIFT (NVFP4 low tiles, budget 5%) appends queries with the tokens, so
 * its selection sees real query means.
 * `bench_paged mla`: MLA pools instead (issue 27 item 3: head dims 576/512,
 * one kv head, V appended as a view of K's first 512 channels), B 16, 32k,
 * Hq 16 and 128, HIGH, FP8, NVFP4; bytes are those stored and read (V rows
 * are stored at 576, core/kvpage.h).
 * Each row also gives the host's part of a call (host_us: lpattn_paged_decode's
 * return) and the GPU's (pipe_ms: calls back to back, no sync between them).
 * Usage: bench_paged [quick | mla] | bench_paged B CONTEXT PRECISION (one case) */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvpage.h"
#include "lpattn.h"

#define CUDA_OK(x) \
  do { if ((x) != cudaSuccess) { fprintf(stderr, "%s failed\n", #x); exit(1); } } while (0)
#define LP_OK(x) \
  do { lpattn_status s_ = (x); if (s_ != LPATTN_OK) { fprintf(stderr, "%s: %s\n", #x, lpattn_status_string(s_)); exit(1); } } while (0)

enum { T = 64 };
static int HQ = 32, HKV = 8, D = 128, DV = 128; /* the shape (main: MLA's) */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static void *dalloc(size_t n) {
  void *p = NULL;
  CUDA_OK(cudaMalloc(&p, n));
  return p;
}

static void fill_f16(void *d, size_t n, float scale, unsigned seed) {
  uint16_t *h = malloc(n * 2);
  uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    h[i] = lpattn_f32_to_f16(scale * ((float)(r >> 40) / 8388608.0f - 1.0f));
  }
  CUDA_OK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
  free(h);
}

static float copy_gbs(void) {
  const size_t n = (size_t)1 << 30;
  void *a = dalloc(n), *b = dalloc(n);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  float t[10];
  for (int i = 0; i < 12; i++) {
    cudaEventRecord(e0, 0);
    CUDA_OK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0));
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    if (i >= 2) cudaEventElapsedTime(&t[i - 2], e0, e1);
  }
  qsort(t, 10, sizeof *t, cmpf);
  cudaFree(a), cudaFree(b);
  return (float)(2.0 * n / (t[5] * 1e-3) / 1e9);
}

static const char *pname(lpattn_precision p) {
  return p == LPATTN_PREC_HIGH ? "high" : p == LPATTN_PREC_FP8 ? "fp8" : p == LPATTN_PREC_NVFP4 ? "nvfp4"
         : p == LPATTN_PREC_MXFP4 ? "mxfp4" : p == LPATTN_PREC_FP8_STATIC ? "fp8_static" : "thrift";
}

static void run(lpattn_ctx *ctx, int B, int ctxlen, lpattn_precision prec, int iters) {
  const int maxp = ctxlen / T + 1;
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = HKV, pp.num_q_heads = HQ, pp.head_dim = D, pp.head_dim_v = DV, pp.page_size = T, pp.precision = prec;
  pp.num_pages = B * maxp, pp.num_slots = B;
  size_t page_bytes = 0, slot_bytes = 0, pool_bytes = 0;
  LP_OK(lpattn_kv_pool_size(&pp, &page_bytes, &slot_bytes, &pool_bytes));
  cudaDeviceSynchronize();
  size_t f0, f1, tot;
  CUDA_OK(cudaMemGetInfo(&f0, &tot));
  lpattn_kv_pool *pool = NULL;
  lpattn_status st = lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool);
  if (st != LPATTN_OK) {
    printf("{\"kind\":\"paged\",\"B\":%d,\"ctx\":%d,\"prec\":\"%s\",\"status\":\"%s\"}\n", B, ctxlen, pname(prec),
           lpattn_status_string(st));
    return;
  }
  cudaDeviceSynchronize();
  CUDA_OK(cudaMemGetInfo(&f1, &tot));
  const double tokens = (double)B * ctxlen;
  /* tables: sequence s owns pages [s*maxp, (s+1)*maxp) */
  int32_t *tab = malloc(sizeof(int32_t) * B * maxp), *slots = malloc(4 * B), *lens = malloc(4 * B);
  for (int s = 0; s < B; s++) {
    slots[s] = s;
    for (int i = 0; i < maxp; i++) tab[s * maxp + i] = s * maxp + i;
  }
  int32_t *dtab = dalloc(4 * (size_t)B * maxp), *dslots = dalloc(4 * B), *dlens = dalloc(4 * B);
  CUDA_OK(cudaMemcpy(dtab, tab, 4 * (size_t)B * maxp, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dslots, slots, 4 * B, cudaMemcpyHostToDevice));
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = B;
  b.slots = lpattn_tensor_4d(dslots, LPATTN_I32, 1, 1, 1, B);
  b.lengths = lpattn_tensor_4d(dlens, LPATTN_I32, 1, 1, 1, B);
  b.page_table = lpattn_tensor_4d(dtab, LPATTN_I32, 1, 1, B, maxp);
  if (prec == LPATTN_PREC_FP8_STATIC) { /* every slot's descales: 1/256 (values ~U(-1, 1)) */
    float *dsc = dalloc(4 * (size_t)B * HKV);
    float *h = malloc(4 * (size_t)B * HKV);
    for (int i = 0; i < B * HKV; i++) h[i] = 1.0f / 256.0f;
    CUDA_OK(cudaMemcpy(dsc, h, 4 * (size_t)B * HKV, cudaMemcpyHostToDevice));
    const lpattn_tensor ts = lpattn_tensor_4d(dslots, LPATTN_I32, 1, 1, 1, B);
    const lpattn_tensor td = lpattn_tensor_4d(dsc, LPATTN_F32, 1, 1, B, HKV);
    LP_OK(lpattn_kv_pool_set_descales(ctx, pool, &ts, &td, &td));
    CUDA_OK(cudaDeviceSynchronize());
    cudaFree(dsc), free(h);
  }
  /* fill: appends of `step` tokens to every sequence (the same values each time) */
  const int step = 2048;
  void *kb = dalloc((size_t)B * HKV * step * D * 2), *vb = dalloc((size_t)B * HKV * step * D * 2);
  fill_f16(kb, (size_t)B * HKV * step * D, 1.0f, 1), fill_f16(vb, (size_t)B * HKV * step * D, 1.0f, 2);
  const int thrift = prec == LPATTN_PREC_THRIFT;
  void *qb = thrift ? dalloc((size_t)B * HQ * step * D * 2) : NULL;
  if (thrift) fill_f16(qb, (size_t)B * HQ * step * D, 1.0f, 4);
  for (int at = 0; at < ctxlen; at += step) {
    const int n = ctxlen - at < step ? ctxlen - at : step;
    for (int s = 0; s < B; s++) lens[s] = at;
    CUDA_OK(cudaMemcpy(dlens, lens, 4 * B, cudaMemcpyHostToDevice));
    lpattn_tensor k = lpattn_tensor_4d(kb, LPATTN_F16, B, HKV, n, D), v = lpattn_tensor_4d(vb, LPATTN_F16, B, HKV, n, D);
    k.stride[1] = v.stride[1] = (int64_t)step * D, k.stride[0] = v.stride[0] = (int64_t)HKV * step * D;
    if (DV != D) v = k, v.shape[3] = DV; /* MLA: V is K's first DV channels */
    lpattn_tensor qa = lpattn_tensor_4d(qb, LPATTN_F16, B, HQ, n, D);
    qa.stride[1] = (int64_t)step * D, qa.stride[0] = (int64_t)HQ * step * D;
    b.max_length = at + n;
    LP_OK(lpattn_kv_append(ctx, pool, &b, &k, &v, thrift ? &qa : NULL));
  }
  cudaFree(qb);
  for (int s = 0; s < B; s++) lens[s] = ctxlen;
  CUDA_OK(cudaMemcpy(dlens, lens, 4 * B, cudaMemcpyHostToDevice));
  b.max_length = ctxlen;
  cudaFree(kb), cudaFree(vb);
  void *q = dalloc((size_t)B * HQ * D * 2), *o = dalloc((size_t)B * HQ * DV * 2);
  fill_f16(q, (size_t)B * HQ * D, 1.0f, 3);
  lpattn_tensor qt = lpattn_tensor_4d(q, LPATTN_F16, B, HQ, 1, D), ot = lpattn_tensor_4d(o, LPATTN_F16, B, HQ, 1, DV);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.thrift_budget = 0.05f;
  for (int i = 0; i < 3; i++) LP_OK(lpattn_paged_decode(ctx, pool, &b, &qt, &ot, &ap, NULL));
  CUDA_OK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  float *t = malloc(sizeof(float) * iters), *h = malloc(sizeof(float) * iters);
  for (int i = 0; i < iters; i++) {
    cudaEventRecord(e0, 0);
    const double h0 = now_us();
    LP_OK(lpattn_paged_decode(ctx, pool, &b, &qt, &ot, &ap, NULL));
    h[i] = (float)(now_us() - h0); /* the host's part of the call */
    cudaEventRecord(e1, 0);
    CUDA_OK(cudaEventSynchronize(e1));
    cudaEventElapsedTime(&t[i], e0, e1);
  }
  qsort(t, iters, sizeof *t, cmpf);
  qsort(h, iters, sizeof *h, cmpf);
  const float ms = t[iters / 2], host_us = h[iters / 2];
  /* the GPU's part: calls back to back, the host's work hidden behind the
   * kernels of the call before (what an engine's step of layers sees) */
  float pipe = 0.0f;
  cudaEventRecord(e0, 0);
  for (int i = 0; i < iters; i++) LP_OK(lpattn_paged_decode(ctx, pool, &b, &qt, &ot, &ap, NULL));
  cudaEventRecord(e1, 0);
  CUDA_OK(cudaEventSynchronize(e1));
  cudaEventElapsedTime(&pipe, e0, e1);
  pipe /= (float)iters;
  /* stored bytes a decode reads: completed tiles in their format, the
   * current tile high (ring or page); FP8_STATIC every tile's codes */
  lp_kv_layout L;
  LP_OK(lp_kv_layout_init(&L, &pp));
  const double ntiles = (ctxlen + T - 1) / T, hi_tile = (double)HKV * T * D * 2 * 2;
  const double per_seq = prec == LPATTN_PREC_HIGH ? ntiles * hi_tile
                         : L.fp8s ? ntiles * HKV * (double)L.head_bytes
                                  : (ntiles - 1) * HKV * (double)L.head_bytes + hi_tile;
  const double bytes = per_seq * B;
  printf("{\"kind\":\"paged\",\"hq\":%d,\"hkv\":%d,\"d\":%d,\"dv\":%d,\"B\":%d,\"ctx\":%d,\"prec\":\"%s\",\"ms\":%.4f,\"p10\":%.4f,\"p90\":%.4f,"
         "\"pipe_ms\":%.4f,\"host_us\":%.1f,\"bytes\":%.0f,\"gbs\":%.1f,\"lib_bytes_per_token\":%.1f,\"dev_bytes_per_token\":%.1f}\n",
         HQ, HKV, D, DV, B, ctxlen, pname(prec), ms, t[iters / 10], t[iters * 9 / 10], pipe, host_us, bytes, bytes / (ms * 1e-3) / 1e9,
         (double)lpattn_kv_pool_bytes(pool) / tokens, (double)(f0 - f1) / tokens);
  fflush(stdout);
  free(t), free(h), free(tab), free(slots), free(lens);
  cudaFree(q), cudaFree(o), cudaFree(dtab), cudaFree(dslots), cudaFree(dlens);
  lpattn_kv_pool_free(pool);
}

int main(int argc, char **argv) {
  const int quick = argc > 1 && !strcmp(argv[1], "quick");
  lpattn_ctx *ctx = NULL;
  if (lpattn_create(LPATTN_BACKEND_CUDA, NULL, &ctx) != LPATTN_OK) {
    fprintf(stderr, "no CUDA device\n");
    return 77;
  }
  enum { NP = 6 };
  const lpattn_precision precs[NP] = {LPATTN_PREC_HIGH, LPATTN_PREC_FP8, LPATTN_PREC_NVFP4, LPATTN_PREC_MXFP4,
                                      LPATTN_PREC_THRIFT, LPATTN_PREC_FP8_STATIC};
  if (argc >= 4) { /* one case (profiling): B context precision */
    for (int p = 0; p < NP; p++)
      if (!strcmp(argv[3], pname(precs[p]))) run(ctx, atoi(argv[1]), atoi(argv[2]), precs[p], 5);
    lpattn_free(ctx);
    return 0;
  }
  printf("{\"kind\":\"copy\",\"gbs\":%.1f}\n", copy_gbs());
  if (argc > 1 && !strcmp(argv[1], "mla")) { /* B 16, 32k; Hq 16 and 128 */
    D = 576, DV = 512, HKV = 1;
    for (int g = 16; g <= 128; g *= 8)
      for (int p = 0; p < 3; p++) HQ = g, run(ctx, 16, 32768, precs[p], 50);
    lpattn_free(ctx);
    return 0;
  }
  const int Bs[3] = {1, 16, 64}, ctxs[3] = {8192, 32768, 131072};
  for (int bi = 0; bi < 3; bi++)
    for (int ci = 0; ci < 3; ci++) {
      if (Bs[bi] == 64 && ctxs[ci] > 32768) continue;
      if (quick && (ctxs[ci] != 131072 || Bs[bi] == 64)) continue;
      for (int p = 0; p < NP; p++) run(ctx, Bs[bi], ctxs[ci], precs[p], 50);
    }
  lpattn_free(ctx);
  return 0;
}
