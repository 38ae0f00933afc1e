#include "worker/comm/host_staged_communicator.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera {

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> inner,
                                               kernels::Backend* backend)
    : inner_(std::move(inner)),
      backend_(backend),
      name_(std::string(inner_->backend_name()) + "+host-staged") {}

float* HostStagedCommunicator::Staging(size_t floats) {
  // Grown only: shrinking would zero-fill it again at the next larger step. Never empty,
  // so the inner communicator gets a valid pointer even for a zero-length collective.
  const size_t need = std::max<size_t>(floats, 1);
  if (staging_.size() < need) staging_.resize(need);
  return staging_.data();
}

absl::Status HostStagedCommunicator::AllReduceSum(float* data, size_t count) {
  float* host = Staging(count);
  backend_->CopyToHost(host, data, count * sizeof(float));
  RETURN_IF_ERROR(inner_->AllReduceSum(host, count));
  backend_->CopyToDevice(data, host, count * sizeof(float));
  return absl::OkStatus();
}

absl::Status HostStagedCommunicator::AllReduceSum(void* data, size_t count, DType dtype) {
  if (dtype == DType::kF32) return AllReduceSum(static_cast<float*>(data), count);
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    return absl::UnimplementedError(absl::StrCat(name_, " communicator: all-reduce of ",
                                                 DTypeName(dtype), " is not supported"));
  }
  // The float32 sums first, the 16-bit values after them (count / 2 floats' room).
  float* sums = Staging(count + (count + 1) / 2);
  auto* halves = reinterpret_cast<uint16_t*>(sums + count);
  backend_->CopyToHost(halves, data, count * sizeof(uint16_t));
  ConvertToF32(halves, dtype, count, sums);
  RETURN_IF_ERROR(inner_->AllReduceSum(sums, count));
  for (size_t i = 0; i < count; ++i) {
    halves[i] = dtype == DType::kBF16 ? F32ToBf16(sums[i]) : F32ToF16(sums[i]);
  }
  backend_->CopyToDevice(data, halves, count * sizeof(uint16_t));
  return absl::OkStatus();
}

absl::Status HostStagedCommunicator::AllGather(const float* send, size_t count, float* recv) {
  const size_t gathered = count * static_cast<size_t>(world_size());
  // The receive area first, this rank's part after it: `send` may lie inside `recv`.
  float* host_recv = Staging(gathered + count);
  float* host_send = host_recv + gathered;
  backend_->CopyToHost(host_send, send, count * sizeof(float));
  RETURN_IF_ERROR(inner_->AllGather(host_send, count, host_recv));
  backend_->CopyToDevice(recv, host_recv, gathered * sizeof(float));
  return absl::OkStatus();
}

absl::Status HostStagedCommunicator::Broadcast(void* data, size_t bytes, int root) {
  void* host = Staging((bytes + sizeof(float) - 1) / sizeof(float));
  // Only the root's bytes matter; the others are overwritten.
  if (rank() == root) backend_->CopyToHost(host, data, bytes);
  RETURN_IF_ERROR(inner_->Broadcast(host, bytes, root));
  if (rank() != root) backend_->CopyToDevice(data, host, bytes);
  return absl::OkStatus();
}

}  // namespace tessera
