#ifndef TESSERA_WORKER_DEVICE_BUFFER_H_
#define TESSERA_WORKER_DEVICE_BUFFER_H_

#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"

namespace tessera {

// Owns one allocation in a backend's memory; frees it when dropped.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(kernels::Backend* backend, void* ptr, size_t bytes)
      : backend_(backend), ptr_(ptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      backend_ = std::exchange(other.backend_, nullptr);
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { Reset(); }

  // RESOURCE_EXHAUSTED names the size and what it was for when the backend is full.
  static absl::StatusOr<DeviceBuffer> Allocate(kernels::Backend* backend, size_t bytes,
                                               absl::string_view what) {
    void* p = backend->Allocate(bytes == 0 ? 1 : bytes);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "out of ", backend->name().data(), " memory allocating ", bytes, " bytes for ", what));
    }
    return DeviceBuffer(backend, p, bytes);
  }

  void Reset() {
    if (ptr_ != nullptr) backend_->Free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  kernels::Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_DEVICE_BUFFER_H_
