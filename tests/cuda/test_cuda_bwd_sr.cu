// The backward's in-register SR quantizer of P and dS (backends/gpu/kernels/lp_gpu_bwd_sr.cuh,
// gpu_bwd_sr_tile) against the reference domain step as the device compiles it
// (lpk_quantize_domain with sr = 1, then gpu_deq_inner), on the same rows and
// Philox indices: both tile orientations (dkdv: rows are keys, index row + col * Skv;
// dq: row * Skv + col), Skv with and without the shared-Philox path (Skv % 16),
// every format and MXFP4 scale rule, rows of every scale, zero groups, NaN and
// infinities. The tile takes x * fl(1 / divisor) where the reference divides
// (SEMANTICS "Backward"), so a value may differ where that last bit moves a
// rounding; a wrong Philox word would move about half of them. First the tile's
// random bytes alone (gpu_bwd_randoms, as the uniforms (2r + 1) * 2^-9 the value
// step takes) against core's lp_sr_uniform of each element, bit for bit
// (SPEC 2: byte n % 4 of word (n / 4) % 4 at counter n / 16). Exit 77 without a GPU.
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <random>
#include <vector>

#include "formats.h"
#include "lp_gpu_bwd.cuh"
#include "testutil.h"

using namespace lpattn_cuda;

__device__ int g_bad_outer;

// A CTA of 4 warps: warp w's 16 x 64 tile is rows [16 (4 blockIdx.x + w), + 16)
// of x ([rows][64]); out gets the tile's values then the reference's (2 x 1024 a warp).
template <bool KEYROWS, bool NONNEG>
__global__ void sr_kernel(const float *x, int fmt, int up, uint64_t key, int64_t b0, int Skv, float *out) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, tile = blockIdx.x * 4 + w;
  const gpu_lay<32> lay{lane};
  const float *xt = x + (size_t)tile * 1024;
  float *ot = out + (size_t)tile * 2048;
  /* the tile's first element; rows step 1 (KEYROWS) or Skv */
  const int64_t base = b0 + (int64_t)tile * 64 * Skv + (KEYROWS ? 16 * (tile % 4) : (int64_t)16 * (tile % 4) * Skv);
  float v[2][16], rout[2];
  for (int hh = 0; hh < 2; hh++)
    for (int sl = 0; sl < 16; sl++) v[hh][sl] = xt[lay.row(hh) * 64 + lay.key(sl)];
  gpu_bwd_sr_tile<KEYROWS, NONNEG>(v, rout, lane, fmt, up, key, base, Skv);
  __shared__ float so[4][16];
  for (int hh = 0; hh < 2; hh++) {
    if (lay.lead()) so[w][lay.row(hh)] = rout[hh];
    for (int sl = 0; sl < 16; sl++) ot[lay.row(hh) * 64 + lay.key(sl)] = v[hh][sl];
  }
  __syncwarp();
  if (lane < 16) { /* the reference: row `lane` as one domain */
    int64_t idx[64];
    uint8_t codes[64], sc[4];
    float outer;
    for (int i = 0; i < 64; i++) idx[i] = KEYROWS ? base + lane + (int64_t)i * Skv : base + (int64_t)lane * Skv + i;
    lpk_quantize_domain(fmt, up, 1, key, idx, xt + lane * 64, 1, 64, codes, sc, &outer);
    const int G = fmt == LPATTN_FMT_MXFP4 ? 32 : 16;
    for (int i = 0; i < 64; i++)
      ot[1024 + lane * 64 + i] = gpu_deq_inner(fmt, codes[i], fmt == LPATTN_FMT_FP8 ? 0 : sc[i / G]);
    const float mine = so[w][lane], ref = fmt == LPATTN_FMT_MXFP4 ? 1.0f : outer;
    if (__float_as_uint(mine) != __float_as_uint(ref) && !(mine != mine && ref != ref)) atomicAdd(&g_bad_outer, 1);
  }
}

// The uniforms of warp tiles (as sr_kernel places them) to out[tile][row][col].
template <bool KEYROWS>
__global__ void u_kernel(uint64_t key, int64_t b0, int Skv, float *out) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, tile = blockIdx.x * 4 + w;
  const gpu_lay<32> lay{lane};
  const int64_t base = b0 + (int64_t)tile * 64 * Skv + (KEYROWS ? 16 * (tile % 4) : (int64_t)16 * (tile % 4) * Skv);
  uint32_t rb[8];
  gpu_bwd_randoms<KEYROWS>(rb, 0, lane, key, base, Skv);
  if (!KEYROWS) gpu_bwd_randoms<KEYROWS>(rb, 1, lane, key, base, Skv);
  for (int hh = 0; hh < 2; hh++)
    for (int sl = 0; sl < 16; sl++)
      out[(size_t)tile * 1024 + lay.row(hh) * 64 + lay.key(sl)] = gpu_bwd_u<KEYROWS>(rb, hh, sl);
}

