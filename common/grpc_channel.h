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

// The connections between the coordinator and its workers (registration, heartbeats,
// group calls) ping after kClusterKeepaliveTimeMs without traffic and give up on an
// unanswered ping after kClusterKeepaliveTimeoutMs; gRPC sets TCP_USER_TIMEOUT from the
// same arguments, so data left unacknowledged that long also closes the connection. A
// peer that vanished without a word (a link down, a partition) would otherwise keep the
// connection open through TCP's retransmission backoff, which grows to tens of seconds,
// with later calls queued behind it: they reached the coordinator all at once long after
// the link came back, as registrations their worker had given up on, and the groups
// formed from them waited out their rendezvous (tests/netfault: 28.7 s to serve again
// after a 30 s outage; 2.2 s with this).
//
// The timeout is longer than the coordinator's session timeout (5 s of heartbeat
// silence), so the heartbeats decide whether a silent worker is gone: a link that is
// down for 3 s rides it out on TCP's retransmissions instead of failing its replica (with
// 3 s here it failed the replica's step with "Connection timed out").
inline constexpr int kClusterKeepaliveTimeMs = 2000;
inline constexpr int kClusterKeepaliveTimeoutMs = 8000;
// One connection attempt of those channels: long enough for a TLS handshake on a loaded
// host, short enough that an attempt whose SYNs went into a dead link gives way to a
// fresh one soon after the link returns (SYN retries back off to 8 s and more).
inline constexpr int kClusterConnectTimeoutMs = 5000;

namespace grpc_channel_internal {

inline grpc::ChannelArguments StartingServerArgs(const std::string& target_name, int connect_timeout_ms) {
  grpc::ChannelArguments args;
  if (!target_name.empty()) args.SetSslTargetNameOverride(target_name);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, connect_timeout_ms);
  return args;
}

}  // namespace grpc_channel_internal

// Adds the cluster keepalive above to a client channel's arguments.
inline void SetClusterKeepalive(grpc::ChannelArguments* args) {
  args->SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kClusterKeepaliveTimeMs);
  args->SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kClusterKeepaliveTimeoutMs);
  args->SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args->SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

// Lets a cluster server take those pings: by default gRPC answers a client that pings
// more often than every 5 minutes with no call open by closing its connection.
inline void AllowClusterKeepalive(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, kClusterKeepaliveTimeMs / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
}

// A channel to a server that may still be starting: a refused connect is
// retried after 100 ms, growing to at most 500 ms, instead of gRPC's default backoff (1 s,
// growing past 2.5 s), so a caller that polls for readiness sees the server within a
// fraction of a second of it listening; an attempt in progress gets kConnectTimeoutMs.
// `credentials` null: plaintext. `target_name`: the name the server's TLS certificate
// must carry instead of the address's host (empty: the host).
inline std::shared_ptr<grpc::Channel> ChannelToStartingServer(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
    const std::string& target_name = "") {
  grpc::ChannelArguments args = grpc_channel_internal::StartingServerArgs(target_name, kConnectTimeoutMs);
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(address, credentials, args);
}

// The same for a worker's session with its coordinator, with the cluster keepalive and
// connection attempts of kClusterConnectTimeoutMs.
inline std::shared_ptr<grpc::Channel> ClusterChannel(const std::string& address,
                                                     std::shared_ptr<grpc::ChannelCredentials> credentials,
                                                     const std::string& target_name) {
  grpc::ChannelArguments args = grpc_channel_internal::StartingServerArgs(target_name, kClusterConnectTimeoutMs);
  SetClusterKeepalive(&args);
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(address, credentials, args);
}

}  // namespace tessera

#endif  // TESSERA_COMMON_GRPC_CHANNEL_H_
