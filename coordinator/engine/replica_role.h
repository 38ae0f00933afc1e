#ifndef TESSERA_COORDINATOR_ENGINE_REPLICA_ROLE_H_
#define TESSERA_COORDINATOR_ENGINE_REPLICA_ROLE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// Disaggregated serving (docs/architecture.md, "Disaggregated prefill and decode"): a
// prefill replica computes prompts and their first token, then hands each sequence's KV
// to a decode replica, which generates the rest; `both` does everything. Roles only
// matter in pairs: with no prefill replica up, every replica takes new requests; with no
// decode replica up, a prefill replica decodes its own.
enum class ReplicaRole { kBoth, kPrefill, kDecode };

absl::string_view ReplicaRoleName(ReplicaRole role);  // "both", "prefill", "decode".
absl::StatusOr<ReplicaRole> ParseReplicaRole(absl::string_view name);
// "prefill,decode,decode": replica 0 prefills, 1 and 2 decode; replicas past the list are
// `both`. Empty: all `both`.
absl::StatusOr<std::vector<ReplicaRole>> ParseReplicaRoles(absl::string_view list);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_ENGINE_REPLICA_ROLE_H_
