#ifndef TESSERA_COMMON_GRPC_CHANNEL_H_
#define TESSERA_COMMON_GRPC_CHANNEL_H_

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace tessera {

// How long one connection attempt (TCP + HTTP/2 handshake) may take. gRPC takes it from
// GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: the connect deadline is max(that, the current
// backoff). Setting that argument to 100 ms to retry sooner also cut every handshake off
// at 100 ms, so under load (many clients connecting at once to a busy server) attempts
// failed with "tcp handshaker shutdown". gRPC's own default is 20 s.
inline constexpr int kConnectTimeoutMs = 20000;

// A channel to a server that may still be starting: a refused connect is
// retried after 100 ms, growing to at most 500 ms, instead of gRPC's default backoff (1 s,
// growing past 2.5 s), so a caller that polls for readiness sees the server within a
// fraction of a second of it listening; an attempt in progress gets kConnectTimeoutMs.
// `credentials` null: plaintext. `target_name`: the name the server's TLS certificate
// must carry instead of the address's host (empty: the host).
inline std::shared_ptr<grpc::Channel> ChannelToStartingServer(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
    const std::string& target_name = "") {
  grpc::ChannelArguments args;
  if (!target_name.empty()) args.SetSslTargetNameOverride(target_name);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMs);
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(address, credentials, args);
}

}  // namespace tessera

#endif  // TESSERA_COMMON_GRPC_CHANNEL_H_
