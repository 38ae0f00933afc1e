#include "common/gguf_hf.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/byte_level_tokenizer_parts.h"
#include "common/sentencepiece_tokenizer_json.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

// GGUF's token types (tokenizer.ggml.token_type).
constexpr int64_t kControlToken = 3;
constexpr int64_t kUserDefinedToken = 4;

struct Architecture {
  const char* gguf;
  const char* hf;
  bool permuted_qk;  // llama.cpp's converter interleaves the rotary halves of q and k.
};
constexpr Architecture kArchitectures[] = {
    {"llama", "LlamaForCausalLM", true},
    {"qwen2", "Qwen2ForCausalLM", false},
    {"qwen3", "Qwen3ForCausalLM", false},
};

absl::StatusOr<const Architecture*> FindArchitecture(const GgufFile& gguf) {
  ASSIGN_OR_RETURN(const std::string arch, gguf.String("general.architecture"));
  std::vector<std::string> known;
  for (const Architecture& a : kArchitectures) {
    if (arch == a.gguf) return &a;
    known.push_back(a.gguf);
  }
  return absl::UnimplementedError(absl::StrCat(gguf.source(), ": general.architecture \"", arch,
                                               "\" is not served (supported: ",
                                               absl::StrJoin(known, ", "), ")"));
}

// The pre-tokenizer of tokenizer.json for a `tokenizer.ggml.pre` name: the families whose
// rules Tessera's regex engine and Digits step express exactly.
absl::StatusOr<Json> PreTokenizerFor(const std::string& pre, const std::string& source) {
  const Json byte_level_regex{
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  for (const char* name : {"gpt-2", "phi-2", "roberta-bpe", "jina-v1-en", "jina-v2-code"}) {
    if (pre == name) return byte_level_regex;
  }
  // StarCoder-style: every digit alone, then GPT-2's rules.
  for (const char* name : {"smollm", "codeshell", "starcoder", "exaone", "minerva-7b"}) {
    if (pre == name) {
      return Json{{"type", "Sequence"},
                  {"pretokenizers", Json::array({Json{{"type", "Digits"}, {"individual_digits", true}},
                                                 byte_level_regex})}};
    }
  }
  for (const char* name : {"llama3", "llama-v3", "llama-bpe", "falcon3"}) {
    if (pre == name) return SplitByteLevelPreTokenizer(kLlama3PreTokenizerPattern, /*trim_offsets=*/false);
  }
  for (const char* name : {"qwen2", "deepseek-r1-qwen", "megrez"}) {
    if (pre == name) return SplitByteLevelPreTokenizer(kQwen2PreTokenizerPattern, /*trim_offsets=*/false);
  }
  return absl::UnimplementedError(absl::StrCat(
      source, ": tokenizer.ggml.pre \"", pre,
      "\" is not supported (supported: gpt-2, phi-2, roberta-bpe, smollm, codeshell, starcoder, "
      "exaone, minerva-7b, llama3, llama-bpe, falcon3, qwen2, deepseek-r1-qwen, megrez)"));
}

Json AddedToken(int64_t id, const std::string& content, bool special) {
  return Json{{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
              {"rstrip", false},   {"normalized", false}, {"special", special}};
}

struct Vocabulary {
  const std::vector<std::string>* tokens = nullptr;
  std::vector<int64_t> types;  // One per token; normal when the file has none.
  int64_t bos = -1, eos = -1;
  std::vector<int64_t> eos_ids;  // eos, then end-of-turn / end-of-message ids.
  bool add_bos = false;
};

absl::StatusOr<Vocabulary> ReadVocabulary(const GgufFile& gguf, bool bos_by_default) {
  Vocabulary v;
  ASSIGN_OR_RETURN(v.tokens, gguf.StringArray("tokenizer.ggml.tokens"));
  const int64_t n = static_cast<int64_t>(v.tokens->size());
  if (gguf.Find("tokenizer.ggml.token_type") != nullptr) {
    ASSIGN_OR_RETURN(const std::vector<int64_t>* types, gguf.IntArray("tokenizer.ggml.token_type"));
    if (static_cast<int64_t>(types->size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat(gguf.source(), ": tokenizer.ggml.token_type has ",
                                                     types->size(), " entries for ", n, " tokens"));
    }
    v.types = *types;
  } else {
    v.types.assign(static_cast<size_t>(n), 1);
  }
  const auto id = [&](const char* key) -> absl::StatusOr<int64_t> {
    ASSIGN_OR_RETURN(const int64_t i, gguf.IntOr(key, -1));
    if (i >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat(gguf.source(), ": ", key, " = ", i, " is outside the ", n, "-token vocabulary"));
    }
    return i;
  };
  ASSIGN_OR_RETURN(v.bos, id("tokenizer.ggml.bos_token_id"));
  ASSIGN_OR_RETURN(v.eos, id("tokenizer.ggml.eos_token_id"));
  if (v.eos >= 0) v.eos_ids.push_back(v.eos);
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    ASSIGN_OR_RETURN(const int64_t extra, id(key));
    if (extra >= 0 && extra != v.eos) v.eos_ids.push_back(extra);
  }
  ASSIGN_OR_RETURN(v.add_bos, gguf.BoolOr("tokenizer.ggml.add_bos_token", bos_by_default));
  if (v.add_bos && v.bos < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        gguf.source(), ": tokenizer.ggml.add_bos_token is set but there is no bos_token_id"));
  }
  return v;
}

