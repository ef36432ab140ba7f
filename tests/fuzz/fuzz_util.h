/* Pieces of the fuzz target (fuzz_api.c): a reader over the fuzzer's bytes,
 * buffers with guard bytes on both sides (ASan-poisoned where ASan runs), and
 * strided tensors whose every byte is accounted for: inputs must come back
 * unchanged, outputs unchanged after a failed call and, after a successful
 * one, changed only on the view's own elements. */
#ifndef LPATTN_FUZZ_UTIL_H
#define LPATTN_FUZZ_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpattn.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FZ_ASAN 1
#endif
#ifdef FZ_ASAN
#include <sanitizer/asan_interface.h>
#define FZ_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define FZ_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define FZ_POISON(p, n) ((void)(p), (void)(n))
#define FZ_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* A broken promise: report and abort, so libFuzzer keeps the input. */
#define FZ_ASSERT(cond, ...)                                                  \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "fuzz: %s:%d: %s: ", __FILE__, __LINE__, #cond);        \
      fprintf(stderr, __VA_ARGS__);                                           \
      fputc('\n', stderr);                                                    \
      abort();                                                                \
    }                                                                         \
  } while (0)

/* ---- input bytes -------------------------------------------------------- */
typedef struct {
  const uint8_t *p;
  size_t n;
  uint64_t rng; /* bulk data comes from a generator seeded by the input */
} fz_in;

static inline unsigned fz_u8(fz_in *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}
static inline unsigned fz_u16(fz_in *r) { return fz_u8(r) | fz_u8(r) << 8; }
static inline uint32_t fz_u32(fz_in *r) { return fz_u16(r) | (uint32_t)fz_u16(r) << 16; }
/* One of n choices; the first is what an exhausted input gets. */
static inline int fz_pick(fz_in *r, int n) { return (int)(fz_u8(r) % (unsigned)n); }
/* 1 with probability about 1/n. */
static inline int fz_rare(fz_in *r, int n) { return fz_pick(r, n) == n - 1; }
static inline uint64_t fz_next(fz_in *r) { /* splitmix64 */
  uint64_t z = (r->rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline float fz_unit(fz_in *r) { return (float)(fz_next(r) >> 40) / 16777216.0f; }

/* ---- guarded buffers ---------------------------------------------------- */
enum { FZ_GUARD = 64, FZ_GUARD_BYTE = 0xA5, FZ_POISON_BYTE = 0x7B };

typedef struct {
  uint8_t *base; /* guard, payload, guard */
  size_t bytes;
} fz_buf;

static inline void *fz_alloc(fz_buf *b, size_t bytes) {
  b->bytes = bytes;
  b->base = (uint8_t *)malloc(bytes + 2 * FZ_GUARD);
  if (!b->base) abort();
  memset(b->base, FZ_GUARD_BYTE, FZ_GUARD);
  memset(b->base + FZ_GUARD + bytes, FZ_GUARD_BYTE, FZ_GUARD);
  memset(b->base + FZ_GUARD, FZ_POISON_BYTE, bytes);
  FZ_POISON(b->base, FZ_GUARD);
  FZ_POISON(b->base + FZ_GUARD + bytes, FZ_GUARD);
  return b->base + FZ_GUARD;
}

static inline uint8_t *fz_data(const fz_buf *b) { return b->base + FZ_GUARD; }

/* Checks both guards and frees. */
static inline void fz_release(fz_buf *b, const char *what) {
  if (!b->base) return;
  FZ_UNPOISON(b->base, b->bytes + 2 * FZ_GUARD);
  for (size_t i = 0; i < FZ_GUARD; i++)
    FZ_ASSERT(b->base[i] == FZ_GUARD_BYTE && b->base[FZ_GUARD + b->bytes + i] == FZ_GUARD_BYTE,
              "%s: guard byte %zu overwritten", what, i);
  free(b->base);
  b->base = NULL;
}

/* ---- tensors ------------------------------------------------------------ */
static inline size_t fz_esize(lpattn_dtype t) {
  return t == LPATTN_F16 || t == LPATTN_BF16 ? 2 : t == LPATTN_F32 || t == LPATTN_I32 ? 4 : 1;
}

typedef struct {
  lpattn_tensor t;
  fz_buf buf;
  uint8_t *before; /* payload after filling */
  int output;
  int valid_layout; /* the view fits its buffer (else validation must reject it) */
} fz_tensor;

/* Element offset of index (a, b, c, d). */
static inline int64_t fz_off(const lpattn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3];
}

#define FZ_FOR_EACH(t, off)                                                     \
  for (int64_t a_ = 0; a_ < (t)->shape[0]; a_++)                                \
    for (int64_t b_ = 0; b_ < (t)->shape[1]; b_++)                              \
      for (int64_t c_ = 0; c_ < (t)->shape[2]; c_++)                            \
        for (int64_t d_ = 0, off = fz_off((t), a_, b_, c_, 0); d_ < (t)->shape[3]; \
             d_++, off += (t)->stride[3])

float fz_load(const lpattn_tensor *t, int64_t off);
void fz_store(const lpattn_tensor *t, int64_t off, float x);

/* A view of `shape` and dtype in one of several layouts chosen by the input
 * (permutations, padding, broadcast, overlap, odd strides), in a guarded
 * buffer of exactly its span. Inputs get values in [-amp, amp] (non-finite
 * ones where `nonfinite`), outputs the poison byte. */
void fz_tensor_make(fz_tensor *x, fz_in *r, lpattn_dtype dt, const int64_t shape[4], int output,
                    float amp, int nonfinite);
/* After a call: inputs unchanged; outputs unchanged when it failed, else
 * changed only on their elements. Then frees. */
void fz_tensor_done(fz_tensor *x, int call_ok, const char *what);
/* Every element finite (f32/f16/bf16 views). */
int fz_all_finite(const lpattn_tensor *t);
/* Two index tuples of the view share an element (an output must be rejected). */
int fz_tensor_dup(const fz_tensor *x);

/* ---- shared by the entry points (fuzz_api.c, fuzz_pool.c) --------------- */
/* The ref (cpu = 0) or cpu context of the process, made once. */
lpattn_ctx *host_ctx(int cpu);
lpattn_dtype float_dtype(fz_in *r);
int64_t head_dim(fz_in *r);
/* Attention params; clears *sane where results need not be finite. */
void attn_params(fz_in *r, lpattn_attn_params *p, int *sane);
/* lse never NaN or +inf, entropy finite. */
void check_rows(const fz_tensor *lse, const fz_tensor *ent, const char *what);
/* An output view that repeats elements must have been rejected. */
void check_dup(const fz_tensor *t, lpattn_status s, const char *what);
/* The paged KV pool API (fuzz_pool.c). */
void fuzz_pool(fz_in *r, int cpu);
/* Ragged batches, lpattn_attention_varlen (fuzz_varlen.c). */
void fuzz_varlen(fz_in *r, int cpu);

#endif
