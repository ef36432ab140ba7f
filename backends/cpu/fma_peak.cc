// f32 FMA peak of this machine on the dispatched Highway target (bench only):
// independent MulAdd chains, enough to hide the FMA latency.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/fma_peak.cc"  // from the source root
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <stdint.h>
#include <time.h>

#include <thread>
#include <vector>

#include "cpu.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Returns flops done; *sink keeps the result alive.
int64_t FmaLoop(int64_t iters, float *sink) {
  const hn::ScalableTag<float> df;
  const auto x = hn::Set(df, 0.99999994f), y = hn::Set(df, 1e-7f);
  auto v0 = hn::Set(df, 1.0f), v1 = v0, v2 = v0, v3 = v0, v4 = v0, v5 = v0, v6 = v0, v7 = v0,
       v8 = v0, v9 = v0, v10 = v0, v11 = v0;
  for (int64_t i = 0; i < iters; i++) {
    v0 = hn::MulAdd(v0, x, y), v1 = hn::MulAdd(v1, x, y), v2 = hn::MulAdd(v2, x, y);
    v3 = hn::MulAdd(v3, x, y), v4 = hn::MulAdd(v4, x, y), v5 = hn::MulAdd(v5, x, y);
    v6 = hn::MulAdd(v6, x, y), v7 = hn::MulAdd(v7, x, y), v8 = hn::MulAdd(v8, x, y);
    v9 = hn::MulAdd(v9, x, y), v10 = hn::MulAdd(v10, x, y), v11 = hn::MulAdd(v11, x, y);
  }
  auto s = hn::Add(hn::Add(hn::Add(v0, v1), hn::Add(v2, v3)), hn::Add(hn::Add(v4, v5), hn::Add(v6, v7)));
  s = hn::Add(s, hn::Add(hn::Add(v8, v9), hn::Add(v10, v11)));
  *sink = hn::GetLane(hn::SumOfLanes(df, s));
  return iters * 12 * 2 * (int64_t)hn::Lanes(df);
}

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn_cpu {
HWY_EXPORT(FmaLoop);
}

static double Now(void) {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// GFLOP per CPU-second of `threads` threads running the FMA loop at once,
// times `threads`: what the threads reach when each has a core to itself.
// CPU time rather than wall time, so other load on the machine cancels.
extern "C" double lpattn_cpu_fma_peak_gflops(int threads) {
  const int64_t iters = 100000000;  // ~0.2 s: CPU-time clocks are coarse
  std::vector<float> sink(threads);
  std::vector<int64_t> flops(threads);
  std::vector<std::thread> th;
  HWY_DYNAMIC_DISPATCH(lpattn_cpu::FmaLoop)(1000, &sink[0]);  // warm up, pick the target
  const double t0 = Now();
  for (int t = 0; t < threads; t++)
    th.emplace_back([&, t] { flops[t] = HWY_DYNAMIC_DISPATCH(lpattn_cpu::FmaLoop)(iters, &sink[t]); });
  for (auto &x : th) x.join();
  const double dt = Now() - t0;
  double total = 0;
  for (int64_t f : flops) total += (double)f;
  return total / dt * threads * 1e-9;
}
#endif
