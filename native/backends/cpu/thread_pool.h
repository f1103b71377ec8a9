// A persistent pool of worker threads for the CPU backend's data-parallel loops.
// parallel_for cuts [0, n) into chunks and gives each thread (the caller's too) a contiguous share of
// them, taken front to back, so that each thread streams through one region of the weights; a thread
// whose share is done takes chunks from the back of another's. Decode issues hundreds of small loops
// per token, so workers spin briefly before sleeping and the caller spins on completion: a
// condition-variable wake-up costs more than many of those loops.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
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
  // Participant p's share of the current job's chunks, [front, back) in one word, so that its owner
  // taking from the front and a thief taking from the back never get the same chunk.
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};
    bool take_front(uint32_t* chunk);
    bool take_back(uint32_t* chunk);
  };

  // shared_queue: every thread takes chunks in order from one queue (parallel_tasks' largest-first
  // order), instead of from its own share.
  void run(size_t n, size_t chunk, const std::function<void(size_t, size_t)>& fn, bool shared_queue);
  void worker_loop(int self);
  void run_chunks(int self);  // participant `self`: the caller is 0, worker i is i + 1

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t n_ = 0, chunk_ = 0;
  bool shared_queue_ = false;
  std::unique_ptr<Share[]> shares_;  // one per participant
  std::atomic<int> pending_{0};        // workers still running the current job
  std::atomic<unsigned> generation_{0};  // bumped once per job
  std::atomic<int> sleepers_{0};
  bool stop_ = false;
  std::mutex call_mu_;  // one parallel_for at a time (sessions may run on different threads)
};

}  // namespace moelens
