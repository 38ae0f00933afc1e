#include "coordinator/engine/replica_role.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tessera {

absl::string_view ReplicaRoleName(ReplicaRole role) {
  switch (role) {
    case ReplicaRole::kBoth: return "both";
    case ReplicaRole::kPrefill: return "prefill";
    case ReplicaRole::kDecode: return "decode";
  }
  return "both";
}

absl::StatusOr<ReplicaRole> ParseReplicaRole(absl::string_view name) {
  name = absl::StripAsciiWhitespace(name);
  if (name == "both") return ReplicaRole::kBoth;
  if (name == "prefill") return ReplicaRole::kPrefill;
  if (name == "decode") return ReplicaRole::kDecode;
  return absl::InvalidArgumentError(absl::StrCat("replica role '", name, "': must be prefill, decode or both"));
}

absl::StatusOr<std::vector<ReplicaRole>> ParseReplicaRoles(absl::string_view list) {
  std::vector<ReplicaRole> roles;
  if (absl::StripAsciiWhitespace(list).empty()) return roles;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    absl::StatusOr<ReplicaRole> role = ParseReplicaRole(name);
    if (!role.ok()) return role.status();
    roles.push_back(*role);
  }
  return roles;
}

}  // namespace tessera
