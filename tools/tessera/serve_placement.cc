#include "tools/tessera/serve_placement.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tessera::cli {

absl::StatusOr<ServePlacement> PlanServePlacement(absl::string_view device,
                                                  absl::string_view communicator, int tp,
                                                  int replicas) {
  if (communicator != "auto" && communicator != "gloo" && communicator != "shm" &&
      communicator != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("--communicator must be auto, gloo, shm or nccl, got \"", communicator, "\""));
  }
  ServePlacement p;
  p.communicator = std::string(communicator);
  for (int w = 0; w < tp * replicas; ++w) {
    p.worker_devices.push_back(device == "cuda" ? absl::StrCat("cuda:", w) : std::string(device));
  }
  const bool one_device_per_group =
      tp > 1 && (absl::StartsWith(device, "cuda:") || device == "auto");
  if (!one_device_per_group) return p;
  if (communicator == "nccl") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--communicator nccl needs one GPU per rank, but --device ", device, " puts all ", tp,
        " ranks of a replica on one device, and NCCL refuses two ranks on one device; use "
        "--communicator shm or gloo (the workers stage through host memory), or --device cuda "
        "(worker i on cuda:i)"));
  }
  if (communicator == "auto") {
    p.communicator = "shm";
    p.note = absl::StrCat("--device ", device, " puts the ", tp,
                          " ranks of each replica on one device, where NCCL refuses to run; "
                          "they reduce through shared memory (--communicator shm)");
  }
  return p;
}

}  // namespace tessera::cli
