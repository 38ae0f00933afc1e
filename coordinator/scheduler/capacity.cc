#include "coordinator/scheduler/capacity.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::sched {

absl::StatusOr<int> ReplicaNumBlocks(absl::Span<const WorkerCapacity> reports) {
  if (reports.empty()) {
    return absl::InvalidArgumentError("no KV capacity reports for the replica");
  }
  int64_t num_blocks = std::numeric_limits<int64_t>::max();
  for (const WorkerCapacity& report : reports) {
    if (report.num_blocks < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker '", report.worker, "' reported ", report.num_blocks,
                       " KV blocks; at least 2 are needed (block 0 is reserved)"));
    }
    num_blocks = std::min(num_blocks, report.num_blocks);
  }
  // Block ids are 32-bit; more blocks than that would be terabytes of KV.
  return static_cast<int>(std::min<int64_t>(num_blocks, std::numeric_limits<int32_t>::max()));
}

}  // namespace tessera::sched
