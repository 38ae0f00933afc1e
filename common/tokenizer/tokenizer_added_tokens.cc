#include "common/tokenizer/tokenizer_added_tokens.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// ASCII word characters plus every non-ASCII byte, so that a single_word token is not
// matched inside "naïve"-like words.
bool IsWordByte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
         (c >= 'A' && c <= 'Z') || c == '_';
}

}  // namespace

absl::StatusOr<AddedTokens> AddedTokens::FromJson(const Json& added_tokens,
                                                  absl::string_view source) {
  AddedTokens result;
  result.by_first_byte_.resize(256);
  if (added_tokens.is_null()) return result;
  if (!added_tokens.is_array()) {
    return Invalid(source, "field \"added_tokens\" must be an array");
  }
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const Json& entry = added_tokens[i];
    const std::string where = absl::StrCat("field \"added_tokens\"[", i, "]");
    if (!entry.is_object()) return Invalid(source, absl::StrCat(where, " must be an object"));
    AddedToken token;
    auto id = entry.find("id");
    if (id == entry.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > INT32_MAX - 1) {
      return Invalid(source, absl::StrCat(where, ".id must be a non-negative integer"));
    }
    token.id = static_cast<int32_t>(id->get<int64_t>());
    auto content = entry.find("content");
    if (content == entry.end() || !content->is_string() || content->empty()) {
      return Invalid(source, absl::StrCat(where, ".content must be a non-empty string"));
    }
    token.content = content->get<std::string>();
    for (auto [key, out] : {std::pair<const char*, bool*>{"special", &token.special},
                            {"lstrip", &token.lstrip},
                            {"rstrip", &token.rstrip},
                            {"single_word", &token.single_word}}) {
      auto it = entry.find(key);
      if (it == entry.end() || it->is_null()) continue;
      if (!it->is_boolean()) {
        return Invalid(source, absl::StrCat(where, ".", key, " must be a boolean"));
      }
      *out = it->get<bool>();
    }
    if (result.index_by_id_.count(token.id) > 0) {
      return Invalid(source, absl::StrCat(where, ": id ", token.id, " is listed twice"));
    }
    result.index_by_id_[token.id] = result.tokens_.size();
    result.tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < result.tokens_.size(); ++i) {
    result.by_first_byte_[static_cast<uint8_t>(result.tokens_[i].content[0])].push_back(i);
  }
  for (auto& bucket : result.by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](size_t a, size_t b) {
      return result.tokens_[a].content.size() > result.tokens_[b].content.size();
    });
  }
  return result;
}

std::vector<AddedTokens::Segment> AddedTokens::Split(absl::string_view text, bool match_special,
                                                     const std::vector<TextRange>* plain_ranges) const {
  std::vector<Segment> out;
  if (tokens_.empty()) {
    if (!text.empty()) out.push_back(Segment{text, -1});
    return out;
  }
  size_t plain_start = 0;  // Start of the ordinary run not yet emitted.
  size_t pos = 0;
  size_t next_range = 0;  // The first plain range that does not end at or before `pos`.
  while (pos < text.size()) {
    const AddedToken* match = nullptr;
    if (plain_ranges != nullptr) {
      while (next_range < plain_ranges->size() && (*plain_ranges)[next_range].end <= pos) ++next_range;
    }
    for (size_t index : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      const AddedToken& t = tokens_[index];
      if (t.special && !match_special) continue;
      if (text.substr(pos, t.content.size()) != t.content) continue;
      const size_t end = pos + t.content.size();
      if (t.special && plain_ranges != nullptr && next_range < plain_ranges->size() &&
          (*plain_ranges)[next_range].begin < end) {
        continue;  // Overlaps client text that must stay plain.
      }
      if (t.single_word && ((pos > 0 && IsWordByte(text[pos - 1])) ||
                            (end < text.size() && IsWordByte(text[end])))) {
        continue;
      }
      match = &t;
      break;
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t end = pos + match->content.size();
    if (match->lstrip) {
      while (start > plain_start && IsSpace(text[start - 1])) --start;
    }
    if (match->rstrip) {
      while (end < text.size() && IsSpace(text[end])) ++end;
    }
    if (start > plain_start) {
      out.push_back(Segment{text.substr(plain_start, start - plain_start), -1});
    }
    out.push_back(Segment{text.substr(start, end - start), match->id});
    plain_start = pos = end;
  }
  if (plain_start < text.size()) out.push_back(Segment{text.substr(plain_start), -1});
  return out;
}

bool AddedTokens::ContainsSpecial(absl::string_view text) const {
  for (const Segment& s : Split(text)) {
    if (s.id < 0) continue;
    if (const AddedToken* t = FindById(s.id); t != nullptr && t->special) return true;
  }
  return false;
}

const AddedToken* AddedTokens::FindById(int32_t id) const {
  auto it = index_by_id_.find(id);
  return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedTokens::IdForContent(absl::string_view content) const {
  for (const AddedToken& t : tokens_) {
    if (t.content == content) return t.id;
  }
  return -1;
}

}  // namespace tessera
