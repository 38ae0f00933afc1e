#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessera::kernels {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  while (true) {
    const int64_t begin = next_.fetch_add(chunk_);
    if (begin >= n_) break;
    (*fn_)(begin, std::min(n_, begin + chunk_));
  }
}

uint64_t ThreadPool::AwaitGeneration(uint64_t seen) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int i = 0;; ++i) {
    const uint64_t g = generation_.load(std::memory_order_acquire);
    if (g != seen || stop_.load(std::memory_order_relaxed)) return g;
    CpuRelax();
    // Reading the clock costs more than a pause: look at it now and then.
    if ((i & 255) == 255 && std::chrono::steady_clock::now() > deadline) break;
  }
  std::unique_lock<std::mutex> lock(mu_);
  // Announce the sleep before re-checking: ParallelFor bumps the generation and then reads
  // sleepers_ (both sequentially consistent), so either it sees this sleeper and notifies
  // under mu_, or the predicate below sees its generation.
  sleepers_.fetch_add(1);
  start_cv_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
  sleepers_.fetch_sub(1);
  return generation_.load(std::memory_order_acquire);
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    seen = AwaitGeneration(seen);
    if (stop_.load()) return;
    RunChunks();
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  // A few chunks per thread balance uneven rows without much scheduling cost.
  const int64_t target_chunks = static_cast<int64_t>(num_threads()) * 4;
  const int64_t chunk = std::max(grain, (n + target_chunks - 1) / target_chunks);
  std::lock_guard<std::mutex> call_lock(call_mu_);
  fn_ = &fn;
  n_ = n;
  chunk_ = chunk;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1);  // Sequentially consistent: publishes the loop above.
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    start_cv_.notify_all();
  }
  RunChunks();
  // The workers are awake and finishing their last chunk: spin, yielding now and then in
  // case one of them is descheduled.
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    CpuRelax();
    if ((i & 1023) == 1023) std::this_thread::yield();
  }
  fn_ = nullptr;
}

}  // namespace tessera::kernels
