/* Argument checks shared by the API fronts (core/api.c, core/api_kv.c):
 * params structs, tensor views, head dims, finiteness; each failure leaves
 * its detail (core/error.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "error.h"
#include "formats.h"
#include "internal.h"

size_t lp_dtype_bytes(lpattn_dtype t) {
  switch (t) {
    case LPATTN_F32: case LPATTN_I32: return 4;
    case LPATTN_F16: case LPATTN_BF16: return 2;
    default: return 1;
  }
}

/* Copies a caller's params struct of any known size over the defaults. */
lpattn_status lp_take_params(void *dst, size_t dst_size, const void *src) {
  if (!src) return LPATTN_OK;
  size_t n = *(const size_t *)src;
  if (n < sizeof(size_t) || n > dst_size)
    return lp_fail(LPATTN_ERR_PARAMS_SIZE, "struct_size = %zu, expected %zu..%zu (this version's size)",
                   n, sizeof(size_t), dst_size);
  memcpy(dst, src, n);
  *(size_t *)dst = dst_size;
  return LPATTN_OK;
}

/* An output view must give every index tuple its own element (lpattn.h):
 * the dimensions of extent > 1, ordered by stride, each step past the whole
 * extent of the previous one. Strides are non-negative and spans known not
 * to overflow. */
static lpattn_status check_disjoint(const lpattn_tensor *t) {
  int64_t st[4], ex[4];
  int n = 0;
  for (int i = 0; i < 4; i++) {
    if (t->shape[i] < 2) continue;
    int j = n++;
    for (; j > 0 && st[j - 1] > t->stride[i]; j--) st[j] = st[j - 1], ex[j] = ex[j - 1];
    st[j] = t->stride[i], ex[j] = t->shape[i];
  }
  for (int i = 0; i < n; i++)
    if (st[i] < 1 || (i > 0 && st[i - 1] > st[i] / ex[i - 1]))
      return lp_fail(LPATTN_ERR_BAD_STRIDE,
                     ".stride = {%lld, %lld, %lld, %lld} with shape {%lld, %lld, %lld, %lld}: an "
                     "output view must give every index its own element",
                     (long long)t->stride[0], (long long)t->stride[1], (long long)t->stride[2],
                     (long long)t->stride[3], (long long)t->shape[0], (long long)t->shape[1],
                     (long long)t->shape[2], (long long)t->shape[3]);
  return LPATTN_OK;
}

/* Positive shape, sane strides, and every byte offset representable;
 * outputs also without two indices on one element. */
lpattn_status lp_check_view(const lpattn_tensor *t, int want_output) {
  if (!t) return lp_fail(LPATTN_ERR_NULL_POINTER, " is NULL");
  if (!t->data) return lp_fail(LPATTN_ERR_NULL_POINTER, ".data is NULL");
  if ((unsigned)t->dtype > LPATTN_I32)
    return lp_fail(LPATTN_ERR_BAD_DTYPE, ".dtype = %d is not an lpattn_dtype", (int)t->dtype);
  int64_t span = 0, count = 1;
  for (int i = 0; i < 4; i++) {
    if (t->shape[i] <= 0)
      return lp_fail(LPATTN_ERR_BAD_SHAPE, ".shape[%d] = %lld, expected > 0", i,
                     (long long)t->shape[i]);
    if (t->stride[i] < 0)
      return lp_fail(LPATTN_ERR_BAD_STRIDE, ".stride[%d] = %lld, expected >= 0", i,
                     (long long)t->stride[i]);
    if (t->shape[i] > 1 && t->stride[i] == 0 && want_output)
      return lp_fail(LPATTN_ERR_BAD_STRIDE, ".stride[%d] = 0 with shape[%d] = %lld: an output "
                     "cannot broadcast", i, i, (long long)t->shape[i]);
    if (count > INT64_MAX / t->shape[i])
      return lp_fail(LPATTN_ERR_SIZE_OVERFLOW, ".shape: element count overflows int64");
    count *= t->shape[i];
    if (t->stride[i] && t->shape[i] - 1 > (INT64_MAX - span) / t->stride[i])
      return lp_fail(LPATTN_ERR_SIZE_OVERFLOW, ".stride[%d] = %lld: offsets overflow int64", i,
                     (long long)t->stride[i]);
    span += (t->shape[i] - 1) * t->stride[i];
  }
  if ((uint64_t)span >= (uint64_t)(SIZE_MAX / lp_dtype_bytes(t->dtype)) - 1)
    return lp_fail(LPATTN_ERR_SIZE_OVERFLOW, ": largest offset %lld overflows size_t bytes",
                   (long long)span);
  return want_output ? check_disjoint(t) : LPATTN_OK;
}

