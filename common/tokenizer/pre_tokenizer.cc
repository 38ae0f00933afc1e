#include "common/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

// The pattern ByteLevel(use_regex: true) splits with (GPT-2's).
constexpr char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// A literal Split pattern as a regex: ASCII punctuation escaped, the rest as it is.
std::string QuoteLiteral(absl::string_view literal) {
  std::string out;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<bool> ReadBool(const Json& step, const char* key, bool default_value,
                              absl::string_view source, absl::string_view where) {
  auto it = step.find(key);
  if (it == step.end() || it->is_null()) return default_value;
  if (!it->is_boolean()) {
    return Invalid(source, absl::StrCat("field \"", where, ".", key, "\" must be a boolean, got ",
                                        it->dump()));
  }
  return it->get<bool>();
}

absl::StatusOr<SplitBehavior> ReadBehavior(const Json& step, absl::string_view source) {
  auto it = step.find("behavior");
  if (it == step.end() || !it->is_string()) {
    return Invalid(source, "field \"pre_tokenizer.behavior\" of a Split must be a string");
  }
  const std::string name = it->get<std::string>();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return Invalid(source, absl::StrCat("field \"pre_tokenizer.behavior\": unknown Split behavior \"",
                                      name, "\""));
}

}  // namespace

std::vector<std::pair<size_t, size_t>> SplitByMatches(
    size_t text_size, const std::vector<std::pair<size_t, size_t>>& matches,
    SplitBehavior behavior, bool invert) {
  // Every run of the text, flagged as delimiter or not.
  struct Run {
    size_t start, end;
    bool delimiter;
  };
  std::vector<Run> runs;
  runs.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [start, end] : matches) {
    if (start > prev) runs.push_back({prev, start, invert});
    if (end > start) runs.push_back({start, end, !invert});
    prev = end;
  }
  if (prev < text_size) runs.push_back({prev, text_size, invert});

  std::vector<std::pair<size_t, size_t>> pieces;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Run& r : runs) {
        if (!r.delimiter) pieces.emplace_back(r.start, r.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Run& r : runs) pieces.emplace_back(r.start, r.end);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_delimiter = false;
      for (const Run& r : runs) {
        if (r.delimiter && !previous_delimiter && !pieces.empty()) {
          pieces.back().second = r.end;
        } else {
          pieces.emplace_back(r.start, r.end);
        }
        previous_delimiter = r.delimiter;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool next_delimiter = false;
      for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
        if (it->delimiter && !next_delimiter && !pieces.empty()) {
          pieces.back().first = it->start;
        } else {
          pieces.emplace_back(it->start, it->end);
        }
        next_delimiter = it->delimiter;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_delimiter = false;
      for (const Run& r : runs) {
        if (r.delimiter && previous_delimiter && !pieces.empty()) {
          pieces.back().second = r.end;
        } else {
          pieces.emplace_back(r.start, r.end);
        }
        previous_delimiter = r.delimiter;
      }
      break;
    }
  }
  return pieces;
}

absl::StatusOr<ByteLevelPreTokenizer> ByteLevelPreTokenizer::FromJson(const Json& pre_tokenizer,
                                                                      absl::string_view source) {
  ByteLevelPreTokenizer p;
  bool seen_byte_level = false;
  RETURN_IF_ERROR(AddSteps(pre_tokenizer, source, &seen_byte_level, &p.steps_));
  if (!seen_byte_level) {
    return Invalid(source, "field \"pre_tokenizer\" has no ByteLevel step");
  }
  return p;
}

