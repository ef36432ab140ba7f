// Kernel lookup through the generated X-macro registry (gen/registry_attn.inc):
// rows come most specific first, so the first match is the best kernel.
#include "cpu.h"

namespace lpattn_cpu {

#ifdef LPATTN_CPU_ALL_VARIANTS
#define LPATTN_KERNEL_ALL LPATTN_KERNEL_DEFAULT
#else
#define LPATTN_KERNEL_ALL(...)
#endif
#define LPATTN_ATTN(set, ...) LPATTN_KERNEL_##set(__VA_ARGS__)

#define LPATTN_KERNEL_DEFAULT(name, ...) void name(const AttnJob &, int64_t, Scratch *);
#include "gen/registry_attn.inc"
#undef LPATTN_KERNEL_DEFAULT

struct Entry {
  AttnKernel fn;
  int64_t head_dim;  // 0 = any
};

#define LPATTN_KERNEL_DEFAULT(name, head_dim, ...) {name, head_dim},
static const Entry kKernels[] = {
#include "gen/registry_attn.inc"
};
#undef LPATTN_KERNEL_DEFAULT

AttnKernel FindAttnKernel(int64_t head_dim) {
  for (const Entry &e : kKernels)
    if (e.head_dim == 0 || e.head_dim == head_dim) return e.fn;
  return nullptr;
}

}  // namespace lpattn_cpu
