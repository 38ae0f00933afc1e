#include "tools/checkpoint/generate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/checkpoint/byte_level_tokenizer_json.h"
#include "common/sentencepiece_tokenizer_json.h"

namespace tessera {
namespace {

constexpr int kNumBytePieces = 256;
constexpr int kMinVocab = 3 + kNumBytePieces;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t HashName(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a.
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Roughly unit-variance noise: the sum of two uniforms (a triangle distribution) is close
// enough to normal for weights. One 64-bit hash gives two elements (16-bit uniforms are
// plenty here), which keeps a multi-GB checkpoint a matter of seconds. Element i depends
// only on (seed, name, i), so sharding and chunking cannot change values.
constexpr float kNoiseScale = 2.4494897f / 65536.0f;  // sqrt(6) makes the variance 1.

inline uint64_t PairHash(uint64_t key, uint64_t pair) {
  return SplitMix64(key + pair * 0xD1B54A32D192ED03ull);
}

inline float HalfNoise(uint64_t h, int half) {
  const uint64_t x = h >> (32 * half);
  return (static_cast<float>(x & 0xFFFF) + static_cast<float>((x >> 16) & 0xFFFF) - 65535.0f) *
         kNoiseScale;
}

// Writes `mean + std * noise` for elements [offset, offset + n) into `out`.
void FillNoise(uint64_t key, float mean, float std, uint64_t offset, uint64_t n, float* out) {
  uint64_t i = 0;
  if (offset % 2 == 1 && n > 0) {  // Odd start: the second half of a pair.
    out[i++] = mean + std * HalfNoise(PairHash(key, offset / 2), 1);
  }
  for (; i + 1 < n; i += 2) {
    const uint64_t h = PairHash(key, (offset + i) / 2);
    out[i] = mean + std * HalfNoise(h, 0);
    out[i + 1] = mean + std * HalfNoise(h, 1);
  }
  if (i < n) out[i] = mean + std * HalfNoise(PairHash(key, (offset + i) / 2), 0);
}

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  float mean;  // 1 for norm weights, 0 for matrices.
  float std;
};

// Router weights at this multiple of a matrix's scale: router logits of standard deviation
// about kRouterGain, so the k-th and the (k+1)-th expert of a token are usually far apart
// compared with bf16 rounding, and greedy ids do not hinge on a near tie.
constexpr float kRouterGain = 4.0f;

std::vector<TensorSpec> TensorSpecs(const ModelConfig& c, bool write_tied_lm_head) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size, d = c.head_dim;
  const int64_t q = c.num_attention_heads * d, kv = c.num_key_value_heads * d;
  auto matrix = [](std::string name, int64_t rows, int64_t cols) {
    return TensorSpec{
        std::move(name), {rows, cols}, 0.0f, 1.0f / std::sqrt(static_cast<float>(cols))};
  };
  auto norm = [](std::string name, int64_t n) {
    return TensorSpec{std::move(name), {n}, 1.0f, 0.02f};
  };
  // Biases large enough to move the attention pattern (Qwen2's are).
  auto bias = [](std::string name, int64_t n) {
    return TensorSpec{std::move(name), {n}, 0.0f, 0.5f};
  };
  std::vector<TensorSpec> specs;
  // A SwiGLU MLP under `p` with the family's projection names.
  auto swiglu = [&](const std::string& p, const char* gate, const char* up, const char* down,
                    int64_t size) {
    specs.push_back(matrix(absl::StrCat(p, gate, ".weight"), size, h));
    specs.push_back(matrix(absl::StrCat(p, down, ".weight"), h, size));
    specs.push_back(matrix(absl::StrCat(p, up, ".weight"), size, h));
  };
  const bool mixtral = c.architecture == "MixtralForCausalLM";
  specs.push_back(matrix("model.embed_tokens.weight", c.vocab_size, h));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    specs.push_back(norm(p + "input_layernorm.weight", h));
    specs.push_back(matrix(p + "self_attn.q_proj.weight", q, h));
    specs.push_back(matrix(p + "self_attn.k_proj.weight", kv, h));
    specs.push_back(matrix(p + "self_attn.v_proj.weight", kv, h));
    if (c.qkv_bias) {
      specs.push_back(bias(p + "self_attn.q_proj.bias", q));
      specs.push_back(bias(p + "self_attn.k_proj.bias", kv));
      specs.push_back(bias(p + "self_attn.v_proj.bias", kv));
    }
    if (c.qk_norm) {
      specs.push_back(norm(p + "self_attn.q_norm.weight", d));
      specs.push_back(norm(p + "self_attn.k_norm.weight", d));
    }
    specs.push_back(matrix(p + "self_attn.o_proj.weight", h, q));
    if (c.o_bias) specs.push_back(bias(p + "self_attn.o_proj.bias", h));
    specs.push_back(norm(p + "post_attention_layernorm.weight", h));
    if (!c.IsMoeLayer(l)) {
      swiglu(p + "mlp.", "gate_proj", "up_proj", "down_proj", inter);
      continue;
    }
    const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
    TensorSpec router = matrix(block + "gate.weight", c.moe.num_experts, h);
    router.std *= kRouterGain;
    specs.push_back(std::move(router));
    for (int e = 0; e < c.moe.num_experts; ++e) {
      const std::string ex = absl::StrCat(block, "experts.", e, ".");
      if (mixtral) {
        swiglu(ex, "w1", "w3", "w2", c.moe.intermediate_size);
      } else {
        swiglu(ex, "gate_proj", "up_proj", "down_proj", c.moe.intermediate_size);
      }
    }
    if (c.moe.shared_intermediate_size > 0) {
      swiglu(block + "shared_expert.", "gate_proj", "up_proj", "down_proj",
             c.moe.shared_intermediate_size);
      specs.push_back(matrix(block + "shared_expert_gate.weight", 1, h));
    }
  }
  specs.push_back(norm("model.norm.weight", h));
  if (!c.tie_word_embeddings || write_tied_lm_head) {
    TensorSpec head = matrix("lm_head.weight", c.vocab_size, h);
    // A tied head must equal the embedding, so it draws the embedding's numbers.
    if (c.tie_word_embeddings) head.std = specs[0].std;
    specs.push_back(std::move(head));
  }
  return specs;
}

