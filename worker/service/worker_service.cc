#include "worker/service/worker_service.h"

#include <chrono>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_quantization.h"
#include "common/grpc_status.h"
#include "common/model_config.h"
#include "common/status_macros.h"
#include "worker/backend_factory.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/host_staged_communicator.h"
#include "worker/comm/shm_communicator.h"
#include "worker/service/kv_memory_plan.h"
#include "worker/speculative/draft_model_proposer.h"
#include "worker/speculative/ngram_proposer.h"
#if defined(TESSERA_HAVE_NCCL)
#include "common/rendezvous/kv_store_client.h"
#include "worker/comm/nccl_communicator.h"
#endif

namespace tessera {
namespace {

// Where and how a rank joins its group, from the coordinator's ConfigureRequest.
struct Rendezvous {
  std::string store_host;
  int store_port = 0;
  std::chrono::milliseconds timeout{30000};
};

absl::StatusOr<Rendezvous> RendezvousOf(const v1::ConfigureRequest& r) {
  Rendezvous rv;
  const std::string& addr = r.rendezvous_address();
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(addr.substr(colon + 1), &rv.store_port)) {
    return absl::InvalidArgumentError(absl::StrCat("bad rendezvous address \"", addr, "\""));
  }
  rv.store_host = addr.substr(0, colon);
  if (r.collective_timeout_ms() > 0) rv.timeout = std::chrono::milliseconds(r.collective_timeout_ms());
  return rv;
}

#if defined(TESSERA_HAVE_NCCL)
// Rank 0 creates the NCCL unique id and publishes it in the coordinator's key-value store
// under the group's rendezvous prefix; the other ranks wait for it there. An id the
// coordinator put in the request wins.
absl::StatusOr<std::string> NcclUniqueId(const v1::ConfigureRequest& r, std::chrono::milliseconds timeout,
                                         const KvStoreSecurity& security) {
  if (!r.nccl_unique_id().empty()) return r.nccl_unique_id();
  ASSIGN_OR_RETURN(const Rendezvous rv, RendezvousOf(r));
  const absl::Duration wait = absl::FromChrono(timeout);
  ASSIGN_OR_RETURN(std::unique_ptr<KvStoreClient> store,
                   KvStoreClient::Connect(rv.store_host, rv.store_port, wait, security));
  const std::string key = absl::StrCat(r.rendezvous_prefix(), "/nccl_unique_id");
  if (r.rank() == 0) {
    ASSIGN_OR_RETURN(std::string id, GenerateNcclUniqueId());
    RETURN_IF_ERROR(store->Set(key, id));
    return id;
  }
  RETURN_IF_ERROR(store->Wait({key}, wait));
  return store->Get(key);
}
#endif

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(const v1::ConfigureRequest& r,
                                                                   const CudaPlacement& cuda,
                                                                   const KvStoreSecurity& security) {
#if defined(TESSERA_HAVE_NCCL)
  const std::chrono::milliseconds timeout(
      r.collective_timeout_ms() > 0 ? r.collective_timeout_ms() : 30000);
  absl::StatusOr<std::string> id = NcclUniqueId(r, timeout, security);
  if (!id.ok()) {
    return absl::Status(id.status().code(),
                        absl::StrCat("NCCL unique id rendezvous (rank ", r.rank(), ", store ",
                                     r.rendezvous_address(), "): ", id.status().message()));
  }
  NcclCommunicatorOptions o;
  o.unique_id = *std::move(id);
  o.rank = static_cast<int>(r.rank());
  o.world_size = static_cast<int>(r.world_size());
  o.device = cuda.device;
  o.stream = cuda.stream;  // Collectives order against the backend's kernels.
  // The forward pass reads results through that stream and calls Wait() first, so the
  // host need not block on each layer's all-reduce.
  o.queue_without_waiting = true;
  o.timeout = timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm, NcclCommunicator::Create(o));
  return std::unique_ptr<Communicator>(std::move(comm));
#else
  (void)security;
  return absl::UnimplementedError(
      "communicator \"nccl\" is not available in this build (NCCL was not found at configure "
      "time)");
#endif
}

