#ifndef TESSERA_COORDINATOR_API_GENERATE_ADMISSION_H_
#define TESSERA_COORDINATOR_API_GENERATE_ADMISSION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template/chat_template.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/api/request_validation.h"
#include "coordinator/engine/engine.h"
#include "grpcpp/grpcpp.h"
#include "tessera/v1/generation.pb.h"

namespace tessera {

// What every Generate/GenerateStream call (and every OpenAI HTTP generation) goes through before its reactor streams: the
// --max-concurrent-streams count, validation and tokenization, and Submit. Shared by the
// reactors, which outlive no Admission (the service owns it and outlives the server).
class Admission {
 public:
  // `chat_template` may be null (the model has none); it must outlive the Admission.
  // `protocol` ("grpc" or "http") labels the metrics of what comes through here.
  Admission(Engine* engine, const Tokenizer* tokenizer, ServingLimits limits,
            const ChatTemplate* chat_template = nullptr, std::string protocol = "grpc")
      : engine_(engine),
        tokenizer_(tokenizer),
        limits_(limits),
        chat_template_(chat_template),
        protocol_(std::move(protocol)) {}

  // Counts one call; false (and nothing counted) when --max-concurrent-streams are open.
  bool AcquireStream();
  void ReleaseStream() { num_active_streams_.fetch_sub(1); }
  grpc::Status TooManyStreams() const;

  // Validates `request` and submits it with `stream` as its event queue. Returns the
  // engine's id for Cancel; `request_id` and `prompt` are what the response reports.
  absl::StatusOr<uint64_t> Start(const v1::GenerateRequest& request,
                                 std::chrono::steady_clock::time_point deadline,
                                 std::shared_ptr<RequestStream> stream, std::string* request_id,
                                 std::vector<int32_t>* prompt);

  Engine* engine() const { return engine_; }
  const ServingLimits& limits() const { return limits_; }

 private:
  Engine* const engine_;
  const Tokenizer* const tokenizer_;
  const ServingLimits limits_;
  const ChatTemplate* const chat_template_;
  const std::string protocol_;
  std::atomic<uint64_t> next_request_number_{1};
  std::atomic<int> num_active_streams_{0};
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_GENERATE_ADMISSION_H_
