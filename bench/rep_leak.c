/* `leak`: causal safety (SPEC 4). (1) Perturb every token after t and
 * measure the largest change of rows <= t, safe vs leaky mode. (2) Append a
 * sequence token by token to a KV cache, decode each position, and compare
 * with the prefill rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef struct {
  const char *label;
  lpattn_precision prec;
  int pasa;
  lpattn_selection sel;
} leak_variant;

static const leak_variant lv[] = {
    {"HIGH", LPATTN_PREC_HIGH, 0, LPATTN_SELECT_CAUSAL},
    {"FP8", LPATTN_PREC_FP8, 0, LPATTN_SELECT_CAUSAL},
    {"NVFP4", LPATTN_PREC_NVFP4, 0, LPATTN_SELECT_CAUSAL},
    {"MXFP4", LPATTN_PREC_MXFP4, 0, LPATTN_SELECT_CAUSAL},
    {"THRIFT k=2", LPATTN_PREC_THRIFT, 0, LPATTN_SELECT_CAUSAL},
    {"THRIFT k=2 sel=paper", LPATTN_PREC_THRIFT, 0, LPATTN_SELECT_PAPER},
    {"PASA HIGH", LPATTN_PREC_HIGH, 1, LPATTN_SELECT_CAUSAL},
    {"PASA NVFP4", LPATTN_PREC_NVFP4, 1, LPATTN_SELECT_CAUSAL},
};
enum { NLV = sizeof lv / sizeof lv[0] };

static void params_of(const leak_variant *v, int leaky, lpattn_attn_params *ap) {
  lpattn_attn_params_init(ap);
  ap->causal = 1;
  ap->precision = v->prec;
  ap->pasa = v->pasa;
  ap->selection = v->sel;
  ap->leaky = leaky;
  ap->thrift_k = 2; /* > 1, so the selection matters */
}

/* Replace every token after t (Q, K and V) with values of another scale. */
static void perturb_after(bench_problem *p, int64_t t, bench_rng *r) {
  const int64_t D = p->D;
  for (int64_t bh = 0; bh < p->B * p->Hq; bh++)
    for (int64_t i = (t + 1) * D; i < p->Sq * D; i++)
      p->q[bh * p->Sq * D + i] = (float)(3.0 + 4.0 * rng_normal(r));
  for (int64_t bh = 0; bh < p->B * p->Hkv; bh++)
    for (int64_t i = (t + 1) * D; i < p->Skv * D; i++) {
      p->k[bh * p->Skv * D + i] = (float)(-2.0 + 4.0 * rng_normal(r));
      p->v[bh * p->Skv * D + i] = (float)(5.0 + 8.0 * rng_normal(r));
    }
  problem_round_f16(p);
}

