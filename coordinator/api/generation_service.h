#ifndef TESSERA_COORDINATOR_API_GENERATION_SERVICE_H_
#define TESSERA_COORDINATOR_API_GENERATION_SERVICE_H_

#include <string>

#include "common/model_config.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/api/request_validation.h"
#include "coordinator/engine/engine.h"
#include "tessera/v1/generation.grpc.pb.h"

namespace tessera {

struct ModelDescription {
  std::string name;
  std::string dtype;
  int tp = 1;
  int replicas = 1;
  int block_size = 16;
};

// The public tessera.v1.Generation service. Validation and tokenization happen here; the
// engine does the rest. absl statuses become gRPC statuses only at this edge.
class GenerationServiceImpl final : public v1::Generation::Service {
 public:
  GenerationServiceImpl(Engine* engine, const Tokenizer* tokenizer, ServingLimits limits,
                        ModelDescription model);

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        v1::GenerateResponse* response) override;
  grpc::Status GenerateStream(grpc::ServerContext* context, const v1::GenerateRequest* request,
                              grpc::ServerWriter<v1::GenerateStreamResponse>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::ModelInfo* response) override;

 private:
  // Validates and submits; on success `stream` receives the request's events.
  absl::StatusOr<uint64_t> Start(const v1::GenerateRequest& request,
                                 std::chrono::steady_clock::time_point deadline, int max_undelivered_tokens,
                                 std::string* request_id,
                                 std::vector<int32_t>* prompt, std::shared_ptr<RequestStream>* stream);

  // Counts one Generate/GenerateStream call against --max-concurrent-streams.
  class StreamSlot {
   public:
    explicit StreamSlot(GenerationServiceImpl* service);
    ~StreamSlot();
    bool ok() const { return ok_; }

   private:
    GenerationServiceImpl* service_;
    bool ok_ = false;
  };
  grpc::Status TooManyStreams();

  Engine* engine_;
  const Tokenizer* tokenizer_;
  const ServingLimits limits_;
  const ModelDescription model_;
  std::atomic<uint64_t> next_request_number_{1};
  std::atomic<int> num_active_streams_{0};
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_GENERATION_SERVICE_H_
