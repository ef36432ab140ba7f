/* The conformance case list: the same cases on every backend (the backend
 * is the program's argument). A case a backend answers UNSUPPORTED for is
 * reported as such and counted per op, so its gaps show. Shapes are small
 * enough for the whole list to run in seconds on ref (f64) and under
 * ASan+UBSan. */
#ifndef LPATTN_CONF_CASES_H
#define LPATTN_CONF_CASES_H
#include "conf.h"

#define HI LPATTN_PREC_HIGH
#define F8 LPATTN_PREC_FP8
#define FS LPATTN_PREC_FP8_STATIC
#define NV LPATTN_PREC_NVFP4
#define MX LPATTN_PREC_MXFP4
#define TH LPATTN_PREC_THRIFT
#define FNV LPATTN_FMT_NVFP4
#define FMX LPATTN_FMT_MXFP4
#define FF8 LPATTN_FMT_FP8
#define T32 LPATTN_F32
#define T16 LPATTN_F16
#define TBF LPATTN_BF16

/* lpattn_attention: every precision (THRIFT with each low format, PASA on
 * HIGH and low tiles), causal and not, GQA, Sq < Skv and Sq > Skv (rows that
 * see no key), head dims 8, 40, 64, 80, 96, 111, 128, f32/f16/bf16 in and out
 * (CUDA: 80 on its D = 96 variant).
 * aux 2: lse + entropy (+ THRIFT's selection), 1: lse only; a sliding
 * window, a softcap. Block sizes 64, THRIFT budget 0.3 (as tests/cpu and
 * tests/cuda). */
typedef struct {
  lpattn_precision prec;
  lpattn_format low; /* THRIFT's low format */
  int causal, pasa;
  lpattn_dtype in, out;
  int64_t B, Hq, Hkv, Sq, Skv, D;
  int aux;
  int win, wl, wr; /* win 1: window_left/right = wl/wr (-1 unbounded) */
  float softcap;
  int rule, paper; /* THRIFT: lpattn_thrift_rule flags; paper 1: selection = PAPER */
} conf_attn_case;

