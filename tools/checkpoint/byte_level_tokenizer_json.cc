#include "tools/checkpoint/byte_level_tokenizer_json.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/byte_level_tokenizer_parts.h"
#include "common/tokenizer/byte_level_alphabet.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

// Text the first merges are learned from, so that common English words, their
// capitalised and space-prefixed forms, and short numbers become single tokens.
constexpr const char* kSeedWords[] = {
    "the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "was", "with",
    "be", "by", "on", "not", "he", "she", "this", "are", "or", "his", "her", "from", "at",
    "which", "but", "have", "an", "had", "they", "you", "were", "their", "one", "all",
    "we", "can", "has", "there", "been", "if", "more", "when", "will", "would", "who",
    "so", "no", "out", "up", "into", "do", "than", "time", "some", "could", "them",
    "other", "these", "may", "then", "two", "first", "any", "like", "my", "now", "over",
    "such", "our", "man", "me", "even", "most", "made", "after", "also", "did", "many",
    "before", "must", "through", "back", "years", "where", "much", "your", "way", "well",
    "down", "should", "because", "each", "just", "those", "people", "how", "too",
    "little", "state", "good", "very", "make", "world", "still", "own", "see", "men",
    "work", "long", "get", "here", "between", "both", "life", "being", "under", "never",
    "day", "same", "another", "know", "while", "last", "might", "us", "great", "old",
    "year", "off", "come", "since", "against", "go", "came", "right", "used", "take",
    "three", "model", "token", "server", "request", "data", "value", "function", "return",
    "int", "for", "while", "const", "void", "class", "struct", "def", "self", "import",
    "once", "upon", "story", "girl", "boy", "happy", "play", "friend", "said", "went",
    "ing", "ed", "er", "ly", "tion", "es", "ment", "ness", "able", "est", "al", "ion",
    "hello", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d",
};

// Pieces of a growing vocabulary with their ranked merges; Learn() adds merges until a
// string is one piece, the way BPE training would on a corpus holding only that string.
class VocabBuilder {
 public:
  VocabBuilder() {
    const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
    // Real files list the bytes in the order of their characters' code points.
    std::vector<std::pair<uint32_t, int>> order;
    for (int b = 0; b < 256; ++b) order.emplace_back(alphabet.CodePointForByte(b), b);
    std::sort(order.begin(), order.end());
    for (const auto& [cp, b] : order) Add(std::string(alphabet.CharForByte(b)));
  }

  int size() const { return static_cast<int>(pieces_.size()); }
  const std::string& piece(int id) const { return pieces_[id]; }
  const std::vector<std::pair<int, int>>& merges() const { return merges_; }

  // Adds the merge (left, right) unless its result is already a piece; true when added.
  bool AddMerge(int left, int right) {
    std::string merged = pieces_[left] + pieces_[right];
    if (ids_.count(merged) > 0) return false;
    merge_rank_.emplace(Key(left, right), static_cast<int>(merges_.size()));
    merges_.emplace_back(left, right);
    Add(std::move(merged));
    return true;
  }

  // Adds merges until the byte-level spelling of `text` encodes to a single piece, or
  // the vocabulary reaches `limit`.
  void Learn(absl::string_view text, int limit) {
    std::vector<int> ids = Encode(text);
    while (ids.size() > 1 && size() < limit) {
      // A pair whose result is already a piece (reached through other merges) is passed
      // over: every merge makes a new piece.
      size_t i = 0;
      while (i + 1 < ids.size() && !AddMerge(ids[i], ids[i + 1])) ++i;
      if (i + 1 == ids.size()) return;
      ids = Encode(text);
    }
  }

