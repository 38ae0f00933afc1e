#ifndef TESSERA_TOOLS_CHECKPOINT_LLAMA2C_H_
#define TESSERA_TOOLS_CHECKPOINT_LLAMA2C_H_

#include <cstdint>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/sentencepiece_tokenizer_json.h"

namespace tessera {

// The parameters of a llama2.c checkpoint (`run.c`'s Config) and where its weights start.
struct Llama2cHeader {
  int version = 0;  // 0: legacy 7-int header; 1: export.py's "ak42" version 1.
  int dim = 0;
  int hidden_dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int vocab_size = 0;  // Always positive here; the v0 sign lives in shared_classifier.
  int seq_len = 0;
  bool shared_classifier = true;
  uint64_t weights_offset = 0;  // Bytes before the first fp32 weight.
  uint64_t expected_file_size = 0;
};

// Reads and checks the header, including that the file size is exactly what the header
// implies (errors name the file, the expected and the actual size).
absl::StatusOr<Llama2cHeader> ReadLlama2cHeader(const std::filesystem::path& checkpoint_bin);

// Reads llama2.c's tokenizer.bin for `vocab_size` tokens: ' ' becomes "▁", ids 1 and 2
// become <s> and </s>.
absl::StatusOr<SentencePieceVocab> ReadLlama2cTokenizer(const std::filesystem::path& tokenizer_bin,
                                                        int vocab_size);

// Converts a llama2.c fp32 checkpoint (legacy v0 or export.py version 1) and its tokenizer
// into a Hugging Face Llama folder: config.json, model.safetensors (F32, q/k rows permuted
// from interleaved to rotate_half RoPE, lm_head written even when tied), tokenizer.json
// and tokenizer_config.json. Nothing is written unless both inputs are valid.
absl::Status ConvertLlama2c(const std::filesystem::path& checkpoint_bin,
                            const std::filesystem::path& tokenizer_bin,
                            const std::filesystem::path& out_dir);

}  // namespace tessera

#endif  // TESSERA_TOOLS_CHECKPOINT_LLAMA2C_H_
