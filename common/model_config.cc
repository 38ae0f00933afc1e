#include "common/model_config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/gguf_model_dir.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// Reads an integer field; `required` fields must be present.
absl::Status ReadInt(const Json& j, absl::string_view source, const char* key, bool required,
                     int* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Invalid(source, absl::StrCat("missing field \"", key, "\""));
    return absl::OkStatus();
  }
  if (!it->is_number_integer()) {
    return Invalid(source, absl::StrCat("field \"", key, "\" must be an integer, got ", it->dump()));
  }
  const int64_t v = it->get<int64_t>();
  if (v < 0 || v > (int64_t{1} << 31) - 1) {
    return Invalid(source, absl::StrCat("field \"", key, "\" out of range: ", v));
  }
  *out = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status ReadFloat(const Json& j, absl::string_view source, const char* key, float* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) {
    return Invalid(source, absl::StrCat("field \"", key, "\" must be a number, got ", it->dump()));
  }
  *out = it->get<float>();
  return absl::OkStatus();
}

absl::Status Positive(absl::string_view source, const char* key, int v) {
  if (v <= 0) return Invalid(source, absl::StrCat("field \"", key, "\" must be positive, got ", v));
  return absl::OkStatus();
}

// Reads a boolean field (absent or null: `fallback`).
absl::StatusOr<bool> ReadBool(const Json& j, absl::string_view source, const char* key,
                              bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return Invalid(source, absl::StrCat("field \"", key, "\" must be true or false, got ",
                                        it->dump()));
  }
  return it->get<bool>();
}

// The architectures and what sets them apart from Llama.
struct Family {
  // q/k/v biases always (Qwen2, Qwen2-MoE); otherwise "attention_bias" sets q/k/v and o
  // biases (Llama, Qwen3, Qwen3-MoE), and Mistral/Mixtral have none.
  bool qkv_bias_always = false;
  bool attention_bias_field = true;
  // Window from "sliding_window" on every layer (Mistral, Mixtral) or, with
  // "use_sliding_window", on layers >= "max_window_layers" (the Qwen family).
  bool mistral_window = false;
  bool qwen_window = false;
  // Qwen3-MoE windows every layer when use_sliding_window is set (max_window_layers is
  // ignored); Qwen2-MoE's rule (even layers below max_window_layers, in transformers 5) is
  // refused: no released checkpoint uses it.
  bool window_on_every_layer = false;
  bool window_refused = false;
  // Qwen2-MoE: q/k/v biases unless "qkv_bias" is false.
  bool qkv_bias_field = false;
  bool qk_norm = false;  // Qwen3, Qwen3-MoE.
  int default_head_dim = 0;  // Qwen3: 128 when config.json has none (not hidden / heads).
  bool qwen_tokenizer = false;  // Adds no BOS.
  enum class Moe { kNone, kMixtral, kQwen } moe = Moe::kNone;
  bool shared_expert = false;  // Qwen2-MoE.
  const char* model_type = "llama";
};

absl::StatusOr<Family> FamilyOf(const std::string& architecture, absl::string_view source) {
  Family f;
  if (architecture == "LlamaForCausalLM") return f;
  if (architecture == "MistralForCausalLM" || architecture == "MixtralForCausalLM") {
    f.attention_bias_field = false;
    f.mistral_window = true;
    f.model_type = "mistral";
    if (architecture == "MixtralForCausalLM") {
      f.moe = Family::Moe::kMixtral;
      f.model_type = "mixtral";
    }
    return f;
  }
  f.qwen_window = true;
  f.qwen_tokenizer = true;
  if (architecture == "Qwen2ForCausalLM" || architecture == "Qwen2MoeForCausalLM") {
    f.qkv_bias_always = true;
    f.attention_bias_field = false;
    f.model_type = "qwen2";
    if (architecture == "Qwen2MoeForCausalLM") {
      f.moe = Family::Moe::kQwen;
      f.shared_expert = true;
      f.window_refused = true;
      f.qkv_bias_field = true;
      f.model_type = "qwen2_moe";
    }
    return f;
  }
  if (architecture == "Qwen3ForCausalLM" || architecture == "Qwen3MoeForCausalLM") {
    f.qk_norm = true;
    f.default_head_dim = 128;
    f.model_type = "qwen3";
    if (architecture == "Qwen3MoeForCausalLM") {
      f.moe = Family::Moe::kQwen;
      f.window_on_every_layer = true;
      f.model_type = "qwen3_moe";
    }
    return f;
  }
  return Invalid(source, absl::StrCat("unsupported architecture \"", architecture,
                                      "\" (supported: LlamaForCausalLM, MistralForCausalLM, "
                                      "MixtralForCausalLM, Qwen2ForCausalLM, "
                                      "Qwen2MoeForCausalLM, Qwen3ForCausalLM, "
                                      "Qwen3MoeForCausalLM)"));
}

