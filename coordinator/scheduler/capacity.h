#ifndef TESSERA_COORDINATOR_SCHEDULER_CAPACITY_H_
#define TESSERA_COORDINATOR_SCHEDULER_CAPACITY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tessera::sched {

// KV blocks one worker (rank) can hold, measured from its free memory after loading.
struct WorkerCapacity {
  std::string worker;  // Address or name, for error messages.
  int64_t num_blocks = 0;
};

// Every rank of a replica holds a slice of every block, so the replica has as many
// blocks as its smallest rank. Errors on no reports, or a rank with fewer than 2 blocks
// (block 0 is reserved, so it could serve nothing).
absl::StatusOr<int> ReplicaNumBlocks(absl::Span<const WorkerCapacity> reports);

}  // namespace tessera::sched

#endif  // TESSERA_COORDINATOR_SCHEDULER_CAPACITY_H_
