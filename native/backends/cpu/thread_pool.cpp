#include "thread_pool.h"

#include <algorithm>
#include <chrono>

namespace moelens {

namespace {
// How long an idle worker polls for the next job before it sleeps. A decode step runs about 300 loops
// with serial work between them; at 50 us a worker slept and was woken about 70 times per token (futex
// calls), at 1 ms about once.
constexpr auto kSpin = std::chrono::microseconds(1000);

// Whether this thread is running a job of a pool: a loop inside a job runs inline, since the pool
// serves one loop at a time and the job already holds it.
thread_local bool t_in_job = false;

struct InJob {
  InJob() { t_in_job = true; }
  ~InJob() { t_in_job = false; }
};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    size_t begin = next_.fetch_add(chunk_);
    if (begin >= n_) return;
    (*job_)(begin, std::min(n_, begin + chunk_));
  }
}

void ThreadPool::worker_loop() {
  unsigned seen = 0;
  for (;;) {
    // Poll for a new job, then sleep until one arrives.
    auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0; generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until; ++i) {
      // Yield after a short burst so that an oversubscribed machine still makes progress.
      if (i < 1000) cpu_relax();
      else std::this_thread::yield();
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      start_cv_.wait(lock, [&] { return generation_.load() != seen; });
      sleepers_.fetch_sub(1);
    }
    seen = generation_.load(std::memory_order_acquire);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    {
      InJob in_job;
      run_chunks();
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  if (workers_.empty() || n <= grain || t_in_job) {
    fn(0, n);
    return;
  }
  // About four chunks per thread balances uneven rows without much contention.
  const size_t threads = size_t(size());
  run(n, std::max(grain, (n + threads * 4 - 1) / (threads * 4)), fn);
}

void ThreadPool::parallel_tasks(size_t n, const std::function<void(size_t)>& fn) {
  const std::function<void(size_t, size_t)> each = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) fn(i);
  };
  if (workers_.empty() || n <= 1 || t_in_job) return each(0, n);
  run(n, 1, each);
}

void ThreadPool::run(size_t n, size_t chunk, const std::function<void(size_t, size_t)>& fn) {
  std::lock_guard<std::mutex> call_lock(call_mu_);
  chunk_ = chunk;
  job_ = &fn;
  n_ = n;
  next_.store(0);
  pending_.store(int(workers_.size()), std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleepers_.load() > 0) start_cv_.notify_all();
  {
    InJob in_job;
    run_chunks();
  }
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < 1000) cpu_relax();
    else std::this_thread::yield();
  }
  job_ = nullptr;
}

}  // namespace moelens
