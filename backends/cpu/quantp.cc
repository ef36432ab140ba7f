// Per-target entry to the SIMD P quantizer (quantp-inl.h), so tests can
// compare it bit for bit with the scalar one on every Highway target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/quantp.cc"  // from the source root
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "quantp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {
void QuantizePRowT(int fmt, int mx_up, const float *p, int64_t n, float *out) {
  Scratch sc;
  sc.codes.resize(n), sc.scales.resize(n);
  QuantizePRow(fmt, mx_up, p, n, &sc, out);
}
}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn_cpu {
HWY_EXPORT(QuantizePRowT);
}
extern "C" void lpattn_cpu_quantize_p_row(int fmt, int mx_up, const float *p, int64_t n,
                                          float *out) {
  HWY_DYNAMIC_DISPATCH(lpattn_cpu::QuantizePRowT)(fmt, mx_up, p, n, out);
}
#endif
