// Per-target entries to the paged decode kernel (decode-inl.h) and the
// small-Sq attention kernel (smallq-inl.h), chosen at run time like the
// attention kernels.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/decode.cc"  // from the source root
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "decode-inl.h"
#include "smallq-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {
void DecodeItemT(const DecJob &job, int64_t item, DecScratch *w) { DecodeItem(job, item, w); }
void SmallQItemT(const SmallJob &job, int64_t item, DecScratch *w) { SmallQItem(job, item, w); }
}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn_cpu {
HWY_EXPORT(DecodeItemT);
static void DecodeItemDispatch(const DecJob &job, int64_t item, DecScratch *w) {
  HWY_DYNAMIC_DISPATCH(DecodeItemT)(job, item, w);
}
DecodeKernel FindDecodeKernel() { return DecodeItemDispatch; }
HWY_EXPORT(SmallQItemT);
static void SmallQItemDispatch(const SmallJob &job, int64_t item, DecScratch *w) {
  HWY_DYNAMIC_DISPATCH(SmallQItemT)(job, item, w);
}
SmallQKernel FindSmallQKernel() { return SmallQItemDispatch; }
}  // namespace lpattn_cpu
#endif
