#ifndef TESSERA_KERNELS_CPU_THREAD_POOL_H_
#define TESSERA_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::kernels {

// A fixed set of threads that run one parallel loop at a time. The calling thread takes a
// share of the work too, so a pool of N threads uses N cores.
//
// A forward pass is a few hundred parallel loops of tens of microseconds each: waking a
// sleeping thread through the kernel for each would cost as much as the loop. So idle
// workers first spin (with pause) for about `kSpinMicros`, and only then sleep on a
// condition variable; the caller spins for the last workers to finish.
class ThreadPool {
 public:
  // How long an idle worker polls for the next loop before it sleeps.
  static constexpr int kSpinMicros = 200;

  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n); chunks are at least `grain`
  // long. Returns when every chunk is done. Calls from several threads take turns; fn must
  // not call ParallelFor on the same pool.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop();
  void RunChunks();
  // Waits until generation_ differs from `seen` (or stop_), spinning first; returns the
  // new generation.
  uint64_t AwaitGeneration(uint64_t seen);

  std::vector<std::thread> workers_;
  // Held for a whole parallel loop: one loop in flight at a time.
  std::mutex call_mu_;
  // Sleeping workers wait on start_cv_ under mu_.
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // The loop in flight; published by the release increment of generation_.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  std::atomic<int64_t> next_{0};
};

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_THREAD_POOL_H_