static int future_leak(const bench_opts *o, lpattn_ctx *ctx) {
  const int64_t H = 2, S = o->quick ? 256 : 512, D = 128, t = S / 2 + 5;
  bench_problem a, b;
  if (problem_alloc(&a, 1, H, H, S, S, D) || problem_alloc(&b, 1, H, H, S, S, D)) return 1;
  bench_rng rng;
  rng_seed(&rng, o->seed);
  gen_attnlike(&a, &rng);
  problem_round_f16(&a);
  memcpy(b.q, a.q, sizeof(float) * (size_t)(H * S * D));
  memcpy(b.k, a.k, sizeof(float) * (size_t)(H * S * D));
  memcpy(b.v, a.v, sizeof(float) * (size_t)(H * S * D));
  perturb_after(&b, t, &rng);
  printf(
      "== leak (the causal-leak test of \"Future leakage in block-quantized attention\"):\n"
      "   H=%lld S=%lld D=%lld causal, f16 inputs; every token after t=%lld perturbed;\n"
      "   change = max |O_a - O_b| over rows <= t (0 and bitwise equal = no leak)\n",
      (long long)H, (long long)S, (long long)D, (long long)t);
  bench_views wa, wb;
  views_make(&wa, &a, LPATTN_F16);
  views_make(&wb, &b, LPATTN_F16);
  float *oa = malloc(sizeof(float) * (size_t)(H * S * D)),
        *ob = malloc(sizeof(float) * (size_t)(H * S * D));
  float *la = malloc(sizeof(float) * (size_t)(H * S)),
        *lb = malloc(sizeof(float) * (size_t)(H * S));
  bench_table tab;
  table_init(&tab, "leak_future", "precision|mode|max_change_O|max_change_LSE|bitwise_equal");
  int rc = 0;
  for (int i = 0; i < NLV; i++)
    for (int leaky = 0; leaky < 2; leaky++) {
      if (leaky && lv[i].prec == LPATTN_PREC_HIGH) continue; /* leaky has no meaning there */
      lpattn_attn_params ap;
      params_of(&lv[i], leaky, &ap);
      lpattn_status s1 = bench_attention(ctx, &wa, &a, &ap, oa, la, NULL, NULL, NULL);
      lpattn_status s2 = bench_attention(ctx, &wb, &b, &ap, ob, lb, NULL, NULL, NULL);
      if (s1 != LPATTN_OK || s2 != LPATTN_OK) {
        table_row(&tab, "%s|%s|%s", lv[i].label, leaky ? "leaky" : "safe",
                  lpattn_status_string(s1 != LPATTN_OK ? s1 : s2));
        rc |= (s1 != LPATTN_ERR_UNSUPPORTED && s1 != LPATTN_OK) ||
              (s2 != LPATTN_ERR_UNSUPPORTED && s2 != LPATTN_OK);
        continue;
      }
      double dmax = 0.0, lmax = 0.0;
      int equal = 1;
      for (int64_t h = 0; h < H; h++) {
        const size_t off = (size_t)(h * S * D), n = (size_t)((t + 1) * D);
        equal &= !memcmp(oa + off, ob + off, n * sizeof(float)) &&
                 !memcmp(la + h * S, lb + h * S, (size_t)(t + 1) * sizeof(float));
        for (size_t j = 0; j < n; j++) {
          double d = fabs((double)oa[off + j] - ob[off + j]);
          if (!(d <= dmax)) dmax = d;
        }
        for (int64_t r = 0; r <= t; r++) {
          double d = fabs((double)la[h * S + r] - lb[h * S + r]);
          if (!(d <= lmax)) lmax = d;
        }
      }
      table_row(&tab, "%s|%s|%.3e|%.3e|%s", lv[i].label, leaky ? "leaky" : "safe", dmax, lmax,
                equal ? "yes" : "no");
      /* The contract: safe causal calls never leak (paper selection is documented leaky). */
      if (!leaky && lv[i].sel == LPATTN_SELECT_CAUSAL && !equal) {
        fprintf(stderr, "leak: %s safe mode leaks\n", lv[i].label);
        rc = 1;
      }
    }
  table_emit(&tab, o);
  views_free(&wa), views_free(&wb);
  free(oa), free(ob), free(la), free(lb);
  problem_free(&a), problem_free(&b);
  return rc;
}

/* A [1, H, 1, D] view of position t of a [1, H, S, D] f32 tensor. */
static lpattn_tensor token_view(float *base, int64_t H, int64_t S, int64_t D, int64_t t) {
  lpattn_tensor v = lpattn_tensor_4d(base + t * D, LPATTN_F32, 1, H, 1, D);
  v.stride[1] = S * D;
  v.stride[0] = H * S * D;
  return v;
}

