/* CUDA backend timings (one JSON object per line on stdout), read by
 * bench_cuda.py, which times PyTorch SDPA in the same run and writes
 * bench/RESULTS_cuda.md.
 *   prefill: B=1, H=32, D=128, f16, S in {1k, 4k, 16k, 32k}, causal and not, every precision
 *   quant:   lpattn_quantize of one [1, 32, S, 128] f16 tensor (the pass a low-precision
 *            prefill runs for each of Q, K (AXIS_D) and V (AXIS_S)) against a device copy
 *   decode:  B in {1, 16}, 32 q / 8 kv heads, D=128, context {8k, 32k, 128k}, Sq = 1
 * Usage: bench_cuda [prefill|prefill-high|prefill-16k|prefill-dims|fp8s|quant|decode|all] (prefill-high:
 *        precision HIGH only; prefill-16k: every precision at S = 16k; prefill-dims: HIGH at D = 64, 80, 96, 128, 256, S = 4k and 16k,
 *        and each D's TF/s at the true D against D = 128's) */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpattn.h"

#define CUDA_OK(x)                                                            \
  do {                                                                        \
    if ((x) != cudaSuccess) {                                                 \
      fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(cudaGetLastError())); \
      exit(1);                                                                \
    }                                                                         \
  } while (0)
#define LP_OK(x)                                                                  \
  do {                                                                            \
    lpattn_status s_ = (x);                                                       \
    if (s_ != LPATTN_OK) {                                                        \
      fprintf(stderr, "%s: %s\n", #x, lpattn_status_string(s_));                  \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

static const char *PN[] = {"high", "fp8", "nvfp4", "mxfp4", "thrift"};

/* Random f16 on the device (host generation, one copy). */
static void *rand_f16(size_t n, float mean, float sd, unsigned seed) {
  uint16_t *h = malloc(n * 2);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    float acc = 0;
    for (int k = 0; k < 4; k++) { /* sum of uniforms: cheap, bell-shaped */
      x = x * 1664525u + 1013904223u;
      acc += (float)(x >> 8) * (1.0f / 16777216.0f) - 0.5f;
    }
    h[i] = lpattn_f32_to_f16(mean + sd * acc * 1.7320508f);
  }
  void *d;
  CUDA_OK(cudaMalloc(&d, n * 2));
  CUDA_OK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* tf: where not NULL, HIGH's TF/s (FLOPs at the true D) of S = Ss[si], causal c at tf[2 si + c] */
static void bench_prefill(lpattn_ctx *ctx, int last_prec, int64_t D, const int64_t *Ss, int nS, double *tf) {
  const int64_t B = 1, H = 32;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  for (int si = 0; si < nS; si++) {
    const int64_t S = Ss[si];
    size_t n = (size_t)(B * H * S * D);
    void *q = rand_f16(n, 0, 1, 1), *k = rand_f16(n, 0.2f, 1, 2), *v = rand_f16(n, 0, 1, 3), *o;
    CUDA_OK(cudaMalloc(&o, n * 2));
    lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F16, B, H, S, D), tk = lpattn_tensor_4d(k, LPATTN_F16, B, H, S, D),
                  tv = lpattn_tensor_4d(v, LPATTN_F16, B, H, S, D), to = lpattn_tensor_4d(o, LPATTN_F16, B, H, S, D);
    for (int causal = 0; causal < 2; causal++)
      for (int prec = 0; prec <= last_prec; prec++) {
        lpattn_attn_params p;
        lpattn_attn_params_init(&p);
        p.precision = (lpattn_precision)prec, p.causal = causal;
        int reps = S >= 16384 ? 5 : 20;
        float t[32];
        if (tf && prec == 0) tf[2 * si + causal] = 0.0;
        if (lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL) == LPATTN_ERR_UNSUPPORTED) continue; /* variant not built */
        for (int w = 0; w < 2; w++) LP_OK(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL));
        for (int r = 0; r < reps; r++) {
          cudaEventRecord(e0, 0);
          LP_OK(lpattn_attention(ctx, &tq, &tk, &tv, &to, &p, NULL));
          cudaEventRecord(e1, 0);
          CUDA_OK(cudaEventSynchronize(e1));
          cudaEventElapsedTime(&t[r], e0, e1);
        }
        qsort(t, (size_t)reps, sizeof(float), cmpf);
        double ms = t[reps / 2];
        double flop = 4.0 * B * H * S * S * D * (causal ? 0.5 : 1.0);
        printf("{\"kind\":\"prefill\",\"S\":%lld,\"D\":%lld,\"causal\":%d,\"prec\":\"%s\",\"ms\":%.4f,\"tflops\":%.2f}\n",
               (long long)S, (long long)D, causal, PN[prec], ms, flop / (ms * 1e-3) / 1e12);
        fflush(stdout);
        if (tf && prec == 0) tf[2 * si + causal] = flop / (ms * 1e-3) / 1e12;
      }
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o);
  }
}

