/* Internal interfaces between core/ and the backends. Not installed. */
#ifndef LPATTN_INTERNAL_H
#define LPATTN_INTERNAL_H

#include "lpattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An attention call after validation: every default resolved, every size
 * checked for overflow. Backends read only this. */
typedef struct {
  const lpattn_tensor *q, *k, *v, *out;
  const lpattn_tensor *lse, *entropy, *selection; /* NULL when not wanted */
  int64_t B, Hq, Hkv, Sq, Skv, D;
  int causal, leaky;
  float sm_scale;
  int Bq, Bk;
  lpattn_precision precision;
  lpattn_format low;          /* format of low tiles: lp_low_format(precision, thrift_low) */
  int thrift_k;               /* THRIFT prefill: the resolved k; decode: the caller's k
                                 (clamped) or 0, a sequence's k is lp_thrift_k_seq() */
  lpattn_selection selection_mode;
  int thrift_rule;            /* THRIFT: lpattn_thrift_rule flags (0 = SPEC 5 as written) */
  int pasa;
  float pasa_beta;            /* resolved */
  int score_f16;
  int mx_round_up;
  float thrift_budget;        /* decode derives k from it when thrift_k == 0 */
  int64_t off;                /* causal: row r sees key c iff c <= r + off; Skv - Sq,
                                 or q_start - kv_start with absolute positions */
  /* FP8_STATIC (SPEC 11): f32 [B, Hkv] descales as {1, 1, B, Hkv} views,
   * NULL = 1 */
  const lpattn_tensor *q_descale, *k_descale, *v_descale;
  /* Sliding window and softcap (core/window.h): keys r + off - window_left
   * .. r + off + window_right, -1 = unbounded; softcap 0 = off */
  int64_t window_left, window_right;
  float softcap;
  /* Paged decode on device backends: tokens added on the device to every
   * batch length (a paged prefill's piece, core/api_prefill.c, whose
   * lengths the host cannot read); 0 otherwise, and on host backends */
  int64_t len_add;
} lpattn_attn_problem;

/* Derived parameters, each rule written once (core/thrift.c); core resolves
 * them into the problem, backends read them. */
/* The format of low tiles of a precision (HIGH: NVFP4, unused). */
lpattn_format lp_low_format(lpattn_precision p, lpattn_format thrift_low);
/* THRIFT's k for a query that sees n_tiles KV tiles: k_fixed (> 0, clamped
 * to n_tiles), else from the budget (lpattn_thrift_k). */
int lp_thrift_k_for(int k_fixed, float budget, int causal, int64_t n_tiles);
/* THRIFT's k with pr's sliding window (core/window.c): lp_thrift_k_for over
 * the KV tiles a query tile's window spans (SEMANTICS "Sliding window"). */
int lp_thrift_k_window(const lpattn_attn_problem *pr, int k_fixed, int causal, int64_t n_tiles);
/* The k of a decode sequence that holds n_tiles tiles. */
static inline int lp_thrift_k_seq(const lpattn_attn_problem *pr, int64_t n_tiles) {
  return lp_thrift_k_window(pr, pr->thrift_k, 1, n_tiles); /* core/window.c */
}

/* A backward call after validation: f holds the forward's problem (f.out
 * is the forward's output; f.lse its LSE), the rest the gradients. */
typedef struct {
  lpattn_attn_problem f;
  const lpattn_tensor *dout, *dq, *dk, *dv;
  uint64_t seed;
} lpattn_bwd_problem;

typedef struct lpattn_kv_cache lpattn_kv_cache;
typedef struct lpattn_kv_pool lpattn_kv_pool;

/* A paged call after validation (lpattn.h "paged KV storage"): the batch's
 * tensors checked (ids and lengths too on host backends), attention params
 * resolved into pr (pr->q/out/lse/entropy set; pr->Skv = max_length). */
typedef struct {
  const lpattn_kv_batch *batch;
  int64_t n;                          /* append: tokens per sequence */
  const lpattn_tensor *k, *v, *q;     /* append inputs (q may be NULL) */
  int64_t len_add;                    /* device backends: added to every batch length
                                         on the device (lpattn_attn_problem.len_add) */
} lpattn_kv_append_call;