SafetensorsWriter::Filler RandomFiller(const TensorSpec& spec, uint64_t key, DType dtype) {
  const float mean = spec.mean, std = spec.std;
  return [key, mean, std, dtype](uint64_t offset, uint64_t n, void* dst) {
    if (dtype == DType::kF32) {
      FillNoise(key, mean, std, offset, n, static_cast<float*>(dst));
      return;
    }
    constexpr uint64_t kBlock = 4096;
    float block[kBlock];
    auto* out = static_cast<uint16_t*>(dst);
    for (uint64_t done = 0; done < n; done += kBlock) {
      const uint64_t m = std::min(kBlock, n - done);
      FillNoise(key, mean, std, offset + done, m, block);
      ConvertFromF32(block, m, dtype, out + done);
    }
  };
}

std::string ShardName(int i, int n) {
  return absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, n);
}

bool IsQwen3(const ModelConfig& c) {
  return c.architecture == "Qwen3ForCausalLM" || c.architecture == "Qwen3MoeForCausalLM";
}

bool IsQwen(const ModelConfig& c) {
  return c.architecture == "Qwen2ForCausalLM" || c.architecture == "Qwen2MoeForCausalLM" ||
         IsQwen3(c);
}

// The byte-level vocabulary a config imitates: Llama 3 (BOS 128000) or Qwen (2, 2.5, 3 and
// their MoEs) at its real vocabulary size; anything else gets the small SentencePiece
// tokenizer (bos 1, eos 2).
struct ByteLevelChoice {
  ByteLevelFlavor flavor;
  int num_regular_tokens;
};
std::optional<ByteLevelChoice> ByteLevelFor(const ModelConfig& c) {
  if (c.bos_token_id == 128000) return ByteLevelChoice{ByteLevelFlavor::kLlama3, 128000};
  // Qwen2.5 and Qwen3 share the vocabulary; Qwen3 adds four unspecial think and
  // tool-response tokens after Qwen2.5's added ones.
  if (IsQwen3(c) && c.vocab_size >= 151669) {
    return ByteLevelChoice{ByteLevelFlavor::kQwen3, 151643};
  }
  if (IsQwen(c) && c.vocab_size >= 151665) {
    return ByteLevelChoice{ByteLevelFlavor::kQwen2, 151643};
  }
  return std::nullopt;
}

