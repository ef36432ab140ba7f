/* Guarded strided tensors of the fuzz target (fuzz_util.h). */
#include "fuzz_util.h"

float fz_load(const lpattn_tensor *t, int64_t off) {
  const uint8_t *p = (const uint8_t *)t->data;
  uint16_t h;
  float f;
  switch (t->dtype) {
    case LPATTN_F32: memcpy(&f, p + off * 4, 4); return f;
    case LPATTN_F16: memcpy(&h, p + off * 2, 2); return lpattn_f16_to_f32(h);
    case LPATTN_BF16: memcpy(&h, p + off * 2, 2); return lpattn_bf16_to_f32(h);
    default: return 0.0f;
  }
}

void fz_store(const lpattn_tensor *t, int64_t off, float x) {
  uint8_t *p = (uint8_t *)t->data;
  uint16_t h;
  int32_t i;
  switch (t->dtype) {
    case LPATTN_F32: memcpy(p + off * 4, &x, 4); break;
    case LPATTN_F16: h = lpattn_f32_to_f16(x), memcpy(p + off * 2, &h, 2); break;
    case LPATTN_BF16: h = lpattn_f32_to_bf16(x), memcpy(p + off * 2, &h, 2); break;
    case LPATTN_I32: i = (int32_t)x, memcpy(p + off * 4, &i, 4); break;
    default: p[off] = (uint8_t)x; break;
  }
}

/* Strides of a layout: order[0] is the innermost dimension. */
static void contiguous(lpattn_tensor *t, const int order[4], int64_t pad) {
  int64_t s = 1;
  for (int i = 0; i < 4; i++) {
    t->stride[order[i]] = s;
    s *= t->shape[order[i]] + (i == 0 ? pad : 0);
  }
}

static void pick_layout(lpattn_tensor *t, fz_in *r) {
  static const int rowmajor[4] = {3, 2, 1, 0}, bshd[4] = {3, 1, 2, 0};
  int order[4] = {3, 2, 1, 0};
  const int lay = fz_pick(r, 16);
  if (lay < 8) {
    contiguous(t, rowmajor, lay == 7 ? fz_pick(r, 9) : 0);
  } else if (lay < 10) {
    contiguous(t, bshd, 0);
  } else if (lay == 10) { /* any permutation */
    for (int i = 3; i > 0; i--) {
      int j = fz_pick(r, i + 1), tmp = order[i];
      order[i] = order[j], order[j] = tmp;
    }
    contiguous(t, order, 0);
  } else if (lay == 11) { /* padded rows */
    contiguous(t, rowmajor, 0);
    t->stride[2] = t->shape[3] + 1 + fz_pick(r, 17);
    t->stride[1] = t->stride[2] * t->shape[2];
    t->stride[0] = t->stride[1] * t->shape[1];
  } else if (lay == 12) { /* one dimension broadcast */
    contiguous(t, rowmajor, 0);
    t->stride[fz_pick(r, 4)] = 0;
  } else if (lay == 13) { /* rows that overlap */
    contiguous(t, rowmajor, 0);
    t->stride[2] = t->shape[3] / 2 > 0 ? t->shape[3] / 2 : 1;
  } else if (lay == 14) { /* anything small */
    for (int i = 0; i < 4; i++) t->stride[i] = fz_pick(r, 200);
  } else { /* never valid: negative, or a span past int64 */
    contiguous(t, rowmajor, 0);
    int big = -1;
    for (int i = 0; i < 4; i++)
      if (t->shape[i] >= 3) big = i;
    if (big >= 0 && fz_pick(r, 2)) t->stride[big] = INT64_MAX / 2;
    else t->stride[fz_pick(r, 4)] = -1 - fz_pick(r, 64);
  }
}

/* Elements in the span, or -1 when it is negative or past 16 M. */
static int64_t span_of(const lpattn_tensor *t) {
  int64_t span = 1;
  for (int i = 0; i < 4; i++) {
    if (t->stride[i] < 0 || t->shape[i] < 1) return -1;
    if (t->stride[i] > (int64_t)1 << 24 || t->shape[i] > (int64_t)1 << 24) return -1;
    span += (t->shape[i] - 1) * t->stride[i];
    if (span > (int64_t)1 << 24) return -1;
  }
  return span;
}

void fz_tensor_make(fz_tensor *x, fz_in *r, lpattn_dtype dt, const int64_t shape[4], int output,
                    float amp, int nonfinite) {
  memset(x, 0, sizeof *x);
  x->output = output;
  lpattn_tensor *t = &x->t;
  t->dtype = dt;
  memcpy(t->shape, shape, sizeof t->shape);
  pick_layout(t, r);
  const int64_t span = span_of(t);
  x->valid_layout = span > 0;
  const size_t bytes = x->valid_layout ? (size_t)span * fz_esize(dt) : 16;
  t->data = fz_alloc(&x->buf, bytes);
  if (x->valid_layout && !output && (dt == LPATTN_F32 || dt == LPATTN_F16 || dt == LPATTN_BF16)) {
    FZ_FOR_EACH(t, off) {
      float v = amp * (2.0f * fz_unit(r) - 1.0f);
      if (nonfinite && (fz_next(r) & 63) == 0) v = (fz_next(r) & 1) ? NAN : -INFINITY;
      fz_store(t, off, v);
    }
  }
  if (x->valid_layout && !output && dt == LPATTN_I32)
    FZ_FOR_EACH(t, off) fz_store(t, off, (float)(int)(fz_next(r) % 7) - 1.0f);
  x->before = (uint8_t *)malloc(bytes);
  if (!x->before) abort();
  memcpy(x->before, t->data, bytes);
}

int fz_all_finite(const lpattn_tensor *t) {
  FZ_FOR_EACH(t, off) if (!isfinite(fz_load(t, off))) return 0;
  return 1;
}

/* 1 when two index tuples of the view share an element (brute force). */
static int shares_elements(const fz_tensor *x) {
  if (!x->valid_layout) return 0;
  const size_t n = x->buf.bytes / fz_esize(x->t.dtype);
  uint8_t *seen = (uint8_t *)calloc(n, 1);
  int dup = 0;
  if (!seen) abort();
  FZ_FOR_EACH(&x->t, off) {
    dup |= seen[off];
    seen[off] = 1;
  }
  free(seen);
  return dup;
}

int fz_tensor_dup(const fz_tensor *x) { return shares_elements(x); }

void fz_tensor_done(fz_tensor *x, int call_ok, const char *what) {
  const uint8_t *now = fz_data(&x->buf);
  const size_t bytes = x->buf.bytes;
  if (!x->output || !call_ok) {
    FZ_ASSERT(memcmp(now, x->before, bytes) == 0, "%s: %s written by a %s call", what,
              x->output ? "output" : "input", call_ok ? "successful" : "failed");
  } else {
    const size_t es = fz_esize(x->t.dtype);
    uint8_t *mine = (uint8_t *)calloc(bytes, 1);
    if (!mine) abort();
    FZ_FOR_EACH(&x->t, off) memset(mine + off * (int64_t)es, 1, es);
    for (size_t i = 0; i < bytes; i++)
      FZ_ASSERT(mine[i] || now[i] == x->before[i], "%s: byte %zu outside the view written", what, i);
    free(mine);
  }
  fz_release(&x->buf, what);
  free(x->before);
  x->before = NULL;
}
