#ifndef TESSERA_COMMON_MODEL_CONFIG_H_
#define TESSERA_COMMON_MODEL_CONFIG_H_

#include <filesystem>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"

namespace tessera {

// The fields of a Hugging Face `config.json` that a LlamaForCausalLM forward pass needs.
struct ModelConfig {
  std::string architecture = "LlamaForCausalLM";
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;  // hidden_size / num_attention_heads when the file omits it.
  int num_hidden_layers = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  bool tie_word_embeddings = false;
  int bos_token_id = 1;
  std::vector<int> eos_token_ids;  // Llama 3 lists several.
  DType torch_dtype = DType::kF32;

  // Parses config.json text; `source` names the file in error messages.
  static absl::StatusOr<ModelConfig> FromJson(absl::string_view json, absl::string_view source);
  // Reads `<model_dir>/config.json`.
  static absl::StatusOr<ModelConfig> Load(const std::filesystem::path& model_dir);

  // Serialises back to config.json (used by the checkpoint generator and converter).
  std::string ToJson() const;

  // Number of parameters (lm_head counted unless tied).
  int64_t NumParameters() const;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_MODEL_CONFIG_H_