// The real models' generation_config.json: Llama 3.1 instruct, Qwen2.5 instruct and Qwen3
// (whose config.json names only <|im_end|> but whose generation config stops on both).
std::string GenerationConfigJson(const ModelConfig& c, ByteLevelFlavor flavor) {
  nlohmann::json j;
  // Qwen's files name <|endoftext|> as bos although its tokenizer adds none.
  if (c.bos_token_id >= 0) {
    j["bos_token_id"] = c.bos_token_id;
  } else if (flavor != ByteLevelFlavor::kLlama3) {
    j["bos_token_id"] = 151643;
  }
  j["eos_token_id"] = c.eos_token_ids;
  j["do_sample"] = true;
  if (flavor == ByteLevelFlavor::kLlama3) {
    j["temperature"] = 0.6;
    j["top_p"] = 0.9;
  } else if (IsQwen3(c)) {
    j["eos_token_id"] = {151645, 151643};
    j["pad_token_id"] = 151643;
    j["temperature"] = 0.6;
    j["top_p"] = 0.95;
    j["top_k"] = 20;
    j["transformers_version"] = "4.51.0";
    return j.dump(2) + "\n";
  } else {
    j["temperature"] = 0.7;
    j["top_p"] = 0.8;
    j["top_k"] = 20;
    j["repetition_penalty"] = 1.05;
  }
  j["transformers_version"] = "4.46.0";
  return j.dump(2) + "\n";
}

}  // namespace

std::vector<std::string> PresetNames() {
  return {"tiny",           "llama-1b",       "llama3-8b",
          "llama-70b-layers", "llama3.1-8b",    "llama3.1-70b-layers",
          "qwen2.5-7b",     "qwen3-8b",       "qwen3-30b-a3b",
          "qwen3-235b-a22b-layers",           "mixtral-8x7b-layers",
          "tiny-llama3",    "tiny-qwen2",     "tiny-mistral",
          "tiny-yarn",      "tiny-qwen3",     "tiny-mixtral",
          "tiny-qwen3-moe", "tiny-qwen2-moe"};
}

namespace {
// Llama 3.1's rope_scaling with `original` as the pre-training context (8192 for real).
RopeScaling Llama31Scaling(int original) {
  RopeScaling r;
  r.type = RopeScaling::Type::kLlama3;
  r.factor = 8;
  r.low_freq_factor = 1;
  r.high_freq_factor = 4;
  r.original_max_position_embeddings = original;
  return r;
}
}  // namespace

