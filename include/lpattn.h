/*
 * lpattn: low-precision attention kernels (FP4/FP8/f16) behind one C API.
 *
 * The numerical contract is SPEC.md (shipped as docs/SPEC.md): formats are
 * bit-exact on every backend, attention is compared with the `ref` backend
 * within stated tolerances, and causal attention never lets a row depend on
 * a future token (SPEC 4), whatever the precision.
 *
 * Conventions
 * - Every function returns an lpattn_status; LPATTN_OK is 0. Arguments are
 *   validated in full before any backend touches memory: a call that fails
 *   validation writes nothing, except that a failed lpattn_*_create sets
 *   *out to NULL (when out is not NULL).
 * - Tensors are described, never owned: lpattn_tensor is a view (pointer,
 *   dtype, 4-D shape, strides in elements). The caller keeps ownership of all
 *   memory passed in. Objects created by lpattn_*_create are owned by the
 *   caller and released with the matching NULL-safe *_free.
 * - Host backends (ref, cpu) take host pointers; GPU backends (cuda, hip) take
 *   device pointers and run asynchronously on the context's stream.
 * - Thread safety: a context may be used by one thread at a time (it owns a
 *   thread pool or stream). Distinct contexts are independent. The pure
 *   helpers (status strings, formats, budget, beta, merge on host) are
 *   reentrant.
 * - Params structs begin with `struct_size`; initialise them with the
 *   matching lpattn_*_params_init(), which sets defaults and the size. A
 *   newer library accepts an older, smaller struct (missing fields take their
 *   defaults); an unknown larger one is rejected with LPATTN_ERR_PARAMS_SIZE.
 */
#ifndef LPATTN_H
#define LPATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(LPATTN_DLL_EXPORT)
#define LPATTN_API __declspec(dllexport)
#elif defined(__GNUC__)
#define LPATTN_API __attribute__((visibility("default")))
#else
#define LPATTN_API
#endif

/* ---- version ------------------------------------------------------------ */
#define LPATTN_VERSION_MAJOR 0
#define LPATTN_VERSION_MINOR 2
#define LPATTN_VERSION_PATCH 0
#define LPATTN_VERSION_NUMBER \
  (LPATTN_VERSION_MAJOR * 10000 + LPATTN_VERSION_MINOR * 100 + LPATTN_VERSION_PATCH)
#define LPATTN_STRINGIFY_(x) #x
#define LPATTN_STRINGIFY(x) LPATTN_STRINGIFY_(x)
#define LPATTN_VERSION_STRING                                              \
  LPATTN_STRINGIFY(LPATTN_VERSION_MAJOR) "." LPATTN_STRINGIFY(LPATTN_VERSION_MINOR) "." \
  LPATTN_STRINGIFY(LPATTN_VERSION_PATCH)

/* Run-time version, to compare with the macros the caller compiled against. */
LPATTN_API unsigned lpattn_version_number(void);
LPATTN_API const char *lpattn_version_string(void);

/* ---- status codes (values are stable; new codes are only appended) ------ */
typedef enum {
  LPATTN_OK = 0,
  LPATTN_ERR_INVALID_ARGUMENT = 1,   /* a value out of its documented range */
  LPATTN_ERR_NULL_POINTER = 2,       /* a required pointer is NULL */
  LPATTN_ERR_BAD_SHAPE = 3,          /* shapes disagree or are not positive */
  LPATTN_ERR_BAD_STRIDE = 4,         /* negative, overlapping output, or unsupported */
  LPATTN_ERR_BAD_DTYPE = 5,          /* dtype not accepted for this tensor */
  LPATTN_ERR_BAD_HEAD_DIM = 6,       /* D outside [8, 256], or one a paged pool or qtensor cannot group */
  LPATTN_ERR_BAD_GQA = 7,            /* Hq % Hkv != 0 */
  LPATTN_ERR_SIZE_OVERFLOW = 8,      /* an extent or byte count overflows int64/size_t */
  LPATTN_ERR_UNSUPPORTED = 9,        /* valid, but this backend lacks the variant */
  LPATTN_ERR_UNSUPPORTED_HARDWARE = 10, /* backend not built in, or no device */
  LPATTN_ERR_OUT_OF_MEMORY = 11,
  LPATTN_ERR_NONFINITE = 12,         /* non-finite input with check_finite set */
  LPATTN_ERR_BACKEND = 13,           /* a device/runtime call failed */
  LPATTN_ERR_PARAMS_SIZE = 14,       /* struct_size unknown to this version */
  LPATTN_ERR_CACHE_FULL = 15,        /* KV cache capacity exceeded */
  LPATTN_ERR_BAD_LAYOUT = 16,        /* quantized tensor of the wrong format/axis */
  LPATTN_ERR_BAD_PAGE = 17           /* page id out of range, repeated, or table too short */
} lpattn_status;

/* Never NULL; "unknown status" for values this version does not know. */
LPATTN_API const char *lpattn_status_string(lpattn_status s);

/* What the last failed call of this thread rejected, for people: which
 * argument, what was expected and what was given, e.g. "k.shape[3] = 64 but
 * q.shape[3] = 128". Every function that returns a status clears it on entry
 * and sets it on failure (a backend's failure without detail names the
 * backend and the operation). Never NULL; "" after a successful call. Valid
 * until this thread's next lpattn call. */
LPATTN_API const char *lpattn_last_error(void);

/* ---- element types ------------------------------------------------------ */
typedef enum {
  LPATTN_F32 = 0,
  LPATTN_F16 = 1,
  LPATTN_BF16 = 2,
  LPATTN_E4M3 = 3, /* OCP fp8 e4m3fn */
  LPATTN_E5M2 = 4,
  LPATTN_E2M1 = 5, /* fp4, two codes per byte, element 2k in the low nibble */
  LPATTN_E8M0 = 6,
  LPATTN_I32 = 7
} lpattn_dtype;

/* A strided 4-D view. Attention tensors are [B, H, S, D]; strides are in
 * elements (not bytes), never negative, and may describe BHSD, BSHD or any
 * permutation. Views of fewer dimensions use shape 1 in the leading
 * dimensions. Inputs may repeat elements (stride 0 broadcasts). An output
 * view (any tensor a call writes) must give every index tuple its own
 * element; the check: order the dimensions of extent > 1 by stride, then the
 * smallest stride is >= 1 and each stride is >= the previous one times its
 * extent. Row-major, BSHD, padded rows and any permutation pass; stride 0 or
 * rows that overlap (stride[2] = D/2) are LPATTN_ERR_BAD_STRIDE, as is a view
 * that interleaves dimensions without sharing elements. Distinct outputs of
 * one call must not share memory either: checked for a quantized tensor's
 * codes, scales and outer (BAD_STRIDE), the caller's duty elsewhere. */
typedef struct {
  void *data;
  lpattn_dtype dtype;
  int64_t shape[4];
  int64_t stride[4];
} lpattn_tensor;

