// A small persistent thread pool: the caller is worker 0 and the others wait
// on a generation counter; items are handed out by an atomic counter. No
// exception leaves it: a thread that cannot start fails PoolCreate, an item
// that throws (bad_alloc) fails its PoolRun.
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
  std::atomic<bool> failed{false};
  void (*fn)(void *, int64_t, int) = nullptr;
  void *arg = nullptr;

  void Work(int tid) {
    try {
      for (int64_t i; (i = next.fetch_add(1)) < n;) fn(arg, i, tid);
    } catch (...) {  // skip the rest: the call fails
      failed.store(true);
      next.store(n);
    }
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
  try {
    p->threads.reserve((size_t)(threads > 1 ? threads - 1 : 0));
    for (int t = 1; t < threads; t++) p->threads.emplace_back(&Pool::Loop, p, t);
  } catch (...) {  // std::system_error (no more threads) or bad_alloc
    PoolFree(p);
    return nullptr;
  }
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

bool PoolRun(Pool *p, int64_t n, void (*fn)(void *, int64_t, int), void *arg) {
  p->failed.store(false);
  if (p->threads.empty() || n <= 1) {
    p->fn = fn, p->arg = arg, p->n = n;
    p->next.store(0);
    p->Work(0);
    return !p->failed.load();
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
  return !p->failed.load();
}

}  // namespace lpattn_cpu
