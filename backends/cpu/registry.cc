// Kernel lookup through the generated X-macro registry (gen/registry.inc):
// rows come most specific first, so the first match is the best kernel.
#include "cpu.h"

namespace lpattn_cpu {

enum { OP_ATTN, OP_QUANT, OP_DEQUANT, OP_MERGE };

#ifdef LPATTN_CPU_ALL_VARIANTS
#define LPATTN_KERNEL_ALL LPATTN_KERNEL_DEFAULT
#else
#define LPATTN_KERNEL_ALL(...)
#endif
#define LPATTN_KERNEL(set, ...) LPATTN_KERNEL_##set(__VA_ARGS__)

#define LPATTN_KERNEL_DEFAULT(name, ...) void name(const AttnJob &, int64_t, Scratch *);
#include "gen/registry.inc"
#undef LPATTN_KERNEL_DEFAULT

struct Entry {
  AttnKernel fn;
  int op;
  int64_t head_dim;  // 0 = any
};

#define LPATTN_KERNEL_DEFAULT(name, op, head_dim, ...) {name, OP_##op, head_dim},
static const Entry kKernels[] = {
#include "gen/registry.inc"
};
#undef LPATTN_KERNEL_DEFAULT

AttnKernel FindAttnKernel(int64_t head_dim) {
  for (const Entry &e : kKernels)
    if (e.op == OP_ATTN && (e.head_dim == 0 || e.head_dim == head_dim)) return e.fn;
  return nullptr;
}

}  // namespace lpattn_cpu
