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

// Model shapes by name: "tiny", "llama-1b", "llama3-8b", "llama-70b-layers".
// `num_layers` > 0 overrides the preset's layer count. Token ids follow the generated
// tokenizer (bos 1, eos 2), whatever the real model uses.
absl::StatusOr<ModelConfig> PresetConfig(absl::string_view name, int num_layers = 0);
std::vector<std::string> PresetNames();

// Writes a random Hugging Face Llama folder: config.json, weights with HF names and
// sensible scales (deterministic from the seed, independent of sharding), a byte-level
// SentencePiece-BPE tokenizer.json and tokenizer_config.json.
absl::Status GenerateRandomCheckpoint(const ModelConfig& config, const GenerateOptions& options);

// The tokenizer the generator writes: <unk>, <s>, </s>, the 256 byte pieces, then filler
// pieces ("▁", letters, then longer pieces built from them) up to `vocab_size` (>= 259).
std::string ByteLevelTokenizerJson(int vocab_size);

}  // namespace tessera

#endif  // TESSERA_TOOLS_CHECKPOINT_GENERATE_H_
