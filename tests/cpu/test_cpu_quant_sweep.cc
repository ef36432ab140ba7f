// The amax sweep (tests/quant_sweep.h) through the CPU backend's quantizers
// against core's reference lp_quantize_domain, bit for bit: the rendered
// scalar domain quantizer (backends/math/lpk_quant.h) for every
// format, both MXFP4 scale rules, RNE and SR; and the SIMD quantizer of the
// attention kernels (quantp-inl.h) on every Highway target, whose values must
// be core's dequantized codes.
#include <string.h>

#include <vector>

#include "cpu.h"
#include "formats.h"
#include "lpk_formats.h"
#include "lpk_quant.h"
#include "lpk_softmax.h"
#include "quant_sweep.h"
#include "testutil.h"

static uint32_t bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static bool same(float a, float b) { return bits(a) == bits(b) || (a != a && b != b); }

int main(void) {
  const int rows = qs_rows();
  std::vector<float> x(QS_D), got(QS_D);
  uint8_t c1[QS_D], c2[QS_D], s1[QS_D], s2[QS_D];
  int64_t idx[QS_D];
  int64_t targets[16];
  const int nt = lpattn_cpu_targets(targets, 16);
  for (int fmt = LPATTN_FMT_NVFP4; fmt <= LPATTN_FMT_FP8; fmt++)
    for (int up = 0; up < (fmt == LPATTN_FMT_MXFP4 ? 2 : 1); up++)
      for (int sr = 0; sr < 2; sr++) {
        const lp_quant_cfg cfg = {(lpattn_format)fmt, sr, 0x5eedull + (uint64_t)fmt, up};
        const int G = fmt == LPATTN_FMT_FP8 ? QS_D : lp_group_size(cfg.format);
        int bad = 0, bad_simd = 0;
        for (int k = 0; k < rows; k++) {
          qs_row(k, x.data());
          for (int i = 0; i < QS_D; i++) idx[i] = (int64_t)k * QS_D + i;
          float o1, o2;
          const int r1 = lpk_quantize_domain(fmt, up, sr, cfg.seed, idx, x.data(), 1, QS_D, c1, s1, &o1);
          const int r2 = lp_quantize_domain(&cfg, x.data(), 1, QS_D, idx, c2, s2, &o2);
          const bool ok = r1 == r2 && memcmp(c1, c2, QS_D) == 0 && same(o1, o2) &&
                          (fmt == LPATTN_FMT_FP8 || memcmp(s1, s2, QS_D / G) == 0);
          if (!ok && bad++ < 5)
            fprintf(stderr, "fmt %d up %d sr %d: row %d (amax %a) differs: scale %02x vs %02x\n", fmt,
                    up, sr, k, qs_amax(k), s1[0], s2[0]);
          if (sr) continue;
          for (int t = 0; t < nt; t++) {  // the SIMD quantizer yields values
            lpattn_cpu_force_target(targets[t]);
            lpattn_cpu_quantize_p_row(fmt, up, x.data(), QS_D, got.data());
            for (int i = 0; i < QS_D; i++) {
              const float want = lp_dequant_elem(cfg.format, c2[i], fmt == LPATTN_FMT_FP8 ? 0 : s2[i / G], o2);
              if (!same(got[i], want) && bad_simd++ < 5)
                fprintf(stderr, "%s fmt %d up %d: row %d (amax %a) elem %d: %a, want %a\n",
                        lpattn_cpu_target_name(targets[t]), fmt, up, k, qs_amax(k), i, got[i], want);
            }
          }
          lpattn_cpu_force_target(0);
        }
        CHECK(bad == 0, "fmt %d up %d sr %d: %d of %d rows differ from core", fmt, up, sr, bad, rows);
        CHECK(bad_simd == 0, "fmt %d up %d: %d SIMD values differ from core", fmt, up, bad_simd);
      }
  return test_finish();
}
