#ifndef TESSERA_COMMON_MEMORY_RELEASER_H_
#define TESSERA_COMMON_MEMORY_RELEASER_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace tessera {

// Gives freed heap memory back to the OS after large inputs. glibc keeps what a large
// request freed (its arenas and the top of the heap) for reuse, so a burst of big
// inputs would leave the process at its peak size for good; malloc_trim(0) returns it.
// Trimming walks the heap, so it runs on a thread of its own, a short while after the
// request (letting the call finish freeing), and at most once per second.
class MemoryReleaser {
 public:
  // Inputs smaller than this leave no memory worth a trim.
  static constexpr size_t kThresholdBytes = size_t{1} << 20;

  // The process's releaser (malloc_trim is process-wide); its thread starts on first use.
  static MemoryReleaser& Get();

  // Work on an input of `input_bytes` has freed (or is about to free) its memory; asks for
  // a trim when the input reached kThresholdBytes. Never blocks on the trim.
  void InputDone(size_t input_bytes);

  // Asks for a trim whatever the size: after a burst of connections closed (a TLS
  // connection holds ~100 KB of buffers that glibc would otherwise keep).
  void RequestTrim();

  // Trims done so far (for tests and logs).
  int trims() const;

 private:
  MemoryReleaser() = default;
  void Run();

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool started_ = false;
  bool pending_ = false;
  int trims_ = 0;
  std::chrono::steady_clock::time_point last_trim_{};
};

}  // namespace tessera

#endif  // TESSERA_COMMON_MEMORY_RELEASER_H_