/* Fill a contiguous row-major view. */
LPATTN_API lpattn_tensor lpattn_tensor_4d(void *data, lpattn_dtype dtype, int64_t b,
                                          int64_t h, int64_t s, int64_t d);

/* ---- context ------------------------------------------------------------ */
typedef enum {
  LPATTN_BACKEND_AUTO = 0, /* cuda, then hip, then cpu, whichever is usable: ask
                              lpattn_context_backend() whether to pass device pointers */
  LPATTN_BACKEND_REF = 1,  /* plain C, f64 accumulation: the oracle */
  LPATTN_BACKEND_CPU = 2,  /* Highway SIMD, multithreaded */
  LPATTN_BACKEND_CUDA = 3,
  LPATTN_BACKEND_HIP = 4
} lpattn_backend;

/* Most threads a context may ask for (lpattn_context_params.num_threads). */
#define LPATTN_MAX_THREADS 1024

typedef struct {
  size_t struct_size;
  int num_threads;  /* cpu: 0 = all online cores (at most LPATTN_MAX_THREADS);
                       else 1..LPATTN_MAX_THREADS, more is INVALID_ARGUMENT (on
                       every backend). Threads the system cannot start:
                       OUT_OF_MEMORY. No C++ exception ever leaves lpattn. */
  int device;       /* cuda/hip device ordinal */
  void *stream;     /* cudaStream_t / hipStream_t; NULL = default stream */
} lpattn_context_params;

typedef struct lpattn_ctx lpattn_ctx;

LPATTN_API void lpattn_context_params_init(lpattn_context_params *p);
/* params may be NULL (defaults). UNSUPPORTED_HARDWARE when the backend is not
 * compiled in or has no usable device. */
LPATTN_API lpattn_status lpattn_create(lpattn_backend backend, const lpattn_context_params *params,
                                       lpattn_ctx **out);
LPATTN_API void lpattn_free(lpattn_ctx *ctx); /* NULL-safe */
LPATTN_API lpattn_backend lpattn_context_backend(const lpattn_ctx *ctx);
LPATTN_API const char *lpattn_backend_name(lpattn_backend b);
/* 1 when the backend was compiled in and can run here. */
LPATTN_API int lpattn_backend_available(lpattn_backend b);
/* Run the context's later calls on `stream` (cudaStream_t / hipStream_t; NULL =
 * the default stream), e.g. a framework's current stream. Later work on it
 * waits, on the device, for the work queued on the previous stream (no host
 * synchronization). Host backends keep it and ignore it. */
LPATTN_API lpattn_status lpattn_set_stream(lpattn_ctx *ctx, void *stream);
/* The stream set at creation or by lpattn_set_stream (NULL when ctx is). */
LPATTN_API void *lpattn_context_stream(const lpattn_ctx *ctx);
/* Wait for the context's queued work (no-op on host backends). */
LPATTN_API lpattn_status lpattn_synchronize(lpattn_ctx *ctx);

/* ---- block formats and quantization (SPEC 2) ---------------------------- */
typedef enum {
  LPATTN_FMT_NVFP4 = 0, /* E2M1, groups of 16, E4M3 scale, local f32 outer scale */
  LPATTN_FMT_MXFP4 = 1, /* E2M1, groups of 32, E8M0 scale */
  LPATTN_FMT_FP8 = 2    /* E4M3 elements, one f32 scale per domain */
} lpattn_format;

typedef enum { LPATTN_ROUND_NEAREST_EVEN = 0, LPATTN_ROUND_STOCHASTIC = 1 } lpattn_rounding;

/* Quantized axis. D: groups along the head dim, outer scale per token (Q, K).
 * S: groups along the sequence, outer scale per (channel, tile of `tile`
 * tokens) (V); a partial last tile is zero-padded. */
typedef enum { LPATTN_AXIS_D = 0, LPATTN_AXIS_S = 1 } lpattn_axis;

typedef struct {
  size_t struct_size;
  lpattn_format format;     /* default NVFP4 */
  lpattn_rounding rounding; /* default nearest-even */
  uint64_t seed;            /* stochastic rounding: Philox4x32-10 key */
  lpattn_axis axis;         /* default AXIS_D */
  int tile;                 /* AXIS_S outer-scale domain, default 64, multiple of 32 */
  int mx_scale_round_up;    /* MXFP4: 2^ceil(log2(amax/6)) instead of OCP floor rule */
  int check_finite;         /* return LPATTN_ERR_NONFINITE instead of NaN scales (GPU:
                               the one call that waits for its stream, to read the flag) */
} lpattn_quant_params;

LPATTN_API void lpattn_quant_params_init(lpattn_quant_params *p);

/* A quantized [B, H, S, D] tensor in lpattn's own contiguous layout:
 *   AXIS_D: codes [B][H][S][D] (E2M1 packed: D/2 bytes a row), group scales
 *           [B][H][S][D/G], outer [B][H][S].
 *   AXIS_S: codes [B][H][D][Sp] (Sp = S rounded up to `tile`), group scales
 *           [B][H][D][Sp/G], outer [B][H][Sp/tile][D].
 * FP8 has no group scales (scales_bytes = 0) and its f32 scale lives in
 * `outer`. MXFP4 has no outer scale (outer_count = 0). Memory is owned by the
 * caller; lpattn_qtensor_sizes() says how much. Host backends use host
 * memory, GPU backends device memory. */
typedef struct {
  lpattn_format format;
  lpattn_axis axis;
  int tile;
  int64_t shape[4]; /* logical B, H, S, D */
  uint8_t *codes;
  uint8_t *scales;  /* E4M3 (NVFP4) or E8M0 (MXFP4) codes */
  float *outer;
} lpattn_qtensor;

LPATTN_API lpattn_status lpattn_qtensor_sizes(lpattn_format format, lpattn_axis axis, int tile,
                                              const int64_t shape[4], size_t *codes_bytes,
                                              size_t *scales_bytes, size_t *outer_count);

/* x (f32/f16/bf16, any strides) -> q. q's shape, format, axis and tile must
 * agree with params. */
LPATTN_API lpattn_status lpattn_quantize(lpattn_ctx *ctx, const lpattn_tensor *x,
                                         const lpattn_qtensor *q, const lpattn_quant_params *params);
/* q -> y (f32/f16/bf16, any strides; f16/bf16 rounded to nearest even). */
LPATTN_API lpattn_status lpattn_dequantize(lpattn_ctx *ctx, const lpattn_qtensor *q,
                                           const lpattn_tensor *y);

/* Scalar conversions (bit-exact, the same on every backend). Decoders return
 * the exact value; encoders round to nearest even and saturate as SPEC 2 says
 * (E2M1 and E4M3 saturate to +-6 / +-448; E5M2 overflows to inf). */
