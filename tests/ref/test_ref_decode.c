/* Decode against the host KV cache equals the rows of a causal prefill with
 * the same tile (SEMANTICS "Decode"), in every precision; completed tiles
 * are never re-quantized; capacity is enforced. */
#include "kvcache.h"
#include "refutil.h"

enum { T = 32, H = 4, HKV = 2, D = 64 };

typedef struct {
  const char *name;
  lpattn_precision prec;
  lpattn_format low;
  int pasa, mx_up;
  lpattn_dtype store; /* high copies in the cache */
} variant;

static const variant variants[] = {
    {"high", LPATTN_PREC_HIGH, LPATTN_FMT_NVFP4, 0, 0, LPATTN_F32},
    {"fp8", LPATTN_PREC_FP8, LPATTN_FMT_NVFP4, 0, 0, LPATTN_F32},
    {"nvfp4", LPATTN_PREC_NVFP4, LPATTN_FMT_NVFP4, 0, 0, LPATTN_F32},
    {"mxfp4", LPATTN_PREC_MXFP4, LPATTN_FMT_NVFP4, 0, 0, LPATTN_F32},
    {"mxfp4 round-up", LPATTN_PREC_MXFP4, LPATTN_FMT_NVFP4, 0, 1, LPATTN_F32},
    {"thrift nvfp4", LPATTN_PREC_THRIFT, LPATTN_FMT_NVFP4, 0, 0, LPATTN_F32},
    {"thrift fp8", LPATTN_PREC_THRIFT, LPATTN_FMT_FP8, 0, 0, LPATTN_F32},
    {"pasa high", LPATTN_PREC_HIGH, LPATTN_FMT_NVFP4, 1, 0, LPATTN_F32},
    {"pasa nvfp4", LPATTN_PREC_NVFP4, LPATTN_FMT_NVFP4, 1, 0, LPATTN_F32},
    {"pasa thrift mxfp4", LPATTN_PREC_THRIFT, LPATTN_FMT_MXFP4, 1, 0, LPATTN_F32},
    /* f16 / bf16 storage: exact for inputs already representable in it. */
    {"nvfp4 f16 cache", LPATTN_PREC_NVFP4, LPATTN_FMT_NVFP4, 0, 0, LPATTN_F16},
    {"pasa thrift bf16 cache", LPATTN_PREC_THRIFT, LPATTN_FMT_NVFP4, 1, 0, LPATTN_BF16},
};

static lpattn_attn_params attn_params(const variant *va) {
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = va->prec, p.thrift_low = va->low, p.pasa = va->pasa;
  p.mx_scale_round_up = va->mx_up, p.causal = 1, p.block_q = p.block_k = T, p.thrift_k = 2;
  return p;
}

static lpattn_kv_cache *make_cache(lpattn_ctx *ctx, const variant *va, int seqs, int64_t cap) {
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_seqs = seqs, cp.num_kv_heads = HKV, cp.num_q_heads = H, cp.head_dim = D;
  cp.max_tokens = cap, cp.tile = T, cp.high_dtype = va->store, cp.precision = va->prec;
  cp.thrift_low = va->low, cp.pasa = va->pasa, cp.mx_scale_round_up = va->mx_up;
  lpattn_kv_cache *c = NULL;
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &cp, &c), LPATTN_OK);
  return c;
}

/* Positions [s0, s0 + n) of a contiguous [1, h, S, D] array. */
static lpattn_tensor span(float *x, int64_t h, int64_t S, int64_t s0, int64_t n) {
  lpattn_tensor t = lpattn_tensor_4d(x + s0 * D, LPATTN_F32, 1, h, n, D);
  t.stride[0] = h * S * D, t.stride[1] = S * D;
  return t;
}