// tokenizer.json for a `gpt2` (byte-level BPE) vocabulary.
absl::StatusOr<std::string> ByteLevelTokenizerJson(const GgufFile& gguf, const Vocabulary& v) {
  ASSIGN_OR_RETURN(const std::string pre, gguf.String("tokenizer.ggml.pre"));
  ASSIGN_OR_RETURN(Json pre_tokenizer, PreTokenizerFor(pre, gguf.source()));
  ASSIGN_OR_RETURN(const std::vector<std::string>* merge_lines, gguf.StringArray("tokenizer.ggml.merges"));
  Json vocab = Json::object();
  Json added = Json::array();
  for (size_t id = 0; id < v.tokens->size(); ++id) {
    const std::string& token = (*v.tokens)[id];
    vocab.emplace(token, id);  // A repeated piece keeps its first id, as tokenizers does.
    if (v.types[id] == kControlToken || v.types[id] == kUserDefinedToken) {
      added.push_back(AddedToken(static_cast<int64_t>(id), token, v.types[id] == kControlToken));
    }
  }
  Json merges = Json::array();
  for (const std::string& line : *merge_lines) {
    // Byte-level pieces spell a space as "Ġ", so the one space is the separator.
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(gguf.source(), ": tokenizer.ggml.merges entry \"",
                                                     line, "\" is not two pieces separated by a space"));
    }
    merges.push_back(Json::array({line.substr(0, space), line.substr(space + 1)}));
  }
  const Json byte_level_processor = ByteLevelPostProcessor();
  const bool ignore_merges = pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe";
  Json tokenizer{{"version", "1.0"},
                 {"truncation", nullptr},
                 {"padding", nullptr},
                 {"added_tokens", added},
                 {"normalizer", nullptr},
                 {"pre_tokenizer", pre_tokenizer},
                 {"post_processor", byte_level_processor},
                 {"decoder", ByteLevelDecoder()},
                 {"model", ByteLevelBpeModel(std::move(vocab), std::move(merges), ignore_merges)}};
  if (v.add_bos) {
    const std::string& bos = (*v.tokens)[static_cast<size_t>(v.bos)];
    const Json bos_item{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
    tokenizer["post_processor"] = Json{
        {"type", "Sequence"},
        {"processors",
         Json::array({byte_level_processor,
                      Json{{"type", "TemplateProcessing"},
                           {"single", Json::array({bos_item, Json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                           {"pair", Json::array({bos_item, Json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                                 bos_item, Json{{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
                           {"special_tokens",
                            {{bos, {{"id", bos}, {"ids", Json::array({v.bos})}, {"tokens", Json::array({bos})}}}}}}})}};
  }
  return tokenizer.dump(1, ' ', false, Json::error_handler_t::replace);
}

// tokenizer.json for a `llama` (SentencePiece BPE with byte fallback) vocabulary.
absl::StatusOr<std::string> SentencePieceJson(const GgufFile& gguf, const Vocabulary& v) {
  if (v.tokens->size() < 3 || v.bos != 1 || v.eos != 2) {
    return absl::UnimplementedError(absl::StrCat(
        gguf.source(), ": a `llama` SentencePiece vocabulary is read with <unk>, <s>, </s> at ids 0, 1, 2; "
        "this one has bos ", v.bos, " and eos ", v.eos));
  }
  SentencePieceVocab vocab;
  vocab.pieces = *v.tokens;
  ASSIGN_OR_RETURN(const std::vector<double>* scores, gguf.FloatArray("tokenizer.ggml.scores"));
  if (scores->size() != vocab.pieces.size()) {
    return absl::InvalidArgumentError(absl::StrCat(gguf.source(), ": tokenizer.ggml.scores has ",
                                                   scores->size(), " entries for ", vocab.pieces.size(), " tokens"));
  }
  vocab.scores.assign(scores->begin(), scores->end());
  Json tokenizer = Json::parse(SentencePieceTokenizerJson(vocab));
  // Control and user-defined tokens past the first three (Mistral's [INST], ...) are
  // matched whole, as the SentencePiece model does.
  for (size_t id = 3; id < v.tokens->size(); ++id) {
    if (v.types[id] == kControlToken || v.types[id] == kUserDefinedToken) {
      tokenizer["added_tokens"].push_back(
          AddedToken(static_cast<int64_t>(id), (*v.tokens)[id], v.types[id] == kControlToken));
    }
  }
  if (!v.add_bos) tokenizer["post_processor"] = nullptr;
  return tokenizer.dump(1, ' ', false, Json::error_handler_t::replace);
}

// What the metadata says: the model's config.json (round-tripped through its parser, so
// what is served is exactly what config.json says) and the vocabulary it is built on.
struct Translation {
  ModelConfig config;
  std::string config_json;
  std::string tokenizer_model;  // tokenizer.ggml.model: "gpt2" or "llama".
  Vocabulary vocab;
};

absl::StatusOr<Translation> Translate(const GgufFile& gguf) {
  ASSIGN_OR_RETURN(const Architecture* arch, FindArchitecture(gguf));
  const std::string a = arch->gguf;
  const auto key = [&](absl::string_view k) { return absl::StrCat(a, ".", k); };
  ModelConfig c;
  c.architecture = arch->hf;
  c.torch_dtype = DType::kF32;
  ASSIGN_OR_RETURN(const int64_t layers, gguf.Int(key("block_count")));
  ASSIGN_OR_RETURN(const int64_t hidden, gguf.Int(key("embedding_length")));
  ASSIGN_OR_RETURN(const int64_t ffn, gguf.Int(key("feed_forward_length")));
  ASSIGN_OR_RETURN(const int64_t heads, gguf.Int(key("attention.head_count")));
  ASSIGN_OR_RETURN(const int64_t kv_heads, gguf.IntOr(key("attention.head_count_kv"), heads));
  ASSIGN_OR_RETURN(const int64_t context, gguf.IntOr(key("context_length"), 2048));
  ASSIGN_OR_RETURN(const double eps, gguf.FloatOr(key("attention.layer_norm_rms_epsilon"), 1e-5));
  ASSIGN_OR_RETURN(const double theta, gguf.FloatOr(key("rope.freq_base"), 10000.0));
  ASSIGN_OR_RETURN(const int64_t window, gguf.IntOr(key("attention.sliding_window"), 0));
  const auto positive_int = [&](int64_t v, const std::string& k) -> absl::StatusOr<int> {
    if (v <= 0 || v > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(absl::StrCat(gguf.source(), ": ", k, " = ", v, " is out of range"));
    }
    return static_cast<int>(v);
  };
  ASSIGN_OR_RETURN(c.num_hidden_layers, positive_int(layers, key("block_count")));
  ASSIGN_OR_RETURN(c.hidden_size, positive_int(hidden, key("embedding_length")));
  ASSIGN_OR_RETURN(c.intermediate_size, positive_int(ffn, key("feed_forward_length")));
  ASSIGN_OR_RETURN(c.num_attention_heads, positive_int(heads, key("attention.head_count")));
  ASSIGN_OR_RETURN(c.num_key_value_heads, positive_int(kv_heads, key("attention.head_count_kv")));
  ASSIGN_OR_RETURN(c.max_position_embeddings, positive_int(context, key("context_length")));
  ASSIGN_OR_RETURN(const int64_t head_dim,
                   gguf.IntOr(key("attention.key_length"), hidden / heads));
  ASSIGN_OR_RETURN(c.head_dim, positive_int(head_dim, key("attention.key_length")));
  c.rms_norm_eps = static_cast<float>(eps);
  c.rope_theta = static_cast<float>(theta);
  if (window > 0) c.sliding_window = static_cast<int>(window);
  if (gguf.Find(key("rope.scaling.type")) != nullptr || gguf.FindTensor("rope_freqs.weight") != nullptr) {
    // Llama 3.1's factors are stored as a tensor of per-frequency factors, not as the
    // parameters transformers' rope_scaling names: refused rather than approximated.
    return absl::UnimplementedError(absl::StrCat(
        gguf.source(), ": RoPE scaling (", key("rope.scaling.type"), " or rope_freqs.weight) is not read yet"));
  }
  const GgufTensor* embed = gguf.FindTensor("token_embd.weight");
  if (embed == nullptr || embed->dims.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(gguf.source(), ": tensor token_embd.weight is missing or not 2-D"));
  }
  c.vocab_size = static_cast<int>(embed->dims[1]);
  c.tie_word_embeddings = gguf.FindTensor("output.weight") == nullptr;
  c.qkv_bias = gguf.FindTensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = gguf.FindTensor("blk.0.attn_q_norm.weight") != nullptr;

  ASSIGN_OR_RETURN(std::string model, gguf.String("tokenizer.ggml.model"));
  if (model != "gpt2" && model != "llama") {
    return absl::UnimplementedError(absl::StrCat(gguf.source(), ": tokenizer.ggml.model \"", model,
                                                 "\" is not supported (gpt2 and llama are)"));
  }
  ASSIGN_OR_RETURN(Vocabulary vocab, ReadVocabulary(gguf, /*bos_by_default=*/model == "llama"));
  if (static_cast<int64_t>(vocab.tokens->size()) > c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(gguf.source(), ": the tokenizer has ", vocab.tokens->size(),
                                                   " tokens but token_embd.weight only ", c.vocab_size, " rows"));
  }
  c.bos_token_id = static_cast<int>(vocab.bos);
  for (int64_t id : vocab.eos_ids) c.eos_token_ids.push_back(static_cast<int>(id));

  Translation t;
  t.config_json = c.ToJson();
  ASSIGN_OR_RETURN(t.config, ModelConfig::FromJson(t.config_json, gguf.source()));
  t.tokenizer_model = std::move(model);
  t.vocab = std::move(vocab);
  return t;
}

}  // namespace

absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& gguf) {
  ASSIGN_OR_RETURN(Translation t, Translate(gguf));
  return std::move(t.config);
}

absl::StatusOr<GgufHfFiles> GgufToHfFiles(const GgufFile& gguf) {
  ASSIGN_OR_RETURN(Translation t, Translate(gguf));
  const std::string& model = t.tokenizer_model;
  const Vocabulary& vocab = t.vocab;
  const ModelConfig& c = t.config;
  GgufHfFiles files;
  if (model == "gpt2") {
    ASSIGN_OR_RETURN(files.tokenizer_json, ByteLevelTokenizerJson(gguf, vocab));
  } else {
    ASSIGN_OR_RETURN(files.tokenizer_json, SentencePieceJson(gguf, vocab));
  }
  Json tokenizer_config{{"tokenizer_class", model == "gpt2" ? "PreTrainedTokenizerFast" : "LlamaTokenizerFast"},
                        {"clean_up_tokenization_spaces", false},
                        {"add_bos_token", vocab.add_bos},
                        {"add_eos_token", false},
                        {"model_max_length", c.max_position_embeddings}};
  const auto token_or_null = [&](int64_t id) {
    return id >= 0 ? Json((*vocab.tokens)[static_cast<size_t>(id)]) : Json(nullptr);
  };
  tokenizer_config["bos_token"] = token_or_null(vocab.bos);
  tokenizer_config["eos_token"] = token_or_null(vocab.eos);
  if (gguf.Find("tokenizer.chat_template") != nullptr) {
    ASSIGN_OR_RETURN(const std::string chat_template, gguf.String("tokenizer.chat_template"));
    tokenizer_config["chat_template"] = chat_template;
  }
  files.tokenizer_config_json = tokenizer_config.dump(2, ' ', false, Json::error_handler_t::replace);
  files.config_json = std::move(t.config_json);
  files.config = std::move(t.config);
  return files;
}

absl::StatusOr<std::map<std::string, GgufTensorRef, std::less<>>> GgufHfTensors(
    const GgufFile& gguf, const ModelConfig& c) {
  ASSIGN_OR_RETURN(const Architecture* arch, FindArchitecture(gguf));
  struct Rename {
    const char* gguf;
    const char* hf;
    int permute;  // 1: q heads, 2: kv heads (llama architecture only).
  };
  constexpr Rename kLayer[] = {
      {"attn_norm.weight", "input_layernorm.weight", 0},
      {"ffn_norm.weight", "post_attention_layernorm.weight", 0},
      {"attn_q.weight", "self_attn.q_proj.weight", 1},
      {"attn_k.weight", "self_attn.k_proj.weight", 2},
      {"attn_v.weight", "self_attn.v_proj.weight", 0},
      {"attn_output.weight", "self_attn.o_proj.weight", 0},
      {"attn_q.bias", "self_attn.q_proj.bias", 0},
      {"attn_k.bias", "self_attn.k_proj.bias", 0},
      {"attn_v.bias", "self_attn.v_proj.bias", 0},
      {"attn_q_norm.weight", "self_attn.q_norm.weight", 0},
      {"attn_k_norm.weight", "self_attn.k_norm.weight", 0},
      {"ffn_gate.weight", "mlp.gate_proj.weight", 0},
      {"ffn_up.weight", "mlp.up_proj.weight", 0},
      {"ffn_down.weight", "mlp.down_proj.weight", 0},
  };
  std::map<std::string, GgufTensorRef, std::less<>> out;
  for (const GgufTensor& t : gguf.tensors()) {
    GgufTensorRef ref{&t, 0};
    std::string hf;
    if (t.name == "token_embd.weight") {
      hf = "model.embed_tokens.weight";
    } else if (t.name == "output_norm.weight") {
      hf = "model.norm.weight";
    } else if (t.name == "output.weight") {
      hf = "lm_head.weight";
    } else if (absl::StartsWith(t.name, "blk.")) {
      const size_t dot = t.name.find('.', 4);
      int layer = -1;
      if (dot != std::string::npos) {
        const std::string digits = t.name.substr(4, dot - 4);
        if (!digits.empty() && digits.size() < 7 &&
            digits.find_first_not_of("0123456789") == std::string::npos) {
          layer = std::stoi(digits);
        }
      }
      if (layer < 0 || layer >= c.num_hidden_layers) {
        return absl::InvalidArgumentError(absl::StrCat(gguf.source(), ": tensor \"", t.name,
                                                       "\" names no layer of the ", c.num_hidden_layers));
      }
      const std::string rest = t.name.substr(dot + 1);
      for (const Rename& r : kLayer) {
        if (rest != r.gguf) continue;
        hf = absl::StrCat("model.layers.", layer, ".", r.hf);
        if (arch->permuted_qk && r.permute != 0) ref.permuted_head_dim = c.head_dim;
      }
    }
    if (hf.empty()) {
      return absl::UnimplementedError(absl::StrCat(
          gguf.source(), ": tensor \"", t.name, "\" has no counterpart in a ", c.architecture,
          absl::StrContains(t.name, "_exps") ? " (mixtures of experts are not read from GGUF yet)" : ""));
    }
    if (t.dims.size() > 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(gguf.source(), ": tensor \"", t.name, "\" has ", t.dims.size(), " dimensions"));
    }
    out.emplace(std::move(hf), ref);
  }
  return out;
}

}  // namespace tessera