static const conf_attn_case conf_attn_cases[] = {
    {HI, FNV, 1, 0, T32, T32, 1, 4, 2, 160, 224, 64, 2, 0, 0, 0, 0.0f},
    {HI, FNV, 0, 0, T16, T32, 1, 4, 1, 100, 230, 128, 2, 0, 0, 0, 0.0f},
    {HI, FNV, 1, 0, TBF, TBF, 1, 2, 2, 150, 90, 64, 2, 0, 0, 0, 0.0f},
    {HI, FNV, 1, 0, T16, T32, 1, 2, 1, 113, 203, 40, 2, 0, 0, 0, 0.0f},
    {HI, FNV, 1, 0, T16, T32, 1, 2, 1, 70, 70, 8, 1, 0, 0, 0, 0.0f},
    {F8, FNV, 1, 0, T16, T32, 2, 4, 2, 200, 200, 64, 2, 0, 0, 0, 0.0f},
    {F8, FNV, 0, 0, TBF, T32, 1, 2, 1, 100, 230, 128, 2, 0, 0, 0, 0.0f},
    {F8, FNV, 1, 0, T16, T16, 1, 2, 1, 100, 160, 80, 2, 0, 0, 0, 0.0f},
    {NV, FNV, 1, 0, T16, T32, 1, 2, 1, 192, 192, 128, 2, 0, 0, 0, 0.0f},
    {NV, FNV, 0, 0, T16, TBF, 1, 4, 2, 150, 90, 64, 2, 0, 0, 0, 0.0f},
    {NV, FNV, 1, 0, T16, T32, 1, 2, 1, 129, 129, 111, 1, 0, 0, 0, 0.0f},
    {NV, FNV, 1, 0, T32, T32, 1, 2, 1, 129, 129, 64, 2, 0, 0, 0, 0.0f},
    {MX, FNV, 1, 0, T16, T32, 1, 4, 2, 200, 200, 64, 2, 0, 0, 0, 0.0f},
    {MX, FNV, 0, 0, T32, T32, 1, 2, 1, 96, 130, 40, 2, 0, 0, 0, 0.0f},
    {MX, FNV, 0, 0, TBF, T32, 1, 2, 1, 100, 230, 128, 2, 0, 0, 0, 0.0f},
    {TH, FNV, 1, 0, T16, T32, 1, 2, 2, 256, 256, 64, 2, 0, 0, 0, 0.0f},
    {TH, FF8, 0, 0, T16, T32, 1, 2, 1, 128, 320, 64, 2, 0, 0, 0, 0.0f},
    {TH, FMX, 1, 0, TBF, T32, 1, 4, 2, 200, 200, 64, 2, 0, 0, 0, 0.0f},
    {HI, FNV, 1, 1, T16, T32, 1, 2, 1, 192, 192, 128, 2, 0, 0, 0, 0.0f},
    {HI, FNV, 0, 1, T16, T32, 1, 2, 1, 129, 129, 64, 2, 0, 0, 0, 0.0f},
    {F8, FNV, 1, 1, T16, T32, 1, 2, 1, 129, 129, 64, 2, 0, 0, 0, 0.0f},
    {NV, FNV, 1, 1, T16, T32, 1, 2, 1, 192, 256, 128, 2, 0, 0, 0, 0.0f},
    {TH, FNV, 1, 1, T16, T32, 1, 2, 1, 256, 256, 64, 2, 0, 0, 0, 0.0f},
    /* THRIFT selection rules (SEMANTICS "THRIFT selection rules"): SINK 1, KMAX 2,
     * GQA 4 and their OR, causal and paper selection, Sq != Skv, two of the
     * GPU's 8-query-tile KMAX blocks, D 111 and 40 (padded there), D 256 */
    {TH, FNV, 1, 0, T16, T32, 1, 4, 2, 600, 600, 64, 2, 0, 0, 0, 0.0f, 7, 0},
    {TH, FNV, 1, 0, TBF, T32, 1, 2, 1, 600, 600, 128, 2, 0, 0, 0, 0.0f, 2, 1},
    {TH, FF8, 0, 0, T16, T32, 1, 2, 1, 128, 320, 64, 2, 0, 0, 0, 0.0f, 1, 0},
    {TH, FMX, 1, 0, T16, T32, 2, 4, 1, 200, 456, 64, 2, 0, 0, 0, 0.0f, 4, 0},
    {TH, FNV, 1, 0, T16, T32, 1, 4, 2, 300, 300, 111, 2, 0, 0, 0, 0.0f, 6, 0},
    {TH, FNV, 0, 0, TBF, T32, 1, 2, 2, 256, 384, 256, 2, 0, 0, 0, 0.0f, 3, 0},
    {TH, FNV, 1, 0, T16, T32, 1, 2, 1, 320, 320, 40, 2, 0, 0, 0, 0.0f, 3, 1},
    /* sliding window and softcap (every backend's prefill) */
    {HI, FNV, 1, 0, T16, T32, 1, 4, 2, 200, 200, 64, 2, 1, 100, -1, 0.0f},
    {NV, FNV, 0, 0, T16, T32, 1, 2, 1, 150, 230, 64, 2, 1, 64, 32, 30.0f},
    {HI, FNV, 1, 0, TBF, T32, 1, 2, 1, 129, 129, 128, 2, 0, 0, 0, 20.0f},
    {F8, FNV, 1, 0, T16, T32, 1, 4, 2, 300, 300, 128, 2, 1, 100, -1, 0.0f, 0, 0},
    {MX, FNV, 0, 0, TBF, T32, 1, 2, 1, 200, 150, 64, 2, 1, 40, 20, 15.0f, 0, 0},
    {HI, FNV, 1, 0, T16, T16, 1, 2, 1, 100, 230, 80, 2, 1, 16, -1, 0.0f, 0, 0},
};
/* Head dims 96 and 80 (CUDA: its D = 96 prefill variant, 80 padded to it;
 * issue 27), run after every other op (conf_attention_late) so that the
 * random inputs of the cases above and of the other ops stay those their
 * bounds were set on. */
static const conf_attn_case conf_attn_late_cases[] = {
    {HI, FNV, 1, 0, T16, T32, 1, 4, 2, 300, 420, 96, 2, 0, 0, 0, 0.0f, 0, 0},
    {HI, FNV, 0, 0, TBF, TBF, 1, 2, 1, 200, 330, 80, 2, 0, 0, 0, 0.0f, 0, 0},
    {NV, FNV, 1, 0, TBF, T32, 1, 2, 1, 150, 200, 96, 2, 0, 0, 0, 0.0f, 0, 0},
};

/* lpattn_quantize + lpattn_dequantize: every format and axis, RNE and
 * stochastic, the MXFP4 round-up scale rule, f32/f16/bf16 inputs, D 64 and
 * 128; values with zero groups, tiny values, a NaN and a -inf. */
typedef struct {
  lpattn_format fmt;
  lpattn_axis axis;
  int sr, mx_up;
  lpattn_dtype in;
  int64_t D;
} conf_quant_case;

static const conf_quant_case conf_quant_cases[] = {
    {FNV, LPATTN_AXIS_D, 0, 0, T32, 64},  {FNV, LPATTN_AXIS_D, 1, 0, TBF, 64},
    {FNV, LPATTN_AXIS_S, 0, 0, T16, 128}, {FNV, LPATTN_AXIS_S, 1, 0, T32, 64},
    {FMX, LPATTN_AXIS_D, 0, 0, T32, 64},  {FMX, LPATTN_AXIS_D, 1, 1, T16, 128},
    {FMX, LPATTN_AXIS_S, 0, 1, TBF, 64},  {FMX, LPATTN_AXIS_S, 1, 0, T32, 64},
    {FF8, LPATTN_AXIS_D, 0, 0, T16, 64},  {FF8, LPATTN_AXIS_D, 1, 0, T32, 128},
    {FF8, LPATTN_AXIS_S, 0, 0, T32, 64},  {FF8, LPATTN_AXIS_S, 1, 0, TBF, 64},
};

