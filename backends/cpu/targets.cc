// Highway target introspection for tests and the bench.
#include <hwy/highway.h>
#include <hwy/targets.h>

#include "cpu.h"

extern "C" int lpattn_cpu_targets(int64_t *targets, int max) {
  hwy::SetSupportedTargetsForTest(0);
  int n = 0;
  for (int64_t t : hwy::SupportedAndGeneratedTargets())
    if (n < max) targets[n++] = t;
  return n;
}

extern "C" const char *lpattn_cpu_target_name(int64_t target) { return hwy::TargetName(target); }

// Restrict dynamic dispatch to `target` (0: back to the best supported one).
// The chosen-target cache is reset so the next dispatch re-selects.
extern "C" void lpattn_cpu_force_target(int64_t target) {
  hwy::SetSupportedTargetsForTest(target);
  hwy::GetChosenTarget().DeInit();
}
