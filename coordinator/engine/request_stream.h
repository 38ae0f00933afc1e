#ifndef TESSERA_COORDINATOR_ENGINE_REQUEST_STREAM_H_
#define TESSERA_COORDINATOR_ENGINE_REQUEST_STREAM_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
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
// one request. Bounded: a consumer that falls behind (its client stopped reading, so its
// writes block on HTTP/2 flow control) may leave at most `max_undelivered_tokens` tokens
// here. Past that Push refuses the event and the engine ends the request with
// RESOURCE_EXHAUSTED rather than pausing it: a paused sequence would keep its KV blocks
// (and its slot in the batch) for as long as the client cares to stall, taking capacity
// from every other client, while a cancelled one frees them within the step.
class RequestStream {
 public:
  static constexpr int kDefaultMaxUndeliveredTokens = 256;

  explicit RequestStream(int max_undelivered_tokens = kDefaultMaxUndeliveredTokens)
      : max_undelivered_tokens_(max_undelivered_tokens) {}

  // Queues `event`; false (and nothing queued) when the consumer is too far behind. A
  // finished event is always queued, so the consumer always sees the end.
  bool Push(RequestEvent event) {
    {
      absl::MutexLock lock(&mu_);
      const int tokens = static_cast<int>(event.token_ids.size());
      if (!event.finished && num_undelivered_tokens_ + tokens > max_undelivered_tokens_) {
        return false;
      }
      num_undelivered_tokens_ += tokens;
      events_.push_back(std::move(event));
    }
    // Outside mu_: the listener (an RPC reactor) takes its own lock and then pops.
    absl::MutexLock lock(&listener_mu_);
    if (listener_) listener_();
    return true;
  }

  // A consumer that must not block (a gRPC callback reactor) is told of every queued
  // event instead of waiting in Pop. Runs on the producer's thread, so it must be quick
  // and never wait. SetListener(nullptr) returns only once no call is in progress, so a
  // consumer clears it before it goes away.
  void SetListener(std::function<void()> listener) {
    absl::MutexLock lock(&listener_mu_);
    listener_ = std::move(listener);
  }

  // Waits up to `timeout` for events and returns everything queued as one event (tokens,
  // text and logprobs concatenated; the end, when present, last). A consumer that was
  // blocked in a write thus sends one larger message instead of falling further behind.
  std::optional<RequestEvent> Pop(std::chrono::milliseconds timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !events_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&ready), absl::FromChrono(timeout));
    return PopMergedLocked();
  }

  // Pop without waiting: everything queued as one event, or nothing.
  std::optional<RequestEvent> TryPop() {
    absl::MutexLock lock(&mu_);
    return PopMergedLocked();
  }

  int num_undelivered_tokens() const {
    absl::MutexLock lock(&mu_);
    return num_undelivered_tokens_;
  }
  int max_undelivered_tokens() const { return max_undelivered_tokens_; }

  // The consumer registers how to wake it from a blocked write (ServerContext::TryCancel)
  // and clears it (nullptr) before its RPC context goes away.
  void SetInterrupt(std::function<void()> interrupt) {
    absl::MutexLock lock(&mu_);
    interrupt_ = std::move(interrupt);
  }
  // The producer gave up on the request (Push refused): unblocks the consumer, if any.
  // Runs under the lock so it cannot race with SetInterrupt(nullptr).
  void Interrupt() {
    absl::MutexLock lock(&mu_);
    if (interrupt_) interrupt_();
  }

 private:
  std::optional<RequestEvent> PopMergedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (events_.empty()) return std::nullopt;
    RequestEvent merged = std::move(events_.front());
    events_.pop_front();
    while (!events_.empty() && !merged.finished) {
      RequestEvent& next = events_.front();
      merged.token_ids.insert(merged.token_ids.end(), next.token_ids.begin(), next.token_ids.end());
      merged.text += next.text;
      merged.logprobs.insert(merged.logprobs.end(), std::make_move_iterator(next.logprobs.begin()),
                             std::make_move_iterator(next.logprobs.end()));
      if (next.finished) {
        next.token_ids = std::move(merged.token_ids);
        next.text = std::move(merged.text);
        next.logprobs = std::move(merged.logprobs);
        merged = std::move(next);
      }
      events_.pop_front();
    }
    num_undelivered_tokens_ = 0;
    for (const RequestEvent& e : events_) num_undelivered_tokens_ += static_cast<int>(e.token_ids.size());
    return merged;
  }

  const int max_undelivered_tokens_;
  mutable absl::Mutex mu_;
  std::deque<RequestEvent> events_ ABSL_GUARDED_BY(mu_);
  int num_undelivered_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void()> interrupt_ ABSL_GUARDED_BY(mu_);
  absl::Mutex listener_mu_;
  std::function<void()> listener_ ABSL_GUARDED_BY(listener_mu_);
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_ENGINE_REQUEST_STREAM_H_
