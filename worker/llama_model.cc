#include "worker/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "worker/backend_factory.h"
#include "worker/graph_batch.h"

namespace tessera {
namespace {

// Grows `buffer` to hold at least `bytes`.
absl::Status Reserve(kernels::Backend* backend, DeviceBuffer* buffer, size_t bytes,
                     absl::string_view what) {
  if (buffer->bytes() >= bytes && buffer->get() != nullptr) return absl::OkStatus();
  buffer->Reset();
  ASSIGN_OR_RETURN(*buffer, DeviceBuffer::Allocate(backend, bytes, what));
  return absl::OkStatus();
}

// CUDA ops and copies return void and keep their first failure: surface it as the error
// of the load or step that ran into it.
absl::Status CheckBackend(const kernels::Backend& backend, absl::string_view what) {
  absl::Status s = BackendError(backend);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(what, " on the ", std::string(backend.name()),
                                             " backend failed: ", s.message()));
}

template <typename T>
void Upload(kernels::Backend* backend, const DeviceBuffer& dst, const std::vector<T>& src) {
  if (!src.empty()) backend->CopyToDevice(dst.get(), src.data(), src.size() * sizeof(T));
}

// Index of a StepKindOf kind in ForwardCounts' arrays.
int KindIndex(std::string_view kind) { return kind == "decode" ? 0 : kind == "mixed" ? 1 : 2; }

// Where each array of a step's metadata sits in the packed upload: 16-byte aligned offsets.
struct StepMetadata {
  size_t token_ids, positions, slots, query_start, context_lens, block_tables, logits_rows,
      bytes;

