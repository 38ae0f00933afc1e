#include "worker/model_weights.h"

#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint_quantization.h"
#include "common/gguf_quants.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/cpu/int8_blocked.h"
#include "worker/fp8_checkpoint.h"
#include "worker/gguf_weights.h"
#include "worker/int4_weights.h"
#include "worker/weight_quantizer.h"

namespace tessera {
namespace {

// One slice of a checkpoint tensor that goes into a fused matrix.
struct Part {
  std::string name;
  std::vector<int64_t> full_shape;  // Checked against the file.
  Range rows;
  Range cols;
};

class Loader {
 public:
  Loader(const Checkpoint& checkpoint, kernels::Backend* backend, int total,
         const LoadProgress& progress, const Int4QuantConfig* int4, const Fp8QuantConfig* fp8,
         WeightQuantization quantization)
      : checkpoint_(checkpoint),
        backend_(backend),
        total_(total),
        progress_(progress),
        int4_(int4),
        fp8_(fp8),
        quantization_(quantization) {}

  absl::Status CheckShape(const Part& part) {
    ASSIGN_OR_RETURN(const TensorInfo* info, checkpoint_.Info(part.name));
    if (info->shape != part.full_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint_.dir().string(), ": tensor ", part.name, " has shape [",
          absl::StrJoin(info->shape, ", "), "], config.json implies [",
          absl::StrJoin(part.full_shape, ", "), "]"));
    }
    return absl::OkStatus();
  }

  // A linear layer: FP8 as the checkpoint stores it, or quantized over this rank's slice
  // when asked to.
  absl::StatusOr<DeviceMatrix> Linear(const std::vector<Part>& parts) {
    ASSIGN_OR_RETURN(const bool fp8, IsFp8(parts));
    if (fp8) return Fp8(parts);
    if (quantization_ == WeightQuantization::kNone) {
      ASSIGN_OR_RETURN(std::optional<DeviceMatrix> native, GgufNativeMatrix(parts));
      if (native) return std::move(*native);
      return Matrix(parts);
    }
    for (const Part& p : parts) RETURN_IF_ERROR(CheckShape(p));
    const int64_t cols = parts[0].cols.size();
    int64_t rows = 0;
    for (const Part& p : parts) rows += p.rows.size();
    std::vector<float> staging(static_cast<size_t>(rows * cols));
    size_t offset = 0;
    for (const Part& p : parts) {
      RETURN_IF_ERROR(
          checkpoint_.ReadSlice(p.name, p.rows, p.cols, DType::kF32, staging.data() + offset));
      offset += static_cast<size_t>(p.rows.size() * cols);
    }
    const DType dtype = QuantizedDType(quantization_);
    std::vector<uint8_t> quantized(staging.size());
    std::vector<float> scales(rows * QuantizedScalesPerRow(quantization_, cols));
    QuantizeRows(quantization_, staging.data(), rows, cols, quantized.data(), scales.data());
    if (dtype == DType::kI8) return Int8(parts[0].name, rows, cols, quantized, scales);
    return Upload(parts[0].name, dtype, rows, cols, quantized, scales);
  }

