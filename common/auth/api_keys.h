#ifndef TESSERA_COMMON_AUTH_API_KEYS_H_
#define TESSERA_COMMON_AUTH_API_KEYS_H_

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace tessera::auth {

// An api-keys file: one `sha256:<64 hex digits>` line per key (the digest of the key,
// so the file is no secret by itself), blank lines and `#` comments allowed. Returns the
// raw 32-byte digests; a bad line is refused with its line number.
absl::StatusOr<std::vector<std::string>> ParseApiKeys(absl::string_view text);

// The key of an `authorization: Bearer <key>` value; empty when it is not one.
absl::string_view BearerToken(absl::string_view authorization);

// The public API's keys, reloaded when the file changes so keys rotate without a restart.
// A reload that fails (a half-written or bad file) keeps the previous keys and logs why.
class ApiKeyStore {
 public:
  // Loads `path` and, with a positive `poll_interval`, watches its mtime and size.
  static absl::StatusOr<std::unique_ptr<ApiKeyStore>> Open(
      const std::string& path, std::chrono::milliseconds poll_interval = std::chrono::seconds(2));
  ~ApiKeyStore();

  // OK when `authorization` is `Bearer <key>` for a key of the file, else UNAUTHENTICATED
  // (the message never holds the key). Every stored digest is compared, so the time taken
  // does not say which key, or how much of one, matched.
  absl::Status Check(absl::string_view authorization) const ABSL_LOCKS_EXCLUDED(mu_);

  // Rereads the file now when it changed (the poller calls this).
  absl::Status ReloadIfChanged() ABSL_LOCKS_EXCLUDED(mu_);
  size_t num_keys() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit ApiKeyStore(std::string path) : path_(std::move(path)) {}
  absl::Status Load() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string path_;
  mutable absl::Mutex mu_;
  std::vector<std::string> digests_ ABSL_GUARDED_BY(mu_);
  std::filesystem::file_time_type mtime_ ABSL_GUARDED_BY(mu_);
  uintmax_t size_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification stop_;
  std::thread poller_;
};

}  // namespace tessera::auth

#endif  // TESSERA_COMMON_AUTH_API_KEYS_H_