/* prefill-dims (issue 27): HIGH at each D of DIMS, S = 4k and 16k, then each
 * D's per-FLOP rate (TF/s at the true D) against D = 128's: rows
 * "prefill-dims" with the ratio and whether it is within 15%. */
static void bench_dims(lpattn_ctx *ctx, const int64_t *Sd) {
  static const int64_t DIMS[] = {64, 80, 96, 128, 256}; /* 256: -Dvariants=all or CUDA's default set */
  enum { ND = sizeof DIMS / sizeof DIMS[0], R128 = 3 };
  double tf[ND][4];
  for (int di = 0; di < ND; di++) bench_prefill(ctx, LPATTN_PREC_HIGH, DIMS[di], Sd, 2, tf[di]);
  for (int di = 0; di < ND; di++)
    for (int i = 0; i < 4; i++) {
      const double r = tf[R128][i] > 0 ? tf[di][i] / tf[R128][i] : 0.0;
      printf("{\"kind\":\"prefill-dims\",\"S\":%lld,\"D\":%lld,\"causal\":%d,\"tflops\":%.2f,"
             "\"tflops_d128\":%.2f,\"ratio\":%.3f,\"within_15pct\":%s}\n",
             (long long)Sd[i / 2], (long long)DIMS[di], i % 2, tf[di][i], tf[R128][i], r, r >= 0.85 ? "true" : "false");
    }
}

/* Static-scale FP8 (SPEC 11), B=1, H=32, D=128: timed from E4M3 inputs (as
 * FlashAttention-3 is; the V^T pass included) and from f16 inputs (the cast
 * by the descales included). Rows "fp8s-e4m3" and "fp8s-f16". */
