#include "common/auth/secret.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/auth/constant_time.h"
#include "openssl/sha.h"

namespace tessera::auth {

std::string Sha256(absl::string_view data) {
  std::string digest(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
         reinterpret_cast<unsigned char*>(digest.data()));
  return digest;
}

std::string Sha256Hex(absl::string_view data) { return absl::BytesToHexString(Sha256(data)); }

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the secret file ", path));
  std::stringstream content;
  content << in.rdbuf();
  std::string secret(absl::StripAsciiWhitespace(content.str()));
  if (secret.empty()) return absl::InvalidArgumentError(absl::StrCat("the secret file ", path, " is empty"));
  return secret;
}

bool SecretMatches(absl::string_view expected, absl::string_view presented) {
  return ConstantTimeEquals(Sha256(expected), Sha256(presented));
}

}  // namespace tessera::auth
