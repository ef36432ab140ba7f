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

// lpattn_cpu_decode_int_probe on this target.
int DecodeIntProbeT(const DecJob &job, const uint8_t *head, const lp_kv_layout *L, const float *q, const float *p, float *s8, float *o8,
                    float *s1, float *o1) {
#if LP_DEC_INT
  const LowTile t = {head, L};
  Scratch sc;
  sc.codes.resize(256), sc.scales.resize(256);
  IntRow qi = IntRow(), pi = IntRow();
  alignas(32) float sl[64 * 8];
  ToIntRow(job, q, job.D, false, &sc, &qi);
  ToIntRow(job, p, 64, true, &sc, &pi);
  ScaleLanes(job, t, 0, qi.idx, sl);
  for (int64_t c = 0; c < 64; c += 8) Scores8Int(job, t, c, qi, sl, s8);
  ScaleLanes(job, t, 1, pi.idx, sl);
  for (int64_t d = 0; d < job.D; d += 8) PV8Int(job, t, d, pi, sl, o8);
  for (int64_t c = 0; c < 64; c++) s1[c] = DotLowInt(job, t, 0, c, qi);
  for (int64_t d = 0; d < job.D; d++) o1[d] += DotLowInt(job, t, 1, d, pi);
  return 1;
#else
  (void)job, (void)head, (void)L, (void)q, (void)p, (void)s8, (void)o8, (void)s1, (void)o1;
  return 0;
#endif
}
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
HWY_EXPORT(DecodeIntProbeT);
}  // namespace lpattn_cpu

// Tests (tests/cpu/test_cpu_decode_int): the exact-integer FP4 products of
// the decode on the dispatched target, for one head's part `head` of a page
// of 64 keys laid out by lp_kv_layout_init (fmt NVFP4 or MXFP4, D 64 or
// 128, one kv head): scores s[64] of Q row q[D] and o[D] += P^ . V of P row
// p[64], by the eight-key kernels (s8, o8) and by DotLowInt (s1, o1).
// Returns 0 where the target has no integer path, -1 on bad arguments.
extern "C" int lpattn_cpu_decode_int_probe(int fmt, int64_t D, const uint8_t *head, const float *q,
                                           const float *p, float *s8, float *o8, float *s1, float *o1) {
  using namespace lpattn_cpu;
  if ((fmt != LPATTN_FMT_NVFP4 && fmt != LPATTN_FMT_MXFP4) || (D != 64 && D != 128)) return -1;
  lpattn_kv_pool_params pp = lpattn_kv_pool_params();
  pp.struct_size = sizeof pp, pp.num_kv_heads = pp.num_q_heads = 1, pp.head_dim = (int)D;
  pp.page_size = 64, pp.high_dtype = LPATTN_F16, pp.num_pages = pp.num_slots = 1;
  pp.precision = fmt == LPATTN_FMT_MXFP4 ? LPATTN_PREC_MXFP4 : LPATTN_PREC_NVFP4;
  lp_kv_layout L;
  if (lp_kv_layout_init(&L, &pp) != LPATTN_OK) return -1;
  lpattn_attn_problem pr = lpattn_attn_problem();
  DecJob *job = new DecJob();
  job->pr = &pr, job->D = D, job->T = 64, job->Sq = job->G = job->R = 1, job->low = 1, job->fp4 = 1;
  job->qfmt = job->pfmt = fmt == LPATTN_FMT_MXFP4 ? QP_MXFP4 : QP_NVFP4;
  job->gshift = fmt == LPATTN_FMT_MXFP4 ? 5 : 4;
  for (int i = 0; i < 256; i++)
    job->e4m3[i] = lpk_e4m3_decode((uint8_t)i), job->e8m0[i] = lpk_e8m0_decode((uint8_t)i);
  const int r = HWY_DYNAMIC_DISPATCH(DecodeIntProbeT)(*job, head, &L, q, p, s8, o8, s1, o1);
  delete job;
  return r;
}
#endif