LPATTN_API float lpattn_e2m1_to_f32(uint8_t code);
LPATTN_API uint8_t lpattn_f32_to_e2m1(float x);
LPATTN_API float lpattn_e4m3_to_f32(uint8_t code);
LPATTN_API uint8_t lpattn_f32_to_e4m3(float x);
LPATTN_API float lpattn_e5m2_to_f32(uint8_t code);
LPATTN_API uint8_t lpattn_f32_to_e5m2(float x);
LPATTN_API float lpattn_e8m0_to_f32(uint8_t code);
LPATTN_API float lpattn_f16_to_f32(uint16_t h);
LPATTN_API uint16_t lpattn_f32_to_f16(float x);
LPATTN_API float lpattn_bf16_to_f32(uint16_t h);
LPATTN_API uint16_t lpattn_f32_to_bf16(float x);

/* ---- attention (SPEC 3-6) ----------------------------------------------- */
typedef enum {
  LPATTN_PREC_HIGH = 0,  /* f16/bf16/f32 inputs, f32 accumulation */
  LPATTN_PREC_FP8 = 1,   /* off-diagonal tiles in E4M3 (causal: diagonal tiles high) */
  LPATTN_PREC_NVFP4 = 2,
  LPATTN_PREC_MXFP4 = 3,
  LPATTN_PREC_THRIFT = 4, /* top-k tiles high, the rest in thrift_low */
  LPATTN_PREC_FP8_STATIC = 5 /* SPEC 11: E4M3 Q/K/V with caller-given descales, every tile */
} lpattn_precision;

/* Largest sm_scale accepted (see lpattn_attn_params). */
#define LPATTN_SM_SCALE_MAX 16.0f

typedef enum {
  LPATTN_SELECT_CAUSAL = 0, /* SPEC 4: score full tiles with the previous query tile's mean */
  LPATTN_SELECT_PAPER = 1   /* as published: current query tile's mean (leaks in causal) */
} lpattn_selection;

/* THRIFT selection rules, flags OR-ed into lpattn_attn_params.thrift_rule
 * (0 = SPEC 5 as written; docs/SEMANTICS.md "THRIFT selection rules"). Each
 * refines the importance only: the k, the diagonal tiles and causal safety
 * are SPEC 5's. */
typedef enum {
  LPATTN_THRIFT_RULE_SINK = 1, /* KV tile 0 (the attention sink) first among the full tiles */
  LPATTN_THRIFT_RULE_KMAX = 2, /* importance = max over the tile's keys of Qbar . k */
  LPATTN_THRIFT_RULE_GQA = 4   /* Qbar over every q head of the KV head: one selection per KV head */
} lpattn_thrift_rule;

typedef struct {
  size_t struct_size;
  lpattn_precision precision;  /* default HIGH */
  int causal;                  /* bottom-right aligned mask */
  float sm_scale;              /* 0 = 1/sqrt(D); else finite in (0, LPATTN_SM_SCALE_MAX]:
                                  zero-or-negative, NaN, inf and larger values are
                                  INVALID_ARGUMENT. PASA keeps (k - shift) * sm_scale
                                  in f16: the bound keeps it finite for any
                                  |k - shift| < 4094 (16 = 64x the default for D = 16) */
  int block_q, block_k;        /* tile sizes Bq, Bk; default 64, multiples of 32 */
  int leaky;                   /* research only: every tile low, scales span the tile */
  /* ThriftAttention */
  lpattn_format thrift_low;    /* precision of unselected tiles, default NVFP4 */
  float thrift_budget;         /* fraction f of tiles in high precision, default 0.05.
                                  k follows from the call's Skv, so a prefill row's
                                  result depends on how many tokens follow it */
  int thrift_k;                /* > 0 overrides the budget. Causal attention with
                                  causal selection and thrift_k is prefix-stable: a
                                  row's output does not depend on later tokens (prefill
                                  of any length, decode) */
  lpattn_selection selection;  /* default CAUSAL */
  /* PASA */
  int pasa;                    /* shift K by beta * tile mean, f16 scores */
  float pasa_beta;             /* 0 = lpattn_pasa_beta(F16, block_k) */
  int score_f16;               /* store raw scores q.k in f16 before scaling (the
                                  overflow-prone baseline PASA is compared with) */
  int mx_scale_round_up;       /* MXFP4 scale rule, see lpattn_quant_params */
  int check_finite;            /* LPATTN_ERR_NONFINITE on non-finite Q/K/V (host
                                  backends; GPU backends answer UNSUPPORTED) */
  /* Absolute positions (context parallelism: a call holds a shard of the
   * queries and/or keys of a longer sequence; docs/SEMANTICS.md "Absolute
   * positions"). positions = 0 (default): the mask is bottom-right aligned
   * (SPEC 1) and q_start = kv_start = 0 are required. positions = 1: query
   * row r is at position q_start + r, key c at kv_start + c, and under causal
   * row r sees key c iff kv_start + c <= q_start + r. Both >= 0, each start
   * plus its length at most 2^62; kv_start a multiple of block_k (so a shard
   * quantizes the whole sequence's KV tiles). Query tiles stay the call's
   * rows [i*Bq, (i+1)*Bq): a query shard gets the whole call's tile classes
   * when it starts a multiple of block_q after the whole call's first query.
   * A key shard other than the sequence's last must hold whole tiles.
   * THRIFT with a nonzero start: UNSUPPORTED (its top-k needs every tile's
   * score). cuda/hip: causal calls take |q_start - kv_start| <= 2^30
   * (UNSUPPORTED beyond); non-causal calls ignore the starts. With positions =
   * 1 and zero starts, a call with Sq == Skv is bitwise the default call. */
  int64_t q_start;
  int64_t kv_start;
  int positions;
  /* Static-scale FP8 (precision FP8_STATIC, SPEC 11; FlashAttention-3's
   * q_descale / k_descale / v_descale): f32 [B, Hkv] as shape {1, 1, B, Hkv}
   * (any strides), in backend memory; data NULL (the default) means 1. A
   * value is code * descale. q, k, v are all E4M3 codes, or all
   * f32/f16/bf16 that the call casts to E4M3(x / descale) (RNE, saturating).
   * Query head h uses the descales of its KV head h / (Hq / Hkv). Then
   * S = (Q^ . K^T) * q_descale * k_descale * sm_scale, P^ = E4M3(448 P) as
   * FP8's P, O = (P^ . V^) * v_descale / 448 / l, every tile (the diagonal
   * included) in FP8: no scale depends on the call's data, so causal calls
   * stay causal-safe (SPEC 4; descales calibrated on the same tokens are
   * the caller's leak). out: f32/f16/bf16. A descale with another
   * precision, or leaky/pasa/score_f16 with FP8_STATIC: INVALID_ARGUMENT;
   * E4M3 q/k/v with another precision: BAD_DTYPE. Host backends reject a
   * descale that is not finite and > 0 (INVALID_ARGUMENT, naming it and its
   * [b, h]); GPU backends check shape and dtype only (descales are device
   * memory): there a non-finite or non-positive descale gives that head's
   * rows unspecified values. CUDA takes block_k = 64. The backward answers
   * UNSUPPORTED; lpattn_kv_cache has no FP8_STATIC format (INVALID_ARGUMENT).
   * Paged pools of precision FP8_STATIC (lpattn_kv_pool_params) hold the
   * k/v descales per (slot, KV head) (lpattn_kv_pool_set_descales): their
   * decode and prefill take q_descale {1, 1, num_seqs, Hkv} here (NULL = 1;
   * q is f32/f16/bf16, cast by the call) and k_descale/v_descale must stay
   * NULL (INVALID_ARGUMENT). cuda: sm_90a; other GPU targets: UNSUPPORTED.
   * CUDA pools decode FP8_STATIC pages (hip: UNSUPPORTED at pool creation);
   * their descales are device memory, not checked (a bad value gives that
   * slot's rows unspecified values). */
  lpattn_tensor q_descale, k_descale, v_descale;
  /* Sliding window (FlashAttention's window_size; docs/SEMANTICS.md "Sliding
   * window and softcap"): query row r sees key c iff
   * r + off - window_left <= c <= r + off + window_right, with off the causal
   * mask's (Skv - Sq, or q_start - kv_start with positions = 1), and also
   * c <= r + off under causal. -1 (default) = unbounded on that side; other
   * negative values: INVALID_ARGUMENT. A KV tile outside every row's window
   * is skipped (a paged decode reads none of its pages); one partly inside
   * is computed high, as a diagonal tile, so that no key outside a row's
   * window reaches the row through a scale. THRIFT's k counts the tiles a
   * query tile's window spans. Every backend's prefill (cuda/hip: not
   * static FP8's) and backward (cuda: not THRIFT's, as without a window);
   * cuda/hip's decode, caches and pools: UNSUPPORTED. PASA with a window:
   * UNSUPPORTED. */
  int window_left, window_right;
  /* Logit softcap (Gemma 2): s = softcap * tanh(s / softcap) on the scaled
   * score, before the softmax (low tiles: on the dequantized product); the
   * backward multiplies dS by 1 - tanh^2. 0 (default) = off; otherwise
   * finite and > 0 (INVALID_ARGUMENT). Every backend's prefill (cuda/hip:
   * not static FP8's) and backward; cuda/hip's decode, caches and pools,
   * and PASA: UNSUPPORTED. */
  float softcap;
  /* THRIFT: OR of lpattn_thrift_rule flags, 0 (default) = SPEC 5's rule.
   * Prefill on every backend, the backward on host backends; decode (every
   * backend) answers UNSUPPORTED for a nonzero rule; other bits:
   * INVALID_ARGUMENT. */
  int thrift_rule;
} lpattn_attn_params;

