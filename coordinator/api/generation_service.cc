#include "coordinator/api/generation_service.h"

#include <utility>
#include <vector>

#include "common/grpc_status.h"
#include "common/logging.h"
#include "coordinator/api/generate_stream_reactor.h"
#include "coordinator/api/generate_unary_reactor.h"
#include "coordinator/engine/output_processor.h"
#include "coordinator/engine/replica_role.h"
#include "coordinator/metrics/engine_metrics.h"

namespace tessera {
namespace {

// A unary call answered before its handler returns.
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

// A stream refused before it started: its status is its only message.
class RefusedStream final : public grpc::ServerWriteReactor<v1::GenerateStreamResponse> {
 public:
  explicit RefusedStream(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::Status GenerationServiceImpl::Authenticate(grpc::CallbackServerContext* context,
                                                 absl::string_view method) const {
  if (api_keys_ == nullptr) return grpc::Status::OK;
  const auto& metadata = context->client_metadata();
  const auto header = metadata.find("authorization");
  const absl::string_view value =
      header == metadata.end() ? absl::string_view() : absl::string_view(header->second.data(), header->second.size());
  const absl::Status checked = api_keys_->Check(value);
  if (checked.ok()) return grpc::Status::OK;
  if (EngineMetrics* m = engine_->metrics(); m != nullptr) m->RequestRejected("unauthenticated", "grpc");
  Log(LogLevel::kWarning, "tessera-coordinator", "unauthenticated request refused",
      {{"method", std::string(method)}, {"peer", context->peer()}, {"reason", std::string(checked.message())}});
  return ToGrpcStatus(checked);
}

GenerationServiceImpl::GenerationServiceImpl(Engine* engine, const Tokenizer* tokenizer,
                                             ServingLimits limits, ModelDescription model,
                                             const ChatTemplate* chat_template)
    : engine_(engine),
      tokenizer_(tokenizer),
      limits_(limits),
      model_(std::move(model)),
      admission_(engine, tokenizer, limits, chat_template),
      tokenize_(tokenizer, &limits_) {}

grpc::ServerUnaryReactor* GenerationServiceImpl::Generate(grpc::CallbackServerContext* context,
                                                          const v1::GenerateRequest* request,
                                                          v1::GenerateResponse* response) {
  if (grpc::Status s = Authenticate(context, "Generate"); !s.ok()) return Answer(context, std::move(s));
  return new GenerateUnaryReactor(context, *request, response, &admission_);
}

grpc::ServerWriteReactor<v1::GenerateStreamResponse>* GenerationServiceImpl::GenerateStream(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  if (grpc::Status s = Authenticate(context, "GenerateStream"); !s.ok()) return new RefusedStream(std::move(s));
  return new GenerateStreamReactor(context, *request, &admission_);
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Tokenize(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  if (grpc::Status s = Authenticate(context, "Tokenize"); !s.ok()) return Answer(context, std::move(s));
  // Reading the request empties it: its bytes go before the tokenizer's memory comes.
  return Answer(context, tokenize_.Run(const_cast<grpc::ByteBuffer*>(request), response));
}

grpc::ServerUnaryReactor* GenerationServiceImpl::GetModelInfo(grpc::CallbackServerContext* context,
                                                              const v1::GetModelInfoRequest*,
                                                              v1::ModelInfo* info) {
  if (grpc::Status s = Authenticate(context, "GetModelInfo"); !s.ok()) return Answer(context, std::move(s));
  DoGetModelInfo(info);
  return Answer(context, grpc::Status::OK);
}

void GenerationServiceImpl::DoGetModelInfo(v1::ModelInfo* info) {
  info->set_model(model_.name);
  info->set_dtype(model_.dtype);
  info->set_tp(model_.tp);
  info->set_replicas(model_.replicas);
  info->set_max_context(limits_.max_context);
  info->set_block_size(model_.block_size);
  info->set_quantization(model_.quantization);
  info->set_kv_cache_dtype(model_.kv_cache_dtype);
  info->set_kv_cache_bytes_per_token(model_.kv_cache_bytes_per_token);
  info->set_total_parameters(model_.total_parameters);
  info->set_active_parameters(model_.active_parameters);
  info->set_num_experts(model_.num_experts);
  info->set_experts_per_token(model_.experts_per_token);
  info->set_expert_parallel(model_.expert_parallel);
  info->set_vocab_size(limits_.vocab_size);
  if (pending_workers_) info->set_pending_workers(static_cast<uint32_t>(pending_workers_()));
  uint64_t capacity = 0;
  uint32_t ready = 0;
  for (const ReplicaSnapshot& r : engine_->Snapshot()) {
    v1::ReplicaInfo* ri = info->add_replica_info();
    ri->set_replica(r.replica);
    ri->set_healthy(r.ready);
    ri->set_total_blocks(r.total_blocks);
    ri->set_free_blocks(r.free_blocks);
    ri->set_running(r.running);
    ri->set_waiting(r.waiting);
    ri->set_host_total_blocks(r.host_total_blocks);
    ri->set_host_used_blocks(r.host_used_blocks);
    ri->set_role(std::string(ReplicaRoleName(r.role)));
    v1::ReplicaMemory* memory = ri->mutable_memory();
    memory->set_load_seconds(r.startup.load_seconds);
    memory->set_warmup_seconds(r.startup.warmup_seconds);
    memory->set_device_total_bytes(r.startup.device_total_bytes);
    memory->set_weight_bytes(r.startup.weight_bytes);
    memory->set_kv_cache_bytes(r.startup.kv_cache_bytes);
    memory->set_workspace_bytes(r.startup.workspace_bytes);
    memory->set_graph_bytes(r.startup.graph_bytes);
    memory->set_graphs_captured(r.startup.graphs_captured);
    memory->set_host_cache_bytes(r.startup.host_cache_bytes);
    if (r.ready) {
      capacity += static_cast<uint64_t>(r.total_blocks) * model_.block_size;
      ++ready;
    }
  }
  info->set_kv_capacity_tokens(capacity);
  info->set_ready_replicas(ready);
}

}  // namespace tessera
