#include "worker/backend_factory.h"

#include <cstdlib>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

#if defined(TESSERA_HAVE_CUDA)
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_backend.h"
#endif

namespace tessera {
namespace {

// The "model name" line of /proc/cpuinfo, else "cpu".
std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "model name")) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    return std::string(absl::StripAsciiWhitespace(absl::string_view(line).substr(colon + 1)));
  }
  return "cpu";
}

#if defined(TESSERA_HAVE_CUDA)
const kernels::CudaBackend* AsCuda(const kernels::Backend& backend) {
  return dynamic_cast<const kernels::CudaBackend*>(&backend);
}

// The CUDA backend's activation dtype: BF16 unless TESSERA_CUDA_ACTIVATIONS says "f32"
// (float32 activations between kernels, as before BF16 was the default; "bf16" is the
// default spelled out). The residual stream and logits are float32 either way.
absl::StatusOr<DType> CudaActivationDtype() {
  const char* env = std::getenv("TESSERA_CUDA_ACTIVATIONS");
  if (env == nullptr || *env == '\0') return DType::kBF16;
  const std::string value = absl::AsciiStrToLower(env);
  if (value == "bf16") return DType::kBF16;
  if (value == "f32" || value == "fp32") return DType::kF32;
  return absl::InvalidArgumentError(absl::StrCat("TESSERA_CUDA_ACTIVATIONS=", env,
                                                 ": expected bf16 or f32"));
}

// Device ordinal for "cuda" or "cuda:N"; the caller checked the prefix.
absl::StatusOr<std::unique_ptr<kernels::Backend>> MakeCuda(int ordinal) {
  // A bad setting is reported as such, device or not.
  absl::StatusOr<DType> activations = CudaActivationDtype();
  if (!activations.ok()) return activations.status();
  absl::StatusOr<int> count = kernels::CudaDeviceCount();
  if (!count.ok()) {
    return absl::UnavailableError(absl::StrCat("no CUDA device: ", count.status().message()));
  }
  if (*count == 0) {
    return absl::UnavailableError("no CUDA device: cudaGetDeviceCount reported 0 devices");
  }
  auto backend = kernels::MakeCudaBackend(ordinal, *activations);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<kernels::Backend>(std::move(*backend));
}
#endif

}  // namespace

bool CudaBuiltIn() {
#if defined(TESSERA_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<kernels::Backend>> MakeBackend(absl::string_view device,
                                                              int cpu_threads) {
  if (device == "cpu") return kernels::MakeCpuBackend(cpu_threads);
  if (device == "auto") {
#if defined(TESSERA_HAVE_CUDA)
    absl::StatusOr<int> count = kernels::CudaDeviceCount();
    if (count.ok() && *count > 0) return MakeCuda(0);
#endif
    return kernels::MakeCpuBackend(cpu_threads);
  }
  int ordinal = 0;
  if (device == "cuda") {
    ordinal = 0;
  } else if (absl::string_view rest = device; absl::ConsumePrefix(&rest, "cuda:")) {
    if (!absl::SimpleAtoi(rest, &ordinal) || ordinal < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device \"", device, "\": the CUDA device index must be a non-negative integer"));
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", device, "\" is not one of cpu, cuda, cuda:N, auto"));
  }
#if defined(TESSERA_HAVE_CUDA)
  return MakeCuda(ordinal);
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "device \"", device,
      "\": this build has no CUDA backend (it was configured without nvcc); use --device cpu"));
#endif
}

DeviceDescription DescribeBackend(const kernels::Backend& backend) {
  DeviceDescription d;
#if defined(TESSERA_HAVE_CUDA)
  if (const kernels::CudaBackend* cuda = AsCuda(backend)) {
    d.kind = "cuda";
    d.ordinal = cuda->device();
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, cuda->device()) == cudaSuccess) {
      d.name = prop.name;
      d.total_memory_bytes = prop.totalGlobalMem;
    } else {
      cudaGetLastError();  // Not sticky; keep it out of the backend's launch checks.
      d.name = absl::StrCat("cuda:", cuda->device());
    }
    d.free_memory_bytes = backend.FreeMemoryBytes();
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda->device()) == cudaSuccess) {
      d.device_id = bus_id;
    } else {
      cudaGetLastError();
    }
    return d;
  }
#endif
  d.kind = std::string(backend.name());
  d.name = d.kind == "cpu" ? CpuModelName() : d.kind;
  d.total_memory_bytes = backend.TotalMemoryBytes();
  d.free_memory_bytes = backend.FreeMemoryBytes();
  return d;
}

absl::Status BackendError(const kernels::Backend& backend) {
#if defined(TESSERA_HAVE_CUDA)
  if (const kernels::CudaBackend* cuda = AsCuda(backend)) return cuda->status();
#endif
  return absl::OkStatus();
}

absl::Status BindBackendToThread(const kernels::Backend& backend) {
#if defined(TESSERA_HAVE_CUDA)
  if (const kernels::CudaBackend* cuda = AsCuda(backend)) {
    if (const cudaError_t e = cudaSetDevice(cuda->device()); e != cudaSuccess) {
      cudaGetLastError();
      return absl::InternalError(absl::StrCat("cudaSetDevice(", cuda->device(),
                                              ") failed: ", cudaGetErrorString(e)));
    }
  }
#endif
  return absl::OkStatus();
}

std::optional<CudaPlacement> CudaPlacementOf(const kernels::Backend& backend) {
#if defined(TESSERA_HAVE_CUDA)
  if (const kernels::CudaBackend* cuda = AsCuda(backend)) {
    return CudaPlacement{cuda->device(), static_cast<void*>(cuda->stream())};
  }
#endif
  return std::nullopt;
}

}  // namespace tessera