LPATTN_API void lpattn_attn_params_init(lpattn_attn_params *p);

/* Optional outputs; leave data NULL for the ones not wanted.
 *   lse, entropy: f32 [B, Hq, Sq, 1]  (natural log / nats)
 *   selection:    i32 [B, Hq, Sq/Bq rounded up, k] ascending KV-tile indices
 *                 of the high tiles of each query tile, -1 padded (THRIFT only;
 *                 k is what lpattn_thrift_k() returns for the call). */
typedef struct {
  size_t struct_size;
  lpattn_tensor lse;
  lpattn_tensor entropy;
  lpattn_tensor selection;
} lpattn_attn_aux;

LPATTN_API void lpattn_attn_aux_init(lpattn_attn_aux *a);

/* out = softmax(sm_scale * q k^T [mask]) v.
 * q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D], out [B, Hq, Sq, D];
 * q/k/v/out dtypes f32, f16 or bf16 (k and v the same dtype); under
 * FP8_STATIC q, k, v may all be E4M3 (lpattn_attn_params). aux may be NULL.
 * A fully masked row gives out = 0, lse = -inf, entropy = 0. */
LPATTN_API lpattn_status lpattn_attention(lpattn_ctx *ctx, const lpattn_tensor *q,
                                          const lpattn_tensor *k, const lpattn_tensor *v,
                                          const lpattn_tensor *out, const lpattn_attn_params *params,
                                          const lpattn_attn_aux *aux);

/* ---- backward (training, SPEC 10) --------------------------------------- */
/* Gradients of lpattn_attention: dq [B, Hq, Sq, D], dk and dv [B, Hkv, Skv, D]
 * (f32, f16 or bf16; dk/dv summed over the q heads of a GQA group). */
typedef struct {
  size_t struct_size;
  lpattn_tensor dq, dk, dv; /* outputs, every one required */
  uint64_t seed;            /* Philox seed of the stochastic rounding of the low
                               tiles' backward operands (one seed per call) */
} lpattn_attn_grads;

LPATTN_API void lpattn_attn_grads_init(lpattn_attn_grads *g);

/* Backward of out = lpattn_attention(q, k, v, params): given the forward's
 * out and lse (f32 [B, Hq, Sq, 1], as lpattn_attn_aux returns it) and the
 * output gradient dout (shape of out), writes dq, dk, dv. params must be the
 * forward's: the same tiles are high and low (SEMANTICS "Backward"). Tiles the
 * forward computed high are differentiated in high precision; the four
 * matmuls of a low tile quantize their operands in the tile's format along
 * the product's reduction axis with stochastic rounding (seed), scales RNE.
 * Deterministic for a given seed. PASA, score_f16 and FP8_STATIC are
 * UNSUPPORTED. CUDA
 * takes D = 64/128: HIGH, and FP8/NVFP4/MXFP4 with block_q = block_k = 64
 * (THRIFT: UNSUPPORTED there). On CUDA, once an eager call of a shape has
 * grown the context's workspace, the call neither allocates nor
 * synchronizes: it can be captured in a CUDA graph (tests/cuda/test_cuda_graph).
 * Absolute positions as in the forward: given the whole rows' out and lse, a
 * shard's dq (over its keys) and dk/dv (from its queries) are partial sums. */
LPATTN_API lpattn_status lpattn_attention_backward(lpattn_ctx *ctx, const lpattn_tensor *q,
                                                   const lpattn_tensor *k, const lpattn_tensor *v,
                                                   const lpattn_tensor *out, const lpattn_tensor *lse,
                                                   const lpattn_tensor *dout,
                                                   const lpattn_attn_params *params,
                                                   const lpattn_attn_grads *grads);

