#ifndef TESSERA_COORDINATOR_CLUSTER_COMMUNICATOR_CHOICE_H_
#define TESSERA_COORDINATOR_CLUSTER_COMMUNICATOR_CHOICE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

// Where one rank of a group computes, from its registration.
struct RankPlacement {
  std::string host;         // The worker's address without the port.
  std::string device_kind;  // "cpu" or "cuda".
  std::string device_id;    // The GPU's PCI bus id; empty for the CPU or when unknown.
};

// The communicator a group of `ranks` uses when `requested` ("auto", "nccl", "gloo", "shm")
// was asked for: "single" for one rank; for "auto", NCCL when every rank has a GPU of its
// own, shared memory when the ranks share a host (and, for GPUs, when some share one: NCCL
// refuses two ranks on one device, so their buffers go through host staging), else Gloo.
// Refused (FAILED_PRECONDITION, naming the ranks): a group of CUDA and non-CUDA ranks, and
// NCCL asked for ranks that share a GPU.
absl::StatusOr<std::string> ChooseCommunicator(std::string_view requested,
                                               const std::vector<RankPlacement>& ranks,
                                               int replica);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CLUSTER_COMMUNICATOR_CHOICE_H_
