#include "coordinator/cluster/communicator_choice.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// Two ranks on one GPU (same host, same PCI bus id), or nothing.
std::optional<std::pair<int, int>> SharedDevice(const std::vector<RankPlacement>& ranks) {
  std::map<std::pair<std::string, std::string>, int> first_rank;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (ranks[r].device_id.empty()) continue;
    auto [it, inserted] = first_rank.emplace(std::make_pair(ranks[r].host, ranks[r].device_id), r);
    if (!inserted) return std::make_pair(it->second, r);
  }
  return std::nullopt;
}

bool OneHost(const std::vector<RankPlacement>& ranks) {
  return std::all_of(ranks.begin(), ranks.end(),
                     [&](const RankPlacement& p) { return p.host == ranks.front().host; });
}

}  // namespace

absl::StatusOr<std::string> ChooseCommunicator(std::string_view requested,
                                               const std::vector<RankPlacement>& ranks,
                                               int replica) {
  const int world = static_cast<int>(ranks.size());
  // Gloo and shm move host memory, NCCL device memory: one group computes on one kind.
  const int cuda_ranks = static_cast<int>(std::count_if(
      ranks.begin(), ranks.end(), [](const RankPlacement& p) { return p.device_kind == "cuda"; }));
  if (cuda_ranks > 0 && cuda_ranks != world) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replica ", replica, ": ", cuda_ranks, " of its ", world,
        " workers registered a CUDA device and the others did not; start every rank of a "
        "group with the same --device"));
  }
  if (world <= 1) return std::string("single");
  const std::optional<std::pair<int, int>> shared =
      cuda_ranks > 0 ? SharedDevice(ranks) : std::nullopt;
  if (requested == "nccl" && shared.has_value()) {
    const RankPlacement& p = ranks[shared->first];
    return absl::FailedPreconditionError(absl::StrCat(
        "replica ", replica, ": ranks ", shared->first, " and ", shared->second,
        " share the GPU at PCI bus id ", p.device_id, " on ", p.host,
        ", and NCCL needs one rank per device: use --communicator shm or gloo (host-staged), "
        "or give each rank its own GPU"));
  }
  if (requested != "auto") return std::string(requested);
  // Rank 0 relays NCCL's unique id through the rendezvous store.
  if (cuda_ranks == world && !shared.has_value()) return std::string("nccl");
  // Shared memory beats TCP by two orders of magnitude for small all-reduces.
  return std::string(OneHost(ranks) ? "shm" : "gloo");
}

}  // namespace tessera