static void bench_fp8s(lpattn_ctx *ctx, const int64_t *Ss, int nS) {
  const int64_t B = 1, H = 32, D = 128;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  float hd[32];
  for (int i = 0; i < 32; i++) hd[i] = 1.0f / 64.0f;
  float *dd;
  CUDA_OK(cudaMalloc((void **)&dd, sizeof hd));
  CUDA_OK(cudaMemcpy(dd, hd, sizeof hd, cudaMemcpyHostToDevice));
  for (int si = 0; si < nS; si++) {
    const int64_t S = Ss[si];
    const size_t n = (size_t)(B * H * S * D);
    void *f[3], *c[3], *o;
    uint8_t *hc = malloc(n);
    uint16_t *hf = malloc(n * 2);
    for (int t = 0; t < 3; t++) {
      f[t] = rand_f16(n, t == 1 ? 0.2f : 0.0f, 1, (unsigned)(t + 1));
      CUDA_OK(cudaMemcpy(hf, f[t], n * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < n; i++) hc[i] = lpattn_f32_to_e4m3(lpattn_f16_to_f32(hf[i]) / hd[0]);
      CUDA_OK(cudaMalloc(&c[t], n));
      CUDA_OK(cudaMemcpy(c[t], hc, n, cudaMemcpyHostToDevice));
    }
    free(hc), free(hf);
    CUDA_OK(cudaMalloc(&o, n * 2));
    lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F16, B, H, S, D);
    for (int causal = 0; causal < 2; causal++)
      for (int in8 = 1; in8 >= 0; in8--) {
        lpattn_tensor t[3];
        for (int i = 0; i < 3; i++) t[i] = lpattn_tensor_4d(in8 ? c[i] : f[i], in8 ? LPATTN_E4M3 : LPATTN_F16, B, H, S, D);
        lpattn_attn_params p;
        lpattn_attn_params_init(&p);
        p.precision = LPATTN_PREC_FP8_STATIC, p.causal = causal;
        p.q_descale = lpattn_tensor_4d(dd, LPATTN_F32, 1, 1, B, H);
        p.k_descale = p.q_descale, p.v_descale = p.q_descale;
        if (lpattn_attention(ctx, &t[0], &t[1], &t[2], &to, &p, NULL) != LPATTN_OK) {
          fprintf(stderr, "fp8s: %s\n", lpattn_last_error());
          continue;
        }
        const int reps = S >= 16384 ? 7 : 20;
        float ts[32];
        for (int r = 0; r < reps; r++) {
          cudaEventRecord(e0, 0);
          LP_OK(lpattn_attention(ctx, &t[0], &t[1], &t[2], &to, &p, NULL));
          cudaEventRecord(e1, 0);
          CUDA_OK(cudaEventSynchronize(e1));
          cudaEventElapsedTime(&ts[r], e0, e1);
        }
        qsort(ts, (size_t)reps, sizeof(float), cmpf);
        const double ms = ts[reps / 2], flop = 4.0 * B * H * S * S * D * (causal ? 0.5 : 1.0);
        printf("{\"kind\":\"prefill\",\"S\":%lld,\"D\":%lld,\"causal\":%d,\"prec\":\"%s\",\"ms\":%.4f,\"tflops\":%.2f}\n",
               (long long)S, (long long)D, causal, in8 ? "fp8s-e4m3" : "fp8s-f16", ms, flop / (ms * 1e-3) / 1e12);
        fflush(stdout);
      }
    for (int t = 0; t < 3; t++) cudaFree(f[t]), cudaFree(c[t]);
    cudaFree(o);
  }
  cudaFree(dd);
}

/* Median ms of 20 runs of fn (after 3 warm-ups), CUDA events on stream 0. */
static double time_ms(void (*fn)(void *), void *arg) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  float t[20];
  for (int w = 0; w < 3; w++) fn(arg);
  for (int r = 0; r < 20; r++) {
    cudaEventRecord(e0, 0);
    fn(arg);
    cudaEventRecord(e1, 0);
    CUDA_OK(cudaEventSynchronize(e1));
    cudaEventElapsedTime(&t[r], e0, e1);
  }
  qsort(t, 20, sizeof(float), cmpf);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  return t[10];
}

typedef struct {
  lpattn_ctx *ctx;
  lpattn_tensor x;
  lpattn_qtensor q;
  lpattn_quant_params p;
  void *dst;
  size_t bytes;
} quant_run;
static void run_quantize(void *r) {
  quant_run *a = r;
  LP_OK(lpattn_quantize(a->ctx, &a->x, &a->q, &a->p));
}
static void run_copy(void *r) {
  quant_run *a = r;
  CUDA_OK(cudaMemcpyAsync(a->dst, a->x.data, a->bytes, cudaMemcpyDeviceToDevice, 0));
}

/* GB/s = (bytes read + bytes written) / time, for the quantizer and for a
 * device-to-device copy of the input (read + write). */
