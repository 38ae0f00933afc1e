#include "common/sentencepiece_tokenizer_json.h"

#include <algorithm>
#include <unordered_map>

#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using OrderedJson = nlohmann::ordered_json;

// Offsets at which a UTF-8 string may be split without cutting a character.
std::vector<size_t> CharBoundaries(const std::string& s) {
  std::vector<size_t> out;
  for (size_t i = 1; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(i);
  }
  return out;
}

OrderedJson SpecialToken(int id, const std::string& content) {
  OrderedJson t;
  t["id"] = id;
  t["content"] = content;
  t["single_word"] = false;
  t["lstrip"] = false;
  t["rstrip"] = false;
  t["normalized"] = false;
  t["special"] = true;
  return t;
}

std::string Dump(const OrderedJson& j) {
  return j.dump(2, ' ', false, OrderedJson::error_handler_t::replace) + "\n";
}

}  // namespace

std::vector<std::pair<std::string, std::string>> DeriveMerges(const SentencePieceVocab& vocab) {
  std::unordered_map<std::string, size_t> ids;
  for (size_t i = 0; i < vocab.pieces.size(); ++i) ids.emplace(vocab.pieces[i], i);

  struct Merge {
    size_t left, right;
    float score;
  };
  std::vector<Merge> merges;
  std::vector<Merge> local;
  for (size_t i = 0; i < vocab.pieces.size(); ++i) {
    const std::string& piece = vocab.pieces[i];
    local.clear();
    for (size_t cut : CharBoundaries(piece)) {
      auto l = ids.find(piece.substr(0, cut));
      auto r = ids.find(piece.substr(cut));
      if (l != ids.end() && r != ids.end())
        local.push_back({l->second, r->second, vocab.scores[i]});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& a, const Merge& b) { return a.score > b.score; });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (const Merge& m : merges) out.emplace_back(vocab.pieces[m.left], vocab.pieces[m.right]);
  return out;
}

std::string SentencePieceTokenizerJson(const SentencePieceVocab& vocab) {
  const std::string space = "\xE2\x96\x81";  // "▁"
  OrderedJson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] =
      OrderedJson::array({SpecialToken(0, vocab.pieces[0]), SpecialToken(1, vocab.pieces[1]),
                          SpecialToken(2, vocab.pieces[2])});
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       OrderedJson::array(
           {{{"type", "Prepend"}, {"prepend", space}},
            {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}})}};
  j["pre_tokenizer"] = nullptr;
  const std::string& bos = vocab.pieces[1];
  OrderedJson bos_item = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
  OrderedJson bos_item_b = {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}};
  OrderedJson seq_a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  OrderedJson seq_b = {{"Sequence", {{"id", "B"}, {"type_id", 1}}}};
  OrderedJson special_tokens;
  special_tokens[bos] = {
      {"id", bos}, {"ids", OrderedJson::array({1})}, {"tokens", OrderedJson::array({bos})}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", OrderedJson::array({bos_item, seq_a})},
                         {"pair", OrderedJson::array({bos_item, seq_a, bos_item_b, seq_b})},
                         {"special_tokens", special_tokens}};
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders", OrderedJson::array(
                       {{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                        {{"type", "ByteFallback"}},
                        {{"type", "Fuse"}},
                        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  OrderedJson model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = vocab.pieces[0];
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = true;
  model["byte_fallback"] = true;
  model["ignore_merges"] = false;
  // ordered_json looks keys up linearly, far too slow for a 128K vocabulary, so the vocab
  // object is written by hand (in id order) into a placeholder.
  const std::string placeholder = "@@TESSERA_VOCAB@@";
  model["vocab"] = placeholder;
  OrderedJson merges = OrderedJson::array();
  for (auto& [l, r] : DeriveMerges(vocab)) merges.push_back(OrderedJson::array({l, r}));
  model["merges"] = std::move(merges);
  j["model"] = std::move(model);
  std::string text = Dump(j);

  std::string vocab_text = "{";
  for (size_t i = 0; i < vocab.pieces.size(); ++i) {
    vocab_text += i == 0 ? "\n      " : ",\n      ";
    vocab_text +=
        OrderedJson(vocab.pieces[i]).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
    vocab_text += ": " + std::to_string(i);
  }
  vocab_text += "\n    }";
  const std::string key = "\"vocab\": \"" + placeholder + "\"";
  const size_t at = text.find(key);
  text.replace(at, key.size(), "\"vocab\": " + vocab_text);
  return text;
}

std::string LlamaTokenizerConfigJson(int model_max_length) {
  OrderedJson j;
  j["add_bos_token"] = true;
  j["add_eos_token"] = false;
  j["bos_token"] = "<s>";
  j["eos_token"] = "</s>";
  j["unk_token"] = "<unk>";
  j["pad_token"] = nullptr;
  j["clean_up_tokenization_spaces"] = false;
  j["legacy"] = true;
  j["model_max_length"] = model_max_length;
  j["tokenizer_class"] = "LlamaTokenizer";
  OrderedJson decoder;
  const char* names[] = {"<unk>", "<s>", "</s>"};
  for (int i = 0; i < 3; ++i) {
    decoder[std::to_string(i)] = {{"content", names[i]}, {"single_word", false}, {"lstrip", false},
                                  {"rstrip", false},     {"normalized", false},  {"special", true}};
  }
  j["added_tokens_decoder"] = std::move(decoder);
  return Dump(j);
}

}  // namespace tessera
