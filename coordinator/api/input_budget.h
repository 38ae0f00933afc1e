#ifndef TESSERA_COORDINATOR_API_INPUT_BUDGET_H_
#define TESSERA_COORDINATOR_API_INPUT_BUDGET_H_

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"

namespace tessera {

// The bytes of input text being tokenized (and, for Tokenize, answered) at once, over
// every request and both APIs (--max-inflight-input-bytes). Tokenizing holds a multiple
// of its input in memory, so without this bound a few large inputs at once could take
// the coordinator's memory; beyond it a request is refused at once (RESOURCE_EXHAUSTED,
// HTTP 429), never queued.
class InputBudget {
 public:
  explicit InputBudget(int64_t max_bytes) : max_bytes_(max_bytes) {}
  InputBudget(const InputBudget&) = delete;
  InputBudget& operator=(const InputBudget&) = delete;

  // Holds `bytes` of the budget until destroyed; then, for a large input, asks the
  // MemoryReleaser to hand what it freed back to the OS.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept : budget_(other.budget_), bytes_(other.bytes_) { other.budget_ = nullptr; }
    Lease& operator=(Lease&& other) noexcept;
    ~Lease() { Release(); }
    void Release();

   private:
    friend class InputBudget;
    Lease(InputBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
    InputBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  // A lease of `bytes`, or RESOURCE_EXHAUSTED naming the flag when they do not fit now.
  // `what` names the input in the message ("Tokenize text").
  absl::StatusOr<Lease> Acquire(int64_t bytes, const char* what);

  int64_t in_use() const { return in_use_.load(); }
  int64_t max_bytes() const { return max_bytes_; }

 private:
  const int64_t max_bytes_;
  std::atomic<int64_t> in_use_{0};
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_INPUT_BUDGET_H_
