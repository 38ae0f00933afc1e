#include "common/tokenizer/sentencepiece_bpe.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "common/tokenizer/vocabulary.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

constexpr char kMetaspace[] = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space.

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// The literal pattern of a Replace step ({"String": ...}); regex patterns are refused.
absl::StatusOr<std::string> LiteralPattern(const Json& step, absl::string_view where,
                                           absl::string_view source) {
  auto pattern = step.find("pattern");
  if (pattern == step.end() || !pattern->is_object() || !pattern->contains("String") ||
      !(*pattern)["String"].is_string() || (*pattern)["String"].empty()) {
    return absl::UnimplementedError(absl::StrCat(
        source, ": ", where, " Replace supports only non-empty {\"String\": ...} patterns, got ",
        step.dump()));
  }
  return (*pattern)["String"].get<std::string>();
}

absl::StatusOr<std::string> StringField(const Json& step, const char* key,
                                        absl::string_view where, absl::string_view source) {
  auto it = step.find(key);
  if (it == step.end() || !it->is_string()) {
    return Invalid(source, absl::StrCat(where, " ", step.dump(), ": field \"", key,
                                        "\" must be a string"));
  }
  return it->get<std::string>();
}

}  // namespace

absl::Status SentencePieceBpeTokenizer::ParseNormalizer(const Json& normalizer,
                                                        absl::string_view source,
                                                        std::vector<NormalizerStep>* steps) {
  if (normalizer.is_null()) return absl::OkStatus();
  if (!normalizer.is_object() || !normalizer.contains("type") ||
      !normalizer["type"].is_string()) {
    return Invalid(source, "field \"normalizer\" must be an object with a string \"type\"");
  }
  const std::string type = normalizer["type"].get<std::string>();
  if (type == "Sequence") {
    auto list = normalizer.find("normalizers");
    if (list == normalizer.end() || !list->is_array()) {
      return Invalid(source, "field \"normalizer.normalizers\" must be an array");
    }
    for (const Json& n : *list) RETURN_IF_ERROR(ParseNormalizer(n, source, steps));
    return absl::OkStatus();
  }
  if (type == "Prepend") {
    ASSIGN_OR_RETURN(std::string text, StringField(normalizer, "prepend", "normalizer", source));
    steps->push_back(NormalizerStep{true, "", std::move(text)});
    return absl::OkStatus();
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(std::string from, LiteralPattern(normalizer, "normalizer", source));
    ASSIGN_OR_RETURN(std::string to, StringField(normalizer, "content", "normalizer", source));
    steps->push_back(NormalizerStep{false, std::move(from), std::move(to)});
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      source, ": normalizer type \"", type,
      "\" is not supported by the SentencePiece BPE tokenizer (supported: Prepend, Replace, "
      "Sequence)"));
}

absl::Status SentencePieceBpeTokenizer::ParsePreTokenizer(const Json& pre_tokenizer,
                                                          absl::string_view source,
                                                          std::unique_ptr<Metaspace>* metaspace) {
  if (pre_tokenizer.is_null()) return absl::OkStatus();
  if (!pre_tokenizer.is_object() || !pre_tokenizer.contains("type") ||
      !pre_tokenizer["type"].is_string()) {
    return Invalid(source, "field \"pre_tokenizer\" must be an object with a string \"type\"");
  }
  const std::string type = pre_tokenizer["type"].get<std::string>();
  if (type == "Sequence") {
    auto list = pre_tokenizer.find("pretokenizers");
    if (list == pre_tokenizer.end() || !list->is_array()) {
      return Invalid(source, "field \"pre_tokenizer.pretokenizers\" must be an array");
    }
    for (const Json& p : *list) RETURN_IF_ERROR(ParsePreTokenizer(p, source, metaspace));
    return absl::OkStatus();
  }
  if (type != "Metaspace") {
    return absl::UnimplementedError(absl::StrCat(
        source, ": pre_tokenizer type \"", type,
        "\" is not supported by the SentencePiece BPE tokenizer (supported: Metaspace)"));
  }
  if (*metaspace != nullptr) {
    return absl::UnimplementedError(absl::StrCat(source, ": more than one Metaspace pre_tokenizer"));
  }
  auto m = std::make_unique<Metaspace>();
  m->replacement = kMetaspace;
  if (auto it = pre_tokenizer.find("replacement"); it != pre_tokenizer.end()) {
    if (!it->is_string() || it->empty()) {
      return Invalid(source, "field \"pre_tokenizer.replacement\" must be a non-empty string");
    }
    m->replacement = it->get<std::string>();
  }
  // Older files say add_prefix_space (true = always); newer ones prepend_scheme.
  if (auto it = pre_tokenizer.find("add_prefix_space"); it != pre_tokenizer.end() &&
                                                          it->is_boolean()) {
    m->prepend_scheme = it->get<bool>() ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  if (auto it = pre_tokenizer.find("prepend_scheme"); it != pre_tokenizer.end() && !it->is_null()) {
    const std::string scheme = it->is_string() ? it->get<std::string>() : it->dump();
    if (scheme == "always") {
      m->prepend_scheme = PrependScheme::kAlways;
    } else if (scheme == "first") {
      m->prepend_scheme = PrependScheme::kFirst;
    } else if (scheme == "never") {
      m->prepend_scheme = PrependScheme::kNever;
    } else {
      return Invalid(source, absl::StrCat("field \"pre_tokenizer.prepend_scheme\" must be "
                                          "always, first or never, got ", scheme));
    }
  }
  if (auto it = pre_tokenizer.find("split"); it != pre_tokenizer.end() && !it->is_null()) {
    if (!it->is_boolean()) return Invalid(source, "field \"pre_tokenizer.split\" must be a boolean");
    m->split = it->get<bool>();
  }
  *metaspace = std::move(m);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SentencePieceBpeTokenizer>> SentencePieceBpeTokenizer::Create(
    const Json& tokenizer, const Json& config, absl::string_view tokenizer_source,
    absl::string_view config_source) {
  auto model_json = tokenizer.find("model");
  if (model_json == tokenizer.end()) return Invalid(tokenizer_source, "missing field \"model\"");
  ASSIGN_OR_RETURN(BpeModel model, BpeModel::FromJson(*model_json, tokenizer_source));
  const Json null_json;
  auto field = [&](const char* key) -> const Json& {
    auto it = tokenizer.find(key);
    return it == tokenizer.end() ? null_json : *it;
  };
  ASSIGN_OR_RETURN(AddedTokens added, AddedTokens::FromJson(field("added_tokens"), tokenizer_source));
  ASSIGN_OR_RETURN(TokenDecoder decoder, TokenDecoder::FromJson(field("decoder"), tokenizer_source));
  std::unique_ptr<SentencePieceBpeTokenizer> t(new SentencePieceBpeTokenizer(
      std::move(model), std::move(added), std::move(decoder)));
  RETURN_IF_ERROR(ParseNormalizer(field("normalizer"), tokenizer_source, &t->normalizer_));
  RETURN_IF_ERROR(ParsePreTokenizer(field("pre_tokenizer"), tokenizer_source, &t->metaspace_));

  t->vocab_size_ = t->model_.size();
  for (const AddedToken& a : t->added_.tokens()) {
    t->vocab_size_ = std::max(t->vocab_size_, a.id + 1);
  }
  const SentencePieceBpeTokenizer* self = t.get();
  ASSIGN_OR_RETURN(t->specials_,
                   ResolveSpecialTokens(
                       tokenizer, config,
                       [self](absl::string_view piece) { return self->IdForPiece(piece); },
                       tokenizer_source, config_source));
  for (const auto* ids : {&t->specials_.prefix_ids, &t->specials_.suffix_ids}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= t->vocab_size_) {
        return Invalid(tokenizer_source, absl::StrCat("special token id ", id,
                                                      " is outside the vocabulary of ",
                                                      t->vocab_size_));
      }
    }
  }
  return t;
}

