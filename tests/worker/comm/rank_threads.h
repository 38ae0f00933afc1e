// Ranks of a communicator group as threads of one test process.
#ifndef TESSERA_TESTS_WORKER_COMM_RANK_THREADS_H_
#define TESSERA_TESTS_WORKER_COMM_RANK_THREADS_H_

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "worker/communicator.h"

namespace tessera {

// Runs fn(rank) for every rank at once, one thread each; returns each rank's status.
inline std::vector<absl::Status> RunRanks(int world, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> statuses(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { statuses[r] = fn(r); });
  for (auto& t : threads) t.join();
  return statuses;
}

// Rank 0's mean microseconds per all-reduce of `count` floats over `iters` calls (after 20
// warm-up calls), every rank running them together: the latency probes' measurement.
template <typename Comm>
double AllReduceMicros(const std::vector<std::unique_ptr<Comm>>& comms, size_t count, int iters) {
  const int world = static_cast<int>(comms.size());
  std::vector<std::vector<float>> data(world, std::vector<float>(count, 1.0f));
  std::vector<double> us(world);
  RunRanks(world, [&](int r) -> absl::Status {
    for (int i = 0; i < 20; ++i) (void)comms[r]->AllReduceSum(data[r].data(), count);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) (void)comms[r]->AllReduceSum(data[r].data(), count);
    us[r] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iters;
    return absl::OkStatus();
  });
  return us[0];
}

}  // namespace tessera

#endif  // TESSERA_TESTS_WORKER_COMM_RANK_THREADS_H_