static void test_uniforms(float *dout) {
  const int NB = 16, N = NB * 4 * 1024;
  std::vector<float> hu(N);
  const int skvs[] = {64, 1104, 4096, 16, 1100, 1101, 130};
  for (int keyrows = 0; keyrows < 2; keyrows++)
    for (int Skv : skvs)
      for (int64_t off : {0, 192, 200, 7}) {
        const uint64_t key = 0x9E3779B97F4A7C15ull * (uint64_t)(Skv + 1) + (uint64_t)off;
        const int64_t b0 = (int64_t)0x12345678 * 64 * Skv + off; /* counters above 2^32 */
        if (keyrows) u_kernel<true><<<NB, 128>>>(key, b0, Skv, dout);
        else u_kernel<false><<<NB, 128>>>(key, b0, Skv, dout);
        CHECK(cudaDeviceSynchronize() == cudaSuccess, "u kernel failed");
        cudaMemcpy(hu.data(), dout, (size_t)N * 4, cudaMemcpyDeviceToHost);
        long bad = 0;
        for (int t = 0; t < NB * 4; t++) {
          const int64_t base = b0 + (int64_t)t * 64 * Skv + (keyrows ? 16 * (t % 4) : (int64_t)16 * (t % 4) * Skv);
          for (int row = 0; row < 16; row++)
            for (int col = 0; col < 64; col++) {
              const int64_t n = keyrows ? base + row + (int64_t)col * Skv : base + (int64_t)row * Skv + col;
              const float want = lp_sr_uniform(key, (uint64_t)n), got = hu[(size_t)t * 1024 + row * 64 + col];
              if (memcmp(&want, &got, 4) != 0 && bad++ < 3)
                fprintf(stderr, "keyrows %d Skv %d off %lld tile %d (%d, %d): u %a, core %a\n", keyrows, Skv,
                        (long long)off, t, row, col, got, want);
            }
        }
        CHECK(bad == 0, "keyrows %d Skv %d off %lld: %ld of %d uniforms differ from core's", keyrows, Skv,
              (long long)off, bad, N);
      }
}

// Rows of 64: plain [0, 1) (P-like), signed at many scales, subnormal and tiny, huge;
// zero rows and zero groups, NaN or infinity in one place.
static void fill(std::vector<float> &x, bool nonneg) {
  std::mt19937 g(7);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  for (size_t r = 0; r < x.size() / 64; r++) {
    const int kind = (int)(g() % 6), sp = (int)(g() % 10);
    for (int c = 0; c < 64; c++) {
      const float u = U(g), s = nonneg ? u : u - 0.5f;
      float v = kind == 0 ? u : kind == 1 ? s * ldexpf(1.0f, (int)(g() % 40) - 30) : kind == 2 ? s * 1e-39f
              : kind == 3 ? s * 1e-32f : kind == 4 ? u * ldexpf(1.0f, (int)(g() % 200) - 140) : s * 1e30f;
      if (sp == 0 || (sp == 1 && c / 16 == 1) || (sp == 5 && g() % 2)) v = 0.0f;
      x[r * 64 + c] = v;
    }
    if (sp == 2) x[r * 64 + g() % 64] = NAN;
    if (sp == 3) x[r * 64 + g() % 64] = nonneg ? INFINITY : -INFINITY;
  }
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return test_skip("no usable GPU device");
  const int NB = 64, N = NB * 4 * 1024;
  float *dx, *dout;
  CHECK(cudaMalloc(&dx, N * 4) == cudaSuccess && cudaMalloc(&dout, (size_t)N * 8) == cudaSuccess, "cudaMalloc");
  std::vector<float> hx(N), ho((size_t)N * 2);
  test_uniforms(dout);
  const int skvs[] = {64, 1104, 4096, 1100, 1101, 130}; /* the last three: one Philox block per element */
  for (int nonneg = 0; nonneg < 2; nonneg++) {
    fill(hx, nonneg);
    cudaMemcpy(dx, hx.data(), N * 4, cudaMemcpyHostToDevice);
    for (int keyrows = 0; keyrows < 2; keyrows++) {
      if (nonneg && !keyrows) continue; /* the kernels take NONNEG for dkdv's P only */
      for (int fmt = LPATTN_FMT_NVFP4; fmt <= LPATTN_FMT_FP8; fmt++)
        for (int up = 0; up < (fmt == LPATTN_FMT_MXFP4 ? 2 : 1); up++)
          for (int Skv : skvs) {
            const uint64_t key = 0x1234567890abcdefull * (uint64_t)(fmt + 3) + (uint64_t)Skv;
            const int64_t b0 = (int64_t)12345 * 4 * Skv + 192;
            int zero = 0;
            cudaMemcpyToSymbol(g_bad_outer, &zero, 4);
            if (keyrows && nonneg) sr_kernel<true, true><<<NB, 128>>>(dx, fmt, up, key, b0, Skv, dout);
            else if (keyrows) sr_kernel<true, false><<<NB, 128>>>(dx, fmt, up, key, b0, Skv, dout);
            else sr_kernel<false, false><<<NB, 128>>>(dx, fmt, up, key, b0, Skv, dout);
            CHECK(cudaDeviceSynchronize() == cudaSuccess, "kernel failed");
            cudaMemcpy(ho.data(), dout, (size_t)N * 8, cudaMemcpyDeviceToHost);
            int bad_outer = 0;
            cudaMemcpyFromSymbol(&bad_outer, g_bad_outer, 4);
            long bad = 0;
            for (int t = 0; t < NB * 4; t++)
              for (int i = 0; i < 1024; i++) {
                const float a = ho[(size_t)t * 2048 + i], b = ho[(size_t)t * 2048 + 1024 + i];
                bad += !(a == b || (a != a && b != b)); /* +0 and -0 are one value */
              }
            CHECK(bad_outer == 0 && bad <= N / 100000,
                  "fmt %d up %d keyrows %d nonneg %d Skv %d: %ld of %d values, %d outer scales differ", fmt, up,
                  keyrows, nonneg, Skv, bad, N, bad_outer);
          }
    }
  }
  cudaFree(dx), cudaFree(dout);
  return test_finish();
}
