#include "worker/llama_model.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/backend_factory.h"

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

// Where each array of a step's metadata sits in the packed upload: 16-byte aligned offsets.
struct StepMetadata {
  size_t token_ids, positions, slots, query_start, context_lens, block_tables, bytes;

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
    if (b.slot_mapping[i] < 0 || b.slot_mapping[i] >= max_slot) {
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

void StepBatch::AddSequence(absl::Span<const int32_t> tokens, absl::Span<const int32_t> blocks,
                            int begin, int end, int block_size, bool wants_logits) {
  if (query_start.empty()) query_start.push_back(0);
  for (int pos = begin; pos < end; ++pos) {
    token_ids.push_back(tokens[pos]);
    positions.push_back(pos);
    slot_mapping.push_back(static_cast<int64_t>(blocks[pos / block_size]) * block_size +
                           pos % block_size);
  }
  query_start.push_back(num_tokens());
  context_lens.push_back(end);
  for (int b = 0; b < max_blocks_per_seq; ++b) {
    block_tables.push_back(b < static_cast<int>(blocks.size()) ? blocks[b] : 0);
  }
  if (wants_logits) logits_rows.push_back(num_tokens() - 1);
}

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

absl::Status LlamaModel::EnsureWorkspace(int tokens, int seqs, int blocks, int num_logits) {
  Workspace& w = ws_;
  if (tokens <= w.tokens && seqs <= w.seqs && blocks <= w.blocks && num_logits <= w.logits) {
    return absl::OkStatus();
  }
  // Grow geometrically so a growing batch does not reallocate every step.
  tokens = std::max(tokens, w.tokens);
  seqs = std::max(seqs, w.seqs);
  blocks = std::max(blocks, w.blocks);
  num_logits = std::max(num_logits, w.logits);
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
  RETURN_IF_ERROR(Reserve(backend_, &w.hidden, t * h * f, "hidden states"));
  RETURN_IF_ERROR(Reserve(backend_, &w.normed, t * h * a, "normed states"));
  RETURN_IF_ERROR(Reserve(backend_, &w.qkv, t * (nq + 2 * nkv) * hd * a, "qkv"));
  RETURN_IF_ERROR(Reserve(backend_, &w.attn, t * nq * hd * a, "attention output"));
  RETURN_IF_ERROR(Reserve(backend_, &w.proj, t * h * a, "projection output"));
  RETURN_IF_ERROR(Reserve(backend_, &w.gate_up, t * 2 * inter * a, "gate/up"));
  RETURN_IF_ERROR(Reserve(backend_, &w.act, t * inter * a, "MLP activation"));
  RETURN_IF_ERROR(Reserve(backend_, &w.selected, num_logits * h * a, "logit rows"));
  if (config_.is_moe()) {
    const size_t experts = config_.moe.num_experts, top_k = config_.moe.top_k;
    RETURN_IF_ERROR(Reserve(backend_, &w.router_logits, t * experts * f, "router logits"));
    RETURN_IF_ERROR(Reserve(backend_, &w.expert_ids, t * top_k * sizeof(int32_t), "expert ids"));
    RETURN_IF_ERROR(Reserve(backend_, &w.expert_weights, t * top_k * f, "expert weights"));
    if (config_.moe.shared_intermediate_size > 0) {
      RETURN_IF_ERROR(Reserve(backend_, &w.shared_out, t * h * a, "shared expert output"));
      RETURN_IF_ERROR(Reserve(backend_, &w.shared_gate, t * f, "shared expert gate"));
    }
  }
  RETURN_IF_ERROR(Reserve(backend_, &w.logits_local,
                          num_logits * vocab_max * f * (world + 1), "logits"));
  // Token ids, positions, slots (8 bytes), query starts, context lengths, block tables,
  // each padded to 16 bytes: StepMetadata's packing at these sizes.
  const size_t metadata = t * (4 + 4 + 8) + (seqs + 1) * 4 + seqs * 4 +
                          static_cast<size_t>(seqs) * blocks * 4 + 6 * 16;
  RETURN_IF_ERROR(Reserve(backend_, &w.metadata, metadata, "step metadata"));
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
  if (GraphEligible(batch, *cache)) return ForwardWithGraph(batch, cache, logits, device_logits);
  const int num_logits = static_cast<int>(batch.logits_rows.size());
  RETURN_IF_ERROR(EnsureWorkspace(batch.num_tokens(), batch.num_seqs(), batch.max_blocks_per_seq,
                                  std::max(num_logits, 1)));
  kernels::Backend& be = *backend_;
  RETURN_IF_ERROR(EnqueueStep(UploadStep(batch), cache, batch.logits_rows));
  if (num_logits == 0) {
    logits->clear();
    RETURN_IF_ERROR(comm_->Wait());  // Bounded, where a synchronize would wait on a dead peer.
    be.Synchronize();  // A kernel that failed asynchronously fails this step, not a later one.
    return CheckBackend(be, "forward pass");
  }
  RETURN_IF_ERROR(ReadLogits(num_logits, num_logits, logits, device_logits));
  return CheckBackend(be, "forward pass");
}

LlamaModel::StepView LlamaModel::UploadStep(const StepBatch& batch) {
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
  backend_->CopyToDeviceAsync(w.metadata.get(), w.metadata_host.data(), meta.bytes);
  auto* device_meta = static_cast<uint8_t*>(w.metadata.get());

  StepView v;
  v.num_tokens = batch.num_tokens();
  v.token_ids = reinterpret_cast<const int32_t*>(device_meta + meta.token_ids);
  v.positions = reinterpret_cast<const int32_t*>(device_meta + meta.positions);
  v.slots = reinterpret_cast<const int64_t*>(device_meta + meta.slots);
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
  return v;
}

absl::Status LlamaModel::EnqueueStep(const StepView& step, KvCache* cache,
                                     const std::vector<int32_t>& logits_rows) {
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
  const int rows = static_cast<int>(logits_rows.size());
  if (rows == 0) return absl::OkStatus();
  be.AddRmsNorm(hidden, proj, weights_.final_norm.as<float>(), n, h, eps, normed);
  char* selected = w.selected.as<char>();
  const size_t row_bytes = static_cast<size_t>(h) * act;
  for (int i = 0; i < rows; ++i) {
    be.CopyOnDevice(selected + static_cast<size_t>(i) * row_bytes,
                    normed + static_cast<size_t>(logits_rows[i]) * row_bytes, row_bytes);
  }
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

// Decode batch sizes with a graph of their own; a batch runs in the smallest that holds it
// (the padding rows are dummy sequences on the null block).
constexpr int kGraphSizes[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256};

int GraphSizeFor(int seqs) {
  for (int size : kGraphSizes) {
    if (seqs <= size) return size;
  }
  return 0;
}

// Block-table width of every graph: the most blocks a sequence can hold.
int GraphBlocks(const ModelConfig& config, const kernels::KvCacheShape& shape) {
  const int for_context =
      (config.max_position_embeddings + shape.block_size - 1) / shape.block_size;
  return std::min(for_context, shape.num_blocks);
}

}  // namespace

bool LlamaModel::GraphEligible(const StepBatch& batch, const KvCache& cache) const {
  if (!graphs_enabled_ || !backend_->SupportsGraphs() || !comm_->Capturable()) return false;
  const int seqs = batch.num_seqs();
  return batch.num_tokens() == seqs && static_cast<int>(batch.logits_rows.size()) == seqs &&
         GraphSizeFor(seqs) > 0 &&
         batch.max_blocks_per_seq <= GraphBlocks(config_, cache.shape());
}

absl::Status LlamaModel::ForwardWithGraph(const StepBatch& batch, KvCache* cache,
                                          std::vector<float>* logits,
                                          const float** device_logits) {
  kernels::Backend& be = *backend_;
  const int seqs = batch.num_seqs();
  const int size = GraphSizeFor(seqs);
  const int width = GraphBlocks(config_, cache->shape());
  // The batch at the graph's shape: block tables widened to `width`, then dummy sequences
  // (token 0 at position 0, K/V into the null block 0, which no sequence owns) up to `size`.
  StepBatch padded;
  padded.max_blocks_per_seq = width;
  padded.query_start.push_back(0);
  for (int s = 0; s < size; ++s) {
    const bool real = s < seqs;
    padded.token_ids.push_back(real ? batch.token_ids[s] : 0);
    padded.positions.push_back(real ? batch.positions[s] : 0);
    padded.slot_mapping.push_back(real ? batch.slot_mapping[s] : 0);
    padded.query_start.push_back(s + 1);
    padded.context_lens.push_back(real ? batch.context_lens[s] : 1);
    for (int b = 0; b < width; ++b) {
      padded.block_tables.push_back(
          real && b < batch.max_blocks_per_seq
              ? batch.block_tables[static_cast<size_t>(s) * batch.max_blocks_per_seq + b]
              : 0);
    }
    padded.logits_rows.push_back(s);
  }
  RETURN_IF_ERROR(EnsureWorkspace(size, size, width, size));
  // Graphs bake in pointers: the workspace's, the cache's and the backend's scratch.
  if (graphs_generation_ != ws_.generation || graphs_cache_ != cache ||
      graphs_epoch_ != be.GraphEpoch()) {
    be.ClearGraphs();
    graphs_.clear();
    graphs_generation_ = ws_.generation;
    graphs_cache_ = cache;
    graphs_epoch_ = be.GraphEpoch();
  }
  const StepView step = UploadStep(padded);
  if (auto it = graphs_.find(size); it != graphs_.end()) {
    be.LaunchGraph(it->second);
  } else {
    // This step runs eagerly, which also grows every scratch buffer the step needs; then
    // the same ops are recorded for the next steps of this size.
    RETURN_IF_ERROR(EnqueueStep(step, cache, padded.logits_rows));
    if (graphs_epoch_ == be.GraphEpoch() && be.BeginCapture()) {
      const absl::Status captured = EnqueueStep(step, cache, padded.logits_rows);
      const int id = be.EndCapture();
      RETURN_IF_ERROR(captured);
      if (id >= 0) {
        graphs_[size] = id;
      } else {
        graphs_enabled_ = false;  // Logged by the backend; eager from now on.
      }
    }
  }
  RETURN_IF_ERROR(ReadLogits(size, seqs, logits, device_logits));
  return CheckBackend(be, "forward pass (graph)");
}

}  // namespace tessera
