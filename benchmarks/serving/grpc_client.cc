#include "benchmarks/serving/grpc_client.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace tessera::bench {

std::string StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return absl::StrCat("CODE_", static_cast<int>(code));
  }
}

absl::Status WaitUntilServing(const std::shared_ptr<grpc::Channel>& channel,
                              std::chrono::seconds timeout) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last = "no answer";
  do {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status s = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response);
    if (s.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      return absl::OkStatus();
    }
    last = s.ok() ? grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status())
                  : absl::StrCat(StatusCodeName(s.error_code()), ": ", s.error_message());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (std::chrono::steady_clock::now() < deadline);
  return absl::UnavailableError(absl::StrCat("the server was not SERVING after ", timeout.count(),
                                             " s (last health answer: ", last, ")"));
}

absl::StatusOr<v1::ModelInfo> FetchModelInfo(v1::Generation::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ModelInfo info;
  const grpc::Status s = stub.GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("GetModelInfo failed: ", StatusCodeName(s.error_code()),
                                               ": ", s.error_message()));
  }
  return info;
}

RequestRecord StreamOne(v1::Generation::Stub& stub, const RequestSpec& spec,
                        const StreamOptions& options, const std::function<double()>& now) {
  v1::GenerateRequest request;
  request.set_request_id(options.request_id);
  if (spec.is_text) {
    request.set_text(spec.prompt_text);
  } else {
    request.mutable_token_ids()->mutable_ids()->Add(spec.prompt_ids.begin(), spec.prompt_ids.end());
  }
  request.mutable_sampling()->set_temperature(static_cast<float>(options.temperature));
  request.mutable_stopping()->set_max_new_tokens(static_cast<uint32_t>(spec.output_len));
  request.mutable_stopping()->set_ignore_eos(true);
  if (!options.json_schema.empty()) request.mutable_constraint()->set_json_schema(options.json_schema);

  RequestRecord r;
  r.expected_output_tokens = spec.output_len;
  r.prompt_tokens = static_cast<int64_t>(spec.prompt_ids.size());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::microseconds(static_cast<int64_t>(options.timeout_s * 1e6)));
  r.send_time = now();
  std::unique_ptr<grpc::ClientReader<v1::GenerateStreamResponse>> reader =
      stub.GenerateStream(&ctx, request);
  v1::GenerateStreamResponse message;
  while (reader->Read(&message)) {
    const double t = now();
    if (message.token_ids_size() > 0) {
      if (r.first_token_time < 0) r.first_token_time = t;
      r.chunk_times.push_back(t);
      r.chunk_tokens.push_back(message.token_ids_size());
      r.output_tokens += message.token_ids_size();
    }
    if (message.has_usage() && message.usage().prompt_tokens() > 0) {
      r.prompt_tokens = message.usage().prompt_tokens();
    }
  }
  const grpc::Status status = reader->Finish();
  r.end_time = now();
  r.status_code = StatusCodeName(status.error_code());
  r.error_message = status.error_message();
  r.ok = status.ok() && r.first_token_time >= 0;
  if (status.ok() && !r.ok) {
    r.status_code = "NO_TOKENS";
    r.error_message = "the stream ended without a token";
  }
  return r;
}

}  // namespace tessera::bench
