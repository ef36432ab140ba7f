/* Device buffers for the GPU backends without linking a GPU runtime: the
 * CUDA or HIP runtime library is opened with dlopen, only when the report
 * runs on such a backend. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

typedef int (*alloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
typedef int (*copy_fn)(void *, const void *, size_t, int);

static struct {
  lpattn_backend backend;
  void *lib;
  alloc_fn alloc;
  free_fn release;
  copy_fn copy;
} rt;

/* cudaMemcpyKind and hipMemcpyKind agree on these values. */
enum { HOST_TO_DEVICE = 1, DEVICE_TO_HOST = 2 };

int devmem_open(lpattn_backend b) {
  static const char *cuda[] = {"libcudart.so", "libcudart.so.12", "libcudart.so.13", NULL};
  static const char *hip[] = {"libamdhip64.so", "libamdhip64.so.6", NULL};
  const char **names = b == LPATTN_BACKEND_CUDA ? cuda : b == LPATTN_BACKEND_HIP ? hip : NULL;
  const char *prefix = b == LPATTN_BACKEND_CUDA ? "cuda" : "hip";
  if (rt.lib && rt.backend == b) return 0;
  if (!names) return -1;
  for (int i = 0; names[i] && !rt.lib; i++) rt.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!rt.lib) return -1;
  char sym[32];
  snprintf(sym, sizeof sym, "%sMalloc", prefix);
  *(void **)&rt.alloc = dlsym(rt.lib, sym);
  snprintf(sym, sizeof sym, "%sFree", prefix);
  *(void **)&rt.release = dlsym(rt.lib, sym);
  snprintf(sym, sizeof sym, "%sMemcpy", prefix);
  *(void **)&rt.copy = dlsym(rt.lib, sym);
  if (!rt.alloc || !rt.release || !rt.copy) {
    dlclose(rt.lib);
    memset(&rt, 0, sizeof rt);
    return -1;
  }
  rt.backend = b;
  return 0;
}

void *devmem_alloc(size_t bytes) {
  void *p = NULL;
  return rt.alloc && rt.alloc(&p, bytes) == 0 ? p : NULL;
}

void *devmem_upload(const void *host, size_t bytes) {
  void *p = devmem_alloc(bytes);
  if (p && rt.copy(p, host, bytes, HOST_TO_DEVICE) != 0) {
    rt.release(p);
    p = NULL;
  }
  return p;
}

int devmem_download(void *host, const void *dev, size_t bytes) {
  return rt.copy && rt.copy(host, dev, bytes, DEVICE_TO_HOST) == 0 ? 0 : -1;
}

void devmem_free(void *p) {
  if (p && rt.release) rt.release(p);
}
