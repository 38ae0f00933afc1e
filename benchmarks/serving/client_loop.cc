#include "benchmarks/serving/client_loop.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace tessera::bench {

std::vector<RequestRecord> RunRequests(const std::vector<RequestSpec>& specs,
                                       const LoopOptions& options, const SendFn& send) {
  const int n = static_cast<int>(specs.size());
  std::vector<RequestRecord> records(specs.size());
  if (n == 0) return records;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point origin = Clock::now();
  const std::function<double()> now = [origin] {
    return std::chrono::duration<double>(Clock::now() - origin).count();
  };

  std::mutex mu;
  std::condition_variable ready_cv;
  std::deque<int> ready;  // Arrived requests waiting for a sender.
  bool all_released = false;
  std::mutex done_mu;     // Serialises on_done and the counters.
  int done = 0, failed = 0;

  auto sender = [&] {
    while (true) {
      int index;
      {
        std::unique_lock<std::mutex> lock(mu);
        ready_cv.wait(lock, [&] { return !ready.empty() || all_released; });
        if (ready.empty()) return;
        index = ready.front();
        ready.pop_front();
      }
      records[index] = send(specs[index], index, now);
      std::lock_guard<std::mutex> lock(done_mu);
      ++done;
      if (!records[index].ok) ++failed;
      if (options.on_done) options.on_done(done, failed);
    }
  };
  const int num_senders = options.max_concurrency > 0 ? std::min(options.max_concurrency, n) : n;
  std::vector<std::thread> senders;
  senders.reserve(num_senders);
  for (int i = 0; i < num_senders; ++i) senders.emplace_back(sender);

  const std::vector<double> arrivals = ArrivalTimes(n, options.arrivals);
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_until(origin + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(arrivals[i])));
    std::lock_guard<std::mutex> lock(mu);
    ready.push_back(i);
    ready_cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    all_released = true;
  }
  ready_cv.notify_all();
  for (std::thread& t : senders) t.join();
  return records;
}

}  // namespace tessera::bench
