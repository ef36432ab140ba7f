/* The ref backend's row engine, shared by prefill and decode: one query row
 * folds KV tiles into its state exactly as SEMANTICS describes, in f64. */
#ifndef LPATTN_REF_INTERNAL_H
#define LPATTN_REF_INTERNAL_H

#include "formats.h"
#include "internal.h"

/* What the engine needs of a call. */
typedef struct {
  int64_t D, Bk;
  float sm_scale;
  int pasa, score_f16, mx_round_up;
  lpattn_format low;
  /* FP8_STATIC (SPEC 11): q/k/v hold E4M3 code values; a score is
   * (Q^ . K^T) * s_mul (= q_descale * k_descale * sm_scale), acc sums
   * E4M3(448 P) * V^ exactly and the row's O is acc * o_mul (= v_descale /
   * 448) / l. */
  int fp8s;
  double s_mul, o_mul;
  double softcap; /* logit softcap of every score (0 = off; core/window.h) */
} ref_cfg;

/* One KV tile as the engine consumes it; arrays are [nk x D] (low: [Bk x D],
 * zero-padded past nk). */
typedef struct {
  int low;
  int64_t nk;
  const float *k;      /* high: keys as given; high+PASA: K' (f16 values,
                          scaled); low: dequantized keys (k - kshift) */
  const float *v;      /* high: values as given; low: dequantized V */
  const float *kshift; /* PASA: the tile's shift vector (D), else NULL */
} ref_tile;

/* Running state of one row, relative to the frame G (0 without PASA). */
typedef struct {
  double m, l, r, G;
  int64_t n; /* tiles visited */
  double *acc;
} ref_row;

/* Per-thread scratch of Bk entries. */
typedef struct {
  double *s;
  float *p;
  uint8_t *codes, *scales;
} ref_scratch;

lpattn_status ref_scratch_alloc(ref_scratch *w, int64_t Bk);
void ref_scratch_free(ref_scratch *w);

void ref_row_init(ref_row *st, double *acc, int64_t D);
/* Fold keys [0, nvis) of tile t into row st; q is the row as given, qd its
 * dequantized copy (needed for low tiles). */
void ref_row_tile(const ref_cfg *cfg, ref_row *st, const float *q, const float *qd,
                  const ref_tile *t, int64_t nvis, ref_scratch *w);
/* The same for keys [first, first + nvis) of the tile (a sliding window's
 * run, lp_mask_range); the others count as masked. */
void ref_row_tile_at(const ref_cfg *cfg, ref_row *st, const float *q, const float *qd,
                     const ref_tile *t, int64_t first, int64_t nvis, ref_scratch *w);
/* O (D values), LSE, H; a row that saw nothing gives 0, -inf, 0. */
void ref_row_finish(const ref_row *st, int64_t D, float *o, float *lse, float *h);

/* Tile preparation, the same for prefill and the cache (bit-exact). */
void ref_quant_rows(const ref_cfg *cfg, const float *x, int64_t n, float *y);
void ref_quant_v(const ref_cfg *cfg, const float *v, int64_t nk, float *y);
void ref_pasa_kprime(const ref_cfg *cfg, const float *k, const float *kshift, int64_t nk,
                     float *out);
/* kshift = beta * src (f32); src is a key mean or a tile's first key. */
void ref_pasa_shift(float beta, const float *src, int64_t D, float *kshift);

/* Prefill helpers shared with the backward (ref_attention.c). */
void ref_load_rows(const lpattn_tensor *t, int64_t b, int64_t h, int64_t s0, int64_t n,
                   int64_t D, float *dst);

lpattn_status ref_attention(lpattn_ctx *ctx, const lpattn_attn_problem *pr);
lpattn_status ref_backward(lpattn_ctx *ctx, const lpattn_bwd_problem *pr);
/* quantize = 0: low tiles' backward operands unquantized (tests only). */
lpattn_status ref_backward_opts(const lpattn_bwd_problem *pr, int quantize);
lpattn_status ref_paged_decode(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                               const lpattn_kv_batch *batch, const lpattn_attn_problem *pr);

#endif
