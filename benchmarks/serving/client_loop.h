#ifndef TESSERA_BENCHMARKS_SERVING_CLIENT_LOOP_H_
#define TESSERA_BENCHMARKS_SERVING_CLIENT_LOOP_H_

#include <functional>
#include <vector>

#include "benchmarks/serving/arrivals.h"
#include "benchmarks/serving/stats.h"
#include "benchmarks/serving/workload.h"

namespace tessera::bench {

// Sends one request and reports what it saw; `now` gives seconds since the run's start.
// Called from several threads at once.
using SendFn = std::function<RequestRecord(const RequestSpec& spec, int index,
                                           const std::function<double()>& now)>;

struct LoopOptions {
  ArrivalOptions arrivals;
  int max_concurrency = 0;  // Requests in flight at most; 0: no cap.
  // Called after each request finishes, from the thread that ran it, with
  // (requests done, failed so far). Calls do not overlap.
  std::function<void(int, int)> on_done;
};

// Releases request i at its arrival time (ArrivalTimes) into a queue served by
// min(max_concurrency, n) sender threads (n threads without a cap), so at most
// max_concurrency requests are in flight. A request's latency starts when a sender picks it
// up: time spent waiting for a free slot is the client's, not the server's, and is not
// counted (as in vLLM's --max-concurrency). Returns the records in request order.
std::vector<RequestRecord> RunRequests(const std::vector<RequestSpec>& specs,
                                       const LoopOptions& options, const SendFn& send);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_SERVING_CLIENT_LOOP_H_
