#ifndef TESSERA_WORKER_LLAMA_MODEL_H_
#define TESSERA_WORKER_LLAMA_MODEL_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model_config.h"
#include "common/quantization.h"
#include "common/tensor_parallel.h"
#include "kernels/backend.h"
#include "worker/communicator.h"
#include "worker/device_buffer.h"
#include "worker/graph_batch.h"
#include "worker/kv_cache.h"
#include "worker/model_weights.h"
#include "worker/step_batch.h"

namespace tessera {

// Choices made when a model is loaded (see common/quantization.h).
struct ModelLoadOptions {
  WeightQuantization quantization = WeightQuantization::kNone;
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;
  // Mixtures of experts: whole experts per rank instead of every expert split across the
  // ranks (ShardLayout). Attention stays tensor-parallel either way.
  bool expert_parallel = false;
};

// What LlamaModel::WarmUp did before serving.
struct WarmupReport {
  size_t workspace_bytes = 0;  // Activation buffers reserved for the largest step.
  size_t graph_bytes = 0;      // Free device memory the captured graphs took.
  int graphs_captured = 0;
  double seconds = 0;
};

// Forward passes since load (or the warm-up), by what the step computed (decode, mixed,
// prefill: graph_batch.h's StepKindOf) and how it ran: replaying a captured graph,
// running eagerly and capturing one for the next steps of its shape, or eagerly only.
struct ForwardCounts {
  static constexpr const char* kKinds[3] = {"decode", "mixed", "prefill"};
  int64_t replayed[3] = {};
  int64_t captured[3] = {};
  int64_t eager[3] = {};
};

// The Llama decoder on one tensor-parallel rank: its weight slices, the two row-parallel
// all-reduces per layer, vocab-parallel embedding (all-reduce) and lm_head (all-gather).
class LlamaModel {
 public:
  // `comm` decides rank and world size; it must outlive the model.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(const std::filesystem::path& model_dir,
                                                          kernels::Backend* backend,
                                                          Communicator* comm,
                                                          const LoadProgress& progress = nullptr,
                                                          const ModelLoadOptions& options = {});

  // Runs one step over `batch` writing K/V into `cache`. On return `logits` (host) holds
  // [batch.logits_rows.size(), vocab_size] full-vocabulary logits, on every rank.
  // With `device_logits` the logits stay in backend memory instead (for sampling there,
  // Backend::SampleOnDevice): *device_logits points at them, same layout, valid until the
  // next step, and `logits` is left empty.
  absl::Status Forward(const StepBatch& batch, KvCache* cache, std::vector<float>* logits,
                       const float** device_logits = nullptr);

  // Before serving on a backend with graphs (CUDA): reserves the workspace for the largest
  // step, runs it once so the backend's scratch is grown, and captures the decode graphs up
  // to `max_num_seqs`, so that no step later reallocates (dropping graphs) or stalls on a
  // capture. Writes no KV. A no-op on backends without graphs.
  absl::StatusOr<WarmupReport> WarmUp(KvCache* cache, int max_num_seqs, int max_num_tokens,
                                      int max_num_logits);
  const ForwardCounts& forward_counts() const { return forward_counts_; }
  // Graphs on or off (vLLM's --enforce-eager); on by default where the backend has them.
  void set_graphs_enabled(bool enabled) { graphs_enabled_ = enabled; }

  // Allocates this rank's KV cache with `num_blocks` blocks of `block_size` tokens.
  absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(int num_blocks, int block_size) const;
  // Bytes of one KV block on this rank (all layers, K and V).
  size_t KvBytesPerBlock(int block_size) const;

  const ModelConfig& config() const { return config_; }
  const ShardLayout& layout() const { return layout_; }
  uint64_t weight_bytes() const { return weights_.bytes; }
  // Backend memory of the per-step activation buffers for a step of these sizes (the
  // largest step sizes the KV pool's reserve; EnsureWorkspace allocates exactly this).
  size_t WorkspaceBytes(int num_tokens, int num_seqs, int max_blocks, int num_logits) const;
  // What WarmUp reserves for the scheduler's limits: WorkspaceBytes of the largest step,
  // padded to its graph shape on a backend with graphs. The KV pool leaves this free.
  size_t ReservedWorkspaceBytes(int max_num_seqs, int max_num_tokens, int max_num_logits,
                                int max_blocks) const;
  // What this rank holds (benchmarks count the bytes a step streams from it).
  const ModelWeights& weights() const { return weights_; }
  const ModelLoadOptions& options() const { return options_; }
  // The KV cache's element type (options().kv_cache_dtype resolved for this model).
  DType kv_cache_dtype() const {
    return ResolveKvCacheDType(options_.kv_cache_dtype, config_.torch_dtype);
  }
  kernels::Backend* backend() const { return backend_; }

