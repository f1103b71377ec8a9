// The CPU backend's thread pool: every index runs exactly once, tasks spread over the threads, and a
// loop inside a task runs inline on that task's thread (the pool serves one loop at a time). Prints one
// line per check and "N failures"; exits non-zero on a failure.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "backends/cpu/thread_pool.h"

using moelens::ThreadPool;

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  failures += !ok;
  std::printf("%-64s %s\n", what, ok ? "ok" : "FAIL");
}

}  // namespace

int main() {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    std::printf("threads=%d\n", threads);

    std::vector<std::atomic<int>> hits(10007);
    pool.parallel_for(hits.size(), 16, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hits[i]++;
    });
    bool once = true;
    for (auto& h : hits) once = once && h.load() == 1;
    check(once, "parallel_for: every index once");

    // Sizes around the chunking's edges: fewer indices than threads, a prime, one chunk per thread.
    bool exact = true;
    for (size_t n : {size_t(1), size_t(3), size_t(17), size_t(64), size_t(1000003)}) {
      std::vector<std::atomic<int>> h(n);
      pool.parallel_for(n, 1, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) h[i]++;
      });
      for (auto& x : h) exact = exact && x.load() == 1;
    }
    check(exact, "parallel_for: every index once, for n = 1, 3, 17, 64, 1000003");

    // A slow first share: the other threads finish theirs and take the rest of it from its back.
    if (threads > 1) {
      std::mutex m;
      std::set<std::thread::id> slow_runners;
      pool.parallel_for(64, 1, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i)
          if (i < 64 / size_t(threads)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(3));
            std::lock_guard<std::mutex> lock(m);
            slow_runners.insert(std::this_thread::get_id());
          }
      });
      check(slow_runners.size() > 1, "parallel_for: idle threads take chunks from a busy thread's share");
    }

    std::vector<std::atomic<int>> task_hits(37);
    pool.parallel_tasks(task_hits.size(), [&](size_t i) { task_hits[i]++; });
    once = true;
    for (auto& h : task_hits) once = once && h.load() == 1;
    check(once, "parallel_tasks: every task once");

    // Loops inside tasks: each task's loop covers its range on the task's own thread.
    const size_t tasks = 12, inner = 1000;
    std::vector<std::atomic<int>> nested(tasks * inner);
    std::atomic<int> foreign{0};
    pool.parallel_tasks(tasks, [&](size_t t) {
      const std::thread::id me = std::this_thread::get_id();
      pool.parallel_for(inner, 1, [&](size_t b, size_t e) {
        if (std::this_thread::get_id() != me) foreign++;
        for (size_t i = b; i < e; ++i) nested[t * inner + i]++;
      });
    });
    once = true;
    for (auto& h : nested) once = once && h.load() == 1;
    check(once && foreign == 0, "parallel_for inside a task: inline, every index once");

    // Tasks spread over the threads when there is work for all of them.
    std::mutex mu;
    std::set<std::thread::id> seen;
    pool.parallel_tasks(64, [&](size_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard<std::mutex> lock(mu);
      seen.insert(std::this_thread::get_id());
    });
    check(int(seen.size()) == threads, "parallel_tasks: every thread takes tasks");

    // The pool is usable after nested use, from another thread too.
    std::atomic<size_t> sum{0};
    std::thread other([&] { pool.parallel_for(100, 1, [&](size_t b, size_t e) { for (size_t i = b; i < e; ++i) sum += i; }); });
    other.join();
    check(sum == 4950, "parallel_for from another thread after nested use");
  }
  std::printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