static int prefill_vs_decode(const bench_opts *o, lpattn_ctx *ctx) {
  const int64_t H = 2, S = o->quick ? 192 : 320, D = 128;
  const int tile = 64, thrift_k = 2;
  bench_problem p;
  if (problem_alloc(&p, 1, H, H, S, S, D)) return 1;
  gen_attnlike_f16(&p, o->seed + 5, ATTN_ALL);
  printf(
      "== prefill vs decode: H=%lld S=%lld D=%lld, tile %d, f32 inputs; the sequence is\n"
      "   appended one token at a time to an lpattn_kv_cache and each position decoded\n"
      "   (THRIFT with thrift_k=%d in both); diff = max |decode - prefill| over all rows\n",
      (long long)H, (long long)S, (long long)D, tile, thrift_k);
  bench_views w;
  views_make(&w, &p, LPATTN_F32);
  float *pre = malloc(sizeof(float) * (size_t)(H * S * D)),
        *dec = malloc(sizeof(float) * (size_t)(H * S * D));
  bench_table tab;
  table_init(&tab, "leak_decode", "precision|max_abs_diff|rel_diff|rows_bitwise_equal");
  int rc = 0;
  for (int i = 0; i < NLV; i++) {
    if (lv[i].sel == LPATTN_SELECT_PAPER) continue; /* decode has only causal selection */
    lpattn_attn_params ap;
    params_of(&lv[i], 0, &ap);
    ap.block_q = ap.block_k = tile;
    ap.thrift_k = thrift_k;
    lpattn_status st = bench_attention(ctx, &w, &p, &ap, pre, NULL, NULL, NULL, NULL);
    lpattn_kv_cache_params cp;
    lpattn_kv_cache_params_init(&cp);
    cp.num_kv_heads = (int)H, cp.num_q_heads = (int)H, cp.head_dim = (int)D;
    cp.max_tokens = S, cp.tile = tile, cp.high_dtype = LPATTN_F32;
    cp.precision = lv[i].prec, cp.pasa = lv[i].pasa;
    lpattn_kv_cache *cache = NULL;
    if (st == LPATTN_OK) st = lpattn_kv_cache_create(ctx, &cp, &cache);
    for (int64_t t = 0; t < S && st == LPATTN_OK; t++) {
      lpattn_tensor k = token_view(p.k, H, S, D, t), v = token_view(p.v, H, S, D, t);
      lpattn_tensor q = token_view(p.q, H, S, D, t), out = token_view(dec, H, S, D, t);
      st = lpattn_kv_cache_append(ctx, cache, 0, &k, &v, NULL);
      if (st == LPATTN_OK) st = lpattn_decode(ctx, cache, &q, &out, &ap, NULL);
      if (st == LPATTN_OK) st = lpattn_synchronize(ctx);
    }
    lpattn_kv_cache_free(cache);
    if (st != LPATTN_OK) {
      table_row(&tab, "%s|%s", lv[i].label, lpattn_status_string(st));
      rc |= st != LPATTN_ERR_UNSUPPORTED;
      continue;
    }
    double dmax = 0.0, num = 0.0, den = 0.0;
    int64_t same = 0;
    for (int64_t r = 0; r < H * S; r++) {
      same += !memcmp(pre + r * D, dec + r * D, sizeof(float) * (size_t)D);
      for (int64_t d = 0; d < D; d++) {
        double x = dec[r * D + d], y = pre[r * D + d];
        if (!(fabs(x - y) <= dmax)) dmax = fabs(x - y);
        num += (x - y) * (x - y), den += y * y;
      }
    }
    table_row(&tab, "%s|%.3e|%.3e|%lld/%lld", lv[i].label, dmax, sqrt(num / den), (long long)same,
              (long long)(H * S));
  }
  table_emit(&tab, o);
  views_free(&w);
  free(pre), free(dec);
  problem_free(&p);
  return rc;
}

int report_leak(const bench_opts *o) {
  const lpattn_backend be = bench_default_backend(o);
  lpattn_ctx *ctx = NULL;
  lpattn_status st = bench_open(o, be, &ctx);
  if (st != LPATTN_OK) return fprintf(stderr, "leak: %s\n", lpattn_status_string(st)), 1;
  printf("(leak report, backend %s)\n", lpattn_backend_name(be));
  int rc = future_leak(o, ctx);
  rc |= prefill_vs_decode(o, ctx);
  lpattn_free(ctx);
  return rc;
}
