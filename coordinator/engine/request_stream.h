#ifndef TESSERA_COORDINATOR_ENGINE_REQUEST_STREAM_H_
#define TESSERA_COORDINATOR_ENGINE_REQUEST_STREAM_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/scheduler/sequence.h"

namespace tessera {

struct TokenLogprobs {
  int32_t token_id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// What happened to a request since the last event: new tokens and text, and at the end
// the finish reason (or the error that ended it), usage and timings.
struct RequestEvent {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenLogprobs> logprobs;
  bool finished = false;
  sched::FinishReason finish_reason = sched::FinishReason::kLength;
  absl::Status error;  // Set when finish_reason is kError.
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_prompt_tokens = 0;
  double queue_seconds = 0;
  double ttft_seconds = 0;
  double total_seconds = 0;
  int replica = -1;

  // The last event of a request that ends with `error` instead of a result.
  static RequestEvent Failure(absl::Status error) {
    RequestEvent e;
    e.finished = true;
    e.finish_reason = sched::FinishReason::kError;
    e.error = std::move(error);
    return e;
  }
};

// The hand-off between the engine thread (producer) and the RPC handler (consumer) of
// one request.
class RequestStream {
 public:
  void Push(RequestEvent event) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
  }

  // Waits up to `timeout` for the next event.
  std::optional<RequestEvent> Pop(std::chrono::milliseconds timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !events_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&ready), absl::FromChrono(timeout));
    if (events_.empty()) return std::nullopt;
    RequestEvent e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  absl::Mutex mu_;
  std::deque<RequestEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_ENGINE_REQUEST_STREAM_H_