  // Group-wise int8 codes [rows, cols] with their scales [rows, cols / 32], in the
  // backend's int8 layout.
  absl::StatusOr<DeviceMatrix> Int8(const std::string& name, int64_t rows, int64_t cols,
                                    const std::vector<uint8_t>& quantized,
                                    const std::vector<float>& scales) {
    const DType dtype = DType::kI8;
    if (backend_->Int8WeightLayout() == kernels::WeightLayout::kInt8Blocked16) {
      // Scales inside the packed matrix: one allocation.
      std::vector<uint8_t> packed(kernels::Int8BlockedShape{rows, cols}.bytes());
      kernels::PackInt8Blocked(reinterpret_cast<const int8_t*>(quantized.data()),
                               scales.data(), rows, cols, packed.data());
      ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(backend_, packed.size(), name));
      backend_->CopyToDevice(buffer.get(), packed.data(), packed.size());
      DeviceMatrix m;
      m.view = {buffer.get(), dtype, rows, cols};
      m.view.group_size = kInt8WeightGroup;
      m.view.layout = kernels::WeightLayout::kInt8Blocked16;
      m.buffer = std::move(buffer);
      Done(packed.size());
      return m;
    }
    return Upload(name, dtype, rows, cols, quantized, scales, kInt8WeightGroup);
  }

  // A GGUF linear layer whose block type Tessera's int8 (Q8_0) or int4 (Q4_0, Q4_1,
  // Q4_K) weights hold with the file's codes; nullopt when the parts are not all of one
  // such kind (then they are read as floats).
  absl::StatusOr<std::optional<DeviceMatrix>> GgufNativeMatrix(const std::vector<Part>& parts) {
    const GgufNative kind = GgufNativeFormat(checkpoint_, parts[0].name, parts[0].cols);
    if (kind == GgufNative::kNone) return std::nullopt;
    for (const Part& p : parts) {
      if (GgufNativeFormat(checkpoint_, p.name, p.cols) != kind) return std::nullopt;
      RETURN_IF_ERROR(CheckShape(p));
    }
    const int64_t cols = parts[0].cols.size();
    if (kind == GgufNative::kInt8) {
      std::vector<uint8_t> codes;
      std::vector<float> scales;
      int64_t rows = 0;
      for (const Part& p : parts) {
        ASSIGN_OR_RETURN(Int8Slice slice, ReadGgufInt8(checkpoint_, p.name, p.rows, p.cols));
        const auto* bytes = reinterpret_cast<const uint8_t*>(slice.codes.data());
        codes.insert(codes.end(), bytes, bytes + slice.codes.size());
        scales.insert(scales.end(), slice.scales.begin(), slice.scales.end());
        rows += slice.rows;
        native_[GgmlTypeName(checkpoint_.Gguf(p.name)->tensor->type)]++;
      }
      return Int8(parts[0].name, rows, cols, codes, scales);
    }
    std::vector<Int4Matrix> slices;
    for (const Part& p : parts) {
      absl::StatusOr<Int4Matrix> slice = ReadGgufInt4(checkpoint_, p.name, p.rows, p.cols);
      if (absl::IsFailedPrecondition(slice.status())) return std::nullopt;
      if (!slice.ok()) return slice.status();
      slices.push_back(*std::move(slice));
    }
    for (const Part& p : parts) native_[GgmlTypeName(checkpoint_.Gguf(p.name)->tensor->type)]++;
    ASSIGN_OR_RETURN(DeviceMatrix m, UploadInt4Matrix(slices, backend_, parts[0].name));
    Done(m.buffer.bytes());
    return m;
  }

  // One log line on how a GGUF file's tensors were served (nothing for safetensors).
  void LogGgufSummary() const {
    if (native_.empty() && dequantized_.empty()) return;
    const auto counts = [](const std::map<std::string, int>& by_type) -> std::string {
      if (by_type.empty()) return "none";
      return absl::StrJoin(by_type, ", ", [](std::string* out, const auto& entry) {
        absl::StrAppend(out, entry.second, " ", entry.first);
      });
    };
    Log(LogLevel::kInfo, "weights",
        absl::StrCat("GGUF tensors served with the file's codes: ", counts(native_),
                     "; dequantized at load: ", counts(dequantized_)));
  }

  // Stacks the FP8 row slices of `parts` with their scales: the scales follow their rows,
  // so a fused q/k/v of per-tensor scales holds three runs of repeated values.
  absl::StatusOr<DeviceMatrix> Fp8(const std::vector<Part>& parts) {
    std::vector<uint8_t> data;
    std::vector<float> scales;
    const int64_t cols = parts[0].cols.size();
    for (const Part& p : parts) {
      ASSIGN_OR_RETURN(Fp8Matrix m, ReadFp8Linear(checkpoint_, ModuleOfWeight(p.name),
                                                  p.full_shape[0], p.full_shape[1], p.rows, p.cols));
      data.insert(data.end(), m.data.begin(), m.data.end());
      scales.insert(scales.end(), m.scales.begin(), m.scales.end());
    }
    return Upload(parts[0].name, DType::kF8E4M3, static_cast<int64_t>(scales.size()), cols, data,
                  scales);
  }

  // Stacks the row blocks of `parts` (all with the same column count) into one matrix in
  // the dtype of the first part.
  absl::StatusOr<DeviceMatrix> Matrix(const std::vector<Part>& parts) {
    ASSIGN_OR_RETURN(const bool int4, IsInt4(parts));
    if (int4) return Int4(parts);
    for (const Part& p : parts) {
      RETURN_IF_ERROR(CheckShape(p));
      if (const GgufTensorRef* g = checkpoint_.Gguf(p.name); g != nullptr && GgmlBlockSize(g->tensor->type) > 1) {
        dequantized_[GgmlTypeName(g->tensor->type)]++;
      }
    }
    ASSIGN_OR_RETURN(const TensorInfo* first, checkpoint_.Info(parts[0].name));
    const DType dtype = first->dtype;
    if (dtype == DType::kF8E4M3 || dtype == DType::kI8) {
      // Without their scales these bytes mean nothing: only the linear layers of a
      // checkpoint whose config.json announces FP8 carry them.
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint_.dir().string(), ": tensor ", parts[0].name, " is stored as ",
          DTypeName(dtype), fp8_ == nullptr
              ? ", but config.json has no FP8 quantization_config to give its scales"
              : "; only linear layers (q/k/v/o, gate/up/down) may be FP8"));
    }
    const int64_t cols = parts[0].cols.size();
    int64_t rows = 0;
    for (const Part& p : parts) rows += p.rows.size();
    const size_t bytes = static_cast<size_t>(rows * cols) * DTypeSize(dtype);
    std::vector<uint8_t> staging(bytes);
    size_t offset = 0;
    for (const Part& p : parts) {
      RETURN_IF_ERROR(checkpoint_.ReadSlice(p.name, p.rows, p.cols, dtype, staging.data() + offset));
      offset += static_cast<size_t>(p.rows.size() * cols) * DTypeSize(dtype);
    }
    ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(backend_, bytes, parts[0].name));
    backend_->CopyToDevice(buffer.get(), staging.data(), bytes);
    DeviceMatrix m;
    m.view = {buffer.get(), dtype, rows, cols};
    m.buffer = std::move(buffer);
    Done(bytes);
    return m;
  }

  absl::StatusOr<DeviceBuffer> Vector(const std::string& name, int64_t size) {
    return FusedVector({{name, {size}, {0, 1}, {0, size}}});
  }

  // Concatenates slices `cols` of 1-D tensors (full_shape {n}) into one float vector.
  absl::StatusOr<DeviceBuffer> FusedVector(const std::vector<Part>& parts) {
    int64_t size = 0;
    for (const Part& p : parts) {
      RETURN_IF_ERROR(CheckShape(p));
      size += p.cols.size();
    }
    std::vector<float> staging(size);
    int64_t offset = 0;
    for (const Part& p : parts) {
      RETURN_IF_ERROR(
          checkpoint_.ReadSlice(p.name, {0, 1}, p.cols, DType::kF32, staging.data() + offset));
      offset += p.cols.size();
    }
    ASSIGN_OR_RETURN(DeviceBuffer buffer,
                     DeviceBuffer::Allocate(backend_, size * sizeof(float), parts[0].name));
    backend_->CopyToDevice(buffer.get(), staging.data(), size * sizeof(float));
    Done(size * sizeof(float));
    return buffer;
  }

  uint64_t bytes() const { return bytes_; }

 private:
  // True when the parts are GPTQ/AWQ layers (`<module>.qweight` instead of `.weight`).
  // Layers a quantizer left alone (lm_head, or shapes it cannot pack) keep `.weight`; a
  // fused matrix must not mix the two.
  absl::StatusOr<bool> IsInt4(const std::vector<Part>& parts) const {
    if (int4_ == nullptr) return false;
    int quantized = 0;
    for (const Part& p : parts) {
      if (checkpoint_.Has(ModuleOfWeight(p.name) + ".qweight")) ++quantized;
    }
    if (quantized != 0 && quantized != static_cast<int>(parts.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint_.dir().string(), ": ", parts[0].name,
          " and the layers fused with it must be all 4-bit (.qweight) or all unquantized"));
    }
    return quantized != 0;
  }

  // True when the parts are stored as FP8 (the dtype decides, see fp8_checkpoint.h). A
  // fused matrix must not mix FP8 and unquantized layers.
  absl::StatusOr<bool> IsFp8(const std::vector<Part>& parts) const {
    if (fp8_ == nullptr) return false;
    int quantized = 0;
    for (const Part& p : parts) {
      ASSIGN_OR_RETURN(const bool fp8, IsFp8Layer(checkpoint_, ModuleOfWeight(p.name)));
      quantized += fp8 ? 1 : 0;
    }
    if (quantized != 0 && quantized != static_cast<int>(parts.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint_.dir().string(), ": ", parts[0].name,
          " and the layers fused with it must be all FP8 or all unquantized"));
    }
    return quantized != 0;
  }

  // Puts a quantized [rows, cols] matrix and its per-row scales into backend memory.
  absl::StatusOr<DeviceMatrix> Upload(const std::string& name, DType dtype, int64_t rows,
                                      int64_t cols, const std::vector<uint8_t>& data,
                                      const std::vector<float>& scales, int group_size = 0) {
    ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(backend_, data.size(), name));
    backend_->CopyToDevice(buffer.get(), data.data(), data.size());
    const size_t scale_bytes = scales.size() * sizeof(float);
    ASSIGN_OR_RETURN(DeviceBuffer scale_buffer,
                     DeviceBuffer::Allocate(backend_, scale_bytes, name + " scales"));
    backend_->CopyToDevice(scale_buffer.get(), scales.data(), scale_bytes);
    DeviceMatrix m;
    m.view = {buffer.get(), dtype, rows, cols, static_cast<const float*>(scale_buffer.get()),
              group_size};
    m.buffer = std::move(buffer);
    m.scales = std::move(scale_buffer);
    Done(data.size() + scale_bytes);
    return m;
  }

  absl::StatusOr<DeviceMatrix> Int4(const std::vector<Part>& parts) {
    std::vector<Int4Part> int4_parts;
    for (const Part& p : parts) {
      int4_parts.push_back({ModuleOfWeight(p.name), p.full_shape[0], p.full_shape[1], p.rows,
                            p.cols});
    }
    ASSIGN_OR_RETURN(DeviceMatrix m, LoadInt4Matrix(checkpoint_, *int4_, int4_parts, backend_));
    Done(m.buffer.bytes());
    return m;
  }

  void Done(uint64_t bytes) {
    bytes_ += bytes;
    ++done_;
    if (progress_) progress_(done_, total_, bytes_);
  }

  const Checkpoint& checkpoint_;
  kernels::Backend* backend_;
  int total_;
  const LoadProgress& progress_;
  const Int4QuantConfig* int4_;  // Null: no GPTQ/AWQ quantization_config.
  const Fp8QuantConfig* fp8_;    // Null: no FP8 quantization_config.
  const WeightQuantization quantization_;
  int done_ = 0;
  uint64_t bytes_ = 0;
  std::map<std::string, int> native_, dequantized_;  // GGUF tensors by block type.
};