absl::Status ByteLevelPreTokenizer::AddSteps(const Json& pre_tokenizer, absl::string_view source,
                                             bool* seen_byte_level, std::vector<Step>* steps) {
  if (!pre_tokenizer.is_object() || !pre_tokenizer.contains("type") ||
      !pre_tokenizer["type"].is_string()) {
    return Invalid(source, absl::StrCat("field \"pre_tokenizer\" must be an object with a string "
                                        "\"type\", got ", pre_tokenizer.dump()));
  }
  const std::string type = pre_tokenizer["type"].get<std::string>();
  if (type == "Sequence") {
    auto list = pre_tokenizer.find("pretokenizers");
    if (list == pre_tokenizer.end() || !list->is_array()) {
      return Invalid(source, "field \"pre_tokenizer.pretokenizers\" must be an array");
    }
    for (const Json& item : *list) RETURN_IF_ERROR(AddSteps(item, source, seen_byte_level, steps));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    if (*seen_byte_level) {
      return absl::UnimplementedError(
          absl::StrCat(source, ": field \"pre_tokenizer\" has two ByteLevel steps"));
    }
    *seen_byte_level = true;
    ASSIGN_OR_RETURN(const bool prefix_space,
                     ReadBool(pre_tokenizer, "add_prefix_space", true, source, "pre_tokenizer"));
    ASSIGN_OR_RETURN(const bool use_regex,
                     ReadBool(pre_tokenizer, "use_regex", true, source, "pre_tokenizer"));
    if (prefix_space) steps->push_back(Step{.prefix_space = true});
    if (use_regex) {
      ASSIGN_OR_RETURN(Regex regex, Regex::Compile(kGpt2Pattern));
      Step step;
      step.regex.push_back(std::move(regex));
      steps->push_back(std::move(step));
    }
    return absl::OkStatus();
  }
  if (*seen_byte_level) {
    // Later steps would see the byte-level characters rather than the text.
    return absl::UnimplementedError(absl::StrCat(
        source, ": field \"pre_tokenizer\": a ", type, " step after ByteLevel is not supported"));
  }
  if (type == "Split") {
    auto pattern = pre_tokenizer.find("pattern");
    std::string regex_text;
    if (pattern != pre_tokenizer.end() && pattern->is_object() && pattern->contains("Regex") &&
        (*pattern)["Regex"].is_string()) {
      regex_text = (*pattern)["Regex"].get<std::string>();
    } else if (pattern != pre_tokenizer.end() && pattern->is_object() &&
               pattern->contains("String") && (*pattern)["String"].is_string()) {
      regex_text = QuoteLiteral((*pattern)["String"].get<std::string>());
    } else {
      return Invalid(source, "field \"pre_tokenizer.pattern\" of a Split must be "
                             "{\"Regex\": ...} or {\"String\": ...}");
    }
    auto regex = Regex::Compile(regex_text);
    if (!regex.ok()) {
      return Invalid(source, absl::StrCat("field \"pre_tokenizer.pattern\": ",
                                          regex.status().message()));
    }
    Step step;
    step.regex.push_back(*std::move(regex));
    ASSIGN_OR_RETURN(step.behavior, ReadBehavior(pre_tokenizer, source));
    ASSIGN_OR_RETURN(step.invert, ReadBool(pre_tokenizer, "invert", false, source, "pre_tokenizer"));
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  if (type == "Digits") {
    ASSIGN_OR_RETURN(const bool individual, ReadBool(pre_tokenizer, "individual_digits", false,
                                                     source, "pre_tokenizer"));
    ASSIGN_OR_RETURN(Regex regex, Regex::Compile(individual ? "\\p{N}" : "\\p{N}+"));
    Step step;
    step.regex.push_back(std::move(regex));
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      source, ": field \"pre_tokenizer\": type \"", type,
      "\" is not supported in a byte-level tokenizer (supported: Split, Digits, ByteLevel, "
      "Sequence)"));
}

absl::Status ByteLevelPreTokenizer::Split(
    absl::string_view text, absl::FunctionRef<void(absl::string_view)> on_piece) const {
  if (text.empty()) return absl::OkStatus();
  return Run(0, text, on_piece);
}

absl::Status ByteLevelPreTokenizer::Run(
    size_t step_index, absl::string_view piece,
    absl::FunctionRef<void(absl::string_view)> on_piece) const {
  if (step_index == steps_.size()) {
    on_piece(piece);
    return absl::OkStatus();
  }
  const Step& step = steps_[step_index];
  if (step.prefix_space) {
    if (!piece.empty() && piece[0] == ' ') return Run(step_index + 1, piece, on_piece);
    const std::string prefixed = absl::StrCat(" ", piece);
    return Run(step_index + 1, prefixed, on_piece);
  }
  std::vector<std::pair<size_t, size_t>> matches;
  // Isolated splits (what Llama 3, Qwen2 and GPT-2 use) go straight to the next step.
  if (step.behavior == SplitBehavior::kIsolated && !step.invert) {
    size_t prev = 0;
    absl::Status inner;
    RETURN_IF_ERROR(step.regex[0].ForEachMatch(piece, [&](size_t start, size_t end) {
      if (!inner.ok()) return;
      if (start > prev) inner.Update(Run(step_index + 1, piece.substr(prev, start - prev), on_piece));
      if (inner.ok()) inner.Update(Run(step_index + 1, piece.substr(start, end - start), on_piece));
      prev = end;
    }));
    RETURN_IF_ERROR(inner);
    if (prev < piece.size()) return Run(step_index + 1, piece.substr(prev), on_piece);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(step.regex[0].ForEachMatch(
      piece, [&](size_t start, size_t end) { matches.emplace_back(start, end); }));
  for (const auto& [start, end] : SplitByMatches(piece.size(), matches, step.behavior, step.invert)) {
    RETURN_IF_ERROR(Run(step_index + 1, piece.substr(start, end - start), on_piece));
  }
  return absl::OkStatus();
}

}  // namespace tessera
