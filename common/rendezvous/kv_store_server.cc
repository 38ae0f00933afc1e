#include "common/rendezvous/kv_store_server.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/rendezvous/kv_store_handshake.h"
#include "common/rendezvous/kv_store_protocol.h"

namespace tessera {

using comm_internal::Conn;
using comm_internal::UniqueFd;

namespace {

// A request's first byte may take forever (idle connection); the rest of a frame must
// follow promptly or the client is broken.
constexpr absl::Duration kFrameTimeout = absl::Seconds(30);
// Caps a client-requested wait so a bogus timeout cannot pin a thread for days.
constexpr absl::Duration kMaxWait = absl::Hours(1);
// A peer must finish TLS and the join secret this fast; at most this many may be at it at
// once (a real cluster opens a handful per group formation), and at most kMaxConnections
// may be open at all.
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);
constexpr int kMaxHandshaking = 64;
constexpr size_t kMaxConnections = 1024;

absl::Status SendCode(Conn& conn, uint8_t code, absl::Time deadline) { return conn.WriteAll(&code, 1, deadline); }

}  // namespace

absl::StatusOr<std::unique_ptr<KvStoreServer>> KvStoreServer::Start(absl::string_view host,
                                                                    int port,
                                                                    KvStoreSecurity security) {
  int bound_port = 0;
  absl::StatusOr<UniqueFd> fd = comm_internal::ListenTcp(host, port, &bound_port);
  if (!fd.ok()) {
    return absl::Status(fd.status().code(), absl::StrCat("KvStoreServer: ", fd.status().message()));
  }
  return std::unique_ptr<KvStoreServer>(
      new KvStoreServer(std::move(*fd), std::string(host), bound_port, std::move(security)));
}

KvStoreServer::KvStoreServer(UniqueFd listen_fd, std::string host, int port, KvStoreSecurity security)
    : listen_fd_(std::move(listen_fd)), host_(std::move(host)), port_(port), security_(std::move(security)) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

KvStoreServer::~KvStoreServer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  // shutdown() wakes a thread blocked in accept() or poll() on these sockets.
  ::shutdown(listen_fd_.get(), SHUT_RDWR);
  accept_thread_.join();
  std::vector<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&conn_mu_);
    connections.swap(connections_);
  }
  for (auto& conn : connections) conn->conn->Shutdown();
  for (auto& conn : connections) conn->thread.join();
}

size_t KvStoreServer::EraseKeysWithPrefix(absl::string_view prefix) {
  absl::MutexLock lock(&mu_);
  size_t erased = 0;
  auto it = data_.lower_bound(std::string(prefix));
  while (it != data_.end() && absl::StartsWith(it->first, prefix)) {
    it = data_.erase(it);
    ++erased;
  }
  return erased;
}

size_t KvStoreServer::num_keys() const {
  absl::MutexLock lock(&mu_);
  return data_.size();
}

void KvStoreServer::AcceptLoop() {
  while (true) {
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
      }
      std::fprintf(stderr, "KvStoreServer on port %d: accept failed: %s\n", port_,
                   std::strerror(errno));
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      return;
    }
    auto conn = std::make_unique<Connection>();
    conn->conn = std::make_unique<Conn>(UniqueFd(fd));
    absl::MutexLock lock(&conn_mu_);
    ReapFinishedLocked();
    if (handshaking_ >= kMaxHandshaking || connections_.size() >= kMaxConnections) {
      Log(LogLevel::kWarning, "rendezvous-store", "refused a connection: too many open or unauthenticated",
          {{"peer", conn->conn->peer()}, {"port", std::to_string(port_)}});
      continue;  // Closed by the destructor.
    }
    ++handshaking_;
    Connection* raw = conn.get();
    conn->thread = std::thread([this, raw] { Serve(raw); });
    connections_.push_back(std::move(conn));
  }
}

