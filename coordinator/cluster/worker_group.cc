#include "coordinator/cluster/worker_group.h"

#include <algorithm>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "coordinator/cluster/communicator_choice.h"
#include "grpcpp/grpcpp.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace tessera {
namespace {

std::chrono::system_clock::time_point In(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

// Runs fn(rank) for every rank on its own thread; returns the first error, naming the rank.
absl::Status ForEachRank(int world, const std::vector<std::string>& addresses,
                         const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { results[r] = fn(r); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    if (!results[r].ok()) {
      return absl::Status(results[r].code(), absl::StrCat("rank ", r, " (", addresses[r], "): ",
                                                          results[r].message()));
    }
  }
  return absl::OkStatus();
}

// The least a step is given once its deadline is learned: far above any step of a healthy
// group, and under the workers' default collective timeout (10 s), so the coordinator
// notices a group stuck in a collective before the workers give up on it.
constexpr std::chrono::milliseconds kStepDeadlineFloor{5000};

}  // namespace

WorkerGroup::WorkerGroup(int replica, std::vector<std::string> addresses, GroupOptions options,
                         std::vector<v1::DeviceInfo> devices)
    : replica_(replica),
      addresses_(std::move(addresses)),
      options_(std::move(options)),
      devices_(std::move(devices)),
      step_deadline_(kStepDeadlineFloor, options_.step_timeout) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  // Fail fast on a dead worker instead of waiting for reconnection.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kClusterConnectTimeoutMs);
  SetClusterKeepalive(&args);
  if (!options_.worker_server_name.empty()) args.SetSslTargetNameOverride(options_.worker_server_name);
  const auto credentials = options_.worker_credentials != nullptr ? options_.worker_credentials
                                                                  : grpc::InsecureChannelCredentials();
  for (const std::string& a : addresses_) {
    channels_.push_back(grpc::CreateCustomChannel(a, credentials, args));
    stubs_.push_back(v1::Worker::NewStub(channels_.back()));
  }
}

