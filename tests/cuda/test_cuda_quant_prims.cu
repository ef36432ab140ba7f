// The quantizer primitives of backends/math/lpk_quant.h as the CUDA kernels
// compile them (kernels/lp_gpu.cuh), run on the device over the amax sweep
// (tests/quant_sweep.h) against core's lp_quantize_domain: the domain
// quantizer built from the steps (every format, both MXFP4 scale rules, RNE
// and SR) and the group-scale step alone, which the attention kernels' P
// quantizer calls. Exit 77 without a GPU.
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "formats.h"
#include "lp_gpu.cuh"
#include "quant_sweep.h"
#include "testutil.h"

using namespace lpattn_cuda;

struct Cfg {
  int fmt, up, sr;
  uint64_t seed;
};

// One thread per sweep row: codes, scales, outer of the domain quantizer,
// and (MXFP4) the group-scale step's code of each group.
__global__ void prims_kernel(Cfg c, const float *x, int rows, uint8_t *codes, uint8_t *scales, float *outer,
                             uint8_t *gcode) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= rows) return;
  int64_t idx[QS_D];
  for (int i = 0; i < QS_D; i++) idx[i] = (int64_t)k * QS_D + i;
  const float *row = x + (size_t)k * QS_D;
  lpk_quantize_domain(c.fmt, c.up, c.sr, c.seed, idx, row, 1, QS_D, codes + (size_t)k * QS_D,
                      scales + (size_t)k * 4, outer + k);
  for (int g = 0; g < 2; g++) {
    int bad = 0;
    float d, ga = lpk_finite_amax(row + g * 32, 1, 32, &bad);
    lpk_group_scale(LPATTN_FMT_MXFP4, ga, bad, 1.0f, c.up, &gcode[k * 2 + g], &d);
  }
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return test_skip("no usable GPU device");
  const int rows = qs_rows();
  const size_t n = (size_t)rows * QS_D;
  float *hx = (float *)malloc(n * 4), *dx, *dout;
  for (int k = 0; k < rows; k++) qs_row(k, hx + (size_t)k * QS_D);
  uint8_t *dc, *ds, *dg;
  cudaMalloc(&dx, n * 4), cudaMalloc(&dout, rows * 4);
  cudaMalloc(&dc, n), cudaMalloc(&ds, rows * 4), cudaMalloc(&dg, rows * 2);
  cudaMemcpy(dx, hx, n * 4, cudaMemcpyHostToDevice);
  uint8_t *gc = (uint8_t *)malloc(n), *gs = (uint8_t *)malloc(rows * 4), *gg = (uint8_t *)malloc(rows * 2);
  float *go = (float *)malloc(rows * 4);
  for (int fmt = LPATTN_FMT_NVFP4; fmt <= LPATTN_FMT_FP8; fmt++)
    for (int up = 0; up < (fmt == LPATTN_FMT_MXFP4 ? 2 : 1); up++)
      for (int sr = 0; sr < 2; sr++) {
        const Cfg c = {fmt, up, sr, 0xabcdef12345ull};
        prims_kernel<<<(rows + 63) / 64, 64>>>(c, dx, rows, dc, ds, dout, dg);
        CHECK(cudaDeviceSynchronize() == cudaSuccess, "kernel failed");
        cudaMemcpy(gc, dc, n, cudaMemcpyDeviceToHost), cudaMemcpy(gs, ds, rows * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(go, dout, rows * 4, cudaMemcpyDeviceToHost), cudaMemcpy(gg, dg, rows * 2, cudaMemcpyDeviceToHost);
        const lp_quant_cfg cfg = {(lpattn_format)fmt, sr, c.seed, up};
        const int ng = fmt == LPATTN_FMT_FP8 ? 0 : QS_D / lp_group_size(cfg.format);
        int bad = 0, bad_step = 0;
        for (int k = 0; k < rows; k++) {
          uint8_t codes[QS_D], sc[4];
          int64_t idx[QS_D];
          float o;
          for (int i = 0; i < QS_D; i++) idx[i] = (int64_t)k * QS_D + i;
          lp_quantize_domain(&cfg, hx + (size_t)k * QS_D, 1, QS_D, idx, codes, sc, &o);
          const bool ok = memcmp(codes, gc + (size_t)k * QS_D, QS_D) == 0 && memcmp(sc, gs + k * 4, ng) == 0 &&
                          (memcmp(&o, go + k, 4) == 0 || (o != o && go[k] != go[k]));
          if (!ok && bad++ < 5) fprintf(stderr, "fmt %d up %d sr %d: row %d (amax %a) differs\n", fmt, up, sr, k, qs_amax(k));
          if (fmt == LPATTN_FMT_MXFP4)
            for (int g = 0; g < 2; g++)
              if (sc[g] != gg[k * 2 + g] && bad_step++ < 5)
                fprintf(stderr, "mx group scale step (round_up %d): amax %a: core %02x, gpu %02x\n", up,
                        qs_amax(k), sc[g], gg[k * 2 + g]);
        }
        CHECK(bad == 0, "fmt %d up %d sr %d: %d of %d rows differ from core", fmt, up, sr, bad, rows);
        CHECK(bad_step == 0, "fmt %d up %d: %d MXFP4 group-scale steps differ from core", fmt, up, bad_step);
      }
  cudaFree(dx), cudaFree(dout), cudaFree(dc), cudaFree(ds), cudaFree(dg);
  free(hx), free(gc), free(gs), free(gg), free(go);
  return test_finish();
}