/* ---- ragged batches (varlen) -------------------------------------------- */
/* FlashAttention's varlen convention (flash_attn_varlen_func): n sequences
 * of their own lengths packed along the sequence axis. q [1, Hq, total_q, D],
 * k and v [1, Hkv, total_k, D], out like q (packed [total, H, D] arrays are
 * BSHD views with B = 1, through strides, as for lpattn_attention).
 * cu_seqlens_q, cu_seqlens_k: I32 [n + 1] as {1, 1, 1, n + 1} (any stride):
 * 0, then the cumulative lengths, never decreasing, the last equal to
 * total_q / total_k; both have n + 1 entries. Sequence b's queries are rows
 * [cu_q[b], cu_q[b + 1]), its keys [cu_k[b], cu_k[b + 1]); it attends only
 * to its own keys (causal: bottom-right aligned per sequence), GQA as in
 * lpattn_attention. The result is lpattn_attention's on each sequence's
 * slices, bitwise: tiles start at each sequence's first query and key, so
 * no tile or quantization group spans two sequences, and THRIFT's k follows
 * from each sequence's own key count (docs/SEMANTICS.md "Ragged batches").
 * A sequence without queries is skipped; one with queries but no keys is
 * INVALID_ARGUMENT (lpattn_attention has no empty K either).
 * cu_seqlens are host memory on every backend, GPU backends included
 * (FlashAttention's are device tensors): the call slices the batch on the
 * host, one launch per sequence, and reading device memory would make every
 * call wait for its stream (and could not be captured in a CUDA graph;
 * captured, a call replays the lengths it was captured with).
 * params as lpattn_attention's, except: positions, q_start and kv_start
 * are INVALID_ARGUMENT (each sequence is bottom-right aligned); FP8_STATIC
 * descales are f32 [n, Hkv] as {1, 1, n, Hkv}, one row per sequence.
 * aux: lse and entropy f32 [1, Hq, total_q, 1]; selection INVALID_ARGUMENT
 * (its k differs per sequence). Every sequence's call is validated before
 * the first one runs: a call that fails validation writes nothing; a
 * backend failure (OUT_OF_MEMORY, BACKEND) can leave the rows of the
 * sequences before it written. */
LPATTN_API lpattn_status lpattn_attention_varlen(lpattn_ctx *ctx, const lpattn_tensor *q,
                                                 const lpattn_tensor *k, const lpattn_tensor *v,
                                                 const lpattn_tensor *out,
                                                 const lpattn_tensor *cu_seqlens_q,
                                                 const lpattn_tensor *cu_seqlens_k,
                                                 const lpattn_attn_params *params,
                                                 const lpattn_attn_aux *aux);

/* ---- decode against a quantized KV cache -------------------------------- */
/* The cache holds `num_seqs` independent sequences of up to `max_tokens`
 * tokens. Tokens are grouped in tiles of `tile` keys: a completed tile is
 * quantized once, when its last token is appended, and never again. On host
 * backends the cache owns a paged pool (see "paged KV storage" below; pool
 * bytes through lpattn_kv_pool_bytes are what it takes) with fixed tables,
 * and decode follows lpattn_paged_decode. High-precision copies: under FP8/NVFP4/MXFP4 only the two newest
 * tiles (they can be diagonal, partially masked, tiles of the rows being
 * decoded); under HIGH and THRIFT every tile (Thrift may select any tile).
 * The cuda cache currently keeps every tile in high precision. The
 * cache also keeps each completed tile's key mean and each completed query
 * tile's mean, so a token decoded at position t sees the tile precisions and
 * selection inputs of row t of a causal prefill (SPEC 4). */
typedef struct {
  size_t struct_size;
  int num_seqs, num_kv_heads, num_q_heads, head_dim;
  int64_t max_tokens;
  int tile;                  /* default 64; decode uses Bq = Bk = tile */
  lpattn_dtype high_dtype;   /* storage of the high tiles: F32, F16 or BF16 */
  lpattn_precision precision;/* HIGH, FP8, NVFP4, MXFP4 or THRIFT */
  lpattn_format thrift_low;  /* THRIFT: format of the quantized tiles */
  int pasa;                  /* store K shifted by beta * tile mean (SPEC 6) */
  float pasa_beta;
  int mx_scale_round_up;
} lpattn_kv_cache_params;

typedef struct lpattn_kv_cache lpattn_kv_cache;

LPATTN_API void lpattn_kv_cache_params_init(lpattn_kv_cache_params *p);
LPATTN_API lpattn_status lpattn_kv_cache_create(lpattn_ctx *ctx, const lpattn_kv_cache_params *p,
                                                lpattn_kv_cache **out);
/* NULL-safe. A cache belongs to the context it was created with: use it only
 * with that context, and free it from the thread that uses the context (the
 * context keeps a list of its caches). Freeing the context first is safe: it
 * releases the cache's memory and leaves a detached handle, which every call
 * but this one rejects with LPATTN_ERR_INVALID_ARGUMENT. */
LPATTN_API void lpattn_kv_cache_free(lpattn_kv_cache *cache);
LPATTN_API lpattn_status lpattn_kv_cache_length(const lpattn_kv_cache *cache, int seq,
                                                int64_t *len);

/* Append T tokens to sequence `seq` (k, v: [1, Hkv, T, D]; q: NULL or
 * [1, Hq, T, D], the queries of the same positions, recorded for causal
 * selection; positions whose queries were never given count as zero means).
 * Tokens already in the cache are never touched. */
LPATTN_API lpattn_status lpattn_kv_cache_append(lpattn_ctx *ctx, lpattn_kv_cache *cache, int seq,
                                                const lpattn_tensor *k, const lpattn_tensor *v,
                                                const lpattn_tensor *q);

/* q [num_seqs, Hq, Sq, D] holds the queries of each sequence's last Sq
 * positions (Sq <= tile; 1 for plain decode); their means are recorded as
 * by append. out like q. Params used: causal is implied; sm_scale,
 * thrift_budget/thrift_k, selection, check_finite (host backends: also
 * LPATTN_ERR_NONFINITE when a non-finite K/V/Q was appended). positions:
 * UNSUPPORTED (a cache holds its own positions; a shard of a sequence's keys
 * is decoded with lpattn_attention and positions, then merged). */
LPATTN_API lpattn_status lpattn_decode(lpattn_ctx *ctx, lpattn_kv_cache *cache,
                                       const lpattn_tensor *q, const lpattn_tensor *out,
                                       const lpattn_attn_params *params, const lpattn_attn_aux *aux);

/* ---- paged KV storage (SPEC 9) ------------------------------------------ */
/* A pool of fixed-size pages plus sequence slots, in memory the caller may
 * own (device memory for GPU backends, host memory for host backends), as a
 * serving engine (vLLM, FlashInfer, SGLang) manages its KV memory.
 *
 * - A page holds one tile of `page_size` tokens for all KV heads of a layer,
 *   in the pool's format: under FP8/NVFP4/MXFP4 the quantized tile only
 *   (codes, group scales, outer scales; its key mean under PASA); under HIGH
 *   the tile in high_dtype; under THRIFT both, plus the key and query tile
 *   means that selection reads; under FP8_STATIC (SPEC 11) E4M3 codes only.
 * - A sequence slot holds what SPEC 4 keeps high for one sequence under
 *   FP8/NVFP4/MXFP4: the current, incomplete tile and the tile before it (they
 *   can be diagonal tiles of the rows being decoded); under THRIFT, the query
 *   rows of its two newest query tiles; under FP8_STATIC its k/v descales
 *   (lpattn_kv_pool_set_descales), nothing high. A sequence in flight owns
 *   one slot.
 * - A sequence is (slot, page table, length): page i of its table holds
 *   tokens [i*T, (i+1)*T). A page is written when its first token is
 *   appended (HIGH/THRIFT; FP8_STATIC: each token's codes as it comes) or
 *   once, when it completes (FP8/NVFP4/MXFP4), and never again: completed
 *   pages can be shared between sequences (prefix sharing); a page that is
 *   not complete belongs to one sequence.
 * - Results never depend on where pages sit in the pool, nor on the other
 *   sequences of a batch (bitwise): the split of a sequence's context into
 *   parallel chunks depends only on that sequence.
 * Ids and lengths are int32 tensors in backend memory (device memory on GPU
 * backends, so a decode step can be captured in a CUDA graph). Host backends
 * validate every id and length before writing anything. GPU backends cannot
 * read them without a synchronization: they validate what the host can see
 * (shapes, dtypes, max_length), require unit element strides (UNSUPPORTED
 * otherwise), and in the kernel skip slots and pages out of range (those
 * rows are not written; no error is reported yet). On every backend a
 * length above max_length is a caller error (host backends reject it; GPU
 * backends attend to at most max_length tokens). */
