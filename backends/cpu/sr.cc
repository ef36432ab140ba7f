// Per-target entries to the backward's SIMD stochastic rounding (sr-inl.h),
// so tests can compare it bit for bit with core's Philox and the scalar
// quantizer on every Highway target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/sr.cc"  // from the source root
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "sr-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {
void SrUniformsT(uint64_t key, const int64_t *idx, int64_t n, float *u) { SrUniforms(key, idx, n, u); }
void SrUniformsRunT(uint64_t key, uint64_t i0, int64_t n, float *u) { SrUniformsRun(key, i0, n, u); }
void SrQdqT(int fmt, int mx_up, const float *x, const float *u, int64_t n, float *out) {
  SrQdqDomain(fmt, mx_up, x, u, n, out);
}
int SrQdqColumnsT(int fmt, int mx_up, const float *src, const float *U, int64_t R, int64_t C, float *dst) {
  return SrQdqColumns(fmt, mx_up, src, U, R, C, dst);
}
}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn_cpu {
HWY_EXPORT(SrUniformsT);
HWY_EXPORT(SrUniformsRunT);
HWY_EXPORT(SrQdqT);
HWY_EXPORT(SrQdqColumnsT);
}  // namespace lpattn_cpu
extern "C" void lpattn_cpu_sr_uniforms(uint64_t key, const int64_t *idx, int64_t n, float *u) {
  HWY_DYNAMIC_DISPATCH(lpattn_cpu::SrUniformsT)(key, idx, n, u);
}
extern "C" void lpattn_cpu_sr_uniforms_run(uint64_t key, uint64_t i0, int64_t n, float *u) {
  HWY_DYNAMIC_DISPATCH(lpattn_cpu::SrUniformsRunT)(key, i0, n, u);
}
extern "C" void lpattn_cpu_sr_qdq(int fmt, int mx_up, const float *x, const float *u, int64_t n, float *out) {
  HWY_DYNAMIC_DISPATCH(lpattn_cpu::SrQdqT)(fmt, mx_up, x, u, n, out);
}
extern "C" int lpattn_cpu_sr_qdq_columns(int fmt, int mx_up, const float *src, const float *U, int64_t R,
                                         int64_t C, float *dst) {
  return HWY_DYNAMIC_DISPATCH(lpattn_cpu::SrQdqColumnsT)(fmt, mx_up, src, U, R, C, dst);
}
#endif
