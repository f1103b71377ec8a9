// A persistent pool of worker threads for the CPU backend's data-parallel loops.
// parallel_for hands out contiguous index ranges; the caller's thread works too. Decode issues
// hundreds of small loops per token, so workers spin briefly before sleeping and the caller spins on
// completion: a condition-variable wake-up costs more than many of those loops.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moelens {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // total threads including the caller; <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // Calls fn(begin, end) over [0, n) in chunks of at least `grain`; returns when all are done. Called from
  // inside a job of this pool (a task running its own loop), it runs fn(0, n) on the calling thread.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);
  // Calls fn(i) for every i in [0, n), handing out one index at a time: for few, coarse and uneven tasks
  // (largest first balances best), each of which may run parallel_for loops of its own, serially.
  void parallel_tasks(size_t n, const std::function<void(size_t)>& fn);

 private:
  void run(size_t n, size_t chunk, const std::function<void(size_t, size_t)>& fn);
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t n_ = 0, chunk_ = 0;
  std::atomic<size_t> next_{0};
  std::atomic<int> pending_{0};        // workers still running the current job
  std::atomic<unsigned> generation_{0};  // bumped once per job
  std::atomic<int> sleepers_{0};
  bool stop_ = false;
  std::mutex call_mu_;  // one parallel_for at a time (sessions may run on different threads)
};

}  // namespace moelens