// Biases and sliding windows, which differ by family (see Family).
absl::Status ReadAttentionVariant(const Json& j, absl::string_view source, const Family& f,
                                  ModelConfig* c) {
  ASSIGN_OR_RETURN(const bool mlp_bias, ReadBool(j, source, "mlp_bias", false));
  if (mlp_bias) return Invalid(source, "mlp_bias true is not supported (no MLP biases)");
  if (f.qkv_bias_field) {
    ASSIGN_OR_RETURN(c->qkv_bias, ReadBool(j, source, "qkv_bias", true));
  } else if (f.qkv_bias_always) {
    c->qkv_bias = true;
  } else if (f.attention_bias_field) {
    ASSIGN_OR_RETURN(const bool attention_bias, ReadBool(j, source, "attention_bias", false));
    c->qkv_bias = c->o_bias = attention_bias;
  }
  c->qk_norm = f.qk_norm;
  bool windowed = f.mistral_window;
  if (f.qwen_window) {
    ASSIGN_OR_RETURN(windowed, ReadBool(j, source, "use_sliding_window", false));
  }
  if (!windowed) return absl::OkStatus();
  if (f.window_refused) {
    return Invalid(source, absl::StrCat("use_sliding_window true is not supported for ",
                                        c->architecture,
                                        " (transformers windows only its even layers below "
                                        "max_window_layers; no released checkpoint sets it)"));
  }
  RETURN_IF_ERROR(ReadInt(j, source, "sliding_window", /*required=*/f.qwen_window,
                          &c->sliding_window));
  if (f.qwen_window && !f.window_on_every_layer) {
    c->first_window_layer = 28;  // transformers' Qwen2Config default.
    RETURN_IF_ERROR(ReadInt(j, source, "max_window_layers", false, &c->first_window_layer));
  }
  if (f.qwen_window) {
    if (c->sliding_window == 0) {
      return Invalid(source, "use_sliding_window is true but \"sliding_window\" is 0");
    }
  }
  return absl::OkStatus();
}

