#ifndef TESSERA_BENCHMARKS_SERVING_GRPC_CLIENT_H_
#define TESSERA_BENCHMARKS_SERVING_GRPC_CLIENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "benchmarks/serving/stats.h"
#include "benchmarks/serving/workload.h"
#include "grpcpp/grpcpp.h"
#include "tessera/v1/generation.grpc.pb.h"

namespace tessera::bench {

// Polls grpc.health.v1 until the server reports SERVING, or fails after `timeout`.
absl::Status WaitUntilServing(const std::shared_ptr<grpc::Channel>& channel,
                              std::chrono::seconds timeout);

absl::StatusOr<v1::ModelInfo> FetchModelInfo(v1::Generation::Stub& stub);

struct StreamOptions {
  double timeout_s = 600;   // gRPC deadline of each request.
  double temperature = 0;   // Greedy by default: the output length is what is measured.
  std::string request_id;
  std::string json_schema;  // Non-empty: every request's output is held to this schema.
};

// Sends `spec` with GenerateStream (ignore_eos, max_new_tokens = output_len) and times
// every message that carries tokens. `now` gives seconds since the run's start.
RequestRecord StreamOne(v1::Generation::Stub& stub, const RequestSpec& spec,
                        const StreamOptions& options, const std::function<double()>& now);

// "OK", "UNAVAILABLE", ... for a gRPC status code.
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_SERVING_GRPC_CLIENT_H_
