/* The kernel registry of the GPU backends: the generated per-op registries
 * (gen/registry_<op>.inc, codegen/manifest.py) of the backend being built, as
 * an attention (and backward) table searched by head dim and dtype, and the
 * one quantize, dequantize and merge kernel. The decode variants' table is
 * kv_pool.cu's (registry_decode.inc). */
#include "gpu_backend.h"
#include "gpu_plan.h"

namespace GPU_NS {

#define GPU_SET_DEFAULT(...) __VA_ARGS__
#if defined(LPATTN_CUDA_ALL_VARIANTS) || defined(LPATTN_HIP_ALL)
#define GPU_SET_ALL(...) __VA_ARGS__
#else
#define GPU_SET_ALL(...)
#endif
/* one quant/dequant/merge entry per backend, reached by op */
#define LPATTN_QUANT(set, name, hd, dt)                        \
  lpattn_status name(const lp_gpu_quant_args *, cudaStream_t); \
  lpattn_status run_quant(const lp_gpu_quant_args *a, cudaStream_t s) { return name(a, s); }
#include "registry_quant.inc"
#undef LPATTN_QUANT
#define LPATTN_DEQUANT(set, name, hd, dt)                          \
  lpattn_status name(const lp_gpu_dequant_args *, cudaStream_t); \
  lpattn_status run_dequant(const lp_gpu_dequant_args *a, cudaStream_t s) { return name(a, s); }
#include "registry_dequant.inc"
#undef LPATTN_DEQUANT
#define LPATTN_MERGE(set, name, hd, dt)                        \
  lpattn_status name(const lp_gpu_merge_args *, cudaStream_t); \
  lpattn_status run_merge(const lp_gpu_merge_args *a, cudaStream_t s) { return name(a, s); }
#include "registry_merge.inc"
#undef LPATTN_MERGE

/* the attention kernels (gen/registry_attn.inc), by head dim and dtype */
#define LPATTN_ATTN(set, name, hd, dt) GPU_SET_##set(lpattn_status name(const lp_gpu_attn_args *, cudaStream_t);)
#include "registry_attn.inc"
#undef LPATTN_ATTN
static const struct {
  int head_dim, dtype;
  gpu_attn_fn fn;
} gpu_attn_table[] = {
#define LPATTN_ATTN(set, name, hd, dt) GPU_SET_##set({hd, dt, name}, )
#include "registry_attn.inc"
#undef LPATTN_ATTN
    {0, 0, NULL}};

/* the backward kernels (gen/registry_bwd.inc, empty on HIP), by head dim and dtype */
#define LPATTN_BWD(set, name, hd, dt) GPU_SET_##set(lpattn_status name(const lp_gpu_bwd_args *, cudaStream_t);)
#include "registry_bwd.inc"
#undef LPATTN_BWD
static const struct {
  int head_dim, dtype;
  gpu_bwd_fn fn;
} gpu_bwd_table[] = {
#define LPATTN_BWD(set, name, hd, dt) GPU_SET_##set({hd, dt, name}, )
#include "registry_bwd.inc"
#undef LPATTN_BWD
    {0, 0, NULL}};

gpu_bwd_fn find_bwd(int64_t D, lpattn_dtype dt) {
  for (size_t i = 0; gpu_bwd_table[i].fn; i++)
    if (gpu_bwd_table[i].head_dim == D && gpu_bwd_table[i].dtype == (int)dt) return gpu_bwd_table[i].fn;
  return NULL;
}

/* the kernel paths of each attention variant (gen/paths.inc, manifest.attn_paths) */
static const struct {
  int head_dim, dtype, paths;
} gpu_paths_table[] = {
#define LPATTN_ATTN_PATHS(set, hd, dt, paths) GPU_SET_##set({hd, dt, paths}, )
#include "paths.inc"
#undef LPATTN_ATTN_PATHS
    {0, 0, 0}};

int find_attn_paths(int64_t D, lpattn_dtype dt) {
  if (!find_attn(D, dt)) return 0;
  for (size_t i = 0; gpu_paths_table[i].paths; i++)
    if (gpu_paths_table[i].head_dim == D && gpu_paths_table[i].dtype == (int)dt) return gpu_paths_table[i].paths;
  return 0;
}

gpu_attn_fn find_attn(int64_t D, lpattn_dtype dt) {
  for (size_t i = 0; gpu_attn_table[i].fn; i++)
    if (gpu_attn_table[i].head_dim == D && gpu_attn_table[i].dtype == (int)dt) return gpu_attn_table[i].fn;
  return NULL;
}

} // namespace GPU_NS