// The expert fields: Mixtral's num_local_experts (all layers sparse, always renormalised)
// or Qwen's num_experts, moe_intermediate_size, norm_topk_prob, decoder_sparse_step,
// mlp_only_layers and (Qwen2-MoE) shared_expert_intermediate_size.
absl::Status ReadMoe(const Json& j, absl::string_view source, const Family& f, ModelConfig* c) {
  if (f.moe == Family::Moe::kNone) return absl::OkStatus();
  MoeConfig& m = c->moe;
  const bool mixtral = f.moe == Family::Moe::kMixtral;
  absl::Status s;
  s.Update(ReadInt(j, source, mixtral ? "num_local_experts" : "num_experts", true,
                   &m.num_experts));
  s.Update(ReadInt(j, source, "num_experts_per_tok", true, &m.top_k));
  if (mixtral) {
    m.intermediate_size = c->intermediate_size;
  } else {
    s.Update(ReadInt(j, source, "moe_intermediate_size", true, &m.intermediate_size));
    s.Update(ReadInt(j, source, "decoder_sparse_step", false, &m.sparse_step));
    auto normalize = ReadBool(j, source, "norm_topk_prob", false);
    if (normalize.ok()) m.normalize_top_k = *normalize;
    s.Update(normalize.status());
    if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
      if (!it->is_array()) return Invalid(source, "\"mlp_only_layers\" must be a list of layers");
      for (const auto& e : *it) {
        if (!e.is_number_integer() || e.get<int64_t>() < 0 ||
            e.get<int64_t>() >= c->num_hidden_layers) {
          return Invalid(source, absl::StrCat("\"mlp_only_layers\" holds ", e.dump(),
                                              ", not a layer of 0..", c->num_hidden_layers - 1));
        }
        m.dense_layers.push_back(e.get<int>());
      }
    }
    if (f.shared_expert) {
      s.Update(ReadInt(j, source, "shared_expert_intermediate_size", true,
                       &m.shared_intermediate_size));
    }
  }
  if (!s.ok()) return s;
  if (m.num_experts <= 0) return Invalid(source, "the number of experts must be positive");
  if (m.top_k <= 0 || m.top_k > m.num_experts) {
    return Invalid(source, absl::StrCat("num_experts_per_tok ", m.top_k, " must be in 1..",
                                        m.num_experts, " (the number of experts)"));
  }
  RETURN_IF_ERROR(Positive(source, mixtral ? "intermediate_size" : "moe_intermediate_size",
                           m.intermediate_size));
  RETURN_IF_ERROR(Positive(source, "decoder_sparse_step", m.sparse_step));
  if (f.shared_expert) {
    RETURN_IF_ERROR(Positive(source, "shared_expert_intermediate_size",
                             m.shared_intermediate_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::FromJson(absl::string_view text, absl::string_view source) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Invalid(source, "not a valid JSON object");
  ModelConfig c;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty()) {
    if (!(*it)[0].is_string()) return Invalid(source, "\"architectures\" must hold strings");
    c.architecture = (*it)[0].get<std::string>();
  }
  ASSIGN_OR_RETURN(const Family family, FamilyOf(c.architecture, source));
  if (family.qwen_tokenizer) c.bos_token_id = -1;  // Qwen tokenizers add no BOS.
  if (auto it = j.find("bos_token_id"); it != j.end() && it->is_null()) c.bos_token_id = -1;
  absl::Status s;
  s.Update(ReadInt(j, source, "hidden_size", true, &c.hidden_size));
  s.Update(ReadInt(j, source, "intermediate_size", true, &c.intermediate_size));
  s.Update(ReadInt(j, source, "num_attention_heads", true, &c.num_attention_heads));
  s.Update(ReadInt(j, source, "num_hidden_layers", true, &c.num_hidden_layers));
  s.Update(ReadInt(j, source, "vocab_size", true, &c.vocab_size));
  c.num_key_value_heads = -1;
  s.Update(ReadInt(j, source, "num_key_value_heads", false, &c.num_key_value_heads));
  c.head_dim = -1;
  s.Update(ReadInt(j, source, "head_dim", false, &c.head_dim));
  c.max_position_embeddings = 2048;
  s.Update(ReadInt(j, source, "max_position_embeddings", false, &c.max_position_embeddings));
  s.Update(ReadInt(j, source, "bos_token_id", false, &c.bos_token_id));
  s.Update(ReadFloat(j, source, "rms_norm_eps", &c.rms_norm_eps));
  s.Update(ReadFloat(j, source, "rope_theta", &c.rope_theta));
  if (!s.ok()) return s;

  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (it->is_number_integer()) {
      c.eos_token_ids.push_back(it->get<int>());
    } else if (it->is_array()) {
      for (const auto& e : *it) {
        if (!e.is_number_integer()) return Invalid(source, "\"eos_token_id\" must hold integers");
        c.eos_token_ids.push_back(e.get<int>());
      }
    } else {
      return Invalid(source, "\"eos_token_id\" must be an integer or a list of integers");
    }
  }
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && it->is_boolean()) {
    c.tie_word_embeddings = it->get<bool>();
  }
  if (auto it = j.find("torch_dtype"); it != j.end() && it->is_string()) {
    const std::string t = it->get<std::string>();
    if (t == "float32") c.torch_dtype = DType::kF32;
    else if (t == "float16") c.torch_dtype = DType::kF16;
    else if (t == "bfloat16") c.torch_dtype = DType::kBF16;
  }
  if (auto it = j.find("rope_scaling"); it != j.end()) {
    ASSIGN_OR_RETURN(c.rope_scaling, RopeScaling::FromJson(*it, source));
  }
  if (auto it = j.find("partial_rotary_factor");
      it != j.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 1.0)) {
    return Invalid(source, "partial_rotary_factor " + it->dump() +
                               " is not supported (only 1: RoPE over the whole head)");
  }
  RETURN_IF_ERROR(ReadAttentionVariant(j, source, family, &c));
  if (auto it = j.find("hidden_act"); it != j.end() && it->is_string() &&
      it->get<std::string>() != "silu") {
    return Invalid(source, "unsupported hidden_act " + it->dump() + " (only silu)");
  }

  if (c.num_key_value_heads < 0) c.num_key_value_heads = c.num_attention_heads;
  for (auto [key, v] : {std::pair{"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size},
                        {"num_attention_heads", c.num_attention_heads},
                        {"num_key_value_heads", c.num_key_value_heads},
                        {"num_hidden_layers", c.num_hidden_layers},
                        {"vocab_size", c.vocab_size},
                        {"max_position_embeddings", c.max_position_embeddings}}) {
    RETURN_IF_ERROR(Positive(source, key, v));
  }
  if (c.head_dim < 0 && family.default_head_dim > 0) c.head_dim = family.default_head_dim;
  if (c.head_dim < 0) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return Invalid(source, absl::StrCat("hidden_size ", c.hidden_size,
                                          " is not a multiple of num_attention_heads ",
                                          c.num_attention_heads, " and head_dim is absent"));
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  RETURN_IF_ERROR(Positive(source, "head_dim", c.head_dim));
  if (c.head_dim % 2 != 0) {
    return Invalid(source, absl::StrCat("head_dim must be even for RoPE, got ", c.head_dim));
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return Invalid(source, absl::StrCat("num_attention_heads ", c.num_attention_heads,
                                        " is not a multiple of num_key_value_heads ",
                                        c.num_key_value_heads));
  }
  if (!(c.rms_norm_eps > 0)) return Invalid(source, "rms_norm_eps must be positive");
  if (!(c.rope_theta > 0)) return Invalid(source, "rope_theta must be positive");
  RETURN_IF_ERROR(ReadMoe(j, source, family, &c));
  if (c.eos_token_ids.empty()) c.eos_token_ids.push_back(2);
  for (int id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return Invalid(source, absl::StrCat("eos_token_id ", id, " outside the vocabulary"));
    }
  }
  return c;
}

