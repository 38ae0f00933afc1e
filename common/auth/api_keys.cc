#include "common/auth/api_keys.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/auth/constant_time.h"
#include "common/auth/secret.h"
#include "common/logging.h"

namespace tessera::auth {

absl::StatusOr<std::vector<std::string>> ParseApiKeys(absl::string_view text) {
  std::vector<std::string> digests;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    constexpr absl::string_view kPrefix = "sha256:";
    absl::string_view hex = line;
    bool valid = absl::ConsumePrefix(&hex, kPrefix) && hex.size() == 64;
    for (char c : hex) valid = valid && absl::ascii_isxdigit(static_cast<unsigned char>(c));
    if (!valid) {
      // The line itself is not echoed: it may be a plain key pasted by mistake.
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_number, " is not sha256:<64 hex digits> (store the digest of a key, e.g. "
          "`tessera hash-api-key`, never the key itself)"));
    }
    digests.push_back(absl::HexStringToBytes(absl::AsciiStrToLower(hex)));
  }
  return digests;
}

absl::string_view BearerToken(absl::string_view authorization) {
  authorization = absl::StripAsciiWhitespace(authorization);
  if (authorization.size() < 7 || !absl::EqualsIgnoreCase(authorization.substr(0, 7), "bearer ")) return {};
  return absl::StripAsciiWhitespace(authorization.substr(7));
}

absl::StatusOr<std::unique_ptr<ApiKeyStore>> ApiKeyStore::Open(const std::string& path,
                                                                std::chrono::milliseconds poll_interval) {
  std::unique_ptr<ApiKeyStore> store(new ApiKeyStore(path));
  if (absl::Status s = store->Load(); !s.ok()) return s;
  if (poll_interval.count() > 0) {
    store->poller_ = std::thread([s = store.get(), poll_interval] {
      while (!s->stop_.WaitForNotificationWithTimeout(absl::FromChrono(poll_interval))) {
        if (absl::Status reloaded = s->ReloadIfChanged(); !reloaded.ok()) {
          Log(LogLevel::kError, "api-keys", "reload failed; the previous keys stay in force",
              {{"error", std::string(reloaded.message())}});
        }
      }
    });
  }
  return store;
}

ApiKeyStore::~ApiKeyStore() {
  stop_.Notify();
  if (poller_.joinable()) poller_.join();
}

absl::Status ApiKeyStore::Load() {
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(path_, ec);
  const uintmax_t size = ec ? 0 : std::filesystem::file_size(path_, ec);
  std::ifstream in(path_, std::ios::binary);
  if (ec || !in) return absl::NotFoundError(absl::StrCat("cannot read the api-keys file ", path_));
  std::stringstream content;
  content << in.rdbuf();
  auto digests = ParseApiKeys(content.str());
  if (!digests.ok()) return absl::InvalidArgumentError(absl::StrCat(path_, ": ", digests.status().message()));
  const size_t count = digests->size();
  {
    absl::MutexLock lock(&mu_);
    digests_ = *std::move(digests);
    mtime_ = mtime;
    size_ = size;
  }
  Log(LogLevel::kInfo, "api-keys", "API keys loaded", {{"file", path_}, {"keys", static_cast<int64_t>(count)}});
  return absl::OkStatus();
}

absl::Status ApiKeyStore::ReloadIfChanged() {
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(path_, ec);
  const uintmax_t size = ec ? 0 : std::filesystem::file_size(path_, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read the api-keys file ", path_));
  {
    absl::MutexLock lock(&mu_);
    if (mtime == mtime_ && size == size_) return absl::OkStatus();
  }
  return Load();
}

absl::Status ApiKeyStore::Check(absl::string_view authorization) const {
  const absl::string_view key = BearerToken(authorization);
  if (key.empty()) return absl::UnauthenticatedError("missing API key: send `authorization: Bearer <key>`");
  const std::string digest = Sha256(key);
  bool match = false;
  {
    absl::ReaderMutexLock lock(&mu_);
    // No early exit: every stored digest is compared whatever matched before.
    for (const std::string& stored : digests_) match |= ConstantTimeEquals(stored, digest);
  }
  if (!match) return absl::UnauthenticatedError("invalid API key");
  return absl::OkStatus();
}

size_t ApiKeyStore::num_keys() const {
  absl::ReaderMutexLock lock(&mu_);
  return digests_.size();
}

}  // namespace tessera::auth