typedef struct {
  size_t struct_size;
  int num_kv_heads, num_q_heads, head_dim;
  int page_size;              /* tokens per page = tile; default 64 */
  lpattn_dtype high_dtype;    /* F16 (default) or BF16; F32 on host backends */
  lpattn_precision precision; /* HIGH, FP8, NVFP4 (default), MXFP4, THRIFT or
                                 FP8_STATIC: pages of E4M3 codes only (K [T][D],
                                 V [D][T] per KV head: 2 * D bytes per token and
                                 KV head, 2048 at 8 heads x D 128), every token
                                 written as it is appended (no high ring, no page
                                 scales), per-(slot, KV head) descales set by
                                 lpattn_kv_pool_set_descales; no pasa
                                 (INVALID_ARGUMENT); ref, cpu and CUDA (HIP:
                                 UNSUPPORTED) */
  lpattn_format thrift_low;   /* THRIFT: format of the quantized copies */
  int pasa;                   /* store K shifted by beta * tile mean (SPEC 6) */
  float pasa_beta;            /* 0 = lpattn_pasa_beta(F16, page_size) */
  int mx_scale_round_up;
  int check_finite;           /* append rejects non-finite K/V/Q (host backends) */
  int32_t num_pages;          /* pages in the pool */
  int32_t num_slots;          /* sequence slots */
  /* V's head dim where it differs from K's (MLA decode: head_dim 576 for Q
   * and K, head_dim_v 512 for V and out; append's v may be a view of k's
   * first head_dim_v channels); 0 = head_dim. Host backends take head dims
   * in [8, 576] (rows stored zero-padded to whole groups: SEMANTICS "Head
   * dimensions"); GPU pools one head dim of a built decode variant, or
   * (CUDA) MLA's 576/512 in HIGH, FP8 or NVFP4 without PASA. */
  int head_dim_v;
} lpattn_kv_pool_params;

typedef struct lpattn_kv_pool lpattn_kv_pool;

LPATTN_API void lpattn_kv_pool_params_init(lpattn_kv_pool_params *p);
/* Bytes of one page, of one sequence slot and of the whole pool (pages,
 * slots and their alignment padding): what a caller-owned pool must hold.
 * Any output may be NULL. */
LPATTN_API lpattn_status lpattn_kv_pool_size(const lpattn_kv_pool_params *p, size_t *page_bytes,
                                             size_t *slot_bytes, size_t *pool_bytes);
/* mem = NULL: the library allocates (and frees) the pool in backend memory.
 * Otherwise mem is caller memory of at least pool_bytes, 256-byte aligned,
 * in backend memory, that outlives the pool object (INVALID_ARGUMENT when
 * smaller or misaligned). A slot's state is defined once an append with
 * length 0 reset it. check_finite on a GPU backend: UNSUPPORTED. */
LPATTN_API lpattn_status lpattn_kv_pool_create(lpattn_ctx *ctx, const lpattn_kv_pool_params *p,
                                               void *mem, size_t bytes, lpattn_kv_pool **out);
/* NULL-safe; safe before or after its context is freed. */
LPATTN_API void lpattn_kv_pool_free(lpattn_kv_pool *pool);
/* Bytes the pool takes: its pages and slots (what lpattn_kv_pool_size says). */
LPATTN_API size_t lpattn_kv_pool_bytes(const lpattn_kv_pool *pool);

/* The sequences of one call. Tensors in backend memory:
 *   slots      I32 [num_seqs]              (shape {1, 1, 1, num_seqs}) slot of
 *                                          each sequence, no slot twice
 *   lengths    I32 [num_seqs]              (shape {1, 1, 1, num_seqs}) append:
 *                                          tokens present before the call (0
 *                                          starts a sequence); decode: tokens
 *                                          attended to. Otherwise equal to the
 *                                          slot's length (its last append).
 *   page_table I32 [num_seqs, max_pages]   (shape {1, 1, num_seqs, max_pages},
 *                                          any row stride) page ids
 * max_length (host) bounds every length of the call; it sizes the launch and
 * is checked against the lengths on host backends.
 * Host backends read every id and length before anything is written:
 *   slot out of range or twice, a length < 0, > max_length or not the slot's
 *     length                                       -> INVALID_ARGUMENT
 *   a page id out of range, or twice in one table, among the pages the
 *     lengths (plus the appended tokens) use; a table with fewer than
 *     ceil(length / page_size) ids                 -> BAD_PAGE
 *   append: a page written by the call (a tile it completes; under
 *     HIGH/THRIFT any tile it touches) that another sequence of the call also
 *     writes or uses                                -> BAD_PAGE
 *   append: length + n > max_pages * page_size    -> CACHE_FULL
 *   decode: a length < Sq                          -> BAD_SHAPE
 *
 * Sharded decode (context parallelism: each rank's pool holds part of each
 * sequence's pages; docs/SEMANTICS.md "Sharded paged decode"). kv_start and
 * q_start: I32 [num_seqs] (shape {1, 1, 1, num_seqs}), both or neither (data
 * NULL, the default: today's decode, bitwise). kv_start[i]: the global
 * position of the slot's first token, a multiple of page_size (the slot holds
 * tokens [kv_start, kv_start + lengths[i]) of the sequence; its page j is the
 * sequence's tile kv_start / page_size + j). q_start[i]: the global position
 * of q's first row. A shard is either the sequence's last (kv_start +
 * length == q_start + Sq: it holds the diagonal tiles, as today) or an
 * earlier one holding whole tiles that all end at or before the first
 * query's tile (length a multiple of page_size, kv_start + length <=
 * page_size * floor(q_start / page_size)): every tile it holds is full, read
 * quantized. Tile classes and decode chunks (LP_DECODE_CHUNK_TILES, counted
 * in global tiles) are then the whole sequence's, so shards merged with
 * lpattn_merge_states equal the single-pool decode within the merge's
 * rounding. Decode only (append stores a shard's tokens in its own order and
 * ignores both). Host backends: kv_start or q_start < 0, kv_start not a
 * multiple of page_size, or a shard of neither kind -> INVALID_ARGUMENT.
 * THRIFT or PASA pools -> UNSUPPORTED. CUDA/HIP: device I32 arrays, read by
 * the kernel; the run rules are not checked there (no host wait): a run that
 * breaks them gets unspecified values, read in bounds. */
