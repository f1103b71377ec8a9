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
  shares_.reset(new Share[size_t(threads)]);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
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

bool ThreadPool::Share::take_front(uint32_t* chunk) {
  uint64_t r = range.load(std::memory_order_acquire);
  while (uint32_t(r) < uint32_t(r >> 32))
    if (range.compare_exchange_weak(r, r + 1, std::memory_order_acq_rel)) {
      *chunk = uint32_t(r);
      return true;
    }
  return false;
}

bool ThreadPool::Share::take_back(uint32_t* chunk) {
  uint64_t r = range.load(std::memory_order_acquire);
  while (uint32_t(r) < uint32_t(r >> 32))
    if (range.compare_exchange_weak(r, r - (uint64_t(1) << 32), std::memory_order_acq_rel)) {
      *chunk = uint32_t(r >> 32) - 1;
      return true;
    }
  return false;
}

void ThreadPool::run_chunks(int self) {
  auto run_chunk = [this](uint32_t c) { (*job_)(size_t(c) * chunk_, std::min(n_, size_t(c + 1) * chunk_)); };
  uint32_t c;
  if (shared_queue_) {
    while (shares_[0].take_front(&c)) run_chunk(c);
    return;
  }
  while (shares_[size_t(self)].take_front(&c)) run_chunk(c);
  for (int i = 1; i < size(); ++i) {
    Share& other = shares_[size_t((self + i) % size())];
    while (other.take_back(&c)) run_chunk(c);
  }
}

void ThreadPool::worker_loop(int self) {
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
      run_chunks(self);
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
  // Eight chunks per thread: the tail that threads steal is small, and a share stays long enough for
  // the hardware prefetchers (finer chunks handed out in turn measured 5 % slower in decode). Chunk
  // numbers fit 32 bits.
  const size_t threads = size_t(size());
  const size_t chunk = std::max({grain, (n + threads * 8 - 1) / (threads * 8), (n >> 31) + 1});
  run(n, chunk, fn, false);
}

void ThreadPool::parallel_tasks(size_t n, const std::function<void(size_t)>& fn) {
  const std::function<void(size_t, size_t)> each = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) fn(i);
  };
  if (workers_.empty() || n <= 1 || t_in_job) return each(0, n);
  run(n, 1, each, true);
}

void ThreadPool::run(size_t n, size_t chunk, const std::function<void(size_t, size_t)>& fn, bool shared_queue) {
  std::lock_guard<std::mutex> call_lock(call_mu_);
  chunk_ = chunk;
  job_ = &fn;
  n_ = n;
  shared_queue_ = shared_queue;
  // Participant p's share: chunks [p·chunks/P, (p+1)·chunks/P), or all of them in share 0 for a shared
  // queue. Published by the generation bump below.
  const size_t parts = shared_queue ? 1 : size_t(size()), chunks = (n + chunk - 1) / chunk;
  for (size_t p = 0; p < parts; ++p)
    shares_[p].range.store(uint64_t(p * chunks / parts) | uint64_t((p + 1) * chunks / parts) << 32, std::memory_order_relaxed);
  pending_.store(int(workers_.size()), std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleepers_.load() > 0) start_cv_.notify_all();
  {
    InJob in_job;
    run_chunks(0);
  }
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < 1000) cpu_relax();
    else std::this_thread::yield();
  }
  job_ = nullptr;
}

}  // namespace moelens