typedef struct {
  const char *name;
  lpattn_status (*init)(lpattn_ctx *ctx, const lpattn_context_params *p);
  void (*fini)(lpattn_ctx *ctx);
  lpattn_status (*quantize)(lpattn_ctx *ctx, const lpattn_tensor *x, const lpattn_qtensor *q,
                            const lpattn_quant_params *p);
  lpattn_status (*dequantize)(lpattn_ctx *ctx, const lpattn_qtensor *q, const lpattn_tensor *y);
  lpattn_status (*attention)(lpattn_ctx *ctx, const lpattn_attn_problem *pr);
  lpattn_status (*merge)(lpattn_ctx *ctx, const lpattn_tensor *o_a, const lpattn_tensor *lse_a,
                         const lpattn_tensor *h_a, const lpattn_tensor *o_b,
                         const lpattn_tensor *lse_b, const lpattn_tensor *h_b,
                         const lpattn_tensor *o, const lpattn_tensor *lse, const lpattn_tensor *h);
  /* KV cache; host backends share core/kvcache.c. */
  lpattn_status (*cache_create)(lpattn_ctx *ctx, const lpattn_kv_cache_params *p,
                                lpattn_kv_cache **out);
  void (*cache_free)(lpattn_kv_cache *c); /* frees what c owns, then c (core may pass a
                                             copy of the header: validate.c detach) */
  lpattn_status (*cache_append)(lpattn_ctx *ctx, lpattn_kv_cache *c, int seq,
                                const lpattn_tensor *k, const lpattn_tensor *v,
                                const lpattn_tensor *q);
  /* pr->q (the queries) and pr->out set; pr resolved by core */
  lpattn_status (*decode)(lpattn_ctx *ctx, lpattn_kv_cache *c, const lpattn_attn_problem *pr);
  int (*host_memory)(void); /* 1: tensors are host pointers (validation may read them) */
  lpattn_status (*synchronize)(lpattn_ctx *ctx); /* NULL: nothing queued */
  /* Paged pool (kvpage.h layout). pool_init allocates when pool->mem is NULL
   * (and sets pool->owned), pool_fini releases what pool_init made. */
  lpattn_status (*pool_init)(lpattn_ctx *ctx, lpattn_kv_pool *pool);
  void (*pool_fini)(lpattn_kv_pool *pool);
  lpattn_status (*kv_append)(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                             const lpattn_kv_append_call *call);
  lpattn_status (*slot_copy)(lpattn_ctx *ctx, lpattn_kv_pool *pool, int32_t src, int32_t dst);
  lpattn_status (*paged_decode)(lpattn_ctx *ctx, lpattn_kv_pool *pool,
                                const lpattn_kv_batch *batch, const lpattn_attn_problem *pr);
  lpattn_status (*set_stream)(lpattn_ctx *ctx, void *stream); /* NULL: host backend */
  /* NULL: UNSUPPORTED */
  lpattn_status (*backward)(lpattn_ctx *ctx, const lpattn_bwd_problem *pr);
  /* Backend memory for core's own int32 arrays (core/kvcache.c's page
   * tables, slots and lengths on device backends; NULL on host backends):
   * ids_alloc copies n values from host memory (at creation, may wait for
   * the copy), ids_add enqueues p[0] += n on the context's stream. */
  lpattn_status (*ids_alloc)(lpattn_ctx *ctx, const int32_t *host, size_t n, int32_t **out);
  void (*ids_free)(lpattn_ctx *ctx, int32_t *p);
  lpattn_status (*ids_add)(lpattn_ctx *ctx, int32_t *p, int32_t n);
  /* Paged decode plans (core/api_plan.c; NULL: a run takes lpattn_paged_decode's
   * path, as on host backends). decode_plan does the host work of a batch
   * layout once (launch geometry, its own workspace) into *state; decode_run
   * enqueues that launch on the context's current stream with new q/out
   * pointers and nothing else (graph-capturable); decode_plan_free releases
   * the state (called while the backend is alive). */
  lpattn_status (*decode_plan)(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                               const lpattn_attn_problem *pr, void **state);
  lpattn_status (*decode_run)(lpattn_ctx *ctx, void *state, const void *q, void *out);
  void (*decode_plan_free)(lpattn_ctx *ctx, void *state);
  /* NULL: any pointer the caller gives as host memory is. Else 0 when p is
   * device memory the host cannot read (arrays the API reads on the host). */
  int (*host_readable)(const void *p);
  /* FP8_STATIC pools (lpattn_kv_pool_set_descales, checked by core): slot
   * slots[i] takes row i of k_descale/v_descale and is emptied. NULL:
   * UNSUPPORTED. */
  lpattn_status (*kv_set_descales)(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_tensor *slots,
                                   const lpattn_tensor *k_descale, const lpattn_tensor *v_descale);
  /* Paged prefill on device backends (core/api_prefill.c; NULL: UNSUPPORTED
   * there; host backends cut at tile borders from the lengths they read).
   * Checks, before anything is written, that the pieces' appends and
   * decodes will be taken (batch max_length: the call's largest length
   * after it; pr: its decode params, pr->q a view of q with the largest
   * piece's row count, min(largest count, page_size)), readies what they
   * use (workspace), and sets
   * *step: the tokens of a piece, counted from each sequence's first new
   * token whatever its cached length, such that every row of a piece
   * decoded after the piece's append (lengths + len_add on the device) is
   * bitwise the decode of that row alone. */
  lpattn_status (*prefill_step)(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                                const lpattn_attn_problem *pr, int64_t *step);
} lpattn_backend_vtable;

