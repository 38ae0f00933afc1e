#include "common/rendezvous/kv_store_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rendezvous/kv_store_handshake.h"
#include "common/rendezvous/kv_store_protocol.h"

namespace tessera {

namespace ci = comm_internal;

absl::StatusOr<std::unique_ptr<KvStoreClient>> KvStoreClient::Connect(
    absl::string_view host, int port, absl::Duration connect_timeout, const KvStoreSecurity& security,
    absl::Duration io_timeout) {
  absl::StatusOr<ci::UniqueFd> fd = ci::ConnectTcp(host, port, absl::Now() + connect_timeout);
  if (!fd.ok()) {
    return absl::Status(fd.status().code(),
                        absl::StrCat("KvStoreClient: ", fd.status().message(), " (gave up after ",
                                     absl::FormatDuration(connect_timeout), ")"));
  }
  auto conn = std::make_unique<ci::Conn>(std::move(*fd));
  // The handshake gets its own bound: the store answers it at once, however long the
  // caller was willing to wait for the store to come up.
  if (absl::Status s = ci::ConnectHandshake(*conn, security, host, absl::Now() + std::min(io_timeout, absl::Seconds(10)));
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("KvStoreClient: rendezvous store ", host, ":", port, ": ", s.message()));
  }
  return std::unique_ptr<KvStoreClient>(new KvStoreClient(std::move(conn), absl::StrCat(host, ":", port), io_timeout));
}

absl::Status KvStoreClient::Broken(absl::string_view op, absl::string_view key,
                                   const absl::Status& cause) {
  conn_.reset();
  return absl::UnavailableError(
      absl::StrCat("KvStoreClient ", op, " '", key, "' on ", address_, ": ", cause.message()));
}

absl::Status KvStoreClient::Set(absl::string_view key, absl::string_view value) {
  if (key.size() > ci::kKvMaxKeyBytes || value.size() > ci::kKvMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("KvStoreClient Set: key of ", key.size(),
                                                   " bytes or value of ", value.size(),
                                                   " bytes over the store's limits"));
  }
  absl::MutexLock lock(&mu_);
  if (conn_ == nullptr)
    return absl::UnavailableError(
        absl::StrCat("KvStoreClient to ", address_, " is closed after an earlier error"));
  std::string req;
  ci::AppendU8(req, ci::kKvSet);
  ci::AppendU32(req, static_cast<uint32_t>(key.size()));
  req.append(key.data(), key.size());
  ci::AppendU64(req, value.size());
  req.append(value.data(), value.size());
  const absl::Time deadline = absl::Now() + io_timeout_;
  uint8_t code = 0;
  if (absl::Status s = conn_->WriteAll(req.data(), req.size(), deadline); !s.ok()) {
    return Broken("Set", key, s);
  }
  if (absl::Status s = ci::ReadU8(*conn_, &code, deadline); !s.ok()) {
    return Broken("Set", key, s);
  }
  if (code != ci::kKvOk) {
    return absl::UnavailableError(
        absl::StrCat("KvStoreClient Set '", key, "' on ", address_, ": server code ", code));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvStoreClient::Get(absl::string_view key) {
  if (key.size() > ci::kKvMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvStoreClient Get: key of ", key.size(), " bytes over the limit"));
  }
  absl::MutexLock lock(&mu_);
  if (conn_ == nullptr)
    return absl::UnavailableError(
        absl::StrCat("KvStoreClient to ", address_, " is closed after an earlier error"));
  std::string req;
  ci::AppendU8(req, ci::kKvGet);
  ci::AppendU32(req, static_cast<uint32_t>(key.size()));
  req.append(key.data(), key.size());
  const absl::Time deadline = absl::Now() + io_timeout_;
  uint8_t code = 0;
  if (absl::Status s = conn_->WriteAll(req.data(), req.size(), deadline); !s.ok()) {
    return Broken("Get", key, s);
  }
  if (absl::Status s = ci::ReadU8(*conn_, &code, deadline); !s.ok()) {
    return Broken("Get", key, s);
  }
  if (code == ci::kKvNotFound) {
    return absl::NotFoundError(
        absl::StrCat("KvStoreClient Get: key '", key, "' not in the store at ", address_));
  }
  if (code != ci::kKvOk) {
    return absl::UnavailableError(
        absl::StrCat("KvStoreClient Get '", key, "' on ", address_, ": server code ", code));
  }
  std::string value;
  if (absl::Status s = ci::ReadBytes64(*conn_, &value, ci::kKvMaxValueBytes, deadline);
      !s.ok()) {
    return Broken("Get", key, s);
  }
  return value;
}

absl::Status KvStoreClient::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  const std::string joined = absl::StrJoin(keys, ",");
  if (keys.size() > ci::kKvMaxKeysPerWait) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvStoreClient Wait: ", keys.size(), " keys over the limit"));
  }
  std::string req;
  ci::AppendU8(req, ci::kKvWait);
  ci::AppendU32(req, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    if (k.size() > ci::kKvMaxKeyBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("KvStoreClient Wait: key of ", k.size(), " bytes over the limit"));
    }
    ci::AppendU32(req, static_cast<uint32_t>(k.size()));
    req += k;
  }
  const int64_t timeout_ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(timeout));
  ci::AppendU64(req, static_cast<uint64_t>(timeout_ms));
  absl::MutexLock lock(&mu_);
  if (conn_ == nullptr)
    return absl::UnavailableError(
        absl::StrCat("KvStoreClient to ", address_, " is closed after an earlier error"));
  const absl::Time deadline = absl::Now() + timeout + io_timeout_;
  uint8_t code = 0;
  if (absl::Status s = conn_->WriteAll(req.data(), req.size(), deadline); !s.ok()) {
    return Broken("Wait", joined, s);
  }
  if (absl::Status s = ci::ReadU8(*conn_, &code, deadline); !s.ok()) {
    return Broken("Wait", joined, s);
  }
  switch (code) {
    case ci::kKvOk:
      return absl::OkStatus();
    case ci::kKvTimeout:
      return absl::DeadlineExceededError(absl::StrCat("KvStoreClient Wait: keys [", joined,
                                                      "] not all set in the store at ", address_,
                                                      " within ", absl::FormatDuration(timeout)));
    default:
      return absl::UnavailableError(absl::StrCat("KvStoreClient Wait [", joined, "] on ", address_,
                                                 ": server code ", code, " (store shutting down)"));
  }
}

}  // namespace tessera
