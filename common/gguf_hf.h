#ifndef TESSERA_COMMON_GGUF_HF_H_
#define TESSERA_COMMON_GGUF_HF_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/gguf_file.h"
#include "common/model_config.h"

// A GGUF file seen as the Hugging Face folder Tessera reads: its metadata becomes
// config.json, tokenizer.json and tokenizer_config.json (chat template included), and its
// tensors answer to the Hugging Face names. Used by `tessera convert-gguf` (which writes
// the folder out) and by serving a .gguf directly (common/gguf_model_dir.h).
namespace tessera {

struct GgufHfFiles {
  ModelConfig config;
  std::string config_json;
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};

// Architectures read: llama (Llama, Mistral, SmolLM), qwen2 and qwen3. Models are served
// with float32 activations (as llama.cpp computes on the CPU). The tokenizer is `gpt2`
// byte-level BPE, with the pre-tokenizer named by tokenizer.ggml.pre, or `llama`
// SentencePiece. Anything else is refused naming the key and its value.
absl::StatusOr<GgufHfFiles> GgufToHfFiles(const GgufFile& gguf);

// GgufToHfFiles' config alone, without building the tokenizer's documents (a large
// vocabulary's tokenizer.json is megabytes of JSON): what reading the tensors needs.
absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& gguf);

// Where a Hugging Face tensor lives in the file. llama.cpp's converter interleaves the
// two rotary halves of every q and k head of llama-architecture models (its RoPE rotates
// adjacent pairs); `permuted_head_dim` > 0 marks such a tensor, whose row r is file row
// SourceRow(r).
struct GgufTensorRef {
  const GgufTensor* tensor = nullptr;
  int permuted_head_dim = 0;

  int64_t SourceRow(int64_t r) const {
    if (permuted_head_dim == 0) return r;
    const int64_t half = permuted_head_dim / 2;
    const int64_t head = r / permuted_head_dim, i = r % permuted_head_dim;
    return head * permuted_head_dim + 2 * (i % half) + i / half;
  }
};

// Every tensor of `gguf` under its Hugging Face name, for `config` (from GgufToHfFiles).
// A tensor the forward pass needs but the file lacks is left for the loader to report;
// a file tensor with no Hugging Face counterpart (mixtures of experts, rope_freqs) is
// refused by name.
absl::StatusOr<std::map<std::string, GgufTensorRef, std::less<>>> GgufHfTensors(
    const GgufFile& gguf, const ModelConfig& config);

}  // namespace tessera

#endif  // TESSERA_COMMON_GGUF_HF_H_
