/* Device memory for the HIP tests, the shared GPU tests (tests/cuda built
 * with LPATTN_TEST_HIP) among them: C files cannot include the HIP runtime
 * portably, so these wrap the runtime calls the backend uses (vendor.h). */
#include <stdio.h>
#include <stdlib.h>

#include "vendor.h"

extern "C" void *ht_dalloc(size_t n) {
  void *p = NULL;
  if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
    fprintf(stderr, "device alloc of %zu bytes failed\n", n);
    exit(1);
  }
  return p;
}
extern "C" void ht_dfree(void *p) { (void)cudaFree(p); }
extern "C" void ht_up(void *d, const void *h, size_t n) {
  (void)cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, 0);
  (void)cudaStreamSynchronize(0);
}
extern "C" void ht_down(void *h, const void *d, size_t n) {
  (void)cudaStreamSynchronize(0);
  (void)cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, 0);
  (void)cudaStreamSynchronize(0);
}
extern "C" void ht_dset(void *d, int byte, size_t n) {
  (void)cudaMemsetAsync(d, byte, n, 0);
  (void)cudaStreamSynchronize(0);
}
extern "C" int ht_dsync(void) {
  return cudaStreamSynchronize(0) == cudaSuccess && cudaGetLastError() == cudaSuccess;
}