/* An object that belongs to a context (KV cache, pool): lpattn_free() calls
 * detach(obj) for each one still tracked, which releases its backend memory
 * while the backend is alive and sets the object's ctx to NULL, so that
 * freeing the object afterwards only frees host bookkeeping. */
typedef struct lp_ctx_obj {
  void *obj;
  void (*detach)(void *obj);
  struct lp_ctx_obj *next;
} lp_ctx_obj;

struct lpattn_ctx {
  lpattn_backend kind;
  const lpattn_backend_vtable *vt;
  lpattn_context_params params;
  void *impl; /* backend state (thread pool, stream, ...) */
  lp_ctx_obj *objs; /* tracked objects (core/context.c) */
};

/* Track / untrack an object of ctx (OUT_OF_MEMORY when tracking fails). */
lpattn_status lp_ctx_track(lpattn_ctx *ctx, void *obj, void (*detach)(void *obj));
void lp_ctx_untrack(lpattn_ctx *ctx, void *obj);

/* Every KV cache begins with this header so core can validate calls. */
struct lpattn_kv_cache {
  lpattn_ctx *ctx;
  lpattn_kv_cache_params p; /* resolved: every default filled in */
  int64_t *lengths;         /* tokens per sequence, kept by the backend */
  void *impl;
};

/* Every pool begins with this header. */
struct lpattn_kv_pool {
  lpattn_ctx *ctx;           /* NULL once its context was freed (detached) */
  lpattn_kv_pool_params p;   /* resolved */
  uint8_t *mem;              /* slots then pages (kvpage.h) */
  size_t bytes;
  int owned;                 /* mem allocated by the backend */
  void *impl;
};

/* Validation helpers of core/validate.c shared with core/api_kv.c. */
lpattn_status lp_check_view(const lpattn_tensor *t, int want_output);
/* Bytes of one element of t (E2M1: 1, two codes a byte; core/validate.c). */
size_t lp_dtype_bytes(lpattn_dtype t);
/* Host backends' tile plan (core/thrift.c, SEMANTICS "Tiles and their
 * precision"). lp_tile_means: kbar[j * D ..] = mean of KV tile j of K
 * ([Skv x D] f32). lp_tile_plan: kind and mode of every KV tile for query
 * tile i of q head hq (K: the kv head's keys in rows of ldk, read by the
 * KMAX rule; qbar: D, score: nkt scratch); returns the last full tile (-1 if
 * none). */
void lp_tile_means(const lpattn_attn_problem *pr, const float *K, int64_t nkt, float *kbar);
int64_t lp_tile_plan(const lpattn_attn_problem *pr, const float *K, int64_t ldk, const float *kbar,
                     float *qbar, float *score, int64_t b, int64_t hq, int64_t i, int64_t nkt,
                     uint8_t *kind, uint8_t *mode);
/* THRIFT importance of the full KV tiles of query tile i of q head hq under
 * pr->thrift_rule (SEMANTICS "THRIFT selection rules"); other tiles score 0.
 * K: the kv head's keys, f32 rows of ldk floats (the KMAX rule reads the
 * first D of each), kbar: tile means in rows of ldb, qbar: D scratch. Shared
 * by every host backend's prefill and backward. */
void lp_thrift_scores(const lpattn_attn_problem *pr, const float *K, int64_t ldk, const float *kbar,
                      int64_t ldb, float *qbar, float *score, int64_t b, int64_t hq, int64_t i,
                      int64_t nkt, const uint8_t *kind);
