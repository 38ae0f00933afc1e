#ifndef TESSERA_COMMON_AUTH_SECRET_H_
#define TESSERA_COMMON_AUTH_SECRET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::auth {

// The 32 raw bytes of SHA-256(data).
std::string Sha256(absl::string_view data);
// The same as 64 lower-case hex digits (the form of an api-keys file line).
std::string Sha256Hex(absl::string_view data);

// A secret file (the worker join secret): its content without surrounding whitespace, so
// `echo secret > file` works. Empty files are refused: an empty secret protects nothing.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

// Whether `presented` equals `expected`, in time independent of both contents: the
// digests are compared, so even the lengths do not leak.
bool SecretMatches(absl::string_view expected, absl::string_view presented);

// The metadata key a worker sends its join secret in.
inline constexpr char kJoinSecretMetadataKey[] = "x-tessera-join-secret";

}  // namespace tessera::auth

#endif  // TESSERA_COMMON_AUTH_SECRET_H_