// Gloo or shm, on host memory.
absl::StatusOr<std::unique_ptr<Communicator>> MakeHostCommunicator(const v1::ConfigureRequest& r,
                                                                    const std::string& host,
                                                                    const KvStoreSecurity& security) {
  if (r.communicator() == "gloo") {
    ASSIGN_OR_RETURN(const Rendezvous rv, RendezvousOf(r));
    GlooCommunicatorOptions o;
    o.store_host = rv.store_host;
    o.store_port = rv.store_port;
    o.store_security = security;
    o.prefix = r.rendezvous_prefix();
    o.rank = static_cast<int>(r.rank());
    o.world_size = static_cast<int>(r.world_size());
    o.bind_host = r.advertise_host().empty() ? host : r.advertise_host();
    o.timeout = rv.timeout;
    ASSIGN_OR_RETURN(std::unique_ptr<GlooCommunicator> comm, GlooCommunicator::Create(o));
    return std::unique_ptr<Communicator>(std::move(comm));
  }
  if (r.communicator() == "shm") {
    ASSIGN_OR_RETURN(const Rendezvous rv, RendezvousOf(r));
    ShmCommunicatorOptions o;
    o.store_host = rv.store_host;
    o.store_port = rv.store_port;
    o.store_security = security;
    o.prefix = r.rendezvous_prefix();
    o.rank = static_cast<int>(r.rank());
    o.world_size = static_cast<int>(r.world_size());
    o.timeout = rv.timeout;
    ASSIGN_OR_RETURN(std::unique_ptr<ShmCommunicator> comm, ShmCommunicator::Create(o));
    return std::unique_ptr<Communicator>(std::move(comm));
  }
  return absl::UnimplementedError(
      absl::StrCat("communicator \"", r.communicator(), "\" is not available in this build"));
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(const v1::ConfigureRequest& r,
                                                                const std::string& host,
                                                                kernels::Backend& backend,
                                                                const KvStoreSecurity& security) {
  if (r.world_size() <= 1) return std::unique_ptr<Communicator>(new SingleRankCommunicator());
  const std::optional<CudaPlacement> cuda = CudaPlacementOf(backend);
  if (r.communicator() == "nccl") {
    if (!cuda.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("communicator \"nccl\" needs a CUDA worker; this one computes on the ",
                       std::string(backend.name()), " backend"));
    }
    return MakeNcclCommunicator(r, *cuda, security);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, MakeHostCommunicator(r, host, security));
  if (!cuda.has_value()) return comm;
  // Gloo and shm move host memory, so a CUDA worker's buffers go through host staging:
  // slower than NCCL, but it works where NCCL refuses, for ranks that share one GPU.
  return std::unique_ptr<Communicator>(new HostStagedCommunicator(std::move(comm), &backend));
}

}  // namespace

WorkerServiceImpl::WorkerServiceImpl(kernels::Backend* backend, WorkerServiceOptions options)
    : backend_(backend),
      options_(std::move(options)),
      transfer_(backend, options_.peer_credentials, options_.peer_server_name) {}

