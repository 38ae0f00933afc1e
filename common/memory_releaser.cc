#include "common/memory_releaser.h"

#include <malloc.h>

#include <thread>

namespace tessera {
namespace {

// Lets the call that asked finish freeing (its response, gRPC's buffers) before the trim.
constexpr std::chrono::milliseconds kSettle(250);
constexpr std::chrono::seconds kMinInterval(1);

}  // namespace

MemoryReleaser& MemoryReleaser::Get() {
  static MemoryReleaser* const releaser = new MemoryReleaser();  // Never destroyed: its thread runs to exit.
  return *releaser;
}

void MemoryReleaser::InputDone(size_t input_bytes) {
  if (input_bytes >= kThresholdBytes) RequestTrim();
}

void MemoryReleaser::RequestTrim() {
  std::lock_guard<std::mutex> lock(mu_);
  pending_ = true;
  if (!started_) {
    started_ = true;
    std::thread([this] { Run(); }).detach();
  }
  wake_.notify_one();
}

int MemoryReleaser::trims() const {
  std::lock_guard<std::mutex> lock(mu_);
  return trims_;
}

void MemoryReleaser::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return pending_; });
    const auto not_before = std::max(std::chrono::steady_clock::now() + kSettle, last_trim_ + kMinInterval);
    wake_.wait_until(lock, not_before, [] { return false; });
    pending_ = false;
    lock.unlock();
    malloc_trim(0);
    lock.lock();
    last_trim_ = std::chrono::steady_clock::now();
    ++trims_;
  }
}

}  // namespace tessera
