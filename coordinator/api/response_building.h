#ifndef TESSERA_COORDINATOR_API_RESPONSE_BUILDING_H_
#define TESSERA_COORDINATOR_API_RESPONSE_BUILDING_H_

#include <chrono>

#include "coordinator/engine/request_stream.h"
#include "grpcpp/grpcpp.h"
#include "tessera/v1/generation.pb.h"

namespace tessera {

// Engine events to protobuf responses and gRPC statuses (the API's only translation).
void AddLogprobs(const RequestEvent& e, google::protobuf::RepeatedPtrField<v1::TokenLogprob>* out);
void SetSummary(const RequestEvent& e, v1::GenerateResponse* r);
void SetSummary(const RequestEvent& e, v1::GenerateStreamResponse* r);

// The status a finished event that is not a result (kError, kCancelled) ends the call with.
grpc::Status FailureStatus(const RequestEvent& e);

// The call's deadline on the engine's clock; time_point::max() for "none".
std::chrono::steady_clock::time_point SteadyDeadline(const grpc::ServerContextBase& context);

// What ends a call the client gave up on: DEADLINE_EXCEEDED once its deadline passed,
// CANCELLED otherwise.
grpc::Status ClientEndedStatus(const grpc::ServerContextBase& context);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_RESPONSE_BUILDING_H_
