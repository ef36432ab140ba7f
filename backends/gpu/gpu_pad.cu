/* Head dims without a compiled kernel variant (SEMANTICS "Head dimensions"):
 * the call runs on the next larger compiled D with zero channels. Q, K, V
 * (and the backward's O, dO) are copied into contiguous zero-padded rows of
 * the pad buffer (gpu_impl.pad, separate from the workspace, which the
 * padded call carves as usual); outputs come back as their first D channels.
 * Exact: zero channels add nothing to q.k, give zero output channels, and a
 * quantization group along D that passes the true D is quantized as if
 * zero-padded (SPEC 2); sm_scale was resolved from the true D by the core. */
#include <stdio.h>

#include "error.h"
#include "gpu_backend.h"

namespace GPU_NS {

/* One thread per element of the padded [rows, Dp] copy of a strided [B, H, S, D]
 * view; `in`: copy into the padded buffer (zeros past D), else back out of it
 * (the first D channels). T: the element's bits (2 or 4 bytes). */
template <typename T>
__global__ void gpu_pad_kernel(T *x, int64_t s0, int64_t s1, int64_t s2, int64_t s3, int H, int S,
                               int D, int Dp, int64_t n, T *p, int in) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int d = (int)(i % Dp);
  const int64_t r = i / Dp, s = r % S, h = (r / S) % H, b = r / S / H;
  if (d >= D) {
    if (in) p[i] = T(0);
    return;
  }
  T *e = x + b * s0 + h * s1 + s * s2 + (int64_t)d * s3;
  if (in)
    p[i] = *e;
  else
    *e = p[i];
}

/* Grows the pad buffer like the workspace (stream-ordered, no host sync). */
static lpattn_status ensure_pad(gpu_impl *im, size_t bytes) {
  if (bytes <= im->pad_size) return LPATTN_OK;
  if (im->pad) CK(cudaFreeAsync(im->pad, im->stream));
  im->pad = NULL;
  im->pad_size = 0;
  const size_t want = bytes + bytes / 4;
  if (cudaMallocAsync(&im->pad, want, im->stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  im->pad_size = want;
  return LPATTN_OK;
}

static size_t esize(lpattn_dtype t) { return t == LPATTN_F32 ? 4 : 2; }

lpattn_status gpu_pad_begin(gpu_impl *im, const lpattn_tensor *const *t, int n, int64_t Dp, size_t *at) {
  gpu_carve c = {0};
  for (int i = 0; i < n; i++) {
    const lpattn_tensor *x = t[i];
    at[i] = carve(&c, (size_t)(x->shape[0] * x->shape[1] * x->shape[2]) * (size_t)Dp * esize(x->dtype));
  }
  return ensure_pad(im, c.used);
}

lpattn_status gpu_pad_copy(gpu_impl *im, const lpattn_tensor *x, int64_t Dp, size_t at, int in,
                           lpattn_tensor *padded) {
  const int64_t B = x->shape[0], H = x->shape[1], S = x->shape[2], D = x->shape[3];
  const int64_t n = B * H * S * Dp;
  void *p = (char *)im->pad + at;
  if (n > 0 && in != 2) {
    const unsigned blocks = (unsigned)((n + 255) / 256);
    const int64_t *s = x->stride;
    if (esize(x->dtype) == 4)
      gpu_pad_kernel<uint32_t><<<blocks, 256, 0, im->stream>>>((uint32_t *)x->data, s[0], s[1], s[2], s[3],
                                                               (int)H, (int)S, (int)D, (int)Dp, n,
                                                               (uint32_t *)p, in);
    else
      gpu_pad_kernel<uint16_t><<<blocks, 256, 0, im->stream>>>((uint16_t *)x->data, s[0], s[1], s[2], s[3],
                                                               (int)H, (int)S, (int)D, (int)Dp, n,
                                                               (uint16_t *)p, in);
    CK(cudaGetLastError());
  }
  if (padded) {
    *padded = *x;
    padded->data = p;
    padded->shape[3] = Dp;
    padded->stride[3] = 1, padded->stride[2] = Dp, padded->stride[1] = S * Dp, padded->stride[0] = H * S * Dp;
  }
  return LPATTN_OK;
}

/* need: LP_PATHS_* the attn variant must have besides being built */
static bool built(int bwd, int64_t d, lpattn_dtype dt, int need) {
  return bwd ? find_bwd(d, dt) != NULL : find_attn(d, dt) != NULL && (find_attn_paths(d, dt) & need) == need;
}

lpattn_status gpu_padded_dim(int64_t D, lpattn_dtype dt, int bwd, int need, int64_t *Dp) {
  for (int64_t d = D; d <= LP_HEAD_DIM_MAX; d++)
    if (built(bwd, d, dt, need)) return *Dp = d, LPATTN_OK;
  char have[128] = "none";
  for (int64_t d = LP_HEAD_DIM_MIN, w = 0; d <= LP_HEAD_DIM_MAX && w + 8 < (int64_t)sizeof have; d++)
    if (built(bwd, d, dt, need)) w += snprintf(have + w, sizeof have - (size_t)w, "%s%d", w ? ", " : "", (int)d);
  return lp_fail(LPATTN_ERR_UNSUPPORTED, "head_dim = %lld: the " GPU_NAME " backend's %s kernels (%s) are "
                 "built for D = %s, none >= %lld to pad to%s", (long long)D, bwd ? "backward" : "attention",
                 lp_dtype_name(dt), have, (long long)D,
                 bwd ? " (no larger backward variant exists yet)" : "; build with -Dvariants=all for more");
}

} // namespace GPU_NS
