#ifndef TESSERA_TOOLS_TESSERA_SERVE_PLACEMENT_H_
#define TESSERA_TOOLS_TESSERA_SERVE_PLACEMENT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::cli {

// Where `tessera serve` puts its workers and how their tensor-parallel groups reduce.
struct ServePlacement {
  std::vector<std::string> worker_devices;  // --device of worker w (rank w % tp).
  std::string communicator;                 // The coordinator's --communicator.
  // Set when serve chose the communicator itself: a line saying why, for stderr.
  std::string note;
};

// `device` is serve's --device: "cuda" puts worker w on cuda:w, anything else ("cpu",
// "cuda:N", "auto") goes to every worker as it is, so "cuda:N" (and "auto", which picks
// device 0 on each worker) puts the ranks of a group on one device. NCCL refuses two ranks
// on one device, so there --communicator nccl is an INVALID_ARGUMENT naming the
// alternatives before anything starts, and "auto" becomes "shm" (what the coordinator's
// "auto" picks too once the workers report one PCI bus id): the workers stage their device
// buffers through host memory.
absl::StatusOr<ServePlacement> PlanServePlacement(absl::string_view device,
                                                  absl::string_view communicator, int tp,
                                                  int replicas);

}  // namespace tessera::cli

#endif  // TESSERA_TOOLS_TESSERA_SERVE_PLACEMENT_H_
