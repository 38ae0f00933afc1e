#ifndef TESSERA_COMMON_MODEL_CONFIG_H_
#define TESSERA_COMMON_MODEL_CONFIG_H_

#include <filesystem>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/rope.h"

namespace tessera {

// The mixture-of-experts block of Mixtral, Qwen2-MoE and Qwen3-MoE (transformers'
// *SparseMoeBlock): a router picks `top_k` of `num_experts` SwiGLU experts per token
// (softmax over the router logits, the top k with ties to the lower expert id, optionally
// renormalised to sum 1) and sums their outputs weighted by those probabilities.
struct MoeConfig {
  int num_experts = 0;  // 0: a dense model.
  int top_k = 0;
  int intermediate_size = 0;  // Of one expert.
  // Divide the top-k probabilities by their sum (Mixtral always; Qwen: norm_topk_prob).
  bool normalize_top_k = true;
  // Layer l is sparse when (l + 1) % sparse_step == 0 and l is not in dense_layers
  // (Qwen's decoder_sparse_step and mlp_only_layers); the others keep a dense MLP of
  // ModelConfig::intermediate_size.
  int sparse_step = 1;
  std::vector<int> dense_layers;
  // Qwen2-MoE: a shared expert of this size every token passes through, its output scaled
  // by sigmoid(shared_expert_gate . x). 0: none.
  int shared_intermediate_size = 0;
};

// The fields of a Hugging Face `config.json` that the forward pass of the Llama family
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM) and its
// mixtures of experts (MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM) needs.
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
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  // q/k/v projections carry biases (Qwen2 always; Llama with "attention_bias").
  bool qkv_bias = false;
  // o_proj carries a bias (Llama "attention_bias"; never Qwen2).
  bool o_bias = false;
  // Sliding-window attention: a query at position q sees keys k with q - W < k <= q.
  // 0 = full causal attention. Applies to layers >= first_window_layer (Mistral: all;
  // Qwen2: max_window_layers, and only with use_sliding_window). KV blocks that fall
  // wholly behind the window are not freed yet: cache use is that of full attention.
  int sliding_window = 0;
  int first_window_layer = 0;
  // Qwen3: an RMSNorm over each query and key head (weights [head_dim]) before RoPE.
  bool qk_norm = false;
  MoeConfig moe;
  int bos_token_id = 1;  // -1: the model has none (Qwen2 adds no BOS).
  std::vector<int> eos_token_ids;  // Llama 3 lists several.
  DType torch_dtype = DType::kF32;

  // Parses config.json text; `source` names the file in error messages.
  static absl::StatusOr<ModelConfig> FromJson(absl::string_view json, absl::string_view source);
  // Reads `<model_dir>/config.json`.
  static absl::StatusOr<ModelConfig> Load(const std::filesystem::path& model_dir);

  // Serialises back to config.json (used by the checkpoint generator and converter).
  std::string ToJson() const;

  // The attention window of layer `layer` (0: none).
  int SlidingWindowOf(int layer) const {
    return sliding_window > 0 && layer >= first_window_layer ? sliding_window : 0;
  }
  // The rotary frequencies and cos/sin scale for this config's rope_scaling.
  RopeFrequencies Rope() const {
    return ComputeRopeFrequencies(rope_scaling, head_dim, rope_theta, max_position_embeddings);
  }

  bool is_moe() const { return moe.num_experts > 0; }
  // Whether layer `layer`'s MLP is a mixture of experts.
  bool IsMoeLayer(int layer) const;
  int NumMoeLayers() const;

  // Number of parameters (lm_head counted unless tied), every expert included.
  int64_t NumParameters() const;
  // Parameters one token's forward pass reads: the routed experts only (top_k of
  // num_experts per sparse layer). Equals NumParameters() for a dense model.
  int64_t NumActiveParameters() const;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_MODEL_CONFIG_H_