absl::StatusOr<ModelConfig> ModelConfig::Load(const std::filesystem::path& model_path) {
  ASSIGN_OR_RETURN(const std::filesystem::path model_dir, ResolveModelDir(model_path));
  const std::filesystem::path file = model_dir / "config.json";
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(file));
  return FromJson(text, file.string());
}

std::string ModelConfig::ToJson() const {
  Json j;
  const Family f = FamilyOf(architecture, "ToJson").value_or(Family{});
  j["architectures"] = {architecture};
  j["model_type"] = f.model_type;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["num_hidden_layers"] = num_hidden_layers;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["rope_scaling"] = rope_scaling.ToJson();
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = tie_word_embeddings;
  if (f.qwen_window) {
    // Qwen's windows need use_sliding_window; Qwen2's biases are implied by the architecture.
    j["use_sliding_window"] = sliding_window > 0;
    j["sliding_window"] = sliding_window > 0 ? Json(sliding_window) : Json(nullptr);
    j["max_window_layers"] = first_window_layer;
  } else if (f.mistral_window) {
    j["sliding_window"] = sliding_window > 0 ? Json(sliding_window) : Json(nullptr);
  }
  if (f.attention_bias_field) j["attention_bias"] = qkv_bias;
  if (f.qkv_bias_field) j["qkv_bias"] = qkv_bias;
  if (f.moe == Family::Moe::kMixtral) {
    j["num_local_experts"] = moe.num_experts;
    j["num_experts_per_tok"] = moe.top_k;
  } else if (f.moe == Family::Moe::kQwen) {
    j["num_experts"] = moe.num_experts;
    j["num_experts_per_tok"] = moe.top_k;
    j["moe_intermediate_size"] = moe.intermediate_size;
    j["norm_topk_prob"] = moe.normalize_top_k;
    j["decoder_sparse_step"] = moe.sparse_step;
    j["mlp_only_layers"] = moe.dense_layers;
    if (f.shared_expert) j["shared_expert_intermediate_size"] = moe.shared_intermediate_size;
  }
  j["bos_token_id"] = bos_token_id >= 0 ? Json(bos_token_id) : Json(nullptr);
  if (eos_token_ids.size() == 1) {
    j["eos_token_id"] = eos_token_ids[0];
  } else {
    j["eos_token_id"] = eos_token_ids;
  }
  j["torch_dtype"] = torch_dtype == DType::kF32   ? "float32"
                     : torch_dtype == DType::kF16 ? "float16"
                                                  : "bfloat16";
  return j.dump(2) + "\n";
}