absl::StatusOr<GroupCapacity> WorkerGroup::Form(uint64_t generation,
                                                const std::function<void(int, int, int)>& progress) {
  const int world = world_size();
  std::vector<RankPlacement> placements;
  for (int r = 0; r < world; ++r) {
    const std::string& address = addresses_[r];
    const v1::DeviceInfo device =
        r < static_cast<int>(devices_.size()) ? devices_[r] : v1::DeviceInfo();
    placements.push_back(
        {address.substr(0, address.rfind(':')), device.kind(), device.device_id()});
  }
  ASSIGN_OR_RETURN(const std::string communicator,
                   ChooseCommunicator(options_.communicator, placements, replica_));
  formation_ = absl::StrCat("replica", replica_, "/gen", generation);
  absl::Status s = ForEachRank(world, addresses_, [&](int r) {
    v1::ConfigureRequest req;
    req.set_replica(replica_);
    req.set_rank(r);
    req.set_world_size(world);
    for (const auto& a : addresses_) req.add_peers(a);
    req.set_communicator(communicator);
    req.set_rendezvous_address(options_.rendezvous_address);
    req.set_rendezvous_prefix(formation_);
    req.set_collective_timeout_ms(static_cast<uint32_t>(options_.collective_timeout.count()));
    const std::string& addr = addresses_[r];
    req.set_advertise_host(addr.substr(0, addr.rfind(':')));
    grpc::ClientContext ctx;
    ctx.set_deadline(In(options_.collective_timeout + std::chrono::seconds(5)));
    v1::ConfigureResponse resp;
    return FromGrpcStatus(stubs_[r]->Configure(&ctx, req, &resp));
  });
  if (!s.ok()) return s;

  std::vector<v1::LoadShardProgress> last(world);
  s = ForEachRank(world, addresses_, [&](int r) {
    v1::LoadShardRequest req;
    req.set_model_dir(options_.model_dir);
    req.set_block_size(options_.block_size);
    req.set_kv_memory_fraction(options_.kv_memory_fraction);
    req.set_kv_memory_bytes(options_.kv_memory_bytes);
    req.set_gpu_memory_utilization(options_.gpu_memory_utilization);
    req.set_max_blocks(options_.max_blocks);
    req.set_max_num_seqs(options_.max_num_seqs);
    req.set_max_num_tokens(options_.max_num_tokens);
    req.set_quantization(options_.quantization);
    req.set_kv_cache_dtype(options_.kv_cache_dtype);
    req.set_expert_parallel(options_.expert_parallel);
    req.set_enforce_eager(options_.enforce_eager);
    req.set_speculative_method(options_.speculative_method);
    req.set_num_speculative_tokens(options_.num_speculative_tokens);
    req.set_draft_model_dir(options_.draft_model_dir);
    req.set_prompt_lookup_min(options_.prompt_lookup_min);
    req.set_prompt_lookup_max(options_.prompt_lookup_max);
    if (r == 0 && options_.token_bytes != nullptr) {
      req.mutable_token_bytes()->Add(options_.token_bytes->begin(), options_.token_bytes->end());
      req.mutable_special_token_ids()->Add(options_.special_token_ids.begin(),
                                           options_.special_token_ids.end());
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(In(std::chrono::hours(1)));
    auto reader = stubs_[r]->LoadShard(&ctx, req);
    v1::LoadShardProgress p;
    while (reader->Read(&p)) {
      if (progress && !p.done()) progress(r, p.tensors_done(), p.tensors_total());
      if (p.done()) last[r] = p;
    }
    absl::Status status = FromGrpcStatus(reader->Finish());
    if (status.ok() && !last[r].done()) {
      return absl::InternalError("worker ended LoadShard without a capacity report");
    }
    return status;
  });
  if (!s.ok()) return s;

  GroupCapacity cap;
  cap.num_blocks = static_cast<int>(last[0].num_blocks());
  for (const auto& p : last) cap.num_blocks = std::min(cap.num_blocks, static_cast<int>(p.num_blocks()));
  uint64_t max_bytes_per_block = 1;
  for (const auto& p : last) max_bytes_per_block = std::max<uint64_t>(max_bytes_per_block, p.kv_bytes_per_block());
  cap.num_host_blocks = static_cast<int>(
      std::min<uint64_t>(options_.kv_host_cache_bytes / max_bytes_per_block, std::numeric_limits<int32_t>::max()));
  cap.weight_bytes = last[0].weight_bytes();
  cap.model_name = last[0].model_name();
  cap.dtype = last[0].dtype();
  if (cap.num_blocks < 2) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "replica ", replica_, ": no room for a KV cache after loading the weights (", cap.num_blocks,
        " blocks fit on the smallest rank)"));
  }
  std::vector<v1::InitCacheResponse> cached(world);
  s = ForEachRank(world, addresses_, [&](int r) {
    v1::InitCacheRequest req;
    req.set_num_blocks(cap.num_blocks);
    req.set_block_size(options_.block_size);
    req.set_max_num_seqs(options_.max_num_seqs);
    req.set_max_num_tokens(options_.max_num_tokens);
    req.set_num_host_blocks(cap.num_host_blocks);
    grpc::ClientContext ctx;
    ctx.set_deadline(In(std::chrono::minutes(5)));
    return FromGrpcStatus(stubs_[r]->InitCache(&ctx, req, &cached[r]));
  });
  if (!s.ok()) return s;
  startup_ = ReplicaStartup{};
  for (int r = 0; r < world; ++r) {
    const v1::LoadShardProgress& l = last[r];
    const v1::InitCacheResponse& c = cached[r];
    startup_.load_seconds = std::max(startup_.load_seconds, l.load_seconds());
    startup_.warmup_seconds = std::max(startup_.warmup_seconds, c.warmup_seconds());
    startup_.device_total_bytes = std::max(startup_.device_total_bytes, l.device_total_bytes());
    startup_.weight_bytes = std::max(startup_.weight_bytes, l.weight_bytes());
    startup_.kv_cache_bytes = std::max(startup_.kv_cache_bytes, c.kv_cache_bytes());
    startup_.workspace_bytes = std::max(startup_.workspace_bytes, c.workspace_bytes());
    startup_.graph_bytes = std::max(startup_.graph_bytes, c.graph_bytes());
    startup_.graphs_captured = std::max(startup_.graphs_captured, c.graphs_captured());
    startup_.host_cache_bytes = std::max(startup_.host_cache_bytes, c.host_cache_bytes());
    startup_.activation_reserve_bytes =
        std::max(startup_.activation_reserve_bytes, l.activation_reserve_bytes());
  }
  return cap;
}

