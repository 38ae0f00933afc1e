#ifndef TESSERA_COORDINATOR_CLUSTER_WORKER_GROUP_H_
#define TESSERA_COORDINATOR_CLUSTER_WORKER_GROUP_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/cluster/step_deadline.h"
#include "grpcpp/security/credentials.h"
#include "tessera/v1/worker.grpc.pb.h"

namespace tessera {

// How a group's ranks started and what their memory holds: the largest over the ranks
// (the slowest load, the fullest device), as LoadShard and InitCache reported them.
struct ReplicaStartup {
  double load_seconds = 0;
  double warmup_seconds = 0;
  uint64_t device_total_bytes = 0;
  uint64_t weight_bytes = 0;
  uint64_t kv_cache_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint64_t graph_bytes = 0;
  uint32_t graphs_captured = 0;
  uint64_t activation_reserve_bytes = 0;  // Held back from the KV pool when it was sized.
  uint64_t host_cache_bytes = 0;          // The host KV tier.
};

// What the coordinator learned from a group's ranks after loading.
struct GroupCapacity {
  int num_blocks = 0;        // Minimum over ranks.
  int num_host_blocks = 0;   // Host-tier slots every rank holds (GroupOptions::kv_host_cache_bytes).
  uint64_t weight_bytes = 0; // Rank 0's.
  std::string model_name;
  std::string dtype;
};

struct GroupOptions {
  std::string model_dir;
  int block_size = 16;
  double kv_memory_fraction = 0.5;
  uint64_t kv_memory_bytes = 0;  // Per rank; 0: use the fraction.
  // Host memory per rank for the host KV tier (0: none): blocks evicted from the device
  // pool are kept there and loaded back on a prefix hit.
  uint64_t kv_host_cache_bytes = 0;
  // vLLM's --gpu-memory-utilization (see v1::LoadShardRequest); 0: use the fraction.
  double gpu_memory_utilization = 0;
  int max_blocks = 0;            // Cap (what max_num_seqs full contexts need); 0: none.
  // The scheduler's limits: the largest step, whose activations the workers reserve.
  int max_num_seqs = 0;
  int max_num_tokens = 0;
  std::string quantization;      // common/quantization.h spellings, passed to every rank.
  std::string kv_cache_dtype;
  bool expert_parallel = false;  // See v1::LoadShardRequest.
  bool enforce_eager = false;    // See v1::LoadShardRequest.
  // Speculative decoding (see v1::LoadShardRequest): "", "ngram" or "draft".
  std::string speculative_method;
  int num_speculative_tokens = 0;
  std::string draft_model_dir;
  int prompt_lookup_min = 0;
  int prompt_lookup_max = 0;
  // Each token's bytes and the special ids (common/tokenizer/token_bytes.h) for rank 0's
  // grammar masks; null: the workers get none and constrained requests fail there.
  std::shared_ptr<const std::vector<std::string>> token_bytes;
  std::vector<int32_t> special_token_ids;
  std::string rendezvous_address;  // The coordinator's Gloo store, "host:port".
  // "gloo", "shm" (ranks on one host), "nccl" (CUDA workers), or "auto": nccl when every
  // rank registered a CUDA device, else shm when every rank shares a host, else gloo.
  std::string communicator = "auto";
  std::chrono::milliseconds collective_timeout{10000};
  std::chrono::milliseconds step_timeout{120000};
  // Of the channels to the workers (mutual TLS, see common/tls); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> worker_credentials;
  // The name workers' certificates must carry instead of their advertised host; empty:
  // the host.
  std::string worker_server_name;
};

// The ranks of one replica as the coordinator sees them: stubs to each worker, group
// formation (configure, load, size and allocate the KV cache) and step fan-out. Each
// call reaches every rank at once; the first failure fails the call and cancels the rest.
class WorkerGroup {
 public:
  // `devices` are the ranks' registered DeviceInfo (kind, PCI bus id); empty: unknown.
  WorkerGroup(int replica, std::vector<std::string> addresses, GroupOptions options,
              std::vector<v1::DeviceInfo> devices = {});

  // Configures the ranks as one group, loads the shards and allocates the KV cache.
  // `progress(rank, done, total)` reports loading.
  absl::StatusOr<GroupCapacity> Form(uint64_t generation,
                                     const std::function<void(int, int, int)>& progress);

  // Runs one step on every rank; returns rank 0's response. A step past its deadline
  // (StepDeadline: learned from the group's earlier steps) fails like a failed rank.
  absl::StatusOr<v1::StepResponse> ExecuteStep(const v1::StepRequest& request);

  // Checks every rank answers its health service within `timeout`.
  absl::Status Probe(std::chrono::milliseconds timeout);

  // Disaggregated serving: each rank r sends blocks `src_blocks` of its KV cache into
  // blocks `dst_blocks` of rank r of the group formed as `dst_formation` at `dst_addresses`
  // (same world size), all ranks at once. Safe beside ExecuteStep. Returns the bytes
  // moved, summed over the ranks.
  absl::StatusOr<uint64_t> PushKv(const std::vector<std::string>& dst_addresses, const std::string& dst_formation,
                                  const std::vector<int32_t>& src_blocks, const std::vector<int32_t>& dst_blocks);

  int replica() const { return replica_; }
  int world_size() const { return static_cast<int>(addresses_.size()); }
  const std::vector<std::string>& addresses() const { return addresses_; }
  // Which formation the ranks joined (their rendezvous prefix); set by Form.
  const std::string& formation() const { return formation_; }
  // Set by a successful Form (zeros before): read once the group is handed on.
  const ReplicaStartup& startup() const { return startup_; }

 private:
  const int replica_;
  const std::vector<std::string> addresses_;
  const GroupOptions options_;
  const std::vector<v1::DeviceInfo> devices_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::Worker::Stub>> stubs_;
  ReplicaStartup startup_;
  std::string formation_;
  // Steps run one at a time (the replica's step loop), so this needs no lock.
  StepDeadline step_deadline_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CLUSTER_WORKER_GROUP_H_
