#ifndef TESSERA_COORDINATOR_API_GENERATION_SERVICE_H_
#define TESSERA_COORDINATOR_API_GENERATION_SERVICE_H_

#include <functional>
#include <string>

#include "common/auth/api_keys.h"
#include "common/model_config.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/api/generate_admission.h"
#include "coordinator/api/request_validation.h"
#include "coordinator/api/tokenize_call.h"
#include "coordinator/engine/engine.h"
#include "tessera/v1/generation.grpc.pb.h"

namespace tessera {

struct ModelDescription {
  std::string name;
  std::string dtype;
  int tp = 1;
  int replicas = 1;
  int block_size = 16;
  std::string quantization = "none";
  std::string kv_cache_dtype = "fp32";
  uint64_t kv_cache_bytes_per_token = 0;
  uint64_t total_parameters = 0;
  uint64_t active_parameters = 0;
  int num_experts = 0;
  int experts_per_token = 0;
  bool expert_parallel = false;
};

// The public tessera.v1.Generation service on gRPC's callback API: a call holds no thread
// while it waits for the engine or for its client, so thousands of streams need only
// gRPC's fixed pool. Validation and tokenization happen here; the engine does the rest.
// absl statuses become gRPC statuses only at this edge.
// Tokenize is a raw method (tokenize_call.h says why).
class GenerationServiceImpl final
    : public v1::Generation::WithRawCallbackMethod_Tokenize<v1::Generation::CallbackService> {
 public:
  // `chat_template` renders `messages` input; null when the model has none.
  GenerationServiceImpl(Engine* engine, const Tokenizer* tokenizer, ServingLimits limits,
                        ModelDescription model, const ChatTemplate* chat_template = nullptr);

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context, const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override;
  grpc::ServerWriteReactor<v1::GenerateStreamResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  // Both answer at once on gRPC's thread: Tokenize's work is bounded by --max-input-bytes
  // and, over all calls, by --max-inflight-input-bytes.
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request, v1::ModelInfo* response) override;

  // Where GetModelInfo's pending_workers comes from (the cluster manager, which is built
  // after the service's dependencies); set before serving.
  void set_pending_workers(std::function<int()> count) { pending_workers_ = std::move(count); }
  // With keys, every call must carry `authorization: Bearer <key>`; null: the API is open.
  // Set before serving; outlives the service.
  void set_api_keys(const auth::ApiKeyStore* keys) { api_keys_ = keys; }

 private:
  void DoGetModelInfo(v1::ModelInfo* info);
  // OK, or UNAUTHENTICATED (counted and logged, without the key) when keys are required.
  grpc::Status Authenticate(grpc::CallbackServerContext* context, absl::string_view method) const;

  Engine* engine_;
  const Tokenizer* tokenizer_;
  const ServingLimits limits_;
  const ModelDescription model_;
  Admission admission_;
  TokenizeCall tokenize_;
  std::function<int()> pending_workers_;
  const auth::ApiKeyStore* api_keys_ = nullptr;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_GENERATION_SERVICE_H_