absl::StatusOr<v1::StepResponse> WorkerGroup::ExecuteStep(const v1::StepRequest& request) {
  const int world = world_size();
  int64_t tokens = 0;
  for (uint32_t n : request.num_scheduled_tokens()) tokens += n;
  for (uint32_t n : request.num_lookahead_tokens()) tokens += n;
  const std::chrono::milliseconds deadline = step_deadline_.For(tokens);
  const auto started = std::chrono::steady_clock::now();
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(world);
  std::vector<v1::StepResponse> responses(world);
  std::vector<grpc::Status> statuses(world);
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<v1::StepResponse>>> calls(world);
  for (int r = 0; r < world; ++r) {
    contexts[r] = std::make_unique<grpc::ClientContext>();
    contexts[r]->set_deadline(In(deadline));
    calls[r] = stubs_[r]->AsyncExecuteStep(contexts[r].get(), request, &cq);
    calls[r]->Finish(&responses[r], &statuses[r], reinterpret_cast<void*>(static_cast<intptr_t>(r)));
  }
  absl::Status first_error;
  for (int done = 0; done < world; ++done) {
    void* tag;
    bool ok;
    if (!cq.Next(&tag, &ok)) break;
    const int r = static_cast<int>(reinterpret_cast<intptr_t>(tag));
    if (!statuses[r].ok() && first_error.ok()) {
      first_error = absl::Status(
          static_cast<absl::StatusCode>(statuses[r].error_code()),
          absl::StrCat("replica ", replica_, " rank ", r, " (", addresses_[r], ") failed step ",
                       request.step_id(), ": ", statuses[r].error_message(),
                       statuses[r].error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                           ? absl::StrCat(" (the step's deadline: ", deadline.count(), " ms for ", tokens,
                                          " tokens)")
                           : ""));
      // The other ranks would wait in a collective for the failed one: stop waiting.
      for (auto& c : contexts) c->TryCancel();
    }
  }
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  if (!first_error.ok()) return first_error;
  step_deadline_.Observe(tokens, std::chrono::steady_clock::now() - started);
  return std::move(responses[0]);
}

absl::StatusOr<uint64_t> WorkerGroup::PushKv(const std::vector<std::string>& dst_addresses,
                                             const std::string& dst_formation,
                                             const std::vector<int32_t>& src_blocks,
                                             const std::vector<int32_t>& dst_blocks) {
  if (static_cast<int>(dst_addresses.size()) != world_size()) {
    return absl::FailedPreconditionError(absl::StrCat("KV transfer from tp ", world_size(), " to tp ",
                                                      dst_addresses.size(), ": the sizes must match"));
  }
  std::vector<uint64_t> bytes(world_size(), 0);
  absl::Status s = ForEachRank(world_size(), addresses_, [&](int r) {
    v1::PushKvBlocksRequest req;
    req.mutable_src_block_ids()->Add(src_blocks.begin(), src_blocks.end());
    req.mutable_dst_block_ids()->Add(dst_blocks.begin(), dst_blocks.end());
    req.set_dst_address(dst_addresses[r]);
    req.set_dst_group(dst_formation);
    grpc::ClientContext ctx;
    // The pushing worker bounds the transfer itself (KvTransfer); this only catches a
    // worker that never answers.
    ctx.set_deadline(In(std::chrono::minutes(5)));
    v1::PushKvBlocksResponse resp;
    absl::Status status = FromGrpcStatus(stubs_[r]->PushKvBlocks(&ctx, req, &resp));
    bytes[r] = resp.bytes();
    return status;
  });
  if (!s.ok()) return s;
  uint64_t total = 0;
  for (uint64_t b : bytes) total += b;
  return total;
}

absl::Status WorkerGroup::Probe(std::chrono::milliseconds timeout) {
  return ForEachRank(world_size(), addresses_, [&](int r) {
    auto stub = grpc::health::v1::Health::NewStub(channels_[r]);
    grpc::ClientContext ctx;
    ctx.set_deadline(In(timeout));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    return FromGrpcStatus(stub->Check(&ctx, req, &resp));
  });
}

}  // namespace tessera