void SentencePieceBpeTokenizer::EncodeSegment(absl::string_view segment, bool at_start,
                                              std::vector<int32_t>* ids) const {
  std::string text(segment);
  for (const NormalizerStep& step : normalizer_) {
    if (step.prepend) {
      if (!text.empty()) text.insert(0, step.to);
    } else {
      text = absl::StrReplaceAll(text, {{step.from, step.to}});
    }
  }
  if (metaspace_ == nullptr) {
    model_.EncodeWord(text, ids);
    return;
  }
  const std::string& rep = metaspace_->replacement;
  text = absl::StrReplaceAll(text, {{" ", rep}});
  const bool prepend = metaspace_->prepend_scheme == PrependScheme::kAlways ||
                       (metaspace_->prepend_scheme == PrependScheme::kFirst && at_start);
  if (prepend && !absl::StartsWith(text, rep)) text.insert(0, rep);
  if (!metaspace_->split) {
    model_.EncodeWord(text, ids);
    return;
  }
  // Each replacement character starts a new word ("MergedWithNext").
  const absl::string_view view = text;
  size_t word_start = 0;
  for (size_t pos = view.find(rep, 1); pos != absl::string_view::npos;
       pos = view.find(rep, pos + rep.size())) {
    model_.EncodeWord(view.substr(word_start, pos - word_start), ids);
    word_start = pos;
  }
  model_.EncodeWord(view.substr(word_start), ids);
}

std::vector<int32_t> SentencePieceBpeTokenizer::Encode(absl::string_view text,
                                                       const EncodeOptions& options) const {
  const bool add_special_tokens = options.add_special_tokens;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 2 + 4);
  if (add_special_tokens) {
    ids.insert(ids.end(), specials_.prefix_ids.begin(), specials_.prefix_ids.end());
  }
  for (const AddedTokens::Segment& segment : added_.Split(text, options.parse_special_tokens, &options.plain_ranges)) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else {
      EncodeSegment(segment.text, segment.text.data() == text.data(), &ids);
    }
  }
  if (add_special_tokens) {
    ids.insert(ids.end(), specials_.suffix_ids.begin(), specials_.suffix_ids.end());
  }
  return ids;
}

std::string SentencePieceBpeTokenizer::Decode(const std::vector<int32_t>& ids,
                                              bool skip_special_tokens) const {
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;  // Nothing sensible to print.
    if (skip_special_tokens && IsSpecial(id)) continue;
    pieces.push_back(PieceForId(id));
  }
  return decoder_.Decode(std::move(pieces));
}

bool SentencePieceBpeTokenizer::IsSpecial(int32_t id) const {
  return BpeVocabulary{model_, added_}.IsSpecial(specials_, id);
}

std::string SentencePieceBpeTokenizer::PieceForId(int32_t id) const {
  return BpeVocabulary{model_, added_}.PieceForId(id);
}

int32_t SentencePieceBpeTokenizer::IdForPiece(absl::string_view piece) const {
  return BpeVocabulary{model_, added_}.IdForPiece(piece);
}

}  // namespace tessera