/* Inputs of a variant: k and v representable in the cache's storage. */
static void fill_kv(rng_t *r, const variant *va, float *k, float *v, int64_t n) {
  fill_normal(r, k, n, 0.5, 1.0);
  fill_normal(r, v, n, 0.0, 1.0);
  for (int64_t i = 0; va->store != LPATTN_F32 && i < n; i++) {
    if (va->store == LPATTN_F16) {
      k[i] = lpattn_f16_to_f32(lpattn_f32_to_f16(k[i])), v[i] = lpattn_f16_to_f32(lpattn_f32_to_f16(v[i]));
    } else {
      k[i] = lpattn_bf16_to_f32(lpattn_f32_to_bf16(k[i])), v[i] = lpattn_bf16_to_f32(lpattn_f32_to_bf16(v[i]));
    }
  }
}

/* Largest |a - b| / |b| between decode rows and prefill rows. */
static double row_diff(const float *a, const float *b, int64_t n) {
  double w = 0;
  for (int64_t i = 0; i < n; i++) {
    if (a[i] == b[i]) continue; /* also -inf == -inf */
    w = fmax(w, fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), 1e-30));
  }
  return w;
}

/* Token by token: append (q given on even positions, recorded by decode on
 * odd ones), decode that position, compare with prefill row t. */
static void token_by_token(lpattn_ctx *ctx, const variant *va) {
  enum { N = 5 * T + 7 };
  shape_t sh = {1, H, HKV, N, N, D};
  static float q[H * N * D], k[HKV * N * D], v[HKV * N * D], o[H * N * D], l[H * N], e[H * N];
  static float snap_k[N / T][HKV][T * D], snap_v[N / T][HKV][T * D], tk[T * D], tv[T * D];
  float od[H * D], ld[H], ed[H];
  int have[N / T][HKV], compared = 0;
  memset(have, 0, sizeof have);
  rng_t r = {41};
  fill_normal(&r, q, H * N * D, 0.2, 1.0);
  fill_kv(&r, va, k, v, HKV * N * D);
  lpattn_attn_params p = attn_params(va);
  CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o, l, e, NULL, 0), LPATTN_OK);
  lpattn_kv_cache *c = make_cache(ctx, va, 1, N);
  if (!c) return;
  double worst = 0;
  int codes_kept = 1;
  for (int64_t t = 0; t < N; t++) {
    lpattn_tensor tk1 = span(k, HKV, N, t, 1), tv1 = span(v, HKV, N, t, 1), tq1 = span(q, H, N, t, 1);
    CHECK_STATUS(lpattn_kv_cache_append(ctx, c, 0, &tk1, &tv1, t % 2 ? NULL : &tq1), LPATTN_OK);
    lpattn_tensor to = lpattn_tensor_4d(od, LPATTN_F32, 1, H, 1, D);
    lpattn_attn_aux aux;
    lpattn_attn_aux_init(&aux);
    aux.lse = lpattn_tensor_4d(ld, LPATTN_F32, 1, H, 1, 1);
    aux.entropy = lpattn_tensor_4d(ed, LPATTN_F32, 1, H, 1, 1);
    CHECK_STATUS(lpattn_decode(ctx, c, &tq1, &to, &p, &aux), LPATTN_OK);
    for (int h = 0; h < H; h++) {
      worst = fmax(worst, row_diff(od + h * D, o + (h * N + t) * D, D));
      worst = fmax(worst, row_diff(ld + h, l + h * N + t, 1));
      worst = fmax(worst, row_diff(ed + h, e + h * N + t, 1));
    }
    /* A completed tile's stored codes never change once written. */
    for (int64_t j = 0; va->prec != LPATTN_PREC_HIGH && j < (t + 1) / T; j++)
      for (int h = 0; h < HKV; h++) {
        if (!lp_kv_read_low(c, 0, h, j, tk, tv)) continue; /* completes with the next token */
        if (!have[j][h]) { /* just quantized: take a snapshot */
          memcpy(snap_k[j][h], tk, sizeof tk), memcpy(snap_v[j][h], tv, sizeof tv);
          have[j][h] = 1;
          continue;
        }
        compared++;
        codes_kept &= !memcmp(snap_k[j][h], tk, sizeof tk) && !memcmp(snap_v[j][h], tv, sizeof tv);
      }
  }
  CHECK(worst <= 1e-12, "%s: decode differs from prefill rows by %g", va->name, worst);
  CHECK(codes_kept && (va->prec == LPATTN_PREC_HIGH || compared > 0),
        "%s: a completed tile changed (%d comparisons)", va->name, compared);
  /* Full: one more token does not fit. */
  int64_t len = -1;
  CHECK_STATUS(lpattn_kv_cache_length(c, 0, &len), LPATTN_OK);
  CHECK(len == N, "%s: length %lld", va->name, (long long)len);
  lpattn_tensor tk1 = span(k, HKV, N, 0, 1), tv1 = span(v, HKV, N, 0, 1);
  CHECK_STATUS(lpattn_kv_cache_append(ctx, c, 0, &tk1, &tv1, NULL), LPATTN_ERR_CACHE_FULL);
  lpattn_kv_cache_free(c);
}

