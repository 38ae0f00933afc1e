#ifndef TESSERA_TOOLS_CHECKPOINT_GENERATE_H_
#define TESSERA_TOOLS_CHECKPOINT_GENERATE_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "common/model_config.h"

namespace tessera {

struct GenerateOptions {
  std::filesystem::path out_dir;
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
  // 1: a single model.safetensors; N > 1: model-0000i-of-0000N.safetensors + index json.
  int num_shards = 1;
  // Also write lm_head.weight (a copy of the embedding) when the embeddings are tied.
  bool write_tied_lm_head = false;
  // Called with (bytes written, total bytes) across all weight files.
  std::function<void(uint64_t, uint64_t)> progress;
};

// Model shapes by name (PresetNames()). The real-shaped Llama 3.1, Qwen2.5 and Qwen3
// presets ("qwen3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b-layers") keep the real models'
// configs (rope_scaling, biases, q/k norm, experts, token ids) and get a byte-level BPE
// tokenizer of their family; the others ("tiny*", "llama-1b", "llama3-8b",
// "llama-70b-layers", "mixtral-8x7b-layers") use the generated SentencePiece tokenizer
// (bos 1, eos 2). "*-layers" presets have 2 of the real model's layers. The small
// "tiny-llama3" (llama3 rope scaling from an original context of 64), "tiny-qwen2" (q/k/v
// biases, tied embeddings), "tiny-mistral" (sliding window 12), "tiny-yarn", "tiny-qwen3"
// (q/k norm, head_dim 32 != hidden / heads), "tiny-mixtral" (8 experts, top 2, window 12),
// "tiny-qwen3-moe" (8 experts, top 3 renormalised, layer 1 dense) and "tiny-qwen2-moe"
// (8 experts, top 4 not renormalised, shared expert, q/k/v biases) are for tests.
// `num_layers` > 0 overrides the preset's layer count (dropping dense layers past it).
absl::StatusOr<ModelConfig> PresetConfig(absl::string_view name, int num_layers = 0);
std::vector<std::string> PresetNames();

// Writes a random Hugging Face Llama-family folder: config.json, weights with HF names and
// sensible scales (deterministic from the seed, independent of sharding; q/k/v/o biases
// and Qwen3's q_norm/k_norm when the config has them; on the layers where
// config.IsMoeLayer(), the router and experts under the family's names: Mixtral's
// block_sparse_moe.{gate, experts.E.w1/w3/w2}, Qwen's mlp.{gate,
// experts.E.gate_proj/up_proj/down_proj} and Qwen2-MoE's mlp.shared_expert.* and
// mlp.shared_expert_gate), tokenizer.json and tokenizer_config.json: the byte-level BPE of
// Llama 3 (bos_token_id 128000) or Qwen (a Qwen architecture with vocab >= 151665) plus
// the real models' generation_config.json, else a SentencePiece-BPE with byte fallback.
absl::Status GenerateRandomCheckpoint(const ModelConfig& config, const GenerateOptions& options);

// The tokenizer the generator writes: <unk>, <s>, </s>, the 256 byte pieces, then filler
// pieces ("▁", letters, then longer pieces built from them) up to `vocab_size` (>= 259).
std::string ByteLevelTokenizerJson(int vocab_size);

}  // namespace tessera

#endif  // TESSERA_TOOLS_CHECKPOINT_GENERATE_H_