  explicit StepMetadata(const StepBatch& b) {
    size_t at = 0;
    auto place = [&at](size_t n) {
      const size_t offset = at;
      at += (n + 15) / 16 * 16;
      return offset;
    };
    token_ids = place(b.token_ids.size() * sizeof(int32_t));
    positions = place(b.positions.size() * sizeof(int32_t));
    slots = place(b.slot_mapping.size() * sizeof(int64_t));
    query_start = place(b.query_start.size() * sizeof(int32_t));
    context_lens = place(b.context_lens.size() * sizeof(int32_t));
    block_tables = place(b.block_tables.size() * sizeof(int32_t));
    logits_rows = place(b.logits_rows.size() * sizeof(int32_t));
    bytes = at;
  }
};

template <typename T>
void Pack(const std::vector<T>& src, size_t offset, std::vector<uint8_t>* dst) {
  if (!src.empty()) std::memcpy(dst->data() + offset, src.data(), src.size() * sizeof(T));
}

absl::Status ValidateBatch(const StepBatch& b, const ModelConfig& c,
                           const kernels::KvCacheShape& shape) {
  const int n = b.num_tokens(), seqs = b.num_seqs();
  if (n == 0 || seqs == 0) return absl::InvalidArgumentError("empty step batch");
  if (static_cast<int>(b.positions.size()) != n || static_cast<int>(b.slot_mapping.size()) != n ||
      static_cast<int>(b.query_start.size()) != seqs + 1 || b.query_start[0] != 0 ||
      b.query_start[seqs] != n ||
      static_cast<int64_t>(b.block_tables.size()) != static_cast<int64_t>(seqs) * b.max_blocks_per_seq) {
    return absl::InvalidArgumentError("step batch arrays disagree in length");
  }
  for (int i = 0; i < n; ++i) {
    if (b.token_ids[i] < 0 || b.token_ids[i] >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", b.token_ids[i], " outside the vocabulary of ", c.vocab_size));
    }
    const int64_t max_slot = static_cast<int64_t>(shape.num_blocks) * shape.block_size;
    // -1 marks a padding token (graph_batch.h), whose K/V is written nowhere.
    if (b.slot_mapping[i] < -1 || b.slot_mapping[i] >= max_slot) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", b.slot_mapping[i], " outside the KV cache of ", max_slot, " slots"));
    }
  }
  for (int s = 0; s < seqs; ++s) {
    const int new_tokens = b.query_start[s + 1] - b.query_start[s];
    if (new_tokens <= 0 || b.context_lens[s] < new_tokens ||
        b.context_lens[s] > b.max_blocks_per_seq * shape.block_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s, " of the step: ", new_tokens, " new tokens, context ",
                       b.context_lens[s], ", room for ", b.max_blocks_per_seq * shape.block_size));
    }
    for (int j = 0; j < b.max_blocks_per_seq; ++j) {
      const int32_t block = b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq + j];
      if (block < 0 || block >= shape.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("block id ", block, " outside the cache of ",
                                                       shape.num_blocks, " blocks"));
      }
    }
  }
  for (int32_t row : b.logits_rows) {
    if (row < 0 || row >= n) {
      return absl::InvalidArgumentError(absl::StrCat("logits row ", row, " outside the step"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const std::filesystem::path& model_dir,
                                                             kernels::Backend* backend,
                                                             Communicator* comm,
                                                             const LoadProgress& progress,
                                                             const ModelLoadOptions& options) {
  auto model = std::unique_ptr<LlamaModel>(new LlamaModel());
  ASSIGN_OR_RETURN(model->config_, ModelConfig::Load(model_dir));
  ASSIGN_OR_RETURN(model->layout_,
                   ShardLayout::Make(model->config_, comm->rank(), comm->world_size(),
                                     options.expert_parallel));
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::Open(model_dir));
  model->options_ = options;
  ASSIGN_OR_RETURN(model->weights_, LoadModelWeights(*checkpoint, model->config_, model->layout_,
                                                     backend, progress, options.quantization));
  const RopeFrequencies rope = model->config_.Rope();
  ASSIGN_OR_RETURN(model->rope_inv_freq_,
                   DeviceBuffer::Allocate(backend, rope.inv_freq.size() * sizeof(float),
                                          "RoPE frequencies"));
  Upload(backend, model->rope_inv_freq_, rope.inv_freq);
  model->rope_scale_ = rope.attention_scaling;
  // TESSERA_CUDA_GRAPHS=0 runs every decode step eagerly (for debugging a graph problem).
  if (const char* graphs = std::getenv("TESSERA_CUDA_GRAPHS"); graphs != nullptr &&
                                                               std::string(graphs) == "0") {
    model->graphs_enabled_ = false;
  }
  RETURN_IF_ERROR(CheckBackend(*backend, "uploading the weights"));
  model->backend_ = backend;
  model->comm_ = comm;
  return model;
}

size_t LlamaModel::KvBytesPerBlock(int block_size) const {
  return KvCache::BytesPerBlock(config_.num_hidden_layers, block_size,
                                static_cast<int>(layout_.kv_heads.size()), config_.head_dim,
                                kv_cache_dtype());
}

absl::StatusOr<std::unique_ptr<KvCache>> LlamaModel::CreateKvCache(int num_blocks,
                                                                   int block_size) const {
  kernels::KvCacheShape shape;
  shape.num_blocks = num_blocks;
  shape.block_size = block_size;
  shape.num_kv_heads = static_cast<int>(layout_.kv_heads.size());
  shape.head_dim = config_.head_dim;
  shape.dtype = kv_cache_dtype();
  return KvCache::Create(backend_, config_.num_hidden_layers, shape);
}

std::vector<LlamaModel::WorkspacePart> LlamaModel::WorkspaceParts(Workspace* w, int tokens,
                                                                  int seqs, int blocks,
                                                                  int num_logits) const {
  const size_t h = config_.hidden_size, hd = config_.head_dim;
  const size_t nq = layout_.q_heads.size(), nkv = layout_.kv_heads.size();
  // The gate/up and activation buffers also serve the shared expert of a MoE layer.
  const size_t inter = std::max<size_t>(layout_.intermediate.size(),
                                        layout_.shared_intermediate.size());
  const size_t vocab_max = EvenSplit(config_.vocab_size, 0, layout_.world).size();
  // The residual stream and the logits are float32; the other activations are in the
  // backend's activation dtype (BF16 on CUDA by default).
  const size_t t = tokens, f = sizeof(float), world = layout_.world;
  const size_t a = DTypeSize(backend_->activation_dtype());
  std::vector<WorkspacePart> parts = {
      {&w->hidden, t * h * f, "hidden states"},
      {&w->normed, t * h * a, "normed states"},
      {&w->qkv, t * (nq + 2 * nkv) * hd * a, "qkv"},
      {&w->attn, t * nq * hd * a, "attention output"},
      {&w->proj, t * h * a, "projection output"},
      {&w->gate_up, t * 2 * inter * a, "gate/up"},
      {&w->act, t * inter * a, "MLP activation"},
      {&w->selected, num_logits * h * a, "logit rows"},
  };
  if (config_.is_moe()) {
    const size_t experts = config_.moe.num_experts, top_k = config_.moe.top_k;
    parts.push_back({&w->router_logits, t * experts * f, "router logits"});
    parts.push_back({&w->expert_ids, t * top_k * sizeof(int32_t), "expert ids"});
    parts.push_back({&w->expert_weights, t * top_k * f, "expert weights"});
    if (config_.moe.shared_intermediate_size > 0) {
      parts.push_back({&w->shared_out, t * h * a, "shared expert output"});
      parts.push_back({&w->shared_gate, t * f, "shared expert gate"});
    }
  }
  parts.push_back({&w->logits_local, num_logits * vocab_max * f * (world + 1), "logits"});
  // Token ids, positions, slots (8 bytes), query starts, context lengths, block tables and
  // logits rows, each padded to 16 bytes: StepMetadata's packing at these sizes.
  const size_t metadata = t * (4 + 4 + 8) + (seqs + 1) * 4 + seqs * 4 +
                          static_cast<size_t>(seqs) * blocks * 4 + num_logits * 4 + 7 * 16;
  parts.push_back({&w->metadata, metadata, "step metadata"});
  return parts;
}

size_t LlamaModel::WorkspaceBytes(int num_tokens, int num_seqs, int max_blocks,
                                  int num_logits) const {
  Workspace sizes_only;  // Nothing is allocated: only the sizes are read.
  size_t total = 0;
  for (const WorkspacePart& part :
       WorkspaceParts(&sizes_only, num_tokens, num_seqs, max_blocks, num_logits)) {
    total += part.bytes;
  }
  return total;
}

absl::Status LlamaModel::EnsureWorkspace(int tokens, int seqs, int blocks, int num_logits) {
  Workspace& w = ws_;
  if (tokens <= w.tokens && seqs <= w.seqs && blocks <= w.blocks && num_logits <= w.logits) {
    return absl::OkStatus();
  }
  // Never shrink: a buffer that moves invalidates every captured graph.
  tokens = std::max(tokens, w.tokens);
  seqs = std::max(seqs, w.seqs);
  blocks = std::max(blocks, w.blocks);
  num_logits = std::max(num_logits, w.logits);
  for (const WorkspacePart& part : WorkspaceParts(&w, tokens, seqs, blocks, num_logits)) {
    RETURN_IF_ERROR(Reserve(backend_, part.buffer, part.bytes, part.what));
  }
  ++w.generation;
  w.tokens = tokens;
  w.seqs = seqs;
  w.blocks = blocks;
  w.logits = num_logits;
  return absl::OkStatus();
}

absl::Status LlamaModel::Forward(const StepBatch& batch, KvCache* cache,
                                 std::vector<float>* logits, const float** device_logits) {
  RETURN_IF_ERROR(ValidateBatch(batch, config_, cache->shape()));
  if (const std::optional<GraphShape> shape = GraphShapeOf(batch, *cache); shape.has_value()) {
    return ForwardWithGraph(batch, *shape, cache, logits, device_logits);
  }
  return ForwardEager(batch, cache, logits, device_logits);
}

absl::Status LlamaModel::ForwardEager(const StepBatch& batch, KvCache* cache,
                                      std::vector<float>* logits, const float** device_logits) {
  const int num_logits = static_cast<int>(batch.logits_rows.size());
  RETURN_IF_ERROR(EnsureWorkspace(batch.num_tokens(), batch.num_seqs(), batch.max_blocks_per_seq,
                                  std::max(num_logits, 1)));
  kernels::Backend& be = *backend_;
  ++forward_counts_.eager[KindIndex(StepKindOf(batch))];
  RETURN_IF_ERROR(EnqueueStep(UploadStep(batch, *cache), cache));
  if (num_logits == 0) {
    logits->clear();
    RETURN_IF_ERROR(comm_->Wait());  // Bounded, where a synchronize would wait on a dead peer.
    be.Synchronize();  // A kernel that failed asynchronously fails this step, not a later one.
    return CheckBackend(be, "forward pass");
  }
  RETURN_IF_ERROR(ReadLogits(num_logits, num_logits, logits, device_logits));
  return CheckBackend(be, "forward pass");
}

LlamaModel::StepView LlamaModel::UploadStep(const StepBatch& batch, const KvCache& cache) {
  // One upload for the whole step's metadata, queued without waiting (pinned staging on
  // CUDA): the host goes straight on to queueing the layers.
  Workspace& w = ws_;
  const StepMetadata meta(batch);
  w.metadata_host.resize(meta.bytes);
  Pack(batch.token_ids, meta.token_ids, &w.metadata_host);
  Pack(batch.positions, meta.positions, &w.metadata_host);
  Pack(batch.slot_mapping, meta.slots, &w.metadata_host);
  Pack(batch.query_start, meta.query_start, &w.metadata_host);
  Pack(batch.context_lens, meta.context_lens, &w.metadata_host);
  Pack(batch.block_tables, meta.block_tables, &w.metadata_host);
  Pack(batch.logits_rows, meta.logits_rows, &w.metadata_host);
  backend_->CopyToDeviceAsync(w.metadata.get(), w.metadata_host.data(), meta.bytes);
  auto* device_meta = static_cast<uint8_t*>(w.metadata.get());

  StepView v;
  v.num_tokens = batch.num_tokens();
  v.token_ids = reinterpret_cast<const int32_t*>(device_meta + meta.token_ids);
  v.positions = reinterpret_cast<const int32_t*>(device_meta + meta.positions);
  v.slots = reinterpret_cast<const int64_t*>(device_meta + meta.slots);
  v.num_logits = static_cast<int>(batch.logits_rows.size());
  v.logits_rows = reinterpret_cast<const int32_t*>(device_meta + meta.logits_rows);
  kernels::AttentionBatch& a = v.attention;
  a.num_seqs = batch.num_seqs();
  a.num_tokens = batch.num_tokens();
  a.query_start = reinterpret_cast<const int32_t*>(device_meta + meta.query_start);
  a.context_lens = reinterpret_cast<const int32_t*>(device_meta + meta.context_lens);
  a.block_tables = reinterpret_cast<const int32_t*>(device_meta + meta.block_tables);
  a.max_blocks_per_seq = batch.max_blocks_per_seq;
  a.slot_mapping = v.slots;
  while (a.num_decode_seqs < a.num_seqs &&
         batch.query_start[a.num_decode_seqs + 1] - batch.query_start[a.num_decode_seqs] == 1) {
    ++a.num_decode_seqs;
  }
  kernels::AttentionBatch host = a;
  host.query_start = batch.query_start.data();
  host.context_lens = batch.context_lens.data();
  host.block_tables = batch.block_tables.data();
  host.slot_mapping = batch.slot_mapping.data();
  backend_->PlanAttention(host, cache.shape(), static_cast<int>(layout_.q_heads.size()));
  return v;
}

absl::Status LlamaModel::EnqueueStep(const StepView& step, KvCache* cache) {
  kernels::Backend& be = *backend_;
  Workspace& w = ws_;
  const int n = step.num_tokens;
  kernels::AttentionBatch attn_batch = step.attention;
  const int h = config_.hidden_size, hd = config_.head_dim;
  const int nq = static_cast<int>(layout_.q_heads.size());
  const int nkv = static_cast<int>(layout_.kv_heads.size());
  const int qkv_dim = (nq + 2 * nkv) * hd;
  const int inter = static_cast<int>(layout_.intermediate.size());
  const float eps = config_.rms_norm_eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Activation buffers are untyped: their elements are `act` bytes (4 for float32, 2 for
  // BF16), so offsets into them are computed in bytes.
  const DType act_dtype = be.activation_dtype();
  const size_t act = DTypeSize(act_dtype);
  float* hidden = w.hidden.as<float>();
  char* normed = w.normed.as<char>();
  char* qkv = w.qkv.as<char>();
  char* proj = w.proj.as<char>();
  void* attn = w.attn.get();
  void* gate_up = w.gate_up.get();
  void* mlp = w.act.get();

  be.EmbeddingGather(step.token_ids, n, weights_.embed.view, layout_.vocab.begin, hidden);
  RETURN_IF_ERROR(comm_->AllReduceSum(hidden, static_cast<size_t>(n) * h));

  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    const LayerWeights& lw = weights_.layers[l];
    if (l == 0) {
      be.RmsNorm(hidden, lw.input_norm.as<float>(), n, h, eps, normed);
    } else {
      be.AddRmsNorm(hidden, proj, lw.input_norm.as<float>(), n, h, eps, normed);
    }
    be.Gemm(normed, n, lw.qkv.view, qkv);
    if (lw.qkv_bias.get() != nullptr) be.AddBias(qkv, lw.qkv_bias.as<float>(), n, qkv_dim);
    if (lw.q_norm.get() != nullptr) {
      be.HeadRmsNorm(qkv, n, qkv_dim, nq, hd, lw.q_norm.as<float>(), eps);
      be.HeadRmsNorm(qkv + static_cast<size_t>(nq) * hd * act, n, qkv_dim, nkv, hd,
                     lw.k_norm.as<float>(), eps);
    }
    be.Rope(qkv, n, qkv_dim, step.positions, nq, nkv, hd, rope_inv_freq_.as<float>(),
            rope_scale_);
    attn_batch.sliding_window = config_.SlidingWindowOf(l);
    be.WriteKvCache(qkv + static_cast<size_t>(nq) * hd * act,
                    qkv + static_cast<size_t>(nq + nkv) * hd * act, qkv_dim, step.slots, n,
                    cache->shape(), cache->k(l), cache->v(l));
    be.PagedAttention(qkv, qkv_dim, attn_batch, cache->k(l), cache->v(l), cache->shape(), nq,
                      scale, attn);
    be.Gemm(attn, n, lw.o.view, proj);
    RETURN_IF_ERROR(comm_->AllReduceSum(proj, static_cast<size_t>(n) * h, act_dtype));
    if (lw.o_bias.get() != nullptr) be.AddBias(proj, lw.o_bias.as<float>(), n, h);
    be.AddRmsNorm(hidden, proj, lw.post_norm.as<float>(), n, h, eps, normed);
    if (lw.is_moe()) {
      EnqueueMoe(lw, n, normed, proj);
    } else {
      be.Gemm(normed, n, lw.gate_up.view, gate_up);
      be.SiluMul(gate_up, n, inter, mlp);
      be.Gemm(mlp, n, lw.down.view, proj);
    }
    RETURN_IF_ERROR(comm_->AllReduceSum(proj, static_cast<size_t>(n) * h, act_dtype));
  }
  const int rows = step.num_logits;
  if (rows == 0) return absl::OkStatus();
  be.AddRmsNorm(hidden, proj, weights_.final_norm.as<float>(), n, h, eps, normed);
  // The rows are read on the device, so a graph replays for any choice of them.
  char* selected = w.selected.as<char>();
  be.GatherRows(normed, step.logits_rows, rows, static_cast<size_t>(h) * act, selected);
  // The logits are float32 whatever the activation dtype (sampling reads them).
  const int world = layout_.world;
  float* local_logits = w.logits_local.as<float>();
  if (world == 1) {
    be.Gemm(selected, rows, weights_.lm_head_view(), local_logits, DType::kF32);
    return absl::OkStatus();
  }
  // Vocab shards differ by at most one row: pad each to vmax so all-gather sees equal parts.
  const size_t local = layout_.vocab.size();
  const size_t vmax = EvenSplit(config_.vocab_size, 0, world).size();
  float* padded = local_logits + rows * vmax * world;  // Past the gather's receive area.
  float* gathered = local_logits;
  // The receive area is free until the gather: compute there, then re-stride into `padded`.
  be.Gemm(selected, rows, weights_.lm_head_view(), gathered, DType::kF32);
  if (local == vmax) {
    be.CopyOnDevice(padded, gathered, rows * vmax * sizeof(float));
  } else {
    for (int r = 0; r < rows; ++r) {
      be.CopyOnDevice(padded + r * vmax, gathered + r * local, local * sizeof(float));
    }
  }
  return comm_->AllGather(padded, rows * vmax, gathered);
}

void LlamaModel::EnqueueMoe(const LayerWeights& lw, int n, const void* normed, void* out) {
  kernels::Backend& be = *backend_;
  Workspace& w = ws_;
  const MoeConfig& m = config_.moe;
  const int h = config_.hidden_size;
  // Every rank routes every token (the router is whole everywhere, so all agree); each
  // then runs the experts it holds, or its slice of every expert, and the all-reduce that
  // follows sums the parts, as for a dense MLP.
  float* router_logits = w.router_logits.as<float>();
  int32_t* ids = w.expert_ids.as<int32_t>();
  float* weights = w.expert_weights.as<float>();
  be.Gemm(normed, n, lw.router.view, router_logits, DType::kF32);
  be.MoeRoute(router_logits, n, m.num_experts, m.top_k, m.normalize_top_k, ids, weights);
  be.MoeExperts(normed, n, h, ids, weights, m.top_k, lw.experts(), out);
  if (!lw.has_shared_expert()) return;
  const int shared = static_cast<int>(layout_.shared_intermediate.size());
  be.Gemm(normed, n, lw.shared_gate_up.view, w.gate_up.get());
  be.SiluMul(w.gate_up.get(), n, shared, w.act.get());
  be.Gemm(w.act.get(), n, lw.shared_down.view, w.shared_out.get());
  be.Gemm(normed, n, lw.shared_gate.view, w.shared_gate.as<float>(), DType::kF32);
  be.AddSigmoidGated(out, w.shared_out.get(), w.shared_gate.as<float>(), n, h);
}

absl::Status LlamaModel::ReadLogits(int rows, int keep, std::vector<float>* logits,
                                    const float** device_logits) {
  kernels::Backend& be = *backend_;
  const int world = layout_.world;
  const size_t vocab = config_.vocab_size;
  const size_t vmax = EvenSplit(config_.vocab_size, 0, world).size();
  float* local_logits = ws_.logits_local.as<float>();
  // Collectives may only be queued; what follows reads their results.
  RETURN_IF_ERROR(comm_->Wait());
  if (device_logits != nullptr) {
    logits->clear();
  } else {
    logits->resize(keep * vocab);
  }
  if (world == 1) {
    if (device_logits != nullptr) {
      *device_logits = local_logits;
      return absl::OkStatus();
    }
    be.CopyToHost(logits->data(), local_logits, keep * vocab * sizeof(float));
    return absl::OkStatus();
  }
  // Gathered: [world][rows][vmax] -> [keep][vocab].
  const float* gathered = local_logits;
  if (device_logits != nullptr) {
    RETURN_IF_ERROR(Reserve(backend_, &ws_.logits_device, keep * vocab * sizeof(float),
                            "gathered logits"));
    float* full = ws_.logits_device.as<float>();
    for (int rank = 0; rank < world; ++rank) {
      const Range part = EvenSplit(config_.vocab_size, rank, world);
      for (int r = 0; r < keep; ++r) {
        be.CopyOnDevice(full + r * vocab + part.begin,
                        gathered + (static_cast<size_t>(rank) * rows + r) * vmax,
                        part.size() * sizeof(float));
      }
    }
    *device_logits = full;
    return absl::OkStatus();
  }
  std::vector<float> host(static_cast<size_t>(world) * rows * vmax);
  be.CopyToHost(host.data(), gathered, host.size() * sizeof(float));
  for (int rank = 0; rank < world; ++rank) {
    const Range part = EvenSplit(config_.vocab_size, rank, world);
    for (int r = 0; r < keep; ++r) {
      std::memcpy(logits->data() + r * vocab + part.begin,
                  host.data() + (static_cast<size_t>(rank) * rows + r) * vmax,
                  part.size() * sizeof(float));
    }
  }
  return absl::OkStatus();
}

namespace {

// Block-table width of every graph: the most blocks a sequence can hold.
int GraphBlocks(const ModelConfig& config, const kernels::KvCacheShape& shape) {
  const int for_context =
      (config.max_position_embeddings + shape.block_size - 1) / shape.block_size;
  return std::min(for_context, shape.num_blocks);
}

// Graphs captured at most (for one workspace and cache). Decode takes 13 sizes; the other
// shapes are captured as they occur, and a steady load repeats a few of them.
constexpr size_t kMaxGraphs = 128;

}  // namespace

std::optional<GraphShape> LlamaModel::GraphShapeOf(const StepBatch& batch,
                                                   const KvCache& cache) const {
  if (!graphs_enabled_ || !backend_->SupportsGraphs() || !comm_->Capturable()) {
    return std::nullopt;
  }
  GraphLimits limits;
  limits.width = GraphBlocks(config_, cache.shape());
  limits.block_size = cache.shape().block_size;
  if (ws_.reserved) {
    // Past the warmed-up workspace a step would reallocate it and drop every graph.
    limits.max_tokens = ws_.tokens;
    limits.max_seqs = ws_.seqs;
    limits.max_logits = ws_.logits;
  }
  std::optional<GraphShape> shape = GraphShapeFor(batch, limits);
  if (!shape.has_value()) return std::nullopt;
  if (!graphs_.contains(*shape) && graphs_.size() >= kMaxGraphs) return std::nullopt;
  return shape;
}

absl::Status LlamaModel::ForwardWithGraph(const StepBatch& batch, const GraphShape& shape,
                                          KvCache* cache, std::vector<float>* logits,
                                          const float** device_logits) {
  kernels::Backend& be = *backend_;
  const int width = GraphBlocks(config_, cache->shape());
  const StepBatch padded = PadToGraphShape(batch, shape, width);
  RETURN_IF_ERROR(EnsureWorkspace(shape.tokens, shape.seqs, width, shape.logits));
  // Uploaded (and planned: Backend::PlanAttention may grow the backend's scratch) before the
  // epoch is compared, so a plan that moved a buffer drops the graphs that baked it in.
  const StepView step = UploadStep(padded, *cache);
  // Graphs bake in pointers: the workspace's, the cache's and the backend's scratch.
  if (graphs_generation_ != ws_.generation || graphs_cache_ != cache ||
      graphs_epoch_ != be.GraphEpoch()) {
    be.ClearGraphs();
    graphs_.clear();
    graphs_generation_ = ws_.generation;
    graphs_cache_ = cache;
    graphs_epoch_ = be.GraphEpoch();
  }
  const int kind = KindIndex(StepKindOf(batch));
  if (auto it = graphs_.find(shape); it != graphs_.end()) {
    be.LaunchGraph(it->second);
    ++forward_counts_.replayed[kind];
  } else {
    // This step runs eagerly, which also grows every scratch buffer the step needs; then
    // the same ops are recorded for the next steps of this shape.
    RETURN_IF_ERROR(EnqueueStep(step, cache));
    if (graphs_epoch_ == be.GraphEpoch() && be.BeginCapture()) {
      const absl::Status captured = EnqueueStep(step, cache);
      const int id = be.EndCapture();
      RETURN_IF_ERROR(captured);
      if (id >= 0) {
        graphs_[shape] = id;
        ++forward_counts_.captured[kind];
      } else {
        graphs_enabled_ = false;  // Logged by the backend; eager from now on.
        ++forward_counts_.eager[kind];
      }
    } else {
      ++forward_counts_.eager[kind];
    }
  }
  RETURN_IF_ERROR(ReadLogits(shape.logits, static_cast<int>(batch.logits_rows.size()), logits,
                             device_logits));
  return CheckBackend(be, "forward pass (graph)");
}

LlamaModel::ReservedSizes LlamaModel::ReservedSizesFor(int max_num_seqs, int max_num_tokens,
                                                       int max_num_logits) const {
  max_num_seqs = std::max(max_num_seqs, 1);
  max_num_tokens = std::max(max_num_tokens, max_num_seqs);
  max_num_logits = std::clamp(max_num_logits, max_num_seqs, max_num_tokens);
  if (!backend_->SupportsGraphs()) return {max_num_tokens, max_num_seqs, max_num_logits};
  // Padded to graph shapes. Tokens: padding adds at most 255 of rounding, 64 padding
  // decode sequences and a power of two of other sequences (at most their count plus one);
  // 512 cover all three for up to 128 other sequences. Sequences: a decode bucket is at
  // most 1.6 times its count (5 -> 8), the others' at most twice theirs plus one.
  return {max_num_tokens + 512, 2 * max_num_seqs + 2,
          std::max(GraphTokenBucket(max_num_logits), DecodeGraphSize(std::min(max_num_seqs, 256)))};
}

size_t LlamaModel::ReservedWorkspaceBytes(int max_num_seqs, int max_num_tokens,
                                          int max_num_logits, int max_blocks) const {
  const ReservedSizes sizes = ReservedSizesFor(max_num_seqs, max_num_tokens, max_num_logits);
  return WorkspaceBytes(sizes.tokens, sizes.seqs, max_blocks, sizes.logits);
}

absl::StatusOr<WarmupReport> LlamaModel::WarmUp(KvCache* cache, int max_num_seqs,
                                                int max_num_tokens, int max_num_logits) {
  WarmupReport report;
  if (!backend_->SupportsGraphs() || !comm_->Capturable() || !graphs_enabled_) return report;
  const absl::Time start = absl::Now();
  kernels::Backend& be = *backend_;
  const int width = GraphBlocks(config_, cache->shape());
  // The workspace for the largest step padded to its graph shape, once: a buffer that moved
  // later would invalidate every graph captured before it.
  const ReservedSizes sizes = ReservedSizesFor(max_num_seqs, max_num_tokens, max_num_logits);
  RETURN_IF_ERROR(EnsureWorkspace(sizes.tokens, sizes.seqs, width, sizes.logits));
  ws_.reserved = true;
  report.workspace_bytes = WorkspaceBytes(sizes.tokens, sizes.seqs, width, sizes.logits);
  // One eager step at the largest size grows the backend's own scratch (GEMM and attention
  // workspaces) before any graph records pointers into it: padding tokens only, which
  // write no KV.
  {
    StepBatch biggest;
    biggest.max_blocks_per_seq = width;
    const int tokens = std::min(sizes.tokens, width * cache->shape().block_size);
    biggest.AddPaddingSequence(tokens);
    biggest.logits_rows = {tokens - 1};
    std::vector<float> ignored;
    RETURN_IF_ERROR(ForwardEager(biggest, cache, &ignored, nullptr));
  }
  // Decode batches of every graph size at the graphs' block-table width (their padded
  // shape already), padding sequences only.
  auto decode_batch = [width](int size) {
    StepBatch decode;
    decode.max_blocks_per_seq = width;
    for (int s = 0; s < size; ++s) {
      decode.AddPaddingSequence(1);
      decode.logits_rows.push_back(s);
    }
    return decode;
  };
  const int largest_decode = DecodeGraphSize(std::min(max_num_seqs, 256));
  std::vector<float> logits;
  // Every decode size once, eagerly, before any capture: the split-KV attention's partials
  // depend on the batch (not monotonically), and scratch that moved after a capture would
  // drop the graphs captured before it.
  for (int size : kDecodeGraphSizes) {
    if (size > largest_decode) break;
    RETURN_IF_ERROR(ForwardEager(decode_batch(size), cache, &logits, nullptr));
  }
  const size_t free_before = be.FreeMemoryBytes();
  for (int size : kDecodeGraphSizes) {
    if (size > largest_decode) break;
    const StepBatch decode = decode_batch(size);
    const std::optional<GraphShape> shape = GraphShapeOf(decode, *cache);
    if (!shape.has_value()) break;
    RETURN_IF_ERROR(ForwardWithGraph(decode, *shape, cache, &logits, nullptr));
  }
  const size_t free_after = be.FreeMemoryBytes();
  report.graphs_captured = static_cast<int>(graphs_.size());
  report.graph_bytes = free_before > free_after ? free_before - free_after : 0;
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // Warm-up passes are not traffic.
  forward_counts_ = ForwardCounts();
  return report;
}

}  // namespace tessera
