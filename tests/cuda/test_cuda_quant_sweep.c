/* The amax sweep (tests/quant_sweep.h) through lpattn_quantize on the GPU
 * backend against ref (core/quant.c), bit for bit: codes, group scales and
 * outer scales for every format, both axes, both MXFP4 scale rules, RNE and
 * SR. Built for CUDA here and for HIP in tests/hip. */
#include "cudatest.h"
#include "quant_sweep.h"

static size_t diff_bytes(const void *a, const void *b, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; i++) d += ((const uint8_t *)a)[i] != ((const uint8_t *)b)[i];
  return d;
}

static void sweep_case(lpattn_ctx *gpu, lpattn_ctx *ref, ct_pair *x, lpattn_format f, lpattn_axis ax,
                       int up, int sr) {
  const int64_t S = x->h.shape[2], shape[4] = {1, 1, S, QS_D};
  ct_qpair q;
  ct_qpair_make(&q, f, ax, shape);
  lpattn_quant_params p;
  lpattn_quant_params_init(&p);
  p.format = f, p.axis = ax, p.tile = 64, p.mx_scale_round_up = up;
  p.rounding = sr ? LPATTN_ROUND_STOCHASTIC : LPATTN_ROUND_NEAREST_EVEN, p.seed = 0xfeedbeef01ull;
  ct_qpair_quantize(&q, gpu, ref, x, &p);
  const size_t bc = diff_bytes(q.h.codes, q.back.codes, q.cb), bs = diff_bytes(q.h.scales, q.back.scales, q.sb),
               bo = diff_bytes(q.h.outer, q.back.outer, q.oc * 4);
  CHECK(bc == 0 && bs == 0 && bo == 0,
        "fmt %d axis %d mx_round_up %d sr %d: %zu code, %zu scale, %zu outer bytes differ from ref", f, ax,
        up, sr, bc, bs, bo);
  for (size_t i = 0; bs && i < q.sb; i++)
    if (q.h.scales[i] != q.back.scales[i]) {
      fprintf(stderr, "  first scale difference: group %zu: ref %02x, %s %02x\n", i, q.h.scales[i], CT_NAME, q.back.scales[i]);
      break;
    }
  ct_qpair_free(&q);
}

int main(void) {
  lpattn_ctx *gpu = NULL, *ref = NULL;
  if (!ct_setup(&gpu, &ref)) return test_skip("no usable GPU device");
  const int rows = qs_rows();
  ct_pair x = ct_make(LPATTN_F32, 1, 1, rows, QS_D);
  for (int k = 0; k < rows; k++) qs_row(k, (float *)x.h.data + (size_t)k * QS_D);
  ct_up(&x);
  for (int f = LPATTN_FMT_NVFP4; f <= LPATTN_FMT_FP8; f++)
    for (int ax = LPATTN_AXIS_D; ax <= LPATTN_AXIS_S; ax++)
      for (int up = 0; up < (f == LPATTN_FMT_MXFP4 ? 2 : 1); up++)
        for (int sr = 0; sr < 2; sr++) sweep_case(gpu, ref, &x, (lpattn_format)f, (lpattn_axis)ax, up, sr);
  CHECK(ht_dsync(), "device error");
  ct_free(&x);
  lpattn_free(gpu);
  lpattn_free(ref);
  return test_finish();
}
