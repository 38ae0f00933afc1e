#include "common/model_config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
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

// Biases and sliding windows, which differ by architecture:
// - Llama: "attention_bias" puts biases on q, k, v and o; no sliding window.
// - Mistral: no biases; "sliding_window" (null: none) on every layer.
// - Qwen2: q/k/v biases always, none on o; a window only with "use_sliding_window", on
//   layers >= "max_window_layers" (as transformers' Qwen2 layer_types).
absl::Status ReadAttentionVariant(const Json& j, absl::string_view source, bool qwen2,
                                  bool mistral, ModelConfig* c) {
  ASSIGN_OR_RETURN(const bool mlp_bias, ReadBool(j, source, "mlp_bias", false));
  if (mlp_bias) return Invalid(source, "mlp_bias true is not supported (no MLP biases)");
  if (qwen2) {
    c->qkv_bias = true;
  } else if (!mistral) {
    ASSIGN_OR_RETURN(const bool attention_bias, ReadBool(j, source, "attention_bias", false));
    c->qkv_bias = c->o_bias = attention_bias;
  }
  bool windowed = mistral;
  if (qwen2) {
    ASSIGN_OR_RETURN(windowed, ReadBool(j, source, "use_sliding_window", false));
  }
  if (!windowed) return absl::OkStatus();
  RETURN_IF_ERROR(ReadInt(j, source, "sliding_window", /*required=*/qwen2, &c->sliding_window));
  if (qwen2) {
    c->first_window_layer = 28;  // transformers' Qwen2Config default.
    RETURN_IF_ERROR(ReadInt(j, source, "max_window_layers", false, &c->first_window_layer));
    if (c->sliding_window == 0) {
      return Invalid(source, "use_sliding_window is true but \"sliding_window\" is 0");
    }
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
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";
  const bool mistral = c.architecture == "MistralForCausalLM";
  if (c.architecture != "LlamaForCausalLM" && !mistral && !qwen2) {
    return Invalid(source, absl::StrCat("unsupported architecture \"", c.architecture,
                                        "\" (supported: LlamaForCausalLM, MistralForCausalLM, "
                                        "Qwen2ForCausalLM)"));
  }
  if (qwen2) c.bos_token_id = -1;  // Qwen2 tokenizers add no BOS.
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
  RETURN_IF_ERROR(ReadAttentionVariant(j, source, qwen2, mistral, &c));
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
  if (c.eos_token_ids.empty()) c.eos_token_ids.push_back(2);
  for (int id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return Invalid(source, absl::StrCat("eos_token_id ", id, " outside the vocabulary"));
    }
  }
  return c;
}

absl::StatusOr<ModelConfig> ModelConfig::Load(const std::filesystem::path& model_dir) {
  const std::filesystem::path file = model_dir / "config.json";
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(file));
  return FromJson(text, file.string());
}

std::string ModelConfig::ToJson() const {
  Json j;
  const bool qwen2 = architecture == "Qwen2ForCausalLM";
  const bool mistral = architecture == "MistralForCausalLM";
  j["architectures"] = {architecture};
  j["model_type"] = qwen2 ? "qwen2" : mistral ? "mistral" : "llama";
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
  if (qwen2) {
    // Qwen2's biases are implied by the architecture; a window needs use_sliding_window.
    j["use_sliding_window"] = sliding_window > 0;
    j["sliding_window"] = sliding_window > 0 ? Json(sliding_window) : Json(nullptr);
    j["max_window_layers"] = first_window_layer;
  } else if (mistral) {
    j["sliding_window"] = sliding_window > 0 ? Json(sliding_window) : Json(nullptr);
  } else {
    j["attention_bias"] = qkv_bias;
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

int64_t ModelConfig::NumParameters() const {
  const int64_t h = hidden_size, i = intermediate_size, d = head_dim;
  const int64_t attn = h * num_attention_heads * d * 2 + h * num_key_value_heads * d * 2;
  const int64_t mlp = 3 * h * i;
  const int64_t biases = (qkv_bias ? (num_attention_heads + 2 * num_key_value_heads) * d : 0) +
                         (o_bias ? h : 0);
  const int64_t per_layer = attn + biases + mlp + 2 * h;
  const int64_t embed = static_cast<int64_t>(vocab_size) * h;
  return per_layer * num_hidden_layers + embed * (tie_word_embeddings ? 1 : 2) + h;
}

}  // namespace tessera
