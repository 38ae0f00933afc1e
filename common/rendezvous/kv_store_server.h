#ifndef TESSERA_COMMON_RENDEZVOUS_KV_STORE_SERVER_H_
#define TESSERA_COMMON_RENDEZVOUS_KV_STORE_SERVER_H_

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/rendezvous/conn.h"
#include "common/rendezvous/kv_store_security.h"
#include "common/rendezvous/socket_util.h"

namespace tessera {

// The rendezvous store the coordinator hosts for Gloo groups: set / get / wait on keys
// with binary-safe values, over plain TCP (no gRPC, so it has no dependency on the
// coordinator's RPC stack). One thread per connection; a group of N ranks holds N
// connections only while it forms. Keys live until erased, so every group formation
// must use a fresh key prefix (see GlooCommunicatorOptions::prefix).
//
// Every connection first passes the handshake of kv_store_handshake.h (mutual TLS when
// `security` has certificates, and the join secret); one that fails is closed before it
// can read or write a key, and logged with its address. Handshakes are bounded in time
// and in number, so idle or flooding peers cannot pin threads.
class KvStoreServer {
 public:
  // Binds host:port (port 0 = an ephemeral port, see port()) and starts serving.
  static absl::StatusOr<std::unique_ptr<KvStoreServer>> Start(absl::string_view host, int port,
                                                              KvStoreSecurity security = {});

  ~KvStoreServer();  // Stops: closes every connection and wakes every waiter.
  KvStoreServer(const KvStoreServer&) = delete;
  KvStoreServer& operator=(const KvStoreServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }

  // Drops every key starting with `prefix` (a finished group's keys); returns how many.
  size_t EraseKeysWithPrefix(absl::string_view prefix);
  size_t num_keys() const;

 private:
  struct Connection {
    std::unique_ptr<comm_internal::Conn> conn;
    std::thread thread;
    bool done = false;
  };

  KvStoreServer(comm_internal::UniqueFd listen_fd, std::string host, int port, KvStoreSecurity security);
  void AcceptLoop();
  void Serve(Connection* conn);
  // Handles one request; false when the connection must close.
  bool HandleRequest(comm_internal::Conn& conn);
  void ReapFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(conn_mu_);

  comm_internal::UniqueFd listen_fd_;
  const std::string host_;
  const int port_;
  const KvStoreSecurity security_;
  std::thread accept_thread_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<std::string, std::string, std::less<>> data_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  absl::Mutex conn_mu_;
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(conn_mu_);
  int handshaking_ ABSL_GUARDED_BY(conn_mu_) = 0;  // Connections not yet authenticated.
};

}  // namespace tessera

#endif  // TESSERA_COMMON_RENDEZVOUS_KV_STORE_SERVER_H_