lpattn_status lp_resolve_attention(lpattn_ctx *ctx, const lpattn_tensor *q, const lpattn_tensor *k,
                                   const lpattn_tensor *v, const lpattn_tensor *out,
                                   const lpattn_attn_params *params, const lpattn_attn_aux *aux_in,
                                   lpattn_attn_problem *pr, lpattn_attn_aux *aux, int out_written);
lpattn_status lp_take_params(void *dst, size_t dst_size, const void *src);
lpattn_status lp_scan_finite(const lpattn_tensor *t);
/* cu_seqlens (core/validate.c): I32 {1, 1, 1, n + 1} in host memory, n >= 1
 * (entries > 0: exactly that many), 0 first, never decreasing, the last ==
 * total; lp_cu_at reads entry i of a checked one. */
lpattn_status lp_check_cu_seqlens(const char *name, const lpattn_tensor *cu, int64_t entries,
                                  int64_t total);
int64_t lp_cu_at(const lpattn_tensor *cu, int64_t i);
/* Head dims every backend takes (SEMANTICS "Head dimensions"). */
enum { LP_HEAD_DIM_MIN = 8, LP_HEAD_DIM_MAX = 256 };
lpattn_status lp_check_head_dim(int64_t d);
/* Decode params against storage sp (page_size, precision, thrift_low, pasa,
 * pasa_beta resolved, mx rule, heads, head_dim): pr filled except q/out.
 * host: the call's backend reads its memory on the host (host backends:
 * q_descale's values are checked; device memory is not read). */
lpattn_status lp_resolve_decode(int host, const lpattn_attn_params *params, const lpattn_attn_aux *aux_in,
                                const lpattn_kv_pool_params *sp, int64_t B, int64_t Sq,
                                int64_t max_len, lpattn_attn_aux *aux, lpattn_attn_problem *pr,
                                int *check_finite);
/* lpattn_paged_decode's checks (core/api_kv.c): into b, aux and pr (pr->q,
 * out, lse, entropy point at q, out and *aux). values = 0 leaves out what
 * reads the batch's ids, lengths and q's values on host backends (a plan's
 * runs check them). */
lpattn_status lp_paged_decode_check(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                                    const lpattn_tensor *q, const lpattn_tensor *out,
                                    const lpattn_attn_params *params, const lpattn_attn_aux *aux_in,
                                    int values, lpattn_kv_batch *b, lpattn_attn_aux *aux,
                                    lpattn_attn_problem *pr);
/* lpattn_kv_append's checks (core/api_kv.c): the batch into b (kv_start and
 * q_start cleared), n = the tokens appended; on host backends every id and
 * length, and with the pool's check_finite the values. cu (host memory, or
 * NULL): a ragged append, k/v/q packed {1, H, total, D} and sequence i's
 * count cu[i + 1] - cu[i] (checked: lp_check_cu_seqlens); n = total. */
lpattn_status lp_kv_append_check(lpattn_ctx *ctx, lpattn_kv_pool *pool, const lpattn_kv_batch *batch,
                                 const lpattn_tensor *k, const lpattn_tensor *v,
                                 const lpattn_tensor *q, const lpattn_tensor *cu,
                                 lpattn_kv_batch *b, int64_t *n);
/* Host caches (core/kvcache.c): LPATTN_ERR_NONFINITE when append recorded a
 * non-finite K/V/Q in any sequence; OK for other caches. */
lpattn_status lp_kv_cache_finite(const lpattn_kv_cache *cache);

/* SPEC 7 on host memory (core/merge.c); the host backends' merge entry. */
lpattn_status lp_host_merge(const lpattn_tensor *o_a, const lpattn_tensor *lse_a,
                            const lpattn_tensor *h_a, const lpattn_tensor *o_b,
                            const lpattn_tensor *lse_b, const lpattn_tensor *h_b,
                            const lpattn_tensor *o, const lpattn_tensor *lse,
                            const lpattn_tensor *h);

/* Backends compiled in (NULL vtable when not). */
extern const lpattn_backend_vtable lpattn_ref_backend;
const lpattn_backend_vtable *lpattn_cpu_backend(void);
const lpattn_backend_vtable *lpattn_cuda_backend(void);
const lpattn_backend_vtable *lpattn_hip_backend(void);

#ifdef __cplusplus
}
#endif
#endif