grpc::Status WorkerServiceImpl::Configure(grpc::ServerContext*, const v1::ConfigureRequest* request,
                                          v1::ConfigureResponse*) {
  absl::MutexLock lock(&mu_);
  // gRPC may run each call on a different thread; CUDA's current device is per thread.
  if (absl::Status s = BindBackendToThread(*backend_); !s.ok()) return ToGrpcStatus(s);
  // A new group formation replaces everything from the previous one.
  in_group_ = false;
  transfer_.Detach();
  executor_.reset();
  group_ = request->rendezvous_prefix();
  model_.reset();
  draft_model_.reset();
  {
    absl::MutexLock abort_lock(&abort_mu_);
    abortable_ = nullptr;
  }
  comm_.reset();
  auto comm = MakeCommunicator(*request, options_.advertise_host, *backend_, options_.store_security);
  if (!comm.ok()) return ToGrpcStatus(comm.status());
  comm_ = std::move(*comm);
  timed_comm_ = nullptr;
  if (options_.metrics != nullptr) {
    auto timed = std::make_unique<TimedCommunicator>(std::move(comm_), options_.metrics);
    timed_comm_ = timed.get();
    comm_ = std::move(timed);
    options_.metrics->GroupJoined(static_cast<int>(request->replica()), static_cast<int>(request->rank()),
                                  static_cast<int>(request->world_size()), std::string(comm_->backend_name()));
  }
  {
    absl::MutexLock abort_lock(&abort_mu_);
    abortable_ = comm_.get();
  }
  std::fprintf(stderr, "tessera-worker: joined replica %u as rank %u of %u (%s)\n",
               request->replica(), request->rank(), request->world_size(),
               std::string(comm_->backend_name()).c_str());
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::LoadShard(grpc::ServerContext*, const v1::LoadShardRequest* request,
                                          grpc::ServerWriter<v1::LoadShardProgress>* writer) {
  absl::MutexLock lock(&mu_);
  // gRPC may run each call on a different thread; CUDA's current device is per thread.
  if (absl::Status s = BindBackendToThread(*backend_); !s.ok()) return ToGrpcStatus(s);
  if (comm_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "LoadShard before Configure");
  }
  in_group_ = false;
  executor_.reset();
  model_.reset();
  draft_model_.reset();
  speculative_method_.clear();
  const std::string& method = request->speculative_method();
  if (!method.empty() && method != "ngram" && method != "draft") {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("speculative_method must be empty, ngram or draft, got ", method));
  }
  if (method == "draft" && request->draft_model_dir().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "speculative_method draft needs draft_model_dir");
  }
  ModelLoadOptions load_options;
  if (auto q = ParseWeightQuantization(request->quantization()); q.ok()) {
    load_options.quantization = *q;
  } else {
    return ToGrpcStatus(q.status());
  }
  if (auto d = ParseKvCacheDType(request->kv_cache_dtype()); d.ok()) {
    load_options.kv_cache_dtype = *d;
  } else {
    return ToGrpcStatus(d.status());
  }
  load_options.expert_parallel = request->expert_parallel();
  const auto load_start = std::chrono::steady_clock::now();
  auto model = LlamaModel::Load(request->model_dir(), backend_, comm_.get(),
                                [&](int done, int total, uint64_t bytes) {
                                  v1::LoadShardProgress p;
                                  p.set_tensors_done(done);
                                  p.set_tensors_total(total);
                                  p.set_bytes_loaded(bytes);
                                  writer->Write(p);
                                },
                                load_options);
  if (!model.ok()) return ToGrpcStatus(model.status());
  model_ = std::move(*model);
  if (method == "draft") {
    // The draft is sharded over the same ranks and quantized and cached like the target.
    // Expert parallelism applies to a draft only when it is a mixture of experts too.
    ModelLoadOptions draft_options = load_options;
    if (auto draft_config = ModelConfig::Load(request->draft_model_dir()); draft_config.ok()) {
      draft_options.expert_parallel = load_options.expert_parallel && draft_config->is_moe();
    }
    auto draft = LlamaModel::Load(request->draft_model_dir(), backend_, comm_.get(), nullptr, draft_options);
    if (!draft.ok()) {
      return ToGrpcStatus(absl::Status(draft.status().code(), absl::StrCat("draft model ", request->draft_model_dir(),
                                                                           ": ", draft.status().message())));
    }
    if ((*draft)->config().vocab_size != model_->config().vocab_size) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("the draft model's vocabulary (", (*draft)->config().vocab_size,
                                       " tokens) differs from the target's (", model_->config().vocab_size,
                                       "): it must use the same tokenizer"));
    }
    draft_model_ = std::move(*draft);
  }
  if (request->enforce_eager()) {
    model_->set_graphs_enabled(false);
    if (draft_model_ != nullptr) draft_model_->set_graphs_enabled(false);
  }
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  speculative_method_ = method;
  // Rank 0 samples, so it alone needs each token's bytes for grammar masks.
  vocabulary_.reset();
  if (request->token_bytes_size() > 0 && model_->layout().rank == 0) {
    const std::vector<int32_t> specials(request->special_token_ids().begin(),
                                        request->special_token_ids().end());
    vocabulary_ = structured::TokenVocabulary::Build(
        {request->token_bytes().begin(), request->token_bytes().end()}, specials);
  }
  num_speculative_tokens_ = static_cast<int>(request->num_speculative_tokens());
  prompt_lookup_min_ = static_cast<int>(request->prompt_lookup_min());
  prompt_lookup_max_ = static_cast<int>(request->prompt_lookup_max());
  const int block_size = request->block_size() > 0 ? static_cast<int>(request->block_size()) : 16;
  // A draft model keeps its KV in the same block ids as the target: a block costs both.
  const size_t per_block = model_->KvBytesPerBlock(block_size) +
                           (draft_model_ != nullptr ? draft_model_->KvBytesPerBlock(block_size) : 0);
  // The largest step the scheduler may plan: its activations stay out of the KV pool, and
  // (speculation) its drafts' logits, as InitCache's warm-up reserves them.
  const int max_seqs = std::max(1, static_cast<int>(request->max_num_seqs()));
  const int max_tokens = std::max(max_seqs, static_cast<int>(request->max_num_tokens()));
  const int max_logits = MaxLogitRows(max_seqs);
  const int blocks_per_seq =
      request->max_num_seqs() > 0 && request->max_blocks() > 0
          ? static_cast<int>((request->max_blocks() - 1) / request->max_num_seqs())
          : 0;
  size_t workspace =
      model_->ReservedWorkspaceBytes(max_seqs, max_tokens, max_logits, blocks_per_seq);
  if (draft_model_ != nullptr) {
    workspace +=
        draft_model_->ReservedWorkspaceBytes(max_seqs, max_tokens, max_logits, blocks_per_seq);
  }
  KvMemoryInputs memory;
  memory.device_total_bytes = backend_->TotalMemoryBytes();
  memory.device_free_bytes = backend_->FreeMemoryBytes();
  memory.weight_bytes =
      model_->weight_bytes() + (draft_model_ != nullptr ? draft_model_->weight_bytes() : 0);
  memory.bytes_per_block = per_block;
  memory.activation_reserve_bytes = ActivationReserveBytes(
      workspace, CudaPlacementOf(*backend_).has_value(), memory.device_total_bytes);
  memory.kv_memory_bytes = request->kv_memory_bytes();
  memory.gpu_memory_utilization = request->gpu_memory_utilization();
  memory.kv_memory_fraction = request->kv_memory_fraction();
  memory.blocks_per_sequence = static_cast<uint64_t>(blocks_per_seq);
  memory.max_blocks = request->max_blocks();
  const absl::StatusOr<uint64_t> num_blocks = PlanKvBlocks(memory);
  if (!num_blocks.ok()) return ToGrpcStatus(num_blocks.status());
  v1::LoadShardProgress last;
  last.set_done(true);
  last.set_num_blocks(static_cast<uint32_t>(*num_blocks));
  last.set_weight_bytes(model_->weight_bytes());
  last.set_kv_bytes_per_block(per_block);
  last.set_load_seconds(load_seconds);
  last.set_device_total_bytes(memory.device_total_bytes);
  last.set_device_free_bytes(memory.device_free_bytes);
  last.set_activation_reserve_bytes(memory.activation_reserve_bytes);
  last.set_model_name(std::filesystem::path(request->model_dir()).filename().string());
  last.set_dtype(DTypeName(model_->config().torch_dtype));
  last.set_kv_cache_dtype(std::string(KvCacheDTypeName(model_->kv_cache_dtype())));
  // A pre-quantized checkpoint reports its own format ("fp8", "gptq", ...): the load
  // above refused --quantization on top of it.
  auto stored = LoadCheckpointQuantizationName(request->model_dir());
  last.set_quantization(stored.ok() && !stored->empty()
                            ? *stored
                            : std::string(WeightQuantizationName(load_options.quantization)));
  writer->Write(last);
  if (options_.metrics != nullptr) options_.metrics->ShardLoaded(last.model_name(), model_->weight_bytes());
  constexpr double kGiB = 1 << 30;
  std::fprintf(stderr,
               "tessera-worker: loaded %s in %.1f s: weights %.2f GiB, KV pool %.2f GiB (%llu "
               "blocks), activation reserve %.2f GiB; device %.2f GiB, %.2f GiB free after loading\n",
               request->model_dir().c_str(), load_seconds, memory.weight_bytes / kGiB,
               static_cast<double>(*num_blocks * per_block) / kGiB,
               static_cast<unsigned long long>(*num_blocks), memory.activation_reserve_bytes / kGiB,
               memory.device_total_bytes / kGiB, memory.device_free_bytes / kGiB);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::InitCache(grpc::ServerContext*, const v1::InitCacheRequest* request,
                                          v1::InitCacheResponse* response) {
  absl::MutexLock lock(&mu_);
  // gRPC may run each call on a different thread; CUDA's current device is per thread.
  if (absl::Status s = BindBackendToThread(*backend_); !s.ok()) return ToGrpcStatus(s);
  if (model_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "InitCache before LoadShard");
  }
  transfer_.Detach();
  executor_.reset();
  auto cache = model_->CreateKvCache(static_cast<int>(request->num_blocks()),
                                     static_cast<int>(request->block_size()));
  if (!cache.ok()) return ToGrpcStatus(cache.status());
  uint64_t cache_bytes = (*cache)->bytes();
  std::unique_ptr<Proposer> proposer;
  if (speculative_method_ == "ngram") {
    proposer = std::make_unique<NgramProposer>(prompt_lookup_min_, prompt_lookup_max_);
  } else if (speculative_method_ == "draft") {
    auto draft_cache = draft_model_->CreateKvCache(static_cast<int>(request->num_blocks()),
                                                   static_cast<int>(request->block_size()));
    if (!draft_cache.ok()) return ToGrpcStatus(draft_cache.status());
    cache_bytes += (*draft_cache)->bytes();
    proposer = std::make_unique<DraftModelProposer>(draft_model_.get(), std::move(*draft_cache));
  }
  response->set_kv_cache_bytes(cache_bytes);
  if (options_.metrics != nullptr) options_.metrics->CacheAllocated(cache_bytes);
  // Graph backends reserve the largest step and capture the decode graphs now, before
  // traffic.
  if (request->max_num_seqs() > 0 && request->max_num_tokens() > 0) {
    const int max_seqs = static_cast<int>(request->max_num_seqs());
    auto warm = model_->WarmUp(cache->get(), max_seqs, static_cast<int>(request->max_num_tokens()),
                               MaxLogitRows(max_seqs));
    if (!warm.ok()) {
      return ToGrpcStatus(absl::Status(warm.status().code(),
                                       absl::StrCat("warm-up: ", warm.status().message())));
    }
    response->set_workspace_bytes(warm->workspace_bytes);
    response->set_graph_bytes(warm->graph_bytes);
    response->set_graphs_captured(warm->graphs_captured);
    response->set_warmup_seconds(warm->seconds);
    if (warm->graphs_captured > 0) {
      std::fprintf(stderr,
                   "tessera-worker: KV cache %.2f GiB; warm-up %.1f s: workspace %.2f GiB, "
                   "%d graphs (%.2f GiB)\n",
                   cache_bytes / 1073741824.0, warm->seconds,
                   warm->workspace_bytes / 1073741824.0, warm->graphs_captured,
                   warm->graph_bytes / 1073741824.0);
    }
  }
  last_forward_counts_ = model_->forward_counts();
  std::unique_ptr<HostKvTier> host_tier;
  if (request->num_host_blocks() > 0) {
    auto tier = HostKvTier::Create(backend_, **cache, static_cast<int>(request->num_host_blocks()));
    if (!tier.ok()) return ToGrpcStatus(tier.status());
    host_tier = std::move(*tier);
    response->set_host_cache_bytes(host_tier->bytes());
    std::fprintf(stderr, "tessera-worker: host KV tier %.2f GiB (%d blocks)\n", host_tier->bytes() / 1073741824.0,
                 host_tier->num_slots());
  }
  executor_ = std::make_unique<StepExecutor>(model_.get(), std::move(*cache), std::move(proposer),
                                             vocabulary_);
  executor_->set_host_tier(std::move(host_tier));
  transfer_.Attach(&executor_->mutable_cache(), group_);
  in_group_ = true;
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::ExecuteStep(grpc::ServerContext*, const v1::StepRequest* request,
                                            v1::StepResponse* response) {
  absl::MutexLock lock(&mu_);
  // gRPC may run each call on a different thread; CUDA's current device is per thread.
  if (absl::Status s = BindBackendToThread(*backend_); !s.ok()) return ToGrpcStatus(s);
  if (executor_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "ExecuteStep before InitCache");
  }
  if (comm_->aborted()) {
    in_group_ = false;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "this worker's group communicator failed earlier; the group must re-form");
  }
  const auto start = std::chrono::steady_clock::now();
  if (timed_comm_ != nullptr) timed_comm_->TakeCollectiveSeconds();
  absl::Status s = executor_->Execute(*request, response);
  if (timed_comm_ != nullptr) response->set_collective_seconds(timed_comm_->TakeCollectiveSeconds());
  if (options_.metrics != nullptr) {
    options_.metrics->StepFinished(
        ClassifyStep(*request),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
        response->forward_seconds(), s.ok());
    if (response->grammar_rows() > 0) {
      options_.metrics->GrammarWork(response->grammar_seconds(),
                                    static_cast<int>(response->grammar_rows()));
    }
    ExportForwardCounts();
  }
  if (!s.ok() && comm_->aborted()) {
    in_group_ = false;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, absl::StrCat("collective failed: ", s.message()));
  }
  return ToGrpcStatus(s);
}