 private:
  LlamaModel() = default;
  // A step's metadata in backend memory (UploadStep) and the attention batch over it.
  struct StepView {
    int num_tokens = 0;
    const int32_t* token_ids = nullptr;
    const int32_t* positions = nullptr;
    const int64_t* slots = nullptr;
    int num_logits = 0;
    const int32_t* logits_rows = nullptr;  // [num_logits] token rows whose logits are wanted.
    kernels::AttentionBatch attention;
  };

  struct ReservedSizes {
    int tokens, seqs, logits;
  };
  ReservedSizes ReservedSizesFor(int max_num_seqs, int max_num_tokens, int max_num_logits) const;

  struct WorkspacePart {
    DeviceBuffer* buffer;
    size_t bytes;
    const char* what;
  };
  struct Workspace;
  // The buffers of `w` a step of these sizes needs, and their sizes.
  std::vector<WorkspacePart> WorkspaceParts(Workspace* w, int num_tokens, int num_seqs,
                                            int max_blocks, int num_logits) const;
  absl::Status EnsureWorkspace(int num_tokens, int num_seqs, int max_blocks, int num_logits);
  // Queues the copy of the step's metadata into the workspace (it must be big enough) and
  // lets the backend plan the step's attention (Backend::PlanAttention).
  StepView UploadStep(const StepBatch& batch, const KvCache& cache);
  // Queues the whole step on the backend, nothing read back: the layers and, for the
  // step's logits rows, the final norm and lm_head (and with tp > 1 the logits' all-gather).
  absl::Status EnqueueStep(const StepView& step, KvCache* cache);
  absl::Status ForwardEager(const StepBatch& batch, KvCache* cache, std::vector<float>* logits,
                            const float** device_logits);
  // Queues a mixture-of-experts MLP of `n` tokens over `normed`, this rank's part of its
  // output into `out` (the caller's all-reduce completes it).
  void EnqueueMoe(const LayerWeights& lw, int n, const void* normed, void* out);
  // The first `keep` of the `rows` logits rows EnqueueStep computed: to the host, or left
  // on the device (*device_logits).
  absl::Status ReadLogits(int rows, int keep, std::vector<float>* logits,
                          const float** device_logits);
  // Steps replay a backend graph per padded shape (graph_batch.h); nothing when graphs
  // are off, the backend has none, or the step is past the shapes graphs are kept for.
  std::optional<GraphShape> GraphShapeOf(const StepBatch& batch, const KvCache& cache) const;
  absl::Status ForwardWithGraph(const StepBatch& batch, const GraphShape& shape,
                                KvCache* cache, std::vector<float>* logits,
                                const float** device_logits);

  ModelConfig config_;
  ShardLayout layout_;
  kernels::Backend* backend_ = nullptr;
  Communicator* comm_ = nullptr;
  ModelLoadOptions options_;
  ModelWeights weights_;
  DeviceBuffer rope_inv_freq_;  // [head_dim / 2] float, from config_.Rope().
  float rope_scale_ = 1.0f;     // cos/sin scale (yarn's attention factor).

  // Per-step scratch in backend memory, grown on demand.
  struct Workspace {
    int tokens = 0, seqs = 0, blocks = 0, logits = 0;
    DeviceBuffer hidden, normed, qkv, attn, proj, gate_up, act, selected, logits_local;
    // Mixtures of experts: router logits [tokens, experts] and the routing [tokens, top_k]
    // (float32, int32), the shared expert's output [tokens, hidden] and gate logits.
    DeviceBuffer router_logits, expert_ids, expert_weights, shared_out, shared_gate;
    DeviceBuffer logits_device;  // [logits, vocab] gathered on the device (tp > 1).
    // The step's metadata (token ids, positions, slots, query starts, context lengths,
    // block tables), packed so one asynchronous copy uploads it: see StepMetadata.
    DeviceBuffer metadata;
    std::vector<uint8_t> metadata_host;
    uint64_t generation = 0;  // Bumped whenever a buffer moves (graphs bake pointers in).
    bool reserved = false;    // Sized by WarmUp for the largest step: graphs stay inside it.
  } ws_;

  // Graphs by padded shape, valid for one workspace generation and one cache.
  bool graphs_enabled_ = true;
  std::map<GraphShape, int> graphs_;
  ForwardCounts forward_counts_;
  uint64_t graphs_generation_ = 0;
  uint64_t graphs_epoch_ = 0;
  const KvCache* graphs_cache_ = nullptr;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_LLAMA_MODEL_H_