bool ModelConfig::IsMoeLayer(int layer) const {
  if (moe.num_experts <= 0 || (layer + 1) % moe.sparse_step != 0) return false;
  for (int dense : moe.dense_layers) {
    if (dense == layer) return false;
  }
  return true;
}

int ModelConfig::NumMoeLayers() const {
  int n = 0;
  for (int l = 0; l < num_hidden_layers; ++l) n += IsMoeLayer(l) ? 1 : 0;
  return n;
}

namespace {

// Parameters of everything but the MLPs, and of one dense MLP of `inter`.
int64_t NonMlpParameters(const ModelConfig& c) {
  const int64_t h = c.hidden_size, d = c.head_dim;
  const int64_t attn = h * c.num_attention_heads * d * 2 + h * c.num_key_value_heads * d * 2;
  const int64_t biases =
      (c.qkv_bias ? (c.num_attention_heads + 2 * c.num_key_value_heads) * d : 0) +
      (c.o_bias ? h : 0);
  const int64_t norms = 2 * h + (c.qk_norm ? 2 * d : 0);
  const int64_t embed = static_cast<int64_t>(c.vocab_size) * h;
  return (attn + biases + norms) * c.num_hidden_layers + embed * (c.tie_word_embeddings ? 1 : 2) +
         h;
}

// MLP parameters over all layers when `experts` of the experts count.
int64_t MlpParameters(const ModelConfig& c, int experts) {
  const int64_t h = c.hidden_size;
  const int moe_layers = c.NumMoeLayers();
  const int64_t dense = 3 * h * c.intermediate_size * (c.num_hidden_layers - moe_layers);
  const int64_t per_moe_layer = experts * 3 * h * c.moe.intermediate_size +
                                c.moe.num_experts * h +  // The router.
                                (c.moe.shared_intermediate_size > 0
                                     ? 3 * h * c.moe.shared_intermediate_size + h
                                     : 0);
  return dense + per_moe_layer * moe_layers;
}

}  // namespace

int64_t ModelConfig::NumParameters() const {
  return NonMlpParameters(*this) + MlpParameters(*this, moe.num_experts);
}

int64_t ModelConfig::NumActiveParameters() const {
  return NonMlpParameters(*this) + MlpParameters(*this, moe.top_k);
}

}  // namespace tessera