static void bench_quant(lpattn_ctx *ctx) {
  const int64_t B = 1, H = 32, D = 128;
  const int64_t Ss[2] = {4096, 16384};
  const lpattn_format F[3] = {LPATTN_FMT_FP8, LPATTN_FMT_NVFP4, LPATTN_FMT_MXFP4};
  const char *FN[3] = {"fp8", "nvfp4", "mxfp4"};
  for (int si = 0; si < 2; si++) {
    const int64_t S = Ss[si], shape[4] = {B, H, S, D};
    quant_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.bytes = (size_t)(B * H * S * D) * 2;
    r.x = lpattn_tensor_4d(rand_f16(r.bytes / 2, 0, 1, 5), LPATTN_F16, B, H, S, D);
    CUDA_OK(cudaMalloc(&r.dst, r.bytes));
    const double copy_ms = time_ms(run_copy, &r), copy_gbs = 2.0 * r.bytes / (copy_ms * 1e6);
    for (int fi = 0; fi < 3; fi++)
      for (int ax = 0; ax < 2; ax++) {
        size_t cb, sb, oc;
        LP_OK(lpattn_qtensor_sizes(F[fi], (lpattn_axis)ax, 64, shape, &cb, &sb, &oc));
        r.q.format = F[fi], r.q.axis = (lpattn_axis)ax, r.q.tile = 64;
        memcpy(r.q.shape, shape, sizeof shape);
        CUDA_OK(cudaMalloc((void **)&r.q.codes, cb));
        CUDA_OK(cudaMalloc((void **)&r.q.scales, sb ? sb : 1));
        CUDA_OK(cudaMalloc((void **)&r.q.outer, (oc ? oc : 1) * 4));
        lpattn_quant_params_init(&r.p);
        r.p.format = F[fi], r.p.axis = (lpattn_axis)ax, r.p.tile = 64;
        const double ms = time_ms(run_quantize, &r), gbs = (r.bytes + cb + sb + oc * 4.0) / (ms * 1e6);
        printf("{\"kind\":\"quant\",\"S\":%lld,\"fmt\":\"%s\",\"axis\":\"%s\",\"ms\":%.4f,\"gbs\":%.0f,"
               "\"copy_ms\":%.4f,\"copy_gbs\":%.0f}\n",
               (long long)S, FN[fi], ax ? "S" : "D", ms, gbs, copy_ms, copy_gbs);
        fflush(stdout);
        cudaFree(r.q.codes), cudaFree(r.q.scales), cudaFree(r.q.outer);
      }
    cudaFree((void *)r.x.data), cudaFree(r.dst);
  }
}

/* Bytes of the KV cache a decode step must read: every key and value once,
 * in the storage of its tile (two newest tiles high, the rest low). */
static double kv_bytes(int prec, int64_t B, int64_t Hkv, int64_t ctx, int64_t D) {
  double elems = 2.0 * B * Hkv * ctx * D;
  switch (prec) {
    case LPATTN_PREC_FP8: return elems * 1.0 + 2.0 * B * Hkv * ctx * 4 / 2; /* codes + K outer per token (V per channel: small) */
    case LPATTN_PREC_NVFP4: return elems * (0.5 + 1.0 / 16) + 2.0 * B * Hkv * ctx * 4 / 2;
    case LPATTN_PREC_MXFP4: return elems * (0.5 + 1.0 / 32);
    default: return elems * 2.0;
  }
}