absl::StatusOr<ModelConfig> PresetConfig(absl::string_view name, int num_layers) {
  ModelConfig c;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  auto llama3 = [&c](int hidden, int inter, int heads, int kv, int head_dim, int layers) {
    c.hidden_size = hidden;
    c.intermediate_size = inter;
    c.num_attention_heads = heads;
    c.num_key_value_heads = kv;
    c.head_dim = head_dim;
    c.num_hidden_layers = layers;
    c.vocab_size = 128256;
    c.max_position_embeddings = 131072;
    c.rope_theta = 500000.0f;
    c.rms_norm_eps = 1e-5f;
  };
  if (name == "tiny") {
    // Awkward sizes on purpose: hidden not a power of two, intermediate not a multiple
    // of 64, vocab just past the byte pieces.
    c.hidden_size = 96;
    c.intermediate_size = 200;
    c.num_attention_heads = 6;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.num_hidden_layers = 2;
    c.vocab_size = 300;
    c.max_position_embeddings = 512;
    c.tie_word_embeddings = true;
  } else if (name == "llama-1b") {
    llama3(2048, 8192, 32, 8, 64, 16);
    c.tie_word_embeddings = true;
  } else if (name == "llama3-8b") {
    llama3(4096, 14336, 32, 8, 128, 32);
  } else if (name == "llama-70b-layers") {
    llama3(8192, 28672, 64, 8, 128, 2);
  } else if (name == "llama3.1-8b" || name == "llama3.1-70b-layers") {
    if (name == "llama3.1-8b") {
      llama3(4096, 14336, 32, 8, 128, 32);
    } else {
      llama3(8192, 28672, 64, 8, 128, 2);
    }
    c.rope_scaling = Llama31Scaling(8192);
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001, 128008, 128009};
  } else if (name == "qwen2.5-7b") {
    c.architecture = "Qwen2ForCausalLM";
    c.hidden_size = 3584;
    c.intermediate_size = 18944;
    c.num_attention_heads = 28;
    c.num_key_value_heads = 4;
    c.head_dim = 128;
    c.num_hidden_layers = 28;
    c.vocab_size = 152064;
    c.max_position_embeddings = 32768;
    c.rope_theta = 1000000.0f;
    c.rms_norm_eps = 1e-6f;
    c.qkv_bias = true;
    c.bos_token_id = -1;
    c.eos_token_ids = {151645, 151643};
  } else if (name == "qwen3-8b" || name == "qwen3-30b-a3b" || name == "qwen3-235b-a22b-layers") {
    // Qwen/Qwen3-8B, Qwen3-30B-A3B and Qwen3-235B-A22B's config.json. Their files give
    // bos_token_id 151643, but the tokenizer adds none: written null, as for qwen2.5-7b.
    c.architecture = "Qwen3ForCausalLM";
    c.head_dim = 128;
    c.num_attention_heads = 32;
    c.vocab_size = 151936;
    c.max_position_embeddings = 40960;
    c.rope_theta = 1000000.0f;
    c.rms_norm_eps = 1e-6f;
    c.qk_norm = true;
    c.bos_token_id = -1;
    c.eos_token_ids = {151645};
    if (name == "qwen3-8b") {
      c.hidden_size = 4096;
      c.intermediate_size = 12288;
      c.num_key_value_heads = 8;
      c.num_hidden_layers = 36;
    } else {
      c.architecture = "Qwen3MoeForCausalLM";
      c.num_key_value_heads = 4;
      c.moe.top_k = 8;
      c.moe.num_experts = 128;
      c.moe.normalize_top_k = true;
      if (name == "qwen3-30b-a3b") {
        c.hidden_size = 2048;
        c.intermediate_size = 6144;
        c.num_hidden_layers = 48;
        c.moe.intermediate_size = 768;
      } else {
        c.hidden_size = 4096;
        c.intermediate_size = 12288;
        c.num_attention_heads = 64;
        c.num_hidden_layers = 2;  // Of 94: a few real-sized layers, as llama-70b-layers.
        c.moe.intermediate_size = 1536;
      }
    }
    // The real files' max_window_layers: the layer count (windows are off anyway).
    c.first_window_layer = name == "qwen3-8b" ? 36 : name == "qwen3-30b-a3b" ? 48 : 94;
  } else if (name == "mixtral-8x7b-layers") {
    // mistralai/Mixtral-8x7B-v0.1's config.json, 2 of its 32 layers.
    c.architecture = "MixtralForCausalLM";
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.head_dim = 128;
    c.num_hidden_layers = 2;
    c.vocab_size = 32000;
    c.max_position_embeddings = 32768;
    c.rope_theta = 1000000.0f;
    c.rms_norm_eps = 1e-5f;
    c.moe.num_experts = 8;
    c.moe.top_k = 2;
    c.moe.intermediate_size = c.intermediate_size;
  } else if (name == "tiny-qwen3" || name == "tiny-mixtral" || name == "tiny-qwen3-moe" ||
             name == "tiny-qwen2-moe") {
    // Test models: 8 experts split over 2 or 4 expert-parallel ranks, expert sizes that
    // tp 4 divides, and everything else as the other tiny presets.
    c.hidden_size = 64;
    c.intermediate_size = 202;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.num_hidden_layers = 3;
    c.vocab_size = 301;
    c.max_position_embeddings = 1024;
    c.rope_theta = 1000000.0f;
    c.rms_norm_eps = 1e-6f;
    if (name == "tiny-qwen3") {
      c.architecture = "Qwen3ForCausalLM";
      c.qk_norm = true;
      c.head_dim = 32;  // Not hidden / heads (16): Qwen3 sets it on its own.
    } else if (name == "tiny-mixtral") {
      c.architecture = "MixtralForCausalLM";
      c.rms_norm_eps = 1e-5f;
      c.sliding_window = 12;
      c.intermediate_size = 40;  // Mixtral's experts take intermediate_size.
      c.moe.num_experts = 8;
      c.moe.top_k = 2;
      c.moe.intermediate_size = 40;
    } else if (name == "tiny-qwen3-moe") {
      // Top 3 of 8, renormalised; layer 1 keeps a dense MLP (mlp_only_layers).
      c.architecture = "Qwen3MoeForCausalLM";
      c.qk_norm = true;
      c.num_hidden_layers = 4;
      c.moe.num_experts = 8;
      c.moe.top_k = 3;
      c.moe.intermediate_size = 24;
      c.moe.normalize_top_k = true;
      c.moe.dense_layers = {1};
    } else {
      // Top 4 of 8, not renormalised, plus the gated shared expert.
      c.architecture = "Qwen2MoeForCausalLM";
      c.qkv_bias = true;
      c.moe.num_experts = 8;
      c.moe.top_k = 4;
      c.moe.intermediate_size = 16;
      c.moe.normalize_top_k = false;
      c.moe.shared_intermediate_size = 64;
    }
  } else if (name == "tiny-llama3" || name == "tiny-qwen2" || name == "tiny-mistral" ||
             name == "tiny-yarn") {
    // Small enough for tests at tp 1, 2 and 4, with sizes that split unevenly: 2 KV heads
    // (replicated at tp 4), intermediate 202 and vocab 301.
    c.hidden_size = 64;
    c.intermediate_size = 202;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.num_hidden_layers = 2;
    c.vocab_size = 301;
    c.max_position_embeddings = 1024;
    if (name == "tiny-llama3") {
      // Original context 64: prompts of a few hundred tokens run far past it.
      c.rope_theta = 500000.0f;
      c.rope_scaling = Llama31Scaling(64);
    } else if (name == "tiny-qwen2") {
      c.architecture = "Qwen2ForCausalLM";
      c.qkv_bias = true;
      c.rope_theta = 1000000.0f;
      c.tie_word_embeddings = true;
    } else if (name == "tiny-mistral") {
      c.architecture = "MistralForCausalLM";
      c.sliding_window = 12;
    } else {
      c.rope_scaling.type = RopeScaling::Type::kYarn;
      c.rope_scaling.factor = 4;
      c.rope_scaling.original_max_position_embeddings = 64;
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown preset \"", name, "\" (known: ", absl::StrJoin(PresetNames(), ", "), ")"));
  }
  if (num_layers > 0) {
    c.num_hidden_layers = num_layers;
    // Dense layers past the new end would not be layers at all.
    std::erase_if(c.moe.dense_layers, [num_layers](int l) { return l >= num_layers; });
  }
  return c;
}