/* Detail of a shape mismatch: "<a>.shape = {..} but expected {..}". */
lpattn_status lp_shape_fail(const char *a, const int64_t got[4], const int64_t want[4]) {
  return lp_fail(LPATTN_ERR_BAD_SHAPE, "%s.shape = {%lld, %lld, %lld, %lld}, expected {%lld, %lld, %lld, %lld}",
                 a, (long long)got[0], (long long)got[1], (long long)got[2], (long long)got[3],
                 (long long)want[0], (long long)want[1], (long long)want[2], (long long)want[3]);
}

lpattn_status lp_dtype_fail(const char *a, lpattn_dtype got, const char *want) {
  return lp_fail(LPATTN_ERR_BAD_DTYPE, "%s.dtype = %s, expected %s", a, lp_dtype_name(got), want);
}

/* Entry i of a checked cu_seqlens view (I32, host memory). */
int64_t lp_cu_at(const lpattn_tensor *cu, int64_t i) {
  return ((const int32_t *)cu->data)[i * cu->stride[3]];
}

/* FlashAttention's cu_seqlens (lpattn_attention_varlen,
 * lpattn_paged_prefill_varlen): I32 {1, 1, 1, n + 1}, n >= 1 (entries > 0:
 * exactly that many), 0 first, never decreasing, the last == total. */
lpattn_status lp_check_cu_seqlens(const char *name, const lpattn_tensor *cu, int64_t entries,
                                  int64_t total) {
  LP_TRY_ARG(name, lp_check_view(cu, 0));
  if (cu->dtype != LPATTN_I32) return lp_dtype_fail(name, cu->dtype, "I32");
  if (cu->shape[0] != 1 || cu->shape[1] != 1 || cu->shape[2] != 1 || cu->shape[3] < 2)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "%s.shape = {%lld, %lld, %lld, %lld}, expected "
                   "{1, 1, 1, n + 1} for n >= 1 sequences", name, (long long)cu->shape[0],
                   (long long)cu->shape[1], (long long)cu->shape[2], (long long)cu->shape[3]);
  const int64_t n = cu->shape[3];
  if (entries > 0 && n != entries)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "%s has %lld entries, expected batch.num_seqs + 1 = %lld",
                   name, (long long)n, (long long)entries);
  if (lp_cu_at(cu, 0) != 0)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "%s[0] = %lld, expected 0", name,
                   (long long)lp_cu_at(cu, 0));
  for (int64_t i = 1; i < n; i++)
    if (lp_cu_at(cu, i) < lp_cu_at(cu, i - 1))
      return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "%s[%lld] = %lld < %s[%lld] = %lld: cumulative "
                     "lengths never decrease", name, (long long)i, (long long)lp_cu_at(cu, i), name,
                     (long long)(i - 1), (long long)lp_cu_at(cu, i - 1));
  if (lp_cu_at(cu, n - 1) != total)
    return lp_fail(LPATTN_ERR_BAD_SHAPE, "%s[%lld] = %lld but the packed tensor holds %lld rows "
                   "(shape[2])", name, (long long)(n - 1), (long long)lp_cu_at(cu, n - 1),
                   (long long)total);
  return LPATTN_OK;
}

/* Every D in [8, 256] (SEMANTICS "Head dimensions"): quantization groups along
 * D that pass the true D are quantized as if zero-padded. */
lpattn_status lp_check_head_dim(int64_t d) {
  if (d >= LP_HEAD_DIM_MIN && d <= LP_HEAD_DIM_MAX) return LPATTN_OK;
  return lp_fail(LPATTN_ERR_BAD_HEAD_DIM, "head_dim = %lld, expected an integer in [%d, %d]",
                 (long long)d, LP_HEAD_DIM_MIN, LP_HEAD_DIM_MAX);
}

lpattn_status lp_scan_finite(const lpattn_tensor *t) {
  for (int64_t a = 0; a < t->shape[0]; a++)
    for (int64_t b = 0; b < t->shape[1]; b++)
      for (int64_t c = 0; c < t->shape[2]; c++)
        for (int64_t d = 0; d < t->shape[3]; d++) {
          if (!isfinite(lp_load_f32(t->data, t->dtype, lp_off4(t, a, b, c, d))))
            return lp_fail(LPATTN_ERR_NONFINITE, "[%lld, %lld, %lld, %lld] is not finite (check_finite)",
                           (long long)a, (long long)b, (long long)c, (long long)d);
        }
  return LPATTN_OK;
}