void KvStoreServer::ReapFinishedLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done) {
      (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void KvStoreServer::Serve(Connection* conn) {
  const absl::Status auth = comm_internal::AcceptHandshake(*conn->conn, security_, absl::Now() + kHandshakeTimeout);
  {
    absl::MutexLock lock(&conn_mu_);
    --handshaking_;
  }
  if (!auth.ok()) {
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
    }
    if (!stopping) {
      Log(LogLevel::kWarning, "rendezvous-store", "refused a connection",
          {{"peer", conn->conn->peer()}, {"port", std::to_string(port_)}, {"error", std::string(auth.message())}});
    }
  } else {
    while (HandleRequest(*conn->conn)) {
    }
  }
  // The peer sees the close now, not when the accept loop next reaps this thread.
  conn->conn->Shutdown();
  absl::MutexLock lock(&conn_mu_);
  conn->done = true;
}

bool KvStoreServer::HandleRequest(Conn& conn) {
  uint8_t op = 0;
  if (!comm_internal::ReadU8(conn, &op, absl::InfiniteFuture()).ok()) return false;
  const absl::Time frame_deadline = absl::Now() + kFrameTimeout;
  std::string key;
  switch (op) {
    case comm_internal::kKvSet: {
      std::string value;
      if (!comm_internal::ReadBytes32(conn, &key, comm_internal::kKvMaxKeyBytes, frame_deadline)
               .ok() ||
          !comm_internal::ReadBytes64(conn, &value, comm_internal::kKvMaxValueBytes, frame_deadline)
               .ok()) {
        return false;
      }
      {
        absl::MutexLock lock(&mu_);
        data_.insert_or_assign(std::move(key), std::move(value));
        changed_.SignalAll();
      }
      return SendCode(conn, comm_internal::kKvOk, frame_deadline).ok();
    }
    case comm_internal::kKvGet: {
      if (!comm_internal::ReadBytes32(conn, &key, comm_internal::kKvMaxKeyBytes, frame_deadline)
               .ok()) {
        return false;
      }
      std::string reply;
      {
        absl::MutexLock lock(&mu_);
        auto it = data_.find(key);
        if (it == data_.end()) {
          comm_internal::AppendU8(reply, comm_internal::kKvNotFound);
        } else {
          comm_internal::AppendU8(reply, comm_internal::kKvOk);
          comm_internal::AppendU64(reply, it->second.size());
          reply += it->second;
        }
      }
      return conn.WriteAll(reply.data(), reply.size(), frame_deadline).ok();
    }
    case comm_internal::kKvWait: {
      uint32_t n = 0;
      if (!comm_internal::ReadU32(conn, &n, frame_deadline).ok() ||
          n > comm_internal::kKvMaxKeysPerWait) {
        return false;
      }
      std::vector<std::string> keys(n);
      for (auto& k : keys) {
        if (!comm_internal::ReadBytes32(conn, &k, comm_internal::kKvMaxKeyBytes, frame_deadline)
                 .ok()) {
          return false;
        }
      }
      uint64_t timeout_ms = 0;
      if (!comm_internal::ReadU64(conn, &timeout_ms, frame_deadline).ok()) return false;
      const absl::Duration timeout =
          std::min(absl::Milliseconds(static_cast<int64_t>(
                       std::min<uint64_t>(timeout_ms, absl::ToInt64Milliseconds(kMaxWait)))),
                   kMaxWait);
      const absl::Time deadline = absl::Now() + timeout;
      uint8_t code = comm_internal::kKvOk;
      {
        absl::MutexLock lock(&mu_);
        auto all_present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          for (const auto& k : keys) {
            if (data_.find(k) == data_.end()) return false;
          }
          return true;
        };
        while (!all_present() && !stopping_) {
          if (changed_.WaitWithDeadline(&mu_, deadline) && !all_present()) {
            code = comm_internal::kKvTimeout;
            break;
          }
        }
        if (code == comm_internal::kKvOk && !all_present()) code = comm_internal::kKvShuttingDown;
      }
      return SendCode(conn, code, absl::Now() + kFrameTimeout).ok();
    }
    default:
      Log(LogLevel::kWarning, "rendezvous-store", "unknown op; closing the connection",
          {{"peer", conn.peer()}, {"op", std::to_string(op)}});
      return false;
  }
}

}  // namespace tessera
