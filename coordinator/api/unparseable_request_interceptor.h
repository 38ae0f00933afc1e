#ifndef TESSERA_COORDINATOR_API_UNPARSEABLE_REQUEST_INTERCEPTOR_H_
#define TESSERA_COORDINATOR_API_UNPARSEABLE_REQUEST_INTERCEPTOR_H_

#include <memory>

#include "grpcpp/support/server_interceptor.h"

namespace tessera {

// With gRPC's synchronous server, a request that protobuf cannot parse (truncated bytes,
// a wrong wire type, or invalid UTF-8 in a proto3 `string` field, which protobuf refuses
// at parse time) never reaches the handler: gRPC answers INTERNAL with an empty message
// (1.51: the message's InitializationErrorString, empty for proto3). The handlers
// themselves never end a call that way, so for tessera.v1.Generation methods this
// interceptor turns exactly that status into INVALID_ARGUMENT with a message naming the
// method and the likely causes, and logs it at most once per 10 s (with a count of the
// lines left out), so a flood of bad requests cannot flood the log.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> UnparseableRequestInterceptorFactory();

// Routes protobuf's own log lines (e.g. "String field ... contains invalid UTF-8 data
// when parsing a protocol buffer", one per bad request) through Tessera's logging, at
// most one per 10 s with a count of those left out. Call once at startup.
void RateLimitProtobufLogging();

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_UNPARSEABLE_REQUEST_INTERCEPTOR_H_
