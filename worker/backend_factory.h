#ifndef TESSERA_WORKER_BACKEND_FACTORY_H_
#define TESSERA_WORKER_BACKEND_FACTORY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"

// Picks and creates the kernel backend a worker (or `tessera run`) computes on, and
// answers the few questions the worker has about it that the Backend interface leaves
// out. The only place outside kernels/cuda that knows the concrete CUDA backend.
namespace tessera {

// What a worker reports about its device when it registers (v1::DeviceInfo).
struct DeviceDescription {
  std::string kind;  // "cpu" or "cuda".
  std::string name;  // The GPU's or CPU's model name.
  int ordinal = -1;  // CUDA device index; -1 for the CPU.
  std::string device_id;  // The GPU's PCI bus id; empty for the CPU.
  uint64_t total_memory_bytes = 0;
  uint64_t free_memory_bytes = 0;
};

// True when this build contains the CUDA backend.
bool CudaBuiltIn();

// `device` is "cpu", "cuda" (device 0), "cuda:N" or "auto" (CUDA device 0 when one is
// usable, else the CPU); `cpu_threads` sizes the CPU backend (0: one per core).
// Errors, never crashes: INVALID_ARGUMENT for an unknown device string,
// FAILED_PRECONDITION when CUDA is asked for but not built in, UNAVAILABLE
// "no CUDA device: ..." when the runtime finds none, NOT_FOUND for a missing ordinal.
// The CUDA backend carries activations in BF16 between kernels (float32 accumulation,
// residual stream and logits); TESSERA_CUDA_ACTIVATIONS=f32 keeps them float32
// (INVALID_ARGUMENT for a value other than bf16 / f32).
absl::StatusOr<std::unique_ptr<kernels::Backend>> MakeBackend(absl::string_view device,
                                                              int cpu_threads);

DeviceDescription DescribeBackend(const kernels::Backend& backend);

// OK, or the first error the backend recorded asynchronously (CUDA ops return void and
// keep their first failure; after one, the device's results cannot be trusted).
absl::Status BackendError(const kernels::Backend& backend);

// CUDA's current device is a per-thread setting and gRPC runs each call on a thread of its
// pool: call this before driving `backend` from a new thread. A no-op for the CPU.
absl::Status BindBackendToThread(const kernels::Backend& backend);

// The device ordinal and cudaStream_t (as void*) that collectives must share with a CUDA
// backend, so they order against its kernels; nullopt for other backends.
struct CudaPlacement {
  int device = 0;
  void* stream = nullptr;
};
std::optional<CudaPlacement> CudaPlacementOf(const kernels::Backend& backend);

}  // namespace tessera

#endif  // TESSERA_WORKER_BACKEND_FACTORY_H_