std::string ByteLevelTokenizerJson(int vocab_size) {
  SentencePieceVocab vocab;
  vocab.pieces = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < kNumBytePieces; ++b) vocab.pieces.push_back(absl::StrFormat("<0x%02X>", b));
  vocab.scores.assign(vocab.pieces.size(), 0.0f);

  // Each filler piece is an earlier piece plus one letter, so BPE merges can reach it.
  const std::string space = "\xE2\x96\x81";
  std::vector<std::string> fillers = {space};
  for (char c = 'a'; c <= 'z'; ++c) fillers.emplace_back(1, c);
  for (char c = 'A'; c <= 'Z'; ++c) fillers.emplace_back(1, c);
  for (char c = '0'; c <= '9'; ++c) fillers.emplace_back(1, c);
  for (char c : std::string(".,!?'")) fillers.emplace_back(1, c);
  std::unordered_set<std::string> seen(fillers.begin(), fillers.end());
  const size_t needed = static_cast<size_t>(std::max(vocab_size - kMinVocab, 0));
  for (size_t i = 0; fillers.size() < needed && i < fillers.size(); ++i) {
    for (char c = 'a'; c <= 'z' && fillers.size() < needed; ++c) {
      std::string piece = fillers[i] + c;
      if (seen.insert(piece).second) fillers.push_back(std::move(piece));
    }
  }
  fillers.resize(needed);
  for (size_t i = 0; i < fillers.size(); ++i) {
    vocab.pieces.push_back(fillers[i]);
    vocab.scores.push_back(-static_cast<float>(i));
  }
  return SentencePieceTokenizerJson(vocab);
}