typedef struct {
  size_t struct_size;
  int num_seqs;
  lpattn_tensor slots, lengths, page_table;
  int64_t max_length;
  lpattn_tensor kv_start, q_start;
} lpattn_kv_batch;

LPATTN_API void lpattn_kv_batch_init(lpattn_kv_batch *b);

/* Append n tokens to every sequence of the batch: k, v [num_seqs, Hkv, n, D],
 * q NULL or [num_seqs, Hq, n, D] (the queries of the same positions, which
 * THRIFT's causal selection reads). A page completed by the append is
 * quantized in this call. Slot state of a new sequence (length 0) is reset.
 * Non-finite K/V/Q: LPATTN_ERR_NONFINITE with the pool's check_finite
 * (nothing written); otherwise stored, and recorded in the slot, so a decode
 * with check_finite answers LPATTN_ERR_NONFINITE for that sequence. THRIFT:
 * when query tile j + 2 starts, the mean of query tile j is written into page
 * j (sequences sharing page j share those queries, so they write the same
 * values). */
LPATTN_API lpattn_status lpattn_kv_append(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                          const lpattn_kv_batch *batch, const lpattn_tensor *k,
                                          const lpattn_tensor *v, const lpattn_tensor *q);
/* Copy slot src's state to slot dst (fork a sequence: share the source's
 * completed pages in the new table, give it its own page for the incomplete
 * tile, then copy the slot). Tokens of the incomplete tile live in the slot
 * (FP8/NVFP4/MXFP4) or in its page (HIGH/THRIFT/FP8_STATIC: copy that page
 * too). An FP8_STATIC slot's descales are copied with it. */
LPATTN_API lpattn_status lpattn_kv_slot_copy(lpattn_ctx *ctx, lpattn_kv_pool *pool, int32_t src,
                                             int32_t dst);
/* Set up the slots of new sequences of an FP8_STATIC pool (SPEC 11, the FP8
 * KV cache of vLLM/FlashInfer): slot slots[i] takes the f32 descales
 * k_descale[i, h] and v_descale[i, h] of each KV head h and is emptied
 * (length 0, as an append with length 0). slots I32 {1, 1, 1, n}, no slot
 * twice; k_descale, v_descale F32 {1, 1, n, Hkv} (any strides); all in
 * backend memory (device memory on GPU backends, so the call can be
 * captured in a graph). Append then stores each token as the E4M3 codes
 * E4M3(k / k_descale), E4M3(v / v_descale) (RNE, saturating at 448), and
 * decode/prefill read value = code * descale. The descales hold for the
 * sequence's whole life: call this before its first append, not between
 * (it empties the slot); an append with length 0 keeps them (a new
 * sequence in the slot calls this again); lpattn_kv_slot_copy copies them
 * with the slot. Slots start without descales (the pool zeroes them at
 * creation, in caller memory too). A
 * completed page shared between sequences is read with each reader's
 * descales: share pages only between sequences with equal descales. Host
 * backends reject a descale that is not finite and > 0 (INVALID_ARGUMENT,
 * naming it and its [i, h]), a slot out of range or twice, and an append or
 * decode of a slot whose descales were never set (INVALID_ARGUMENT), before
 * writing anything. Another pool precision: INVALID_ARGUMENT. CUDA: slots
 * and descales in device memory, written by a kernel, not read on the host
 * (a slot id out of range is skipped; a bad value gives that slot's rows
 * unspecified values). HIP: FP8_STATIC pools are UNSUPPORTED for now. */
LPATTN_API lpattn_status lpattn_kv_pool_set_descales(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                                     const lpattn_tensor *slots,
                                                     const lpattn_tensor *k_descale,
                                                     const lpattn_tensor *v_descale);
/* Batched decode: q [num_seqs, Hq, Sq, D] holds the queries of each
 * sequence's last Sq positions (1 <= Sq <= page_size; Sq > 1 for speculative
 * decoding), attending causally to lengths[i] tokens. out like q. aux: lse,
 * entropy [num_seqs, Hq, Sq, 1]. Params as lpattn_decode. More new tokens
 * than page_size (a prompt, a chunk of one, a follow-up turn): an
 * FP8/NVFP4/MXFP4 pool keeps only the two newest tiles high, so their rows
 * are attended as they are appended, by lpattn_paged_prefill. */
LPATTN_API lpattn_status lpattn_paged_decode(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                             const lpattn_kv_batch *batch,
                                             const lpattn_tensor *q, const lpattn_tensor *out,
                                             const lpattn_attn_params *params,
                                             const lpattn_attn_aux *aux);
/* Prefill against the pool (FlashInfer's BatchPrefillWithPagedKVCache,
 * SGLang's "extend"): append n new tokens to every sequence of the batch and
 * attend each of them causally to the sequence's cached tokens and to the
 * new tokens before it. k, v, q [num_seqs, H, n, D] as lpattn_kv_append's
 * (q required); batch.lengths: tokens held before the call (0 starts a
 * sequence), so each sequence has its own cached length; n (any count >= 1)
 * is one per call (a batch whose sequences bring different counts:
 * lpattn_paged_prefill_varlen, below). out [num_seqs, Hq, n, head_dim_v]; aux: lse,
 * entropy [num_seqs, Hq, n, 1]; params as lpattn_paged_decode's (THRIFT
 * selection, k per row from its own context, as decode). New row r of
 * sequence i is at position lengths[i] + r and is bitwise the
 * lpattn_paged_decode row of that position (docs/SEMANTICS.md "Prefill
 * against the paged pool"): the rows do not depend on how a prompt is cut
 * into calls, and equal lpattn_attention's causal prefill rows (block_q =
 * block_k = page_size) as decode rows do. batch.kv_start/q_start ->
 * INVALID_ARGUMENT. Every argument, id and length is checked before
 * anything is written (append's and decode's errors). CUDA/HIP: the
 * lengths stay in device memory (no host wait; a call is a fixed sequence
 * of append and decode launches, capturable in a graph once a call as
 * large ran outside it, as decode; a replay reads the lengths its buffers
 * hold); checked on the host is what lpattn_kv_append
 * and lpattn_paged_decode check there (shapes, dtypes, max_length + n <=
 * 2^31 - 1; q in the pool's high dtype; unit element strides of the
 * batch's ids), not ids or lengths (a bad one is read in bounds, as
 * decode's); check_finite and, on THRIFT pools, selection = paper ->
 * UNSUPPORTED. */
LPATTN_API lpattn_status lpattn_paged_prefill(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                              const lpattn_kv_batch *batch,
                                              const lpattn_tensor *k, const lpattn_tensor *v,
                                              const lpattn_tensor *q, const lpattn_tensor *out,
                                              const lpattn_attn_params *params,
                                              const lpattn_attn_aux *aux);
