#include "coordinator/api/input_budget.h"

#include "absl/strings/str_cat.h"
#include "common/memory_releaser.h"

namespace tessera {

InputBudget::Lease& InputBudget::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = other.budget_;
    bytes_ = other.bytes_;
    other.budget_ = nullptr;
  }
  return *this;
}

void InputBudget::Lease::Release() {
  if (budget_ == nullptr) return;
  budget_->in_use_.fetch_sub(bytes_);
  budget_ = nullptr;
  MemoryReleaser::Get().InputDone(static_cast<size_t>(bytes_));
}

absl::StatusOr<InputBudget::Lease> InputBudget::Acquire(int64_t bytes, const char* what) {
  int64_t used = in_use_.load();
  do {
    if (used + bytes > max_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, " of ", bytes, " bytes does not fit: ", used, " of the ", max_bytes_,
          " bytes of input being tokenized at once (--max-inflight-input-bytes) are in use; retry later"));
    }
  } while (!in_use_.compare_exchange_weak(used, used + bytes));
  return Lease(this, bytes);
}

}  // namespace tessera