/* A prefill whose last query tile is a single row, and whose last KV tile
 * ends at that row: the tile must be diagonal (high) as in decode, not full
 * (SEMANTICS classifies on the unclipped key range). Decode of that row
 * equals the prefill row. */
static void single_row_tail(lpattn_ctx *ctx, const variant *va, int64_t n) {
  enum { NMAX = 4 * T + 1 };
  static float q[H * NMAX * D], k[HKV * NMAX * D], v[HKV * NMAX * D];
  static float o[H * NMAX * D], l[H * NMAX], e[H * NMAX];
  float qd[H * D], od[H * D], ld[H], ed[H];
  shape_t sh = {1, H, HKV, n, n, D};
  rng_t r = {43};
  fill_normal(&r, q, H * n * D, 0.2, 1.0);
  fill_kv(&r, va, k, v, HKV * n * D);
  lpattn_attn_params p = attn_params(va);
  CHECK_STATUS(run_attention(ctx, sh, q, k, v, &p, o, l, e, NULL, 0), LPATTN_OK);
  lpattn_kv_cache *c = make_cache(ctx, va, 1, n);
  if (!c) return;
  lpattn_tensor tk = span(k, HKV, n, 0, n), tv = span(v, HKV, n, 0, n), tq = span(q, H, n, 0, n);
  CHECK_STATUS(lpattn_kv_cache_append(ctx, c, 0, &tk, &tv, &tq), LPATTN_OK);
  for (int h = 0; h < H; h++) memcpy(qd + h * D, q + (h * n + n - 1) * D, 4 * D);
  lpattn_tensor q1 = lpattn_tensor_4d(qd, LPATTN_F32, 1, H, 1, D);
  lpattn_tensor to = lpattn_tensor_4d(od, LPATTN_F32, 1, H, 1, D);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lpattn_tensor_4d(ld, LPATTN_F32, 1, H, 1, 1);
  aux.entropy = lpattn_tensor_4d(ed, LPATTN_F32, 1, H, 1, 1);
  CHECK_STATUS(lpattn_decode(ctx, c, &q1, &to, &p, &aux), LPATTN_OK);
  double worst = 0;
  for (int h = 0; h < H; h++) {
    worst = fmax(worst, row_diff(od + h * D, o + (h * n + n - 1) * D, D));
    worst = fmax(worst, row_diff(ld + h, l + h * n + n - 1, 1));
    worst = fmax(worst, row_diff(ed + h, e + h * n + n - 1, 1));
  }
  CHECK(worst <= 1e-12, "%s: S = %lld, last row: decode differs from prefill by %g", va->name,
        (long long)n, worst);
  lpattn_kv_cache_free(c);
}

/* Two sequences of different lengths, appended in chunks, then Sq = T rows
 * decoded at once (they span two query tiles). Both lengths leave a last
 * query tile of one row. */
