#ifndef TESSERA_COMMON_RENDEZVOUS_KV_STORE_CLIENT_H_
#define TESSERA_COMMON_RENDEZVOUS_KV_STORE_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/rendezvous/conn.h"
#include "common/rendezvous/kv_store_security.h"

namespace tessera {

// Client of KvStoreServer over one TCP connection. Thread-safe (calls are serialized).
// Every call is bounded by `io_timeout` on top of any wait it asks the server for.
class KvStoreClient {
 public:
  // Retries a refused connection until `connect_timeout` passes, then authenticates as
  // `security` says (see KvStoreServer); a refusal fails at once, naming why.
  static absl::StatusOr<std::unique_ptr<KvStoreClient>> Connect(
      absl::string_view host, int port, absl::Duration connect_timeout, const KvStoreSecurity& security = {},
      absl::Duration io_timeout = absl::Seconds(30));

  absl::Status Set(absl::string_view key, absl::string_view value);
  // NotFound when the key is absent.
  absl::StatusOr<std::string> Get(absl::string_view key);
  // Blocks until every key exists; DeadlineExceeded naming the keys after `timeout`.
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout);

  const std::string& address() const { return address_; }

 private:
  KvStoreClient(std::unique_ptr<comm_internal::Conn> conn, std::string address, absl::Duration io_timeout)
      : conn_(std::move(conn)), address_(std::move(address)), io_timeout_(io_timeout) {}
  // Marks the connection broken after an I/O error: a half-read reply would
  // desynchronize the stream, so later calls fail instead of misreading.
  absl::Status Broken(absl::string_view op, absl::string_view key, const absl::Status& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::unique_ptr<comm_internal::Conn> conn_ ABSL_GUARDED_BY(mu_);  // Null once broken.
  const std::string address_;
  const absl::Duration io_timeout_;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_RENDEZVOUS_KV_STORE_CLIENT_H_