static void bench_decode(lpattn_ctx *ctx) {
  const int64_t Hq = 32, Hkv = 8, D = 128;
  const int64_t Bs[2] = {1, 16}, Cs[3] = {8192, 32768, 131072};
  const int precs[3] = {LPATTN_PREC_HIGH, LPATTN_PREC_FP8, LPATTN_PREC_NVFP4};
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  const int64_t chunk = 8192;
  void *kc = rand_f16((size_t)(Hkv * chunk * D), 0.2f, 1, 11), *vc = rand_f16((size_t)(Hkv * chunk * D), 0, 1, 12);
  for (int bi = 0; bi < 2; bi++)
    for (int ci = 0; ci < 3; ci++)
      for (int pi = 0; pi < 3; pi++) {
        const int64_t B = Bs[bi], C = Cs[ci];
        lpattn_kv_cache_params cp;
        lpattn_kv_cache_params_init(&cp);
        cp.num_seqs = (int)B, cp.num_q_heads = (int)Hq, cp.num_kv_heads = (int)Hkv, cp.head_dim = (int)D;
        cp.max_tokens = C, cp.precision = (lpattn_precision)precs[pi], cp.high_dtype = LPATTN_F16;
        lpattn_kv_cache *cache;
        LP_OK(lpattn_kv_cache_create(ctx, &cp, &cache));
        lpattn_tensor tk = lpattn_tensor_4d(kc, LPATTN_F16, 1, Hkv, chunk, D), tv = lpattn_tensor_4d(vc, LPATTN_F16, 1, Hkv, chunk, D);
        for (int s = 0; s < B; s++)
          for (int64_t done = 0; done < C; done += chunk) LP_OK(lpattn_kv_cache_append(ctx, cache, s, &tk, &tv, NULL));
        void *q = rand_f16((size_t)(B * Hq * D), 0, 1, 13), *o;
        CUDA_OK(cudaMalloc(&o, (size_t)(B * Hq * D) * 2));
        lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F16, B, Hq, 1, D), to = lpattn_tensor_4d(o, LPATTN_F16, B, Hq, 1, D);
        lpattn_attn_params p;
        lpattn_attn_params_init(&p);
        for (int w = 0; w < 3; w++) LP_OK(lpattn_decode(ctx, cache, &tq, &to, &p, NULL));
        float t[32];
        const int reps = 20;
        for (int r = 0; r < reps; r++) {
          cudaEventRecord(e0, 0);
          LP_OK(lpattn_decode(ctx, cache, &tq, &to, &p, NULL));
          cudaEventRecord(e1, 0);
          CUDA_OK(cudaEventSynchronize(e1));
          cudaEventElapsedTime(&t[r], e0, e1);
        }
        qsort(t, reps, sizeof(float), cmpf);
        double ms = t[reps / 2], bytes = kv_bytes(precs[pi], B, Hkv, C, D);
        printf("{\"kind\":\"decode\",\"B\":%lld,\"ctx\":%lld,\"prec\":\"%s\",\"ms\":%.4f,\"gbs\":%.1f}\n",
               (long long)B, (long long)C, PN[precs[pi]], ms, bytes / (ms * 1e-3) / 1e9);
        fflush(stdout);
        cudaFree(q), cudaFree(o);
        lpattn_kv_cache_free(cache);
      }
  cudaFree(kc), cudaFree(vc);
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "all";
  lpattn_ctx *ctx;
  if (lpattn_create(LPATTN_BACKEND_CUDA, NULL, &ctx) != LPATTN_OK) {
    fprintf(stderr, "no usable CUDA device\n");
    return 77;
  }
  const int64_t Ss[4] = {1024, 4096, 16384, 32768}, Sd[2] = {4096, 16384};
  if (!strcmp(what, "prefill") || !strcmp(what, "all")) bench_prefill(ctx, LPATTN_PREC_THRIFT, 128, Ss, 4, NULL);
  if (!strcmp(what, "prefill-high")) bench_prefill(ctx, LPATTN_PREC_HIGH, 128, Ss, 4, NULL);
  if (!strcmp(what, "prefill-16k")) bench_prefill(ctx, LPATTN_PREC_THRIFT, 128, Ss + 2, 1, NULL);
  if (!strcmp(what, "prefill-dims")) bench_dims(ctx, Sd);
  if (!strcmp(what, "fp8s")) bench_fp8s(ctx, Ss + 1, 2); /* static FP8 at 4k and 16k */
  if (!strcmp(what, "quant") || !strcmp(what, "all")) bench_quant(ctx);
  if (!strcmp(what, "decode") || !strcmp(what, "all")) bench_decode(ctx);
  lpattn_free(ctx);
  return 0;
}