/* lpattn_paged_prefill with each sequence's own number of new tokens
 * (FlashInfer's qo_indptr, FlashAttention's cu_seqlens): the new tokens of
 * the batch packed along the sequence axis, k, v [1, Hkv, total, D], q
 * [1, Hq, total, D], out [1, Hq, total, head_dim_v] (packed [total, H, D]
 * arrays are views with B = 1, through strides, as for
 * lpattn_attention_varlen); aux: lse, entropy [1, Hq, total, 1].
 * cu_seqlens: I32 [num_seqs + 1] as {1, 1, 1, num_seqs + 1} (any stride),
 * host memory on every backend: 0, then the cumulative counts, never
 * decreasing, the last equal to total. Sequence i (batch entry i) appends
 * rows [cu_seqlens[i], cu_seqlens[i + 1]) at positions lengths[i] + r; a
 * count of 0 skips the sequence (nothing appended or written for it, its
 * slot untouched; its ids and length are still checked), total >= 1. Each
 * row is bitwise lpattn_paged_prefill's (and so the paged decode row) of
 * that sequence with its count. Errors as lpattn_paged_prefill's, checked
 * with each sequence's own count (CACHE_FULL, BAD_PAGE), before anything
 * is written; cu_seqlens: NULL -> NULL_POINTER; wrong dtype -> BAD_DTYPE;
 * not num_seqs + 1 entries, or a last entry other than total -> BAD_SHAPE;
 * a first entry other than 0, a decreasing entry, or device memory ->
 * INVALID_ARGUMENT. CUDA/HIP: as lpattn_paged_prefill's, each sequence its
 * own launches (a batch of one). */
LPATTN_API lpattn_status lpattn_paged_prefill_varlen(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                                     const lpattn_kv_batch *batch,
                                                     const lpattn_tensor *k, const lpattn_tensor *v,
                                                     const lpattn_tensor *q, const lpattn_tensor *out,
                                                     const lpattn_tensor *cu_seqlens,
                                                     const lpattn_attn_params *params,
                                                     const lpattn_attn_aux *aux);

/* ---- plans: a decode or attention step without host work ---------------- */
/* A plan binds one batch layout of lpattn_paged_decode: the pool, the batch
 * (its tensors' memory and num_seqs, max_length; the caller may rewrite the
 * ids' and lengths' contents between runs), q's and out's shapes, dtypes and
 * strides, params and aux (lse/entropy views bound as given). Making it does
 * lpattn_paged_decode's host work once: validation (ids and lengths
 * excepted: they are read at each run), parameter resolution, launch
 * geometry and, on GPU backends, a workspace of the plan's own, sized by
 * num_seqs and max_length. A plan answers what lpattn_paged_decode answers
 * for the same arguments, bitwise.
 *
 * lpattn_decode_plan_run(plan, q, out): q and out are data pointers of views
 * with the plan's shapes, dtypes and strides (NULL: the plan's own). GPU
 * backends only enqueue the plan's kernels on the context's current stream:
 * no allocation, no synchronization, no host<->device copy, so a run can be
 * captured in a CUDA graph, whose replays read the ids, lengths and q then.
 * A q or out whose address is aligned differently from the plan's (mod 16)
 * -> INVALID_ARGUMENT. Host backends check the ids and lengths at each run
 * (lpattn_paged_decode's path). Make plans outside graph capture (GPU: the
 * workspace is allocated then). A plan is used with its context's thread;
 * its pool must outlive it (lpattn_kv_pool_free of the pool first ->
 * undefined); after lpattn_free of its context a run answers
 * INVALID_ARGUMENT. Free it with lpattn_decode_plan_free (NULL-safe). */
typedef struct lpattn_decode_plan lpattn_decode_plan;

LPATTN_API lpattn_status lpattn_paged_decode_plan(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                                  const lpattn_kv_batch *batch,
                                                  const lpattn_tensor *q, const lpattn_tensor *out,
                                                  const lpattn_attn_params *params,
                                                  const lpattn_attn_aux *aux,
                                                  lpattn_decode_plan **plan);
LPATTN_API lpattn_status lpattn_decode_plan_run(lpattn_decode_plan *plan, const void *q, void *out);
LPATTN_API void lpattn_decode_plan_free(lpattn_decode_plan *plan);

/* The same for lpattn_attention: one layout of q, k, v, out (shapes, dtypes,
 * strides), params and aux (lse/entropy/selection views bound as given),
 * validated and resolved once; lpattn_attention_plan_run takes the data
 * pointers (NULL: the plan's own), aligned as the plan's (mod 16 bytes, else
 * INVALID_ARGUMENT) and answers what lpattn_attention answers, bitwise. GPU
 * backends run the call's device work only (graph-capturable once the
 * context's workspace is large enough: run it once before capturing; a
 * workspace that would grow inside a capture -> UNSUPPORTED). Host backends
 * take lpattn_attention's path (check_finite and descales are read then).
 * Lifetime as a decode plan (runs after lpattn_free of its context ->
 * INVALID_ARGUMENT). */
typedef struct lpattn_attn_plan lpattn_attn_plan;

LPATTN_API lpattn_status lpattn_attention_plan(lpattn_ctx *ctx, const lpattn_tensor *q,
                                               const lpattn_tensor *k, const lpattn_tensor *v,
                                               const lpattn_tensor *out,
                                               const lpattn_attn_params *params,
                                               const lpattn_attn_aux *aux, lpattn_attn_plan **plan);
LPATTN_API lpattn_status lpattn_attention_plan_run(lpattn_attn_plan *plan, const void *q,
                                                   const void *k, const void *v, void *out);
LPATTN_API void lpattn_attention_plan_free(lpattn_attn_plan *plan);

/* ---- merging partial states (SPEC 7) ------------------------------------ */
/* (o_a, lse_a, h_a) and (o_b, lse_b, h_b) over disjoint key sets ->
 * (o, lse, h). o_*: [B, H, S, D] f32/f16/bf16; lse_*, h_*: f32 [B, H, S, 1];
 * h_a/h_b/h may all be NULL (entropy not merged). Outputs may alias inputs. */
LPATTN_API lpattn_status lpattn_merge_states(lpattn_ctx *ctx, const lpattn_tensor *o_a,
                                             const lpattn_tensor *lse_a, const lpattn_tensor *h_a,
                                             const lpattn_tensor *o_b, const lpattn_tensor *lse_b,
                                             const lpattn_tensor *h_b, const lpattn_tensor *o,
                                             const lpattn_tensor *lse, const lpattn_tensor *h);

/* ---- helpers ------------------------------------------------------------ */
/* ThriftAttention k for n KV tiles and budget f (SPEC 5): the k whose share
 * of high tiles is closest to f (ties to the smaller k), exact and O(1) for
 * any n; 0 when n < 1, 1 when f is NaN or <= 0, n when f >= 1. */
LPATTN_API int lpattn_thrift_k(int n_tiles, float budget, int causal);
/* PASA beta by the fixed-point iteration of SPEC 6 for storage dtype (F16 or
 * BF16), block size s2 and start beta0 (0 = 1 - 2^-6). NaN on bad input. */
LPATTN_API double lpattn_pasa_beta(lpattn_dtype storage, int s2, double beta0);

#ifdef __cplusplus
}
#endif
#endif /* LPATTN_H */