 private:
  static uint64_t Key(int left, int right) {
    return (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
  }

  void Add(std::string piece) {
    ids_.emplace(piece, size());
    pieces_.push_back(std::move(piece));
  }

  // Plain quadratic BPE: the seed strings are a few characters long.
  std::vector<int> Encode(absl::string_view text) const {
    const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
    std::vector<int> ids;
    for (char c : text) ids.push_back(ids_.at(std::string(alphabet.CharForByte(c))));
    while (ids.size() > 1) {
      int best = -1;
      int best_rank = 0;
      for (size_t i = 0; i + 1 < ids.size(); ++i) {
        auto it = merge_rank_.find(Key(ids[i], ids[i + 1]));
        if (it != merge_rank_.end() && (best < 0 || it->second < best_rank)) {
          best = static_cast<int>(i);
          best_rank = it->second;
        }
      }
      if (best < 0) break;
      ids[best] = ids_.at(pieces_[ids[best]] + pieces_[ids[best + 1]]);
      ids.erase(ids.begin() + best + 1);
    }
    return ids;
  }

  std::vector<std::string> pieces_;
  std::unordered_map<std::string, int> ids_;
  std::vector<std::pair<int, int>> merges_;
  std::unordered_map<uint64_t, int> merge_rank_;
};

// splitmix64: a fixed sequence, so every run generates the same vocabulary.
uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void FillVocabulary(int num_regular_tokens, VocabBuilder* vocab) {
  for (const char* word : kSeedWords) {
    const std::string w(word);
    std::string capital = w;
    for (char& c : capital) {
      if (c >= 'a' && c <= 'z') {
        c = static_cast<char>(c - 'a' + 'A');
        break;
      }
    }
    for (const std::string& form : {" " + w, w, " " + capital, capital}) {
      vocab->Learn(form, num_regular_tokens);
    }
  }
  for (int n = 0; n < 1000; ++n) {
    vocab->Learn(std::to_string(n), num_regular_tokens);
  }
  for (const char* text : {"  ", "    ", "\n\n", "\t", "()", "{}", "\");", "//", "::", "->"}) {
    vocab->Learn(text, num_regular_tokens);
  }
  // The rest: pairs of existing pieces, the shorter pieces more often, so that the merged
  // pieces stay word-sized. Pieces longer than 16 characters are not formed.
  uint64_t state = 0x7E55E4A;
  while (vocab->size() < num_regular_tokens) {
    const int size = vocab->size();
    const int span = std::min(size, 256 + (size - 256) / 4 + 1);
    const int left = static_cast<int>(NextRandom(&state) % span);
    const int right = static_cast<int>(NextRandom(&state) % span);
    if (vocab->piece(left).size() + vocab->piece(right).size() > 16) continue;
    vocab->AddMerge(left, right);
  }
}

struct Special {
  std::string content;
  bool special = true;
};

std::vector<Special> Llama3Specials() {
  std::vector<Special> s = {{"<|begin_of_text|>"}, {"<|end_of_text|>"},
                            {"<|reserved_special_token_0|>"}, {"<|reserved_special_token_1|>"},
                            {"<|finetune_right_pad_id|>"}, {"<|reserved_special_token_2|>"},
                            {"<|start_header_id|>"}, {"<|end_header_id|>"}, {"<|eom_id|>"},
                            {"<|eot_id|>"}, {"<|python_tag|>"}};
  for (int i = 3; s.size() < 256; ++i) {
    s.push_back({absl::StrCat("<|reserved_special_token_", i, "|>")});
  }
  return s;
}

// Qwen2.5's added tokens; the tool-call and fill-in-the-middle markers are not special.
// Qwen3 appends four more, none special (ids 151665-151668 in the real vocabulary).
std::vector<Special> QwenSpecials(bool qwen3) {
  std::vector<Special> s;
  for (const char* name :
       {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
        "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
        "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
        "<|video_pad|>"}) {
    s.push_back({name, true});
  }
  for (const char* name : {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
                           "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}) {
    s.push_back({name, false});
  }
  if (qwen3) {
    for (const char* name : {"<tool_response>", "</tool_response>", "<think>", "</think>"}) {
      s.push_back({name, false});
    }
  }
  return s;
}

}  // namespace

absl::StatusOr<ByteLevelTokenizerFiles> SyntheticByteLevelTokenizer(ByteLevelFlavor flavor,
                                                                   int num_regular_tokens) {
  if (num_regular_tokens < 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_regular_tokens must be >= 256 (one piece per byte), got ", num_regular_tokens));
  }
  if (num_regular_tokens > 1'000'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_regular_tokens ", num_regular_tokens, " is above the 1000000 limit"));
  }
  const bool llama3 = flavor == ByteLevelFlavor::kLlama3;
  VocabBuilder vocab;
  FillVocabulary(num_regular_tokens, &vocab);
  const std::vector<Special> specials =
      llama3 ? Llama3Specials() : QwenSpecials(flavor == ByteLevelFlavor::kQwen3);

  ByteLevelTokenizerFiles files;
  files.num_tokens = num_regular_tokens + static_cast<int>(specials.size());
  const auto special_id = [&](absl::string_view content) {
    for (size_t i = 0; i < specials.size(); ++i) {
      if (specials[i].content == content) return num_regular_tokens + static_cast<int>(i);
    }
    return -1;
  };

  Json vocab_json = Json::object();
  for (int id = 0; id < vocab.size(); ++id) vocab_json[vocab.piece(id)] = id;
  Json merges = Json::array();
  for (const auto& [left, right] : vocab.merges()) {
    merges.push_back(Json::array({vocab.piece(left), vocab.piece(right)}));
  }
  Json added = Json::array();
  for (size_t i = 0; i < specials.size(); ++i) {
    added.push_back(Json{{"id", num_regular_tokens + static_cast<int>(i)},
                         {"content", specials[i].content},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", specials[i].special}});
  }

  Json tokenizer{{"version", "1.0"},
                 {"truncation", nullptr},
                 {"padding", nullptr},
                 {"added_tokens", added},
                 {"normalizer", nullptr},
                 {"decoder", ByteLevelDecoder()}};
  const Json byte_level_processor = ByteLevelPostProcessor();
  Json config{{"clean_up_tokenization_spaces", false},
              {"tokenizer_class", "PreTrainedTokenizerFast"}};
  if (llama3) {
    files.bos_token_id = special_id("<|begin_of_text|>");
    files.eos_token_ids = {special_id("<|end_of_text|>"), special_id("<|eom_id|>"),
                           special_id("<|eot_id|>")};
    tokenizer["pre_tokenizer"] = SplitByteLevelPreTokenizer(kLlama3PreTokenizerPattern, /*trim_offsets=*/true);
    const Json bos{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}};
    const Json template_processor{
        {"type", "TemplateProcessing"},
        {"single", Json::array({bos, Json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", Json::array({bos, Json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, bos,
                              Json{{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens",
         {{"<|begin_of_text|>",
           {{"id", "<|begin_of_text|>"},
            {"ids", Json::array({files.bos_token_id})},
            {"tokens", Json::array({"<|begin_of_text|>"})}}}}}};
    tokenizer["post_processor"] = Json{
        {"type", "Sequence"}, {"processors", Json::array({byte_level_processor, template_processor})}};
    config["bos_token"] = "<|begin_of_text|>";
    config["eos_token"] = "<|eot_id|>";
    config["model_max_length"] = 131072;
  } else {
    files.eos_token_ids = {special_id("<|im_end|>"), special_id("<|endoftext|>")};
    tokenizer["pre_tokenizer"] = SplitByteLevelPreTokenizer(kQwen2PreTokenizerPattern, /*trim_offsets=*/false);
    tokenizer["post_processor"] = byte_level_processor;
    tokenizer["normalizer"] = Json{{"type", "NFC"}};  // As Qwen2.5's own file.
    config["bos_token"] = nullptr;
    config["eos_token"] = "<|im_end|>";
    config["pad_token"] = "<|endoftext|>";
    config["add_prefix_space"] = false;
    config["model_max_length"] = 131072;
  }
  tokenizer["model"] = ByteLevelBpeModel(vocab_json, merges, llama3);
  files.tokenizer_json = tokenizer.dump(1);
  files.tokenizer_config_json = config.dump(2);
  return files;
}

}  // namespace tessera
