#ifndef TESSERA_COMMON_GRPC_CHANNEL_H_
#define TESSERA_COMMON_GRPC_CHANNEL_H_

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace tessera {

// A plaintext channel to a server that may still be starting: connects are retried every
// 100-500 ms instead of gRPC's default backoff (1 s, growing past 2.5 s), so a caller that
// polls for readiness sees the server within a fraction of a second of it listening.
inline std::shared_ptr<grpc::Channel> ChannelToStartingServer(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

}  // namespace tessera

#endif  // TESSERA_COMMON_GRPC_CHANNEL_H_
