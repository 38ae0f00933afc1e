#include "worker/service/worker_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/shm_communicator.h"

namespace tessera {
namespace {

absl::StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(const v1::ConfigureRequest& r,
                                                                const std::string& host) {
  if (r.world_size() <= 1) return std::unique_ptr<Communicator>(new SingleRankCommunicator());
  if (r.communicator() == "gloo") {
    GlooCommunicatorOptions o;
    const std::string& addr = r.rendezvous_address();
    const size_t colon = addr.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad rendezvous address \"", addr, "\""));
    }
    o.store_host = addr.substr(0, colon);
    o.store_port = std::stoi(addr.substr(colon + 1));
    o.prefix = r.rendezvous_prefix();
    o.rank = static_cast<int>(r.rank());
    o.world_size = static_cast<int>(r.world_size());
    o.bind_host = r.advertise_host().empty() ? host : r.advertise_host();
    o.timeout = std::chrono::milliseconds(r.collective_timeout_ms() > 0 ? r.collective_timeout_ms() : 30000);
    auto comm = GlooCommunicator::Create(o);
    if (!comm.ok()) return comm.status();
    return std::unique_ptr<Communicator>(std::move(*comm));
  }
  if (r.communicator() == "shm") {
    ShmCommunicatorOptions o;
    const std::string& addr = r.rendezvous_address();
    const size_t colon = addr.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad rendezvous address \"", addr, "\""));
    }
    o.store_host = addr.substr(0, colon);
    o.store_port = std::stoi(addr.substr(colon + 1));
    o.prefix = r.rendezvous_prefix();
    o.rank = static_cast<int>(r.rank());
    o.world_size = static_cast<int>(r.world_size());
    o.timeout = std::chrono::milliseconds(r.collective_timeout_ms() > 0 ? r.collective_timeout_ms() : 30000);
    auto comm = ShmCommunicator::Create(o);
    if (!comm.ok()) return comm.status();
    return std::unique_ptr<Communicator>(std::move(*comm));
  }
  return absl::UnimplementedError(
      absl::StrCat("communicator \"", r.communicator(), "\" is not available in this build"));
}

}  // namespace

WorkerServiceImpl::WorkerServiceImpl(kernels::Backend* backend, WorkerServiceOptions options)
    : backend_(backend), options_(std::move(options)) {}

grpc::Status WorkerServiceImpl::Configure(grpc::ServerContext*, const v1::ConfigureRequest* request,
                                          v1::ConfigureResponse*) {
  absl::MutexLock lock(&mu_);
  // A new group formation replaces everything from the previous one.
  executor_.reset();
  model_.reset();
  comm_.reset();
  auto comm = MakeCommunicator(*request, options_.advertise_host);
  if (!comm.ok()) return ToGrpcStatus(comm.status());
  comm_ = std::move(*comm);
  std::fprintf(stderr, "tessera-worker: joined replica %u as rank %u of %u (%s)\n",
               request->replica(), request->rank(), request->world_size(),
               std::string(comm_->backend_name()).c_str());
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::LoadShard(grpc::ServerContext*, const v1::LoadShardRequest* request,
                                          grpc::ServerWriter<v1::LoadShardProgress>* writer) {
  absl::MutexLock lock(&mu_);
  if (comm_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "LoadShard before Configure");
  }
  executor_.reset();
  model_.reset();
  auto model = LlamaModel::Load(request->model_dir(), backend_, comm_.get(),
                                [&](int done, int total, uint64_t bytes) {
                                  v1::LoadShardProgress p;
                                  p.set_tensors_done(done);
                                  p.set_tensors_total(total);
                                  p.set_bytes_loaded(bytes);
                                  writer->Write(p);
                                });
  if (!model.ok()) return ToGrpcStatus(model.status());
  model_ = std::move(*model);
  const int block_size = request->block_size() > 0 ? static_cast<int>(request->block_size()) : 16;
  const size_t per_block = model_->KvBytesPerBlock(block_size);
  int64_t num_blocks;
  if (request->kv_memory_bytes() > 0) {
    num_blocks = static_cast<int64_t>(request->kv_memory_bytes() / per_block);
  } else {
    const double fraction = request->kv_memory_fraction() > 0 ? request->kv_memory_fraction() : 0.5;
    num_blocks = static_cast<int64_t>(backend_->FreeMemoryBytes() * fraction / per_block);
  }
  if (request->max_blocks() > 0) num_blocks = std::min<int64_t>(num_blocks, request->max_blocks());
  num_blocks = std::min<int64_t>(num_blocks, 1 << 20);
  v1::LoadShardProgress last;
  last.set_done(true);
  last.set_num_blocks(static_cast<uint32_t>(std::max<int64_t>(num_blocks, 0)));
  last.set_weight_bytes(model_->weight_bytes());
  last.set_kv_bytes_per_block(per_block);
  last.set_model_name(std::filesystem::path(request->model_dir()).filename().string());
  last.set_dtype(DTypeName(model_->config().torch_dtype));
  writer->Write(last);
  std::fprintf(stderr, "tessera-worker: loaded %s (%.1f MB of weights), room for %lld KV blocks\n",
               request->model_dir().c_str(), model_->weight_bytes() / 1e6,
               static_cast<long long>(num_blocks));
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::InitCache(grpc::ServerContext*, const v1::InitCacheRequest* request,
                                          v1::InitCacheResponse* response) {
  absl::MutexLock lock(&mu_);
  if (model_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "InitCache before LoadShard");
  }
  executor_.reset();
  auto cache = model_->CreateKvCache(static_cast<int>(request->num_blocks()),
                                     static_cast<int>(request->block_size()));
  if (!cache.ok()) return ToGrpcStatus(cache.status());
  response->set_kv_cache_bytes((*cache)->bytes());
  executor_ = std::make_unique<StepExecutor>(model_.get(), std::move(*cache));
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::ExecuteStep(grpc::ServerContext*, const v1::StepRequest* request,
                                            v1::StepResponse* response) {
  absl::MutexLock lock(&mu_);
  if (executor_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "ExecuteStep before InitCache");
  }
  if (comm_->aborted()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "this worker's group communicator failed earlier; the group must re-form");
  }
  absl::Status s = executor_->Execute(*request, response);
  if (!s.ok() && comm_->aborted()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, absl::StrCat("collective failed: ", s.message()));
  }
  return ToGrpcStatus(s);
}

}  // namespace tessera