// The projection names of a SwiGLU MLP (without ".weight").
struct SwiGluNames {
  const char* gate;
  const char* up;
  const char* down;
};
constexpr SwiGluNames kLlamaMlp{"gate_proj", "up_proj", "down_proj"};
constexpr SwiGluNames kMixtralExpert{"w1", "w3", "w2"};

// One SwiGLU MLP under `prefix`, its intermediate dimension `inter` cut to `slice`: gate_up
// fused [2 * slice, hidden], down [hidden, slice].
absl::Status LoadSwiGlu(Loader* load, const std::string& prefix, const SwiGluNames& names,
                        int64_t h, int64_t inter, Range slice, DeviceMatrix* gate_up,
                        DeviceMatrix* down) {
  const Range all_h{0, h};
  const auto name = [&](const char* proj) { return absl::StrCat(prefix, proj, ".weight"); };
  ASSIGN_OR_RETURN(*gate_up, load->Linear({{name(names.gate), {inter, h}, slice, all_h},
                                           {name(names.up), {inter, h}, slice, all_h}}));
  ASSIGN_OR_RETURN(*down, load->Linear({{name(names.down), {h, inter}, all_h, slice}}));
  return absl::OkStatus();
}

// A mixture-of-experts layer under `p` ("model.layers.N."), in the checkpoint layout of
// its family: Mixtral's block_sparse_moe.{gate, experts.E.w1/w3/w2} or Qwen's
// mlp.{gate, experts.E.gate_proj/up_proj/down_proj, shared_expert.*, shared_expert_gate}.
absl::Status LoadExperts(const ModelConfig& c, const ShardLayout& s, const std::string& p,
                         Loader* load, LayerWeights* layer) {
  const int64_t h = c.hidden_size, inter = c.moe.intermediate_size;
  const bool mixtral = c.architecture == "MixtralForCausalLM";
  const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
  ASSIGN_OR_RETURN(layer->router, load->Matrix({{block + "gate.weight",
                                                 {c.moe.num_experts, h},
                                                 {0, c.moe.num_experts},
                                                 {0, h}}}));
  layer->first_expert = static_cast<int>(s.experts.begin);
  layer->expert_intermediate = static_cast<int>(s.expert_intermediate.size());
  for (int64_t e = s.experts.begin; e < s.experts.end; ++e) {
    DeviceMatrix gate_up, down;
    RETURN_IF_ERROR(LoadSwiGlu(load, absl::StrCat(block, "experts.", e, "."),
                               mixtral ? kMixtralExpert : kLlamaMlp, h, inter,
                               s.expert_intermediate, &gate_up, &down));
    layer->expert_gate_up_views.push_back(gate_up.view);
    layer->expert_down_views.push_back(down.view);
    layer->expert_gate_up.push_back(std::move(gate_up));
    layer->expert_down.push_back(std::move(down));
  }
  const int64_t shared = c.moe.shared_intermediate_size;
  if (shared > 0) {
    RETURN_IF_ERROR(LoadSwiGlu(load, block + "shared_expert.", kLlamaMlp, h, shared,
                               s.shared_intermediate, &layer->shared_gate_up,
                               &layer->shared_down));
    ASSIGN_OR_RETURN(layer->shared_gate,
                     load->Matrix({{block + "shared_expert_gate.weight", {1, h}, {0, 1}, {0, h}}}));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelWeights> LoadModelWeights(const Checkpoint& checkpoint,
                                              const ModelConfig& c, const ShardLayout& s,
                                              kernels::Backend* backend,
                                              const LoadProgress& progress,
                                              WeightQuantization quantization) {
  const int64_t h = c.hidden_size, hd = c.head_dim, inter = c.intermediate_size;
  const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads, vocab = c.vocab_size;
  const Range all_h{0, h};
  const Range q_rows{s.q_heads.begin * hd, s.q_heads.end * hd};
  const Range kv_rows{s.kv_heads.begin * hd, s.kv_heads.end * hd};

  // GPTQ/AWQ and FP8 checkpoints announce themselves in config.json (tests may load a
  // folder without one: then there is nothing quantized to find). The FP8 parser answers
  // nullopt for the methods it does not own; the 4-bit one refuses every other method.
  std::optional<Int4QuantConfig> int4;
  std::optional<Fp8QuantConfig> fp8;
  if (std::filesystem::exists(checkpoint.dir() / "config.json")) {
    ASSIGN_OR_RETURN(fp8, LoadFp8QuantConfig(checkpoint.dir()));
    if (!fp8) {
      ASSIGN_OR_RETURN(int4, LoadInt4QuantConfig(checkpoint.dir()));
    }
  }
  if (fp8) {
    RETURN_IF_ERROR(CheckLoadTimeQuantization(WeightQuantizationName(quantization), "fp8",
                                              checkpoint.dir().string()));
  }
  if (int4 && quantization != WeightQuantization::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        checkpoint.dir().string(), " is already 4-bit quantized; --quantization ",
        WeightQuantizationName(quantization), " cannot be applied to it"));
  }

  ModelWeights w;
  w.tied = c.tie_word_embeddings || !checkpoint.Has("lm_head.weight");
  int total = 2 + (w.tied ? 0 : 1) +
              c.num_hidden_layers * (4 + (c.qkv_bias ? 1 : 0) + (c.o_bias ? 1 : 0) +
                                     (c.qk_norm ? 2 : 0));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    total += c.IsMoeLayer(l) ? 1 + 2 * static_cast<int>(s.experts.size()) +
                                   (c.moe.shared_intermediate_size > 0 ? 3 : 0)
                             : 2;
  }
  Loader load(checkpoint, backend, total, progress, int4 ? &*int4 : nullptr,
              fp8 ? &*fp8 : nullptr, quantization);

  ASSIGN_OR_RETURN(w.embed, load.Matrix({{"model.embed_tokens.weight", {vocab, h}, s.vocab, all_h}}));
  // lm_head stays as the checkpoint stores it (never quantized at load), but a GGUF
  // block type keeps the file's codes; a tied GGUF embedding is then held twice, as
  // floats for the lookup and as codes for lm_head, which every decode step streams.
  const std::string head_name = w.tied ? "model.embed_tokens.weight" : "lm_head.weight";
  ASSIGN_OR_RETURN(std::optional<DeviceMatrix> native_head,
                   load.GgufNativeMatrix({{head_name, {vocab, h}, s.vocab, all_h}}));
  if (native_head) {
    w.lm_head = std::move(*native_head);
    w.tied = false;
  } else if (!w.tied) {
    ASSIGN_OR_RETURN(w.lm_head, load.Matrix({{"lm_head.weight", {vocab, h}, s.vocab, all_h}}));
  }
  ASSIGN_OR_RETURN(w.final_norm, load.Vector("model.norm.weight", h));

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    LayerWeights layer;
    ASSIGN_OR_RETURN(layer.input_norm, load.Vector(p + "input_layernorm.weight", h));
    ASSIGN_OR_RETURN(layer.post_norm, load.Vector(p + "post_attention_layernorm.weight", h));
    ASSIGN_OR_RETURN(layer.qkv, load.Linear({{p + "self_attn.q_proj.weight", {nq * hd, h}, q_rows, all_h},
                                             {p + "self_attn.k_proj.weight", {nkv * hd, h}, kv_rows, all_h},
                                             {p + "self_attn.v_proj.weight", {nkv * hd, h}, kv_rows, all_h}}));
    if (c.qkv_bias) {
      // Sliced exactly like the weight rows they belong to (replicated KV heads included).
      const Range one{0, 1};
      ASSIGN_OR_RETURN(layer.qkv_bias,
                       load.FusedVector({{p + "self_attn.q_proj.bias", {nq * hd}, one, q_rows},
                                         {p + "self_attn.k_proj.bias", {nkv * hd}, one, kv_rows},
                                         {p + "self_attn.v_proj.bias", {nkv * hd}, one, kv_rows}}));
    }
    ASSIGN_OR_RETURN(layer.o, load.Linear({{p + "self_attn.o_proj.weight", {h, nq * hd}, all_h, q_rows}}));
    if (c.o_bias) {
      ASSIGN_OR_RETURN(layer.o_bias, load.Vector(p + "self_attn.o_proj.bias", h));
    }
    if (c.qk_norm) {
      ASSIGN_OR_RETURN(layer.q_norm, load.Vector(p + "self_attn.q_norm.weight", hd));
      ASSIGN_OR_RETURN(layer.k_norm, load.Vector(p + "self_attn.k_norm.weight", hd));
    }
    if (c.IsMoeLayer(l)) {
      RETURN_IF_ERROR(LoadExperts(c, s, p, &load, &layer));
    } else {
      RETURN_IF_ERROR(LoadSwiGlu(&load, p + "mlp.", kLlamaMlp, h, inter, s.intermediate,
                                 &layer.gate_up, &layer.down));
    }
    w.layers.push_back(std::move(layer));
  }
  w.bytes = load.bytes();
  load.LogGgufSummary();
  return w;
}

}  // namespace tessera