grpc::Status WorkerServiceImpl::PushKvBlocks(grpc::ServerContext*, const v1::PushKvBlocksRequest* request,
                                             v1::PushKvBlocksResponse* response) {
  auto pushed = transfer_.Push(*request);
  if (!pushed.ok()) return ToGrpcStatus(pushed.status());
  *response = std::move(*pushed);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::WriteKvBlocks(grpc::ServerContext*, grpc::ServerReader<v1::KvBlocksChunk>* reader,
                                              v1::WriteKvBlocksResponse* response) {
  auto written = transfer_.Receive(reader);
  if (!written.ok()) return ToGrpcStatus(written.status());
  response->set_num_blocks(static_cast<uint32_t>(*written));
  return grpc::Status::OK;
}

void WorkerServiceImpl::ExportForwardCounts() {
  const ForwardCounts& now = model_->forward_counts();
  ForwardCounts& last = last_forward_counts_;
  for (int k = 0; k < 3; ++k) {
    const char* kind = ForwardCounts::kKinds[k];
    options_.metrics->ForwardPasses(kind, "replayed", now.replayed[k] - last.replayed[k]);
    options_.metrics->ForwardPasses(kind, "captured", now.captured[k] - last.captured[k]);
    options_.metrics->ForwardPasses(kind, "eager", now.eager[k] - last.eager[k]);
  }
  last = now;
}

void WorkerServiceImpl::Leave(const std::string& reason) {
  in_group_ = false;
  {
    // A step in progress may wait in a collective for a dead peer: end it now.
    absl::MutexLock abort_lock(&abort_mu_);
    if (abortable_ != nullptr) abortable_->Abort();
  }
  absl::MutexLock lock(&mu_);
  if (comm_ == nullptr && model_ == nullptr) return;
  if (absl::Status s = BindBackendToThread(*backend_); !s.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", std::string(s.message()).c_str());
  }
  // Weights are reloaded when the group re-forms: the coordinator may place this worker
  // at another rank or replica, and loading is a small part of recovery (see
  // docs/architecture.md, "Group formation").
  transfer_.Detach();
  executor_.reset();
  model_.reset();
  draft_model_.reset();
  {
    absl::MutexLock abort_lock(&abort_mu_);
    abortable_ = nullptr;
  }
  comm_.reset();
  timed_comm_ = nullptr;
  std::fprintf(stderr, "tessera-worker: left its group: %s\n", reason.c_str());
}

}  // namespace tessera
