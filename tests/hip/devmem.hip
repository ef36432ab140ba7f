/* Device memory for the HIP tests (C files cannot include the HIP runtime
 * portably): the same runtime calls the backend uses, through vendor.h. */
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
extern "C" void ht_dfree(void *p) { cudaFree(p); }
extern "C" void ht_up(void *d, const void *h, size_t n) {
  cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, 0);
  cudaStreamSynchronize(0);
}
extern "C" void ht_down(void *h, const void *d, size_t n) {
  cudaStreamSynchronize(0);
  cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, 0);
  cudaStreamSynchronize(0);
}
/* Fill with a byte (0xFF: NaN in every float type) so unwritten outputs show. */
extern "C" void ht_dpoison(void *d, size_t n) {
  cudaMemsetAsync(d, 0xFF, n, 0);
  cudaStreamSynchronize(0);
}
