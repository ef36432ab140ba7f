// A small persistent thread pool: the caller is worker 0 and the others wait
// on a generation counter; items are handed out by an atomic counter.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "cpu.h"

namespace lpattn_cpu {

struct Pool {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable wake, done;
  uint64_t generation = 0;
  int busy = 0;
  bool stop = false;
  int64_t n = 0;
  std::atomic<int64_t> next{0};
  void (*fn)(void *, int64_t, int) = nullptr;
  void *arg = nullptr;

  void Work(int tid) {
    for (int64_t i; (i = next.fetch_add(1)) < n;) fn(arg, i, tid);
  }
  void Loop(int tid) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu);
        wake.wait(lk, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
      }
      Work(tid);
      std::lock_guard<std::mutex> lk(mu);
      if (--busy == 0) done.notify_one();
    }
  }
};

Pool *PoolCreate(int threads) {
  Pool *p = new (std::nothrow) Pool;
  if (!p) return nullptr;
  for (int t = 1; t < threads; t++) p->threads.emplace_back(&Pool::Loop, p, t);
  return p;
}

void PoolFree(Pool *p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lk(p->mu);
    p->stop = true;
  }
  p->wake.notify_all();
  for (auto &t : p->threads) t.join();
  delete p;
}

int PoolThreads(const Pool *p) { return 1 + (int)p->threads.size(); }

void PoolRun(Pool *p, int64_t n, void (*fn)(void *, int64_t, int), void *arg) {
  if (p->threads.empty() || n <= 1) {
    for (int64_t i = 0; i < n; i++) fn(arg, i, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(p->mu);
    p->fn = fn, p->arg = arg, p->n = n;
    p->next.store(0);
    p->busy = (int)p->threads.size();
    p->generation++;
  }
  p->wake.notify_all();
  p->Work(0);
  std::unique_lock<std::mutex> lk(p->mu);
  p->done.wait(lk, [&] { return p->busy == 0; });
}

}  // namespace lpattn_cpu