absl::Status GenerateRandomCheckpoint(const ModelConfig& config, const GenerateOptions& options) {
  // The config goes through the same validation a loader applies.
  ModelConfig c = config;
  c.torch_dtype = options.dtype;
  // The tensors follow the config as a loader reads it back from config.json: Mixtral's
  // experts, for one, take intermediate_size whatever moe.intermediate_size held.
  ASSIGN_OR_RETURN(const ModelConfig loaded, ModelConfig::FromJson(c.ToJson(), "generated config"));
  const std::optional<ByteLevelChoice> byte_level = ByteLevelFor(c);
  std::optional<ByteLevelTokenizerFiles> tokenizer;
  if (byte_level.has_value()) {
    ASSIGN_OR_RETURN(tokenizer, SyntheticByteLevelTokenizer(byte_level->flavor,
                                                           byte_level->num_regular_tokens));
    if (tokenizer->num_tokens > c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocab_size ", c.vocab_size, " is smaller than the byte-level tokenizer's ",
          tokenizer->num_tokens, " tokens"));
    }
    if (tokenizer->bos_token_id != c.bos_token_id) {
      return absl::InvalidArgumentError(absl::StrCat("bos_token_id ", c.bos_token_id,
                                                     " differs from the tokenizer's ",
                                                     tokenizer->bos_token_id));
    }
    for (int id : c.eos_token_ids) {
      if (std::find(tokenizer->eos_token_ids.begin(), tokenizer->eos_token_ids.end(), id) ==
          tokenizer->eos_token_ids.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("eos_token_id ", id, " is not one of the tokenizer's end tokens"));
      }
    }
  } else {
    if (c.vocab_size < kMinVocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocab_size ", c.vocab_size, " is too small: the byte-level tokenizer needs at least ",
          kMinVocab, " (3 special + 256 byte pieces)"));
    }
    if (c.bos_token_id != 1 || c.eos_token_ids != std::vector<int>{2}) {
      return absl::InvalidArgumentError(
          "the generated tokenizer has <s> = 1 and </s> = 2; set bos_token_id 1 and eos 2");
    }
  }
  const std::vector<TensorSpec> specs = TensorSpecs(loaded, options.write_tied_lm_head);
  const int num_shards = options.num_shards;
  if (num_shards < 1 || static_cast<size_t>(num_shards) > specs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("num_shards must be in [1, ", specs.size(),
                                                   "] for this model, got ", num_shards));
  }

  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat(options.out_dir.string(), ": cannot create folder: ", ec.message()));
  }

  // Contiguous runs of tensors per shard, cut where the running size passes i/N of the
  // total, never leaving a shard empty.
  std::vector<uint64_t> bytes(specs.size());
  uint64_t total = 0;
  for (size_t t = 0; t < specs.size(); ++t) {
    bytes[t] = DTypeSize(options.dtype);
    for (int64_t d : specs[t].shape) bytes[t] *= static_cast<uint64_t>(d);
    total += bytes[t];
  }
  std::vector<SafetensorsWriter> writers(num_shards);
  std::vector<int> shard_of(specs.size());
  int shard = 0;
  uint64_t cumulative = 0;
  for (size_t t = 0; t < specs.size(); ++t) {
    shard_of[t] = shard;
    cumulative += bytes[t];
    const size_t tensors_left = specs.size() - t - 1;
    const size_t shards_left = static_cast<size_t>(num_shards - 1 - shard);
    if (shards_left > 0 &&
        (cumulative * num_shards >= total * (shard + 1) || tensors_left == shards_left)) {
      ++shard;
    }
  }
  const uint64_t embed_key = SplitMix64(options.seed ^ HashName(specs[0].name));
  for (size_t t = 0; t < specs.size(); ++t) {
    const bool tied_head = specs[t].name == "lm_head.weight" && c.tie_word_embeddings;
    const uint64_t key = tied_head ? embed_key : SplitMix64(options.seed ^ HashName(specs[t].name));
    writers[shard_of[t]].Add(specs[t].name, options.dtype, specs[t].shape,
                             RandomFiller(specs[t], key, options.dtype));
  }
  for (auto& w : writers) w.SetMetadata("format", "pt");

  // Leftovers of an earlier run in the other layout would change what a loader picks.
  std::filesystem::remove(options.out_dir / "model.safetensors", ec);
  uint64_t done_before = 0;
  nlohmann::json weight_map = nlohmann::json::object();
  for (int s = 0; s < num_shards; ++s) {
    const std::string file = num_shards == 1 ? "model.safetensors" : ShardName(s, num_shards);
    auto progress = [&](uint64_t written, uint64_t) {
      if (options.progress) options.progress(done_before + written, total);
    };
    RETURN_IF_ERROR(writers[s].Write(options.out_dir / file, progress));
    done_before += writers[s].TotalBytes();
    for (size_t t = 0; t < specs.size(); ++t) {
      if (shard_of[t] == s) weight_map[specs[t].name] = file;
    }
  }
  if (num_shards > 1) {
    nlohmann::json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = std::move(weight_map);
    RETURN_IF_ERROR(
        WriteStringToFile(options.out_dir / "model.safetensors.index.json", index.dump(2) + "\n"));
  } else {
    std::filesystem::remove(options.out_dir / "model.safetensors.index.json", ec);
  }
  RETURN_IF_ERROR(WriteStringToFile(options.out_dir / "config.json", c.ToJson()));
  if (tokenizer.has_value()) {
    RETURN_IF_ERROR(
        WriteStringToFile(options.out_dir / "tokenizer.json", tokenizer->tokenizer_json));
    RETURN_IF_ERROR(WriteStringToFile(options.out_dir / "tokenizer_config.json",
                                      tokenizer->tokenizer_config_json));
    RETURN_IF_ERROR(WriteStringToFile(options.out_dir / "generation_config.json",
                                      GenerationConfigJson(c, byte_level->flavor)));
    return absl::OkStatus();
  }
  std::filesystem::remove(options.out_dir / "generation_config.json", ec);
  RETURN_IF_ERROR(
      WriteStringToFile(options.out_dir / "tokenizer.json", ByteLevelTokenizerJson(c.vocab_size)));
  RETURN_IF_ERROR(WriteStringToFile(options.out_dir / "tokenizer_config.json",
                                    LlamaTokenizerConfigJson(c.max_position_embeddings)));
  return absl::OkStatus();
}

}  // namespace tessera