/* lpattn_attention_backward (f16 inputs, f32 O/LSE from ref's forward given
 * to both sides, f32 gradients, seed 7): HIGH and each low format, causal
 * and not, GQA, head dims 40, 64, 128. */
typedef struct {
  lpattn_precision prec;
  int causal;
  int64_t B, Hq, Hkv, Sq, Skv, D;
} conf_bwd_case;

static const conf_bwd_case conf_bwd_cases[] = {
    {HI, 1, 1, 4, 2, 100, 100, 64}, {HI, 0, 1, 2, 1, 100, 150, 128}, {HI, 1, 1, 2, 1, 70, 90, 40},
    {F8, 1, 1, 4, 2, 100, 100, 64}, {NV, 1, 1, 4, 2, 100, 100, 64},  {NV, 0, 1, 2, 1, 100, 150, 128},
    {MX, 1, 1, 4, 2, 100, 100, 64}, {TH, 1, 1, 2, 1, 128, 128, 64},
};

/* The paged pool: append (one sequence a call, 50 tokens at a time, queries
 * recorded), then lpattn_paged_decode of three sequences of 300, 70 and 129
 * tokens in one call, Sq 1 and 5; f16 high pages, page 64, Hq 8, Hkv 2,
 * D 128. prefill: lpattn_paged_prefill of 40 new tokens onto two of them.
 * FP8_STATIC: each slot's descales set first (lpattn_kv_pool_set_descales),
 * q_descale in the call. win 1: params.window_left = wl (-1 unbounded) and
 * softcap cap (decode is causal: no window_right) on every precision, a
 * window smaller than a page, of part of the sequences, the softcap alone. */
typedef struct {
  lpattn_precision prec;
  int pasa, prefill;
  int win, wl;
  float cap;
} conf_paged_case;

static const conf_paged_case conf_paged_cases[] = {
    {HI, 0, 0}, {F8, 0, 0}, {NV, 0, 0}, {MX, 0, 0}, {TH, 0, 0}, {NV, 1, 0}, {HI, 1, 0},
    {HI, 0, 1}, {NV, 0, 1}, {FS, 0, 0}, {FS, 0, 1}, {F8, 0, 1}, {MX, 0, 1}, {TH, 0, 1}, {NV, 1, 1},
    /* sliding window and softcap */
    {HI, 0, 0, 1, 100, 0.0f}, {F8, 0, 0, 1, 100, 0.0f}, {NV, 0, 0, 1, 100, 5.0f}, {MX, 0, 0, 1, 20, 0.0f},
    {TH, 0, 0, 1, 150, 0.0f}, {FS, 0, 0, 1, 100, 0.0f}, {HI, 0, 0, 1, -1, 10.0f}, {NV, 0, 1, 1, 100, 0.0f},
    {TH, 0, 1, 1, 60, 8.0f},
};

/* MLA decode through the paged pool (conf_mla.c, issue 27 item 3): head dims
 * 576 (Q, K) and 512 (V, out), one kv head, Hq 16, v appended as a view of
 * k's first 512 channels (50 tokens a call), lengths 300, 70, 129, Sq 1 and
 * 2, f16 pages and queries; in this order (conf_mla.c names them). */
static const lpattn_precision conf_mla_precs[] = {HI, F8, NV};

/* lpattn_kv_cache (the same three sequences appended 50 tokens a call,
 * f16 high tiles, tile 64), then lpattn_decode of all three, Sq 1 and 3. */
typedef struct {
  lpattn_precision prec;
  int pasa;
} conf_cache_case;

static const conf_cache_case conf_cache_cases[] = {
    {HI, 0}, {F8, 0}, {NV, 0}, {MX, 0}, {TH, 0}, {NV, 1},
};

/* lpattn_attention_varlen: packed BSHD f16 (one bf16), sequences with no
 * queries, a decode row, Sq > Skv, several tiles. */
typedef struct {
  lpattn_precision prec;
  int causal, pasa;
  lpattn_dtype in;
} conf_varlen_case;

static const conf_varlen_case conf_varlen_cases[] = {
    {HI, 0, 0, T16}, {HI, 1, 0, T16}, {HI, 1, 0, TBF}, {F8, 1, 0, T16}, {NV, 0, 0, T16},
    {NV, 1, 0, T16}, {MX, 1, 0, T16}, {TH, 1, 0, T16}, {HI, 1, 1, T16},
};

#endif