static void multi_row(lpattn_ctx *ctx, const variant *va) {
  enum { N0 = 5 * T + 1, N1 = 3 * T + 1, SQ = T };
  static float q[2][H * N0 * D], k[2][HKV * N0 * D], v[2][HKV * N0 * D];
  static float o[2][H * N0 * D], l[2][H * N0], e[2][H * N0];
  static float qd[2 * H * SQ * D], od[2 * H * SQ * D], ld[2 * H * SQ], ed[2 * H * SQ];
  const int64_t n[2] = {N0, N1};
  rng_t r = {42};
  lpattn_attn_params p = attn_params(va);
  lpattn_kv_cache *c = make_cache(ctx, va, 2, N0);
  if (!c) return;
  for (int s = 0; s < 2; s++) {
    shape_t sh = {1, H, HKV, n[s], n[s], D};
    fill_normal(&r, q[s], H * n[s] * D, 0.2, 1.0);
    fill_kv(&r, va, k[s], v[s], HKV * n[s] * D);
    CHECK_STATUS(run_attention(ctx, sh, q[s], k[s], v[s], &p, o[s], l[s], e[s], NULL, 0), LPATTN_OK);
    for (int64_t t0 = 0; t0 < n[s]; t0 += 7) {
      int64_t m = n[s] - t0 < 7 ? n[s] - t0 : 7;
      lpattn_tensor tk = span(k[s], HKV, n[s], t0, m), tv = span(v[s], HKV, n[s], t0, m);
      lpattn_tensor tq = span(q[s], H, n[s], t0, m);
      CHECK_STATUS(lpattn_kv_cache_append(ctx, c, s, &tk, &tv, &tq), LPATTN_OK);
    }
    for (int h = 0; h < H; h++)
      memcpy(qd + ((s * H + h) * SQ) * D, q[s] + (h * n[s] + n[s] - SQ) * D, 4 * SQ * D);
  }
  lpattn_tensor tq = lpattn_tensor_4d(qd, LPATTN_F32, 2, H, SQ, D);
  lpattn_tensor to = lpattn_tensor_4d(od, LPATTN_F32, 2, H, SQ, D);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = lpattn_tensor_4d(ld, LPATTN_F32, 2, H, SQ, 1);
  aux.entropy = lpattn_tensor_4d(ed, LPATTN_F32, 2, H, SQ, 1);
  CHECK_STATUS(lpattn_decode(ctx, c, &tq, &to, &p, &aux), LPATTN_OK);
  double worst = 0;
  for (int s = 0; s < 2; s++)
    for (int h = 0; h < H; h++) {
      const int64_t row = h * n[s] + n[s] - SQ, mine = (s * H + h) * SQ;
      worst = fmax(worst, row_diff(od + mine * D, o[s] + row * D, SQ * D));
      worst = fmax(worst, row_diff(ld + mine, l[s] + row, SQ));
      worst = fmax(worst, row_diff(ed + mine, e[s] + row, SQ));
    }
  CHECK(worst <= 1e-12, "%s: multi-row decode differs by %g", va->name, worst);
  /* A chunk larger than what is left is refused whole. */
  lpattn_tensor tk = span(k[1], HKV, N1, 0, N0 - N1 + 1), tv = span(v[1], HKV, N1, 0, N0 - N1 + 1);
  CHECK_STATUS(lpattn_kv_cache_append(ctx, c, 1, &tk, &tv, NULL), LPATTN_ERR_CACHE_FULL);
  int64_t len = -1;
  CHECK_STATUS(lpattn_kv_cache_length(c, 1, &len), LPATTN_OK);
  CHECK(len == N1, "refused append changed the length to %lld", (long long)len);
  lpattn_kv_cache_free(c);
}

int main(void) {
  lpattn_ctx *ctx = ref_ctx();
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    token_by_token(ctx, &variants[i]);
    multi_row(ctx, &variants[i]);
    single_row_tail(ctx, &variants[i], 2 * T + 1);
    single_row_tail(ctx, &variants[i], 4 * T + 1);
  }
  lpattn_free(ctx);
  return test_finish();
}
